"""Decision rows and their evaluation: what one switch does with many destinations at once.

A :class:`Row` is one switch, a set of its ingress ports that no data-relevant entry tells apart
(an *ingress class*; one port for per-port rows) and the VLAN PCP frames arrive with. It holds
the switch's entries that can apply to it, per table. :func:`evaluate` runs a :class:`Destinations`
set through the row's tables on the engine's one evaluator (:class:`~.flat.FlatTables` of the row's
entries, :class:`~.batch.MatchClasses` of the destinations, :func:`~.batch.decide` per class) and
returns an :class:`Outcome` per destination: outputs (count, last port, PCP as sent), punt,
pipeline error, the tables reached and, on request, the PORT_STATE entry each destination meets.

:func:`data_flows` turns a switch's flows into plain entries (resubmits inlined) and
:func:`data_relevant` says whether an entry can ever match a data frame (IPv4, tagged or not).
For the checks that take one switch at a time (the up/down proof, the union proof's choices):
:func:`forward_data_flows` -- per switch, the entries a data frame can meet, refusing what such a check does
not model -- and :func:`port_classes` -- ingress ports whose ``in_port`` entries are equal but for the port.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import Any, Sequence

import numpy as np

from hpcfabric.rules.flows import ETH_TYPE_IPV4, OFPP_IN_PORT, FlowSpec, Match, Output, PopVlan, PushVlan, SetField
from hpcfabric.topology.model import Fabric
from hpcfabric.verify.codes import UNTAGGED
from hpcfabric.verify.engine.batch import MatchClasses, decide
from hpcfabric.verify.engine.flat import FlatTables, Unsupported
from hpcfabric.verify.reference.flatten import Unflattenable, inline_resubmits
from hpcfabric.verify.reference.pipeline import describe_flow

__all__ = ["Row", "Outcome", "Destinations", "evaluate", "evaluate_rows", "data_flows", "data_relevant", "rewrites_pcp", "entry_key",
           "forward_data_flows", "port_classes"]

_NONE = np.zeros(0, dtype=np.int64)
FLAT_CACHE = 256  # flat tables kept per engine (rows' attrs) before the cache starts over


class Destinations:
    """A destination set: MACs, and per evaluated :class:`~.flat.FlatTables` the destination classes and
    their ``eth_dst`` candidates (:class:`~.batch.MatchClasses`), computed once for every row using them."""

    def __init__(self, macs: np.ndarray) -> None:
        self.macs = macs.astype(np.uint64)
        self.n = len(macs)
        self._classes: dict[int, tuple] = {}

    def classes(self, flat: FlatTables, variant_group: np.ndarray, n_groups: int) -> tuple[Any, ...]:
        """(class per (group, destination), first class per group, first variant-class per variant, candidates)."""
        got = self._classes.get(id(flat))
        if got is None or got[0] is not flat:
            mc = MatchClasses(flat, variant_group, n_groups, self.macs, _NONE, np.zeros(0, dtype=np.uint64))
            got = self._classes[id(flat)] = (flat, mc.target_class, mc.class_start, *mc.candidates())
        return got[1:]


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
    attrs: dict = field(default_factory=dict)  # shared by the rows of an engine: their entries' flat tables (_flat)
    #: decide "output to the ingress port by number" as a drop here (one fabric port at a switch whose
    #: entries also send back by OFPP_IN_PORT, which the walks cannot tell apart)
    own_port_drops: bool = False

    @property
    def rep(self) -> int:
        return self.ports[0] if self.ports else 0

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
        self.attrs = {} if cache is None else cache
        return self

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
    """Run every destination of ``dst`` through the tables of ``row`` at once (:func:`evaluate_rows`)."""
    return evaluate_rows([row], dst, track)[0]


def evaluate_rows(rows: Sequence[Row], dst: Destinations, track: bool = False) -> list[Outcome]:
    """Run every destination of ``dst`` through the tables of each of ``rows``, all in one :func:`~.batch.decide`
    (one element per row and destination class). ``track``: record which PORT_STATE entry (port in the
    metadata) each frame meets. ``reached`` (tables any frame entered) is that of all the rows together."""
    n = dst.n
    flat, variant_group, line_v, line_g = _flat(rows)
    if not n or not flat.n:
        return [Outcome(np.zeros(n, dtype=np.int16), np.zeros(n, dtype=np.int64), np.full(n, row.pcp, dtype=np.int8),
                        np.zeros(n, dtype=bool), np.zeros(n, dtype=bool), {0},
                        np.full(n, -1, dtype=np.int64) if track else None) for row in rows]
    target_class, class_start, vk_start, dstc = dst.classes(flat, variant_group, int(variant_group.max()) + 1)
    size = class_start[line_g + 1] - class_start[line_g]
    el_off = np.concatenate([[0], np.cumsum(size)])
    el_line = np.repeat(np.arange(len(rows)), size)
    el_vk = np.arange(int(el_off[-1])) - el_off[el_line] + vk_start[line_v][el_line]
    line_in = np.array([row.rep for row in rows], dtype=np.int64)
    T = flat.n_tables
    trace = np.full(T + len(el_line), -1, dtype=np.int64)
    trace[:T] = 0
    out_n, port, pcp, punt, err = decide(flat, flat.wild_index(line_v, line_in), dstc, line_v, line_in,
                                         np.array([row.pcp for row in rows], dtype=np.int64),
                                         np.array([row.own_port_drops for row in rows]), el_line, el_vk, trace)
    reached = {0} | set(np.flatnonzero(trace[:T]).tolist())
    ps = trace[T:]
    res = []
    for r in range(len(rows)):
        at = el_off[r] + target_class[line_g[r]].astype(np.int64)
        res.append(Outcome(out_n[at].astype(np.int16), port[at], pcp[at].astype(np.int8), punt[at], err[at], reached,
                           ps[at] if track else None))
    return res


def _flat(rows: Sequence[Row]) -> tuple[FlatTables, np.ndarray, np.ndarray, np.ndarray]:
    """The rows' distinct entry sets as variants of one :class:`~.flat.FlatTables` (cached in the rows' ``attrs``),
    a group per switch: (flat tables, group per variant, variant per row, group per row)."""
    variants: dict[tuple, int] = {}
    groups: dict[str, int] = {}
    line_v = np.array([variants.setdefault((row.switch,) + tuple(map(id, row.entries.values())), len(variants))
                       for row in rows], dtype=np.int64)
    line_g = np.array([groups.setdefault(row.switch, len(groups)) for row in rows], dtype=np.int64)
    cache = rows[0].attrs
    key = ("flat",) + tuple(variants)
    got = cache.get(key)
    if got is None:
        if len(cache) > FLAT_CACHE:
            cache.clear()
        lists = {v: list(row.entries.values()) for v, row in zip(line_v.tolist(), rows)}
        vg = np.zeros(len(variants), dtype=np.int64)
        vg[line_v] = line_g
        flat = FlatTables([[f for lst in lists[v] for f in lst] for v in range(len(variants))])
        got = cache[key] = (lists, flat, vg)  # the lists keep the ids alive
    return got[1], got[2], line_v, line_g


def port_classes(fabric: Fabric, switch: str, relevant: list[Any], cache: dict) -> dict[int, int]:
    """Ports whose ``in_port`` entries are equal but for the port share a class."""
    ports = sorted(fabric.ports(switch))
    if any(isinstance(a, Output) and a.port == OFPP_IN_PORT for f in relevant for a in f.actions):
        return {p: i for i, p in enumerate(ports)}
    named: dict[int, list[tuple]] = {}
    for f in relevant:
        if f.match.in_port is not None:
            named.setdefault(f.match.in_port, []).append(entry_key(f, cache))
    sigs: dict[tuple, int] = {}
    out = {}
    for p in ports:
        sig = (fabric.peer(switch, p).is_host, tuple(named.get(p, ())))  # type: ignore[union-attr]
        out[p] = sigs.setdefault(sig, len(sigs))
    return out


def forward_data_flows(compiled: Any, method: str, error: type[Exception] = ValueError, *,
                       actions: bool = False, only: Any = None) -> dict[str, list[Any]]:
    """Per switch, the entries a data frame can meet (resubmits inlined); raises ``error``
    for what the per-switch checks do not model: an entry going back to an earlier
    table, source-dependent (``eth_src``) rules, and, with ``actions``, actions other than
    outputs and VLAN push/pop/PCP (MAC rewrites, groups: resolve them first). ``only``: those switches."""
    out: dict[str, list[Any]] = {}
    for sw in compiled.fabric.switches:
        if only is not None and sw.name not in only:
            continue
        try:
            flows = data_flows(compiled.tables[sw.name].flows)
        except Unsupported as why:
            raise error(f"{sw.name}: {method} cannot model these rules: {why}") from None
        for f in flows:
            if f.goto is not None and f.goto <= f.table:
                raise error(f"{sw.name}: an entry goes back to table {f.goto}; {method} needs a forward pipeline")
            if f.match.eth_src is not None and data_relevant(f):
                raise error(f"{sw.name}: {method} does not model source-dependent (eth_src) rules")
        out[sw.name] = [f for f in flows if data_relevant(f)]
        if actions:
            for f in out[sw.name]:
                for a in f.actions:
                    if isinstance(a, SetField) and a.field != "vlan_pcp" or not isinstance(a, (Output, SetField, PushVlan, PopVlan)):
                        raise error(f"{sw.name}: {method} does not model the action {a!r} of {describe_flow(f)} "
                                    "(entries that rewrite data frames or use groups)")
    return out
