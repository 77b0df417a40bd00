"""On-the-fly MAC rewriting at the access switch (pure): the paper's alternative to DMP.

For hosts that cannot run the DMP client (Sec. IV, as in PortLand/MOOSE): the
access switch rewrites ``eth_src`` of frames from a host to its hierarchical
MAC and ``eth_dst`` of frames delivered to it back to its real MAC. It breaks
L2 service announcements that carry the MAC in the payload (Open-MX), which is
why DMP is the default.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterable, Mapping

from hpcfabric.rules.addressing import AddressPlan
from hpcfabric.rules.flows import (
    MAC_EXACT,
    TABLE_INGRESS,
    PushVlan,
    TABLE_ROUTE,
    FlowSpec,
    Match,
    Output,
    RuleClass,
    SetField,
    make_cookie,
    sort_flows,
)
from hpcfabric.topology.model import Fabric

#: Priority of the ingress rewrite entries: below the control-frame punts
#: (1900), above the table-miss goto.
PRIO_REWRITE = 1800


def rewrite_flows(
    fabric: Fabric, plan: AddressPlan, tables: Mapping[str, Iterable[FlowSpec]], real_macs: Mapping[str, int],
    *, cos: bool = False,
) -> dict[str, tuple[FlowSpec, ...]]:
    """Adapt compiled tables to ``host_mac = rewrite`` (the paper's PortLand-like alternative to DMP).

    On every access switch: frames from a host (``in_port`` = its port,
    ``eth_src`` = its real MAC) get ``eth_src`` rewritten to its hierarchical
    MAC in INGRESS before routing; every entry that outputs to a host port
    first rewrites ``eth_dst`` back to that host's real MAC. The DMP echo
    entries are dropped: a host that adopted its HMAC would not accept
    frames rewritten to its real MAC.

    ``cos``: the tables carry classes of service (``compiled.cos`` set). The
    rewrite entry sits above the CoS push (priority 100) and goes straight to
    ROUTE, so it tags the frame itself (``push_vlan``, PCP 0) like the push it
    bypasses; deliveries already pop the tag (``pop_vlan``, then the eth_dst
    rewrite, then the output).
    """
    tag = (PushVlan(), SetField("vlan_pcp", 0)) if cos else ()
    out: dict[str, tuple[FlowSpec, ...]] = {}
    for sw in fabric.switches:
        if sw.name not in tables:  # not compiled here (another controller's partition)
            continue
        hosts = {h.port: h for h in fabric.hosts_on(sw.name)}
        flows: list[FlowSpec] = []
        for flow in tables[sw.name]:
            if flow.rule_class == RuleClass.DMP:
                continue
            if any(isinstance(a, Output) and a.port in hosts for a in flow.actions):
                actions: list = []
                for a in flow.actions:
                    if isinstance(a, Output) and a.port in hosts:
                        actions.append(SetField("eth_dst", real_macs[hosts[a.port].name]))
                    actions.append(a)
                flow = replace(flow, actions=tuple(actions))
            flows.append(flow)
        for port, host in hosts.items():
            flows.append(
                FlowSpec(
                    TABLE_INGRESS,
                    PRIO_REWRITE,
                    Match(in_port=port, eth_src=(real_macs[host.name], MAC_EXACT)),
                    tag + (SetField("eth_src", plan.host_mac[host.name]),),
                    make_cookie(RuleClass.DMP, port),
                    goto=TABLE_ROUTE,
                )
            )
        out[sw.name] = sort_flows(flows)
    return out
