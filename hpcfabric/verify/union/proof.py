"""Delivery and deadlock freedom under any set of paused ports, from per-destination decisions.

What is proved
--------------
For every switch, every arrival channel a frame can reach (ingress port, VLAN PCP) and every
destination class, the engine decides what the compiled rules do twice: with the PORT_STATE
entries as installed and with all of them paused (:mod:`hpcfabric.verify.union.choices`). A frame
meets at most one PORT_STATE entry per switch, so under *any* set of paused ports -- changing
while the frame travels -- each hop takes one of those two choices. The union walk
(:mod:`hpcfabric.verify.union.unions`) follows both choices at every hop for every destination
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
subset at once, not only single ones). It implies what the all-pairs verifier and the CDG check
over every single paused port prove: every single-port scenario's walks and dependencies are a
subset of the union's. Minimal routing has no PORT_STATE entry:
the union is the unpaused fabric, and the proof is exactly all-pairs verify + its CDG.

The converse does not hold: the union can fail where every *single* paused port passes (a
failure that needs two ports paused together, or a dependency cycle whose edges come from
different pause states). ``prove(..., fallback='cdg')`` then runs the brute-force oracle
(:func:`hpcfabric.verify.oracle.cdg.check_deadlock_freedom` over the unpaused fabric and every single
paused port, every host pair) and reports both verdicts: the union's (any set of ports) in the
report, the single-port one in ``fallback`` with a ``verdict`` line.

Destination columns (:mod:`hpcfabric.verify.union.pairs`): the hosts of one access switch share a column
when no entry elsewhere tells them apart and their own switch decides alike for them (delivery to
oneself normalised) in every line, unpaused and paused; otherwise one column per host.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np

from hpcfabric.verify.oracle.cdg import check_deadlock_freedom
from hpcfabric.verify.union.choices import Choices
from hpcfabric.verify.graphs import LOW32
from hpcfabric.verify.union.orbits import Reduction, reduce_columns
from hpcfabric.verify.union.pairs import Columns, cdg_verdict, checked_columns, edge_names, prepare
from hpcfabric.verify.reference.pipeline import overlap_summary
from hpcfabric.verify.scenarios import pausable_ports
from hpcfabric.verify.union.unions import describe_walk, walk_union

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
    fallback: dict[str, Any] | None = None  # the CDG oracle over single paused ports, when the union fails
    edges: frozenset[tuple[str, str]] | None = None  # keep=True: the dependency graph as channel-name pairs
    # the symmetry reduction (verify.union.orbits) and whether it was used: then nodes count the walked
    # columns' and channels / dependencies the quotient graph's (channels mapped to their orbits)
    symmetry: dict[str, Any] | None = None
    # the surviving fabric (compiled.failures): (destination column, injection) pairs the failures disconnect,
    # not walked (failed switches' hosts are neither destinations nor sources)
    unreachable: int = 0

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
            "unreachable",
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

    ``fallback='cdg'``: when the union fails, also run the brute-force CDG oracle over every single
    paused port (:func:`hpcfabric.verify.oracle.cdg.check_deadlock_freedom`); its report lands in ``fallback``.
    ``symmetry``: walk one destination column per orbit of the automorphisms that commute with
    the decisions (:mod:`hpcfabric.verify.union.orbits`) when the quotient is acyclic (failures then count
    once per column of their orbit, witnesses come from the walked columns); otherwise, and with
    ``keep``, every column is walked. ``overlaps=False`` skips the equal-priority overlap check
    (quadratic in a table's entries: minutes on flat-addressed fabrics; not part of deadlock freedom).
    Raises :class:`VerificationError` for rules the engine does not model (MAC rewrites,
    source-dependent entries, groups).
    """
    if fallback not in (None, "cdg"):
        raise ValueError(f"fallback must be None or 'cdg', not {fallback!r}")
    t0 = time.perf_counter()
    timings: dict[str, float] = {}
    fabric = compiled.fabric
    overlaps, examples = overlap_summary(compiled) if overlaps else (0, [])
    inputs = prepare(compiled, progress=progress)
    ch, cols, hosts, probes = inputs.ch, inputs.cols, fabric.hosts, inputs.probes
    if getattr(compiled, "failures", None):  # the surviving fabric: an automorphism need not map failed links
        symmetry = False  # onto failed links
    timings.update(inputs.timings)
    t1 = time.perf_counter()
    red = reduce_columns(ch, cols, *cols.starts(checked_columns(cols), probes=False)) \
        if symmetry and not keep else None
    timings["symmetry"] = time.perf_counter() - t1
    walk, cdg = _reduced(ch, cols, red, timings, max_failures) if red and red.kept else (None, None)
    used = walk is not None
    if walk is None:
        t1 = time.perf_counter()
        start_col, start_state = cols.starts()
        walk = walk_union(ch, cols.cls, cols.want, cols.probe, start_col, start_state, loops=False,
                          max_witnesses=max_failures, components=cols.components)
        timings["walk"] = time.perf_counter() - t1
        t1 = time.perf_counter()
        cdg = cdg_verdict(ch, walk.edges)
        timings["cdg"] = time.perf_counter() - t1
        if cdg["cycle"] is not None:  # a forwarding loop is a dependency cycle: look for loops now
            t1 = time.perf_counter()
            walk = walk_union(ch, cols.cls, cols.want, cols.probe, start_col, start_state, loops=True,
                              max_witnesses=max_failures, components=cols.components)
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
        seconds=time.perf_counter() - t0, timings=timings, edges=edge_names(ch, walk.edges) if keep else None,
        symmetry=None if red is None else red.as_dict(used), unreachable=cols.unreachable,
    )
    if report.ok or fallback is None:
        return report
    t1 = time.perf_counter()
    single = check_deadlock_freedom(compiled, "single").as_dict()
    timings["fallback"] = time.perf_counter() - t1
    verdict = "fails also with single paused ports" if not single["ok"] else \
        "union only: every single paused port passes (a failure needs several ports paused together)"
    return replace(report, fallback={"method": fallback, "verdict": verdict, "report": single},
                   seconds=time.perf_counter() - t0, timings=timings)


def _reduced(ch: Choices, cols: Columns, red: Reduction, timings: dict[str, float],
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
    cdg = cdg_verdict(ch, walk.edges)
    timings["cdg"] = time.perf_counter() - t1
    if cdg["cycle"] is not None:
        return None, None
    walk.witnesses = [[(int(sel[c]), st, alt) for c, st, alt in w] for w in walk.witnesses]  # columns of cols
    return walk, cdg
