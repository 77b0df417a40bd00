"""The incremental dependency graph (:mod:`hpcfabric.verify.incremental.depgraph`) stays exact through commits.

Random changes (counts given back and added, edges going and coming, some closing a cycle) applied to a
:class:`DepGraph` -- an overlay over its base arrays, merged into them now and then -- and to a plain dict of
counts: after every change the graph, its new edges, the edges a test set adds, the cycle verdict (the same
named cycle as a search over the whole graph), whether an edge was searched (the ranks as the array-copying
graph kept them), and after every commit the longest-path depths (:func:`topo_rank` of the whole graph) agree.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from hpcfabric.verify.graphs import LOW32, core_graph, find_cycle
from hpcfabric.verify.incremental.depgraph import DepGraph, topo_rank, union
from hpcfabric.verify.union.unions import Counter


def packed(pairs) -> np.ndarray:
    return np.array(sorted({u << 32 | v for u, v in pairs}), dtype=np.int64)


def arrays(counts: dict[int, int]) -> tuple[np.ndarray, np.ndarray]:
    keys = sorted(k for k, c in counts.items() if c > 0)
    return np.array(keys, dtype=np.int64), np.array([counts[k] for k in keys], dtype=np.int64)


def whole_cycle(counts: dict[int, int], test: np.ndarray):
    every = union(arrays(counts)[0], test)
    return find_cycle(core_graph(every >> 32, every & LOW32), str)


class Reference:
    """The graph as a dict of counts, ranked as the array-copying graph was: ranks kept until a committed new edge
    goes against them, then :func:`topo_rank` of the whole graph at the next check."""

    def __init__(self, counts: dict[int, int], n: int, rank: np.ndarray | None) -> None:
        self.counts, self.n, self.rank = dict(counts), n, rank

    def check(self, new: dict[int, int], test: np.ndarray):
        if not len(test):
            return None, False
        if self.rank is None:
            self.rank = topo_rank(arrays(self.counts)[0], self.n)
            if self.rank is None:
                return whole_cycle(self.counts, np.zeros(0, dtype=np.int64)), True
        cyc = whole_cycle(new, test)
        bad = self.rank[test >> 32] >= self.rank[test & LOW32]
        return cyc, bool(bad.any())

    def commit(self, new: dict[int, int], fresh: np.ndarray) -> None:
        if len(fresh) and self.rank is not None and not (self.rank[fresh >> 32] < self.rank[fresh & LOW32]).all():
            self.rank = None
        self.counts = new


def random_change(rng: random.Random, counts: dict[int, int], n: int, order: list[int], close: bool):
    """(removed, added) Counters and the counts after them: a few edges' counts given back (some to 0), a few
    added (new ones forward in ``order``; with ``close``, one backward: it may close a cycle)."""
    removed, added = Counter(), Counter()
    new = dict(counts)
    live = sorted(k for k, c in counts.items() if c > 0)
    for k in rng.sample(live, min(len(live), rng.randint(0, 6))):
        w = counts[k] if rng.random() < 0.5 else rng.randint(1, counts[k])
        removed.add(np.array([k], dtype=np.int64), np.array([w], dtype=np.int64))
        new[k] -= w
    pos = {v: i for i, v in enumerate(order)}
    for _ in range(rng.randint(0, 6)):
        u, v = rng.sample(range(n), 2)
        if (pos[u] > pos[v]) != (close and rng.random() < 0.3):
            u, v = v, u
        k = u << 32 | v
        w = rng.randint(1, 3)
        added.add(np.array([k], dtype=np.int64), np.array([w], dtype=np.int64))
        new[k] = new.get(k, 0) + w
    return removed, added, {k: c for k, c in new.items() if c > 0}


@pytest.mark.parametrize("seed,compact,quotient_rank", [(1, False, False), (2, True, False), (3, False, True),
                                                        (4, True, True), (5, False, False), (6, True, False)])
def test_incremental_graph_equals_whole_graph(seed, compact, quotient_rank, monkeypatch):
    if compact:  # the overlay merged into the base arrays whenever it grows past an eighth of them
        monkeypatch.setattr(DepGraph, "MIN_OVERLAY", 0)
    rng = random.Random(seed)
    n = 40
    order = list(range(n))
    rng.shuffle(order)
    pos = {v: i for i, v in enumerate(order)}
    pairs = {(u, v) for u, v in (rng.sample(range(n), 2) for _ in range(120)) if pos[u] < pos[v]}
    base = {k: rng.randint(1, 3) for k in packed(pairs).tolist()}
    edges, count = arrays(base)
    # ranks other than the depths (as the quotient's): the positions in the hidden order grow along every edge
    rank = np.array([pos[v] for v in range(n)], dtype=np.int64) if quotient_rank else None
    g, ref = DepGraph(edges, count, n, rank), Reference(base, n, rank if quotient_rank else topo_rank(edges, n))
    snaps = []
    found = 0
    for step in range(150):
        removed, added, new = random_change(rng, ref.counts, n, order, close=step % 3 == 0)
        change = g.updated(removed, added)
        got_e, got_c = g.materialise(change.overlay)
        want_e, want_c = arrays(new)
        assert np.array_equal(got_e, want_e) and np.array_equal(got_c, want_c)
        old = set(k for k, c in ref.counts.items() if c > 0)
        assert change.fresh.tolist() == sorted(set(new) - old)
        assert change.gone.tolist() == sorted(old - set(new))
        probe = packed((rng.randrange(n), rng.randrange(n)) for _ in range(4))
        mixed = g.missing(probe, change)
        assert mixed.tolist() == [k for k in probe.tolist() if k not in new]
        test = union(change.fresh, mixed[(mixed >> 32) != (mixed & LOW32)])
        want = ref.check(new, test)
        got = g.cycle(change, test, str)
        assert got == want, step
        found += got[0] is not None
        if got[0] is None or rng.random() < 0.3:  # a change with a cycle: mostly discarded, sometimes committed
            g.commit(change)
            ref.commit(new, change.fresh)
            assert np.array_equal(g.edges, want_e) and np.array_equal(g.count, want_c)
            depth = topo_rank(want_e, n)
            if g.depth is not None or depth is None:  # None: a graph with a cycle was committed, depths made anew
                assert np.array_equal(g.depth, depth) if depth is not None else g.depth is None, step
        if rng.random() < 0.1:
            snaps.append((g.snapshot(), dict(ref.counts), ref.rank))
        elif snaps and rng.random() < 0.1:
            snap, counts, r = snaps.pop()
            g.restore(snap)
            ref.counts, ref.rank = counts, r
            assert np.array_equal(g.edges, arrays(counts)[0])
    assert found  # some changes closed a cycle, and it was found
