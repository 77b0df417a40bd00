"""Dependency graphs as packed edge arrays: cores, cycles, names.

The engines pack an edge between decision rows (or states) ``a -> b`` into one ``int64``,
``a << 32 | b``. :func:`core_graph` peels nodes without incoming or outgoing edges with numpy
(empty iff acyclic, keeps every cycle); :func:`edge_graph` and :func:`find_cycle` hand what is
left to networkx to name a cycle.
"""

from __future__ import annotations

from typing import Callable, Iterable

import networkx as nx
import numpy as np

__all__ = ["LOW32", "core_graph", "edge_graph", "find_cycle"]

LOW32 = 0xFFFFFFFF  # mask of the target in a packed edge


def edge_graph(edges: Iterable[int] | np.ndarray) -> nx.DiGraph:
    """A networkx graph of packed edges (in the order given)."""
    e = edges if isinstance(edges, np.ndarray) else np.array(list(edges), dtype=np.int64)
    g = nx.DiGraph()
    g.add_edges_from(zip((e >> 32).tolist(), (e & LOW32).tolist()))
    return g


def find_cycle(g: nx.DiGraph, name: Callable[[int], str]) -> tuple[str, ...] | None:
    """One cycle of ``g`` as node names (the first node repeated at the end), or None."""
    try:
        cyc = nx.find_cycle(g)
    except nx.NetworkXNoCycle:
        return None
    return tuple(name(r) for r in [u for u, _ in cyc] + [cyc[0][0]])


def core_graph(src: np.ndarray, dst: np.ndarray) -> nx.DiGraph:
    """The graph left after repeatedly removing nodes without incoming or without
    outgoing edges (vectorised): empty iff acyclic; it keeps every cycle and every
    non-trivial strongly connected component."""
    alive = np.ones(len(src), dtype=bool)
    while alive.any():
        s, d = src[alive], dst[alive]
        drop = ~np.isin(s, d) | ~np.isin(d, s)  # source never entered, or target never left
        if not drop.any():
            break
        alive[np.flatnonzero(alive)[drop]] = False
    g = nx.DiGraph()
    g.add_edges_from(zip(src[alive].tolist(), dst[alive].tolist()))
    return g
