"""Dragonfly compilation: the remote-group routes shared by a group's switches, and
the paper's compact-table band. Compact Dragonfly tables are ORTC over the
per-group routes (:mod:`hpcfabric.rules.destinations`), as for explicit fabrics."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hpcfabric.errors import CompileError
from hpcfabric.rules.flows import TABLE_ROUTE, FlowSpec, Match, Output, RuleClass, make_cookie
from hpcfabric.rules.routing import DragonflyRouter
from hpcfabric.rules.tables import PRIO_BYPASS, Route
from hpcfabric.topology.model import Fabric, Switch

if TYPE_CHECKING:  # pragma: no cover
    from hpcfabric.rules.context import Context


def dragonfly_remote_routes(ctx: Context, router: DragonflyRouter, sw: Switch) -> list[Route]:
    """Routes to every remote group: what ``router.to_group(sw, g, spread=g)``
    returns, from a table shared by the switches of a group (the global links
    of the group are looked up once, not once per switch), and Route values
    interned per (group, port)."""
    table = ctx.shared.get(("df-remote", sw.group))
    if table is None:
        table = []
        per_group = router.globals.get(sw.group, {})
        for g in ctx.groups:
            if g == sw.group:
                continue
            links = per_group.get(g)
            if not links:
                raise CompileError(f"no global link from group {sw.group} to group {g}")
            mine: dict[int, int] = {}
            for s, port in links:  # sorted: the first port of a switch is its lowest
                mine.setdefault(s, port)
            table.append((g, mine, links[g % len(links)][0]))
        ctx.shared[("df-remote", sw.group)] = table
    interned = ctx.shared.setdefault("df-routes", {})
    s, base = sw.index, router.p + router.h + 1
    out = []
    touched = router.touched
    for g, mine, holder in table:
        if g in touched:  # a group with a failure: the surviving fabric's route (routing.DragonflyRouter)
            port = router.to_group(sw, g, spread=g)
        else:
            port = mine.get(s)
            if port is None:
                port = base + (holder if holder < s else holder - 1)
        route = interned.get((g, port))
        if route is None:
            route = interned[(g, port)] = Route(*ctx.group_prefix[g], port, RuleClass.ROUTE, True)
        out.append(route)
    return out


def group_prefixes(ctx: Context, g: int) -> list[tuple[int, int]]:
    """(bits, length) prefixes covering every host of group ``g``: its group prefix, else (no group field) its
    access switches' or hosts' prefixes."""
    if g in ctx.group_prefix:
        return [ctx.group_prefix[g]]
    if "switch" in ctx.layout.names:
        return [ctx.switch_prefix[m.name] for m in ctx.members.get(g, ())]
    return [ctx.host_prefix[h.name] for m in ctx.members.get(g, ()) for h in ctx.fabric.hosts_on(m.name)]


def dragonfly_bypass_flows(ctx: Context, router: DragonflyRouter, sw: Switch) -> list[FlowSpec]:
    """The surviving fabric's bypass overrides of ``sw`` (:meth:`DragonflyRouter.bypass_overrides`): ROUTE
    entries ``in_port + destination group`` above every prefix entry."""
    flows = []
    for g, in_port, out in router.bypass_overrides(sw):
        for bits, length in group_prefixes(ctx, g):
            flows.append(FlowSpec(TABLE_ROUTE, PRIO_BYPASS,
                                  Match(in_port=in_port, eth_dst=ctx.layout.prefix_match(bits, length)),
                                  (Output(out),), make_cookie(RuleClass.ROUTE, out)))
    return flows


def dragonfly_band(fabric: Fabric) -> tuple[int, int]:
    """The paper's compact-Dragonfly band [T+(S-1)+h+(S-1), T+(S-1)+(G-1)]."""
    prm = fabric.params
    t, s, h, g = prm["p"], prm["a"], prm["h"], prm["g"]
    return t + (s - 1) + h + (s - 1), t + (s - 1) + (g - 1)
