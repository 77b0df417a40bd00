#!/usr/bin/env python3
"""Where the controller's hub thread spends its CPU during a bring-up, plain TCP against TLS; one JSON line.

With ``--phase pause`` it samples the PAUSE phase instead (the whole bench run, the sampler on from the first
injected PAUSE until the last reaction is in): the steady work (LLDP, polling) the PAUSEs queue behind.

Runs ``bench/control_scale.py --bringup-only`` (its other options passed through, e.g. ``--fabric table3
--emulators 2 --lldp-interval 5 --poll-interval 10 --no-deadlock-check``) over TCP and then over TLS, with a
CPU-time sampler in the controller (bench/hub_sampler: SIGPROF on the hub thread's own CPU clock, from the
emulators' start until every switch is confirmed), and splits each run's hub CPU
(``bringup_controller_hub_cpu_s``) by what the sampled stacks were doing: the TLS handshake's steps on
the hub, reading and decrypting records, encrypting and writing, the same socket work over TCP, parsing and
dispatch, the installs, other green threads. Samples are the hub's CPU, not wall time, so a loaded
machine does not inflate a category with time spent waiting for a core.

    flock /tmp/hpcfabric-bench.lock .venv/bin/python bench/hub_profile.py --out /tmp/hp -- \\
        --fabric table3 --emulators 2 --lldp-interval 5 --poll-interval 10 --no-deadlock-check
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import signal
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

#: (category, frames that must all be on the stack, frames none of which may be); first match wins
RULES: list[tuple[str, tuple[str, ...], tuple[str, ...]]] = [
    ("handshake: native-thread hand-off", ("TlsSocket.handshake", "run_native"), ()),
    ("handshake: socket reads", ("TlsSocket.handshake", "TlsSocket.fill"), ()),
    ("handshake: socket writes", ("TlsSocket.handshake", "TlsSocket.flush"), ()),
    ("handshake: inline steps", ("TlsSocket.handshake",), ()),
    ("handshake: SSL object, peer names", ("TlsGate.__call__",), ("datapath_connection_factory",)),
    ("receive: socket reads", ("TlsSocket.recv", "TlsSocket.fill"), ()),
    ("receive: socket reads", ("TlsSocket.recv", "GreenSocket.recv"), ()),  # the read inlined in recv
    ("receive: decrypt", ("TlsSocket.recv", "SSLObject.read"), ()),
    ("receive: TLS other", ("TlsSocket.recv",), ()),
    ("receive: socket reads", ("receive_loop", "GreenSocket.recv"), ()),
    ("send: encrypt", ("SSLObject.write",), ()),
    ("send: socket writes", ("Datapath._send_loop", "GreenSocket.sendall"), ()),
    ("send: TLS other", ("TlsSocket.sendall",), ()),
    ("send: other", ("Datapath._send_loop",), ()),
    ("receive: parse", ("receive_loop", "parse_message"), ()),
    ("receive: LLDP packet-ins", ("receive_loop", "Wiring.on_lldp"), ()),
    ("receive: PAUSE packet-ins, barrier replies", ("receive_loop", "Pausing.on_pause"), ()),
    ("receive: PAUSE packet-ins, barrier replies", ("receive_loop", "Pausing.barrier"), ()),
    ("receive: stats replies", ("receive_loop", "Channel.multipart_reply"), ()),
    ("receive: dispatch and handlers", ("receive_loop",), ()),
    ("install: encode", ("Installer.sync", "Installer.encode"), ()),
    ("install: plan", ("Installer.sync", "plan_sync"), ()),
    ("install: other", ("Installer.sync",), ()),
    ("status writes", ("StatusReporter.loop",), ()),
    ("LLDP rounds (sending)", ("Wiring.loop",), ()),
    ("stats polling (requests, replies' use)", ("StatsPoller.loop",), ()),
    ("PAUSE expiries", ("Pausing.loop",), ()),
    ("framework event loops", ("OSKenApp._event_loop",), ()),
    ("hub: timers", ("BaseHub.fire_timers",), ("GreenThread.main",)),
    ("hub: poll and switch", ("BaseHub.run",), ("GreenThread.main",)),
]


def category(frames: set[str]) -> str:
    for name, need, never in RULES:
        if all(f in frames for f in need) and not any(f in frames for f in never):
            return name
    return "other"


def categories(path: Path) -> collections.Counter:
    """Samples per category of one sampler file (``frame (file);... count`` lines)."""
    out: collections.Counter = collections.Counter()
    for line in path.read_text(encoding="utf-8").splitlines():
        stack, _, n = line.rpartition(" ")
        out[category({re.sub(r" \([^)]*\)$", "", f) for f in stack.split(";")})] += int(n)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="directory for the sampler files and the runs' work directories")
    ap.add_argument("--interval-us", type=int, default=1000, help="hub CPU between samples (the kernel's tick rounds up)")
    ap.add_argument("--phase", choices=("bringup", "pause"), default="bringup",
                    help="sample the bring-up (default) or the PAUSE phase (full runs, no --bringup-only)")
    ap.add_argument("rest", nargs=argparse.REMAINDER, help="-- then bench/control_scale.py's options")
    a = ap.parse_args()
    out = Path(a.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    rest = [x for x in a.rest if x != "--"]
    os.environ["PYTHONPATH"] = str(ROOT / "bench" / "hub_sampler")
    os.environ["HPCFABRIC_HUB_PROFILE_US"] = str(a.interval_us)
    import control_scale as cs
    from hpcfabric.emu import driver

    pid: list[int] = []
    spawn, start, wait = driver.Cluster.spawn_controller, driver.Cluster.start_emulators, cs.wait_partitions
    pauses = cs.pauses
    bringup = a.phase == "bringup"

    def spawn_controller(self: driver.Cluster, i: int) -> None:
        os.environ["HPCFABRIC_HUB_PROFILE"] = str(out / ("tls" if self.pki else "tcp"))
        spawn(self, i)

    def start_emulators(self: driver.Cluster) -> None:
        pid[:] = [self.ctl[0].pid]
        if bringup:
            os.kill(pid[0], signal.SIGUSR2)  # start sampling
        start(self)

    def wait_partitions(c: driver.Cluster, timeout: float) -> tuple:
        got = wait(c, timeout)
        if bringup:
            os.kill(pid[0], signal.SIGUSR2)  # write the samples
            time.sleep(1.0)
        return got

    def sampled_pauses(c: driver.Cluster, *args: object) -> dict:
        first = not sampled
        if first:
            os.kill(pid[0], signal.SIGUSR2)
        got = pauses(c, *args)
        if first:
            os.kill(pid[0], signal.SIGUSR2)
            sampled.append(True)
            time.sleep(1.0)
        return got

    driver.Cluster.spawn_controller, driver.Cluster.start_emulators = spawn_controller, start_emulators
    cs.wait_partitions = wait_partitions
    sampled: list[bool] = []
    if not bringup:
        cs.pauses = sampled_pauses
    runs = {}
    for tls in (False, True):
        tag = "tls" if tls else "tcp"
        sampled.clear()
        sys.argv = ["control_scale.py", *rest, *(["--bringup-only"] if bringup else []), "--tls", "on" if tls else "off",
                    "--workdir", str(out / f"work-{tag}")]
        ns = cs.parser().parse_args(sys.argv[1:])
        name = (ns.fabric or ["default"])[0]
        d = out / f"work-{tag}" / name
        d.mkdir(parents=True, exist_ok=True)
        res = cs.run(name, ns, d, tls)
        files = sorted(out.glob(f"{tag}.{pid[0]}"))
        runs[tag] = {"result": res, "samples": categories(files[0]) if files else collections.Counter()}
        print(json.dumps(res), flush=True)
    table = {}
    for tag, r in runs.items():
        total = sum(r["samples"].values()) or 1
        hub = r["result"].get("bringup_controller_hub_cpu_s", 0.0) if bringup else \
            (r["result"].get("pause") or {}).get("controller_cpu_s", 0.0)  # all threads: the hub's alone then
        for k, v in r["samples"].items():
            table.setdefault(k, {"tcp": 0.0, "tls": 0.0})[tag] = round(hub * v / total, 2)
    for v in table.values():
        v["diff"] = round(v["tls"] - v["tcp"], 2)
    line = {"bench": "hub_profile", "phase": a.phase,
            "hub_cpu_s": {t: r["result"].get("bringup_controller_hub_cpu_s") for t, r in runs.items()},
            "controller_cpu_s": {t: r["result"].get("bringup_controller_cpu_s") for t, r in runs.items()},
            "connect_to_confirmed_s": {t: r["result"].get("connect_to_confirmed_s") for t, r in runs.items()},
            "samples": {t: sum(r["samples"].values()) for t, r in runs.items()},
            "load_avg_1m": {t: r["result"].get("load_avg_1m") for t, r in runs.items()},
            "pause": {t: {k: (r["result"].get("pause") or {}).get(k) for k in (
                "p10_ms", "p50_ms", "p99_ms", "controller_p50_ms", "switch_p50_ms", "controller_cpu_s",
                "controller_cpu_share", "harness_cpu_share")} for t, r in runs.items()} if not bringup else None,
            "hub_cpu_by_category_s": dict(sorted(table.items(), key=lambda kv: -kv[1]["diff"]))}
    print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
