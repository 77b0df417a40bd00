"""The dependency graph of the incremental union proof (:mod:`hpcfabric.verify.incremental.delta`), kept exact.

:class:`DepGraph` holds the channel dependency edges (packed ``state << 32 | state``, sorted) and, per
edge, how many (column, node) expansions of the union walk make it. A change gives back the edges of the
old walk's nodes below it and adds those of the nodes walked anew (:meth:`DepGraph.updated`): an edge
whose count drops to 0 is gone. The edges and counts of the base stay as built (immutable arrays); what
changes since is an :class:`Overlay` -- the base edges whose count moved, the edges not in the base -- so a
check costs what its change touches, not the ~26 M edges of a 300k graph (merged into the base arrays when
the overlay grows past an eighth of them: amortised). Cycles (:meth:`DepGraph.cycle`): the graph is acyclic
and ranked (a rank per node growing along every edge, :func:`topo_rank`); a new edge from a lower to a higher
rank cannot close a cycle, for the others a search from its head, among ranks up to its tail's, looks for a
way back. The ranks are kept until a committed edge goes against them, then replaced by every node's
longest-path depth (what :func:`topo_rank` of the committed graph gives), which each commit keeps up to date
from the heads of the edges it adds and takes away (a search over the predecessors and successors there).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from hpcfabric.verify.graphs import LOW32, core_graph, find_cycle

__all__ = ["DepGraph", "Change", "Overlay", "topo_rank", "not_in", "unique", "union"]


def topo_rank(edges: np.ndarray, n: int) -> np.ndarray | None:
    """A rank per node (``0 .. n-1``) that grows along every packed edge (sorted): the longest path to it from a
    node without incoming edges; None if the edges have a cycle. Level by level, each edge looked at once."""
    rank = np.zeros(n, dtype=np.int64)
    if not len(edges):
        return rank
    src, dst = edges >> 32, edges & LOW32
    indeg = np.bincount(dst, minlength=n)
    frontier = unique(src[indeg[src] == 0])
    level = 0
    while len(frontier):
        level += 1
        lo, hi = np.searchsorted(src, frontier, "left"), np.searchsorted(src, frontier, "right")
        cnt = hi - lo
        at = np.repeat(lo - np.cumsum(cnt) + cnt, cnt) + np.arange(int(cnt.sum()))
        d, k = np.unique(dst[at], return_counts=True)
        indeg[d] -= k
        rank[d] = level
        frontier = d[indeg[d] == 0]
    return None if indeg.any() else rank


def unique(keys: np.ndarray) -> np.ndarray:
    """``np.unique(keys)`` of a 1-D array (sorted, distinct), by a sort: numpy 2.4's hash-based ``np.unique`` (taken
    when no index is asked for) is 20-40 times slower on int64 keys of a proof's size."""
    k = np.sort(keys)
    return k[np.concatenate(([True], k[1:] != k[:-1]))] if len(k) > 1 else k


def union(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``np.union1d`` by :func:`unique`."""
    return unique(np.concatenate([a, b]))


def not_in(keys: np.ndarray, sorted_keys: np.ndarray) -> np.ndarray:
    """The elements of ``keys`` not in ``sorted_keys`` (sorted, unique): a search per key, no sort of the big one."""
    if not len(keys) or not len(sorted_keys):
        return keys
    return keys[~member(keys, sorted_keys)]


class Overlay(NamedTuple):
    """What a graph holds beyond its base arrays: the base edges whose count moved (positions, sorted; their counts
    now, 0: gone) and the edges not in the base (sorted, counts > 0)."""

    at: np.ndarray
    cnt: np.ndarray
    plus: np.ndarray
    plus_cnt: np.ndarray

    @property
    def size(self) -> int:
        return len(self.at) + len(self.plus)


_NONE = np.zeros(0, dtype=np.int64)
EMPTY = Overlay(_NONE, _NONE, _NONE, _NONE)


@dataclass
class Change:
    """A checked change of the graph (:meth:`DepGraph.updated`): the graph after it (``overlay`` over the same base),
    its new edges (``fresh``) and the edges it takes away (``gone``), all sorted."""

    overlay: Overlay
    fresh: np.ndarray
    gone: np.ndarray
    base: np.ndarray  # the base the overlay is over
    acyclic: bool = False  # the graph after it proven acyclic (:meth:`DepGraph.cycle`): depths kept incrementally


def merged(at: np.ndarray, val: np.ndarray, new_at: np.ndarray, new_val: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted keys ``at`` with values ``val`` updated by ``new_at``/``new_val`` (the new value wins)."""
    k = np.concatenate([at, new_at])
    v = np.concatenate([val, new_val])
    order = np.argsort(k, kind="stable")
    k, v = k[order], v[order]
    last = np.concatenate((k[1:] != k[:-1], [True])) if len(k) else np.zeros(0, dtype=bool)
    return k[last], v[last]


def ranges(sorted_keys: np.ndarray, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index of the node in ``nodes``, position in ``sorted_keys``) of every packed key whose high half is a node."""
    lo = np.searchsorted(sorted_keys, nodes << 32)
    hi = np.searchsorted(sorted_keys, (nodes + 1) << 32)
    cnt = hi - lo
    total = int(cnt.sum())
    if not total:
        return _NONE, _NONE
    which = np.repeat(np.arange(len(nodes)), cnt)
    return which, np.repeat(lo - np.cumsum(cnt) + cnt, cnt) + np.arange(total)


def member(keys: np.ndarray, sorted_keys: np.ndarray) -> np.ndarray:
    """Per key: is it in ``sorted_keys``?"""
    if not len(sorted_keys) or not len(keys):
        return np.zeros(len(keys), dtype=bool)
    return sorted_keys[np.minimum(np.searchsorted(sorted_keys, keys), len(sorted_keys) - 1)] == keys


def swap(edges: np.ndarray) -> np.ndarray:
    """Packed edges reversed (``dst << 32 | src``)."""
    return (edges & LOW32) << 32 | (edges >> 32)


class View:
    """The graph of an overlay over a :class:`DepGraph`'s base: presence, successors, predecessors."""

    def __init__(self, g: "DepGraph", ov: Overlay) -> None:
        self.g, self.ov = g, ov
        self.dead = g.base[ov.at[ov.cnt == 0]]  # base edges gone (sorted: positions and base are)
        self.plus_rev = np.sort(swap(ov.plus))

    def has(self, keys: np.ndarray) -> np.ndarray:
        return self.g.locate(keys, self.ov)[1] > 0

    def successors(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(index in ``nodes``, successor) of every edge out of ``nodes``."""
        base, plus = self.g.base, self.ov.plus
        which, at = ranges(base, nodes)
        keys = base[at]
        ok = ~member(keys, self.dead)
        w2, at2 = ranges(plus, nodes)
        return np.concatenate([which[ok], w2]), np.concatenate([keys[ok] & LOW32, plus[at2] & LOW32])

    def predecessors(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(index in ``nodes``, predecessor) of every edge into ``nodes``."""
        rev = self.g.rev
        which, at = ranges(rev, nodes)
        src = rev[at] & LOW32
        ok = ~member(src << 32 | nodes[which], self.dead)
        w2, at2 = ranges(self.plus_rev, nodes)
        return np.concatenate([which[ok], w2]), np.concatenate([src[ok], self.plus_rev[at2] & LOW32])


class DepGraph:
    """Edges (sorted, packed) and their counts -- base arrays and an :class:`Overlay` --, every node's longest-path
    depth, and the ranks of the checks, of ``n`` nodes (module docstring)."""

    #: the overlay is merged into the base arrays when it holds more than 1/COMPACT of them and MIN_OVERLAY edges
    COMPACT, MIN_OVERLAY = 8, 1 << 16

    def __init__(self, edges: np.ndarray, count: np.ndarray, n: int, rank: np.ndarray | None = None) -> None:
        """``rank``: ranks known to grow along every edge (the quotient's: :mod:`.quotient`), else the depths."""
        self.n = n
        self._rebase(edges, count)
        self.depth = topo_rank(edges, n)  # longest path to each node; None: the graph has a cycle
        self.rank = rank if rank is not None else self.depth
        self._cache: tuple[np.ndarray, Overlay, np.ndarray, np.ndarray] | None = None  # materialise's last

    def _rebase(self, edges: np.ndarray, count: np.ndarray) -> None:
        self.base, self.base_count, self.overlay = edges, count, EMPTY
        self.rev = np.sort(swap(edges))  # by head: the predecessors

    # -- the graph --------------------------------------------------------------
    @property
    def edges(self) -> np.ndarray:
        """Every edge now (sorted; materialised: O(edges))."""
        return self.materialise(self.overlay)[0]

    @property
    def count(self) -> np.ndarray:
        return self.materialise(self.overlay)[1]

    @property
    def size(self) -> int:
        """How many edges now."""
        ov = self.overlay
        return len(self.base) - int((ov.cnt == 0).sum()) + len(ov.plus)

    def materialise(self, ov: Overlay) -> tuple[np.ndarray, np.ndarray]:
        """(edges, counts) of the graph of overlay ``ov`` as sorted arrays."""
        if self._cache is not None and self._cache[0] is self.base and self._cache[1] is ov:
            return self._cache[2], self._cache[3]
        count = self.base_count.copy()
        count[ov.at] = ov.cnt
        keep = count > 0
        edges, count = self.base[keep], count[keep]
        at = np.searchsorted(edges, ov.plus)
        edges, count = np.insert(edges, at, ov.plus), np.insert(count, at, ov.plus_cnt)
        self._cache = (self.base, ov, edges, count)
        return edges, count

    def locate(self, keys: np.ndarray, ov: Overlay) -> tuple[np.ndarray, np.ndarray]:
        """Per key (sorted): (its position in the base arrays, -1 none; its count in the graph of ``ov``, 0 none)."""
        base = self.base
        now = np.zeros(len(keys), dtype=np.int64)
        pos = np.full(len(keys), -1, dtype=np.int64)
        if len(base) and len(keys):
            p = np.minimum(np.searchsorted(base, keys), len(base) - 1)
            inb = base[p] == keys
            pos[inb] = p[inb]
            now[inb] = self.base_count[p[inb]]
        inb = pos >= 0
        if len(ov.at) and inb.any():
            idx = np.flatnonzero(inb)
            j = np.minimum(np.searchsorted(ov.at, pos[idx]), len(ov.at) - 1)
            hit = ov.at[j] == pos[idx]
            now[idx[hit]] = ov.cnt[j[hit]]
        if len(ov.plus) and not inb.all():
            idx = np.flatnonzero(~inb)
            j = np.minimum(np.searchsorted(ov.plus, keys[idx]), len(ov.plus) - 1)
            hit = ov.plus[j] == keys[idx]
            now[idx[hit]] = ov.plus_cnt[j[hit]]
        return pos, now

    def missing(self, keys: np.ndarray, change: Change) -> np.ndarray:
        """The ``keys`` (sorted) the graph after ``change`` does not hold."""
        return keys[self.locate(keys, change.overlay)[1] == 0]

    # -- a change ---------------------------------------------------------------
    def updated(self, removed: Any, added: Any) -> Change:
        """The dependency graph after the change, exactly, as an overlay (:class:`Change`). Each edge counts the
        (column, node) expansions that make it; the old walk's nodes below the change give theirs back, the
        nodes walked anew add theirs. Costs what the change touches (searches in the base arrays)."""
        rk, rw = removed.total()
        ak, aw = added.total()
        keys = union(rk, ak)
        delta = np.zeros(len(keys), dtype=np.int64)
        delta[np.searchsorted(keys, ak)] += aw
        delta[np.searchsorted(keys, rk)] -= rw
        ov = self.overlay
        pos, now = self.locate(keys, ov)
        if len(rk) and (now[np.searchsorted(keys, rk)] <= 0).any():  # pragma: no cover - the invariant
            raise AssertionError("the old walk below the change made an edge the base does not hold")
        new = now + delta
        if len(rk) and (new < 0).any():  # pragma: no cover - the invariant: below nodes' edges were counted
            raise AssertionError("dependency counts went negative: the proof base is inconsistent")
        inb = pos >= 0
        at, cnt = merged(ov.at, ov.cnt, pos[inb], new[inb])
        moved = cnt != self.base_count[at]  # back to the base's count: no overlay entry
        plus, plus_cnt = merged(ov.plus, ov.plus_cnt, keys[~inb], new[~inb])
        there = plus_cnt > 0
        return Change(Overlay(at[moved], cnt[moved], plus[there], plus_cnt[there]),
                      keys[(now == 0) & (new > 0)], keys[(now > 0) & (new == 0)], self.base)

    def commit(self, change: Change) -> None:
        """Take the graph :meth:`updated` made; the depths follow it, the ranks too if a new edge goes against
        them."""
        if change.base is not self.base:  # pragma: no cover - commit follows its check
            raise ValueError("the change was checked against another base")
        fresh = change.fresh
        self.depth = self._deepen(change) if self.depth is not None and change.acyclic else None
        self.overlay = change.overlay
        if len(fresh) and self.rank is not None and not (self.rank[fresh >> 32] < self.rank[fresh & LOW32]).all():
            self.rank = self.depth  # None (the graph has a cycle): ranks again when a check needs them
        if self.overlay.size > max(self.MIN_OVERLAY, len(self.base) // self.COMPACT):  # merged: amortised
            self._rebase(*self.materialise(self.overlay))

    def _deepen(self, change: Change) -> np.ndarray:
        """The longest-path depths after ``change`` (its graph acyclic): recomputed from the heads of the edges it
        adds or takes away, forward while a depth moves (level by level)."""
        view = View(self, change.overlay)
        depth = self.depth.copy()
        frontier = unique(np.concatenate([change.fresh & LOW32, change.gone & LOW32]))
        while len(frontier):
            which, src = view.predecessors(frontier)
            got = np.zeros(len(frontier), dtype=np.int64)
            np.maximum.at(got, which, depth[src] + 1)
            moved = got != depth[frontier]
            depth[frontier[moved]] = got[moved]
            frontier = unique(view.successors(frontier[moved])[1])
        return depth

    def snapshot(self) -> tuple[Any, ...]:
        return self.base, self.base_count, self.rev, self.overlay, self.depth, self.rank

    def restore(self, snap: tuple[Any, ...]) -> None:
        self.base, self.base_count, self.rev, self.overlay, self.depth, self.rank = snap

    # -- cycles -----------------------------------------------------------------
    def cycle(self, change: Change, test: np.ndarray, name: Any) -> tuple[tuple[str, ...] | None, bool]:
        """A cycle of the graph after ``change`` (a subgraph of the base's and ``test``) plus ``test``, named, or
        None. The base's ranks grow along its edges, so only an edge of ``test`` can close a cycle, and one from a
        lower to a higher rank cannot; for the others, a search from its head over the graph and ``test`` among
        ranks up to its tail's. Second: was any edge searched? Sets ``change.acyclic``."""
        change.acyclic = False
        if not len(test):
            change.acyclic = self.depth is not None
            return None, False
        if self.rank is None:
            if self.depth is None:  # a graph with a cycle was committed: from scratch
                self.depth = topo_rank(self.edges, self.n)
            self.rank = self.depth
            if self.rank is None:  # pragma: no cover - E itself is proven acyclic
                every = self.edges
                return find_cycle(core_graph(every >> 32, every & LOW32), name), True
        src, dst = test >> 32, test & LOW32
        bad = np.flatnonzero(self.rank[src] >= self.rank[dst])
        extra = np.sort(test)
        view = View(self, change.overlay)
        for i in bad.tolist():
            u, v = int(src[i]), int(dst[i])
            if self._reaches(view, v, u, int(self.rank[u]), extra):
                every = union(self.materialise(change.overlay)[0], test)
                return find_cycle(core_graph(every >> 32, every & LOW32), name), True
        change.acyclic = self.depth is not None
        return None, bool(len(bad))

    def _reaches(self, view: View, start: int, goal: int, top: int, extra: np.ndarray) -> bool:
        """Does ``start`` reach ``goal`` over the graph of ``view`` and ``extra`` (sorted packed edges) through
        nodes of rank <= ``top``?"""
        seen = {start}
        frontier = np.array([start], dtype=np.int64)
        while len(frontier):
            _, out = view.successors(frontier)
            _, at = ranges(extra, frontier)
            cand = unique(np.concatenate([out, extra[at] & LOW32]))
            if not len(cand):
                return False
            if (cand == goal).any():
                return True
            cand = cand[self.rank[cand] <= top]
            cand = np.array([x for x in cand.tolist() if x not in seen], dtype=np.int64)
            seen.update(cand.tolist())
            frontier = cand
        return False
