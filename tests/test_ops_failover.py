"""Link and switch failures: recomputed tables (pure) and the controller's reaction (fake switches).

* :func:`hpcfabric.failover.reroute.reroute` for every link of the small shipped fabrics (and one dead switch):
  the all-pairs verifier delivers every pair between surviving switches, no entry outputs to a dead port;
* the controller: port-status down on a fabric port -> rerouted tables reconciled (diff only), port back
  up -> the compiled tables again; a switch gone longer than lldp_timeout is routed around.
"""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest
from test_ops_fakes import ROOT, O, FakeSwitch, make_app, ours, settle, wait_reroute

from hpcfabric.config import load_config
from hpcfabric.failover.reroute import reroute
from hpcfabric.rules.flows import Output
from hpcfabric.openflow.reconcile import canonical
from hpcfabric.verify.allpairs import verify

CONFIGS = ["dragonfly-a2-p1-h1.conf", "dragonfly-a4-p2-h2.conf", "fb-2d-3x3.conf", "fat-tree-k4.conf",
           "dragonfly-a2-p1-h1-valiant.conf", "fb-2d-3x3-cos.conf"]  # the last two: tagged (CoS), pops re-added


def _verify(cfg, tables):
    comp = cfg.compiled
    return verify(replace(comp, tables={k: replace(v, flows=tables[k]) for k, v in comp.tables.items()}))


@pytest.mark.parametrize("name", CONFIGS)
def test_reroute_every_link_delivers_all_pairs(name):
    cfg = load_config(ROOT / "configs" / name)
    links = cfg.fabric.links if len(cfg.fabric.links) <= 40 else cfg.fabric.links[::6]
    for link in links:
        down = {(link.a, link.a_port), (link.b, link.b_port)}
        tables = reroute(cfg, down)
        for sw, flows in tables.items():
            assert not any(isinstance(a, Output) and (sw, a.port) in down for f in flows for a in f.actions)
        report = _verify(cfg, tables)
        assert report.ok and report.delivered == report.pairs, (link, report.failures[:3], report.overlap_examples)


def test_no_failure_reroute_keeps_unaffected_next_hops():
    cfg = load_config(ROOT / "configs" / "dragonfly-a2-p1-h1.conf")
    tables = reroute(cfg, set())
    assert _verify(cfg, tables).ok


def test_unreachable_destinations_are_dropped_not_looped():
    cfg = load_config(ROOT / "configs" / "fat-tree-k4.conf")
    edge = next(s for s in cfg.fabric.switches if s.role == "edge")
    down = {(edge.name, p) for p in cfg.fabric.fabric_ports(edge.name)}
    for p in list(down):
        peer = cfg.fabric.peer(*p)
        down.add((peer.node, peer.port))
    report = _verify(cfg, reroute(cfg, down))
    hosts = len(cfg.fabric.hosts_on(edge.name))
    others = len(cfg.fabric.hosts) - hosts
    assert report.loops == 0 and report.floods == 0
    assert report.dropped == 2 * hosts * others  # exactly the pairs to and from the cut-off edge switch


def port_status(sw: FakeSwitch, port: int, down: bool) -> None:
    desc = SimpleNamespace(port_no=port, config=0, state=O.OFPPS_LINK_DOWN if down else 0, hw_addr="02:00:00:00:00:01")
    sw.app._port_status(SimpleNamespace(msg=SimpleNamespace(datapath=sw, reason=O.OFPPR_MODIFY, desc=desc)))


def test_controller_reroutes_on_port_down_and_restores(tmp_path):
    from os_ken.lib import hub

    path = tmp_path / "c.conf"
    path.write_text(f"[hpcfabric]\ntopology = {ROOT / 'topologies' / 'dragonfly-a4-p2-h2.yaml'}\nrouting = conditional\n"
                    "reload_poll = 0\n")
    app = make_app(path)
    sws = {}
    for st in app.switches.values():
        sws[st.name] = FakeSwitch(app, st.dpid, list(range(1, 8)))
        sws[st.name].connect()
    settle()
    compiled = {n: {canonical(f) for f in app.config.desired[n]} for n in sws}
    link = app.fabric.links[0]
    port_status(sws[link.a], link.a_port, True)
    port_status(sws[link.b], link.b_port, True)
    hub.sleep(0.1)
    wait_reroute(app)
    assert app.failover.recomputes == 1 and app.failover.last_ms is not None
    expected = reroute(app.config, {(link.a, link.a_port), (link.b, link.b_port)})
    for n, sw in sws.items():
        assert ours(sw.table()) == {canonical(f) for f in expected[n]}, n
        assert not any(isinstance(a, Output) and (n, a.port) in app.failover.down for f in sw.table() for a in f.actions)
    st = app.status()["failover"]
    assert st["rerouted"] and len(st["ports_down"]) == 2
    # back up: the compiled tables again, on every switch
    port_status(sws[link.a], link.a_port, False)
    port_status(sws[link.b], link.b_port, False)
    hub.sleep(0.1)
    wait_reroute(app)
    for n, sw in sws.items():
        assert ours(sw.table()) == compiled[n], n
    assert app.status()["failover"]["rerouted"] is False


def test_switch_gone_is_routed_around(tmp_path):
    from os_ken.lib import hub

    path = tmp_path / "c.conf"
    path.write_text(f"[hpcfabric]\ntopology = {ROOT / 'topologies' / 'dragonfly-a2-p1-h1.yaml'}\nreload_poll = 0\n"
                    "lldp_interval = 0.05\nlldp_timeout = 0.2\n")
    app = make_app(path)
    sws = {}
    for st in app.switches.values():
        sws[st.name] = FakeSwitch(app, st.dpid, [1, 2, 3])
        sws[st.name].connect()
    settle()
    gone = sws["g1s0"]
    gone.alive = False
    app.sessions.disconnected(gone)
    hub.sleep(0.4)
    wait_reroute(app)
    assert app.status()["failover"]["switches_gone"] == ["g1s0"]
    expected = reroute(app.config, set(), {"g1s0"})
    for n, sw in sws.items():
        if n != "g1s0":
            assert ours(sw.table()) == {canonical(f) for f in expected[n]}, n
    # it comes back: compiled tables everywhere again
    gone.alive = True
    gone.connect()
    hub.sleep(0.1)
    wait_reroute(app)
    for n, sw in sws.items():
        assert ours(sw.table()) == {canonical(f) for f in app.config.desired[n]}, n


def test_controller_installs_fast_failover_groups_before_flows(tmp_path):
    """fast_failover = on: every switch gets its groups (before the flows that use them, once), its table
    uses them; PAUSE flips keep the group in the unpaused entry; a port down is rerouted (plain outputs,
    groups stay), port up restores the grouped tables."""
    import time

    from os_ken.lib import hub

    from hpcfabric.rules.port_state import port_state_flow
    from hpcfabric.failover.groups import group_id
    from hpcfabric.rules.flows import Group
    from hpcfabric.protocols.pause import Flip

    path = tmp_path / "c.conf"
    path.write_text(f"[hpcfabric]\ntopology = {ROOT / 'topologies' / 'dragonfly-a4-p2-h2.yaml'}\nrouting = conditional\n"
                    "reload_poll = 0\n[failover]\nfast_failover = on\n")
    app = make_app(path)
    cfg = app.config
    sws = {}
    for st in app.switches.values():
        sws[st.name] = FakeSwitch(app, st.dpid, list(range(1, 8)))
        sws[st.name].connect()
    settle()
    for n, sw in sws.items():
        assert app.switches[n].confirmed, (n, app.switches[n].error)
        want = {g.group_id: [b.watch_port for b in g.buckets] for g in cfg.groups[n]}
        assert {gid: [b.watch_port for b in bk] for gid, (_, bk) in sw.groups.items()} == want and len(want) == 5
        assert all(t == O.OFPGT_FF for t, _ in sw.groups.values())
        assert ours(sw.table()) == {canonical(f) for f in cfg.desired[n]}
        assert any(isinstance(a, Group) for f in sw.table() for a in f.actions)
        assert sw.log.index("group_mod") < sw.log.index("flow_mod")
    # a reconnect finds the groups right: no group-mod
    sw0 = sws["g0s0"]
    before = sw0.log.count("group_mod")
    sw0.connect()
    settle()
    assert app.switches["g0s0"].confirmed and sw0.log.count("group_mod") == before
    # PAUSE flip and back: the unpaused entry goes through the group again
    port = next(p for p in cfg.fabric.fabric_ports("g0s0") if group_id(p) in sw0.groups)
    key = port_state_flow(port, True).key()
    app.pausing.apply_flip(Flip("g0s0", port, True, time.monotonic(), "pause"), time.monotonic())
    assert sw0.flows[key] == canonical(port_state_flow(port, True))
    app.pausing.apply_flip(Flip("g0s0", port, False, time.monotonic(), "xon"), time.monotonic())
    assert sw0.flows[key] == canonical(port_state_flow(port, False, group_id(port)))
    assert canonical(port_state_flow(port, False, group_id(port))) in {canonical(f) for f in cfg.desired["g0s0"]}
    # link down: the recomputed (plain) tables; up: the grouped tables again
    link = app.fabric.links[0]
    port_status(sws[link.a], link.a_port, True)
    port_status(sws[link.b], link.b_port, True)
    hub.sleep(0.1)
    wait_reroute(app)
    expected = reroute(cfg, {(link.a, link.a_port), (link.b, link.b_port)})
    for n, sw in sws.items():
        assert ours(sw.table()) == {canonical(f) for f in expected[n]}, n
        assert not any(isinstance(a, Group) for f in sw.table() for a in f.actions)
        assert len(sw.groups) == 5  # still installed, unused
    port_status(sws[link.a], link.a_port, False)
    port_status(sws[link.b], link.b_port, False)
    hub.sleep(0.1)
    wait_reroute(app)
    for n, sw in sws.items():
        assert ours(sw.table()) == {canonical(f) for f in cfg.desired[n]}, n
