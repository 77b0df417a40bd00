"""Optimal prefix-table compaction (ORTC: Draves, King, Venkatachary, Zill 1999).

Input: a longest-prefix-match table over ``length``-bit addresses, as
``(bits, prefix_len, next_hop)`` routes, where addresses matched by no route
are dropped. Output: the smallest prefix table with the same forwarding
function under longest-prefix match, which a TCAM (or OpenFlow priorities
set to ``base + prefix_len``) implements directly.

``DROP`` (0) is a next hop of its own, so unassigned addresses stay dropped:
compaction never makes a frame to a non-existent address travel. Where a
covering prefix plus a DROP exception is smaller, the exception is emitted
as an explicit drop entry.
"""

from __future__ import annotations

from typing import Iterable

DROP = 0

Route = tuple[int, int, int]  # (bits, prefix_len, next_hop)


class _Node:
    __slots__ = ("children", "nh", "hops")

    def __init__(self) -> None:
        self.children: list[_Node | None] | None = None
        self.nh: int | None = None
        self.hops: frozenset[int] | set[int] = frozenset()


def compact_prefixes(routes: Iterable[Route], length: int) -> list[Route]:
    """Return the minimal LPM-equivalent route list (table-miss = DROP).

    Routes with the same prefix must agree; the last one wins otherwise.
    Output is sorted by prefix length, then bits (deterministic).
    """
    root = _Node()
    for bits, plen, nh in routes:
        if not 0 <= plen <= length or bits >> plen:
            raise ValueError(f"bad prefix {bits:#x}/{plen} for {length}-bit addresses")
        node = root
        for depth in range(plen):
            b = (bits >> (plen - 1 - depth)) & 1
            if node.children is None:
                node.children = [None, None]
            child = node.children[b]
            if child is None:
                child = node.children[b] = _Node()
            node = child
        node.nh = nh

    # Pass 1+2: push inherited next hops into missing siblings, then compute
    # candidate sets bottom-up (intersection if non-empty, else union).
    def sets(node: _Node, inherited: int) -> None:
        nh = node.nh if node.nh is not None else inherited
        if node.children is None:
            node.hops = frozenset((nh,))
            return
        for i in (0, 1):
            if node.children[i] is None:
                leaf = _Node()
                leaf.hops = frozenset((nh,))
                node.children[i] = leaf
            else:
                sets(node.children[i], nh)  # type: ignore[arg-type]
        a = node.children[0].hops  # type: ignore[union-attr]
        b = node.children[1].hops  # type: ignore[union-attr]
        both = a & b
        node.hops = both if both else a | b

    sets(root, DROP)

    out: list[Route] = []

    # Pass 3: top-down, emit an entry only where the inherited hop is not a candidate.
    def choose(node: _Node, bits: int, plen: int, inherited: int) -> None:
        if inherited in node.hops:
            chosen = inherited
        else:
            chosen = min(node.hops)
            out.append((bits, plen, chosen))
        if node.children is not None:
            for i in (0, 1):
                choose(node.children[i], (bits << 1) | i, plen + 1, chosen)  # type: ignore[arg-type]

    choose(root, 0, 0, DROP)
    out.sort(key=lambda r: (r[1], r[0]))
    return out


def lookup(routes: Iterable[Route], length: int, address: int) -> int:
    """Longest-prefix-match lookup (reference implementation, for tests)."""
    best_len, best = -1, DROP
    for bits, plen, nh in routes:
        if plen > best_len and address >> (length - plen) == bits:
            best_len, best = plen, nh
    return best
