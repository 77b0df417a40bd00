"""The fast PACKET_IN parser (hpcfabric.openflow.packetin, installed by launch.install_fast_packet_in) against the
framework's own: same message class, event and attributes, a lazy match that answers like the framework's
OFPMatch (fast fields without a full parse, everything else through one), malformed messages parsed by the
framework whole; and the app's handler fed real parsed packet-ins."""

from __future__ import annotations

import copy
import pickle
import struct
from pathlib import Path

import pytest
from test_ops_fakes import ROOT, fake_fabric, settle

from hpcfabric.controller import framework, launch
from hpcfabric.controller.framework import ofp_event, ofproto as O, ofproto_parser as P
from hpcfabric.emu import wire as W
from hpcfabric.openflow import packetin
from hpcfabric.protocols.lldp import build_lldp
from hpcfabric.protocols.pause import build_pause

SRC = bytes.fromhex("020000aabbcc")
LLDP = build_lldp(0x12, 7, SRC, nonce=b"12345678")
PAUSE = build_pause(SRC, 0xFFFF)
REFERENCE = P.OFPPacketIn.parser  # the framework's parser
FAST = packetin.packet_in_parser(P.OFPPacketIn, P.OFPMatch, REFERENCE)


def packet_in(match: P.OFPMatch, data: bytes, *, total_len: int | None = None, reason: int = 1, table_id: int = 3,
              cookie: int = 0x1122334455667788, buffer_id: int = 0xFFFFFFFF, xid: int = 77, pad: bytes = b"") -> bytes:
    """PACKET_IN bytes as a switch sends them: the match serialised by the framework, 2 pad bytes, the frame."""
    mbuf = bytearray()
    match.serialize(mbuf, 0)
    body = struct.pack("!IHBBQ", buffer_id, len(data) if total_len is None else total_len, reason, table_id, cookie)
    body += bytes(mbuf) + b"\0\0" + data + pad
    return struct.pack("!BBHI", 4, O.OFPT_PACKET_IN, 8 + len(body), xid) + body


def parse(parser, buf: bytes, datapath: object = None):
    version, msg_type, msg_len, xid = struct.unpack_from("!BBHI", buf)
    return parser(datapath, version, msg_type, msg_len, xid, bytearray(buf))  # the receive loop hands a bytearray


def assert_same(buf: bytes) -> None:
    ref = parse(REFERENCE, buf, "dp")
    fast = parse(FAST, buf, "dp")
    assert type(fast) is type(ref) is P.OFPPacketIn
    for attr in ("datapath", "version", "msg_type", "msg_len", "xid", "buf", "buffer_id", "total_len", "reason",
                 "table_id", "cookie", "data"):
        assert getattr(fast, attr) == getattr(ref, attr), attr
    assert set(vars(fast)) == set(vars(ref))
    assert isinstance(fast.data, bytes) and isinstance(fast.buf, bytes)
    present = dict(ref.match.items())
    m = fast.match
    assert isinstance(m, P.OFPMatch) and type(m) is not P.OFPMatch
    lazy = {k for k in present if k in packetin.FAST_FIELDS and not isinstance(present[k], tuple)}
    for key in sorted(lazy):  # answered from the TLVs, no full parse
        assert m[key] == present[key] and m.get(key) == present[key] and key in m
    for key in packetin.FAST_FIELDS.keys() - present.keys():
        assert key not in m and m.get(key, "none") == "none"
        with pytest.raises(KeyError):
            m[key]
    if not (present.keys() - lazy):
        assert "_fields2" not in vars(m), "a fast field built the full match"
    for key, value in present.items():  # the rest through the framework's match
        assert m[key] == value and m.get(key) == value and key in m
    assert "ipv6_exthdr" not in m and m.get("ipv6_exthdr") is None
    assert m.to_jsondict() == ref.match.to_jsondict()
    assert str(fast) == str(ref)
    assert [str(f) for f in m.fields] == [str(f) for f in ref.match.fields]


CASES = {
    "in_port, LLDP": (P.OFPMatch(in_port=7), LLDP),
    "in_port+metadata+tunnel_id, PAUSE": (P.OFPMatch(in_port=3, metadata=0xDEADBEEF00000001, tunnel_id=42), PAUSE),
    "big values": (P.OFPMatch(in_port=0xFFFFFF00, in_phy_port=0xFFFFFFFE, eth_type=0x88CC), LLDP),
    "masked": (P.OFPMatch(in_port=5, metadata=(0x100, 0xFF00), eth_dst=("01:80:c2:00:00:00", "ff:ff:ff:ff:ff:00"),
                          tunnel_id=(7, 0xFF)), PAUSE),
    "other fields": (P.OFPMatch(in_port=9, eth_type=0x0800, ipv4_src="10.0.0.1", vlan_vid=0x1005, ip_proto=6), LLDP),
    "no in_port": (P.OFPMatch(metadata=5), PAUSE),
    "empty match": (P.OFPMatch(), LLDP),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_fast_parse_equals_the_frameworks(name: str) -> None:
    match, data = CASES[name]
    assert_same(packet_in(match, data))


def test_data_lengths() -> None:
    m = P.OFPMatch(in_port=2)
    assert_same(packet_in(m, b""))  # no frame
    assert_same(packet_in(m, LLDP, total_len=20))  # a truncated punt (max_len): total_len < bytes sent
    assert_same(packet_in(m, LLDP, total_len=1500))  # the frame was longer than what was sent
    assert_same(packet_in(m, PAUSE, pad=b"\0" * 5))  # alignment padding after the frame
    buf = packet_in(m, PAUSE, total_len=10, buffer_id=5, reason=0, table_id=0, cookie=0)
    fast = parse(FAST, buf)
    assert fast.data == PAUSE[:10] and (fast.buffer_id, fast.reason, fast.table_id, fast.cookie) == (5, 0, 0, 0)


def test_the_emulators_packet_in() -> None:
    buf = W.packet_in(12, LLDP, reason=W.OFPR_ACTION, table_id=1, cookie=99)
    assert_same(buf)
    fast = parse(FAST, buf)
    assert fast.match["in_port"] == 12 and fast.data == LLDP and "_fields2" not in vars(fast.match)


def test_malformed_messages_go_to_the_framework_whole() -> None:
    good = packet_in(P.OFPMatch(in_port=7, metadata=1), LLDP)
    bad_tlv = bytearray(good)
    bad_tlv[24 + 4 + 3] = 9  # in_port TLV claims 9 value bytes: the TLVs overrun the match
    calls = []

    def reference(*args):
        calls.append(args)
        return REFERENCE(*args)

    fast = packetin.packet_in_parser(P.OFPPacketIn, P.OFPMatch, reference)
    for buf in (bytes(bad_tlv), good[:26], good[:24 + 16]):
        try:
            expected = ("ok", str(parse(REFERENCE, buf)))
        except Exception as err:  # noqa: BLE001 - whatever the framework raises, the fast path must too
            expected = ("raise", type(err))
        try:
            got = ("ok", str(parse(fast, buf)))
        except Exception as err:  # noqa: BLE001
            got = ("raise", type(err))
        assert got == expected
    assert len(calls) == 3
    not_oxm = bytearray(good)
    not_oxm[25] = 0  # match type OFPMT_STANDARD
    parse(fast, bytes(not_oxm))
    assert len(calls) == 4


def test_copies_and_pickles_are_framework_matches() -> None:
    m = parse(FAST, packet_in(P.OFPMatch(in_port=4, tunnel_id=8), PAUSE)).match
    for other in (copy.deepcopy(m), copy.copy(m), pickle.loads(pickle.dumps(m))):
        assert type(other) is P.OFPMatch
        assert other.to_jsondict() == m.to_jsondict() and other["tunnel_id"] == 8


def test_install_keeps_the_event_dispatch() -> None:
    """Installed, the framework's own message parsing gives an OFPPacketIn with the lazy match, and the
    framework maps it to the EventOFPPacketIn the app's direct handler is registered for."""
    old = launch.install_fast_packet_in()
    try:
        assert old == REFERENCE
        buf = W.packet_in(7, LLDP)
        version, msg_type, msg_len, xid = struct.unpack_from("!BBHI", buf)
        msg = P.ofproto_parser.msg("dp", version, msg_type, msg_len, xid, bytearray(buf))
        assert type(msg) is P.OFPPacketIn and type(msg.match) is not P.OFPMatch
        ev = ofp_event.ofp_msg_to_ev(msg)
        assert type(ev) is ofp_event.EventOFPPacketIn and ev.msg is msg
        from hpcfabric.controller import HpcfabricController
        assert ("_packet_in", ofp_event.EventOFPPacketIn) in HpcfabricController.DIRECT_HANDLERS
    finally:
        framework.restore_packet_in_parser(old)
    assert P._MSG_PARSERS[O.OFPT_PACKET_IN] == REFERENCE


def test_the_app_handles_fast_parsed_packet_ins(tmp_path: Path) -> None:
    app, fakes = fake_fabric(tmp_path, planner=False, topology="dragonfly-a2-p1-h1", ports=3)
    a, port, peer = next((name, p, peer) for name in sorted(fakes) for p, peer in sorted(app.fabric.fabric_ports(name).items())
                         if peer.port in fakes[peer.node].ports and p in fakes[name].ports)
    frame = app.wiring.frame(fakes[a].id, port, fakes[a].ports[port].hw_addr)
    c = app.counters
    before = {k: c[k] for k in ("packet_in_lldp", "lldp_received", "packet_in_pause", "no_in_port", "packet_in_errors")}
    for data in (frame, PAUSE):
        msg = parse(FAST, W.packet_in(peer.port, data), fakes[peer.node])
        app._packet_in(ofp_event.ofp_msg_to_ev(msg))
    msg = parse(FAST, packet_in(P.OFPMatch(metadata=1), PAUSE), fakes[peer.node])  # no in_port
    app._packet_in(ofp_event.ofp_msg_to_ev(msg))
    settle()
    after = {k: c[k] - v for k, v in before.items()}
    assert after == {"packet_in_lldp": 1, "lldp_received": 1, "packet_in_pause": 2, "no_in_port": 1,
                     "packet_in_errors": 0}
    app.stop()


def test_a_fresh_process_prints_messages_as_the_framework(tmp_path: Path) -> None:
    """Only the fast parser in a process (no OFPPacketIn built by the framework before): str() as the framework's."""
    import subprocess
    import sys
    code = ("import struct\n"
            "from hpcfabric.controller.framework import ofproto_parser as P\n"
            "from hpcfabric.controller.launch import install_fast_packet_in\n"
            "from hpcfabric.emu import wire as W\n"
            "old = install_fast_packet_in()\n"
            "buf = W.packet_in(7, b'x' * 60)\n"
            "args = struct.unpack_from('!BBHI', buf) + (buf,)\n"
            "fast = str(P.ofproto_parser.msg(None, *args))\n"
            "print(fast == str(old(None, *args)), fast)\n")
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("True OFPPacketIn(") or out.stdout.startswith("True version="), out.stdout
