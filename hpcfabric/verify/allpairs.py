"""All-pairs forwarding verifier for compiled fabrics (fast, vectorised).

What is checked
---------------
Every host ``s`` sends a data frame (``eth_type`` 0x0800, untagged, ``eth_src``
= its planned MAC, ``in_port`` = its switch port) to every other host ``d``
(``eth_dst`` = the planned MAC of ``d``); self-pairs are excluded, so an
all-pairs run checks ``H*(H-1)`` pairs. The frame walks switch to switch
through ``compiled.tables`` exactly as :mod:`hpcfabric.verify.pipeline` (the scalar
OpenFlow reference) would forward it; an egress port leads, via
``Fabric.peer``, to the next switch (and its ingress port) or to a host.
Outcomes per pair:

``delivered``     reaches ``d``. ``hops`` = switches traversed, the source's
                  and the destination's switch included (two hosts on one
                  switch: 1; ``hops - 1`` links between switches). Minimal
                  routing: Dragonfly <= 4 (local-global-local), a
                  k-dimensional Flattened Butterfly <= k+1, a 3-level
                  fat-tree <= 5 (edge-agg-core-agg-edge)
``misdelivered``  reaches another host
``dropped``       a switch outputs nothing (table miss or drop entry), or
                  outputs to a port with nothing behind it
``loops``         traverses more than ``hop_bound`` = switches + 1 switches
                  (a revisited switch with an identical frame is a cycle and
                  counts as a loop at once)
``punted``        a switch sends it to the controller
``floods``        a switch outputs it more than once

Invalid probes: the first host of every access switch also sends frames to
addresses nobody owns -- for each address field, a real address with that
field set to a value no host uses under the same higher fields (smallest and
largest such value, from two base addresses), a bit just above the used
address bits, and the multicast and globally-administered flag bits. Each
must be dropped (outputs to nowhere count as drops), never delivered,
looped, punted or flooded.

How it is fast
--------------
Forwarding of a data frame at a switch depends only on the ingress port, the
VLAN PCP it arrives with (classes of service, :mod:`hpcfabric.rules.compiler`) and
the destination address (rules matching ``eth_src`` are resolved statically
on host ports, where the source is known). So:

1. per switch, ingress ports that no data-relevant rule tells apart form one
   ingress class; a *row* is an ingress class and an arrival PCP (or
   untagged). Rows for tagged arrivals are created when some row first
   outputs a frame with that PCP towards that port. Rules with an
   ``eth_type`` other than IPv4 never match a data frame and are ignored;
   rules matching ``vlan_pcp`` apply to frames carrying that PCP. A port
   named by ``in_port`` rules only in tables that no frame reaches from the
   other ports (checked over every destination and probe, e.g. per-host
   Valiant rules in ALTERNATIVE while no port is paused) joins the others;
   ports whose ``in_port`` entries are equal but for the port (the CoS push
   on host ports, the PCP steps on fabric ports) share a class;
2. for every row, the decision over all destinations is computed with numpy:
   per table and PCP, entries are bucketed by ``eth_dst`` mask (and by
   ``metadata`` mask), the masked destinations are looked up in each bucket
   (``searchsorted`` against the unique masked destinations, shared by all
   switches) and the highest-priority hit wins (ties: the earlier entry, as
   in the pipeline); ``goto``/``write_metadata``/outputs are followed
   vectorised, and so are PCP rewrites (``push_vlan``, ``set_field``
   vlan_pcp, ``pop_vlan``: each entry's effect is a function of the PCP it
   sees, so elements are regrouped by PCP at every table). The decision is
   stored as the *next state*: the next row (the peer switch's row for the
   egress port and the PCP as sent), a delivered host, or
   drop/punt/flood/tagged -- an ``int32`` matrix ``rows x destinations``
   (136 MB for the paper's Table III Dragonfly untagged; destinations are
   processed in chunks when it would exceed ~256 MB);
3. sources whose first-hop rows are identical form one class; each class
   walks all destinations at once by fancy indexing into the matrix, and its
   counts are multiplied by the class size (self-pairs subtracted).

A frame that reaches a host still VLAN-tagged counts as ``tagged`` (not
delivered): hosts send and receive untagged frames.

Fallbacks: rules matching ``eth_src`` that can see frames from other
switches make the decision source-dependent; those rows are evaluated per
frame by the scalar pipeline during the walk (sources are then not grouped;
not combined with PCP rewrites). Rules that rewrite MAC addresses
(``set_field`` on eth_src/eth_dst) break the "frame unchanged along the
path" premise: the whole run then uses the scalar reference walk.
``coverage`` and ``engine`` in the report say what was done.

Paused ports: ``verify(compiled, paused=[(switch, port), ...])`` flips those
PORT_STATE entries first (:func:`apply_paused`), as the controller does on a
PAUSE; with switch-local PAUSE reaction (``compiled.pause_reaction ==
"switch"``) a port is paused by adding the override its PAUSE makes the
switch learn (:func:`hpcfabric.rules.compiler.learned_override_flow`). The
vectorised engine models ``resubmit`` chains by inlining them per entry
(:func:`hpcfabric.verify.pipeline.inline_resubmits`; the scalar reference runs them
literally). The channel dependency graph over every single paused port is
:mod:`hpcfabric.verify.cdg`.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np

from hpcfabric.rules.addressing import MAC_BITS, USABLE_BITS, format_mac, from_mac, to_mac
from hpcfabric.rules.flows import (
    ETH_TYPE_IPV4,
    OFPP_CONTROLLER,
    OFPP_IN_PORT,
    TABLE_PORT_STATE,
    FlowSpec,
    Match,
    Output,
    PopVlan,
    PushVlan,
    SetField,
    vlan_vid_matches,
)
from hpcfabric.verify.pipeline import Frame, Pipeline, PipelineError, Unflattenable, check_overlaps, describe_flow, inline_resubmits

__all__ = ["Report", "Walk", "verify", "walk_pair", "pair_outcomes", "probe_addresses", "apply_paused", "apply_down"]

# Next-state codes (>= 0: next row of the decision matrix).
DROP = -1  # no output: table miss or drop entry
PUNT = -2  # sent to the controller
FLOOD = -3  # more than one output
DEAD = -4  # output to a port with nothing behind it
SCALAR = -5  # matrix only: decide this row with the scalar pipeline
LOOP = -6  # walk only: hop bound exceeded / cycle
SINK = -7  # matrix only: the row where finished walks park
TAGGED = -8  # reached a host still carrying a VLAN tag
DELIVER = -16  # delivered to host id h: DELIVER - h
NOWHERE = 2**31 - 2  # views only: an output that no port takes (to the ingress port by number)
NEW_ROW = 2**31 - 1  # engine only: egress (port, PCP) whose row does not exist yet (never a final code)

UNTAGGED = -1  # VLAN PCP of an untagged frame (engine rows)
PCP_SLOTS = 9  # untagged + PCP 0..7

MAX_FAILURES = 20
MATRIX_BYTES = 256 << 20  # decision-matrix budget per destination chunk
PER_PORT_AUTO_PORTS = 4096  # verify(): one row per fabric ingress port up to this many fabric ports
BATCH_ELEMENTS = 1 << 20  # (source, destination) elements walked at once

KINDS = ("delivered", "misdelivered", "dropped", "loop", "punted", "flood", "tagged")


def _kind(code: int, dst_hid: int | None) -> str:
    if code <= DELIVER:
        return "delivered" if dst_hid is not None and DELIVER - code == dst_hid else "misdelivered"
    if code in (DROP, DEAD):
        return "dropped"
    if code == PUNT:
        return "punted"
    if code == FLOOD:
        return "flood"
    if code == LOOP:
        return "loop"
    if code == TAGGED:
        return "tagged"
    raise AssertionError(f"unexpected code {code}")  # pragma: no cover


# ---------------------------------------------------------------------------
# report


@dataclass(frozen=True)
class Report:
    """Outcome of one verification run (``as_dict`` is JSON-ready)."""

    fabric: str
    mode: str
    switches: int
    hosts: int
    pairs: int
    delivered: int
    misdelivered: int
    dropped: int
    loops: int
    punted: int
    floods: int
    max_hops: int
    mean_hops: float
    hop_histogram: Mapping[int, int]
    invalid_probes: int
    invalid_probe_failures: int
    failures: tuple[dict[str, Any], ...]
    seconds: float
    coverage: str
    engine: str
    hop_bound: int
    overlaps: int = 0
    overlap_examples: tuple[str, ...] = ()
    probe_addresses: tuple[str, ...] = field(default=())
    tagged: int = 0
    paused: tuple[str, ...] = ()
    ingress_exact: bool = True  # a frame sent back out of its ingress port counts as dropped (as on a switch)

    @property
    def ok(self) -> bool:
        """Every pair delivered, every invalid probe dropped, no equal-priority overlap."""
        return self.delivered == self.pairs and self.invalid_probe_failures == 0 and self.overlaps == 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "fabric": self.fabric,
            "mode": self.mode,
            "ok": self.ok,
            "switches": self.switches,
            "hosts": self.hosts,
            "pairs": self.pairs,
            "delivered": self.delivered,
            "misdelivered": self.misdelivered,
            "dropped": self.dropped,
            "loops": self.loops,
            "punted": self.punted,
            "floods": self.floods,
            "tagged": self.tagged,
            "max_hops": self.max_hops,
            "mean_hops": self.mean_hops,
            "hop_histogram": {str(k): v for k, v in sorted(self.hop_histogram.items())},
            "hop_bound": self.hop_bound,
            "invalid_probes": self.invalid_probes,
            "invalid_probe_failures": self.invalid_probe_failures,
            "probe_addresses": list(self.probe_addresses),
            "overlaps": self.overlaps,
            "overlap_examples": list(self.overlap_examples),
            "failures": [dict(f) for f in self.failures],
            "seconds": round(self.seconds, 3),
            "coverage": self.coverage,
            "engine": self.engine,
            "ingress_exact": self.ingress_exact,
            "paused": list(self.paused),
        }


# ---------------------------------------------------------------------------
# scalar reference walk


@dataclass(frozen=True)
class Walk:
    """One frame's journey: ``code`` (see module constants), switches visited, why it stopped."""

    code: int
    host: str | None
    path: tuple[str, ...]
    reason: str

    @property
    def hops(self) -> int:
        return len(self.path)


class _Pipelines(dict):
    """switch name -> Pipeline, built on first use."""

    def __init__(self, compiled: Any) -> None:
        super().__init__()
        self.compiled = compiled

    def __missing__(self, switch: str) -> Pipeline:
        pipe = Pipeline(self.compiled.tables[switch].flows)
        self[switch] = pipe
        return pipe


def walk_pair(
    compiled: Any,
    src: str,
    dst_mac: int,
    *,
    pipelines: Mapping[str, Pipeline] | None = None,
    bound: int | None = None,
) -> Walk:
    """Walk one data frame from host ``src`` to ``dst_mac`` with the scalar pipeline."""
    fabric = compiled.fabric
    pipes = pipelines if pipelines is not None else _Pipelines(compiled)
    bound = bound if bound is not None else len(fabric.switches) + 1
    host = fabric.host(src)
    switch = host.switch
    frame = Frame(in_port=host.port, eth_src=compiled.plan.host_mac[src], eth_dst=dst_mac)
    path: list[str] = []
    seen: set[tuple[str, Frame]] = set()
    while True:
        if len(path) >= bound:
            return Walk(LOOP, None, tuple(path), f"loop: exceeded the hop bound of {bound} switches")
        state = (switch, frame)
        if state in seen:
            return Walk(LOOP, None, tuple(path + [switch]), f"loop: {switch} revisited on port {frame.in_port}")
        seen.add(state)
        path.append(switch)
        try:
            res = pipes[switch].process(frame)
        except PipelineError as err:
            return Walk(DROP, None, tuple(path), f"dropped at {switch}: pipeline error: {err}")
        if res.punted:
            return Walk(PUNT, None, tuple(path), f"punted to the controller by {switch} ({_hit(res)})")
        if len(res.outputs) + len(res.to_ingress) > 1:  # several outputs: a flood, whatever reaches the wire
            ports = sorted(res.ports + res.to_ingress)
            return Walk(FLOOD, None, tuple(path), f"flooded by {switch} to ports {ports} ({_hit(res)})")
        if not res.outputs:
            if res.to_ingress and len(path) == 1:  # back to the source host: misdelivered, as the fast engine says
                hid = _host_ids(compiled)[src]
                return Walk(DELIVER - hid, src, tuple(path), f"sent back to its source {src} by {switch} port "
                            f"{res.to_ingress[0]} ({_hit(res)}; a switch drops it: sending back needs OFPP_IN_PORT)")
            if res.to_ingress:
                why = (f"output to its ingress port {res.to_ingress[0]} ({_hit(res)}), which a switch drops "
                       "(sending back needs OFPP_IN_PORT)")
            elif res.miss_table is not None:
                why = f"table miss in table {res.miss_table}"
            elif res.hits[-1].priority == 0 and res.hits[-1].match == Match():
                why = f"table-miss entry of table {res.hits[-1].table} (no route for this address)"
            else:
                why = f"drop entry {_hit(res)}"
            return Walk(DROP, None, tuple(path), f"dropped at {switch}: {why}")
        port, sent = res.outputs[0]
        peer = fabric.peer(switch, port)
        if peer is None:
            return Walk(DEAD, None, tuple(path), f"dropped at {switch}: output to port {port}, which leads nowhere")
        if peer.is_host:
            if sent.vlan_pcp is not None:
                return Walk(
                    TAGGED, peer.node, tuple(path),
                    f"reached {peer.node} by {switch} port {port} still VLAN-tagged (PCP {sent.vlan_pcp})",
                )
            hid = _host_ids(compiled)[peer.node]
            return Walk(DELIVER - hid, peer.node, tuple(path), f"delivered to {peer.node} by {switch} port {port}")
        switch = peer.node
        frame = replace(sent, in_port=peer.port, metadata=0)


def _hit(res: Any) -> str:
    return describe_flow(res.hits[-1]) if res.hits else "no entry"


_HOST_IDS: dict[int, tuple[Any, dict[str, int]]] = {}


def _host_ids(compiled: Any) -> dict[str, int]:
    fabric = compiled.fabric
    cached = _HOST_IDS.get(id(fabric))
    if cached is None or cached[0] is not fabric:
        cached = (fabric, {h.name: i for i, h in enumerate(fabric.hosts)})
        _HOST_IDS.clear()
        _HOST_IDS[id(fabric)] = cached
    return cached[1]


# ---------------------------------------------------------------------------
# invalid probe addresses


def probe_addresses(plan: Any) -> list[tuple[int, str]]:
    """Addresses nobody owns, as (MAC, why): see the module docstring."""
    layout = plan.layout
    hosts = [h.name for h in plan.fabric.hosts]
    if not hosts:
        return []
    bases = list(dict.fromkeys([hosts[0], hosts[-1]]))
    fields = plan.host_fields
    owned = plan.host_mac
    out: dict[int, str] = {}
    names = layout.names
    for i, f in enumerate(layout.fields):
        used: dict[tuple[int, ...], set[int]] = {}
        for h in hosts:
            used.setdefault(tuple(fields[h][n] for n in names[:i]), set()).add(fields[h][f.name])
        top = (1 << f.width) - 1
        for base in bases:
            pre = tuple(fields[base][n] for n in names[:i])
            taken = used.get(pre, set())
            free = [v for v in (_first_free(taken, 0, 1, top), _first_free(taken, top, -1, top)) if v is not None]
            for v in dict.fromkeys(free):
                mac = layout.encode({**fields[base], f.name: v})
                where = ", ".join(f"{n}={x}" for n, x in zip(names[:i], pre)) or "any"
                out.setdefault(mac, f"{f.name}={v} (unused under {where})")
    base_mac = owned[hosts[0]]
    used_bits = layout.used_bits
    if used_bits < USABLE_BITS:
        out.setdefault(to_mac(from_mac(base_mac) | (1 << used_bits)), f"bit {used_bits} set above the {used_bits} address bits")
    out.setdefault(base_mac | (1 << (MAC_BITS - 8)), "multicast (I/G) bit set")
    out.setdefault(base_mac & ~(1 << (MAC_BITS - 7)), "globally administered (U/L bit clear)")
    by_mac = set(owned.values())
    return [(mac, why) for mac, why in out.items() if mac not in by_mac]


def _first_free(taken: set[int], start: int, step: int, top: int) -> int | None:
    v = start
    while 0 <= v <= top:
        if v not in taken:
            return v
        v += step
    return None


# ---------------------------------------------------------------------------
# fast engine


class _Unsupported(Exception):
    """The vectorised engine cannot model this fabric's rules (reason in args[0])."""


class _Dst:
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


def _effect(f: FlowSpec, pcp: int) -> tuple[int, int, int, int, int, int]:
    """What ``f``'s actions do to a frame arriving with VLAN PCP ``pcp`` (UNTAGGED: none):
    (outputs other than the controller, last output port, punt, PCP at that output,
    PCP afterwards, error). An error (``set_field`` vlan_pcp or ``pop_vlan`` on an
    untagged frame) makes the reference pipeline raise: the frame is dropped."""
    nout = port = punt = 0
    out_pcp = pcp
    for a in f.actions:
        if isinstance(a, Output):
            if a.port == OFPP_CONTROLLER:
                punt = 1
            else:
                nout += 1
                port = a.port
                out_pcp = pcp
        elif isinstance(a, SetField):
            if a.field != "vlan_pcp":  # pragma: no cover - rejected when the engine is built
                raise _Unsupported(f"set_field on {a.field}")
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
            raise _Unsupported(f"action {a!r}")
    return nout, port, punt, out_pcp, pcp, 0


@dataclass
class _View:
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
    ) -> "_View":
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
                a = cache[key] = (f, *_flow_attrs(f), *_effect(f, pcp))
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

    def winners(self, dst: _Dst, idx: np.ndarray | None, meta: np.ndarray | None) -> np.ndarray:
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


def _flow_attrs(f: FlowSpec) -> tuple[int, ...]:
    """(goto, wm value, wm mask, dst value, dst mask, meta value, meta mask)."""
    wmv, wmm = (f.write_metadata[0] & f.write_metadata[1], f.write_metadata[1]) if f.write_metadata else (0, 0)
    dv, dm = f.match.eth_dst if f.match.eth_dst is not None else (0, 0)
    mv, mm = f.match.metadata if f.match.metadata is not None else (0, 0)
    return -1 if f.goto is None else f.goto, wmv, wmm, dv, dm, mv, mm


def data_flows(flows: Sequence[FlowSpec]) -> Sequence[FlowSpec]:
    """``flows`` with resubmit chains (switch-local PAUSE reaction) inlined into
    plain entries (:func:`hpcfabric.verify.pipeline.inline_resubmits`)."""
    try:
        return inline_resubmits(flows)
    except Unflattenable as why:
        raise _Unsupported(str(why)) from None


def _relevant(f: FlowSpec) -> bool:
    """Can this entry ever match a data frame (IPv4, tagged or not)?"""
    m = f.match
    return m.eth_type is None or m.eth_type == ETH_TYPE_IPV4


def _rewrites_pcp(f: FlowSpec) -> bool:
    return any(
        isinstance(a, (PushVlan, PopVlan)) or (isinstance(a, SetField) and a.field == "vlan_pcp") for a in f.actions
    )


@dataclass
class _Row:
    """One switch, a set of its ingress ports that no data-relevant rule tells
    apart, and the VLAN PCP frames arrive with (UNTAGGED: none)."""

    switch: str
    ports: tuple[int, ...]
    src_mac: int | None  # known source (a host port)
    scalar: bool  # source-dependent: decided per frame by the scalar pipeline
    pcp: int = UNTAGGED
    entries: dict[int, list[FlowSpec]] = field(default_factory=dict)
    views: dict[tuple[int, int], _View] = field(default_factory=dict)
    attrs: dict = field(default_factory=dict)
    #: decide "output to the ingress port by number" as a drop here, in the views (one fabric port
    #: at a switch whose entries also send back by OFPP_IN_PORT, which the walks cannot tell apart)
    own_port_drops: bool = False

    @property
    def rep(self) -> int:
        return self.ports[0] if self.ports else 0

    @property
    def tables(self) -> dict[int, _View]:
        """Views of the tables for frames that keep the arrival PCP (compatibility)."""
        return {t: self.view(t, self.pcp) for t in self.entries}

    def build(self, relevant: list[FlowSpec], cache: dict | None = None) -> "_Row":
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

    def view(self, table: int, pcp: int) -> _View | None:
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
                view = _View.build(entries, self.rep, pcp, self.attrs, own_port_drops=self.own_port_drops)
                got = shared[skey] = (entries, view)  # keeps ids alive
            v = self.views[key] = got[1]
        return v


@dataclass
class _Outcome:
    """Per destination, what one switch did: outputs (count, last port, its PCP),
    punt, pipeline error; tables reached."""

    out_n: np.ndarray
    out_port: np.ndarray
    out_pcp: np.ndarray
    punt: np.ndarray
    err: np.ndarray
    reached: set[int]
    ps_port: np.ndarray | None = None  # port in the metadata of frames entering PORT_STATE (-1: none)


def _evaluate(row: _Row, dst: _Dst, track: bool = False) -> _Outcome:
    """Run every destination of ``dst`` through the tables of ``row`` at once.
    ``track``: record which PORT_STATE entry (port in the metadata) each frame meets."""
    n = dst.n
    res = _Outcome(
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


class _Engine:
    """Decision rows (switch, ingress class, arrival PCP) for a compiled fabric.

    ``per_port``: one ingress class per port (rows then name the channel a
    frame arrived on, as the channel dependency graph needs). ``override``:
    switch -> flows that replace the compiled ones (scenarios, e.g. a paused
    port), used by :meth:`decisions`.
    """

    def __init__(
        self, compiled: Any, extra_macs: Iterable[int] = (), *, per_port: bool = False, lazy: bool = False
    ) -> None:
        self.compiled = compiled
        fabric = self.fabric = compiled.fabric
        self.plan = compiled.plan
        self.hosts = fabric.hosts
        self.hid = _host_ids(compiled)
        self.host_macs = np.array([self.plan.host_mac[h.name] for h in self.hosts], dtype=np.uint64)
        self.bound = len(fabric.switches) + 1
        self.pipes = _Pipelines(compiled)
        self.per_port = per_port
        self.rows: list[_Row] = []
        self.row_of: dict[tuple[str, int, int], int] = {}  # (switch, class, pcp) -> row
        self.class_of: dict[tuple[str, int], int] = {}  # (switch, port) -> class
        self.classes: dict[str, list[tuple[int, ...]]] = {}
        self.relevant: dict[str, list[FlowSpec]] = {}
        self.merged_ports = 0
        self.own_port_drops: set[str] = set()  # switches whose rows drop outputs to their port (views)
        self._ingress: tuple[np.ndarray, np.ndarray] | None = None  # see ingress_ids
        self._port_ids: dict[tuple[str, int], int] = {}
        self._attrs: dict = {}  # (id(flow), pcp) -> (flow, *attrs)
        self._switch_info: dict[str, tuple] = {}  # switch -> (flows, eth_src entries, in_port entries, built)
        extra = np.array(sorted(set(extra_macs)), dtype=np.uint64)
        self._every_dst = _Dst(np.concatenate([self.host_macs, extra]))
        self.tagging = False
        rewrites = []
        for sw in fabric.switches:
            flows = data_flows(compiled.tables[sw.name].flows)
            for f in flows:
                if f.goto is not None and f.goto <= f.table:
                    raise PipelineError(
                        f"{sw.name}: entry {describe_flow(f)} goes to table {f.goto}; goto must name a later table"
                    )
            relevant = [f for f in flows if _relevant(f)]
            for f in relevant:
                for a in f.actions:
                    if isinstance(a, SetField) and a.field != "vlan_pcp":
                        rewrites.append(f"{sw.name}: {describe_flow(f)}")
                    elif not isinstance(a, (Output, SetField, PushVlan, PopVlan)):
                        raise _Unsupported(f"{sw.name}: action {a!r} in {describe_flow(f)}")
                self.tagging = self.tagging or _rewrites_pcp(f)
            self.relevant[sw.name] = relevant
            self._classes(sw.name, relevant)
        if rewrites:
            raise _Unsupported(f"{len(rewrites)} entries rewrite data frames (first: {rewrites[0]})")
        for sw in fabric.switches:  # lazy: host rows only, fabric rows when a decision first reaches them
            host_ports = fabric.host_ports(sw.name) if lazy else ()
            for ci, cls in enumerate(self.classes[sw.name]):
                if not lazy or cls[0] in host_ports:
                    self.row(sw.name, ci, UNTAGGED)
        self.scalar_rows = sum(r.scalar for r in self.rows)
        if lazy and any(f.match.eth_src is not None for flows in self.relevant.values() for f in flows):
            raise _Unsupported("lazy rows with source-dependent (eth_src) rules")
        if self.scalar_rows and self.tagging:
            raise _Unsupported("source-dependent rules (eth_src) together with VLAN PCP rewrites")
        # egress (port, PCP) -> next state; NEW_ROW until the row exists
        self.port_next: dict[str, np.ndarray] = {}
        for sw in fabric.switches:
            ports = fabric.ports(sw.name)
            top = max(ports, default=0)
            pn = np.full((top + 2, PCP_SLOTS), DEAD, dtype=np.int32)
            for p, peer in ports.items():
                if peer.is_host:
                    pn[p, :] = TAGGED
                    pn[p, 0] = DELIVER - self.hid[peer.node]
                else:
                    pn[p, :] = NEW_ROW
                    if not lazy:
                        pn[p, 0] = self.row_of[(peer.node, self.class_of[(peer.node, peer.port)], UNTAGGED)]
            self.port_next[sw.name] = pn

    # -- rows ---------------------------------------------------------------
    def _classes(self, switch: str, relevant: list[FlowSpec]) -> None:
        """Split the ports of ``switch`` into ingress classes."""
        ports = self.fabric.ports(switch)
        by_src = [f for f in relevant if f.match.eth_src is not None]
        in_port_out = any(isinstance(a, Output) and a.port == OFPP_IN_PORT for f in relevant for a in f.actions)
        if in_port_out:
            self.own_port_drops.add(switch)
        split = bool(by_src) or in_port_out or self.per_port
        named: dict[int, set[int]] = {}  # in_port -> tables of the entries naming it
        for f in relevant:
            if f.match.in_port is not None and f.match.in_port in ports:
                named.setdefault(f.match.in_port, set()).add(f.table)
        reached: set[int] = set()
        if named and not split:
            # A port whose own entries sit only in tables that frames from the other
            # ports never reach behaves like the other ports: e.g. the per-host-port
            # Valiant entries in ALTERNATIVE while no port is paused. Cheap static
            # check first (no goto leads there), then, if needed, an evaluation over
            # every destination and probe.
            base = _Row(switch, (), None, False).build(relevant, self._attrs)
            reached = {0}
            todo = [0]
            while todo:
                t = todo.pop()
                for f in base.entries.get(t, ()):
                    if f.goto is not None and f.goto not in reached:
                        reached.add(f.goto)
                        todo.append(f.goto)
            if any(tables & reached for tables in named.values()) and not self.tagging_possible(relevant):
                reached = _evaluate(base, self._every_dst).reached
            for p in [p for p, tables in named.items() if not tables & reached]:
                del named[p]
                self.merged_ports += 1
        classes: list[tuple[int, ...]] = []
        other: list[int] = []
        alike: dict[tuple, list[int]] = {}
        for p in ports:
            if split:
                classes.append((p,))
            elif p in named:
                sig = self._signature(relevant, p, reached)
                if sig is None:
                    classes.append((p,))
                else:
                    alike.setdefault(sig, []).append(p)
            else:
                other.append(p)
        for members in alike.values():
            classes.append(tuple(members))
            self.merged_ports += len(members) - 1
        if other:
            classes.append(tuple(other))
        self.classes[switch] = classes
        for ci, cls in enumerate(classes):
            for p in cls:
                self.class_of[(switch, p)] = ci

    @staticmethod
    def tagging_possible(relevant: list[FlowSpec]) -> bool:
        """Entries matching or rewriting the VLAN PCP: reachability then depends on
        the PCP, so every table is treated as reachable (the static check)."""
        return any(f.match.vlan_pcp is not None or f.match.vlan_vid is not None or _rewrites_pcp(f) for f in relevant)

    @staticmethod
    def _signature(relevant: list[FlowSpec], port: int, reached: set[int]) -> tuple | None:
        """What the entries naming ``port`` (in reached tables) do, without the port:
        ports with equal signatures behave alike and share a class. None when an
        entry outputs to IN_PORT or ties with an entry of the same priority."""
        sig = []
        wild: dict[tuple[int, int], list[int]] = {}
        for f in relevant:
            if f.match.in_port is None:
                wild.setdefault((f.table, f.priority), []).append(id(f))
        for f in relevant:
            if f.match.in_port != port or f.table not in reached:
                continue
            if (f.table, f.priority) in wild:
                return None
            if any(isinstance(a, Output) and a.port == OFPP_IN_PORT for a in f.actions):
                return None
            m = replace(f.match, in_port=None)
            sig.append((f.table, f.priority, m, f.actions, f.goto, f.write_metadata))
        return tuple(sig)

    def row(self, switch: str, ci: int, pcp: int, flows: Sequence[FlowSpec] | None = None) -> int:
        """The row id of (switch, class, PCP), created (and built) on first use."""
        key = (switch, ci, pcp)
        r = self.row_of.get(key)
        if r is not None:
            return r
        cls = self.classes[switch][ci]
        peer = self.fabric.ports(switch)[cls[0]]
        src_mac = self.plan.host_mac[peer.node] if len(cls) == 1 and peer.is_host else None
        relevant = self.relevant[switch]
        info = self._switch_info.get(switch)
        if info is None or info[0] is not relevant:  # per flow list: scenarios swap it in and out
            named: dict[int, list[FlowSpec]] = {}
            for f in relevant:
                if f.match.in_port is not None:
                    named.setdefault(f.match.in_port, []).append(f)
            info = self._switch_info[switch] = (relevant, [f for f in relevant if f.match.eth_src is not None], named, {})
        _, by_src, named, built = info
        scalar = src_mac is None and any(f.match.in_port is None or f.match.in_port in cls for f in by_src)
        row = _Row(switch, cls, src_mac, scalar, pcp)
        row.own_port_drops = switch in self.own_port_drops and len(cls) == 1 and not peer.is_host
        if not scalar:
            if by_src:
                row.build(relevant, self._attrs)
            else:  # rows whose port no entry names share one entries table (memory on big fabrics)
                k = tuple(map(id, named.get(cls[0], ())))
                entries = built.get(k)
                if entries is None:
                    built[k] = row.build(relevant, self._attrs).entries
                else:
                    row.entries, row.views, row.attrs = entries, {}, self._attrs
        r = self.row_of[key] = len(self.rows)
        self.rows.append(row)
        return r

    def first_row(self, host: Any) -> int:
        return self.row_of[(host.switch, self.class_of[(host.switch, host.port)], UNTAGGED)]

    def ingress_ids(self) -> tuple[np.ndarray, np.ndarray]:
        """Per row, plus one trailing entry for the walk's sink: ``(arrived, sent)``.

        ``arrived[r]``: an id of the fabric port a frame in row ``r`` came in on (rows of one fabric
        port only, -1 otherwise); ``sent[r]``: the id of the port the previous switch sent it out of
        to land in row ``r`` (the peer of that port; -2 for host rows). A step from row ``a`` to row
        ``b`` leaves through the ingress port exactly when ``arrived[a] == sent[b]``: OpenFlow
        switches drop such a frame (sending back needs ``OFPP_IN_PORT``), and so do the walks
        (:meth:`drop_back_to_ingress`). Rows that merge several ingress ports (the default engine on big
        fabrics) cannot tell and get -1. A host's frame sent back to that host is not a step between
        rows: it counts as misdelivered (to its source), as in :func:`walk_pair`.
        """
        cached = self._ingress
        if cached is not None and len(cached[0]) == len(self.rows) + 1:
            return cached
        ids = self._port_ids
        start = 0 if cached is None else len(cached[0]) - 1
        arrived = np.full(len(self.rows) + 1, -1, dtype=np.int64)
        sent = np.full(len(self.rows) + 1, -2, dtype=np.int64)
        if cached is not None:
            arrived[:start], sent[:start] = cached[0][:start], cached[1][:start]
        for r in range(start, len(self.rows)):
            row = self.rows[r]
            if len(row.ports) != 1:
                continue
            peer = self.fabric.ports(row.switch)[row.ports[0]]
            if peer.is_host:
                continue
            if not row.own_port_drops:  # own_port_drops: decided in the views
                arrived[r] = ids.setdefault((row.switch, row.ports[0]), len(ids))
            sent[r] = ids.setdefault((peer.node, peer.port), len(ids))
        self._ingress = (arrived, sent)
        return self._ingress

    @staticmethod
    def drop_back_to_ingress(ids: tuple[np.ndarray, np.ndarray], cur: np.ndarray, code: np.ndarray) -> None:
        """Steps (rows ``cur`` deciding ``code``) that leave through their fabric ingress port become
        ``DROP`` in ``code``, in place."""
        arrived, sent = ids
        back = arrived[cur] == sent[np.where(code >= 0, code, len(sent) - 1)]
        if back.any():
            code[back] = DROP

    def channel(self, r: int) -> tuple[str, int, int] | None:
        """The channel (switch, egress port, PCP) a frame in row ``r`` arrived on
        (per-port rows of fabric ports only; None for host ports)."""
        row = self.rows[r]
        peer = self.fabric.ports(row.switch)[row.ports[0]]
        if peer.is_host or len(row.ports) != 1:
            return None
        return peer.node, peer.port, row.pcp

    # -- decisions ----------------------------------------------------------
    def decide(self, row: _Row, dst: _Dst, ps: list | None = None) -> np.ndarray:
        """Next-state code (int32) of ``row`` for every destination of ``dst``
        (rows for new (port, PCP) states are created on the way). With ``ps``
        (a list), the PORT_STATE port each destination meets is appended to it."""
        if row.scalar:
            return np.full(dst.n, SCALAR, dtype=np.int32)
        res = _evaluate(row, dst, ps is not None)
        if ps is not None:
            ps.append(res.ps_port)
        pn = self.port_next[row.switch]
        port = np.clip(res.out_port, 0, len(pn) - 1)
        slot = res.out_pcp.astype(np.int64) + 1
        nxt = pn[port, slot]
        single = res.out_n == 1
        new = single & (nxt == NEW_ROW)
        if new.any():
            for p, s in {(int(a), int(b)) for a, b in zip(port[new], slot[new])}:
                peer = self.fabric.ports(row.switch)[p]
                pn[p, s] = self.row(peer.node, self.class_of[(peer.node, peer.port)], s - 1)
            nxt = pn[port, slot]
        code = np.where(single, nxt, np.where(res.out_n > 1, FLOOD, DROP))
        code = np.where(res.punt, PUNT, code)
        return np.where(res.err, DROP, code).astype(np.int32)

    def decide_scalar(self, row: _Row, src: int, dst_mac: int) -> int:
        """Next-state code of one frame at a source-dependent row."""
        frame = Frame(in_port=row.rep, eth_src=src, eth_dst=dst_mac, vlan_pcp=None if row.pcp == UNTAGGED else row.pcp)
        try:
            res = self.pipes[row.switch].process(frame)
        except PipelineError:
            return DROP
        if res.punted:
            return PUNT
        if len(res.outputs) + len(res.to_ingress) > 1:
            return FLOOD
        if not res.outputs:
            peer = self.fabric.ports(row.switch).get(row.rep)
            if res.to_ingress and peer is not None and peer.is_host:  # back to the source: as walk_pair
                return DELIVER - self.hid[peer.node]
            return DROP
        port, sent = res.outputs[0]
        if replace(sent, in_port=frame.in_port) != frame:  # pragma: no cover - rewrites are rejected earlier
            raise _Unsupported(f"{row.switch} rewrites a data frame")
        pn = self.port_next[row.switch]
        return int(pn[min(port, len(pn) - 1), 0 if row.pcp == UNTAGGED else row.pcp + 1])

    def matrix(self, dst: _Dst) -> np.ndarray:
        """Decision matrix: one row per decision row, one column per destination,
        plus a last all-``SINK`` row (see :meth:`walk`). Rows created while
        deciding are decided too."""
        lines: list[np.ndarray] = []
        r = 0
        while r < len(self.rows):
            lines.append(self.decide(self.rows[r], dst))
            r += 1
        m = np.empty((len(lines) + 1, dst.n), dtype=np.int32)
        for i, line in enumerate(lines):
            m[i] = line
        m[-1] = SINK
        return m

    # -- sources and walks --------------------------------------------------
    def source_classes(self, m: np.ndarray, hosts: Sequence[int]) -> list[tuple[int, np.ndarray]]:
        """(first row, host ids) per class of sources that behave identically."""
        if self.scalar_rows:
            return [(self.first_row(self.hosts[h]), np.array([h])) for h in hosts]
        by_row: dict[int, list[int]] = {}
        for h in hosts:
            by_row.setdefault(self.first_row(self.hosts[h]), []).append(h)
        merged: dict[tuple[str, bytes], tuple[int, list[int]]] = {}
        per_switch = Counter(self.rows[r].switch for r in by_row)
        out: list[tuple[int, list[int]]] = []
        for r, members in by_row.items():
            sw = self.rows[r].switch
            if per_switch[sw] > 1:
                k = (sw, m[r].tobytes())
                if k in merged:
                    merged[k][1].extend(members)
                    continue
                merged[k] = (r, members)
            out.append((r, members))
        return [(r, np.array(sorted(mem))) for r, mem in out]

    def walk(
        self,
        m: np.ndarray,
        dst: _Dst,
        classes: list[tuple[int, np.ndarray]],
        on_step: Callable[[np.ndarray, np.ndarray, np.ndarray], None] | None = None,
        line_of: np.ndarray | None = None,
    ) -> Iterator[tuple[int, int, np.ndarray, np.ndarray]]:
        """Yield (first class, class count, codes, hops) per batch; element e of a
        batch is class ``first + e // n`` sending to destination ``e % n``.

        ``m`` comes from :meth:`matrix`: its last row is the sink (every cell
        ``SINK``) where finished elements park, so arrays never shrink.
        ``on_step(rows, codes, columns)`` sees, at every hop, each live
        element's row, what that row decided and the element's destination
        column (the channel dependency graph uses it). ``line_of`` maps rows
        to lines of ``m`` (rows sharing a line); its last entry is the sink.
        """
        n = dst.n
        if n == 0:
            return
        flat = m.reshape(-1)
        sink = m.shape[0] - 1 if line_of is None else len(line_of) - 1
        ingress = self.ingress_ids()
        if len(ingress[0]) != sink + 1:  # pragma: no cover - the matrix is built over every row
            raise ValueError("decision matrix and engine rows differ")
        per_port_rows = bool((ingress[0] >= 0).any())  # merged classes only: nothing to check per step
        cols = np.arange(n, dtype=np.int64)
        per = max(1, BATCH_ELEMENTS // n)
        for c0 in range(0, len(classes), per):
            batch = classes[c0 : c0 + per]
            nb = len(batch)
            cur = np.repeat(np.array([r for r, _ in batch], dtype=np.int64), n).reshape(nb, n)
            codes = np.zeros((nb, n), dtype=np.int32)
            hops = np.zeros((nb, n), dtype=np.int32)
            hop = 1
            snap: np.ndarray | None = None
            next_snap = 2
            while True:
                code = flat[(cur if line_of is None else line_of[cur]) * n + cols]
                if self.scalar_rows:
                    for b, j in zip(*np.nonzero(code == SCALAR)):
                        src = int(batch[b][1][0])
                        row = self.rows[int(cur[b, j])]
                        code[b, j] = self.decide_scalar(row, int(self.host_macs[src]), int(dst.macs[j]))
                if per_port_rows:
                    self.drop_back_to_ingress(ingress, cur, code)
                if on_step is not None:
                    live = cur != sink
                    on_step(cur[live], code[live], np.broadcast_to(cols, cur.shape)[live])
                done = code < 0
                term = done & (code != SINK)
                if term.any():
                    codes[term] = code[term]
                    hops[term] = hop
                cur = code.astype(np.int64)
                cur[done] = sink
                alive = ~done
                if not alive.any():
                    break
                hop += 1
                if hop > self.bound:
                    codes[alive] = LOOP
                    hops[alive] = 0
                    break
                if snap is not None:
                    cyc = alive & (cur == snap)
                    if cyc.any():
                        codes[cyc] = LOOP
                        hops[cyc] = 0
                        cur[cyc] = sink
                if hop == next_snap:
                    snap = cur.copy()
                    next_snap *= 2
            yield c0, nb, codes.reshape(-1), hops.reshape(-1)


# ---------------------------------------------------------------------------
# tallies


class _Tally:
    def __init__(self, compiled: Any, max_failures: int) -> None:
        self.compiled = compiled
        self.counts = Counter({k: 0 for k in KINDS})
        self.hist: Counter[int] = Counter()
        self.pair_failures: list[dict[str, Any]] = []
        self.probe_failures: list[dict[str, Any]] = []
        self.probes = 0
        self.probe_fail = 0
        self.max_failures = max_failures
        self.pipes = _Pipelines(compiled)

    def failure(self, src: str, dst_mac: int, kind: str, probe: str | None = None) -> dict[str, Any]:
        w = walk_pair(self.compiled, src, dst_mac, pipelines=self.pipes)
        dst = self.compiled.plan.host_by_mac(dst_mac)
        path = list(w.path)
        if len(path) > 16:
            path = path[:15] + [f"... ({len(path) - 15} more)"]
        out: dict[str, Any] = {
            "kind": kind,
            "src": src,
            "dst": dst,
            "dst_mac": format_mac(dst_mac),
            "reached": w.host,
            "path": path,
            "hops": None if w.code == LOOP else w.hops,
            "reason": w.reason,
        }
        if probe is not None:
            out["probe"] = probe
        got = _kind(w.code, self.compiled_hid(dst))
        if got != kind:  # the fast engine and the reference disagree: say so loudly
            out["note"] = f"scalar reference walk says {got!r}"
        return out

    def compiled_hid(self, name: str | None) -> int | None:
        return None if name is None else _host_ids(self.compiled)[name]

    def want_pair_failures(self) -> int:
        return self.max_failures - len(self.pair_failures)


# ---------------------------------------------------------------------------
# entry points


def apply_paused(compiled: Any, paused: Iterable[tuple[str, int]]) -> tuple[Any, list[tuple[str, int]]]:
    """``compiled`` with the PORT_STATE entry of every (switch, port) in ``paused``
    flipped to its paused version (:func:`hpcfabric.rules.compiler.port_state_flow`),
    or, switch-local reaction, the learned override of the port added
    (:func:`hpcfabric.rules.compiler.learned_override_flow`), and the flips applied. Ports without a PORT_STATE entry (minimal routing,
    host ports) are left alone, as the controller leaves them; an unknown
    switch or port raises ValueError."""
    from dataclasses import replace as _replace

    from hpcfabric.rules.port_state import learned_override_flow, port_state_flow
    from hpcfabric.rules.flows import GROUP_TAG

    switch_local = getattr(compiled, "pause_reaction", "controller") == "switch"
    by_switch: dict[str, set[int]] = {}
    for sw, port in paused:
        if not compiled.fabric.has_switch(sw) or compiled.fabric.peer(sw, port) is None:
            raise ValueError(f"no port {sw}:{port} in {compiled.fabric.name}")
        by_switch.setdefault(sw, set()).add(port)
    if not by_switch:
        return compiled, []
    tables = dict(compiled.tables)
    applied = []
    for sw, ports in sorted(by_switch.items()):
        flows = list(tables[sw].flows)
        for port in sorted(ports):
            if switch_local:
                if port_state_flow(port, False, reaction="switch") in flows:
                    flows.append(learned_override_flow(port))
                    applied.append((sw, port))
                continue
            old, new = port_state_flow(port, False), port_state_flow(port, True)
            grouped = port_state_flow(port, False, GROUP_TAG | port)  # protected by a fast-failover group
            for i, f in enumerate(flows):
                if f == old or f == grouped:
                    flows[i] = new
                    applied.append((sw, port))
        tables[sw] = _replace(tables[sw], flows=tuple(flows))
    return _replace(compiled, tables=tables), applied


def apply_down(compiled: Any, groups: Mapping[str, Iterable[Any]] | None, down: Iterable[tuple[str, int]]) -> Any:
    """``compiled`` as the switches execute it while the ports ``down`` (switch, port) are down: outputs to
    them lose the frame and every fast-failover group (``groups``: switch -> GroupSpecs) takes its first live
    bucket (:func:`hpcfabric.verify.pipeline.resolve_groups`), so both engines see plain tables."""
    from dataclasses import replace as _replace

    from hpcfabric.verify.pipeline import resolve_groups

    by_switch: dict[str, set[int]] = {}
    for sw, port in down:
        by_switch.setdefault(sw, set()).add(port)
    if not groups and not by_switch:
        return compiled
    tables = dict(compiled.tables)
    for sw, t in tables.items():
        if (groups and groups.get(sw)) or sw in by_switch:
            tables[sw] = _replace(t, flows=resolve_groups(t.flows, (groups or {}).get(sw, ()), by_switch.get(sw, ())))
    return _replace(compiled, tables=tables)


def verify(
    compiled: Any,
    paused: Iterable[tuple[str, int]] = (),
    *,
    sample: int | None = None,
    seed: int = 0,
    engine: str = "auto",
    max_failures: int = MAX_FAILURES,
    groups: Mapping[str, Iterable[Any]] | None = None,
    down: Iterable[tuple[str, int]] = (),
    per_port: bool | None = None,
) -> Report:
    """Verify forwarding of ``compiled`` (a :class:`~hpcfabric.rules.compiler.CompiledFabric`).

    Parameters
    ----------
    paused : iterable of (switch, port)
        Ports whose PORT_STATE entry is flipped to paused first (as the
        controller does on a PAUSE; see :func:`apply_paused`).
    sample : int, optional
        Check every source against ``sample`` random destinations (seeded by
        ``seed``) instead of all of them.
    engine : {'auto', 'fast', 'scalar'}
        'auto' uses the vectorised engine and falls back to the scalar
        reference walk when the rules rewrite frames; 'fast' raises instead
        of falling back (:class:`~hpcfabric.verify.pipeline.PipelineError`);
        'scalar' always uses the reference walk (slow: small fabrics only).
    groups, down : optional
        Fast-failover groups per switch (:mod:`hpcfabric.failover.groups`) and ports whose link is down
        (switch, port): resolved (:func:`apply_down`) after ``paused`` is applied.
    per_port : bool, optional
        Vectorised engine with one decision row per fabric ingress port, so that a frame a switch
        would send back out of the port it came in on is dropped, as on a switch (the scalar walk
        always does this). Default: on up to ``PER_PORT_AUTO_PORTS`` fabric ports; above that,
        ports no rule tells apart share a row (far faster on big fabrics) and the report says
        ``ingress_exact: false`` (``hpcfabric sweep`` and the CDG check walk per port).
    """
    if engine not in ("auto", "fast", "scalar"):
        raise ValueError(f"engine must be 'auto', 'fast' or 'scalar', not {engine!r}")
    t0 = time.perf_counter()
    compiled, applied = apply_paused(compiled, paused)
    compiled = apply_down(compiled, groups, down)
    fabric = compiled.fabric
    n_hosts = len(fabric.hosts)
    if sample is not None and sample < n_hosts:
        if sample < 1:
            raise ValueError("sample must be >= 1")
        dst_ids = np.sort(np.random.default_rng(seed).choice(n_hosts, size=sample, replace=False))
        coverage = f"{n_hosts} sources x {sample} random destinations (seed {seed}) of {n_hosts}"
    else:
        dst_ids = np.arange(n_hosts)
        coverage = f"all {n_hosts}x{n_hosts} host pairs (self-pairs excluded)"
    probes = probe_addresses(compiled.plan)
    probe_src = [fabric.hosts_on(sw.name)[0].name for sw in fabric.access_switches]
    tally = _Tally(compiled, max_failures)
    engine_used = "vectorised"
    fast: _Engine | None = None
    if engine != "scalar":
        try:
            if per_port is None:
                per_port = sum(len(fabric.fabric_ports(sw.name)) for sw in fabric.switches) <= PER_PORT_AUTO_PORTS
            fast = _Engine(compiled, (mac for mac, _ in probes), per_port=per_port)
        except _Unsupported as why:
            if engine == "fast":
                raise PipelineError(f"the vectorised verifier cannot model these rules: {why}") from None
            engine_used = f"scalar (fallback: {why})"
    else:
        engine_used = "scalar"
    if fast is not None:
        if fast.scalar_rows:
            engine_used = f"vectorised + scalar pipeline for {fast.scalar_rows} source-dependent ingress classes"
        _run_fast(fast, tally, dst_ids, probes, probe_src)
    else:
        _run_scalar(compiled, tally, dst_ids, probes, probe_src)
    pairs = n_hosts * len(dst_ids) - len(dst_ids)
    coverage = f"{coverage}: {pairs} pairs"
    overlaps, examples = 0, []
    for sw in fabric.switches:
        for a, b in check_overlaps(compiled.tables[sw.name].flows):
            overlaps += 1
            if len(examples) < 5:
                examples.append(f"{sw.name}: {describe_flow(a)} | {describe_flow(b)}")
    c = tally.counts
    assert sum(c.values()) == pairs, (dict(c), pairs)
    delivered = c["delivered"]
    total_hops = sum(h * k for h, k in tally.hist.items())
    n_probe_fail = len(tally.probe_failures)
    keep_pairs = max_failures - min(n_probe_fail, 5) if tally.probe_failures else max_failures
    failures = tally.pair_failures[:keep_pairs]
    failures += tally.probe_failures[: max_failures - len(failures)]
    return Report(
        fabric=fabric.name,
        mode=compiled.plan.mode,
        switches=len(fabric.switches),
        hosts=n_hosts,
        pairs=pairs,
        delivered=delivered,
        misdelivered=c["misdelivered"],
        dropped=c["dropped"],
        loops=c["loop"],
        punted=c["punted"],
        floods=c["flood"],
        tagged=c["tagged"],
        paused=tuple(f"{s}:{p}" for s, p in applied),
        max_hops=max((h for h, k in tally.hist.items() if k), default=0),
        mean_hops=round(total_hops / delivered, 4) if delivered else 0.0,
        hop_histogram=dict(sorted((h, k) for h, k in tally.hist.items() if k)),
        invalid_probes=tally.probes,
        invalid_probe_failures=tally.probe_fail,
        failures=tuple(failures),
        seconds=time.perf_counter() - t0,
        coverage=coverage,
        engine=engine_used,
        hop_bound=len(fabric.switches) + 1,
        overlaps=overlaps,
        overlap_examples=tuple(examples),
        probe_addresses=tuple(f"{format_mac(mac)} {why}" for mac, why in probes),
        ingress_exact=fast is None or fast.per_port or not any(len(c) > 1 for c in _fabric_classes(fast)),
    )


def _fabric_classes(eng: _Engine) -> Iterator[tuple[int, ...]]:
    """Ingress classes holding a fabric port (merged classes make the ingress check inexact)."""
    for sw, classes in eng.classes.items():
        ports = eng.fabric.ports(sw)
        for cls in classes:
            if any(not ports[p].is_host for p in cls):
                yield cls


def _chunks(engine: _Engine, dst_ids: np.ndarray) -> Iterator[np.ndarray]:
    rows = len(engine.rows) + 1
    size = max(1, MATRIX_BYTES // (4 * rows))
    for i in range(0, len(dst_ids), size):
        yield dst_ids[i : i + size]


def _run_fast(
    eng: _Engine, tally: _Tally, dst_ids: np.ndarray, probes: list[tuple[int, str]], probe_src: list[str]
) -> None:
    n_hosts = len(eng.hosts)
    all_src = range(n_hosts)
    for chunk in _chunks(eng, dst_ids):
        dst = _Dst(eng.host_macs[chunk])
        m = eng.matrix(dst)
        classes = eng.source_classes(m, all_src)
        col_of = np.full(n_hosts, -1, dtype=np.int64)
        col_of[chunk] = np.arange(len(chunk))
        want = DELIVER - chunk.astype(np.int64)  # the correct code per column
        n = dst.n
        for c0, nb, codes, hops in eng.walk(m, dst, classes):
            batch = classes[c0 : c0 + nb]
            weight = np.repeat(np.array([len(mem) for _, mem in batch], dtype=np.int64), n)
            for j, (_, mem) in enumerate(batch):
                cols = col_of[mem]
                cols = cols[cols >= 0]
                np.subtract.at(weight, j * n + cols, 1)
            codes64 = codes.astype(np.int64)
            colv = np.tile(np.arange(n), nb)
            ok = codes64 == want[colv]
            _count(tally, codes64, ok, hops, weight)
            bad = np.flatnonzero(~ok & (weight > 0))
            for e in bad[: tally.want_pair_failures()]:
                _, mem = batch[int(e) // n]
                dst_h = int(chunk[int(e) % n])
                src_h = int(mem[0]) if mem[0] != dst_h else int(mem[1])
                tally.pair_failures.append(
                    tally.failure(eng.hosts[src_h].name, int(eng.host_macs[dst_h]), _kind(int(codes64[e]), dst_h))
                )
    if probes and probe_src:
        dst = _Dst(np.array([mac for mac, _ in probes], dtype=np.uint64))
        m = eng.matrix(dst)
        ids = [eng.hid[name] for name in probe_src]
        classes = [(eng.first_row(eng.hosts[h]), np.array([h])) for h in ids]
        for c0, nb, codes, _hops in eng.walk(m, dst, classes):
            tally.probes += len(codes)
            bad = np.flatnonzero((codes != DROP) & (codes != DEAD))
            tally.probe_fail += len(bad)
            for e in bad[: max(0, tally.max_failures - len(tally.probe_failures))]:
                src_h = int(classes[c0 + int(e) // dst.n][1][0])
                mac, why = probes[int(e) % dst.n]
                tally.probe_failures.append(
                    tally.failure(eng.hosts[src_h].name, mac, _kind(int(codes[e]), None), probe=why)
                )


def _count(tally: _Tally, codes: np.ndarray, ok: np.ndarray, hops: np.ndarray, weight: np.ndarray) -> None:
    c = tally.counts
    c["delivered"] += int(weight[ok].sum())
    c["misdelivered"] += int(weight[(codes <= DELIVER) & ~ok].sum())
    c["dropped"] += int(weight[(codes == DROP) | (codes == DEAD)].sum())
    c["loop"] += int(weight[codes == LOOP].sum())
    c["punted"] += int(weight[codes == PUNT].sum())
    c["flood"] += int(weight[codes == FLOOD].sum())
    c["tagged"] += int(weight[codes == TAGGED].sum())
    if ok.any():
        hist = np.bincount(hops[ok], weights=weight[ok])
        for h in np.flatnonzero(hist):
            tally.hist[int(h)] += int(round(hist[h]))


def _run_scalar(
    compiled: Any, tally: _Tally, dst_ids: np.ndarray, probes: list[tuple[int, str]], probe_src: list[str]
) -> None:
    hosts = compiled.fabric.hosts
    macs = [compiled.plan.host_mac[h.name] for h in hosts]
    pipes = tally.pipes
    for s, src in enumerate(hosts):
        for d in dst_ids:
            d = int(d)
            if d == s:
                continue
            w = walk_pair(compiled, src.name, macs[d], pipelines=pipes)
            kind = _kind(w.code, d)
            tally.counts[kind] += 1
            if kind == "delivered":
                tally.hist[w.hops] += 1
            elif tally.want_pair_failures() > 0:
                tally.pair_failures.append(tally.failure(src.name, macs[d], kind))
    for name in probe_src:
        for mac, why in probes:
            tally.probes += 1
            w = walk_pair(compiled, name, mac, pipelines=pipes)
            if w.code not in (DROP, DEAD):
                tally.probe_fail += 1
                if len(tally.probe_failures) < tally.max_failures:
                    tally.probe_failures.append(tally.failure(name, mac, _kind(w.code, None), probe=why))


def pair_outcomes(compiled: Any, *, engine: str = "fast") -> dict[tuple[str, str], tuple[str, str | None, int | None]]:
    """Per ordered host pair: (kind, host reached or None, hops or None for loops).

    For cross-checking the engines on small fabrics (H*(H-1) entries); the fast engine runs with
    one row per ingress port, so frames sent back out of their ingress port are dropped as in the
    scalar walk.
    """
    hosts = compiled.fabric.hosts
    out: dict[tuple[str, str], tuple[str, str | None, int | None]] = {}
    if engine == "scalar":
        pipes = _Pipelines(compiled)
        for s, src in enumerate(hosts):
            for d, dst in enumerate(hosts):
                if s != d:
                    w = walk_pair(compiled, src.name, compiled.plan.host_mac[dst.name], pipelines=pipes)
                    out[(src.name, dst.name)] = _outcome(w.code, d, w.hops, hosts)
        return out
    eng = _Engine(compiled, per_port=True)
    ids = np.arange(len(hosts))
    for chunk in _chunks(eng, ids):
        dst = _Dst(eng.host_macs[chunk])
        m = eng.matrix(dst)
        classes = eng.source_classes(m, range(len(hosts)))
        for c0, nb, codes, hops in eng.walk(m, dst, classes):
            for e in range(nb * dst.n):
                d = int(chunk[e % dst.n])
                for s in classes[c0 + e // dst.n][1]:
                    if int(s) != d:
                        out[(hosts[int(s)].name, hosts[d].name)] = _outcome(int(codes[e]), d, int(hops[e]), hosts)
    return out


def _outcome(code: int, d: int, hops: int, hosts: Sequence[Any]) -> tuple[str, str | None, int | None]:
    kind = _kind(code, d)
    host = hosts[DELIVER - code].name if code <= DELIVER else None
    return kind, host, None if code == LOOP else hops
