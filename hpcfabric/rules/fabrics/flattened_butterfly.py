"""Flattened Butterfly compilation: ports per dimension, the compact table (one
entry per port, dimension-order routing) and per-dimension address matches."""

from __future__ import annotations

from hpcfabric.errors import CompileError
from hpcfabric.rules.addressing import USABLE_BITS, AddressPlan, mask_to_mac, to_mac
from hpcfabric.rules.context import Context
from hpcfabric.rules.destinations import host_routes
from hpcfabric.rules.flows import FlowSpec, RuleClass
from hpcfabric.rules.tables import METADATA_DIMS_SHIFT
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
    return flows


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
