"""High availability with fake switches: the lease, OpenFlow roles with generation ids, takeover = reconcile.

Two real controller apps share a lease file and every fake switch (the
switch keeps one election generation for both connections, rejects stale
claims and refuses a slave's writes, like Open vSwitch).
"""

from __future__ import annotations

import json
import os
import time

from test_ops_fakes import ROOT, O, FakeSwitch, make_app, ours, settle

from hpcfabric.openflow.reconcile import canonical


def conf(tmp, name: str, extra: str = "") -> str:
    path = tmp / f"{name}.conf"
    path.write_text(f"[hpcfabric]\ntopology = {ROOT / 'topologies' / 'dragonfly-a2-p1-h1.yaml'}\nreload_poll = 0\n"
                    f"routing = conditional\n[ha]\nrole = auto\nlease_file = {tmp / 'ha.lease'}\nlease_timeout = 0.5\n"
                    f"instance = {name}\n{extra}")
    return str(path)


def connect_all(app, gens, switches=None):
    out = {}
    for st in app.switches.values():
        sw = FakeSwitch(app, st.dpid, [1, 2, 3], gen_cache=gens.setdefault(st.dpid, {}))
        if switches is not None:
            sw.flows = switches[st.name].flows  # same switch, second connection: one table
            sw.meters = switches[st.name].meters
        sw.connect()
        out[st.name] = sw
    return out


def test_lease_roles_takeover_and_fencing(tmp_path):
    a = make_app(conf(tmp_path, "a"))
    b = make_app(conf(tmp_path, "b"))
    assert a.ha.tick() == "master" and a.ha.generation == 1
    assert b.ha.tick() is None and b.ha.role == "slave" and b.ha.generation == 1
    gens: dict = {}
    sa = connect_all(a, gens)
    sb = connect_all(b, gens, sa)
    settle()
    assert all(s.confirmed for s in a.switches.values())
    assert not any(s.confirmed for s in b.switches.values())
    assert all(sw.role == O.OFPCR_ROLE_MASTER for sw in sa.values())
    assert all(sw.role == O.OFPCR_ROLE_SLAVE for sw in sb.values())
    assert all(sw.flow_mods() == 0 and sw.count("role") == 1 for sw in sb.values())  # a slave writes nothing
    lease = json.loads((tmp_path / "ha.lease").read_text())
    assert lease["holder"] == "a" and lease["generation"] == 1
    # the master keeps renewing; while it does, b stays slave
    for _ in range(3):
        time.sleep(0.2)
        assert a.ha.tick() is None and b.ha.tick() is None
    # a dies (no more renewals): after lease_timeout b takes over with generation 2 and reconciles to nothing
    time.sleep(0.6)
    assert b.ha.tick() == "master" and b.ha.generation == 2 and b.ha.takeovers == 1
    b.ha_agent.changed("master")
    settle()
    assert all(s.confirmed for s in b.switches.values())
    assert all(sw.role == O.OFPCR_ROLE_MASTER for sw in sb.values())
    assert all(sw.role == O.OFPCR_ROLE_SLAVE for sw in sa.values())  # the switch demoted the old master
    assert sum(sw.flow_mods() for sw in sb.values()) == 0  # takeover = reconcile: nothing to send
    # the old master wakes up: it sees the new holder and demotes itself; its stale claims are refused anyway
    assert a.ha.tick() == "slave"
    sw = sa["g0s0"]
    xid = a.channel.xids(sw, 1)
    errors = a.counters["switch_errors"]
    from hpcfabric.openflow import ofwire

    sw.send(ofwire.role_request(xid, ofwire.OFPCR_ROLE_MASTER, 1))
    assert a.counters["switch_errors"] == errors + 1 and sw.role == O.OFPCR_ROLE_SLAVE
    for n, s in sb.items():
        assert ours(s.table()) == {canonical(f) for f in b.desired(n)}


def test_clean_stop_releases_the_lease(tmp_path):
    a = make_app(conf(tmp_path, "a"))
    b = make_app(conf(tmp_path, "b"))
    a.ha.tick()
    b.ha.tick()
    a.ha.release()
    assert b.ha.tick() == "master"  # at once, no timeout


def test_slave_ignores_packet_ins_and_sends_no_lldp(tmp_path):
    from hpcfabric.protocols.pause import build_pause

    b = make_app(conf(tmp_path, "b"))
    (tmp_path / "ha.lease").write_text(json.dumps({"holder": "other", "generation": 5, "expires": time.time() + 60}))
    b.ha.tick()
    assert b.ha.role == "slave" and b.ha.generation == 5
    sws = connect_all(b, {})
    settle()
    sw = sws["g0s0"]
    sw.packet_in(3, build_pause(bytes.fromhex("020000aabbcc"), 0xFFFF))
    b.wiring.send_lldp(b.switches["g0s0"]) if b.ha.master else None
    assert sw.flow_mods() == 0 and sw.count("packet_out") == 0 and b.pause.paused_ports() == []
    assert b.status()["dropped"]["not_master"] == 1


def test_partitioned_instances_manage_only_their_switches(tmp_path):
    path = tmp_path / "p.conf"
    path.write_text(f"[hpcfabric]\ntopology = {ROOT / 'topologies' / 'dragonfly-a2-p1-h1.yaml'}\nreload_poll = 0\n"
                    "[ha]\nswitches = g0*,g1*\n")
    a = make_app(path)
    assert sorted(a.switches) == ["g0s0", "g0s1", "g1s0", "g1s1"]
    other = FakeSwitch(a, 5)  # g2s0: another instance's
    other.connect()
    settle()
    assert other.flows == {} and a.status()["unknown_dpids"] == [] and 5 in a.unmanaged
    assert os.path.exists(a.config.path)
