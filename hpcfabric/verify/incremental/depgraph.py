"""The dependency graph of the incremental union proof (:mod:`hpcfabric.verify.incremental.delta`), kept exact.

:class:`DepGraph` holds the channel dependency edges (packed ``state << 32 | state``, sorted) and, per
edge, how many (column, node) expansions of the union walk make it. A change gives back the edges of the
old walk's nodes below it and adds those of the nodes walked anew (:meth:`DepGraph.updated`): an edge
whose count drops to 0 is gone. Cycles (:meth:`DepGraph.cycle`): the graph is acyclic and ranked (a rank
per node growing along every edge, :func:`topo_rank`); a new edge from a lower to a higher rank cannot
close a cycle, for the others a search from its head, among ranks up to its tail's, looks for a way back.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hpcfabric.verify.graphs import LOW32, core_graph, find_cycle

__all__ = ["DepGraph", "topo_rank", "not_in", "unique", "union"]


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
    at = np.minimum(np.searchsorted(sorted_keys, keys), len(sorted_keys) - 1)
    return keys[sorted_keys[at] != keys]


class DepGraph:
    """Edges (sorted, packed), their counts, and ranks of ``n`` nodes (module docstring)."""

    def __init__(self, edges: np.ndarray, count: np.ndarray, n: int, rank: np.ndarray | None = None) -> None:
        """``rank``: ranks known to grow along every edge (the quotient's: :mod:`.quotient`), else computed."""
        self.edges, self.count, self.n = edges, count, n
        self.rank = rank if rank is not None else topo_rank(edges, n)

    def commit(self, edges: np.ndarray, count: np.ndarray, fresh: np.ndarray) -> None:
        """Take the graph :meth:`updated` made (``fresh``: its new edges)."""
        if len(fresh) and self.rank is not None and not (self.rank[fresh >> 32] < self.rank[fresh & LOW32]).all():
            self.rank = None  # ranks again when a check needs them
        self.edges, self.count = edges, count

    def updated(self, removed: Any, added: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The dependency graph after the change, exactly: (edges, their counts, edges that are new). Each edge
        counts the (column, node) expansions that make it; the old walk's nodes below the change give theirs
        back, the nodes walked anew add theirs."""
        count = self.count.copy()
        rk, rw = removed.total()
        if len(rk):
            at = np.minimum(np.searchsorted(self.edges, rk), max(len(self.edges) - 1, 0))
            if not len(self.edges) or (self.edges[at] != rk).any():  # pragma: no cover - the invariant
                raise AssertionError("the old walk below the change made an edge the base does not hold")
            count[at] -= rw
        ak, aw = added.total()
        fresh = not_in(ak, self.edges)
        if len(ak):
            known = np.isin(ak, fresh, invert=True)
            count[np.searchsorted(self.edges, ak[known])] += aw[known]
        if len(rk) and (count < 0).any():  # pragma: no cover - the invariant: below nodes' edges were counted
            raise AssertionError("dependency counts went negative: the proof base is inconsistent")
        keep = count > 0
        fw = aw[np.isin(ak, fresh)]
        kept = self.edges[keep]
        at = np.searchsorted(kept, fresh)  # fresh: sorted, none in the graph -- merged in order
        return np.insert(kept, at, fresh), np.insert(count[keep], at, fw), fresh

    def cycle(self, edges: np.ndarray, test: np.ndarray, name: Any) -> tuple[tuple[str, ...] | None, bool]:
        """A cycle of ``edges`` (sorted; a subgraph of the base's and ``test``) plus ``test``, named, or None. The
        base's ranks grow along its edges, so only an edge of ``test`` can close a cycle, and one from a lower to a
        higher rank cannot; for the others, a search from its head over ``edges`` and ``test`` among ranks up
        to its tail's. Second: was any edge searched?"""
        if not len(test):
            return None, False
        if self.rank is None:
            self.rank = topo_rank(self.edges, self.n)
            if self.rank is None:  # pragma: no cover - E itself is proven acyclic
                every = self.edges
                return find_cycle(core_graph(every >> 32, every & LOW32), name), True
        src, dst = test >> 32, test & LOW32
        bad = np.flatnonzero(self.rank[src] >= self.rank[dst])
        extra = np.sort(test)
        for i in bad.tolist():
            u, v = int(src[i]), int(dst[i])
            if self._reaches(edges, v, u, int(self.rank[u]), extra):
                every = union(edges, test)
                return find_cycle(core_graph(every >> 32, every & LOW32), name), True
        return None, bool(len(bad))

    def _reaches(self, graph: np.ndarray, start: int, goal: int, top: int, extra: np.ndarray) -> bool:
        """Does ``start`` reach ``goal`` over ``graph`` and ``extra`` (sorted packed edges) through nodes of rank
        <= ``top``?"""
        seen = {start}
        frontier = np.array([start], dtype=np.int64)
        while len(frontier):
            nxt = []
            for edges in (graph, extra):
                lo = np.searchsorted(edges, frontier << 32)
                hi = np.searchsorted(edges, (frontier + 1) << 32)
                cnt = hi - lo
                if cnt.sum():
                    idx = np.repeat(lo - np.cumsum(cnt) + cnt, cnt) + np.arange(int(cnt.sum()))
                    nxt.append(edges[idx] & LOW32)
            if not nxt:
                return False
            cand = unique(np.concatenate(nxt))
            if (cand == goal).any():
                return True
            cand = cand[self.rank[cand] <= top]
            cand = np.array([x for x in cand.tolist() if x not in seen], dtype=np.int64)
            seen.update(cand.tolist())
            frontier = cand
        return False
