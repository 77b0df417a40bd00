"""Flattened Butterfly compilation: ports per dimension, the compact table (one
entry per port, dimension-order routing) and per-dimension address matches."""

from __future__ import annotations

from hpcfabric.errors import CompileError
from hpcfabric.rules.addressing import USABLE_BITS, AddressPlan, mask_to_mac, to_mac
from hpcfabric.rules.context import Context, route_entry
from hpcfabric.rules.destinations import host_routes
from hpcfabric.rules.flows import FlowSpec, Match, RuleClass
from hpcfabric.rules.tables import METADATA_DIMS_SHIFT, PRIO_BYPASS, PRIO_FB_PAIR
from hpcfabric.topology.model import Fabric, Switch


def fb_dim_ports(fabric: Fabric, sw: Switch) -> list[tuple[int, int, int]]:
    """(dimension, coordinate, port) of every fabric port of an FB switch."""
    out = []
    base = fabric.params["hosts_per_switch"] + 1
    for d, k in enumerate(fabric.params["dims"]):
        for v in range(k):
            if v != sw.coords[d]:
                out.append((d, v, base + (v if v < sw.coords[d] else v - 1)))
        base += k - 1
    return out


def fb_compact_flows(ctx: Context, sw: Switch, conditional: bool = False) -> list[FlowSpec]:
    """Flattened Butterfly at the lower bound: one entry per port in use.

    Conditional default rules carry in metadata, above the port, the mask of
    the lower dimensions a paused frame may turn to (minimal adaptive routing).
    """
    flows = [ctx.cache.route(r.bits, r.length, r.port, RuleClass.HOST) for r in host_routes(ctx, sw)]
    for d, v, port in fb_dim_ports(ctx.fabric, sw):
        port = fb_out(ctx, sw, d, v, port)
        metadata = port | (((1 << d) - 1) << METADATA_DIMS_SHIFT) if conditional and port is not None else None
        flows.append(ctx.cache.dimension(d, v, port, metadata))
    if ctx.failures and conditional:
        flows += fb_surviving_flows(ctx, sw)
    return flows


def fb_surviving_flows(ctx: Context, sw: Switch) -> list[FlowSpec]:
    """A surviving FB's ROUTE entries beyond the per-port (or per-group) ones, adaptive policies
    (:mod:`hpcfabric.rules.rows`): for destinations that differ in a dimension ``d`` and a lower ``e`` where a
    minimal first hop would not do, the route of :meth:`~hpcfabric.rules.rows.RowBypasses.pair_route`
    (``dim_d = v`` and ``dim_e = x``, the dimensions above ``d`` the switch's own; priority by ``e``); the
    cross routes (:meth:`~hpcfabric.rules.rows.RowBypasses.cross_route`, one destination switch each); and the
    hubs' and relays' ``in_port`` overrides (:meth:`~hpcfabric.rules.rows.RowBypasses.relay_overrides`).
    Default rules: a paused port's frames take the alternatives ``dims`` allows, else wait."""
    router, coords = ctx.router, sw.coords
    dims = ctx.fabric.params["dims"]
    flows = []
    if sw.name not in router.near():  # type: ignore[attr-defined]
        return flows
    for d in range(1, len(dims)):
        above = {a: coords[a] for a in range(d + 1, len(dims))}
        for v in range(dims[d]):
            if v == coords[d]:
                continue
            for e in range(d):
                for x in range(dims[e]):
                    got = router.pair_route(sw, d, v, e, x)  # type: ignore[attr-defined]
                    if got is None:
                        continue
                    port, allowed = got
                    match = Match(eth_dst=fb_coords_match(ctx, {**above, d: v, e: x}))
                    metadata = None if port is None else port | allowed << METADATA_DIMS_SHIFT
                    flows.append(route_entry(PRIO_FB_PAIR + e, match, port, RuleClass.ROUTE, metadata))
    for e, k in enumerate(dims):  # destinations along e that e's row cannot reach: across a higher dimension
        for x in range(k):
            got = None if x == coords[e] else router.cross_route(sw, e, x)  # type: ignore[attr-defined]
            if got is not None:
                port = router.dim_port(sw, *got)  # type: ignore[attr-defined]
                match = Match(eth_dst=fb_coords_match(ctx, {**dict(enumerate(coords)), e: x}))
                flows.append(route_entry(PRIO_FB_PAIR + e, match, port, RuleClass.ROUTE, port))
    for fixed, in_port, out in router.relay_overrides(sw):  # type: ignore[attr-defined]
        values = {a: coords[a] for a in range(max(fixed) + 1, len(dims))} | fixed
        match = Match(in_port=in_port, eth_dst=fb_coords_match(ctx, values))
        flows.append(route_entry(PRIO_BYPASS, match, out, RuleClass.ROUTE, out))
    return flows


def fb_coords_match(ctx: Context, values: dict[int, int]) -> tuple[int, int]:
    """(value, mask) on eth_dst matching the FB coordinates ``{dimension: coordinate}`` (:func:`fb_dim_match`
    per dimension: compact or per-group addressing)."""
    if ctx.plan.mode == "compact":
        return ctx.layout.match({f"dim{d}": v for d, v in values.items()})
    value = mask = 0
    for d, v in values.items():
        dv, dm = fb_dim_match(ctx.fabric, ctx.plan, d, v)
        value, mask = value | dv, mask | dm
    return value, mask


def fb_out(ctx: Context, sw: Switch, d: int, v: int, port: int) -> int | None:
    """The port that fixes dimension ``d`` to ``v`` at ``sw``: ``port`` unless its link is out (then the
    row's bypass, :meth:`hpcfabric.rules.routing.FlattenedButterflyRouter.dim_out`; None: dropped)."""
    if not ctx.failures:
        return port
    return ctx.router.dim_out(sw, d, v)  # type: ignore[attr-defined]


def fb_dim_match(fabric: Fabric, plan: AddressPlan, d: int, v: int) -> tuple[int, int]:
    """(value, mask) on eth_dst matching FB coordinate ``dim_d == v`` only.

    Compact addressing has a field per dimension. Per-group addressing has
    ``group`` = the dimensions >= 1 in mixed radix (dimension 1 lowest) and
    ``switch`` = dimension 0: dimension 0 is the switch field; dimension d >= 1
    is a bit range of the group field when k_1 ... k_d are powers of two.
    """
    layout = plan.layout
    if plan.mode == "compact":
        return layout.match({f"dim{d}": v})
    if plan.mode != "per-group":
        raise CompileError(f"no per-dimension match in {plan.mode} addressing")
    if d == 0:
        return layout.match({"switch": v})
    dims = fabric.params["dims"]
    shift = 0
    for k in dims[1:d]:
        shift += k.bit_length() - 1
    if any(k & (k - 1) for k in dims[1 : d + 1]):
        raise CompileError(
            f"conditional/valiant routing on a Flattened Butterfly with per-group addressing needs power-of-two "
            f"sizes for dimensions 1..{d} (dims {list(dims)}): dimension {d} is not a bit range of the group "
            f"field; use compact addressing"
        )
    group = layout.field("group")
    width = dims[d].bit_length() - 1
    mask46 = ((1 << USABLE_BITS) - 1) & ~((1 << layout.used_bits) - 1)
    mask46 |= ((1 << width) - 1) << (group.shift + shift)
    return to_mac(v << (group.shift + shift)), mask_to_mac(mask46)
