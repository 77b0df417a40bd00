"""Flow tables of many switches as flat arrays: the engine's batch path.

:class:`FlatTables` reads the data-relevant entries of many *variants* (a switch's entries as
installed, or with every PORT_STATE entry paused) once and keeps them as columns, sorted by
variant, table and pipeline order (priority, then emission: the order of the reference pipeline).
What an entry's actions do to a frame of each VLAN PCP comes from :func:`action_effect`, once per
distinct action list. :mod:`.batch` decides many (variant, ingress port, arrival PCP, destination)
elements at once on these arrays: the engine's one evaluator (:func:`~.rows.evaluate` runs one
row through it), cross-checked against the reference pipeline (``tests/test_verify.py``).

Candidate lists (padded index matrices, -1 = none) narrow what each element must compare:

* :meth:`FlatTables.wild_index`: per (line, table) the entries with no ``eth_dst`` and no
  ``metadata`` condition whose ``in_port`` allows the line's port;
* :meth:`FlatTables.meta_index`: entries with a ``metadata`` but no ``eth_dst`` condition, looked
  up by (variant, table, mask, masked value);
* entries with an ``eth_dst`` condition come per destination class (:mod:`.batch`).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from hpcfabric.rules.flows import OFPP_CONTROLLER, OFPP_IN_PORT, OFPVID_PRESENT, Output, PopVlan, PushVlan, SetField
from hpcfabric.verify.codes import PCP_SLOTS, UNTAGGED

__all__ = ["FlatTables", "Ragged", "padded_groups", "IN_PORT_MARK", "Unsupported", "action_effect"]

IN_PORT_MARK = -2  # effect port: OFPP_IN_PORT (the element's ingress port)


class Unsupported(Exception):
    """The vectorised engine cannot model this fabric's rules (reason in args[0])."""


def action_effect(actions: tuple, pcp: int) -> tuple[int, int, int, int, int, int]:
    """What the ``actions`` of an entry do to a frame arriving with VLAN PCP ``pcp`` (UNTAGGED: none):
    (outputs other than the controller, last output port, punt, PCP at that output,
    PCP afterwards, error). An error (``set_field`` vlan_pcp or ``pop_vlan`` on an
    untagged frame) makes the reference pipeline raise: the frame is dropped."""
    nout = port = punt = 0
    out_pcp = pcp
    for a in actions:
        if isinstance(a, Output):
            if a.port == OFPP_CONTROLLER:
                punt = 1
            else:
                nout += 1
                port = a.port
                out_pcp = pcp
        elif isinstance(a, SetField):
            if a.field != "vlan_pcp":  # pragma: no cover - rejected when the engine is built
                raise Unsupported(f"set_field on {a.field}")
            if pcp == UNTAGGED:
                return nout, port, punt, out_pcp, pcp, 1
            pcp = a.value
        elif isinstance(a, PushVlan):
            pcp = 0 if pcp == UNTAGGED else pcp
        elif isinstance(a, PopVlan):
            if pcp == UNTAGGED:
                return nout, port, punt, out_pcp, pcp, 1
            pcp = UNTAGGED
        else:
            raise Unsupported(f"action {a!r}")
    return nout, port, punt, out_pcp, pcp, 0


def padded_groups(group: np.ndarray, item: np.ndarray, n_groups: int) -> np.ndarray:
    """Items by group as a padded matrix (``-1`` = none), rows in group order, items in the order given
    (``group`` need not be sorted; a stable sort keeps the items' order within a group)."""
    order = np.argsort(group, kind="stable")
    g, it = group[order], item[order]
    counts = np.bincount(g, minlength=n_groups) if len(g) else np.zeros(n_groups, dtype=np.int64)
    width = int(counts.max(initial=0))
    out = np.full((n_groups, max(width, 1)), -1, dtype=np.int64)
    if len(g):
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        col = np.arange(len(g)) - starts[g]
        out[g, col] = it
    return out


class Ragged:
    """Items by group, stored flat (offsets + items); indexing with group ids gives the padded matrix
    of just those groups (``-1`` = none), as :func:`padded_groups` would: memory is the items, not
    groups x the widest group (300k Dragonfly candidates: 16.8 M rows x 18)."""

    def __init__(self, group: np.ndarray, item: np.ndarray, n_groups: int, ordered: bool = False) -> None:
        counts = np.bincount(group, minlength=n_groups) if len(group) else np.zeros(n_groups, dtype=np.int64)
        self.start = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.items = (item if ordered else item[np.argsort(group, kind="stable")]).astype(np.int64, copy=False)

    def __getitem__(self, rows: np.ndarray) -> np.ndarray:
        lo, n = self.start[rows], self.start[rows + 1] - self.start[rows]
        width = max(int(n.max(initial=0)), 1)
        col = np.arange(width)
        at = lo[:, None] + col
        return np.where(col < n[:, None], self.items[np.minimum(at, max(len(self.items) - 1, 0))], -1) \
            if len(self.items) else np.full((len(rows), 1), -1, dtype=np.int64)


class FlatTables:
    """The entries of ``flow_lists`` (one list of data-relevant entries per variant) as columns.

    Per entry ``e`` (sorted by variant, table, pipeline order): ``v``, ``table``, ``rank`` (position
    in its (variant, table) block), ``in_port`` / ``vlan_pcp`` (-1: any), ``vid_v``/``vid_m``,
    ``dst_v``/``dst_m``, ``meta_v``/``meta_m`` (mask 0: no condition), ``goto`` (-1: none),
    ``wm_v``/``wm_m`` (write_metadata), ``act`` (action list id). Per action list and PCP slot
    (PCP + 1): ``nout``, ``port`` (``IN_PORT_MARK`` for OFPP_IN_PORT), ``punt``, ``out_pcp``,
    ``next_pcp``, ``err``.
    """

    def __init__(self, flow_lists: Sequence[Sequence[Any]]) -> None:
        uid: dict[int, int] = {}
        uniq: list[Any] = []
        index: list[int] = []
        variant: list[int] = []
        for v, flows in enumerate(flow_lists):
            for f in flows:
                i = uid.get(id(f))  # every list is alive while we read: ids are unique
                if i is None:
                    i = uid[id(f)] = len(uniq)
                    uniq.append(f)
                index.append(i)
            variant.extend([v] * len(flows))
        acts: dict[tuple, int] = {}
        ints, wide = [], []
        for f in uniq:
            m = f.match
            a = acts.setdefault(f.actions, len(acts))
            vid = m.vlan_vid or (0, 0)
            ints.append((f.table, f.priority, -1 if m.in_port is None else m.in_port,
                         -1 if m.vlan_pcp is None else m.vlan_pcp, vid[0], vid[1],
                         -1 if f.goto is None else f.goto, a))
            dst = m.eth_dst or (0, 0)
            meta = m.metadata or (0, 0)
            wm = (f.write_metadata[0] & f.write_metadata[1], f.write_metadata[1]) if f.write_metadata else (0, 0)
            wide.append((dst[0], dst[1], meta[0], meta[1], wm[0], wm[1]))
        n_flat = len(index)
        iu = np.array(ints, dtype=np.int64).reshape(-1, 8)
        wu = np.array(wide, dtype=np.uint64).reshape(-1, 6)
        idx = np.array(index, dtype=np.int64)
        var = np.array(variant, dtype=np.int64)
        emitted = np.arange(n_flat)
        order = np.lexsort((emitted, -iu[idx, 1], iu[idx, 0], var))
        idx, var = idx[order], var[order]
        I, W = iu[idx], wu[idx]
        self.n = n_flat
        self.n_variants = len(flow_lists)
        self.v = var
        self.table = I[:, 0]
        self.in_port, self.vlan_pcp = I[:, 2], I[:, 3]
        self.vid_v, self.vid_m = I[:, 4], I[:, 5]
        self.goto, self.act = I[:, 6], I[:, 7]
        self.dst_v, self.dst_m, self.meta_v, self.meta_m, self.wm_v, self.wm_m = (W[:, k] for k in range(6))
        self.n_tables = int(max(self.table.max(initial=-1), self.goto.max(initial=-1))) + 1 or 1  # goto targets too
        block = self.v * self.n_tables + self.table
        self.block_start = np.searchsorted(block, np.arange(self.n_variants * self.n_tables + 1))
        self.rank = np.arange(n_flat) - self.block_start[block]
        self._effects(list(acts))
        self._meta: tuple | None = None

    def _effects(self, acts: list[tuple]) -> None:
        shape = (max(len(acts), 1), PCP_SLOTS)
        cols = [np.zeros(shape, dtype=np.int64) for _ in range(6)]
        for a, actions in enumerate(acts):
            for slot in range(PCP_SLOTS):
                eff = list(action_effect(actions, slot - 1))
                if eff[1] == OFPP_IN_PORT:
                    eff[1] = IN_PORT_MARK
                for col, x in zip(cols, eff):
                    col[a, slot] = x
        self.nout, self.port, self.punt, self.out_pcp, self.next_pcp, self.err = cols

    # -- candidate lists ----------------------------------------------------
    def wild_index(self, line_v: np.ndarray, line_in: np.ndarray) -> np.ndarray:
        """Per (line, table) -- row ``line * n_tables + table`` -- the entries without ``eth_dst`` and
        ``metadata`` conditions that a frame arriving on the line's port can meet, in pipeline order."""
        wild = np.flatnonzero((self.dst_m == 0) & (self.meta_m == 0))
        by_v = np.searchsorted(self.v[wild], np.arange(self.n_variants + 1))
        lo, hi = by_v[line_v], by_v[line_v + 1]
        counts = hi - lo
        line = np.repeat(np.arange(len(line_v)), counts)
        pos = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts) + np.repeat(lo, counts)
        e = wild[pos]
        ok = (self.in_port[e] < 0) | (self.in_port[e] == line_in[line])
        line, e = line[ok], e[ok]
        return padded_groups(line * self.n_tables + self.table[e], e, len(line_v) * self.n_tables)

    def meta_index(self) -> tuple[np.ndarray, np.ndarray, list[tuple[int, np.ndarray]], np.ndarray]:
        """Entries with a ``metadata`` but no ``eth_dst`` condition, for lookups by masked metadata:
        (sorted keys, entries in key order, per mask id (mask, sorted distinct values), per block
        the mask ids in use as a bit set). Key: ``(block * n_masks + mask id) * n_values + value id``."""
        if self._meta is None:
            sel = np.flatnonzero((self.dst_m == 0) & (self.meta_m != 0))
            masks, mid = np.unique(self.meta_m[sel], return_inverse=True)
            mid = mid.reshape(-1)
            values = [np.unique(self.meta_v[sel][mid == i]) for i in range(len(masks))]
            nval = max([len(x) for x in values] + [1])
            vid = np.zeros(len(sel), dtype=np.int64)
            for i, vals in enumerate(values):
                s = mid == i
                vid[s] = np.searchsorted(vals, self.meta_v[sel][s])
            block = self.v[sel] * self.n_tables + self.table[sel]
            key = (block * max(len(masks), 1) + mid) * nval + vid
            order = np.argsort(key, kind="stable")  # entries keep pipeline order within a key
            used = np.zeros(self.n_variants * self.n_tables, dtype=np.int64)
            np.bitwise_or.at(used, block, (1 << mid).astype(np.int64))
            self._meta = (key[order], sel[order], [(int(m), v) for m, v in zip(masks.tolist(), values)], used)
        return self._meta

    # -- conditions -----------------------------------------------------------
    def admits(self, e: np.ndarray, in_port: np.ndarray, pcp: np.ndarray, meta: np.ndarray) -> np.ndarray:
        """Do entries ``e`` (-1: none) match frames with these ingress ports, PCPs and metadata
        (``eth_dst`` is the caller's business)? All arrays broadcast together."""
        ok = e >= 0
        e = np.where(ok, e, 0)
        ip, vp = self.in_port[e], self.vlan_pcp[e]
        fv = np.where(pcp >= 0, OFPVID_PRESENT, 0)
        ok &= (ip < 0) | (ip == in_port)
        ok &= (vp < 0) | (vp == pcp)
        ok &= (fv & self.vid_m[e]) == self.vid_v[e]
        ok &= (meta & self.meta_m[e]) == self.meta_v[e]
        return ok

    def first(self, cand: np.ndarray, ok: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per row of ``cand`` (padded entries, pipeline order) the first admitted entry and its rank
        (-1 and a rank past every block where none is)."""
        hit = ok.any(axis=1)
        col = ok.argmax(axis=1)
        e = np.where(hit, cand[np.arange(len(cand)), col], -1)
        rank = np.where(hit, self.rank[np.where(hit, e, 0)], np.iinfo(np.int64).max)
        return e, rank
