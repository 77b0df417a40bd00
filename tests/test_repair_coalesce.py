"""A burst of port events is one repair (``[failover] settle_ms``), and a plan overtaken by events is planned
again for them all, never installed and then repaired (the controller with fake switches, the real planner
process).

* a switch's links going down one after another (its neighbours' and its own port status, 15 ms apart):
  one plan, one repair, for all of them; the control: ``settle_ms = 0`` plans more than once for the same burst;
* a second link going down while the first one's plan is being made (delivered from inside the planner call,
  so the overlap is certain): that plan is discarded, the union is planned and installed once -- the
  switches receive exactly the union's differing entries -- and the recovery restores the compiled tables
  (the planner's proof base went back with the discarded plan).
"""

from __future__ import annotations

from pathlib import Path

from test_ops_failover import port_status
from test_ops_fakes import fake_fabric, ours, wait_reroute

from hpcfabric.openflow.reconcile import canonical, diff
from hpcfabric.repair.plan import Repairer
from hpcfabric.topology.failures import Failures


def controller(tmp_path: Path, settle_ms: float):
    return fake_fabric(tmp_path, f"[failover]\nsettle_ms = {settle_ms}\n")


def switch_links(app, victim: str) -> list[tuple[str, int, str, int]]:
    return [(victim, p, peer.node, int(peer.port)) for p, peer in sorted(app.fabric.fabric_ports(victim).items())]


def burst(sws, links, gap: float) -> None:
    from os_ken.lib import hub

    for a, ap, b, bp in links:
        port_status(sws[b], bp, True)  # the neighbour first, as a switch's failure is seen
        hub.sleep(gap)
        port_status(sws[a], ap, True)
        hub.sleep(gap)


def test_a_burst_of_port_events_is_one_plan(tmp_path):
    app, sws = controller(tmp_path, 50)
    try:
        links = switch_links(app, "g2s1")
        assert len(links) >= 4
        burst(sws, links, 0.015)  # 2 x len(links) events, 15 ms apart: longer than the window, never a pause in it
        wait_reroute(app)
        st = app.status()["failover"]
        assert st["plans"] == 1 and st["repairs"] == 1 and st["superseded"] == 0, st
        union = Failures.of(app.fabric, [(a, ap) for a, ap, _, _ in links])
        assert st["last"]["failures"] == union.as_dict() and st["last"]["installed"]
        expected = Repairer(app.config, prove=False).plan(union)
        for n in expected.changed:
            assert ours(sws[n].table()) == {canonical(f) for f in expected.desired[n]}, n
    finally:
        app.stop()


def test_without_a_settle_window_the_same_burst_is_planned_more_than_once(tmp_path):
    app, sws = controller(tmp_path, 0)
    try:
        links = switch_links(app, "g2s1")
        burst(sws, links, 0.015)
        wait_reroute(app)
        st = app.status()["failover"]
        assert st["plans"] > 1, st
        assert st["last"]["failures"] == Failures.of(app.fabric, [(a, ap) for a, ap, _, _ in links]).as_dict()
    finally:
        app.stop()


def test_a_plan_overtaken_by_events_is_planned_again_not_installed(tmp_path):
    from os_ken.lib import hub

    app, sws = controller(tmp_path, 0)
    try:
        first, second = [l for l in app.fabric.links if l.kind == "global"][:2]
        planner = app.failover.planner
        real = planner.plan
        asked = []

        def plan(failures):  # the second link goes down while the first one's plan is made
            asked.append(failures)
            if len(asked) == 1:
                port_status(sws[second.a], second.a_port, True)
                port_status(sws[second.b], second.b_port, True)
            return real(failures)

        planner.plan = plan
        compiled = {n: {canonical(f) for f in app.config.desired[n]} for n in sws}
        mods = {n: sw.flow_mods() for n, sw in sws.items()}
        port_status(sws[first.a], first.a_port, True)
        port_status(sws[first.b], first.b_port, True)
        hub.sleep(0.05)
        wait_reroute(app)
        union = Failures.of(app.fabric, [(first.a, first.a_port), (second.a, second.a_port)])
        st = app.status()["failover"]
        assert [len(f.links) for f in asked] == [1, 2] and asked[1] == union, asked
        assert st["plans"] == 2 and st["superseded"] == 1 and st["repairs"] == 1, st
        assert st["last"]["failures"] == union.as_dict() and st["last"]["verdict"]["proven"]
        expected = Repairer(app.config, prove=False).plan(union)
        changed = set(expected.changed)
        for n, sw in sws.items():
            assert ours(sw.table()) == ({canonical(f) for f in expected.desired[n]} if n in changed else compiled[n]), n
        sent = sum(sw.flow_mods() - mods[n] for n, sw in sws.items())  # the union's entries once, nothing before
        assert sent == st["flow_mods"] == sum(diff(expected.desired[n], app.config.desired[n]).changes for n in changed)
        for link in (first, second):  # back: the compiled tables (the discarded plan left the proof base as it was)
            port_status(sws[link.a], link.a_port, False)
            port_status(sws[link.b], link.b_port, False)
        hub.sleep(0.05)
        wait_reroute(app)
        st = app.status()["failover"]
        assert st["last"]["verdict"]["proven"] and not st["repaired"], st
        assert all(ours(sw.table()) == compiled[n] for n, sw in sws.items())
    finally:
        app.stop()
