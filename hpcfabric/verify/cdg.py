"""Channel dependency graph (CDG) of compiled tables: deadlock freedom per class of service.

A *channel* is (switch, egress port, CoS): the lossless queue a frame waits in
before crossing a link, one per VLAN PCP value when classes of service are on
(``untagged`` otherwise). A frame that arrives on channel c1 and leaves on c2
holds c1 while it waits for c2: a *dependency* c1 -> c2. With link-level flow
control (PAUSE/PFC) a cycle of dependencies can deadlock; no cycle, no
deadlock (Dally and Seitz). Deadlock freedom therefore needs an acyclic CDG.

What is built
-------------
Dependencies come from walking every host pair through the compiled tables
(the fast engine of :mod:`hpcfabric.verify.allpairs`, one decision row per ingress
port and arrival PCP, so a row *is* the channel the frame arrived on), for
every *scenario*: no port paused, and each fabric port paused alone (its
PORT_STATE entry flipped with :func:`hpcfabric.rules.compiler.port_state_flow`, as
the controller does on a PAUSE). Conditional routing mixes scenarios over
time (a port pauses, resumes, another pauses while frames of the first
scenario are still in the queues), so the check that matters is on the
**union** of every scenario's dependencies; each scenario's own graph is a
subgraph of the union (acyclic whenever the union is, and checked one by one
when it is not). Each scenario is also checked for delivery: every pair
delivered, untagged at the host, no loop.

The report names a cycle as channels ``switch:port@PCP`` in dependency order
(the first channel repeats at the end). Acyclicity is reported for the whole
graph (the deadlock criterion) and per class of service (the subgraph of one
PCP; a cycle can only cross classes if some hop lowers the PCP).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Sequence

import networkx as nx
import numpy as np

from hpcfabric.rules.flows import OFPP_IN_PORT, TABLE_PORT_STATE, Output, RuleClass
from hpcfabric.verify.allpairs import (
    DELIVER,
    SINK,
    UNTAGGED,
    _Dst,
    _Engine,
    _kind,
    _relevant,
    _Row,
    apply_paused,
    data_flows,
)

@dataclass(frozen=True)
class CdgReport:
    """Deadlock-freedom check of one compiled fabric (``as_dict`` is JSON-ready)."""

    fabric: str
    routing: str
    cos: str | None
    cos_levels: int
    scenarios: int  # scenarios walked (the unpaused fabric + one per paused port)
    paused_ports: tuple[str, ...]  # the ports paused one at a time
    channels: int  # channels that carry a dependency
    dependencies: int  # edges of the union graph
    acyclic: bool  # the union of every scenario's dependencies
    cycle: tuple[str, ...] | None  # one cycle of the union, as channels
    per_cos: dict[str, tuple[str, ...] | None]  # class -> a cycle inside that class (None: acyclic)
    classes_used: tuple[str, ...]  # classes (PCP values, or 'untagged') carrying traffic
    scenario_failures: tuple[dict[str, Any], ...]  # scenarios with undelivered pairs or a cycle of their own
    failed_scenarios: int
    pairs_per_scenario: int
    seconds: float
    cyclic_scenarios: int = 0
    notes: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        """Acyclic union CDG and every pair delivered in every scenario."""
        return self.acyclic and self.failed_scenarios == 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "fabric": self.fabric,
            "routing": self.routing,
            "cos": self.cos,
            "cos_levels": self.cos_levels,
            "ok": self.ok,
            "cdg_acyclic": self.acyclic,
            "cdg_cycle": list(self.cycle) if self.cycle else None,
            "cdg_per_cos": {k: (list(v) if v else None) for k, v in self.per_cos.items()},
            "cos_classes_used": list(self.classes_used),
            "channels": self.channels,
            "dependencies": self.dependencies,
            "scenarios": self.scenarios,
            "paused_ports": len(self.paused_ports),
            "pairs_per_scenario": self.pairs_per_scenario,
            "failed_scenarios": self.failed_scenarios,
            "cyclic_scenarios": self.cyclic_scenarios,
            "scenario_failures": [dict(f) for f in self.scenario_failures],
            "seconds": round(self.seconds, 3),
            "notes": list(self.notes),
        }


def pausable_ports(compiled: Any) -> list[tuple[str, int]]:
    """(switch, port) of every PORT_STATE entry (the ports a PAUSE can switch)."""
    out = []
    for name, table in compiled.tables.items():
        for f in table.flows:
            if f.table == TABLE_PORT_STATE and f.rule_class == RuleClass.PORT_STATE and f.match.metadata is not None:
                out.append((name, f.match.metadata[0]))
    return sorted(set(out))


def channel_name(ch: tuple[str, int, int]) -> str:
    sw, port, pcp = ch
    return f"{sw}:{port}@{'untagged' if pcp == UNTAGGED else pcp}"


def _cos_label(pcp: int) -> str:
    return "untagged" if pcp == UNTAGGED else str(pcp)


def entry_key(f: Any, cache: dict[int, tuple]) -> tuple:
    """What an entry does and matches, ``in_port`` left out (cached by identity in ``cache``)."""
    got = cache.get(id(f))
    if got is None or got[0] is not f:
        key = (f.table, f.priority, replace(f.match, in_port=None), f.actions, f.goto, f.write_metadata)
        got = cache[id(f)] = (f, key)
    return got[1]


def row_signature(row: _Row, cache: dict[Any, tuple]) -> tuple:
    """Rows of one switch with equal signatures decide alike (their entries
    differ at most in ``in_port``, which each row's entries all satisfy)."""
    key: list[Any] = [row.switch, row.pcp]
    for t in sorted(row.entries):
        lst = row.entries[t]
        got = cache.get(("table", id(lst)))  # rows often share their entry lists (the engine's rows)
        if got is None or got[0] is not lst:
            in_port = any(isinstance(a, Output) and a.port == OFPP_IN_PORT for f in lst for a in f.actions)
            got = cache[("table", id(lst))] = (lst, tuple(entry_key(f, cache) for f in lst), in_port)
        key.append(got[1])
        if got[2]:
            key.append(row.rep)
    return tuple(key)


class _Sweep:
    """The fast engine with per-port rows and the decisions of the unpaused
    fabric. Rows of one switch with equal signatures (entries equal but for
    ``in_port``) share one decision line, so the matrix holds unique lines
    only (Table III: ~14 per switch instead of 31 ports x 3 PCPs).

    A scenario (port P of switch S paused) re-decides only what can change:
    the destinations that, in some row of S, meet P's PORT_STATE entry; then
    walks only the destinations whose decisions changed."""

    def __init__(self, compiled: Any) -> None:
        self.compiled = compiled
        eng = self.eng = _Engine(compiled, per_port=True)
        if eng.scalar_rows:
            raise ValueError("the CDG check does not model source-dependent (eth_src) rules")
        self.dst = _Dst(eng.host_macs)
        self.n = self.dst.n
        self.base_relevant = dict(eng.relevant)
        self.li: list[int] = []  # row -> unique line
        self.sigs: list[tuple] = []
        self.uniq: list[np.ndarray] = []  # unique decision lines
        self._ups: dict[int, np.ndarray] = {}  # unique line -> the PORT_STATE port each destination meets (lazy)
        self._sig_id: dict[tuple, int] = {}
        self._U: np.ndarray | None = None
        self.fabric_row = np.zeros(0, dtype=bool)
        self.rows_at: dict[str, list[int]] = {}
        self._fkeys: dict[int, tuple] = {}
        self.ensure_base()

    def signature(self, row: _Row) -> tuple:
        """Rows of one switch with equal signatures decide alike (their entries
        differ at most in ``in_port``, which each row's entries all satisfy)."""
        return row_signature(row, self._fkeys)

    def ensure_base(self) -> None:
        """Base (unpaused) decisions for every row and the row indexes."""
        eng = self.eng
        start = len(self.li)
        while len(self.li) < len(eng.rows):
            row = eng.rows[len(self.li)]
            sig = self.signature(row)
            u = self._sig_id.get(sig)
            if u is None:
                line = eng.decide(row, self.dst)
                u = self._sig_id[sig] = len(self.uniq)
                self.uniq.append(line)
                self._U = None
            self.li.append(u)
            self.sigs.append(sig)
        if start < len(self.li):
            new = [eng.channel(r) is not None for r in range(start, len(self.li))]
            self.fabric_row = np.concatenate([self.fabric_row, np.array(new, dtype=bool)])
            for r in range(start, len(self.li)):
                self.rows_at.setdefault(eng.rows[r].switch, []).append(r)

    def unique_matrix(self) -> np.ndarray:
        """The unique lines stacked, plus a last all-SINK line."""
        if self._U is None or self._U.shape[0] != len(self.uniq) + 1:
            U = np.empty((len(self.uniq) + 1, self.n), dtype=np.int32)
            for i, line in enumerate(self.uniq):
                U[i] = line
            U[-1] = SINK
            self.uniq = list(U[:-1])  # views: one copy in memory
            self._U = U
        return self._U

    def ups(self, r: int) -> np.ndarray:
        """The PORT_STATE port (metadata) each destination meets in row ``r`` (-1: none), cached per line."""
        u = self.li[r]
        got = self._ups.get(u)
        if got is None:
            ps: list = []
            self.eng.decide(self.eng.rows[r], self.dst, ps)
            got = self._ups[u] = ps[0].astype(np.int32)
        return got

    def _check_row(self, row: _Row, flows: list | None, cols: np.ndarray | None) -> None:
        """Hook run on every row a scenario decides anew (``flows``: the scenario's rules, None for a
        row created on the way; ``cols``: the columns re-decided). Subclasses raise to abort."""

    def scenario(self, switch: str, port: int, flows: Sequence[Any]) -> dict[int, np.ndarray]:
        """Lines that change when ``switch`` runs ``flows`` (``port`` paused): row -> line."""
        eng = self.eng
        relevant = [f for f in data_flows(flows) if _relevant(f)]
        eng.relevant[switch] = relevant  # rows created on the way see the scenario's flows
        changed: dict[int, np.ndarray] = {}
        memo: dict[tuple, np.ndarray] = {}
        known = len(self.li)
        try:
            for r in list(self.rows_at.get(switch, ())):
                u = self.li[r]
                cols = np.flatnonzero(self.ups(r) == port)
                if not cols.size:
                    continue
                code = memo.get(self.sigs[r])  # equal base signatures: equal with the same entry swapped
                if code is None:
                    row = eng.rows[r]
                    tmp = _Row(row.switch, row.ports, row.src_mac, row.scalar, row.pcp).build(relevant, eng._attrs)
                    code = memo[self.sigs[r]] = eng.decide(tmp, _Dst(self.dst.macs[cols]))
                    self._check_row(row, relevant, cols)
                base = self.uniq[u]
                if (code != base[cols]).any():
                    line = base.copy()
                    line[cols] = code
                    changed[r] = line
            # rows created on the way: those of `switch` decided with the scenario's flows
            r = known
            while r < len(eng.rows):
                row = eng.rows[r]
                if row.switch == switch:
                    changed[r] = eng.decide(row, self.dst)
                    self._check_row(row, None, None)
                r += 1
        finally:
            eng.relevant[switch] = self.base_relevant[switch]
            for r in range(known, len(eng.rows)):
                if eng.rows[r].switch == switch:
                    eng.rows[r].build(self.base_relevant[switch], eng._attrs)
        self.ensure_base()
        return {r: line for r, line in changed.items() if not np.array_equal(line, self.uniq[self.li[r]])}

    def walk(
        self, changed: dict[int, np.ndarray] | None = None, only_changed: bool = True
    ) -> tuple[np.ndarray, dict[str, Any], np.ndarray]:
        """Every host pair through the decisions, ``changed`` lines patched in
        (and then, with ``only_changed``, only the destinations they change):
        the dependency edges (row pairs packed as ``r1 << 32 | r2``), a
        forwarding summary, and the destination columns walked."""
        eng = self.eng
        U = self.unique_matrix()
        li = np.array(self.li + [U.shape[0] - 1], dtype=np.int64)  # the sink row -> the SINK line
        if changed:
            rows = list(changed)
            if only_changed:
                cols = np.flatnonzero(np.any([changed[r] != self.uniq[self.li[r]] for r in rows], axis=0))
            else:
                cols = np.arange(self.n)
            m = np.concatenate([U[:, cols], np.stack([changed[r][cols] for r in rows])])
            li[rows] = np.arange(U.shape[0], U.shape[0] + len(rows))
        else:
            cols = np.arange(self.n)
            m = U
        dst = _Dst(self.dst.macs[cols])
        n = len(cols)
        parts: list[np.ndarray] = []
        size = [0]
        fabric_row = np.concatenate([self.fabric_row, [False]])

        def on_step(cur: np.ndarray, code: np.ndarray, col: np.ndarray) -> None:
            keep = (code >= 0) & fabric_row[cur]
            if keep.any():
                e = np.unique(cur[keep].astype(np.int64) << 32 | code[keep].astype(np.int64))
                parts.append(e)
                size[0] += len(e)
                if size[0] > 4_000_000:  # keep memory bounded on big fabrics
                    merged = np.unique(np.concatenate(parts))
                    parts[:] = [merged]
                    size[0] = len(merged)

        by_line: dict[tuple[str, int], list[int]] = {}
        for h, host in enumerate(eng.hosts):
            r = eng.first_row(host)
            by_line.setdefault((host.switch, int(li[r])), []).append(h)
        classes = [(eng.first_row(eng.hosts[mem[0]]), np.array(mem)) for mem in by_line.values()]
        want = DELIVER - cols.astype(np.int64)
        bad: dict[str, int] = {}
        examples: list[dict[str, Any]] = []
        for c0, nb, codes, _hops in eng.walk(m, dst, classes, on_step, line_of=li):
            codes = codes.reshape(nb, n).astype(np.int64)
            wrong_any = codes != want
            for j in np.flatnonzero(wrong_any.any(axis=1)):
                members = classes[c0 + int(j)][1]
                for k in np.flatnonzero(wrong_any[j]):
                    d = int(cols[k])
                    srcs = [int(x) for x in members if int(x) != d]
                    if not srcs:
                        continue
                    kind = _kind(int(codes[j, k]), d)
                    bad[kind] = bad.get(kind, 0) + len(srcs)
                    if len(examples) < 3:
                        examples.append({"src": eng.hosts[srcs[0]].name, "dst": eng.hosts[d].name, "kind": kind})
        edges = np.unique(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)
        return edges, {"undelivered": bad, "examples": examples}, cols


def _graph(edges: Iterable[int]) -> nx.DiGraph:
    g = nx.DiGraph()
    mask = (1 << 32) - 1
    g.add_edges_from((int(e) >> 32, int(e) & mask) for e in edges)
    return g


def _cycle(sweep: _Sweep, g: nx.DiGraph) -> tuple[str, ...] | None:
    try:
        cyc = nx.find_cycle(g)
    except nx.NetworkXNoCycle:
        return None
    nodes = [u for u, _ in cyc] + [cyc[0][0]]
    return tuple(channel_name(sweep.eng.channel(r)) for r in nodes)  # type: ignore[arg-type]


def check_deadlock_freedom(
    compiled: Any,
    scenarios: str | Sequence[tuple[str, int]] = "single",
    *,
    max_failures: int = 20,
) -> CdgReport:
    """Build the CDG of ``compiled`` over ``scenarios`` and check it (see the module docstring).

    Parameters
    ----------
    scenarios : 'single', 'none' or a list of (switch, port)
        'single': the unpaused fabric and every port with a PORT_STATE entry
        paused alone; 'none': the unpaused fabric only; a list: the unpaused
        fabric and each listed port paused alone (a sample).
    """
    t0 = time.perf_counter()
    if scenarios == "single":
        ports = pausable_ports(compiled)
    elif scenarios == "none":
        ports = []
    elif isinstance(scenarios, str):
        raise ValueError(f"scenarios must be 'single', 'none' or a list of (switch, port), not {scenarios!r}")
    else:
        ports = list(scenarios)
    sweep = _Sweep(compiled)
    n_hosts = sweep.n
    union: set[int] = set()
    scen: list[tuple[str, dict[int, np.ndarray]]] = []  # paused port, the decision lines it changes
    failures: list[dict[str, Any]] = []
    failed = 0
    notes = []
    base_edges, summary, _cols = sweep.walk()
    union.update(base_edges.tolist())
    if summary["undelivered"]:
        failed += 1
        failures.append({"paused": None, **summary})
    ignored = 0
    walked = 1
    for sw, port in ports:
        flipped, applied = apply_paused(compiled, [(sw, port)])
        if not applied:
            ignored += 1
            continue
        walked += 1
        changed = sweep.scenario(sw, port, flipped.tables[sw].flows)
        scen.append((f"{sw}:{port}", changed))
        if not changed:
            continue
        edges, summary, _cols = sweep.walk(changed)
        union.update(edges.tolist())
        if summary["undelivered"]:
            failed += 1
            if len(failures) < max_failures:
                failures.append({"paused": f"{sw}:{port}", **summary})
    if ignored:
        notes.append(f"{ignored} listed ports have no PORT_STATE entry (nothing to pause)")
    g = _graph(union)
    cycle = _cycle(sweep, g)
    per_cos: dict[str, tuple[str, ...] | None] = {}
    pcp_of = {r: sweep.eng.channel(r)[2] for r in g.nodes}  # type: ignore[index]
    classes = sorted(set(pcp_of.values()))
    for k in classes:
        sub = g.subgraph([r for r, p in pcp_of.items() if p == k])
        per_cos[_cos_label(k)] = _cycle(sweep, sub)  # type: ignore[arg-type]
    cyclic = 0
    if cycle is not None:  # the union is cyclic: which scenarios are cyclic on their own? (walked again in full)
        for name, changed in [("none", {})] + scen:
            edges = base_edges if not changed else sweep.walk(changed, only_changed=False)[0]
            c = _cycle(sweep, _graph(edges.tolist()))
            if c is not None:
                cyclic += 1
                if len(failures) < max_failures:
                    failures.append({"paused": None if name == "none" else name, "cycle": list(c)})
    else:
        notes.append("every scenario's graph is a subgraph of the acyclic union: all acyclic")
    return CdgReport(
        fabric=compiled.fabric.name,
        routing=compiled.routing,
        cos=getattr(compiled, "cos", None),
        cos_levels=getattr(compiled, "cos_levels", 0),
        scenarios=walked,
        paused_ports=tuple(name for name, _ in scen),
        channels=g.number_of_nodes(),
        dependencies=g.number_of_edges(),
        acyclic=cycle is None,
        cycle=cycle,
        per_cos=per_cos,
        classes_used=tuple(_cos_label(k) for k in classes),
        scenario_failures=tuple(failures),
        failed_scenarios=failed,
        pairs_per_scenario=n_hosts * (n_hosts - 1),
        seconds=time.perf_counter() - t0,
        cyclic_scenarios=cyclic,
        notes=tuple(notes),
    )


def minimum_cos_levels(
    fabric: Any, plan: Any, routing: str, scheme: str, *, scenarios: str | Sequence[tuple[str, int]] = "single",
    max_levels: int = 8,
) -> tuple[int | None, dict[int, CdgReport]]:
    """Smallest ``cos_levels`` for which the union CDG under ``scheme`` is acyclic
    (None if none up to ``max_levels``), and the report of every level tried."""
    from hpcfabric.rules.compiler import compile_fabric

    reports: dict[int, CdgReport] = {}
    for levels in range(1, max_levels + 1):
        compiled = compile_fabric(fabric, plan, routing=routing, cos=scheme, cos_levels=levels)
        rep = reports[levels] = check_deadlock_freedom(compiled, scenarios)
        if rep.acyclic:
            return levels, reports
    return None, reports


__all__ = ["CdgReport", "check_deadlock_freedom", "minimum_cos_levels", "pausable_ports", "channel_name"]
