"""PAUSE / PFC snooping (pure): frame parsing and the per-port pause state.

802.3x PAUSE: dst 01:80:c2:00:00:01, EtherType 0x8808, opcode 0x0001, one
16-bit pause time in quanta of 512 bit times. PFC (802.1Qbb): opcode 0x0101,
a class-enable vector and eight per-priority times. A pause time of 0 is XON.

:class:`PauseState` keeps, per (switch, port), when the pause ends; callers
pass the time (``now``, seconds) in and get back the flips to apply. A port
stays paused while any priority is paused (our rules are per port).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

ETH_TYPE_MAC_CONTROL = 0x8808
OPCODE_PAUSE = 0x0001
OPCODE_PFC = 0x0101
PAUSE_DST = bytes.fromhex("0180c2000001")
QUANTUM_BITS = 512
MIN_FRAME = 60  # without FCS


class MalformedFrame(ValueError):
    """A MAC-control frame that cannot be a valid PAUSE/PFC frame (counted and dropped)."""


@dataclass(frozen=True, slots=True)
class PauseFrame:
    """A parsed PAUSE (``priorities`` None) or PFC frame; ``quanta`` is the longest pause asked."""

    src: bytes
    opcode: int
    quanta: int
    priorities: tuple[int, ...] | None = None

    @property
    def is_xon(self) -> bool:
        return self.quanta == 0


def pause_seconds(quanta: int, link_speed_bps: float) -> float:
    """Duration of ``quanta`` pause quanta (512 bit times each) at ``link_speed_bps``."""
    return quanta * QUANTUM_BITS / link_speed_bps


def parse_mac_control(frame: bytes) -> PauseFrame:
    """Parse an Ethernet frame (from the destination MAC on, untagged) as PAUSE or PFC.

    Raises :class:`MalformedFrame` for anything else: short frame, wrong
    EtherType, destination or opcode, or an inconsistent PFC vector.
    """
    if len(frame) < 18:
        raise MalformedFrame(f"frame of {len(frame)} bytes is too short for MAC control")
    dst, src = frame[0:6], frame[6:12]
    (eth_type, opcode) = struct.unpack_from("!HH", frame, 12)
    if eth_type != ETH_TYPE_MAC_CONTROL:
        raise MalformedFrame(f"EtherType {eth_type:#06x} is not MAC control (0x8808)")
    if src[0] & 1:
        raise MalformedFrame("source address is multicast")
    if opcode == OPCODE_PAUSE:
        if dst != PAUSE_DST and dst[0] & 1:
            raise MalformedFrame(f"PAUSE to multicast {dst.hex(':')} other than 01:80:c2:00:00:01")
        (quanta,) = struct.unpack_from("!H", frame, 16)
        return PauseFrame(src, opcode, quanta)
    if opcode == OPCODE_PFC:
        if len(frame) < 34:
            raise MalformedFrame(f"PFC frame of {len(frame)} bytes is shorter than 34")
        if dst != PAUSE_DST:
            raise MalformedFrame(f"PFC frame to {dst.hex(':')}, expected 01:80:c2:00:00:01")
        (vector,) = struct.unpack_from("!H", frame, 16)
        if vector >> 8:
            raise MalformedFrame(f"PFC class-enable vector {vector:#06x} has reserved bits set")
        times = struct.unpack_from("!8H", frame, 18)
        enabled = tuple(t if vector >> i & 1 else 0 for i, t in enumerate(times))
        if not vector:
            raise MalformedFrame("PFC frame enables no priority")
        return PauseFrame(src, opcode, max(enabled), enabled)
    raise MalformedFrame(f"MAC control opcode {opcode:#06x} is neither PAUSE (0x0001) nor PFC (0x0101)")


def build_pause(src: bytes, quanta: int) -> bytes:
    """A minimum-size 802.3x PAUSE frame (no FCS)."""
    if not 0 <= quanta <= 0xFFFF:
        raise ValueError("quanta must be 0..65535")
    frame = PAUSE_DST + src + struct.pack("!HHH", ETH_TYPE_MAC_CONTROL, OPCODE_PAUSE, quanta)
    return frame.ljust(MIN_FRAME, b"\0")


def build_pfc(src: bytes, times: dict[int, int]) -> bytes:
    """A PFC frame pausing each priority in ``times`` (priority -> quanta)."""
    vector = 0
    values = [0] * 8
    for prio, quanta in times.items():
        if not 0 <= prio < 8 or not 0 <= quanta <= 0xFFFF:
            raise ValueError("priorities 0..7, quanta 0..65535")
        vector |= 1 << prio
        values[prio] = quanta
    frame = PAUSE_DST + src + struct.pack("!HHH8H", ETH_TYPE_MAC_CONTROL, OPCODE_PFC, vector, *values)
    return frame.ljust(MIN_FRAME, b"\0")


@dataclass(frozen=True, slots=True)
class Flip:
    """Turn the default rules of (switch, port) off (``paused``) or back on."""

    switch: str
    port: int
    paused: bool
    at: float
    cause: str  # 'pause', 'xon', 'expiry'


@dataclass
class PauseState:
    """Per-port pause deadlines. Feed frames with :meth:`on_frame`, time with :meth:`expire`.

    ``hold`` (seconds) is the shortest time a port stays paused after a PAUSE.
    A congested receiver refreshes its PAUSE before the previous one runs out
    (at 10 Gb/s one frame lasts at most 3.36 ms); a controller that reacts in
    milliseconds would otherwise see each refresh arrive just after the
    expiry and flap the port. With a hold of a few reaction times the train
    keeps the port paused; an XON still resumes at once.
    """

    link_speed_bps: float
    hold: float = 0.0
    until: dict[tuple[str, int], float] = field(default_factory=dict)
    flips: int = 0

    def is_paused(self, switch: str, port: int, now: float) -> bool:
        end = self.until.get((switch, port))
        return end is not None and end > now

    def on_frame(self, switch: str, port: int, frame: PauseFrame, now: float) -> list[Flip]:
        """Apply a PAUSE/PFC (or XON) received on ``port`` of ``switch``: that port must stop sending."""
        key = (switch, port)
        was = key in self.until
        if frame.is_xon:
            if not was:
                return []
            del self.until[key]
            self.flips += 1
            return [Flip(switch, port, False, now, "xon")]
        end = now + max(pause_seconds(frame.quanta, self.link_speed_bps), self.hold)
        # a new PAUSE replaces the running timer (802.3x semantics), never shortens to the past
        self.until[key] = end
        if was:
            return []
        self.flips += 1
        return [Flip(switch, port, True, now, "pause")]

    def expire(self, now: float) -> list[Flip]:
        """Ports whose pause ran out by ``now`` (in deadline order)."""
        done = sorted((end, key) for key, end in self.until.items() if end <= now)
        out = []
        for _, key in done:
            del self.until[key]
            self.flips += 1
            out.append(Flip(key[0], key[1], False, now, "expiry"))
        return out

    def next_deadline(self) -> float | None:
        return min(self.until.values(), default=None)

    def paused_ports(self) -> list[tuple[str, int]]:
        return sorted(self.until)
