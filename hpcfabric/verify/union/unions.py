"""Per-destination union walks: every walk any pause state allows, for every destination at once.

Nodes are (destination column, state), a state being a frame's arrival channel at a switch
(:class:`hpcfabric.verify.union.choices.Choices`). From a node both choices of its cell (unpaused,
paused) are followed, so the walks are those of frames whose switches, hop by hop, each take
either decision: any set of paused ports, changing while the frame travels.

The search runs breadth first from the hosts' injections over a block of columns at a time
and expands every node once (a dense visited map per block: no per-level sorting of repeated
nodes). Every final outcome is compared with the column's own: delivered to its host
untagged, or, for a probe, dropped. Dependencies between fabric channels (an arrival that
leaves on another fabric port) of host traffic are collected for the channel dependency graph
(probes, which every switch must drop, are left out, as in :mod:`hpcfabric.verify.oracle.cdg`).

Loops: a walk that never ends revisits a node, so the node graph of its column has a cycle.
After its first hop a host frame only arrives on fabric ports, so such a cycle is also a cycle
of the dependency graph: with ``loops=False`` the caller skips the search for host columns and
runs it (``loops=True``) only when the dependency graph is cyclic. Probe columns are always
searched (their edges are not in the dependency graph). The search peels the node graph
(:func:`hpcfabric.verify.graphs.core_graph`'s rule, vectorised); nodes left lie on or between
cycles and count as ``loop``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hpcfabric.verify.union.choices import SLOT_BITS, Choices, egress_offset
from hpcfabric.verify.codes import DEAD, DROP, PCP_SLOTS, outcome_kind

__all__ = ["UnionWalk", "walk_union", "describe_walk", "BLOCK_CELLS"]

BLOCK_CELLS = 1 << 24  # (column, state) cells of one block's visited map
RESOLVE_CELLS = 1 << 22  # decision cells resolved to next states at a time
NO_LINE = -(1 << 30)  # next state without a decided line (never reached by a walk that the work list saw)


@dataclass
class UnionWalk:
    """What the union walk found (see :func:`walk_union`)."""

    nodes: int  # distinct (column, state) nodes expanded
    depth: int  # breadth-first levels: switches on the longest shortest walk
    bad: dict[str, int]  # failing (column, state, choice) outcomes per kind, host columns
    bad_probe: dict[str, int]  # the same for probe columns
    bad_columns: int  # columns with a failing outcome
    witnesses: list[list[tuple[int, int, bool]]]  # walks to a failure: (column, state, paused choice) per hop
    witness_kinds: list[str]
    edges: np.ndarray  # channel dependencies: state << 32 | state, fabric arrivals only, unique
    paused_hops: int = 0  # expansions whose paused decision differs from the unpaused one
    timings: dict[str, float] = field(default_factory=dict)
    #: ``record=True``: per column (in the walk's order), the reached states as a bit set over the reachable
    #: states (``np.packbits`` of a row of ``len(reach)`` flags; :func:`reach_index` numbers them)
    reached: np.ndarray | None = None
    #: ``record=True``: per edge, the (column, node) expansions that make it
    counts: np.ndarray | None = None


class _Tally:
    def __init__(self, max_witnesses: int, weight: np.ndarray | None = None) -> None:
        self.weight = weight
        self.bad: dict[str, int] = {}
        self.bad_probe: dict[str, int] = {}
        self.columns: set[int] = set()
        self.max_witnesses = max_witnesses
        self.witnesses: list[list[tuple[int, int, bool]]] = []
        self.kinds: list[str] = []

    def add(self, kinds: np.ndarray, cols: np.ndarray, is_probe: np.ndarray) -> None:
        w = np.ones(len(cols), dtype=np.int64) if self.weight is None else self.weight[cols]
        for tally, sel in ((self.bad, ~is_probe), (self.bad_probe, is_probe)):
            for kind in np.unique(kinds[sel]).tolist():
                tally[str(kind)] = tally.get(str(kind), 0) + int(w[sel & (kinds == kind)].sum())
        self.columns.update(np.unique(cols).tolist())

    def n_columns(self) -> int:
        cols = np.array(sorted(self.columns), dtype=np.int64)
        return len(cols) if self.weight is None else int(self.weight[cols].sum())

    def room(self) -> int:
        return max(0, self.max_witnesses - len(self.witnesses))


def walk_union(
    ch: Choices,
    col_cls: np.ndarray,
    want: np.ndarray,
    probe: np.ndarray,
    start_col: np.ndarray,
    start_state: np.ndarray,
    *,
    loops: bool = True,
    max_witnesses: int = 5,
    block_cells: int = BLOCK_CELLS,
    weight: np.ndarray | None = None,
    record: bool = False,
    components: tuple[np.ndarray, np.ndarray] | None = None,
) -> UnionWalk:
    """Walk every (column, start state) through both choices of every cell (module docstring).

    ``col_cls``: switch index x column -> destination class at that switch; ``want``: per column the
    correct final code (``DELIVER - host`` or ``DROP`` for a probe); ``probe``: per column, True for
    probes (a dead port counts as dropped for them); ``loops``: search host columns for loops too;
    ``weight``: per column, how many columns its failures stand for (symmetry orbits; default 1);
    ``record``: keep every column's reached states (:attr:`UnionWalk.reached`, the incremental proof's base);
    ``components``: (per switch, per column) connected component of the surviving fabric -- a frame at a
    switch cut off from its destination's is walked (its dependencies count) but not undelivered.
    """
    reach, rs_of = reach_index(ch)
    sw_of, port_of, _ = ch.decode(reach)
    fabric_arrival = np.zeros(len(reach), dtype=bool)
    for s in ch.names:
        first = int(ch.state_base[ch.sw_index[s]])
        for p in ch.fabric.fabric_ports(s):
            at = rs_of[first + p * PCP_SLOTS: first + (p + 1) * PCP_SLOTS]
            fabric_arrival[at[at >= 0]] = True
    cell_base = ch.line_off[ch.state_line[reach]]
    ctx = _Context(ch, reach, rs_of, sw_of, port_of, fabric_arrival, cell_base, col_cls, want, probe)
    ctx.components = components
    tally = _Tally(max_witnesses, weight)
    order = np.argsort(start_col, kind="stable")
    start_col, start_state = start_col[order], start_state[order]
    width = max(1, block_cells // max(len(reach), 1))
    edge_parts: list[np.ndarray] = []
    nodes = depth = paused = 0
    reached = np.zeros((len(want), (len(reach) + 7) // 8), dtype=np.uint8) if record else None
    for lo_col, hi_col, check in _blocks(probe, width, loops):
        a, b = np.searchsorted(start_col, [lo_col, hi_col])
        got = ctx.block(lo_col, hi_col, start_col[a:b], start_state[a:b], check, tally, reached)
        nodes += got[0]
        depth = max(depth, got[1])
        paused += got[2]
        edge_parts.append(got[3])
        if len(edge_parts) > 16 and not record:
            edge_parts = [np.unique(np.concatenate(edge_parts))]
    counts = None
    if record:
        total = Counter()
        for e, w in zip(edge_parts, ctx.weights):
            total.add(e, w)
        edges, counts = total.total()
    else:
        edges = np.unique(np.concatenate(edge_parts)) if edge_parts else np.zeros(0, dtype=np.int64)
    return UnionWalk(nodes, depth, tally.bad, tally.bad_probe, tally.n_columns(), tally.witnesses, tally.kinds,
                     edges, paused, reached=reached, counts=counts)


class Counter:
    """Keys with multiplicities, added in parts and summed (``total``)."""

    def __init__(self) -> None:
        self.keys: list[np.ndarray] = []
        self.weights: list[np.ndarray] = []

    def add(self, keys: np.ndarray, weights: np.ndarray | None = None) -> None:
        self.keys.append(keys)
        self.weights.append(np.ones(len(keys), dtype=np.int64) if weights is None else weights)
        if len(self.keys) > 64:
            k, w = self.total()
            self.keys, self.weights = [k], [w]

    def total(self) -> tuple[np.ndarray, np.ndarray]:
        """(distinct keys sorted, their summed weights)."""
        if not self.keys:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        u, inv = np.unique(np.concatenate(self.keys), return_inverse=True)
        return u, np.bincount(inv.reshape(-1), weights=np.concatenate(self.weights), minlength=len(u)).astype(np.int64)


def reach_index(ch: Choices) -> tuple[np.ndarray, np.ndarray]:
    """(the states with a decided line, in order; per state its position there or -1): the numbering of
    :attr:`UnionWalk.reached`."""
    reach = np.flatnonzero(ch.state_line >= 0)
    rs_of = np.full(ch.n_states, -1, dtype=np.int64)
    rs_of[reach] = np.arange(len(reach))
    return reach, rs_of


def _blocks(probe: np.ndarray, width: int, loops: bool) -> list[tuple[int, int, bool]]:
    """(first column, end column, search for loops) per block; probe columns in blocks of their own."""
    out = []
    is_probe = probe.astype(bool)
    start = 0
    n = len(probe)
    while start < n:
        kind = bool(is_probe[start])
        end = start + 1
        while end < n and end - start < width and bool(is_probe[end]) == kind:
            end += 1
        out.append((start, end, loops or kind))
        start = end
    return out


class _Context:
    """The arrays one block's search reads (see :func:`walk_union`)."""

    def __init__(self, ch: Choices, reach: np.ndarray, rs_of: np.ndarray, sw_of: np.ndarray, port_of: np.ndarray,
                 fabric_arrival: np.ndarray, cell_base: np.ndarray, col_cls: np.ndarray, want: np.ndarray,
                 probe: np.ndarray) -> None:
        self.ch, self.reach, self.rs_of, self.sw_of, self.port_of = ch, reach, rs_of, sw_of, port_of
        self.fabric_arrival, self.cell_base, self.col_cls, self.want, self.probe = (
            fabric_arrival, cell_base, col_cls, want, probe.astype(bool))
        self.out_width = int(ch.max_ports.max(initial=0) + 1) * PCP_SLOTS
        # arrivals where an output back to the ingress port by number is dropped here (switches that also
        # send back by OFPP_IN_PORT decided that in the engine)
        self.back_ok = fabric_arrival & ~ch.in_port_out[sw_of]
        self.next_base, self.next_alt = (self._resolve(codes) for codes in (ch.base, ch.alt))
        self.has_alt = ch.alt != ch.base
        self.weights: list[np.ndarray] = []  # record: per block, the counts of its edges
        self.components: tuple[np.ndarray, np.ndarray] | None = None  # walk_union(components=)

    def _resolve(self, codes: np.ndarray) -> np.ndarray:
        """Per cell: the next reached-state index (>= 0), a final code, or NO_LINE (a state nobody decided);
        int32 (state indices and final codes fit), RESOLVE_CELLS cells at a time."""
        out32 = np.empty(len(codes), dtype=np.int32)
        off = self.ch.line_off
        for c0 in range(0, len(codes), RESOLVE_CELLS):
            c1 = min(len(codes), c0 + RESOLVE_CELLS)
            res = codes[c0:c1].astype(np.int64)
            cell_sw = self.ch.line_switch[np.searchsorted(off, np.arange(c0, c1), side="right") - 1]
            out = res >= 0
            res[out] = self.ch.egress(cell_sw[out], res[out])
            st = res >= 0
            nxt = self.rs_of[res[st]]
            res[st] = np.where(nxt >= 0, nxt, NO_LINE)
            out32[c0:c1] = res
        return out32

    def block(self, lo: int, hi: int, cols: np.ndarray, states: np.ndarray, check: bool,
              tally: _Tally, reached: np.ndarray | None = None) -> tuple[int, int, int, np.ndarray]:
        """Search columns ``lo`` .. ``hi`` from the starts given: (nodes, depth, paused expansions, edges)."""
        ch, nr = self.ch, len(self.reach)
        stamp = np.full((hi - lo) * nr, -1, dtype=np.int32)  # visited: >= 0; deduplicates a level by scatter
        rs = self.rs_of[states]
        if (rs < 0).any():  # pragma: no cover - the work list decides every host port's line
            raise AssertionError("a host port without a decided line")
        key = _first_seen(stamp, (cols - lo) * nr + rs)
        keys, parents, alts = [key], [np.full(len(key), -1, dtype=np.int64)], [np.zeros(len(key), dtype=bool)]
        base = 0  # index of the frontier's first node in the block's node list
        links: list[tuple[np.ndarray, np.ndarray]] = []  # node graph (node index -> key), for the loop search
        deps: list[np.ndarray] = []  # (arrival, egress port and PCP slot) of host traffic, as keys (sparse)
        counter = Counter() if reached is not None else None
        paused = level = 0
        col, r = key // nr + lo, key % nr
        host_block = not self.probe[lo]
        while len(key):
            sw = self.sw_of[r]
            cell = self.cell_base[r] + self.col_cls[sw, col]
            differs = np.flatnonzero(self.has_alt[cell])
            paused += len(differs)
            cand_col, cand_r, cand_par, cand_alt = [], [], [], []
            for which, i in ((False, None), (True, differs)):
                ci = cell if i is None else cell[i]
                ri = r if i is None else r[i]
                code = (ch.base if i is None else ch.alt)[ci]
                res = (self.next_base if i is None else self.next_alt)[ci]
                back = self.back_ok[ri] & ((code >> SLOT_BITS) == self.port_of[ri]) & (code >= 0)
                res = np.where(back, DROP, res)  # OpenFlow never sends a frame back out of its ingress port by number
                final = res < 0
                if final.any():
                    fi = np.flatnonzero(final)
                    if (res[fi] == NO_LINE).any():  # pragma: no cover - the work list decides what a frame reaches
                        raise AssertionError("a reachable state has no decided line")
                    self._finals(fi if i is None else i[fi], res[fi], col, keys, parents, alts, base, which, tally,
                                 sw)
                    go = np.flatnonzero(~final)
                    res, ri, code = res[go], ri[go], code[go]
                    gi = go if i is None else i[go]
                else:
                    gi = np.arange(len(key)) if i is None else i
                if host_block:  # host traffic's dependencies (as the CDG check)
                    fab = self.fabric_arrival[ri]
                    dep = dependency_keys(ri[fab], code[fab], self.out_width)
                    if counter is not None:  # how many (column, node) make each dependency
                        counter.add(dep)
                    deps.append(np.unique(dep))
                    if len(deps) > 64:
                        deps = [np.unique(np.concatenate(deps))]
                cand_col.append(col[gi])
                cand_r.append(res)
                cand_par.append(base + gi)
                cand_alt.append(np.full(len(gi), which))
            ncol, nrs = np.concatenate(cand_col), np.concatenate(cand_r)
            nk = (ncol - lo) * nr + nrs
            if check:
                links.append((np.concatenate(cand_par), nk))
            fresh = np.flatnonzero(stamp[nk] < 0)
            first = fresh[_first_seen(stamp, nk[fresh], index=True)]
            base += len(key)
            key, col, r = nk[first], ncol[first], nrs[first]
            keys.append(key)
            parents.append(np.concatenate(cand_par)[first])
            alts.append(np.concatenate(cand_alt)[first])
            level += 1 if len(key) else 0
        n_nodes = base
        if reached is not None:
            reached[lo:hi] = np.packbits((stamp >= 0).reshape(hi - lo, nr), axis=1)
        if check and links:
            self._loops(lo, links, keys, parents, alts, tally)
        at = np.unique(np.concatenate(deps)) if deps else np.zeros(0, dtype=np.int64)
        if counter is not None:
            at, weight = counter.total()
            self.weights.append(weight)
        arrival, slot = self.reach[at // self.out_width], at % self.out_width
        nxt = ch.egress(self.sw_of[at // self.out_width], (slot // PCP_SLOTS) << SLOT_BITS | slot % PCP_SLOTS)
        return n_nodes, level + 1 if n_nodes else 0, paused, arrival << 32 | nxt

    def _finals(self, idx: np.ndarray, got: np.ndarray, col: np.ndarray, keys: list, parents: list, alts: list,
                base: int, paused: bool, tally: _Tally, sw: np.ndarray) -> None:
        """Compare final outcomes of frontier nodes ``idx`` with their columns' own; tally the wrong ones."""
        c = col[idx]
        got = np.where(self.probe[c] & (got == DEAD), DROP, got)
        wrong = got != self.want[c]
        if self.components is not None:  # cut off from its destination: no pair to deliver
            sw_comp, col_comp = self.components
            wrong &= self.probe[c] | (sw_comp[sw[idx]] == col_comp[c])
        if not wrong.any():
            return
        wi = idx[wrong]
        kinds = _kinds(got[wrong])
        tally.add(kinds, c[wrong], self.probe[c[wrong]])
        for j, kind in list(zip(wi.tolist(), kinds.tolist()))[: tally.room()]:
            tally.witnesses.append(_trace(keys, parents, alts, base + j, self.reach, len(self.reach), col[j]))
            tally.kinds.append(kind + (" (paused choice)" if paused else ""))

    def _loops(self, lo: int, links: list, keys: list, parents: list, alts: list, tally: _Tally) -> None:
        """Nodes of the block's node graph that lie on or between cycles: loops."""
        all_keys = np.concatenate(keys)
        order = np.argsort(all_keys)
        src = np.concatenate([s for s, _ in links])
        dst = order[np.searchsorted(all_keys, np.concatenate([k for _, k in links]), sorter=order)]
        alive = np.ones(len(src), dtype=bool)
        while alive.any():
            s, d = src[alive], dst[alive]
            drop = ~np.isin(s, d) | ~np.isin(d, s)
            if not drop.any():
                break
            alive[np.flatnonzero(alive)[drop]] = False
        if not alive.any():
            return
        nr = len(self.reach)
        on = np.unique(src[alive])
        col = all_keys[on] // nr + lo
        is_probe = self.probe[col]
        tally.add(np.full(len(on), "loop"), col, is_probe)
        for j, c in list(zip(on.tolist(), col.tolist()))[: tally.room()]:
            tally.witnesses.append(_trace(keys, parents, alts, j, self.reach, nr, c))
            tally.kinds.append("loop")


def dependency_keys(arrival: np.ndarray, code: np.ndarray, out_width: int) -> np.ndarray:
    """Keys ``arrival * out_width + egress slot`` of (arrival state, egress port and PCP slot) in int64.

    The states come in as int32 and numpy keeps int32 times a Python int in int32: at fb-4d-300k conditional
    (11.5 M states x 567 slots) the product passed 2^31, wrapped and named wrong dependencies."""
    return arrival.astype(np.int64) * out_width + egress_offset(code)


def _first_seen(stamp: np.ndarray, keys: np.ndarray, index: bool = False) -> np.ndarray:
    """Mark unvisited ``keys`` visited in ``stamp`` (-1: unvisited); return them once each (or, with
    ``index``, the position of one occurrence of each) -- a scatter instead of a sort."""
    at = np.arange(len(keys), dtype=np.int32)
    stamp[keys] = at
    one = np.flatnonzero(stamp[keys] == at)
    stamp[keys] = 0
    return one if index else keys[one]


def _kinds(codes: np.ndarray) -> np.ndarray:
    """Outcome kind per wrong final code (a delivery that is wrong is a misdelivery)."""
    u, inv = np.unique(codes, return_inverse=True)
    return np.array([outcome_kind(int(c), None) for c in u.tolist()])[inv.reshape(-1)]


def _trace(keys: list, parents: list, alts: list, index: int, reach: np.ndarray, nr: int,
           col: int) -> list[tuple[int, int, bool]]:
    """The walk to node ``index`` of a block: (column, state, reached by a paused choice) per hop."""
    all_keys, all_par, all_alt = np.concatenate(keys), np.concatenate(parents), np.concatenate(alts)
    out: list[tuple[int, int, bool]] = []
    while index >= 0:
        out.append((int(col), int(reach[int(all_keys[index]) % nr]), bool(all_alt[index])))
        index = int(all_par[index])
    return out[::-1]


def describe_walk(ch: Choices, walk: list[tuple[int, int, bool]], columns: list[str]) -> dict[str, Any]:
    """A witness walk as names: the destination and the channels a frame arrives on, hop by hop."""
    col = walk[0][0]
    hops = []
    for _, st, alt in walk:
        sw, port, pcp = ch.decode(np.array([st]))
        name = ch.names[int(sw[0])]
        peer = ch.fabric.peer(name, int(port[0]))
        where = f"{name}:{int(port[0])}" + ("" if int(pcp[0]) < 0 else f"@{int(pcp[0])}")
        if peer is not None and peer.is_host:
            where = f"{peer.node} -> {where}"
        hops.append(where + (" (after a paused choice)" if alt else ""))
    return {"destination": columns[col], "walk": hops}
