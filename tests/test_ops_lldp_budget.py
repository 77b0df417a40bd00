"""LLDP within a budget: a fabric with more ports than LLDP_MAX_PPS x lldp_interval is visited in
rotation (every port within one cycle of rounds), the discovery timeout follows the cycle, and a
fabric under the budget keeps one full round per interval (controller.wiring.Wiring.round_plan)."""

from __future__ import annotations

from pathlib import Path

from test_ops_fakes import ROOT, FakeSwitch, make_app, settle

from hpcfabric.controller import wiring


def app_with_switches(tmp_path: Path):
    path = tmp_path / "b.conf"
    path.write_text(f"[hpcfabric]\ntopology = {ROOT / 'topologies' / 'dragonfly-a4-p2-h2.yaml'}\n"
                    "routing = conditional\nreload_poll = 0\nlldp_interval = 1.0\n")
    app = make_app(path, tmp_path / "status.json")
    for st in app.switches.values():
        FakeSwitch(app, st.dpid, list(range(1, 7))).connect()
    settle()
    assert all(s.confirmed for s in app.switches.values())
    return app


def test_lldp_rotates_over_the_ports_when_a_round_exceeds_the_budget(tmp_path: Path, monkeypatch) -> None:
    app = app_with_switches(tmp_path)
    every = {(sw.name, p) for sw in app.switches.values() for p in app.wiring.ports(sw)}
    full = app.wiring.round_plan()
    assert all(only is None for _, only in full) and len(full) == len(app.switches)
    assert app.discovery.timeout == app.config.lldp_timeout

    monkeypatch.setattr(wiring, "LLDP_MAX_PPS", 25)  # 25 frames per 1 s round
    cycle = -(-len(every) // 25)
    seen: list[tuple[str, int]] = []
    for _ in range(cycle):
        plan = app.wiring.round_plan()
        frames = [(sw.name, p) for sw, only in plan for p in only]
        assert len(frames) <= 25
        seen += frames
    assert set(seen) == every  # every port within one cycle of rounds
    assert len(seen) == cycle * 25  # the budget is used in full, the last round wrapping to the start
    assert max(seen.count(x) for x in every) <= 2
    assert app.discovery.timeout == 3.5 * 1.0 * cycle
    app.stop()


def test_discovery_pending_restarts_when_a_switch_is_confirmed(tmp_path: Path) -> None:
    """A switch's links count as pending from its confirmation (its LLDP punts exist only then), once per
    connection: a bring-up of thousands of switches confirms them long after they connected."""
    path = tmp_path / "b.conf"
    path.write_text(f"[hpcfabric]\ntopology = {ROOT / 'topologies' / 'dragonfly-a2-p1-h1.yaml'}\n"
                    "routing = conditional\nreload_poll = 0\nlldp_interval = 1.0\n")
    app = make_app(path, tmp_path / "status.json")
    fakes = [FakeSwitch(app, st.dpid, list(range(1, 4))) for st in app.switches.values()]
    for f in fakes:
        f.connect()
    at_connect = dict(app.discovery.connected)
    assert set(at_connect) == {st.dpid for st in app.switches.values()}
    settle()
    assert all(s.confirmed for s in app.switches.values())
    ready = dict(app.discovery.connected)
    assert all(ready[d] > at_connect[d] for d in at_connect)  # restarted at the confirmation
    assert all(s.ready_gen == s.gen for s in app.switches.values())
    app.stop()
