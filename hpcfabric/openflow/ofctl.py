"""Render FlowSpecs in ``ovs-ofctl -O OpenFlow13 add-flows`` syntax."""

from __future__ import annotations

from typing import Iterable

from hpcfabric.rules.addressing import format_mac
from hpcfabric.rules.flows import (
    MAC_EXACT,
    OFPP_CONTROLLER,
    OFPP_IN_PORT,
    FlowSpec,
    Group,
    Learn,
    LearnLoad,
    Match,
    Output,
    PopVlan,
    PushVlan,
    Resubmit,
    SetField,
)

#: ovs-ofctl names of the fields learn specs use
_NXM = {"in_port": "NXM_OF_IN_PORT", "metadata": "OXM_OF_METADATA", "reg0": "NXM_NX_REG0"}


def _sub(name: str, ofs: int, n_bits: int) -> str:
    width = {"in_port": 16, "metadata": 64, "reg0": 32}[name]
    if ofs == 0 and n_bits == width:
        return f"{_NXM[name]}[]"
    return f"{_NXM[name]}[{ofs}]" if n_bits == 1 else f"{_NXM[name]}[{ofs}..{ofs + n_bits - 1}]"


def learn_text(a: Learn) -> str:
    """``learn(...)`` in ovs-ofctl syntax."""
    parts = [f"table={a.table}"]
    if a.idle_timeout:
        parts.append(f"idle_timeout={a.idle_timeout}")
    if a.hard_timeout:
        parts.append(f"hard_timeout={a.hard_timeout}")
    parts += [f"priority={a.priority}", f"cookie={a.cookie:#x}"]
    for m in a.matches:
        src_bits = m.n_bits if m.src != "in_port" else min(m.n_bits, 16)
        parts.append(f"{_sub(m.dst, m.dst_ofs, m.n_bits)}={_sub(m.src, m.src_ofs, src_bits)}")
    for x in a.loads:
        parts.append(f"load:{x.value:#x}->{_sub(x.dst, x.dst_ofs, x.n_bits)}")
    return "learn(" + ",".join(parts) + ")"


def _masked_mac(value: int, mask: int) -> str:
    if mask == MAC_EXACT:
        return format_mac(value)
    return f"{format_mac(value)}/{format_mac(mask)}"


def match_text(match: Match) -> list[str]:
    parts = []
    if match.in_port is not None:
        parts.append(f"in_port={match.in_port}")
    if match.eth_type is not None:
        parts.append(f"dl_type={match.eth_type:#06x}")
    if match.vlan_vid is not None:
        # OVS's vlan_tci holds VID (bits 0-11), CFI = OFPVID_PRESENT (bit 12) and PCP (bits 13-15): one field
        # for both conditions (a separate dl_vlan_pcp after vlan_tci would be overwritten, before it lost)
        value, mask = match.vlan_vid
        if match.vlan_pcp is not None:
            value, mask = value | match.vlan_pcp << 13, mask | 0xE000
        parts.append(f"vlan_tci={value:#06x}/{mask:#06x}")
    elif match.vlan_pcp is not None:
        parts.append(f"dl_vlan_pcp={match.vlan_pcp}")
    if match.eth_src is not None:
        parts.append(f"dl_src={_masked_mac(*match.eth_src)}")
    if match.eth_dst is not None:
        parts.append(f"dl_dst={_masked_mac(*match.eth_dst)}")
    if match.metadata is not None:
        parts.append(f"metadata={match.metadata[0]:#x}/{match.metadata[1]:#x}")
    if match.reg0 is not None:
        parts.append(f"reg0={match.reg0[0]:#x}/{match.reg0[1]:#x}")
    return parts


def _port_text(port: int) -> str:
    if port == OFPP_IN_PORT:
        return "in_port"
    if port == OFPP_CONTROLLER:
        return "CONTROLLER:65535"
    return f"output:{port}"


def actions_text(flow: FlowSpec) -> str:
    out = [f"meter:{flow.meter}"] if flow.meter is not None else []
    for action in flow.actions:
        if isinstance(action, Output):
            out.append(_port_text(action.port))
        elif isinstance(action, SetField):
            value = format_mac(action.value) if action.field.startswith("eth_") else str(action.value)
            out.append(f"set_field:{value}->{action.field}")
        elif isinstance(action, PushVlan):
            out.append(f"push_vlan:{action.ethertype:#06x}")
        elif isinstance(action, PopVlan):
            out.append("pop_vlan")
        elif isinstance(action, Group):
            out.append(f"group:{action.group_id}")
        elif isinstance(action, Resubmit):
            out.append(f"resubmit(,{action.table})")
        elif isinstance(action, Learn):
            out.append(learn_text(action))
        elif isinstance(action, LearnLoad):
            out.append(f"load:{action.value:#x}->{_sub(action.dst, action.dst_ofs, action.n_bits)}")
        else:  # pragma: no cover - exhaustive over flows.Action
            raise TypeError(f"unknown action {action!r}")
    if flow.write_metadata is not None:
        out.append(f"write_metadata:{flow.write_metadata[0]:#x}/{flow.write_metadata[1]:#x}")
    if flow.goto is not None:
        out.append(f"goto_table:{flow.goto}")
    return ",".join(out) if out else "drop"


def flow_line(flow: FlowSpec) -> str:
    """One ``add-flows`` line, e.g. ``table=1,priority=1007,cookie=0x…,dl_dst=…,actions=output:3``."""
    head = [f"table={flow.table}", f"priority={flow.priority}", f"cookie={flow.cookie:#x}"]
    return ",".join(head + match_text(flow.match)) + f",actions={actions_text(flow)}"


def flows_text(flows: Iterable[FlowSpec]) -> str:
    return "".join(flow_line(f) + "\n" for f in flows)
