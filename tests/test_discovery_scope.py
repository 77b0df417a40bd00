"""Discovery scoped to a partition (DiscoveryState.set_scope) and its wiring into the controller."""

from __future__ import annotations

import pytest
from test_ops_fakes import ROOT, make_app

from hpcfabric.controller.discovery import DiscoveryState
from hpcfabric.topology import dragonfly_fabric
from hpcfabric.topology.partition import partition_fabric


@pytest.fixture(scope="module")
def fab():
    return dragonfly_fabric(4, 2, 2)  # 9 groups of 4 switches, 90 links; ports 1-2 hosts, 3-4 global, 5-7 local


@pytest.fixture(scope="module")
def parts(fab):
    return partition_fabric(fab, 3)  # groups 0..2, 3..5, 6..8


def dpids(fab):
    return {sw.name: sw.dpid for sw in fab.switches}


def touching(fab, names):
    return {(l.a, l.a_port, l.b, l.b_port) for l in fab.links if l.a in names or l.b in names}


def observe(st, fab, links, now, trusted=True):
    d = dpids(fab)
    for l in links:
        st.observed(d[l.a], l.a_port, d[l.b], l.b_port, now, trusted=trusted)


def boundary(fab, inside):
    """A link from a switch in ``inside`` to one outside (the in-scope end first)."""
    for l in fab.links:
        if (l.a in inside) != (l.b in inside):
            return (l.a, l.a_port, l.b, l.b_port) if l.a in inside else (l.b, l.b_port, l.a, l.a_port)
    raise AssertionError("no boundary link")


def test_scoped_report_lists_only_links_touching_the_scope(fab, parts):
    p0 = set(parts[0].switches)
    st = DiscoveryState(fab, timeout=3.0, scope=frozenset(p0))
    rep = st.report(0.0)
    want = touching(fab, p0)
    assert {(l.a, l.a_port, l.b, l.b_port) for l in rep.links} == want
    assert 0 < rep.links_expected == len(want) < len(fab.links)
    assert rep.scope == "partition: 12 switches" and rep.scope_switches == 12
    assert rep.as_dict()["scope"] == "partition: 12 switches"
    # every switch connected, every cable seen: all of the scope's links up
    for sw in fab.switches:
        st.switch_up(sw.dpid, 0.0)
    observe(st, fab, fab.links, 1.0)
    rep = st.report(1.5)
    assert rep.links_discovered == rep.links_expected == len(want) and not rep.missing_links


def test_boundary_link_is_judged_by_its_in_scope_end(fab, parts):
    p0 = frozenset(parts[0].switches)
    a, ap, b, bp = boundary(fab, p0)
    d = dpids(fab)
    st = DiscoveryState(fab, timeout=3.0, scope=p0)
    whole = DiscoveryState(fab, timeout=3.0)
    for s in (st, whole):
        s.switch_up(d[a], 0.0)  # the far switch b is another controller's: never connected here

    def status(s, now):
        return next(l.status for l in s.report(now).links if {(l.a, l.a_port), (l.b, l.b_port)} == {(a, ap), (b, bp)})

    assert status(st, 1.0) == "pending" and status(whole, 1.0) == "missing"  # whole: b is not connected
    row = next(m for m in st.report(5.0).missing_links if {m["a"], m["b"]} == {a, b})
    assert "switch_down" not in row  # b being away from this controller is not a problem of ours
    st.switch_down(d[a])
    row = next(m for m in st.report(5.0).missing_links if {m["a"], m["b"]} == {a, b})
    assert row["switch_down"] == [a]
    st.switch_up(d[a], 10.0)
    # the far end's view alone (a frame from a seen at b, not ours) does not count
    st.observed(d[a], ap, d[b], bp, 20.0, trusted=False)
    assert status(st, 20.5) == "missing"
    # the in-scope end seeing the expected peer (the far controller's LLDP arriving at a): up
    st.observed(d[b], bp, d[a], ap, 21.0, trusted=False)
    assert status(st, 21.5) == "up"
    # a fresh wrong view at the far end is not ours to judge either
    other = next(s for s in fab.switches if s.name not in p0 and s.name != b)
    st.observed(other.dpid, 3, d[b], bp, 21.6, trusted=False)
    assert status(st, 22.0) == "up" and st.report(22.0).miswired == []
    # ... a wrong view at the in-scope end is
    st.observed(other.dpid, 3, d[a], ap, 22.5, trusted=False)
    rep = st.report(23.0)
    assert status(st, 23.0) == "miswired" and [(m["switch"], m["port"]) for m in rep.miswired] == [(a, ap)]
    assert rep.quarantined == [(a, ap)]


def test_out_of_scope_observations_are_not_reported(fab, parts):
    p0, p1 = frozenset(parts[0].switches), parts[1].switches
    d = dpids(fab)
    st = DiscoveryState(fab, timeout=3.0, scope=p0)
    x, y = d[p1[0]], d[p1[5]]
    st.observed(x, 3, y, 5, 1.0)  # a miswired cable between two ports of partition 1
    st.observed(x, 9, y, 9, 1.0)  # an extra cable between two unused ports of partition 1
    st.observed(0xABC, 1, y, 10, 1.0)  # an unknown switch on an unused port of partition 1
    in0 = d[parts[0].switches[0]]
    st.observed(in0, 9, x, 11, 1.0)  # an extra cable from partition 0 to partition 1
    rep = st.report(1.5)
    assert rep.miswired == [] and rep.quarantined == []
    assert rep.extra_links == [{"a": f"{parts[0].switches[0]}:9", "b": f"{p1[0]}:11"}]
    assert rep.unknown_dpids == ["0000000000000abc"]  # known switches of other partitions are not unknown
    assert {(p1[0], 3), (p1[5], 5)} <= st.quarantine()  # decided (kept for a takeover), not reported
    # the same observations with the whole fabric in scope
    whole = DiscoveryState(fab, timeout=3.0)
    for args in ((x, 3, y, 5), (x, 9, y, 9), (0xABC, 1, y, 10), (in0, 9, x, 11)):
        whole.observed(*args, 1.0)
    rep = whole.report(1.5)
    assert len(rep.miswired) == 2 and len(rep.extra_links) == 3 and len(rep.quarantined) == 2


def test_set_scope_grows_shrinks_and_keeps_only_scoped_views(fab, parts):
    p0, p1 = frozenset(parts[0].switches), frozenset(parts[1].switches)
    d = dpids(fab)
    st = DiscoveryState(fab, timeout=3.0, scope=p0)
    for sw in fab.switches:
        st.switch_up(sw.dpid, 0.0)
    observe(st, fab, fab.links, 1.0)  # trusted, both ways: only the views of partition 0's ports are kept
    assert {e[0] for e in st.neighbors} == {d[n] for n in p0}
    st.set_scope(p0 | p1, label="partitions p0,p1: 24 switches")  # grows: the views held stay
    rep = st.report(1.5)
    assert rep.scope == "partitions p0,p1: 24 switches" and rep.links_expected == len(touching(fab, p0 | p1))
    assert {(l.a, l.a_port, l.b, l.b_port) for l in rep.links if l.status == "up"} == touching(fab, p0)
    assert {l.status for l in rep.links} == {"up", "pending"}  # partition 1's ports: no view kept yet
    observe(st, fab, fab.links, 2.0)
    assert st.report(2.5).links_discovered == rep.links_expected
    st.set_scope(p1)  # shrinks: partition 0's views are forgotten, partition 1's links stay up
    assert {e[0] for e in st.neighbors} == {d[n] for n in p1}
    rep = st.report(2.5)
    assert {(l.a, l.a_port, l.b, l.b_port) for l in rep.links} == touching(fab, p1)
    assert rep.links_discovered == rep.links_expected and rep.scope == "partition: 12 switches"
    st.set_scope([], label="partitions (none): 0 switches")  # an etcd standby mastering nothing
    rep = st.report(2.5)
    assert rep.links == [] and rep.scope_switches == 0 and st.neighbors == {}
    st.set_scope(None)
    rep = st.report(2.5)
    assert rep.scope == "fabric" and rep.links_expected == len(fab.links) and rep.links_discovered == 0
    observe(st, fab, fab.links, 3.0)
    assert st.report(3.5).links_discovered == len(fab.links)


def test_no_scope_is_the_whole_fabric_as_before(fab):
    """None and a scope of every switch give the same report (every link has both ends in scope)."""
    d = dpids(fab)
    states = [DiscoveryState(fab, timeout=3.0), DiscoveryState(fab, timeout=3.0, scope=frozenset(d))]
    for st in states:
        for name in list(d)[:30]:
            st.switch_up(d[name], 0.0)
        observe(st, fab, fab.links[::2], 2.0)
        observe(st, fab, fab.links[1::4], 1.0, trusted=False)
        st.observed(d["g0s0"], 3, d["g5s1"], 4, 2.0)  # miswired
        st.observed(d["g0s0"], 9, d["g8s3"], 9, 2.0)  # extra
        st.observed(0x777, 1, d["g1s1"], 12, 2.0)  # unknown
    a, b = (st.report(2.5) for st in states)
    assert a.scope == "fabric" and a.scope_switches == b.scope_switches == 36
    assert a.links == b.links and a.missing_links == b.missing_links and a.miswired == b.miswired
    assert a.extra_links == b.extra_links and a.unknown_dpids == b.unknown_dpids and a.quarantined == b.quarantined
    assert {l.status for l in a.links} == {"up", "missing", "miswired", "pending"}


# ------------------------------------------------------------------ the controller


def conf(tmp_path, ha: str):
    path = tmp_path / "p.conf"
    path.write_text(f"[hpcfabric]\ntopology = {ROOT / 'topologies' / 'dragonfly-a2-p1-h1.yaml'}\nreload_poll = 0\n"
                    f"[ha]\n{ha}")
    return path


def test_controller_scope_from_static_partition_and_reload(tmp_path):
    path = conf(tmp_path, "switches = g0*,g1*\n")
    app = make_app(path, tmp_path / "status.json")
    assert app.discovery.scope == {"g0s0", "g0s1", "g1s0", "g1s1"}
    status = app.status()
    # g0s0-g0s1, g1s0-g1s1, g0s1-g1s1 inside; g0s0-g2s0, g1s0-g2s1 to partition g2; g2s0-g2s1 not ours
    assert status["discovery_scope"] == "partition: 4 switches" and status["links_expected"] == 5
    path.write_text(path.read_text().replace("g0*,g1*", "g0*"))
    assert app.reload("test") is True
    app.wiring.stale()
    status = app.status()
    assert app.discovery.scope == {"g0s0", "g0s1"} and status["links_expected"] == 3


def test_controller_derived_partition_and_no_partition(tmp_path):
    app = make_app(conf(tmp_path, "partitions = 3\npartition = 2\n"))
    assert app.discovery.scope == {"g2s0", "g2s1"} and app.status()["discovery_scope"] == "partition p2: 2 switches"
    app = make_app(conf(tmp_path, ""))
    assert app.discovery.scope is None and app.status()["discovery_scope"] == "fabric"
    assert app.status()["links_expected"] == 6


def test_controller_etcd_scope_follows_mastered_partitions(tmp_path):
    app = make_app(conf(tmp_path, "backend = etcd\nendpoints = http://127.0.0.1:1\npartitions = 3\n"))
    assert app.discovery.scope == frozenset() and app.status()["links_expected"] == 0  # masters nothing yet
    part = {sw: p for p in app.ha.parts for sw in p.switches}
    app.ha.active = {part["g1s0"].name: 1}
    app.ha_agent.changed({part["g1s0"].name: "master"})
    status = app.status()
    assert app.discovery.scope == {"g1s0", "g1s1"} and status["links_expected"] == 3
    assert status["discovery_scope"] == f"partitions {part['g1s0'].name}: 2 switches"
    app.ha.active = {}
    app.ha_agent.changed({part["g1s0"].name: "slave"})
    assert app.discovery.scope == frozenset() and app.status()["links_expected"] == 0


def test_many_problems_at_once_are_logged_as_a_summary_not_a_flood(tmp_path, caplog):
    """At 300k a bring-up reports ~60,000 cables missing at once: one line each up to LOG_EACH, then one line."""
    from hpcfabric.controller.wiring import LOG_EACH
    app = make_app(conf(tmp_path, ""))
    rep = {"missing_links": [{"a": f"s{i}", "a_port": 1, "b": f"t{i}", "b_port": 2} for i in range(LOG_EACH + 30)]
           + [{"a": "x", "a_port": 1, "b": "y", "b_port": 1, "switch_down": ["x"]}],
           "miswired": [], "extra_links": [], "unknown_dpids": []}
    with caplog.at_level("INFO", logger="hpcfabric.controller"):
        app.wiring.log_problems(rep)
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == LOG_EACH + 1 and warned[-1].startswith(f"discovery: 30 more new problem(s), {LOG_EACH + 30} in all")
    assert all(" missing" in m for m in warned[:-1]) and not any("x:1" in m for m in warned)  # a down switch's links: not
    caplog.clear()
    with caplog.at_level("INFO", logger="hpcfabric.controller"):
        app.wiring.log_problems(dict(rep, missing_links=rep["missing_links"][:5]))  # all but five came up
    resolved = [r.getMessage() for r in caplog.records if r.levelname == "INFO"]
    assert not [r for r in caplog.records if r.levelname == "WARNING"]  # nothing new
    assert len(resolved) == LOG_EACH + 1 and resolved[-1] == "discovery: resolved: 25 more problem(s), 5 left"
