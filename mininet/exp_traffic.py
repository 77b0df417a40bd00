"""Experiment steps: the measured runs of ``run_experiment.py`` on a shaped, lossless-emulated fabric.

* :class:`Plan`: what one invocation measures (the runner builds it from its arguments).
* Open vSwitch settings the measurement depends on: :func:`set_max_idle` (the switch-local PAUSE
  mode), :func:`check_send_buffer` (refuse to measure when OVS's send socket cannot hold the queues).
* :func:`measure`: one run -- the PAUSE emulator (``lossless.py``) and one generator per host
  (``traffic.py``) with a common start time (:func:`run_traffic`), summarised (:func:`summarise`) with
  the controller's flips and the frames table ALTERNATIVE diverted -- as one record.
"""

from __future__ import annotations

import json
import re
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lossless  # mininet/lossless.py
from fabric_topo import node
from ovs_flows import table_packets
from runkit import CheckFailed, UsageError

from hpcfabric.rules.flows import TABLE_ALTERNATIVE

HERE = Path(__file__).resolve().parent
TRAFFIC = HERE / "traffic.py"
LOSSLESS = HERE / "lossless.py"

#: OVS other_config:max-idle (ms) while the switch-local mode runs: OVS executes a ``learn`` action only when it
#: translates a frame, and a PAUSE that hits a datapath flow cached from an earlier PAUSE (10 s by default) is
#: learned only at the next revalidation, ~0.5 s later (docs/controller.md, "switch-local PAUSE reaction")
SWITCH_MODE_MAX_IDLE_MS = 200


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


# ---------------------------------------------------------------------------
# Open vSwitch settings


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


# ---------------------------------------------------------------------------
# one measured run


def queue_drops(links: list[lossless.ShapedLink]) -> int:
    reader = lossless.QdiscReader()
    try:
        stats = reader.read()
    finally:
        reader.close()
    idx = {lossless.ifindex(l.iface) for l in links}
    return sum(q.drops for i, q in stats.items() if i in idx)


def run_traffic(net: Any, fabric: Any, dests: dict[str, tuple[str, ...]], pps: float, plan: Plan, seed: int,
                work: Path, links_file: Path, links: list[lossless.ShapedLink],
                pfc_classes: tuple[int, ...] = ()) -> dict[str, Any]:
    """One measured run: emulator + one generator per host; returns the raw per-host results and emulator report.
    ``pfc_classes``: the emulator sends PFC frames pausing these priorities (the classes in use), else 802.3x."""
    emu_cmd = [sys.executable, str(LOSSLESS), str(links_file), "--xoff", str(plan.xoff), "--xon", str(plan.xon),
               "--quanta", str(plan.quanta), "--refresh-ms", str(plan.refresh_ms), "--poll-ms", str(plan.poll_ms)]
    if pfc_classes:
        emu_cmd += ["--pfc-classes", ",".join(map(str, pfc_classes))]
    if plan.spread:
        emu_cmd.append("--spread")
    emu = subprocess.Popen(emu_cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = emu.stdout.readline().strip() if emu.stdout else ""
    if line != "ready":
        emu.kill()
        raise CheckFailed(f"PAUSE emulator did not start: {line} {emu.stderr.read() if emu.stderr else ''}")
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
        procs.append((h, node(net, h).popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)))
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
        raise CheckFailed("traffic generators failed: " + "; ".join(errors[:5]))
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


def measure(net: Any, fabric: Any, controller: Any, record: dict[str, Any], dests: dict[str, tuple[str, ...]],
            pps: float, plan: Plan, seed: int, work: Path, links_file: Path,
            links: list[lossless.ShapedLink]) -> dict[str, Any]:
    """One measured run as a record: ``record`` (what ran) + :func:`summarise` + the controller's flips, PAUSE
    frames and reaction (status-file deltas) + ``alternative_frames`` (frames table ALTERNATIVE counted)."""
    st0 = controller.status() or {}
    alt0 = table_packets(net, TABLE_ALTERNATIVE)
    dl = st0.get("deadlock") or {}
    levels = int(dl.get("levels") or 0) if dl.get("scheme") not in (None, "off") else 0
    pfc_classes = tuple(range(levels))  # the classes of service the running tables use (PCP 0..levels-1)
    raw = run_traffic(net, fabric, dests, pps, plan, seed, work, links_file, links, pfc_classes)
    alt1 = table_packets(net, TABLE_ALTERNATIVE)
    st1 = controller.status() or {}
    rec = dict(record)
    rec.update(summarise(raw, plan))
    p0, p1 = st0.get("pause") or {}, st1.get("pause") or {}
    rec["controller_flips"] = (p1.get("flips") or 0) - (p0.get("flips") or 0)
    rec["controller_pause_frames"] = (p1.get("frames") or 0) - (p0.get("frames") or 0)
    react = (p1.get("reaction_ms") or [])
    rec["controller_reaction_ms_p50"] = round(statistics.median(react), 3) if react else None
    rec["alternative_frames"] = alt1 - alt0
    rec["cos"] = f"{dl.get('scheme')}/{dl.get('levels')}" if levels else "off"
    rec["flow_control"] = f"pfc {','.join(map(str, pfc_classes))}" if pfc_classes else "802.3x pause"
    return rec
