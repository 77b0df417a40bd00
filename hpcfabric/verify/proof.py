"""Delivery and deadlock freedom under any set of paused ports, from per-destination decisions.

What is proved
--------------
For every switch, every arrival channel a frame can reach (ingress port, VLAN PCP) and every
destination class, the engine decides what the compiled rules do twice: with the PORT_STATE
entries as installed and with all of them paused (:mod:`hpcfabric.verify.choices`). A frame
meets at most one PORT_STATE entry per switch, so under *any* set of paused ports -- changing
while the frame travels -- each hop takes one of those two choices. The union walk
(:mod:`hpcfabric.verify.unions`) follows both choices at every hop for every destination
column from every host's injection, and checks:

* **delivery**: every walk ends at the destination host, untagged; no drop (table miss, pipeline
  error, output back out of the ingress port, port with nothing behind it), punt, flood or loop
  -- for every host pair, under every pause pattern;
* **invalid probes** (:mod:`hpcfabric.verify.probes`): every walk of a probe from the first host of
  every access switch is dropped, under every pause pattern;
* **deadlock freedom**: the channel dependency graph of all those walks is acyclic (and so is
  each class of service);
* no two entries of equal priority overlap (OpenFlow leaves their order undefined).

``ok`` therefore means: delivered and deadlock-free under **any set** of paused ports (every
subset at once, not only single ones). It implies what the all-pairs verifier, the CDG check
over every single paused port and the paused-port sweep prove: every single-port scenario's
walks and dependencies are a subset of the union's. Minimal routing has no PORT_STATE entry:
the union is the unpaused fabric, and the proof is exactly all-pairs verify + its CDG.

The converse does not hold: the union can fail where every *single* paused port passes (a
failure that needs two ports paused together, or a dependency cycle whose edges come from
different pause states). ``prove(..., fallback='sweep' | 'symmetric')`` then runs the
single-paused-port check (:func:`hpcfabric.verify.sweep.sweep_single_paused` or
:func:`hpcfabric.verify.symmetry.symmetric_sweep`) and reports both verdicts: the union's (any
set of ports) in the report, the single-port one in ``fallback`` with a ``verdict`` line.

Destination columns are the sweep's (:mod:`hpcfabric.verify.columns`): the hosts of one access
switch share a column when no entry elsewhere tells them apart and their own switch decides
alike for them (delivery to oneself normalised) in every line, unpaused and paused; otherwise
one column per host.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from hpcfabric.errors import VerificationError
from hpcfabric.verify.choices import SLOT_BITS, Choices
from hpcfabric.verify.codes import DELIVER, DROP, UNTAGGED, channel_name, cos_label
from hpcfabric.verify.columns import SELF, groups_of_hosts, structural_splits_of
from hpcfabric.verify.decisions import forward_data_flows
from hpcfabric.verify.graphs import LOW32, core_graph, find_cycle
from hpcfabric.verify.orbits import Reduction, reduce_columns
from hpcfabric.verify.pipeline import overlap_summary
from hpcfabric.verify.probes import probe_addresses
from hpcfabric.verify.scenarios import pausable_ports
from hpcfabric.verify.unions import describe_walk, walk_union

__all__ = ["ProofReport", "prove"]


@dataclass(frozen=True)
class ProofReport:
    """Verdict of :func:`prove` (``as_dict`` is JSON-ready)."""

    fabric: str
    routing: str
    cos: str | None
    cos_levels: int
    switches: int
    hosts: int
    pausable_ports: int
    columns: int  # destination columns walked
    split_groups: int  # access switches walked per host
    probes: int
    lines: int  # (switch, ingress port class, arrival PCP) lines decided, each unpaused and paused
    destination_classes: int  # summed over the switches decided
    nodes: int  # (column, arrival channel) nodes walked, summed over levels
    paused_choices: int  # node expansions where the paused decision differs
    depth: int  # breadth-first levels of the union walk: switches on the longest shortest walk
    undelivered: dict[str, int]  # failing (column, channel, choice) outcomes per kind, probes excluded
    probe_failures: dict[str, int]
    failing_columns: int
    failures: tuple[dict[str, Any], ...]
    overlaps: int
    overlap_examples: tuple[str, ...]
    acyclic: bool
    cycle: tuple[str, ...] | None
    per_cos: dict[str, tuple[str, ...] | None]
    classes_used: tuple[str, ...]
    channels: int
    dependencies: int
    seconds: float
    timings: dict[str, float] = field(default_factory=dict)
    fallback: dict[str, Any] | None = None  # the single-port sweep, when the union fails
    edges: frozenset[tuple[str, str]] | None = None  # keep=True: the dependency graph as channel-name pairs
    # the symmetry reduction (verify.orbits) and whether it was used: then nodes count the walked
    # columns' and channels / dependencies the quotient graph's (channels mapped to their orbits)
    symmetry: dict[str, Any] | None = None

    @property
    def delivered(self) -> bool:
        return not self.undelivered and not self.probe_failures and self.overlaps == 0

    @property
    def ok(self) -> bool:
        """Delivered and deadlock-free under any set of paused ports."""
        return self.delivered and self.acyclic

    def as_dict(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in (
            "fabric", "routing", "cos", "cos_levels", "switches", "hosts", "pausable_ports", "columns",
            "split_groups", "probes", "lines", "destination_classes", "nodes", "paused_choices", "depth",
            "undelivered", "probe_failures", "failing_columns", "overlaps", "acyclic", "channels", "dependencies",
        )}
        out = {"method": "union of per-destination choices (any set of paused ports)", "ok": self.ok,
               "delivered": self.delivered, **out}
        out["overlap_examples"] = list(self.overlap_examples)
        out["failures"] = [dict(f) for f in self.failures]
        out["cycle"] = list(self.cycle) if self.cycle else None
        out["per_cos"] = {k: (list(v) if v else None) for k, v in self.per_cos.items()}
        out["classes_used"] = list(self.classes_used)
        out["seconds"] = round(self.seconds, 3)
        out["timings"] = {k: round(v, 3) for k, v in self.timings.items()}
        out["symmetry"] = self.symmetry
        if self.fallback is not None:
            out["fallback"] = self.fallback
        return out


def prove(
    compiled: Any,
    *,
    fallback: str | None = None,
    max_failures: int = 20,
    keep: bool = False,
    symmetry: bool = True,
    progress: Callable[[int, int, float], None] | None = None,
    overlaps: bool = True,
) -> ProofReport:
    """Prove delivery and deadlock freedom of ``compiled`` under any set of paused ports
    (module docstring), or report what fails.

    ``fallback``: when the union fails, also run the single-paused-port check: ``'sweep'``
    (:func:`hpcfabric.verify.sweep.sweep_single_paused`) or ``'symmetric'``
    (:func:`hpcfabric.verify.symmetry.symmetric_sweep`); its report lands in ``fallback``.
    ``symmetry``: walk one destination column per orbit of the automorphisms that commute with
    the decisions (:mod:`hpcfabric.verify.orbits`) when the quotient is acyclic (failures then count
    once per column of their orbit, witnesses come from the walked columns); otherwise, and with
    ``keep``, every column is walked. ``overlaps=False`` skips the equal-priority overlap check
    (quadratic in a table's entries: minutes on flat-addressed fabrics; not part of deadlock freedom).
    Raises :class:`VerificationError` for rules the engine does not model (MAC rewrites,
    source-dependent entries, groups).
    """
    if fallback not in (None, "sweep", "symmetric"):
        raise ValueError(f"fallback must be None, 'sweep' or 'symmetric', not {fallback!r}")
    t0 = time.perf_counter()
    timings: dict[str, float] = {}
    fabric, plan = compiled.fabric, compiled.plan
    relevant = forward_data_flows(compiled, "the union proof", VerificationError, actions=True)
    overlaps, examples = overlap_summary(compiled) if overlaps else (0, [])
    hosts = fabric.hosts
    host_macs = np.array([plan.host_mac[h.name] for h in hosts], dtype=np.uint64)
    groups = groups_of_hosts(hosts)
    split = structural_splits_of(relevant, host_macs, groups)
    target_host = np.concatenate([ids if t in split else ids[:1] for t, ids in groups.items()]) if groups else \
        np.zeros(0, dtype=np.int64)
    probes = probe_addresses(plan)
    targets = np.concatenate([host_macs[target_host], np.array([m for m, _ in probes], dtype=np.uint64)])
    timings["entries"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    ch = Choices(compiled, relevant, targets, progress=progress)
    timings["decisions"] = time.perf_counter() - t1
    timings.update({f"decisions.{k}": v for k, v in ch.timings.items()})
    t1 = time.perf_counter()
    cols = _Columns(ch, groups, split, target_host, len(probes))
    cols.injections(ch, groups, fabric)
    red = reduce_columns(ch, cols, *cols.starts(_checked_columns(cols), probes=False)) \
        if symmetry and not keep else None
    timings["symmetry"] = time.perf_counter() - t1
    walk, cdg = _reduced(ch, cols, red, timings, max_failures) if red and red.kept else (None, None)
    used = walk is not None
    if walk is None:
        t1 = time.perf_counter()
        start_col, start_state = cols.starts()
        walk = walk_union(ch, cols.cls, cols.want, cols.probe, start_col, start_state, loops=False,
                          max_witnesses=max_failures)
        timings["walk"] = time.perf_counter() - t1
        t1 = time.perf_counter()
        cdg = _cdg(ch, walk.edges)
        timings["cdg"] = time.perf_counter() - t1
        if cdg["cycle"] is not None:  # a forwarding loop is a dependency cycle: look for loops now
            t1 = time.perf_counter()
            walk = walk_union(ch, cols.cls, cols.want, cols.probe, start_col, start_state, loops=True,
                              max_witnesses=max_failures)
            timings["loops"] = time.perf_counter() - t1
    undelivered, probe_fail = walk.bad, walk.bad_probe
    failures = [{"kind": k, **describe_walk(ch, w, cols.names)} for w, k in zip(walk.witnesses, walk.witness_kinds)]
    if cdg["cycle"] is not None and len(failures) < max_failures:
        failures.append({"kind": "cdg cycle", "cycle": list(cdg["cycle"])})
    report = ProofReport(
        fabric=fabric.name, routing=compiled.routing, cos=getattr(compiled, "cos", None),
        cos_levels=getattr(compiled, "cos_levels", 0), switches=len(fabric.switches), hosts=len(hosts),
        pausable_ports=len(pausable_ports(compiled)), columns=cols.n_host_columns, split_groups=len(cols.split),
        probes=len(probes), lines=ch.lines, destination_classes=ch.switch_classes(), nodes=walk.nodes,
        paused_choices=walk.paused_hops, depth=walk.depth, undelivered=undelivered, probe_failures=probe_fail,
        failing_columns=walk.bad_columns, failures=tuple(failures[:max_failures]), overlaps=overlaps,
        overlap_examples=tuple(examples), acyclic=cdg["cycle"] is None, cycle=cdg["cycle"], per_cos=cdg["per_cos"],
        classes_used=cdg["classes"], channels=cdg["channels"], dependencies=len(walk.edges),
        seconds=time.perf_counter() - t0, timings=timings, edges=_edge_names(ch, walk.edges) if keep else None,
        symmetry=None if red is None else red.as_dict(used),
    )
    if report.ok or fallback is None:
        return report
    t1 = time.perf_counter()
    if fallback == "symmetric":
        from hpcfabric.verify.symmetry import symmetric_sweep

        single = symmetric_sweep(compiled).as_dict()
    else:
        from hpcfabric.verify.sweep import sweep_single_paused

        single = sweep_single_paused(compiled).as_dict()
    timings["fallback"] = time.perf_counter() - t1
    verdict = "fails also with single paused ports" if not single["ok"] else \
        "union only: every single paused port passes (a failure needs several ports paused together)"
    from dataclasses import replace

    return replace(report, fallback={"method": fallback, "verdict": verdict, "report": single},
                   seconds=time.perf_counter() - t0, timings=timings)


class _Columns:
    """Destination columns: one per alike access switch, one per host otherwise, then the probes."""

    def __init__(self, ch: Choices, groups: dict[str, np.ndarray], split: set[str], target_host: np.ndarray,
                 n_probes: int) -> None:
        fabric = ch.fabric
        target_of = {int(h): i for i, h in enumerate(target_host.tolist())}
        self.split = set(split) | {t for t, ids in groups.items() if t not in split and len(ids) > 1
                                   and not _alike(ch, t)}
        host: list[int] = []
        target: list[int] = []
        own: list[tuple[int, int, int]] = []  # (column, switch index, class there) for per-host columns
        self.single: list[bool] = []
        for t, ids in groups.items():
            per_host = t in self.split or len(ids) == 1
            own_ids, own_cls = ch.own_classes(t)
            pos = {h: i for i, h in enumerate(own_ids)}
            for h in (ids if per_host else ids[:1]):
                h = int(h)
                if per_host:
                    own.append((len(host), ch.sw_index[t], int(own_cls[pos[h]])))
                host.append(h)
                target.append(target_of.get(h, target_of.get(int(ids[0]), -1)))
                self.single.append(per_host)
        self.n_host_columns = len(host)
        nt = len(target_host)
        target += list(range(nt, nt + n_probes))
        target_ids = np.array(target, dtype=np.int64)
        if not own and np.array_equal(target_ids, np.arange(ch.cls.shape[1])):
            self.cls = ch.cls  # the targets in column order: no copy (switches x columns cells, 1.1 GB at 300k)
        else:
            self.cls = ch.cls[:, target_ids] if target else np.zeros((len(ch.names), 0), np.int32)
        for c, s, k in own:
            self.cls[s, c] = k
        self.host = np.array(host, dtype=np.int64)
        self.want = np.concatenate([DELIVER - self.host, np.full(n_probes, DROP, dtype=np.int64)])
        self.probe = np.concatenate([np.zeros(len(host), dtype=bool), np.ones(n_probes, dtype=bool)])
        self.single += [False] * n_probes
        self.names = [fabric.hosts[h].name for h in host] + [f"probe {i}" for i in range(n_probes)]

    def injections(self, ch: Choices, groups: dict[str, np.ndarray], fabric: Any) -> None:
        """Where hosts inject (:meth:`starts`): per switch and host port class one port (another member
        for the column of that port's own host: the self pair is no pair); probes from the first host
        of every access switch."""
        rep_state, rep_host, alt_state = [], [], []
        for t in groups:
            members: dict[int, list[int]] = {}
            for p in sorted(fabric.host_ports(t)):
                members.setdefault(ch.port_class[ch.sw_index[t]][p], []).append(p)
            for ports in members.values():
                rep_state.append(ch.state(t, ports[0], UNTAGGED))
                rep_host.append(ch.hid[fabric.peer(t, ports[0]).node])
                alt_state.append(ch.state(t, ports[1], UNTAGGED) if len(ports) > 1 else -1)
        self._inject = tuple(np.array(x, dtype=np.int64) for x in (rep_state, rep_host, alt_state))
        self._probe_from = np.array([ch.state(t, fabric.hosts[int(ids[0])].port, UNTAGGED)
                                     for t, ids in groups.items()], dtype=np.int64)

    def starts(self, which: np.ndarray | None = None, probes: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """(column, state) of every host injection into the host columns ``which`` (all: None), then,
        with ``probes``, of the probe columns (:meth:`injections` first). Built only for the columns
        asked: all of them are columns x injection ports (300k Dragonfly: 16,668 x 300,024)."""
        n_host_cols = self.n_host_columns
        which = np.arange(n_host_cols, dtype=np.int64) if which is None else np.asarray(which, dtype=np.int64)
        rs, rh, ra = self._inject
        col = np.tile(which, len(rs))
        st = np.repeat(rs, len(which))
        single = np.array(self.single[:n_host_cols], dtype=bool)
        same = np.repeat(rh, len(which)) == np.where(single, self.host, -1)[col]
        st[same] = np.repeat(ra, len(which))[same]
        keep = st >= 0
        col, st = col[keep], st[keep]
        n_probe = len(self.want) - n_host_cols
        if n_probe and probes:
            first = self._probe_from
            col = np.concatenate([col, np.tile(np.arange(n_host_cols, n_host_cols + n_probe), len(first))])
            st = np.concatenate([st, np.repeat(first, n_probe)])
        return col, st


def _checked_columns(cols: _Columns) -> np.ndarray:
    """The host columns whose injections the symmetry check reads: the first column of several hosts
    (they all share its injections) and every per-host column."""
    single = np.array(cols.single[:cols.n_host_columns], dtype=bool)
    many = np.flatnonzero(~single)
    return np.concatenate([many[:1], np.flatnonzero(single)])


def _reduced(ch: Choices, cols: _Columns, red: Reduction, timings: dict[str, float],
             max_failures: int) -> tuple[Any, Any]:
    """The walk of one host column per orbit (and every probe) and the cycle check of its quotient
    dependency graph; (None, None) unless the quotient is acyclic. A walked column's failures stand
    for those of every column of its orbit (the walks map node by node): they count orbit-size times."""
    t1 = time.perf_counter()
    n = len(cols.want)
    sel = np.concatenate([red.walk, np.arange(cols.n_host_columns, n, dtype=np.int64)])
    weight = np.concatenate([red.size, np.ones(n - cols.n_host_columns, dtype=np.int64)])
    pos = np.full(n, -1, dtype=np.int64)
    pos[sel] = np.arange(len(sel))
    start_col, start_state = cols.starts(red.walk)
    walk = walk_union(ch, cols.cls[:, sel], cols.want[sel], cols.probe[sel], pos[start_col], start_state,
                      loops=False, max_witnesses=max_failures, weight=weight)
    timings["walk"] = time.perf_counter() - t1
    t1 = time.perf_counter()
    orbit = red.state_orbit
    walk.edges = np.unique(orbit[walk.edges >> 32] << 32 | orbit[walk.edges & LOW32])
    cdg = _cdg(ch, walk.edges)
    timings["cdg"] = time.perf_counter() - t1
    if cdg["cycle"] is not None:
        return None, None
    walk.witnesses = [[(int(sel[c]), st, alt) for c, st, alt in w] for w in walk.witnesses]  # columns of cols
    return walk, cdg


def _alike(ch: Choices, switch: str) -> bool:
    """Do the hosts of ``switch`` get the same choices in every line there (delivery to oneself
    normalised), unpaused and paused?"""
    own, cls = ch.own_classes(switch)
    fabric = ch.fabric
    own_port = np.array([fabric.hosts[h].port for h in own], dtype=np.int64)
    selfcode = own_port << SLOT_BITS  # one output to the host's own port, untagged (slot 0)
    for line in ch.lines_at.get(switch, []):
        off = ch.line_off[line]
        for arr in (ch.base, ch.alt):
            code = arr[off + cls].astype(np.int64)
            code = np.where(code == selfcode, SELF, code)
            if not (code == code[0]).all():
                return False
    return True


def _channel(ch: Choices) -> Callable[[int], str]:
    """State -> the name of the channel a frame waited in before arriving there (sender's egress)."""
    def name(state: int) -> str:
        sw, port, pcp = (int(x[0]) for x in ch.decode(np.array([state], dtype=np.int64)))
        peer = ch.fabric.peer(ch.names[sw], port)
        return channel_name((peer.node, peer.port, pcp))  # type: ignore[union-attr]

    return name


def _edge_names(ch: Choices, edges: np.ndarray) -> frozenset[tuple[str, str]]:
    name = _channel(ch)
    return frozenset((name(int(e) >> 32), name(int(e) & LOW32)) for e in edges.tolist())


def _cdg(ch: Choices, edges: np.ndarray) -> dict[str, Any]:
    """Cycle check of the dependency edges (states of fabric arrivals), whole graph and per class."""
    src, dst = edges >> 32, edges & LOW32
    _, _, pcp = ch.decode(np.arange(ch.n_states, dtype=np.int64))
    name = _channel(ch)

    cycle = find_cycle(core_graph(src, dst), name)
    nodes = np.unique(np.concatenate([src, dst])) if len(edges) else np.zeros(0, dtype=np.int64)
    classes = sorted(set(pcp[nodes].tolist()))
    per_cos: dict[str, tuple[str, ...] | None] = {}
    same = pcp[src] == pcp[dst]
    for k in classes:
        sel = same & (pcp[src] == k)
        per_cos[cos_label(k)] = find_cycle(core_graph(src[sel], dst[sel]), name)
    return {"cycle": cycle, "per_cos": per_cos, "classes": tuple(cos_label(k) for k in classes), "channels": len(nodes)}
