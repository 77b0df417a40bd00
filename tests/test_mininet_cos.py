"""Real Open vSwitch + Mininet with the controller: Valiant routing and VLAN-PCP classes of service.

One net per case (module-scoped fixture, one after the other), ``hpcfabric controller`` installing:

* ``dragonfly-a2-p1-h1-valiant``: the shipped config, ``routing = valiant`` (CoS default: top, 3 levels);
* ``dragonfly-a2-p1-h1-cos``: the shipped conditional config with ``cos = on`` (top, 3 levels);
* ``fb-2d-3x3-cos``: the shipped config, conditional, ``cos = on`` (hop, 2 levels) with fast-failover groups.

Checks: every switch holds exactly the configured flows (compiled + guards), no OFPT_ERROR, the controller
restart reconciles to a no-op (the switch reports the vlan_vid/vlan_pcp matches back as we send them),
DMP works, all-pairs ping loses nothing, the PCP-step entries count the frames the routes make them count,
and frames on a fabric link carry the PCP the reference pipeline predicts while frames to hosts are untagged
(tcpdump -e).

Run under ``flock /tmp/hpcfabric-ovs.lock`` (shared with the other OVS tests); skipped unless root with
Open vSwitch running. Nothing here calls ``mn -c``.
"""

from __future__ import annotations

import argparse
import configparser
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = [
    pytest.mark.mininet,
    pytest.mark.filterwarnings("ignore:distutils Version classes are deprecated:DeprecationWarning"),
]

from mininet_gate import require_mininet  # noqa: E402

fn = require_mininet()

from controller_proc import Controller, controller_available, free_port  # noqa: E402  (mininet/controller_proc.py)
from fabric_setup import write_config  # noqa: E402  (mininet/fabric_setup.py)
from reachability import all_pairs_ping  # noqa: E402  (mininet/reachability.py)
from runkit import CheckFailed  # noqa: E402  (mininet/runkit.py)
from mininet.log import setLogLevel  # noqa: E402

from hpcfabric.config import load_config  # noqa: E402
from hpcfabric.rules.flows import TABLE_INGRESS, RuleClass, cookie_class  # noqa: E402
from hpcfabric.rules.guards import guard_flows  # noqa: E402
from hpcfabric.verify.reference.pipeline import Frame, Pipeline  # noqa: E402

setLogLevel("error")

#: case -> (shipped config, overrides of [hpcfabric], expected routing, expected "scheme/levels")
CASES = {
    "dragonfly-a2-p1-h1-valiant": ("dragonfly-a2-p1-h1-valiant.conf", {}, "valiant", "top/3"),
    "dragonfly-a2-p1-h1-cos": ("dragonfly-a2-p1-h1.conf", {"cos": "on"}, "conditional", "top/3"),
    "fb-2d-3x3-cos": ("fb-2d-3x3-cos.conf", {}, "conditional", "hop/2"),
}
READY_TIMEOUT = 90
COS_STEP = 2 << 32  # compiler.COOKIE_COS_STEP


class Run:
    def __init__(self, name, net, cfg, controller, status):
        self.name, self.net, self.cfg, self.controller, self.status = name, net, cfg, controller, status
        self.prepared = False

    def prepare(self):
        if not self.prepared:
            res = fn.run_dmp(self.net)
            bad = {h: r for h, r in res.items() if r.get("returncode") != 0}
            assert not bad, f"DMP failed: {bad}"
            assert fn.host_macs(self.net) == dict(self.cfg.plan.host_mac)
            fn.set_static_neighbours(self.net, self.cfg.plan)
            self.prepared = True
        return self


def _config(case: str, tmp: Path, port: int) -> Path:
    shipped, overrides, _, _ = CASES[case]
    args = argparse.Namespace(config=str(ROOT / "configs" / shipped), topology=None, addressing=None, routing=None,
                              link_speed_gbps=None)
    path = write_config(args, tmp, port, tmp / "status.json")
    if overrides:
        parser = configparser.ConfigParser(interpolation=None, default_section="\0none")
        parser.optionxform = str  # type: ignore[assignment,method-assign]
        parser.read(path, encoding="utf-8")
        parser["hpcfabric"].update(overrides)
        with open(path, "w", encoding="utf-8") as f:
            parser.write(f)
    return path


@pytest.fixture(scope="module", params=list(CASES))
def run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    if not controller_available():
        pytest.fail("hpcfabric.controller is missing")
    case = request.param
    tmp = tmp_path_factory.mktemp(case)
    port = free_port()
    path = _config(case, tmp, port)
    cfg = load_config(path)
    controller = Controller(path, tmp / "status.json", port, tmp / "controller.log")
    net = None
    try:
        controller.start()
        net = fn.build_net(cfg.fabric, cfg.plan, controller_port=port, seed=11, prefix="c")
        status = controller.wait_ready(len(cfg.fabric.switches), READY_TIMEOUT)
        yield Run(case, net, cfg, controller, status)
    except CheckFailed as err:
        pytest.fail(f"{case}: the controller did not come up: {err}")
    finally:
        if net is not None:
            net.stop()
        controller.stop()


def _bridge(run: Run, switch: str) -> str:
    return run.net.hf_prefix + switch


def test_config_is_what_the_case_says(run: Run):
    _, _, routing, cos = CASES[run.name]
    assert run.cfg.routing == routing and run.cfg.summary()["cos"] == cos
    assert run.status["routing"] == routing


def test_every_configured_flow_is_installed_without_errors(run: Run):
    cfg = run.cfg
    compiled = {n: t.flows for n, t in cfg.compiled.tables.items()}
    guarded = guard_flows(cfg.fabric, cfg.plan, compiled, source_check=True, punt_meters=True, cos=True)
    from hpcfabric.verify.reference.pipeline import resolve_groups

    assert {n: resolve_groups(f, cfg.groups.get(n, ()), ()) for n, f in cfg.desired.items()} == guarded
    counts = fn.flow_counts(run.net)
    assert counts == {n: len(f) for n, f in cfg.desired.items()}
    st = run.status
    assert st["rules_installed"] == st["rules_expected"] == sum(counts.values()) == cfg.rules_expected
    assert st["switches_confirmed"] == len(cfg.fabric.switches)
    assert st["errors"]["switch_errors"] == 0 and st["errors"]["sync_failures"] == 0, st["errors"]
    # the tagged entries really are on the switches, with their tag prerequisite
    for sw in cfg.fabric.switches:
        flows = fn.dump_flows(_bridge(run, sw.name))
        steps = [f for f in flows if cookie_class(f.cookie) == RuleClass.INFRA and f.cookie & (3 << 32) == COS_STEP]
        assert steps and all("dl_vlan_pcp=" in f.match and "vlan_tci" not in f.match for f in steps), steps[:2]
        pops = [f for f in flows if "pop_vlan" in f.actions]
        if cfg.fabric.hosts_on(sw.name):
            assert pops and all("vlan_tci=0x1000/0x1000" in f.match for f in pops), pops[:2]
    if cfg.groups:
        for name, groups in cfg.groups.items():
            out = subprocess.run([*fn.OFCTL, "dump-groups", _bridge(run, name)], capture_output=True, text=True,
                                 check=True).stdout
            assert out.count("type=ff") == len(groups) > 0


def test_dmp_and_all_pairs_ping(run: Run):
    run.prepare()
    res = all_pairs_ping(run.net, run.cfg.fabric)
    n = len(run.cfg.fabric.hosts)
    assert res["pairs"] == n * (n - 1) and res["lost"] == 0 and res["unreachable_pairs"] == 0, res


def _walk(cfg, src: str, dst: str) -> list[tuple[str, int, int | None]]:
    """(switch, egress port, PCP as sent) of every hop of src -> dst through the installed tables."""
    pipes = {n: Pipeline(f, cfg.groups.get(n, ())) for n, f in cfg.desired.items()}
    s = next(h for h in cfg.fabric.hosts if h.name == src)
    sw, fr = s.switch, Frame(in_port=s.port, eth_src=cfg.plan.host_mac[src], eth_dst=cfg.plan.host_mac[dst])
    hops = []
    for _ in range(len(cfg.fabric.switches) + 1):
        res = pipes[sw].process(fr)
        assert len(res.outputs) == 1, (src, dst, sw)
        port, out = res.outputs[0]
        hops.append((sw, port, out.vlan_pcp))
        peer = cfg.fabric.peer(sw, port)
        if peer.is_host:
            return hops
        sw, fr = peer.node, Frame(in_port=peer.port, eth_src=out.eth_src, eth_dst=out.eth_dst, vlan_pcp=out.vlan_pcp)
    raise AssertionError(f"{src} -> {dst} does not end")


def test_pcp_step_counters_follow_the_routes(run: Run):
    """After the all-pairs ping: PCP 0 -> 1 steps counted frames on every case; the 1 -> 2 steps only where
    routes cross two global links (Valiant); unpaused conditional Dragonfly routes cross one."""
    run.prepare()
    all_pairs_ping(run.net, run.cfg.fabric)
    fn.sync_stats()
    by_k: dict[int, int] = {}
    for sw in run.cfg.fabric.switches:
        for f in fn.dump_flows(_bridge(run, sw.name), table=TABLE_INGRESS):
            if cookie_class(f.cookie) == RuleClass.INFRA and f.cookie & (3 << 32) == COS_STEP:
                k = f.cookie >> 24 & 0xFF
                by_k[k] = by_k.get(k, 0) + f.n_packets
    predicted = set()
    hosts = [h.name for h in run.cfg.fabric.hosts]
    for a in hosts:
        for b in hosts:
            if a != b:
                hops = _walk(run.cfg, a, b)[:-1]  # fabric links only (the delivery pops)
                for (_, _, before), (_, _, after) in zip(hops, hops[1:]):
                    if after != before:
                        predicted.add(before)
    assert {k for k, n in by_k.items() if n > 0} == predicted, (by_k, predicted)
    if run.name.endswith("valiant"):
        assert predicted == {0, 1}
    elif run.name.startswith("dragonfly"):
        assert predicted == {0} and by_k.get(1) == 0


_VLAN = re.compile(r"vlan (\d+), p (\d+), ethertype IPv4")


def _capture(intf: str, action, seconds: float = 4.0) -> list[str]:
    """ICMP echo frames seen on switch-side interface ``intf`` (tcpdump -e) while ``action()`` runs."""
    proc = subprocess.Popen(["tcpdump", "-i", intf, "-e", "-n", "-l", "-Q", "out", "icmp or (vlan and icmp)"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(1.0)  # tcpdump attaches
        action()
        time.sleep(0.5)
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=seconds)
    return [line for line in out.splitlines() if "ICMP echo" in line]


def test_fabric_links_carry_the_intended_pcp_and_hosts_get_untagged_frames(run: Run):
    run.prepare()
    cfg = run.cfg
    hosts = [h.name for h in cfg.fabric.hosts]
    # the pair whose path leaves a switch with the highest PCP on a fabric link
    best = max(((a, b, hop) for a in hosts for b in hosts if a != b for hop in _walk(cfg, a, b)[:-1]),
               key=lambda x: x[2][2])
    src, dst, (sw, port, pcp) = best
    assert pcp == (2 if run.name.endswith("valiant") else 1)
    ip = run.net.hf_ips[dst]
    ping = lambda: fn.node(run.net, src).cmd(f"ping -n -c 5 -i 0.2 -W 1 {ip}")  # noqa: E731
    lines = _capture(fn.intf_name(sw, port, run.net.hf_prefix), ping)
    requests = [line for line in lines if "echo request" in line]
    assert len(requests) >= 5, lines
    assert all(_VLAN.search(line) and _VLAN.search(line).groups() == ("0", str(pcp)) for line in requests), requests
    # the last hop delivers to the host: untagged
    last_sw, last_port, last_pcp = _walk(cfg, src, dst)[-1]
    assert last_pcp is None
    lines = _capture(fn.intf_name(last_sw, last_port, run.net.hf_prefix), ping)
    requests = [line for line in lines if "echo request" in line]
    assert len(requests) >= 5 and not any("802.1Q" in line or "vlan" in line for line in requests), requests


def test_controller_restart_reconciles_to_nothing(run: Run):
    """The switch reports the tagged entries back as the controller sends them: a restart changes nothing."""
    ctl = run.controller
    ctl.stop(signal.SIGTERM)
    ctl.start()
    status = ctl.wait_ready(len(run.cfg.fabric.switches), READY_TIMEOUT)
    changes = {n: (s.get("added"), s.get("modified"), s.get("deleted")) for n, s in status["per_switch"].items()
               if s.get("added") or s.get("modified") or s.get("deleted")}
    assert not changes, changes
    assert all(s.get("kept") == s.get("rules_expected") for s in status["per_switch"].values())
    assert status["errors"]["switch_errors"] == 0


def test_full_size_frames_cross_tagged_links(run: Run):
    """1500-byte IP packets (1518-byte tagged frames on fabric links) pass the veths without raising their MTU:
    the kernel allows 4 more bytes for a VLAN-tagged frame (packet socket send, veth forward)."""
    run.prepare()
    hosts = [h.name for h in run.cfg.fabric.hosts]
    src, dst = max(((a, b) for a in hosts for b in hosts if a != b),
                   key=lambda p: max(pcp or 0 for _, _, pcp in _walk(run.cfg, *p)))
    out = fn.node(run.net, src).cmd(f"ping -n -M do -s 1472 -c 3 -i 0.2 -W 2 {run.net.hf_ips[dst]}")
    assert " 0% packet loss" in out and "1480 bytes from" in out, out


def test_lldp_discovery_is_unaffected_by_the_tags(run: Run):
    """LLDP packet-outs are untagged and punted above the CoS entries: every link is discovered."""
    deadline = time.monotonic() + 15
    status = run.controller.status()
    while status.get("links_discovered") != len(run.cfg.fabric.links) and time.monotonic() < deadline:
        time.sleep(0.5)
        status = run.controller.status()
    assert status["links_discovered"] == status["links_expected"] == len(run.cfg.fabric.links), status.get("missing_links")
    assert not status["miswired"] and not status["extra_links"]
