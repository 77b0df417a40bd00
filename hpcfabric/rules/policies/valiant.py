"""Valiant routing: every frame a host injects towards a remote destination goes first to
an intermediate through the host's Valiant port (Dragonfly global port, FB highest-dimension
port), minimal from there.

The detours are PORT_STATE entries above the per-port ones, matching the
host's ingress port: they win over every default rule, paused or not. The
conditional policy reuses the same ports for its paused-only detours.
"""

from __future__ import annotations

from hpcfabric.rules.context import Context
from hpcfabric.rules.fabrics.flattened_butterfly import fb_dim_ports
from hpcfabric.rules.flows import TABLE_PORT_STATE, FlowSpec, Match, Output, RuleClass, make_cookie
from hpcfabric.rules.tables import METADATA_DIMS_SHIFT, PRIO_VALIANT_ALWAYS
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
    (``ctx.intermediates``, :mod:`hpcfabric.rules.policies.workload`) or static."""
    chosen = ctx.intermediates.get(sw.name, {}).get(host.port) if ctx.intermediates else None
    return tuple(chosen) if chosen else static_intermediates(valiant, host.index)


def detour_flow(table: int, priority: int, in_port: int, metadata: tuple[int, int] | None, out: int) -> FlowSpec:
    """A Valiant detour: frames from host port ``in_port`` (and ``metadata``) leave through ``out``."""
    return FlowSpec(table, priority, Match(in_port=in_port, metadata=metadata), (Output(out),),
                    make_cookie(RuleClass.ALTERNATIVE, out))


def valiant_flows(ctx: Context, sw: Switch) -> list[FlowSpec]:
    """PORT_STATE entries sending what each host of ``sw`` injects to its intermediate (always non-minimal)."""
    fabric = ctx.fabric
    valiant = valiant_ports(fabric, sw)
    row_bit = detour_row_bit(fabric)
    flows = []
    for host in fabric.hosts_on(sw.name) if valiant else ():
        out = host_intermediates(ctx, sw, host, valiant)[0]
        flows.append(detour_flow(TABLE_PORT_STATE, PRIO_VALIANT_ALWAYS, host.port,
                                 (row_bit, row_bit) if row_bit else None, out))
    return flows
