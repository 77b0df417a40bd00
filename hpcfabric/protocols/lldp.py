"""LLDP frames (IEEE 802.1AB, pure): what the controller sends out of every fabric port, and the parser.

* destination ``01:80:c2:00:00:0e`` (nearest bridge), EtherType ``0x88cc``;
* Chassis ID TLV, subtype 7 (locally assigned): ``dpid:%016x``;
* Port ID TLV, subtype 7 (locally assigned): ``port:N``;
* TTL TLV (seconds);
* an organisationally specific TLV (OUI ``00:00:00`` is not used: we use the
  locally administered ``02:48:46``, subtype 1) carrying an 8-byte nonce of the
  controller session, so the controller can tell its own probes from frames a
  host forged or a previous controller instance sent;
* End TLV.

The wiring judgement over the parsed frames is :mod:`hpcfabric.controller.discovery`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

LLDP_DST = bytes.fromhex("0180c200000e")
ETH_TYPE_LLDP = 0x88CC
SUBTYPE_LOCAL = 7
TLV_END, TLV_CHASSIS, TLV_PORT, TLV_TTL, TLV_ORG = 0, 1, 2, 3, 127
ORG_OUI = bytes.fromhex("024846")  # locally administered OUI-like prefix ("HF")
ORG_SUBTYPE_NONCE = 1
MIN_FRAME = 60


class MalformedLLDP(ValueError):
    """A frame that is not a well-formed LLDPDU (counted and dropped)."""


@dataclass(frozen=True, slots=True)
class LldpInfo:
    """A parsed LLDPDU. ``dpid``/``port`` are set when the IDs use our ``dpid:``/``port:`` format."""

    src: bytes
    chassis_subtype: int
    chassis_id: bytes
    port_subtype: int
    port_id: bytes
    ttl: int
    dpid: int | None = None
    port: int | None = None
    nonce: bytes | None = None


def _tlv(tlv_type: int, value: bytes) -> bytes:
    if len(value) > 511:
        raise ValueError("TLV value longer than 511 bytes")
    return struct.pack("!H", tlv_type << 9 | len(value)) + value


def build_lldp(dpid: int, port: int, src: bytes, ttl: int = 120, nonce: bytes | None = None) -> bytes:
    """The LLDP frame a controller sends out of ``port`` of switch ``dpid`` (min. 60 bytes, no FCS)."""
    if len(src) != 6:
        raise ValueError("source MAC must be 6 bytes")
    if not 0 <= dpid < 1 << 64 or not 0 < port < 1 << 32 or not 0 <= ttl <= 0xFFFF:
        raise ValueError("dpid, port or ttl out of range")
    body = (
        _tlv(TLV_CHASSIS, bytes([SUBTYPE_LOCAL]) + b"dpid:%016x" % dpid)
        + _tlv(TLV_PORT, bytes([SUBTYPE_LOCAL]) + b"port:%d" % port)
        + _tlv(TLV_TTL, struct.pack("!H", ttl))
    )
    if nonce is not None:
        if len(nonce) != 8:
            raise ValueError("nonce must be 8 bytes")
        body += _tlv(TLV_ORG, ORG_OUI + bytes([ORG_SUBTYPE_NONCE]) + nonce)
    frame = LLDP_DST + src + struct.pack("!H", ETH_TYPE_LLDP) + body + _tlv(TLV_END, b"")
    return frame.ljust(MIN_FRAME, b"\0")


def _decode_id(prefix: bytes, subtype: int, value: bytes, base: int) -> int | None:
    if subtype != SUBTYPE_LOCAL or not value.startswith(prefix):
        return None
    digits = value[len(prefix) :]
    try:
        text = digits.decode("ascii")
        if not text or not all(c in "0123456789abcdefABCDEF" for c in text):
            return None
        number = int(text, base)
    except (UnicodeDecodeError, ValueError):
        return None
    return number


def parse_lldp(frame: bytes) -> LldpInfo:
    """Parse an Ethernet frame (untagged, from the destination MAC on) as LLDP.

    Raises :class:`MalformedLLDP` for a wrong EtherType, truncated or
    overlong TLVs, missing or out-of-order mandatory TLVs.
    """
    if len(frame) < 14:
        raise MalformedLLDP(f"frame of {len(frame)} bytes is too short")
    (eth_type,) = struct.unpack_from("!H", frame, 12)
    if eth_type != ETH_TYPE_LLDP:
        raise MalformedLLDP(f"EtherType {eth_type:#06x} is not LLDP (0x88cc)")
    src = bytes(frame[6:12])
    off = 14
    tlvs: list[tuple[int, bytes]] = []
    while True:
        if off + 2 > len(frame):
            raise MalformedLLDP("LLDPDU ends without an End TLV")
        (head,) = struct.unpack_from("!H", frame, off)
        tlv_type, length = head >> 9, head & 0x1FF
        off += 2
        if off + length > len(frame):
            raise MalformedLLDP(f"TLV type {tlv_type} of length {length} runs past the end of the frame")
        value = bytes(frame[off : off + length])
        off += length
        if tlv_type == TLV_END:
            if length:
                raise MalformedLLDP("End TLV with a non-zero length")
            break
        tlvs.append((tlv_type, value))
    if len(tlvs) < 3 or [t for t, _ in tlvs[:3]] != [TLV_CHASSIS, TLV_PORT, TLV_TTL]:
        raise MalformedLLDP("LLDPDU must start with Chassis ID, Port ID and TTL TLVs")
    (_, chassis), (_, port), (_, ttl) = tlvs[:3]
    if not 2 <= len(chassis) <= 256:
        raise MalformedLLDP(f"Chassis ID TLV of length {len(chassis)} (must be 2..256)")
    if not 2 <= len(port) <= 256:
        raise MalformedLLDP(f"Port ID TLV of length {len(port)} (must be 2..256)")
    if len(ttl) < 2:
        raise MalformedLLDP(f"TTL TLV of length {len(ttl)} (must be >= 2)")
    for t, _ in tlvs[3:]:
        if t in (TLV_CHASSIS, TLV_PORT, TLV_TTL):
            raise MalformedLLDP(f"mandatory TLV type {t} repeated")
    nonce = None
    for t, v in tlvs[3:]:
        if t == TLV_ORG and len(v) == 12 and v[:3] == ORG_OUI and v[3] == ORG_SUBTYPE_NONCE:
            nonce = v[4:]
    dpid = _decode_id(b"dpid:", chassis[0], chassis[1:], 16)
    port_no = _decode_id(b"port:", port[0], port[1:], 10)
    if dpid is not None and not 0 <= dpid < 1 << 64:
        dpid = None
    return LldpInfo(
        src=src,
        chassis_subtype=chassis[0],
        chassis_id=chassis[1:],
        port_subtype=port[0],
        port_id=port[1:],
        ttl=struct.unpack("!H", ttl[:2])[0],
        dpid=dpid,
        port=port_no,
        nonce=nonce,
    )
