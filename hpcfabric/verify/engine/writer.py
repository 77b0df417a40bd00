"""The *writer rule* for destination classes (:class:`~.batch.MatchClasses`), vectorised.

A destination *meets* an ``eth_dst`` entry only where some frame for it can reach that entry. Tables are read
in order with the set of metadata values that can arrive there -- 0 at table 0, then what the ``goto`` entries
met so far write (``write_metadata``: ``(a & ~mask) | value``) -- as bit sets over the values reachable from 0
by any write of the tables (at most 64; more: the rule is off and :class:`~.batch.MatchClasses` keeps the
capture rule). Per table, in pipeline order:

* an entry whose ``metadata`` condition no arriving value satisfies is not met, nor is any entry of a table
  no frame reaches;
* an ``eth_dst`` entry whose other conditions are only ``metadata``, satisfied by every arriving value (or
  none at all), *captures*: the ``eth_dst`` entries below it in its table are not met.

Sound: an entry left out never wins for that destination in any line (a frame meets it only with an arriving
value; a capturing entry above admits every frame that gets there first). The sets are over-approximated
(every entry without ``eth_dst`` passes on what it admits), which only keeps more entries. This is exactly the
model :func:`~.batch.decide` runs (metadata changes only by ``write_metadata``; tables only by ``goto``). On
conditional Flattened Butterflies the paused copy's ``eth_dst`` entries also match a metadata bit only the
routing entry of a higher dimension writes: fb-3d 67 -> 40 classes per switch (``bench/match_classes_rules.py``).
"""

from __future__ import annotations

import numpy as np

__all__ = ["WriterRule", "MAX_VALUES"]

MAX_VALUES = 64  # metadata values as bits of one uint64
NEVER = np.iinfo(np.int64).max
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)


def reachable_values(flat) -> np.ndarray | None:
    """Sorted metadata values reachable from 0 by the writes of every ``goto`` entry, None past ``MAX_VALUES``."""
    go = (flat.goto >= 0) & (flat.wm_m != 0)
    writes = {(int(v), int(m)) for v, m in zip(flat.wm_v[go].tolist(), flat.wm_m[go].tolist())}
    seen, todo = {0}, [0]
    while todo:
        a = todo.pop()
        for v, m in writes:
            b = (a & ~m) | v
            if b not in seen:
                if len(seen) == MAX_VALUES:
                    return None
                seen.add(b)
                todo.append(b)
    return np.array(sorted(seen), dtype=np.uint64)


class WriterRule:
    """Prunes the ``eth_dst`` keys a (group, MAC) pair does not meet under the writer rule (module docstring).

    ``ekey``: per entry of ``flat`` its key id (-1: no ``eth_dst`` key); ``variant_group``: group of each
    variant. Build with :meth:`build` (None when more than ``MAX_VALUES`` values can arrive)."""

    @classmethod
    def build(cls, flat, variant_group: np.ndarray, n_groups: int, ekey: np.ndarray) -> "WriterRule | None":
        if not (flat.meta_m[ekey >= 0] != 0).any():
            return None  # no eth_dst entry has a metadata condition: the capture rule decides alike
        values = reachable_values(flat)
        return None if values is None else cls(flat, variant_group, n_groups, ekey, values)

    def __init__(self, flat, variant_group: np.ndarray, n_groups: int, ekey: np.ndarray, values: np.ndarray) -> None:
        self.flat = flat
        self.values = values
        n = len(values)
        sat = np.zeros(flat.n, dtype=np.uint64)
        for i, u in enumerate(values):
            sat |= ((u & flat.meta_m) == flat.meta_v).astype(np.uint64) << np.uint64(i)
        self.sat = sat
        self.plain = (flat.in_port < 0) & (flat.vlan_pcp < 0) & (flat.vid_m == 0)
        # write transforms over value indices: tid per entry (-1: none), constant target or -1
        w = flat.wm_m != 0
        pairs, tid = np.unique(np.stack([flat.wm_v[w], flat.wm_m[w]], axis=1), axis=0, return_inverse=True)
        self.tid = np.full(flat.n, -1, dtype=np.int64)
        self.tid[w] = tid.reshape(-1)
        self.tmap = np.zeros((len(pairs), n), dtype=np.int64)
        for j, (v, m) in enumerate(pairs.tolist()):
            self.tmap[j] = np.searchsorted(values, (values & ~np.uint64(m)) | np.uint64(v))
        self.const = np.where((self.tmap == self.tmap[:, :1]).all(axis=1), self.tmap[:, 0], -1) \
            if len(pairs) else np.zeros(0, dtype=np.int64)
        # variants per group by slot
        order = np.argsort(variant_group, kind="stable")
        firsts = np.searchsorted(variant_group[order], variant_group[order])
        self.slot = np.empty(len(variant_group), dtype=np.int64)
        self.slot[order] = np.arange(len(order)) - firsts
        self.n_slots = int(self.slot.max(initial=0)) + 1
        self.gsv = np.full((n_groups, self.n_slots), -1, dtype=np.int64)
        self.gsv[variant_group, self.slot] = np.arange(len(variant_group))
        has = np.flatnonzero(ekey >= 0)
        o = np.argsort(ekey[has], kind="stable")
        self.e_sorted, self.k_sorted = has[o], ekey[has][o]
        self._wild_go = (flat.dst_m == 0) & (flat.goto >= 0)

    def _apply(self, e: np.ndarray, b: np.ndarray) -> np.ndarray:
        """The bit sets ``b`` after the writes of entries ``e``."""
        tid = self.tid[e]
        out = b.copy()
        w = np.flatnonzero(tid >= 0)
        if not len(w):
            return out
        c = self.const[tid[w]]
        k = w[c >= 0]
        out[k] = np.where(b[k] != 0, np.uint64(1) << c[c >= 0].astype(np.uint64), np.uint64(0))
        g = w[c < 0]
        if len(g):
            res = np.zeros(len(g), dtype=np.uint64)
            for i in range(len(self.values)):
                on = (b[g] >> np.uint64(i)) & np.uint64(1)
                res |= on << self.tmap[tid[g], i].astype(np.uint64)
            out[g] = res
        return out

    def _wild(self, v: np.ndarray, a: np.ndarray, t: int, arr: np.ndarray) -> None:
        """Into ``arr``: what the entries without ``eth_dst`` of table ``t`` pass on (per distinct variant, set)."""
        flat = self.flat
        live = np.flatnonzero((v >= 0) & (a != 0))
        if not len(live):
            return
        order = np.lexsort((a[live], v[live]))
        lv, la = v[live][order], a[live][order]
        new = np.concatenate([[True], (lv[1:] != lv[:-1]) | (la[1:] != la[:-1])])
        combo = np.cumsum(new) - 1
        heads = np.flatnonzero(new)
        out = np.zeros((len(heads), arr.shape[1]), dtype=np.uint64)
        T = flat.n_tables
        for c, h in enumerate(heads.tolist()):
            vv, aa = int(lv[h]), la[h]
            lo, hi = flat.block_start[vv * T + t], flat.block_start[vv * T + t + 1]
            e = lo + np.flatnonzero(self._wild_go[lo:hi] & (flat.goto[lo:hi] < T))
            if not len(e):
                continue
            b = self._apply(e, self.sat[e] & aa)
            np.bitwise_or.at(out[c], flat.goto[e], b)
        arr[live[order]] |= out[combo]

    def met(self, group: np.ndarray, keys: list[np.ndarray]) -> np.ndarray:
        """(pair, mask) -> does the pair meet some entry of its key under that mask."""
        flat = self.flat
        R, T = len(group), flat.n_tables
        els, es, mis = [], [], []
        for mi, k in enumerate(keys):
            at = np.flatnonzero(k >= 0)
            lo = np.searchsorted(self.k_sorted, k[at], "left")
            cnt = np.searchsorted(self.k_sorted, k[at], "right") - lo
            tot = int(cnt.sum())
            els.append(np.repeat(at, cnt))
            es.append(self.e_sorted[np.repeat(lo - np.cumsum(cnt) + cnt, cnt) + np.arange(tot)])
            mis.append(np.full(tot, mi, dtype=np.int64))
        EL, E, MI = np.concatenate(els), np.concatenate(es), np.concatenate(mis)
        S, TAB, RANK = self.slot[flat.v[E]], flat.table[E], flat.rank[E]
        met_e = np.zeros(len(E), dtype=bool)
        bit0 = np.uint64(1) << np.uint64(int(np.searchsorted(self.values, np.uint64(0))))
        for s in range(self.n_slots):
            v = self.gsv[group, s]
            arr = np.zeros((R, T), dtype=np.uint64)
            arr[:, 0] = np.where(v >= 0, bit0, np.uint64(0))
            in_s = np.flatnonzero(S == s)
            for t in range(T):
                a_t = arr[:, t].copy()
                self._wild(v, a_t, t, arr)
                j = in_s[TAB[in_s] == t]
                if not len(j):
                    continue
                el, e = EL[j], E[j]
                a, sat = a_t[el], self.sat[e]
                any_ok = (a & sat) != 0  # also: the table is reached
                capt = any_ok & self.plain[e] & ((a & ~sat) == 0)
                cap = np.full(R, NEVER, dtype=np.int64)
                np.minimum.at(cap, el[capt], RANK[j][capt])
                m = any_ok & (RANK[j] <= cap[el])
                met_e[j[m]] = True
                g = np.flatnonzero(m & (flat.goto[e] >= 0) & (flat.goto[e] < T))
                if len(g):
                    np.bitwise_or.at(arr, (el[g], flat.goto[e[g]]), self._apply(e[g], a[g] & sat[g]))
        out = np.zeros((R, len(keys)), dtype=bool)
        out[EL[met_e], MI[met_e]] = True
        return out
