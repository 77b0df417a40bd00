"""Symmetry reduction of the union proof: walk one destination column per orbit.

A candidate automorphism ``σ`` of the topology (:mod:`hpcfabric.verify.union.automorphism`: Dragonfly
group rotations or XORs, flattened-butterfly shifts) is **kept** only when it commutes with the
decisions the proof walks, checked cell by cell on :class:`~hpcfabric.verify.union.choices.Choices`:

* every reachable state ``x`` (switch ``s``, port ``p``, PCP) has an image state
  ``σx = (σs, σp, PCP)`` with a decided line, and ``s`` and ``σs`` agree on sending frames back
  by ``OFPP_IN_PORT``;
* for every host column ``c`` and both choices (unpaused, paused), the decision of ``x``'s line
  for ``c``, its output port mapped by ``σ``, equals the decision of ``σx``'s line for ``σc``;
  ``σc`` is the column whose host is ``σ`` of ``c``'s host (one host per column kind alike);
* the injections map onto injections: ``(σc, σ(start))`` has the line of some start of ``σc``.

Then, by induction over hops, the union walk of column ``σc`` is the image of ``c``'s, node by
node (``σ`` maps a link to a link and a host to a host, so next states and final codes commute;
a delivery to ``c``'s host maps to one to ``σc``'s, so correct outcomes stay correct and wrong
ones wrong). Walking one column per orbit of the group the kept generators generate therefore
decides delivery for every column. Dependencies: the full graph is the union of the images of
the walked columns' graph; mapping every channel to its orbit (:func:`state_orbits`) maps a
cycle of the full graph to a closed walk of the quotient, so an **acyclic quotient proves the
full graph acyclic**. The converse fails, so :func:`hpcfabric.verify.union.proof.prove` uses the
reduction only when its quotient is acyclic; otherwise it walks every column (same verdicts and
witnesses as without the reduction). A walked column's failures stand for its whole orbit's
(wrong outcomes map to wrong ones of the same kind): they count orbit-size times.

Cost of the check: one gather per (reachable line, image line) pair over the host columns, for
the unpaused and the paused choices (Dragonfly a12p6h6: ~4,400 lines x 876 columns).
Probe columns are always walked in full (their addresses have no image).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hpcfabric.verify.union.automorphism import Automorphism, automorphism, candidate_generators, union_find
from hpcfabric.verify.union.choices import SLOT_BITS, SLOT_MASK, Choices
from hpcfabric.verify.codes import PCP_SLOTS

__all__ = ["Reduction", "reduce_columns"]

ROW_CELLS = 1 << 23  # (switch, column) cells of the class correspondence at a time


@dataclass
class Reduction:
    """Kept generators, the host columns to walk and the channel orbits (see module docstring)."""

    kept: tuple[str, ...]
    dropped: dict[str, str]
    walk: np.ndarray  # host columns to walk: one per orbit
    state_orbit: np.ndarray  # per state: the smallest state of its orbit
    seconds: float = 0.0
    timings: dict[str, float] = field(default_factory=dict)
    size: np.ndarray | None = None  # per walked column: the columns of its orbit
    #: per kept generator: (column map, state map, switch map) -- the incremental base's quotient uses them
    maps: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.size is None:
            self.size = np.ones(len(self.walk), dtype=np.int64)

    def as_dict(self, used: bool) -> dict[str, Any]:
        return {"used": used, "kept": list(self.kept), "dropped": dict(self.dropped),
                "columns_walked": int(len(self.walk)) if used else None, "seconds": round(self.seconds, 3)}


def state_map(ch: Choices, a: Automorphism) -> np.ndarray:
    """Per state, its image under ``a`` (-1 where the port has no image)."""
    out = np.full(ch.n_states, -1, dtype=np.int64)
    slots = np.arange(PCP_SLOTS, dtype=np.int64)
    for s in ch.names:
        i, j = ch.sw_index[s], ch.sw_index[a.switch[s]]
        pi = a.port[s]
        ports = np.flatnonzero(pi >= 0)
        src = (ch.state_base[i] + ports[:, None] * PCP_SLOTS + slots).reshape(-1)
        out[src] = (ch.state_base[j] + pi[ports][:, None] * PCP_SLOTS + slots).reshape(-1)
    return out


def port_map(ch: Choices, a: Automorphism) -> np.ndarray:
    """Switch index x port -> image port (-1: none), dense."""
    width = int(ch.max_ports.max(initial=0)) + 1
    out = np.full((len(ch.names), width), -1, dtype=np.int64)
    for s in ch.names:
        pi = a.port[s]
        out[ch.sw_index[s], :len(pi)] = pi
    return out


def _check(ch: Choices, cols: Any, a: Automorphism, starts: list[tuple[Any, ...]]
           ) -> tuple[np.ndarray | None, np.ndarray | None, str | None]:
    """(column map, state map, None) when ``a`` commutes with the walked decisions, else (.., why)."""
    nh = cols.n_host_columns
    col_of = {int(h): c for c, h in enumerate(cols.host.tolist())}
    single = np.array(cols.single[:nh], dtype=bool)
    try:
        cmap = np.array([col_of[ch.hid[a.host[ch.fabric.hosts[int(h)].name]]] for h in cols.host.tolist()],
                        dtype=np.int64)
    except KeyError:
        return None, None, "a column's host does not map to the host of a column"
    if len(np.unique(cmap)) != nh or (single[cmap] != single).any():
        return None, None, "the columns do not map one to one"
    P = state_map(ch, a)
    reach = np.flatnonzero(ch.state_line >= 0)
    img = P[reach]
    if (img < 0).any() or (ch.state_line[img] < 0).any():
        return None, None, "a reachable arrival channel has no decided image"
    sw = ch.line_switch[ch.state_line[reach]]
    tw = ch.line_switch[ch.state_line[img]]
    if (ch.in_port_out[sw] != ch.in_port_out[tw]).any():
        return None, None, "switches differ in sending frames back by OFPP_IN_PORT"
    pairs = np.unique(ch.state_line[reach] << 32 | ch.state_line[img])
    la, lb = pairs >> 32, pairs & 0xFFFFFFFF
    sa, sb = ch.line_switch[la], ch.line_switch[lb]
    pm = port_map(ch, a)
    smap = np.array([ch.sw_index[a.switch[x]] for x in ch.names], dtype=np.int64)
    if (sb != smap[sa]).any():  # pragma: no cover - state_map maps switch s to a.switch[s]
        raise AssertionError("a line maps to a line of another switch than the switch's image")
    # class correspondence: per switch, the (class of c, class of σc at the image switch) pairs over
    # the host columns; cells are then compared once per pair, not per column. Mostly a function of
    # the class (one scatter); the columns where it is not add their pairs.
    cls = cols.cls[:, :nh]
    first = np.concatenate([[0], np.cumsum(ch.n_cls)]).astype(np.int64)
    width = int(ch.n_cls.max(initial=1))
    f = np.full(int(first[-1]), -1, dtype=np.int64)
    rows = max(1, ROW_CELLS // max(nh, 1))  # switches at a time: S x columns cells in all (300k: 2.8e8)

    def chunks():
        for r0 in range(0, len(ch.names), rows):
            r1 = min(len(ch.names), r0 + rows)
            yield first[r0:r1, None] + cls[r0:r1], cls[smap[r0:r1]][:, cmap].astype(np.int64)

    for at, img in chunks():
        f[at] = img
    extra = [np.unique(at[f[at] != img] * width + img[f[at] != img]) for at, img in chunks()]
    has = np.flatnonzero(f >= 0)
    pair = np.unique(np.concatenate([has * width + f[has], *extra]))
    owner = np.searchsorted(first, pair // width, side="right") - 1  # switch of each pair
    # expand: every line pair (la, lb) at switch s x every class pair of s
    per_sw = np.bincount(owner, minlength=len(ch.names))
    pair_first = np.concatenate([[0], np.cumsum(per_sw)])
    cnt = per_sw[sa]
    ends = np.cumsum(cnt)

    def cells():  # (switch, class there, cell at the switch, cell at its image), ROW_CELLS at a time
        a = 0
        while a < len(la):
            b = max(a + 1, int(np.searchsorted(ends, ends[a] - cnt[a] + ROW_CELLS, side="right")))
            c = cnt[a:b]
            rep = np.repeat(np.arange(a, b), c)
            j = pair[pair_first[sa][rep] + np.arange(int(c.sum())) - np.repeat(np.cumsum(c) - c, c)]
            k = j // width - first[sa][rep]
            yield sa[rep], k, ch.line_off[la][rep] + k, ch.line_off[lb][rep] + j % width
            a = b

    for arr, what in ((ch.base, "unpaused"), (ch.alt, "paused")):
        for sw, k, xo, yo in cells():
            if arr is ch.alt:  # where neither cell has a paused choice of its own, the unpaused check covers it
                sel = np.flatnonzero((ch.alt[xo] != ch.base[xo]) | (ch.alt[yo] != ch.base[yo]))
                xo, yo, sw, k = xo[sel], yo[sel], sw[sel], k[sel]
            x, y = arr[xo].astype(np.int64), arr[yo]
            out = np.flatnonzero(x >= 0)
            mapped = x.copy()
            mapped[out] = pm[sw[out], x[out] >> SLOT_BITS] << SLOT_BITS | (x[out] & SLOT_MASK)
            bad = np.flatnonzero(mapped != y)
            if len(bad):
                j = int(bad[0])
                c = int(np.flatnonzero(cls[sw[j]] == k[j])[0])
                return None, None, (f"{ch.names[int(sw[j])]} decides column {cols.names[c]} ({what}) unlike "
                                    f"{ch.names[int(smap[sw[j]])]} decides its image")
    for col, state, start_id, have, shared in starts:
        got = start_id[ch.state_line[P[state]]]
        if (got < 0).any() or not have[col if shared else cmap[col], got].all():
            return None, None, "the hosts' injections do not map onto injections"
    return cmap, P, None


def _starts(ch: Choices, cols: Any, start_col: np.ndarray, start_state: np.ndarray) -> list[tuple[Any, ...]]:
    """The host columns' injections as (column, state, id per line of an injection or -1, table of
    (column, line id) pairs that are injections, shared). Columns of several hosts are all injected
    into from the same states (``Columns.starts`` in :mod:`hpcfabric.verify.union.pairs`), so the first
    stands for them all (``shared``: one table row, the column is not mapped); per-host columns
    skip their own host's port and are listed each."""
    nh = cols.n_host_columns
    single = np.array(cols.single[:nh], dtype=bool)
    parts = []
    many = np.flatnonzero(~single)
    if len(many):
        pick = start_col == many[0]
        parts.append((np.zeros(int(pick.sum()), dtype=np.int64), start_state[pick], True))
    pick = (start_col < nh) & single[np.minimum(start_col, nh - 1)]
    if pick.any():
        parts.append((start_col[pick], start_state[pick], False))
    out = []
    for col, state, shared in parts:
        line = ch.state_line[state]
        start_lines = np.unique(line)
        start_id = np.full(ch.lines, -1, dtype=np.int64)
        start_id[start_lines] = np.arange(len(start_lines))
        have = np.zeros((1 if shared else nh, len(start_lines)), dtype=bool)
        have[col, start_id[line]] = True
        out.append((col, state, start_id, have, shared))
    return out


def reduce_columns(ch: Choices, cols: Any, start_col: np.ndarray, start_state: np.ndarray) -> Reduction | None:
    """The reduction by the candidate automorphisms that commute with the decisions (``kept`` empty
    when none does or the columns are per host: ``dropped`` says why), or None without host columns."""
    t0 = time.perf_counter()
    fabric = ch.fabric
    if not cols.n_host_columns:
        return None
    if cols.split:
        return Reduction((), {"all": f"{len(cols.split)} access switches have hosts other switches tell apart "
                              "(columns per host)"}, np.arange(cols.n_host_columns), np.arange(ch.n_states))
    starts = _starts(ch, cols, start_col, start_state)
    dropped: dict[str, str] = {}
    maps: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    kept: list[str] = []
    for name, m in candidate_generators(fabric):
        a, why = automorphism(fabric, name, m)
        if a is not None:
            cmap, P, why = _check(ch, cols, a, starts)
        if why is not None:
            dropped[name] = why
            continue
        kept.append(name)
        maps.append((cmap, P, np.array([ch.sw_index[a.switch[x]] for x in ch.names], dtype=np.int64)))  # type: ignore
    if not kept:
        return Reduction((), dropped, np.arange(cols.n_host_columns), np.arange(ch.n_states),
                         time.perf_counter() - t0)
    nh = cols.n_host_columns
    lab = union_find(nh, [(np.arange(nh, dtype=np.int64), c) for c, _, _ in maps])
    walk, size = np.unique(lab, return_counts=True)
    states = [np.flatnonzero(P >= 0) for _, P, _ in maps]
    orbit = union_find(ch.n_states, [(s, P[s]) for s, (_, P, _) in zip(states, maps)])
    return Reduction(tuple(kept), dropped, walk, orbit, time.perf_counter() - t0, size=size, maps=maps)
