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

__all__ = ["Traffic"]


class Traffic:
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

    def sample(self, src: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One destination host id per source host id."""
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
        return d, np.full(len(d), 1.0 / len(d))
