"""Decision lines of a fabric with one row per ingress port: the unpaused decisions and a scenario's changes.

:class:`DecisionLines` runs the engine with one row per (switch, ingress port, arrival PCP), so
a row *is* the channel a frame arrived on, and stores one decision line per group of rows whose
entries are equal but for ``in_port`` (:func:`row_signature`; Table III: ~14 lines per switch
instead of 31 ports x 3 PCPs). :meth:`DecisionLines.scenario` re-decides, for one paused port,
only the destinations that meet its PORT_STATE entry; :meth:`DecisionLines.walk` walks every host
pair through the lines (changed lines patched in) and collects the channel dependencies: the
brute-force CDG oracle (:mod:`hpcfabric.verify.oracle.cdg`).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from hpcfabric.rules.flows import OFPP_IN_PORT, Output
from hpcfabric.verify.codes import DELIVER, SINK, outcome_kind
from hpcfabric.verify.engine import Destinations, Engine, Row, data_flows, data_relevant, entry_key

__all__ = ["DecisionLines", "row_signature"]


def row_signature(row: Row, cache: dict[Any, tuple]) -> tuple:
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


class DecisionLines:
    """The fast engine with per-port rows and the decisions of the unpaused
    fabric. Rows of one switch with equal signatures (entries equal but for
    ``in_port``) share one decision line, so the matrix holds unique lines
    only (Table III: ~14 per switch instead of 31 ports x 3 PCPs).

    A scenario (port P of switch S paused) re-decides only what can change:
    the destinations that, in some row of S, meet P's PORT_STATE entry; then
    walks only the destinations whose decisions changed."""

    def __init__(self, compiled: Any) -> None:
        self.compiled = compiled
        eng = self.eng = Engine(compiled, per_port=True)
        if eng.scalar_rows:
            raise ValueError("the CDG check does not model source-dependent (eth_src) rules")
        self.dst = Destinations(eng.host_macs)
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

    def ensure_base(self) -> None:
        """Base (unpaused) decisions for every row and the row indexes."""
        eng = self.eng
        start = len(self.li)
        while len(self.li) < len(eng.rows):  # in waves: the rows created while deciding one make the next
            wave = range(len(self.li), len(eng.rows))
            sigs = [row_signature(eng.rows[r], self._fkeys) for r in wave]
            first: dict[tuple, int] = {}
            for r, sig in zip(wave, sigs):
                if sig not in self._sig_id:
                    first.setdefault(sig, r)
            for sig, line in zip(first, eng.decide_rows([eng.rows[r] for r in first.values()], self.dst)):
                self._sig_id[sig] = len(self.uniq)
                self.uniq.append(line)
                self._U = None
            self.li.extend(self._sig_id[sig] for sig in sigs)
            self.sigs.extend(sigs)
        self.index_rows(start)

    def index_rows(self, start: int) -> None:
        """Index the rows from ``start`` on: which are fabric rows, which rows each switch has."""
        eng = self.eng
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

    def ups(self, rows: Sequence[int]) -> list[np.ndarray]:
        """Per row the PORT_STATE port (metadata) each destination meets (-1: none), cached per line."""
        todo = {self.li[r]: r for r in rows if self.li[r] not in self._ups}
        if todo:
            ps: list = []
            self.eng.decide_rows([self.eng.rows[r] for r in todo.values()], self.dst, ps)
            self._ups.update((u, p.astype(np.int32)) for u, p in zip(todo, ps))
        return [self._ups[self.li[r]] for r in rows]

    def scenario(self, switch: str, port: int, flows: Sequence[Any]) -> dict[int, np.ndarray]:
        """Lines that change when ``switch`` runs ``flows`` (``port`` paused): row -> line."""
        eng = self.eng
        relevant = [f for f in data_flows(flows) if data_relevant(f)]
        eng.relevant[switch] = relevant  # rows created on the way see the scenario's flows
        changed: dict[int, np.ndarray] = {}
        memo: dict[tuple, np.ndarray] = {}
        known = len(self.li)
        try:
            rows = list(self.rows_at.get(switch, ()))
            hit = [(r, np.flatnonzero(ups == port)) for r, ups in zip(rows, self.ups(rows))]
            hit = [(r, cols) for r, cols in hit if cols.size]
            todo: dict[tuple, tuple[int, np.ndarray]] = {}  # equal base signatures: equal with the same entry swapped
            for r, cols in hit:
                todo.setdefault(self.sigs[r], (r, cols))
            order = list(todo.items())
            run: list[tuple[tuple, Row]] = []  # consecutive rows with the same columns: decided together, in order
            for i, (sig, (r, cols)) in enumerate(order):
                row = eng.rows[r]
                run.append((sig, Row(row.switch, row.ports, row.src_mac, row.scalar, row.pcp).build(relevant, eng.attrs)))
                if i + 1 == len(order) or not np.array_equal(order[i + 1][1][1], cols):
                    got = eng.decide_rows([t for _, t in run], Destinations(self.dst.macs[cols]))
                    memo.update(zip([k for k, _ in run], got))
                    run = []
            for r, cols in hit:
                code = memo[self.sigs[r]]
                base = self.uniq[self.li[r]]
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
                r += 1
        finally:
            eng.relevant[switch] = self.base_relevant[switch]
            for r in range(known, len(eng.rows)):
                if eng.rows[r].switch == switch:
                    eng.rows[r].build(self.base_relevant[switch], eng.attrs)
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
        dst = Destinations(self.dst.macs[cols])
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
                    kind = outcome_kind(int(codes[j, k]), d)
                    bad[kind] = bad.get(kind, 0) + len(srcs)
                    if len(examples) < 3:
                        examples.append({"src": eng.hosts[srcs[0]].name, "dst": eng.hosts[d].name, "kind": kind})
        edges = np.unique(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)
        return edges, {"undelivered": bad, "examples": examples}, cols

