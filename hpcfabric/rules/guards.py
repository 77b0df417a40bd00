"""Ingress guards against hostile or broken hosts (pure table transforms, like :mod:`hpcfabric.rules.mac_rewrite`).

Two independent guards, both on access switches, both in table INGRESS:

**Source check** (``[guards] source_check = on``): a frame entering on a
host port must carry that port's hierarchical MAC as ``eth_src``
(``host_mac = rewrite``: or the host's real MAC, which the rewrite entry
turns into the HMAC). Everything else is dropped by a per-port drop entry
whose packet counter is the number of spoofed frames (polled for the
metrics). DMP requests are excepted -- they come before the host has its
HMAC -- because the DMP echo entry (priority 2000) sits above the guard;
the control-frame punts (LLDP, MAC control) also sit above it, so they
keep being counted by the controller, rate-limited by the punt meters.

================  ========  ====================================================
entry             priority  match -> instructions
================  ========  ====================================================
DMP echo          2000      ``in_port=P, eth_type=0x88b5`` -> set eth_src, IN_PORT
host punt         1950      ``in_port=P, eth_type=X`` -> meter HOST, CONTROLLER
punt              1900      ``eth_type=X`` -> meter FABRIC, CONTROLLER
rewrite           1800      (rewrite mode) ``in_port=P, eth_src=real`` -> set HMAC, goto 1
source allow      1700      ``in_port=P, eth_src=HMAC`` -> goto 1
source drop       1600      ``in_port=P`` -> drop (counted)
miss              0         -> goto 1
================  ========  ====================================================

**Punt meters** (``[guards] punt_meters = on``): every entry that sends
frames to the controller runs them through an OpenFlow meter with one
*drop* band first. Decision: **per class, per switch** -- meter
:data:`METER_FABRIC` for punts from fabric ports (LLDP, PAUSE/PFC from the
switches we control: their rate is known and bounded) and meter
:data:`METER_HOST` for punts from host ports (hosts are untrusted: a host
has no business sending LLDP or MAC-control frames to the controller
beyond a NIC's occasional PAUSE). A flooding host exhausts only the host
meter of its own switch: the fabric meter -- and so PAUSE reaction and
LLDP discovery -- is untouched, and the controller sees at most
``host_punt_pps`` frames/s per access switch from hosts. Per-port meters
would also isolate hosts from one another, but host punts carry nothing
the fabric needs, and per-class meters cost 2 meters per switch instead
of one per port (hardware meter tables are small).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable, Mapping

from hpcfabric.rules.addressing import AddressPlan
from hpcfabric.rules.flows import (
    MAC_EXACT,
    OFPP_CONTROLLER,
    TABLE_INGRESS,
    TABLE_ROUTE,
    FlowSpec,
    Match,
    Output,
    PushVlan,
    RuleClass,
    SetField,
    make_cookie,
    sort_flows,
)
from hpcfabric.topology.model import Fabric

PRIO_HOST_PUNT = 1950
PRIO_SOURCE_ALLOW = 1700
PRIO_SOURCE_DROP = 1600

METER_FABRIC = 1
METER_HOST = 2

#: cookie details of the guard entries (low 40 bits): kind << 32 | port
GUARD_ALLOW = 1
GUARD_DROP = 2
GUARD_HOST_PUNT = 3


@dataclass(frozen=True)
class Meter:
    """One OpenFlow meter: ``rate`` packets per second, ``burst`` packets, one drop band."""

    meter_id: int
    rate: int
    burst: int
    name: str


def guard_cookie(kind: int, port: int) -> int:
    return make_cookie(RuleClass.GUARD, (kind << 32) | (port & 0xFFFFFFFF))


def guard_kind(cookie: int) -> tuple[int, int]:
    """(kind, port) of a guard cookie."""
    detail = cookie & ((1 << 40) - 1)
    return detail >> 32, detail & 0xFFFFFFFF


def meters(fabric_pps: int, host_pps: int, burst: int | None = None) -> tuple[Meter, Meter]:
    """The two punt meters (``burst`` None: one second's worth, at least 10 packets)."""
    return (
        Meter(METER_FABRIC, fabric_pps, burst if burst is not None else max(10, fabric_pps), "fabric"),
        Meter(METER_HOST, host_pps, burst if burst is not None else max(10, host_pps), "host"),
    )


def _is_punt(flow: FlowSpec) -> bool:
    return any(isinstance(a, Output) and a.port == OFPP_CONTROLLER for a in flow.actions)


def guard_flows(
    fabric: Fabric,
    plan: AddressPlan,
    tables: Mapping[str, Iterable[FlowSpec]],
    *,
    source_check: bool = True,
    punt_meters: bool = True,
    cos: bool = False,
) -> dict[str, tuple[FlowSpec, ...]]:
    """``tables`` with the guards added (a new mapping; the input is not changed).

    In ``host_mac = rewrite`` mode the real MAC passes through the rewrite
    entry (priority 1800, above the guard), which sets the HMAC.

    ``cos``: the tables carry classes of service (``compiled.cos`` set): the
    source-allow entry bypasses the CoS push (priority 100) on its way to
    ROUTE, so it pushes the tag itself (``push_vlan``, PCP 0).
    """
    tag = (PushVlan(), SetField("vlan_pcp", 0)) if cos else ()
    out: dict[str, tuple[FlowSpec, ...]] = {}
    for sw in fabric.switches:
        if sw.name not in tables:  # not compiled here (another controller's partition)
            continue
        flows = list(tables[sw.name])
        hosts = fabric.hosts_on(sw.name)
        if punt_meters:
            punt_types = []
            metered = []
            for f in flows:
                if f.table == TABLE_INGRESS and _is_punt(f) and f.match.in_port is None:
                    if f.match.eth_type is not None:
                        punt_types.append(f.match.eth_type)
                    f = replace(f, meter=METER_FABRIC)
                elif _is_punt(f):
                    f = replace(f, meter=METER_FABRIC)
                metered.append(f)
            flows = metered
            for h in hosts:
                for eth_type in punt_types:
                    flows.append(
                        FlowSpec(
                            TABLE_INGRESS,
                            PRIO_HOST_PUNT,
                            Match(in_port=h.port, eth_type=eth_type),
                            (Output(OFPP_CONTROLLER),),
                            guard_cookie(GUARD_HOST_PUNT, h.port),
                            meter=METER_HOST,
                        )
                    )
        if source_check:
            for h in hosts:
                flows.append(
                    FlowSpec(
                        TABLE_INGRESS,
                        PRIO_SOURCE_ALLOW,
                        Match(in_port=h.port, eth_src=(plan.host_mac[h.name], MAC_EXACT)),
                        tag,
                        guard_cookie(GUARD_ALLOW, h.port),
                        goto=TABLE_ROUTE,
                    )
                )
                flows.append(
                    FlowSpec(TABLE_INGRESS, PRIO_SOURCE_DROP, Match(in_port=h.port), (), guard_cookie(GUARD_DROP, h.port))
                )
        out[sw.name] = sort_flows(flows)
    return out

