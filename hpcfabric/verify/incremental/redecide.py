"""A few switches decided again: their choices for every destination column, on new entries.

:class:`~hpcfabric.verify.union.choices.Choices` decides every line of a whole fabric at once;
:func:`decide_switches` decides the given states of a few switches on given entries, the same way
(the engine's batch path: :class:`~hpcfabric.verify.engine.flat.FlatTables`,
:class:`~hpcfabric.verify.engine.batch.MatchClasses`, :func:`~hpcfabric.verify.engine.batch.decide`),
unpaused and with every PORT_STATE entry paused. The incremental proof (:mod:`hpcfabric.verify.incremental.delta`)
uses it for the switches a change touches, and for states no walk reached before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from hpcfabric.rules.flows import TABLE_PORT_STATE, Learn, Resubmit
from hpcfabric.verify.union.choices import Choices, pack_choices
from hpcfabric.verify.codes import DROP, PCP_SLOTS
from hpcfabric.verify.engine import port_classes
from hpcfabric.verify.incremental.depgraph import union
from hpcfabric.verify.engine.batch import MatchClasses, decide
from hpcfabric.verify.engine.flat import IN_PORT_MARK, FlatTables
from hpcfabric.verify.scenarios import paused_data_flows

__all__ = ["SwitchDecisions", "Prior", "decide_switches"]

#: switches decided in one engine call (fewer calls; more, and the padding to the widest candidate list grows)
BATCH = 16


@dataclass
class SwitchDecisions:
    """One switch's choices: the class of every destination column there, and per decided state (sorted)
    the choice per class, unpaused (``base``) and paused (``alt``)."""

    relevant: list[Any]  # the switch's data-relevant entries
    col_cls: np.ndarray  # per column: its class here
    states: np.ndarray
    base: np.ndarray  # states x classes
    alt: np.ndarray
    back_ok: bool  # an output back to the ingress port by number is dropped here (no OFPP_IN_PORT entry)

    def codes(self, states: np.ndarray, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(unpaused, paused, decided?) per (state, column) pair; DROP where not decided."""
        if not len(self.states):
            none = np.full(len(states), DROP, dtype=np.int64)
            return none, none.copy(), np.zeros(len(states), dtype=bool)
        at = np.minimum(np.searchsorted(self.states, states), len(self.states) - 1)
        known = self.states[at] == states
        k = self.col_cls[cols]
        return (np.where(known, self.base[at, k], DROP).astype(np.int64),
                np.where(known, self.alt[at, k], DROP).astype(np.int64), known)

    def matrix(self, states: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(unpaused, paused) choices of decided ``states`` per class: two states x classes arrays."""
        at = np.searchsorted(self.states, states)
        return self.base[at], self.alt[at]


@dataclass(frozen=True)
class Prior:
    """A switch's decisions before a change: its data-relevant entries in or out since (``moved``), whether an
    output back to the ingress port by number was dropped then (``back_ok``), and ``codes(states)``: (unpaused,
    paused) choices of those states per class then, and each column's class then."""

    moved: Any  # iterable of FlowSpec
    back_ok: bool
    codes: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]]


class _Reuse:
    """Decisions kept across a change, class by class. A column none of whose MAC an entry in or out of the
    table matches meets exactly the entries it met before; if every entry in or out matches ``eth_dst``, no
    ``metadata`` and is not a PORT_STATE entry (nor resubmits or learns), everything else a frame of that
    column meets -- the entries without ``eth_dst``, the PORT_STATE entries and so their paused forms, the
    drop of outputs back by port number -- is unchanged, so its choice in every state is the one before."""

    def __init__(self, ch: Choices, columns: Any, host_macs: np.ndarray, prior: dict[str, Prior]) -> None:
        self.prior = prior
        self.mac = np.asarray(ch.targets, dtype=np.uint64)[columns.target]  # per column: the MAC it decides by
        self.own: dict[int, list[tuple[int, int]]] = {}  # switch index -> its per-host columns (column, host)
        for c, sj, _ in columns.own:
            self.own.setdefault(int(sj), []).append((int(c), int(columns.host[c])))
        self.host_macs = host_macs

    def take(self, s: str, si: int, in_port_out: bool, col_cls: np.ndarray, n_cls: int,
             states: np.ndarray, base: np.ndarray, alt: np.ndarray) -> np.ndarray | None:
        """Fill ``base``/``alt`` of the classes whose decisions stay; the classes still to decide (None: all)."""
        p = self.prior.get(s)
        if p is None or p.back_ok == in_port_out:
            return None
        by_mask: dict[int, list[int]] = {}
        for f in p.moved:
            m = f.match
            if m.eth_dst is None or m.metadata is not None or f.table == TABLE_PORT_STATE or \
                    any(isinstance(a, (Resubmit, Learn)) for a in f.actions):
                return None
            by_mask.setdefault(m.eth_dst[1], []).append(m.eth_dst[0])
        mac = self.mac
        if si in self.own:
            mac = mac.copy()
            for c, h in self.own[si]:
                mac[c] = self.host_macs[h]
        hit = np.zeros(len(mac), dtype=bool)
        for mask, vals in by_mask.items():
            v = np.unique(np.array(vals, dtype=np.uint64))
            x = mac & np.uint64(mask)
            hit |= v[np.minimum(np.searchsorted(v, x), len(v) - 1)] == x
        keep = np.zeros(n_cls, dtype=bool)
        keep[col_cls] = True  # a class without a column: decided (nothing to take over)
        keep[col_cls[hit]] = False
        if not keep.any():
            return None
        ob, oa, old_cls = p.codes(states)
        rep = np.full(n_cls, -1, dtype=np.int64)
        classes, first = np.unique(col_cls, return_index=True)
        rep[classes] = first  # each class's first column
        kept = keep[col_cls]
        split = old_cls[kept] != old_cls[rep[col_cls[kept]]]  # columns of one class now, apart before: decided
        keep[col_cls[kept][split]] = False
        ks = np.flatnonzero(keep)
        base[:, ks] = ob[:, old_cls[rep[ks]]]
        alt[:, ks] = oa[:, old_cls[rep[ks]]]
        return np.flatnonzero(~keep)


def decide_switches(ch: Choices, columns: Any, host_macs: np.ndarray, compiled: Any, names: list[str],
                    relevant: dict[str, list[Any]], extra: dict[str, np.ndarray] | None = None,
                    prior: dict[str, Prior] | None = None) -> dict[str, SwitchDecisions]:
    """Decide, on ``relevant`` (the data-relevant entries of ``compiled``'s tables there), every state of each
    switch of ``names`` that has a line in ``ch`` (some walk reached it), and the ``extra`` states.
    ``columns``: :class:`~hpcfabric.verify.union.pairs.Columns` (targets per column, per-host columns' own classes).
    ``prior``: per switch, its decisions before the change (:class:`Prior`): a class none of whose columns an
    entry in or out of the table matches takes them over instead of being decided again."""
    fabric = ch.fabric
    lists: list[list[Any]] = []
    group: list[int] = []
    alt_variant: dict[str, int] = {}
    own_hosts: list[int] = []
    own_group: list[int] = []
    for i, s in enumerate(names):
        lists.append(relevant[s])
        group.append(i)
    for i, s in enumerate(names):
        flipped, same = paused_data_flows(compiled, s, relevant[s])
        alt_variant[s] = i if same else len(lists)
        if not same:
            lists.append(flipped)
            group.append(i)
        for h in fabric.hosts_on(s):
            own_hosts.append(ch.hid[h.name])
            own_group.append(i)
    flat = FlatTables(lists)
    variant_group = np.array(group, dtype=np.int64)
    own = np.array(own_hosts, dtype=np.int64)
    mc = MatchClasses(flat, variant_group, len(names), ch.targets, np.array(own_group, dtype=np.int64),
                      host_macs[own] if len(own) else np.zeros(0, dtype=np.uint64))
    vk_start, dstc = mc.candidates()
    back = np.zeros(flat.n_variants, dtype=bool)
    np.logical_or.at(back, flat.v, (flat.port == IN_PORT_MARK).any(axis=1)[flat.act])
    in_port_out = np.zeros(len(names), dtype=bool)
    np.logical_or.at(in_port_out, variant_group, back)
    own_class = {h: int(mc.extra_class[j]) for j, h in enumerate(own_hosts)}
    reuse = _Reuse(ch, columns, host_macs, prior) if prior else None
    cache: dict = {}
    out: dict[str, SwitchDecisions] = {}
    batch = _Batch()  # switches' lines, both variants, decided in one engine call per BATCH switches
    todo: list[tuple[np.ndarray, np.ndarray, int, np.ndarray, int, int, int]] = []
    for i, s in enumerate(names):
        if i and i % BATCH == 0:
            batch.flush(flat, dstc, todo)
            batch, todo = _Batch(), []
        si = ch.sw_index[s]
        lo = int(ch.state_base[si])
        states = np.flatnonzero(ch.state_line[lo:int(ch.state_base[si + 1])] >= 0) + lo
        if extra and s in extra:
            states = union(states, np.asarray(extra[s], dtype=np.int64))
        n_cls = int(mc.class_start[i + 1] - mc.class_start[i])
        base = np.full((len(states), max(n_cls, 1)), DROP, dtype=np.int32)
        alt = base.copy()
        col_cls = mc.target_class[i][columns.target].astype(np.int64)
        for c, sj, _ in columns.own:  # per-host columns at their own switch: the host's own class
            if sj == si:
                col_cls[c] = own_class[int(columns.host[c])]
        ks = None  # the classes decided here (None: all); the others keep their decisions from before the change
        if reuse is not None and len(states) and n_cls:
            ks = reuse.take(s, si, bool(in_port_out[i]), col_cls, n_cls, states, base, alt)
        if len(states) and n_cls and (ks is None or len(ks)):
            # one line per (port class, PCP) decided, as Choices does: ports whose in_port entries agree decide alike
            pc_of = port_classes(fabric, s, relevant[s], cache)
            port_all = (states - lo) // PCP_SLOTS
            pcp_all = (states - lo) % PCP_SLOTS - 1
            rep_port = {}
            for p in sorted(pc_of):
                rep_port.setdefault(pc_of[p], p)
            key = np.array([pc_of[int(p)] for p in port_all.tolist()], dtype=np.int64) * PCP_SLOTS + pcp_all + 1
            lines, line_of = np.unique(key, return_inverse=True)
            port = np.array([rep_port[int(k) // PCP_SLOTS] for k in lines.tolist()], dtype=np.int64)
            pcp = lines % PCP_SLOTS - 1
            host_ports = np.array(sorted(fabric.host_ports(s)), dtype=np.int64)
            own_drop = ~np.isin(port, host_ports) & in_port_out[i]
            ks = np.arange(n_cls) if ks is None else ks
            at_base = batch.add(i, port, pcp, own_drop, vk_start[i], ks, ch.max_ports[si])
            at_alt = at_base if alt_variant[s] == i else \
                batch.add(alt_variant[s], port, pcp, own_drop, vk_start[alt_variant[s]], ks, ch.max_ports[si])
            todo.append((base, alt, at_base, line_of.reshape(-1), at_alt, len(lines), ks))
        out[s] = SwitchDecisions(relevant[s], col_cls, states, base, alt, not in_port_out[i])
    batch.flush(flat, dstc, todo)
    return out


class _Batch:
    """Lines of several switches and variants, each with its classes as elements: one :func:`decide` for all
    (an element's choice depends on its line and variant-class only)."""

    def __init__(self) -> None:
        self.v: list[np.ndarray] = []
        self.port: list[np.ndarray] = []
        self.pcp: list[np.ndarray] = []
        self.own_drop: list[np.ndarray] = []
        self.el_line: list[np.ndarray] = []
        self.el_vk: list[np.ndarray] = []
        self.max_port: list[np.ndarray] = []
        self.lines = self.elements = 0

    def add(self, v: int, port: np.ndarray, pcp: np.ndarray, own_drop: np.ndarray, vk_start: int, ks: np.ndarray,
            max_port: int) -> int:
        """Lines (``port``, ``pcp``) of variant ``v``, each with the classes ``ks`` (of those from ``vk_start``);
        the first of their elements (line-major) in :meth:`decide`'s result."""
        n, n_cls = len(port), len(ks)
        self.v.append(np.full(n, v, dtype=np.int64))
        self.port.append(port)
        self.pcp.append(pcp)
        self.own_drop.append(own_drop)
        self.el_line.append(self.lines + np.repeat(np.arange(n), n_cls))
        self.el_vk.append(vk_start + np.tile(ks, n))
        self.max_port.append(np.full(n * n_cls, max_port, dtype=np.int64))
        at = self.elements
        self.lines += n
        self.elements += n * n_cls
        return at

    def flush(self, flat: FlatTables, dstc: Any, todo: list[tuple[Any, ...]]) -> None:
        """Decide, and fill each switch's (unpaused, paused) matrices of ``todo``."""
        codes = self.decide(flat, dstc)
        for base, alt, at_base, line_of, at_alt, n_lines, ks in todo:
            for arr, at in ((base, at_base), (alt, at_alt)):
                got = codes[at:at + n_lines * len(ks)].reshape(n_lines, len(ks))[line_of]
                if len(ks) == arr.shape[1]:
                    arr[:] = got
                else:
                    arr[:, ks] = got

    def decide(self, flat: FlatTables, dstc: Any) -> np.ndarray:
        """The choice code of every element added."""
        if not self.elements:
            return np.zeros(0, dtype=np.int64)
        cat = np.concatenate
        line_v, port = cat(self.v), cat(self.port)
        wild = flat.wild_index(line_v, port)
        n, p, pc, punt, err = decide(flat, wild, dstc, line_v, port, cat(self.pcp), cat(self.own_drop),
                                     cat(self.el_line), cat(self.el_vk))
        return pack_choices(n, p, pc, punt, err, cat(self.max_port))
