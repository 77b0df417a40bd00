"""Every output a switch's rules can choose, per arrival channel and destination class.

For every switch, :class:`Choices` decides every *line* ``(switch, ingress port class, arrival
PCP)`` a frame can reach, for one representative per destination class of the switch
(:class:`hpcfabric.verify.engine.batch.MatchClasses` over the *targets* -- one MAC per destination
column and the probes -- and the switch's own hosts), twice: with the PORT_STATE entries as
installed and with all of them paused (:func:`hpcfabric.verify.scenarios.paused_data_flows`).
A frame meets at most one PORT_STATE entry on a switch, so these two decisions are all a switch
can do with it under *any* set of paused ports. The decisions come from the engine's batch path
(:mod:`hpcfabric.verify.engine.batch`) over all switches at once.

Lines are found by a work list: the host ports' lines first, then every (peer, port class, PCP)
some decided line outputs to, until nothing new appears. Each decision is packed into one
``int64`` *choice*: ``port << SLOT_BITS | PCP + 1`` for one output (PCP -1: untagged), or a final
code (:data:`~hpcfabric.verify.codes.DROP` for no output, a pipeline error or an output no port
takes; :data:`~hpcfabric.verify.codes.PUNT`; :data:`~hpcfabric.verify.codes.FLOOD`).
:meth:`Choices.egress` turns an output into the next state (the peer's arrival channel) or a final
code (delivered, tagged at a host, dead port).
"""

from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

from hpcfabric.verify.codes import DEAD, DELIVER, DROP, FLOOD, PCP_SLOTS, PUNT, TAGGED, UNTAGGED
from hpcfabric.verify.engine import port_classes
from hpcfabric.verify.engine.batch import MatchClasses, decide
from hpcfabric.verify.engine.flat import IN_PORT_MARK, FlatTables
from hpcfabric.verify.scenarios import paused_data_flows

__all__ = ["SLOT_BITS", "SLOT_MASK", "Choices", "egress_offset", "pack_choices"]

SLOT_BITS = 4  # a choice is port << SLOT_BITS | (PCP + 1)
SLOT_MASK = (1 << SLOT_BITS) - 1
LINE_CELLS = 1 << 21  # (line, class) cells decided at once


def egress_offset(choice: np.ndarray) -> np.ndarray:
    """Per single-output ``choice``: its egress (port, PCP slot) as an offset from its switch's first state, int64
    (int32 choices times a width can pass 2^31 at 300k)."""
    choice = choice.astype(np.int64, copy=False)
    return (choice >> SLOT_BITS) * PCP_SLOTS + (choice & SLOT_MASK)


def pack_choices(out_n: np.ndarray, out_port: np.ndarray, out_pcp: np.ndarray, punt: np.ndarray,
                 err: np.ndarray, max_port: np.ndarray | int) -> np.ndarray:
    """Choices (module docstring) from per-element outputs, punts and pipeline errors."""
    port = out_port.astype(np.int64)
    single = (out_n == 1) & (port >= 0) & (port <= max_port)  # NOWHERE_PORT and the like: dropped
    code = np.where(single, port << SLOT_BITS | (out_pcp.astype(np.int64) + 1), DROP)
    code = np.where(out_n > 1, FLOOD, code)
    code = np.where(punt, PUNT, code)
    return np.where(err, DROP, code)


class Choices:
    """The choices of every reachable line of a compiled fabric (module docstring).

    ``relevant``: switch -> data-relevant entries (:func:`hpcfabric.verify.engine.forward_data_flows`);
    ``targets``: the destination MACs (column representatives, then probes).

    After construction: ``line_switch``, ``line_off`` (first cell of each line), ``base`` / ``alt``
    (choices per cell, unpaused / paused), ``state_line`` (line per state, -1 where none), ``cls``
    (switch index x target -> class there), ``lines_at`` (switch -> its line ids). States are
    numbered per switch, port and PCP slot (:meth:`state`).
    """

    def __init__(self, compiled: Any, relevant: dict[str, list[Any]], targets: np.ndarray, *,
                 progress: Callable[[int, int, float], None] | None = None) -> None:
        t0 = time.perf_counter()
        self.compiled = compiled
        fabric = self.fabric = compiled.fabric
        self.targets = np.asarray(targets, dtype=np.uint64)
        self.hid = {h.name: i for i, h in enumerate(fabric.hosts)}
        #: the surviving fabric (compiled.failures): ports whose link is out lead nowhere (DEAD), failed
        #: switches inject nothing
        failures = getattr(compiled, "failures", None)
        self.dead_ports = failures.dead_ports(fabric) if failures else {}
        self.failed_switches = failures.switches if failures else frozenset()
        names = self.names = [s.name for s in fabric.switches]
        self.sw_index = {s: i for i, s in enumerate(names)}
        S = len(names)
        width = np.array([max(fabric.ports(s), default=0) + 1 for s in names], dtype=np.int64)
        self.max_ports = width - 1
        self.state_base = np.concatenate([[0], np.cumsum(width * PCP_SLOTS)])
        self.n_states = int(self.state_base[-1])
        self.timings: dict[str, float] = {}

        # variants: every switch's entries as installed, then paused where that changes anything
        lists = [relevant[s] for s in names]
        self.alt_variant = np.arange(S)
        groups = list(range(S))
        for i, s in enumerate(names):
            flipped, same = paused_data_flows(compiled, s, relevant[s])
            if not same:
                self.alt_variant[i] = len(lists)
                lists.append(flipped)
                groups.append(i)
        self.flat = flat = FlatTables(lists)
        lists = flipped = None  # the paused copies of the entries: the flat arrays hold what the engine reads
        variant_group = np.array(groups, dtype=np.int64)
        back = np.zeros(flat.n_variants, dtype=bool)
        in_port_act = (flat.port == IN_PORT_MARK).any(axis=1)
        np.logical_or.at(back, flat.v, in_port_act[flat.act])
        self.in_port_out = np.zeros(S, dtype=bool)
        np.logical_or.at(self.in_port_out, variant_group, back)
        self.timings["tables"] = time.perf_counter() - t0

        # destination classes: every switch x target, and each host at its own switch
        t1 = time.perf_counter()
        host_sw = np.array([self.sw_index[h.switch] for h in fabric.hosts], dtype=np.int64)
        host_macs = np.array([compiled.plan.host_mac[h.name] for h in fabric.hosts], dtype=np.uint64)
        mc = MatchClasses(flat, variant_group, S, self.targets, host_sw, host_macs)
        self.cls = mc.target_class  # switch x target (int16 while the classes fit: S x targets cells)
        self.host_cls = mc.extra_class  # class of each host at its own switch
        self.n_cls = np.diff(mc.class_start)
        self._vk_start, dstc = mc.candidates()
        self.timings["classes"] = time.perf_counter() - t1

        # ports: peers and port classes
        t1 = time.perf_counter()
        self.port_class: list[dict[int, int]] = []
        self.members: list[dict[int, list[int]]] = []
        cache: dict = {}
        for s in names:
            pc = port_classes(fabric, s, relevant[s], cache)
            self.port_class.append(pc)
            mem: dict[int, list[int]] = {}
            for p, c in sorted(pc.items()):
                mem.setdefault(c, []).append(p)
            self.members.append(mem)
        self.egress_codes = self._egress()
        self.key_width = (max((max(pc.values(), default=0) for pc in self.port_class), default=0) + 1) * PCP_SLOTS
        self.line_key = np.full(self.n_states, -1, dtype=np.int64)  # per state: its line's key (-1: no port)
        for i, pc in enumerate(self.port_class):
            if pc:
                ports = np.array(list(pc), dtype=np.int64)
                at = self.state_base[i] + ports[:, None] * PCP_SLOTS + np.arange(PCP_SLOTS)
                self.line_key[at] = i * self.key_width + np.array(list(pc.values()))[:, None] * PCP_SLOTS + \
                    np.arange(PCP_SLOTS)
        self.timings["ports"] = time.perf_counter() - t1

        # the work list
        t1 = time.perf_counter()
        self.lines_at: dict[str, list[int]] = {}
        known = np.zeros(S * self.key_width, dtype=bool)
        line_sw: list[int] = []
        line_port: list[int] = []
        line_pcp: list[int] = []
        base_parts: list[np.ndarray] = []
        alt_parts: list[np.ndarray] = []
        todo = sorted({(i, self.port_class[i][p], UNTAGGED) for i, s in enumerate(names) if s not in self.failed_switches
                       for p in fabric.host_ports(s)})
        rounds = 0
        for i, c, pcp in todo:
            known[i * self.key_width + c * PCP_SLOTS + pcp + 1] = True
        while todo:
            rounds += 1
            first = len(line_sw)
            for i, c, pcp in todo:
                line_sw.append(i)
                line_port.append(self.members[i][c][0])
                line_pcp.append(pcp)
                self.lines_at.setdefault(names[i], []).append(len(line_sw) - 1)
            sw = np.array(line_sw[first:], dtype=np.int64)
            port = np.array(line_port[first:], dtype=np.int64)
            pcps = np.array(line_pcp[first:], dtype=np.int64)
            host = np.array([fabric.peer(names[a], b).is_host for a, b in zip(sw.tolist(), port.tolist())], dtype=bool)
            own_drop = ~host & self.in_port_out[sw]
            got = [self._decide(flat, dstc, sw, sw, port, pcps, own_drop)]
            got.append(got[0].copy())
            sel = np.flatnonzero(self.alt_variant[sw] != sw)  # lines of switches with PORT_STATE entries
            if len(sel):
                cnt = self.n_cls[sw]
                first_el = np.cumsum(cnt) - cnt
                at = np.repeat(first_el[sel], cnt[sel]) + np.arange(int(cnt[sel].sum())) - \
                    np.repeat(np.cumsum(cnt[sel]) - cnt[sel], cnt[sel])
                got[1][at] = self._decide(flat, dstc, self.alt_variant[sw][sel], sw[sel], port[sel], pcps[sel],
                                          own_drop[sel])
            base_parts.append(got[0])
            alt_parts.append(got[1])
            todo = self._reached(got, sw, known)
            if progress is not None:
                progress(len(line_sw), rounds, time.perf_counter() - t0)
        self.line_switch = np.array(line_sw, dtype=np.int64)
        cells = self.n_cls[self.line_switch]
        self.line_off = np.concatenate([[0], np.cumsum(cells)]).astype(np.int64)
        self.base = np.concatenate(base_parts) if base_parts else np.zeros(0, dtype=np.int32)
        del base_parts
        self.alt = np.concatenate(alt_parts) if alt_parts else np.zeros(0, dtype=np.int32)
        del alt_parts
        # every member port of a line's port class shares the line: look states up by their line key
        line_of_key = np.full(S * self.key_width, -1, dtype=np.int64)
        line_of_key[self.line_key[self.state_base[self.line_switch] + np.array(line_port, dtype=np.int64) * PCP_SLOTS
                                  + np.array(line_pcp, dtype=np.int64) + 1]] = np.arange(len(line_sw))
        self.state_line = np.full(self.n_states, -1, dtype=np.int64)
        ported = self.line_key >= 0
        self.state_line[ported] = line_of_key[self.line_key[ported]]
        self.rounds = rounds
        self.timings["lines"] = time.perf_counter() - t1

    # -- building -----------------------------------------------------------
    def _decide(self, flat: FlatTables, dstc: Any, variant: np.ndarray, sw: np.ndarray, port: np.ndarray,
                pcps: np.ndarray, own_drop: np.ndarray) -> np.ndarray:
        """Choices of lines (``variant``, ``port``, ``pcps``) over every class of their switch, line by line,
        ``LINE_CELLS`` cells' worth of lines at a time (int32: ports << SLOT_BITS and DELIVER - host fit)."""
        cnt = self.n_cls[sw]
        ends = np.cumsum(cnt)
        out = np.empty(int(ends[-1]) if len(ends) else 0, dtype=np.int32)
        a = 0
        while a < len(sw):
            b = max(a + 1, int(np.searchsorted(ends, (ends[a] - cnt[a]) + LINE_CELLS, side="right")))
            c = cnt[a:b]
            el_line = np.repeat(np.arange(b - a), c)
            local = np.arange(int(c.sum())) - np.repeat(np.cumsum(c) - c, c)
            el_vk = self._vk_start[variant[a:b]][el_line] + local
            wild = flat.wild_index(variant[a:b], port[a:b])
            n, p, pcp, punt, err = decide(flat, wild, dstc, variant[a:b], port[a:b], pcps[a:b], own_drop[a:b],
                                          el_line, el_vk)
            out[ends[a] - cnt[a]:ends[b - 1]] = pack_choices(n, p, pcp, punt, err, self.max_ports[sw[a:b]][el_line])
            a = b
        return out

    def _reached(self, got: list[np.ndarray], sw: np.ndarray, known: np.ndarray) -> list[tuple[int, int, int]]:
        """New lines that the single outputs among the choices ``got`` (cells of lines at switches ``sw``)
        lead to; ``known``: per line key (:attr:`line_key` of a state) True once listed."""
        ends = np.cumsum(self.n_cls[sw])
        keys = []
        for codes in got:
            for c0 in range(0, len(codes), LINE_CELLS):
                c1 = min(len(codes), c0 + LINE_CELLS)
                cell_sw = sw[np.searchsorted(ends, np.arange(c0, c1), side="right")]
                x = codes[c0:c1].astype(np.int64)
                keep = x >= 0
                nxt = self.egress(cell_sw[keep], x[keep])  # next state, or a final code (host, dead port)
                keys.append(np.unique(self.line_key[nxt[nxt >= 0]]))  # next states are ports' states: keys >= 0
        key = np.unique(np.concatenate(keys)) if keys else np.zeros(0, dtype=np.int64)
        key = key[~known[key]]
        known[key] = True
        j, rest = key // self.key_width, key % self.key_width
        return list(zip(j.tolist(), (rest // PCP_SLOTS).tolist(), (rest % PCP_SLOTS - 1).tolist()))

    def _egress(self) -> np.ndarray:
        """Per (switch, port, PCP slot): the next state (>= 0) or a final code."""
        fabric = self.fabric
        codes = np.full(self.n_states, DEAD, dtype=np.int64)
        for s in self.names:
            if s in self.failed_switches:
                continue  # every port DEAD
            dead = self.dead_ports.get(s, ())
            for p, peer in fabric.ports(s).items():
                at = self.state(s, p, UNTAGGED)
                if p in dead:
                    continue
                if peer.is_host:
                    codes[at:at + PCP_SLOTS] = TAGGED
                    codes[at] = DELIVER - self.hid[peer.node]
                else:
                    first = self.state(peer.node, peer.port, UNTAGGED)
                    codes[at:at + PCP_SLOTS] = np.arange(first, first + PCP_SLOTS)
        return codes

    # -- lookups ------------------------------------------------------------
    def state(self, switch: str, port: int, pcp: int) -> int:
        """The state of a frame arriving at ``switch`` on ``port`` with ``pcp`` (UNTAGGED: -1)."""
        return int(self.state_base[self.sw_index[switch]]) + port * PCP_SLOTS + pcp + 1

    def decode(self, state: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(switch index, port, PCP) per state."""
        sw = np.searchsorted(self.state_base, state, side="right") - 1
        off = state - self.state_base[sw]
        return sw, off // PCP_SLOTS, off % PCP_SLOTS - 1

    def egress(self, sw: np.ndarray, choice: np.ndarray) -> np.ndarray:
        """Next state or final code of single-output ``choice`` s made at switches ``sw``."""
        return self.egress_codes[self.state_base[sw] + egress_offset(choice)]

    @property
    def lines(self) -> int:
        return len(self.line_switch)

    def switch_classes(self) -> int:
        """Destination classes summed over the switches."""
        return int(self.n_cls.sum())

    def own_classes(self, switch: str) -> tuple[list[int], np.ndarray]:
        """(own host ids, their classes) at ``switch``."""
        own = [self.hid[h.name] for h in self.fabric.hosts_on(switch)]
        return own, self.host_cls[np.array(own, dtype=np.int64)] if own else np.zeros(0, dtype=np.int64)
