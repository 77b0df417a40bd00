"""Rule counts vs network size: the paper's Eq. 1, Table I, Fig. 4 and Fig. 6.

For every switch size ``P`` (8, 16, 24, 48, 96 ports by default) and topology
we build the largest fabric of Table I, compile it in the four addressing
modes and put the measured forwarding entries per access switch next to the
closed forms.

Configurations (exact integer versions of Table I)
--------------------------------------------------
``folded-clos``  3-level fat-tree with ``k = P``: ``T = P/2`` hosts per edge
                 switch, ``S = P/2`` edge switches per pod, ``G = P`` pods,
                 ``H = P^3/4`` (Table I exactly).
``fb-nd``        n-dimensional Flattened Butterfly (n = 2, 3, 4) with
                 ``T = floor(P/(n+1))`` hosts and ``k = 1 + floor((P-T)/n)``
                 switches per dimension: the largest ``k`` whose ``n(k-1)``
                 fabric ports fit next to ``T`` host ports, so ``k ~ P/(n+1)+1``,
                 ``H = k^n T ~ (P/(n+1))^(n+1)`` (Table I). Group = row (all
                 dimensions but dim 0): ``S = k``, ``G = k^(n-1)``.
``dragonfly``    balanced Dragonfly ``a = P/2, h = p = P/4, g = a*h + 1``
                 (radix ``p + h + a - 1 = P - 1``): ``T = P/4``, ``S = P/2``,
                 ``G = P^2/8 + 1``, ``H = a g p ~ 4 (P/4)^4`` (Table I).

Closed forms per access switch: flat ``H``; per-switch ``T + N - 1`` (N
access switches); per-group Eq. 1 ``(G-1) + (S-1) + T``; compact: the lower
bound = ports in use (FB: ``T + n(k-1)``, Clos: ``P``), and for the Dragonfly
the paper's band ``[T+(S-1)+h+(S-1), T+(S-1)+(G-1)]``.

Measured vs sampled
-------------------
Fabrics up to ``max_elements`` (switches + hosts + links, default the
loader's 2,000,000) are built and compiled by :func:`~hpcfabric.analysis.scale.count_rules`.
Every switch is compiled when the expected number of entries is at most
``max_entries`` (Dragonfly compact: up to 20,000 switches); otherwise a deterministic sample of switches **per class**
is compiled and the row is marked ``sampled``. Classes: all switches of a
Flattened Butterfly (vertex-transitive, and the address plan treats every
coordinate alike); fat-tree edge / aggregation / core (the automorphisms that
permute pods and positions carry one switch of a role to any other, and
renumber addresses consistently); every Dragonfly switch for flat,
per-switch and per-group (the table is one entry per host / switch / group
whatever the wiring). Dragonfly *compact* counts depend on how group numbers
align behind each port, so there every switch is its own class: all are
compiled when the budget allows, else the min-max band is that of a sample.
Fabrics above ``max_elements`` get closed-form rows only (``measured = none``).
"""

from __future__ import annotations

import csv
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from hpcfabric.analysis.progress import bar
from hpcfabric.analysis.plotting import pyplot, save_figure
from hpcfabric.analysis.scale import count_rules, spread
from hpcfabric.errors import ConfigError
from hpcfabric.topology.model import Fabric

DEFAULT_PORTS = (8, 16, 24, 48, 96)
TOPOLOGIES = ("folded-clos", "fb-2d", "fb-3d", "fb-4d", "dragonfly")
MODES = ("flat", "per-switch", "per-group", "compact")
MAX_ELEMENTS = 2_000_000
MAX_ENTRIES = 1_500_000
MAX_BAND_SWITCHES = 20_000  # Dragonfly compact: compile every switch up to this many
SAMPLE_PER_CLASS = 4
TCAM_4K = 4096

CSV_FIELDS = (
    "topology", "ports", "params", "switches", "hosts", "table1_hosts", "G", "S", "T",
    "mode", "closed_form", "closed_form_max", "measured", "compiled", "rules_min", "rules_mean",
    "rules_max", "matches_closed_form", "cos", "flows_mean", "flows_mean_untagged",
)  # fmt: skip


@dataclass(frozen=True)
class Config:
    """One (topology, switch size) point: generator parameters and Table I quantities."""

    topology: str
    ports: int
    params: dict[str, Any]
    switches: int
    hosts: int
    links: int
    access: int  # access switches N
    G: int
    S: int
    T: int
    table1_hosts: float
    lower_bound: int  # ports in use on an access switch
    band: tuple[int, int] | None = None  # Dragonfly compact band (paper)

    @property
    def elements(self) -> int:
        return self.switches + self.hosts + self.links

    def label(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.params.items())

    def closed_form(self, mode: str) -> tuple[int, int]:
        """(min, max) entries per access switch predicted for ``mode``."""
        if mode == "flat":
            v = self.hosts
        elif mode == "per-switch":
            v = self.T + self.access - 1
        elif mode == "per-group":
            v = (self.G - 1) + (self.S - 1) + self.T
        elif self.band is not None:
            return self.band
        else:
            v = self.lower_bound
        return v, v

    def build(self) -> Fabric:
        from hpcfabric.topology.generators import dragonfly_fabric, fat_tree_fabric, flattened_butterfly_fabric

        prm = self.params
        if self.topology == "folded-clos":
            return fat_tree_fabric(prm["k"])
        if self.topology == "dragonfly":
            return dragonfly_fabric(prm["a"], prm["p"], prm["h"], prm["g"])
        return flattened_butterfly_fabric(prm["dims"], prm["T"])


def check_ports(ports: Iterable[int]) -> tuple[int, ...]:
    """Validate switch sizes: multiples of 4 in 8..256 (ConfigError otherwise)."""
    out = []
    for p in ports:
        if isinstance(p, bool) or not isinstance(p, int) or p < 8 or p > 256 or p % 4:
            raise ConfigError(
                f"switch sizes must be multiples of 4 between 8 and 256 (the Dragonfly needs P/4 "
                f"hosts and global links), got {p!r}",
                field="--ports",
            )
        out.append(p)
    if not out:
        raise ConfigError("give at least one switch size", field="--ports")
    return tuple(sorted(set(out)))


def config(topology: str, P: int) -> Config:
    """The Table I configuration of ``topology`` for ``P``-port switches."""
    if topology == "folded-clos":
        k = P
        return Config(topology, P, {"k": k}, 5 * k * k // 4, k**3 // 4, k**3 // 2, k * k // 2,
                      k, k // 2, k // 2, P**3 / 4, k)  # fmt: skip
    if topology.startswith("fb-"):
        n = int(topology[3])
        t = P // (n + 1)
        k = 1 + (P - t) // n
        sw = k**n
        links = sw * n * (k - 1) // 2
        return Config(topology, P, {"dims": [k] * n, "T": t}, sw, sw * t, links, sw,
                      k ** (n - 1), k, t, (P / (n + 1)) ** (n + 1), t + n * (k - 1))  # fmt: skip
    if topology == "dragonfly":
        a, h, p = P // 2, P // 4, P // 4
        g = a * h + 1
        sw = a * g
        links = g * a * (a - 1) // 2 + g * a * h // 2
        band = (p + (a - 1) + h + (a - 1), p + (a - 1) + (g - 1))
        return Config(topology, P, {"a": a, "p": p, "h": h, "g": g}, sw, sw * p, links, sw,
                      g, a, p, 4 * (P / 4) ** 4, p + h + a - 1, band)  # fmt: skip
    raise ConfigError(f"unknown topology {topology!r}; expected one of {', '.join(TOPOLOGIES)}", field="--topologies")


def _classes(fabric: Fabric, topology: str, mode: str) -> list[list[int]] | None:
    """Switch classes with equal counts (None: every switch is its own class)."""
    if topology == "dragonfly" and mode == "compact":
        return None
    if topology == "folded-clos":
        by: dict[str, list[int]] = {}
        for i, sw in enumerate(fabric.switches):
            by.setdefault(sw.role, []).append(i)
        return list(by.values())
    return [list(range(len(fabric.switches)))]


def measure(
    cfg: Config,
    fabric: Fabric,
    mode: str,
    *,
    jobs: int = 1,
    max_entries: int = MAX_ENTRIES,
    sample: int = SAMPLE_PER_CLASS,
) -> dict[str, Any]:
    """Compile ``fabric`` in ``mode`` (all switches or a per-class sample); one CSV row."""
    lo, hi = cfg.closed_form(mode)
    expected = len(fabric.switches) * max(hi, cfg.lower_bound)
    classes = _classes(fabric, cfg.topology, mode)
    chosen: list[int] | None = None
    if classes is None:  # Dragonfly compact: every switch differs, compile all if affordable
        if len(fabric.switches) > MAX_BAND_SWITCHES:
            chosen = spread(list(range(len(fabric.switches))), MAX_BAND_SWITCHES)
    elif expected > max_entries:
        chosen = sorted(i for members in classes for i in spread(members, sample))
    counts = count_rules(fabric, mode, switches=chosen, jobs=jobs)  # the default tables: proven classes
    problems = counts.problems()
    summary = counts.summary()
    if counts.cos[0] is not None:  # the same switches untagged: what the classes cost beside the paper's tables
        plain = count_rules(fabric, counts.plan, switches=chosen, jobs=jobs, checks=False, cos=False).summary()
        cost = (summary["cos"], summary["flows_mean"], plain["flows_mean"])
    else:
        cost = ("off", summary["flows_mean"], summary["flows_mean"])
    if problems:
        raise AssertionError(f"{fabric.name} {mode}: {'; '.join(problems)}")  # a compiler bug, not user input
    acc = [c.rules for c in counts.access]
    n_all = len(fabric.switches)
    if chosen is None:
        measured = "all"
    elif classes is None:
        measured = f"sample {len(chosen)}/{n_all} switches"
    else:
        measured = f"sample {len(chosen)}/{n_all} switches ({len(classes)} symmetry class(es))"
    mn, mx = min(acc), max(acc)
    if cfg.band is not None and mode == "compact":
        match = mx <= hi  # never above the band's top (ORTC never grows the Eq. 1 table)
    else:
        match = mn == lo and mx == hi
    return _row(cfg, mode, measured, len(counts.counts), mn, round(sum(acc) / len(acc), 3), mx, match, cost)


def _row(cfg: Config, mode: str, measured: str, compiled: int, mn: Any, mean: Any, mx: Any, match: Any,
         cost: tuple[Any, Any, Any] = ("", "", "")) -> dict[str, Any]:
    """One CSV row; ``rules_*`` are forwarding entries (the paper's count, the same with or without classes),
    ``cost`` = (cos of the default tables, their flows per access switch, the untagged tables' flows)."""
    lo, hi = cfg.closed_form(mode)
    return {
        "topology": cfg.topology,
        "ports": cfg.ports,
        "params": cfg.label(),
        "switches": cfg.switches,
        "hosts": cfg.hosts,
        "table1_hosts": round(cfg.table1_hosts),
        "G": cfg.G,
        "S": cfg.S,
        "T": cfg.T,
        "mode": mode,
        "closed_form": lo,
        "closed_form_max": hi,
        "measured": measured,
        "compiled": compiled,
        "rules_min": mn,
        "rules_mean": mean,
        "rules_max": mx,
        "matches_closed_form": match,
        "cos": cost[0],
        "flows_mean": cost[1],
        "flows_mean_untagged": cost[2],
    }


def analyze_rules(
    ports: Iterable[int] = DEFAULT_PORTS,
    topologies: Iterable[str] = TOPOLOGIES,
    modes: Iterable[str] = MODES,
    *,
    jobs: int = 1,
    max_elements: int = MAX_ELEMENTS,
    max_entries: int = MAX_ENTRIES,
    sample: int = SAMPLE_PER_CLASS,
    progress: bool = False,
    log: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """Rows (dicts with :data:`CSV_FIELDS`) for every topology x size x mode, in that order."""
    ports = check_ports(ports)
    topologies = tuple(topologies)
    modes = tuple(modes)
    for m in modes:
        if m not in MODES:
            raise ConfigError(f"unknown addressing mode {m!r}; expected one of {', '.join(MODES)}", field="--modes")
    cfgs = [config(t, p) for t in topologies for p in ports]
    rows: list[dict[str, Any]] = []
    pb = bar(len(cfgs) * len(modes), "analyze rules", progress)
    try:
        for cfg in cfgs:
            pb.set_postfix_str(f"{cfg.topology} P={cfg.ports}")
            if cfg.elements > max_elements:
                for mode in modes:
                    rows.append(_row(cfg, mode, f"none (fabric of {cfg.elements:,} elements > {max_elements:,})", 0, "", "", "", ""))
                    pb.update()
                continue
            t0 = time.perf_counter()
            fabric = cfg.build()
            for mode in modes:
                rows.append(measure(cfg, fabric, mode, jobs=jobs, max_entries=max_entries, sample=sample))
                pb.update()
            if log:
                log(f"{cfg.topology} P={cfg.ports}: {len(fabric.switches)} switches, {len(fabric.hosts)} hosts, {time.perf_counter() - t0:.1f}s")
            del fabric
    finally:
        pb.close()
    return rows


def write_csv(rows: Sequence[dict[str, Any]], path: str | os.PathLike[str]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=CSV_FIELDS, lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow(r)


# ---------------------------------------------------------------------------
# plots

COLORS = {"folded-clos": "tab:blue", "fb-2d": "tab:orange", "fb-3d": "tab:green", "fb-4d": "tab:purple", "dragonfly": "tab:red"}
STYLES = {"flat": ":", "per-switch": "--", "per-group": "-"}
NAMES = {"folded-clos": "Folded-Clos", "fb-2d": "2D FB", "fb-3d": "3D FB", "fb-4d": "4D FB", "dragonfly": "Dragonfly"}


def _series(rows: Sequence[dict[str, Any]], topo: str, mode: str) -> list[dict[str, Any]]:
    return sorted((r for r in rows if r["topology"] == topo and r["mode"] == mode), key=lambda r: r["ports"])


def plot_fig4(rows: Sequence[dict[str, Any]], path: str | os.PathLike[str]) -> None:
    """Fig. 4: entries per access switch vs hosts, log-log; closed forms as lines,
    measured counts as markers (hollow: sampled)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 5.5))
    for topo in TOPOLOGIES:
        for mode in ("flat", "per-switch", "per-group"):
            s = _series(rows, topo, mode)
            if not s:
                continue
            xs = [r["hosts"] for r in s]
            ax.plot(xs, [r["closed_form"] for r in s], STYLES[mode], color=COLORS[topo], lw=1.2)
            m = [r for r in s if r["compiled"]]
            ax.scatter(
                [r["hosts"] for r in m], [r["rules_max"] for r in m], s=18, color=COLORS[topo],
                facecolors=[COLORS[topo] if r["measured"] == "all" else "none" for r in m], zorder=3,
            )  # fmt: skip
    ax.axhline(TCAM_4K, color="grey", lw=0.8)
    ax.axvline(300_000, color="grey", lw=0.8, ls="--")
    ax.text(1.2e1, TCAM_4K * 1.15, "4K entries", color="grey", fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("network size (hosts)")
    ax.set_ylabel("TCAM entries per access switch")
    ax.set_title("Fig. 4: flat (dotted), per-switch (dashed), per-group (solid); points = measured")
    handles = [plt.Line2D([], [], color=COLORS[t], label=NAMES[t]) for t in TOPOLOGIES if any(r["topology"] == t for r in rows)]
    ax.legend(handles=handles, loc="upper left", fontsize=8)
    ax.grid(True, which="major", lw=0.3)
    fig.tight_layout()
    save_figure(fig, Path(path))
    plt.close(fig)


def plot_fig6(rows: Sequence[dict[str, Any]], path: str | os.PathLike[str]) -> None:
    """Fig. 6: entries after compaction vs hosts; Dragonfly as the paper's band
    (shaded) and our measured min-max band (error bars) beside it."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 5.5))
    for topo in TOPOLOGIES:
        s = _series(rows, topo, "compact")
        if not s:
            continue
        xs = [r["hosts"] for r in s]
        if topo == "dragonfly":
            ax.fill_between(xs, [r["closed_form"] for r in s], [r["closed_form_max"] for r in s],
                            color=COLORS[topo], alpha=0.15, label="Dragonfly, paper band")  # fmt: skip
            m = [r for r in s if r["compiled"]]
            if m:
                mid = [(r["rules_min"] + r["rules_max"]) / 2 for r in m]
                err = [[c - r["rules_min"] for c, r in zip(mid, m)], [r["rules_max"] - c for c, r in zip(mid, m)]]
                ax.errorbar([r["hosts"] for r in m], mid, yerr=err, fmt="none", ecolor=COLORS[topo], capsize=4,
                            lw=2, label="Dragonfly, measured min-max (ours)")  # fmt: skip
        else:
            ax.plot(xs, [r["closed_form"] for r in s], "-", color=COLORS[topo], lw=1.2, label=f"{NAMES[topo]} (= ports)")
            m = [r for r in s if r["compiled"]]
            ax.scatter([r["hosts"] for r in m], [r["rules_max"] for r in m], s=18, color=COLORS[topo], zorder=3)
    ax.axvline(300_000, color="grey", lw=0.8, ls="--")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("network size (hosts)")
    ax.set_ylabel("TCAM entries per access switch (compacted)")
    ax.set_title("Fig. 6: after compaction; points/bars = measured")
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(True, which="major", lw=0.3)
    fig.tight_layout()
    save_figure(fig, Path(path))
    plt.close(fig)


def run(
    out: str | os.PathLike[str],
    ports: Iterable[int] = DEFAULT_PORTS,
    *,
    topologies: Iterable[str] = TOPOLOGIES,
    jobs: int = 1,
    plots: bool = True,
    progress: bool = False,
    max_elements: int = MAX_ELEMENTS,
    log: Callable[[str], None] | None = None,
) -> tuple[list[dict[str, Any]], list[Path]]:
    """Compute the rows and write ``rules.csv`` (+ ``fig4-rules.png``, ``fig6-compact.png``) to ``out``."""
    rows = analyze_rules(ports, topologies, jobs=jobs, progress=progress, max_elements=max_elements, log=log)
    outdir = Path(out)
    outdir.mkdir(parents=True, exist_ok=True)
    files = [outdir / "rules.csv"]
    write_csv(rows, files[0])
    if plots:
        files += [outdir / "fig4-rules.png", outdir / "fig6-compact.png"]
        plot_fig4(rows, files[1])
        plot_fig6(rows, files[2])
    return rows, files


def under_4k(rows: Sequence[dict[str, Any]], hosts: int = 300_000) -> list[dict[str, Any]]:
    """Rows reaching ``hosts`` with fewer than 4K entries (the paper's Sec. III-A claim)."""
    return [r for r in rows if r["hosts"] >= hosts and r["closed_form_max"] < TCAM_4K]

