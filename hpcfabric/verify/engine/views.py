"""Destination sets and table views: the vectorised lookup of one table for many destinations.

:class:`Destinations` holds destination MACs with, per ``eth_dst`` mask, the sorted unique
masked values (shared by every view that looks them up). :class:`View` is one flow table as
one decision row sees it (entries that can match the row's ingress port and arrival PCP, in
the pipeline's order) turned into arrays: :meth:`View.winners` gives the winning entry per
destination (and metadata) with ``searchsorted``, and the arrays give what the winner does
(outputs, punt, goto, write_metadata, the PCP after its actions, pipeline errors).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hpcfabric.rules.flows import OFPP_CONTROLLER, OFPP_IN_PORT, FlowSpec, Output, PopVlan, PushVlan, SetField, vlan_vid_matches
from hpcfabric.verify.codes import NOWHERE, UNTAGGED

__all__ = ["Unsupported", "Destinations", "View", "flow_attrs", "action_effect"]


class Unsupported(Exception):
    """The vectorised engine cannot model this fabric's rules (reason in args[0])."""


class Destinations:
    """A destination set: MACs and, per ``eth_dst`` mask, the sorted unique masked
    values, each destination's position among them, and the destinations grouped
    by value (``order[starts[u]:starts[u+1]]`` have masked value ``uniq[u]``)."""

    def __init__(self, macs: np.ndarray) -> None:
        self.macs = macs.astype(np.uint64)
        self.n = len(macs)
        self._index: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}

    def index(self, mask: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        got = self._index.get(mask)
        if got is None:
            uniq, inv = np.unique(self.macs & np.uint64(mask), return_inverse=True)
            inv = inv.astype(np.intp).reshape(-1)
            order = np.argsort(inv, kind="stable")
            starts = np.searchsorted(inv[order], np.arange(len(uniq) + 1))
            got = self._index[mask] = (uniq, inv, order, starts)
        return got


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


@dataclass
class View:
    """One table of one row for frames entering it with one VLAN PCP: its
    statically matching entries in priority order, as arrays (index
    ``len(entries)`` stands for the table miss)."""

    entries: list[FlowSpec]
    nout: np.ndarray  # outputs other than the controller
    port: np.ndarray  # the output port when nout == 1 (IN_PORT resolved)
    punt: np.ndarray
    goto: np.ndarray  # -1: none
    wm_value: np.ndarray  # write_metadata (0/0 when none: metadata unchanged)
    wm_mask: np.ndarray
    out_pcp: np.ndarray  # PCP of the frame as output
    next_pcp: np.ndarray  # PCP after the actions (for the next table)
    err: np.ndarray  # the actions cannot apply to this frame (pipeline error: drop)
    const: int  # best entry matching everything (no eth_dst/metadata condition)
    by_dst: list[tuple[int, np.ndarray, np.ndarray]]  # eth_dst mask, values, ranks
    by_meta: list[tuple[int, np.ndarray, np.ndarray]]  # metadata mask, sorted unique values, best ranks
    by_both: list[tuple[int, int, int, int, int]]  # dst value, dst mask, meta value, meta mask, rank
    targets: tuple[int, ...]  # tables the entries go to

    @property
    def miss(self) -> int:
        return len(self.entries)

    @classmethod
    def build(
        cls, entries: list[FlowSpec], in_port: int, pcp: int = UNTAGGED, cache: dict | None = None,
        own_port_drops: bool = False,
    ) -> "View":
        """``own_port_drops``: an output to ``in_port`` by number goes nowhere (a port beyond the
        switch's: dead), as on a switch; only for rows of that one ingress port."""
        cache = {} if cache is None else cache
        tag = None if pcp == UNTAGGED else pcp
        entries = [f for f in entries if (f.match.vlan_pcp is None or f.match.vlan_pcp == pcp)
                   and vlan_vid_matches(f.match.vlan_vid, tag)]
        n = len(entries)
        cols: list[list[int]] = [[], [], [], [], [], [], [], [], []]
        const = n
        dsts: dict[int, dict[int, int]] = {}
        metas: dict[int, dict[int, int]] = {}
        both = []
        for i, f in enumerate(entries):
            key = (id(f), pcp)
            a = cache.get(key)
            if a is None or a[0] is not f:
                a = cache[key] = (f, *flow_attrs(f), *action_effect(f.actions, pcp))
            _, goto, wmv, wmm, dv, dm, mv, mm, nout, port, punt, opcp, npcp, err = a
            if own_port_drops and port == in_port:
                port = NOWHERE
            row = (nout, in_port if port == OFPP_IN_PORT else port, punt, goto, wmv, wmm, opcp, npcp, err)
            for col, x in zip(cols, row):
                col.append(x)
            if dm == 0 and mm == 0:
                if const == n:
                    const = i
            elif mm == 0:
                dsts.setdefault(dm, {}).setdefault(dv, i)  # first (best) entry per value
            elif dm == 0:
                metas.setdefault(mm, {}).setdefault(mv, i)  # first (best) entry per value
            else:
                both.append((dv, dm, mv, mm, i))
        miss = (0, 0, 0, -1, 0, 0, pcp, pcp, 0)
        for col, x in zip(cols, miss):
            col.append(x)
        by_dst = [
            (m, np.fromiter(best.keys(), np.uint64, len(best)), np.fromiter(best.values(), np.int32, len(best)))
            for m, best in dsts.items()
        ]
        by_meta = []
        for m, best in metas.items():
            vals = sorted(best)
            by_meta.append((m, np.array(vals, dtype=np.uint64), np.array([best[v] for v in vals], dtype=np.int32)))
        targets = tuple(sorted({f.goto for f in entries if f.goto is not None}))
        return cls(
            entries,
            np.array(cols[0], dtype=np.int16),
            np.array(cols[1], dtype=np.int64),
            np.array(cols[2], dtype=bool),
            np.array(cols[3], dtype=np.int64),
            np.array(cols[4], dtype=np.uint64),
            np.array(cols[5], dtype=np.uint64),
            np.array(cols[6], dtype=np.int8),
            np.array(cols[7], dtype=np.int8),
            np.array(cols[8], dtype=bool),
            const,
            by_dst,
            by_meta,
            both,
            targets,
        )

    def winners(self, dst: Destinations, idx: np.ndarray | None, meta: np.ndarray | None) -> np.ndarray:
        """Index of the winning entry per element (``miss`` when none matches);
        ``idx`` selects destinations (None: all), ``meta`` their metadata (None: all 0)."""
        n = dst.n
        best = np.full(n, self.const, dtype=np.int32)
        for mask, values, ranks in self.by_dst:
            uniq, inv, order, starts = dst.index(mask)
            if not len(uniq):
                continue
            pos = np.minimum(np.searchsorted(uniq, values), len(uniq) - 1)
            hit = uniq[pos] == values
            if not hit.any():
                continue
            p, r = pos[hit], ranks[hit]  # values are unique per mask, so p is too
            lens = starts[p + 1] - starts[p]
            total = int(lens.sum())
            if total * 4 > n:  # dense: one gather over every destination
                cand = np.full(len(uniq), self.miss, dtype=np.int32)
                cand[p] = r
                np.minimum(best, cand[inv], out=best)
            else:  # sparse: touch only the destinations under the hit values
                ends = np.cumsum(lens)
                el = order[np.repeat(starts[p] - ends + lens, lens) + np.arange(total)]
                best[el] = np.minimum(best[el], np.repeat(r, lens))
        if idx is not None:
            best = best[idx]
        for mask, values, ranks in self.by_meta:
            if meta is None:
                if values[0] == 0:  # sorted: a 0 value, if any, comes first
                    np.minimum(best, ranks[0], out=best)
                continue
            key = meta & np.uint64(mask)
            pos = np.minimum(np.searchsorted(values, key), len(values) - 1)
            np.minimum(best, np.where(values[pos] == key, ranks[pos], self.miss), out=best)
        if self.by_both:
            macs = dst.macs if idx is None else dst.macs[idx]
            for dv, dm, mv, mm, rank in self.by_both:
                hit = macs & np.uint64(dm) == np.uint64(dv)
                if meta is None:
                    hit &= mv == 0
                else:
                    hit &= meta & np.uint64(mm) == np.uint64(mv)
                best[hit & (best > rank)] = rank
        return best


def flow_attrs(f: FlowSpec) -> tuple[int, ...]:
    """What the engine needs of an entry besides its actions: (goto (-1: none), wm value, wm mask, dst value, dst mask, meta value, meta mask)."""
    wmv, wmm = (f.write_metadata[0] & f.write_metadata[1], f.write_metadata[1]) if f.write_metadata else (0, 0)
    dv, dm = f.match.eth_dst if f.match.eth_dst is not None else (0, 0)
    mv, mm = f.match.metadata if f.match.metadata is not None else (0, 0)
    return -1 if f.goto is None else f.goto, wmv, wmm, dv, dm, mv, mm

