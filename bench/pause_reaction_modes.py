#!/usr/bin/env python3
"""PAUSE reaction time on the data path: controller mode vs switch-local (OVS learn), one run.

One userspace bridge plays switch g0s0 of topologies/dragonfly-a2-p1-h1.yaml
(conditional routing): port 1 its host, 2 its global link (the host's Valiant
port), 3 its local link, each a veth pair with a free end. A sender process
writes data frames into the host end (to g1s0h0, which g0s0 reaches over port
3 with a default rule) every ``--gap-us``. Per sample a PAUSE is written into
the free end of port 3; the reaction time is from that write to the first data
frame read at the free end of port 2 (the Valiant detour) -- what a host sees,
including OVS's own packet handling, whatever reacts.

* ``controller``: the controller flips the PORT_STATE entry (MODIFY_STRICT +
  barrier); between samples an XON flips it back at once. The controller's
  own figure (packet-in handling -> barrier reply) is reported too.
* ``switch``: the PAUSE learns a timed override in the switch (no controller
  on the path); between samples the override must expire (``switch_hold_s``
  = 1 s, OVS checks timeouts about once a second).

Prints one JSON line with p50/p90/max per mode (ms), the frame gap (the
resolution) and the load. Needs root and OVS; removes what it created.

    .venv/bin/python bench/pause_reaction_modes.py [--samples-controller 40] [--samples-switch 12]
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hpcfabric.rules.addressing import plan_addresses  # noqa: E402
from hpcfabric.protocols.pause import build_pause  # noqa: E402
from hpcfabric.topology.loader import load_topology  # noqa: E402

HPCFABRIC = ROOT / ".venv" / "bin" / "hpcfabric"
TOPOLOGY = ROOT / "topologies" / "dragonfly-a2-p1-h1.yaml"

#: data sender, a separate process (no GIL sharing): IFACE DST_HEX SRC_HEX GAP_US
SENDER = r"""
import socket, struct, sys, time
iface, dst, src, gap = sys.argv[1], bytes.fromhex(sys.argv[2]), bytes.fromhex(sys.argv[3]), float(sys.argv[4]) / 1e6
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW); s.bind((iface, 0))
head = dst + src + struct.pack("!H", 0x0800)
i = 0
nxt = time.monotonic()
while True:
    s.send((head + struct.pack("!Q", i)).ljust(60, b"\0"))
    i += 1
    nxt += gap
    d = nxt - time.monotonic()
    if d > 0:
        time.sleep(d)
    else:
        nxt = time.monotonic()
"""


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), check=check, capture_output=True, text=True, timeout=120)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    v = sorted(values)
    k = (len(v) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(v) - 1)
    return round(v[lo] + (v[hi] - v[lo]) * (k - lo), 3)


class Rx:
    """Data frames (IPv4 EtherType, our destination) read at one veth end."""

    def __init__(self, iface: str, dst: bytes) -> None:
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0800))
        self.sock.bind((iface, 0))
        self.sock.setblocking(False)
        self.dst = dst

    def wait(self, timeout: float) -> float | None:
        """Monotonic time of the next data frame, None after ``timeout``."""
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return None
            r, _, _ = select.select([self.sock], [], [], left)
            if not r:
                return None
            try:
                data = self.sock.recv(2048)
            except BlockingIOError:
                continue
            now = time.monotonic()
            if data[:6] == self.dst:
                return now

    def quiet(self, span: float, timeout: float) -> bool:
        """True once no data frame arrived for ``span`` seconds (within ``timeout``)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.wait(span) is None:
                return True
        return False


def run_mode(mode: str, samples: int, gap_us: float, tmp: Path) -> dict:
    tag = f"hm{os.getpid() % 100:02d}{mode[0]}"
    bridge = f"{tag}br"
    pairs = {1: (f"{tag}h", f"{tag}H"), 2: (f"{tag}g", f"{tag}G"), 3: (f"{tag}l", f"{tag}L")}
    fabric = load_topology(TOPOLOGY)
    plan = plan_addresses(fabric, "compact")
    dst = plan.host_mac["g1s0h0"].to_bytes(6, "big")
    src = plan.host_mac["g0s0h0"].to_bytes(6, "big")
    port = free_port()
    status = tmp / f"{mode}.json"
    conf = tmp / f"{mode}.conf"
    conf.write_text(
        f"[hpcfabric]\ntopology = {TOPOLOGY}\naddressing = compact\nrouting = conditional\npause_reaction = {mode}\n"
        f"switch_hold_s = 1\nlink_speed_gbps = 10\npause_hold_ms = 0\nstatus_file = {status}\nlldp_interval = 5\n"
        f"log_level = WARNING\n[openflow]\nlisten_port = {port}\n"
    )
    proc = sender = None
    try:
        for a, b in pairs.values():
            sh("ip", "link", "add", a, "type", "veth", "peer", "name", b)
            for n in (a, b):
                sh("ip", "link", "set", n, "up")
                sh("sysctl", "-qw", f"net.ipv6.conf.{n}.disable_ipv6=1", check=False)
        cmd = ["ovs-vsctl", "add-br", bridge, "--", "set", "bridge", bridge, "datapath_type=netdev",
               "protocols=OpenFlow13", "fail_mode=secure", "other_config:datapath-id=0000000000000001",
               "other_config:disable-in-band=true"]
        for p, (a, _) in pairs.items():
            cmd += ["--", "add-port", bridge, a, "--", "set", "interface", a, f"ofport_request={p}"]
        sh(*cmd)
        proc = subprocess.Popen([str(HPCFABRIC), "controller", "--config", str(conf)],
                                stdout=open(tmp / f"{mode}.log", "w"), stderr=subprocess.STDOUT)

        def read() -> dict:
            try:
                return json.loads(status.read_text())
            except (OSError, ValueError):
                return {}

        def wait(pred, timeout: float, what: str) -> dict:
            end = time.monotonic() + timeout
            while time.monotonic() < end:
                if proc.poll() is not None:
                    raise RuntimeError(f"controller exited: {(tmp / f'{mode}.log').read_text()[-2000:]}")
                st = read()
                if st and pred(st):
                    return st
                time.sleep(0.02)
            raise RuntimeError(f"timeout: {what}")

        wait(lambda s: s.get("running"), 60, "controller start")
        sh("ovs-vsctl", "set-controller", bridge, f"tcp:127.0.0.1:{port}")
        wait(lambda s: s["per_switch"]["g0s0"]["confirmed"], 60, "switch confirmed")
        rx_alt, rx_min = Rx(pairs[2][1], dst), Rx(pairs[3][1], dst)
        sender = subprocess.Popen([sys.executable, "-c", SENDER, pairs[1][1], dst.hex(), src.hex(), str(gap_us)])
        if rx_min.wait(5) is None:
            raise RuntimeError("no data frames on the minimal port")
        # measured frame gap at the receiver (the resolution of the figures)
        t = [rx_min.wait(1) for _ in range(200)]
        gaps = [(b - a) * 1000 for a, b in zip(t, t[1:]) if a and b]
        pause_in = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        pause_in.bind((pairs[3][1], 0))
        neighbour = bytes.fromhex("020000000202")
        out: list[float] = []
        missed = 0
        for _ in range(samples):
            if not rx_alt.quiet(0.05, 5):
                raise RuntimeError("traffic does not return to the minimal port")
            t0 = time.monotonic()
            pause_in.send(build_pause(neighbour, 0xFFFF))
            got = rx_alt.wait(3.0)
            if got is None:
                missed += 1
            else:
                out.append((got - t0) * 1000)
            if mode == "controller":
                pause_in.send(build_pause(neighbour, 0))  # XON: back at once
            else:
                time.sleep(1.0)  # the learned override expires (hold 1 s, checked about every second)
        st = read()
        res = {
            "samples": len(out), "missed": missed, "p50_ms": pct(out, 0.5), "p90_ms": pct(out, 0.9),
            "min_ms": pct(out, 0.0), "max_ms": pct(out, 1.0), "all_ms": [round(x, 2) for x in out],
            "frame_gap_ms": round(statistics.median(gaps), 3) if gaps else None,
            "flip_flow_mods": st.get("pause", {}).get("flow_mods"),
        }
        if mode == "controller":
            inner = st.get("pause", {}).get("reaction_ms", [])
            res["controller_internal_p50_ms"] = pct(inner, 0.5)
        else:
            res["switch_local_frames_seen_by_controller"] = st.get("pause", {}).get("switch_local_frames")
        return res
    finally:
        for p in (sender, proc):
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        sh("ovs-vsctl", "--if-exists", "del-br", bridge, check=False)
        for a, _ in pairs.values():
            sh("ip", "link", "del", a, check=False)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples-controller", type=int, default=40)
    ap.add_argument("--samples-switch", type=int, default=12)
    ap.add_argument("--gap-us", type=float, default=200.0, help="time between data frames (resolution)")
    ap.add_argument("--max-idle-ms", type=int, default=None,
                    help="also run switch mode with OVS other_config:max-idle set to this (global OVS setting, "
                         "restored afterwards): idle datapath flows, the PAUSE's included, are evicted sooner")
    args = ap.parse_args()
    if os.geteuid() != 0 or not shutil.which("ovs-vsctl"):
        print(json.dumps({"skipped": "needs root and Open vSwitch"}))
        return 0
    if sh("ovs-vsctl", "--timeout=5", "show", check=False).returncode != 0:
        sh("/usr/share/openvswitch/scripts/ovs-ctl", "start", "--system-id=random", "--no-monitor")
    with tempfile.TemporaryDirectory(prefix="hf-modes-") as d:
        res = {
            "bench": "pause_reaction_modes",
            "measured": "PAUSE written into the neighbour's end of port 3 -> first data frame of the host "
                        "leaving through the Valiant port 2 (data path, OVS userspace)",
            "controller": run_mode("controller", args.samples_controller, args.gap_us, Path(d)),
            "switch": run_mode("switch", args.samples_switch, args.gap_us, Path(d)),
            "load_avg_1m": round(os.getloadavg()[0], 2),
        }
        if args.max_idle_ms:
            old = sh("ovs-vsctl", "--if-exists", "get", "Open_vSwitch", ".", "other_config:max-idle", check=False)
            sh("ovs-vsctl", "set", "Open_vSwitch", ".", f"other_config:max-idle={args.max_idle_ms}")
            try:
                res[f"switch_max_idle_{args.max_idle_ms}ms"] = run_mode("switch", args.samples_switch, args.gap_us,
                                                                       Path(d))
            finally:
                prev = old.stdout.strip().strip('"')
                if prev:
                    sh("ovs-vsctl", "set", "Open_vSwitch", ".", f"other_config:max-idle={prev}")
                else:
                    sh("ovs-vsctl", "remove", "Open_vSwitch", ".", "other_config", "max-idle")
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
