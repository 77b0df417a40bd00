"""802.1Qau congestion notification messages: parsing (built frames, malformed input) and the
mapping to the same port-state flips as a PAUSE."""

from __future__ import annotations

import struct

import pytest

from hpcfabric.protocols.cnm import (
    ETH_TYPE_CN,
    MAX_HOLD,
    OPCODE_CNM,
    build_cnm,
    cnm_to_pause_frame,
    hold_seconds,
    on_cnm,
    parse_cnm,
)
from hpcfabric.rules.flows import ETH_TYPE_CNM
from hpcfabric.protocols.pause import Flip, MalformedFrame, PauseState, build_pause, parse_mac_control, pause_seconds

RP = bytes.fromhex("020000010002")  # the sampled frame's source (reaction point)
CP = bytes.fromhex("020000090001")  # the congestion point's port
SPEED = 10e9


def test_ethertype_matches_the_flows_constant():
    assert ETH_TYPE_CN == ETH_TYPE_CNM == 0x22E9


def test_build_and_parse_every_field():
    frame = build_cnm(
        RP, CP, 42, cpid=0x0200000900010003, q_offset=-1234, q_delta=77, priority=5,
        encapsulated_dst=bytes.fromhex("020000050001"), msdu=b"\x45" + bytes(19),
    )
    assert len(frame) >= 60 and struct.unpack_from("!H", frame, 12)[0] == 0x22E9
    cnm = parse_cnm(frame)
    assert (cnm.dst, cnm.src, cnm.qfb, cnm.cpid) == (RP, CP, 42, 0x0200000900010003)
    assert (cnm.q_offset, cnm.q_delta, cnm.priority) == (-1234, 77, 5)
    assert cnm.encapsulated_dst == bytes.fromhex("020000050001") and cnm.msdu == b"\x45" + bytes(19)
    assert cnm.version == 0 and cnm.rpid is None and cnm.vlan_pcp is None


def test_pdu_layout_is_the_standard_one():
    """version(4) reserved(6) qFb(6) | CPID(8) | QOffset(2) | QDelta(2) | priority(2) | DA(6) | length(2)."""
    frame = build_cnm(RP, CP, 0x3F, cpid=0x1122334455667788, q_offset=1, q_delta=-2, priority=7,
                      encapsulated_dst=bytes(range(6)), msdu=b"abc")
    pdu = frame[14:]
    assert pdu[0:2] == b"\x00\x3f"
    assert pdu[2:10] == bytes.fromhex("1122334455667788")
    assert pdu[10:12] == b"\x00\x01" and pdu[12:14] == b"\xff\xfe"
    assert pdu[14:16] == b"\xe0\x00"
    assert pdu[16:22] == bytes(range(6)) and pdu[22:24] == b"\x00\x03" and pdu[24:27] == b"abc"


def test_vlan_tagged_and_cn_tagged_cnms():
    cnm = parse_cnm(build_cnm(RP, CP, 9, vlan_pcp=6, rpid=0xBEEF))
    assert cnm.vlan_pcp == 6 and cnm.rpid == 0xBEEF and cnm.qfb == 9
    qinq = RP + CP + struct.pack("!HHHH", 0x88A8, 3 << 13, 0x8100, 0) + build_cnm(RP, CP, 1)[12:]
    assert parse_cnm(qinq).vlan_pcp == 3


def test_reserved_bits_are_ignored_on_receipt():
    frame = bytearray(build_cnm(RP, CP, 5))
    frame[14] |= 0x0F  # reserved bits in the first octet (below the version)
    cnm = parse_cnm(bytes(frame))
    assert cnm.qfb == 5 and cnm.reserved != 0


@pytest.mark.parametrize(
    "mutate,message",
    [
        (lambda f: f[:13], "too short"),
        (lambda f: f[:20], "shorter than 24"),
        (lambda f: f[:12] + b"\x88\x08" + f[14:], "not congestion notification"),
        (lambda f: f[:14] + bytes([0x10 | f[14] & 0x0F]) + f[15:], "version 1"),
        (lambda f: f[:36] + b"\x00\x41" + f[38:], "exceeds 64"),
        (lambda f: (f[:36] + b"\x00\x30" + f[38:])[:50], "only"),
        (lambda f: f[:6] + b"\x03" + f[7:], "source address is multicast"),
        (lambda f: b"\x01\x80\xc2\x00\x00\x01" + f[6:], "multicast"),
        (lambda f: f[:12] + struct.pack("!HH", 0x8100, 0) * 3 + f[12:], "more than two VLAN tags"),
        (lambda f: f[:12] + b"\x81\x00\x00", "VLAN tag"),
        (lambda f: b"", "too short"),
    ],
)
def test_malformed_frames_raise(mutate, message):
    frame = build_cnm(RP, CP, 12, msdu=b"x" * 10)
    with pytest.raises(MalformedFrame, match=message):
        parse_cnm(mutate(frame))


def test_random_garbage_never_raises_anything_but_malformed():
    import random

    rng = random.Random(7)
    good = build_cnm(RP, CP, 33, msdu=b"y" * 20, rpid=5)
    for _ in range(2000):
        f = bytearray(good[: rng.randrange(len(good) + 1)])
        for _ in range(rng.randrange(4)):
            if f:
                f[rng.randrange(len(f))] = rng.randrange(256)
        try:
            parse_cnm(bytes(f))
        except MalformedFrame:
            pass


def test_build_rejects_out_of_range_values():
    with pytest.raises(ValueError):
        build_cnm(RP, CP, 64)
    with pytest.raises(ValueError):
        build_cnm(RP, CP, 1, msdu=bytes(65))
    with pytest.raises(ValueError):
        build_cnm(RP, CP, 1, priority=8)


# ---------------------------------------------------------------------------
# mapping to port-state flips


def test_hold_is_proportional_to_the_feedback():
    assert hold_seconds(63) == MAX_HOLD == 0.25
    assert hold_seconds(0) == 0
    assert hold_seconds(21) == pytest.approx(0.25 / 3)
    assert hold_seconds(63, max_hold=0.1) == pytest.approx(0.1)
    with pytest.raises(ValueError):
        hold_seconds(64)


def test_cnm_becomes_a_pause_frame_of_the_same_duration():
    cnm = parse_cnm(build_cnm(RP, CP, 63))
    pf = cnm_to_pause_frame(cnm, SPEED)
    assert pf.opcode == OPCODE_CNM and pf.src == CP and not pf.is_xon
    assert pause_seconds(pf.quanta, SPEED) == pytest.approx(0.25, rel=1e-6)
    assert pf.quanta > 0xFFFF  # longer than any real PAUSE: it never goes on a wire
    assert cnm_to_pause_frame(parse_cnm(build_cnm(RP, CP, 0)), SPEED) is None


def test_cnm_flips_the_port_like_a_pause_and_expires_when_notifications_stop():
    state = PauseState(SPEED)
    cnm = parse_cnm(build_cnm(RP, CP, 63))
    flips = on_cnm(state, "g0s0", 3, cnm, now=10.0)
    pause_flips = PauseState(SPEED).on_frame("g0s0", 3, parse_mac_control(build_pause(CP, 0xFFFF)), 10.0)
    assert flips == pause_flips == [Flip("g0s0", 3, True, 10.0, "pause")]
    assert state.is_paused("g0s0", 3, 10.2)
    assert on_cnm(state, "g0s0", 3, cnm, now=10.2) == []  # refreshed: still paused, no new flip
    assert state.is_paused("g0s0", 3, 10.4)  # 0.2 + 0.25
    assert state.expire(10.3) == []
    assert state.expire(10.46) == [Flip("g0s0", 3, False, 10.46, "expiry")]


def test_zero_feedback_changes_nothing_and_never_resumes():
    state = PauseState(SPEED)
    state.on_frame("s", 2, parse_mac_control(build_pause(CP, 0xFFFF)), 0.0)
    assert on_cnm(state, "s", 2, parse_cnm(build_cnm(RP, CP, 0)), 0.001) == []
    assert state.is_paused("s", 2, 0.002)
    assert on_cnm(PauseState(SPEED), "s", 2, parse_cnm(build_cnm(RP, CP, 0)), 0.0) == []


def test_a_cnm_never_shortens_a_running_hold():
    state = PauseState(SPEED)
    on_cnm(state, "s", 2, parse_cnm(build_cnm(RP, CP, 63)), 0.0)  # until 0.25
    assert on_cnm(state, "s", 2, parse_cnm(build_cnm(RP, CP, 1)), 0.01) == []  # 4 ms would end at 0.014
    assert state.until[("s", 2)] == pytest.approx(0.25, rel=1e-6)
    on_cnm(state, "s", 2, parse_cnm(build_cnm(RP, CP, 63)), 0.1)  # a fresh severe one extends it
    assert state.until[("s", 2)] == pytest.approx(0.35, rel=1e-6)


def test_the_pause_state_hold_still_applies():
    state = PauseState(SPEED, hold=0.05)
    on_cnm(state, "s", 4, parse_cnm(build_cnm(RP, CP, 1)), 0.0)  # 4 ms of feedback, 50 ms minimum hold
    assert state.is_paused("s", 4, 0.04) and not state.is_paused("s", 4, 0.06)


# ---------------------------------------------------------------------------
# the snoop entries (compile_fabric(..., cnm_snoop=True))


def _compiled(name, routing, cos):
    from pathlib import Path

    from hpcfabric.rules.addressing import plan_addresses
    from hpcfabric.rules.compiler import compile_fabric
    from hpcfabric.topology.loader import load_topology

    f = load_topology(Path(__file__).resolve().parent.parent / "topologies" / f"{name}.yaml")
    return compile_fabric(f, plan_addresses(f, "compact"), routing=routing, cos=cos, cnm_snoop=True)


def test_snooped_cnms_are_copied_to_the_controller_and_still_forwarded():
    from hpcfabric.verify.reference.pipeline import Frame, Pipeline

    comp = _compiled("dragonfly-a2-p1-h1", "conditional", False)
    f = comp.fabric
    rp = f.hosts[0]
    mac = comp.plan.host_mac[rp.name]
    for sw in f.switches:
        if sw.name == rp.switch:
            continue
        for port in f.fabric_ports(sw.name):
            res = Pipeline(comp.flows(sw.name)).process(Frame(in_port=port, eth_src=0x020000000077, eth_dst=mac,
                                                              eth_type=ETH_TYPE_CN))
            # copy + forward towards the reaction point (a CNM injected on the port that leads there
            # would go straight back: the switch drops that copy, the pipeline notes it)
            assert res.punted and len(res.outputs) + len(res.to_ingress) == 1


def test_snooped_cnms_take_the_pcp_step_with_cos():
    from hpcfabric.verify.reference.pipeline import Frame, Pipeline

    comp = _compiled("dragonfly-a2-p1-h1", "conditional", True)
    f = comp.fabric
    sw = f.switches[0]
    glob = next(p for p, peer in f.fabric_ports(sw.name).items() if peer.kind == "global")
    local = next(p for p, peer in f.fabric_ports(sw.name).items() if peer.kind == "local")
    pipe = Pipeline(comp.flows(sw.name))
    host = f.hosts_on(sw.name)[0]

    def leaves_by(h) -> int:  # the port a data frame from this switch's host to h leaves by
        frame = Frame(in_port=host.port, eth_src=comp.plan.host_mac[host.name], eth_dst=comp.plan.host_mac[h.name])
        return pipe.process(frame).outputs[0][0]

    for port, pcp, want in [(glob, 0, 1), (glob, 1, 2), (glob, 2, 2), (local, 1, 1)]:
        # a destination not behind the arrival port (a switch never sends back out of it)
        mac = comp.plan.host_mac[next(h for h in f.hosts if h.switch != sw.name and leaves_by(h) != port).name]
        res = pipe.process(Frame(in_port=port, eth_src=0x020000000077, eth_dst=mac, eth_type=ETH_TYPE_CN, vlan_pcp=pcp))
        assert res.punted and res.punts[0].vlan_pcp == pcp
        ((_, out),) = res.outputs
        assert out.vlan_pcp == want, (port, pcp)
        data = pipe.process(Frame(in_port=port, eth_src=0x020000000077, eth_dst=mac, vlan_pcp=pcp))
        assert data.outputs[0][1].vlan_pcp == want  # the same step as data
    res = pipe.process(Frame(in_port=host.port, eth_src=comp.plan.host_mac[host.name], eth_dst=mac, eth_type=ETH_TYPE_CN))
    assert not res.punted and res.outputs and res.outputs[0][1].vlan_pcp == 0  # from a host: tagged, not copied
    assert verify_ok(comp)


def verify_ok(comp) -> bool:
    from hpcfabric.verify.oracle.allpairs import verify

    return verify(comp).ok
