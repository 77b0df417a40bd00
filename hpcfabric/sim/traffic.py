"""Destinations of generated frames: UN, ADV and the patterns of :mod:`hpcfabric.topology.patterns`.

:class:`Traffic` draws one destination host id per generated frame, uniformly from the source's
destination set. ``uniform`` (UN: any other host) and ``adversarial`` on a Dragonfly (ADV: any
host of the next group, the paper's) are drawn arithmetically, so they cost nothing at Table III
scale; every other pattern name goes through :func:`hpcfabric.topology.patterns.pattern`
(explicit destination lists, stored as one flat array).
"""

from __future__ import annotations

import numpy as np

from hpcfabric.topology.model import Fabric
from hpcfabric.topology.patterns import ALIASES, PatternError, pattern
from hpcfabric.topology.traffic import TrafficMatrix

__all__ = ["Traffic"]


class Traffic:
    #: relative injection rate per host id (1: every host sends at the offered load)
    rate: "float | np.ndarray" = 1.0

    def __init__(self, fabric: Fabric, name: str) -> None:
        key = ALIASES.get(name.lower())
        if key is None:
            raise PatternError(f"unknown traffic pattern {name!r}: expected one of {', '.join(sorted(ALIASES))}")
        self.name = key
        hosts = fabric.hosts
        self.H = H = len(hosts)
        if H < 2:
            raise PatternError(f"fabric {fabric.name!r} has fewer than two hosts: nothing to send")
        self.kind = "uniform" if key == "uniform" else "lists"
        if key == "adversarial" and fabric.kind == "dragonfly":
            group = {s.name: s.group for s in fabric.switches}
            hg = np.array([group[h.switch] for h in hosts], dtype=np.int64)
            order = np.argsort(hg, kind="stable")
            groups = np.unique(hg)
            if len(groups) < 2:
                raise PatternError(f"fabric {fabric.name!r} has a single group: the adversarial pattern needs two or more")
            start = np.searchsorted(hg[order], groups)
            count = np.diff(np.append(start, H))
            nxt = (np.searchsorted(groups, hg) + 1) % len(groups)
            self.kind = "lists"
            self.flat, self.off, self.cnt = order, start[nxt], count[nxt]
        elif key != "uniform":
            hid = {h.name: i for i, h in enumerate(hosts)}
            lists = pattern(fabric, key)
            dsts = [np.array([hid[d] for d in lists[h.name]], dtype=np.int64) for h in hosts]
            self.cnt = np.array([len(d) for d in dsts], dtype=np.int64)
            self.off = np.concatenate([[0], np.cumsum(self.cnt)[:-1]]).astype(np.int64)
            self.flat = np.concatenate(dsts)

    @classmethod
    def from_matrix(cls, fabric: Fabric, matrix: TrafficMatrix) -> "Traffic":
        """Destinations drawn with the weights of ``matrix`` (:meth:`TrafficMatrix.host_rows`); a host
        sends at the offered load times its relative rate (the busiest host at the offered load)."""
        self = cls.__new__(cls)
        self.name = matrix.source or "matrix"
        self.H = len(fabric.hosts)
        if self.H < 2 or not len(matrix):
            raise PatternError(f"traffic matrix {self.name!r} sends nothing on {fabric.name!r}")
        rate, off, dsts, prob = matrix.host_rows(fabric)
        self.kind = "weighted"
        self.rate = rate
        self.off, self.cnt, self.flat, self.prob = off[:-1], np.diff(off), dsts, prob
        self.cum = np.cumsum(prob)
        return self

    def sample(self, src: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One destination host id per source host id."""
        if self.kind == "weighted":
            start = self.off[src]
            base = np.where(start > 0, self.cum[np.maximum(start - 1, 0)], 0.0)
            idx = np.searchsorted(self.cum, base + rng.random(len(src)), side="right")
            return self.flat[np.clip(idx, start, start + self.cnt[src] - 1)]
        if self.kind == "uniform":
            d = rng.integers(0, self.H - 1, len(src))
            return d + (d >= src)
        pick = (rng.random(len(src)) * self.cnt[src]).astype(np.int64)
        return self.flat[self.off[src] + pick]

    def matrix_row_weights(self, src: int) -> tuple[np.ndarray, np.ndarray]:
        """(destination ids, probabilities) of host ``src`` (channel-load analysis)."""
        if self.kind == "uniform":
            d = np.delete(np.arange(self.H), src)
            return d, np.full(len(d), 1.0 / len(d))
        d = self.flat[self.off[src]: self.off[src] + self.cnt[src]]
        if self.kind == "weighted":
            return d, self.prob[self.off[src]: self.off[src] + self.cnt[src]]
        return d, np.full(len(d), 1.0 / len(d))
