"""Plain flow-rule values (no os-ken types): what the compiler emits and the
controller, the ``ovs-ofctl`` printer and the fake pipeline consume.

Pipeline (OpenFlow 1.3 tables):

====  ===============  ====================================================
0     ``INGRESS``      DMP echo per host port, control-frame punts (LLDP,
                       PAUSE/PFC), then ``goto`` 1
1     ``ROUTE``        host delivery and routing on ``eth_dst`` (the rules
                       the paper counts); default rules of conditional
                       routing write the port to ``metadata`` and go to 2
2     ``PORT_STATE``   one entry per fabric port: output, or (while paused)
                       go to 3 -- a PAUSE flips one entry, O(1)
3     ``ALTERNATIVE``  alternative (minimal multipath / Valiant) rules
4     ``PAUSE_LEARN``  switch-local PAUSE reaction only: overrides learned
                       from PAUSE frames (``reg0[0] = 1`` for a port)
5     ``PAUSE_SELECT`` switch-local PAUSE reaction only: output the port,
                       or (override present) resubmit to ALTERNATIVE
====  ===============  ====================================================

Tables 4 and 5 are reached only by ``resubmit`` (an Open vSwitch / Nicira
extension, like ``learn``): see docs/controller.md, "Switch-local PAUSE reaction".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

TABLE_INGRESS = 0
TABLE_ROUTE = 1
TABLE_PORT_STATE = 2
TABLE_ALTERNATIVE = 3
TABLE_PAUSE_LEARN = 4
TABLE_PAUSE_SELECT = 5

#: Where the reaction to a PAUSE happens: the controller flips PORT_STATE entries,
#: or the switch learns a timed override from the frame itself (OVS ``learn``).
PAUSE_REACTIONS = ("controller", "switch")

OFPP_IN_PORT = 0xFFFFFFF8
OFPP_CONTROLLER = 0xFFFFFFFD
OFP_NO_BUFFER_LEN = 0xFFFF  # send the whole frame to the controller

ETH_TYPE_DMP = 0x88B5
ETH_TYPE_LLDP = 0x88CC
ETH_TYPE_PAUSE = 0x8808  # MAC control: 802.3x PAUSE (opcode 1) and PFC (opcode 0x101)
ETH_TYPE_CNM = 0x22E9  # 802.1Qau congestion notification
ETH_TYPE_IPV4 = 0x0800

MAC_EXACT = (1 << 48) - 1

#: OXM ``vlan_vid`` (OpenFlow 1.3, 13 bits): the 12-bit VID with OFPVID_PRESENT set when the frame is tagged
OFPVID_PRESENT = 0x1000
VLAN_VID_EXACT = 0x1FFF
#: ``Match.vlan_vid`` of "any VLAN tag" (a tagged frame, whatever its VID): what OVS needs as the
#: prerequisite of a ``vlan_pcp`` match and of ``set_field vlan_pcp``/``pop_vlan`` without a push
VLAN_TAGGED = (OFPVID_PRESENT, OFPVID_PRESENT)
#: ``Match.vlan_vid`` of an untagged frame (OFPVID_NONE, exact)
VLAN_UNTAGGED = (0, VLAN_VID_EXACT)

#: Cookies: high 16 bits tag hpcfabric's own flows, next 8 bits the rule class.
COOKIE_APP = 0x4846  # "HF"
COOKIE_APP_SHIFT = 48
COOKIE_CLASS_SHIFT = 40
COOKIE_APP_MASK = 0xFFFF << COOKIE_APP_SHIFT


class RuleClass:
    """Rule classes carried in the cookie (and used to count rules per kind)."""

    HOST = 1  # delivery to a directly attached host
    ROUTE = 2  # routing towards a switch / group / dimension (default rules)
    ALTERNATIVE = 3  # lower-priority alternatives (conditional routing)
    DMP = 4  # DMP echo on a host port
    PUNT = 5  # control frames to the controller
    INFRA = 6  # table-miss / goto entries
    PORT_STATE = 7  # per-port state entries
    GUARD = 8  # ingress guards (anti-spoofing)
    LEARNED = 9  # port-state overrides the switch learns from PAUSE frames (never installed by the controller)

    NAMES = {1: "host", 2: "route", 3: "alternative", 4: "dmp", 5: "punt", 6: "infra", 7: "port_state", 8: "guard",
             9: "learned"}
    #: classes counted as "routing/forwarding entries" (what the paper counts)
    FORWARDING = frozenset({1, 2})


def frame_vlan_vid(vlan_pcp: int | None) -> int:
    """The OXM ``vlan_vid`` of a frame: 0 (OFPVID_NONE) untagged, else VID 0 | OFPVID_PRESENT (hpcfabric
    only pushes priority tags, VID 0)."""
    return 0 if vlan_pcp is None else OFPVID_PRESENT


def vlan_vid_matches(vlan_vid: tuple[int, int] | None, vlan_pcp: int | None) -> bool:
    """Does a ``Match.vlan_vid`` condition hold for a frame with this PCP (None: untagged)?"""
    return vlan_vid is None or frame_vlan_vid(vlan_pcp) & vlan_vid[1] == vlan_vid[0]


def make_cookie(rule_class: int, detail: int = 0) -> int:
    return (COOKIE_APP << COOKIE_APP_SHIFT) | (rule_class << COOKIE_CLASS_SHIFT) | (detail & ((1 << 40) - 1))


def cookie_class(cookie: int) -> int | None:
    """Rule class of an hpcfabric cookie, None for foreign flows."""
    if cookie >> COOKIE_APP_SHIFT != COOKIE_APP:
        return None
    return (cookie >> COOKIE_CLASS_SHIFT) & 0xFF


@dataclass(frozen=True, slots=True)
class Match:
    """Match fields; ``None`` means wildcard. Masked fields are (value, mask)."""

    in_port: int | None = None
    eth_type: int | None = None
    eth_src: tuple[int, int] | None = None
    eth_dst: tuple[int, int] | None = None
    vlan_pcp: int | None = None
    metadata: tuple[int, int] | None = None
    reg0: tuple[int, int] | None = None  # Nicira register 0 (32 bits), pipeline-internal
    #: OXM vlan_vid (value, mask) over 13 bits: VID | OFPVID_PRESENT; :data:`VLAN_TAGGED` = any tagged frame
    vlan_vid: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        if self.vlan_vid is not None and (self.vlan_vid[1] & ~VLAN_VID_EXACT or self.vlan_vid[1] == 0):
            raise ValueError(f"vlan_vid mask {self.vlan_vid[1]:#x} must be a non-zero 13-bit mask")
        for name in ("eth_src", "eth_dst", "metadata", "reg0", "vlan_vid"):
            vm = getattr(self, name)
            if vm is not None and vm[0] & ~vm[1]:
                raise ValueError(f"{name} value {vm[0]:#x} has bits outside mask {vm[1]:#x}")


@dataclass(frozen=True, slots=True)
class Output:
    port: int


@dataclass(frozen=True, slots=True)
class SetField:
    field: str  # 'eth_src' | 'eth_dst' | 'vlan_pcp'
    value: int


@dataclass(frozen=True, slots=True)
class PushVlan:
    ethertype: int = 0x8100


@dataclass(frozen=True, slots=True)
class PopVlan:
    pass


#: hpcfabric's group ids carry the "HF" tag in their top 16 bits (the low 16: the port they protect)
GROUP_TAG = COOKIE_APP << 16


def is_our_group(group_id: int) -> bool:
    return group_id >> 16 == COOKIE_APP


@dataclass(frozen=True, slots=True)
class Group:
    """Apply OpenFlow group ``group_id`` (hpcfabric uses fast-failover groups, see :mod:`hpcfabric.failover.groups`)."""

    group_id: int


@dataclass(frozen=True, slots=True)
class Resubmit:
    """Look ``table`` up with the frame as it is now, apply that entry, then carry on
    with the next action (Nicira ``resubmit(,T)``; unlike ``goto`` any table, and it returns)."""

    table: int


#: Field names a :class:`Learn` spec may read or write, with their widths in bits.
LEARN_FIELDS = {"in_port": 32, "metadata": 64, "reg0": 32}


@dataclass(frozen=True, slots=True)
class LearnMatch:
    """Learned entry matches ``dst[dst_ofs : dst_ofs+n_bits]`` == the frame's ``src[src_ofs : ...]``."""

    dst: str
    src: str
    n_bits: int
    dst_ofs: int = 0
    src_ofs: int = 0


@dataclass(frozen=True, slots=True)
class LearnLoad:
    """Learned entry's action: load the constant ``value`` into ``dst[dst_ofs : dst_ofs+n_bits]``."""

    dst: str
    value: int
    n_bits: int
    dst_ofs: int = 0


@dataclass(frozen=True, slots=True)
class Learn:
    """Add (or refresh) an entry in ``table`` built from the frame (Nicira ``learn``).

    The learned entry has ``priority``, ``cookie``, ``hard_timeout`` (whole
    seconds, 0 = none; a refresh by an identical learn restarts it), the
    matches of ``matches`` and the loads of ``loads`` as its only actions.
    """

    table: int
    priority: int
    hard_timeout: int
    cookie: int
    matches: tuple[LearnMatch, ...]
    loads: tuple[LearnLoad, ...]
    idle_timeout: int = 0

    def __post_init__(self) -> None:
        for spec in self.matches + self.loads:  # type: ignore[operator]
            fields = (spec.dst, spec.src) if isinstance(spec, LearnMatch) else (spec.dst,)
            for name in fields:
                if name not in LEARN_FIELDS:
                    raise ValueError(f"learn field {name!r} is not one of {', '.join(LEARN_FIELDS)}")
            if not 1 <= spec.n_bits <= 64 or spec.dst_ofs + spec.n_bits > LEARN_FIELDS[spec.dst]:
                raise ValueError(f"learn spec {spec} does not fit {spec.dst}")
        if not 0 <= self.hard_timeout <= 0xFFFF or not 0 <= self.idle_timeout <= 0xFFFF:
            raise ValueError("learn timeouts are 0..65535 seconds")


Action = Union[Output, SetField, PushVlan, PopVlan, Group, Resubmit, Learn]


@dataclass(frozen=True, slots=True)
class Bucket:
    """One bucket of a fast-failover group: live while ``watch_port`` is up, then ``actions`` apply."""

    watch_port: int
    actions: tuple[Action, ...]


@dataclass(frozen=True, slots=True)
class GroupSpec:
    """An OpenFlow fast-failover group (OFPGT_FF): the first bucket whose watch port is live is used;
    none live drops the frame. ``group_id`` carries :data:`GROUP_TAG` (see :func:`is_our_group`)."""

    group_id: int
    buckets: tuple[Bucket, ...]

    def live_bucket(self, down: "frozenset[int] | set[int]") -> Bucket | None:
        """The bucket a switch uses while the ports in ``down`` are down (None: every bucket is dead)."""
        for b in self.buckets:
            if b.watch_port not in down:
                return b
        return None


@dataclass(frozen=True, slots=True)
class FlowSpec:
    """One flow entry: apply ``actions``, optionally write metadata, then go to ``goto``.

    With no actions and no ``goto`` the entry drops the frame. ``meter``
    (optional) runs the frame through that OpenFlow meter first (punt rate
    limits, :mod:`hpcfabric.rules.guards`).
    """

    table: int
    priority: int
    match: Match
    actions: tuple[Action, ...] = ()
    cookie: int = 0
    goto: int | None = None
    write_metadata: tuple[int, int] | None = None
    meter: int | None = None

    @property
    def rule_class(self) -> int | None:
        return cookie_class(self.cookie)

    def key(self) -> tuple[int, int, Match]:
        """Identity of the entry in a switch (OpenFlow: table, priority, match)."""
        return (self.table, self.priority, self.match)


def sort_flows(flows: list[FlowSpec] | tuple[FlowSpec, ...]) -> tuple[FlowSpec, ...]:
    """By table, then priority descending; ties keep their (deterministic) emission order."""
    return tuple(sorted(flows, key=lambda f: (f.table, -f.priority)))
