"""Reachability step: all-pairs ping, and steady pings judged by ``icmp_seq`` gaps.

* :func:`all_pairs_ping`: every ordered pair once, every source at the same time (``fping`` per
  source if installed, else parallel ``ping``); :func:`ping_step` turns it into summary keys and a
  failure; :func:`reachable_all_pairs` retries lost pairs (a busy 2-core box drops the odd echo).
  Every source runs at once: pacing the sources (fabrics of a few hundred hosts) belongs in
  :func:`all_pairs_ping`, which callers reach only through these functions.
* :class:`SteadyPing`: ``ping -i INTERVAL`` from one host to another while something happens
  (a PAUSE, a controller restart, a link cut); lost = sequence numbers missing below the highest
  answered one.
"""

from __future__ import annotations

import math
import re
import shutil
import signal
import statistics
import subprocess
import time
from typing import Any, Callable

from fabric_topo import node  # mininet/fabric_topo.py
from runkit import CheckFailed, StepResult

from hpcfabric.topology.model import Fabric

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
        procs[src] = node(net, src).popen(cmd, text=True)
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


def ping_step(net: Any, fabric: Fabric, progress: Callable[[str], None]) -> StepResult:
    """All-pairs ping as summary keys (``ping_pairs``, ``ping_lost``, ...); any lost ping is a failure."""
    ping = all_pairs_ping(net, fabric)
    res = StepResult({
        "ping_pairs": ping["pairs"],
        "ping_lost": ping["lost"],
        "ping_unreachable_pairs": ping["unreachable_pairs"],
        "ping_rtt_avg_ms": ping["rtt_avg_ms"],
        "ping_rtt_max_ms": ping["rtt_max_ms"],
        "ping_s": ping["seconds"],
        "ping_tool": ping["tool"],
    })
    progress(
        f"all-pairs ping ({ping['tool']}): {ping['pairs']} pairs, {ping['lost']} lost, "
        f"avg rtt {ping['rtt_avg_ms']} ms, {ping['seconds']} s"
    )
    if ping["lost"]:
        res.failures.append(f"{ping['lost']} ping(s) lost, e.g. {', '.join(ping['lost_pairs'][:5])}")
    return res


def ping_pair(net: Any, src: str, dst: str, count: int = 3) -> bool:
    """One pair, ``count`` pings: True if any came back."""
    out = node(net, src).cmd(f"ping -n -q -c {count} -i 0.2 -W 1 {net.hf_ips[dst]}")
    return "received" in out and " 0 received" not in out


def reachable_all_pairs(net: Any, fabric: Fabric, attempts: int = 3) -> dict[str, Any]:
    """All-pairs ping; a busy 2-core box drops the odd echo, so lost pairs are retried (whole sweep up to
    ``attempts`` times, then the <= 20 remaining pairs one by one). Raises CheckFailed."""
    for _ in range(attempts):
        ping = all_pairs_ping(net, fabric)
        if not ping["lost"]:
            return ping
        time.sleep(1.0)
    if ping["unreachable_pairs"] <= len(ping["lost_pairs"]):
        still = [p for p in ping["lost_pairs"] if not ping_pair(net, *p.split("->"))]
        if not still:
            return ping
    else:
        still = ping["lost_pairs"]
    raise CheckFailed(f"all-pairs ping before the experiment: {ping['unreachable_pairs']} pair(s) unreachable, "
                      f"e.g. {still[:3]}")


# ---------------------------------------------------------------------------
# steady traffic


def ping_stats(text: str) -> tuple[int, int]:
    """(transmitted, received) from ping's summary line; (0, 0) if there is none."""
    m = re.search(r"(\d+) packets transmitted, (\d+) (?:packets )?received", text)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


class SteadyPing:
    """``ping -i INTERVAL`` from one host to another, judged by icmp_seq gaps.

    Lost = sequence numbers missing below the highest answered one, so the
    echo still in flight when we stop is not counted as lost. ``count``: exactly
    that many echo requests (``-c COUNT -W 2``), however slow the machine is; else
    until :meth:`stop` or ``deadline`` seconds.
    """

    def __init__(self, net: Any, src: str, dst: str, interval: float = 0.01, deadline: int = 300,
                 count: int | None = None):
        self.src, self.dst = src, dst
        limit = ["-c", str(count), "-W", "2"] if count is not None else ["-w", str(deadline)]
        self.proc = node(net, src).popen(["ping", "-n", "-i", f"{interval:g}", *limit, net.hf_ips[dst]], text=True)
        self.result: dict[str, Any] | None = None

    def wait(self, timeout: float) -> None:
        """Wait up to ``timeout`` s for ping to end by itself (``count`` sent)."""
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass

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
        sent, _received = ping_stats(out or "")
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


def steady_across(net: Any, src: str, dst: str, pings: int, action: Callable[[], Any], interval: float = 0.01) -> dict[str, Any]:
    """``pings`` pings src -> dst every ``interval`` s while ``action()`` runs ~2 s in; the result has its return
    value as ``action``. 20 more are sent: the last replies in flight are not judged."""
    p = SteadyPing(net, src, dst, interval, count=pings + 20)
    try:
        time.sleep(2.0)
        extra = action()
        p.wait(pings * interval * 10 + 60)
    finally:
        res = p.stop()
    res["action"] = extra
    return res
