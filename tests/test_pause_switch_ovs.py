"""Switch-local PAUSE reaction and the CNM trigger against real Open vSwitch bridges.

Two userspace bridges play g0s0 (dpid 1) and g0s1 (dpid 2) of
topologies/dragonfly-a2-p1-h1.yaml, cabled g0s0:3 - g0s1:3 (local link),
g0s0:2 has a free veth end (its global link), g0s0:1 a host veth. The
controller runs with ``pause_reaction = switch`` and ``cnm = on``.

Checked: the learn/resubmit pipeline is installed and survives a controller
restart untouched (the learned entries too); a PAUSE injected on g0s0:3
makes the switch divert the traffic of its host to the Valiant port (2) with
no flow-mod from the controller -- also with the controller killed -- and it
reverts after the hold; a CNM injected on g0s0:2 flips that port through the
controller (feedback-derived hold) and expires.

Needs root and ovs-vsctl (skipped otherwise); everything created is removed
by name/PID at the end. Wrap runs in ``flock /tmp/hpcfabric-ovs.lock``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpcfabric.rules.addressing import format_mac
from hpcfabric.protocols.cnm import build_cnm
from hpcfabric.config import load_config
from hpcfabric.protocols.pause import build_pause

ROOT = Path(__file__).resolve().parent.parent
HPCFABRIC = [sys.executable, "-m", "hpcfabric.cli"]  # the interpreter running the tests, whichever venv it is
TOPOLOGY = ROOT / "topologies" / "dragonfly-a2-p1-h1.yaml"

pytestmark = [
    pytest.mark.ovs,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for OVS and raw sockets"),
    pytest.mark.skipif(shutil.which("ovs-vsctl") is None, reason="ovs-vsctl not installed"),
]

TAG = f"hs{os.getpid() % 1000:03d}"
SWITCHES = {"g0s0": 1, "g0s1": 2}
HOLD_S = 1


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), check=check, capture_output=True, text=True, timeout=60)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def inject(ifname: str, frame: bytes) -> None:
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as s:
        s.bind((ifname, 0))
        s.send(frame)


class Lab:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.port = free_port()
        self.status_path = tmp / "status.json"
        self.config_path = tmp / "switch.conf"
        self.config_path.write_text(
            f"[hpcfabric]\ntopology = {TOPOLOGY}\naddressing = compact\nrouting = conditional\n"
            f"pause_reaction = switch\nswitch_hold_s = {HOLD_S}\ncnm = on\ncnm_max_hold_ms = 300\n"
            f"link_speed_gbps = 10\nstatus_file = {self.status_path}\nlldp_interval = 1\nlog_level = INFO\n"
            f"[openflow]\nlisten_host = 127.0.0.1\nlisten_port = {self.port}\n"
        )
        self.config = load_config(self.config_path)
        self.bridges: list[str] = []
        self.veths: list[str] = []
        self.proc: subprocess.Popen | None = None
        self.log = tmp / "controller.log"

    def br(self, name: str) -> str:
        return f"{TAG}{name}"

    def build(self) -> None:
        for name, dpid in SWITCHES.items():
            b = self.br(name)
            self.bridges.append(b)
            sh("ovs-vsctl", "--may-exist", "add-br", b, "--", "set", "bridge", b, "datapath_type=netdev",
               "protocols=OpenFlow13", "fail_mode=secure", f"other_config:datapath-id={dpid:016x}",
               "other_config:disable-in-band=true")
        for a, b, plugs in ((f"{TAG}la", f"{TAG}lb", [("g0s0", 3, "a"), ("g0s1", 3, "b")]),
                            (f"{TAG}ga", f"{TAG}gb", [("g0s0", 2, "a")]),
                            (f"{TAG}ha", f"{TAG}hb", [("g0s0", 1, "a")])):
            sh("ip", "link", "add", a, "type", "veth", "peer", "name", b)
            self.veths.append(a)
            for n in (a, b):
                sh("ip", "link", "set", n, "up")
                sh("sysctl", "-qw", f"net.ipv6.conf.{n}.disable_ipv6=1", check=False)
            for sw, port, end in plugs:
                ifname = a if end == "a" else b
                sh("ovs-vsctl", "add-port", self.br(sw), ifname, "--", "set", "interface", ifname,
                   f"ofport_request={port}")

    def start(self) -> None:
        if self.status_path.exists():
            self.status_path.unlink()
        self.proc = subprocess.Popen([*HPCFABRIC, "controller", "--config", str(self.config_path)],
                                     stdout=self.log.open("a"), stderr=subprocess.STDOUT)
        self.wait(lambda s: s.get("running"), 30, "controller up")
        for b in self.bridges:
            sh("ovs-vsctl", "set-controller", b, f"tcp:127.0.0.1:{self.port}", "--", "set", "controller", b,
               "max_backoff=1000")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is None:
            return
        self.proc.send_signal(sig)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def status(self) -> dict:
        try:
            return json.loads(self.status_path.read_text())
        except (OSError, ValueError):
            return {}

    def wait(self, pred, timeout: float, what: str) -> dict:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"controller exited:\n{self.log.read_text()[-3000:]}")
            st = self.status()
            if st and pred(st):
                return st
            time.sleep(0.05)
        raise AssertionError(f"timeout waiting for {what}; status: {json.dumps(self.status())[:1500]}\n"
                             f"log:\n{self.log.read_text()[-3000:]}")

    def dump(self, switch: str, table: int | None = None) -> list[str]:
        args = ["ovs-ofctl", "-O", "OpenFlow13", "dump-flows", self.br(switch)]
        if table is not None:
            args.append(f"table={table}")
        return [line for line in sh(*args).stdout.splitlines() if "cookie=" in line]

    def learned(self, switch: str) -> list[str]:
        return [line for line in self.dump(switch, 4) if "priority=100" in line]

    def outputs(self, switch: str, dst: int) -> list[int]:
        """OpenFlow output ports of a data frame from the host port to ``dst`` (ofproto/trace)."""
        out = sh("ovs-appctl", "ofproto/trace", self.br(switch),
                 f"in_port=1,dl_src=02:00:00:00:00:00,dl_dst={format_mac(dst)},dl_type=0x0800").stdout
        return [int(p) for p in re.findall(r"^\s+output:(\d+)", out, re.M)]

    def cleanup(self) -> None:
        self.stop()
        for b in self.bridges:
            sh("ovs-vsctl", "--if-exists", "del-br", b, check=False)
        for v in self.veths:
            sh("ip", "link", "del", v, check=False)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    if sh("ovs-vsctl", "--timeout=5", "show", check=False).returncode != 0:
        sh("/usr/share/openvswitch/scripts/ovs-ctl", "start", "--system-id=random", "--no-monitor")
    lab = Lab(tmp_path_factory.mktemp("switch-pause"))
    try:
        lab.build()
        lab.start()
        lab.wait(lambda s: s.get("switches_confirmed") == 2, 60, "2 switches confirmed")
        yield lab
    finally:
        lab.cleanup()


def _far_dst(lab: Lab) -> int:
    """A host g0s0 reaches over its local port 3 with a default (conditional) rule: g1s0h0."""
    return lab.config.plan.host_mac["g1s0h0"]


def _wait_until(pred, timeout: float, what: str, step: float = 0.02):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = pred()
        if got:
            return got
        time.sleep(step)
    raise AssertionError(f"timeout: {what}")


def test_switch_pipeline_installed_and_restart_keeps_it(lab):
    st = lab.status()
    for name in SWITCHES:
        expected = lab.config.desired[name]
        assert len(lab.dump(name)) == len(expected) == st["per_switch"][name]["rules_installed"]
        for table in range(6):
            assert len(lab.dump(name, table)) == sum(1 for f in expected if f.table == table), (name, table)
    ingress = [line for line in lab.dump("g0s0", 0) if "dl_type=0x8808" in line and "in_port=3" in line]
    assert len(ingress) == 1 and "learn(table=4" in ingress[0] and f"hard_timeout={HOLD_S}" in ingress[0]
    assert "CONTROLLER" in ingress[0]
    # a restart decodes what OVS reports back (learn, resubmit, reg0) as equal: nothing sent
    lab.stop(signal.SIGKILL)
    lab.start()
    st = lab.wait(lambda s: s.get("switches_confirmed") == 2, 60, "confirmed after restart")
    for name in SWITCHES:
        row = st["per_switch"][name]
        assert (row["added"], row["modified"], row["deleted"], row["foreign"]) == (0, 0, 0, 0), row


def test_pause_is_handled_by_the_switch_without_a_flow_mod(lab):
    dst = _far_dst(lab)
    assert lab.outputs("g0s0", dst) == [3]
    _wait_until(lambda: not lab.learned("g0s0"), 5, "no override left from an earlier test")
    st0 = lab.status()
    t0 = time.monotonic()
    inject(f"{TAG}lb", build_pause(bytes.fromhex("020000000202"), 0xFFFF))  # arrives on g0s0:3
    (line,) = _wait_until(lambda: lab.learned("g0s0"), 3, "override learned")
    assert "metadata=0x3/0xffff" in line and "load:0x1->NXM_NX_REG0[0]" in line and f"hard_timeout={HOLD_S}" in line
    assert lab.outputs("g0s0", dst) == [2]  # the host's frames take their Valiant port
    st = lab.wait(lambda s: s["pause"]["switch_local_frames"] > st0["pause"]["switch_local_frames"], 3, "copy counted")
    assert st["pause"]["flips"] == st0["pause"]["flips"] and st["pause"]["flow_mods"] == st0["pause"]["flow_mods"]
    assert st["pause"]["switch_local_ports"].get("g0s0:3", 0) >= 1 and st["pause"]["reaction"] == "switch"
    # a reconciliation while the override is present leaves it alone
    lab.stop(signal.SIGKILL)
    lab.start()
    st = lab.wait(lambda s: s.get("switches_confirmed") == 2, 60, "confirmed")
    assert st["per_switch"]["g0s0"]["deleted"] == 0 and st["per_switch"]["g0s0"]["foreign"] == 0
    if time.monotonic() - t0 < HOLD_S:
        assert lab.learned("g0s0")
    # reverts by itself after the hold (OVS checks hard timeouts about once a second)
    _wait_until(lambda: not lab.learned("g0s0"), HOLD_S + 4, "override expired")
    assert time.monotonic() - t0 >= HOLD_S - 0.05
    assert lab.outputs("g0s0", dst) == [3]


def test_switch_reacts_with_the_controller_killed(lab):
    dst = _far_dst(lab)
    _wait_until(lambda: not lab.learned("g0s0"), 5, "no override left")
    lab.stop(signal.SIGKILL)
    try:
        time.sleep(0.3)
        inject(f"{TAG}lb", build_pause(bytes.fromhex("020000000202"), 0xFFFF))
        _wait_until(lambda: lab.learned("g0s0"), 3, "override learned without a controller")
        assert lab.outputs("g0s0", dst) == [2]
        _wait_until(lambda: not lab.learned("g0s0"), HOLD_S + 4, "override expired without a controller")
        assert lab.outputs("g0s0", dst) == [3]
    finally:
        lab.start()
        lab.wait(lambda s: s.get("switches_confirmed") == 2, 60, "confirmed again")


def _port_state(lab: Lab, port: int) -> str:
    (line,) = [ln for ln in lab.dump("g0s0", 2) if f"metadata={port:#x}/0xffff" in ln]
    return line.split("actions=")[1]


def test_cnm_on_a_fabric_port_flips_it_and_expires(lab):
    lab.wait(lambda s: s.get("switches_confirmed") == 2, 60, "confirmed")
    assert _port_state(lab, 2) == "resubmit(,4),resubmit(,5)"
    st0 = lab.status()
    rp = lab.config.plan.host_mac["g0s0h0"]
    frame = build_cnm(rp.to_bytes(6, "big"), bytes.fromhex("020000000502"), 63, cpid=0x77)
    t0 = time.monotonic()
    inject(f"{TAG}gb", frame)  # arrives on g0s0:2 from its global neighbour
    st = lab.wait(lambda s: "g0s0:2" in s["pause"]["paused_ports"], 3, "g0s0:2 paused by the CNM")
    assert st["cnm"]["flips"] == st0["cnm"]["flips"] + 1 and st["cnm"]["used"] == st0["cnm"]["used"] + 1
    assert _port_state(lab, 2) == "goto_table:3"
    st = lab.wait(lambda s: s["pause"]["paused_ports"] == [], 3, "CNM hold expired")
    assert time.monotonic() - t0 >= 0.25  # 300 ms x 63/63
    assert _port_state(lab, 2) == "resubmit(,4),resubmit(,5)"
    # a CNM from the host port is not even copied to the controller (snoop entries sit on fabric ports only)
    frames = lab.status()["cnm"]["frames"]
    inject(f"{TAG}hb", build_cnm(bytes.fromhex("020000000202"), rp.to_bytes(6, "big"), 63))
    time.sleep(0.5)
    st = lab.status()
    assert st["cnm"]["frames"] == frames and st["pause"]["paused_ports"] == []
