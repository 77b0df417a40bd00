"""Dynamic MAC Protocol (DMP) frame format (paper Sec. IV, Fig. 7) -- pure, no sockets.

A host asks its access switch for its hierarchical MAC by sending a DMP
request; the switch's DMP rule (table 0, ``in_port=H,dl_type=0x88b5``)
overwrites the source address with the MAC planned for port H and sends the
frame back out of the same port. The host adopts the reply's source address.
No controller is on the path: one rule per host port.

Request (60 bytes, the Ethernet minimum without FCS)::

    offset  size  field
    0       6     destination MAC  = the host's current MAC
    6       6     source MAC       = the host's current MAC
    12      2     EtherType 0x88b5 (IEEE "local experimental")
    14      5     magic b"HFDMP"
    19      1     version = 1
    20      1     type    = 1 (request)
    21      4     nonce (big endian, chosen by the host per request)
    25      35    zero padding

The reply is the same frame with bytes 6..11 replaced by the assigned MAC.
The switch cannot rewrite the payload, so the reply still says "type 1";
what marks a reply is that it arrives *from* the switch (the client ignores
its own outgoing copies) with our nonce and our MAC as destination. If the
host already holds its hierarchical MAC, reply and request are identical:
that is the idempotent "already assigned" case.

An assigned MAC must be a locally administered unicast address (first octet
``xxxxxx10``, e.g. ``02``): anything else means a misconfigured switch rule,
and the host must not adopt it.

See ``docs/dmp.md`` for the Fig. 7 walk-through.
"""

from __future__ import annotations

import struct

ETH_TYPE_DMP = 0x88B5
MAGIC = b"HFDMP"
VERSION = 1
TYPE_REQUEST = 1
MIN_FRAME = 60  # Ethernet minimum without FCS
HEADER_LEN = 14
#: magic, version, type, nonce
_PAYLOAD = struct.Struct("!5sBBI")
PAYLOAD_LEN = _PAYLOAD.size  # 11
FRAME_LEN = max(MIN_FRAME, HEADER_LEN + PAYLOAD_LEN)

_MAC_BITS = 48
_MULTICAST = 0x01 << 40  # I/G bit of the first octet
_LOCAL = 0x02 << 40  # U/L bit of the first octet


class DmpError(ValueError):
    """Bad arguments to the frame builders, or an unusable assignment."""


class InvalidAssignment(DmpError):
    """A reply that matches our request but assigns a MAC we must not adopt."""

    def __init__(self, mac: int, reason: str):
        self.mac = mac
        self.reason = reason
        super().__init__(f"switch assigned {format_mac(mac)}: {reason}")


def format_mac(mac: int) -> str:
    """``0x020000010001`` -> ``'02:00:00:01:00:01'``."""
    return ":".join(f"{(mac >> s) & 0xFF:02x}" for s in range(40, -1, -8))


def parse_mac(text: str) -> int:
    """``'02:00:00:01:00:01'`` (``:`` or ``-`` separated) -> int; DmpError if malformed."""
    parts = text.strip().replace("-", ":").split(":")
    if len(parts) != 6 or not all(len(p) == 2 for p in parts):
        raise DmpError(f"malformed MAC address {text!r}")
    try:
        return int("".join(parts), 16)
    except ValueError:
        raise DmpError(f"malformed MAC address {text!r}") from None


def mac_to_int(mac: bytes | int | str) -> int:
    """Accept 6 bytes, an int or ``aa:bb:..`` text; return the 48-bit int."""
    if isinstance(mac, (bytes, bytearray)):
        if len(mac) != 6:
            raise DmpError(f"a MAC address has 6 bytes, got {len(mac)}")
        return int.from_bytes(mac, "big")
    if isinstance(mac, str):
        return parse_mac(mac)
    if isinstance(mac, bool) or not isinstance(mac, int) or not 0 <= mac < 1 << _MAC_BITS:
        raise DmpError(f"not a 48-bit MAC address: {mac!r}")
    return mac


def mac_bytes(mac: int) -> bytes:
    return mac.to_bytes(6, "big")


def assignment_problem(mac: int) -> str | None:
    """Why ``mac`` must not be adopted as a hierarchical MAC (None if it is fine).

    Hierarchical MACs are locally administered unicast (paper Sec. III-A):
    the multicast bit clear and the locally-administered bit set.
    """
    if not 0 <= mac < 1 << _MAC_BITS:
        return "not a 48-bit address"
    if mac & _MULTICAST:
        return "multicast/broadcast address (I/G bit set)"
    if not mac & _LOCAL:
        return "not locally administered (U/L bit clear): a vendor address, not a hierarchical one"
    return None


def check_assigned_mac(mac: int) -> int:
    """Return ``mac`` if it is a valid assignment, else raise :class:`InvalidAssignment`."""
    problem = assignment_problem(mac)
    if problem is not None:
        raise InvalidAssignment(mac, problem)
    return mac


def _nonce(nonce: int | bytes) -> int:
    if isinstance(nonce, (bytes, bytearray)):
        if len(nonce) != 4:
            raise DmpError(f"nonce must be 4 bytes, got {len(nonce)}")
        return int.from_bytes(nonce, "big")
    if isinstance(nonce, bool) or not isinstance(nonce, int) or not 0 <= nonce < 1 << 32:
        raise DmpError(f"nonce must be a 32-bit unsigned integer, got {nonce!r}")
    return nonce


def build_request(mac6: bytes | int | str, nonce: int | bytes) -> bytes:
    """The DMP request of a host whose current MAC is ``mac6`` (dst = src = mac6), 60 bytes."""
    mac = mac_to_int(mac6)
    if mac & _MULTICAST:
        raise DmpError(f"{format_mac(mac)} is a multicast address; a host sends from a unicast MAC")
    raw = mac_bytes(mac)
    frame = raw + raw + struct.pack("!H", ETH_TYPE_DMP) + _PAYLOAD.pack(MAGIC, VERSION, TYPE_REQUEST, _nonce(nonce))
    return frame.ljust(FRAME_LEN, b"\0")


def parse_frame(frame: bytes) -> tuple[int, int, int] | None:
    """(dst, src, nonce) of a well-formed DMP frame, None for anything else.

    Well-formed: at least the 25 bytes of header and payload, EtherType
    0x88b5, our magic, version 1 and type request. Longer frames (padding,
    a trailing FCS) are fine.
    """
    if len(frame) < HEADER_LEN + PAYLOAD_LEN:
        return None
    (eth_type,) = struct.unpack_from("!H", frame, 12)
    if eth_type != ETH_TYPE_DMP:
        return None
    magic, version, kind, nonce = _PAYLOAD.unpack_from(frame, HEADER_LEN)
    if magic != MAGIC or version != VERSION or kind != TYPE_REQUEST:
        return None
    return int.from_bytes(frame[0:6], "big"), int.from_bytes(frame[6:12], "big"), nonce


def parse_reply(frame: bytes, expected_nonce: int | bytes | frozenset | set, my_mac: bytes | int | str) -> int | None:
    """The MAC the switch assigned in ``frame``, or None if the frame is not our reply.

    ``expected_nonce`` is one nonce or a set of them (the nonces of every
    attempt, so a late reply to an earlier retry still counts). ``my_mac`` is
    the MAC the request was sent from (the reply's destination).

    Raises :class:`InvalidAssignment` when the frame *is* our reply but the
    assigned address is not locally administered unicast.
    """
    parsed = parse_frame(frame)
    if parsed is None:
        return None
    dst, src, nonce = parsed
    if isinstance(expected_nonce, (set, frozenset)):
        wanted = {_nonce(n) for n in expected_nonce}
    else:
        wanted = {_nonce(expected_nonce)}
    if nonce not in wanted or dst != mac_to_int(my_mac):
        return None
    return check_assigned_mac(src)
