"""Minimal routing: the ROUTE table of one switch, per addressing mode and fabric kind.

``flat``, ``per-switch`` and ``per-group`` addressing emit the routes of
:mod:`hpcfabric.rules.destinations` as exact prefixes; ``compact`` uses the
fabric kind's lower-bound table (:data:`COMPACT_BY_KIND`) or, for Dragonfly
and explicit fabrics, ORTC over the per-group routes.

With ``default_rules`` (valiant and conditional policies) routes become


default rules (metadata = port, go to PORT_STATE): inter-group routes on
Dragonfly and explicit fabrics, every route but host delivery on a Flattened
Butterfly (with the lower dimensions a paused frame may turn to), uplinks on
fat-trees and folded Clos.
"""

from __future__ import annotations

from dataclasses import replace

from hpcfabric.rules.context import Context, lpm_flows
from hpcfabric.rules.destinations import ROUTES_BY_MODE, per_group_routes
from hpcfabric.rules.fabrics.flattened_butterfly import fb_compact_flows, fb_dim_ports, fb_surviving_flows
from hpcfabric.rules.fabrics.updown import UP_DOWN_KINDS, fat_tree_compact_flows, folded_clos_compact_flows, uplinks
from hpcfabric.rules.fabrics.dragonfly import dragonfly_bypass_flows
from hpcfabric.rules.flows import FlowSpec, RuleClass
from hpcfabric.rules.routing import DragonflyRouter
from hpcfabric.topology.model import Switch

#: lower-bound compact tables (one entry per port in use) by fabric kind
COMPACT_BY_KIND = {
    "flattened_butterfly": fb_compact_flows,
    "fat_tree": fat_tree_compact_flows,
    "folded_clos": folded_clos_compact_flows,
}


def minimal_flows(ctx: Context, sw: Switch, default_rules: bool = False) -> list[FlowSpec]:
    """Table-ROUTE entries of ``sw`` (host delivery and routing)."""
    fabric, mode = ctx.fabric, ctx.plan.mode
    if fabric.kind in UP_DOWN_KINDS and default_rules and mode != "compact":
        ups = set(uplinks(fabric, sw))
        routes = [replace(r, conditional=r.port in ups) for r in ROUTES_BY_MODE[mode](ctx, sw)]
        return lpm_flows(ctx.cache, routes, False, True)
    if fabric.kind == "flattened_butterfly" and default_rules and mode == "per-group":
        # every FB route is a default rule (in-row destinations too, as in compact addressing)
        dim_of = {port: d for d, _, port in fb_dim_ports(fabric, sw)}
        routes = [
            r if r.rule_class == RuleClass.HOST or r.port is None  # None: no surviving route, dropped
            else replace(r, conditional=True, dims=(1 << dim_of[r.port]) - 1)
            for r in per_group_routes(ctx, sw)
        ]
        return lpm_flows(ctx.cache, routes, False, True) + (fb_surviving_flows(ctx, sw) if ctx.failures else [])
    if mode in ROUTES_BY_MODE:
        return lpm_flows(ctx.cache, ROUTES_BY_MODE[mode](ctx, sw), False, default_rules) + bypass_flows(ctx, sw)
    compact = COMPACT_BY_KIND.get(fabric.kind)
    if compact is not None:
        return compact(ctx, sw, default_rules)
    return lpm_flows(ctx.cache, per_group_routes(ctx, sw), True, default_rules) + bypass_flows(ctx, sw)


def bypass_flows(ctx: Context, sw: Switch) -> list[FlowSpec]:
    """A surviving Dragonfly's bypass overrides (:func:`dragonfly_bypass_flows`); none otherwise."""
    if ctx.failures and isinstance(ctx.router, DragonflyRouter):
        return dragonfly_bypass_flows(ctx, ctx.router, sw)
    return []
