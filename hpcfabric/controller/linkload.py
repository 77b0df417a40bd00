"""Per-link congestion, pure: port counters and the fabric -> per-link and per-class figures, top N.

Every fabric link is two directions, each named by its sending end (``switch``, ``port``, ``peer`` =
the receiving ``switch:port``). A direction's figures:

* ``util``: tx utilisation 0..1, from two successive ``tx_bytes`` counters of the sending port
  (:class:`PortRates`, time passed in as ``now``) over the port's speed (port description
  ``curr_speed``, else the configured link speed); None until two samples exist;
* ``pause_frames``, ``flips``, ``paused_s``, ``paused``: what the controller knows about PAUSE on that
  port (a PAUSE received on ``switch:port`` stops that port sending, i.e. this direction):
  frames seen, flips, seconds paused (:class:`PauseClock`) and paused now.

:class:`LinkTable` holds the directions of one fabric as columns (built once) and turns :class:`LinkInputs`
into :class:`LinkFigures` (numpy columns, a few ms for Table III's 47,472 directions): per-class aggregates
(:meth:`LinkFigures.class_figures`: max and mean utilisation, summed counters; classes are the links'
``kind``: ``global``/``local``, ``dim0``.., ``edge-agg``/``agg-core`` or ``levelN-M``), the top N
(:meth:`LinkFigures.top`), the highest load per drawn edge (:meth:`LinkFigures.max_by`) and rows
(:class:`LinkRow`) only for the directions asked for.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Iterable, Mapping, NamedTuple

import numpy as np

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
    """One direction of a fabric link, named by its sending end (built only for the directions asked for)."""

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
    """The directions of ``fabric``'s switch-to-switch links (built once per fabric), as columns: direction
    ``i`` is ``keys[i]`` (its sending end), its reverse ``far[i]``, its class ``classes[cls[i]]``."""

    def __init__(self, fabric: Fabric) -> None:
        self.fabric = fabric
        dirs = []
        for link in fabric.links:
            dirs.append((link.a, link.a_port, f"{link.b}:{link.b_port}", link.kind))
            dirs.append((link.b, link.b_port, f"{link.a}:{link.a_port}", link.kind))
        self.dirs = tuple(dirs)
        self.keys: tuple[Key, ...] = tuple((d[0], d[1]) for d in dirs)
        self.index = {k: i for i, k in enumerate(self.keys)}
        self.far = np.arange(len(dirs)) ^ 1  # a link's two directions sit side by side
        self.classes = tuple(sorted({d[3] for d in dirs}))
        code = {c: n for n, c in enumerate(self.classes)}
        self.cls = np.fromiter((code[d[3]] for d in dirs), np.int64, len(dirs))
        self.rank = np.empty(len(dirs), np.int64)  # position in (switch, port) order: top N's tie break
        self.rank[sorted(range(len(dirs)), key=self.keys.__getitem__)] = np.arange(len(dirs))

    def __len__(self) -> int:
        return len(self.dirs)

    def figures(self, inp: LinkInputs) -> "LinkFigures":
        """Every direction's figures at once (dense maps read once, sparse ones by their entries)."""
        n, index = len(self.keys), self.index
        bps = np.fromiter((inp.bps.get(k, np.nan) for k in self.keys), np.float64, n)
        speed = np.fromiter((inp.speed.get(k, 0.0) for k in self.keys), np.float64, n) if inp.speed else np.zeros(n)
        speed[~(speed > 0)] = inp.default_speed
        util = np.minimum(1.0, bps / speed)
        frames, flips, paused_s = np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n)
        for col, values in ((frames, inp.frames), (flips, inp.flips), (paused_s, inp.paused_s)):
            for k, v in values.items():
                i = index.get(k)
                if i is not None:
                    col[i] = v
        paused, down = np.zeros(n, bool), np.zeros(n, bool)
        for col, keys in ((paused, inp.paused), (down, inp.down)):
            hit = [i for i in map(index.get, keys) if i is not None]
            col[hit] = True
        return LinkFigures(self, util, frames, flips, paused_s, paused, down | down[self.far])


@dataclass(frozen=True, eq=False)
class LinkFigures:
    """Per-direction columns of one moment (``util`` NaN where no rate exists yet)."""

    table: LinkTable
    util: np.ndarray
    frames: np.ndarray
    flips: np.ndarray
    paused_s: np.ndarray
    paused: np.ndarray
    failed: np.ndarray

    def row(self, i: int) -> LinkRow:
        sw, port, peer, cls = self.table.dirs[i]
        u = float(self.util[i])
        return LinkRow(sw, port, peer, cls, None if u != u else u, int(self.frames[i]), int(self.flips[i]),
                       float(self.paused_s[i]), bool(self.paused[i]), bool(self.failed[i]))

    def rows(self, only: Iterable[Key] | None = None) -> list[LinkRow]:
        """Rows of every direction, or of the sending ends ``only`` (in the table's order)."""
        if only is None:
            return [self.row(i) for i in range(len(self.table))]
        index = self.table.index
        return [self.row(i) for i in sorted({index[k] for k in only if k in index})]

    def class_figures(self) -> dict[str, dict[str, float]]:
        """Per class: ``max``/``mean`` utilisation (over the directions with a rate; 0 without any),
        ``pause_frames``, ``paused_seconds``, ``flips`` (sums), ``links`` (directions), ``paused``, ``failed``."""
        cls, m = self.table.cls, len(self.table.classes)
        rated = ~np.isnan(self.util)
        util = np.where(rated, self.util, 0.0)
        top = np.zeros(m)
        np.maximum.at(top, cls[rated], util[rated])
        rated_n = np.bincount(cls, rated, m)
        sums = {name: np.bincount(cls, col, m) for name, col in (("util", util), ("frames", self.frames),
                                                                ("flips", self.flips), ("paused_s", self.paused_s),
                                                                ("paused", self.paused), ("failed", self.failed))}
        links = np.bincount(cls, minlength=m)
        return {c: {"max": float(top[k]), "mean": float(sums["util"][k] / rated_n[k]) if rated_n[k] else 0.0,
                    "pause_frames": int(sums["frames"][k]), "flips": int(sums["flips"][k]),
                    "paused_seconds": float(sums["paused_s"][k]), "links": int(links[k]),
                    "paused": int(sums["paused"][k]), "failed": int(sums["failed"][k])}
                for k, c in enumerate(self.table.classes)}

    def top(self, n: int) -> list[LinkRow]:
        """The ``n`` most utilised directions (highest first; ties by switch, port); directions without a rate skipped."""
        util = np.where(np.isnan(self.util), -np.inf, self.util)
        have = int(np.count_nonzero(~np.isneginf(util)))
        if n <= 0 or not have:
            return []
        n = min(n, have)
        floor = np.partition(util, len(util) - n)[len(util) - n]  # the n-th highest: ties with it compete
        cand = np.flatnonzero(util >= floor)
        order = cand[np.lexsort((self.table.rank[cand], -util[cand]))]
        return [self.row(int(i)) for i in order[:n]]

    def max_by(self, bucket: np.ndarray, count: int) -> np.ndarray:
        """Highest utilisation per bucket (``bucket[i]``: direction i's bucket, -1 none); NaN where none has a rate."""
        keep = (bucket >= 0) & ~np.isnan(self.util)
        out = np.full(count, -np.inf)
        np.maximum.at(out, bucket[keep], self.util[keep])
        out[np.isneginf(out)] = np.nan
        return out
