"""Decision rows and their evaluation: what one switch does with many destinations at once.

A :class:`Row` is one switch, a set of its ingress ports that no data-relevant entry tells apart
(an *ingress class*; one port for per-port rows) and the VLAN PCP frames arrive with. It holds
the switch's entries that can apply to it, per table, and builds :class:`~.views.View` objects
per (table, PCP) on demand. :func:`evaluate` runs a :class:`~.views.Destinations` set through
the row's tables (``goto``, ``write_metadata``, PCP push/set/pop regrouped per table) and returns
an :class:`Outcome` per destination: outputs (count, last port, PCP as sent), punt, pipeline
error, the tables reached and, on request, the PORT_STATE entry each destination meets.

:func:`data_flows` turns a switch's flows into plain entries (resubmits inlined) and
:func:`data_relevant` says whether an entry can ever match a data frame (IPv4, tagged or not).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import Any, Iterator, Sequence

import numpy as np

from hpcfabric.rules.flows import (ETH_TYPE_IPV4, OFPP_IN_PORT, TABLE_PORT_STATE, FlowSpec, Match, Output, PopVlan, PushVlan,
                                   SetField)
from hpcfabric.verify.codes import UNTAGGED
from hpcfabric.verify.engine.views import Destinations, Unsupported, View
from hpcfabric.verify.reference.flatten import Unflattenable, inline_resubmits

__all__ = ["Row", "Outcome", "evaluate", "data_flows", "data_relevant", "rewrites_pcp", "entry_key"]


def data_flows(flows: Sequence[FlowSpec]) -> Sequence[FlowSpec]:
    """``flows`` with resubmit chains (switch-local PAUSE reaction) inlined into
    plain entries (:func:`hpcfabric.verify.reference.flatten.inline_resubmits`)."""
    try:
        return inline_resubmits(flows)
    except Unflattenable as why:
        raise Unsupported(str(why)) from None


def data_relevant(f: FlowSpec) -> bool:
    """Can this entry ever match a data frame (IPv4, tagged or not)?"""
    m = f.match
    return m.eth_type is None or m.eth_type == ETH_TYPE_IPV4


def rewrites_pcp(f: FlowSpec) -> bool:
    return any(
        isinstance(a, (PushVlan, PopVlan)) or (isinstance(a, SetField) and a.field == "vlan_pcp") for a in f.actions
    )


MATCH_BUT_IN_PORT = attrgetter(*(x.name for x in fields(Match) if x.name != "in_port"))  # every match field but in_port


def entry_key(f: Any, cache: dict[int, tuple]) -> tuple:
    """What an entry does and matches, ``in_port`` left out (cached by identity in ``cache``)."""
    got = cache.get(id(f))
    if got is None or got[0] is not f:
        key = (f.table, f.priority, MATCH_BUT_IN_PORT(f.match), f.actions, f.goto, f.write_metadata)
        got = cache[id(f)] = (f, key)
    return got[1]


@dataclass
class Row:
    """One switch, a set of its ingress ports that no data-relevant rule tells
    apart, and the VLAN PCP frames arrive with (UNTAGGED: none)."""

    switch: str
    ports: tuple[int, ...]
    src_mac: int | None  # known source (a host port)
    scalar: bool  # source-dependent: decided per frame by the scalar pipeline
    pcp: int = UNTAGGED
    entries: dict[int, list[FlowSpec]] = field(default_factory=dict)
    views: dict[tuple[int, int], View] = field(default_factory=dict)
    attrs: dict = field(default_factory=dict)
    #: decide "output to the ingress port by number" as a drop here, in the views (one fabric port
    #: at a switch whose entries also send back by OFPP_IN_PORT, which the walks cannot tell apart)
    own_port_drops: bool = False

    @property
    def rep(self) -> int:
        return self.ports[0] if self.ports else 0

    @property
    def tables(self) -> dict[int, View]:
        """Views of the tables for frames that keep the arrival PCP (compatibility)."""
        return {t: self.view(t, self.pcp) for t in self.entries}

    def build(self, relevant: list[FlowSpec], cache: dict | None = None) -> "Row":
        by_table: dict[int, list[FlowSpec]] = {}
        for f in relevant:
            m = f.match
            if m.in_port is not None and m.in_port != self.rep:
                continue  # the ports of a class behave alike: the representative's entries stand for all
            if m.eth_src is not None and (self.src_mac is None or self.src_mac & m.eth_src[1] != m.eth_src[0]):
                continue
            by_table.setdefault(f.table, []).append(f)
        for entries in by_table.values():
            entries.sort(key=lambda f: -f.priority)  # stable: ties keep emission order (as Pipeline)
        self.entries = by_table
        self.views = {}
        self.attrs = {} if cache is None else cache
        return self

    def view(self, table: int, pcp: int) -> View | None:
        key = (table, pcp)
        v = self.views.get(key)
        if v is None:
            entries = self.entries.get(table)
            if entries is None:
                return None
            shared = self.attrs.setdefault("views", {})  # rows with the same entries share views
            skey = (pcp, tuple(map(id, entries)))
            if self.own_port_drops or any(
                isinstance(a, Output) and a.port == OFPP_IN_PORT for f in entries for a in f.actions
            ):
                skey += (self.rep, self.own_port_drops)
            got = shared.get(skey)
            if got is None:
                view = View.build(entries, self.rep, pcp, self.attrs, own_port_drops=self.own_port_drops)
                got = shared[skey] = (entries, view)  # keeps ids alive
            v = self.views[key] = got[1]
        return v


@dataclass
class Outcome:
    """Per destination, what one switch did: outputs (count, last port, its PCP),
    punt, pipeline error; tables reached."""

    out_n: np.ndarray
    out_port: np.ndarray
    out_pcp: np.ndarray
    punt: np.ndarray
    err: np.ndarray
    reached: set[int]
    ps_port: np.ndarray | None = None  # port in the metadata of frames entering PORT_STATE (-1: none)


def evaluate(row: Row, dst: Destinations, track: bool = False) -> Outcome:
    """Run every destination of ``dst`` through the tables of ``row`` at once.
    ``track``: record which PORT_STATE entry (port in the metadata) each frame meets."""
    n = dst.n
    res = Outcome(
        np.zeros(n, dtype=np.int16),
        np.zeros(n, dtype=np.int64),
        np.full(n, row.pcp, dtype=np.int8),
        np.zeros(n, dtype=bool),
        np.zeros(n, dtype=bool),
        set(),
        np.full(n, -1, dtype=np.int64) if track else None,
    )
    # pending: table -> parts (destination indices or None = all, metadata or None = 0, PCP: int or array)
    pending: dict[int, list[tuple[np.ndarray | None, np.ndarray | None, Any]]] = {0: [(None, None, row.pcp)]}
    while pending:
        table = min(pending)
        parts = pending.pop(table)
        res.reached.add(table)
        for idx, meta, pcp in _by_pcp(parts, n):
            if res.ps_port is not None and table == TABLE_PORT_STATE:
                port_meta = 0 if meta is None else (meta & np.uint64(0xFFFF)).astype(np.int64)
                if idx is None:
                    res.ps_port[:] = port_meta
                else:
                    res.ps_port[idx] = port_meta
            view = row.view(table, pcp)
            if view is None:
                continue  # table miss for all of them
            w = view.winners(dst, idx, meta)
            k = view.nout[w]
            sel = k > 0
            if sel.any():
                if idx is None:
                    res.out_n += k
                    res.out_port[sel] = view.port[w[sel]]
                    res.out_pcp[sel] = view.out_pcp[w[sel]]
                else:
                    res.out_n[idx] += k
                    res.out_port[idx[sel]] = view.port[w[sel]]
                    res.out_pcp[idx[sel]] = view.out_pcp[w[sel]]
            p = view.punt[w]
            if p.any():
                res.punt[p if idx is None else idx[p]] = True
            e = view.err[w]
            if e.any():
                res.err[e if idx is None else idx[e]] = True
            if not view.targets:
                continue
            g = view.goto[w]
            if view.wm_mask[w].any():
                old = np.zeros(len(w), dtype=np.uint64) if meta is None else meta
                meta = (old & ~view.wm_mask[w]) | view.wm_value[w]
            npcp = view.next_pcp[w]
            for t in view.targets:
                s = (g == t) & ~e
                if not s.any():
                    continue
                sub_pcp = npcp[s]
                pc: Any = int(sub_pcp[0]) if (sub_pcp == sub_pcp[0]).all() else sub_pcp
                if s.all():
                    pending.setdefault(t, []).append((idx, meta, pc))
                else:
                    sub = np.flatnonzero(s) if idx is None else idx[s]
                    pending.setdefault(t, []).append((sub, None if meta is None else meta[s], pc))
    return res


def _by_pcp(parts: list[tuple[Any, Any, Any]], n: int) -> Iterator[tuple[np.ndarray | None, np.ndarray | None, int]]:
    """Regroup the parts entering a table by PCP: (indices, metadata, PCP) per PCP value."""
    if len(parts) == 1 and not isinstance(parts[0][2], np.ndarray):
        yield parts[0]
        return
    scalars = {p for _, _, p in parts if not isinstance(p, np.ndarray)}
    if len(scalars) == 1 and all(not isinstance(p, np.ndarray) for _, _, p in parts):
        yield _concat(parts, n) + (scalars.pop(),)
        return
    idx, meta = _concat(parts, n)
    pcp = np.concatenate([
        np.full(n if i is None else len(i), p, dtype=np.int8) if not isinstance(p, np.ndarray) else p
        for i, _, p in parts
    ])
    for v in np.unique(pcp):
        s = pcp == v
        yield idx[s], None if meta is None else meta[s], int(v)


def _concat(parts: list[tuple[Any, Any, Any]], n: int) -> tuple[np.ndarray | None, np.ndarray | None]:
    if len(parts) == 1:
        return parts[0][0], parts[0][1]
    idx = np.concatenate([np.arange(n) if i is None else i for i, _, _ in parts])
    sizes = [n if i is None else len(i) for i, _, _ in parts]
    if all(m is None for _, m, _ in parts):
        return idx, None
    meta = np.concatenate([np.zeros(s, dtype=np.uint64) if m is None else m for (_, m, _), s in zip(parts, sizes)])
    return idx, meta

