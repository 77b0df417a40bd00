"""Up-down fabrics (fat-tree, folded Clos): levels, uplinks and the compact tables.

Compact tables sit at the lower bound, one entry per port in use: frames go
down by destination prefix and up by ``in_port`` (the source's attachment
point, i.e. a static hash of the source address bits). Down entries have LPM
priorities above the up entries, so a frame whose destination is below never
goes up, and a frame that came down and matches nothing is dropped: no loops,
even for unowned addresses. Under conditional routing the up entries are


default rules (the next uplink is the alternative); down entries stay
unconditional (one path down).
"""

from __future__ import annotations

from hpcfabric.errors import CompileError
from hpcfabric.rules.context import Context, lpm_flows, route_entry
from hpcfabric.rules.destinations import host_routes, per_group_routes
from hpcfabric.rules.flows import TABLE_PORT_STATE, TABLE_ROUTE, FlowSpec, Match, Output, RuleClass, make_cookie
from hpcfabric.rules.routing import FoldedClosRouter
from hpcfabric.rules.tables import METADATA_MASK, PRIO_LPM_BASE, PRIO_UP, Route
from hpcfabric.topology.model import Fabric, Switch

UP_DOWN_KINDS = ("fat_tree", "folded_clos")


def updown_level(fabric: Fabric, sw: Switch) -> int:
    """Level of ``sw`` in an up-down fabric (fat-tree, folded Clos): 1 = edge, rising to the core."""
    if fabric.kind == "folded_clos":
        return int(sw.coords[0])
    return {"edge": 1, "aggregation": 2, "core": 3}[sw.role]


def uplinks(fabric: Fabric, sw: Switch) -> list[int]:
    """Fat-tree, folded Clos: the ports of ``sw`` that lead one level up (edge -> ... -> core)."""
    level = updown_level(fabric, sw)
    return sorted(
        p for p, peer in fabric.fabric_ports(sw.name).items() if updown_level(fabric, fabric.switch(peer.node)) > level
    )


def fat_tree_compact_flows(ctx: Context, sw: Switch, conditional: bool = False) -> list[FlowSpec]:
    """Fat-tree at the lower bound: down by destination prefix, up by in_port.

    With ``conditional`` the up entries are default rules (metadata = uplink,
    go to PORT_STATE); down entries stay unconditional (one path down).
    """
    half = ctx.fabric.params["k"] // 2
    if sw.role == "core":
        return lpm_flows(ctx.cache, per_group_routes(ctx, sw), compact=True)
    if sw.role == "edge":
        down = host_routes(ctx, sw)
        # host on port 1+t (rank t) goes up to aggregation (t + edge index) mod k/2
        ups = [(h.port, half + 1 + (h.index + sw.index) % half) for h in ctx.fabric.hosts_on(sw.name)]
    else:  # aggregation: edges of its pod below, edge i goes up to core index i
        down = [Route(*ctx.switch_prefix[e.name], 1 + e.index, RuleClass.ROUTE) for e in ctx.members[sw.group]]
        ups = [(1 + i, half + 1 + i % half) for i in range(half)]
    flows = lpm_flows(ctx.cache, down, compact=True)
    for in_port, out in ups:
        out = live_uplink(ctx, sw, out)  # type: ignore[assignment]
        if out is None:
            continue
        cookie = make_cookie(RuleClass.ROUTE, out)
        if conditional:
            flows.append(
                FlowSpec(TABLE_ROUTE, PRIO_UP, Match(in_port=in_port), (), cookie, goto=TABLE_PORT_STATE,
                         write_metadata=(out, METADATA_MASK))
            )
        else:
            flows.append(FlowSpec(TABLE_ROUTE, PRIO_UP, Match(in_port=in_port), (Output(out),), cookie))
    return flows


def live_uplink(ctx: Context, sw: Switch, out: int) -> int | None:
    """``out``, or on the surviving fabric (its link out) the next live uplink (None: none is)."""
    if not ctx.failures or ctx.router.live(sw.name, out):
        return out
    return ctx.router.up(out - ctx.router.half - 1, sw)  # type: ignore[attr-defined]


def split_masks(n: int, free_bits: int) -> list[tuple[int, int, int]]:
    """Partition the address space below a prefix into ``n`` ternary cubes on its
    lowest bits: ``(value, mask, bits)`` per cube, ``bits`` = low bits matched.

    With ``m = ceil(log2 n)``: ``2**m - n`` cubes match ``m-1`` low bits and
    the others ``m`` bits, so the shares differ by at most a factor of two.
    Never more cubes than ``2**free_bits``.
    """
    if n <= 1 or free_bits <= 0:
        return [(0, 0, 0)]
    m = min((n - 1).bit_length(), free_bits)
    n = min(n, 1 << m)
    q = (1 << m) - n  # cubes on m-1 bits
    out = [(r, (1 << (m - 1)) - 1, m - 1) for r in range(q)]
    for r in range(1 << m):
        if r % (1 << (m - 1)) >= q:
            out.append((r, (1 << m) - 1, m))
    return out


def folded_clos_compact_flows(ctx: Context, sw: Switch, conditional: bool = False) -> list[FlowSpec]:
    """Compact table of one folded-Clos switch: rules = ports in use.

    Down: edge -- each host exactly; level 2 -- each edge switch of its pod
    by (group, switch) prefix; level >= 3 and core -- each child block by its
    group prefix, split over parallel links to it by the destination's low
    address bits (:func:`split_masks`). Up (below the core): ``in_port = d``
    (down port d, i.e. the source's attachment) -> uplink ``k/2 + d``.
    With ``conditional`` the up entries are default rules (metadata = uplink,
    go to PORT_STATE), as on a fat-tree.
    """
    layout, cache = ctx.layout, ctx.cache
    router: FoldedClosRouter = ctx.router  # type: ignore[assignment]
    half, level = router.half, sw.coords[0]
    flows: list[FlowSpec]
    if level == 1:
        flows = lpm_flows(cache, host_routes(ctx, sw), compact=False)
    elif level == 2:
        down = [Route(*ctx.switch_prefix[e.name], 1 + e.index, RuleClass.ROUTE) for e in ctx.members[sw.group]]
        flows = lpm_flows(cache, down, compact=False)
    else:
        gfield = layout.field("group")
        low_free = layout.used_bits
        shift = router.w * (level - 3)
        flows = []
        for prefix, ports in sorted(router.down[sw.name].items()):
            plen = gfield.width - shift
            if plen < 0 or prefix >> plen:
                raise CompileError(f"group field of {layout.describe()} too narrow for the Clos blocks")
            cubes = split_masks(len(ports), low_free - plen)
            for port, (val, mask, nbits) in zip(ports, cubes):
                key = ("clos", prefix, plen, val, mask, port)
                flow = cache.flows.get(key)
                if flow is None:
                    pv, pm = layout.prefix_match(prefix, plen)
                    match = Match(eth_dst=(pv | val, pm | mask))
                    flow = route_entry(PRIO_LPM_BASE + plen + nbits, match, port, RuleClass.ROUTE, None)
                    cache.flows[key] = flow
                flows.append(flow)
    if level < router.stages:
        for d in range(1, half + 1):
            out = live_uplink(ctx, sw, half + d)  # type: ignore[assignment]
            if out is None:
                continue
            key = ("up", d, out, conditional)
            flow = cache.flows.get(key)
            if flow is None:
                cookie = make_cookie(RuleClass.ROUTE, out)
                if conditional:
                    flow = FlowSpec(TABLE_ROUTE, PRIO_UP, Match(in_port=d), (), cookie, goto=TABLE_PORT_STATE,
                                    write_metadata=(out, METADATA_MASK))
                else:
                    flow = FlowSpec(TABLE_ROUTE, PRIO_UP, Match(in_port=d), (Output(out),), cookie)
                cache.flows[key] = flow
            flows.append(flow)
    return flows
