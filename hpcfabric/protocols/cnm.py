"""IEEE 802.1Qau congestion notification messages (pure): parsing, building, and the
mapping of a CNM to the port-state flip a PAUSE causes.

Frame layout (IEEE Std 802.1Qau-2010 clause 33.4, as folded into 802.1Q; see
docs/routing.md for the sources we checked it against)::

    dst MAC (6)   the reaction point: the source of the sampled frame
    src MAC (6)   the congestion point's port
    [802.1Q / 802.1ad tags (4 each), at most two]
    EtherType 0x22E9 (CN EtherType)
    [CN-TAG flow id / RPID (2) + EtherType 0x22E9 again, when the CNM carries a CN-TAG]
    CNM PDU (24 + 0..64):
      version (4 bits, 0) | reserved (6 bits) | quantized feedback (6 bits)
      congestion point identifier, CPID (8)
      cnmQOffset (2, signed)   queue offset from the equilibrium Qeq
      cnmQDelta (2, signed)    queue change since the previous sample
      encapsulated priority (2: the sampled frame's priority in the top 3 bits)
      encapsulated destination MAC (6)
      encapsulated MSDU length (2, 0..64)
      encapsulated MSDU (the first octets of the sampled frame's MSDU)

The CN EtherType is shared by the CN-TAG and the CNM; after it we accept the
PDU directly, or a 2-octet flow id followed by the EtherType again (a CNM
that carries a CN-TAG). Anything else -- short frame, another EtherType, a
version other than 0, an encapsulated MSDU longer than 64 octets or than the
frame, multicast addresses -- raises :class:`~hpcfabric.protocols.pause.MalformedFrame`.

Mapping (docs/routing.md): a CNM that a switch receives on fabric port P says
that the queue it came from -- downstream of P -- is congested; like a PAUSE
received on P it switches off the default rules that send out of P (the same
:class:`~hpcfabric.protocols.pause.Flip`, through the same
:class:`~hpcfabric.protocols.pause.PauseState`). The hold is derived from the quantized
feedback: ``max_hold * qFb / 63`` (Minkenberg et al. keep a congestion entry
for their 250 ms AR timer after the last notification; the most severe
feedback, 63, holds that long, milder feedback proportionally less). Every
further CNM restarts the hold, so the port resumes when notifications stop.
A CNM with feedback 0 carries no congestion and changes nothing (it is not
an XON: it must not resume a port that a PAUSE holds), and a CNM never
shortens a hold already running (PAUSE or CNM).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

from hpcfabric.protocols.pause import Flip, MalformedFrame, PauseFrame, PauseState, QUANTUM_BITS

ETH_TYPE_CN = 0x22E9  # CN-TAG and CNM
VLAN_TPIDS = (0x8100, 0x88A8)
CNM_VERSION = 0
CNM_PDU_LEN = 24  # without the encapsulated MSDU
MAX_ENCAPSULATED = 64
MAX_QFB = 63
#: Pseudo opcode of the PauseFrame a CNM becomes (never on a wire; MAC-control opcodes are 0x0001/0x0101).
OPCODE_CNM = ETH_TYPE_CN
#: Longest hold (feedback 63): Minkenberg et al.'s AR timer.
MAX_HOLD = 0.250
MIN_FRAME = 60


@dataclass(frozen=True, slots=True)
class CongestionNotification:
    """A parsed CNM. ``qfb``: quantized feedback 0..63 (larger = more congested)."""

    dst: bytes
    src: bytes
    qfb: int
    cpid: int
    q_offset: int
    q_delta: int
    encapsulated_priority: int  # the raw 16-bit field
    encapsulated_dst: bytes
    msdu: bytes
    version: int = CNM_VERSION
    reserved: int = 0
    rpid: int | None = None  # flow id of the CN-TAG, when the CNM carries one
    vlan_pcp: int | None = None  # PCP of the CNM's own (outer) VLAN tag, if tagged

    @property
    def priority(self) -> int:
        """Priority (0..7) of the sampled frame."""
        return self.encapsulated_priority >> 13 & 7


def parse_cnm(frame: bytes) -> CongestionNotification:
    """Parse an Ethernet frame (from the destination MAC on, no FCS) as an 802.1Qau CNM.

    Raises :class:`~hpcfabric.protocols.pause.MalformedFrame` for anything else.
    """
    frame = bytes(frame)
    if len(frame) < 14:
        raise MalformedFrame(f"frame of {len(frame)} bytes is too short for an Ethernet header")
    dst, src = frame[0:6], frame[6:12]
    if src[0] & 1:
        raise MalformedFrame("source address is multicast")
    if dst[0] & 1:
        raise MalformedFrame(f"CNM to multicast {dst.hex(':')}; a CNM goes to the sampled frame's source")
    pos = 12
    pcp = None
    tags = 0
    while True:
        if len(frame) < pos + 2:
            raise MalformedFrame(f"frame of {len(frame)} bytes ends inside its header")
        (eth_type,) = struct.unpack_from("!H", frame, pos)
        if eth_type not in VLAN_TPIDS:
            break
        tags += 1
        if tags > 2:
            raise MalformedFrame("more than two VLAN tags")
        if len(frame) < pos + 4:
            raise MalformedFrame("frame ends inside a VLAN tag")
        if pcp is None:
            pcp = frame[pos + 2] >> 5
        pos += 4
    if eth_type != ETH_TYPE_CN:
        raise MalformedFrame(f"EtherType {eth_type:#06x} is not congestion notification (0x22e9)")
    pos += 2
    rpid = None
    if len(frame) >= pos + 4 and struct.unpack_from("!H", frame, pos + 2)[0] == ETH_TYPE_CN:
        (rpid,) = struct.unpack_from("!H", frame, pos)
        pos += 4
    if len(frame) < pos + CNM_PDU_LEN:
        raise MalformedFrame(f"CNM PDU of {len(frame) - pos} bytes is shorter than {CNM_PDU_LEN}")
    head, cpid, q_offset, q_delta, prio = struct.unpack_from("!HQhhH", frame, pos)
    version, reserved, qfb = head >> 12, head >> 6 & 0x3F, head & 0x3F
    if version != CNM_VERSION:
        raise MalformedFrame(f"CNM version {version} (only version {CNM_VERSION} is defined)")
    enc_dst = frame[pos + 16 : pos + 22]
    (length,) = struct.unpack_from("!H", frame, pos + 22)
    if length > MAX_ENCAPSULATED:
        raise MalformedFrame(f"encapsulated MSDU length {length} exceeds {MAX_ENCAPSULATED}")
    body = frame[pos + CNM_PDU_LEN :]
    if length > len(body):
        raise MalformedFrame(f"encapsulated MSDU length {length} but only {len(body)} bytes follow")
    return CongestionNotification(
        dst, src, qfb, cpid, q_offset, q_delta, prio, enc_dst, body[:length], version, reserved, rpid, pcp
    )


def build_cnm(
    dst: bytes,
    src: bytes,
    qfb: int,
    *,
    cpid: int = 0,
    q_offset: int = 0,
    q_delta: int = 0,
    priority: int = 0,
    encapsulated_dst: bytes = bytes(6),
    msdu: bytes = b"",
    rpid: int | None = None,
    vlan_pcp: int | None = None,
) -> bytes:
    """A CNM frame (no FCS, padded to 60 bytes) -- for tests and emulated congestion points."""
    if not 0 <= qfb <= MAX_QFB:
        raise ValueError(f"quantized feedback must be 0..{MAX_QFB}")
    if len(msdu) > MAX_ENCAPSULATED:
        raise ValueError(f"encapsulated MSDU of {len(msdu)} bytes exceeds {MAX_ENCAPSULATED}")
    if not 0 <= priority <= 7:
        raise ValueError("priority must be 0..7")
    out = bytes(dst) + bytes(src)
    if vlan_pcp is not None:
        out += struct.pack("!HH", 0x8100, vlan_pcp << 13)
    out += struct.pack("!H", ETH_TYPE_CN)
    if rpid is not None:
        out += struct.pack("!HH", rpid, ETH_TYPE_CN)
    out += struct.pack("!HQhhH", CNM_VERSION << 12 | qfb, cpid, q_offset, q_delta, priority << 13)
    out += bytes(encapsulated_dst) + struct.pack("!H", len(msdu)) + bytes(msdu)
    return out.ljust(MIN_FRAME, b"\0")


def hold_seconds(qfb: int, max_hold: float = MAX_HOLD) -> float:
    """How long a CNM with quantized feedback ``qfb`` keeps its port switched: ``max_hold * qfb / 63``."""
    if not 0 <= qfb <= MAX_QFB:
        raise ValueError(f"quantized feedback must be 0..{MAX_QFB}")
    return max_hold * qfb / MAX_QFB


def cnm_to_pause_frame(
    cnm: CongestionNotification, link_speed_bps: float, *, max_hold: float = MAX_HOLD
) -> PauseFrame | None:
    """The PAUSE equivalent of ``cnm`` for :meth:`PauseState.on_frame <hpcfabric.protocols.pause.PauseState.on_frame>`:
    the hold in pause quanta at ``link_speed_bps`` (possibly more than a real PAUSE's
    16 bits: this frame never goes on a wire). None for feedback 0 (nothing to do)."""
    seconds = hold_seconds(cnm.qfb, max_hold)
    if seconds <= 0:
        return None
    quanta = max(1, math.ceil(seconds * link_speed_bps / QUANTUM_BITS))
    return PauseFrame(cnm.src, OPCODE_CNM, quanta)


def on_cnm(
    state: PauseState, switch: str, port: int, cnm: CongestionNotification, now: float, *, max_hold: float = MAX_HOLD
) -> list[Flip]:
    """Apply a CNM received on ``port`` of ``switch`` to ``state``: the flips to apply
    (the same :class:`~hpcfabric.protocols.pause.Flip` values a PAUSE yields). A CNM never
    shortens a running hold and never resumes a port."""
    frame = cnm_to_pause_frame(cnm, state.link_speed_bps, max_hold=max_hold)
    if frame is None:
        return []
    end = state.until.get((switch, port))
    if end is not None and end >= now + max(hold_seconds(cnm.qfb, max_hold), state.hold):
        return []
    return state.on_frame(switch, port, frame, now)


__all__ = [
    "CongestionNotification",
    "ETH_TYPE_CN",
    "OPCODE_CNM",
    "MAX_HOLD",
    "build_cnm",
    "cnm_to_pause_frame",
    "hold_seconds",
    "on_cnm",
    "parse_cnm",
]
