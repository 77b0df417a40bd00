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
        self.children: list[_Node] | None = None
        self.nh: int | None = None
        self.hops = 0  # candidate next hops as a bit set over sorted hop indices


def compact_prefixes(routes: Iterable[Route], length: int) -> list[Route]:
    """Return the minimal LPM-equivalent route list (table-miss = DROP).

    Routes with the same prefix must agree; the last one wins otherwise.
    Output is sorted by prefix length, then bits (deterministic; among equal
    candidates the lowest next hop is chosen).
    """
    routes = list(routes)
    values = sorted({nh for _, _, nh in routes} | {DROP})
    index = {nh: i for i, nh in enumerate(values)}
    root = _Node()
    for bits, plen, nh in routes:
        if not 0 <= plen <= length or bits >> plen:
            raise ValueError(f"bad prefix {bits:#x}/{plen} for {length}-bit addresses")
        node = root
        for depth in range(plen):
            if node.children is None:  # always both children: missing ones inherit (ORTC pass 1)
                node.children = [_Node(), _Node()]
            node = node.children[(bits >> (plen - 1 - depth)) & 1]
        node.nh = index[nh]

    # Pass 1+2: leaves take the inherited next hop; inner nodes the intersection
    # of their children's candidates if non-empty, else the union.
    def sets(node: _Node, inherited: int) -> int:
        nh = node.nh if node.nh is not None else inherited
        if node.children is None:
            node.hops = 1 << nh
            return node.hops
        a = sets(node.children[0], nh)
        b = sets(node.children[1], nh)
        node.hops = (a & b) or (a | b)
        return node.hops

    sets(root, index[DROP])
    out: list[Route] = []

    # Pass 3: top-down, emit an entry only where the inherited hop is not a candidate.
    def choose(node: _Node, bits: int, plen: int, inherited: int) -> None:
        if node.hops >> inherited & 1:
            chosen = inherited
        else:
            low = node.hops & -node.hops
            chosen = low.bit_length() - 1
            out.append((bits, plen, values[chosen]))
        if node.children is not None:
            choose(node.children[0], bits << 1, plen + 1, chosen)
            choose(node.children[1], (bits << 1) | 1, plen + 1, chosen)

    choose(root, 0, 0, index[DROP])
    out.sort(key=lambda r: (r[1], r[0]))
    return out


def lookup(routes: Iterable[Route], length: int, address: int) -> int:
    """Longest-prefix-match lookup (reference implementation, for tests)."""
    best_len, best = -1, DROP
    for bits, plen, nh in routes:
        if plen > best_len and address >> (length - plen) == bits:
            best_len, best = plen, nh
    return best
