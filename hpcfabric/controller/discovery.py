"""Link discovery (pure): LLDP frames and the observed-vs-expected wiring report.

LLDP frames (IEEE 802.1AB) sent by the controller out of every fabric port:

* destination ``01:80:c2:00:00:0e`` (nearest bridge), EtherType ``0x88cc``;
* Chassis ID TLV, subtype 7 (locally assigned): ``dpid:%016x``;
* Port ID TLV, subtype 7 (locally assigned): ``port:N``;
* TTL TLV (seconds);
* an organisationally specific TLV (OUI ``00:00:00`` is not used: we use the
  locally administered ``02:48:46``, subtype 1) carrying an 8-byte nonce of the
  controller session, so the controller can tell its own probes from frames a
  host forged or a previous controller instance sent;
* End TLV.

:class:`DiscoveryState` is fed with observations (an LLDP frame sent from
``src`` arrived on ``dst``) and the expected :class:`~hpcfabric.topology.model.Fabric`
and reports link status, missing, extra and miswired links and unknown
dpids. It also decides which ports must stop forwarding (``quarantine``):

Policy (see docs/controller.md): compiled rules are loop-free per destination
and never flood, so every switch gets its full table as soon as it connects;
a missing link or switch only black-holes the paths over it. A *miswired*
port (its neighbour is not the expected one) can create forwarding loops, so
it is quarantined (``OFPPC_NO_FWD``) until an LLDP observation shows the
expected neighbour again. Quarantine is sticky: stale evidence never lifts it,
only a positive observation does.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any, Iterable

from hpcfabric.topology.model import Fabric

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


# ---------------------------------------------------------------------------
# observed vs expected wiring


@dataclass(frozen=True, slots=True)
class LinkStatus:
    a: str
    a_port: int
    b: str
    b_port: int
    kind: str
    status: str  # 'up' | 'pending' | 'missing' | 'miswired'
    last_seen: float | None = None


@dataclass
class DiscoveryReport:
    links: list[LinkStatus]
    missing_links: list[dict[str, Any]]
    extra_links: list[dict[str, Any]]
    miswired: list[dict[str, Any]]
    unknown_dpids: list[str]
    quarantined: list[tuple[str, int]]

    @property
    def links_expected(self) -> int:
        return len(self.links)

    @property
    def links_discovered(self) -> int:
        return sum(1 for link in self.links if link.status == "up")

    def as_dict(self) -> dict[str, Any]:
        return {
            "links_expected": self.links_expected,
            "links_discovered": self.links_discovered,
            "missing_links": self.missing_links,
            "extra_links": self.extra_links,
            "miswired": self.miswired,
            "unknown_dpids": self.unknown_dpids,
            "quarantined": [f"{s}:{p}" for s, p in self.quarantined],
        }


End = tuple[int, int]  # (dpid, port)


@dataclass
class DiscoveryState:
    """Observed neighbours per port vs the expected fabric.

    Parameters
    ----------
    expected : Fabric
    timeout : float
        An observation older than this (seconds) no longer counts: its link is
        missing (or pending for ``timeout`` after either switch connected).
    """

    expected: Fabric
    timeout: float = 3.5
    #: (dpid, port) -> ((peer dpid, peer port), time seen)
    neighbors: dict[End, tuple[End, float]] = field(default_factory=dict)
    connected: dict[int, float] = field(default_factory=dict)
    unknown: set[int] = field(default_factory=set)
    quarantined: set[tuple[str, int]] = field(default_factory=set)

    def __post_init__(self) -> None:
        self._name = {sw.dpid: sw.name for sw in self.expected.switches}
        self._dpid = {sw.name: sw.dpid for sw in self.expected.switches}
        # in-use port -> expected peer end (dpid, port), or None for a host port
        self._expect: dict[End, End | None] = {}
        for sw in self.expected.switches:
            for port, peer in self.expected.ports(sw.name).items():
                exp = None if peer.is_host else (self._dpid[peer.node], peer.port)
                self._expect[(sw.dpid, port)] = exp  # type: ignore[assignment]

    # -- inputs --------------------------------------------------------
    def switch_up(self, dpid: int, now: float) -> None:
        if dpid in self._name:
            self.connected[dpid] = now
        else:
            self.unknown.add(dpid)

    def switch_down(self, dpid: int) -> None:
        """Forget a disconnected switch and every view of or through its ports."""
        self.connected.pop(dpid, None)
        for end in [e for e, (peer, _) in self.neighbors.items() if e[0] == dpid or peer[0] == dpid]:
            del self.neighbors[end]

    def port_down(self, dpid: int, port: int) -> None:
        """A port lost its link (or was deleted): forget both views of its cable."""
        end = (dpid, port)
        seen = self.neighbors.pop(end, None)
        if seen is not None and self.neighbors.get(seen[0], (None,))[0] == end:
            del self.neighbors[seen[0]]

    def adopt_quarantine(self, switch: str, port: int) -> None:
        """A port found with NO_FWD set (e.g. by a previous controller run) stays quarantined until healed."""
        if (self._dpid.get(switch), port) in self._expect:
            self.quarantined.add((switch, port))

    def observed(
        self, src_dpid: int, src_port: int, dst_dpid: int, dst_port: int, now: float, *, trusted: bool = True
    ) -> None:
        """An LLDP frame claiming to come from ``src`` arrived on ``dst``.

        ``trusted`` (the frame carries this controller's nonce) lets it also
        update the sender's view; an untrusted claim (forged, or sent by a
        previous controller run) only tells about the receiving port.
        """
        src, dst = (src_dpid, src_port), (dst_dpid, dst_port)
        for dpid in (src_dpid, dst_dpid):
            if dpid not in self._name:
                self.unknown.add(dpid)
        self.neighbors[dst] = (src, now)
        self._judge(dst, src)
        if trusted:
            self.neighbors[src] = (dst, now)
            self._judge(src, dst)

    def _judge(self, end: End, peer: End) -> None:
        if end not in self._expect or end[0] not in self._name:
            return
        key = (self._name[end[0]], end[1])
        if self._expect[end] == peer:
            self.quarantined.discard(key)
        else:
            self.quarantined.add(key)

    # -- outputs -------------------------------------------------------
    def _fresh(self, end: End, now: float) -> End | None:
        seen = self.neighbors.get(end)
        if seen is None or now - seen[1] > self.timeout:
            return None
        return seen[0]

    def _label(self, end: End) -> str:
        name = self._name.get(end[0])
        return f"{name}:{end[1]}" if name else f"dpid:{end[0]:016x}:{end[1]}"

    def _expected_label(self, end: End) -> str:
        exp = self._expect[end]
        if exp is None:
            peer = self.expected.peer(self._name[end[0]], end[1])
            return f"host {peer.node}" if peer else "host"
        return self._label(exp)

    def link_status(self, a: End, b: End, now: float) -> tuple[str, float | None]:
        va, vb = self._fresh(a, now), self._fresh(b, now)
        seen = [self.neighbors[e][1] for e in (a, b) if e in self.neighbors]
        last = max(seen) if seen else None
        if (va is not None and va != b) or (vb is not None and vb != a):
            return "miswired", last
        if va == b or vb == a:
            return "up", last
        ups = [self.connected.get(a[0]), self.connected.get(b[0])]
        if all(t is not None for t in ups) and now - max(ups) < self.timeout:  # type: ignore[type-var]
            return "pending", last
        return "missing", last

    def report(self, now: float) -> DiscoveryReport:
        links = []
        missing = []
        for link in self.expected.links:
            a, b = (self._dpid[link.a], link.a_port), (self._dpid[link.b], link.b_port)
            status, last = self.link_status(a, b, now)
            links.append(LinkStatus(link.a, link.a_port, link.b, link.b_port, link.kind, status, last))
            if status == "missing":
                row: dict[str, Any] = {"a": link.a, "a_port": link.a_port, "b": link.b, "b_port": link.b_port}
                down = [n for n in (link.a, link.b) if self._dpid[n] not in self.connected]
                if down:
                    row["switch_down"] = down
                missing.append(row)
        miswired = []
        extra = []
        done: set[frozenset[End]] = set()
        for end in sorted(self.neighbors):
            peer = self._fresh(end, now)
            if peer is None:
                continue
            if end in self._expect:
                if self._expect[end] != peer:
                    miswired.append(
                        {
                            "switch": self._name[end[0]],
                            "port": end[1],
                            "expected": self._expected_label(end),
                            "actual": self._label(peer),
                        }
                    )
                continue
            pair = frozenset((end, peer))
            if peer in self._expect or pair in done:
                continue  # the in-use end reports it as miswired
            done.add(pair)
            extra.append({"a": self._label(end), "b": self._label(peer)})
        return DiscoveryReport(
            links=links,
            missing_links=missing,
            extra_links=extra,
            miswired=miswired,
            unknown_dpids=[f"{d:016x}" for d in sorted(self.unknown)],
            quarantined=sorted(self.quarantined),
        )

    def quarantine(self) -> set[tuple[str, int]]:
        """Ports (switch name, port) that must not forward (OFPPC_NO_FWD)."""
        return set(self.quarantined)


def quarantine_changes(
    wanted: Iterable[tuple[str, int]], current: Iterable[tuple[str, int]]
) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """Port-mods to send: (ports to set NO_FWD on, ports to clear it on)."""
    w, c = set(wanted), set(current)
    return sorted(w - c), sorted(c - w)
