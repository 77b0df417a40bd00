"""Valiant routing: every frame a host injects towards a remote destination goes first to
an intermediate through the host's Valiant port (Dragonfly global port, FB highest-dimension
port), minimal from there.

The detours are PORT_STATE entries above the per-port ones, matching the
host's ingress port: they win over every default rule, paused or not. The
conditional policy reuses the same ports for its paused-only detours.
"""

from __future__ import annotations

from hpcfabric.rules.context import Context
from hpcfabric.rules.fabrics.flattened_butterfly import fb_dim_match, fb_dim_ports
from hpcfabric.rules.flows import TABLE_PORT_STATE, FlowSpec, Match, Output, RuleClass, make_cookie
from hpcfabric.rules.tables import METADATA_DIMS_SHIFT, METADATA_PORT_MASK, PRIO_VALIANT_ALWAYS
from hpcfabric.topology.model import Fabric, Host, Switch


def valiant_ports(fabric: Fabric, sw: Switch) -> list[int]:
    """Ports towards Valiant intermediates: Dragonfly global ports, FB highest-dimension ports."""
    if fabric.kind == "flattened_butterfly":
        top = len(fabric.params["dims"]) - 1
        return [port for d, _, port in fb_dim_ports(fabric, sw) if d == top]
    return [p for p, peer in sorted(fabric.fabric_ports(sw.name).items()) if peer.kind == "global"]


def detour_row_bit(fabric: Fabric) -> int:
    """The metadata bit a detour must see set (0: detour every remote destination).

    FB: only frames whose default port is in the top dimension (destination in
    another top-dimension row) detour. From a top-dimension intermediate the
    minimal route fixes the top coordinate first, so a destination in the own
    row would go straight back through the port it came in on, which an
    OpenFlow switch never does (it drops the frame). The metadata of every FB
    default rule carries its lower dimensions; dimension top-1 is among them
    exactly when the default port is a top one.
    """
    if fabric.kind == "flattened_butterfly" and len(fabric.params["dims"]) > 1:
        return 1 << (METADATA_DIMS_SHIFT + len(fabric.params["dims"]) - 2)
    return 0


def static_intermediates(valiant: list[int], index: int) -> tuple[int, ...]:
    """The static Valiant ports of host ``index``: port ``index mod n`` and, when there are two or
    more, the next one (for when the first is the paused default port itself)."""
    first = valiant[index % len(valiant)]
    return (first, valiant[(index + 1) % len(valiant)]) if len(valiant) > 1 else (first,)


def host_intermediates(ctx: Context, sw: Switch, host: Host, valiant: list[int]) -> tuple[int, ...]:
    """The Valiant ports of ``host`` in preference order: chosen for a traffic matrix
    (``ctx.intermediates``, :mod:`hpcfabric.rules.policies.workload`) or static; on the surviving
    fabric a port whose link is out gives way to the next live one (empty: none is live)."""
    chosen = ctx.intermediates.get(sw.name, {}).get(host.port) if ctx.intermediates else None
    prefs = tuple(chosen) if chosen else static_intermediates(valiant, host.index)
    return live_rotation(ctx, sw, prefs, valiant) if ctx.failures else prefs


def live_rotation(ctx: Context, sw: Switch, prefs: tuple[int, ...], ports: list[int]) -> tuple[int, ...]:
    """``prefs`` with each port whose link is out replaced by the next live one of ``ports`` after it
    (in their order, wrapping, not repeating one already chosen)."""
    live = [p for p in ports if ctx.router.live(sw.name, p)]
    out: list[int] = []
    for p in prefs:
        if p in live:
            if p not in out:
                out.append(p)
            continue
        at = ports.index(p) if p in ports else 0
        for i in range(1, len(ports) + 1):
            q = ports[(at + i) % len(ports)]
            if q in live and q not in out:
                out.append(q)
                break
    return tuple(out)


def detour_flow(table: int, priority: int, in_port: int, metadata: tuple[int, int] | None, out: int) -> FlowSpec:
    """A Valiant detour: frames from host port ``in_port`` (and ``metadata``) leave through ``out``."""
    return FlowSpec(table, priority, Match(in_port=in_port, metadata=metadata), (Output(out),),
                    make_cookie(RuleClass.ALTERNATIVE, out))


def redirected_detours(ctx: Context, sw: Switch, prefs: tuple[int, ...],
                       valiant: list[int]) -> list[tuple[int, int | None, int | None]]:
    """Dragonfly on the surviving fabric: ``(group g, first, second)`` for every destination group ``g`` for which
    the host's detour ports ``prefs`` lead to an intermediate group with no live link to ``g``; ``first`` and
    ``second`` are the first two live Valiant ports, in the host's rotation, into groups that have one (or are
    ``g``); None where there is none. Every detour then keeps the Valiant shape (two global hops)."""
    router = ctx.router
    if ctx.failures and prefs and ctx.fabric.kind == "flattened_butterfly":
        return fb_redirected_detours(ctx, sw, prefs, valiant)
    if not ctx.failures or not ctx.redirect or ctx.fabric.kind != "dragonfly" or not prefs:
        return []
    group_of = {p: router.port_group(sw, p) for p in valiant}  # type: ignore[attr-defined]
    lost: set[int] = set()
    for p in prefs[:2]:
        lost |= router.missing_from(group_of[p])  # type: ignore[attr-defined]
    lost.discard(sw.group)
    at = valiant.index(prefs[0])
    order = [valiant[(at + i) % len(valiant)] for i in range(len(valiant))]
    out = []
    for g in sorted(lost):
        ok = [p for p in order if router.live(sw.name, p)
              and (group_of[p] == g or router.group_reaches(group_of[p], g))]  # type: ignore[attr-defined]
        first, second = (ok + [None, None])[:2]
        if (first, second) != (prefs[0], prefs[1] if len(prefs) > 1 else None):
            out.append((g, first, second))
    return out


def fb_redirected_detours(ctx: Context, sw: Switch, prefs: tuple[int, ...],
                          valiant: list[int]) -> list[tuple[int, int | None, int | None]]:
    """Flattened Butterfly on the surviving fabric: :func:`redirected_detours` with the top-dimension coordinate
    ``c`` of the destination for the group: the intermediates (top-dimension neighbours) behind ``prefs`` whose
    link to coordinate ``c`` is out give way to the first two in the host's rotation that have it (or are
    ``c``), so the detour keeps two hops and never comes back to bypass through its source."""
    router = ctx.router
    top = len(ctx.fabric.params["dims"]) - 1
    coord = {p: v for d, v, p in fb_dim_ports(ctx.fabric, sw) if d == top}

    def reaches(p: int, c: int) -> bool:
        mid = router.at[router.row(sw.coords, top, coord[p])]  # type: ignore[attr-defined]
        return coord[p] == c or (mid.name not in ctx.failures.switches
                                 and router.link_up(mid, top, c))  # type: ignore[attr-defined]

    at = valiant.index(prefs[0])
    order = [valiant[(at + i) % len(valiant)] for i in range(len(valiant))]
    want = (prefs[0], prefs[1] if len(prefs) > 1 else None)
    out = []
    for c in range(ctx.fabric.params["dims"][top]):
        if c == sw.coords[top] or all(reaches(p, c) for p in prefs[:2]):
            continue
        ok = [p for p in order if router.live(sw.name, p) and reaches(p, c)]
        first, second = (ok + [None, None])[:2]
        if (first, second) != want:
            out.append((c, first, second))
    return out


def redirect_targets(ctx: Context, sw: Switch, g: int) -> tuple[list[tuple[int, int]], int | None]:
    """(eth_dst matches, minimal port) of a redirect's destinations: Dragonfly group ``g``'s prefixes, or the FB
    top-dimension coordinate ``g``."""
    if ctx.fabric.kind == "flattened_butterfly":
        top = len(ctx.fabric.params["dims"]) - 1
        return [fb_dim_match(ctx.fabric, ctx.plan, top, g)], ctx.router.dim_out(sw, top, g)  # type: ignore[attr-defined]
    from hpcfabric.rules.fabrics.dragonfly import group_prefixes

    return [ctx.layout.prefix_match(bits, length) for bits, length in group_prefixes(ctx, g)], ctx.router.to_group(sw, g)


def redirect_flows(ctx: Context, sw: Switch, table: int, priority: int, in_port: int, row: tuple[int, int] | None,
                   redirects: list[tuple[int, int | None, int | None]], second: bool) -> list[FlowSpec]:
    """The entries of :func:`redirected_detours`, above the host's own detour entries: frames for group ``g``
    (and ``row``) leave by ``first`` (none: by the minimal port, waiting there if it is paused), and with
    ``second`` also ``metadata = first`` (that port is the paused default one) -> ``second`` (none: wait on
    ``first``)."""
    flows = []
    bit, mask = row if row is not None else (0, 0)
    for g, first, nxt in redirects:
        dsts, minimal = redirect_targets(ctx, sw, g)
        out = first if first is not None else minimal
        if out is None:
            continue
        for dst in dsts:
            flows.append(FlowSpec(table, priority, Match(in_port=in_port, eth_dst=dst, metadata=row), (Output(out),),
                                  make_cookie(RuleClass.ALTERNATIVE, out)))
            if second and first is not None:
                alt = nxt if nxt is not None else first
                flows.append(FlowSpec(table, priority + 1, Match(in_port=in_port, eth_dst=dst,
                                                                 metadata=(first | bit, METADATA_PORT_MASK | mask)),
                                      (Output(alt),), make_cookie(RuleClass.ALTERNATIVE, alt)))
    return flows


def valiant_flows(ctx: Context, sw: Switch) -> list[FlowSpec]:
    """PORT_STATE entries sending what each host of ``sw`` injects to its intermediate (always non-minimal)."""
    fabric = ctx.fabric
    valiant = valiant_ports(fabric, sw)
    row_bit = detour_row_bit(fabric)
    flows = []
    for host in fabric.hosts_on(sw.name) if valiant else ():
        prefs = host_intermediates(ctx, sw, host, valiant)
        if prefs:  # no live Valiant port (failures): minimal
            flows.append(detour_flow(TABLE_PORT_STATE, PRIO_VALIANT_ALWAYS, host.port,
                                     (row_bit, row_bit) if row_bit else None, prefs[0]))
            flows += redirect_flows(ctx, sw, TABLE_PORT_STATE, PRIO_VALIANT_ALWAYS + 1, host.port,
                                    (row_bit, row_bit) if row_bit else None,
                                    redirected_detours(ctx, sw, prefs, valiant), second=False)
    return flows
