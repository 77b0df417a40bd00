"""Link and switch failures: proven repairs (pure) and the controller's reaction (fake switches).

* :class:`hpcfabric.repair.plan.Repairer` for every link of the small shipped fabrics (and a dead switch):
  the repair is proven (the whole-fabric union proof on the surviving fabric agrees), only the switches
  the failure can affect change, and recovery gives back the compiled tables;
* the controller: port-status down on a fabric port -> the proven repair installed (only the differing
  entries, on the changed switches only), port back up -> the compiled tables again; a switch gone longer
  than lldp_timeout is routed around; a flapping port is damped.
"""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
from test_ops_fakes import ROOT, O, FakeSwitch, fake_fabric, make_app, ours, settle, wait_planner, wait_reroute

from hpcfabric.config import load_config
from hpcfabric.repair.plan import Repairer
from hpcfabric.openflow.reconcile import canonical, diff
from hpcfabric.rules.compiler import affected_switches
from hpcfabric.topology.failures import Failures
from hpcfabric.verify.union.proof import prove

CONFIGS = ["dragonfly-a2-p1-h1.conf", "dragonfly-a4-p2-h2.conf", "dragonfly-a2-p1-h1-valiant.conf"]


@pytest.mark.parametrize("name", CONFIGS)
def test_repair_every_link_is_proven_and_local(name):
    cfg = load_config(ROOT / "configs" / name)
    rep = Repairer(cfg, prove=True)
    links = cfg.fabric.links if len(cfg.fabric.links) <= 40 else cfg.fabric.links[::3]
    for link in links:
        f = Failures.of(cfg.fabric, [(link.a, link.a_port)])
        plan = rep.plan(f)
        full = prove(plan.compiled, overlaps=False)
        assert plan.proven and full.acyclic, (link, plan.verdict)
        assert (plan.verdict["verdict"] == "proven") == full.delivered, (link, plan.verdict, full.undelivered)
        aff = affected_switches(cfg.fabric, f, bool(plan.verdict.get("redirect_detours")))
        assert set(plan.changed) <= set(aff)
        for sw, table in cfg.compiled.tables.items():  # every other switch keeps its table, entry for entry
            if sw not in plan.changed:
                assert plan.compiled.tables[sw].flows == table.flows, sw
        rep.apply(plan)
        back = rep.plan(Failures())
        assert back.proven and set(back.changed) == set(plan.changed)
        assert all(back.compiled.tables[s].flows == t.flows for s, t in cfg.compiled.tables.items())
        rep.apply(back)


def test_keeps_unaffected_next_hops():
    """A repair changes the decision of a (switch, destination) only where the old path crossed the failure:
    compared entry by entry, every switch outside the failed link's group keeps its table, and inside it the
    destinations behind the link are the only ones that move."""
    cfg = load_config(ROOT / "configs" / "dragonfly-a4-p2-h2.conf")
    link = next(l for l in cfg.fabric.links if l.kind == "local")
    rep = Repairer(cfg, prove=True)
    plan = rep.plan(Failures.of(cfg.fabric, [(link.a, link.a_port)]))
    assert plan.proven and set(plan.changed) == {link.a, link.b}
    from hpcfabric.verify.reference.pipeline import Frame, Pipeline

    for sw in plan.changed:
        old, new = Pipeline(cfg.compiled.tables[sw].flows), Pipeline(plan.compiled.tables[sw].flows)
        peer = link.b if sw == link.a else link.a
        moved = 0
        for host in cfg.fabric.hosts:
            frame = Frame(in_port=1, eth_src=0x020000000000, eth_dst=cfg.plan.host_mac[host.name])
            a, b = old.process(frame).outputs, new.process(frame).outputs
            dead = link.a_port if sw == link.a else link.b_port
            if a != b:
                moved += 1
                assert [p for p, _ in a] == [dead], (sw, host.name, a, b)  # only what went over the dead link
        assert moved, sw
        assert peer


def test_unreachable_destinations_are_dropped_not_looped():
    cfg = load_config(ROOT / "configs" / "fat-tree-k4.conf")
    edge = next(s for s in cfg.fabric.switches if s.role == "edge")
    f = Failures.of(cfg.fabric, [(edge.name, p) for p in cfg.fabric.fabric_ports(edge.name)])
    plan = Repairer(cfg, prove=True).plan(f)
    report = prove(plan.compiled, overlaps=False)
    # every pair not touching the cut-off edge switch is delivered, no loop, no dependency cycle; the
    # cut-off pairs (both ways) are walked but not to be delivered
    assert report.acyclic and report.ok and plan.proven
    assert report.unreachable > 0 and not report.undelivered


def port_status(sw: FakeSwitch, port: int, down: bool) -> None:
    desc = SimpleNamespace(port_no=port, config=0, state=O.OFPPS_LINK_DOWN if down else 0, hw_addr="02:00:00:00:00:01")
    sw.app._port_status(SimpleNamespace(msg=SimpleNamespace(datapath=sw, reason=O.OFPPR_MODIFY, desc=desc)))


def test_controller_repairs_on_port_down_and_restores(tmp_path):
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
    wait_planner(app)
    compiled = {n: {canonical(f) for f in app.config.desired[n]} for n in sws}
    link = next(l for l in app.fabric.links if l.kind == "global")
    mods = {n: sw.flow_mods() for n, sw in sws.items()}
    port_status(sws[link.a], link.a_port, True)
    port_status(sws[link.b], link.b_port, True)
    hub.sleep(0.1)
    wait_reroute(app)
    st = app.status()["failover"]
    assert app.failover.repairs == 1 and app.failover.last_ms is not None and st["last"]["installed"]
    assert st["last"]["verdict"]["verdict"] == "proven" and st["unproven"] is None
    expected = Repairer(app.config, prove=False).plan(Failures.of(app.fabric, [(link.a, link.a_port)]))
    changed = set(expected.changed)
    for n, sw in sws.items():
        want = {canonical(f) for f in expected.desired[n]} if n in changed else compiled[n]
        assert ours(sw.table()) == want, n
        if n not in changed:
            assert sw.flow_mods() == mods[n], n  # an unaffected switch gets nothing
    sent = sum(sw.flow_mods() - mods[n] for n, sw in sws.items())
    assert sent == st["flow_mods"] == sum(diff(expected.desired[n], app.config.desired[n]).changes for n in changed)
    assert st["repaired"] and len(st["ports_down"]) == 2
    # back up: the compiled tables again, on every switch
    port_status(sws[link.a], link.a_port, False)
    port_status(sws[link.b], link.b_port, False)
    hub.sleep(0.1)
    wait_reroute(app)
    for n, sw in sws.items():
        assert ours(sw.table()) == compiled[n], n
    assert app.status()["failover"]["repaired"] is False and app.failover.repairs == 2


def test_a_flapping_port_is_damped(tmp_path):
    """Ten down/up changes in a second: a few repairs, not twenty; held down until stable; every one proven."""
    from os_ken.lib import hub

    app, sws = fake_fabric(tmp_path)
    link = next(l for l in app.fabric.links if l.kind == "local")
    for i in range(10):
        down = i % 2 == 0
        port_status(sws[link.a], link.a_port, down)
        port_status(sws[link.b], link.b_port, down)
        hub.sleep(0.1)
    wait_reroute(app)
    st = app.status()["failover"]
    assert 1 <= app.failover.repairs <= 4 and app.failover.refused == 0, st
    assert st["damped"] and st["repaired"]  # the link is up but held down: the repaired tables stay
    hub.sleep(app.failover.damper.hold + 0.3)
    end = time.monotonic() + 30  # the hold's end is a timer on the hub: under load it may fire late
    while time.monotonic() < end:
        wait_reroute(app)
        st = app.status()["failover"]
        if not st["damped"] and not st["repaired"]:
            break
        hub.sleep(0.1)
    assert not st["damped"] and not st["repaired"], st
    assert all(ours(sw.table()) == {canonical(f) for f in app.config.desired[n]} for n, sw in sws.items())


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
    wait_planner(app)
    gone = sws["g1s0"]
    gone.alive = False
    app.sessions.disconnected(gone)
    hub.sleep(0.4)
    wait_reroute(app)
    assert app.status()["failover"]["switches_gone"] == ["g1s0"]
    expected = Repairer(app.config, prove=False).plan(Failures.of(app.fabric, [], {"g1s0"}))
    for n, sw in sws.items():
        if n != "g1s0":
            want = expected.desired[n] if n in expected.desired else app.config.desired[n]
            assert ours(sw.table()) == {canonical(f) for f in want}, n
    # it comes back: compiled tables everywhere again
    gone.alive = True
    gone.connect()
    hub.sleep(0.1)
    wait_reroute(app)
    for n, sw in sws.items():
        assert ours(sw.table()) == {canonical(f) for f in app.config.desired[n]}, n


def test_controller_installs_fast_failover_groups_before_flows(tmp_path):
    """fast_failover = on: every switch gets its groups (before the flows that use them, once), its table
    uses them; PAUSE flips keep the group in the unpaused entry; a port down gets its proven repair (the
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
    wait_planner(app)
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
    # link down: the proven repair (its tables with their groups); up: the compiled tables again
    link = app.fabric.links[0]
    port_status(sws[link.a], link.a_port, True)
    port_status(sws[link.b], link.b_port, True)
    hub.sleep(0.1)
    wait_reroute(app)
    expected = Repairer(cfg, prove=False).plan(Failures.of(cfg.fabric, [(link.a, link.a_port)]))
    assert app.failover.repairs == 1
    for n, sw in sws.items():
        want = expected.desired[n] if n in expected.desired else cfg.desired[n]
        assert ours(sw.table()) == {canonical(f) for f in want}, n
    port_status(sws[link.a], link.a_port, False)
    port_status(sws[link.b], link.b_port, False)
    hub.sleep(0.1)
    wait_reroute(app)
    for n, sw in sws.items():
        assert ours(sw.table()) == {canonical(f) for f in cfg.desired[n]}, n
