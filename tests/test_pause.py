"""PAUSE/PFC parsing and the per-port pause state machine (time injected)."""

import struct

import pytest

from hpcfabric.protocols.pause import (
    PAUSE_DST,
    MalformedFrame,
    PauseState,
    build_pause,
    build_pfc,
    parse_mac_control,
    pause_seconds,
)

SRC = bytes.fromhex("020000000001")
GBPS10 = 10e9


def test_pause_frame_round_trip():
    frame = build_pause(SRC, 0xFFFF)
    assert len(frame) == 60 and frame[:6] == PAUSE_DST
    parsed = parse_mac_control(frame)
    assert (parsed.opcode, parsed.quanta, parsed.src, parsed.priorities) == (1, 0xFFFF, SRC, None)
    assert not parsed.is_xon
    assert parse_mac_control(build_pause(SRC, 0)).is_xon


def test_pfc_takes_longest_enabled_priority():
    parsed = parse_mac_control(build_pfc(SRC, {3: 100, 5: 7000}))
    assert parsed.opcode == 0x0101 and parsed.quanta == 7000
    assert parsed.priorities == (0, 0, 0, 100, 0, 7000, 0, 0)


def test_pfc_ignores_times_of_disabled_priorities():
    frame = bytearray(build_pfc(SRC, {2: 10}))
    struct.pack_into("!H", frame, 18 + 2 * 6, 9999)  # time for priority 6, not enabled
    assert parse_mac_control(bytes(frame)).quanta == 10


@pytest.mark.parametrize(
    "frame, reason",
    [
        (b"", "too short"),
        (build_pause(SRC, 5)[:17], "too short"),
        (PAUSE_DST + SRC + b"\x08\x00\x00\x01\x00\x05", "not MAC control"),
        (PAUSE_DST + SRC + b"\x88\x08\x00\x02\x00\x05", "neither PAUSE"),
        (PAUSE_DST + bytes.fromhex("030000000001") + b"\x88\x08\x00\x01\x00\x05", "multicast"),
        (PAUSE_DST + SRC + b"\x88\x08\x01\x01\x00\x01" + b"\0" * 4, "shorter than 34"),
        (PAUSE_DST + SRC + b"\x88\x08\x01\x01\x00\x00" + b"\0" * 16, "enables no priority"),
        (PAUSE_DST + SRC + b"\x88\x08\x01\x01\x01\x01" + b"\0" * 16, "reserved"),
        (bytes.fromhex("01005e000001") + SRC + b"\x88\x08\x00\x01\x00\x05", "multicast"),
    ],
)
def test_malformed_frames_rejected(frame, reason):
    with pytest.raises(MalformedFrame, match=reason):
        parse_mac_control(frame)


def test_pause_seconds_uses_512_bit_quanta():
    assert pause_seconds(1, 1e9) == pytest.approx(512e-9)
    assert pause_seconds(0xFFFF, 10e9) == pytest.approx(0xFFFF * 51.2e-9)


def test_state_pause_expire_cycle():
    state = PauseState(GBPS10)
    frame = parse_mac_control(build_pause(SRC, 10000))  # 512 us at 10 Gb/s
    flips = state.on_frame("g0s0", 3, frame, now=100.0)
    assert [(f.switch, f.port, f.paused, f.cause) for f in flips] == [("g0s0", 3, True, "pause")]
    assert state.is_paused("g0s0", 3, 100.0002)
    assert state.next_deadline() == pytest.approx(100.000512)
    assert state.expire(100.0005) == []
    flips = state.expire(100.001)
    assert [(f.port, f.paused, f.cause) for f in flips] == [(3, False, "expiry")]
    assert not state.is_paused("g0s0", 3, 100.001) and state.next_deadline() is None
    assert state.flips == 2


def test_repeated_pause_extends_without_flipping_again():
    state = PauseState(GBPS10)
    frame = parse_mac_control(build_pause(SRC, 10000))
    assert len(state.on_frame("s", 4, frame, now=0.0)) == 1
    assert state.on_frame("s", 4, frame, now=0.0004) == []
    assert state.expire(0.0006) == []  # renewed at 0.4 ms, runs to 0.912 ms
    assert len(state.expire(0.001)) == 1


def test_xon_resumes_immediately_and_only_when_paused():
    state = PauseState(GBPS10)
    xon = parse_mac_control(build_pause(SRC, 0))
    assert state.on_frame("s", 4, xon, now=0.0) == []
    state.on_frame("s", 4, parse_mac_control(build_pause(SRC, 0xFFFF)), now=0.0)
    flips = state.on_frame("s", 4, xon, now=0.0001)
    assert [(f.paused, f.cause) for f in flips] == [(False, "xon")]
    assert state.paused_ports() == []


def test_ports_are_independent_and_expire_in_deadline_order():
    state = PauseState(1e9)
    state.on_frame("a", 1, parse_mac_control(build_pause(SRC, 2000)), now=0.0)
    state.on_frame("b", 2, parse_mac_control(build_pause(SRC, 1000)), now=0.0)
    assert state.paused_ports() == [("a", 1), ("b", 2)]
    flips = state.expire(1.0)
    assert [(f.switch, f.port) for f in flips] == [("b", 2), ("a", 1)]


def test_hold_keeps_a_refreshed_port_paused():
    """A PAUSE train refreshed every 3 ms at 10 Gb/s, each frame handled 1 ms late."""
    frame = parse_mac_control(build_pause(SRC, 0xFFFF))  # 3.36 ms at 10 Gb/s
    flapping, held = PauseState(GBPS10), PauseState(GBPS10, hold=0.05)
    for state in (flapping, held):
        for i in range(10):
            state.expire(0.004 * i + 0.001)  # timer runs before the late refresh is handled
            state.on_frame("s", 3, frame, now=0.004 * i + 0.001)
    assert flapping.flips > 10
    assert held.flips == 1 and held.is_paused("s", 3, 0.04)
    assert held.expire(0.086) == [] and held.expire(0.088) != []  # released one hold after the last refresh
    xon = parse_mac_control(build_pause(SRC, 0))
    held.on_frame("s", 3, frame, now=1.0)
    assert [f.cause for f in held.on_frame("s", 3, xon, now=1.001)] == ["xon"]
