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


def compact_prefixes(routes: Iterable[Route], length: int) -> list[Route]:
    """Return the minimal LPM-equivalent route list (table-miss = DROP).

    Routes with the same prefix must agree; the last one wins otherwise.
    Output is sorted by prefix length, then bits (deterministic; among equal
    candidates the lowest next hop is chosen).

    The binary trie is kept level by level (``{bits: ...}`` per depth) rather
    than as node objects: every node on a route's path has both children
    (missing ones inherit, ORTC pass 1); candidate next-hop sets are bit sets
    over the sorted next hops.
    """
    routes = list(routes)
    values = sorted({nh for _, _, nh in routes} | {DROP})
    index = {nh: i for i, nh in enumerate(values)}
    drop = index[DROP]
    own: dict[int, dict[int, int]] = {}
    for bits, plen, nh in routes:
        if not 0 <= plen <= length or bits >> plen:
            raise ValueError(f"bad prefix {bits:#x}/{plen} for {length}-bit addresses")
        own.setdefault(plen, {})[bits] = index[nh]
    if not routes:
        return []
    depth = max(own)
    empty: dict[int, int] = {}
    # internal[d]: nodes at depth d with children (proper prefixes of some route)
    internal: list[list[int]] = [[] for _ in range(depth)]
    below: set[int] = set()
    for d in range(depth - 1, -1, -1):
        here = {b >> 1 for b in own.get(d + 1, empty)}
        here.update(b >> 1 for b in below)
        internal[d] = sorted(here)
        below = here
    # top-down: the next hop each internal node passes to its leaves (own route or inherited)
    root_nh = own.get(0, empty).get(0, drop)
    eff: list[dict[int, int]] = [{0: root_nh}] if depth else []
    for d in range(1, depth):
        up, mine = eff[d - 1], own.get(d, empty)
        eff.append({b: mine.get(b, up[b >> 1]) for b in internal[d]})
    # bottom-up (ORTC pass 2): intersection of the children's candidates if non-empty, else union
    sets: list[dict[int, int]] = [empty] * depth
    nxt: dict[int, int] = {}
    for d in range(depth - 1, -1, -1):
        leaf_nh, e, cur = own.get(d + 1, empty), eff[d], {}
        for b in internal[d]:
            c = b << 1
            a = nxt.get(c)
            if a is None:
                a = 1 << leaf_nh.get(c, e[b])
            z = nxt.get(c | 1)
            if z is None:
                z = 1 << leaf_nh.get(c | 1, e[b])
            cur[b] = (a & z) or (a | z)
        sets[d] = cur
        nxt = cur
    out: list[Route] = []
    if not depth:  # a single route on the root
        if root_nh != drop:
            out.append((0, 0, values[root_nh]))
        return out
    # top-down (ORTC pass 3): emit where the inherited next hop is not a candidate
    chosen_up = {0: drop}
    for d in range(depth):
        cur, chosen, leaf_nh, e = sets[d], {}, own.get(d + 1, empty), eff[d]
        inner = sets[d + 1] if d + 1 < depth else empty
        for b in internal[d]:
            inherited = chosen_up[b >> 1] if d else drop
            hops = cur[b]
            if hops >> inherited & 1:
                pick = inherited
            else:
                pick = (hops & -hops).bit_length() - 1
                out.append((b, d, values[pick]))
            chosen[b] = pick
            for c in (b << 1, (b << 1) | 1):  # leaf children
                if c not in inner:
                    v = leaf_nh.get(c, e[b])
                    if v != pick:
                        out.append((c, d + 1, values[v]))
        chosen_up = chosen
    out.sort(key=lambda r: (r[1], r[0]))
    return out


def lookup(routes: Iterable[Route], length: int, address: int) -> int:
    """Longest-prefix-match lookup (reference implementation, for tests)."""
    best_len, best = -1, DROP
    for bits, plen, nh in routes:
        if plen > best_len and address >> (length - plen) == bits:
            best_len, best = plen, nh
    return best
