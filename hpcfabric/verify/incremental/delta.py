"""The union proof of a change: new tables on a few switches proven by walking only what changed.

A failure repair changes a few hundred of a fabric's thousands of switches, and only for a few
destinations; walking the whole fabric again takes a minute at Table III. :class:`ProofState` keeps,
from one full union walk (:mod:`hpcfabric.verify.union.proof`: every destination column from every
injection, no symmetry reduction -- a failure breaks symmetries), what a change needs:

* ``R[c]``: per destination column, the states its walk reached (a bit set);
* ``E``: the channel dependency edges, with a rank of every channel that grows along them.

:meth:`ProofState.check` takes the tables after a change (``compiled``, its ``failures`` in force) and
the switches whose tables changed. It decides those switches again (:mod:`hpcfabric.verify.incremental.redecide`;
every state some walk reached there, unpaused and paused) and calls (column, state) *changed* when its
choice differs or its output now leads elsewhere (a link out, or back). Invariant of the base: ``R[c]``
is closed under the current choices, and every outcome and dependency of its states was checked and is
in ``E``. So walking column ``c`` from its changed states in ``R[c]`` through the new choices, stopping
at unchanged states of ``R[c]`` -- what follows them is the old, proven walk --
(:mod:`hpcfabric.verify.incremental.deltawalk`) finds every new outcome and every new dependency:

* **delivery**: every outcome of an expanded node is the column's own (a frame at a switch the failures
  cut off from its destination excepted: no pair to deliver);
* **deadlock and loop freedom**: ``E`` plus the new dependencies is acyclic. ``E`` keeps the edges of the
  tables before the change too: a superset of the new graph -- sound, possibly cautious. A new edge
  from a lower to a higher rank cannot close a cycle; otherwise the whole graph is checked;
* **every moment of the update** (``mix``): at a changed switch the old choices are followed as well,
  so no mix of old and new tables -- whatever order the switches take their bundles in -- loops a frame
  or closes a dependency cycle (dependencies only: what the old tables send into a failed link is lost,
  as it was before the repair).

A changed state that the new tables no longer reach is still walked (the walk cannot tell), which can
report failures that do not happen. So a failing check is checked again ``exact``: the changed columns
walked from every injection, no state assumed. A cycle that remains may still lean on edges the old
tables made (``E`` is a superset): :meth:`ProofState.build` on the new tables settles it.
:meth:`ProofState.commit` makes a checked change the base. New entries that tell hosts of one
destination column apart cannot be proven against the base: :class:`NotIncremental`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Iterable

import numpy as np

from hpcfabric.errors import VerificationError
from hpcfabric.topology.failures import NO_FAILURES
from hpcfabric.verify.union.choices import egress_offset
from hpcfabric.verify.codes import PCP_SLOTS
from hpcfabric.verify.union.pairs import structural_splits_of
from hpcfabric.verify.engine import forward_data_flows
from hpcfabric.verify.incremental.deltawalk import ChangeWalk, NodeSet, entries
from hpcfabric.verify.incremental.quotient import DenseReach, quotient_base
from hpcfabric.verify.incremental.survive import link_ends, surviving
from hpcfabric.verify.incremental.depgraph import DepGraph, not_in, union, unique
from hpcfabric.verify.union.pairs import Inputs, cdg_verdict, channel_namer, prepare
from hpcfabric.verify.incremental.redecide import Prior, SwitchDecisions, decide_switches
from hpcfabric.verify.union.unions import reach_index, walk_union

__all__ = ["NotIncremental", "DeltaReport", "ProofState", "surviving"]


#: bit rows a node set of a check holds at most (3 at a time); the columns beyond in sorted arrays (at Table III
#: every column fits: 2,071 x 74 KB; at 300k ~390 of 16,668 columns x 1.35 MB)
NODESET_BYTES = 1 << 29


class NotIncremental(Exception):
    """The change cannot be proven against the base (new entries split a destination column)."""


@dataclass
class DeltaReport:
    """What :meth:`ProofState.check` found (``as_dict`` is JSON-ready)."""

    switches: int  # switches decided again
    columns: int  # destination columns with a changed (column, state)
    starts: int  # nodes the walk started from
    nodes: int  # nodes expanded
    new_edges: int  # dependencies not in the base graph
    undelivered: dict[str, int]
    failures: list[dict[str, Any]]
    acyclic: bool
    cycle: tuple[str, ...] | None
    below: int  # nodes of the old walk below a change (their reach recomputed)
    full_check: bool  # a new edge went against the ranks: searched for a way back
    seconds: float
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def delivered(self) -> bool:
        return not self.undelivered

    @property
    def ok(self) -> bool:
        return self.delivered and self.acyclic

    def as_dict(self) -> dict[str, Any]:
        return {"method": "incremental union proof (changed destinations and states)", "ok": self.ok,
                "delivered": self.delivered, "acyclic": self.acyclic, "switches": self.switches,
                "columns": self.columns, "starts": self.starts, "nodes": self.nodes, "new_edges": self.new_edges,
                "undelivered": dict(self.undelivered), "failures": list(self.failures),
                "cycle": list(self.cycle) if self.cycle else None, "below": self.below,
                "full_check": self.full_check, "seconds": round(self.seconds, 3),
                "timings": {k: round(v, 3) for k, v in self.timings.items()}}


class ProofState:
    """A base for incremental proofs (module docstring); :meth:`build` makes one."""

    def __init__(self, inputs: Inputs, compiled: Any, reached: Any, edges: np.ndarray, counts: np.ndarray,
                 report: dict[str, Any], rank: np.ndarray | None = None) -> None:
        self.inputs, self.ch, self.cols = inputs, inputs.ch, inputs.cols
        ch = self.ch
        self.compiled = self.built = compiled  # the tables in force; the tables the base was built on
        self.relevant = dict(inputs.relevant)
        self.reach, self.rs_of = reach_index(ch)
        self.reached = reached  # DenseReach or QuotientReach (:mod:`hpcfabric.verify.incremental.quotient`)
        #: reach outside the bit set: node keys (column * states + state) of states without a base line, sorted
        self.extra = np.zeros(0, dtype=np.int64)
        self._extra_states: tuple[np.ndarray, np.ndarray] = (self.extra, self.extra)  # (extra, its states): a cache
        self.graph = DepGraph(edges, counts, ch.n_states, rank)  # the dependency graph, exactly, with edge counts
        self.report = report
        #: switches decided again (a committed change, or states no walk reached before)
        self.switches: dict[str, SwitchDecisions] = {}
        self.overlaid = np.zeros(len(ch.names), dtype=bool)
        self.back_ok = ~ch.in_port_out.copy()
        self.host_state = np.zeros(ch.n_states, dtype=bool)
        fabric = ch.fabric
        for s in ch.names:
            first = int(ch.state_base[ch.sw_index[s]])
            for p in fabric.host_ports(s):
                self.host_state[first + p * PCP_SLOTS: first + (p + 1) * PCP_SLOTS] = True
        n_cols = len(self.cols.want)
        self.col_switch = np.full(n_cols, -1, dtype=np.int64)  # host columns: their switch index
        self.col_switch[:self.cols.n_host_columns] = self.cols.col_sw
        self.egress, self.comp = surviving(ch, getattr(compiled, "failures", None))
        self.name = channel_namer(ch)
        self._pending: dict[str, Any] | None = None
        self._decided: dict[str, tuple[Any, SwitchDecisions]] = {}  # switch -> (its table, decisions): reuse
        self._surviving: dict[Any, tuple[np.ndarray, np.ndarray]] = {}  # failures -> surviving(): reuse
        self._buffers: list[np.ndarray] = []  # node sets' zeroed bit buffers (nodeset), touched now, not mid-repair
        width = (ch.n_states + 7) // 8
        self.nodeset_rows = max(1, NODESET_BYTES // width)  # bit rows of a node set (a test may lower the budget)
        for _ in range(3):  # rows for every column, or as many as NODESET_BYTES holds (300k: ~390 of 16,668)
            buf = np.empty((min(len(self.cols.want), self.nodeset_rows), width), dtype=np.uint8)
            buf.fill(0)
            self._buffers.append(buf)
        self._lent: list[NodeSet] = []

    @classmethod
    def build(cls, compiled: Any, *, symmetry: bool = True) -> "ProofState":
        """The union walk of ``compiled`` (every column's reach recorded) as a base; ``report`` holds its verdict
        (``ok``, ``undelivered``, ``cycle``, ...). ``symmetry``: one column per orbit when the quotient serves
        (:mod:`hpcfabric.verify.incremental.quotient`: same reach, graph and verdict), else every column."""
        t0 = time.perf_counter()
        inputs = prepare(compiled, every_port=True)
        ch, cols = inputs.ch, inputs.cols
        timings = dict(inputs.timings)
        got, info = None, {"used": False, "why": "not asked"}
        if getattr(compiled, "failures", None):  # an automorphism need not map failed links onto failed links
            info["why"] = "failures in force"
        elif symmetry:
            got, info = quotient_base(inputs, timings)
        rank = None
        if got is not None:
            reached, walk, rank, cdg = got
        else:
            start_col, start_state = cols.starts()
            t1 = time.perf_counter()
            walk = walk_union(ch, cols.cls, cols.want, cols.probe, start_col, start_state, loops=False, record=True,
                              components=cols.components)
            cdg = cdg_verdict(ch, walk.edges)
            timings["walk"] = time.perf_counter() - t1
            reached = DenseReach(walk.reached)  # type: ignore[arg-type]
        report = {"ok": not walk.bad and not walk.bad_probe and cdg["cycle"] is None,
                  "undelivered": dict(walk.bad), "probe_failures": dict(walk.bad_probe), "acyclic": cdg["cycle"] is None,
                  "cycle": list(cdg["cycle"]) if cdg["cycle"] else None, "channels": cdg["channels"],
                  "dependencies": len(walk.edges), "unreachable": cols.unreachable, "symmetry": info,
                  "seconds": round(time.perf_counter() - t0, 3), "timings": {k: round(v, 3) for k, v in timings.items()}}
        return cls(inputs, compiled, reached, walk.edges, walk.counts, report, rank)  # type: ignore[arg-type]

    def nodeset(self) -> NodeSet:
        """An empty node set for a walk of this check (buffers reused: :meth:`_release` at the check's end)."""
        got = NodeSet(len(self.cols.want), self.ch.n_states, self._buffers.pop() if self._buffers else None,
                      self.nodeset_rows)
        self._lent.append(got)
        return got

    def _release(self) -> None:
        self._buffers.extend(s.clear() for s in self._lent)
        self._lent = []

    # -- reach ----------------------------------------------------------------
    def in_reach(self, c: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Is state ``x`` in the reach of column ``c`` (the bit set; states without a base line: ``extra``)?"""
        out = np.zeros(len(c), dtype=bool)
        rs = self.rs_of[x]
        ok = rs >= 0
        r = rs[ok]
        out[ok] = self.reached.has(c[ok], r)
        if len(self.extra) and (~ok).any():
            keys = c[~ok] * self.ch.n_states + x[~ok]
            at = np.minimum(np.searchsorted(self.extra, keys), len(self.extra) - 1)
            out[~ok] = self.extra[at] == keys
        return out

    def states_in_reach(self, si: int) -> np.ndarray:
        """The states of switch index ``si`` some column's reach holds (a base line, or ``extra``)."""
        ch = self.ch
        lo, hi = int(ch.state_base[si]), int(ch.state_base[si + 1])
        states = np.flatnonzero(ch.state_line[lo:hi] >= 0) + lo
        if len(self.extra):
            if self._extra_states[0] is not self.extra:  # the states of ``extra``, sorted: one search per switch
                self._extra_states = (self.extra, unique(self.extra % ch.n_states))
            x = self._extra_states[1]
            states = union(states, x[np.searchsorted(x, lo):np.searchsorted(x, hi)])
        return states

    # -- choices --------------------------------------------------------------
    def decide(self, compiled: Any, names: list[str], relevant: dict[str, list[Any]],
               extra: dict[str, np.ndarray] | None = None, prior: dict[str, Prior] | None = None
               ) -> dict[str, SwitchDecisions]:
        return decide_switches(self.ch, self.cols, self.inputs.host_macs, compiled, names, relevant, extra, prior)

    def prior(self, moved: dict[str, tuple[set, set]]) -> dict[str, Prior]:
        """The base's decisions of the switches of ``moved`` (their data-relevant entries in and out since the
        base), for :meth:`decide` to keep what a change leaves alone (:class:`~.redecide.Prior`)."""
        return {s: Prior(added | gone, bool(self.back_ok[self.ch.sw_index[s]]), partial(self.class_codes, s))
                for s, (added, gone) in moved.items()}

    def _built_decisions(self, s: str) -> SwitchDecisions:
        """The decisions of ``s``'s table as built: the base's lines (every state a walk reached then)."""
        ch = self.ch
        si = ch.sw_index[s]
        lo = int(ch.state_base[si])
        states = np.flatnonzero(ch.state_line[lo:int(ch.state_base[si + 1])] >= 0) + lo
        cells = ch.line_off[ch.state_line[states]][:, None] + np.arange(int(ch.n_cls[si]))
        return SwitchDecisions(self.inputs.relevant[s], self.cols.cls[si].astype(np.int64), states,
                               ch.base[cells], ch.alt[cells], not bool(ch.in_port_out[si]))

    def decide_more(self, name: str, states: np.ndarray) -> SwitchDecisions:
        """``name`` (unchanged by the change under way) decided again with ``states`` added, kept in the base."""
        old = self.switches.get(name)
        extra = states if old is None else union(old.states, states)
        got = self.decide(self.compiled, [name], {name: self.relevant[name]}, {name: extra})[name]
        self.switches[name] = got
        self.overlaid[self.ch.sw_index[name]] = True
        return got

    def current(self, c: np.ndarray, x: np.ndarray, sw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(unpaused, paused) choices of nodes (column ``c``, state ``x`` at switch index ``sw``) in the base."""
        walk = ChangeWalk(self, self.compiled, {}, egress=self.egress, comp=self.comp, mix=False)
        return walk.choices(c, x, sw)

    def class_codes(self, s: str, states: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(unpaused, paused) choices of base-reached ``states`` at ``s`` per class there, and each column's class."""
        got = self.switches.get(s)
        si = self.ch.sw_index[s]
        if got is not None:
            b, a = got.matrix(states)
            return b, a, got.col_cls
        ch = self.ch
        cells = ch.line_off[ch.state_line[states]][:, None] + np.arange(int(ch.n_cls[si]))
        return ch.base[cells], ch.alt[cells], self.cols.cls[si].astype(np.int64)

    # -- a change -------------------------------------------------------------
    def check(self, compiled: Any, changed: Iterable[str], *, mix: bool = True, max_failures: int = 20) -> DeltaReport:
        """Prove ``compiled`` -- the whole fabric's tables after the change, ``compiled.failures`` in force --
        whose tables differ from the base's at the ``changed`` switches only (module docstring);
        :meth:`commit` then makes it the base."""
        t0 = time.perf_counter()
        timings: dict[str, float] = {}
        ch = self.ch
        fabric = ch.fabric
        old_f, new_f = getattr(self.compiled, "failures", None), getattr(compiled, "failures", None)
        old_dead = old_f.dead_ports(fabric) if old_f else {}
        new_dead = new_f.dead_ports(fabric) if new_f else {}
        new_failed = new_f.switches if new_f else frozenset()
        old_failed = old_f.switches if old_f else frozenset()
        moved = {s for s in set(old_dead) | set(new_dead) if old_dead.get(s) != new_dead.get(s)}
        moved |= {peer.node for s in new_failed ^ old_failed for peer in fabric.fabric_ports(s).values()}
        names = sorted((set(changed) | moved) - set(new_failed))
        relevant = dict(self.relevant)
        new = {}
        todo = []
        for name in names:  # a table as built (a recovery): the base's own decisions; one decided before: reused
            flows = compiled.tables[name].flows
            got = self._decided.get(name)
            if flows == self.built.tables[name].flows:
                new[name] = self._built_decisions(name)
                relevant[name] = self.inputs.relevant[name]
            elif got is not None and got[0] == flows:
                new[name] = got[1]
                relevant[name] = got[1].relevant
            else:
                todo.append(name)
        relevant.update(forward_data_flows(compiled, "the incremental proof", VerificationError, actions=True,
                                           only=set(todo)))
        moved = {}  # per switch decided again: its data-relevant entries (in, out) since the base
        for name in todo:
            was, now = set(self.relevant.get(name, ())), set(relevant[name])
            moved[name] = (now - was, was - now)
        self._splits_unchanged(moved)
        timings["entries"] = time.perf_counter() - t0
        t1 = time.perf_counter()
        if todo:
            keep = getattr(compiled, "pause_reaction", None) != "switch"  # resubmit chains: every class decided
            new.update(self.decide(compiled, todo, relevant, prior=self.prior(moved) if keep else None))
            for name in todo:
                self._decided[name] = (compiled.tables[name].flows, new[name])
        timings["decide"] = time.perf_counter() - t1
        t1 = time.perf_counter()
        got = self._surviving.get(new_f or NO_FAILURES)
        if got is None:
            got = self._surviving[new_f or NO_FAILURES] = surviving(ch, new_f)
            if len(self._surviving) > 8:
                self._surviving.pop(next(iter(self._surviving)))
        egress, comp = got
        sc, ss = self._changed(names, new, egress)
        gone = [ch.sw_index[s] for s in new_failed - old_failed]  # a newly failed switch: its whole reach goes
        if gone:
            gc, gs = self._reach_at(gone)
            sc, ss = np.concatenate([sc, gc]), np.concatenate([ss, gs])
        timings["changed"] = time.perf_counter() - t1
        t1 = time.perf_counter()
        old = ChangeWalk(self, self.compiled, {}, egress=self.egress, comp=self.comp, mix=False)
        below = old.closure(sc, ss)  # the old walk's descendants of the changed nodes: their reach may change
        ec, es = entries(self, old, below, new_failed)
        back = sorted(old_failed - new_failed)  # a switch back: its hosts inject again, into every column
        if back:
            rc, rs = self._injections(back)
            ec, es = np.concatenate([ec, rc]), np.concatenate([es, rs])
        timings["below"] = time.perf_counter() - t1
        t1 = time.perf_counter()
        walk = ChangeWalk(self, compiled, new, egress=egress, comp=comp, mix=mix, max_failures=max_failures)
        walk.run(ec, es, below)
        timings["walk"] = time.perf_counter() - t1
        t1 = time.perf_counter()
        change = self.graph.updated(old.removed, walk.added)  # an overlay over the base graph: O(change)
        fresh = change.fresh
        mixed = self.graph.missing(walk.mixed_edges(), change)
        cycle, full = self.graph.cycle(change, union(fresh, mixed), self.name)
        timings["cdg"] = time.perf_counter() - t1
        self._pending = {"compiled": compiled, "new": new, "relevant": relevant, "below": below.keys(),
                         "visited": walk.visited(), "change": change,
                         "egress": egress, "comp": comp}
        self._release()
        return DeltaReport(len(names), len(unique(sc)), len(ec), walk.nodes, len(fresh), walk.bad, walk.describe(),
                           cycle is None, cycle, len(below.keys()), full, time.perf_counter() - t0, timings)

    def _reach_at(self, switches: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """(column, state) of every node of a reach at the switch indices given."""
        n_cols = len(self.cols.want)
        out_c, out_s = [], []
        for si in switches:
            states = self.states_in_reach(si)
            c = np.tile(np.arange(n_cols), len(states))
            x = np.repeat(states, n_cols)
            inr = self.in_reach(c, x)
            out_c.append(c[inr])
            out_s.append(x[inr])
        cat = (lambda parts: np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, dtype=np.int64))
        return cat(out_c), cat(out_s)

    def _injections(self, switches: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(column, state) of every injection from the hosts of ``switches`` (every host port; a host's own
        single column left out: the self pair is no pair), probes included."""
        ch, cols = self.ch, self.cols
        fabric = ch.fabric
        n_cols = len(cols.want)
        out_c, out_s = [], []
        for s in switches:
            for p, peer in sorted(fabric.host_ports(s).items()):
                c = np.arange(n_cols)
                own = np.zeros(n_cols, dtype=bool)
                own[:cols.n_host_columns] = np.array(cols.single[:cols.n_host_columns], dtype=bool) & \
                    (cols.host == ch.hid[peer.node])
                out_c.append(c[~own])
                out_s.append(np.full(int((~own).sum()), ch.state(s, p, -1), dtype=np.int64))
        cat = (lambda parts: np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, dtype=np.int64))
        return cat(out_c), cat(out_s)

    def upstream(self, states: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per fabric-arrival state: (the switch index its frames come from, -1: no peer; the state at that
        switch -- its egress port and PCP slot -- that sends into it)."""
        ch = self.ch
        fabric = ch.fabric
        if not hasattr(self, "_up"):
            up = np.full(ch.n_states, -1, dtype=np.int64)
            at = np.full(ch.n_states, -1, dtype=np.int64)
            a, b = link_ends(ch)
            pa = np.array([link.a_port for link in fabric.links], dtype=np.int64)
            pb = np.array([link.b_port for link in fabric.links], dtype=np.int64)
            slot = np.arange(PCP_SLOTS)
            for (si, sp), (ti, tp) in (((a, pa), (b, pb)), ((b, pb), (a, pa))):  # frames from si:sp arrive at ti:tp
                into = (ch.state_base[ti] + tp * PCP_SLOTS)[:, None] + slot
                up[into] = si[:, None]
                at[into] = (ch.state_base[si] + sp * PCP_SLOTS)[:, None] + slot
            self._up, self._up_at = up, at
        return self._up[states], self._up_at[states]

    def _changed(self, names: list[str], new: dict[str, SwitchDecisions],
                 egress: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(column, state) pairs of ``R[c]`` at the ``names`` switches whose choice or whose output's next state
        changed."""
        ch = self.ch
        out_c, out_s = [], []
        for s in names:
            si = ch.sw_index[s]
            dec = new[s]
            lo = int(ch.state_base[si])
            states = np.intersect1d(dec.states, self.states_in_reach(si), assume_unique=True)
            if not len(states):
                continue
            ob, oa, old_cls = self.class_codes(s, states)
            nb, na = dec.matrix(states)
            width = int(dec.col_cls.max(initial=0)) + 1
            uniq, inv = np.unique(old_cls * width + dec.col_cls, return_inverse=True)
            po, pn = uniq // width, uniq % width
            diff = (ob[:, po] != nb[:, pn]) | (oa[:, po] != na[:, pn])
            for codes in (nb[:, pn], na[:, pn], ob[:, po], oa[:, po]):  # outputs whose link went out or came back
                single = codes >= 0
                at = lo + egress_offset(codes)
                diff |= single & (self.egress[np.where(single, at, 0)] != egress[np.where(single, at, 0)])
            r, k = np.nonzero(diff)  # (state, class pair) whose choice or output moved: then its columns
            inv = inv.reshape(-1)
            by_pair = np.argsort(inv, kind="stable")
            size = np.bincount(inv, minlength=len(uniq))
            first, many = (np.cumsum(size) - size)[k], size[k]
            row = np.repeat(np.arange(len(r)), many)
            c = by_pair[np.repeat(first, many) + np.arange(len(row)) - np.repeat(np.cumsum(many) - many, many)]
            x = states[r[row]]
            inr = self.in_reach(c, x)
            out_s.append(x[inr])
            out_c.append(c[inr])
        cat = (lambda parts: np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, dtype=np.int64))
        return cat(out_c), cat(out_s)

    def commit(self) -> None:
        """Make the change last :meth:`check`-ed the base."""
        p = self._pending
        if p is None:
            raise ValueError("nothing checked to commit")
        ch = self.ch
        self.compiled, self.relevant = p["compiled"], p["relevant"]
        for s, dec in p["new"].items():
            self.switches[s] = dec
            self.overlaid[ch.sw_index[s]] = True
            self.back_ok[ch.sw_index[s]] = dec.back_ok
        for keys, on in ((p["below"], False), (p["visited"], True)):  # the reach below the change, walked anew
            c, x = keys // ch.n_states, keys % ch.n_states
            rs = self.rs_of[x]
            ok = rs >= 0
            self.reached.set(c[ok], rs[ok], on)
            if on:
                self.extra = union(self.extra, keys[~ok])
            else:
                self.extra = not_in(self.extra, unique(keys[~ok]))
        self.graph.commit(p["change"])
        self.egress, self.comp = p["egress"], p["comp"]
        self._pending = None

    def snapshot(self) -> tuple[Any, ...]:
        """What :meth:`commit` changes, copied (the reach: a mark -- in the journal of the bytes commits changed,
        not a copy of ~200 MB at Table III; the quotient's flips): :meth:`restore` goes back to it. Snapshots nest
        (restore the later first); :meth:`forget` once none is needed any more."""
        return (self.compiled, dict(self.relevant), dict(self.switches), self.overlaid.copy(), self.back_ok.copy(),
                self.reached.mark(), self.extra, self.graph.snapshot(), self.egress, self.comp)

    def restore(self, snap: tuple[Any, ...]) -> None:
        (self.compiled, self.relevant, self.switches, self.overlaid, self.back_ok, mark, self.extra,
         graph, self.egress, self.comp) = snap
        self.graph.restore(graph)
        self.reached.undo(mark)  # the commits since the snapshot undone
        self._pending = None

    def forget(self) -> None:
        """No snapshot taken so far will be restored: the journal of changed reach bytes is dropped."""
        self.reached.forget()

    def _splits_unchanged(self, moved: dict[str, tuple[set, set]]) -> None:
        """Columns stay columns: no entry of a changed switch tells the hosts of a shared column apart (``moved``:
        per switch decided again, its data-relevant entries in and out since the base)."""
        merged = {t for t, ids in self.inputs.groups.items() if len(ids) > 1 and t not in self.cols.split}
        if not merged or not moved:
            return
        # entries the base has not seen there (the base's own entries split no merged column)
        new = {s: list(added) for s, (added, _) in moved.items() if added}
        if not new:
            return
        got = structural_splits_of(new, self.inputs.host_macs, self.inputs.groups)
        if got & merged:
            raise NotIncremental(f"new entries tell the hosts of {sorted(got & merged)[0]} apart: prove the tables whole")

