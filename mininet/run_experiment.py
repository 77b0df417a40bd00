#!/usr/bin/env python3
"""Adaptive-routing experiments on emulated lossless fabrics: uniform vs adversarial traffic per routing policy.

    .venv/bin/python mininet/run_experiment.py            # full: see --help for the plan
    .venv/bin/python mininet/run_experiment.py --quick    # <= 10 minutes

For every fabric (default Dragonfly a=4 p=2 h=2 and 2-D Flattened Butterfly
4x4) and routing policy (``minimal``, ``conditional``; ``conditional`` in the
switch-local PAUSE mode too where the controller supports it), the runner
starts the controller and a fresh Mininet net, checks DMP and all-pairs
reachability, shapes every fabric link (``lossless.shape_links``: htb
``--link-mbit`` + a byte FIFO), and then for every traffic pattern
(``hpcfabric.topology.patterns``: UN, ADV) and repeat:

1. starts the PAUSE emulator (``lossless.py``: XOFF into the upstream port
   when a link's queue passes ``--xoff`` bytes, XON below ``--xon``);
2. starts one generator per host (``traffic.py``: Poisson UDP at
   ``load x link rate`` per host, fixed frame size, a common start time);
3. collects the measured window: aggregate delivered throughput,
   per-source throughput, loss, one-way latency (p50/p99), PAUSE frames sent
   by the emulator, controller flips and frames through table ALTERNATIVE.

Writes ``results.json``, PNG plots and ``report.md`` to ``--out`` and ends
with one JSON line: ``df_adv_ratio``, ``df_un_ratio``, ``fb_adv_ratio``
(conditional / minimal aggregate throughput, means over the repeats, measured
in this run), the UN loss of both policies, and where to find the results.
Exit 0 when the run completed (the ratios are reported, not judged: see
``--check``), 1 on a failed step, 2 on bad arguments or environment.
"""

from __future__ import annotations

import argparse
import configparser
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for _p in (str(HERE), str(ROOT)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import fabric_net as fn  # noqa: E402
import lossless  # noqa: E402
import run_fabric as rf  # noqa: E402

from hpcfabric.config import load_config  # noqa: E402
from hpcfabric.errors import HpcfabricError  # noqa: E402
from hpcfabric.rules.flows import TABLE_ALTERNATIVE  # noqa: E402
from hpcfabric.topology.patterns import ALIASES, pattern  # noqa: E402

PROG = "run_experiment"
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
TRAFFIC = HERE / "traffic.py"
LOSSLESS = HERE / "lossless.py"

#: the experiment fabrics: label -> (config file, topology file)
FABRICS = {
    "df": ("configs/dragonfly-a4-p2-h2.conf", "topologies/dragonfly-a4-p2-h2.yaml"),
    "fb": ("configs/fb-2d-4x4.conf", "topologies/fb-2d-4x4.yaml"),
}


@dataclass(frozen=True)
class Plan:
    """What one invocation runs (from the command line)."""

    fabrics: tuple[str, ...]
    policies: tuple[str, ...]
    switch_local_on: tuple[str, ...]
    patterns: tuple[str, ...]
    repeats: int
    warmup: float
    measure: float
    drain: float
    link_mbit: float
    queue_bytes: int
    size: int
    load: dict[str, float]
    xoff: int
    xon: int
    refresh_ms: float
    poll_ms: float
    quanta: int
    seed: int
    spread: bool = False
    pause_hold_ms: float | None = None


class UsageError(Exception):
    pass


class Progress(rf.Progress):
    """Timestamped progress lines on stderr, labelled with this tool's name."""

    def __call__(self, message: str) -> None:
        if not self.quiet:
            print(f"[{PROG} {self.elapsed():6.1f}s] {message}", file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="run_experiment.py", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one repeat, short windows (<= 10 minutes)")
    ap.add_argument("--fabrics", default="df,fb", help=f"comma list of {', '.join(FABRICS)}")
    ap.add_argument("--policies", default="minimal,conditional,conditional-switch",
                    help="comma list: minimal, conditional, conditional-switch (conditional with the switch-local "
                         "PAUSE reaction, [hpcfabric] pause_reaction = switch)")
    ap.add_argument("--switch-local-on", default=None,
                    help="fabrics that also run conditional-switch (default: all; with --quick: df)")
    ap.add_argument("--patterns", default="adv,un", help="comma list: adv, un")
    ap.add_argument("--repeats", type=int, default=None, help="runs per (fabric, policy, pattern) (default 3; quick 1)")
    ap.add_argument("--measure", type=float, default=None, help="measured window, s (default 20; quick 8)")
    ap.add_argument("--warmup", type=float, default=3.0)
    ap.add_argument("--drain", type=float, default=1.5, help="load kept on after the window while it drains, s")
    ap.add_argument("--link-mbit", type=float, default=1.0, help="fabric link rate, Mbit/s (default 1)")
    ap.add_argument("--queue-bytes", type=int, default=30000, help="byte FIFO per fabric link direction")
    ap.add_argument("--size", type=int, default=1400, help="UDP payload bytes per frame (fewer frames per bit: less OVS CPU)")
    ap.add_argument("--load-adv", type=float, default=0.5, help="offered load per host under ADV, x link rate")
    ap.add_argument("--load-un", type=float, default=0.3, help="offered load per host under UN, x link rate")
    ap.add_argument("--xoff", type=int, default=5000, help="emulated receiver: XOFF at this queue backlog, bytes")
    ap.add_argument("--xon", type=int, default=1000, help="emulated receiver: XON below this backlog, bytes")
    ap.add_argument("--refresh-ms", type=float, default=100.0, help="XOFF repeat interval while congested")
    ap.add_argument("--poll-ms", type=float, default=10.0, help="backlog poll interval")
    ap.add_argument("--quanta", type=int, default=400, help="XOFF quanta (512 bit times at the link rate)")
    ap.add_argument("--pause-hold-ms", type=float, default=None,
                    help="override the controller's [hpcfabric] pause_hold_ms (minimum time a flipped port stays flipped; "
                         "default: the config's, 50 ms)")
    ap.add_argument("--spread", action="store_true",
                    help="congestion spreading: a switch with a congested output also pauses the fabric links into it "
                         "(lossless.py --spread; default: a congested link pauses only its own sender)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--prefix", default="", help="bridge/interface name prefix (next to another net)")
    ap.add_argument("--out", default=None, help="results directory (default results/experiment-<time>)")
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 unless df_adv_ratio >= 2, df_un_ratio >= 0.9 and fb_adv_ratio > 1 (when measured)")
    return ap.parse_args(argv)


def make_plan(args: argparse.Namespace) -> Plan:
    fabrics = tuple(x.strip() for x in args.fabrics.split(",") if x.strip())
    bad = [f for f in fabrics if f not in FABRICS and not (f.endswith(".conf") and Path(f).is_file())]
    if bad or not fabrics:
        raise UsageError(f"--fabrics: unknown {', '.join(bad) or '(empty)'}; expected a comma list of "
                         f"{', '.join(FABRICS)} or controller .conf files")
    policies = tuple(x.strip() for x in args.policies.split(",") if x.strip())
    bad = [p for p in policies if p not in ("minimal", "conditional", "conditional-switch")]
    if bad or not policies:
        raise UsageError(f"--policies: unknown {', '.join(bad) or '(empty)'}; expected minimal, conditional, "
                         "conditional-switch")
    patterns = tuple(x.strip().lower() for x in args.patterns.split(",") if x.strip())
    bad = [p for p in patterns if p not in ALIASES]
    if bad or not patterns:
        raise UsageError(f"--patterns: unknown {', '.join(bad) or '(empty)'}; expected adv, un")
    patterns = tuple(ALIASES[p] for p in patterns)
    repeats = args.repeats if args.repeats is not None else (1 if args.quick else 3)
    measure = args.measure if args.measure is not None else (8.0 if args.quick else 20.0)
    for name, value, low in (("--repeats", repeats, 1), ("--measure", measure, 1), ("--link-mbit", args.link_mbit, 0.01),
                             ("--size", args.size, 64), ("--queue-bytes", args.queue_bytes, 2 * args.size)):
        if value < low:
            raise UsageError(f"{name} must be >= {low}, got {value}")
    if not 0 < args.load_adv <= 4 or not 0 < args.load_un <= 4:
        raise UsageError("--load-adv/--load-un must be in (0, 4] (x link rate per host)")
    if not 0 <= args.xon < args.xoff:
        raise UsageError(f"need 0 <= --xon ({args.xon}) < --xoff ({args.xoff})")
    if args.xoff >= args.queue_bytes:
        raise UsageError(f"--xoff ({args.xoff}) must be below --queue-bytes ({args.queue_bytes})")
    if not 0 < args.quanta <= 0xFFFF:
        raise UsageError(f"--quanta must be 1..65535, got {args.quanta}")
    if args.switch_local_on is None:
        switch_on = ("df",) if args.quick else fabrics
    else:
        switch_on = tuple(x.strip() for x in args.switch_local_on.split(",") if x.strip())
    return Plan(fabrics, policies, switch_on, patterns, repeats, args.warmup, measure, args.drain, args.link_mbit, args.queue_bytes,
                args.size, {"adversarial": args.load_adv, "uniform": args.load_un}, args.xoff, args.xon,
                args.refresh_ms, args.poll_ms, args.quanta, args.seed, args.spread, args.pause_hold_ms)


# ---------------------------------------------------------------------------
# one (fabric, policy): controller + net


#: OVS other_config:max-idle (ms) while the switch-local mode runs: OVS executes a ``learn`` action only when it
#: translates a frame, and a PAUSE that hits a datapath flow cached from an earlier PAUSE (10 s by default) is
#: learned only at the next revalidation, ~0.5 s later (docs/controller.md, "switch-local PAUSE reaction")
SWITCH_MODE_MAX_IDLE_MS = 200


def set_max_idle(ms: int | str | None) -> str:
    """Set (None: remove) Open vSwitch's other_config:max-idle; returns the previous value ('' if unset)."""
    res = subprocess.run(["ovs-vsctl", "--if-exists", "get", "Open_vSwitch", ".", "other_config:max-idle"],
                         capture_output=True, text=True)
    prev = res.stdout.strip().strip('"') if res.returncode == 0 else ""
    if ms is None:
        subprocess.run(["ovs-vsctl", "remove", "Open_vSwitch", ".", "other_config", "max-idle"], capture_output=True)
    else:
        subprocess.run(["ovs-vsctl", "set", "Open_vSwitch", ".", f"other_config:max-idle={ms}"], check=True,
                       capture_output=True)
    return prev


def ovs_send_buffer() -> int | None:
    """Send buffer (bytes) of ovs-vswitchd's unbound AF_PACKET socket, through which userspace OVS sends on
    every port; None if it cannot be read (no ``ss``, or OVS has not sent anything yet)."""
    try:
        out = subprocess.run(["ss", "-0", "-m", "-p"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in out.splitlines():
        parts = line.split()
        if "ovs-vswitchd" in line and len(parts) > 3 and parts[3].startswith("[0]"):
            m = re.search(r"\btb(\d+)", line)
            if m:
                return int(m.group(1))
    return None


def check_send_buffer(plan: Plan, n_links: int) -> None:
    """Refuse to measure when OVS's send socket cannot hold the shaped queues (sends would fail silently)."""
    tb = ovs_send_buffer()
    need = min(64 << 20, int(n_links * plan.queue_bytes * 2.3 * 4))  # every queue full + receive queues, skb overhead
    if tb is not None and tb < need:
        raise UsageError(
            f"Open vSwitch's send socket buffer is {tb} bytes, below the {need} the shaped queues need: frames "
            "would be dropped outside the emulated links. Stop every Mininet net and run 'make setup' (it raises "
            "net.core.wmem_default and restarts Open vSwitch); see docs/experiments.md")


def write_config(base: Path, tmp: Path, policy: str, link_mbit: float, port: int, status: Path,
                 pause_hold_ms: float | None = None) -> Path:
    """A copy of the shipped config with the policy, the emulated link speed, our status file and port."""
    parser = configparser.ConfigParser(interpolation=None, inline_comment_prefixes=(";", "#"), default_section="\0none")
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(base, encoding="utf-8")
    hf = parser["hpcfabric"]
    hf["topology"] = str((base.parent / hf["topology"].strip()).resolve())
    hf["routing"] = "conditional" if policy.startswith("conditional") else policy
    if policy == "conditional-switch":
        hf["pause_reaction"] = "switch"
        if "failover" in parser:  # fast-failover groups and the switch-local reaction do not combine
            parser["failover"]["fast_failover"] = "off"
    hf["link_speed_gbps"] = repr(link_mbit / 1000)  # PAUSE quanta are 512 bit times at the emulated rate
    hf["status_file"] = str(status)
    if pause_hold_ms is not None:
        hf["pause_hold_ms"] = f"{pause_hold_ms:g}"
    if "openflow" not in parser:
        parser["openflow"] = {}
    parser["openflow"]["listen_host"] = "127.0.0.1"
    parser["openflow"]["listen_port"] = str(port)
    for section in ("metrics",):  # one run at a time must not fight over a metrics port
        if section in parser:
            parser[section]["listen"] = ""
    path = tmp / f"{policy}.conf"
    with open(path, "w", encoding="utf-8") as f:
        parser.write(f)
    return path


def ping_again(net: Any, src: str, dst: str, count: int = 3) -> bool:
    """One pair, ``count`` pings: True if any came back."""
    out = fn.node(net, src).cmd(f"ping -n -q -c {count} -i 0.2 -W 1 {net.hf_ips[dst]}")
    return "received" in out and " 0 received" not in out


def check_reachability(net: Any, fabric: Any, attempts: int = 3) -> dict[str, Any]:
    """All-pairs ping before shaping; a busy 2-core box drops the odd echo, so lost pairs are retried
    (whole sweep up to ``attempts`` times, then the <= 20 remaining pairs one by one). Raises CheckFailed."""
    for _ in range(attempts):
        ping = rf.all_pairs_ping(net, fabric)
        if not ping["lost"]:
            return ping
        time.sleep(1.0)
    if ping["unreachable_pairs"] <= len(ping["lost_pairs"]):
        still = [p for p in ping["lost_pairs"] if not ping_again(net, *p.split("->"))]
        if not still:
            return ping
    else:
        still = ping["lost_pairs"]
    raise rf.CheckFailed(f"all-pairs ping before the experiment: {ping['unreachable_pairs']} pair(s) unreachable, "
                         f"e.g. {still[:3]}")


def alternative_frames(net: Any, fabric: Any) -> int:
    """Frames counted by table ALTERNATIVE's entries on every switch (the diverted ones)."""
    fn.sync_stats()
    total = 0
    for sw in fabric.switches:
        for f in fn.dump_flows(net.hf_prefix + sw.name, table=TABLE_ALTERNATIVE):
            total += f.n_packets
    return total


def queue_drops(links: list[lossless.ShapedLink]) -> int:
    reader = lossless.QdiscReader()
    try:
        stats = reader.read()
    finally:
        reader.close()
    idx = {lossless.ifindex(l.iface) for l in links}
    return sum(q.drops for i, q in stats.items() if i in idx)


def run_traffic(net: Any, fabric: Any, dests: dict[str, tuple[str, ...]], pps: float, plan: Plan, seed: int,
                work: Path, links_file: Path, links: list[lossless.ShapedLink]) -> dict[str, Any]:
    """One measured run: emulator + one generator per host; returns the raw per-host results and emulator report."""
    emu_cmd = [sys.executable, str(LOSSLESS), str(links_file), "--xoff", str(plan.xoff), "--xon", str(plan.xon),
               "--quanta", str(plan.quanta), "--refresh-ms", str(plan.refresh_ms), "--poll-ms", str(plan.poll_ms)]
    if plan.spread:
        emu_cmd.append("--spread")
    emu = subprocess.Popen(emu_cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = emu.stdout.readline().strip() if emu.stdout else ""
    if line != "ready":
        emu.kill()
        raise rf.CheckFailed(f"PAUSE emulator did not start: {line} {emu.stderr.read() if emu.stderr else ''}")
    ips = net.hf_ips
    hosts = sorted(h.name for h in fabric.hosts)
    ids = {h: i for i, h in enumerate(hosts)}
    outdir = work / f"run{seed}"
    outdir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic() + 1.0 + 0.03 * len(hosts)
    procs = []
    total = plan.warmup + plan.measure + plan.drain
    drops0 = queue_drops(links)
    for h in hosts:
        cmd = [sys.executable, str(TRAFFIC), "--id", str(ids[h]), "--dests", ",".join(ips[d] for d in dests[h]),
               "--pps", f"{pps:.6f}", "--size", str(plan.size), "--start", f"{t0:.6f}", "--warmup", str(plan.warmup),
               "--measure", str(plan.measure), "--drain", str(plan.drain), "--seed", str(seed * 1000 + ids[h]),
               "--out", str(outdir / f"{h}.json")]
        procs.append((h, fn.node(net, h).popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)))
    deadline = t0 + total + 15
    errors = []
    for h, p in procs:
        try:
            p.wait(max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            errors.append(f"{h}: generator timed out")
            continue
        if p.returncode:
            err = p.stderr.read().decode(errors="replace").strip() if p.stderr else ""
            errors.append(f"{h}: exit {p.returncode} {err[-200:]}")
    emu.send_signal(signal.SIGTERM)
    try:
        out, err = emu.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        emu.kill()
        out, err = emu.communicate()
    try:
        emu_report = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        emu_report = {"error": (err or out)[-300:]}
    if errors:
        raise rf.CheckFailed("traffic generators failed: " + "; ".join(errors[:5]))
    per_host = {}
    for h in hosts:
        with open(outdir / f"{h}.json") as f:
            per_host[h] = json.load(f)
    return {"hosts": per_host, "ids": ids, "emulator": emu_report, "queue_drops": queue_drops(links) - drops0}


def summarise(raw: dict[str, Any], plan: Plan) -> dict[str, Any]:
    """Aggregate throughput, per-source throughput, loss and latency of one run."""
    hosts = raw["hosts"]
    sent_all = sum(r["sent"] for r in hosts.values())
    rx_all = sum(r["rx_total"] for r in hosts.values())
    window = plan.measure
    bits = plan.size * 8
    sent = sum(r["sent_measured"] for r in hosts.values())
    received = sum(r["rx_measured"] for r in hosts.values())
    by_src: dict[int, int] = {}
    for r in hosts.values():
        for src, n in r["rx_measured_by_src"].items():
            by_src[int(src)] = by_src.get(int(src), 0) + n
    per_source = [by_src.get(i, 0) * bits / window / 1e6 for i in raw["ids"].values()]
    offered = [r["sent_measured"] * bits / window / 1e6 for r in hosts.values()]
    lat = sorted(x for r in hosts.values() for x in r["latency_ms_sample"])
    lat_sum = sum(r["latency_ms_sum"] for r in hosts.values())
    jain = (sum(per_source) ** 2 / (len(per_source) * sum(x * x for x in per_source))) if any(per_source) else 0.0

    def pct(q: float) -> float | None:
        return round(lat[min(len(lat) - 1, int(q * len(lat)))], 2) if lat else None

    emu = raw.get("emulator") or {}
    return {
        "offered_mbps": round(sum(offered), 3),
        "throughput_mbps": round(received * bits / window / 1e6, 3),
        "loss": round(1 - received / sent, 4) if sent else None,
        "sent": sent,
        "received": received,
        "per_source_mbps": {"min": round(min(per_source), 4), "median": round(statistics.median(per_source), 4),
                            "max": round(max(per_source), 4)},
        "per_source_all_mbps": [round(x, 4) for x in per_source],
        "jain_fairness": round(jain, 4),
        "latency_ms": {"mean": round(lat_sum / received, 2) if received else None, "p50": pct(0.5), "p99": pct(0.99),
                       "max": round(max((r["latency_ms_max"] for r in hosts.values()), default=0.0), 2)},
        "latency_sample_ms": lat[:: max(1, len(lat) // 2000)],
        "pause_xoff_frames": emu.get("xoff_frames"),
        "pause_episodes": emu.get("episodes"),
        "emulator_poll_ms": emu.get("poll_ms_avg"),
        "emulator_links_paused": len(emu.get("links") or {}),
        "queue_drops": raw.get("queue_drops"),
        # frames of the whole run (warm-up and drain too) lost neither in an emulated link queue nor delivered:
        # dropped by userspace OVS itself (receive/send overload), see docs/experiments.md
        "lost_outside_queues": round(max(0, sent_all - rx_all - (raw.get("queue_drops") or 0)) / sent_all, 4)
        if sent_all else None,
        "emulator_links": emu.get("links") or {},
    }


def run_policy(label: str, policy: str, plan: Plan, prefix: str, work: Path, progress: Progress) -> list[dict[str, Any]]:
    """Controller + net for one (fabric, policy), then every pattern x repeat. Returns one record per run."""
    cfg_file = FABRICS[label][0] if label in FABRICS else str(Path(label).resolve())
    label = label if label in FABRICS else Path(label).stem
    tmp = work / f"{label}-{policy}"
    tmp.mkdir(parents=True, exist_ok=True)
    port = rf.free_port()
    status_file = tmp / "status.json"
    conf = write_config(ROOT / cfg_file, tmp, policy, plan.link_mbit, port, status_file, plan.pause_hold_ms)
    try:
        cfg = load_config(conf)
    except HpcfabricError as err:
        raise UsageError(f"{policy} on {label}: {err}") from None
    fabric = cfg.fabric
    controller = rf.Controller(conf, status_file, port, tmp / "controller.log")
    net = None
    records: list[dict[str, Any]] = []
    max_idle = None
    try:
        if policy == "conditional-switch":
            max_idle = set_max_idle(SWITCH_MODE_MAX_IDLE_MS)
        controller.start()
        net = fn.build_net(fabric, cfg.plan, controller_port=port, prefix=prefix)
        status = controller.wait_ready(len(fabric.switches), 120, progress)
        dmp = fn.run_dmp(net)
        macs = fn.host_macs(net)
        wrong = [h.name for h in fabric.hosts if macs.get(h.name) != cfg.plan.host_mac[h.name]]
        if wrong:
            raise rf.CheckFailed(f"DMP: {len(wrong)} host(s) without their planned MAC, e.g. {wrong[0]} "
                                 f"({dmp.get(wrong[0])})")
        fn.set_static_neighbours(net, cfg.plan)
        ping = check_reachability(net, fabric)
        progress(f"{label}/{policy}: {status['rules_installed']} rules, DMP {len(fabric.hosts)}/{len(fabric.hosts)}, "
                 f"all-pairs ping: {ping['pairs']} pairs reachable")
        links = lossless.fabric_directions(fabric, prefix)
        check_send_buffer(plan, len(links))
        lossless.shape_links(links, lossless.LinkShape(plan.link_mbit, plan.queue_bytes))
        links_file = tmp / "links.json"
        links_file.write_text(json.dumps([l.__dict__ for l in links]))
        for pat in plan.patterns:
            dests = pattern(fabric, pat)
            pps = plan.load[pat] * plan.link_mbit * 1e6 / (plan.size * 8)
            for rep in range(plan.repeats):
                seed = plan.seed + rep
                st0 = controller.status() or {}
                alt0 = alternative_frames(net, fabric)
                raw = run_traffic(net, fabric, dests, pps, plan, seed, tmp / pat, links_file, links)
                alt1 = alternative_frames(net, fabric)
                st1 = controller.status() or {}
                rec = {"fabric": label, "topology": fabric.name, "policy": policy, "pattern": pat, "repeat": rep,
                       "seed": seed, "load": plan.load[pat], "pps_per_host": round(pps, 3)}
                rec.update(summarise(raw, plan))
                p0, p1 = st0.get("pause") or {}, st1.get("pause") or {}
                rec["controller_flips"] = (p1.get("flips") or 0) - (p0.get("flips") or 0)
                rec["controller_pause_frames"] = (p1.get("frames") or 0) - (p0.get("frames") or 0)
                react = (p1.get("reaction_ms") or [])
                rec["controller_reaction_ms_p50"] = round(statistics.median(react), 3) if react else None
                rec["alternative_frames"] = alt1 - alt0
                records.append(rec)
                progress(f"  {label} {policy:18s} {pat:11s} #{rep}: {rec['throughput_mbps']:.2f} of "
                         f"{rec['offered_mbps']:.2f} Mbit/s, loss {rec['loss']:.1%}, p50 {rec['latency_ms']['p50']} ms, "
                         f"XOFF {rec['pause_xoff_frames']}, flips {rec['controller_flips']}, "
                         f"diverted {rec['alternative_frames']}")
        return records
    finally:
        if net is not None:
            try:
                net.stop()
            except Exception as err:  # noqa: BLE001 - keep tearing down
                progress(f"net.stop failed: {err}")
        controller.stop()
        if max_idle is not None:
            set_max_idle(max_idle or None)


# ---------------------------------------------------------------------------
# results


def mean(xs: list[float]) -> float | None:
    return round(statistics.fmean(xs), 4) if xs else None


def table(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (fabric, pattern, policy): means (and spread) over the repeats."""
    keys: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in records:
        keys.setdefault((r["fabric"], r["pattern"], r["policy"]), []).append(r)
    rows = []
    for (fab, pat, pol), rs in keys.items():
        thr = [r["throughput_mbps"] for r in rs]
        rows.append({
            "fabric": fab, "pattern": pat, "policy": pol, "runs": len(rs),
            "offered_mbps": mean([r["offered_mbps"] for r in rs]),
            "throughput_mbps": mean(thr),
            "throughput_min": min(thr), "throughput_max": max(thr),
            "loss": mean([r["loss"] for r in rs if r["loss"] is not None]),
            "latency_p50_ms": mean([r["latency_ms"]["p50"] for r in rs if r["latency_ms"]["p50"] is not None]),
            "latency_p99_ms": mean([r["latency_ms"]["p99"] for r in rs if r["latency_ms"]["p99"] is not None]),
            "per_source_min_mbps": mean([r["per_source_mbps"]["min"] for r in rs]),
            "jain_fairness": mean([r["jain_fairness"] for r in rs]),
            "pause_xoff_frames": mean([r["pause_xoff_frames"] or 0 for r in rs]),
            "controller_flips": mean([r["controller_flips"] for r in rs]),
            "queue_drops": mean([r["queue_drops"] or 0 for r in rs]),
            "lost_outside_queues": mean([r["lost_outside_queues"] or 0 for r in rs]),
            "alternative_frames": mean([r["alternative_frames"] for r in rs]),
        })
    return rows


def ratios(rows: list[dict[str, Any]]) -> dict[str, Any]:
    by = {(r["fabric"], r["pattern"], r["policy"]): r for r in rows}
    out: dict[str, Any] = {}
    for fab in sorted({r["fabric"] for r in rows}):
        for pat, short in (("adversarial", "adv"), ("uniform", "un")):
            base = by.get((fab, pat, "minimal"))
            for pol, suffix in (("conditional", ""), ("conditional-switch", "_switch"), ("valiant", "_valiant")):
                other = by.get((fab, pat, pol))
                if base and other and base["throughput_mbps"]:
                    out[f"{fab}_{short}_ratio{suffix}"] = round(other["throughput_mbps"] / base["throughput_mbps"], 3)
            for pol, name in (("minimal", "minimal"), ("conditional", "conditional")):
                r = by.get((fab, pat, pol))
                if r and pat == "uniform":
                    out[f"{fab}_un_loss_{name}"] = r["loss"]
    return out


def plots(records: list[dict[str, Any]], rows: list[dict[str, Any]], out: Path) -> list[str]:
    """Throughput bars, latency CDFs and per-source throughput box plots (PNG). Returns the file names."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    files = []
    fabrics = sorted({r["fabric"] for r in rows})
    patterns = sorted({r["pattern"] for r in rows})
    policies = [p for p in ("minimal", "valiant", "conditional", "conditional-switch") if any(r["policy"] == p for r in rows)]
    fig, axes = plt.subplots(1, len(fabrics), figsize=(5 * len(fabrics), 4), squeeze=False)
    for ax, fab in zip(axes[0], fabrics):
        here = [p for p in policies if any(r["policy"] == p and r["fabric"] == fab for r in rows)]
        width = 0.8 / max(len(here), 1)
        for i, pol in enumerate(here):
            ys, lo, hi = [], [], []
            for pat in patterns:
                r = next((r for r in rows if r["fabric"] == fab and r["pattern"] == pat and r["policy"] == pol), None)
                ys.append(r["throughput_mbps"] if r else 0)
                lo.append((r["throughput_mbps"] - r["throughput_min"]) if r else 0)
                hi.append((r["throughput_max"] - r["throughput_mbps"]) if r else 0)
            xs = [j + i * width for j in range(len(patterns))]
            ax.bar(xs, ys, width, yerr=[lo, hi], capsize=3, label=pol)
        offered = [next((r["offered_mbps"] for r in rows if r["fabric"] == fab and r["pattern"] == pat), 0) for pat in patterns]
        for j, o in enumerate(offered):
            ax.hlines(o, j - width / 2, j - width / 2 + width * len(here), colors="k", linestyles="dashed")
        ax.set_xticks([j + width * (len(here) - 1) / 2 for j in range(len(patterns))])
        ax.set_xticklabels(patterns)
        ax.set_title(f"{fab}: aggregate delivered throughput")
        ax.set_ylabel("Mbit/s (dashed: offered)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "throughput.png", dpi=110)
    plt.close(fig)
    files.append("throughput.png")

    def latency_cdf(ax: Any, fab: str, pat: str) -> None:
        for pol in policies:
            lat = sorted(x for r in records if r["fabric"] == fab and r["pattern"] == pat and r["policy"] == pol
                         for x in r["latency_sample_ms"])
            if lat:
                ax.plot(lat, [(i + 1) / len(lat) for i in range(len(lat))], label=pol)
        ax.set_xscale("log")
        ax.set_title(f"{fab} {pat}: one-way latency CDF")
        ax.set_xlabel("ms")
        ax.legend(fontsize=8)

    def per_source(ax: Any, fab: str, pat: str) -> None:
        here = [p for p in policies if any(r["policy"] == p and r["fabric"] == fab for r in records)]
        ax.boxplot([[x for r in records if r["fabric"] == fab and r["pattern"] == pat and r["policy"] == pol
                     for x in r["per_source_all_mbps"]] for pol in here])
        ax.set_xticks(range(1, len(here) + 1), here)
        ax.set_title(f"{fab} {pat}: per-source throughput")
        ax.set_ylabel("Mbit/s")
        ax.tick_params(axis="x", labelsize=8)

    for name, draw in (("latency_cdf.png", latency_cdf), ("per_source.png", per_source)):
        fig, axes = plt.subplots(len(fabrics), len(patterns), figsize=(5 * len(patterns), 3.6 * len(fabrics)),
                                 squeeze=False)
        for a, fab in enumerate(fabrics):
            for b, pat in enumerate(patterns):
                draw(axes[a][b], fab, pat)
        fig.tight_layout()
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        files.append(name)
    return files


def report_md(rows: list[dict[str, Any]], summary: dict[str, Any], plan: Plan, files: list[str]) -> str:
    lines = [
        "# Experiment results",
        "",
        f"Generated by `mininet/run_experiment.py` on {time.strftime('%Y-%m-%d %H:%M')}: fabric links "
        f"{plan.link_mbit:g} Mbit/s with a {plan.queue_bytes}-byte FIFO, {plan.size}-byte UDP frames, "
        f"{plan.repeats} repeat(s) of {plan.warmup:g} s warm-up + {plan.measure:g} s measured; offered load per host "
        f"ADV {plan.load['adversarial']:g} x, UN {plan.load['uniform']:g} x link rate; PAUSE emulator XOFF at "
        f"{plan.xoff} B, XON below {plan.xon} B, {plan.quanta} quanta, refreshed every {plan.refresh_ms:g} ms.",
        "",
        "| fabric | pattern | policy | runs | offered Mbit/s | delivered Mbit/s (min–max) | loss | p50 / p99 latency ms "
        "| min per-source Mbit/s | Jain | XOFF frames | flips | diverted frames | lost outside queues |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(rows, key=lambda r: (r["fabric"], r["pattern"], r["policy"])):
        lines.append(
            f"| {r['fabric']} | {r['pattern']} | {r['policy']} | {r['runs']} | {r['offered_mbps']:.2f} | "
            f"{r['throughput_mbps']:.2f} ({r['throughput_min']:.2f}–{r['throughput_max']:.2f}) | "
            f"{(r['loss'] or 0):.1%} | {r['latency_p50_ms']} / {r['latency_p99_ms']} | {r['per_source_min_mbps']:.3f} | "
            f"{r['jain_fairness']:.2f} | {r['pause_xoff_frames']:.0f} | {r['controller_flips']:.0f} | "
            f"{r['alternative_frames']:.0f} | {(r['lost_outside_queues'] or 0):.1%} |")
    lines += ["", "Ratios (conditional / minimal aggregate throughput, this run): `" + json.dumps(
        {k: v for k, v in summary.items() if "ratio" in k or "loss" in k}, sort_keys=True) + "`", ""]
    for f in files:
        lines.append(f"![{f}]({f})")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    progress = Progress(False)
    summary: dict[str, Any] = {"passed": False}
    code = EXIT_FAILED
    work = Path(tempfile.mkdtemp(prefix="hfexp"))

    def on_signal(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    records: list[dict[str, Any]] = []
    out = Path(args.out) if args.out else ROOT / "results" / time.strftime("experiment-%Y%m%d-%H%M%S")
    failures: list[str] = []
    try:
        plan = make_plan(args)
        if os.geteuid() != 0:
            raise UsageError("must run as root (Mininet, Open vSwitch, tc, raw sockets)")
        if not fn.ovs_running():
            raise UsageError("Open vSwitch is not running: run 'make setup' (scripts/bootstrap.sh)")
        if shutil.which("tc") is None:
            raise UsageError("tc (iproute2) is not installed")
        from mininet.log import setLogLevel

        setLogLevel("error")
        out.mkdir(parents=True, exist_ok=True)
        progress(f"plan: fabrics {','.join(plan.fabrics)}, policies {','.join(plan.policies)}, patterns "
                 f"{','.join(plan.patterns)}, {plan.repeats} repeat(s) x {plan.measure:g} s; links {plan.link_mbit:g} Mbit/s; "
                 f"results in {out}")
        for label in plan.fabrics:
            for policy in plan.policies:
                if policy == "conditional-switch" and label not in plan.switch_local_on:
                    continue
                for attempt in (1, 2):  # Mininet's shell plumbing fails now and then (e.g. a UTF-8 read split)
                    try:
                        records += run_policy(label, policy, plan, args.prefix, work, progress)
                        break
                    except (UsageError, KeyboardInterrupt):
                        raise
                    except Exception as err:  # noqa: BLE001 - one retry from a fresh net, then report
                        progress(f"{label}/{policy}: attempt {attempt} failed: {type(err).__name__}: {err}")
                        if attempt == 2:
                            failures.append(f"{label}/{policy}: {type(err).__name__}: {err}")
        if not records:
            raise rf.CheckFailed("no run completed")
        rows = table(records)
        summary.update(ratios(rows))
        (out / "results.json").write_text(json.dumps({"plan": plan.__dict__, "rows": rows, "runs": records}, indent=1))
        files = [] if args.no_plots else plots(records, rows, out)
        (out / "report.md").write_text(report_md(rows, summary, plan, files))
        summary["results"] = str(out)
        code = EXIT_FAILED if failures else EXIT_OK
        if args.check:
            checks = {"df_adv_ratio": (lambda v: v >= 2), "df_un_ratio": (lambda v: v >= 0.9), "fb_adv_ratio": (lambda v: v > 1)}
            for key, ok in checks.items():
                if key in summary and not ok(summary[key]):
                    failures.append(f"{key} = {summary[key]} misses its target")
            lm, lc = summary.get("df_un_loss_minimal"), summary.get("df_un_loss_conditional")
            if lm is not None and lc is not None and lc > lm + 0.005:
                failures.append(f"UN loss conditional {lc} > minimal {lm}")
            if failures:
                code = EXIT_FAILED
    except UsageError as err:
        failures.append(str(err))
        code = EXIT_USAGE
    except (rf.CheckFailed, HpcfabricError, fn.FabricNetError, lossless.LosslessError) as err:
        failures.append(str(err))
        code = EXIT_FAILED
    except KeyboardInterrupt:
        failures.append("interrupted")
        code = EXIT_INTERRUPTED
    finally:
        if code == EXIT_OK:
            shutil.rmtree(work, ignore_errors=True)
        else:
            summary["logs"] = str(work)
    summary["failures"] = failures
    summary["passed"] = code == EXIT_OK
    summary["seconds"] = round(progress.elapsed(), 1)
    for f in failures:
        print(f"[{PROG}] FAILED: {f}", file=sys.stderr)
    print(json.dumps(summary, sort_keys=True), flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
