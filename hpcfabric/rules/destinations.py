"""Routes per addressing mode: what a switch's ROUTE table must say, before compaction.

``flat``        one route per host in the fabric (:func:`per_host_routes`)
``per-switch``  its hosts + one route per other access switch (:func:`per_switch_routes`)
``per-group``   its hosts + the switches of its group + one route per other
                group (:func:`per_group_routes`; Eq. 1, :func:`eq1`)

Next hops come from the fabric's router (:mod:`hpcfabric.rules.routing`);
routes to another group are marked ``conditional`` (candidates for default
rules under the adaptive policies). Compact tables per fabric kind live in
:mod:`hpcfabric.rules.fabrics`.
"""

from __future__ import annotations

from hpcfabric.rules.context import Context
from hpcfabric.rules.fabrics.dragonfly import dragonfly_remote_routes
from hpcfabric.rules.flows import RuleClass
from hpcfabric.rules.routing import DragonflyRouter, ExplicitRouter
from hpcfabric.rules.tables import Route
from hpcfabric.topology.model import Fabric, Switch


def host_routes(ctx: Context, sw: Switch) -> list[Route]:
    """Delivery routes (one per host of ``sw``, exact host prefix -> its port)."""
    return [Route(*ctx.host_prefix[h.name], h.port, RuleClass.HOST) for h in ctx.fabric.hosts_on(sw.name)]


def per_host_routes(ctx: Context, sw: Switch) -> list[Route]:
    """Flat addressing: delivery + one route per host of the fabric (spread by host rank)."""
    fabric, router = ctx.fabric, ctx.router
    routes = host_routes(ctx, sw)
    for i, h in enumerate(fabric.hosts):
        if h.switch == sw.name:
            continue
        dst = fabric.switch(h.switch)
        port = router.to_switch(sw, dst, spread=i)
        routes.append(Route(*ctx.host_prefix[h.name], port, RuleClass.ROUTE, dst.group != sw.group))
    return routes


def per_switch_routes(ctx: Context, sw: Switch) -> list[Route]:
    """Per-switch addressing: delivery + one route per other access switch."""
    routes = host_routes(ctx, sw)
    for rank, dst in enumerate(ctx.fabric.access_switches):
        if dst.name == sw.name:
            continue
        port = ctx.router.to_switch(sw, dst, spread=rank)
        routes.append(Route(*ctx.switch_prefix[dst.name], port, RuleClass.ROUTE, dst.group != sw.group))
    return routes


def per_group_routes(ctx: Context, sw: Switch) -> list[Route]:
    """Per-group addressing (and the input of ORTC): delivery, the access switches of the own
    group, one route per other group (Eq. 1)."""
    router = ctx.router
    routes = host_routes(ctx, sw)
    within = isinstance(router, ExplicitRouter)
    for dst in ctx.members.get(sw.group, ()):
        if dst.name == sw.name:
            continue
        if within:
            port = router.to_switch(sw, dst, within_group=True)  # type: ignore[call-arg]
        else:
            port = router.to_switch(sw, dst, spread=dst.index)
        routes.append(Route(*ctx.switch_prefix[dst.name], port, RuleClass.ROUTE))
    if type(router) is DragonflyRouter and sw.group not in router.touched:
        routes += dragonfly_remote_routes(ctx, router, sw)
        return routes
    for g in ctx.groups:
        if g != sw.group:
            routes.append(Route(*ctx.group_prefix[g], router.to_group(sw, g, spread=g), RuleClass.ROUTE, True))
    return routes


def eq1(fabric: Fabric, switch: Switch) -> int:
    """The paper's Eq. 1, R = (G-1) + (S-1) + T, for an access switch.

    G: groups with hosts, S: access switches in this switch's group, T: its hosts.
    """
    groups: dict[int, int] = {}
    for sw in fabric.access_switches:
        groups[sw.group] = groups.get(sw.group, 0) + 1
    return (len(groups) - 1) + (groups.get(switch.group, 0) - 1) + len(fabric.hosts_on(switch.name))


#: route functions of the uncompacted addressing modes
ROUTES_BY_MODE = {"flat": per_host_routes, "per-switch": per_switch_routes, "per-group": per_group_routes}
