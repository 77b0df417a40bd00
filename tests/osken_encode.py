"""FlowSpec -> the framework's (os-ken's) OpenFlow 1.3 objects: the tests' reference encoder.

The controller sends :mod:`hpcfabric.openflow.ofwire` bytes; ``test_controller_unit`` checks that they are the
bytes os-ken serialises for :func:`to_flow_mod` (same field choices), and ``bench/install_rate.py``'s naive app
installs with it. :mod:`hpcfabric.controller.ofmsg` reads the objects back.
"""

from __future__ import annotations

from typing import Any

from hpcfabric.controller.framework import ofproto as ofp
from hpcfabric.controller.framework import ofproto_parser as parser
from hpcfabric.openflow.ofwire import OFPFC_ADD, OFPFC_DELETE, OFPFC_DELETE_STRICT, flow_mod_addressing
from hpcfabric.rules.addressing import format_mac
from hpcfabric.rules.flows import (MAC_EXACT, OFPP_CONTROLLER, VLAN_VID_EXACT, FlowSpec, Group, Learn, Match, Output,
                                   PopVlan, PushVlan, Resubmit, SetField)

_ALL64 = (1 << 64) - 1
_MAC_FIELDS = ("eth_src", "eth_dst")
_NX_IN_PORT = 0xFFF8


def to_match(match: Match) -> Any:
    kw: dict[str, Any] = {}
    if match.reg0 is not None:
        v, m = match.reg0
        kw["reg0"] = v if m == 0xFFFFFFFF else (v, m)
    if match.in_port is not None:
        kw["in_port"] = match.in_port
    if match.eth_type is not None:
        kw["eth_type"] = match.eth_type
    if match.vlan_vid is not None:
        v, m = match.vlan_vid
        kw["vlan_vid"] = v if m == VLAN_VID_EXACT else (v, m)
    if match.vlan_pcp is not None:
        kw["vlan_pcp"] = match.vlan_pcp
    for name in _MAC_FIELDS:
        vm = getattr(match, name)
        if vm is not None:
            kw[name] = format_mac(vm[0]) if vm[1] == MAC_EXACT else (format_mac(vm[0]), format_mac(vm[1]))
    if match.metadata is not None:
        v, m = match.metadata
        kw["metadata"] = v if m == _ALL64 else (v, m)
    return parser.OFPMatch(**kw)


def to_action(action: Any) -> Any:
    if isinstance(action, Output):
        max_len = ofp.OFPCML_NO_BUFFER if action.port == OFPP_CONTROLLER else 0
        return parser.OFPActionOutput(action.port, max_len)
    if isinstance(action, SetField):
        value = format_mac(action.value) if action.field in _MAC_FIELDS else action.value
        return parser.OFPActionSetField(**{action.field: value})
    if isinstance(action, PushVlan):
        return parser.OFPActionPushVlan(action.ethertype)
    if isinstance(action, PopVlan):
        return parser.OFPActionPopVlan()
    if isinstance(action, Group):
        return parser.OFPActionGroup(action.group_id)
    if isinstance(action, Resubmit):
        return parser.NXActionResubmitTable(in_port=_NX_IN_PORT, table_id=action.table)
    if isinstance(action, Learn):
        specs = [parser.NXFlowSpecMatch(src=(m.src, m.src_ofs), dst=(m.dst, m.dst_ofs), n_bits=m.n_bits)
                 for m in action.matches]
        specs += [parser.NXFlowSpecLoad(src=x.value, dst=(x.dst, x.dst_ofs), n_bits=x.n_bits) for x in action.loads]
        return parser.NXActionLearn(table_id=action.table, specs=specs, idle_timeout=action.idle_timeout,
                                    hard_timeout=action.hard_timeout, priority=action.priority, cookie=action.cookie)
    raise TypeError(f"unknown action {action!r}")


def to_instructions(flow: FlowSpec) -> list[Any]:
    inst: list[Any] = []
    if flow.meter is not None:
        inst.append(parser.OFPInstructionMeter(flow.meter))
    if flow.actions:
        inst.append(parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, [to_action(a) for a in flow.actions]))
    if flow.write_metadata is not None:
        inst.append(parser.OFPInstructionWriteMetadata(*flow.write_metadata))
    if flow.goto is not None:
        inst.append(parser.OFPInstructionGotoTable(flow.goto))
    return inst


def to_flow_mod(datapath: Any, flow: FlowSpec, command: int = OFPFC_ADD) -> Any:
    """``OFPFlowMod`` for ``flow`` (the command semantics of :func:`hpcfabric.openflow.ofwire.flow_mod_addressing`)."""
    cookie, mask, out_port, out_group = flow_mod_addressing(flow, command)
    instructions = [] if command in (OFPFC_DELETE, OFPFC_DELETE_STRICT) else to_instructions(flow)
    return parser.OFPFlowMod(
        datapath,
        cookie=cookie,
        cookie_mask=mask,
        table_id=flow.table,
        command=command,
        idle_timeout=0,
        hard_timeout=0,
        priority=flow.priority,
        buffer_id=ofp.OFP_NO_BUFFER,
        out_port=out_port,
        out_group=out_group,
        flags=0,
        match=to_match(flow.match),
        instructions=instructions,
    )
