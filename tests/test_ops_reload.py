"""Configuration reload: validate first, then apply only the differences, per switch.

Against the real controller app and fake switches (tests/test_ops_fakes.py):
an invalid file changes nothing (logged, counted, in the status); a valid
one reconciles each switch to its new table with exactly the flow-mods of
the difference (guards switched on, routing changed, a host and a switch
removed from or added to the topology). Then the real ``hpcfabric
controller`` process: SIGHUP and a file change (mtime poll) trigger
reloads visible in its status file.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

from test_ops_fakes import ROOT, FakeSwitch, controller_process, make_app, ours, settle

from hpcfabric.config import load_config
from hpcfabric.openflow.reconcile import canonical, diff

TOPO = ROOT / "topologies"
RING = (TOPO / "explicit-ring4.yaml").read_text()


def write_conf(tmp: Path, topo: Path, extra: str = "", name: str = "c.conf") -> Path:
    path = tmp / name
    path.write_text(f"[hpcfabric]\ntopology = {topo}\nreload_poll = 0\n{extra}")
    return path


def fabric_up(app, ports=8) -> dict[str, FakeSwitch]:
    sws = {}
    for st in app.switches.values():
        sw = FakeSwitch(app, st.dpid, list(range(1, ports + 1)))
        sw.connect()
        sws[st.name] = sw
    settle()
    assert all(s.confirmed for s in app.switches.values()), {n: s.error for n, s in app.switches.items()}
    return sws


def assert_tables_match(app, sws) -> None:
    for name, sw in sws.items():
        if name in app.switches:
            assert ours(sw.table()) == {canonical(f) for f in app.desired(name)}, name


def test_invalid_reload_changes_nothing(tmp_path):
    conf = write_conf(tmp_path, TOPO / "dragonfly-a2-p1-h1.yaml", "routing = conditional\n")
    app = make_app(conf, tmp_path / "status.json")
    sws = fabric_up(app)
    before = {n: sw.table() for n, sw in sws.items()}
    logs = {n: len(sw.log) for n, sw in sws.items()}
    cfg = app.config
    for bad in ("routing = sideways\n", "[guards]\nsource_check = maybe\n", "[hpcfabric\n"):
        conf.write_text(conf.read_text() + bad)
        assert app.reload("test") is False
        conf.write_text(f"[hpcfabric]\ntopology = {TOPO / 'dragonfly-a2-p1-h1.yaml'}\nreload_poll = 0\nrouting = conditional\n")
    assert app.config is cfg
    assert {n: sw.table() for n, sw in sws.items()} == before
    assert {n: len(sw.log) for n, sw in sws.items()} == logs  # not a single message
    app.reporter.write()
    st = json.loads((tmp_path / "status.json").read_text())
    assert st["reload"]["failed"] == 3 and st["reload"]["ok"] == 0
    last = st["reload"]["last"]
    assert last["ok"] is False and str(conf) in last["error"] and "hpcfabric" in last["error"]
    # a broken topology file is invalid too: nothing changes
    topo = tmp_path / "t.yaml"
    topo.write_text("kind: dragonfly\na: 2\np: 1\nh: 1\n")
    conf.write_text(f"[hpcfabric]\ntopology = {topo}\nrouting = conditional\n")
    assert app.reload() is True
    topo.write_text("kind: dragonfly\na: 2\np: 1\nh: [\n")
    assert app.reload() is False and app.reloader.reloads["failed"] == 4
    assert str(topo) in app.reloader.reloads["last"]["error"]


def test_reload_sends_only_the_differences(tmp_path):
    conf = write_conf(tmp_path, TOPO / "dragonfly-a2-p1-h1.yaml", "routing = conditional\n")
    app = make_app(conf)
    sws = fabric_up(app)
    # unchanged config: nothing at all is sent
    logs = {n: len(sw.log) for n, sw in sws.items()}
    assert app.reload() is True
    settle()
    assert {n: len(sw.log) for n, sw in sws.items()} == logs
    assert app.reloader.reloads["last"]["resynced"] == []
    # guards on: each switch gets its guard entries (adds) and meters, nothing else
    old = {n: app.desired(n) for n in sws}
    conf.write_text(conf.read_text() + "[guards]\nsource_check = on\npunt_meters = on\n")
    base = {n: sw.flow_mods() for n, sw in sws.items()}
    assert app.reload() is True
    settle()
    assert sorted(app.reloader.reloads["last"]["resynced"]) == sorted(sws)
    for n, sw in sws.items():
        d = diff(app.desired(n), old[n])
        assert sw.flow_mods() - base[n] == d.changes > 0, n
        assert set(sw.meters) == {1, 2}
    assert_tables_match(app, sws)
    # routing minimal: tables 2/3 go, default rules output directly
    old = {n: app.desired(n) for n in sws}
    conf.write_text(conf.read_text().replace("routing = conditional", "routing = minimal"))
    base = {n: sw.flow_mods() for n, sw in sws.items()}
    assert app.reload() is True
    settle()
    for n, sw in sws.items():
        assert sw.flow_mods() - base[n] == diff(app.desired(n), old[n]).changes
        assert not any(f.table in (2, 3) for f in sw.table())
    assert_tables_match(app, sws)
    # addressing per-group: new HMACs, new routes, new guard entries -- still only the differences
    old = {n: app.desired(n) for n in sws}
    conf.write_text(conf.read_text().replace("routing = minimal", "routing = minimal\naddressing = per-group"))
    base = {n: sw.flow_mods() for n, sw in sws.items()}
    assert app.reload() is True and app.config.addressing == "per-group"
    settle()
    for n, sw in sws.items():
        assert sw.flow_mods() - base[n] == diff(app.desired(n), old[n]).changes
    assert_tables_match(app, sws)
    assert app.reloader.reloads["ok"] == 4 and app.reloader.reloads["failed"] == 0


def test_topology_change_adds_and_retires_switches(tmp_path):
    topo = tmp_path / "ring.yaml"
    topo.write_text(RING)
    conf = write_conf(tmp_path, topo)
    app = make_app(conf)
    sws = fabric_up(app)
    stranger = FakeSwitch(app, 9)
    stranger.connect()
    settle()
    assert stranger.flows == {} and "0000000000000009" in app.unknown_dpids()
    # remove host h4 and switch s4 is kept: only the tables that change get flow-mods
    text = RING.replace("  - {name: h4, switch: s4, port: 1}\n", "")
    old = {n: app.desired(n) for n in sws}
    base = {n: sw.flow_mods() for n, sw in sws.items()}
    topo.write_text(text)
    assert app.reload() is True
    settle()
    for n, sw in sws.items():
        assert sw.flow_mods() - base[n] == diff(app.desired(n), old[n]).changes
    assert_tables_match(app, sws)
    # replace s2 by a new switch s9 (dpid 9, already connected as unknown); s2 is retired
    text2 = text.replace("{name: s2, dpid: 2,", "{name: s9, dpid: 9,").replace("a: s2,", "a: s9,").replace(
        "b: s2,", "b: s9,").replace("switch: s2,", "switch: s9,")
    topo.write_text(text2)
    assert app.reload() is True
    settle()
    last = app.reloader.reloads["last"]
    assert last["retired"] == ["s2"] and last["added"] == ["s9"]
    assert ours(sws["s2"].table()) == set()  # our flows deleted from the retired switch
    assert "0000000000000002" in app.unknown_dpids() and "0000000000000009" not in app.unknown_dpids()
    assert app.switches["s9"].confirmed
    assert ours(stranger.table()) == {canonical(f) for f in app.desired("s9")}
    app.sessions.disconnected(sws["s2"])
    assert "0000000000000002" not in app.unknown_dpids()


def test_restart_keys_are_kept_and_reported(tmp_path):
    conf = write_conf(tmp_path, TOPO / "dragonfly-a2-p1-h1.yaml")
    app = make_app(conf)
    conf.write_text(conf.read_text() + "[openflow]\nlisten_port = 7777\n")
    assert app.reload() is True
    assert app.config.listen_port == 6653 and app.reloader.reloads["pending_restart"] == ["listen_port"]


def test_paused_entries_are_adopted_not_rewritten(tmp_path):
    from hpcfabric.rules.port_state import port_state_flow

    conf = write_conf(tmp_path, TOPO / "dragonfly-a2-p1-h1.yaml", "routing = conditional\n")
    app = make_app(conf)
    sw = FakeSwitch(app, 1)
    sw.install(load_config(conf).desired["g0s0"])
    sw.install([port_state_flow(3, True)])  # left paused by a previous controller
    sw.connect()
    settle()
    assert app.switches["g0s0"].confirmed and sw.flow_mods() == 0
    assert app.pause.is_paused("g0s0", 3, time.monotonic())


# ---------------------------------------------------------------------------
# the real process: SIGHUP and the mtime poll


def _status(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _wait(path: Path, pred, timeout: float = 20.0) -> dict:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        st = _status(path)
        if st and pred(st):
            return st
        time.sleep(0.05)
    raise AssertionError(f"timeout; status {json.dumps(_status(path))[:1500]}")


def test_controller_process_reloads_on_sighup_and_file_change(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    status = tmp_path / "status.json"
    conf = tmp_path / "c.conf"
    good = (f"[hpcfabric]\ntopology = {TOPO / 'dragonfly-a2-p1-h1.yaml'}\nstatus_file = {status}\nreload_poll = 0.2\n"
            f"[openflow]\nlisten_port = {port}\n")
    conf.write_text(good)
    proc, log = controller_process(conf)
    try:
        _wait(status, lambda s: s.get("running"))
        proc.send_signal(signal.SIGHUP)
        st = _wait(status, lambda s: s["reload"]["ok"] == 1)
        assert st["reload"]["last"]["reason"] == "SIGHUP"
        conf.write_text(good + "[guards]\nsource_check = perhaps\n")  # the mtime poll notices
        st = _wait(status, lambda s: s["reload"]["failed"] == 1)
        assert "guards.source_check" in st["reload"]["last"]["error"] and st["running"]
        conf.write_text(good.replace("reload_poll = 0.2", "reload_poll = 0.2\nrouting = conditional"))
        st = _wait(status, lambda s: s["reload"]["ok"] == 2)
        assert st["routing"] == "conditional" and st["reload"]["last"]["reason"] == "file change"
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)
        log.close()
    text = (tmp_path / "log").read_text()
    assert "Traceback" not in text and "reload (file change) rejected" in text
