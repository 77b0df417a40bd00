"""The walk of a change (:mod:`hpcfabric.verify.incremental.delta`): destination columns walked through new decisions
from the states that changed, stopping where the old, proven walk takes over.

A node is (column, state). :class:`ChangeWalk` expands nodes level by level, vectorised: per node the
choices (unpaused, paused) of its switch -- the switches the change decided again, the base's
committed overlay, else the base :class:`~hpcfabric.verify.union.choices.Choices` -- and where each output
leads under the failures in force. A final outcome other than the column's own is a failure (a frame
at a switch the failures cut off from its destination excepted); a fabric arrival's next hop is a
dependency. A next node is expanded unless it is unchanged and in the base's reach of its column
(``prune``) or already seen. With ``mix``, nodes at a changed switch also follow the switch's old
choices: those walks are the transient mixes of an update, kept as dependencies only (a frame the old
tables sent into a failed link is lost, as it was before).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hpcfabric.verify.union.choices import SLOT_BITS, egress_offset
from hpcfabric.verify.codes import DEAD, DROP, PCP_SLOTS, outcome_kind
from hpcfabric.verify.incremental.depgraph import union, unique
from hpcfabric.verify.incremental.redecide import SwitchDecisions
from hpcfabric.verify.union.unions import Counter

__all__ = ["ChangeWalk", "NodeSet", "SortedKeys", "entries", "set_bits"]



def set_bits(bits: np.ndarray, rows: np.ndarray, pos: np.ndarray, on: bool) -> None:
    """Set (``on``) or clear bit ``pos & 7`` of byte ``pos >> 3`` in row ``rows`` of ``bits`` (uint8, 2-D), many at
    once: bits of one byte are combined first (``np.bitwise_or.at`` is slow)."""
    if not len(rows):
        return
    flat = bits.reshape(-1)
    byte = rows.astype(np.int64) * bits.shape[1] + (pos >> 3)
    order = np.argsort(byte, kind="stable")
    byte = byte[order]
    val = (1 << (pos[order] & 7)).astype(np.uint8)
    starts = np.flatnonzero(np.concatenate([[True], byte[1:] != byte[:-1]]))
    val = np.bitwise_or.reduceat(val, starts)
    byte = byte[starts]
    if on:
        flat[byte] |= val
    else:
        flat[byte] &= ~val


class NodeSet:
    """A set of nodes (column, state): a row of bits per column that holds some (rows given out as columns come,
    at most ``max_rows``: a change can touch every one of a 300k fabric's columns, ~1.4 MB of bits each), the
    columns beyond in sorted key arrays (:class:`SortedKeys`); adding and testing many at once."""

    def __init__(self, n_cols: int, n_states: int, bits: np.ndarray | None = None, max_rows: int | None = None) -> None:
        self.n = n_states
        #: zeroed rows to reuse (:meth:`clear` zeroes them again): touching fresh pages costs more than the walk
        self.bits = bits if bits is not None else np.zeros((0, (n_states + 7) // 8), dtype=np.uint8)
        self.slot = np.full(n_cols, -1, dtype=np.int64)  # per column: its row, -1 none (yet), -2 in ``more``
        self.max_rows = n_cols if max_rows is None else max_rows
        self.used = 0
        self.more = SortedKeys()
        self.parts: list[np.ndarray] = []

    def clear(self) -> np.ndarray:
        """Empty the set; its buffer, all zeros again, for another set of the same shape."""
        keys = self.keys()
        row = self.slot[keys // self.n]
        at = row >= 0
        self.bits[row[at], (keys[at] % self.n) >> 3] = 0
        self.slot[:] = -1
        self.used = 0
        self.more = SortedKeys()
        self.parts = []
        return self.bits

    def has(self, keys: np.ndarray) -> np.ndarray:
        c, x = keys // self.n, keys % self.n
        row = self.slot[c]
        out = np.zeros(len(keys), dtype=bool)
        ok = row >= 0
        out[ok] = (self.bits[row[ok], x[ok] >> 3] >> (x[ok] & 7).astype(np.uint8)) & 1 == 1
        far = row == -2
        if far.any():
            out[far] = self.more.has(keys[far])
        return out

    def add(self, keys: np.ndarray) -> np.ndarray:
        """Add ``keys``; the ones that were not in yet (each once)."""
        keys = unique(keys)
        cols = unique(keys // self.n)
        cols = cols[self.slot[cols] == -1]
        if len(cols):
            rows = cols[:max(0, self.max_rows - self.used)]
            self.slot[cols[len(rows):]] = -2
            need = self.used + len(rows)
            if need > len(self.bits):
                grown = np.zeros((min(max(need, 2 * len(self.bits)), self.max_rows), self.bits.shape[1]),
                                 dtype=np.uint8)
                grown[:self.used] = self.bits[:self.used]
                self.bits = grown
            self.slot[rows] = self.used + np.arange(len(rows))
            self.used = need
        new = keys[~self.has(keys)]
        row = self.slot[new // self.n]
        at = row >= 0
        set_bits(self.bits, row[at], new[at] % self.n, True)
        if not at.all():
            self.more.add(new[~at])
        self.parts.append(new)
        return new

    def keys(self) -> np.ndarray:
        return np.concatenate(self.parts) if self.parts else np.zeros(0, dtype=np.int64)


class SortedKeys:
    """A set of int64 keys as a few sorted arrays of growing size (merged when one grows as big as the one
    before): membership by a binary search in each."""

    def __init__(self) -> None:
        self.runs: list[np.ndarray] = []

    def has(self, keys: np.ndarray) -> np.ndarray:
        out = np.zeros(len(keys), dtype=bool)
        for run in self.runs:
            at = np.minimum(np.searchsorted(run, keys), len(run) - 1)
            out |= run[at] == keys
        return out

    def add(self, new: np.ndarray) -> None:
        """Add sorted keys none of which is in yet."""
        self.runs.append(new)
        while len(self.runs) > 1 and len(self.runs[-2]) <= 2 * len(self.runs[-1]):
            last = self.runs.pop()
            self.runs[-1] = np.sort(np.concatenate([self.runs[-1], last]))


class ChangeWalk:
    """One change's walk over a :class:`~hpcfabric.verify.incremental.delta.ProofState` (module docstring)."""

    def __init__(self, state: Any, compiled: Any, new: dict[str, SwitchDecisions], *, egress: np.ndarray,
                 comp: np.ndarray, mix: bool, max_failures: int = 20) -> None:
        self.state, self.compiled, self.new = state, compiled, new
        self.egress, self.comp, self.mix = egress, comp, mix
        ch = state.ch
        self.is_new = np.zeros(len(ch.names), dtype=bool)
        self.is_new[[ch.sw_index[s] for s in new]] = True
        self.back_ok = state.back_ok.copy()  # per switch: an output back out of the ingress port is dropped
        for s, dec in new.items():
            self.back_ok[ch.sw_index[s]] = dec.back_ok
        self.nodes = 0
        self.bad: dict[str, int] = {}
        self.examples: list[tuple[int, int, str]] = []
        self.max_failures = max_failures
        self.added = Counter()  # dependencies of the nodes walked, each (column, node) once
        self.removed = Counter()  # closure(): dependencies of the old walk's nodes below the change
        self.mixed_parts: list[np.ndarray] = []
        self.expanded: list[np.ndarray] = []  # node keys expanded with their outcomes checked

    # -- results --------------------------------------------------------------

    def mixed_edges(self) -> np.ndarray:
        return unique(np.concatenate(self.mixed_parts)) if self.mixed_parts else np.zeros(0, dtype=np.int64)

    def visited(self) -> np.ndarray:
        """Keys (column * states + state) of the nodes expanded with their outcomes checked (each once)."""
        return np.concatenate(self.expanded) if self.expanded else np.zeros(0, dtype=np.int64)

    def describe(self) -> list[dict[str, Any]]:
        ch, cols = self.state.ch, self.state.cols
        out = []
        for c, x, kind in self.examples:
            sw, port, pcp = (int(v[0]) for v in ch.decode(np.array([x], dtype=np.int64)))
            out.append({"kind": kind, "destination": cols.names[c],
                        "at": f"{ch.names[sw]}:{port}" + ("" if pcp < 0 else f"@{pcp}")})
        return out

    # -- walking --------------------------------------------------------------
    def run(self, cols: np.ndarray, states: np.ndarray, inside: NodeSet) -> None:
        """Walk from the nodes (``cols``, ``states``), expanding a reached node only if it is ``inside`` (the old
        walk's descendants of the changed nodes) or was never reached before."""
        st = self.state
        n = st.ch.n_states
        seen, mix_seen = st.nodeset(), st.nodeset()
        frontier = seen.add(cols.astype(np.int64) * n + states)
        mix_frontier = np.zeros(0, dtype=np.int64)
        while len(frontier) or len(mix_frontier):
            self.nodes += len(frontier)
            self.expanded.append(frontier)
            nxt, mixed = self._expand(frontier // n, frontier % n, checked=True, inside=inside)
            if len(mix_frontier):
                got, more = self._expand(mix_frontier // n, mix_frontier % n, checked=False, inside=inside)
                mixed = np.concatenate([mixed, got, more])
            frontier = seen.add(nxt)
            mixed = mixed[~seen.has(mixed)] if len(mixed) else mixed
            mix_frontier = mix_seen.add(mixed)

    def closure(self, cols: np.ndarray, states: np.ndarray) -> NodeSet:
        """The walk from (``cols``, ``states``) through the base's choices (this walk's ``new`` must be empty):
        the old walk's descendants of those nodes, themselves included."""
        ch = self.state.ch
        n = ch.n_states
        seen = self.state.nodeset()
        frontier = seen.add(cols.astype(np.int64) * n + states)
        while len(frontier):
            c, x = frontier // n, frontier % n
            sw = np.searchsorted(ch.state_base, x, side="right") - 1
            b, a = self.choices(c, x, sw)
            nxt = []
            for codes, sel in ((b, slice(None)), (a, a != b)):
                keys, res = self.next_nodes(c[sel], x[sel], sw[sel], codes[sel])
                self.removed.add(self.dependencies(c[sel], x[sel], res))
                nxt.append(keys)
            frontier = seen.add(np.concatenate(nxt))
        return seen

    def dependencies(self, c: np.ndarray, x: np.ndarray, res: np.ndarray) -> np.ndarray:
        """Packed dependency edges of host traffic arriving over fabric links at nodes (``c``, ``x``) whose next
        state is ``res`` (final codes make none)."""
        st = self.state
        dep = (res >= 0) & ~st.host_state[x] & ~st.cols.probe[c]
        return x[dep] << 32 | res[dep]

    def next_nodes(self, c: np.ndarray, x: np.ndarray, sw: np.ndarray, codes: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
        """(next node keys, result per node: next state or final code) of choices ``codes`` at nodes (``c``, ``x``)."""
        st = self.state
        ch = st.ch
        port = (x - ch.state_base[sw]) // PCP_SLOTS
        single = codes >= 0
        at = ch.state_base[sw] + egress_offset(codes)
        res = np.where(single, self.egress[np.where(single, at, 0)], codes)
        back = single & self.back_ok[sw] & ~st.host_state[x] & ((codes >> SLOT_BITS) == port)
        res = np.where(back, DROP, res)
        go = res >= 0
        return c[go] * ch.n_states + res[go], res

    def choices(self, c: np.ndarray, x: np.ndarray, sw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(unpaused, paused) choices of nodes (column ``c``, state ``x`` at switch index ``sw``) after the change."""
        st = self.state
        ch = st.ch
        b = np.full(len(c), DROP, dtype=np.int64)
        a = b.copy()
        over = self.is_new[sw] | st.overlaid[sw]
        base = np.flatnonzero(~over)
        if len(base):
            line = ch.state_line[x[base]]
            ok = line >= 0
            cell = ch.line_off[np.where(ok, line, 0)] + st.cols.cls[sw[base], c[base]]
            b[base] = np.where(ok, ch.base[cell], DROP)
            a[base] = np.where(ok, ch.alt[cell], DROP)
            unknown = base[~ok]
            if len(unknown):  # states no walk reached before at unchanged switches: decide them now
                over[unknown] = True
                for si in unique(sw[unknown]).tolist():
                    st.decide_more(ch.names[si], x[unknown][sw[unknown] == si])
        idx = np.flatnonzero(over)
        idx = idx[np.argsort(sw[idx], kind="stable")]  # by switch, in node order within one: a slice per switch
        cut = np.flatnonzero(np.concatenate([[True], sw[idx[1:]] != sw[idx[:-1]], [True]])) if len(idx) else []
        for lo, hi in zip(cut[:-1], cut[1:]):
            sel = idx[lo:hi]
            name = ch.names[int(sw[sel[0]])]
            got = self.new.get(name) or st.switches[name]
            bb, aa, known = got.codes(x[sel], c[sel])
            if not known.all():
                got = self._more(name, x[sel][~known])
                bb, aa, known = got.codes(x[sel], c[sel])
            b[sel], a[sel] = bb, aa
        return b, a

    def decide_unknown(self, si: int, x: np.ndarray) -> None:
        """Decide the states ``x`` of switch index ``si`` that have no choice yet, as :meth:`choices` would (and
        nothing else)."""
        st = self.state
        name = st.ch.names[si]
        if not (self.is_new[si] or st.overlaid[si]):
            unknown = x[st.ch.state_line[x] < 0]
            if len(unknown):
                st.decide_more(name, unknown)
            return
        got = self.new.get(name) or st.switches[name]
        if not len(got.states):
            self._more(name, x)
            return
        at = np.minimum(np.searchsorted(got.states, x), len(got.states) - 1)
        known = got.states[at] == x
        if not known.all():
            self._more(name, x[~known])

    def _more(self, name: str, states: np.ndarray) -> SwitchDecisions:
        if name in self.new:
            st = self.state
            got = st.decide(self.compiled, [name], {name: self.new[name].relevant},
                            {name: union(self.new[name].states, states)})[name]
            self.new[name] = got
            return got
        return self.state.decide_more(name, states)

    def _expand(self, c: np.ndarray, x: np.ndarray, *, checked: bool,
                inside: NodeSet) -> tuple[np.ndarray, np.ndarray]:
        """Next nodes of the nodes (``c``, ``x``): (by the new choices, by the old choices of changed switches)."""
        st = self.state
        ch = st.ch
        sw = np.searchsorted(ch.state_base, x, side="right") - 1
        b, a = self.choices(c, x, sw)
        d = a != b  # the paused choice counts where it differs (as the union walk)
        out_new = [self._follow(c, x, sw, b, checked, inside), self._follow(c[d], x[d], sw[d], a[d], checked, inside)]
        out_mix: list[np.ndarray] = []
        mix_sel = np.flatnonzero(self.is_new[sw]) if self.mix else np.zeros(0, dtype=np.int64)
        if len(mix_sel):
            ob, oa = st.current(c[mix_sel], x[mix_sel], sw[mix_sel])
            out_mix = [self._follow(c[mix_sel], x[mix_sel], sw[mix_sel], codes, False, inside) for codes in (ob, oa)]
        cat = (lambda parts: np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64))
        return cat(out_new), cat(out_mix)

    def _follow(self, c: np.ndarray, x: np.ndarray, sw: np.ndarray, codes: np.ndarray, check: bool,
                inside: NodeSet) -> np.ndarray:
        """Outcomes of ``codes`` at the nodes checked (``check``), dependencies kept; the next nodes to expand."""
        st = self.state
        keys, res = self.next_nodes(c, x, sw, codes)
        final = res < 0
        if check and final.any():
            self._finals(c[final], x[final], res[final], sw[final])
        go = ~final
        deps = self.dependencies(c, x, res)
        if check:
            self.added.add(deps)
        else:
            self.mixed_parts.append(deps)
        nc, ny = c[go], res[go]
        keep = ~st.in_reach(nc, ny) | inside.has(keys)  # reached, not below a change: the old walk
        return keys[keep]

    def _finals(self, c: np.ndarray, x: np.ndarray, got: np.ndarray, sw: np.ndarray) -> None:
        st = self.state
        cols = st.cols
        got = np.where(cols.probe[c] & (got == DEAD), DROP, got)
        wrong = got != cols.want[c]
        host = ~cols.probe[c]
        cut = host & (self.comp[sw] != self.comp[np.maximum(st.col_switch[c], 0)])  # no pair to deliver
        wrong &= ~cut
        if not wrong.any():
            return
        for k, cc, xx in zip(got[wrong].tolist(), c[wrong].tolist(), x[wrong].tolist()):
            kind = outcome_kind(int(k), None)
            tag = kind if not cols.probe[cc] else f"probe {kind}"
            self.bad[tag] = self.bad.get(tag, 0) + 1
            if len(self.examples) < self.max_failures:
                self.examples.append((cc, xx, tag))


def entries(st: Any, old: ChangeWalk, below_set: NodeSet, failed: Any) -> tuple[np.ndarray, np.ndarray]:
    """The nodes below a change the new walk must start from (:meth:`~hpcfabric.verify.incremental.delta.ProofState.check`):
    injections (at switches not ``failed``), and fabric arrivals that a reached node outside ``below`` leads to
    (it is still reached, its choice the same) over a live link.

    No search over every (column, reached state) of the upstream switches: a choice there depends on the state
    and the column's *class* only, so per upstream switch the states whose choice sends into each (class, egress)
    are listed once (injections first), and each node tries its candidates in growing batches until one is in
    its column's reach and not below the change -- most nodes below a change are entered from outside, and
    their first candidate already says so; only the few that are not try them all."""
    ch = st.ch
    n = ch.n_states
    below = below_set.keys()
    c, z = below // n, below % n
    root = st.host_state[z]  # an injection, unless its switch failed
    if failed:
        zsw = np.searchsorted(ch.state_base, z, side="right") - 1
        root &= ~np.isin(zsw, [ch.sw_index[s] for s in failed])
    fab = np.flatnonzero(~st.host_state[z])
    up_sw, up_at = st.upstream(z[fab])
    ok = up_sw >= 0
    ok[ok] = old.egress[up_at[ok]] == z[fab[ok]]  # the link into it is live in the old walk
    fab, up_sw, up_at = fab[ok], up_sw[ok], up_at[ok]
    order = np.argsort(up_sw, kind="stable")
    fab, up_sw, up_at = fab[order], up_sw[order], up_at[order]
    pair = np.zeros(len(fab), dtype=np.int64)  # per node: its (upstream switch, class, egress) candidate list
    lists: list[np.ndarray] = []
    sizes: list[np.ndarray] = []
    n_pairs = 0
    bounds = np.flatnonzero(np.concatenate([[True], up_sw[1:] != up_sw[:-1], [True]])) if len(fab) else []
    for lo_i, hi_i in zip(bounds[:-1], bounds[1:]):
        si = int(up_sw[lo_i])
        cand = st.states_in_reach(si)
        if not len(cand):
            pair[lo_i:hi_i] = -1
            continue
        cols = c[fab[lo_i:hi_i]]
        old.decide_unknown(si, cand)
        b, a, col_cls = st.class_codes(ch.names[si], cand)
        lo = int(ch.state_base[si])
        at = up_at[lo_i:hi_i] - lo
        q = at // PCP_SLOTS
        code = q << SLOT_BITS | at % PCP_SLOTS  # the choice that sends a frame into the node
        width = int(code.max()) + 1
        keys, inv = np.unique(col_cls[cols] * width + code, return_inverse=True)
        k, kc = keys // width, keys % width
        first = np.argsort(~st.host_state[cand], kind="stable")  # injections first: rarely below a change
        cand, b, a = cand[first], b[first], a[first]
        back = (old.back_ok[si] & ~st.host_state[cand])[:, None] & (((cand - lo) // PCP_SLOTS)[:, None] == (kc >> SLOT_BITS)[None, :])
        hit = ((b[:, k] == kc) | (a[:, k] == kc)) & ~back  # candidates x (class, egress)
        p, r = np.nonzero(hit.T)
        lists.append(cand[r])
        sizes.append(np.bincount(p, minlength=len(keys)))
        pair[lo_i:hi_i] = n_pairs + inv.reshape(-1)
        n_pairs += len(keys)
    cat = (lambda parts: np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, dtype=np.int64))
    cands, size = cat(lists), cat(sizes)
    start = np.concatenate([[0], np.cumsum(size)])[:-1] if len(size) else size
    has = pair >= 0
    n_of = np.where(has, size[np.where(has, pair, 0)] if len(size) else 0, 0)
    first_of = np.where(has, start[np.where(has, pair, 0)] if len(size) else 0, 0)
    found = np.zeros(len(fab), dtype=bool)
    active = np.flatnonzero(n_of > 0)
    done, batch = 0, 1
    while len(active):
        take = np.minimum(n_of[active] - done, batch)
        node = np.repeat(active, take)
        off = done + np.arange(len(node)) - np.repeat(np.cumsum(take) - take, take)
        u = cands[first_of[node] + off]
        col = c[fab[node]]
        good = st.in_reach(col, u) & ~below_set.has(col * n + u)
        found[node[good]] = True
        done += batch
        batch *= 2
        active = active[~found[active] & (n_of[active] > done)]
    keys = unique(np.concatenate([below[root], below[fab[found]]]))
    return keys // n, keys % n
