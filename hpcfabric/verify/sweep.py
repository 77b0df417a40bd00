"""Every single paused port at scale: incremental delivery + channel-dependency-graph check.

Result: the same verdicts and counts as, per fabric port with a PORT_STATE entry,
``verify(compiled, paused=[port])`` (host pairs) and the scenario's own channel
dependency graph (:mod:`hpcfabric.verify.cdg`), plus the union graph over all scenarios
(the deadlock criterion). ``tests/test_sweep.py`` checks the equality against
that brute force on the small shipped fabrics and on broken rule sets.

Why it is cheap
---------------
1. **Destination classes.** Hosts of one access switch ``t`` form one column
   when no rule can tell them apart outside ``t`` and ``t`` treats them alike
   up to the delivery port. Checked, not assumed: (a) structurally, for every
   ``eth_dst`` match of every data-relevant entry on every switch ``s != t``,
   the match is true for all hosts of ``t`` or for none; (b) at ``t``, every
   decision line over the hosts of ``t`` is equal once "delivered to the
   destination itself" is normalised (and so is the PORT_STATE entry each one
   meets). A group failing either check is split into one column per host.
   Equal decisions at every row mean equal walks: same outcome, same channels.
   Sources are classes too (hosts of one switch whose first rows decide alike,
   as in :mod:`hpcfabric.verify.cdg`). Pair counts are class sizes multiplied out,
   self-pairs subtracted.
2. **Affected pairs only.** Pausing port ``x`` of switch ``s`` flips one
   PORT_STATE entry (a ``metadata`` match, no ``eth_dst``), so only rows of
   ``s`` change, only for destinations meeting that entry, and only the
   (source class, column) pairs whose unpaused walk visits ``s`` at such a
   column can change: the unpaused walk records which pairs visit which
   switch. Those pairs are walked again with the scenario's decisions; every
   other pair keeps its unpaused outcome and channels.
3. **Union first.** The scenario graph is the unpaused edges of unaffected
   pairs plus the affected pairs' new edges, a subgraph of the union (unpaused
   graph plus every scenario's new edges). An acyclic union proves every
   scenario acyclic. When the union has a cycle, only scenarios that can hold
   one are re-walked in full: those whose new edges lie inside a strongly
   connected component of the union (all of them when an unpaused edge does).

A check that cannot be made for a scenario (a group not alike at its own
switch under the scenario's rules) falls back to the brute force for that
scenario; ``exact_fallbacks`` counts them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import networkx as nx
import numpy as np

from hpcfabric.rules.port_state import port_state_flow
from hpcfabric.verify.codes import DELIVER, channel_name, cos_label, outcome_kind
from hpcfabric.verify.columns import VISIT_BATCH, ColumnLines, NotAlike, edge_names, expand_affected, host_groups, structural_splits
from hpcfabric.verify.engine import Engine
from hpcfabric.verify.graphs import core_graph, edge_graph, find_cycle
from hpcfabric.verify.lines import DecisionLines
from hpcfabric.verify.scenarios import apply_paused, pausable_ports

__all__ = ["SweepReport", "sweep_single_paused", "brute_force_single_paused"]

UNDELIVERED_KINDS = ("misdelivered", "dropped", "loop", "punted", "flood", "tagged")


@dataclass(frozen=True)
class SweepReport:
    """Every single paused port of one compiled fabric (``as_dict`` is JSON-ready)."""

    fabric: str
    routing: str
    cos: str | None
    cos_levels: int
    hosts: int
    pairs_per_scenario: int
    scenarios: int  # the unpaused fabric + one per paused port
    paused_ports: int
    columns: int  # destination classes walked
    split_groups: int  # access switches whose hosts are not alike (one column per host)
    source_classes: int
    failed_scenarios: int  # scenarios with an undelivered pair
    undelivered: dict[str, int]  # summed over scenarios, per kind
    scenario_failures: tuple[dict[str, Any], ...]  # the first ones
    acyclic: bool  # the union graph
    cycle: tuple[str, ...] | None
    per_cos: dict[str, tuple[str, ...] | None]
    classes_used: tuple[str, ...]
    channels: int
    dependencies: int
    cyclic_scenarios: int
    rewalked_scenarios: int  # scenarios walked in full because the union is cyclic
    exact_fallbacks: int
    affected_pairs: int  # (source class, column) pairs re-walked over all scenarios
    late_rows: int  # decision rows first met in a scenario (checked like the others)
    seconds: float
    destination_hosts: int = 0  # hosts walked to (all of them unless the sweep was restricted)
    unchanged_scenarios: int = 0  # paused ports whose PORT_STATE entry no walked row meets
    timings: dict[str, float] = field(default_factory=dict)
    per_scenario: dict[str | None, dict[str, Any]] | None = None  # keep=True: undelivered counts, cyclic verdict
    edges: frozenset[tuple[str, str]] | None = None  # keep=True: the union graph as channel-name pairs

    @property
    def ok(self) -> bool:
        return self.acyclic and self.failed_scenarios == 0

    def as_dict(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in (
            "fabric", "routing", "cos", "cos_levels", "hosts", "pairs_per_scenario", "scenarios", "paused_ports",
            "columns", "split_groups", "source_classes", "failed_scenarios", "undelivered", "acyclic",
            "channels", "dependencies", "cyclic_scenarios", "rewalked_scenarios", "exact_fallbacks",
            "affected_pairs", "late_rows", "destination_hosts", "unchanged_scenarios",
        )}
        out["ok"] = self.ok
        out["cycle"] = list(self.cycle) if self.cycle else None
        out["per_cos"] = {k: (list(v) if v else None) for k, v in self.per_cos.items()}
        out["classes_used"] = list(self.classes_used)
        out["scenario_failures"] = [dict(f) for f in self.scenario_failures]
        out["seconds"] = round(self.seconds, 3)
        out["timings"] = {k: round(v, 3) for k, v in self.timings.items()}
        return out



def _tally(codes: np.ndarray, want: np.ndarray, w: np.ndarray) -> dict[str, int]:
    """Undelivered pairs per kind (codes vs the correct DELIVER code, weighted)."""
    out: dict[str, int] = {}
    bad = np.flatnonzero(codes.astype(np.int64) != want)
    if not bad.size:
        return out
    for code, cnt in zip(*_group_sum(codes[bad].astype(np.int64), w[bad])):
        if cnt:
            kind = outcome_kind(int(code), None if code > DELIVER else -1)
            out[kind] = out.get(kind, 0) + int(cnt)
    return out


def _group_sum(keys: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    u, inv = np.unique(keys, return_inverse=True)
    return u, np.bincount(inv.reshape(-1), weights=w, minlength=len(u)).astype(np.int64)


def _add(a: dict[str, int], b: dict[str, int], sign: int = 1) -> dict[str, int]:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + sign * v
    return {k: v for k, v in out.items() if v}



def _find_cycle(sw: ColumnLines, g: nx.DiGraph) -> tuple[str, ...] | None:
    return find_cycle(g, sw.channel)


# ---------------------------------------------------------------------------
# entry points


def sweep_single_paused(
    compiled: Any,
    ports: str | Sequence[tuple[str, int]] = "single",
    *,
    keep: bool = False,
    max_failures: int = 20,
    progress: Callable[[int, int, float], None] | None = None,
    destinations: Sequence[str] | None = None,
    _split: set[str] | None = None,
    _engine: Engine | None = None,
) -> SweepReport:
    """Delivery of every host pair and the channel dependency graph under the
    unpaused fabric and each port of ``ports`` paused alone ('single': every
    port with a PORT_STATE entry). ``keep``: per-scenario results in
    ``per_scenario`` (keyed 'SW:PORT', None for the unpaused fabric).
    ``destinations``: access switches whose hosts are the only destinations
    walked (every source still sends to them; see :mod:`hpcfabric.verify.symmetry`)."""
    t0 = time.perf_counter()
    timings: dict[str, float] = {}
    port_list = pausable_ports(compiled) if ports == "single" else list(ports)  # type: ignore[arg-type]
    only = None if destinations is None else set(destinations)
    if _split is None:
        eng0 = _engine if _engine is not None else Engine(compiled, per_port=True, lazy=True)
        split = structural_splits(eng0, host_groups(eng0))
        _engine = eng0  # fabric rows are built when a walk first reaches them
        del eng0
    else:
        split = set(_split)
    while True:  # split groups not alike at their own switch, rebuild (rare: broken rules)
        sw = ColumnLines(compiled, split, scenarios=bool(port_list), only=only, engine=_engine)
        if not sw.not_alike:
            break
        split |= sw.not_alike
    timings["lines"] = time.perf_counter() - t0
    base_rows = len(sw.li)
    t1 = time.perf_counter()
    first, members = sw.source_classes()
    n = sw.n
    ncls = len(first)
    weight = sw.pair_weights(members)
    first_rows = [np.array([sw.eng.first_row(sw.eng.hosts[int(h)]) for h in m], dtype=np.int64) for m in members]
    classes_at: dict[str, list[int]] = {}
    for k, m in enumerate(members):
        classes_at.setdefault(sw.eng.hosts[int(m[0])].switch, []).append(k)
    want_col = DELIVER - sw.rep
    visits: list | None = [] if port_list else None
    if port_list and ncls * n >= 2**31:
        raise ValueError(f"{ncls} x {n} pairs: too many for the affected-pairs index")
    codes_parts: list[np.ndarray] = []
    edge_parts: list[np.ndarray] = []
    base_bad: dict[str, int] = {}
    per_batch = max(1, VISIT_BATCH // n)
    for k0 in range(0, ncls, per_batch):  # batches of source classes: (class, column) pairs in pair-id order
        k1 = min(ncls, k0 + per_batch)
        bc = np.repeat(np.arange(k0, k1, dtype=np.int64), n)
        bcol = np.tile(np.arange(n, dtype=np.int64), k1 - k0)
        codes_b, e_b = sw.walk_pairs(first[bc], bcol, visits=visits, pair_ids=np.arange(k0 * n, k1 * n, dtype=np.int64))
        if port_list:
            codes_parts.append(codes_b)
        edge_parts.append(e_b)
        base_bad = _add(base_bad, _tally(codes_b, want_col[bcol], weight(bc, bcol)))
    base_codes = np.concatenate(codes_parts) if codes_parts else np.zeros(0, dtype=np.int32)
    base_edges = np.unique(np.concatenate(edge_parts)) if edge_parts else np.zeros(0, dtype=np.int64)
    del codes_parts, edge_parts
    timings["base_walk"] = time.perf_counter() - t1
    t1 = time.perf_counter()
    if visits:  # pair ids by visited switch: one in-place sort of packed keys
        key = np.concatenate(visits)
        del visits
        key.sort()
        v_start = np.searchsorted(key, np.arange(len(compiled.fabric.switches) + 1, dtype=np.int64) << 32)
        v_pairs = (key & 0xFFFFFFFF).astype(np.int32)
        del key
    timings["visit_index"] = time.perf_counter() - t1
    t1 = time.perf_counter()
    union = [base_edges]
    new_edges: dict[str, np.ndarray] = {}
    per: dict[str | None, dict[str, Any]] = {None: {"undelivered": base_bad}}
    failures: list[dict[str, Any]] = []
    failed = 1 if base_bad else 0
    if base_bad:
        failures.append({"paused": None, "undelivered": base_bad})
    total = dict(base_bad)
    scenarios = 1
    fallbacks = 0
    affected_total = 0
    fallback_names: list[str] = []
    sw_idx = {s.name: i for i, s in enumerate(compiled.fabric.switches)}
    paused_flow: dict[int, Any] = {}
    unchanged = 0
    for i, (s, p) in enumerate(port_list):
        if progress is not None and (i + 1) % 20000 == 0:
            progress(i + 1, len(port_list), time.perf_counter() - t0)
        if p not in sw.met_ports(s) and s in sw.rows_at:  # no walked row meets the entry: the unpaused fabric
            if ports == "single" or port_state_flow(p, False) in compiled.tables[s].flows:
                scenarios += 1
                unchanged += 1
                per[f"{s}:{p}"] = {"undelivered": dict(base_bad)}
                if base_bad:
                    failed += 1
                total = _add(total, base_bad) if base_bad else total
                continue
        old = port_state_flow(p, False)
        flows = compiled.tables[s].flows if compiled.fabric.has_switch(s) else ()
        at = [j for j, f in enumerate(flows) if f == old]
        if not at:
            if compiled.fabric.has_switch(s) and compiled.fabric.peer(s, p) is not None:
                continue  # nothing to pause (no PORT_STATE entry), as the controller
            raise ValueError(f"no port {s}:{p} in {compiled.fabric.name}")
        scenarios += 1
        name = f"{s}:{p}"
        new = paused_flow.setdefault(p, port_state_flow(p, True))
        flows = list(flows)
        for j in at:
            flows[j] = new
        try:
            changed = sw.scenario(s, p, flows)
            if sw.not_alike:  # a row created on the way is not alike at its switch: start again, split
                return sweep_single_paused(compiled, ports, keep=keep, max_failures=max_failures,
                                           progress=progress, destinations=destinations,
                                           _split=split | sw.not_alike, _engine=_engine)
        except NotAlike:
            fallbacks += 1
            fallback_names.append(name)
            res = _exact_scenario(compiled, s, p)
            bad, e = res["undelivered"], sw.translate(res["sweep"], res["edges"])
            new_edges[name] = e
            union.append(e)
            per[name] = {"undelivered": bad}
            total = _add(total, bad)
            if bad:
                failed += 1
                if len(failures) < max_failures:
                    failures.append({"paused": name, "undelivered": bad})
            continue
        bad = dict(base_bad)
        if changed:
            ccols = np.zeros(n, dtype=bool)
            for r, line in changed.items():
                ccols |= line != sw.uniq[sw.li[r]]
            k = sw_idx[s]
            pid = np.unique(v_pairs[v_start[k] : v_start[k + 1]])
            pid = pid[ccols[pid % n]].astype(np.int64)
            affected_total += len(pid)
            if pid.size:
                pc, pcol = pid // n, pid % n
                w_pid = weight(pc, pcol)
                wf, wc, ww = expand_affected(sw, pc, pcol, w_pid, first, members, first_rows, classes_at.get(s, ()), changed)
                codes, e = sw.walk_pairs(wf, wc, changed)
                bad = _add(_add(bad, _tally(base_codes[pid], want_col[pcol], w_pid), -1),
                           _tally(codes, want_col[wc], ww))
                if e.size:
                    new_edges[name] = e
                    union.append(e)
        per[name] = {"undelivered": bad}
        total = _add(total, bad) if bad else total
        if bad:
            failed += 1
            if len(failures) < max_failures:
                failures.append({"paused": name, "undelivered": bad})
        if progress is not None and (i + 1) % 500 == 0:
            progress(i + 1, len(port_list), time.perf_counter() - t0)
    timings["scenarios"] = time.perf_counter() - t1
    t1 = time.perf_counter()
    all_edges = np.unique(np.concatenate(union))
    src, dst = all_edges >> 32, all_edges & 0xFFFFFFFF
    nodes = np.unique(np.concatenate([src, dst]))
    pcp = np.array([sw.eng.rows[int(r)].pcp for r in nodes.tolist()], dtype=np.int64)
    g = core_graph(src, dst)
    cycle = _find_cycle(sw, g)
    per_cos: dict[str, tuple[str, ...] | None] = {}
    classes = sorted(set(pcp.tolist()))
    pcp_of_src = pcp[np.searchsorted(nodes, src)]
    same = pcp_of_src == pcp[np.searchsorted(nodes, dst)]
    for k in classes:
        sel = same & (pcp_of_src == k)
        per_cos[cos_label(k)] = _find_cycle(sw, core_graph(src[sel], dst[sel]))
    cyclic = rewalked = 0
    for v in per.values():
        v["cyclic"] = False
    if cycle is not None:
        scc: dict[int, int] = {}
        for comp in nx.strongly_connected_components(g):
            if len(comp) > 1:
                cid = min(comp)
                scc.update((r, cid) for r in comp)

        def in_scc(e: np.ndarray) -> bool:
            """Does an edge of ``e`` lie inside a strongly connected component of the union?"""
            return any(scc.get(x, -1) == scc.get(y, -2) for x, y in zip((e >> 32).tolist(), (e & 0xFFFFFFFF).tolist()))
        everyone = in_scc(base_edges)
        for name in [None] + [f"{s}:{p}" for s, p in port_list if f"{s}:{p}" in per]:
            if name is not None and not everyone and not (name in new_edges and in_scc(new_edges[name])):
                continue
            rewalked += 1
            if name is None:
                e = base_edges
            elif name in fallback_names:
                s, p = name.rsplit(":", 1)
                res = _exact_scenario(compiled, s, int(p))
                e = sw.translate(res["sweep"], res["edges"])
            else:
                s, p = name.rsplit(":", 1)
                flipped, _ = apply_paused(compiled, [(s, int(p))])
                changed = sw.scenario(s, int(p), flipped.tables[s].flows)
                fcls, fmem = sw.source_classes(changed)
                fc = np.repeat(fcls, n)
                e = sw.walk_pairs(fc, np.tile(np.arange(n, dtype=np.int64), len(fcls)), changed)[1]
            c = _find_cycle(sw, edge_graph(e))
            if c is not None:
                cyclic += 1
                per[name]["cyclic"] = True
                if len(failures) < max_failures:
                    failures.append({"paused": name, "cycle": list(c)})
    timings["cdg"] = time.perf_counter() - t1
    n_hosts = len(compiled.fabric.hosts)
    n_dst = int(sw.col_size.sum())
    return SweepReport(
        fabric=compiled.fabric.name,
        routing=compiled.routing,
        cos=getattr(compiled, "cos", None),
        cos_levels=getattr(compiled, "cos_levels", 0),
        hosts=n_hosts,
        pairs_per_scenario=n_hosts * n_dst - n_dst,
        scenarios=scenarios,
        paused_ports=scenarios - 1,
        columns=n,
        split_groups=len(sw.split),
        source_classes=ncls,
        failed_scenarios=failed,
        undelivered=total,
        scenario_failures=tuple(failures),
        acyclic=cycle is None,
        cycle=cycle,
        per_cos=per_cos,
        classes_used=tuple(cos_label(k) for k in classes),
        channels=len(nodes),
        dependencies=len(all_edges),
        cyclic_scenarios=cyclic,
        rewalked_scenarios=rewalked,
        exact_fallbacks=fallbacks,
        affected_pairs=affected_total,
        late_rows=len(sw.li) - base_rows,
        seconds=time.perf_counter() - t0,
        timings=timings,
        per_scenario=per if keep else None,
        edges=frozenset(edge_names(sw, all_edges)) if keep else None,
        destination_hosts=n_dst,
        unchanged_scenarios=unchanged,
    )


def _exact_scenario(compiled: Any, switch: str, port: int) -> dict[str, Any]:
    """Brute force for one scenario: every host a column, every pair walked."""
    flipped, _ = apply_paused(compiled, [(switch, port)])
    return _exact(flipped)


def _exact(compiled: Any) -> dict[str, Any]:
    """Undelivered pairs per kind and the dependency edges (row ids of a per-host sweep
    over ``compiled``; names via the returned sweep)."""
    everyone = {s for s in host_groups(Engine(compiled))}
    sw = ColumnLines(compiled, everyone, scenarios=False)
    first, members = sw.source_classes()
    n = sw.n
    weight = sw.pair_weights(members)
    cls = np.repeat(np.arange(len(first), dtype=np.int64), n)
    col = np.tile(np.arange(n, dtype=np.int64), len(first))
    codes, edges = sw.walk_pairs(first[cls], col)
    bad = _tally(codes, (DELIVER - sw.rep)[col], weight(cls, col))
    return {"undelivered": bad, "edges": edges, "sweep": sw}


def brute_force_single_paused(
    compiled: Any, ports: Sequence[tuple[str, int]] | None = None
) -> dict[str | None, dict[str, Any]]:
    """Reference for tests: per scenario (None = unpaused, 'SW:PORT'), the verifier's
    undelivered counts per kind, the scenario's own CDG edges as channel-name pairs
    and whether that graph has a cycle. Independent of :func:`sweep_single_paused`:
    :func:`hpcfabric.verify.allpairs.verify` on the flipped tables and :class:`hpcfabric.verify.lines.DecisionLines`
    walking every host pair."""
    from hpcfabric.verify.allpairs import verify

    out: dict[str | None, dict[str, Any]] = {}
    todo = pausable_ports(compiled) if ports is None else ports
    for name, paused in [(None, [])] + [(f"{s}:{p}", [(s, p)]) for s, p in todo]:
        flipped, _ = apply_paused(compiled, paused)
        rep = verify(flipped, sample=None)
        bad = {k: v for k, v in (("misdelivered", rep.misdelivered), ("dropped", rep.dropped), ("loop", rep.loops),
                                 ("punted", rep.punted), ("flood", rep.floods), ("tagged", rep.tagged)) if v}
        ref = DecisionLines(flipped)
        e, _, _ = ref.walk()
        pairs = {(channel_name(ref.eng.channel(int(x) >> 32)), channel_name(ref.eng.channel(int(x) & 0xFFFFFFFF)))
                 for x in e.tolist()}
        g = nx.DiGraph(list(pairs))
        out[name] = {"undelivered": bad, "edges": pairs, "cyclic": not nx.is_directed_acyclic_graph(g)}
    return out


