"""Per-link congestion, pure: port counters and the fabric -> per-link and per-class figures, top N.

Every fabric link is two directions, each named by its sending end (``switch``, ``port``, ``peer`` =
the receiving ``switch:port``). A direction's figures:

* ``util``: tx utilisation 0..1, from two successive ``tx_bytes`` counters of the sending port
  (:class:`PortRates`, time passed in as ``now``) over the port's speed (port description
  ``curr_speed``, else the configured link speed); None until two samples exist;
* ``pause_frames``, ``flips``, ``paused_s``, ``paused``: what the controller knows about PAUSE on that
  port (a PAUSE received on ``switch:port`` stops that port sending, i.e. this direction):
  frames seen, flips, seconds paused (:class:`PauseClock`) and paused now.

:class:`LinkTable` holds the directions of one fabric (built once) and turns :class:`LinkInputs` into
rows (:meth:`LinkTable.rows`), per-class aggregates (:func:`class_figures`: max and mean utilisation,
summed counters; classes are the links' ``kind``: ``global``/``local``, ``dim0``.., ``edge-agg``/
``agg-core`` or ``levelN-M``) and the top N (:func:`top_rows`).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
import heapq
from typing import Iterable, Mapping, NamedTuple

from hpcfabric.topology.model import Fabric

Key = tuple[str, int]


class PortRates:
    """tx bits per second per (switch, port) from successive ``tx_bytes`` counters."""

    def __init__(self) -> None:
        self.last: dict[Key, tuple[float, int]] = {}
        self.bps: dict[Key, float] = {}
        self.speed: dict[Key, float] = {}  # port description curr_speed, bits/s (0 or absent: unknown)
        self.rounds = 0  # poll rounds that produced rates (finish_round): the page reloads loads on a change
        self._fresh = False

    def record(self, switch: str, counters: Iterable[tuple[int, int]], now: float,
               speeds: Mapping[int, float] | None = None) -> None:
        """One switch's ``(port, tx_bytes)`` at ``now``; ``speeds``: port -> bits/s from its description."""
        fresh = False
        for port, tx in counters:
            key = (switch, port)
            prev = self.last.get(key)
            self.last[key] = (now, tx)
            if prev is None or now <= prev[0]:
                continue
            if tx < prev[1]:  # counter reset (switch restarted): no rate from this pair
                self.bps.pop(key, None)
                continue
            self.bps[key] = (tx - prev[1]) * 8.0 / (now - prev[0])
            fresh = True
        for port, bps in (speeds or {}).items():
            if bps > 0:
                self.speed[(switch, port)] = float(bps)
        self._fresh = self._fresh or fresh

    def finish_round(self) -> None:
        """A poll round over every switch is done: a new load round if it produced rates."""
        if self._fresh:
            self.rounds += 1
            self._fresh = False

    def forget(self, switch: str) -> None:
        """The switch's counters start over (a new session)."""
        for d in (self.last, self.bps):
            for key in [k for k in d if k[0] == switch]:
                del d[key]


class PauseClock:
    """Seconds each port spent paused, from its flips (``flip`` at every flip; ``seconds`` adds a running pause)."""

    def __init__(self) -> None:
        self.since: dict[Key, float] = {}
        self.total: collections.Counter = collections.Counter()

    def flip(self, key: Key, paused: bool, at: float) -> None:
        if paused:
            self.since.setdefault(key, at)
        elif key in self.since:
            self.total[key] += max(0.0, at - self.since.pop(key))

    def seconds(self, now: float) -> dict[Key, float]:
        out = dict(self.total)
        for key, t in self.since.items():
            out[key] = out.get(key, 0.0) + max(0.0, now - t)
        return out


@dataclass(frozen=True)
class LinkInputs:
    """What the controller knows at one moment (plain maps keyed by (switch, port) of the sending end)."""

    bps: Mapping[Key, float] = field(default_factory=dict)
    speed: Mapping[Key, float] = field(default_factory=dict)
    default_speed: float = 10e9
    frames: Mapping[Key, int] = field(default_factory=dict)
    flips: Mapping[Key, int] = field(default_factory=dict)
    paused_s: Mapping[Key, float] = field(default_factory=dict)
    paused: frozenset = frozenset()
    down: frozenset = frozenset()  # ports reported down (either end down: the link failed)


class LinkRow(NamedTuple):
    """One direction of a fabric link, named by its sending end (a tuple: 47,472 of them at Table III)."""

    switch: str
    port: int
    peer: str  # receiving end, "switch:port"
    cls: str
    util: float | None
    pause_frames: int
    flips: int
    paused_s: float
    paused: bool
    failed: bool


class LinkTable:
    """The directions of ``fabric``'s switch-to-switch links (built once per fabric)."""

    def __init__(self, fabric: Fabric) -> None:
        self.fabric = fabric
        dirs = []
        for link in fabric.links:
            dirs.append((link.a, link.a_port, f"{link.b}:{link.b_port}", link.kind, (link.b, link.b_port)))
            dirs.append((link.b, link.b_port, f"{link.a}:{link.a_port}", link.kind, (link.a, link.a_port)))
        self.dirs = tuple(dirs)
        self.classes = tuple(sorted({d[3] for d in dirs}))

    def __len__(self) -> int:
        return len(self.dirs)

    def rows(self, inp: LinkInputs, only: Iterable[Key] | None = None) -> list[LinkRow]:
        """Every direction's figures (``only``: just those sending ends)."""
        want = None if only is None else set(only)
        bps, speed, dflt = inp.bps, inp.speed, inp.default_speed
        out = []
        for sw, port, peer, cls, far in self.dirs:
            key = (sw, port)
            if want is not None and key not in want:
                continue
            rate = bps.get(key)
            util = None if rate is None else min(1.0, rate / (speed.get(key) or dflt))
            out.append(LinkRow(sw, port, peer, cls, util, inp.frames.get(key, 0), inp.flips.get(key, 0),
                               inp.paused_s.get(key, 0.0), key in inp.paused, key in inp.down or far in inp.down))
        return out


def class_figures(rows: Iterable[LinkRow], classes: Iterable[str] = ()) -> dict[str, dict[str, float]]:
    """Per class: ``max``/``mean`` utilisation (over the directions with a rate; 0 without any),
    ``pause_frames``, ``paused_seconds``, ``flips`` (sums), ``links`` (directions), ``paused``, ``failed``."""
    acc: dict[str, list[float]] = {c: [0.0, 0.0, 0, 0, 0, 0.0, 0, 0, 0] for c in classes}
    for r in rows:
        a = acc.setdefault(r.cls, [0.0, 0.0, 0, 0, 0, 0.0, 0, 0, 0])
        if r.util is not None:
            a[0] = max(a[0], r.util)
            a[1] += r.util
            a[2] += 1
        a[3] += r.pause_frames
        a[4] += r.flips
        a[5] += r.paused_s
        a[6] += 1
        a[7] += r.paused
        a[8] += r.failed
    return {c: {"max": a[0], "mean": a[1] / a[2] if a[2] else 0.0, "pause_frames": a[3], "flips": a[4],
                "paused_seconds": a[5], "links": a[6], "paused": a[7], "failed": a[8]} for c, a in sorted(acc.items())}


def top_rows(rows: Iterable[LinkRow], n: int) -> list[LinkRow]:
    """The ``n`` most utilised directions (highest first; ties by switch, port); directions without a rate skipped."""
    have = (r for r in rows if r.util is not None)
    return heapq.nsmallest(max(0, n), have, key=lambda r: (-r.util, r.switch, r.port))  # type: ignore[operator]
