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
from typing import Any

import numpy as np

from hpcfabric.verify.union.choices import Choices, pack_choices
from hpcfabric.verify.codes import DROP, PCP_SLOTS
from hpcfabric.verify.engine import port_classes
from hpcfabric.verify.incremental.depgraph import union
from hpcfabric.verify.engine.batch import MatchClasses, decide
from hpcfabric.verify.engine.flat import IN_PORT_MARK, FlatTables
from hpcfabric.verify.scenarios import paused_data_flows

__all__ = ["SwitchDecisions", "decide_switches"]

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


def decide_switches(ch: Choices, columns: Any, host_macs: np.ndarray, compiled: Any, names: list[str],
                    relevant: dict[str, list[Any]], extra: dict[str, np.ndarray] | None = None
                    ) -> dict[str, SwitchDecisions]:
    """Decide, on ``relevant`` (the data-relevant entries of ``compiled``'s tables there), every state of each
    switch of ``names`` that has a line in ``ch`` (some walk reached it), and the ``extra`` states.
    ``columns``: :class:`~hpcfabric.verify.union.pairs.Columns` (targets per column, per-host columns' own classes)."""
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
        if len(states) and n_cls:
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
            at_base = batch.add(i, port, pcp, own_drop, vk_start[i], n_cls, ch.max_ports[si])
            at_alt = at_base if alt_variant[s] == i else \
                batch.add(alt_variant[s], port, pcp, own_drop, vk_start[alt_variant[s]], n_cls, ch.max_ports[si])
            todo.append((base, alt, at_base, line_of.reshape(-1), at_alt, len(lines), n_cls))
        col_cls = mc.target_class[i][columns.target].astype(np.int64)
        for c, sj, _ in columns.own:  # per-host columns at their own switch: the host's own class
            if sj == si:
                col_cls[c] = own_class[int(columns.host[c])]
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

    def add(self, v: int, port: np.ndarray, pcp: np.ndarray, own_drop: np.ndarray, vk_start: int, n_cls: int,
            max_port: int) -> int:
        """Lines (``port``, ``pcp``) of variant ``v``, each with ``n_cls`` classes from ``vk_start``; the first of
        their elements (line-major) in :meth:`decide`'s result."""
        n = len(port)
        self.v.append(np.full(n, v, dtype=np.int64))
        self.port.append(port)
        self.pcp.append(pcp)
        self.own_drop.append(own_drop)
        self.el_line.append(self.lines + np.repeat(np.arange(n), n_cls))
        self.el_vk.append(vk_start + np.tile(np.arange(n_cls), n))
        self.max_port.append(np.full(n * n_cls, max_port, dtype=np.int64))
        at = self.elements
        self.lines += n
        self.elements += n * n_cls
        return at

    def flush(self, flat: FlatTables, dstc: Any, todo: list[tuple[Any, ...]]) -> None:
        """Decide, and fill each switch's (unpaused, paused) matrices of ``todo``."""
        codes = self.decide(flat, dstc)
        for base, alt, at_base, line_of, at_alt, n_lines, n_cls in todo:
            for arr, at in ((base, at_base), (alt, at_alt)):
                arr[:] = codes[at:at + n_lines * n_cls].reshape(n_lines, n_cls)[line_of]

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
