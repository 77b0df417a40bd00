"""OpenFlow 1.3 wire encoding of hpcfabric messages (pure, ``struct`` only).

The controller installs tens of thousands of flow entries; encoding them with
os-ken's message classes costs 100-250 us each. This module writes the same
bytes directly (``tests/test_controller_unit.py`` checks them byte for byte
against os-ken's serialisation) and caches every encoded flow-mod body: the
same :class:`~hpcfabric.rules.flows.FlowSpec` recurs on many switches, and
re-sending it only costs patching a new xid into the header.

Encoded here: FLOW_MOD (with meter instructions and group actions),
BARRIER_REQUEST, PACKET_OUT (actions = outputs), PORT_MOD, METER_MOD (one
drop band), GROUP_MOD (fast-failover buckets), ROLE_REQUEST, and the ONF
bundle extension (EXT-230) for OpenFlow 1.3: bundle control and bundle add.
"""

from __future__ import annotations

import struct
from typing import Iterable

from hpcfabric.rules.flows import (
    COOKIE_APP,
    COOKIE_APP_MASK,
    COOKIE_APP_SHIFT,
    MAC_EXACT,
    OFP_NO_BUFFER_LEN,
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
)

OFP_VERSION = 0x04
OFPT_ERROR, OFPT_ECHO_REQUEST = 1, 2
OFPET_HELLO_FAILED, OFPHFC_EPERM = 0, 1
OFPT_EXPERIMENTER = 4
OFPT_PACKET_OUT = 13
OFPT_FLOW_MOD = 14
OFPT_PORT_MOD = 16
OFPT_BARRIER_REQUEST = 20

OFPFC_ADD, OFPFC_MODIFY, OFPFC_MODIFY_STRICT, OFPFC_DELETE, OFPFC_DELETE_STRICT = 0, 1, 2, 3, 4
OFP_NO_BUFFER = 0xFFFFFFFF
OFPP_ANY = 0xFFFFFFFF
OFPG_ANY = 0xFFFFFFFF
OFPPC_NO_FWD = 1 << 5

OFPIT_GOTO_TABLE, OFPIT_WRITE_METADATA, OFPIT_APPLY_ACTIONS, OFPIT_METER = 1, 2, 4, 6
OFPAT_OUTPUT, OFPAT_PUSH_VLAN, OFPAT_POP_VLAN, OFPAT_GROUP, OFPAT_SET_FIELD = 0, 17, 18, 22, 25
OFPAT_EXPERIMENTER = 0xFFFF
NX_VENDOR_ID = 0x00002320  # Nicira: Open vSwitch's extension actions
NXAST_RESUBMIT_TABLE, NXAST_LEARN = 14, 16
NX_IN_PORT_DEFAULT = 0xFFF8  # resubmit with the frame's own in_port (16-bit OFPP_IN_PORT)
NX_LEARN_SRC_IMMEDIATE, NX_LEARN_DST_LOAD = 1 << 13, 1 << 11
#: OXM/NXM headers of the fields a learn spec may use (what os-ken writes), and what OVS may answer with
_LEARN_HEADER = {"in_port": 0x80000004, "metadata": 0x80000408, "reg0": 0x00010004}
_LEARN_FIELD = {0x80000004: "in_port", 0x00000002: "in_port", 0x80000408: "metadata", 0x00010004: "reg0"}
OFPT_GROUP_MOD, OFPT_METER_MOD, OFPT_ROLE_REQUEST = 15, 29, 24
OFPGC_ADD, OFPGC_MODIFY, OFPGC_DELETE = 0, 1, 2
OFPGT_ALL, OFPGT_SELECT, OFPGT_INDIRECT, OFPGT_FF = 0, 1, 2, 3
OFPMC_ADD, OFPMC_MODIFY, OFPMC_DELETE = 0, 1, 2
OFPMF_KBPS, OFPMF_PKTPS, OFPMF_BURST, OFPMF_STATS = 1, 2, 4, 8
OFPMBT_DROP = 1
OFPCR_ROLE_NOCHANGE, OFPCR_ROLE_EQUAL, OFPCR_ROLE_MASTER, OFPCR_ROLE_SLAVE = 0, 1, 2, 3

ONF_EXPERIMENTER_ID = 0x4F4E4600
ONF_ET_BUNDLE_CONTROL = 2300
ONF_ET_BUNDLE_ADD_MESSAGE = 2301
ONF_BCT_OPEN_REQUEST, ONF_BCT_OPEN_REPLY = 0, 1
ONF_BCT_CLOSE_REQUEST, ONF_BCT_CLOSE_REPLY = 2, 3
ONF_BCT_COMMIT_REQUEST, ONF_BCT_COMMIT_REPLY = 4, 5
ONF_BCT_DISCARD_REQUEST, ONF_BCT_DISCARD_REPLY = 6, 7
ONF_BF_ATOMIC, ONF_BF_ORDERED = 1, 2

#: OXM field numbers (class OFPXMC_OPENFLOW_BASIC) and value sizes
_OXM = {"in_port": (0, 4), "metadata": (2, 8), "eth_dst": (3, 6), "eth_src": (4, 6), "eth_type": (5, 2), "vlan_vid": (6, 2),
        "vlan_pcp": (7, 1)}
_ALL64 = (1 << 64) - 1
_FULL = {4: 0xFFFFFFFF, 8: _ALL64, 6: MAC_EXACT, 2: 0xFFFF, 1: 0xFF}

_HDR = struct.Struct("!BBHI")
_XID = struct.Struct("!I")
_FLOW_MOD = struct.Struct("!QQBBHHHIIIH2x")
OUR_COOKIE = COOKIE_APP << COOKIE_APP_SHIFT


def _pad8(n: int) -> int:
    return (n + 7) // 8 * 8


def _oxm(name: str, value: int, mask: int | None = None) -> bytes:
    field_no, size = _OXM[name]
    if mask is not None and mask == (VLAN_VID_EXACT if name == "vlan_vid" else _FULL[size]):
        mask = None
    if mask is None:
        return struct.pack("!I", 0x80000000 | field_no << 9 | size) + value.to_bytes(size, "big")
    return (
        struct.pack("!I", 0x80000000 | field_no << 9 | 1 << 8 | 2 * size)
        + value.to_bytes(size, "big")
        + mask.to_bytes(size, "big")
    )


def _nxm_reg0(value: int, mask: int) -> bytes:
    if mask == 0xFFFFFFFF:
        return struct.pack("!II", 0x00010004, value)
    return struct.pack("!III", 0x00010108, value, mask)


def _learn_spec(spec: LearnMatch | LearnLoad) -> bytes:
    if isinstance(spec, LearnMatch):
        head = spec.n_bits
        return struct.pack("!HIHIH", head, _LEARN_HEADER[spec.src], spec.src_ofs, _LEARN_HEADER[spec.dst], spec.dst_ofs)
    head = NX_LEARN_SRC_IMMEDIATE | NX_LEARN_DST_LOAD | spec.n_bits
    n = (spec.n_bits + 15) // 16 * 2
    return struct.pack("!H", head) + spec.value.to_bytes(n, "big") + struct.pack("!IH", _LEARN_HEADER[spec.dst], spec.dst_ofs)


def encode_learn(action: Learn) -> bytes:
    """NXAST_LEARN (Nicira extension action), padded to 8 bytes."""
    specs = b"".join(_learn_spec(x) for x in action.matches + action.loads)  # type: ignore[operator]
    body = struct.pack("!IHHHHQHBxHH", NX_VENDOR_ID, NXAST_LEARN, action.idle_timeout, action.hard_timeout,
                       action.priority, action.cookie, 0, action.table, 0, 0) + specs
    length = _pad8(4 + len(body))
    return struct.pack("!HH", OFPAT_EXPERIMENTER, length) + body + b"\0" * (length - 4 - len(body))


def encode_match(match: Match) -> bytes:
    """``ofp_match`` (OXM, padded to 8 bytes), fields in OXM order like os-ken."""
    fields = b""
    if match.reg0 is not None:  # Nicira class 0x0001 sorts before OpenFlow basic (0x8000), as in os-ken
        fields += _nxm_reg0(*match.reg0)
    for name in _OXM:  # in OXM field order
        value = getattr(match, name)
        if value is not None:
            fields += _oxm(name, *value) if isinstance(value, tuple) else _oxm(name, value)
    length = 4 + len(fields)
    return struct.pack("!HH", 1, length) + fields + b"\0" * (_pad8(length) - length)


def encode_action(action) -> bytes:
    if isinstance(action, Output):
        max_len = OFP_NO_BUFFER_LEN if action.port == OFPP_CONTROLLER else 0
        return struct.pack("!HHIH6x", OFPAT_OUTPUT, 16, action.port, max_len)
    if isinstance(action, SetField):
        oxm = _oxm(action.field, action.value)
        length = _pad8(4 + len(oxm))
        return struct.pack("!HH", OFPAT_SET_FIELD, length) + oxm + b"\0" * (length - 4 - len(oxm))
    if isinstance(action, PushVlan):
        return struct.pack("!HHH2x", OFPAT_PUSH_VLAN, 8, action.ethertype)
    if isinstance(action, PopVlan):
        return struct.pack("!HH4x", OFPAT_POP_VLAN, 8)
    if isinstance(action, Group):
        return struct.pack("!HHI", OFPAT_GROUP, 8, action.group_id)
    if isinstance(action, Resubmit):
        return struct.pack("!HHIHHB3x", OFPAT_EXPERIMENTER, 16, NX_VENDOR_ID, NXAST_RESUBMIT_TABLE, NX_IN_PORT_DEFAULT,
                           action.table)
    if isinstance(action, Learn):
        return encode_learn(action)
    raise TypeError(f"unknown action {action!r}")


def encode_instructions(flow: FlowSpec) -> bytes:
    out = b""
    if flow.meter is not None:
        out += struct.pack("!HHI", OFPIT_METER, 8, flow.meter)
    if flow.actions:
        acts = b"".join(encode_action(a) for a in flow.actions)
        out += struct.pack("!HH4x", OFPIT_APPLY_ACTIONS, 8 + len(acts)) + acts
    if flow.write_metadata is not None:
        out += struct.pack("!HH4xQQ", OFPIT_WRITE_METADATA, 24, *flow.write_metadata)
    if flow.goto is not None:
        out += struct.pack("!HHB3x", OFPIT_GOTO_TABLE, 8, flow.goto)
    return out


def flow_mod_addressing(flow: FlowSpec, command: int) -> tuple[int, int, int, int]:
    """(cookie, cookie mask, out_port, out_group) of a FLOW_MOD: ADD installs ``flow`` as is; MODIFY(_STRICT) /
    DELETE(_STRICT) address the entry by table, priority and match, restricted to hpcfabric cookies (cookie
    mask = the tag), so foreign flows are never changed."""
    if command == OFPFC_ADD:
        return flow.cookie, 0, 0, 0
    if command in (OFPFC_DELETE, OFPFC_DELETE_STRICT):
        return OUR_COOKIE, COOKIE_APP_MASK, OFPP_ANY, OFPG_ANY
    return flow.cookie, COOKIE_APP_MASK, 0, 0


def flow_mod_body(flow: FlowSpec, command: int = OFPFC_ADD) -> bytes:
    """A FLOW_MOD without its 8-byte header (:func:`flow_mod_addressing`; a delete carries no instructions)."""
    cookie, cookie_mask, out_port, out_group = flow_mod_addressing(flow, command)
    head = _FLOW_MOD.pack(
        cookie, cookie_mask, flow.table, command, 0, 0, flow.priority, OFP_NO_BUFFER, out_port, out_group, 0
    )
    instructions = b"" if command in (OFPFC_DELETE, OFPFC_DELETE_STRICT) else encode_instructions(flow)
    return head + encode_match(flow.match) + instructions


def header(msg_type: int, length: int, xid: int) -> bytes:
    return _HDR.pack(OFP_VERSION, msg_type, length, xid)


def barrier(xid: int) -> bytes:
    return header(OFPT_BARRIER_REQUEST, 8, xid)


def bundle_ctrl(xid: int, bundle_id: int, ctrl_type: int, flags: int = ONF_BF_ATOMIC | ONF_BF_ORDERED) -> bytes:
    body = struct.pack("!IIIHH", ONF_EXPERIMENTER_ID, ONF_ET_BUNDLE_CONTROL, bundle_id, ctrl_type, flags)
    return header(OFPT_EXPERIMENTER, 8 + len(body), xid) + body


def bundle_add(xid: int, bundle_id: int, inner: bytes, flags: int = ONF_BF_ATOMIC | ONF_BF_ORDERED) -> bytes:
    """Wrap an encoded message (its xid must equal ``xid``, OF1.3 bundle extension 3.3)."""
    body = struct.pack("!III2xH", ONF_EXPERIMENTER_ID, ONF_ET_BUNDLE_ADD_MESSAGE, bundle_id, flags)
    return header(OFPT_EXPERIMENTER, 8 + len(body) + len(inner), xid) + body + inner


def packet_out(xid: int, ports: Iterable[int], data: bytes, in_port: int = OFPP_CONTROLLER) -> bytes:
    """PACKET_OUT of ``data`` (no buffer) with one output action per port."""
    acts = b"".join(encode_action(Output(p)) for p in ports)
    body = struct.pack("!IIH6x", OFP_NO_BUFFER, in_port, len(acts)) + acts + data
    return header(OFPT_PACKET_OUT, 8 + len(body), xid) + body


def port_mod(xid: int, port: int, hw_addr: bytes, config: int, mask: int, advertise: int = 0) -> bytes:
    body = struct.pack("!I4x6s2xIII4x", port, hw_addr, config, mask, advertise)
    return header(OFPT_PORT_MOD, 8 + len(body), xid) + body


def meter_mod(xid: int, meter_id: int, rate: int, burst: int = 0, command: int = OFPMC_ADD,
              pktps: bool = True) -> bytes:
    """METER_MOD with one drop band (``rate`` packets/s, or kb/s without ``pktps``; ``burst`` 0: none)."""
    flags = (OFPMF_PKTPS if pktps else OFPMF_KBPS) | OFPMF_STATS | (OFPMF_BURST if burst else 0)
    band = struct.pack("!HHII4x", OFPMBT_DROP, 16, rate, burst) if command != OFPMC_DELETE else b""
    body = struct.pack("!HHI", command, flags, meter_id) + band
    return header(OFPT_METER_MOD, 8 + len(body), xid) + body


def group_mod(xid: int, group_id: int, buckets: Iterable[tuple[int, Iterable]], command: int = OFPGC_ADD,
              group_type: int = OFPGT_FF) -> bytes:
    """GROUP_MOD; ``buckets`` = (watch_port, actions) pairs (fast-failover: the first live bucket is used)."""
    body_b = b""
    if command != OFPGC_DELETE:
        for watch, actions in buckets:
            acts = b"".join(encode_action(a) for a in actions)
            body_b += struct.pack("!HHII4x", 16 + len(acts), 0, watch, OFPG_ANY) + acts
    body = struct.pack("!HBxI", command, group_type, group_id) + body_b
    return header(OFPT_GROUP_MOD, 8 + len(body), xid) + body


def role_request(xid: int, role: int, generation_id: int) -> bytes:
    body = struct.pack("!I4xQ", role, generation_id & 0xFFFFFFFFFFFFFFFF)
    return header(OFPT_ROLE_REQUEST, 8 + len(body), xid) + body


def echo_request(xid: int, data: bytes = b"") -> bytes:
    return header(OFPT_ECHO_REQUEST, 8 + len(data), xid) + data


def error(xid: int, etype: int, code: int, data: bytes = b"") -> bytes:
    """An OFPT_ERROR (e.g. OFPET_HELLO_FAILED / OFPHFC_EPERM with a text: why a session is refused)."""
    return header(OFPT_ERROR, 12 + len(data), xid) + struct.pack("!HH", etype, code) + data


class FlowModCache:
    """Encoded FLOW_MODs by (flow, command); :meth:`encode` only patches the xid.

    ``hits``/``misses`` count cache use (a flow shared by many switches is
    encoded once).
    """

    def __init__(self) -> None:
        self._bodies: dict[tuple[FlowSpec, int], tuple[bytes, bytes]] = {}
        #: by object identity first (no recursive hash of the flow; the entry holds the flow, so its id stays its own)
        self._ids: dict[tuple[int, int], tuple[FlowSpec, tuple[bytes, bytes]]] = {}
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._bodies)

    def parts(self, flow: FlowSpec, command: int = OFPFC_ADD) -> tuple[bytes, bytes]:
        """(version/type/length prefix, body) of the FLOW_MOD."""
        hit = self._ids.get((id(flow), command))
        if hit is not None and hit[0] is flow:
            self.hits += 1
            return hit[1]
        key = (flow, command)
        got = self._bodies.get(key)
        if got is None:
            body = flow_mod_body(flow, command)
            got = (struct.pack("!BBH", OFP_VERSION, OFPT_FLOW_MOD, 8 + len(body)), body)
            self._bodies[key] = got
            self.misses += 1
        else:
            self.hits += 1
        if len(self._ids) >= 1 << 22:  # transient flows (reroutes) must not pile up
            self._ids.clear()
        self._ids[(id(flow), command)] = (flow, got)
        return got

    def encode(self, flow: FlowSpec, xid: int, command: int = OFPFC_ADD) -> bytes:
        prefix, body = self.parts(flow, command)
        return prefix + _XID.pack(xid) + body

    def clear(self) -> None:
        self._bodies.clear()
        self._ids.clear()


# ---------------------------------------------------------------------------
# decoding what switches report (flow stats), without os-ken's object model


class Undecodable(ValueError):
    """Bytes that a FlowSpec cannot represent (unknown match field, action or instruction) or that are truncated."""


_OXM_NAMES = {field_no: (name, size) for name, (field_no, size) in _OXM.items()}
_STATS_HEAD = struct.Struct("!HBxIIHHHH4xQQQ")
FLOW_STATS_HEAD = _STATS_HEAD.size  # 48


def decode_match(buf: bytes, offset: int = 0) -> tuple[Match, int]:
    """An OXM ``ofp_match`` at ``offset`` -> (Match, padded length)."""
    mtype, length = struct.unpack_from("!HH", buf, offset)
    if mtype != 1 or length < 4:
        raise Undecodable(f"match type {mtype} / length {length} is not OXM")
    end = offset + length
    if end > len(buf):
        raise Undecodable("truncated match")
    kw: dict[str, object] = {}
    pos = offset + 4
    while pos + 4 <= end:
        (head,) = struct.unpack_from("!I", buf, pos)
        oxm_class, field_no, hasmask, size = head >> 16, head >> 9 & 0x7F, head >> 8 & 1, head & 0xFF
        pos += 4
        if pos + size > end:
            raise Undecodable("truncated OXM field")
        known = _OXM_NAMES.get(field_no) if oxm_class == 0x8000 else ("reg0", 4) if (oxm_class, field_no) == (1, 0) else None
        if known is None:
            raise Undecodable(f"OXM class {oxm_class:#x} field {field_no}")
        name, width = known
        if size != width * (2 if hasmask else 1):
            raise Undecodable(f"OXM {name} of length {size}")
        value = int.from_bytes(buf[pos : pos + width], "big")
        if hasmask:
            mask = int.from_bytes(buf[pos + width : pos + size], "big")
            if name in ("in_port", "eth_type", "vlan_pcp"):
                raise Undecodable(f"masked {name}")
            kw[name] = (value & mask, mask)
        elif name in ("metadata", "eth_dst", "eth_src", "reg0"):
            kw[name] = (value, _FULL[width])
        elif name == "vlan_vid":
            kw[name] = (value, VLAN_VID_EXACT)
        else:
            kw[name] = value
        pos += size
    return Match(**kw), _pad8(length)  # type: ignore[arg-type]


def _decode_actions(buf: bytes, pos: int, end: int) -> tuple:
    out: list = []
    while pos < end:
        atype, alen = struct.unpack_from("!HH", buf, pos)
        if alen < 8 or pos + alen > end:
            raise Undecodable(f"action of length {alen}")
        if atype == OFPAT_OUTPUT:
            (port,) = struct.unpack_from("!I", buf, pos + 4)
            out.append(Output(port))
        elif atype == OFPAT_SET_FIELD:
            (head,) = struct.unpack_from("!I", buf, pos + 4)
            field_no, hasmask, size = head >> 9 & 0x7F, head >> 8 & 1, head & 0xFF
            known = _OXM_NAMES.get(field_no) if head >> 16 == 0x8000 and not hasmask else None
            if known is None or known[0] not in ("eth_src", "eth_dst", "vlan_pcp") or size != known[1]:
                raise Undecodable(f"set_field of OXM {head:#x}")
            out.append(SetField(known[0], int.from_bytes(buf[pos + 8 : pos + 8 + size], "big")))
        elif atype == OFPAT_PUSH_VLAN:
            (ethertype,) = struct.unpack_from("!H", buf, pos + 4)
            out.append(PushVlan(ethertype))
        elif atype == OFPAT_POP_VLAN:
            out.append(PopVlan())
        elif atype == OFPAT_GROUP:
            (gid,) = struct.unpack_from("!I", buf, pos + 4)
            out.append(Group(gid))
        elif atype == OFPAT_EXPERIMENTER and alen >= 16:
            out.append(_decode_nx(buf, pos, pos + alen))
        else:
            raise Undecodable(f"action type {atype}")
        pos += alen
    return tuple(out)


def _decode_nx(buf: bytes, pos: int, end: int) -> Resubmit | Learn:
    """A Nicira extension action: resubmit to a table (own in_port) or learn."""
    vendor, subtype = struct.unpack_from("!IH", buf, pos + 4)
    if vendor != NX_VENDOR_ID:
        raise Undecodable(f"experimenter action {vendor:#x}")
    if subtype == NXAST_RESUBMIT_TABLE:
        in_port, table = struct.unpack_from("!HB", buf, pos + 10)
        if in_port != NX_IN_PORT_DEFAULT:
            raise Undecodable(f"resubmit with in_port {in_port}")
        return Resubmit(table)
    if subtype != NXAST_LEARN or end - pos < 32:
        raise Undecodable(f"Nicira action subtype {subtype}")
    idle, hard, prio, cookie, flags, table, _pad, fin_idle, fin_hard = struct.unpack_from("!HHHQHBBHH", buf, pos + 10)
    if flags or fin_idle or fin_hard:
        raise Undecodable("learn with flags or FIN timeouts")
    matches: list[LearnMatch] = []
    loads: list[LearnLoad] = []
    p = pos + 32
    while p + 2 <= end:
        (head,) = struct.unpack_from("!H", buf, p)
        if head == 0:
            break  # padding
        n_bits, src_imm, dst_type = head & 0x7FF, head & NX_LEARN_SRC_IMMEDIATE, head >> 11 & 3
        p += 2
        if src_imm:
            n = (n_bits + 15) // 16 * 2
            value = int.from_bytes(buf[p : p + n], "big")
            p += n
        else:
            src_h, src_ofs = struct.unpack_from("!IH", buf, p)
            p += 6
        dst_h, dst_ofs = struct.unpack_from("!IH", buf, p)
        p += 6
        dst = _LEARN_FIELD.get(dst_h)
        if dst is None or p > end:
            raise Undecodable(f"learn spec destination {dst_h:#x}")
        if dst_type == 0 and not src_imm and src_h in _LEARN_FIELD:
            matches.append(LearnMatch(dst, _LEARN_FIELD[src_h], n_bits, dst_ofs, src_ofs))
        elif dst_type == 1 and src_imm:
            loads.append(LearnLoad(dst, value, n_bits, dst_ofs))
        else:
            raise Undecodable(f"learn spec {head:#06x}")
    return Learn(table, prio, hard, cookie, tuple(matches), tuple(loads), idle)


def decode_instructions(buf: bytes, pos: int, end: int, meters: list | None = None
                        ) -> tuple[tuple, int | None, tuple[int, int] | None]:
    """(actions, goto, write_metadata) of the instructions in ``buf[pos:end]``.

    A meter instruction is appended to ``meters`` when given, else it is undecodable.
    """
    actions: tuple = ()
    goto = None
    metadata = None
    while pos < end:
        itype, ilen = struct.unpack_from("!HH", buf, pos)
        if ilen < 8 or pos + ilen > end:
            raise Undecodable(f"instruction of length {ilen}")
        if itype == OFPIT_APPLY_ACTIONS:
            actions = _decode_actions(buf, pos + 8, pos + ilen)
        elif itype == OFPIT_GOTO_TABLE:
            goto = buf[pos + 4]
        elif itype == OFPIT_WRITE_METADATA:
            metadata = struct.unpack_from("!QQ", buf, pos + 8)
        elif itype == OFPIT_METER and meters is not None:
            meters.append(struct.unpack_from("!I", buf, pos + 4)[0])
        else:
            raise Undecodable(f"instruction type {itype}")
        pos += ilen
    return actions, goto, metadata


class FlowStatsEntry:
    """One ``ofp_flow_stats`` entry: the header fields, its raw match, and the FlowSpec (None if undecodable)."""

    __slots__ = ("length", "table", "priority", "cookie", "packet_count", "byte_count", "duration", "match_raw",
                 "spec", "reason")

    def __init__(self, buf: bytes, offset: int = 0) -> None:
        if offset + FLOW_STATS_HEAD + 4 > len(buf):
            raise Undecodable("truncated flow stats entry")
        (self.length, self.table, dsec, dnsec, self.priority, _idle, _hard, _flags, self.cookie, self.packet_count,
         self.byte_count) = _STATS_HEAD.unpack_from(buf, offset)
        self.duration = dsec + dnsec / 1e9
        end = offset + self.length
        if self.length < FLOW_STATS_HEAD + 8 or end > len(buf):
            raise Undecodable("bad flow stats entry length")
        mstart = offset + FLOW_STATS_HEAD
        (mlen,) = struct.unpack_from("!H", buf, mstart + 2)
        self.match_raw = bytes(buf[mstart : mstart + _pad8(mlen)])
        self.spec: FlowSpec | None = None
        self.reason: str | None = None
        try:
            match, padded = decode_match(buf, mstart)
            meters: list[int] = []
            actions, goto, metadata = decode_instructions(buf, mstart + padded, end, meters)
            self.spec = FlowSpec(self.table, self.priority, match, actions, self.cookie, goto, metadata,
                                 meters[-1] if meters else None)
        except (Undecodable, ValueError, struct.error) as err:
            self.reason = str(err)


def flow_mod_raw_match(table: int, priority: int, match_raw: bytes, command: int = OFPFC_DELETE_STRICT) -> bytes:
    """A DELETE(_STRICT) FLOW_MOD body for an entry known only by its raw match (restricted to our cookies)."""
    head = _FLOW_MOD.pack(OUR_COOKIE, COOKIE_APP_MASK, table, command, 0, 0, priority, OFP_NO_BUFFER, OFPP_ANY, OFPG_ANY, 0)
    return head + match_raw
