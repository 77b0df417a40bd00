"""Minimal (deadlock-free) next-hop functions, one router per fabric kind.

A router answers two questions for a switch ``src``:

* :meth:`to_switch` -- the port towards access switch ``dst`` (``src != dst``);
* :meth:`to_group` -- the port towards remote group ``group`` (a decision that
  must not depend on which switch of the group is meant; that is what makes
  per-group aggregation possible).

``spread`` picks among equal-cost choices (fat-tree uplinks, parallel global
links); the compiler passes a destination-derived number so that load spreads
statically, as the paper's per-destination hashing does.

Routing per kind: Dragonfly minimal (local, global, local); Flattened
Butterfly dimension order (the most significant differing dimension first,
i.e. the group bits before the switch bits); fat-tree and folded Clos
(:mod:`hpcfabric.topology.clos`) up-down; explicit
fabrics shortest paths (ties to the lowest port), with groups routed as a
whole to their nearest member and then inside the group.

**Failures** (:class:`~hpcfabric.topology.failures.Failures`): a router built with them routes the
surviving fabric and answers exactly as without them wherever a route's path does not cross a
failed link or switch (so a repair changes only the entries whose paths did). What replaces a
broken route, per kind: a failed link inside a Dragonfly group or a Flattened Butterfly row is
bypassed through a *hub* of that group or row (the lowest-numbered switch whose links there are
all up: every bypass dependency runs into the hub and out of it, so bypasses cannot wait on each
other in a circle); a Flattened Butterfly destination that differs in a lower dimension too fixes that
one first, and the compact tables get the entries that keep the saturated class of service in
dimension order (:mod:`hpcfabric.rules.rows`); a Dragonfly group without a live global link to another group
reaches it through an intermediate group (a Valiant-like path, two global hops); fat-tree and folded-Clos
uplinks move to the next live uplink; explicit fabrics take shortest paths over the live links.
A destination with no surviving route gets ``None`` (dropped, never looped). Whether the result is
deadlock-free under the fabric's classes of service is not assumed: it is proven on the tables
(:mod:`hpcfabric.verify.incremental.delta`).
"""

from __future__ import annotations

import weakref
from functools import lru_cache
from typing import Any

import networkx as nx

from hpcfabric.errors import CompileError
from hpcfabric.rules.rows import RowBypasses
from hpcfabric.rules.surviving import DragonflyBypasses
from hpcfabric.topology.failures import NO_FAILURES, Failures
from hpcfabric.topology.model import Fabric, Switch


class Router:
    """Base: subclasses implement :meth:`to_switch` and :meth:`to_group` (``None``: no surviving route)."""

    def __init__(self, fabric: Fabric, failures: Failures = NO_FAILURES) -> None:
        self.fabric = fabric
        self.failures = failures
        #: switch -> fabric ports whose link is out (live switches only)
        self.dead = failures.dead_ports(fabric) if failures else {}

    def live(self, switch: str, port: int) -> bool:
        """Is ``switch:port`` in service (switch up, link up)?"""
        return switch not in self.failures.switches and port not in self.dead.get(switch, ())

    def affected(self, redirect: bool = True) -> frozenset[str] | None:
        """Switches whose tables the failures can change (None: any switch may change); ``redirect``: detours are
        redirected at the source (Dragonfly, :mod:`hpcfabric.rules.surviving`)."""
        return None if self.failures else frozenset()

    def to_switch(self, src: Switch, dst: Switch, spread: int = 0) -> int | None:
        raise NotImplementedError

    def to_group(self, src: Switch, group: int, spread: int = 0) -> int | None:
        raise NotImplementedError


class DragonflyRouter(DragonflyBypasses, Router):
    def __init__(self, fabric: Fabric, failures: Failures = NO_FAILURES) -> None:
        super().__init__(fabric, failures)
        prm = fabric.params
        self.a, self.p, self.h = prm["a"], prm["p"], prm["h"]
        #: group -> group -> its (switch index, port) global links there; (group, index) -> switch (shared by
        #: every router of the fabric: a repair builds routers often and these never change)
        self.globals, self.at, self.gports = _dragonfly_maps(fabric)
        #: groups with a failed link or switch: only their switches route differently
        self.touched = frozenset(fabric.switch(s).group for s in (*self.dead, *failures.switches))
        self._missing: dict[int, frozenset[int]] = {}
        self._memo: dict[tuple, Any] = {}

    def affected(self, redirect: bool = True) -> frozenset[str] | None:
        """The touched groups' switches, and (``redirect``) every switch with a global port into a group that lost
        its link to some other group (its hosts' Valiant detours through that port are redirected)."""
        lost = {k for k in self.touched if self.missing_from(k)} if redirect else set()
        out = {sw.name for (g, _), sw in self.at.items() if g in self.touched}
        for j, per_group in self.globals.items():  # switches with a global port into a group that lost a link
            for k in lost & per_group.keys():
                for index, _ in per_group[k]:
                    sw = self.at[(j, index)]
                    if self.fabric.hosts_on(sw.name):
                        out.add(sw.name)
        return frozenset(out)

    def local_port(self, s: int, t: int) -> int:
        return self.p + self.h + 1 + (t if t < s else t - 1)

    def to_switch(self, src: Switch, dst: Switch, spread: int = 0) -> int | None:
        if src.group == dst.group:
            if src.group in self.touched:
                return self.within(src, dst.index)
            return self.local_port(src.index, dst.index)
        return self.to_group(src, dst.group, spread)

    def to_group(self, src: Switch, group: int, spread: int = 0) -> int | None:
        links = self.globals.get(src.group, {}).get(group)
        if not links and not self.failures:
            raise CompileError(f"no global link from group {src.group} to group {group}")
        if self.failures and (src.group in self.touched or group in self.touched):
            return self.repaired_to_group(src, group, links or [])
        mine = [port for s, port in links if s == src.index]
        if mine:
            return mine[0]
        holder = links[group % len(links)][0]
        return self.local_port(src.index, holder)


class FlattenedButterflyRouter(RowBypasses, Router):
    def __init__(self, fabric: Fabric, failures: Failures = NO_FAILURES) -> None:
        super().__init__(fabric, failures)
        self.dims = list(fabric.params["dims"])
        self.t = fabric.params["hosts_per_switch"]
        self.bases = []
        port = self.t + 1
        for k in self.dims:
            self.bases.append(port)
            port += k - 1
        self.at = {tuple(sw.coords): sw for sw in fabric.switches}
        self._pairs = {}
        self._hubs = {}
        self._near = None

    def affected(self, redirect: bool = True) -> frozenset[str] | None:
        """Switches sharing a row (any dimension) with a switch that lost a link: only their entries can move."""
        hit = [self.fabric.switch(s) for s in (*self.dead, *self.failures.switches)]
        out = set()
        for sw in self.fabric.switches:
            if any(sum(a != b for a, b in zip(sw.coords, h.coords)) <= 1 for h in hit):
                out.add(sw.name)
        return frozenset(out)

    def dim_port(self, src: Switch, d: int, value: int) -> int:
        own = src.coords[d]
        return self.bases[d] + (value if value < own else value - 1)

    def coords_to(self, src: Switch, dst_coords: tuple[int, ...]) -> int | None:
        for d in range(len(self.dims) - 1, -1, -1):
            if src.coords[d] != dst_coords[d]:
                return self.dim_out(src, d, dst_coords[d])
        raise CompileError(f"{src.name} routes to itself")

    def to_switch(self, src: Switch, dst: Switch, spread: int = 0) -> int | None:
        return self.coords_to(src, dst.coords)

    def to_group(self, src: Switch, group: int, spread: int = 0) -> int | None:
        coords = [src.coords[0]]
        rest = group
        for k in self.dims[1:]:
            coords.append(rest % k)
            rest //= k
        return self.coords_to(src, tuple(coords))


class UpDownRouter(Router):
    """Shared by the up*/down* fabrics: uplink choice on the surviving fabric."""

    half = 1

    def affected(self, redirect: bool = True) -> frozenset[str] | None:
        """Only a switch with a failed port chooses another uplink (down paths are not re-planned: a
        destination below a failed downlink is dropped there, which the proof reports)."""
        return frozenset(self.dead) | self.failures.switches

    def up(self, spread: int, src: Switch | None = None) -> int | None:
        """Uplink number ``spread mod k/2``; on the surviving fabric the next live one."""
        first = spread % self.half
        if src is None or not self.failures:
            return self.half + 1 + first
        for i in range(self.half):
            port = self.half + 1 + (first + i) % self.half
            if self.live(src.name, port):
                return port
        return None

    def down_port(self, src: Switch, port: int) -> int | None:
        """``port`` (a downlink) if it is live, else None (the destinations below it are dropped here)."""
        return port if self.live(src.name, port) else None


class FatTreeRouter(UpDownRouter):
    def __init__(self, fabric: Fabric, failures: Failures = NO_FAILURES) -> None:
        super().__init__(fabric, failures)
        self.half = fabric.params["k"] // 2

    def to_switch(self, src: Switch, dst: Switch, spread: int = 0) -> int | None:
        if src.role == "core":
            return self.down_port(src, 1 + dst.group)
        if src.role == "aggregation" and dst.group == src.group:
            return self.down_port(src, 1 + dst.index)
        return self.up(spread, src)

    def to_group(self, src: Switch, group: int, spread: int = 0) -> int | None:
        if src.role == "core":
            return self.down_port(src, 1 + group)
        return self.up(spread, src)


class ExplicitRouter(Router):
    """Shortest paths over the switch graph; ties go to the lowest port."""

    def __init__(self, fabric: Fabric, failures: Failures = NO_FAILURES) -> None:
        super().__init__(fabric, failures)
        self.adj: dict[str, list[tuple[int, str]]] = {
            sw.name: [(port, peer.node) for port, peer in fabric.fabric_ports(sw.name).items()
                      if self.live(sw.name, port)]
            for sw in fabric.switches
        }
        self.graph = nx.Graph((u, v) for u, out in self.adj.items() for _, v in out)
        self.graph.add_nodes_from(self.adj)
        self.members: dict[int, list[str]] = {}
        for sw in fabric.switches:
            self.members.setdefault(sw.group, []).append(sw.name)
        self._dist = lru_cache(maxsize=None)(self._bfs)

    def _bfs(self, sources: tuple[str, ...], within: int | None) -> dict[str, int]:
        g = self.graph if within is None else self.graph.subgraph(set(sources) | set(self.members[within]))
        return nx.multi_source_dijkstra_path_length(g, set(sources)) if sources else {}

    def _best(self, src: Switch, dist: dict[str, int], target: str) -> int | None:
        best = min(((dist[v], port) for port, v in self.adj[src.name] if v in dist), default=None)
        if best is None or src.name not in dist:
            if self.failures:
                return None  # no surviving route: dropped
            raise CompileError(f"{target} is unreachable from {src.name}")
        return best[1]

    def to_switch(self, src: Switch, dst: Switch, spread: int = 0, within_group: bool = False) -> int | None:
        within = dst.group if within_group else None
        dist = self._dist((dst.name,), within)
        if within_group and src.name not in dist and not self.failures:
            raise CompileError(
                f"group {dst.group} is not connected inside itself ({src.name} cannot reach {dst.name} "
                f"without leaving the group); per-group addressing needs connected groups"
            )
        return self._best(src, dist, dst.name)

    def to_group(self, src: Switch, group: int, spread: int = 0) -> int | None:
        dist = self._dist(tuple(m for m in self.members[group] if m not in self.failures.switches), None)
        return self._best(src, dist, f"group {group}")


class FoldedClosRouter(UpDownRouter):
    """Up-down routing on a :func:`folded_clos_fabric`.

    A switch at level ``l`` sends a frame down when the destination pod lies
    below it (level 2: the pod itself; level ``l >= 3``: the group prefix
    ``group >> w*(l-2)`` equals the switch's; core: always), choosing among
    parallel down links to the right child by ``spread``; otherwise up, on
    uplink ``spread mod k/2``. Every switch reaches every pod below it and
    every core reaches every block, so any up choice works: loop-free and
    deadlock-free (up*/down*).
    """

    def __init__(self, fabric: Fabric, failures: Failures = NO_FAILURES) -> None:
        super().__init__(fabric, failures)
        prm = fabric.params
        self.k = prm["radix"]
        self.half = self.k // 2
        self.stages = prm["stages"]
        self.w = prm["group_bits"]
        # down[switch] = {child prefix: [ports]} for levels >= 3
        self.down: dict[str, dict[int, list[int]]] = {}
        for sw in fabric.switches:
            level = sw.coords[0]
            if level < 3:
                continue
            ports: dict[int, list[int]] = {}
            for port, peer in fabric.ports(sw.name).items():
                if port > self.half and level < self.stages:
                    continue  # uplink
                child = fabric.switch(peer.node)
                ports.setdefault(child.coords[1], []).append(port)  # the child's block prefix
            self.down[sw.name] = ports

    def is_below(self, sw: Switch, group: int) -> bool:
        """True when pod ``group`` sits below ``sw``."""
        level = sw.coords[0]
        if level == self.stages:
            return True
        if level == 1 or level == 2:
            return group == sw.group
        return group >> (self.w * (level - 2)) == sw.coords[1]

    def child_ports(self, sw: Switch, group: int) -> list[int]:
        """Down ports of a level >= 3 switch towards pod ``group``."""
        level = sw.coords[0]
        ports = self.down[sw.name].get(group >> (self.w * (level - 3)))
        if not ports:
            raise CompileError(f"pod group {group} is not below {sw.name}")
        return ports

    def to_group(self, src: Switch, group: int, spread: int = 0) -> int | None:
        level = src.coords[0]
        if not self.is_below(src, group):
            if level == self.stages:  # pragma: no cover - cores see everything
                raise CompileError(f"pod group {group} does not exist")
            return self.up(spread, src)
        if level <= 2:
            raise CompileError(f"{src.name}: to_group towards its own pod")
        ports = self.child_ports(src, group)
        if self.failures:
            ports = [p for p in ports if self.live(src.name, p)] or [None]  # type: ignore[list-item]
        return ports[spread % len(ports)]

    def to_switch(self, src: Switch, dst: Switch, spread: int = 0) -> int | None:
        level = src.coords[0]
        if level == 2 and dst.group == src.group:
            return self.down_port(src, 1 + dst.index)
        if level == 1 and dst.group == src.group:
            return self.up(spread, src)
        return self.to_group(src, dst.group, spread)


_DRAGONFLY_MAPS: "weakref.WeakKeyDictionary[Fabric, tuple[dict, dict, dict]]" = weakref.WeakKeyDictionary()


def _dragonfly_maps(fabric: Fabric) -> tuple[dict[int, dict[int, list[tuple[int, int]]]], dict[tuple[int, int], Switch],
                                             dict[tuple[int, int], list[tuple[int, int]]]]:
    """(group -> group -> sorted (switch index, port) global links, (group, index) -> switch, (group, index) ->
    sorted (global port, far group)), once per fabric."""
    got = _DRAGONFLY_MAPS.get(fabric)
    if got is None:
        globals_: dict[int, dict[int, list[tuple[int, int]]]] = {}
        at: dict[tuple[int, int], Switch] = {}
        group_of = {sw.name: sw.group for sw in fabric.switches}
        for sw in fabric.switches:
            at[(sw.group, sw.index)] = sw
            for port, peer in fabric.ports(sw.name).items():
                if peer.kind == "global":
                    globals_.setdefault(sw.group, {}).setdefault(group_of[peer.node], []).append((sw.index, port))
        gports: dict[tuple[int, int], list[tuple[int, int]]] = {}
        for g, per_group in globals_.items():
            for j, links in per_group.items():
                links.sort()
                for index, port in links:
                    gports.setdefault((g, index), []).append((port, j))
        for ports in gports.values():
            ports.sort()
        got = _DRAGONFLY_MAPS[fabric] = (globals_, at, gports)
    return got


ROUTERS = {
    "dragonfly": DragonflyRouter,
    "flattened_butterfly": FlattenedButterflyRouter,
    "fat_tree": FatTreeRouter,
    "folded_clos": FoldedClosRouter,
    "explicit": ExplicitRouter,
}


def router_for(fabric: Fabric, failures: Failures = NO_FAILURES) -> Router:
    """The router of ``fabric``'s kind, on the surviving fabric when ``failures`` are given."""
    try:
        return ROUTERS[fabric.kind](fabric, failures)  # type: ignore[abstract]
    except KeyError:
        raise CompileError(f"no router for fabric kind {fabric.kind!r}") from None
