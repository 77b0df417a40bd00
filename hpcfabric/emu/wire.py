"""OpenFlow 1.3 bytes the emulated switch sends: replies, packet-ins, port status, errors.

``struct`` only (the same spirit as :mod:`hpcfabric.openflow.ofwire`): the
emulator must stay cheap enough to run thousands of switches in a few
processes, so it never builds framework objects.
"""

from __future__ import annotations

import struct

VERSION = 4
HELLO, ERROR, ECHO_REQUEST, ECHO_REPLY, EXPERIMENTER = 0, 1, 2, 3, 4
FEATURES_REQUEST, FEATURES_REPLY, GET_CONFIG_REQUEST, GET_CONFIG_REPLY, SET_CONFIG = 5, 6, 7, 8, 9
PACKET_IN, FLOW_REMOVED, PORT_STATUS, PACKET_OUT, FLOW_MOD, GROUP_MOD, PORT_MOD, TABLE_MOD = 10, 11, 12, 13, 14, 15, 16, 17
MULTIPART_REQUEST, MULTIPART_REPLY, BARRIER_REQUEST, BARRIER_REPLY = 18, 19, 20, 21
ROLE_REQUEST, ROLE_REPLY, GET_ASYNC_REQUEST, GET_ASYNC_REPLY, SET_ASYNC, METER_MOD = 24, 25, 26, 27, 28, 29

MP_DESC, MP_FLOW, MP_AGGREGATE, MP_TABLE, MP_PORT_STATS = 0, 1, 2, 3, 4
MP_GROUP_DESC, MP_METER, MP_METER_CONFIG, MP_PORT_DESC = 7, 9, 10, 13
MPF_REPLY_MORE = 1

OFPP_MAX = 0xFFFFFF00
OFPP_CONTROLLER = 0xFFFFFFFD
OFPPC_NO_FWD = 1 << 5
OFPPS_LINK_DOWN = 1
OFPPR_ADD, OFPPR_DELETE, OFPPR_MODIFY = 0, 1, 2
OFPR_NO_MATCH, OFPR_ACTION = 0, 1

ONF_EXPERIMENTER_ID = 0x4F4E4600
ONF_ET_BUNDLE_CONTROL, ONF_ET_BUNDLE_ADD = 2300, 2301

# errors (type, code)
BAD_REQUEST_BAD_TYPE = (1, 1)
BAD_REQUEST_BAD_MULTIPART = (1, 2)
BAD_REQUEST_EPERM = (1, 5)
FLOW_MOD_BAD_TABLE_ID = (5, 2)
FLOW_MOD_BAD_COMMAND = (5, 6)
ROLE_STALE = (11, 1)
BUNDLE_BAD_ID = (0xFFFF, 0)  # experimenter error, see :func:`error`

#: one multipart reply message carries at most this many body bytes (the length field is 16 bits)
MP_CHUNK = 60000


def header(msg_type: int, length: int, xid: int) -> bytes:
    return struct.pack("!BBHI", VERSION, msg_type, length, xid)


def msg(msg_type: int, xid: int, body: bytes = b"") -> bytes:
    return header(msg_type, 8 + len(body), xid) + body


def hello(xid: int = 0) -> bytes:
    # one version bitmap element announcing OpenFlow 1.3 only
    elem = struct.pack("!HHI", 1, 8, 1 << VERSION)
    return msg(HELLO, xid, elem)


def error(xid: int, kind: tuple[int, int], offending: bytes) -> bytes:
    return msg(ERROR, xid, struct.pack("!HH", *kind) + offending[:64])


def features_reply(xid: int, dpid: int, n_tables: int = 254) -> bytes:
    caps = 0x1 | 0x2 | 0x4 | 0x8 | 0x40  # flow, table, port, group stats; port blocked
    return msg(FEATURES_REPLY, xid, struct.pack("!QIBB2xII", dpid, 0, n_tables, 0, caps, 0))


def port_struct(port_no: int, hw: bytes, name: str, config: int = 0, state: int = 0, speed_kbps: int = 10_000_000) -> bytes:
    curr = 0x1000 | 0x800  # 10GB_FD | COPPER... close enough, the controller reads curr_speed
    return struct.pack("!I4x6s2x16sIIIIIIII", port_no, hw, name.encode()[:15], config, state, curr, curr, curr, 0,
                       speed_kbps, speed_kbps)


def port_status(reason: int, port: bytes) -> bytes:
    return msg(PORT_STATUS, 0, struct.pack("!B7x", reason) + port)


def multipart_replies(xid: int, mp_type: int, entries: list[bytes]) -> list[bytes]:
    """Entries packed into as many replies as needed, REPLY_MORE on all but the last."""
    out: list[bytes] = []
    chunk: list[bytes] = []
    size = 0
    for e in entries:
        if chunk and size + len(e) > MP_CHUNK:
            out.append(msg(MULTIPART_REPLY, xid, struct.pack("!HH4x", mp_type, MPF_REPLY_MORE) + b"".join(chunk)))
            chunk, size = [], 0
        chunk.append(e)
        size += len(e)
    out.append(msg(MULTIPART_REPLY, xid, struct.pack("!HH4x", mp_type, 0) + b"".join(chunk)))
    return out


def packet_in(in_port: int, data: bytes, reason: int = OFPR_ACTION, table_id: int = 0, cookie: int = 0) -> bytes:
    match = struct.pack("!HHIII", 1, 12, 0x80000004, in_port, 0)  # OXM in_port, padded to 16
    body = struct.pack("!IHBBQ", 0xFFFFFFFF, len(data), reason, table_id, cookie) + match + b"\0\0" + data
    return msg(PACKET_IN, 0, body)


def bundle_reply(xid: int, bundle_id: int, ctrl_type: int, flags: int) -> bytes:
    return msg(EXPERIMENTER, xid, struct.pack("!IIIHH", ONF_EXPERIMENTER_ID, ONF_ET_BUNDLE_CONTROL, bundle_id, ctrl_type,
                                              flags))


def desc_reply(xid: int, name: str) -> list[bytes]:
    body = struct.pack("!256s256s256s32s256s", b"hpcfabric", b"emulated OpenFlow 1.3 switch", b"hpcfabric.emu",
                       b"0", name.encode())
    return multipart_replies(xid, MP_DESC, [body])


def pad8(n: int) -> int:
    return (n + 7) // 8 * 8


def oxm_fields(match_raw: bytes) -> dict[int, bytes]:
    """OXM TLVs of an ``ofp_match`` (with its header) -> {class<<16|field<<1 (hasmask dropped): value+mask bytes}."""
    if len(match_raw) < 4:
        return {}
    length = struct.unpack_from("!H", match_raw, 2)[0]
    out: dict[int, bytes] = {}
    pos = 4
    while pos + 4 <= length:
        head = struct.unpack_from("!I", match_raw, pos)[0]
        n = head & 0xFF
        out[head >> 9] = bytes(match_raw[pos + 4:pos + 4 + n]) + bytes([head >> 8 & 1])
        pos += 4 + n
    return out
