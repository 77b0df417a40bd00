"""Automorphisms of a fabric's topology: candidates from its structure, checked, and orbits (union-find).

An :class:`Automorphism` maps switches to switches, each switch's ports to the image switch's
ports (fabric ports follow their links, host ports keep their number) and hosts to hosts, such
that every link maps onto a link. :func:`candidate_generators` proposes switch maps from the
generator's structure (Dragonfly palmtree: rotate groups; xor: XOR group numbers with 2^b;
flattened butterfly: shift one coordinate); :func:`automorphism` extends and checks one.
Whether the compiled *rules* commute with it is checked on the decisions by :mod:`hpcfabric.verify.union.orbits`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np

from hpcfabric.topology.model import Fabric

__all__ = ["Automorphism", "candidate_generators", "automorphism", "union_find"]


@dataclass(frozen=True)
class Automorphism:
    """A switch/port/host bijection of a fabric that maps links to links."""

    name: str
    switch: dict[str, str]
    port: dict[str, np.ndarray]  # switch -> image port per port number (-1: no such port)
    host: dict[str, str]

    def map_port(self, switch: str, port: int) -> int:
        return int(self.port[switch][port])



def candidate_generators(fabric: Fabric) -> list[tuple[str, dict[str, str]]]:
    """(name, switch map) candidates from the fabric's structure; empty when none is known."""
    out: list[tuple[str, dict[str, str]]] = []
    if fabric.kind == "dragonfly":
        groups = 1 + max(s.group for s in fabric.switches)
        at = {(s.group, s.index): s.name for s in fabric.switches}
        if groups > 1 and fabric.params.get("arrangement", "palmtree") == "palmtree":
            m = {s.name: at.get(((s.group + 1) % groups, s.index), "") for s in fabric.switches}
            out.append(("rotate-groups", m))
        elif groups > 1 and fabric.params.get("arrangement") == "xor":
            # i -> i XOR 2^b on the power-of-two block; the extra group (g == a*h+1) keeps its
            # place and permutes its slots the same way (slot k sits on switch k // h)
            h = int(fabric.params["h"])
            base = groups if groups & (groups - 1) == 0 else groups - 1
            for b in range(base.bit_length() - 1):
                m = {}
                for s in fabric.switches:
                    if s.group < base:
                        m[s.name] = at.get((s.group ^ (1 << b), s.index), "")
                    else:
                        m[s.name] = at.get((s.group, s.index ^ ((1 << b) // h)), "")
                out.append((f"xor-groups-{1 << b}", m))
    elif fabric.kind == "flattened_butterfly":
        dims = list(fabric.params.get("dims") or ())
        at = {tuple(s.coords): s.name for s in fabric.switches}
        for d, k in enumerate(dims):
            if k < 2:
                continue
            m = {}
            for s in fabric.switches:
                c = list(s.coords)
                c[d] = (c[d] + 1) % k
                m[s.name] = at.get(tuple(c), "")
            out.append((f"shift-dim{d}", m))
    return out


def automorphism(fabric: Fabric, name: str, switch_map: dict[str, str]) -> tuple[Automorphism | None, str | None]:
    """The automorphism extending ``switch_map`` (fabric ports follow their links, host
    ports keep their number), or None and why it is not one."""
    names = [s.name for s in fabric.switches]
    if sorted(switch_map) != sorted(names) or sorted(switch_map.values()) != sorted(names):
        return None, "the switch map is not a bijection of the switches"
    toward: dict[str, dict[str, int]] = {}
    for s in names:
        seen: dict[str, int] = {}
        for p, peer in fabric.fabric_ports(s).items():
            if peer.node in seen:
                return None, f"{s} has parallel links to {peer.node}: ports cannot follow links"
            seen[peer.node] = p
        toward[s] = seen
    port: dict[str, np.ndarray] = {}
    host: dict[str, str] = {}
    for s in names:
        t = switch_map[s]
        ports = fabric.ports(s)
        top = max(ports, default=0)
        pi = np.full(top + 1, -1, dtype=np.int64)
        for p, peer in ports.items():
            if peer.is_host:
                q = fabric.peer(t, p)
                if q is None or not q.is_host:
                    return None, f"host port {s}:{p} maps to {t}:{p}, which has no host"
                pi[p] = p
                host[peer.node] = q.node
            else:
                q_port = toward[t].get(switch_map[peer.node])
                if q_port is None:
                    return None, f"link {s}:{p} -> {peer.node} maps to {t} -> {switch_map[peer.node]}, which is no link"
                pi[p] = q_port
        if len(set(pi[pi >= 0].tolist())) != len(ports) or len(fabric.ports(t)) != len(ports):
            return None, f"ports of {s} do not map one to one onto the ports of {t}"
        port[s] = pi
    for link in fabric.links:  # both ends must land on one link
        a, b = switch_map[link.a], switch_map[link.b]
        pa, pb = int(port[link.a][link.a_port]), int(port[link.b][link.b_port])
        peer = fabric.peer(a, pa)
        if peer is None or peer.node != b or peer.port != pb:
            return None, f"link {link.a}:{link.a_port}-{link.b}:{link.b_port} does not map onto a link"
    return Automorphism(name, dict(switch_map), port, host), None


def union_find(n: int, pairs: Iterable[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """Component label (smallest member) per element, given edge arrays."""
    parent = np.arange(n, dtype=np.int64)

    def find_all(x: np.ndarray) -> np.ndarray:
        while True:
            nxt = parent[x]
            if np.array_equal(nxt, x):
                return x
            x = nxt

    for a, b in pairs:
        while True:  # hook roots onto smaller roots until every edge joins one component
            ra, rb = find_all(a), find_all(b)
            diff = ra != rb
            if not diff.any():
                break
            lo, hi = np.minimum(ra[diff], rb[diff]), np.maximum(ra[diff], rb[diff])
            np.minimum.at(parent, hi, lo)
            parent[:] = parent[parent]
    return find_all(np.arange(n, dtype=np.int64))
