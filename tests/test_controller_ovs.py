"""The controller against real Open vSwitch bridges (userspace datapath).

Four bridges play switches g0s0 (dpid 1), g0s1 (2), g1s1 (4) and g2s0 (5) of
topologies/dragonfly-a2-p1-h1.yaml, cabled with veth pairs the way the
topology says (g0s0:3-g0s1:3, g0s0:2-g2s0:2); the controller runs as a
subprocess (``hpcfabric controller``). Checked: full tables confirmed, LLDP
discovery, a restart that changes nothing (durations and counters keep
growing), PAUSE flips of the PORT_STATE entry and their expiry, PAUSE on a
host port ignored, a miswired cable quarantined with NO_FWD and healed.

Needs root and ovs-vsctl (skipped otherwise). Everything created here is
removed by name/PID at the end, also on failure; other bridges are never touched.
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

TAG = f"hf{os.getpid() % 1000:03d}"  # unique, short: interface names are limited to 15 characters
SWITCHES = {"g0s0": 1, "g0s1": 2, "g1s1": 4, "g2s0": 5}
LINK_SPEED_GBPS = 0.01  # 65535 quanta = 3.36 s, 20000 quanta = 1.02 s


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), check=check, capture_output=True, text=True, timeout=60)


def ensure_ovs() -> None:
    if sh("ovs-vsctl", "--timeout=5", "show", check=False).returncode == 0:
        return
    sh("/usr/share/openvswitch/scripts/ovs-ctl", "start", "--system-id=random", "--no-monitor")
    sh("ovs-vsctl", "--timeout=10", "show")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def br(name: str) -> str:
    return f"{TAG}{name}"  # e.g. hf123g0s0


class Lab:
    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.port = free_port()
        self.status_path = tmp / "status.json"
        self.config_path = tmp / "lab.conf"
        self.config_path.write_text(
            f"[hpcfabric]\ntopology = {TOPOLOGY}\naddressing = compact\nrouting = conditional\n"
            f"link_speed_gbps = {LINK_SPEED_GBPS}\nstatus_file = {self.status_path}\nlldp_interval = 0.5\n"
            f"log_level = INFO\n[openflow]\nlisten_host = 127.0.0.1\nlisten_port = {self.port}\n"
        )
        self.config = load_config(self.config_path)
        self.bridges: list[str] = []
        self.veths: list[str] = []
        self.proc: subprocess.Popen | None = None
        self.logs: list[Path] = []

    # -- topology ------------------------------------------------------
    def add_bridge(self, name: str, dpid: int) -> None:
        b = br(name)
        self.bridges.append(b)
        sh("ovs-vsctl", "--may-exist", "add-br", b, "--", "set", "bridge", b, "datapath_type=netdev",
           "protocols=OpenFlow13", "fail_mode=secure", f"other_config:datapath-id={dpid:016x}",
           "other_config:disable-in-band=true")

    def veth(self, a: str, b: str) -> None:
        sh("ip", "link", "add", a, "type", "veth", "peer", "name", b)
        self.veths.append(a)
        for n in (a, b):
            sh("ip", "link", "set", n, "up")
            sh("sysctl", "-qw", f"net.ipv6.conf.{n}.disable_ipv6=1", check=False)

    def plug(self, switch: str, port: int, ifname: str) -> None:
        sh("ovs-vsctl", "add-port", br(switch), ifname, "--", "set", "interface", ifname, f"ofport_request={port}")

    def unplug(self, switch: str, ifname: str) -> None:
        sh("ovs-vsctl", "--if-exists", "del-port", br(switch), ifname)

    def connect_all(self) -> None:
        for b in self.bridges:
            sh("ovs-vsctl", "set-controller", b, f"tcp:127.0.0.1:{self.port}", "--", "set", "controller", b,
               "max_backoff=1000")

    # -- controller ------------------------------------------------------
    def start(self) -> None:
        log = self.tmp / f"controller-{len(self.logs)}.log"
        self.logs.append(log)
        if self.status_path.exists():
            self.status_path.unlink()
        self.proc = subprocess.Popen(
            [*HPCFABRIC, "controller", "--config", str(self.config_path)],
            stdout=log.open("w"), stderr=subprocess.STDOUT,
        )
        self.wait(lambda s: s.get("running"), 30, "controller up")

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
                raise AssertionError(f"controller exited ({self.proc.returncode}):\n{self.logs[-1].read_text()[-3000:]}")
            st = self.status()
            if st and pred(st):
                return st
            time.sleep(0.05)
        raise AssertionError(f"timeout waiting for {what}; status: {json.dumps(self.status())[:2000]}\n"
                             f"log:\n{self.logs[-1].read_text()[-3000:] if self.logs else ''}")

    def dump(self, switch: str, table: int | None = None) -> list[str]:
        args = ["ovs-ofctl", "-O", "OpenFlow13", "dump-flows", br(switch)]
        if table is not None:
            args.append(f"table={table}")
        return [l for l in sh(*args).stdout.splitlines() if "cookie=" in l]

    def port_config(self, switch: str, port: int) -> str:
        out = sh("ovs-ofctl", "-O", "OpenFlow13", "show", br(switch)).stdout
        m = re.search(rf"^ {port}\(.*?\n\s+config:\s+(.*?)\n", out, re.M)
        return m.group(1).strip() if m else ""

    def cleanup(self) -> None:
        self.stop()
        for b in self.bridges:
            sh("ovs-vsctl", "--if-exists", "del-br", b, check=False)
        for v in self.veths:
            sh("ip", "link", "del", v, check=False)


def inject(ifname: str, frame: bytes) -> None:
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as s:
        s.bind((ifname, 0))
        s.send(frame)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    ensure_ovs()
    lab = Lab(tmp_path_factory.mktemp("ovs"))
    try:
        for name, dpid in SWITCHES.items():
            lab.add_bridge(name, dpid)
        # g0s0:3 - g0s1:3 (local), g0s0:2 - g2s0:2 (global), g0s0:1 host port (free veth end)
        lab.veth(f"{TAG}l1a", f"{TAG}l1b")
        lab.plug("g0s0", 3, f"{TAG}l1a")
        lab.plug("g0s1", 3, f"{TAG}l1b")
        lab.veth(f"{TAG}g1a", f"{TAG}g1b")
        lab.plug("g0s0", 2, f"{TAG}g1a")
        lab.plug("g2s0", 2, f"{TAG}g1b")
        lab.veth(f"{TAG}h0a", f"{TAG}h0b")
        lab.plug("g0s0", 1, f"{TAG}h0a")
        lab.start()
        lab.connect_all()
        yield lab
    finally:
        lab.cleanup()


def confirmed(n: int):
    return lambda s: s.get("switches_confirmed") == n


def test_full_tables_installed_and_confirmed(lab):
    st = lab.wait(confirmed(4), 60, "4 switches confirmed")
    assert st["switches_connected"] == 4 and st["unknown_dpids"] == []
    total = 0
    for name in SWITCHES:
        expected = lab.config.desired[name]
        flows = lab.dump(name)
        assert len(flows) == len(expected) == st["per_switch"][name]["rules_installed"]
        assert st["per_switch"][name]["confirmed"] and st["per_switch"][name]["added"] == len(expected)
        assert st["per_switch"][name]["deleted"] == 0
        assert all("cookie=0x4846" in f for f in flows)
        for table in range(4):
            assert len(lab.dump(name, table)) == sum(1 for f in expected if f.table == table)
        total += len(expected)
    assert st["rules_installed"] == total and st["rules_expected"] == lab.config.rules_expected


def test_lldp_discovers_the_cabled_links(lab):
    st = lab.wait(lambda s: s["links_discovered"] == 2, 15, "2 links discovered")
    assert st["miswired"] == [] and st["extra_links"] == []
    missing = {(m["a"], m["b"]) for m in st["missing_links"]}
    assert ("g0s0", "g0s1") not in missing and ("g0s0", "g2s0") not in missing
    assert st["lldp"]["received"] > 0 and st["lldp"]["malformed"] == 0


def _durations(lines: list[str]) -> dict[str, tuple[float, int]]:
    out = {}
    for line in lines:
        key = re.sub(r"(duration|n_packets|n_bytes|idle_age)=[^,]*, ?", "", line).strip()
        dur = float(re.search(r"duration=([\d.]+)s", line).group(1))
        pkts = int(re.search(r"n_packets=(\d+)", line).group(1))
        out[key] = (dur, pkts)
    return out


def test_restart_changes_nothing(lab):
    lab.wait(confirmed(4), 60, "confirmed")
    time.sleep(1.0)  # let LLDP punts count packets
    before = {n: _durations(lab.dump(n)) for n in SWITCHES}
    assert any(p > 0 for d in before.values() for _, p in d.values())
    lab.stop(signal.SIGKILL)  # a crash, not a clean shutdown
    time.sleep(0.5)
    lab.start()
    st = lab.wait(confirmed(4), 60, "confirmed after restart")
    for name in SWITCHES:
        row = st["per_switch"][name]
        assert (row["added"], row["modified"], row["deleted"]) == (0, 0, 0), row
        assert row["kept"] == row["rules_expected"]
        after = _durations(lab.dump(name))
        assert after.keys() == before[name].keys()
        for key, (dur, pkts) in before[name].items():
            assert after[key][0] >= dur, f"{name}: {key} was re-added"
            assert after[key][1] >= pkts, f"{name}: {key} lost its counters"


def _port_state(lab, switch: str, port: int) -> str:
    (line,) = [l for l in lab.dump(switch, 2) if f"metadata={port:#x}/0xffff" in l and "in_port=" not in l]  # not a bounce entry
    return line.split("actions=")[1]


def test_pause_flips_port_state_and_expires(lab):
    lab.wait(confirmed(4), 60, "confirmed")
    flips0 = lab.status()["pause"]["flips"]
    assert _port_state(lab, "g0s0", 2) == "output:2"
    # a PAUSE sent by g2s0's end of the cable arrives on g0s0 port 2
    t0 = time.monotonic()
    inject(f"{TAG}g1b", build_pause(bytes.fromhex("020000000502"), 20000))  # 1.02 s at 0.01 Gb/s
    lab.wait(lambda s: "g0s0:2" in s["pause"]["paused_ports"], 5, "g0s0:2 paused")
    assert _port_state(lab, "g0s0", 2) == "goto_table:3"
    lab.wait(lambda s: not s["pause"]["paused_ports"] and s["pause"]["flips"] >= flips0 + 2, 6, "expiry")
    assert time.monotonic() - t0 >= 0.9
    assert _port_state(lab, "g0s0", 2) == "output:2"
    st = lab.status()
    assert st["pause"]["reaction_ms"] and st["pause"]["flow_mods"] == st["pause"]["flips"]
    # PAUSE then XON: back at once
    inject(f"{TAG}g1b", build_pause(bytes.fromhex("020000000502"), 65535))
    lab.wait(lambda s: s["pause"]["paused_ports"] == ["g0s0:2"], 5, "paused again")
    assert _port_state(lab, "g0s0", 2) == "goto_table:3"
    inject(f"{TAG}g1b", build_pause(bytes.fromhex("020000000502"), 0))
    lab.wait(lambda s: s["pause"]["paused_ports"] == [], 2, "XON")
    assert _port_state(lab, "g0s0", 2) == "output:2"


def test_pause_from_a_host_is_ignored(lab):
    lab.wait(confirmed(4), 60, "confirmed")
    st0 = lab.status()["pause"]
    inject(f"{TAG}h0b", build_pause(bytes.fromhex("020000000001"), 65535))
    st = lab.wait(lambda s: s["pause"]["host_port_frames"] > st0["host_port_frames"], 5, "host frame counted")
    assert st["pause"]["flips"] == st0["flips"]
    assert st["pause"]["paused_ports"] == []
    assert _port_state(lab, "g0s0", 2) == "output:2" and _port_state(lab, "g0s0", 3) == "output:3"


def test_miswired_cable_is_quarantined_then_healed(lab):
    lab.wait(confirmed(4), 60, "confirmed")
    # g0s1:2 should go to g1s1:2; cable it to g2s0:3 (which should go to g2s1:3) instead
    lab.veth(f"{TAG}xa", f"{TAG}xb")
    lab.plug("g0s1", 2, f"{TAG}xa")
    lab.plug("g2s0", 3, f"{TAG}xb")
    st = lab.wait(lambda s: len(s["miswired"]) == 2, 10, "miswire detected")
    mis = {(m["switch"], m["port"]): m for m in st["miswired"]}
    assert mis[("g0s1", 2)]["expected"] == "g1s1:2" and mis[("g0s1", 2)]["actual"] == "g2s0:3"
    lab.wait(lambda s: {"g0s1:2", "g2s0:3"} <= set(s["quarantined"]), 5, "quarantined")
    time.sleep(0.5)
    assert "NO_FWD" in lab.port_config("g0s1", 2) and "NO_FWD" in lab.port_config("g2s0", 3)
    # both ends drop packet-outs, yet the probes keep the evidence fresh past the timeout
    time.sleep(lab.config.lldp_timeout + 1.0)
    assert len(lab.status()["miswired"]) == 2
    # re-cable: move the far end from g2s0:3 to g1s1:2, where it belongs
    lab.unplug("g2s0", f"{TAG}xb")
    lab.plug("g1s1", 2, f"{TAG}xb")
    st = lab.wait(lambda s: "g0s1:2" not in s["quarantined"] and not s["miswired"], 10, "healed")
    time.sleep(0.5)
    assert "NO_FWD" not in lab.port_config("g0s1", 2)
    assert lab.wait(lambda s: s["links_discovered"] == 3, 10, "3 links")["links_discovered"] == 3
