"""Controller translation and decisions without a switch.

* FlowSpec -> os-ken OFPFlowMod -> bytes -> os-ken parser -> FlowSpec, for every
  flow of compiled fabrics (proves the translation);
* :mod:`hpcfabric.openflow.ofwire` bytes == os-ken's own serialisation (xid aside);
* flow-stats entries back to FlowSpecs;
* the app's PAUSE / LLDP / status logic against a fake datapath.
"""

from __future__ import annotations

import json
import struct
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from os_ken.ofproto import ofproto_parser
    from os_ken.ofproto import ofproto_v1_3 as O
    from os_ken.ofproto import ofproto_v1_3_parser as P
    from os_ken.ofproto.ofproto_protocol import ProtocolDesc
    from os_ken.lib import hub

from hpcfabric.openflow import ofwire
from hpcfabric.rules.port_state import port_state_flow
from hpcfabric.config import load_config
from hpcfabric.protocols.lldp import build_lldp, parse_lldp
from hpcfabric.rules.flows import FlowSpec, Match, Output, PopVlan, PushVlan, SetField, make_cookie, RuleClass
from hpcfabric.protocols.pause import build_pause, build_pfc

import hpcfabric.controller as ctl
from hpcfabric.controller import launch
from hpcfabric.controller import ofmsg
import osken_encode

ROOT = Path(__file__).resolve().parent.parent
DP = ProtocolDesc(O.OFP_VERSION)
CONFIGS = ["dragonfly-a4-p2-h2.conf", "fb-2d-4x4.conf", "fb-2d-3x3.conf", "fat-tree-k4.conf", "dragonfly-a2-p1-h1.conf",
           "dragonfly-a2-p1-h1-valiant.conf", "fb-2d-3x3-cos.conf"]  # the last two: VLAN PCP classes of service


@pytest.fixture(scope="module", params=CONFIGS)
def config(request):
    return load_config(ROOT / "configs" / request.param)


def all_flows(cfg):
    return [f for flows in cfg.desired.values() for f in flows]


def osken_bytes(flow: FlowSpec, xid: int, command: int = ofwire.OFPFC_ADD) -> bytes:
    fm = osken_encode.to_flow_mod(DP, flow, command)
    fm.set_xid(xid)
    fm.serialize()
    return bytes(fm.buf)


def parse(buf: bytes):
    version, msg_type, msg_len, xid = ofproto_parser.header(buf)
    return ofproto_parser.msg(DP, version, msg_type, msg_len, xid, buf)


# ---------------------------------------------------------------------------
# translation


def test_flowspec_osken_round_trip(config):
    flows = all_flows(config)
    assert flows
    for flow in flows:
        msg = parse(osken_bytes(flow, 7))
        assert isinstance(msg, P.OFPFlowMod)
        assert ofmsg.from_flow_mod(msg) == flow


def test_cached_bytes_equal_osken_serialisation(config):
    cache = ofwire.FlowModCache()
    for flow in all_flows(config):
        for command in (ofwire.OFPFC_ADD, ofwire.OFPFC_MODIFY_STRICT, ofwire.OFPFC_DELETE_STRICT):
            ours = cache.encode(flow, 0x01020304, command)
            assert ours == osken_bytes(flow, 0x01020304, command), flow
            again = cache.encode(flow, 0xFFFFFFFF, command)  # from the cache: only the xid differs
            assert again[:4] == ours[:4] and again[4:8] == b"\xff\xff\xff\xff" and again[8:] == ours[8:]
    assert cache.hits >= cache.misses > 0


def test_shared_flows_hit_the_cache():
    cfg = load_config(ROOT / "configs" / "dragonfly-a4-p2-h2.conf")
    cache = ofwire.FlowModCache()
    n = 0
    for flows in cfg.desired.values():
        for f in flows:
            cache.encode(f, n)
            n += 1
    assert len(cache) < n / 2  # punts, misses, port-state and many route entries recur across switches


def test_rewrite_mode_actions_round_trip(tmp_path):
    topo = ROOT / "topologies" / "dragonfly-a2-p1-h1.yaml"
    macs = "\n".join(f"g{g}s{s}h0 = 00:16:3e:00:0{g}:0{s}" for g in range(3) for s in range(2))
    path = tmp_path / "r.conf"
    path.write_text(f"[hpcfabric]\ntopology = {topo}\nhost_mac = rewrite\nrouting = conditional\n[hosts]\n{macs}\n")
    cfg = load_config(path)
    for flow in all_flows(cfg):
        buf = osken_bytes(flow, 1)
        assert ofwire.FlowModCache().encode(flow, 1) == buf
        assert ofmsg.from_flow_mod(parse(buf)) == flow


def test_every_action_and_match_field():
    flow = FlowSpec(
        3,
        77,
        Match(in_port=5, eth_type=0x8100, eth_src=(0x020000000000, 0xFFFFFFFFFF00), eth_dst=(0x02AB, (1 << 48) - 1),
              vlan_pcp=3, metadata=(0x12, (1 << 64) - 1), vlan_vid=(0x1000, 0x1000)),
        (PushVlan(0x8100), SetField("vlan_pcp", 5), SetField("eth_dst", 0x020000000002), PopVlan(), Output(1),
         Output(0xFFFFFFFD)),
        make_cookie(RuleClass.ALTERNATIVE, 1),
        goto=None,
        write_metadata=(1, 3),
    )
    buf = osken_bytes(flow, 9)
    assert ofwire.FlowModCache().encode(flow, 9) == buf
    assert ofmsg.from_flow_mod(parse(buf)) == flow


def test_vlan_vid_on_the_wire():
    """OXM field 6, 2 bytes, OFPVID_PRESENT in the value; the 13-bit exact mask is sent unmasked."""
    tagged = ofwire.encode_match(Match(in_port=3, vlan_vid=(0x1000, 0x1000), vlan_pcp=1))
    assert struct.pack("!IHH", 0x80000D04, 0x1000, 0x1000) in tagged  # class 0x8000, field 6, hasmask, 4 bytes
    assert struct.pack("!IB", 0x80000E01, 1) in tagged  # vlan_pcp follows vlan_vid (OXM order, as os-ken)
    exact = ofwire.encode_match(Match(vlan_vid=(0x1005, 0x1FFF)))
    assert struct.pack("!IH", 0x80000C02, 0x1005) in exact
    none = Match(vlan_vid=(0, 0x1000))  # untagged frames only
    for m in (Match(in_port=3, vlan_vid=(0x1000, 0x1000), vlan_pcp=1), Match(vlan_vid=(0x1005, 0x1FFF)), none):
        assert ofwire.decode_match(ofwire.encode_match(m))[0] == m
        assert ofmsg.from_match(osken_encode.to_match(m)) == m
        buf = osken_bytes(FlowSpec(0, 5, m, (PopVlan(), Output(1)), 0), 3)
        assert ofwire.FlowModCache().encode(FlowSpec(0, 5, m, (PopVlan(), Output(1)), 0), 3) == buf
        assert ofmsg.from_flow_mod(parse(buf)).match == m
    with pytest.raises(ValueError):
        Match(vlan_vid=(0x1000, 0))
    with pytest.raises(ValueError):
        Match(vlan_vid=(0x1000, 0x0FFF))


def test_cos_tables_carry_the_tag_prerequisites(config):
    """Every PCP step and every entry that pops matches a tagged frame (vlan_vid=0x1000/0x1000) on the wire."""
    if config.compiled.cos is None:
        pytest.skip("untagged tables")
    steps = pops = 0
    for flow in all_flows(config):
        sets_pcp = any(isinstance(a, SetField) and a.field == "vlan_pcp" for a in flow.actions)
        pushes = any(isinstance(a, PushVlan) for a in flow.actions)
        if flow.match.vlan_pcp is not None or (sets_pcp and not pushes) or any(isinstance(a, PopVlan) for a in flow.actions):
            steps += flow.match.vlan_pcp is not None
            pops += any(isinstance(a, PopVlan) for a in flow.actions)
            msg = parse(osken_bytes(flow, 1))
            assert msg.match["vlan_vid"] == (0x1000, 0x1000), flow
    assert steps and pops


def test_controller_output_gets_full_frames():
    fm = parse(osken_bytes(FlowSpec(0, 1, Match(eth_type=0x8808), (Output(0xFFFFFFFD),), 0), 1))
    assert fm.instructions[0].actions[0].max_len == O.OFPCML_NO_BUFFER


def test_delete_and_modify_are_restricted_to_our_cookies():
    flow = port_state_flow(3, True)
    for command in (ofwire.OFPFC_DELETE_STRICT, ofwire.OFPFC_MODIFY_STRICT):
        msg = parse(ofwire.FlowModCache().encode(flow, 5, command))
        assert msg.command == command and msg.cookie_mask == 0xFFFF << 48 and msg.cookie >> 48 == 0x4846
        assert msg.table_id == 2 and msg.priority == flow.priority
    delete = parse(ofwire.FlowModCache().encode(flow, 5, ofwire.OFPFC_DELETE_STRICT))
    assert delete.out_port == O.OFPP_ANY and delete.out_group == O.OFPG_ANY and delete.instructions == []
    modify = parse(ofwire.FlowModCache().encode(flow, 5, ofwire.OFPFC_MODIFY_STRICT))
    assert ofmsg.from_flow_mod(modify).goto == 3


def _stats_entry(flow: FlowSpec) -> bytes:
    """An ofp_flow_stats entry as a switch would send it for ``flow``."""
    match = ofwire.encode_match(flow.match)
    inst = ofwire.encode_instructions(flow)
    length = 48 + len(match) + len(inst)
    head = struct.pack("!HBxIIHHHH4xQQQ", length, flow.table, 12, 345, flow.priority, 0, 0, 0, flow.cookie, 99, 9900)
    return head + match + inst


def test_flow_stats_back_to_flowspec(config):
    for flow in all_flows(config)[:400]:
        stats = P.OFPFlowStats.parser(_stats_entry(flow), 0)
        assert ofmsg.from_flow_stats(stats) == flow
        assert stats.packet_count == 99


def test_unrepresentable_flows():
    with pytest.raises(ofmsg.Unrepresentable):
        ofmsg.from_match(P.OFPMatch(eth_type=0x0800, ipv4_dst="10.0.0.1"))
    with pytest.raises(ofmsg.Unrepresentable):
        ofmsg.from_action(P.OFPActionGroup(1))
    stats = SimpleNamespace(table_id=0, priority=1, cookie=0, match=P.OFPMatch(),
                            instructions=[P.OFPInstructionMeter(1)])
    with pytest.raises(ofmsg.Unrepresentable):
        ofmsg.from_flow_stats(stats)


def test_other_messages_equal_osken():
    lldp = build_lldp(1, 3, bytes.fromhex("020000000001"))
    po = P.OFPPacketOut(DP, buffer_id=O.OFP_NO_BUFFER, in_port=O.OFPP_CONTROLLER,
                        actions=[P.OFPActionOutput(3, 0)], data=lldp)
    po.set_xid(11)
    po.serialize()
    assert ofwire.packet_out(11, [3], lldp) == bytes(po.buf)

    pm = P.OFPPortMod(DP, 3, "02:00:00:00:00:01", O.OFPPC_NO_FWD, O.OFPPC_NO_FWD, 0)
    pm.set_xid(12)
    pm.serialize()
    assert ofwire.port_mod(12, 3, bytes.fromhex("020000000001"), O.OFPPC_NO_FWD, O.OFPPC_NO_FWD) == bytes(pm.buf)

    br = P.OFPBarrierRequest(DP)
    br.set_xid(13)
    br.serialize()
    assert ofwire.barrier(13) == bytes(br.buf)

    flags = O.ONF_BF_ATOMIC | O.ONF_BF_ORDERED
    bc = P.ONFBundleCtrlMsg(DP, 5, O.ONF_BCT_OPEN_REQUEST, flags, [])
    bc.set_xid(14)
    bc.serialize()
    assert ofwire.bundle_ctrl(14, 5, ofwire.ONF_BCT_OPEN_REQUEST) == bytes(bc.buf)

    flow = port_state_flow(2, False)
    ba = P.ONFBundleAddMsg(DP, 5, flags, osken_encode.to_flow_mod(DP, flow), [])
    ba.set_xid(15)
    ba.serialize()
    assert ofwire.bundle_add(15, 5, ofwire.FlowModCache().encode(flow, 15)) == bytes(ba.buf)


# ---------------------------------------------------------------------------
# the app against a fake datapath


class BarrierRequest(SimpleNamespace):
    def __init__(self, xid: int):
        super().__init__(xid=xid)

    __name__ = "OFPBarrierRequest"


class PortMod(SimpleNamespace):
    pass


class PacketOut(SimpleNamespace):
    pass


class FakeDatapath:
    ofproto = O
    ofproto_parser = P

    def __init__(self, dpid: int, ports=(1, 2, 3)):
        self.id = dpid
        self.xid = 100
        self.sent: list[bytes] = []
        self.address = ("127.0.0.1", 1)
        self.ports = {p: SimpleNamespace(port_no=p, hw_addr="02:00:00:00:%02x:%02x" % (dpid, p), config=0)
                      for p in ports}

    def send(self, data: bytes) -> bool:
        self.sent.append(bytes(data))
        return True

    def messages(self):
        out = []
        for buf in self.sent:
            while buf:
                _, msg_type, length, xid = ofproto_parser.header(buf)
                if msg_type == O.OFPT_BARRIER_REQUEST:  # os-ken parses no barrier requests ...
                    out.append(BarrierRequest(xid))
                elif msg_type == O.OFPT_PACKET_OUT:  # ... nor packet-outs
                    _, in_port, alen = struct.unpack_from("!IIH", buf, 8)
                    ports = [struct.unpack_from("!I", buf, 24 + 4 + i)[0] for i in range(0, alen, 16)]
                    out.append(PacketOut(xid=xid, in_port=in_port, ports=ports, data=buf[24 + alen : length]))
                elif msg_type == O.OFPT_PORT_MOD:  # ... nor port-mods
                    port_no, hw, config, mask, _ = struct.unpack_from("!I4x6s2xIII4x", buf, 8)
                    out.append(PortMod(xid=xid, port_no=port_no, hw_addr=hw, config=config, mask=mask))
                else:
                    out.append(parse(buf[:length]))
                buf = buf[length:]
        self.sent.clear()
        return out


def make_app(conf: str, tmp_path: Path | None = None):
    cfg = load_config(ROOT / "configs" / conf)
    launch.PRELOADED = cfg
    launch.OVERRIDES.clear()
    if tmp_path is not None:
        launch.OVERRIDES["status_file"] = str(tmp_path / "status.json")
    try:
        app = ctl.HpcfabricController()
    finally:
        launch.PRELOADED = None
    return app


def attach(app, dpid: int) -> FakeDatapath:
    dp = FakeDatapath(dpid)
    sw = app.by_dpid[dpid]
    sw.dp, sw.connected = dp, True
    return dp


def packet_in(dp, in_port: int, data: bytes):
    return SimpleNamespace(msg=SimpleNamespace(datapath=dp, match={"in_port": in_port}, data=data))


SRC = bytes.fromhex("020000aabbcc")


def test_pause_on_fabric_port_flips_with_one_flow_mod():
    app = make_app("dragonfly-a2-p1-h1.conf")  # 10 Gb/s
    dp = attach(app, 1)  # g0s0: port 1 host, 2 global, 3 local
    app._packet_in(packet_in(dp, 3, build_pause(SRC, 0xFFFF)))
    msgs = dp.messages()
    assert [type(m).__name__ for m in msgs] == ["OFPFlowMod", "BarrierRequest"]
    fm = msgs[0]
    assert fm.command == O.OFPFC_MODIFY_STRICT and ofmsg.from_flow_mod(fm) == port_state_flow(3, True)
    assert app.pause.is_paused("g0s0", 3, app.pause.until[("g0s0", 3)] - 1e-9)
    # a second PAUSE only extends the timer: no flow-mod
    app._packet_in(packet_in(dp, 3, build_pfc(SRC, {3: 100})))
    assert dp.messages() == []
    # the barrier reply completes the flip and records the reaction time
    app._barrier_reply(SimpleNamespace(msg=SimpleNamespace(datapath=dp, xid=msgs[1].xid)))
    assert len(app.pausing.reaction_ms) == 1 and app.pausing.reaction_ms[0] >= 0
    # XON: back to output
    app._packet_in(packet_in(dp, 3, build_pause(SRC, 0)))
    (fm, _) = dp.messages()
    assert ofmsg.from_flow_mod(fm) == port_state_flow(3, False)
    st = app.status()["pause"]
    assert st["flips"] == 2 and st["flow_mods"] == 2 and st["frames"] == 3 and st["paused_ports"] == []


def test_pause_on_host_port_never_flips_and_malformed_is_counted():
    app = make_app("dragonfly-a2-p1-h1.conf")
    dp = attach(app, 1)
    app._packet_in(packet_in(dp, 1, build_pause(SRC, 0xFFFF)))  # host port
    app._packet_in(packet_in(dp, 1, build_pfc(SRC, {0: 0xFFFF})))
    bad = bytearray(build_pause(SRC, 10))
    bad[14:16] = b"\x00\x07"  # unknown opcode
    app._packet_in(packet_in(dp, 3, bytes(bad)))
    app._packet_in(packet_in(dp, 42, build_pause(SRC, 10)))  # port not in the topology
    assert dp.messages() == []
    st = app.status()["pause"]
    assert st["host_port_frames"] == 2 and st["malformed"] == 1 and st["unknown_port_frames"] == 1
    assert st["frames"] == 4 and st["flips"] == 0


def test_minimal_routing_only_counts_pauses():
    app = make_app("fat-tree-k4.conf")
    sw = next(s for s in app.switches.values() if app.fabric.fabric_ports(s.name))
    dp = attach(app, sw.dpid)
    port = next(iter(app.fabric.fabric_ports(sw.name)))
    app._packet_in(packet_in(dp, port, build_pause(SRC, 0xFFFF)))
    assert dp.messages() == [] and app.status()["pause"]["frames"] == 1 and app.pause.paused_ports() == []


def test_expiry_flips_back():
    app = make_app("dragonfly-a2-p1-h1.conf")
    dp = attach(app, 1)
    app._packet_in(packet_in(dp, 2, build_pause(SRC, 1)))
    dp.messages()
    deadline = app.pause.next_deadline()
    for flip in app.pause.expire(deadline + 1e-6):
        app.pausing.apply_flip(flip, deadline)
    (fm, _) = dp.messages()
    assert ofmsg.from_flow_mod(fm) == port_state_flow(2, False)


def test_pause_hold_from_config():
    app = make_app("dragonfly-a2-p1-h1.conf")
    assert app.pause.hold == 0.050


def test_desired_follows_pause_state():
    app = make_app("dragonfly-a2-p1-h1.conf")
    base = app.desired("g0s0")
    app.pause.until[("g0s0", 2)] = 1e12
    paused = app.desired("g0s0")
    assert len(paused) == len(base)
    changed = [(a, b) for a, b in zip(base, paused) if a != b]
    assert changed == [(port_state_flow(2, False), port_state_flow(2, True))]


def test_lldp_miswire_sets_and_clears_no_fwd():
    app = make_app("dragonfly-a2-p1-h1.conf")
    dp1, dp2, dp5 = attach(app, 1), attach(app, 2), attach(app, 5)
    # g0s1:2 (expects g1s1:2) arrives at g0s0:2 (expects g2s0:2): both miswired
    app._packet_in(packet_in(dp1, 2, build_lldp(2, 2, SRC, nonce=app.wiring.nonce)))
    mods = [m for m in dp1.messages() + dp2.messages() if isinstance(m, PortMod)]
    assert sorted((m.port_no, m.config, m.mask) for m in mods) == [(2, O.OFPPC_NO_FWD, O.OFPPC_NO_FWD)] * 2
    assert app.switches["g0s0"].no_fwd == {2} and app.switches["g0s1"].no_fwd == {2}
    # the LLDP round probes quarantined ports: lift NO_FWD, barrier, packet-out, set it again
    app.wiring.send_lldp(app.switches["g0s0"])
    hub.sleep(0)  # the probe runs in its own green thread
    msgs = dp1.messages()
    assert [(type(m).__name__, getattr(m, "port_no", None)) for m in msgs[-2:]] == [("PortMod", 2), ("BarrierRequest", None)]
    assert msgs[-2].config == 0 and msgs[-2].mask == O.OFPPC_NO_FWD
    assert app.switches["g0s0"].probing == {2}
    app._port_status(SimpleNamespace(msg=SimpleNamespace(  # the switch echoes our port-mod: ignored
        datapath=dp1, reason=O.OFPPR_MODIFY, desc=SimpleNamespace(port_no=2, config=0, state=0))))
    assert dp1.messages() == [] and app.switches["g0s0"].no_fwd == {2}
    app._barrier_reply(SimpleNamespace(msg=SimpleNamespace(datapath=dp1, xid=msgs[-1].xid)))
    hub.sleep(0)
    kinds = [(type(m).__name__, getattr(m, "port_no", None), getattr(m, "config", None)) for m in dp1.messages()]
    assert kinds == [("PacketOut", None, None), ("PortMod", 2, O.OFPPC_NO_FWD)]
    assert app.switches["g0s0"].probing == set()
    # healed: the expected neighbour g2s0:2 is heard on g0s0:2
    app._packet_in(packet_in(dp1, 2, build_lldp(5, 2, SRC, nonce=app.wiring.nonce)))
    mods = [m for m in dp1.messages() if isinstance(m, PortMod)]
    assert [(m.port_no, m.config) for m in mods] == [(2, 0)]
    assert app.switches["g0s0"].no_fwd == set() and app.switches["g0s1"].no_fwd == {2}
    st = app.status()
    assert st["miswired"] and st["lldp"]["received"] == 2


def test_lldp_is_sent_on_fabric_and_unused_ports_only():
    app = make_app("dragonfly-a2-p1-h1.conf")
    dp = attach(app, 1)
    dp.ports[9] = SimpleNamespace(port_no=9, hw_addr="02:00:00:00:01:09", config=0)  # unused
    dp.ports[O.OFPP_LOCAL] = SimpleNamespace(port_no=O.OFPP_LOCAL, hw_addr="02:00:00:00:01:ff", config=0)
    app.wiring.send_lldp(app.switches["g0s0"])
    outs = [m for m in dp.messages() if isinstance(m, PacketOut)]
    assert [m.ports for m in outs] == [[2], [3], [9]]
    info = parse_lldp(outs[0].data)
    assert (info.dpid, info.port, info.nonce) == (1, 2, app.wiring.nonce)


STATUS_KEYS = {
    "time", "switches_expected", "switches_connected", "switches_confirmed", "unknown_dpids", "rules_expected",
    "rules_installed", "per_switch", "links_expected", "links_discovered", "missing_links", "extra_links", "miswired",
    "pause",
}
PER_SWITCH_KEYS = {"dpid", "connected", "confirmed", "rules_expected", "rules_installed", "added", "deleted"}
PAUSE_KEYS = {"flips", "paused_ports", "reaction_ms", "frames", "malformed", "host_port_frames"}


def test_status_file_keys(tmp_path):
    app = make_app("dragonfly-a2-p1-h1.conf", tmp_path)
    attach(app, 1)
    app.reporter.write()
    data = json.loads((tmp_path / "status.json").read_text())
    assert STATUS_KEYS <= set(data)
    assert PER_SWITCH_KEYS <= set(data["per_switch"]["g0s0"]) and PAUSE_KEYS <= set(data["pause"])
    assert data["switches_expected"] == 6 and data["switches_connected"] == 1 and data["switches_confirmed"] == 0
    compiled = sum(len(app.config.compiled.flows(sw.name)) for sw in app.fabric.switches)  # classes on: top/3
    assert app.config.compiled.cos == "top" and compiled > 84  # 84: the same tables untagged
    assert data["rules_expected"] == compiled + 4 * 6 and data["rules_installed"] == 0  # compiled + guards and data["links_expected"] == 6
    assert data["per_switch"]["g0s0"]["dpid"] == "0000000000000001"
    assert not list(tmp_path.glob("*.tmp.*"))  # written atomically


def test_unknown_switch_gets_nothing():
    app = make_app("dragonfly-a2-p1-h1.conf")
    dp = FakeDatapath(0x77)
    app.sessions.connected(dp)
    assert dp.sent == [] and app.status()["unknown_dpids"] == ["0000000000000077"]
    app.sessions.disconnected(dp)
    assert app.status()["unknown_dpids"] == []


def decode_flow_stats(buf: bytes) -> list[ofwire.FlowStatsEntry]:
    """All ``ofp_flow_stats`` entries of a multipart reply body (the framework hands the controller one at a time)."""
    out, offset = [], 0
    while offset < len(buf):
        out.append(ofwire.FlowStatsEntry(buf, offset))
        offset += out[-1].length
    return out


def test_ofwire_flow_stats_decoder_matches_osken(config):
    flows = all_flows(config)[:600]
    body = b"".join(_stats_entry(f) for f in flows)
    entries = decode_flow_stats(body)
    assert [e.spec for e in entries] == flows
    offset = 0
    for e in entries:
        ref = P.OFPFlowStats.parser(body, offset)
        assert (e.length, e.table, e.priority, e.cookie, e.packet_count, e.byte_count) == (
            ref.length, ref.table_id, ref.priority, ref.cookie, ref.packet_count, ref.byte_count)
        assert ofmsg.from_flow_stats(ref) == e.spec
        offset += e.length


def test_ofwire_undecodable_entry_keeps_raw_match_for_deletion():
    m = P.OFPMatch(eth_type=0x0800, ipv4_dst="10.0.0.1")
    buf = bytearray()
    m.serialize(buf, 0)
    inst = ofwire.encode_instructions(FlowSpec(0, 1, Match(), (Output(1),), 0))
    cookie = make_cookie(RuleClass.ROUTE, 1)
    entry = struct.pack("!HBxIIHHHH4xQQQ", 48 + len(buf) + len(inst), 1, 0, 0, 7, 0, 0, 0, cookie, 0, 0) + bytes(buf) + inst
    (e,) = decode_flow_stats(entry)
    assert e.spec is None and "OXM" in e.reason and e.match_raw == bytes(buf)
    body = ofwire.flow_mod_raw_match(e.table, e.priority, e.match_raw)
    msg = parse(ofwire.header(ofwire.OFPT_FLOW_MOD, 8 + len(body), 3) + body)
    assert msg.command == O.OFPFC_DELETE_STRICT and msg.match["ipv4_dst"] == "10.0.0.1" and msg.priority == 7
    assert msg.cookie_mask == 0xFFFF << 48


def test_fast_flow_stats_hook_feeds_the_app():
    launch.install_fast_flow_stats()
    try:
        flows = load_config(ROOT / "configs" / "dragonfly-a2-p1-h1.conf").desired["g0s0"]
        body = b"".join(_stats_entry(f) for f in flows)
        head = struct.pack("!BBHIHH4x", 4, O.OFPT_MULTIPART_REPLY, 16 + len(body), 9, O.OFPMP_FLOW, 0)
        msg = parse(head + body)
        assert all(isinstance(e, ofwire.FlowStatsEntry) for e in msg.body)
        assert [e.spec for e in msg.body] == list(flows)
    finally:
        P.OFPFlowStatsReply.cls_stats_body_cls = P.OFPFlowStats


def test_listen_address_in_use_is_detected():
    import socket as s

    with s.socket() as busy:
        busy.setsockopt(s.SOL_SOCKET, s.SO_REUSEPORT, 1)  # like eventlet's listeners
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(launch.ListenError, match="in use"):
            launch.check_listen_address("127.0.0.1", port)
    launch.check_listen_address("127.0.0.1", port)  # free again


def test_rejected_flip_is_not_a_reaction():
    app = make_app("dragonfly-a2-p1-h1.conf")
    dp = attach(app, 1)
    app._packet_in(packet_in(dp, 3, build_pause(SRC, 0xFFFF)))
    fm, barrier = dp.messages()
    # the switch rejects the flow-mod; the error arrives before the barrier reply
    app._error(SimpleNamespace(msg=SimpleNamespace(datapath=dp, xid=fm.xid, type=O.OFPET_FLOW_MOD_FAILED, code=0)))
    app._barrier_reply(SimpleNamespace(msg=SimpleNamespace(datapath=dp, xid=barrier.xid)))
    st = app.status()
    assert st["pause"]["errors"] == 1 and st["pause"]["reaction_ms"] == [] and st["errors"]["switch_errors"] == 1


def test_direct_handlers_are_registered_with_the_ofp_brick():
    names = {name for name, _ in ctl.HpcfabricController.DIRECT_HANDLERS}
    assert names == {"_packet_in", "_barrier_reply", "_error", "_echo_reply"}
    for name, ev_cls in ctl.HpcfabricController.DIRECT_HANDLERS:
        caller = getattr(ctl.HpcfabricController, name).callers[ev_cls]
        assert caller.ev_source is None  # set_ev_handler: no observer subscription, no double delivery


def test_only_the_framework_seam_imports_os_ken():
    """hpcfabric.controller.framework is the one place that names os-ken (and its eventlet hub)."""
    import ast

    seam = ROOT / "hpcfabric" / "controller" / "framework.py"
    users = set()
    for path in (ROOT / "hpcfabric").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            if any(n.split(".")[0] in ("os_ken", "ryu", "eventlet") for n in names):
                users.add(path)
    assert users == {seam}
