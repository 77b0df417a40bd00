#!/usr/bin/env python3
"""End-to-end run of an hpcfabric fabric in Mininet (userspace Open vSwitch).

    .venv/bin/python mininet/run_fabric.py --topology topologies/X.yaml --config configs/X.conf
    .venv/bin/python mininet/run_fabric.py --topology topologies/X.yaml --static

Controller mode (default) starts ``hpcfabric controller`` as a subprocess
(own config copy, status file and listen port in a temp dir); ``--static``
installs the compiled flows with ``ovs-ofctl --bundle add-flows`` instead and
plays the controller's part in the PAUSE test itself (flow-table baseline).

Steps (progress on stderr): controller -> Mininet net -> wait until every
switch is confirmed and rules_installed == rules_expected (and each bridge
holds exactly the compiled flows) -> DMP on every host -> every host's MAC
equals the plan -> static neighbour entries -> all-pairs ping -> PAUSE test
(flip to table 3, traffic diverted, expiry restores the default path) ->
teardown (also on Ctrl-C / SIGTERM / errors). The last stdout line is a
one-line JSON summary; exit 0 only if every check passed (1 failed checks,
2 bad arguments or environment, 130 interrupted).
"""

from __future__ import annotations

import argparse
import configparser
import json
import math
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for _p in (str(HERE), str(ROOT)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import fabric_net as fn  # noqa: E402  (mininet/fabric_net.py, imported by path)

from hpcfabric.rules.addressing import AddressPlan, format_mac, plan_addresses  # noqa: E402
from hpcfabric.rules.compiler import compile_fabric  # noqa: E402
from hpcfabric.rules.port_state import port_state_flow  # noqa: E402
from hpcfabric.errors import HpcfabricError  # noqa: E402
from hpcfabric.rules.flows import TABLE_ALTERNATIVE, TABLE_PORT_STATE  # noqa: E402
from hpcfabric.protocols.pause import QUANTUM_BITS  # noqa: E402
from hpcfabric.verify.pipeline import Frame, Pipeline  # noqa: E402
from hpcfabric.topology.loader import load_topology  # noqa: E402
from hpcfabric.topology.model import Fabric  # noqa: E402

PROG = "run_fabric"
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
MAX_QUANTA = 0xFFFF


class UsageError(Exception):
    """Bad arguments or environment: exit 2."""


class CheckFailed(Exception):
    """A step failed in a way that makes the following steps pointless."""


# ---------------------------------------------------------------------------
# progress


class Progress:
    def __init__(self, quiet: bool = False):
        self.quiet = quiet
        self.t0 = time.monotonic()

    def __call__(self, message: str) -> None:
        if not self.quiet:
            print(f"[{PROG} {time.monotonic() - self.t0:6.1f}s] {message}", file=sys.stderr, flush=True)

    def elapsed(self) -> float:
        return time.monotonic() - self.t0


# ---------------------------------------------------------------------------
# what to run: fabric, plan, flows


@dataclass
class Setup:
    fabric: Fabric
    plan: AddressPlan
    routing: str
    link_speed_gbps: float
    desired: dict[str, tuple]  # switch -> flows the switch must hold
    config_path: str | None = None  # the config given to the controller (controller mode)
    compiled: Any = None


def _abs(path: str, base: Path | None = None) -> str:
    p = Path(os.path.expanduser(path))
    if not p.is_absolute():
        p = (base or Path.cwd()) / p
    return os.path.normpath(str(p))


def controller_available() -> bool:
    """True if the controller package ``hpcfabric.controller`` can be imported (exists)."""
    import importlib.util

    try:
        return importlib.util.find_spec("hpcfabric.controller") is not None
    except (ImportError, ValueError):
        return False


def write_config(args: argparse.Namespace, tmp: Path, listen_port: int, status_file: Path) -> Path:
    """The controller's config: a copy of ``--config`` (if any) with the command-line overrides,
    absolute paths, our status file and listen port."""
    parser = configparser.ConfigParser(
        interpolation=None, inline_comment_prefixes=(";", "#"), default_section="\0none"
    )
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    base = Path.cwd()
    if args.config:
        src = Path(args.config)
        if not src.is_file():
            raise UsageError(f"config file {args.config} does not exist")
        parser.read(src, encoding="utf-8")
        base = src.resolve().parent
    for section in ("hpcfabric", "openflow"):
        if section not in parser:
            parser[section] = {}
    hf = parser["hpcfabric"]
    if args.topology:
        hf["topology"] = _abs(args.topology)
    elif hf.get("topology", "").strip():
        hf["topology"] = _abs(hf["topology"].strip(), base)
    else:
        raise UsageError("no topology: give --topology or a --config with [hpcfabric] topology")
    if args.addressing:
        hf["addressing"] = args.addressing
        if not args.config:
            hf["widths"] = ""
    if args.routing:
        hf["routing"] = args.routing
    elif not hf.get("routing", "").strip():  # our default where the fabric supports it
        fabric = load_topology(hf["topology"])
        mode = hf.get("addressing", "").strip() or (fabric.params.get("addressing") or {}).get("mode") or "compact"
        hf["routing"] = "conditional" if _conditional_ok(fabric, mode) else "minimal"
    if args.link_speed_gbps:
        hf["link_speed_gbps"] = repr(args.link_speed_gbps)
    hf["status_file"] = str(status_file)
    parser["openflow"]["listen_host"] = "127.0.0.1"
    parser["openflow"]["listen_port"] = str(listen_port)
    path = tmp / "controller.conf"
    with open(path, "w", encoding="utf-8") as f:
        parser.write(f)
    return path


def setup_from_config(path: Path) -> Setup:
    """Fabric, plan and desired flows exactly as the controller computes them from ``path``."""
    from hpcfabric.config import load_config

    from hpcfabric.verify.pipeline import resolve_groups

    cfg = load_config(path)
    return Setup(
        cfg.fabric,
        cfg.plan,
        cfg.routing,
        cfg.link_speed_gbps,
        # fast-failover groups resolved as the switches run them with every link up (same entries, plain
        # outputs), so the reference pipeline needs no group table
        {k: resolve_groups(v, cfg.groups.get(k, ()), ()) for k, v in cfg.desired.items()},
        str(path),
        cfg.compiled,
    )


def setup_from_topology(args: argparse.Namespace) -> Setup:
    """Static mode without a config: compile from --topology and the overrides."""
    fabric = load_topology(args.topology)
    defaults = fabric.params.get("addressing") or {}
    mode = args.addressing or defaults.get("mode") or "compact"
    widths = defaults.get("widths") if defaults.get("mode", mode) == mode else None
    plan = plan_addresses(fabric, mode, widths)
    routing = args.routing or ("conditional" if _conditional_ok(fabric, mode) else "minimal")
    compiled = compile_fabric(fabric, plan, routing=routing)
    desired = {name: t.flows for name, t in compiled.tables.items()}
    return Setup(fabric, plan, routing, args.link_speed_gbps or 10.0, desired, None, compiled)


def _conditional_ok(fabric: Fabric, mode: str) -> bool:
    return fabric.kind == "dragonfly" or (fabric.kind == "flattened_butterfly" and mode == "compact")


# ---------------------------------------------------------------------------
# controller subprocess


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_listening(port: int) -> bool:
    """Is a TCP socket LISTENing on ``port`` (any address)? Reads /proc/net/tcp{,6}."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    parts = line.split()
                    if parts[3] == "0A" and int(parts[1].rsplit(":", 1)[1], 16) == port:
                        return True
        except (OSError, StopIteration):
            continue
    return False


def controller_command() -> list[str]:
    exe = Path(sys.executable).with_name("hpcfabric")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "hpcfabric.cli"]


class Controller:
    """``hpcfabric controller`` as a subprocess in its own session (Ctrl-C reaches only us)."""

    def __init__(self, config: Path, status_file: Path, listen_port: int, log_path: Path):
        self.config = config
        self.status_file = status_file
        self.port = listen_port
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def start(self, timeout: float = 30.0) -> float:
        """Start and wait until it listens; returns seconds taken. Raises CheckFailed if it dies."""
        t0 = time.monotonic()
        try:  # a stale file from a previous (killed) controller must not look "ready"
            self.status_file.unlink()
        except FileNotFoundError:
            pass
        cmd = controller_command() + [
            "controller",
            "--config",
            str(self.config),
            "--status-file",
            str(self.status_file),
            "--listen-port",
            str(self.port),
        ]
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=str(ROOT)
            )
        finally:
            log.close()
        self.starts += 1
        while time.monotonic() - t0 < timeout:
            if self.proc.poll() is not None:
                raise CheckFailed(f"controller exited with status {self.proc.returncode}: {self.log_tail()}")
            if port_listening(self.port):
                return time.monotonic() - t0
            time.sleep(0.1)
        raise CheckFailed(f"controller not listening on port {self.port} after {timeout:g} s: {self.log_tail()}")

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM, grace: float = 5.0) -> int | None:
        """Send ``sig`` to our controller PID, then SIGKILL after ``grace`` seconds. Returns its exit status."""
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            try:
                os.kill(proc.pid, sig)
            except ProcessLookupError:
                pass
            try:
                proc.wait(grace)
            except subprocess.TimeoutExpired:
                try:
                    os.kill(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(5)
        self.proc = None
        return proc.returncode

    def status(self) -> dict[str, Any] | None:
        try:
            with open(self.status_file, encoding="utf-8") as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return " | ".join(text[-lines:]) or "(empty log)"

    def wait_ready(self, n_switches: int, timeout: float, progress: Progress | None = None) -> dict[str, Any]:
        """Wait until every switch is confirmed and rules_installed == rules_expected; returns the status."""
        t0 = time.monotonic()
        last_note = t0
        status: dict[str, Any] | None = None
        while True:
            if not self.alive():
                raise CheckFailed(f"controller died (status {self.proc.returncode if self.proc else '?'}): {self.log_tail()}")
            status = self.status()
            if status and status.get("pid", self.pid) == self.pid and ready(status, n_switches):
                return status
            now = time.monotonic()
            if now - t0 > timeout:
                raise CheckFailed(f"not ready after {timeout:g} s: {summarise_status(status)}")
            if progress and now - last_note > 5:
                progress(f"  waiting: {summarise_status(status)}")
                last_note = now
            time.sleep(0.2)


def ready(status: dict[str, Any], n_switches: int) -> bool:
    return (
        status.get("switches_expected") == n_switches
        and status.get("switches_confirmed") == n_switches
        and status.get("switches_connected", n_switches) == n_switches
        and status.get("rules_expected", 0) > 0
        and status.get("rules_installed") == status.get("rules_expected")
    )


def summarise_status(status: dict[str, Any] | None) -> str:
    if not status:
        return "no status file yet"
    keys = ("switches_expected", "switches_connected", "switches_confirmed", "rules_installed", "rules_expected")
    return ", ".join(f"{k}={status.get(k)}" for k in keys)


# ---------------------------------------------------------------------------
# all-pairs ping

_FPING_LINE = re.compile(r"^(\S+)\s*:\s*xmt/rcv/%loss = (\d+)/(\d+)/\d+%(?:.*min/avg/max = ([\d.]+)/([\d.]+)/([\d.]+))?")


def all_pairs_ping(
    net: Any, fabric: Fabric, count: int = 1, interval_ms: int = 5, timeout_ms: int = 1000, tool: str | None = None
) -> dict[str, Any]:
    """Ping every ordered pair of hosts (all sources in parallel): fping if installed, else ping
    (16 at a time per source); ``tool`` forces one.

    Returns pairs, sent, received, lost (pings), lost_pairs (first 20 unreachable
    ordered pairs), rtt_avg_ms/rtt_max_ms, seconds and the tool used.
    """
    t0 = time.monotonic()
    ips = net.hf_ips
    by_ip = {ip: name for name, ip in ips.items()}
    hosts = [h.name for h in fabric.hosts]
    use_fping = tool == "fping" or (tool is None and shutil.which("fping") is not None)
    procs = {}
    for src in hosts:
        targets = [ips[d] for d in hosts if d != src]
        if use_fping:
            cmd = ["fping", "-4", "-q", "-c", str(count), "-p", "20", "-i", str(interval_ms), "-t", str(timeout_ms), *targets]
        else:
            wait_s = max(1, math.ceil(timeout_ms / 1000))
            script = (
                f"printf '%s\\n' {' '.join(targets)} | xargs -P 16 -I@ sh -c "
                f"'ping -n -q -c {count} -i 0.02 -W {wait_s} @ >/dev/null 2>&1 && echo OK @ || echo LOST @'"
            )
            cmd = ["bash", "-c", script]
        procs[src] = fn.node(net, src).popen(cmd, text=True)
    sent = received = 0
    rtts: list[float] = []
    rtt_max = 0.0
    lost_pairs: list[tuple[str, str]] = []
    seen = 0
    for src, proc in procs.items():
        out, err = proc.communicate(timeout=120)
        if use_fping:
            for line in err.splitlines():
                m = _FPING_LINE.match(line.strip())
                if not m:
                    continue
                seen += 1
                xmt, rcv = int(m.group(2)), int(m.group(3))
                sent += xmt
                received += rcv
                if rcv == 0:
                    lost_pairs.append((src, by_ip.get(m.group(1), m.group(1))))
                if m.group(5):
                    rtts.append(float(m.group(5)))
                    rtt_max = max(rtt_max, float(m.group(6)))
        else:
            for line in out.splitlines():
                word, _, ip = line.partition(" ")
                if word in ("OK", "LOST"):
                    seen += 1
                    sent += count
                    if word == "OK":
                        received += count
                    else:
                        lost_pairs.append((src, by_ip.get(ip, ip)))
    pairs = len(hosts) * (len(hosts) - 1)
    missing = pairs - seen  # no report at all for a pair counts as lost
    return {
        "tool": "fping" if use_fping else "ping",
        "pairs": pairs,
        "sent": sent + missing * count,
        "received": received,
        "lost": sent - received + missing * count,
        "unreachable_pairs": len(lost_pairs) + missing,
        "lost_pairs": [f"{a}->{b}" for a, b in lost_pairs[:20]],
        "rtt_avg_ms": round(statistics.mean(rtts), 3) if rtts else None,
        "rtt_max_ms": round(rtt_max, 3) if rtts else None,
        "seconds": round(time.monotonic() - t0, 2),
    }


# ---------------------------------------------------------------------------
# steady traffic


class SteadyPing:
    """``ping -i INTERVAL`` from one host to another, judged by icmp_seq gaps.

    Lost = sequence numbers missing below the highest answered one, so the
    echo still in flight when we stop is not counted as lost.
    """

    def __init__(self, net: Any, src: str, dst: str, interval: float = 0.01, deadline: int = 300):
        self.src, self.dst = src, dst
        self.proc = fn.node(net, src).popen(
            ["ping", "-n", "-i", f"{interval:g}", "-w", str(deadline), net.hf_ips[dst]], text=True
        )
        self.result: dict[str, Any] | None = None

    def stop(self) -> dict[str, Any]:
        if self.result is not None:
            return self.result
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            out, _ = self.proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate()
        seqs = sorted({int(m) for m in re.findall(r"icmp_seq=(\d+) ttl=", out or "")})
        rtts = [float(x) for x in re.findall(r"icmp_seq=\d+ ttl=\d+ time=([\d.]+)", out or "")]
        sent, _received = _ping_stats(out or "")
        top = seqs[-1] if seqs else 0
        have = set(seqs)
        missing = [s for s in range(1, top + 1) if s not in have]
        gaps, run = 0, 0
        for s in range(1, top + 1):
            run = run + 1 if s not in have else 0
            gaps = max(gaps, run)
        self.result = {
            "src": self.src,
            "dst": self.dst,
            "sent": sent,
            "received": len(seqs),
            "lost": len(missing),
            "lost_seqs": missing[:20],
            "longest_gap": gaps,
            "rtt_avg_ms": round(statistics.mean(rtts), 3) if rtts else None,
        }
        return self.result


# ---------------------------------------------------------------------------
# PAUSE test


@dataclass(frozen=True)
class PauseTarget:
    """Port ``port`` of ``switch`` carries ``src``'s traffic to ``dst`` by default; paused, it leaves by ``alt_port``."""

    switch: str
    port: int
    src: str
    dst: str
    alt_port: int


def find_pause_targets(
    fabric: Fabric, plan: AddressPlan, desired: dict[str, tuple], spec: tuple[str, int] | None = None
) -> list[PauseTarget]:
    """Candidate (switch, port, src host, dst host) for the PAUSE test, best first.

    A candidate port is a fabric port whose PORT_STATE entry carries a host's
    default route to a destination (checked on the switch's desired tables
    with the reference pipeline), and that, once paused, sends the frame out
    of another port (Valiant / alternative entry). Without ``spec``: the
    first switch (in fabric order) with such a port, global (Dragonfly) or
    top-dimension (FB) ports first.
    """
    top_kind = "global" if fabric.kind != "flattened_butterfly" else f"dim{len(fabric.params['dims']) - 1}"
    fallback: list[PauseTarget] = []
    for sw in fabric.switches:
        if spec and sw.name != spec[0]:
            continue
        flows = desired.get(sw.name, ())
        if not any(f.table == TABLE_PORT_STATE for f in flows):
            continue
        pipe = Pipeline(flows)
        paused_pipes: dict[int, Pipeline] = {}
        found: dict[int, PauseTarget] = {}
        for h in fabric.hosts_on(sw.name):
            for d in fabric.hosts:
                if d.switch == sw.name:
                    continue
                frame = Frame(in_port=h.port, eth_src=plan.host_mac[h.name], eth_dst=plan.host_mac[d.name])
                res = pipe.process(frame)
                if not res.hits or res.hits[-1].table != TABLE_PORT_STATE or len(res.ports) != 1:
                    continue
                port = res.ports[0]
                if port in found or (spec and port != spec[1]):
                    continue
                if port not in paused_pipes:
                    key = port_state_flow(port, False).key()
                    paused_pipes[port] = Pipeline(port_state_flow(port, True) if f.key() == key else f for f in flows)
                res2 = paused_pipes[port].process(frame)
                if len(res2.ports) == 1 and res2.ports[0] != port and res2.hits[-1].table == TABLE_ALTERNATIVE:
                    found[port] = PauseTarget(sw.name, port, h.name, d.name, res2.ports[0])
        top = [t for p, t in sorted(found.items()) if fabric.peer(sw.name, p).kind == top_kind]  # type: ignore[union-attr]
        rest = [t for p, t in sorted(found.items()) if fabric.peer(sw.name, p).kind != top_kind]  # type: ignore[union-attr]
        if top or (spec and rest):
            return top + rest
        fallback.extend(rest)
    return fallback


def pause_plan(link_speed_gbps: float, hold_s: float, quanta: int | None, interval_s: float | None = None) -> dict[str, float]:
    """Quanta per frame, one frame's pause time, refresh interval and frame count for a ``hold_s`` pause.

    One 802.3x frame pauses at most 65535 quanta (3.4 ms at 10 Gb/s): a longer
    pause is a train of frames, each sent before the previous one expires,
    as a congested receiver does.
    """
    bps = link_speed_gbps * 1e9
    if quanta is None:
        quanta = min(MAX_QUANTA, max(1, math.ceil(hold_s * bps / QUANTUM_BITS)))
    one = quanta * QUANTUM_BITS / bps
    if one >= hold_s:
        return {"quanta": quanta, "frame_s": one, "interval_s": 0.0, "frames": 1, "hold_s": one}
    interval = interval_s if interval_s else max(0.0005, one / 3)
    return {"quanta": quanta, "frame_s": one, "interval_s": interval, "frames": math.ceil(hold_s / interval), "hold_s": hold_s}


class PauseTrain:
    """A PAUSE train sent by a separate process (:data:`fabric_net.PAUSE_TRAIN_SCRIPT`)."""

    def __init__(self, fabric: Fabric, switch: str, port: int, quanta: int, interval: float, hold: float, prefix: str = ""):
        peer = fabric.peer(switch, port)
        if peer is None or peer.is_host or peer.port is None:
            raise fn.FabricNetError(f"port {port} of {switch} is not a fabric port")
        self.iface = fn.intf_name(peer.node, peer.port, prefix)
        self.args = [sys.executable, "-c", fn.PAUSE_TRAIN_SCRIPT, self.iface, str(quanta), repr(interval), repr(hold)]
        self.proc: subprocess.Popen | None = None
        self.first = self.last = 0.0
        self.sent = 0

    def start(self, timeout: float = 10.0) -> float:
        """Start the sender; returns the monotonic time of the first frame."""
        self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = ""
        end = time.monotonic() + timeout
        import select

        while time.monotonic() < end:
            ready_, _, _ = select.select([self.proc.stdout], [], [], max(0.0, end - time.monotonic()))
            if ready_:
                line = self.proc.stdout.readline()  # type: ignore[union-attr]
                break
        if not line.startswith("first "):
            err = self.proc.stderr.read() if self.proc.poll() is not None else ""  # type: ignore[union-attr]
            self.stop()
            raise CheckFailed(f"PAUSE sender did not start: {line.strip()} {err.strip()[-300:]}")
        self.first = self.last = float(line.split()[1])
        return self.first

    def join(self, timeout: float | None = None) -> None:
        if self.proc is None:
            return
        try:
            out, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            return
        m = re.search(r"last ([\d.]+) count (\d+)", out or "")
        if m:
            self.last, self.sent = float(m.group(1)), int(m.group(2))

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.join(5)
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(5)


def _is_port_state(flow: fn.FlowStat, port: int) -> bool:
    return re.search(rf"metadata=0x{port:x}/0xffff(,|$)", flow.match) is not None


def _port_state(bridge: str, port: int) -> fn.FlowStat | None:
    for f in fn.dump_flows(bridge, table=TABLE_PORT_STATE):
        if _is_port_state(f, port):
            return f
    return None


def _counters(bridge: str, target: PauseTarget, src_port: int) -> dict[str, Any]:
    """Counters of the PAUSE test on ``bridge`` (flow counters synced first).

    ``state``: the PORT_STATE entry of the paused port (it counts every frame
    routed to that port, paused or not: paused, it sends them on to table 3);
    ``valiant``: the table-3 entries of the source's port that leave by
    another port; ``fallback``: table-3 entries that still output to the
    paused port; ``tx``/``alt_tx``: transmit counters of the default and
    alternative ports.
    """
    fn.sync_stats()
    port = target.port
    flows = fn.dump_flows(bridge)  # one dump: table 2 and table 3 counters from the same moment
    ps = next((f for f in flows if f.table == TABLE_PORT_STATE and _is_port_state(f, port)), None)
    valiant = fallback = 0
    for f in flows:
        if f.table != TABLE_ALTERNATIVE:
            continue
        outs = [int(x) for x in re.findall(r"output:(\d+)", f.actions)]
        outs += [int(g) & 0xFFFF for g in re.findall(r"group:(\d+)", f.actions) if int(g) >> 16 == 0x4846]
        if port in outs:
            if _is_port_state(f, port):
                fallback += f.n_packets
        elif re.search(rf"(^|,)in_port={src_port}(,|$)", f.match):
            valiant += f.n_packets
    return {
        "state": ps.n_packets if ps else -1,
        "paused": bool(ps and "goto_table:3" in ps.actions),
        "actions": ps.actions if ps else None,
        "valiant": valiant,
        "fallback": fallback,
        "tx": fn.port_stats(bridge, port)["tx"],
        "alt_tx": fn.port_stats(bridge, target.alt_port)["tx"],
        "t": time.monotonic(),
    }


def _delta(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    d = {k: b[k] - a[k] for k in ("state", "valiant", "fallback", "tx", "alt_tx")}
    d["seconds"] = round(b["t"] - a["t"], 3)
    return d


def _wait_state(bridge: str, port: int, paused: bool, timeout: float) -> float | None:
    """Poll until the PORT_STATE entry of ``port`` is (not) paused; time reached or None."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        ps = _port_state(bridge, port)
        if ps is not None and ("goto_table:3" in ps.actions) == paused:
            return time.monotonic()
        time.sleep(0.005)
    return None


def _set_state(bridge: str, port: int, paused: bool) -> None:
    """What the controller does on a flip (static mode plays the controller): one strict modify."""
    from hpcfabric.openflow.ofctl import actions_text, match_text

    f = port_state_flow(port, paused)
    spec = ",".join([f"table={f.table}", f"priority={f.priority}", *match_text(f.match)]) + f",actions={actions_text(f)}"
    fn._run([*fn.OFCTL, "--strict", "mod-flows", bridge, spec])


def _stats(values: list[float]) -> dict[str, Any] | None:
    if not values:
        return None
    v = sorted(values)
    return {
        "n": len(v),
        "min": round(v[0], 3),
        "median": round(statistics.median(v), 3),
        "p90": round(v[min(len(v) - 1, int(0.9 * len(v)))], 3),
        "max": round(v[-1], 3),
    }


def _ping_stats(text: str) -> tuple[int, int]:
    m = re.search(r"(\d+) packets transmitted, (\d+) (?:packets )?received", text)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def pause_test(
    net: Any,
    fabric: Fabric,
    target: PauseTarget,
    plan_: dict[str, float],
    controller: Controller | None,
    progress: Progress,
    window: float = 0.4,
) -> dict[str, Any]:
    """Steady ping src->dst, PAUSE the port, check the flip, the diversion and the restoration."""
    prefix = getattr(net, "hf_prefix", "")
    bridge = prefix + target.switch
    src_port = fabric.host(target.src).port
    res: dict[str, Any] = {
        "switch": target.switch,
        "port": target.port,
        "src": target.src,
        "dst": target.dst,
        "alt_port": target.alt_port,
        "quanta": plan_["quanta"],
        "frame_ms": round(plan_["frame_s"] * 1000, 3),
        "hold_s": round(plan_["hold_s"], 3),
        "diverted": False,
        "restored": False,
        "flipped": False,
    }
    pause0 = ((controller.status() or {}).get("pause") or {}) if controller else {}
    flips0, samples0 = pause0.get("flips", 0), len(pause0.get("reaction_ms") or [])
    ping = SteadyPing(net, target.src, target.dst)
    train: PauseTrain | None = None
    try:
        time.sleep(0.3)
        c0 = _counters(bridge, target, src_port)
        time.sleep(window)
        c1 = _counters(bridge, target, src_port)
        res["before"] = d = _delta(c0, c1)
        if c1["paused"] or d["state"] <= 0 or d["valiant"] != 0:
            res["error"] = f"default path not in use before the PAUSE (PORT_STATE {c1['actions']}, counters {d})"
            return res
        train = PauseTrain(
            fabric, target.switch, target.port, int(plan_["quanta"]), plan_["interval_s"], plan_["hold_s"], prefix
        )
        t_inject = train.start()
        if controller is None:  # static mode: we are the controller
            _set_state(bridge, target.port, True)
        seen = _wait_state(bridge, target.port, True, timeout=max(2.0, plan_["hold_s"]))
        if seen is None:
            res["error"] = "PORT_STATE entry never switched to goto_table:3"
            return res
        res["flipped"] = True
        res["observed_ms"] = round((seen - t_inject) * 1000, 2)
        progress(f"  {target.switch}:{target.port} flipped to table 3 {res['observed_ms']} ms after the PAUSE")
        remaining = t_inject + plan_["hold_s"] - time.monotonic()
        w = max(0.05, min(window, (remaining - 0.05) / 2))
        c2 = _counters(bridge, target, src_port)
        time.sleep(w)
        c3 = _counters(bridge, target, src_port)
        res["during"] = d = _delta(c2, c3)
        res["during"]["paused_at_start"], res["during"]["paused_at_end"] = c2["paused"], c3["paused"]
        # Frames routed to the paused port went on to a Valiant entry, not out of the port. A small
        # share may still leave by it when the controller lets the pause lapse between two frames of
        # a train (one frame covers only 3.4 ms at 10 Gb/s): at least 90 % must be diverted.
        frac = d["valiant"] / d["state"] if d["state"] > 0 else 0.0
        res["diverted_fraction"] = round(frac, 3)
        res["diverted"] = d["valiant"] > 0 and d["fallback"] == 0 and frac >= 0.9 and d["tx"] <= d["state"] // 4
        train.join(plan_["hold_s"] + 10)
        t_end = train.last + plan_["frame_s"]
        res["frames"] = train.sent
        if controller is None:
            time.sleep(max(0.0, t_end - time.monotonic()))
            _set_state(bridge, target.port, False)
        back = _wait_state(bridge, target.port, False, timeout=max(0.0, t_end - time.monotonic()) + 3.0)
        if back is None:
            res["error"] = "PORT_STATE entry not restored after the pause expired"
            return res
        res["restore_ms_after_expiry"] = round((back - t_end) * 1000, 2)
        c4 = _counters(bridge, target, src_port)
        time.sleep(window)
        c5 = _counters(bridge, target, src_port)
        res["after"] = d = _delta(c4, c5)
        res["restored"] = not c4["paused"] and not c5["paused"] and d["state"] > 0 and d["valiant"] == 0
    finally:
        if train is not None:
            train.stop()
        traffic = ping.stop()
        res["ping_sent"], res["ping_received"], res["ping_lost"] = traffic["sent"], traffic["received"], traffic["lost"]
        res["ping_rtt_avg_ms"] = traffic["rtt_avg_ms"]
    if controller is not None:
        time.sleep(0.3)  # let the status file catch up
        pause = (controller.status() or {}).get("pause") or {}
        res["flips"] = pause.get("flips", 0) - flips0
        res["reaction_ms"] = (pause.get("reaction_ms") or [])[samples0:]  # this test's PAUSE flips (not expiries)
        res["reaction_stats"] = _stats(res["reaction_ms"])
        # a clean pause is 2 flips (paused, resumed); every extra pair is a lapse inside the train
        res["lapses"] = max(0, (res["flips"] - 2) // 2)
    else:
        res["flips"] = 2 if res["restored"] else 1
        res["reaction_ms"] = []
    return res


# ---------------------------------------------------------------------------
# main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="run_fabric.py",
        description="Run an hpcfabric fabric in Mininet end to end (controller or static flows) and print a JSON summary.",
    )
    p.add_argument("--topology", help="topology YAML (default: the config's)")
    p.add_argument("--config", help="controller config (INI); the runner gives the controller a copy with overrides")
    p.add_argument("--static", action="store_true", help="no controller: install flows with ovs-ofctl, flip PAUSE ports itself")
    p.add_argument("--addressing", choices=("flat", "per-switch", "per-group", "compact"), help="override the addressing mode")
    p.add_argument("--routing", choices=("minimal", "valiant", "conditional"), help="override the routing policy")
    p.add_argument("--link-speed-gbps", type=float, help="override link_speed_gbps (PAUSE quanta -> seconds)")
    p.add_argument("--pause-port", metavar="SWITCH:PORT", help="fabric port to PAUSE (default: a global/top-dimension port with traffic)")
    p.add_argument("--quanta", type=int, help="quanta per PAUSE frame (default: enough for --pause-seconds, at most 65535)")
    p.add_argument("--pause-seconds", type=float, default=2.0, help="how long the port stays paused (a PAUSE train if one frame is shorter; default 2.0)")
    p.add_argument("--pause-interval-ms", type=float, help="spacing of the frames of a PAUSE train (default: a third of one frame's pause)")
    p.add_argument("--no-pause", action="store_true", help="skip the PAUSE test")
    p.add_argument("--link-bw", type=float, help="shape every link to this many Mbit/s (TCLink/htb)")
    p.add_argument("--ready-timeout", type=float, default=120.0, help="seconds to wait for the controller to install everything")
    p.add_argument("--prefix", default="", help="prefix for Mininet node names (run next to another net)")
    p.add_argument("--json-only", action="store_true", help="no progress lines, only the JSON summary")
    p.add_argument("--keep", action="store_true", help="open the Mininet CLI before tearing down")
    p.add_argument("--cleanup", action="store_true", help="run 'mn -c' (kills EVERY Mininet on this machine) and exit")
    args = p.parse_args(argv)
    if args.quanta is not None and not 1 <= args.quanta <= MAX_QUANTA:
        p.error("--quanta must be 1..65535")
    if args.pause_seconds <= 0 or args.pause_seconds > 30:
        p.error("--pause-seconds must be in (0, 30]")
    if args.link_speed_gbps is not None and args.link_speed_gbps <= 0:
        p.error("--link-speed-gbps must be positive")
    if args.pause_port and not re.fullmatch(r"[^:\s]+:\d+", args.pause_port):
        p.error("--pause-port must look like SWITCH:PORT, e.g. g0s0:3")
    if not args.cleanup and not args.topology and not args.config:
        p.error("give --topology and/or --config")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    progress = Progress(args.json_only)
    if args.cleanup:
        progress("mn -c: removing every Mininet bridge, interface and process on this machine")
        return subprocess.run(["mn", "-c"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
    summary: dict[str, Any] = {"mode": "static" if args.static else "controller", "passed": False}
    failures: list[str] = []
    tmp = Path(tempfile.mkdtemp(prefix="hfrun"))
    controller: Controller | None = None
    net = None
    code = EXIT_FAILED

    def on_signal(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    old_term = signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)  # also when started with SIGINT ignored (e.g. a background job)
    try:
        if os.geteuid() != 0:
            raise UsageError("must run as root (Mininet, Open vSwitch, raw sockets)")
        if not fn.ovs_running():
            raise UsageError("Open vSwitch is not running ('ovs-vsctl show' fails): run scripts/bootstrap.sh --ovs-only")
        from mininet.log import setLogLevel

        setLogLevel("error" if args.json_only else "warning")
        config_path = None
        port = free_port()
        if not args.static:
            if not controller_available():
                raise UsageError("controller package hpcfabric.controller is not available; use --static")
        if not args.static or args.config:
            config_path = write_config(args, tmp, port, tmp / "status.json")
            setup = setup_from_config(config_path)
        else:
            setup = setup_from_topology(args)
        fabric, plan = setup.fabric, setup.plan
        summary.update(
            topology=fabric.name,
            switches=len(fabric.switches),
            hosts=len(fabric.hosts),
            links=len(fabric.links),
            addressing=plan.mode,
            routing=setup.routing,
            cos=(f"{setup.compiled.cos}/{setup.compiled.cos_levels}"
                 if setup.compiled is not None and setup.compiled.cos is not None else "off"),
            link_speed_gbps=setup.link_speed_gbps,
        )
        progress(
            f"{fabric.name}: {len(fabric.switches)} switches, {len(fabric.hosts)} hosts, {len(fabric.links)} links; "
            f"{plan.mode} addressing ({plan.layout.describe()}), {setup.routing} routing, {summary['mode']} mode"
        )
        target, pause_skip = None, None
        if args.no_pause:
            pause_skip = "skipped (--no-pause)"
        elif setup.routing != "conditional":
            pause_skip = (f"skipped ({setup.routing} routing has no PORT_STATE table)" if setup.routing == "minimal"
                          else f"skipped ({setup.routing} routing does not divert on PAUSE)")
        else:  # resolved before anything starts: a bad --pause-port fails fast
            target = choose_pause_target(fabric, plan, setup.desired, args.pause_port)
        if not args.static:
            controller = Controller(config_path, tmp / "status.json", port, tmp / "controller.log")
            took = controller.start()
            summary["controller_pid"] = controller.pid
            progress(f"controller listening on 127.0.0.1:{port} after {took:.1f} s (pid {controller.pid}, log {controller.log_path})")

        t = time.monotonic()
        net = fn.build_net(
            fabric, plan, controller_port=controller.port if controller else None, link_bw=args.link_bw, prefix=args.prefix
        )
        summary["bringup_s"] = round(time.monotonic() - t, 2)
        progress(f"Mininet up in {summary['bringup_s']} s")

        t = time.monotonic()
        if controller is not None:
            status = controller.wait_ready(len(fabric.switches), args.ready_timeout, progress)
            summary["rules_expected"] = status.get("rules_expected")
            summary["rules_installed"] = status.get("rules_installed")
        else:  # static mode plays no controller: the compiled tables (no guards, meters or groups)
            if setup.compiled is not None:
                setup = replace(setup, desired={n: t.flows for n, t in setup.compiled.tables.items()})
            fn.install_static_flows(net, _CompiledView(setup.desired))
            summary["rules_expected"] = sum(len(v) for v in setup.desired.values())
        counts = fn.flow_counts(net)
        wanted = {name: len(flows) for name, flows in setup.desired.items()}
        if controller is None:
            summary["rules_installed"] = sum(counts.values())
        bad = sorted(n for n in wanted if counts.get(n) != wanted[n])
        summary["flows_match_compiler"] = not bad
        if bad:
            failures.append(
                "flow counts differ from the compiler on " + ", ".join(f"{n} ({counts.get(n)} != {wanted[n]})" for n in bad[:5])
            )
        if summary["rules_installed"] != summary["rules_expected"]:
            failures.append(f"rules_installed {summary['rules_installed']} != rules_expected {summary['rules_expected']}")
        summary["ready_s"] = round(time.monotonic() - t, 2)
        progress(f"rules in place: {summary['rules_installed']}/{summary['rules_expected']} after {summary['ready_s']} s")

        t = time.monotonic()
        dmp = fn.run_dmp(net)
        macs = fn.host_macs(net)
        assigned = [h for h, r in dmp.items() if r.get("returncode") == 0 and macs.get(h) == plan.host_mac[h]]
        summary["dmp_assigned"] = len(assigned)
        summary["dmp_s"] = round(time.monotonic() - t, 2)
        rtts = [r["rtt_ms"] for r in dmp.values() if "rtt_ms" in r]
        summary["dmp_rtt_ms_max"] = max(rtts) if rtts else None
        progress(f"DMP: {len(assigned)}/{len(fabric.hosts)} hosts hold their planned MAC ({summary['dmp_s']} s)")
        wrong = [h.name for h in fabric.hosts if macs.get(h.name) != plan.host_mac[h.name]]
        if wrong:
            h = wrong[0]
            failures.append(
                f"{len(wrong)} host(s) without their planned MAC, e.g. {h}: has {format_mac(max(macs.get(h, 0), 0))}, "
                f"plan {format_mac(plan.host_mac[h])} ({dmp.get(h, {}).get('error') or dmp.get(h, {}).get('stderr') or 'no error'})"
            )
            raise CheckFailed("DMP failed")

        fn.set_static_neighbours(net, plan)
        ping = all_pairs_ping(net, fabric)
        summary.update(
            ping_pairs=ping["pairs"],
            ping_lost=ping["lost"],
            ping_unreachable_pairs=ping["unreachable_pairs"],
            ping_rtt_avg_ms=ping["rtt_avg_ms"],
            ping_rtt_max_ms=ping["rtt_max_ms"],
            ping_s=ping["seconds"],
            ping_tool=ping["tool"],
        )
        progress(
            f"all-pairs ping ({ping['tool']}): {ping['pairs']} pairs, {ping['lost']} lost, "
            f"avg rtt {ping['rtt_avg_ms']} ms, {ping['seconds']} s"
        )
        if ping["lost"]:
            failures.append(f"{ping['lost']} ping(s) lost, e.g. {', '.join(ping['lost_pairs'][:5])}")

        summary.update(pause_flips=0, pause_reaction_ms=None, diverted=None, restored=None)
        if target is None:
            summary["pause"] = pause_skip
        else:
            pplan = pause_plan(
                setup.link_speed_gbps, args.pause_seconds, args.quanta, (args.pause_interval_ms or 0) / 1000 or None
            )
            progress(
                f"PAUSE test: {target.src} -> {target.dst} leaves {target.switch} by port {target.port}; "
                f"{pplan['frames']} frame(s) of {pplan['quanta']} quanta ({pplan['frame_s'] * 1000:.3g} ms each at "
                f"{setup.link_speed_gbps:g} Gb/s) for {pplan['hold_s']:.3g} s"
            )
            res = pause_test(net, fabric, target, pplan, controller, progress)
            summary["pause"] = {k: v for k, v in res.items() if k != "reaction_ms"}  # (stats kept; list can be long)
            summary["pause_port"] = f"{target.switch}:{target.port}"
            summary["pause_flips"] = res.get("flips", 0)
            reaction = res.get("reaction_ms") or []
            summary["pause_reaction_ms"] = round(statistics.median(reaction), 3) if reaction else None
            summary["pause_first_reaction_ms"] = round(reaction[0], 3) if reaction else None
            summary["pause_observed_ms"] = res.get("observed_ms")
            summary["pause_ping_lost"] = res.get("ping_lost")  # reported, not judged: see docs/mininet.md
            summary["diverted"] = bool(res.get("diverted"))
            summary["restored"] = bool(res.get("restored"))
            progress(
                f"PAUSE: flips={summary['pause_flips']} reaction(median)={summary['pause_reaction_ms']} ms "
                f"diverted={summary['diverted']} restored={summary['restored']} "
                f"steady ping {res.get('ping_received')}/{res.get('ping_sent')} ({res.get('ping_lost')} lost)"
            )
            if res.get("lapses"):
                progress(
                    f"  note: the pause lapsed {res['lapses']} time(s) between frames of the train "
                    f"(one frame = {res['frame_ms']} ms at {setup.link_speed_gbps:g} Gb/s; the controller expired it "
                    f"before handling the next frame); {res.get('diverted_fraction')} of the traffic was diverted"
                )
            if res.get("error"):
                failures.append("PAUSE test: " + res["error"])
            if summary["pause_flips"] < 1:
                failures.append("PAUSE test: no flip")
            if not summary["diverted"]:
                failures.append(f"PAUSE test: traffic not diverted to table 3 ({res.get('during')})")
            if not summary["restored"]:
                failures.append(f"PAUSE test: default path not restored ({res.get('after')})")
        if controller is not None:
            status = controller.status() or {}
            summary["links_expected"] = status.get("links_expected")
            summary["links_discovered"] = status.get("links_discovered")
            summary["miswired"] = status.get("miswired")
        if args.keep:
            from mininet.cli import CLI

            progress("--keep: Mininet CLI (exit to tear down)")
            CLI(net)
        code = EXIT_FAILED if failures else EXIT_OK
    except UsageError as err:
        failures.append(str(err))
        code = EXIT_USAGE
    except (CheckFailed, HpcfabricError, fn.FabricNetError) as err:
        failures.append(str(err))
        code = EXIT_USAGE if isinstance(err, HpcfabricError) and getattr(err, "exit_code", 1) == 2 else EXIT_FAILED
    except KeyboardInterrupt:
        failures.append("interrupted")
        code = EXIT_INTERRUPTED
    except Exception as err:  # noqa: BLE001 - report, tear down, exit 1
        import traceback

        traceback.print_exc()
        failures.append(f"internal error: {type(err).__name__}: {err}")
        code = EXIT_FAILED
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not abort the teardown
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        t = time.monotonic()
        if net is not None:
            progress("stopping Mininet")
            try:
                net.stop()
            except Exception as err:  # noqa: BLE001 - keep tearing down
                failures.append(f"net.stop failed: {err}")
        if controller is not None:
            if controller.alive():
                progress(f"stopping controller (pid {controller.pid})")
            rc = controller.stop()
            if code == EXIT_FAILED or rc not in (0, None, -signal.SIGTERM):
                summary["controller_log"] = controller.log_tail(20)
        summary["teardown_s"] = round(time.monotonic() - t, 2)
        if code in (EXIT_OK,) or not (tmp / "controller.log").exists():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            summary["logs"] = str(tmp)
        signal.signal(signal.SIGTERM, old_term)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    summary["failures"] = failures
    summary["passed"] = code == EXIT_OK and not failures
    summary["seconds"] = round(progress.elapsed(), 2)
    if failures and not args.json_only:
        for f in failures:
            print(f"[{PROG}] FAILED: {f}", file=sys.stderr)
    print(json.dumps(summary, sort_keys=True, default=str), flush=True)
    return code if failures else EXIT_OK


def choose_pause_target(fabric: Fabric, plan: AddressPlan, desired: dict[str, tuple], pause_port: str | None) -> PauseTarget:
    """The PAUSE test's target: ``--pause-port SWITCH:PORT`` or the default choice (UsageError if impossible)."""
    spec = None
    if pause_port:
        sw, _, p = pause_port.rpartition(":")
        if not fabric.has_switch(sw):
            raise UsageError(f"--pause-port: no switch {sw!r} in {fabric.name}")
        if int(p) not in fabric.fabric_ports(sw):
            raise UsageError(f"--pause-port: port {p} of {sw} is not a fabric port (fabric ports: {sorted(fabric.fabric_ports(sw))})")
        spec = (sw, int(p))
    targets = find_pause_targets(fabric, plan, desired, spec)
    if not targets:
        raise UsageError(
            f"--pause-port {pause_port}: no host of {spec[0]} sends over port {spec[1]} by default, "
            "or pausing it leaves no other port"
            if spec
            else "no fabric port carries a host's default route with an alternative"
        )
    return targets[0]


class _CompiledView:
    """Adapter: install_static_flows wants ``.tables[name].flows``."""

    def __init__(self, desired: dict[str, tuple]):
        self.tables = {name: _Flows(flows) for name, flows in desired.items()}


@dataclass
class _Flows:
    flows: tuple


if __name__ == "__main__":
    sys.exit(main())
