"""Real Open vSwitch + Mininet: the small Dragonfly and the small Flattened Butterfly.

Per topology two nets are built, one after the other (module-scoped
fixture, one instance per (topology, mode)):

* ``static``: flows installed with ``ovs-ofctl --bundle add-flows`` from the
  compiler (the baseline; the PAUSE test flips the PORT_STATE entry itself);
* ``controller``: ``hpcfabric controller`` as a subprocess installs them and
  reacts to the injected PAUSE frames; its restart (SIGTERM, then kill -9)
  must not lose a single ping.

Checks: flows per bridge equal the compiler's, DMP gives every host its
planned hierarchical MAC (and is idempotent), all-pairs ping loses nothing,
an injected PAUSE reaches the right port, PAUSE diverts traffic through
table 3 and expiry restores the default path.

Skipped only if not root or Open vSwitch is not running. The controller
tests are skipped while the package ``hpcfabric.controller`` does not exist
and fail (never skip) once it does. Nothing here calls ``mn -c``.
"""

from __future__ import annotations

import argparse
import math
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = [
    pytest.mark.mininet,
    pytest.mark.filterwarnings("ignore:distutils Version classes are deprecated:DeprecationWarning"),
]

from mininet_gate import require_mininet  # noqa: E402

fn = require_mininet()

from controller_proc import Controller, controller_available, free_port  # noqa: E402  (mininet/controller_proc.py)
from fabric_setup import Setup, setup_from_config, write_config  # noqa: E402  (mininet/fabric_setup.py)
from pause_check import find_pause_targets, pause_test  # noqa: E402  (mininet/pause_check.py)
from pause_inject import pause_plan  # noqa: E402  (mininet/pause_inject.py)
from reachability import SteadyPing, all_pairs_ping  # noqa: E402  (mininet/reachability.py)
from runkit import CheckFailed, Progress  # noqa: E402  (mininet/runkit.py)
from mininet.log import setLogLevel  # noqa: E402

from hpcfabric.config import load_config  # noqa: E402
from hpcfabric.rules.flows import TABLE_INGRESS  # noqa: E402

setLogLevel("error")

TOPOLOGIES = ("dragonfly-a2-p1-h1", "fb-2d-3x3")
ALL = [(t, m) for t in TOPOLOGIES for m in ("static", "controller")]
CONTROLLER = [p for p in ALL if p[1] == "controller"]
READY_TIMEOUT = 90
#: Emulated link speed for the tests: one PAUSE frame of 29297 quanta then lasts 1.5 s, so a single
#: frame holds the port (at the configs' 10 Gb/s one frame lasts 3.4 ms; see the train test).
LINK_SPEED_GBPS = 0.01


def _ids(param: tuple[str, str]) -> str:
    return f"{param[0]}-{param[1]}"


@dataclass
class FabricRun:
    topology: str
    mode: str
    net: Any
    setup: Setup
    controller: Controller | None
    status: dict[str, Any] = field(default_factory=dict)
    dmp_done: bool = False
    neighbours_done: bool = False

    @property
    def fabric(self):  # noqa: ANN201
        return self.setup.fabric

    @property
    def plan(self):  # noqa: ANN201
        return self.setup.plan


def _start(topology: str, mode: str, tmp: Path) -> tuple[Setup, Controller | None, int, Path]:
    config = ROOT / "configs" / f"{topology}.conf"
    args = argparse.Namespace(
        config=str(config) if config.exists() else None,
        topology=str(ROOT / "topologies" / f"{topology}.yaml"),
        addressing=None,
        routing="conditional",
        link_speed_gbps=LINK_SPEED_GBPS,
    )
    port = free_port()
    path = write_config(args, tmp, port, tmp / "status.json")
    setup = setup_from_config(path)
    controller = None
    if mode == "controller":
        controller = Controller(path, tmp / "status.json", port, tmp / "controller.log")
    return setup, controller, port, path


@pytest.fixture(scope="module")
def fab(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    topology, mode = request.param
    if mode == "controller" and not controller_available():
        pytest.skip("hpcfabric.controller does not exist yet")
    tmp = tmp_path_factory.mktemp(f"{topology}-{mode}")
    setup, controller, port, _ = _start(topology, mode, tmp)
    net = None
    try:
        if controller is not None:
            controller.start()
        net = fn.build_net(setup.fabric, setup.plan, controller_port=port if controller else None, seed=7)
        run = FabricRun(topology, mode, net, setup, controller)
        if controller is not None:
            run.status = controller.wait_ready(len(setup.fabric.switches), READY_TIMEOUT)
        else:
            fn.install_static_flows(net, setup.compiled if setup.compiled else setup.desired)
        yield run
    except CheckFailed as err:
        pytest.fail(f"{topology} with the controller did not come up: {err}")
    finally:
        if net is not None:
            net.stop()
        if controller is not None:
            controller.stop()


def prepared(run: FabricRun) -> FabricRun:
    """DMP on every host and static neighbours, once per net."""
    if not run.dmp_done:
        results = fn.run_dmp(run.net)
        bad = {h: r for h, r in results.items() if r.get("returncode") != 0}
        assert not bad, f"DMP failed on {len(bad)} host(s): {next(iter(bad.items()))}"
        run.dmp_done = True
    if not run.neighbours_done:
        fn.set_static_neighbours(run.net, run.plan)
        run.neighbours_done = True
    return run


# ---------------------------------------------------------------------------


@pytest.mark.parametrize("fab", ALL, indirect=True, ids=_ids)
def test_installed_flows_equal_the_compiler(fab: FabricRun):
    from hpcfabric.rules.guards import guard_flows

    counts = fn.flow_counts(fab.net)
    compiled = {name: t.flows for name, t in fab.setup.compiled.tables.items()}
    if fab.controller is None:  # static mode installs the compiled tables (no guards, meters or groups)
        assert counts == {name: len(flows) for name, flows in compiled.items()}
    else:
        wanted = {name: len(flows) for name, flows in fab.setup.desired.items()}
        assert counts == wanted
        # host_mac = dmp: the controller installs the compiled tables plus the shipped configs' guards;
        # fast-failover groups only replace outputs (setup.desired has them resolved, every link up)
        # (classes on by default: the guards' host-ingress entries push the tag, as config.build asks)
        guarded = guard_flows(fab.fabric, fab.plan, compiled, source_check=True, punt_meters=True,
                              cos=fab.setup.compiled.cos is not None)
        assert {n: tuple(f) for n, f in fab.setup.desired.items()} == {n: tuple(f) for n, f in guarded.items()}
        cfg = load_config(fab.setup.config_path)
        for name, groups in cfg.groups.items():  # the groups are on the switches, fast-failover type
            out = subprocess.run([*fn.OFCTL, "dump-groups", fab.net.hf_prefix + name], capture_output=True,
                                 text=True, check=True).stdout
            assert out.count("type=ff") == len(groups) > 0, (name, out)
        st = fab.status
        assert st["rules_installed"] == st["rules_expected"] == sum(counts.values())
        assert st["switches_confirmed"] == st["switches_expected"] == len(fab.fabric.switches)
        assert all(s["confirmed"] for s in st["per_switch"].values())
    # the DMP echo entry of every host port, as compiled
    for h in fab.fabric.hosts:
        dmp = [f for f in fn.dump_flows(fab.net.hf_prefix + h.switch, table=TABLE_INGRESS) if "dl_type=0x88b5" in f.match]
        assert any(f"in_port={h.port}," in f.match + "," for f in dmp), (h, dmp)


@pytest.mark.parametrize("fab", ALL, indirect=True, ids=_ids)
def test_dmp_assigns_every_planned_mac_and_is_idempotent(fab: FabricRun):
    first = fn.run_dmp(fab.net)
    assert all(r["returncode"] == 0 for r in first.values()), first
    assert all(r["status"] in ("assigned", "already-assigned") for r in first.values())
    macs = fn.host_macs(fab.net)
    assert macs == dict(fab.plan.host_mac)
    for h, r in first.items():
        assert r["mac"] == fn.format_mac(fab.plan.host_mac[h])
    fab.dmp_done = True
    second = fn.run_dmp(fab.net)
    assert {r["status"] for r in second.values()} == {"already-assigned"}
    assert fn.host_macs(fab.net) == macs


@pytest.mark.parametrize("fab", ALL, indirect=True, ids=_ids)
def test_all_pairs_ping(fab: FabricRun):
    prepared(fab)
    res = all_pairs_ping(fab.net, fab.fabric)
    n = len(fab.fabric.hosts)
    assert res["pairs"] == n * (n - 1)
    assert res["lost"] == 0 and res["unreachable_pairs"] == 0, res


@pytest.mark.parametrize("fab", ALL, indirect=True, ids=_ids)
def test_injected_pause_arrives_on_the_port(fab: FabricRun):
    target = find_pause_targets(fab.fabric, fab.plan, fab.setup.desired)[0]
    bridge = fab.net.hf_prefix + target.switch

    def punted() -> int:
        return sum(f.n_packets for f in fn.dump_flows(bridge, table=TABLE_INGRESS, sync=True) if "dl_type=0x8808" in f.match)

    before, rx = punted(), fn.port_stats(bridge, target.port)["rx"]
    fn.inject_pause(fab.fabric, target.switch, target.port, 0, prefix=fab.net.hf_prefix)  # XON: changes nothing
    deadline = time.monotonic() + 3
    while punted() == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert punted() == before + 1  # exactly our frame, punted by the 0x8808 entry
    assert fn.port_stats(bridge, target.port)["rx"] >= rx + 1  # (LLDP from the peer may arrive too)
    with pytest.raises(fn.FabricNetError):
        host = fab.fabric.hosts[0]
        fn.inject_pause(fab.fabric, host.switch, host.port, 1)


def _lldp_allowance(res: dict) -> int:
    """Frames the paused port may still send during the pause: LLDP only (the controller's rounds, every
    lldp_interval = 1 s; a round delayed on a busy box can put two inside a window just under 1 s), no data."""
    return 1 + math.ceil(res["during"]["seconds"])


@pytest.mark.parametrize("fab", ALL, indirect=True, ids=_ids)
def test_pause_diverts_then_expiry_restores(fab: FabricRun):
    prepared(fab)
    target = find_pause_targets(fab.fabric, fab.plan, fab.setup.desired)[0]
    plan = pause_plan(fab.setup.link_speed_gbps, 1.5, None)
    assert plan["frames"] == 1  # one frame, 1.5 s
    comp = fab.setup.compiled
    assert comp.cos is not None  # the shipped configs run the deadlock-free default: classes on
    pfc = tuple(range(comp.cos_levels))  # PFC (802.1Qbb) for the classes in use, as a lossless fabric sends it
    res = pause_test(fab.net, fab.fabric, target, plan, fab.controller, Progress(quiet=True), pfc_classes=pfc)
    assert not res.get("error"), res
    assert res["frame_kind"] == f"pfc vector {(1 << comp.cos_levels) - 1:#04x}", res
    assert res["flipped"] and res["diverted"] and res["restored"], res
    assert 0.95 <= res["diverted_fraction"] <= 1.05 and res["during"]["tx"] <= _lldp_allowance(res), res
    assert res["ping_lost"] == 0, res
    if fab.controller is not None:
        assert res["flips"] == 2, res  # paused, then resumed at expiry
        assert len(res["reaction_ms"]) >= 1, "the controller reported no flip reaction time"
        status = fab.controller.status()
        assert status["pause"]["paused_ports"] == []
        assert status["pause"]["frames"] >= res["frames"]


@pytest.mark.parametrize("fab", [p for p in ALL if p[0].startswith("dragonfly")], indirect=True, ids=_ids)
def test_pcp_rises_on_the_global_hop_on_the_wire(fab: FabricRun):
    """tcpdump on the sending interfaces of a global link and of the hop after it: the tagged ping carries
    the PCP the tables say, and it is one higher after the global hop (top scheme)."""
    from pcp_capture import capture_step, choose_capture  # mininet/pcp_capture.py

    prepared(fab)
    target = choose_capture(fab.setup.compiled)
    assert target is not None and target.top.pcp is not None and target.after.pcp == target.top.pcp + 1
    step = capture_step(fab.net, fab.fabric, target, Progress(quiet=True))
    cap = step.fields["pcp_capture"]
    assert not step.failures, cap
    assert cap["raised"] and cap["global"]["pcp_seen"] == [target.top.pcp], cap
    assert cap["after_global"]["pcp_seen"] == [target.after.pcp] and cap["global"]["frames"] >= 1, cap


@pytest.mark.parametrize("fab", CONTROLLER, indirect=True, ids=_ids)
def test_pause_train_of_short_frames_holds_the_port(fab: FabricRun):
    """A congested neighbour keeps a port paused with frames of 3.4 ms, each sent before the previous expires.

    At the tests' 0.01 Gb/s, 66 quanta last 3.4 ms: the 10 Gb/s situation. The port must stay paused
    for the whole train: exactly 2 flips, all the traffic diverted. This holds because the controller keeps
    a port paused at least ``pause_hold_ms`` (50 ms) after the last PAUSE; without the hold the refreshes,
    handled a few ms late, arrive after each expiry and the port flaps.
    """
    prepared(fab)
    target = find_pause_targets(fab.fabric, fab.plan, fab.setup.desired)[0]
    plan = pause_plan(fab.setup.link_speed_gbps, 1.5, 66)
    assert plan["frames"] > 100 and 0.003 < plan["frame_s"] < 0.004
    res = pause_test(fab.net, fab.fabric, target, plan, fab.controller, Progress(quiet=True))
    assert res["flipped"] and res["restored"], res
    assert res["ping_lost"] == 0, res
    assert res["lapses"] == 0 and res["diverted_fraction"] >= 0.95 and res["during"]["tx"] <= _lldp_allowance(res), res


@pytest.mark.parametrize("fab", CONTROLLER, indirect=True, ids=_ids)
def test_controller_restart_loses_nothing(fab: FabricRun):
    """Fail-secure switches keep forwarding without a controller; a restarted one reconciles to a no-op."""
    prepared(fab)
    ctl = fab.controller
    n = len(fab.fabric.switches)
    targets = find_pause_targets(fab.fabric, fab.plan, fab.setup.desired)
    pings = [SteadyPing(fab.net, targets[0].src, targets[0].dst)]
    last = fab.fabric.hosts[-1].name
    if last not in (targets[0].src, targets[0].dst):
        pings.append(SteadyPing(fab.net, last, targets[0].src))
    try:
        time.sleep(0.5)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            flows_before = {sw.name: fn.dump_flows(fab.net.hf_prefix + sw.name) for sw in fab.fabric.switches}
            t_stop = time.monotonic()
            rc = ctl.stop(sig)
            assert rc == -sig or (sig == signal.SIGTERM and rc == 0), f"controller exit status {rc} after {sig!r}"
            time.sleep(1.0)  # no controller: the switches forward on their own
            assert fn.flow_counts(fab.net) == {k: len(v) for k, v in flows_before.items()}
            ctl.start()
            status = ctl.wait_ready(n, READY_TIMEOUT)
            changes = {
                name: (s.get("added"), s.get("modified"), s.get("deleted"))
                for name, s in status["per_switch"].items()
                if s.get("added") or s.get("modified") or s.get("deleted")
            }
            assert not changes, f"reconcile after {sig!r} changed flows: {changes}"
            age = time.monotonic() - t_stop
            for sw in fab.fabric.switches:
                after = fn.dump_flows(fab.net.hf_prefix + sw.name)
                assert len(after) == len(flows_before[sw.name])
                young = [f for f in after if f.duration < age - 0.5]
                assert not young, f"{sw.name}: flows re-added after the restart: {young[:3]}"
            time.sleep(0.5)
    finally:
        results = [p.stop() for p in pings]
    for r in results:
        assert r["received"] > 100, r
        assert r["lost"] == 0, f"pings lost across the controller restarts: {r}"
