"""Typed fabric model: switches, hosts and links with explicit port numbers.

A :class:`Fabric` is an immutable value. Generators and the YAML loader build
one; everything else (addressing, rule compilation, Mininet, the controller)
reads it. Lookup tables (ports, peers, hosts per switch) are built once in
``__post_init__``; :meth:`Fabric.graph` gives the networkx view on demand.
"""

from __future__ import annotations

import gc
import weakref
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable, Iterator, Mapping

import networkx as nx

from hpcfabric.errors import TopologyError

#: Switch roles. Direct topologies (Dragonfly, Flattened Butterfly) have only
#: ``access`` switches; the fat-tree has ``edge`` (access), ``aggregation`` and
#: ``core``; explicit fabrics use ``access`` or ``transit``.
ROLES = frozenset({"access", "edge", "aggregation", "core", "transit"})

#: Link kinds. ``host`` links are implied by :class:`Host`; fabric links are
#: ``local``/``global`` (Dragonfly), ``dim0``, ``dim1``… (Flattened Butterfly),
#: ``edge-agg``/``agg-core`` (fat-tree) and ``fabric`` (explicit).
HOST_LINK = "host"


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while building many small objects.

    Building a ~300,000-host fabric allocates millions of acyclic objects;
    each generation-2 pass re-scans them all, which roughly doubles the time.
    Reference counting still frees everything; the previous state is restored.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@dataclass(frozen=True, slots=True)
class Switch:
    """One switch of the fabric.

    ``group`` and ``index`` place it in the addressing hierarchy (Dragonfly
    group and switch, FB row and dim-0 coordinate, fat-tree pod and position;
    core switches of a fat-tree have group -1). ``coords`` are the
    topology's own coordinates (FB: one per dimension, lowest first).
    """

    name: str
    dpid: int
    group: int
    index: int
    coords: tuple[int, ...]
    role: str = "access"


@dataclass(frozen=True, slots=True)
class Host:
    """A host attached to ``switch`` on ``port``; ``index`` is its 0-based rank there."""

    name: str
    switch: str
    port: int
    index: int


@dataclass(frozen=True, slots=True)
class Link:
    """A switch-to-switch link between ``a``:``a_port`` and ``b``:``b_port``."""

    a: str
    a_port: int
    b: str
    b_port: int
    kind: str = "fabric"


@dataclass(frozen=True, slots=True)
class Peer:
    """What sits behind one switch port: a switch (and its port) or a host."""

    node: str
    port: int | None
    kind: str

    @property
    def is_host(self) -> bool:
        return self.kind == HOST_LINK


_INDEX_ATTRS = ("_by_name", "_peers", "_hosts_of", "_host_by_name")


def _no_fabric() -> None:
    return None


#: the most recently constructed Fabric (weakly held), whose lookup tables a
#: copy with the same switch/host/link tuples reuses
_LAST_INDEXED: Callable[[], "Fabric | None"] = _no_fabric


@dataclass(frozen=True, eq=False)
class Fabric:
    """An immutable fabric: switches, hosts and switch-to-switch links.

    Validation happens at construction: unique names and dpids, every port
    used once, links between known switches, hosts on known switches. Errors
    raise :class:`~hpcfabric.errors.TopologyError` naming the offending item.
    """

    kind: str
    name: str
    switches: tuple[Switch, ...]
    hosts: tuple[Host, ...]
    links: tuple[Link, ...]
    params: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        global _LAST_INDEXED
        prev = _LAST_INDEXED()
        if prev is not None and prev.switches is self.switches and prev.hosts is self.hosts and prev.links is self.links:
            # dataclasses.replace(fabric, params=...) (the loader does it): same
            # validated tuples, so share the (never mutated) lookup tables
            for attr in _INDEX_ATTRS:
                object.__setattr__(self, attr, getattr(prev, attr))
        else:
            with gc_paused():
                self._index()
        _LAST_INDEXED = weakref.ref(self)

    def _index(self) -> None:
        by_name: dict[str, Switch] = {}
        dpids: dict[int, str] = {}
        for i, sw in enumerate(self.switches):
            if sw.name in by_name:
                raise TopologyError(f"duplicate switch name {sw.name!r}", field=f"switches[{i}].name")
            if sw.dpid in dpids:
                raise TopologyError(
                    f"dpid {sw.dpid:#x} of {sw.name!r} already used by {dpids[sw.dpid]!r}",
                    field=f"switches[{i}].dpid",
                )
            if isinstance(sw.dpid, bool) or not isinstance(sw.dpid, int) or not 0 < sw.dpid < 2**64:
                raise TopologyError(f"dpid of {sw.name!r} must be in 1..2^64-1", field=f"switches[{i}].dpid")
            if sw.role not in ROLES:
                raise TopologyError(
                    f"role {sw.role!r} of {sw.name!r} is not one of {sorted(ROLES)}", field=f"switches[{i}].role"
                )
            by_name[sw.name] = sw
            dpids[sw.dpid] = sw.name
        peers: dict[str, dict[int, Peer]] = {name: {} for name in by_name}

        def claim(switch: str, port: int, peer: Peer, where: str, switch_field: str | None = None) -> None:
            if switch not in peers:
                raise TopologyError(f"unknown switch {switch!r}", field=switch_field or where)
            if isinstance(port, bool) or not isinstance(port, int) or port < 1 or port > 0xFFFFFF00:
                raise TopologyError(f"port {port!r} on {switch!r} must be an integer >= 1", field=where)
            taken = peers[switch].get(port)
            if taken is not None:
                raise TopologyError(
                    f"port {port} of {switch!r} is used twice (already connected to {taken.node!r})", field=where
                )
            peers[switch][port] = peer

        host_names: set[str] = set()
        hosts_of: dict[str, list[Host]] = {name: [] for name in by_name}
        # Fast paths (valid items, plain int ports) do the same checks inline;
        # anything unusual takes the original path, which names the problem.
        max_port = 0xFFFFFF00
        for i, host in enumerate(self.hosts):
            hn, hs, hp = host.name, host.switch, host.port
            on = peers.get(hs)
            if (
                on is not None
                and type(hp) is int
                and 0 < hp <= max_port
                and hp not in on
                and hn not in host_names
                and hn not in by_name
            ):
                host_names.add(hn)
                on[hp] = Peer(hn, None, HOST_LINK)
                hosts_of[hs].append(host)
                continue
            if host.name in host_names or host.name in by_name:
                raise TopologyError(f"duplicate node name {host.name!r}", field=f"hosts[{i}].name")
            host_names.add(host.name)
            claim(host.switch, host.port, Peer(host.name, None, HOST_LINK), f"hosts[{i}].port", f"hosts[{i}].switch")
            hosts_of[host.switch].append(host)
        for i, link in enumerate(self.links):
            la, ap, lb, bp = link.a, link.a_port, link.b, link.b_port
            pa, pb = peers.get(la), peers.get(lb)
            if (
                pa is not None
                and pb is not None
                and la != lb
                and type(ap) is int
                and type(bp) is int
                and 0 < ap <= max_port
                and 0 < bp <= max_port
                and ap not in pa
                and bp not in pb
            ):
                pa[ap] = Peer(lb, bp, link.kind)
                pb[bp] = Peer(la, ap, link.kind)
                continue
            if link.a == link.b:
                raise TopologyError(f"link connects {link.a!r} to itself", field=f"links[{i}]")
            claim(link.a, link.a_port, Peer(link.b, link.b_port, link.kind), f"links[{i}].a")
            claim(link.b, link.b_port, Peer(link.a, link.a_port, link.kind), f"links[{i}].b")
        object.__setattr__(self, "_by_name", by_name)
        object.__setattr__(self, "_peers", {k: dict(sorted(v.items())) for k, v in peers.items()})
        object.__setattr__(
            self, "_hosts_of", {k: tuple(sorted(v, key=lambda h: h.index)) for k, v in hosts_of.items()}
        )
        object.__setattr__(self, "_host_by_name", {h.name: h for h in self.hosts})

    # -- lookups -----------------------------------------------------------
    def switch(self, name: str) -> Switch:
        """The switch called ``name`` (KeyError if there is none)."""
        return self._by_name[name]  # type: ignore[attr-defined]

    def host(self, name: str) -> Host:
        return self._host_by_name[name]  # type: ignore[attr-defined]

    def has_switch(self, name: str) -> bool:
        return name in self._by_name  # type: ignore[attr-defined]

    def ports(self, switch: str) -> Mapping[int, Peer]:
        """Port number -> :class:`Peer` for every port in use on ``switch``, sorted by port."""
        return self._peers[switch]  # type: ignore[attr-defined]

    def peer(self, switch: str, port: int) -> Peer | None:
        return self._peers[switch].get(port)  # type: ignore[attr-defined]

    def hosts_on(self, switch: str) -> tuple[Host, ...]:
        """Hosts attached to ``switch``, by index."""
        return self._hosts_of[switch]  # type: ignore[attr-defined]

    def fabric_ports(self, switch: str) -> dict[int, Peer]:
        """Ports of ``switch`` that lead to other switches."""
        return {p: peer for p, peer in self.ports(switch).items() if not peer.is_host}

    def host_ports(self, switch: str) -> dict[int, Peer]:
        return {p: peer for p, peer in self.ports(switch).items() if peer.is_host}

    def radix(self, switch: str) -> int:
        """Ports in use on ``switch``."""
        return len(self.ports(switch))

    @cached_property
    def access_switches(self) -> tuple[Switch, ...]:
        """Switches with at least one host, in fabric order."""
        return tuple(sw for sw in self.switches if self.hosts_on(sw.name))

    def iter_port_pairs(self) -> Iterator[tuple[str, int, str, int]]:
        """Every fabric link as (a, a_port, b, b_port)."""
        for link in self.links:
            yield link.a, link.a_port, link.b, link.b_port

    @cached_property
    def max_radix(self) -> int:
        return max((self.radix(sw.name) for sw in self.switches), default=0)

    # -- graph views -------------------------------------------------------
    def graph(self, hosts: bool = True) -> nx.Graph:
        """networkx view: nodes carry ``kind`` ('switch'/'host') and the model
        object under ``obj``; edges carry ``kind`` and ``ports`` ({node: port})."""
        g = nx.Graph(name=self.name, kind=self.kind)
        for sw in self.switches:
            g.add_node(sw.name, kind="switch", obj=sw)
        for link in self.links:
            g.add_edge(link.a, link.b, kind=link.kind, ports={link.a: link.a_port, link.b: link.b_port})
        if hosts:
            for host in self.hosts:
                g.add_node(host.name, kind="host", obj=host)
                g.add_edge(host.switch, host.name, kind=HOST_LINK, ports={host.switch: host.port})
        return g

    @cached_property
    def switch_graph(self) -> nx.Graph:
        """Switches only (cached): the graph routing works on."""
        return self.graph(hosts=False)

    def summary(self) -> dict[str, Any]:
        """Counts a user checks first: kind, switches, hosts, links, radix."""
        return {
            "name": self.name,
            "kind": self.kind,
            "switches": len(self.switches),
            "hosts": len(self.hosts),
            "links": len(self.links),
            "radix": self.max_radix,
            **{k: v for k, v in self.params.items() if k not in ("source", "description") and not isinstance(v, dict)},
        }
