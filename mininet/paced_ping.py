"""Paced, adaptive reachability: every ordered pair answered, at a rate the fabric keeps up with.

A correctness check, not a load test. Pinging every pair at once (every host at every other host)
through userspace Open vSwitch overflows its queues on fabrics of a few hundred hosts and reports
queue overflow as unreachability. Here:

* at most ``width`` probes run at once, each ``fping -i INTERVAL`` (one echo request every
  INTERVAL ms, each target retried ``retries`` times inside the probe), INTERVAL = width / rate, so
  the probes together send about ``rate`` echo requests per second;
* a probe is one source and a chunk of its targets (``chunk``), the sources interleaved and their
  targets rotated, so the probes running at once aim at different hosts;
* :class:`AdaptivePacer` (pure: no processes, no clock) adapts the rate after every probe to the
  loss it saw (AIMD, as TCP): more than ``backoff_loss`` of the chunk lost (after fping's own
  retries) multiplies the rate by ``decrease``; a clean probe adds ``increase_pps``; within
  [``min_rate_pps``, ``max_rate_pps``];
* the pairs lost in a pass are retried in the next pass, after ``settle_s``, at half the rate of
  the pass before (half its final rate); a pair counts as **lost** only when no
  pass got an answer, a pair lost once and answered later counts as reached (and as retried).

:func:`paced_reachability` drives it on a Mininet net with fping. Its result: pairs, reached, lost,
retried (pairs that needed more than the first pass), passes, probes sent, duration, rate
(probes/s over the run) and the rate it ended at.
"""

from __future__ import annotations

import re
import statistics
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

_ALIVE = re.compile(r"^(\S+) is alive(?: \(([\d.]+) ms\))?")


@dataclass(frozen=True)
class Pacing:
    """Bounds and start point of the adaptive pacing (defaults: measured on 2 shared cores)."""

    width: int = 8  # probes (one source, a chunk of its targets) running at once
    rate_pps: float = 800.0  # echo requests per second of all probes together (start)
    chunk: int = 48  # targets per probe: the pacer adapts after every chunk
    timeout_ms: int = 500  # fping -t: wait for an answer
    retries: int = 1  # fping -r: retries of an unanswered target inside one probe
    passes: int = 4  # first pass + retry passes over the lost pairs
    settle_s: float = 1.0  # pause before a retry pass (queues drain)
    backoff_loss: float = 0.02  # loss share of a probe that makes the pacer back off
    min_rate_pps: float = 40.0
    max_rate_pps: float = 4000.0
    increase_pps: float = 20.0  # added after a clean probe
    decrease: float = 0.7  # rate factor after a lossy probe

    def __post_init__(self) -> None:
        if self.width < 1:
            raise ValueError(f"width must be >= 1, got {self.width}")
        if not (0 < self.min_rate_pps <= self.rate_pps <= self.max_rate_pps):
            raise ValueError(f"rate_pps {self.rate_pps} must be within [{self.min_rate_pps}, {self.max_rate_pps}]")
        if not 0 < self.decrease < 1:
            raise ValueError(f"decrease must be in (0, 1), got {self.decrease}")
        if self.passes < 1 or self.retries < 0 or self.timeout_ms <= 0 or self.chunk < 1:
            raise ValueError("passes >= 1, retries >= 0, timeout_ms > 0 and chunk >= 1 required")


@dataclass
class AdaptivePacer:
    """The scheduling and adaptation of a paced sweep over ``targets`` (source -> destinations).

    Use: while :meth:`pending`: start :meth:`take` while :meth:`can_start`; report each finished
    probe with :meth:`done`; when :meth:`pass_over`, call :meth:`next_pass` (False: finished).
    """

    targets: dict[str, list[str]]
    pacing: Pacing = field(default_factory=Pacing)

    def __post_init__(self) -> None:
        self.width = self.pacing.width
        self.rate = self.pacing.rate_pps
        self.pass_no = 0
        self.queue = self._units(self.targets, rotate=True)
        self.running = 0
        self.reached: set[tuple[str, str]] = set()
        self.lost_now: dict[str, list[str]] = {}  # lost in the current pass, retried in the next
        self.retried: set[tuple[str, str]] = set()
        self.probes = 0
        self.backoffs = 0
        self.pairs = sum(len(d) for d in self.targets.values())

    def _units(self, targets: dict[str, list[str]], rotate: bool = False) -> deque[tuple[str, list[str]]]:
        """Probes of a pass: each source's targets in chunks, the sources interleaved (the first chunk of
        every source, then the second, ...); ``rotate``: source i starts at its i-th target, so the probes
        running at once aim at different hosts."""
        per_src = []
        for i, (src, dsts) in enumerate(targets.items()):
            if not dsts:
                continue
            k = i % len(dsts) if rotate else 0
            order = list(dsts[k:]) + list(dsts[:k])
            c = self.pacing.chunk
            per_src.append([(src, order[j:j + c]) for j in range(0, len(order), c)])
        out: deque[tuple[str, list[str]]] = deque()
        for r in range(max((len(u) for u in per_src), default=0)):
            out.extend(u[r] for u in per_src if r < len(u))
        return out

    @property
    def interval_ms(self) -> float:
        """Gap between two echo requests of one probe at the current rate (fping's floor: 1 ms)."""
        return max(1.0, 1000.0 * self.width / self.rate)

    # -- scheduling
    def can_start(self) -> bool:
        return bool(self.queue) and self.running < self.width

    def take(self) -> tuple[str, list[str], float]:
        """The next source, its targets in this pass and the interval to probe them at."""
        src, dsts = self.queue.popleft()
        self.running += 1
        return src, dsts, self.interval_ms

    def done(self, src: str, dsts: list[str], answered: Iterable[str]) -> None:
        """A probe of ``src`` to ``dsts`` ended; ``answered``: the destinations that answered."""
        self.running -= 1
        got = set(answered) & set(dsts)
        self.probes += len(dsts)
        self.reached.update((src, d) for d in got)
        missed = [d for d in dsts if d not in got]
        if missed:
            self.lost_now.setdefault(src, []).extend(missed)
            if self.pass_no == 0:
                self.retried.update((src, d) for d in missed)
        p = self.pacing
        if dsts and len(missed) / len(dsts) > p.backoff_loss:
            self.backoffs += 1
            self.rate = max(p.min_rate_pps, self.rate * p.decrease)
        elif not missed:
            self.rate = min(p.max_rate_pps, self.rate + p.increase_pps)

    def pass_over(self) -> bool:
        return not self.queue and self.running == 0

    def next_pass(self) -> bool:
        """Start the retry pass over the pairs lost so far, at half the last pass's rate; False when done."""
        if not self.lost_now or self.pass_no + 1 >= self.pacing.passes:
            return False
        p = self.pacing
        self.pass_no += 1
        self.rate = max(p.min_rate_pps, self.rate / 2)
        self.queue = self._units(self.lost_now)
        self.lost_now = {}
        return True

    def pending(self) -> bool:
        return bool(self.queue) or self.running > 0

    # -- result
    def lost_pairs(self) -> list[tuple[str, str]]:
        """Pairs no pass got an answer from (valid once finished)."""
        return [(s, d) for s, dsts in self.lost_now.items() for d in dsts if (s, d) not in self.reached]

    def result(self) -> dict[str, Any]:
        lost = self.lost_pairs()
        return {
            "pairs": self.pairs,
            "reached": len(self.reached),
            "lost": len(lost),
            "lost_pairs": [f"{a}->{b}" for a, b in lost[:20]],
            "retried": len(self.retried),
            "retried_reached": len(self.retried & self.reached),
            "passes": self.pass_no + 1,
            "probes": self.probes,
            "backoffs": self.backoffs,
            "final_rate_pps": round(self.rate, 1),
        }


def sweep(pacer: AdaptivePacer, start: Callable[[str, list[str], float], Any],
          poll: Callable[[Any], list[str] | None], settle: Callable[[], None] = lambda: None,
          between_passes: Callable[[int], None] | None = None, tick: float = 0.01,
          on_pass: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run ``pacer`` to the end: ``start(src, dsts, interval_ms)`` launches a probe and returns a handle;
    ``poll(handle)`` returns the answered destinations once it has ended (None while running).
    ``between_passes(pass_no)`` is called before every retry pass (after ``settle()``); ``on_pass(line)``
    gets one line per finished pass and one every 30 s."""
    t0 = time.monotonic()
    running: list[tuple[Any, str, list[str]]] = []
    next_note = t0 + 30.0
    while True:
        while pacer.can_start():
            src, dsts, interval = pacer.take()
            running.append((start(src, dsts, interval), src, dsts))
        still = []
        for handle, src, dsts in running:
            answered = poll(handle)
            if answered is None:
                still.append((handle, src, dsts))
            else:
                pacer.done(src, dsts, answered)
        running = still
        if on_pass is not None and time.monotonic() >= next_note:
            next_note += 30.0
            on_pass(f"pass {pacer.pass_no} running: {len(pacer.reached)}/{pacer.pairs} reached, {pacer.probes} probes, "
                    f"{time.monotonic() - t0:.0f} s, rate {pacer.rate:.0f}/s, {pacer.backoffs} back-off(s)")
        if pacer.pass_over():
            if on_pass is not None:
                lost = sum(len(d) for d in pacer.lost_now.values())
                on_pass(f"pass {pacer.pass_no}: {len(pacer.reached)}/{pacer.pairs} reached, {lost} unanswered, "
                        f"{pacer.probes} probes, {time.monotonic() - t0:.1f} s, rate {pacer.rate:.0f}/s, "
                        f"{pacer.backoffs} back-off(s)")
            if pacer.lost_now and pacer.pass_no + 1 < pacer.pacing.passes:
                settle()
                if between_passes is not None:
                    between_passes(pacer.pass_no + 1)
            if not pacer.next_pass():
                break
        elif running:
            time.sleep(tick)
    res = pacer.result()
    res["seconds"] = round(time.monotonic() - t0, 2)
    res["rate_pps"] = round(res["probes"] / res["seconds"], 1) if res["seconds"] > 0 else None
    return res


def fping_cmd(ips: list[str], interval_ms: float, pacing: Pacing) -> list[str]:
    """``fping`` probing ``ips`` once each (``retries`` retries), one request every ``interval_ms``."""
    return ["fping", "-4", "-e", "-r", str(pacing.retries), "-B", "1.5", "-i", f"{max(1, round(interval_ms))}",
            "-t", str(pacing.timeout_ms), *ips]


def parse_alive(out: str) -> dict[str, float | None]:
    """Addresses fping reported alive -> round-trip ms (``-e``; None without it)."""
    return {m.group(1): float(m.group(2)) if m.group(2) else None
            for line in out.splitlines() if (m := _ALIVE.match(line.strip()))}


def paced_reachability(net: Any, pairs: dict[str, list[str]], pacing: Pacing | None = None,
                       between_passes: Callable[[int], None] | None = None,
                       progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Paced, adaptive fping sweep over ``pairs`` (host -> hosts) on a Mininet net (``net.hf_ips``)."""
    from fabric_topo import node  # mininet/fabric_topo.py (imported late: the pure part needs no Mininet)

    pacing = pacing or Pacing()
    ips = net.hf_ips
    by_ip = {ip: name for name, ip in ips.items()}
    pacer = AdaptivePacer(pairs, pacing)
    rtts: list[float] = []

    def start(src: str, dsts: list[str], interval: float) -> Any:
        return node(net, src).popen(fping_cmd([ips[d] for d in dsts], interval, pacing), text=True)

    def poll(proc: Any) -> list[str] | None:
        if proc.poll() is None:
            return None
        out, _ = proc.communicate()
        alive = parse_alive(out or "")
        rtts.extend(r for r in alive.values() if r is not None)
        return [by_ip[ip] for ip in alive if ip in by_ip]

    res = sweep(pacer, start, poll, settle=lambda: time.sleep(pacing.settle_s), between_passes=between_passes,
                on_pass=progress)
    res["tool"] = "fping (paced)"
    res["rtt_avg_ms"] = round(statistics.mean(rtts), 3) if rtts else None
    res["rtt_max_ms"] = round(max(rtts), 3) if rtts else None
    return res
