"""Network power: the paper's Sec. VI-A / Fig. 11 model and Andújar et al.'s on/off-link model.

Sec. VI-A model (per switch, worst case: every port at line rate)
-----------------------------------------------------------------
``P_switch = P_table + P_ports + P_buffers + P_cpu``

* ports: optical 0.6 W (4 lanes x 150 mW); electrical host ports 20% less
  (0.48 W). Every one of the ``P`` ports is counted: the paper fills spare
  ports with extra links for full bisection bandwidth;
* buffers: each packet is written and read once per switch: ``(4.5048 +
  4.4993) nJ`` per 64-byte packet, at the 40 Gb/s worst-case packet rate
  ``40e9 / ((64 + 20) * 8) = 59.52 Mpps`` per port (20 bytes of preamble and
  inter-frame gap per frame on the wire; ``wire_overhead_bytes=0`` gives
  78.1 Mpps and 0.70 W instead of 0.54 W per port);
* CPU and logic: 30 W;
* table: one lookup per packet, i.e. ``f = P * pps`` lookups/s.

  TCAM (Agrawal & Sherwood 2008 style): the search energy of a TCAM is
  dominated by match lines and search lines, both proportional to
  ``entries x width``; leakage too. We use ``P_tcam = f * E_t * N * W`` with
  ``W = 1,024`` bits (OpenFlow 1.5 matches "more than 1,000 bits") and
  calibrate the one constant ``E_t`` so that the smallest flat table of the
  three 300k builds (the Dragonfly's 300,024 entries) costs exactly 900 W
  (the paper: "more than 900 W per switch and at least 15 MW overall"). That
  gives ``E_t`` = 0.68 fJ per bit per search, the order of magnitude the
  Agrawal-Sherwood model reports for 32-45 nm TCAM cells (about 1 fJ).

  CAM (Hsiao et al. 2001 style, binary, exact match on the 48-bit MAC):
  ``P_cam = f * E_c * N * 48`` -- the same form with binary cells. The paper
  gives no absolute CAM number; we calibrate ``E_c`` so that compaction saves
  17.0% of the reference (CAM-flat Folded-Clos -> TCAM-compact Folded-Clos),
  the paper's stated split. The topology share (37.1%) and the total (54.1%)
  are then *predictions* of the model, compared in :func:`savings`.

Tables per organisation: CAM-flat = every switch holds every host MAC
(flat Ethernet); TCAM flat / per-switch / per-group / compact = the entries
our compiler emits for that addressing mode on each switch (aggregation and
core switches included), measured by compiling (one switch per symmetry
class, every switch for the Dragonfly's compact tables).

The Andújar et al. on/off-link model: :mod:`hpcfabric.analysis.onoff`.
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from hpcfabric.errors import ConfigError
from hpcfabric.topology.model import Fabric

ORGANISATIONS = ("cam-flat", "tcam-flat", "tcam-per-switch", "tcam-per-group", "tcam-compact")
MODE_OF = {"tcam-flat": "flat", "tcam-per-switch": "per-switch", "tcam-per-group": "per-group", "tcam-compact": "compact"}
COMPONENTS = ("table", "ports", "buffers", "cpu")

#: The paper's Sec. VI-A results (percent of the CAM-flat Folded-Clos reference).
PAPER = {"total_saving": 54.1, "compaction_saving": 17.0, "topology_saving": 37.1, "flat_tcam_w": 900.0, "flat_total_mw": 15.0}
#: The three ~300k-host builds.
BUILDS = ("topologies/clos-300k.yaml", "topologies/fb-4d-300k.yaml", "topologies/dragonfly-300k.yaml")


@dataclass(frozen=True)
class PowerParams:
    """Constants of the Sec. VI-A model (defaults: the paper's, see the module docstring)."""

    radix: int = 72
    link_gbps: float = 40.0
    packet_bytes: int = 64
    wire_overhead_bytes: int = 20
    buffer_read_nj: float = 4.5048
    buffer_write_nj: float = 4.4993
    optical_port_w: float = 0.6
    electrical_factor: float = 0.8
    cpu_w: float = 30.0
    tcam_width_bits: int = 1024
    cam_width_bits: int = 48
    #: calibration anchors
    flat_tcam_anchor_entries: int = 300_024
    flat_tcam_anchor_w: float = 900.0
    compaction_share: float = 0.170
    #: energy per bit per search (J); None = calibrate (see :func:`calibrate`)
    tcam_j_per_bit: float | None = None
    cam_j_per_bit: float | None = None

    @property
    def pps(self) -> float:
        """Worst-case packets per second on one port."""
        return self.link_gbps * 1e9 / ((self.packet_bytes + self.wire_overhead_bytes) * 8)

    def lookups(self, ports: int) -> float:
        return ports * self.pps

    def buffers_w(self, ports: int) -> float:
        return ports * self.pps * (self.buffer_read_nj + self.buffer_write_nj) * 1e-9

    def ports_w(self, host_ports: int, fabric_ports: int) -> float:
        return host_ports * self.optical_port_w * self.electrical_factor + fabric_ports * self.optical_port_w

    def tcam_w(self, entries: float, ports: int | None = None, width: int | None = None) -> float:
        """TCAM power of a table of ``entries`` x ``width`` bits searched once per packet."""
        e = self.tcam_j_per_bit
        if e is None:
            raise ValueError("uncalibrated: use calibrate(params) first")
        return self.lookups(ports or self.radix) * e * entries * (width or self.tcam_width_bits)

    def cam_w(self, entries: float, ports: int | None = None) -> float:
        e = self.cam_j_per_bit
        if e is None:
            raise ValueError("uncalibrated: use calibrate(params) first")
        return self.lookups(ports or self.radix) * e * entries * self.cam_width_bits


def calibrate(params: PowerParams | None = None) -> PowerParams:
    """Fix ``tcam_j_per_bit`` and ``cam_j_per_bit`` from the paper's statements.

    TCAM: ``anchor_entries`` flat entries cost ``anchor_w`` (900 W at 300,024).
    CAM: on the paper's 4-stage Folded-Clos (closed-form counts, 72 compact
    entries per switch = ports), CAM-flat -> TCAM-compact saves ``compaction_share``.
    """
    from hpcfabric.topology.clos import folded_clos_shape

    p = params or PowerParams()
    e_t = p.flat_tcam_anchor_w / (p.lookups(p.radix) * p.flat_tcam_anchor_entries * p.tcam_width_bits)
    p = replace(p, tcam_j_per_bit=e_t)
    shape = folded_clos_shape(p.radix, 4, hosts=303_264)
    half = p.radix // 2
    edges, others = shape.per_level[0], shape.switches - shape.per_level[0]
    fixed = (
        edges * (p.ports_w(half, half) + p.buffers_w(p.radix) + p.cpu_w)
        + others * (p.ports_w(0, p.radix) + p.buffers_w(p.radix) + p.cpu_w)
    )
    compact = fixed + shape.switches * p.tcam_w(p.radix)
    ref = compact / (1 - p.compaction_share)
    e_c = (ref - fixed) / (shape.switches * p.lookups(p.radix) * shape.hosts * p.cam_width_bits)
    return replace(p, cam_j_per_bit=e_c)


# ---------------------------------------------------------------------------
# per-switch table sizes from the compiler


def _classes(fabric: Fabric, mode: str) -> list[list[int]] | None:
    if fabric.kind == "dragonfly" and mode == "compact":
        return None
    by: dict[Any, list[int]] = {}
    for i, sw in enumerate(fabric.switches):
        if fabric.kind == "folded_clos":
            key: Any = sw.coords[0]  # level
        elif fabric.kind == "fat_tree":
            key = sw.role
        else:
            key = 0  # FB, Dragonfly: every switch alike for flat / per-switch / per-group
        by.setdefault(key, []).append(i)
    return list(by.values())


def switch_entries(
    fabric: Fabric, mode: str, *, jobs: int = 1, per_class: int = 2, progress: bool = False
) -> tuple[list[int], str]:
    """Forwarding entries of every switch for ``mode`` and how they were obtained.

    Compiles ``per_class`` switches of each symmetry class (every switch when
    there is none) and gives each switch its class's count; a class whose
    sample disagrees is compiled in full.
    """
    from hpcfabric.analysis.scale import count_rules, spread
    from hpcfabric.rules.addressing import plan_addresses

    plan = plan_addresses(fabric, mode)
    classes = _classes(fabric, mode)
    n = len(fabric.switches)
    if classes is None:
        rc = count_rules(fabric, plan, jobs=jobs, progress=progress, desc=f"{fabric.name} {mode}")
        return [c.rules for c in rc.counts], f"all {n} switches compiled"
    pick = {i: members for members in classes for i in spread(members, per_class)}
    rc = count_rules(fabric, plan, switches=sorted(pick), jobs=1, checks=False)
    got = {i: c.rules for i, c in zip(sorted(pick), rc.counts)}
    entries = [0] * n
    compiled = len(pick)
    for members in classes:
        sample = [got[i] for i in spread(members, per_class)]
        if len(set(sample)) > 1:  # not a symmetry class after all: compile them all
            full = count_rules(fabric, plan, switches=members, jobs=jobs, checks=False)
            for i, c in zip(members, full.counts):
                entries[i] = c.rules
            compiled += len(members)
        else:
            for i in members:
                entries[i] = sample[0]
    return entries, f"{compiled} of {n} switches compiled ({len(classes)} symmetry class(es))"


# ---------------------------------------------------------------------------
# Fig. 11


@dataclass
class Breakdown:
    """Power of one (topology, organisation): watts per component, summed over switches."""

    fabric: str
    kind: str
    organisation: str
    switches: int
    hosts: int
    entries_mean: float
    entries_max: int
    watts: dict[str, float] = field(default_factory=dict)
    how: str = ""

    @property
    def total_w(self) -> float:
        return sum(self.watts.values())

    def row(self, ref_w: float | None = None) -> dict[str, Any]:
        r = {
            "fabric": self.fabric,
            "kind": self.kind,
            "organisation": self.organisation,
            "switches": self.switches,
            "hosts": self.hosts,
            "entries_mean": round(self.entries_mean, 2),
            "entries_max": self.entries_max,
            **{f"{c}_kw": round(self.watts[c] / 1e3, 3) for c in COMPONENTS},
            "total_mw": round(self.total_w / 1e6, 4),
            "table_w_per_switch": round(self.watts["table"] / self.switches, 3),
            "w_per_switch": round(self.total_w / self.switches, 2),
        }
        if ref_w:
            r["saving_vs_ref_pct"] = round(100 * (1 - self.total_w / ref_w), 2)
        r["entries_from"] = self.how
        return r


def breakdown(
    name: str,
    kind: str,
    organisation: str,
    classes: Sequence[tuple[int, int, float]],
    hosts: int,
    params: PowerParams,
    how: str = "",
) -> Breakdown:
    """Power of ``classes`` of switches: ``(count, host ports, table entries)`` each."""
    watts = {"table": 0.0, "ports": 0.0, "buffers": 0.0, "cpu": 0.0}
    n = sum(c for c, _, _ in classes)
    for count, host_ports, entries in classes:
        if organisation == "cam-flat":
            table = params.cam_w(entries)
        else:
            table = params.tcam_w(entries)
        watts["table"] += count * table
        watts["ports"] += count * params.ports_w(host_ports, params.radix - host_ports)
        watts["buffers"] += count * params.buffers_w(params.radix)
        watts["cpu"] += count * params.cpu_w
    mean = sum(c * e for c, _, e in classes) / n
    return Breakdown(name, kind, organisation, n, hosts, mean, int(max(e for _, _, e in classes)), watts, how)


def fabric_power(
    fabric: Fabric,
    params: PowerParams,
    organisations: Sequence[str] = ORGANISATIONS,
    *,
    jobs: int = 1,
    progress: bool = False,
    entries_by_mode: Mapping[str, tuple[list[int], str]] | None = None,
) -> list[Breakdown]:
    """Breakdowns of ``fabric`` for each table organisation (entries from the compiler)."""
    n = len(fabric.switches)
    host_ports = [len(fabric.hosts_on(sw.name)) for sw in fabric.switches]
    out = []
    for org in organisations:
        if org == "cam-flat":
            entries, how = [len(fabric.hosts)] * n, "every host MAC on every switch (flat Ethernet)"
        else:
            mode = MODE_OF[org]
            if entries_by_mode and mode in entries_by_mode:
                entries, how = entries_by_mode[mode]
            else:
                entries, how = switch_entries(fabric, mode, jobs=jobs, progress=progress)
        counted: dict[tuple[int, int], int] = {}
        for hp, e in zip(host_ports, entries):
            counted[(hp, e)] = counted.get((hp, e), 0) + 1
        classes = [(c, hp, e) for (hp, e), c in sorted(counted.items())]
        out.append(breakdown(fabric.name, fabric.kind, org, classes, len(fabric.hosts), params, how))
    return out


def closed_form_builds(params: PowerParams, df_compact_entries: float | None = None) -> list[Breakdown]:
    """Fig. 11 from closed-form switch and entry counts of the three 300k builds
    (what our compiler emits per switch class, see docs/analysis.md); no fabric
    is built. ``df_compact_entries`` defaults to the paper band's bottom
    ``T + 2(S-1) + h`` = 106 (we measure 105-141, mean 125.8)."""
    out: list[Breakdown] = []
    # Folded-Clos: 4 stages, 234 pods: edge / level 2 / level 3 + core
    H, N, G, S, T = 303_264, 8_424, 234, 36, 36
    clos = {
        "cam-flat": [(N, T, H), (29_484 - N, 0, H)],
        "tcam-flat": [(N, T, H), (29_484 - N, 0, H)],
        "tcam-per-switch": [(N, T, T + N - 1), (29_484 - N, 0, N)],
        "tcam-per-group": [(N, T, (G - 1) + (S - 1) + T), (N, 0, S + G - 1), (29_484 - 2 * N, 0, G)],
        "tcam-compact": [(N, T, 72), (29_484 - N, 0, 72)],
    }
    H2, N2, G2, S2, T2 = 303_750, 20_250, 15 * 15 * 6, 15, 15
    fb = {
        "cam-flat": [(N2, T2, H2)],
        "tcam-flat": [(N2, T2, H2)],
        "tcam-per-switch": [(N2, T2, T2 + N2 - 1)],
        "tcam-per-group": [(N2, T2, (G2 - 1) + (S2 - 1) + T2)],
        "tcam-compact": [(N2, T2, T2 + 14 + 14 + 14 + 5)],
    }
    H3, N3, G3, S3, T3, h = 300_024, 16_668, 463, 36, 18, 18
    dfc = df_compact_entries if df_compact_entries is not None else T3 + 2 * (S3 - 1) + h
    df = {
        "cam-flat": [(N3, T3, H3)],
        "tcam-flat": [(N3, T3, H3)],
        "tcam-per-switch": [(N3, T3, T3 + N3 - 1)],
        "tcam-per-group": [(N3, T3, (G3 - 1) + (S3 - 1) + T3)],
        "tcam-compact": [(N3, T3, dfc)],
    }
    for name, kind, table, hosts in (
        ("clos-300k", "folded_clos", clos, H),
        ("fb-4d-300k", "flattened_butterfly", fb, H2),
        ("dragonfly-300k", "dragonfly", df, H3),
    ):
        for org in ORGANISATIONS:
            out.append(breakdown(name, kind, org, table[org], hosts, params, "closed form"))
    return out


def savings(results: Sequence[Breakdown]) -> dict[str, Any]:
    """The paper's split: reference CAM-flat Folded-Clos; compaction = (ref -
    TCAM-compact Clos) / ref; topology = (TCAM-compact Clos - TCAM-compact X) / ref."""
    by = {(b.kind, b.organisation): b for b in results}
    ref = by.get(("folded_clos", "cam-flat"))
    clos_c = by.get(("folded_clos", "tcam-compact"))
    if ref is None or clos_c is None:
        raise ConfigError("the savings split needs the Folded-Clos CAM-flat and TCAM-compact results")
    out: dict[str, Any] = {
        "reference": f"{ref.fabric} CAM-flat",
        "reference_mw": round(ref.total_w / 1e6, 4),
        "compaction_saving_pct": round(100 * (ref.total_w - clos_c.total_w) / ref.total_w, 2),
    }
    for kind in ("dragonfly", "flattened_butterfly"):
        x = by.get((kind, "tcam-compact"))
        if x is None:
            continue
        out[kind] = {
            "fabric": x.fabric,
            "topology_saving_pct": round(100 * (clos_c.total_w - x.total_w) / ref.total_w, 2),
            "total_saving_pct": round(100 * (ref.total_w - x.total_w) / ref.total_w, 2),
        }
    flat = [b for b in results if b.organisation == "tcam-flat"]
    if flat:
        out["tcam_flat_min_w_per_switch"] = round(min(b.watts["table"] / b.switches for b in flat), 1)
        out["tcam_flat_min_total_mw"] = round(min(b.total_w for b in flat) / 1e6, 3)
    out["paper"] = dict(PAPER)
    return out


def write_csv(results: Sequence[Breakdown], path: str | os.PathLike[str]) -> None:
    ref = next((b.total_w for b in results if b.kind == "folded_clos" and b.organisation == "cam-flat"), None)
    rows = [b.row(ref) for b in results]
    fields = list(dict.fromkeys(k for r in rows for k in r))  # every key, in first-seen order
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=fields, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)


def plot_fig11(results: Sequence[Breakdown], path: str | os.PathLike[str]) -> None:
    """Fig. 11: stacked bars (table, ports, buffers, CPU) per topology x organisation, MW."""
    from hpcfabric.analysis.plotting import pyplot, save_figure

    plt = pyplot()
    fabrics = list(dict.fromkeys(b.fabric for b in results))
    orgs = [o for o in ORGANISATIONS if any(b.organisation == o for b in results)]
    colors = {"table": "tab:red", "ports": "tab:blue", "buffers": "tab:orange", "cpu": "tab:grey"}
    fig, (ax, axz) = plt.subplots(1, 2, figsize=(12, 5), gridspec_kw={"width_ratios": [3, 2]})
    for axis, zoom in ((ax, False), (axz, True)):
        x = 0.0
        ticks, labels = [], []
        for f in fabrics:
            for o in orgs:
                b = next((r for r in results if r.fabric == f and r.organisation == o), None)
                if b is None or (zoom and o == "tcam-flat"):
                    continue
                bottom = 0.0
                for c in COMPONENTS:
                    v = b.watts[c] / 1e6
                    axis.bar(x, v, bottom=bottom, color=colors[c], width=0.8, label=c if x == 0 else None)
                    bottom += v
                ticks.append(x)
                labels.append(f"{f}\n{o.replace('tcam-', 'T-')}")
                x += 1
            x += 0.6
        axis.set_xticks(ticks)
        axis.set_xticklabels(labels, rotation=90, fontsize=7)
        axis.set_ylabel("network power (MW)")
    ax.set_title("Fig. 11: network power by component")
    axz.set_title("without TCAM-flat")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, Path(path))
    plt.close(fig)


def analyze_power(
    files: Sequence[str] = BUILDS,
    *,
    params: PowerParams | None = None,
    jobs: int = 1,
    progress: bool = False,
    log: Callable[[str], None] | None = None,
) -> tuple[list[Breakdown], dict[str, Any], PowerParams]:
    """Fig. 11 breakdowns and the savings split for the topology files (default: the three 300k builds)."""
    from hpcfabric.topology.loader import load_topology

    p = calibrate(params)
    results: list[Breakdown] = []
    for path in files:
        fabric = load_topology(path)
        if log:
            log(f"{fabric.name}: {len(fabric.switches)} switches, {len(fabric.hosts)} hosts")
        results += fabric_power(fabric, p, jobs=jobs, progress=progress)
        del fabric
    return results, savings(results), p


def run(
    out: str | os.PathLike[str],
    files: Sequence[str] = BUILDS,
    *,
    jobs: int = 1,
    plots: bool = True,
    progress: bool = False,
    log: Callable[[str], None] | None = None,
) -> tuple[list[Breakdown], dict[str, Any], list[Path]]:
    """Write ``power.csv``, ``power-savings.json`` and ``fig11-power.png`` to ``out``."""
    import json

    results, split, p = analyze_power(files, jobs=jobs, progress=progress, log=log)
    outdir = Path(out)
    outdir.mkdir(parents=True, exist_ok=True)
    paths = [outdir / "power.csv", outdir / "power-savings.json"]
    write_csv(results, paths[0])
    split["model"] = {
        "pps_per_port": round(p.pps),
        "buffers_w_per_port": round(p.buffers_w(1), 4),
        "tcam_fj_per_bit_search": round((p.tcam_j_per_bit or 0) * 1e15, 4),
        "cam_fj_per_bit_search": round((p.cam_j_per_bit or 0) * 1e15, 4),
        "tcam_width_bits": p.tcam_width_bits,
        "cam_width_bits": p.cam_width_bits,
    }
    paths[1].write_text(json.dumps(split, indent=2) + "\n", encoding="utf-8")
    if plots:
        paths.append(outdir / "fig11-power.png")
        plot_fig11(results, paths[2])
    return results, split, paths
