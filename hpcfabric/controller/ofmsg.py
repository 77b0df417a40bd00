"""FlowSpec <-> the framework's (os-ken's) OpenFlow 1.3 objects.

* :func:`to_flow_mod`: a :class:`~hpcfabric.rules.flows.FlowSpec` as an ``OFPFlowMod``
  (same field choices as :mod:`hpcfabric.openflow.ofwire`, so both serialise to the
  same bytes);
* :func:`from_flow_stats` / :func:`from_flow_mod`: what a switch reports back
  (``OFPFlowStats``) or a parsed ``OFPFlowMod`` as a FlowSpec, for
  reconciliation. Anything a FlowSpec cannot express raises
  :class:`Unrepresentable`.
"""

from __future__ import annotations

from typing import Any

from hpcfabric.rules.addressing import format_mac, parse_mac
from hpcfabric.rules.flows import (
    MAC_EXACT,
    VLAN_VID_EXACT,
    OFPP_CONTROLLER,
    FlowSpec,
    Group,
    Learn,
    LearnLoad,
    LearnMatch,
    Match,
    Output,
    PopVlan,
    PushVlan,
    Resubmit,
    SetField,
    cookie_class,
    is_our_group,
)
from hpcfabric.controller.framework import ofproto as ofp
from hpcfabric.controller.framework import ofproto_parser as parser
from hpcfabric.openflow.ofwire import OFPFC_ADD, OFPFC_DELETE, OFPFC_DELETE_STRICT, flow_mod_addressing

_ALL64 = (1 << 64) - 1
_MAC_FIELDS = ("eth_src", "eth_dst")


class Unrepresentable(ValueError):
    """An installed flow uses match fields, actions or instructions a FlowSpec has no word for."""


#: os-ken's names of the fields a learn spec uses -> ours (OVS may answer with NXM in_port)
_LEARN_NAMES = {"in_port": "in_port", "in_port_nxm": "in_port", "metadata": "metadata", "reg0": "reg0"}
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


# ---------------------------------------------------------------------------
# back from the switch


def _masked_mac(value: Any) -> tuple[int, int]:
    if isinstance(value, tuple):
        return parse_mac(value[0]), parse_mac(value[1])
    return parse_mac(value), MAC_EXACT


def from_match(match: Any) -> Match:
    kw: dict[str, Any] = {}
    for name, value in match.items():
        if name in ("in_port", "eth_type", "vlan_pcp"):
            if isinstance(value, tuple):
                raise Unrepresentable(f"masked {name}")
            kw[name] = value
        elif name in _MAC_FIELDS:
            kw[name] = _masked_mac(value)
        elif name == "metadata":
            kw[name] = tuple(value) if isinstance(value, tuple) else (value, _ALL64)
        elif name == "reg0":
            kw[name] = tuple(value) if isinstance(value, tuple) else (value, 0xFFFFFFFF)
        elif name == "vlan_vid":
            kw[name] = (value[0] & value[1], value[1]) if isinstance(value, tuple) else (value, VLAN_VID_EXACT)
        else:
            raise Unrepresentable(f"match field {name}")
    return Match(**kw)


def from_action(action: Any) -> Any:
    if isinstance(action, parser.OFPActionOutput):
        return Output(action.port)
    if isinstance(action, parser.OFPActionSetField):
        if action.key in _MAC_FIELDS:
            return SetField(action.key, parse_mac(action.value))
        if action.key == "vlan_pcp":
            return SetField(action.key, action.value)
        raise Unrepresentable(f"set_field {action.key}")
    if isinstance(action, parser.OFPActionPushVlan):
        return PushVlan(action.ethertype)
    if isinstance(action, parser.OFPActionPopVlan):
        return PopVlan()
    if isinstance(action, parser.OFPActionGroup) and is_our_group(action.group_id):
        return Group(action.group_id)  # only hpcfabric's own (tagged) groups
    if isinstance(action, parser.NXActionResubmitTable) and action.in_port == _NX_IN_PORT:
        return Resubmit(action.table_id)
    if isinstance(action, parser.NXActionLearn) and not (action.flags or action.fin_idle_timeout
                                                           or action.fin_hard_timeout):
        return _from_learn(action)
    raise Unrepresentable(f"action {type(action).__name__}")


def _learn_field(spec_part: Any) -> tuple[str, int]:
    if not isinstance(spec_part, tuple) or spec_part[0] not in _LEARN_NAMES:
        raise Unrepresentable(f"learn spec field {spec_part!r}")
    return _LEARN_NAMES[spec_part[0]], spec_part[1]


def _from_learn(action: Any) -> Learn:
    matches, loads = [], []
    for spec in action.specs:
        dst, dst_ofs = _learn_field(spec.dst)
        if isinstance(spec, parser.NXFlowSpecMatch) and isinstance(spec.src, tuple):
            src, src_ofs = _learn_field(spec.src)
            matches.append(LearnMatch(dst, src, spec.n_bits, dst_ofs, src_ofs))
        elif isinstance(spec, parser.NXFlowSpecLoad) and isinstance(spec.src, int):
            loads.append(LearnLoad(dst, spec.src, spec.n_bits, dst_ofs))
        else:
            raise Unrepresentable(f"learn spec {type(spec).__name__}")
    return Learn(action.table_id, action.priority, action.hard_timeout, action.cookie, tuple(matches), tuple(loads),
                 action.idle_timeout)


def _spec(table: int, priority: int, cookie: int, match: Any, instructions: list[Any]) -> FlowSpec:
    actions: tuple = ()
    goto = None
    metadata = None
    meter = None
    for inst in instructions:
        if isinstance(inst, parser.OFPInstructionActions) and inst.type == ofp.OFPIT_APPLY_ACTIONS:
            actions = tuple(from_action(a) for a in inst.actions)
        elif isinstance(inst, parser.OFPInstructionGotoTable):
            goto = inst.table_id
        elif isinstance(inst, parser.OFPInstructionWriteMetadata):
            metadata = (inst.metadata, inst.metadata_mask)
        elif isinstance(inst, parser.OFPInstructionMeter) and cookie_class(cookie) is not None:
            meter = inst.meter_id  # our flows only: a meter is part of our guard entries (hpcfabric.rules.guards)
        else:
            raise Unrepresentable(f"instruction {type(inst).__name__} (type {getattr(inst, 'type', '?')})")
    return FlowSpec(table, priority, from_match(match), actions, cookie, goto, metadata, meter)


def from_flow_stats(stats: Any) -> FlowSpec:
    """An ``OFPFlowStats`` entry as a FlowSpec (raises :class:`Unrepresentable`)."""
    return _spec(stats.table_id, stats.priority, stats.cookie, stats.match, stats.instructions)


def from_flow_mod(msg: Any) -> FlowSpec:
    """A parsed ADD ``OFPFlowMod`` as a FlowSpec (round-trip tests)."""
    return _spec(msg.table_id, msg.priority, msg.cookie, msg.match, msg.instructions)
