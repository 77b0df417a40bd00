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
"""

from __future__ import annotations

from collections import deque
from functools import lru_cache

from hpcfabric.errors import CompileError
from hpcfabric.topology.model import Fabric, Switch


class Router:
    """Base: subclasses implement :meth:`to_switch` and :meth:`to_group`."""

    def __init__(self, fabric: Fabric) -> None:
        self.fabric = fabric

    def to_switch(self, src: Switch, dst: Switch, spread: int = 0) -> int:
        raise NotImplementedError

    def to_group(self, src: Switch, group: int, spread: int = 0) -> int:
        raise NotImplementedError


class DragonflyRouter(Router):
    def __init__(self, fabric: Fabric) -> None:
        super().__init__(fabric)
        prm = fabric.params
        self.a, self.p, self.h = prm["a"], prm["p"], prm["h"]
        self.globals: dict[int, dict[int, list[tuple[int, int]]]] = {}
        for sw in fabric.switches:
            for port, peer in fabric.ports(sw.name).items():
                if peer.kind == "global":
                    j = fabric.switch(peer.node).group
                    self.globals.setdefault(sw.group, {}).setdefault(j, []).append((sw.index, port))
        for per_group in self.globals.values():
            for links in per_group.values():
                links.sort()

    def local_port(self, s: int, t: int) -> int:
        return self.p + self.h + 1 + (t if t < s else t - 1)

    def to_switch(self, src: Switch, dst: Switch, spread: int = 0) -> int:
        if src.group == dst.group:
            return self.local_port(src.index, dst.index)
        return self.to_group(src, dst.group, spread)

    def to_group(self, src: Switch, group: int, spread: int = 0) -> int:
        links = self.globals.get(src.group, {}).get(group)
        if not links:
            raise CompileError(f"no global link from group {src.group} to group {group}")
        mine = [port for s, port in links if s == src.index]
        if mine:
            return mine[0]
        holder = links[group % len(links)][0]
        return self.local_port(src.index, holder)


class FlattenedButterflyRouter(Router):
    def __init__(self, fabric: Fabric) -> None:
        super().__init__(fabric)
        self.dims = list(fabric.params["dims"])
        self.t = fabric.params["hosts_per_switch"]
        self.bases = []
        port = self.t + 1
        for k in self.dims:
            self.bases.append(port)
            port += k - 1

    def dim_port(self, src: Switch, d: int, value: int) -> int:
        own = src.coords[d]
        return self.bases[d] + (value if value < own else value - 1)

    def coords_to(self, src: Switch, dst_coords: tuple[int, ...]) -> int:
        for d in range(len(self.dims) - 1, -1, -1):
            if src.coords[d] != dst_coords[d]:
                return self.dim_port(src, d, dst_coords[d])
        raise CompileError(f"{src.name} routes to itself")

    def to_switch(self, src: Switch, dst: Switch, spread: int = 0) -> int:
        return self.coords_to(src, dst.coords)

    def to_group(self, src: Switch, group: int, spread: int = 0) -> int:
        coords = [src.coords[0]]
        rest = group
        for k in self.dims[1:]:
            coords.append(rest % k)
            rest //= k
        return self.coords_to(src, tuple(coords))


class FatTreeRouter(Router):
    def __init__(self, fabric: Fabric) -> None:
        super().__init__(fabric)
        self.half = fabric.params["k"] // 2

    def up(self, spread: int) -> int:
        return self.half + 1 + spread % self.half

    def to_switch(self, src: Switch, dst: Switch, spread: int = 0) -> int:
        if src.role == "core":
            return 1 + dst.group
        if src.role == "aggregation" and dst.group == src.group:
            return 1 + dst.index
        return self.up(spread)

    def to_group(self, src: Switch, group: int, spread: int = 0) -> int:
        if src.role == "core":
            return 1 + group
        return self.up(spread)


class ExplicitRouter(Router):
    """Shortest paths over the switch graph; ties go to the lowest port."""

    def __init__(self, fabric: Fabric) -> None:
        super().__init__(fabric)
        self.adj: dict[str, list[tuple[int, str]]] = {
            sw.name: [(port, peer.node) for port, peer in fabric.fabric_ports(sw.name).items()]
            for sw in fabric.switches
        }
        self.members: dict[int, list[str]] = {}
        for sw in fabric.switches:
            self.members.setdefault(sw.group, []).append(sw.name)
        self._dist = lru_cache(maxsize=None)(self._bfs)

    def _bfs(self, sources: tuple[str, ...], within: int | None) -> dict[str, int]:
        dist = {s: 0 for s in sources}
        todo = deque(sources)
        while todo:
            u = todo.popleft()
            for _, v in self.adj[u]:
                if v in dist or (within is not None and self.fabric.switch(v).group != within):
                    continue
                dist[v] = dist[u] + 1
                todo.append(v)
        return dist

    def _best(self, src: Switch, dist: dict[str, int], target: str) -> int:
        best = min(((dist[v], port) for port, v in self.adj[src.name] if v in dist), default=None)
        if best is None or src.name not in dist:
            raise CompileError(f"{target} is unreachable from {src.name}")
        return best[1]

    def to_switch(self, src: Switch, dst: Switch, spread: int = 0, within_group: bool = False) -> int:
        within = dst.group if within_group else None
        dist = self._dist((dst.name,), within)
        if within_group and src.name not in dist:
            raise CompileError(
                f"group {dst.group} is not connected inside itself ({src.name} cannot reach {dst.name} "
                f"without leaving the group); per-group addressing needs connected groups"
            )
        return self._best(src, dist, dst.name)

    def to_group(self, src: Switch, group: int, spread: int = 0) -> int:
        dist = self._dist(tuple(self.members[group]), None)
        return self._best(src, dist, f"group {group}")


class FoldedClosRouter(Router):
    """Up-down routing on a :func:`folded_clos_fabric`.

    A switch at level ``l`` sends a frame down when the destination pod lies
    below it (level 2: the pod itself; level ``l >= 3``: the group prefix
    ``group >> w*(l-2)`` equals the switch's; core: always), choosing among
    parallel down links to the right child by ``spread``; otherwise up, on
    uplink ``spread mod k/2``. Every switch reaches every pod below it and
    every core reaches every block, so any up choice works: loop-free and
    deadlock-free (up*/down*).
    """

    def __init__(self, fabric: Fabric) -> None:
        super().__init__(fabric)
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

    def level(self, sw: Switch) -> int:
        return sw.coords[0]

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

    def up(self, spread: int) -> int:
        return self.half + 1 + spread % self.half

    def to_group(self, src: Switch, group: int, spread: int = 0) -> int:
        level = src.coords[0]
        if not self.is_below(src, group):
            if level == self.stages:  # pragma: no cover - cores see everything
                raise CompileError(f"pod group {group} does not exist")
            return self.up(spread)
        if level <= 2:
            raise CompileError(f"{src.name}: to_group towards its own pod")
        ports = self.child_ports(src, group)
        return ports[spread % len(ports)]

    def to_switch(self, src: Switch, dst: Switch, spread: int = 0) -> int:
        level = src.coords[0]
        if level == 2 and dst.group == src.group:
            return 1 + dst.index
        if level == 1 and dst.group == src.group:
            return self.up(spread)
        return self.to_group(src, dst.group, spread)


ROUTERS = {
    "dragonfly": DragonflyRouter,
    "flattened_butterfly": FlattenedButterflyRouter,
    "fat_tree": FatTreeRouter,
    "folded_clos": FoldedClosRouter,
    "explicit": ExplicitRouter,
}


def router_for(fabric: Fabric) -> Router:
    try:
        return ROUTERS[fabric.kind](fabric)
    except KeyError:
        raise CompileError(f"no router for fabric kind {fabric.kind!r}") from None
