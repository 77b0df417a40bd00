"""Benchmark: the dependency graph's check at 300k size, synthetic (26 M edges over 10 M nodes in 10 layers).

One change -- 20,000 counts given back, 10,000 added to existing edges, 3,744 new edges -- checked and committed
on :class:`~hpcfabric.verify.incremental.depgraph.DepGraph` (overlay, cycle search, depths), then main's former
``updated`` (copy and re-insert of the arrays) on the same arrays; prints both and whether the graphs agree.

Usage: PYTHONPATH=. .venv/bin/python bench/depgraph_synth.py   (~2 GB; the base's ranks and reverse copy ~1 min)
"""
import time, numpy as np
from hpcfabric.verify.incremental.depgraph import DepGraph, union, not_in
from hpcfabric.verify.union.unions import Counter
rng = np.random.default_rng(1)
n, L, E = 10_000_000, 10, 26_000_000
layer = n // L
src = rng.integers(0, n - layer, E); dst = src + layer - (src % layer) + rng.integers(0, layer, E)
edges = np.unique(src << 32 | dst); count = rng.integers(1, 4, len(edges))
g = DepGraph(edges, count, n)
# a change: 20k count moves on existing edges, 3,744 new edges (forward)
pick = rng.choice(len(edges), 20000, replace=False); pick.sort()
rem = Counter(); rem.add(edges[pick], np.ones(len(pick), dtype=np.int64))
add = Counter(); s2 = rng.integers(0, n - layer, 3744); d2 = s2 + layer - (s2 % layer) + rng.integers(0, layer, 3744)
add.add(np.concatenate([edges[pick[:10000]], s2 << 32 | d2]))
t = time.perf_counter(); ch = g.updated(rem, add); test = ch.fresh; cyc = g.cycle(ch, test, str); g.commit(ch); new = time.perf_counter() - t
# main's algorithm on the same arrays
def old(edges, cnt, removed, added):
    count = cnt.copy(); rk, rw = removed.total(); at = np.searchsorted(edges, rk); count[at] -= rw
    ak, aw = added.total(); fresh = not_in(ak, edges); known = np.isin(ak, fresh, invert=True)
    count[np.searchsorted(edges, ak[known])] += aw[known]; keep = count > 0; fw = aw[np.isin(ak, fresh)]
    kept = edges[keep]; at = np.searchsorted(kept, fresh)
    return np.insert(kept, at, fresh), np.insert(count[keep], at, fw), fresh
t = time.perf_counter(); e2, c2, f2 = old(edges, count, rem, add); oldt = time.perf_counter() - t
print({"edges": len(edges), "fresh": len(ch.fresh), "cycle": cyc[0] is not None, "overlay+cycle+commit_s": round(new, 3),
       "main_updated_only_s": round(oldt, 3), "same": bool(np.array_equal(e2, g.edges) and np.array_equal(c2, g.count))})
