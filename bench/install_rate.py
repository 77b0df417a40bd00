#!/usr/bin/env python3
"""Rule installation rate: hpcfabric controller vs ``ovs-ofctl --bundle`` vs naive os-ken.

The same compiled rule set is installed into N fresh userspace OVS bridges
(each bridge plays one switch of the fabric, with its dpid) three ways:

(a) ``ours``:  ``hpcfabric controller`` (subprocess): on connect it dumps the
    (empty) table, diffs, sends the cached wire encoding in one ONF bundle
    per switch, commits, barrier; timed from ``set-controller`` to the last
    switch's confirmation (its barrier reply);
(b) ``ofctl``: ``ovs-ofctl -O OpenFlow13 --bundle add-flows BRIDGE FILE``,
    all bridges in parallel (and sequentially, the better of the two counts);
(c) ``naive``: an os-ken app (this file, run by osken-manager) that builds
    one ``OFPFlowMod`` object per rule and ``send_msg``s it, then a barrier.

Every method ends with a ``dump-flows`` count check per bridge.

Default rule set: a Dragonfly with the paper's Table III switch (a=16, p=8,
h=8, radix 31) cut to 17 groups (272 switches, 2,176 hosts), *flat*
addressing (the CAM baseline: 2,250 flows per switch), conditional routing,
on 24 bridges = 54,000 rules. (The shipped dragonfly-table3.yaml compiled
compact holds ~121 flows per switch: 50k rules would need ~415 bridges.)

Prints one JSON line. Needs root and Open vSwitch; cleans up its bridges and
processes (by name / PID) even on failure.

    .venv/bin/python bench/install_rate.py [--bridges 24] [--skip-naive]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from os_ken.base import app_manager
    from os_ken.controller import ofp_event
    from os_ken.controller.handler import MAIN_DISPATCHER, set_ev_cls
    from os_ken.lib import hub
    from os_ken.ofproto import ofproto_v1_3

BIN = ROOT / ".venv" / "bin"
PARKING_PORT = 9  # "discard": nothing listens there
TOPOLOGY = """\
kind: dragonfly
name: df-a16-p8-h8-g17
description: Table III switch (a=16 p=8 h=8, radix 31), 17 groups, 272 switches, 2176 hosts
a: 16
p: 8
h: 8
g: 17
"""


# ---------------------------------------------------------------------------
# (c) the naive os-ken app, loaded by osken-manager from this file


class NaiveInstaller(app_manager.OSKenApp):
    """One OFPFlowMod object per rule, send_msg each, then a barrier."""

    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        from hpcfabric.config import load_config

        self.config = load_config(os.environ["HF_BENCH_CONFIG"])
        self.result = os.environ["HF_BENCH_RESULT"]
        self.names = {sw.dpid: sw.name for sw in self.config.fabric.switches}
        self.want = int(os.environ["HF_BENCH_N"])
        self.done: dict[str, float] = {}
        self.waiters: dict[tuple[int, int], hub.Event] = {}

    @set_ev_cls(ofp_event.EventOFPStateChange, MAIN_DISPATCHER)
    def _up(self, ev):
        hub.spawn(self._install, ev.datapath)

    @set_ev_cls(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
    def _barrier(self, ev):
        w = self.waiters.pop((ev.msg.datapath.id, ev.msg.xid), None)
        if w:
            w.set()

    def _install(self, dp):
        sys.path.insert(0, str(ROOT / "tests"))
        from osken_encode import to_flow_mod  # the tests' reference encoder over os-ken's objects

        for flow in self.config.desired[self.names[dp.id]]:
            dp.send_msg(to_flow_mod(dp, flow))
        req = dp.ofproto_parser.OFPBarrierRequest(dp)
        dp.set_xid(req)
        ev = hub.Event()
        self.waiters[(dp.id, req.xid)] = ev
        dp.send_msg(req)
        ev.wait(timeout=600)
        self.done[self.names[dp.id]] = time.time()
        if len(self.done) == self.want:
            tmp = self.result + ".tmp"
            Path(tmp).write_text(json.dumps(self.done))
            os.replace(tmp, self.result)


# ---------------------------------------------------------------------------
# the benchmark driver


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), check=check, capture_output=True, text=True, timeout=600)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ensure_ovs() -> None:
    if sh("ovs-vsctl", "--timeout=5", "show", check=False).returncode != 0:
        sh("/usr/share/openvswitch/scripts/ovs-ctl", "start", "--system-id=random", "--no-monitor")


class Bench:
    def __init__(self, args: argparse.Namespace, tmp: Path):
        from hpcfabric.config import load_config

        self.args = args
        self.tmp = tmp
        topo = Path(args.topology) if args.topology else tmp / "topology.yaml"
        if not args.topology:
            topo.write_text(TOPOLOGY)
        self.port = free_port()
        self.status = tmp / "status.json"
        self.conf = tmp / "bench.conf"
        self.conf.write_text(
            f"[hpcfabric]\ntopology = {topo.resolve()}\naddressing = {args.addressing}\nrouting = {args.routing}\n"
            f"status_file = {self.status}\nlldp_interval = 30\nlog_level = {args.log_level}\n"
            # installation only: the deadlock proof at load takes minutes on this flat-addressed fabric
            # (hpcfabric prove checks it offline); the tables are the default ones (classes on)
            "deadlock_check = off\n"
            f"[openflow]\nlisten_port = {self.port}\nbundles = {args.bundles}\n"
        )
        t = time.monotonic()
        self.config = load_config(self.conf)
        self.compile_s = time.monotonic() - t
        self.switches = [sw for sw in self.config.fabric.switches][: args.bridges]
        self.bridges = {sw.name: f"hfb{os.getpid() % 100:02d}x{i:02d}" for i, sw in enumerate(self.switches)}
        self.expected = {sw.name: len(self.config.desired[sw.name]) for sw in self.switches}
        self.rules = sum(self.expected.values())
        self.procs: list[subprocess.Popen] = []

    # -- bridges -------------------------------------------------------
    def create(self) -> None:
        cmd = ["ovs-vsctl"]
        for sw in self.switches:
            b = self.bridges[sw.name]
            cmd += ["--", "--may-exist", "add-br", b, "--", "set", "bridge", b, "datapath_type=netdev",
                    "protocols=OpenFlow13", "fail_mode=secure", f"other_config:datapath-id={sw.dpid:016x}",
                    "other_config:disable-in-band=true"]
        sh(*cmd)
        self.set_controller(None)

    def set_controller(self, port: int | None) -> None:
        """Point every bridge at ``port`` (None: a parking address nobody listens on).

        A bridge must never lose its controller: OVS flushes the flow table
        whenever a bridge goes from having a controller to having none (or back).
        """
        target = f"tcp:127.0.0.1:{port if port is not None else PARKING_PORT}"
        cmd = ["ovs-vsctl"]
        for b in self.bridges.values():
            cmd += ["--", "set-controller", b, target, "--", "set", "controller", b, "max_backoff=1000"]
        sh(*cmd)

    def clear(self) -> None:
        for b in self.bridges.values():
            sh("ovs-ofctl", "-O", "OpenFlow13", "del-flows", b)

    def counts_ok(self) -> bool:
        bad = {}
        for name, b in self.bridges.items():
            n = sum(1 for l in sh("ovs-ofctl", "-O", "OpenFlow13", "dump-flows", b).stdout.splitlines() if "cookie=" in l)
            if n != self.expected[name]:
                bad[name] = (n, self.expected[name])
        if bad:
            print(f"# count mismatch: {bad}", file=sys.stderr)
        return not bad

    def cleanup(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        cmd = ["ovs-vsctl"]
        for b in self.bridges.values():
            cmd += ["--", "--if-exists", "del-br", b]
        sh(*cmd, check=False)

    def stop(self, p: subprocess.Popen) -> None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()

    # -- (a) ours ---------------------------------------------------------
    def read_status(self) -> dict:
        try:
            return json.loads(self.status.read_text())
        except (OSError, ValueError):
            return {}

    def ours(self, label: str, clear: bool = False) -> dict:
        if clear:
            self.clear()
        log = open(self.tmp / f"ours-{label}.log", "w")
        p = subprocess.Popen([str(BIN / "hpcfabric"), "controller", "--config", str(self.conf)],
                             stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(p)
        try:
            self.wait(lambda: self.read_status().get("running"), 120, "controller start", p)
            cpu0, ovs0 = cpu_seconds(p.pid), cpu_seconds(ovs_pid())
            t0 = time.time()
            self.set_controller(self.port)
            n = len(self.switches)
            st = self.wait(lambda: (s := self.read_status()).get("switches_confirmed") == n and s, 600, "confirm", p)
            cpu, ovs_cpu = cpu_seconds(p.pid) - cpu0, cpu_seconds(ovs_pid()) - ovs0
            rows = [st["per_switch"][sw.name] for sw in self.switches]
            seconds = max(r["confirmed_at"] for r in rows) - t0
            sent = sum(r["added"] + r["modified"] + r["deleted"] for r in rows)
            ok = self.counts_ok()
            methods = sorted({r["method"] for r in rows})
        finally:
            self.stop(p)
            self.set_controller(None)
        kept = sum(r["kept"] for r in rows)
        sync = sorted(r["sync_seconds"] for r in rows)
        dump = sorted(r["dump_seconds"] for r in rows)
        return {"seconds": round(seconds, 3), "rules_per_s": round(self.rules / seconds), "flow_mods_sent": sent,
                "kept": kept, "method": methods, "counts_ok": ok,
                "controller_cpu_s": round(cpu, 2), "ovs_vswitchd_cpu_s": round(ovs_cpu, 2),
                "per_switch_sync_s": {"min": sync[0], "median": sync[len(sync) // 2], "max": sync[-1]},
                "per_switch_dump_s": {"min": dump[0], "median": dump[len(dump) // 2], "max": dump[-1]}}

    def wait(self, pred, timeout, what, proc=None):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"{what}: process exited with {proc.returncode}")
            got = pred()
            if got:
                return got
            time.sleep(0.01)
        raise RuntimeError(f"timeout: {what}")

    # -- (b) ovs-ofctl ----------------------------------------------------
    def ofctl(self, modes=("parallel", "sequential")) -> dict:
        from hpcfabric.openflow.ofctl import flows_text

        files = {}
        for sw in self.switches:
            f = self.tmp / f"{sw.name}.flows"
            if not f.exists():
                f.write_text(flows_text(self.config.desired[sw.name]))
            files[sw.name] = f
        out = {}
        for mode in modes:
            self.clear()
            t0 = time.monotonic()
            if mode == "parallel":
                ps = [subprocess.Popen(["ovs-ofctl", "-O", "OpenFlow13", "--bundle", "add-flows", self.bridges[n],
                                        str(f)]) for n, f in files.items()]
                rcs = [p.wait() for p in ps]
            else:
                rcs = [subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "--bundle", "add-flows", self.bridges[n],
                                       str(f)]).returncode for n, f in files.items()]
            seconds = time.monotonic() - t0
            if any(rcs):
                raise RuntimeError(f"ovs-ofctl failed: {rcs}")
            out[mode] = {"seconds": round(seconds, 3), "rules_per_s": round(self.rules / seconds),
                         "counts_ok": self.counts_ok()}
        best = min(out.values(), key=lambda r: r["seconds"])
        return {**best, **out}

    # -- (c) naive os-ken -------------------------------------------------
    def naive(self) -> dict:
        self.clear()
        port = free_port()
        result = self.tmp / "naive.json"
        env = dict(os.environ, HF_BENCH_CONFIG=str(self.conf), HF_BENCH_RESULT=str(result),
                   HF_BENCH_N=str(len(self.switches)), PYTHONPATH=str(ROOT), PYTHONWARNINGS="ignore")
        log = open(self.tmp / "naive.log", "w")
        p = subprocess.Popen([str(BIN / "osken-manager"), "--ofp-tcp-listen-port", str(port),
                              "--ofp-listen-host", "127.0.0.1", str(Path(__file__).resolve())],
                             stdout=log, stderr=subprocess.STDOUT, env=env)
        self.procs.append(p)
        try:
            self.wait(lambda: _listening(port), 120, "naive app start", p)
            t0 = time.time()
            self.set_controller(port)
            done = self.wait(lambda: result.exists() and json.loads(result.read_text()), 1800, "naive install", p)
            seconds = max(done.values()) - t0
            ok = self.counts_ok()
        finally:
            self.stop(p)
            self.set_controller(None)
        return {"seconds": round(seconds, 3), "rules_per_s": round(self.rules / seconds), "counts_ok": ok}


def median_run(runs: list[dict]) -> dict:
    """The run with the median time, plus every run's seconds."""
    ordered = sorted(runs, key=lambda r: r["seconds"])
    return {**ordered[len(ordered) // 2], "runs_s": [r["seconds"] for r in runs]}


def cpu_seconds(pid: int | None) -> float:
    """user+system CPU time of a process (Linux /proc)."""
    if not pid:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def ovs_pid() -> int | None:
    try:
        return int(Path("/var/run/openvswitch/ovs-vswitchd.pid").read_text().strip())
    except (OSError, ValueError):
        return None


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bridges", type=int, default=24)
    ap.add_argument("--topology", default=None, help="topology YAML (default: the generated Table-III-switch Dragonfly)")
    ap.add_argument("--addressing", default="flat")
    ap.add_argument("--routing", default="conditional")
    ap.add_argument("--bundles", default="auto", choices=("auto", "on", "off"))
    ap.add_argument("--repeat", type=int, default=3, help="interleaved runs of ours/ofctl; medians are reported")
    ap.add_argument("--skip-naive", action="store_true")
    ap.add_argument("--only-ours", action="store_true", help="skip ovs-ofctl and naive os-ken (quick check)")
    ap.add_argument("--log-level", default="WARNING")
    ap.add_argument("--workdir", default=None, help="keep configs and logs here (default: a temporary directory)")
    args = ap.parse_args()
    if os.geteuid() != 0 or not shutil.which("ovs-vsctl"):
        print(json.dumps({"skipped": "needs root and Open vSwitch"}))
        return 0
    ensure_ovs()
    with tempfile.TemporaryDirectory(prefix="hf-install-") as d:
        if args.workdir:
            d = args.workdir
            os.makedirs(d, exist_ok=True)
        bench = Bench(args, Path(d))
        try:
            bench.create()
            ours_runs, ofctl_runs = [], []
            for i in range(max(1, args.repeat)):
                ours_runs.append(bench.ours(f"fresh{i}", clear=True))
                if i == 0:
                    resync = bench.ours("resync")  # controller restart: everything already installed
                if not args.only_ours:
                    ofctl_runs.append(bench.ofctl(("parallel", "sequential") if i == 0 else ("parallel",)))
            ours = median_run(ours_runs)
            ofctl = median_run(ofctl_runs) if ofctl_runs else None
            if ofctl:
                ofctl["sequential_first_run"] = ofctl_runs[0].get("sequential")
            naive = None if args.skip_naive or args.only_ours else bench.naive()
        finally:
            bench.cleanup()
    res = {
        "bench": "install_rate",
        "topology": bench.config.fabric.name,
        "addressing": args.addressing,
        "routing": args.routing,
        "bridges": len(bench.switches),
        "rules": bench.rules,
        "compile_s": round(bench.compile_s, 2),
        "ours": ours,
        "ours_resync_no_change": resync,
        "ofctl_bundle": ofctl,
        "naive_osken": naive,
        "ratio_ours_ofctl": round(ours["rules_per_s"] / ofctl["rules_per_s"], 3) if ofctl else None,
        "ratio_ours_naive": round(ours["rules_per_s"] / naive["rules_per_s"], 2) if naive else None,
        "targets": {"ratio_ours_ofctl": 0.5, "ratio_ours_naive": 3},
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
