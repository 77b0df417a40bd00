"""The switch emulator (hpcfabric.emu) against Open vSwitch, and a partitioned bring-up on it.

Cross-check: the same config is run twice, by two controller subprocesses:
one drives real userspace OVS bridges (patch ports cabled as the topology
says), the other drives emulated switches. After bring-up each switch's
flows, meters and groups are read with ``ovs-ofctl -O OpenFlow13`` from both
(the emulator answers ovs-ofctl on a management port per switch) and must be
the same lines once durations and counters are removed. Both controllers
must also discover every link over LLDP.

Partitioned: two controllers, each managing half of the default Dragonfly
(``[ha] partitions = 2``, ``partition = i``; tables loaded from one ``hpcfabric
compile`` artifact), two emulator processes cabled across the halves: every
switch confirmed with every rule, the emulated tables hold exactly the
rules the controllers expect, LLDP crosses process boundaries, PAUSE flips
arrive as flow-mods, a controller restart onto full tables sends no flow-mod.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from hpcfabric.emu.driver import Cluster, ROOT

TINY = ROOT / "topologies" / "dragonfly-a2-p1-h1.yaml"
DEMO = ROOT / "topologies" / "dragonfly-a4-p2-h2.yaml"
TAG = f"he{os.getpid() % 1000:03d}"

def ovs(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), check=check, capture_output=True, text=True, timeout=900)


VOLATILE = re.compile(r"\b(duration|n_packets|n_bytes|idle_age|hard_age)=[^,\s]*,?\s*|\(xid=0x[0-9a-f]+\)")


def normalise(text: str) -> list[str]:
    return sorted(VOLATILE.sub("", line).strip() for line in text.splitlines() if line.strip())


def ofctl(what: str, target: str) -> list[str]:
    out = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", what, target], check=True, capture_output=True, text=True,
                         timeout=60).stdout
    return normalise(out)


@pytest.mark.ovs
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ovs-vsctl") is None, reason="needs root and Open vSwitch")
def test_emulator_installs_the_same_tables_as_open_vswitch(tmp_path: Path) -> None:
    real = Cluster(str(TINY), tmp_path / "ovs", lldp_interval=0.5)
    emu = Cluster(str(TINY), tmp_path / "emu", lldp_interval=0.5, mgmt=True)
    for c in (real, emu):
        c.workdir.mkdir()
    fabric = real.fabric
    bridges = {s.name: f"{TAG}{s.name}" for s in fabric.switches}
    try:
        real.start_controllers()
        emu.start_controllers()
        # every bridge, its patch ports and its controller in one ovsdb transaction
        cmd = ["ovs-vsctl"]
        for s in fabric.switches:
            b = bridges[s.name]
            cmd += ["--", "add-br", b, "--", "set", "bridge", b, "datapath_type=netdev", "protocols=OpenFlow13",
                    "fail_mode=secure", f"other_config:datapath-id={s.dpid:016x}", "other_config:disable-in-band=true",
                    "--", "set-controller", b, f"tcp:127.0.0.1:{real.ports[0]}"]
        for a, ap, b, bp in fabric.iter_port_pairs():
            for x, xp, y, yp in ((a, ap, b, bp), (b, bp, a, ap)):
                name, peer = f"{TAG}{x}p{xp}", f"{TAG}{y}p{yp}"
                cmd += ["--", "add-port", bridges[x], name, "--", "set", "interface", name, "type=patch",
                        f"options:peer={peer}", f"ofport_request={xp}"]
        ovs(*cmd)
        emu.start_emulators()
        real.wait("confirmed", 60)
        emu.wait("confirmed", 60)
        real.wait("links", 30)
        emu.wait("links", 30)
        for i, s in enumerate(fabric.switches):
            mgmt = f"tcp:127.0.0.1:{emu.mgmt_base + i}"
            for what in ("dump-flows", "dump-meters", "dump-groups"):
                got, want = ofctl(what, mgmt), ofctl(what, bridges[s.name])
                assert got == want, f"{s.name} {what}: emulator differs from OVS"
            flows = ofctl("dump-flows", mgmt)
            assert len(flows) - 1 == real.status(0)["per_switch"][s.name]["rules_installed"]
    finally:
        emu.stop()
        real.stop()
        ovs("ovs-vsctl", *[x for b in bridges.values() for x in ("--", "--if-exists", "del-br", b)], check=False)


def test_partitioned_bringup_on_emulated_switches(tmp_path: Path) -> None:
    c = Cluster(str(DEMO), tmp_path, controllers=2, emulators=2, lldp_interval=0.3, artifact=True)
    try:
        made = c.compile()  # one `hpcfabric compile`; each controller loads its derived partition from it
        assert made["partitions"] == ["groups 0..4", "groups 5..8"] and made["deadlock"] == "proven"
        c.start_controllers()
        c.start_emulators()
        c.wait("confirmed", 60)
        statuses = [c.status(i) for i in range(2)]
        assert [s["switches_expected"] for s in statuses] == [len(p) for p in c.parts]
        assert all(s["deadlock"]["artifact"] == str(c.artifact) and s["deadlock"]["verdict"] == "proven"
                   for s in statuses)
        expected = sum(s["rules_expected"] for s in statuses)
        assert all(s["rules_installed"] == s["rules_expected"] for s in statuses)
        # the long-lived heap is out of the garbage collector's full passes: frozen after the compile and
        # once every switch was confirmed (hpcfabric.controller.heap)
        assert all(s["heap"]["enabled"] and s["heap"]["freezes"] >= 2 and s["heap"]["frozen"] > 0 for s in statuses)
        stats = c.emu_stats()
        assert sum(st["flows"] for st in stats) == expected
        assert sum(st["errors"] for st in stats) == 0
        time.sleep(1.0)
        stats = c.emu_stats()
        assert all(st["delivered_remote"] > 0 for st in stats)  # LLDP crossed between emulator processes
        assert sum(c.status(i)["lldp"]["received"] for i in range(2)) > 0
        # each partition expects only the links with an end in it, and discovers them all: a cable to the
        # other partition is seen from its in-scope end (the other controller's LLDP arriving there)
        c.wait("links", 30)
        for i, part in enumerate(c.parts):
            s = c.status(i)
            mine = sum(1 for link in c.fabric.links if link.a in part or link.b in part)
            assert s["discovery_scope"] == f"partition p{i}: {len(part)} switches"
            assert s["links_discovered"] == s["links_expected"] == mine < len(c.fabric.links)
        # a PAUSE on a fabric port of each partition: one flow-mod reaches that switch
        for part in c.parts:
            sw = part[0]
            port = min(c.fabric.fabric_ports(sw))
            emu = c.emulator_of(sw)
            emu.send(op="pause", switch=sw, port=port, quanta=0xFFFF, id=1)
            ev = emu.events.get(timeout=10)
            assert ev["ev"] == "reaction" and ev["switch"] == sw and ev["us"] > 0
            assert 0 < ev["switch_us"] <= ev["us"]  # the switch's own CPU in it: part of the reaction's time
        # restart controller 0 onto full tables: everything confirmed again, no flow-mod sent
        before = sum(st["flow_mods"] for st in c.emu_stats())
        c.stop_controller(0)
        c.start_controller(0)
        t0 = time.time()
        c.wait("confirmed", 60, since=t0)
        time.sleep(0.5)
        after = c.emu_stats()
        assert c.status(0)["rules_installed"] == statuses[0]["rules_expected"]
        # only the expiry of the PAUSE flip above may have been re-asserted
        assert sum(st["flow_mods"] for st in after) - before <= 2
    finally:
        c.stop()


def test_every_switch_connecting_at_once_is_queued_by_the_listener_not_dropped(tmp_path: Path) -> None:
    """The OpenFlow listener's accept queue is LISTEN_BACKLOG (eventlet's own is 50): 114 switches connecting
    at once (``connects``: no limit in flight in the emulator) all come up."""
    from hpcfabric.controller.framework import LISTEN_BACKLOG

    c = Cluster(str(ROOT / "topologies" / "dragonfly-a6-p3-h3.yaml"), tmp_path, connects=256)
    try:
        c.start_controllers()
        out = subprocess.run(["ss", "-ltnH", f"sport = :{c.ports[0]}"], capture_output=True, text=True, check=True)
        somaxconn = int(Path("/proc/sys/net/core/somaxconn").read_text())
        assert [int(line.split()[2]) for line in out.stdout.splitlines()] == [min(LISTEN_BACKLOG, somaxconn)]
        c.start_emulators()
        c.wait("confirmed", 60)
        s = c.status(0)
        assert s["switches_confirmed"] == s["switches_expected"] == len(c.names) == 114
    finally:
        c.stop()


def test_proc_stats_tells_the_main_threads_cpu_from_the_whole_process() -> None:
    """The benches' controller CPU: all threads (``cpu_s``) and the main thread, the hub (``main_cpu_s``)."""
    import threading

    from hpcfabric.emu.driver import proc_stats

    def burn() -> None:
        t = time.process_time()
        while time.process_time() - t < 0.6:  # this process's CPU: the native thread's and the main one's
            pass

    before = proc_stats(os.getpid())
    th = threading.Thread(target=burn)
    th.start()
    th.join()
    after = proc_stats(os.getpid())
    spent, main = after["cpu_s"] - before["cpu_s"], after["main_cpu_s"] - before["main_cpu_s"]
    assert spent >= 0.5 and main < spent - 0.4, (spent, main)
    assert proc_stats(2 ** 22 + 7)["cpu_s"] == 0.0  # no such process: zeros, no exception
