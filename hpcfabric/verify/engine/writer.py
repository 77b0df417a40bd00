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

    ``ekey``: per entry of ``flat`` its key id (-1: no ``eth_dst`` key) among ``n_keys``; ``variant_group``:
    group of each variant. Build with :meth:`build` (None when the capture rule decides alike -- no
    ``eth_dst`` entry has a ``metadata`` condition -- or more than ``MAX_VALUES`` values can arrive).
    Tables are walked per column (variant slot, table) over all pairs at once, candidates as dense matrices."""

    @classmethod
    def build(cls, flat, variant_group: np.ndarray, n_groups: int, ekey: np.ndarray, n_keys: int) -> "WriterRule | None":
        if not (flat.meta_m[ekey >= 0] != 0).any():
            return None
        values = reachable_values(flat)
        return None if values is None else cls(flat, variant_group, n_groups, ekey, n_keys, values)

    def __init__(self, flat, variant_group: np.ndarray, n_groups: int, ekey: np.ndarray, n_keys: int,
                 values: np.ndarray) -> None:
        self.flat = flat
        self.values = values
        T = self.T = flat.n_tables
        sat = np.zeros(flat.n, dtype=np.uint64)
        for i, u in enumerate(values):
            sat |= ((u & flat.meta_m) == flat.meta_v).astype(np.uint64) << np.uint64(i)
        self.sat = sat
        self.plain = (flat.in_port < 0) & (flat.vlan_pcp < 0) & (flat.vid_m == 0)
        self.bit0 = np.uint64(1) << np.uint64(int(np.searchsorted(values, np.uint64(0))))
        # write transforms over value indices: tid per entry (-1: none), constant target or -1
        w = flat.wm_m != 0
        pairs, tid = np.unique(np.stack([flat.wm_v[w], flat.wm_m[w]], axis=1), axis=0, return_inverse=True)
        self.tid = np.full(flat.n, -1, dtype=np.int64)
        self.tid[w] = tid.reshape(-1)
        self.tmap = np.zeros((len(pairs), len(values)), dtype=np.int64)
        for j, (v, m) in enumerate(pairs.tolist()):
            self.tmap[j] = np.searchsorted(values, (values & ~np.uint64(m)) | np.uint64(v))
        # variants per group by slot
        order = np.argsort(variant_group, kind="stable")
        firsts = np.searchsorted(variant_group[order], variant_group[order])
        slot = np.empty(len(variant_group), dtype=np.int64)
        slot[order] = np.arange(len(order)) - firsts
        self.n_slots = int(slot.max(initial=0)) + 1
        self.gsv = np.full((n_groups, self.n_slots), -1, dtype=np.int64)
        self.gsv[variant_group, slot] = np.arange(len(variant_group))
        # eth_dst entries by column (slot, table) and key: first entry (pipeline order) and count
        has = np.flatnonzero(ekey >= 0)
        col = slot[flat.v[has]] * T + flat.table[has]
        o = np.lexsort((has, col, ekey[has]))
        has, col, k = has[o], col[o], ekey[has][o]
        #: column -> (per key: position of its first entry in ``entries``, count; widest count; entries by key)
        self.cols: dict[int, tuple[np.ndarray, np.ndarray, int, np.ndarray]] = {}
        for c in np.unique(col).tolist():
            at = col == c
            kc, ec = k[at], has[at]
            uk, first, cnt = np.unique(kc, return_index=True, return_counts=True)
            lo = np.full(n_keys, -1, dtype=np.int64)
            n = np.zeros(n_keys, dtype=np.int8)
            lo[uk] = first
            n[uk] = cnt
            self.cols[c] = (lo, n, int(cnt.max()), ec)
        # what the entries without eth_dst pass on: per (variant, table) block and arriving value, per table
        wl = np.flatnonzero((flat.dst_m == 0) & (flat.goto >= 0) & (flat.goto < T))
        bkey, blk = np.unique(flat.v[wl] * T + flat.table[wl], return_inverse=True)
        blk = blk.reshape(-1)
        W = np.zeros((len(bkey), len(values), T), dtype=np.uint64)
        for i in range(len(values)):
            j = np.where(self.tid[wl] >= 0, self.tmap[np.maximum(self.tid[wl], 0), i], i).astype(np.uint64)
            on = (sat[wl] >> np.uint64(i)) & np.uint64(1)
            np.bitwise_or.at(W, (blk, i, flat.goto[wl]), on << j)
        self.pass_on, sig = np.unique(W.reshape(len(bkey), -1), axis=0, return_inverse=True)
        self.pass_on = self.pass_on.reshape(-1, len(values), T)
        self.block = np.full(flat.n_variants * T, -1, dtype=np.int64)
        self.block[bkey] = sig.reshape(-1)
        # signatures: keys whose entries look alike per column (rank, values admitted, plain, goto, write) and
        # groups whose variants pass on alike per table meet alike: :meth:`met` runs once per distinct tuple
        rows = np.stack([col, flat.rank[has], sat[has].view(np.int64), self.plain[has].astype(np.int64),
                         flat.goto[has], self.tid[has]], axis=1)
        _, row_id = np.unique(rows, axis=0, return_inverse=True)
        starts = np.searchsorted(k, k)
        pos = np.arange(len(k)) - starts
        seq = np.full((n_keys, int(pos.max(initial=0)) + 1), -1, dtype=np.int64)
        seq[k, pos] = row_id.reshape(-1)
        self.ksig = np.unique(seq, axis=0, return_inverse=True)[1].reshape(-1)
        vb = np.where(self.gsv[:, :, None] >= 0,
                      self.block[np.maximum(self.gsv, 0)[:, :, None] * T + np.arange(T)], -2)
        self.gsig = np.unique(vb.reshape(n_groups, -1), axis=0, return_inverse=True)[1].reshape(-1)

    def _apply(self, e: np.ndarray, b: np.ndarray) -> np.ndarray:
        """The bit sets ``b`` after the writes of entries ``e``."""
        tid = self.tid[e]
        out = b.copy()
        w = np.flatnonzero((tid >= 0) & (b != 0))
        if not len(w):
            return out
        bw, tw = b[w], tid[w]
        single = (bw & (bw - np.uint64(1))) == 0
        s = np.flatnonzero(single)
        i = np.frexp(bw[s].astype(np.float64))[1] - 1  # the bit's index (powers of 2 are exact)
        out[w[s]] = np.uint64(1) << self.tmap[tw[s], i].astype(np.uint64)
        g = np.flatnonzero(~single)
        if len(g):
            res = np.zeros(len(g), dtype=np.uint64)
            for i in range(len(self.values)):
                on = (bw[g] >> np.uint64(i)) & np.uint64(1)
                res |= on << self.tmap[tw[g], i].astype(np.uint64)
            out[w[g]] = res
        return out

    def _wild(self, rows: np.ndarray, a: np.ndarray, blk: np.ndarray, arr: np.ndarray) -> None:
        """Into ``arr``: what the entries without ``eth_dst`` pass on from arriving sets ``a`` (rows distinct)."""
        at = np.flatnonzero(blk >= 0)
        if not len(at):
            return
        a, blk, rows = a[at], blk[at], rows[at]
        single = (a & (a - np.uint64(1))) == 0
        s = np.flatnonzero(single)
        i = np.frexp(a[s].astype(np.float64))[1] - 1
        arr[rows[s]] |= self.pass_on[blk[s], i]
        g = np.flatnonzero(~single)
        for i in range(len(self.values)):
            on = ((a[g] >> np.uint64(i)) & np.uint64(1)) != 0
            if on.any():
                arr[rows[g[on]]] |= self.pass_on[blk[g[on]], i]

    def met(self, group: np.ndarray, keys: list[np.ndarray]) -> np.ndarray:
        """(pair, mask) -> does the pair meet some entry of its key under that mask."""
        flat = self.flat
        R, T = len(group), self.T
        out = np.zeros((R, len(keys)), dtype=bool)
        for s in range(self.n_slots):
            v = self.gsv[group, s]
            arr = np.zeros((R, T), dtype=np.uint64)
            arr[:, 0] = np.where(v >= 0, self.bit0, np.uint64(0))
            for t in range(T):
                rows = np.flatnonzero(arr[:, t])
                if not len(rows):
                    continue
                a = arr[rows, t]
                self._wild(rows, a, self.block[v[rows] * T + t], arr)
                cinfo = self.cols.get(s * T + t)
                if cinfo is None:
                    continue
                lo_k, n_k, width, ent = cinfo
                cand, cmask = [], []
                for mi, k in enumerate(keys):
                    k = k[rows]
                    ok = k >= 0
                    kk = np.where(ok, k, 0)
                    lo, n = lo_k[kk], np.where(ok, n_k[kk], 0)
                    if not n.any():
                        continue
                    for j in range(width):
                        cand.append(np.where(j < n, ent[np.where(j < n, lo + j, 0)], -1))
                        cmask.append(mi)
                if not cand:
                    continue
                E = np.stack(cand, axis=1)
                valid = E >= 0
                E = np.where(valid, E, 0)
                sat = self.sat[E]
                any_ok = valid & ((a[:, None] & sat) != 0)
                capt = any_ok & self.plain[E] & ((a[:, None] & ~sat) == 0)
                rank = flat.rank[E]
                cap = np.where(capt, rank, NEVER).min(axis=1)
                m = any_ok & (rank <= cap[:, None])
                go = flat.goto[E]
                for ci, mi in enumerate(cmask):
                    out[rows, mi] |= m[:, ci]
                    idx = np.flatnonzero(m[:, ci] & (go[:, ci] >= 0) & (go[:, ci] < T))
                    if not len(idx):
                        continue
                    b = self._apply(E[idx, ci], a[idx] & sat[idx, ci])
                    gg = go[idx, ci]
                    for g in np.unique(gg).tolist():
                        sel = gg == g
                        arr[rows[idx[sel]], g] |= b[sel]
        return out
