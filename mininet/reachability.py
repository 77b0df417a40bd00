"""Reachability step: all-pairs ping, and steady pings judged by ``icmp_seq`` gaps.

* :func:`all_pairs_ping`: every ordered pair (or :func:`pair_targets`' covering set), paced and
  adaptive with fping (:mod:`paced_ping`: a bounded number of sources at once, rate backed off on
  loss, lost pairs retried at a lower rate, a pair lost only after its retries);
  :func:`ping_step` turns it into summary keys and a failure; :func:`reachable_all_pairs` raises
  if a pair stays unreachable.
* :class:`SteadyPing`: ``ping -i INTERVAL`` from one host to another while something happens
  (a PAUSE, a controller restart, a link cut); lost = sequence numbers missing below the highest
  answered one. With a ``log`` file it runs ``ping -D -O`` into it (no pipe to fill on long runs) and
  :func:`ping_timeline` gives every echo request's send time and whether it was answered.
"""

from __future__ import annotations

import re
import shutil
import signal
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any, Callable

from fabric_topo import node  # mininet/fabric_topo.py
from paced_ping import Pacing, paced_reachability
from runkit import CheckFailed, StepResult

from hpcfabric.topology.model import Fabric


def pair_targets(fabric: Fabric, coverage: str = "all", sample: int = 4) -> dict[str, list[str]]:
    """Source host -> destination hosts to probe.

    ``all``: every ordered pair. ``cover``: a covering set for fabrics where all pairs take too long:
    every host to one host on every other switch (rotated with the source's rank, so every host of a
    switch is a destination for someone), plus all pairs among the hosts of ``sample`` switches spread
    over the fabric (every path class: same switch, same group/row, other group/row). Each switch pair
    is then covered in both directions, and every host both sends and answers.
    """
    hosts = [h.name for h in fabric.hosts]
    if coverage == "all":
        return {s: [d for d in hosts if d != s] for s in hosts}
    if coverage != "cover":
        raise ValueError(f"coverage must be 'all' or 'cover', got {coverage!r}")
    on = {sw.name: [h.name for h in fabric.hosts_on(sw.name)] for sw in fabric.switches}
    switches = [s for s, hs in on.items() if hs]
    step = max(1, len(switches) // max(1, sample))
    sampled = set(switches[::step][:sample])
    out: dict[str, list[str]] = {}
    for rank, h in enumerate(fabric.hosts):
        dsts = [on[sw][rank % len(on[sw])] for sw in switches if sw != h.switch]
        if h.switch in sampled:
            dsts += [d for sw in sampled for d in on[sw] if d != h.name and d not in dsts]
        out[h.name] = dsts
    return out


def all_pairs_ping(net: Any, fabric: Fabric, coverage: str = "all", pacing: Pacing | None = None,
                   progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Ping every ordered pair of hosts (``coverage="cover"``: :func:`pair_targets`' covering set) with fping
    (installed by scripts/bootstrap.sh), paced and adaptive (:mod:`paced_ping`; a pair is lost only when every
    retry pass failed); CheckFailed without fping.

    Returns pairs, sent, received, lost and unreachable_pairs (pairs never answered), lost_pairs (first
    20), rtt_avg_ms/rtt_max_ms, seconds, the tool, retried, passes, rate_pps, ...
    """
    if shutil.which("fping") is None:
        raise CheckFailed("fping is not installed: run scripts/bootstrap.sh (Debian package fping)")
    res = paced_reachability(net, pair_targets(fabric, coverage), pacing, progress=progress)
    res.update(sent=res["probes"], received=res["reached"], unreachable_pairs=res["lost"], coverage=coverage)
    return res


def ping_step(net: Any, fabric: Fabric, progress: Callable[[str], None], coverage: str = "all") -> StepResult:
    """Reachability as summary keys (``ping_pairs``, ``ping_lost``, ``ping_retried``, ...); a pair lost after
    its retries is a failure."""
    ping = all_pairs_ping(net, fabric, coverage=coverage, progress=lambda line: progress("  " + line))
    res = StepResult({
        "ping_pairs": ping["pairs"],
        "ping_coverage": coverage,
        "ping_lost": ping["lost"],
        "ping_unreachable_pairs": ping["unreachable_pairs"],
        "ping_retried": ping.get("retried"),
        "ping_passes": ping.get("passes"),
        "ping_rate_pps": ping.get("rate_pps"),
        "ping_backoffs": ping.get("backoffs"),
        "ping_rtt_avg_ms": ping["rtt_avg_ms"],
        "ping_rtt_max_ms": ping["rtt_max_ms"],
        "ping_s": ping["seconds"],
        "ping_tool": ping["tool"],
    })
    progress(
        f"reachability ({ping['tool']}, {coverage}): {ping['pairs']} pairs, {ping['lost']} lost, "
        f"{ping.get('retried')} retried over {ping.get('passes')} pass(es), {ping.get('rate_pps')} probes/s, "
        f"avg rtt {ping['rtt_avg_ms']} ms, {ping['seconds']} s"
    )
    if ping["lost"]:
        res.failures.append(f"{ping['lost']} pair(s) lost after retries, e.g. {', '.join(ping['lost_pairs'][:5])}")
    return res


def reachable_all_pairs(net: Any, fabric: Fabric, attempts: int = 3) -> dict[str, Any]:
    """All-pairs ping, paced, a lost pair retried in up to ``attempts - 1`` slower passes (a busy 2-core box
    drops the odd echo); raises CheckFailed if a pair stays unreachable."""
    ping = all_pairs_ping(net, fabric, pacing=Pacing(passes=max(1, attempts) + 1))
    if not ping["unreachable_pairs"]:
        return ping
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
    until :meth:`stop` or ``deadline`` seconds. ``log``: ping's output goes to that file, with
    ``-D -O`` (a wall-clock stamp on every line, a line for every request not answered before the
    next one is sent): :meth:`timeline` then dates every request.
    """

    def __init__(self, net: Any, src: str, dst: str, interval: float = 0.01, deadline: int = 300,
                 count: int | None = None, log: Path | None = None):
        self.src, self.dst, self.interval, self.log = src, dst, interval, log
        limit = ["-c", str(count), "-W", "2"] if count is not None else ["-w", str(deadline)]
        stamps = ["-D", "-O"] if log is not None else []
        out = open(log, "w", encoding="utf-8") if log is not None else subprocess.PIPE
        try:
            self.proc = node(net, src).popen(["ping", "-n", *stamps, "-i", f"{interval:g}", *limit, net.hf_ips[dst]],
                                             stdout=out, stderr=subprocess.STDOUT, text=True)
        finally:
            if log is not None:
                out.close()  # type: ignore[union-attr]
        self.result: dict[str, Any] | None = None
        self.text = ""

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
        if self.log is not None:
            out = self.log.read_text(encoding="utf-8", errors="replace")
        self.text = out or ""
        seqs = sorted({int(m) for m in re.findall(r"icmp_seq=(\d+) ttl=", self.text)})
        rtts = [float(x) for x in re.findall(r"icmp_seq=\d+ ttl=\d+ time=([\d.]+)", self.text)]
        sent, _received = ping_stats(self.text)
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

    def timeline(self) -> list[tuple[int, float, bool]]:
        """After :meth:`stop` of a stream with a ``log``: :func:`ping_timeline` of its output."""
        return ping_timeline(self.text, self.interval)


_STAMPED = re.compile(r"^\[(\d+\.\d+)\] (?:.*icmp_seq=(\d+) ttl=\d+ time=([\d.]+) ms|no answer yet for icmp_seq=(\d+))")


def ping_timeline(text: str, interval: float) -> list[tuple[int, float, bool]]:
    """``(seq, sent, answered)`` for every echo request up to the highest answered one, from ``ping -D -O``
    output: ``sent`` (wall clock, s) is the reply's stamp minus its round trip, or for a request never
    answered the stamp of its "no answer yet" line (printed as the next request goes out) minus ``interval``;
    a request with neither is dated between its neighbours."""
    answered: dict[int, float] = {}
    waiting: dict[int, float] = {}
    for line in text.splitlines():
        m = _STAMPED.match(line)
        if m is None:
            continue
        t = float(m.group(1))
        if m.group(2) is not None:
            answered[int(m.group(2))] = t - float(m.group(3)) / 1000.0
        else:
            waiting.setdefault(int(m.group(4)), t - interval)
    top = max(answered, default=0)
    known = {**{s: t for s, t in waiting.items() if s <= top}, **answered}
    out: list[tuple[int, float, bool]] = []
    for seq in range(1, top + 1):
        t = known.get(seq)
        if t is None:  # neither line: between the nearest dated neighbours
            before = max((s for s in known if s < seq), default=None)
            after = min((s for s in known if s > seq), default=None)
            if before is not None and after is not None:
                t = known[before] + (known[after] - known[before]) * (seq - before) / (after - before)
            else:
                t = known[after] - (after - seq) * interval if after is not None else 0.0  # type: ignore[index]
        out.append((seq, t, seq in answered))
    return out


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
