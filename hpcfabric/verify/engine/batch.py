"""Destination classes and decisions of many rows of many switches at once, on :class:`~.flat.FlatTables`.

:class:`MatchClasses`: (switch, destination MAC) pairs that match exactly the same ``eth_dst``
entries of every variant of the switch form one class; they meet the same entries in every row
and so decide alike. Computed per mask with numpy for all switches together (a 64-bit hash of
the matched values per mask, then checked exactly against each class's representative).

:func:`decide`: elements (line, class) -- a line is a variant, an ingress port and an arrival
PCP -- run through the tables in order. Per table an element compares only its candidates: the
line's entries without ``eth_dst``/``metadata`` conditions, its class's ``eth_dst`` entries, and
the ``metadata`` entries found by its masked metadata; the first in pipeline order that admits
it wins, and its action effect (per PCP), ``write_metadata`` and ``goto`` apply, as
:func:`~.rows.evaluate` does row by row.
"""

from __future__ import annotations

import numpy as np

from hpcfabric.verify.engine.flat import IN_PORT_MARK, FlatTables, padded_groups

__all__ = ["MatchClasses", "decide", "NOWHERE_PORT"]

NOWHERE_PORT = np.iinfo(np.int64).max  # an output that no port takes (to the ingress port by number)
_MUL = np.uint64(0x9E3779B97F4A7C15)
CHUNK = 1 << 19  # elements decided at once


class MatchClasses:
    """Destination classes of (group, MAC) pairs; a group is a switch, ``variant_group`` maps the
    variants of :class:`FlatTables` to it. Classes are numbered group by group
    (``class_start[g]`` .. ``class_start[g + 1]``); ``pair_class`` per pair, ``class_pair`` the
    representative pair of each class, ``labels`` per class and mask the matched value id (-1: none)."""

    def __init__(self, flat: FlatTables, variant_group: np.ndarray, n_groups: int, pair_group: np.ndarray,
                 pair_mac: np.ndarray) -> None:
        self.flat = flat
        self.variant_group = variant_group
        dst = np.flatnonzero(flat.dst_m != 0)
        self.masks = np.unique(flat.dst_m[dst])
        self.n_groups = n_groups
        macs, mac_id = np.unique(pair_mac.astype(np.uint64), return_inverse=True)
        mac_id = mac_id.reshape(-1)
        self.values: list[np.ndarray] = []  # per mask: sorted distinct masked MACs
        self._u: list[np.ndarray] = []  # per mask: value id of each distinct MAC
        self._present: list[np.ndarray | tuple[np.ndarray, int]] = []  # per mask: which group has which value
        self._entry = (dst, np.full(len(dst), -1, dtype=np.int64), np.full(len(dst), -1, dtype=np.int64))
        for mi, m in enumerate(self.masks.tolist()):
            masked = macs & np.uint64(m)
            vals = np.unique(masked)
            self.values.append(vals)
            self._u.append(np.searchsorted(vals, masked))
            sel = np.flatnonzero(flat.dst_m[dst] == np.uint64(m))
            ev = flat.dst_v[dst][sel]
            pos = np.minimum(np.searchsorted(vals, ev), len(vals) - 1)
            hit = vals[pos] == ev
            self._entry[1][sel[hit]] = mi
            self._entry[2][sel[hit]] = pos[hit]
            g = variant_group[flat.v[dst][sel][hit]]
            if n_groups * len(vals) <= 1 << 26:  # dense: one byte per (group, value)
                table = np.zeros((n_groups, len(vals)), dtype=bool)
                table[g, pos[hit]] = True
                self._present.append(table)
            else:
                self._present.append((np.unique(g * len(vals) + pos[hit]), len(vals)))
        h = pair_group.astype(np.uint64) * _MUL
        labs = []  # per mask: the label of every pair (kept for the exact check below)
        with np.errstate(over="ignore"):
            for mi in range(len(self.masks)):
                labs.append(self._label(mi, pair_group, mac_id))
                h = h * _MUL + (labs[-1] + 1).astype(np.uint64)
        _, first, inv = np.unique(h, return_index=True, return_inverse=True)
        inv = inv.reshape(-1)
        # number classes group by group, by first pair
        order = np.lexsort((first, pair_group[first]))
        renum = np.empty(len(order), dtype=np.int64)
        renum[order] = np.arange(len(order))
        self.pair_class = renum[inv]
        self.class_pair = first[order]
        self.class_group = pair_group[self.class_pair]
        self.class_start = np.searchsorted(self.class_group, np.arange(n_groups + 1))
        rep = self.class_pair[self.pair_class]
        ok = pair_group[rep] == pair_group
        self.labels = np.empty((len(order), len(self.masks)), dtype=np.int64)
        for mi in range(len(self.masks)):
            lab = labs[mi]
            ok &= lab == lab[rep]
            self.labels[:, mi] = lab[self.class_pair]
        if not ok.all():  # pragma: no cover - a 64-bit hash collision inside one switch
            raise AssertionError("destination class hash collision; report this fabric")

    def _label(self, mi: int, group: np.ndarray, mac_id: np.ndarray) -> np.ndarray:
        """Per pair: the id of its MAC's masked value if some entry of its group matches it, else -1."""
        u = self._u[mi][mac_id]
        present = self._present[mi]
        if isinstance(present, np.ndarray):
            hit = present[group, u]
        else:
            key, width = present
            q = group * width + u
            at = np.minimum(np.searchsorted(key, q), max(len(key) - 1, 0))
            hit = key[at] == q if len(key) else np.zeros(len(q), dtype=bool)
        return np.where(hit, u, -1).astype(np.int32)  # value ids < 2^31

    @property
    def n_classes(self) -> int:
        return len(self.class_pair)

    def candidates(self) -> tuple[np.ndarray, np.ndarray]:
        """(first variant-class id per variant, padded ``eth_dst`` candidates per (variant-class, table)):
        variant ``v`` and class ``k`` of its group is variant-class ``vk = start[v] + k - class_start[g]``;
        row ``vk * n_tables + table`` lists the entries of ``v`` whose ``eth_dst`` matches class ``k``."""
        flat = self.flat
        g = self.variant_group
        size = self.class_start[g + 1] - self.class_start[g]
        start = np.concatenate([[0], np.cumsum(size)])
        n_vk = int(start[-1])
        vk_v = np.repeat(np.arange(len(g)), size)
        vk_k = np.arange(n_vk) - start[vk_v] + self.class_start[g][vk_v]
        dst, mid, pos = self._entry
        keep = mid >= 0
        dst, mid, pos = dst[keep], mid[keep], pos[keep]
        n_m = max(len(self.masks), 1)
        width = max([len(v) for v in self.values] + [1])
        ekey = (flat.v[dst] * n_m + mid) * width + pos
        order = np.argsort(ekey, kind="stable")
        ekey, dst = ekey[order], dst[order]
        rows, items = [], []
        for mi in range(len(self.masks)):
            lab = self.labels[vk_k, mi]
            q = np.flatnonzero(lab >= 0)
            qk = (vk_v[q] * n_m + mi) * width + lab[q]
            lo, hi = np.searchsorted(ekey, qk, "left"), np.searchsorted(ekey, qk, "right")
            cnt = hi - lo
            if not cnt.sum():
                continue
            idx = np.repeat(lo - np.cumsum(cnt) + cnt, cnt) + np.arange(int(cnt.sum()))
            e = dst[idx]
            rows.append(np.repeat(q, cnt) * flat.n_tables + flat.table[e])
            items.append(e)
        row = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
        item = np.concatenate(items) if items else np.zeros(0, dtype=np.int64)
        order = np.argsort(item, kind="stable")  # pipeline order within a row
        return start, padded_groups(row[order], item[order], n_vk * flat.n_tables)


def decide(
    flat: FlatTables,
    wild: np.ndarray,
    dstc: np.ndarray,
    line_v: np.ndarray,
    line_in: np.ndarray,
    line_pcp: np.ndarray,
    line_own_drop: np.ndarray,
    el_line: np.ndarray,
    el_vk: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(outputs, last output port, its PCP, punt, pipeline error) per element (line, variant-class).

    ``wild``: :meth:`FlatTables.wild_index` of the lines; ``dstc``: :meth:`MatchClasses.candidates`'
    matrix; ``line_own_drop``: an output to the line's port by number goes nowhere (the switch also
    sends back by OFPP_IN_PORT, so the walk cannot tell). Ports are ``NOWHERE_PORT`` for such outputs.
    """
    n = len(el_line)
    out = (np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64), line_pcp[el_line].astype(np.int64),
           np.zeros(n, dtype=bool), np.zeros(n, dtype=bool))
    for c0 in range(0, n, CHUNK):
        sl = slice(c0, min(n, c0 + CHUNK))
        res = _decide_chunk(flat, wild, dstc, line_v, line_in, line_pcp, line_own_drop, el_line[sl], el_vk[sl])
        for o, r in zip(out, res):
            o[sl] = r
    return out


def _decide_chunk(flat: FlatTables, wild: np.ndarray, dstc: np.ndarray, line_v: np.ndarray, line_in: np.ndarray,
                  line_pcp: np.ndarray, line_own_drop: np.ndarray, el_line: np.ndarray,
                  el_vk: np.ndarray) -> tuple[np.ndarray, ...]:
    n = len(el_line)
    T = flat.n_tables
    out_n = np.zeros(n, dtype=np.int64)
    out_port = np.zeros(n, dtype=np.int64)
    pcp = line_pcp[el_line].astype(np.int64)
    out_pcp = pcp.copy()
    punt = np.zeros(n, dtype=bool)
    err = np.zeros(n, dtype=bool)
    meta = np.zeros(n, dtype=np.uint64)
    cur = np.zeros(n, dtype=np.int64)  # table; -1: done
    mkeys, mentries, mmasks, mused = flat.meta_index()
    n_mm = max(len(mmasks), 1)
    nval = max([len(v) for _, v in mmasks] + [1])
    for t in range(T):
        i = np.flatnonzero(cur == t)
        if not len(i):
            continue
        ln = el_line[i]
        ip, pc, me = line_in[ln][:, None], pcp[i][:, None], meta[i][:, None]
        best = np.full(len(i), -1, dtype=np.int64)
        best_rank = np.full(len(i), np.iinfo(np.int64).max, dtype=np.int64)
        sources = [wild[ln * T + t], dstc[el_vk[i] * T + t]]
        block = line_v[ln] * T + t
        for mi, (mask, vals) in enumerate(mmasks):
            use = (mused[block] >> mi) & 1 == 1
            if not use.any():
                continue
            x = meta[i] & np.uint64(mask)
            pos = np.minimum(np.searchsorted(vals, x), len(vals) - 1)
            key = (block * n_mm + mi) * nval + pos
            lo = np.searchsorted(mkeys, key, "left")
            hi = np.where(use & (vals[pos] == x), np.searchsorted(mkeys, key, "right"), lo)
            width = int((hi - lo).max(initial=0))
            if width:
                col = lo[:, None] + np.arange(width)
                sources.append(np.where(col < hi[:, None], mentries[np.minimum(col, len(mentries) - 1)], -1))
        for cand in sources:
            e, r = flat.first(cand, flat.admits(cand, ip, pc, me))
            better = r < best_rank
            best[better], best_rank[better] = e[better], r[better]
        hit = best >= 0
        cur[i[~hit]] = -1  # table miss: processing ends
        i, e, ln = i[hit], best[hit], ln[hit]
        a, slot = flat.act[e], pcp[i] + 1
        k = flat.nout[a, slot]
        raw = flat.port[a, slot]
        port = np.where(line_own_drop[ln] & (raw == line_in[ln]), NOWHERE_PORT, raw)
        port = np.where(port == IN_PORT_MARK, line_in[ln], port)
        sel = k > 0
        out_n[i] += k
        out_port[i[sel]] = port[sel]
        out_pcp[i[sel]] = flat.out_pcp[a, slot][sel]
        punt[i] |= flat.punt[a, slot] > 0
        bad = flat.err[a, slot] > 0
        err[i] |= bad
        pcp[i] = flat.next_pcp[a, slot]
        meta[i] = (meta[i] & ~flat.wm_m[e]) | flat.wm_v[e]
        cur[i] = np.where(bad, -1, flat.goto[e])
    return out_n, out_port, out_pcp, punt, err
