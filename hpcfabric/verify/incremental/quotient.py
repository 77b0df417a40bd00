"""The incremental proof's base from the symmetry quotient: the reach of one column per orbit, mapped.

:meth:`~hpcfabric.verify.incremental.delta.ProofState.build` needs every destination column's reach and the
dependency graph with counts. Walking every column does not fit at 300k hosts (16,668 columns x ~10 M states:
~22 GB per bit set). When automorphisms commute with the decisions (:mod:`hpcfabric.verify.union.orbits`, checked
there for the base's injections from every host port), the walk of column ``c = g(r)`` is ``g`` of the walk of
``r``, node by node. :func:`quotient_base` therefore walks one column per orbit (and every probe) and keeps:

* the reach (:class:`QuotientReach`): bit ``(c, x)`` = bit ``(r, g⁻¹x)`` of the representative's row,
  XOR an explicit, sorted set of ``(column, state)`` keys a committed change flipped -- the same bits the
  dense base holds, stored per orbit;
* the dependency graph exactly: the full graph is the union of the images of the representatives' edges;
  canonicalised (each edge mapped so its tail is the smallest switch of its orbit) and summed, then every
  group element's image -- the same edges and counts the dense walk makes (:meth:`Symmetry.expand`); its
  ranks from the quotient graph (a cycle of the full graph maps to a closed walk of the quotient).

Used only when the kept generators commute and the group they make acts freely on the switches (every
orbit has the group's size: one element maps ``r`` to ``c``, and one edge of each orbit has its tail
canonical) and the quotient graph is acyclic; otherwise (small fabrics, failures in force, per-host
columns) the dense base, as before. :class:`DenseReach` is that base's reach: the bit sets and a journal.
"""

from __future__ import annotations

import itertools
import math
import time
from typing import Any

import numpy as np

from hpcfabric.verify.codes import PCP_SLOTS
from hpcfabric.verify.graphs import LOW32
from hpcfabric.verify.incremental.deltawalk import set_bits
from hpcfabric.verify.incremental.depgraph import topo_rank, unique
from hpcfabric.verify.union.orbits import reduce_columns
from hpcfabric.verify.union.pairs import cdg_verdict, checked_columns
from hpcfabric.verify.union.unions import reach_index, walk_union

__all__ = ["DenseReach", "QuotientReach", "Symmetry", "quotient_base"]

MAX_GROUP = 1 << 14  # group elements enumerated at most (300k: rotate-groups, 463)
#: every column's reach as bit rows up to this size (Table III: 2,071 x 20 KB), mapped once from the
#: representatives' (lookups as fast as the dense base's); beyond it (300k: ~22 GB) mapped at each lookup
DENSE_REACH_BYTES = 1 << 28


class DenseReach:
    """Every column's reach as a bit set over the reach index (a row per column, big-endian per byte) and a
    journal of the bytes commits changed (:meth:`mark` / :meth:`undo`)."""

    def __init__(self, bits: np.ndarray) -> None:
        self.bits = bits
        self._journal: list[tuple[np.ndarray, np.ndarray]] = []

    def has(self, c: np.ndarray, r: np.ndarray) -> np.ndarray:
        return (self.bits[c, r >> 3] >> (7 - (r & 7)).astype(np.uint8)) & 1 == 1

    def set(self, c: np.ndarray, r: np.ndarray, on: bool) -> None:
        flat = self.bits.reshape(-1)
        byte = unique(c * self.bits.shape[1] + (r >> 3))
        self._journal.append((byte, flat[byte]))  # the bytes as they were: undo() puts them back
        set_bits(self.bits, c, (r & ~7) | (7 - (r & 7)), on)

    def row(self, c: int) -> np.ndarray:
        return self.bits[c]

    @property
    def nbytes(self) -> int:
        return int(self.bits.nbytes)

    def mark(self) -> int:
        return len(self._journal)

    def undo(self, mark: int) -> None:
        flat = self.bits.reshape(-1)
        while len(self._journal) > mark:  # the commits since the mark undone, the last first
            byte, old = self._journal.pop()
            flat[byte] = old

    def forget(self) -> None:
        self._journal = []


class Symmetry:
    """Commuting generators (port maps, orders), the group they make, and per column and per switch the element
    that maps its representative to it / it to its orbit's smallest switch (module docstring)."""

    def __init__(self, ports: list[np.ndarray], orders: list[int], col_row: np.ndarray, col_exp: np.ndarray,
                 canon_exp: np.ndarray, state_base: np.ndarray) -> None:
        self.orders, self.col_row, self.col_exp, self.canon_exp = orders, col_row, col_exp, canon_exp
        self.state_base = state_base
        self.size = math.prod(orders)
        self.ports = ports
        self.lift: list[list[np.ndarray]] = []  # per generator: its 2^j-th powers on ports
        for pm, order in zip(ports, orders):
            levels = [pm.astype(np.int32)]
            while (1 << len(levels)) < order:
                levels.append(levels[-1][levels[-1]])
            self.lift.append(levels)

    @classmethod
    def of(cls, ch: Any, cols: Any, red: Any) -> tuple["Symmetry | None", str]:
        """The symmetry of the reduction ``red`` (its kept maps), or None and why it cannot serve."""
        n_ports = ch.n_states // PCP_SLOTS
        slot = np.arange(ch.n_states) % PCP_SLOTS
        ports, smaps, cmaps, orders = [], [], [], []
        for cmap, P, smap in red.maps:
            pm = np.arange(n_ports, dtype=np.int64)
            has = P[::PCP_SLOTS] >= 0
            pm[has] = P[::PCP_SLOTS][has] // PCP_SLOTS
            ok = P >= 0
            if not np.array_equal(P[ok], pm[np.flatnonzero(ok) // PCP_SLOTS] * PCP_SLOTS + slot[ok]) or \
                    len(np.unique(pm)) != n_ports:
                return None, "a state map is no permutation of ports keeping the PCP"
            order, cur = 1, pm
            while not np.array_equal(cur, np.arange(n_ports)):
                cur, order = pm[cur], order + 1
                if order > MAX_GROUP:
                    return None, "a generator's order is too large"
            ports.append(pm)
            smaps.append(smap)
            cmaps.append(cmap)
            orders.append(order)
        for i, j in itertools.combinations(range(len(ports)), 2):
            if not np.array_equal(ports[i][ports[j]], ports[j][ports[i]]):
                return None, "the kept generators do not commute"
        size = math.prod(orders)
        if size > MAX_GROUP:
            return None, "the group is too large to enumerate"
        elems = list(itertools.product(*(range(o) for o in orders)))
        n_sw, nh = len(ch.names), cols.n_host_columns
        sw_img = np.empty((size, n_sw), dtype=np.int64)
        col_img = np.empty((size, nh), dtype=np.int64)
        for e, exp in enumerate(elems):  # each element from one with a digit less (mixed radix)
            if e == 0:
                sw_img[0], col_img[0] = np.arange(n_sw), np.arange(nh)
                continue
            i = max(k for k, d in enumerate(exp) if d)
            prev = e - _stride(orders, i)  # the element with digit i one less
            sw_img[e], col_img[e] = smaps[i][sw_img[prev]], cmaps[i][col_img[prev]]
        if size > 1 and (sw_img[1:] == np.arange(n_sw)).any():
            return None, "the group does not act freely on the switches"
        exps = np.array(elems, dtype=np.int64).reshape(size, len(orders))
        canon_exp = exps[np.argmin(sw_img, axis=0)]
        reps = np.asarray(red.walk, dtype=np.int64)
        col_row = np.full(len(cols.want), -1, dtype=np.int64)
        col_exp = np.zeros((len(cols.want), len(orders)), dtype=np.int64)
        got = col_img[:, reps]  # element x representative -> column
        if len(unique(got.reshape(-1))) != nh or got.size != nh:
            return None, "the group does not act freely on the columns"
        col_row[got.reshape(-1)] = np.tile(np.arange(len(reps)), size)
        col_exp[got.reshape(-1)] = np.repeat(exps, len(reps), axis=0)
        col_row[nh:] = len(reps) + np.arange(len(cols.want) - nh)  # probes: walked each
        return cls(ports, orders, col_row, col_exp, canon_exp, ch.state_base), ""

    def apply(self, x: np.ndarray, exp: np.ndarray) -> np.ndarray:
        """States ``x`` mapped by the elements ``exp`` (one row of exponents per state)."""
        q, s = x // PCP_SLOTS, x % PCP_SLOTS
        for i, levels in enumerate(self.lift):
            k = exp[:, i] % self.orders[i]
            for j, lv in enumerate(levels):
                sel = np.flatnonzero((k >> j) & 1)
                if len(sel):
                    q[sel] = lv[q[sel]]
        return q * PCP_SLOTS + s

    def back(self, c: np.ndarray, x: np.ndarray) -> np.ndarray:
        """``g⁻¹x`` per node, ``g`` the element that maps column ``c``'s representative to ``c``."""
        return self.apply(x.copy(), -self.col_exp[c])

    def canonical(self, x: np.ndarray) -> np.ndarray:
        """Each state mapped to the one at the smallest switch of its switch's orbit."""
        sw = np.searchsorted(self.state_base, x, side="right") - 1
        return self.apply(x.copy(), self.canon_exp[sw])

    def canon_edges(self, edges: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Packed edges and counts of the representatives' walks as the full graph's edges whose tail is
        canonical, counts summed (one edge per orbit of edges: the group acts freely)."""
        src, dst = edges >> 32, edges & LOW32
        sw = np.searchsorted(self.state_base, src, side="right") - 1
        k = self.canon_exp[sw]
        key = self.apply(src.copy(), k) << 32 | self.apply(dst.copy(), k)
        u, inv = np.unique(key, return_inverse=True)
        return u, np.bincount(inv.reshape(-1), weights=counts, minlength=len(u)).astype(np.int64)

    def expand(self, edges: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Every group element's image of the canonical ``edges`` (distinct: the action is free), sorted, with
        their counts."""
        parts, src, dst = [], edges >> 32, edges & LOW32
        n = len(edges)

        def rec(i: int, s: np.ndarray, d: np.ndarray) -> None:
            if i == len(self.orders):
                parts.append(s << 32 | d)
                return
            pm = self.ports[i]
            for k in range(self.orders[i]):
                rec(i + 1, s, d)
                if k + 1 < self.orders[i]:
                    s = pm[s // PCP_SLOTS] * PCP_SLOTS + s % PCP_SLOTS
                    d = pm[d // PCP_SLOTS] * PCP_SLOTS + d % PCP_SLOTS

        rec(0, src, dst)
        full = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
        order = np.argsort(full, kind="stable")
        return full[order], np.tile(counts, len(parts))[order] if n else np.zeros(0, dtype=np.int64)


def _stride(orders: list[int], i: int) -> int:
    """Index step of digit ``i`` in :func:`itertools.product` order (the last digit fastest)."""
    return math.prod(orders[i + 1:])


class QuotientReach:
    """Each column's reach as its representative's row mapped by the symmetry, XOR ``flips`` (sorted keys
    ``column * len(reach) + reach index`` a commit changed): the bits :class:`DenseReach` holds."""

    def __init__(self, rows: np.ndarray, sym: Symmetry, reach: np.ndarray, rs_of: np.ndarray) -> None:
        self.rows, self.sym, self.reach_states, self.rs_of = rows, sym, reach, rs_of
        self.n = len(reach)
        self.flips = np.zeros(0, dtype=np.int64)
        self._marks: list[np.ndarray] = []

    def _base(self, c: np.ndarray, r: np.ndarray) -> np.ndarray:
        y = self.rs_of[self.sym.back(c, self.reach_states[r])]
        out = np.zeros(len(c), dtype=bool)
        ok = y >= 0
        yy = y[ok]
        out[ok] = (self.rows[self.sym.col_row[c[ok]], yy >> 3] >> (7 - (yy & 7)).astype(np.uint8)) & 1 == 1
        return out

    def has(self, c: np.ndarray, r: np.ndarray) -> np.ndarray:
        out = self._base(c, r)
        if len(self.flips):
            keys = c * self.n + r
            at = np.minimum(np.searchsorted(self.flips, keys), len(self.flips) - 1)
            out ^= self.flips[at] == keys
        return out

    def set(self, c: np.ndarray, r: np.ndarray, on: bool) -> None:
        keys = unique(c * self.n + r)
        c, r = keys // self.n, keys % self.n
        toggle = keys[self.has(c, r) != on]
        if len(toggle):
            self.flips = np.setxor1d(self.flips, toggle, assume_unique=True)

    def row(self, c: int) -> np.ndarray:
        r = np.arange(self.n, dtype=np.int64)
        return np.packbits(self.has(np.full(self.n, c, dtype=np.int64), r))

    def dense(self) -> DenseReach:
        """Every column's row, mapped (no flips yet): one permutation of the reach index per group element."""
        sym = self.sym
        out = np.zeros((len(sym.col_row), self.rows.shape[1]), dtype=np.uint8)
        elems, inv = np.unique(sym.col_exp, axis=0, return_inverse=True)
        inv = inv.reshape(-1)
        for e, exp in enumerate(elems):
            cols = np.flatnonzero(inv == e)
            y = self.rs_of[sym.apply(self.reach_states.copy(), np.broadcast_to(-exp, (self.n, len(exp))))]
            ok = y >= 0
            for c in cols.tolist():
                bits = np.zeros(self.n, dtype=np.uint8)
                bits[ok] = np.unpackbits(self.rows[sym.col_row[c]])[y[ok]]
                out[c] = np.packbits(bits)
        return DenseReach(out)

    def mark(self) -> np.ndarray:
        return self.flips  # never changed in place: a commit makes a new array

    def undo(self, mark: np.ndarray) -> None:
        self.flips = mark

    def forget(self) -> None:
        pass

    @property
    def nbytes(self) -> int:
        return int(self.rows.nbytes + self.flips.nbytes + self.sym.col_exp.nbytes
                   + sum(lv.nbytes for levels in self.sym.lift for lv in levels))


def quotient_base(inputs: Any, timings: dict[str, float], max_failures: int = 20) -> tuple[Any, dict[str, Any]]:
    """(reach, walk with the full graph's edges and counts, its rank, the cdg verdict) from one column per orbit,
    or (None, why) when the quotient cannot serve (module docstring)."""
    ch, cols = inputs.ch, inputs.cols
    t1 = time.perf_counter()
    red = reduce_columns(ch, cols, *cols.starts(checked_columns(cols), probes=False))
    timings["symmetry"] = time.perf_counter() - t1
    if red is None or not red.kept:
        return None, {"used": False, "why": "no automorphism commutes with the decisions",
                      "dropped": {} if red is None else dict(red.dropped)}
    sym, why = Symmetry.of(ch, cols, red)
    info: dict[str, Any] = {"used": False, "kept": list(red.kept), "dropped": dict(red.dropped)}
    if sym is None:
        return None, {**info, "why": why}
    t1 = time.perf_counter()
    nh, n = cols.n_host_columns, len(cols.want)
    sel = np.concatenate([red.walk, np.arange(nh, n, dtype=np.int64)])
    pos = np.full(n, -1, dtype=np.int64)
    pos[sel] = np.arange(len(sel))
    weight = np.concatenate([np.full(len(red.walk), sym.size, dtype=np.int64), np.ones(n - nh, dtype=np.int64)])
    start_col, start_state = cols.starts(red.walk)
    walk = walk_union(ch, cols.cls[:, sel], cols.want[sel], cols.probe[sel], pos[start_col], start_state,
                      loops=False, record=True, weight=weight, max_witnesses=max_failures)
    timings["walk"] = time.perf_counter() - t1
    t1 = time.perf_counter()
    canon, counts = sym.canon_edges(walk.edges, walk.counts)
    qsrc, qdst = sym.canonical(canon >> 32), sym.canonical(canon & LOW32)
    quotient = unique(qsrc << 32 | qdst)
    cdg = cdg_verdict(ch, quotient)
    timings["quotient cdg"] = time.perf_counter() - t1
    if cdg["cycle"] is not None:
        return None, {**info, "why": "the quotient dependency graph has a cycle"}
    t1 = time.perf_counter()
    qrank = topo_rank(quotient, ch.n_states)
    walk.edges, walk.counts = sym.expand(canon, counts)
    rank = None if qrank is None else qrank[sym.canonical(np.arange(ch.n_states, dtype=np.int64))]
    timings["expand"] = time.perf_counter() - t1
    reach, rs_of = reach_index(ch)
    reached: Any = QuotientReach(walk.reached, sym, reach, rs_of)
    if len(cols.want) * walk.reached.shape[1] <= DENSE_REACH_BYTES:
        reached = reached.dense()
    cdg["channels"] *= sym.size  # orbits of channels, each the group's size (free)
    info.update({"used": True, "columns_walked": int(len(sel)), "group": sym.size,
                 "reach": type(reached).__name__, "reach_mb": round(reached.nbytes / 1e6, 1)})
    return (reached, walk, rank, cdg), info
