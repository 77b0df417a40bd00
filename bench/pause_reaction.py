#!/usr/bin/env python3
"""PAUSE reaction time of the controller against one OVS bridge.

One userspace bridge plays switch g0s0 of topologies/dragonfly-a2-p1-h1.yaml
(conditional routing); a veth pair is its fabric port 2, and PAUSE frames
(alternating PAUSE 65535 quanta / XON) are written into the free end with an
AF_PACKET socket, so they arrive on port 2 and are punted to the controller.
Each frame flips the port's PORT_STATE entry with one OFPFC_MODIFY_STRICT +
barrier; the controller records, per flip, the time from the start of its
packet-in handling to the barrier reply (``pause.reaction_ms`` in the status
file). A link speed of 0.01 Gb/s makes a 65535-quanta PAUSE last 3.4 s, so
no flip comes from expiry.

Prints one JSON line: samples, p50_ms, p99_ms, flow_mods_per_flip (targets:
p50 <= 0.5 ms, p99 <= 2 ms, 1 flow-mod per flip). Needs root and OVS;
removes its bridge, veth and controller process (by name/PID) at the end.

    .venv/bin/python bench/pause_reaction.py [--frames 200] [--gap-ms 20]
"""

from __future__ import annotations

import argparse
import json
import os
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

from hpcfabric.protocols.pause import build_pause  # noqa: E402

HPCFABRIC = ROOT / ".venv" / "bin" / "hpcfabric"
TOPOLOGY = ROOT / "topologies" / "dragonfly-a2-p1-h1.yaml"


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), check=check, capture_output=True, text=True, timeout=120)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def floor_rtt(n: int = 200, gap_s: float = 0.02) -> list[float]:
    """Reference: a blocking plain-socket "controller" (no os-ken, no eventlet) that OVS connects
    to, timing MODIFY_STRICT + barrier round trips on a second bridge: what OVS and the kernel
    cost by themselves."""
    import struct

    from hpcfabric.openflow import ofwire
    from hpcfabric.rules.port_state import port_state_flow

    bridge = f"hfq{os.getpid() % 1000:03d}br"
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    ls.settimeout(30)
    try:
        sh("ovs-vsctl", "add-br", bridge, "--", "set", "bridge", bridge, "datapath_type=netdev",
           "protocols=OpenFlow13", "fail_mode=secure", "--", "set-controller", bridge,
           f"tcp:127.0.0.1:{ls.getsockname()[1]}")
        s, _ = ls.accept()
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.settimeout(10)

        def recv_type() -> int:
            head = b""
            while len(head) < 8:
                head += s.recv(8 - len(head))
            _, mtype, length, xid = struct.unpack("!BBHI", head)
            left = length - 8
            while left:
                left -= len(s.recv(left))
            if mtype == 2:  # echo request
                s.sendall(struct.pack("!BBHI", 4, 3, 8, xid))
            return mtype

        s.sendall(struct.pack("!BBHI", 4, 0, 8, 1))
        cache = ofwire.FlowModCache()
        s.sendall(cache.encode(port_state_flow(2, False), 2) + ofwire.barrier(3))
        while recv_type() != 21:
            pass
        out = []
        for i in range(n):
            t0 = time.perf_counter()
            s.sendall(cache.encode(port_state_flow(2, i % 2 == 0), 10 + 2 * i, ofwire.OFPFC_MODIFY_STRICT)
                      + ofwire.barrier(11 + 2 * i))
            while recv_type() != 21:
                pass
            out.append((time.perf_counter() - t0) * 1000)
            time.sleep(gap_s)
        s.close()
        return out
    finally:
        ls.close()
        sh("ovs-vsctl", "--if-exists", "del-br", bridge, check=False)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frames", type=int, default=200, help="PAUSE/XON frames to inject (>= 100)")
    ap.add_argument("--gap-ms", type=float, default=20.0, help="time between frames")
    ap.add_argument("--warmup", type=int, default=10, help="flips excluded from the statistics")
    ap.add_argument("--no-floor", action="store_true", help="skip the plain-socket reference measurement")
    args = ap.parse_args()
    if os.geteuid() != 0 or not shutil.which("ovs-vsctl"):
        print(json.dumps({"skipped": "needs root and Open vSwitch"}))
        return 0
    if sh("ovs-vsctl", "--timeout=5", "show", check=False).returncode != 0:
        sh("/usr/share/openvswitch/scripts/ovs-ctl", "start", "--system-id=random", "--no-monitor")
    tag = f"hfp{os.getpid() % 1000:03d}"
    bridge, va, vb = f"{tag}br", f"{tag}a", f"{tag}b"
    port = free_port()
    proc = None
    with tempfile.TemporaryDirectory(prefix="hf-pause-") as d:
        tmp = Path(d)
        status = tmp / "status.json"
        conf = tmp / "pause.conf"
        conf.write_text(
            f"[hpcfabric]\ntopology = {TOPOLOGY}\naddressing = compact\nrouting = conditional\n"
            f"link_speed_gbps = 0.01\nstatus_file = {status}\nlldp_interval = 5\nlog_level = WARNING\n"
            f"[openflow]\nlisten_port = {port}\n"
        )
        try:
            sh("ip", "link", "add", va, "type", "veth", "peer", "name", vb)
            for n in (va, vb):
                sh("ip", "link", "set", n, "up")
                sh("sysctl", "-qw", f"net.ipv6.conf.{n}.disable_ipv6=1", check=False)
            sh("ovs-vsctl", "add-br", bridge, "--", "set", "bridge", bridge, "datapath_type=netdev",
               "protocols=OpenFlow13", "fail_mode=secure", "other_config:datapath-id=0000000000000001",
               "other_config:disable-in-band=true", "--", "add-port", bridge, va, "--", "set", "interface", va,
               "ofport_request=2")
            proc = subprocess.Popen([str(HPCFABRIC), "controller", "--config", str(conf)],
                                    stdout=open(tmp / "controller.log", "w"), stderr=subprocess.STDOUT)

            def read() -> dict:
                try:
                    return json.loads(status.read_text())
                except (OSError, ValueError):
                    return {}

            def wait(pred, timeout: float, what: str) -> dict:
                end = time.monotonic() + timeout
                while time.monotonic() < end:
                    if proc.poll() is not None:
                        raise RuntimeError(f"controller exited: {(tmp / 'controller.log').read_text()[-2000:]}")
                    st = read()
                    if st and pred(st):
                        return st
                    time.sleep(0.02)
                raise RuntimeError(f"timeout: {what}")

            wait(lambda s: s.get("running"), 60, "controller start")
            sh("ovs-vsctl", "set-controller", bridge, f"tcp:127.0.0.1:{port}")
            wait(lambda s: s["per_switch"]["g0s0"]["confirmed"], 60, "switch confirmed")
            src = bytes.fromhex("020000000502")
            with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as raw:
                raw.bind((vb, 0))
                for i in range(args.frames):
                    raw.send(build_pause(src, 65535 if i % 2 == 0 else 0))
                    time.sleep(args.gap_ms / 1000.0)
            st = wait(lambda s: s["pause"]["flips"] >= args.frames and len(s["pause"]["reaction_ms"]) >= args.frames - 1,
                      10, "all flips confirmed")
            time.sleep(0.3)
            st = read()
        finally:
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            sh("ovs-vsctl", "--if-exists", "del-br", bridge, check=False)
            sh("ip", "link", "del", va, check=False)
    floor = None if args.no_floor else floor_rtt(gap_s=args.gap_ms / 1000.0)
    pause = st["pause"]
    samples = pause["reaction_ms"][args.warmup:]
    res = {
        "bench": "pause_reaction",
        "frames": pause["frames"],
        "flips": pause["flips"],
        "samples": len(samples),
        "p50_ms": round(percentile(samples, 0.5), 4),
        "p99_ms": round(percentile(samples, 0.99), 4),
        "mean_ms": round(statistics.fmean(samples), 4),
        "max_ms": round(max(samples), 4),
        "flow_mods_per_flip": round(pause["flow_mods"] / pause["flips"], 3) if pause["flips"] else None,
        "targets": {"p50_ms": 0.5, "p99_ms": 2.0, "flow_mods_per_flip": 1},
        "measured": "controller packet-in handler start -> barrier reply of the MODIFY_STRICT",
        "floor_p50_ms": round(percentile(floor, 0.5), 4) if floor else None,
        "floor_p99_ms": round(percentile(floor, 0.99), 4) if floor else None,
        "floor": "plain blocking socket, no os-ken: MODIFY_STRICT + barrier round trip (OVS + kernel only)",
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
