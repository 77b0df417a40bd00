"""The framework's (os-ken's) OpenFlow 1.3 objects as FlowSpecs: what a switch reports back.

:func:`from_flow_stats` / :func:`from_flow_mod`: an ``OFPFlowStats`` or a parsed ``OFPFlowMod`` as a
FlowSpec, for reconciliation. Anything a FlowSpec cannot express raises :class:`Unrepresentable`.
The controller sends with :mod:`hpcfabric.openflow.ofwire` (bytes, no objects); the tests' reference
encoder over the framework's objects (``tests/osken_encode.py``) checks it serialises the same bytes.
"""

from __future__ import annotations

from typing import Any

from hpcfabric.rules.addressing import parse_mac
from hpcfabric.rules.flows import (
    MAC_EXACT,
    VLAN_VID_EXACT,
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

_ALL64 = (1 << 64) - 1
_MAC_FIELDS = ("eth_src", "eth_dst")


class Unrepresentable(ValueError):
    """An installed flow uses match fields, actions or instructions a FlowSpec has no word for."""


#: os-ken's names of the fields a learn spec uses -> ours (OVS may answer with NXM in_port)
_LEARN_NAMES = {"in_port": "in_port", "in_port_nxm": "in_port", "metadata": "metadata", "reg0": "reg0"}
_NX_IN_PORT = 0xFFF8


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
