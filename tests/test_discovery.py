"""LLDP frames and the discovery report / quarantine decisions (pure)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from hpcfabric.controller.discovery import DiscoveryState, quarantine_changes
from hpcfabric.protocols.lldp import LLDP_DST, MalformedLLDP, build_lldp, parse_lldp
from hpcfabric.topology.loader import load_topology

ROOT = Path(__file__).resolve().parent.parent
SRC = bytes.fromhex("020000000001")


@pytest.fixture(scope="module")
def df():
    # g0s0=1 g0s1=2 g1s0=3 g1s1=4 g2s0=5 g2s1=6; ports: 1 host, 2 global, 3 local
    return load_topology(ROOT / "topologies" / "dragonfly-a2-p1-h1.yaml")


# ---------------------------------------------------------------------------
# frames


def test_lldp_round_trip():
    nonce = b"12345678"
    frame = build_lldp(0x0000_0000_0000_0101, 7, SRC, ttl=30, nonce=nonce)
    assert frame[:6] == LLDP_DST and frame[6:12] == SRC and frame[12:14] == b"\x88\xcc"
    assert len(frame) >= 60
    info = parse_lldp(frame)
    assert (info.dpid, info.port, info.ttl, info.nonce, info.src) == (0x101, 7, 30, nonce, SRC)
    assert info.chassis_subtype == 7 and info.chassis_id == b"dpid:0000000000000101"
    assert info.port_subtype == 7 and info.port_id == b"port:7"


def test_lldp_big_values_and_no_nonce():
    info = parse_lldp(build_lldp(2**64 - 1, 0xFFFFFF00, SRC))
    assert info.dpid == 2**64 - 1 and info.port == 0xFFFFFF00 and info.nonce is None


def test_foreign_lldp_parses_without_ids():
    # chassis = MAC address (subtype 4), port = interface name (subtype 5), like lldpd sends
    tlv = lambda t, v: struct.pack("!H", t << 9 | len(v)) + v  # noqa: E731
    body = tlv(1, b"\x04" + SRC) + tlv(2, b"\x05eth0") + tlv(3, b"\x00\x78") + tlv(5, b"host1") + tlv(0, b"")
    info = parse_lldp(LLDP_DST + SRC + b"\x88\xcc" + body)
    assert info.dpid is None and info.port is None and info.port_id == b"eth0" and info.ttl == 120


def _frame(body: bytes) -> bytes:
    return LLDP_DST + SRC + b"\x88\xcc" + body


@pytest.mark.parametrize(
    "frame,words",
    [
        (b"\x01\x80", "too short"),
        (LLDP_DST + SRC + b"\x88\x08" + b"\0" * 46, "not LLDP"),
        (_frame(b""), "without an End TLV"),
        (_frame(b"\x02\x10dp"), "runs past"),
        (_frame(struct.pack("!H", 2 << 9 | 3) + b"\x07p1" + b"\0\0"), "must start with Chassis"),
        (_frame(struct.pack("!H", 1 << 9 | 1) + b"\x07" + struct.pack("!H", 2 << 9 | 2) + b"\x071"
                + struct.pack("!H", 3 << 9 | 2) + b"\0\x10" + b"\0\0"), "Chassis ID TLV of length 1"),
        (_frame(struct.pack("!H", 1 << 9 | 2) + b"\x07a" + struct.pack("!H", 2 << 9 | 2) + b"\x071"
                + struct.pack("!H", 3 << 9 | 1) + b"\0" + b"\0\0"), "TTL TLV of length 1"),
        (_frame(struct.pack("!H", 1 << 9 | 2) + b"\x07a" + struct.pack("!H", 2 << 9 | 2) + b"\x071"
                + struct.pack("!H", 3 << 9 | 2) + b"\0\1" + struct.pack("!H", 3 << 9 | 2) + b"\0\1" + b"\0\0"),
         "repeated"),
        (_frame(struct.pack("!H", 1 << 9 | 2) + b"\x07a" + struct.pack("!H", 2 << 9 | 2) + b"\x071"
                + struct.pack("!H", 3 << 9 | 2) + b"\0\1" + b"\0\1x"), "End TLV with a non-zero length"),
    ],
)
def test_malformed_lldp(frame, words):
    with pytest.raises(MalformedLLDP, match=words):
        parse_lldp(frame)


def test_truncated_frames_never_crash():
    frame = build_lldp(5, 3, SRC, nonce=b"abcdefgh")
    for n in range(len(frame)):
        try:
            parse_lldp(frame[:n])
        except MalformedLLDP:
            pass


def test_garbage_ids_are_not_ours():
    info = parse_lldp(build_lldp(1, 1, SRC).replace(b"dpid:0000000000000001", b"dpid:00000000000000zz"))
    assert info.dpid is None and info.port == 1


def test_build_rejects_bad_input():
    with pytest.raises(ValueError):
        build_lldp(1, 0, SRC)
    with pytest.raises(ValueError):
        build_lldp(1, 1, b"\0")
    with pytest.raises(ValueError):
        build_lldp(1, 1, SRC, nonce=b"short")


# ---------------------------------------------------------------------------
# report


def all_up(state: DiscoveryState, fabric, now: float) -> None:
    for sw in fabric.switches:
        state.switch_up(sw.dpid, now)
    dpid = {sw.name: sw.dpid for sw in fabric.switches}
    for a, ap, b, bp in fabric.iter_port_pairs():
        state.observed(dpid[a], ap, dpid[b], bp, now)


def test_everything_discovered(df):
    st = DiscoveryState(df, timeout=3.0)
    all_up(st, df, 10.0)
    rep = st.report(10.5)
    assert rep.links_expected == 6 and rep.links_discovered == 6
    assert not rep.missing_links and not rep.extra_links and not rep.miswired and not rep.unknown_dpids
    assert st.quarantine() == set()
    d = rep.as_dict()
    assert d["links_expected"] == 6 and d["links_discovered"] == 6


def test_pending_then_missing(df):
    st = DiscoveryState(df, timeout=3.0)
    for sw in df.switches:
        st.switch_up(sw.dpid, 0.0)
    assert {l.status for l in st.report(1.0).links} == {"pending"}
    rep = st.report(5.0)
    assert {l.status for l in rep.links} == {"missing"} and len(rep.missing_links) == 6
    assert not any("switch_down" in m for m in rep.missing_links)


def test_missing_after_timeout_and_switch_down(df):
    st = DiscoveryState(df, timeout=3.0)
    all_up(st, df, 0.0)
    # g0s0 - g0s1 (local, port 3) refreshed, the rest ages out
    st.observed(1, 3, 2, 3, 4.0)
    rep = st.report(4.5)
    assert rep.links_discovered == 1 and len(rep.missing_links) == 5
    st.switch_down(5)  # g2s0
    rep = st.report(4.5)
    rows = {(m["a"], m["b"]): m for m in rep.missing_links}
    assert rows[("g0s0", "g2s0")]["switch_down"] == ["g2s0"]


def test_one_direction_is_enough(df):
    st = DiscoveryState(df, timeout=3.0)
    st.switch_up(1, 0.0)
    st.switch_up(2, 0.0)
    st.observed(1, 3, 2, 3, 0.5)
    link = next(l for l in st.report(1.0).links if {l.a, l.b} == {"g0s0", "g0s1"})
    assert link.status == "up" and link.last_seen == 0.5


def test_miswired_and_quarantine(df):
    st = DiscoveryState(df, timeout=3.0)
    all_up(st, df, 0.0)
    # g0s0:2 should reach g2s0:2 but reaches g1s1:2 (whose peer should be g0s1:2)
    st.observed(1, 2, 4, 2, 1.0)
    rep = st.report(1.5)
    mis = {(m["switch"], m["port"]): m for m in rep.miswired}
    assert mis[("g0s0", 2)] == {"switch": "g0s0", "port": 2, "expected": "g2s0:2", "actual": "g1s1:2"}
    assert mis[("g1s1", 2)]["expected"] == "g0s1:2" and mis[("g1s1", 2)]["actual"] == "g0s0:2"
    statuses = {(l.a, l.b): l.status for l in rep.links}
    assert statuses[("g0s0", "g2s0")] == "miswired" and statuses[("g0s1", "g1s1")] == "miswired"
    assert st.quarantine() == {("g0s0", 2), ("g1s1", 2)}
    # stale evidence does not lift quarantine ...
    assert st.report(100.0).miswired == [] and st.quarantine() == {("g0s0", 2), ("g1s1", 2)}
    # ... the expected neighbour does
    st.observed(5, 2, 1, 2, 101.0)
    assert st.quarantine() == {("g1s1", 2)}
    st.observed(2, 2, 4, 2, 101.0)
    assert st.quarantine() == set()
    assert st.report(101.5).miswired == []


def test_swapped_cables_heal_through_probes(df):
    """Both ends quarantined: only probe LLDPs (sent around NO_FWD) can show the fix."""
    st = DiscoveryState(df, timeout=3.0)
    st.observed(1, 2, 2, 2, 0.0)  # g0s0:2 <-> g0s1:2 swapped
    assert st.quarantine() == {("g0s0", 2), ("g0s1", 2)}
    st.observed(1, 2, 5, 2, 5.0)  # after the fix, g0s0's probe reaches g2s0:2
    assert st.quarantine() == {("g0s1", 2)}


def test_untrusted_lldp_only_tells_about_the_receiving_port(df):
    st = DiscoveryState(df, timeout=3.0)
    # a host on g0s0 port 1 forges "I am g1s0:2": only g0s0:1 (a host port) is affected
    st.observed(3, 2, 1, 1, 1.0, trusted=False)
    assert st.quarantine() == {("g0s0", 1)}
    assert (3, 2) not in st.neighbors
    mis = st.report(1.0).miswired
    assert mis == [{"switch": "g0s0", "port": 1, "expected": "host g0s0h0", "actual": "g1s0:2"}]


def test_switch_on_a_host_port_is_miswired(df):
    st = DiscoveryState(df, timeout=3.0)
    st.observed(3, 1, 1, 1, 1.0)  # g1s0 host port wired to g0s0 host port
    assert st.quarantine() == {("g0s0", 1), ("g1s0", 1)}


def test_extra_links_and_unknown_dpids(df):
    st = DiscoveryState(df, timeout=3.0)
    all_up(st, df, 0.0)
    st.observed(1, 9, 2, 9, 1.0)  # a cable between two unused ports
    st.observed(0xABC, 1, 3, 8, 1.0)  # an unknown switch on an unused port of g1s0
    st.switch_up(0xDEF, 1.0)  # an unknown switch connected to the controller
    rep = st.report(1.0)
    assert {"a": "g0s0:9", "b": "g0s1:9"} in rep.extra_links
    assert {"a": "g1s0:8", "b": "dpid:0000000000000abc:1"} in rep.extra_links
    assert len(rep.extra_links) == 2
    assert rep.unknown_dpids == ["0000000000000abc", "0000000000000def"]
    assert st.quarantine() == set()  # unused ports carry no traffic: nothing to stop


def test_unknown_switch_on_a_fabric_port(df):
    st = DiscoveryState(df, timeout=3.0)
    st.observed(0x999, 1, 1, 3, 1.0)
    assert st.quarantine() == {("g0s0", 3)}
    assert st.report(1.0).miswired[0]["actual"] == "dpid:0000000000000999:1"


def test_port_down_forgets_the_cable(df):
    st = DiscoveryState(df, timeout=3.0)
    all_up(st, df, 0.0)
    st.port_down(1, 3)
    assert (1, 3) not in st.neighbors and (2, 3) not in st.neighbors
    link = next(l for l in st.report(0.5).links if {l.a, l.b} == {"g0s0", "g0s1"})
    assert link.status == "pending"


def test_adopted_quarantine_needs_positive_evidence(df):
    st = DiscoveryState(df, timeout=3.0)
    st.adopt_quarantine("g0s0", 3)
    st.adopt_quarantine("g0s0", 99)  # not in use: ignored
    assert st.quarantine() == {("g0s0", 3)}
    st.observed(2, 3, 1, 3, 1.0)
    assert st.quarantine() == set()


def test_quarantine_changes():
    assert quarantine_changes({("a", 1), ("a", 2)}, {("a", 2), ("b", 3)}) == ([("a", 1)], [("b", 3)])
    assert quarantine_changes([], []) == ([], [])


def test_switch_down_forgets_views_of_and_through_it_only(df):
    """A disconnect drops the switch's own views and its neighbours' views of it -- and no other view, also
    after a port's view moved to another peer (the index of who-sees-whom may hold stale entries)."""
    st = DiscoveryState(df, timeout=3.0)
    all_up(st, df, 0.0)
    st.observed(2, 2, 1, 3, 0.5)  # g0s0:3 now sees g0s1:2 instead of g0s1:3 (a re-cabled port)
    st.observed(3, 3, 1, 3, 0.6)  # ... and then g1s0:3: g0s0:3 no longer involves g0s1
    before = dict(st.neighbors)
    st.switch_down(2)  # g0s1
    gone = {e for e in before if e not in st.neighbors}
    assert gone == {e for e, (peer, _) in before.items() if e[0] == 2 or peer[0] == 2}
    assert (1, 3) in st.neighbors and st.neighbors[(1, 3)][0] == (3, 3)
    assert 2 not in st.connected
    st.switch_down(2)  # twice: nothing more to forget
    assert len(st.neighbors) == len(before) - len(gone)


def test_links_stay_pending_until_timeout_after_the_switch_is_ready(df):
    """Pending counts from a switch's confirmation (its LLDP punts installed), not only from its connect."""
    st = DiscoveryState(df, timeout=3.0)
    for sw in df.switches:
        st.switch_up(sw.dpid, 0.0)
    assert {l.status for l in st.report(2.0).links} == {"pending"}
    assert {l.status for l in st.report(4.0).links} == {"missing"}
    st.switch_ready(1, 10.0)  # g0s0 confirmed at 10 s
    st.switch_ready(0x999, 10.0)  # not connected: ignored
    assert 0x999 not in st.connected
    rep = st.report(11.0)  # a link waits for its later end: g0s0's links are pending again, the others not
    near = {(l.a, l.b): l.status for l in rep.links if "g0s0" in (l.a, l.b)}
    far = {(l.a, l.b): l.status for l in rep.links if "g0s0" not in (l.a, l.b)}
    assert near and set(near.values()) == {"pending"} and far and set(far.values()) == {"missing"}
    for sw in df.switches:
        st.switch_ready(sw.dpid, 10.0)
    assert {l.status for l in st.report(12.0).links} == {"pending"}
    assert {l.status for l in st.report(13.5).links} == {"missing"}
