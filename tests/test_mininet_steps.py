"""The Mininet step library without a net (no root, no Open vSwitch): the Fabric -> Mininet Topo adapter
(model dpids and port numbers, node classes), the JSON report, the PAUSE-target choice, the DMP check and
the runners' one config writer.

The steps that need a net are exercised by tests/test_mininet.py and the runners' tests.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from contextlib import redirect_stdout
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "mininet") not in sys.path:
    sys.path.insert(0, str(ROOT / "mininet"))

pytest.importorskip("mininet.topo", reason="Debian's Mininet is not installed")

from dmp_hosts import DmpOutcome  # noqa: E402  (mininet/dmp_hosts.py)
from fabric_setup import read_conf, setup_from_topology, write_conf, write_config  # noqa: E402
from fabric_topo import FabricHost, FabricTopo  # noqa: E402
from mininet.link import Link, TCLink  # noqa: E402
from mininet.node import OVSSwitch  # noqa: E402
from pause_check import choose_pause_target, pause_skip_reason  # noqa: E402
from runkit import Report, StepResult, UsageError  # noqa: E402

from hpcfabric.rules.addressing import plan_addresses  # noqa: E402
from hpcfabric.topology import dragonfly_fabric  # noqa: E402


def test_topo_carries_the_models_dpids_ports_and_node_classes():
    fabric = dragonfly_fabric(2, 1, 1)
    plan = plan_addresses(fabric, "compact")
    topo = FabricTopo(fabric, plan, None, "xy", 7)
    assert sorted(topo.switches()) == sorted("xy" + s.name for s in fabric.switches)
    for sw in fabric.switches:
        info = topo.nodeInfo("xy" + sw.name)
        assert info["cls"] is OVSSwitch and info["dpid"] == "%016x" % sw.dpid
        assert (info["datapath"], info["protocols"], info["failMode"]) == ("user", "OpenFlow13", "secure")
    want = {frozenset({("xy" + h.name, 0), ("xy" + h.switch, h.port)}) for h in fabric.hosts}
    want |= {frozenset({("xy" + l.a, l.a_port), ("xy" + l.b, l.b_port)}) for l in fabric.links}
    got = {frozenset({(i["node1"], i["port1"]), (i["node2"], i["port2"])}) for _, _, i in topo.links(withInfo=True)}
    assert got == want
    assert all(i["cls"] is Link for _, _, i in topo.links(withInfo=True))
    planned = set(plan.host_mac.values())
    for rank, h in enumerate(fabric.hosts):
        info = topo.nodeInfo("xy" + h.name)
        assert info["cls"] is FabricHost and info["ip"] == f"10.0.0.{rank + 1}/8"
        mac = int(info["mac"].replace(":", ""), 16)
        assert mac >> 40 & 0x03 == 0 and mac not in planned  # globally administered unicast, never a planned MAC
    again = FabricTopo(fabric, plan, 5.0, "xy", 7)
    assert [again.nodeInfo("xy" + h.name)["mac"] for h in fabric.hosts] == [
        topo.nodeInfo("xy" + h.name)["mac"] for h in fabric.hosts]  # seeded
    assert all(i["cls"] is TCLink and i["bw"] == 5.0 for _, _, i in again.links(withInfo=True))


def test_report_merges_steps_and_prints_one_json_line(capsys):
    report = Report("t", mode="static", passed=False)
    report.add(StepResult({"ping_lost": 2}, ["2 ping(s) lost"]))
    report.update(ready_s=0.5)
    out = io.StringIO()
    with redirect_stdout(out):
        report.emit(not report.failures, seconds=1.25, echo=True)
    line = json.loads(out.getvalue().strip().splitlines()[-1])
    assert line == {"mode": "static", "ping_lost": 2, "ready_s": 0.5, "failures": ["2 ping(s) lost"], "passed": False,
                    "seconds": 1.25}
    assert "[t] FAILED: 2 ping(s) lost" in capsys.readouterr().err


def test_pause_target_and_skip_reasons():
    args = type("A", (), {"topology": str(ROOT / "topologies" / "dragonfly-a2-p1-h1.yaml"), "addressing": None,
                          "routing": "conditional", "link_speed_gbps": None})()
    setup = setup_from_topology(args)
    target = choose_pause_target(setup.fabric, setup.plan, setup.desired, None)
    # the global port: with the h = 1 neighbour detour it has a real alternative (local port 3)
    assert (target.switch, target.port, target.src, target.alt_port) == ("g0s0", 2, "g0s0h0", 3)
    with pytest.raises(UsageError, match="not a fabric port"):
        choose_pause_target(setup.fabric, setup.plan, setup.desired, f"g0s0:{setup.fabric.hosts_on('g0s0')[0].port}")
    assert pause_skip_reason("conditional", False) is None
    assert "no PORT_STATE" in pause_skip_reason("minimal", False)
    assert "--no-pause" in pause_skip_reason("conditional", True)


def test_dmp_outcome_names_the_hosts_without_their_planned_mac():
    planned = {"a": 0x020000000001, "b": 0x020000000002}
    ok = DmpOutcome({"a": {"returncode": 0, "rtt_ms": 0.5}, "b": {"returncode": 0}}, dict(planned), planned, 0.123)
    assert ok.problem() is None and ok.fields() == {"dmp_assigned": 2, "dmp_s": 0.12, "dmp_rtt_ms_max": 0.5, "dmp_rounds": 1}
    bad = DmpOutcome({"a": {"returncode": 0}, "b": {"returncode": 1, "stderr": "timeout"}},
                     {"a": planned["a"], "b": 0x001122334455}, planned, 1.0)
    assert bad.assigned == ["a"] and bad.wrong == ["b"]
    assert bad.problem() == ("1 host(s) without their planned MAC, e.g. b: has 00:11:22:33:44:55, "
                             "plan 02:00:00:00:00:02 (timeout)")


def test_config_writer_lays_settings_over_a_shipped_config(tmp_path):
    shipped = ROOT / "configs" / "dragonfly-a2-p1-h1.conf"
    assert not read_conf(shipped)["hpcfabric"]["topology"].strip().startswith("/")  # relative in the shipped file
    out = write_conf(tmp_path / "c.conf", {"hpcfabric": {"routing": "valiant", "reload_poll": 0},
                                          "metrics": {"listen": ""}}, shipped, port=6999, status=tmp_path / "s.json")
    got, base = read_conf(out), read_conf(shipped)
    assert got["hpcfabric"]["topology"] == str(ROOT / "topologies" / "dragonfly-a2-p1-h1.yaml")  # absolute now
    assert (got["hpcfabric"]["routing"], got["hpcfabric"]["reload_poll"]) == ("valiant", "0")
    assert got["hpcfabric"]["status_file"] == str(tmp_path / "s.json") and got["metrics"]["listen"] == ""
    assert (got["openflow"]["listen_host"], got["openflow"]["listen_port"]) == ("127.0.0.1", "6999")
    assert dict(got["guards"]) == dict(base["guards"])  # the rest as shipped
    write_conf(out, {"hpcfabric": {"traffic": "/x.csv"}}, out)  # rewritten in place, atomically
    assert read_conf(out)["hpcfabric"]["traffic"] == "/x.csv" and read_conf(out)["hpcfabric"]["routing"] == "valiant"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.conf"]


def test_run_fabric_config_overrides_and_bad_arguments(tmp_path):
    def args(**kw):
        return argparse.Namespace(**{"config": None, "topology": None, "addressing": None, "routing": None,
                                     "link_speed_gbps": None, **kw})

    path = write_config(args(topology=str(ROOT / "topologies" / "fb-2d-3x3.yaml"), addressing="per-switch"), tmp_path,
                        7000, tmp_path / "s.json")
    hf = read_conf(path)["hpcfabric"]
    # per-switch addressing on a Flattened Butterfly: no conditional routing, so minimal by default
    assert (hf["addressing"], hf["widths"], hf["routing"]) == ("per-switch", "", "minimal")
    with pytest.raises(UsageError, match="does not exist"):
        write_config(args(config=str(tmp_path / "nope.conf")), tmp_path, 1, tmp_path / "s.json")
    with pytest.raises(UsageError, match="no topology"):
        write_config(args(), tmp_path, 1, tmp_path / "s.json")


@pytest.mark.skipif(sys.platform != "linux" or __import__("os").geteuid() != 0, reason="the preamble checks root first")
def test_runner_preamble_exit_codes_and_json_line(capsys):
    from fabric_topo import ovs_running
    from fabric_up import run_main
    from runkit import CheckFailed

    from hpcfabric.errors import ConfigError

    if not ovs_running():
        pytest.skip("Open vSwitch is not running")

    def raising(err):
        def body(run):
            (run.work / "log").write_text("kept")  # a failed run keeps its work directory
            raise err
        return body

    # body, exit code; an empty work directory goes whatever the outcome, one with files stays when the run failed
    cases = [(lambda run: None, 0), (lambda run: run.report.fail("a check"), 1), (raising(CheckFailed("x")), 1),
             (raising(UsageError("x")), 2), (raising(ConfigError("bad", field="f")), 2), (raising(KeyboardInterrupt()), 130),
             (raising(RuntimeError("boom")), 1)]
    for i, (body, code) in enumerate(cases):
        assert run_main("t", body, quiet=True, echo=False, passed=False) == code
        summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert summary["passed"] is (code == 0) and ("logs" in summary) is (i >= 2), summary
        if i >= 2:
            assert Path(summary["logs"], "log").read_text() == "kept"
            __import__("shutil").rmtree(summary["logs"])
