"""Destination classes and decisions of many rows of many switches at once, on :class:`~.flat.FlatTables`.

:class:`MatchClasses`: (switch, destination MAC) pairs that meet exactly the same ``eth_dst`` entries of
every variant of the switch form one class; they decide alike in every row. An entry whose only
condition is ``eth_dst`` *captures* what it matches in its table: the entries below it there are
never met by those destinations, so they do not split them (a Flattened Butterfly's lower-dimension
entries, below the entry of the first differing dimension; nested LPM prefixes). Where ``eth_dst``
entries also match metadata, the *writer rule* (:mod:`.writer`) reads the tables with the metadata values
that can arrive (conditional Flattened Butterflies' paused tables). Computed per mask
with numpy for all switches together (a 64-bit hash of the met values per mask, then checked exactly
against each class's representative).

:func:`decide`: elements (line, class) -- a line is a variant, an ingress port and an arrival
PCP -- run through the tables in order. Per table an element compares only its candidates: the
line's entries without ``eth_dst``/``metadata`` conditions, its class's ``eth_dst`` entries, and
the ``metadata`` entries found by its masked metadata; the first in pipeline order that admits
it wins, and its action effect (per PCP), ``write_metadata`` and ``goto`` apply.
"""

from __future__ import annotations

import numpy as np

from hpcfabric.rules.flows import TABLE_PORT_STATE
from hpcfabric.verify.engine.flat import IN_PORT_MARK, FlatTables, Ragged
from hpcfabric.verify.engine.writer import WriterRule

__all__ = ["MatchClasses", "switch_classes", "decide", "NOWHERE_PORT"]

NOWHERE_PORT = np.iinfo(np.int64).max  # an output that no port takes (to the ingress port by number)
_MUL = np.uint64(0x9E3779B97F4A7C15)
CHUNK = 1 << 19  # elements decided at once
GROUP_PAIRS = 1 << 22  # (group, MAC) pairs classified at once
BLOCK_CELLS = 1 << 26  # (group, masked value) cells of a chunk's presence block
NEVER = np.iinfo(np.int32).max  # the rank of no entry


class MatchClasses:
    """Destination classes of (group, MAC) pairs; a group is a switch, ``variant_group`` maps the
    variants of :class:`FlatTables` to it. The pairs are every group with every MAC of ``targets``
    (given as a product, never materialised) and then ``extra_group`` x ``extra_mac`` one by one.
    Classes are numbered group by group (``class_start[g]`` .. ``class_start[g + 1]``), in order of
    their first pair; ``target_class`` (group x target) and ``extra_class`` are the classes local to
    the group (the smallest integer type that holds them), ``labels`` per class and mask the met
    value id (-1: no entry met with that mask). Computed ``GROUP_PAIRS`` pairs' worth of groups at a
    time: memory is the output plus one chunk, not a few dozen bytes per (switch, target) pair.

    A pair *meets* an entry that matches it unless an entry whose only condition is ``eth_dst``
    matches it earlier in the same table of the same variant (the capture rule, module docstring), or,
    where ``eth_dst`` entries match metadata, as :class:`~.writer.WriterRule` says."""

    def __init__(self, flat: FlatTables, variant_group: np.ndarray, n_groups: int, targets: np.ndarray,
                 extra_group: np.ndarray, extra_mac: np.ndarray) -> None:
        self.flat = flat
        self.variant_group = variant_group
        dst = np.flatnonzero(flat.dst_m != 0)
        self.masks = np.unique(flat.dst_m[dst])
        self.n_groups = n_groups
        nt = len(targets)
        macs, mac_id = np.unique(np.concatenate([np.asarray(targets, dtype=np.uint64),
                                                 np.asarray(extra_mac, dtype=np.uint64)]), return_inverse=True)
        mac_id = mac_id.reshape(-1)
        target_id, extra_id = mac_id[:nt], mac_id[nt:]
        # where an entry sits: its variant's slot within the group and its table, one column each
        v_order = np.argsort(variant_group, kind="stable")
        slot = np.empty(len(variant_group), dtype=np.int64)
        firsts = np.searchsorted(variant_group[v_order], variant_group[v_order])
        slot[v_order] = np.arange(len(v_order)) - firsts
        tables = np.unique(flat.table[dst])
        where = slot[flat.v[dst]] * max(len(tables), 1) + np.searchsorted(tables, flat.table[dst])
        self._width = max(int(where.max(initial=0)) + 1, 1)
        only = (flat.in_port[dst] < 0) & (flat.vlan_pcp[dst] < 0) & (flat.vid_m[dst] == 0) & (flat.meta_m[dst] == 0)
        self.values: list[np.ndarray] = []  # per mask: sorted distinct masked MACs
        self._u: list[np.ndarray] = []  # per mask: value id of each distinct MAC
        self._present: list[np.ndarray | tuple[np.ndarray, np.ndarray, int]] = []  # per mask: (group, value) -> key
        self._entry = (dst, np.full(len(dst), -1, dtype=np.int64), np.full(len(dst), -1, dtype=np.int64))
        first_rank, capture_rank = [], []  # per key (group, mask, value): best rank per column, any / capturing
        ekey = np.full(flat.n, -1, dtype=np.int64)  # per entry of flat: its key
        n_keys = 0
        for mi, m in enumerate(self.masks.tolist()):
            masked = macs & np.uint64(m)
            vals = np.unique(masked)
            self.values.append(vals)
            self._u.append(np.searchsorted(vals, masked))
            sel = np.flatnonzero(flat.dst_m[dst] == np.uint64(m))
            ev = flat.dst_v[dst][sel]
            pos = np.minimum(np.searchsorted(vals, ev), len(vals) - 1)
            hit = vals[pos] == ev
            sel, pos = sel[hit], pos[hit]
            self._entry[1][sel] = mi
            self._entry[2][sel] = pos
            gv = variant_group[flat.v[dst][sel]] * len(vals) + pos
            keys, key_of = np.unique(gv, return_inverse=True)
            key_of = key_of.reshape(-1)
            ekey[dst[sel]] = n_keys + key_of
            best = np.full((len(keys), self._width), NEVER, dtype=np.int32)
            np.minimum.at(best, (key_of, where[sel]), flat.rank[dst][sel].astype(np.int32))
            first_rank.append(best)
            best = np.full((len(keys), self._width), NEVER, dtype=np.int32)
            o = only[sel]
            np.minimum.at(best, (key_of[o], where[sel][o]), flat.rank[dst][sel][o].astype(np.int32))
            capture_rank.append(best)
            if n_groups * len(vals) <= BLOCK_CELLS // 4:  # dense: (group, value) -> key id (int32)
                table = np.full((n_groups, len(vals)), -1, dtype=np.int32)
                table.reshape(-1)[keys] = n_keys + np.arange(len(keys))
                self._present.append(table)
            else:
                self._present.append((keys, n_keys + np.arange(len(keys), dtype=np.int64), len(vals)))
            n_keys += len(keys)
        self._first_rank = np.concatenate(first_rank) if first_rank else np.zeros((0, self._width), np.int32)
        self._capture = np.concatenate(capture_rank) if capture_rank else np.zeros((0, self._width), np.int32)
        self._writer = WriterRule.build(flat, variant_group, n_groups, ekey, n_keys)
        extra_group = np.asarray(extra_group, dtype=np.int64)
        order = np.argsort(extra_group, kind="stable")
        extra_at = np.searchsorted(extra_group[order], np.arange(n_groups + 1))
        self.target_class = np.zeros((n_groups, nt), dtype=np.int16)
        self.extra_class = np.zeros(len(extra_group), dtype=np.int64)
        counts, labels = np.zeros(n_groups, dtype=np.int64), []
        widest = max([p[2] for p in self._present if not isinstance(p, np.ndarray)] + [1])
        step = max(1, min(GROUP_PAIRS // max(nt, 1), BLOCK_CELLS // 4 // widest))  # sparse masks: int32 blocks per chunk
        for g0 in range(0, n_groups, step):
            g1 = min(n_groups, g0 + step)
            ex = order[extra_at[g0]:extra_at[g1]]
            group = np.concatenate([np.repeat(np.arange(g0, g1, dtype=np.int64), nt), extra_group[ex]])
            ids = np.concatenate([np.tile(target_id, g1 - g0), extra_id[ex]])
            local, lab, cnt = self._classify(group, ids, g0, g1)
            if local.max(initial=0) > np.iinfo(self.target_class.dtype).max:
                self.target_class = self.target_class.astype(np.int32)
            self.target_class[g0:g1] = local[:(g1 - g0) * nt].reshape(g1 - g0, nt)
            self.extra_class[ex] = local[(g1 - g0) * nt:]
            counts[g0:g1] = cnt
            labels.append(lab)
        self.class_start = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.class_group = np.repeat(np.arange(n_groups, dtype=np.int64), counts)
        self.labels = np.concatenate(labels) if labels else np.zeros((0, len(self.masks)), dtype=np.int32)

    def _classify(self, group: np.ndarray, mac_id: np.ndarray, g0: int, g1: int
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Classes of the pairs of groups ``g0`` .. ``g1``: (class local to its group per pair, labels per
        class, classes per group), classes numbered group by group in order of their first pair."""
        keys = [self._key(mi, group, mac_id) for mi in range(len(self.masks))]
        w = self._writer
        if w is not None:  # the writer rule, once per distinct (group signature, key signatures)
            rep, inv = _distinct(w.gsig[group], [np.where(k >= 0, w.ksig[np.maximum(k, 0)], -1) for k in keys])
            met = w.met(group[rep], [k[rep] for k in keys])[inv]
            for mi, k in enumerate(keys):
                k[~met[:, mi]] = -1
            del met, inv
        else:
            self._captured(keys)
        labs = [np.where(k >= 0, self._u[mi][mac_id], -1).astype(np.int32)  # value ids < 2^31
                for mi, k in enumerate(keys)]
        first, inv = _distinct(group, labs)  # first pair of each class
        order = np.lexsort((first, group[first]))
        renum = np.empty(len(order), dtype=np.int64)
        renum[order] = np.arange(len(order))
        pair_class = renum[inv]
        cnt = np.bincount(group[first[order]] - g0, minlength=g1 - g0)
        start = np.concatenate([[0], np.cumsum(cnt)])
        labels = np.stack([lab[first[order]] for lab in labs], axis=1) if labs else \
            np.zeros((len(order), 0), dtype=np.int32)
        return pair_class - start[group - g0], labels.astype(np.int32), cnt

    def _captured(self, keys: list[np.ndarray]) -> None:
        """Unmet keys to -1, in place: a key is met when one of its entries comes no later, in its variant's
        table, than the first entry whose only condition is ``eth_dst`` that matches the pair (only pairs
        matched under two masks or more can have such an entry above another)."""
        if len(keys) < 2:
            return
        multi = np.flatnonzero(np.sum([k >= 0 for k in keys], axis=0) >= 2)
        if not len(multi):
            return
        cap = np.full((len(multi), self._width), NEVER, dtype=np.int32)
        for key in keys:
            k = key[multi]
            at = np.flatnonzero(k >= 0)
            cap[at] = np.minimum(cap[at], self._capture[k[at]])
        for key in keys:
            k = key[multi]
            at = np.flatnonzero(k >= 0)
            met = (self._first_rank[k[at]] <= cap[at]).any(axis=1)
            key[multi[at[~met]]] = -1

    def _key(self, mi: int, group: np.ndarray, mac_id: np.ndarray) -> np.ndarray:
        """Per pair: the key of the (group, masked value) its group has entries for under mask ``mi``, else -1."""
        u = self._u[mi][mac_id]
        present = self._present[mi]
        if isinstance(present, np.ndarray):
            return present[group, u].astype(np.int64)
        keys, ids, width = present  # sparse: a dense block for this chunk's groups
        g0, g1 = (int(group.min()), int(group.max()) + 1) if len(group) else (0, 0)
        lo, hi = np.searchsorted(keys, [g0 * width, g1 * width])
        block = np.full((max(g1 - g0, 0), width), -1, dtype=np.int32)
        block.reshape(-1)[keys[lo:hi] - g0 * width] = ids[lo:hi]
        return block[group - g0, u].astype(np.int64) if len(group) else np.zeros(0, dtype=np.int64)

    @property
    def n_classes(self) -> int:
        return len(self.class_group)

    def candidates(self) -> tuple[np.ndarray, Ragged]:
        """(first variant-class id per variant, ``eth_dst`` candidates per (variant-class, table), padded when indexed):
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
        del rows
        item = np.concatenate(items) if items else np.zeros(0, dtype=np.int64)
        del items
        order = np.lexsort((item, row))  # by row, pipeline order within a row
        return start, Ragged(row[order], item[order], n_vk * flat.n_tables, ordered=True)


def switch_classes(variants: list[list], macs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Destination classes of one switch whose entry lists are ``variants`` (installed, paused):
    :class:`MatchClasses` of ``macs`` there, as (class per MAC, first MAC of each class)."""
    flat = FlatTables(variants)
    mc = MatchClasses(flat, np.zeros(len(variants), dtype=np.int64), 1, macs, np.zeros(0, dtype=np.int64),
                      np.zeros(0, dtype=np.uint64))
    cls = mc.target_class[0].astype(np.int64)
    return cls, np.unique(cls, return_index=True)[1]  # classes are numbered by their first MAC


def _distinct(group: np.ndarray, cols: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(a representative per distinct (group, columns...) row, each row's index into them): by a 64-bit hash,
    then checked exactly against the representative."""
    h = group.astype(np.uint64) * _MUL
    with np.errstate(over="ignore"):
        for c in cols:
            h = h * _MUL + (c + 1).astype(np.uint64)
    _, rep, inv = np.unique(h, return_index=True, return_inverse=True)
    inv = inv.reshape(-1)
    ok = group[rep][inv] == group
    for c in cols:
        ok &= c[rep][inv] == c
    if not ok.all():  # pragma: no cover - a 64-bit hash collision
        raise AssertionError("destination class hash collision; report this fabric")
    return rep, inv


def decide(
    flat: FlatTables,
    wild: np.ndarray,
    dstc: Ragged,
    line_v: np.ndarray,
    line_in: np.ndarray,
    line_pcp: np.ndarray,
    line_own_drop: np.ndarray,
    el_line: np.ndarray,
    el_vk: np.ndarray,
    trace: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(outputs, last output port, its PCP, punt, pipeline error) per element (line, variant-class).

    ``wild``: :meth:`FlatTables.wild_index` of the lines; ``dstc``: :meth:`MatchClasses.candidates`'
    matrix; ``line_own_drop``: an output to the line's port by number goes nowhere (the switch also
    sends back by OFPP_IN_PORT, so the walk cannot tell). Ports are ``NOWHERE_PORT`` for such outputs.
    ``trace`` (``n_tables + n`` int64, filled in place): per table whether an element entered it, then
    per element the port in its metadata on entering PORT_STATE (-1: never entered).
    """
    n = len(el_line)
    out = (np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64), line_pcp[el_line].astype(np.int64),
           np.zeros(n, dtype=bool), np.zeros(n, dtype=bool))
    T = flat.n_tables
    for c0 in range(0, n, CHUNK):
        sl = slice(c0, min(n, c0 + CHUNK))
        res = _decide_chunk(flat, wild, dstc, line_v, line_in, line_pcp, line_own_drop, el_line[sl], el_vk[sl],
                            None if trace is None else (trace[:T], trace[T + sl.start:T + sl.stop]))
        for o, r in zip(out, res):
            o[sl] = r
    return out


def _decide_chunk(flat: FlatTables, wild: np.ndarray, dstc: Ragged, line_v: np.ndarray, line_in: np.ndarray,
                  line_pcp: np.ndarray, line_own_drop: np.ndarray, el_line: np.ndarray,
                  el_vk: np.ndarray, trace: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, ...]:
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
        if trace is not None:
            trace[0][t] = 1
            if t == TABLE_PORT_STATE:
                trace[1][i] = (meta[i] & np.uint64(0xFFFF)).astype(np.int64)
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
