"""The pure part of ``mininet/run_failures.py`` (no root, no Open vSwitch): ping timelines from ``ping -D -O``,
the judgement of losses against the fast-failover windows, the choice of streams, links and the switch,
and the ovs-ofctl rendering of group and meter actions that ``diff-flows`` compares against.

The runner itself runs in tests/test_failures_mininet.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "mininet") not in sys.path:
    sys.path.insert(0, str(ROOT / "mininet"))

pytest.importorskip("mininet.topo", reason="Debian's Mininet is not installed")

from failure_plan import Window, choose_link, choose_streams, choose_switch, connected, judge, path_links  # noqa: E402
from reachability import ping_timeline  # noqa: E402

from hpcfabric.openflow.ofctl import flow_line  # noqa: E402
from hpcfabric.rules.flows import FlowSpec, Group, Match, Output  # noqa: E402
from hpcfabric.topology import dragonfly_fabric  # noqa: E402
from hpcfabric.verify.reference.walk import walk_pair  # noqa: E402

T0 = 1_800_000_000.0


def _reply(seq: int, t: float, rtt_ms: float = 2.0) -> str:
    return f"[{t:.6f}] 64 bytes from 10.0.0.2: icmp_seq={seq} ttl=64 time={rtt_ms} ms"


def _no_answer(seq: int, t: float) -> str:
    return f"[{t:.6f}] no answer yet for icmp_seq={seq}"


def test_ping_timeline_dates_every_request_and_marks_the_unanswered():
    iv = 0.01
    lines = ["PING 10.0.0.2 (10.0.0.2) 56(84) bytes of data."]
    lines += [_reply(s, T0 + (s - 1) * iv + 0.002) for s in (1, 2)]
    lines += [_no_answer(3, T0 + 3 * iv)]  # printed as request 4 goes out
    lines += [_no_answer(4, T0 + 4 * iv), _reply(4, T0 + 4 * iv + 0.004, 7.0)]  # late answer: answered after all
    # request 5: neither line (ping was descheduled): dated between its neighbours
    lines += [_reply(6, T0 + 5 * iv + 0.002)]
    lines += [_no_answer(7, T0 + 7 * iv)]  # above the highest answered: still in flight, not judged
    lines += ["", "--- 10.0.0.2 ping statistics ---", "7 packets transmitted, 4 received, 42% packet loss"]
    tl = ping_timeline("\n".join(lines), iv)
    assert [(s, ok) for s, _, ok in tl] == [(1, True), (2, True), (3, False), (4, True), (5, False), (6, True)]
    t = {s: x for s, x, _ in tl}
    assert t[1] == pytest.approx(T0) and t[2] == pytest.approx(T0 + iv)
    assert t[3] == pytest.approx(T0 + 2 * iv)  # "no answer yet" stamp minus one interval
    assert t[4] == pytest.approx(T0 + 4 * iv - 0.003)  # reply stamp minus its round trip
    assert t[4] < t[5] < t[6]


def _stream(losses: set[int], n: int = 100, iv: float = 0.01) -> list[tuple[int, float, bool]]:
    return [(s, T0 + (s - 1) * iv, s not in losses) for s in range(1, n + 1)]


def test_judge_counts_losses_inside_windows_and_names_those_outside():
    iv = 0.01
    windows = [Window("link 1", T0 + 0.195, T0 + 0.4), Window("switch", T0 + 0.6, T0 + 0.7)]
    tls = {
        "a->b": _stream({21, 22, 23, 25}),  # sent 0.20-0.24 s: inside link 1
        "c->d": _stream({31, 62, 63}),  # 0.30 inside link 1; 0.61, 0.62 inside the switch window
        "e->f": _stream({51, 90}),  # 0.50 and 0.89: outside both
        "g->h": _stream(set()),
    }
    got = judge(tls, windows, iv)
    w1, w2 = got["windows"]["link 1"], got["windows"]["switch"]
    assert w1["lost"] == 5 and sorted(w1["streams"]) == ["a->b", "c->d"]
    assert w1["longest_gap_ms"] == pytest.approx(30.0)  # 21, 22, 23 in a row
    assert w1["burst_ms"] == pytest.approx(50.0)  # a->b: 0.20 .. 0.24, plus one interval
    assert w1["first_ms"] == pytest.approx(5.0) and w1["last_ms"] == pytest.approx(105.0)
    assert w2["lost"] == 2 and w2["streams"] == ["c->d"] and w2["longest_gap_ms"] == pytest.approx(20.0)
    assert [(o["stream"], o["seq"], o["after"]) for o in got["outside"]] == [("e->f", 51, "link 1"), ("e->f", 90, "switch")]
    assert got["outside"][0]["s_after_end"] == pytest.approx(0.1)
    assert judge({"g->h": _stream(set())}, windows, iv) == {
        "windows": {w.name: {"lost": 0, "streams": [], "first_ms": None, "last_ms": None, "burst_ms": 0.0,
                             "longest_gap_ms": 0.0} for w in windows}, "outside": []}


@pytest.fixture(scope="module")
def demo():
    from hpcfabric.config import load_config

    return load_config(ROOT / "configs" / "dragonfly-a4-p2-h2.conf", deadlock=False)


def test_streams_cross_many_links_on_routes_the_tables_deliver(demo):
    compiled, fabric = demo.compiled, demo.fabric
    streams = choose_streams(compiled, 6, seed=3)
    assert len(streams) == 6
    hosts = [h for s in streams for h in (s.src, s.dst)]
    assert len(set(hosts)) == 12  # each host in one stream at most
    assert len(streams[0].path) >= 3  # a transit switch for the switch failure
    for s in streams:
        assert fabric.host(s.src).switch != fabric.host(s.dst).switch
        w = walk_pair(compiled, s.src, compiled.plan.host_mac[s.dst])
        assert w.host == s.dst and w.path == s.path
    covered = set().union(*(path_links(fabric, s.path) for s in streams))
    assert len(covered) > max(len(path_links(fabric, s.path)) for s in streams) * 3
    assert {l.kind for l in covered} == {"global", "local"}
    assert choose_streams(compiled, 6, seed=3) == streams  # seeded


def test_link_and_switch_choice_follow_the_measured_traffic():
    fabric = dragonfly_fabric(4, 2, 2)
    glob = [l for l in fabric.links if l.kind == "global"]
    loc = [l for l in fabric.links if l.kind == "local"]
    rates = {(glob[0].a, glob[0].a_port): 90.0, (glob[1].b, glob[1].b_port): 150.0,
             (loc[0].a, loc[0].a_port): 300.0, (loc[1].a, loc[1].a_port): 20.0}
    assert choose_link(fabric, rates, [], "global", 50) == (glob[1], 150.0)  # the busier global link
    assert choose_link(fabric, rates, [glob[1]], "global", 50) == (glob[0], 90.0)  # a failed one is not chosen again
    assert choose_link(fabric, rates, glob[:2], "global", 50) == (loc[0], 300.0)  # none of the kind: any kind
    assert choose_link(fabric, rates, [], "local", 400) is None  # nothing carries a stream
    assert choose_link(fabric, rates, [], None, 50) == (loc[0], 300.0)
    # a switch: the busiest without a stream's end
    sw_rates = {(loc[0].a, p): 100.0 for p in fabric.fabric_ports(loc[0].a)}
    sw_rates.update({(loc[1].b, p): 60.0 for p in fabric.fabric_ports(loc[1].b)})
    end = fabric.hosts_on(loc[0].a)[0].name
    assert choose_switch(fabric, sw_rates, [], [], 50)[0] == loc[0].a
    assert choose_switch(fabric, sw_rates, [], [end], 50)[0] == loc[1].b


def test_connectivity_check_refuses_a_split():
    fabric = dragonfly_fabric(2, 1, 1)  # 3 groups of 2 switches: one global link per switch
    assert connected(fabric)
    sw = fabric.switches[0].name
    cut = [l for l in fabric.links if sw in (l.a, l.b)]
    assert not connected(fabric, cut)  # the switch alone
    assert connected(fabric, switches=[sw])  # the others still reach each other without it
    rates = {(l.a, l.a_port): 100.0 for l in cut}
    assert choose_link(fabric, rates, cut[1:], None, 50) is None  # its last link would isolate it


def test_ofctl_renders_meters_and_group_actions():
    f = FlowSpec(table=0, priority=5, match=Match(in_port=3), actions=(Output(4), Group(0x48460007)), cookie=0x10,
                 meter=2)
    assert flow_line(f) == "table=0,priority=5,cookie=0x10,in_port=3,actions=meter:2,output:4,group:1212547079"
