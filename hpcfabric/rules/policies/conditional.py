"""Conditional (adaptive) routing: ALTERNATIVE entries, taken only while a default rule's port is paused.

By priority: FB lower-dimension routes (minimal adaptive, taken only when the


default rule's metadata allows that dimension); fat-tree / folded Clos: the
next uplink (any uplink is minimal); Valiant detours for frames injected by
this switch's hosts (one intermediate per host port, as in the paper's
Fig. 10, and a second one for when the first sits behind the paused port
itself). On a Dragonfly whose switches have one global port each (h = 1) the
host's only intermediate *is* behind that port: while it is paused, frames
the switch's hosts inject towards it go to a group neighbour instead, whose
"bounce" entry sends them on through its own global port
(:func:`neighbour_detours`). Transit frames fall through to the per-port
fallbacks (:func:`hpcfabric.rules.port_state.default_rule_flows`): they keep
their minimal path and wait, so they can never loop.
"""

from __future__ import annotations

from hpcfabric.rules.context import Context
from hpcfabric.rules.fabrics.flattened_butterfly import fb_dim_match, fb_dim_ports
from hpcfabric.rules.fabrics.updown import UP_DOWN_KINDS, uplinks
from hpcfabric.rules.flows import TABLE_ALTERNATIVE, TABLE_PORT_STATE, FlowSpec, Match, Output, RuleClass, make_cookie
from hpcfabric.rules.policies.valiant import (
    detour_flow, detour_row_bit, host_intermediates, live_rotation, redirect_flows, redirected_detours, valiant_ports,
)
from hpcfabric.rules.tables import (
    METADATA_DIMS_SHIFT, METADATA_PORT_MASK, PRIO_ALT_DIM, PRIO_ALT_UP, PRIO_BOUNCE, PRIO_VALIANT,
)
from hpcfabric.topology.model import Switch


def conditional_flows(ctx: Context, sw: Switch) -> list[FlowSpec]:
    """The ALTERNATIVE entries of ``sw`` (besides the per-port fallbacks)."""
    fabric, plan = ctx.fabric, ctx.plan
    flows = []
    if fabric.kind in UP_DOWN_KINDS:
        ups = uplinks(fabric, sw)
        for i, port in enumerate(ups if len(ups) > 1 else ()):
            nxt = ups[(i + 1) % len(ups)]
            if ctx.failures:  # the next live uplink (the surviving fabric)
                later = [ups[(i + j) % len(ups)] for j in range(1, len(ups))]
                live = [q for q in later if ctx.router.live(sw.name, q)]
                if not live:
                    continue
                nxt = live[0]
            flows.append(
                FlowSpec(
                    TABLE_ALTERNATIVE,
                    PRIO_ALT_UP,
                    Match(metadata=(port, METADATA_PORT_MASK)),
                    (Output(nxt),),
                    make_cookie(RuleClass.ALTERNATIVE, nxt),
                )
            )
        return flows
    if fabric.kind == "flattened_butterfly":
        top = len(fabric.params["dims"]) - 1
        for d, v, port in fb_dim_ports(fabric, sw):
            if d == top or (ctx.failures and not ctx.router.link_up(sw, d, v)):  # type: ignore[attr-defined]
                continue  # an alternative is minimal or nothing (surviving fabric: no bypass; pair routes)
            value, mask = fb_dim_match(fabric, plan, d, v)
            bit = 1 << (METADATA_DIMS_SHIFT + d)
            flows.append(
                FlowSpec(
                    TABLE_ALTERNATIVE,
                    PRIO_ALT_DIM + d,
                    Match(eth_dst=(value, mask), metadata=(bit, bit)),
                    (Output(port),),
                    make_cookie(RuleClass.ALTERNATIVE, port),
                )
            )
    valiant = valiant_ports(fabric, sw)
    row_bit = detour_row_bit(fabric)
    for host in fabric.hosts_on(sw.name) if valiant else ():
        prefs = host_intermediates(ctx, sw, host, valiant)
        if not prefs:  # no live Valiant port (failures): transit-like, the fallbacks wait
            continue
        out = prefs[0]
        flows.append(detour_flow(TABLE_ALTERNATIVE, PRIO_VALIANT, host.port, (row_bit, row_bit) if row_bit else None, out))
        if len(valiant) > 1 and len(prefs) > 1:  # the host's intermediate is behind the paused port itself: the next
            second = prefs[1]
            flows.append(detour_flow(TABLE_ALTERNATIVE, PRIO_VALIANT + 1, host.port,
                                     (out | row_bit, METADATA_PORT_MASK | row_bit), second))
        flows += redirect_flows(ctx, sw, TABLE_ALTERNATIVE, PRIO_VALIANT + 2, host.port,
                                (row_bit, row_bit) if row_bit else None,
                                redirected_detours(ctx, sw, prefs, valiant), second=len(valiant) > 1)
    if fabric.kind == "dragonfly" and len(valiant) == 1:
        flows += neighbour_detours(ctx, sw, valiant[0])
    return flows


def neighbour_detours(ctx: Context, sw: Switch, glob: int) -> list[FlowSpec]:
    """Dragonfly, one global port ``glob`` per switch: the detour while it is paused.

    * ALTERNATIVE, per own host: ``in_port=H, metadata=glob`` (the default port is the paused
      global one) -> a local port, spread over the neighbours by host index; one above the Valiant
      entry, which would leave through ``glob`` itself.
    * PORT_STATE, per local port ``L``: ``in_port=L, metadata=L`` -> ``glob``. Only a detour sent by
      the neighbour behind ``L`` matches it: its destination group is reached through that
      neighbour's global port, so this switch's minimal route points back out of ``L`` (which an
      OpenFlow switch never does: it would drop the frame). It goes on through this switch's global
      port to a Valiant intermediate, minimal from there: l-g-l-g-l, at most two global hops as for
      Valiant (CoS top/3 holds; docs/routing.md). Above the per-port entries, so it holds paused or not.
    """
    fabric = ctx.fabric
    ports = fabric.fabric_ports(sw.name)
    local = [p for p, peer in sorted(ports.items()) if peer.kind == "local"]
    flows = []
    for host in fabric.hosts_on(sw.name) if local else ():
        out = local[host.index % len(local)]
        if ctx.failures:  # a local port whose link is out gives way to the next live one
            prefs = live_rotation(ctx, sw, (out,), local)
            if not prefs:
                continue
            out = prefs[0]
        flows.append(FlowSpec(TABLE_ALTERNATIVE, PRIO_VALIANT + 1,
                              Match(in_port=host.port, metadata=(glob, METADATA_PORT_MASK)), (Output(out),),
                              make_cookie(RuleClass.ALTERNATIVE, out)))
    for port in local:
        flows.append(FlowSpec(TABLE_PORT_STATE, PRIO_BOUNCE, Match(in_port=port, metadata=(port, METADATA_PORT_MASK)),
                              (Output(glob),), make_cookie(RuleClass.ALTERNATIVE, glob)))
    return flows
