"""A repair the proof refuses is said in the status file's ``deadlock`` object, with its cycle (the controller with
fake switches): ``deadlock.refused_repair`` names the failures, the verdict and the cycle as channels while the
last proven tables stay in force (no flow-mod sent), and is None again once the failures are gone.

The refused plan is a real one: the planner (inline) restricted to its bypass routes
(:meth:`hpcfabric.repair.plan.Repairer._plan` with ``redirect=False``) on the eight global links out of
``tests/test_repair.py``'s mutation check, whose bypasses chain through class 2; the unrestricted planner finds
the redirected routes instead."""

from __future__ import annotations

from test_ops_failover import port_status
from test_ops_fakes import fake_fabric, wait_reroute

from hpcfabric.controller.planner import Planner
from hpcfabric.topology.failures import parse_failures

EIGHT = ["g4s1:4", "g6s0:4", "g5s0:3", "g1s2:4", "g1s3:3", "g1s1:3", "g2s0:3", "g0s0:4"]


def test_a_refused_repair_is_in_the_deadlock_object_with_its_cycle(tmp_path):
    from os_ken.lib import hub

    app, sws = fake_fabric(tmp_path, planner=False)
    try:
        if app.failover.planner is not None:  # the process planner, if started: replaced by an inline one
            app.failover.planner.stop()
        planner = app.failover.planner = Planner(app.config, process=False)
        planner.start()
        rep = planner.inline
        rep.plan = lambda failures: rep._plan(failures, redirect=False)  # bypasses only
        st = app.status()
        assert st["deadlock"]["verdict"] == "proven" and st["deadlock"]["refused_repair"] is None
        ends = []
        for end in EIGHT:
            sw, port = end.split(":")
            peer = app.fabric.fabric_ports(sw)[int(port)]
            ends += [(sw, int(port)), (peer.node, int(peer.port))]
        mods = sum(s.flow_mods() for s in sws.values())
        for sw, port in ends:
            port_status(sws[sw], port, True)
        hub.sleep(0.1)
        wait_reroute(app)
        st = app.status()
        got = st["deadlock"]["refused_repair"]
        assert st["failover"]["refused"] == 1 and st["failover"]["repairs"] == 0, st["failover"]
        assert got is not None and got["verdict"] == "cycle", got
        assert got["cycle"] and all(ch.endswith("@2") for ch in got["cycle"]), got  # named, as channels
        assert got["failures"] == parse_failures(app.fabric, EIGHT).as_dict()
        assert "dependency cycle" in got["explanation"] and "last proven tables" in got["in_force"]
        assert st["deadlock"]["verdict"] == "proven"  # the tables in force: still the proven ones
        assert sum(s.flow_mods() for s in sws.values()) == mods  # nothing installed
        for sw, port in ends:  # the links back: the tables in force are proven for it, nothing refused
            port_status(sws[sw], port, False)
        hub.sleep(0.1)
        wait_reroute(app)
        assert app.status()["deadlock"]["refused_repair"] is None
    finally:
        app.stop()
