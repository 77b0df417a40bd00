"""Infrastructure entries of every switch: the DMP echo per host port, control-frame
punts (LLDP, PAUSE) and the table-miss entries; CNM copies for 802.1Qau snooping."""

from __future__ import annotations

from hpcfabric.rules.addressing import AddressPlan
from hpcfabric.rules.cos import cos_step_ports
from hpcfabric.rules.flows import (
    ETH_TYPE_CNM,
    ETH_TYPE_DMP,
    ETH_TYPE_LLDP,
    ETH_TYPE_PAUSE,
    OFPP_CONTROLLER,
    OFPP_IN_PORT,
    TABLE_INGRESS,
    TABLE_ROUTE,
    VLAN_TAGGED,
    FlowSpec,
    Match,
    Output,
    RuleClass,
    SetField,
    make_cookie,
)
from hpcfabric.rules.tables import PRIO_COS, PRIO_DMP, PRIO_MISS, PRIO_PUNT
from hpcfabric.topology.model import Fabric, Switch


def infra_flows(fabric: Fabric, plan: AddressPlan, sw: Switch, punts: bool) -> list[FlowSpec]:
    flows = []
    for h in fabric.hosts_on(sw.name):
        flows.append(
            FlowSpec(
                TABLE_INGRESS,
                PRIO_DMP,
                Match(in_port=h.port, eth_type=ETH_TYPE_DMP),
                (SetField("eth_src", plan.host_mac[h.name]), Output(OFPP_IN_PORT)),
                make_cookie(RuleClass.DMP, h.port),
            )
        )
    if punts:
        for eth_type in (ETH_TYPE_LLDP, ETH_TYPE_PAUSE):
            flows.append(
                FlowSpec(
                    TABLE_INGRESS,
                    PRIO_PUNT,
                    Match(eth_type=eth_type),
                    (Output(OFPP_CONTROLLER),),
                    make_cookie(RuleClass.PUNT, eth_type),
                )
            )
    flows.append(FlowSpec(TABLE_INGRESS, PRIO_MISS, Match(), (), make_cookie(RuleClass.INFRA, 0), goto=TABLE_ROUTE))
    flows.append(FlowSpec(TABLE_ROUTE, PRIO_MISS, Match(), (), make_cookie(RuleClass.INFRA, 1)))
    return flows


def cnm_snoop_flows(fabric: Fabric, sw: Switch, scheme: str | None, levels: int) -> list[FlowSpec]:
    """Table INGRESS entries copying 802.1Qau CNMs to the controller while they keep
    being forwarded to their reaction point (:mod:`hpcfabric.protocols.cnm`).

    Untagged fabrics: one entry per fabric port, at the punt priority. With
    classes of service, CNMs from fabric ports must take the same PCP step as
    data (they are routed like data): per fabric port, one entry per step
    (above the step) and one for the arrivals that do not step (below the
    steps); CNMs from hosts are not copied (a congestion point in a host says
    nothing about the fabric) and get the CoS push as any frame.
    """
    def cookie(port: int, k: int = 0) -> int:
        return make_cookie(RuleClass.PUNT, ETH_TYPE_CNM | port << 16 | (k + 1) << 32)

    if scheme is None:  # one copy entry per fabric port: CNMs from hosts are never copied
        return [
            FlowSpec(TABLE_INGRESS, PRIO_PUNT, Match(in_port=port, eth_type=ETH_TYPE_CNM), (Output(OFPP_CONTROLLER),),
                     cookie(port), goto=TABLE_ROUTE)
            for port in sorted(fabric.fabric_ports(sw.name))
        ]
    flows = []
    steps = set(cos_step_ports(fabric, sw, scheme))
    for port in sorted(fabric.fabric_ports(sw.name)):
        for k in range(levels - 1) if port in steps else ():
            flows.append(
                FlowSpec(TABLE_INGRESS, PRIO_COS + 1, Match(in_port=port, eth_type=ETH_TYPE_CNM, vlan_pcp=k,
                                                         vlan_vid=VLAN_TAGGED),
                         (Output(OFPP_CONTROLLER), SetField("vlan_pcp", k + 1)), cookie(port, k), goto=TABLE_ROUTE)
            )
        flows.append(
            FlowSpec(TABLE_INGRESS, PRIO_COS - 1, Match(in_port=port, eth_type=ETH_TYPE_CNM),
                     (Output(OFPP_CONTROLLER),), cookie(port, -1), goto=TABLE_ROUTE)
        )
    return flows
