"""Per-destination union walks: every walk any pause state allows, for every destination at once.

Nodes are (destination column, state), a state being a frame's arrival channel at a switch
(:class:`hpcfabric.verify.choices.Choices`). From a node both choices of its cell (unpaused,
paused) are followed, so the walks are those of frames whose switches, hop by hop, each take
either decision: any set of paused ports, changing while the frame travels. The walk runs level
by level from the hosts' injections, merging equal nodes per level; it ends when no node is left
(every walk has ended: the reachable union graph is acyclic) or after ``bound`` levels (a walk
longer than that: a loop). Every final outcome is compared with the column's own: delivered to
its host untagged, or, for a probe, dropped. Dependencies between fabric channels (an arrival
that leaves on another fabric port) of host traffic are collected for the channel dependency
graph (probes, which every switch must drop, are left out, as in :mod:`hpcfabric.verify.cdg`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hpcfabric.verify.choices import SLOT_BITS, Choices
from hpcfabric.verify.codes import DEAD, DROP, PCP_SLOTS, outcome_kind

__all__ = ["UnionWalk", "walk_union", "describe_walk"]
DEBUG = False


@dataclass
class UnionWalk:
    """What the union walk found (see :func:`walk_union`)."""

    nodes: int  # (column, state) nodes expanded, summed over levels
    levels: int  # deepest level reached
    max_hops: int  # switches on the longest walk that delivers
    bad: dict[str, int]  # failing (column, state, choice) outcomes per kind, host columns
    bad_probe: dict[str, int]  # the same for probe columns
    bad_columns: int  # columns with a failing outcome
    witnesses: list[list[tuple[int, int, bool]]]  # walks to a failure: (column, state, paused choice) per hop
    witness_kinds: list[str]
    edges: np.ndarray  # channel dependencies: state << 32 | state, fabric arrivals only, unique
    paused_hops: int = 0  # choices taken from the paused decision (differing from the unpaused one)
    timings: dict[str, float] = field(default_factory=dict)


def walk_union(
    ch: Choices,
    col_cls: np.ndarray,
    want: np.ndarray,
    probe: np.ndarray,
    start_col: np.ndarray,
    start_state: np.ndarray,
    bound: int,
    max_witnesses: int = 5,
) -> UnionWalk:
    """Walk every (column, start state) through both choices of every cell (module docstring).

    ``col_cls``: switch index x column -> destination class at that switch; ``want``: per column the
    correct final code (``DELIVER - host`` or ``DROP`` for a probe); ``probe``: per column, True for
    probes (a dead port counts as dropped for them).
    """
    ns = ch.n_states
    sw_of, port_of, _ = ch.decode(np.arange(ns, dtype=np.int64))
    fabric_arrival = np.zeros(ns, dtype=bool)
    for s in ch.names:
        first = int(ch.state_base[ch.sw_index[s]])
        for p in ch.fabric.fabric_ports(s):
            fabric_arrival[first + p * PCP_SLOTS: first + (p + 1) * PCP_SLOTS] = True
    back_checked = ~ch.in_port_out  # switches that also send back by OFPP_IN_PORT decided that in the views
    node = np.unique(start_col.astype(np.int64) * ns + start_state.astype(np.int64))
    history: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = [(node, np.full(len(node), -1), np.zeros(len(node), bool))]
    bad: dict[str, int] = {}
    bad_probe: dict[str, int] = {}
    bad_cols: set[int] = set()
    found: list[tuple[int, int, str]] = []  # (level, index in that level, kind)
    edge_parts: list[np.ndarray] = []
    nodes = max_level = 0
    max_hops = 0
    paused_hops = 0
    level = 0
    while len(node):
        if DEBUG: print("level", level, len(node))
        if level >= bound:
            cols = node // ns
            for tally, n in ((bad, int((~probe[cols]).sum())), (bad_probe, int(probe[cols].sum()))):
                if n:
                    tally["loop"] = tally.get("loop", 0) + n
            bad_cols.update(np.unique(cols).tolist())
            for i in range(min(max_witnesses - len(found), len(node))):
                found.append((level, i, "loop"))
            break
        nodes += len(node)
        max_level = level
        col, st = node // ns, node % ns
        sw = sw_of[st]
        line = ch.state_line[st]
        if (line < 0).any():  # pragma: no cover - the work list decides every line a frame can reach
            raise AssertionError("a reachable state has no decided line")
        cell = ch.line_off[line] + col_cls[sw, col]
        b, a = ch.base[cell], ch.alt[cell]
        differs = a != b
        paused_hops += int(differs.sum())
        nxt_parts, par_parts, alt_parts = [], [], []
        for which, code in ((False, b), (True, a)):
            idx = np.arange(len(node)) if not which else np.flatnonzero(differs)
            if not len(idx):
                continue
            c = code[idx].astype(np.int64)
            out = c >= 0
            res = c.copy()
            if out.any():
                res[out] = ch.egress(sw[idx[out]], c[out])
                back = out & fabric_arrival[st[idx]] & back_checked[sw[idx]] & ((c >> SLOT_BITS) == port_of[st[idx]])
                res[back] = DROP  # OpenFlow never sends a frame back out of its ingress port by number
            final = res < 0
            if final.any():
                fi = idx[final]
                got = res[final]
                got = np.where(probe[col[fi]] & (got == DEAD), DROP, got)
                wrong = got != want[col[fi]]
                ok_hops = got[~wrong]
                if len(ok_hops) and not probe[col[fi][~wrong]].all():
                    max_hops = max(max_hops, level + 1)
                if wrong.any():
                    wi = fi[wrong]
                    kinds = _kinds(got[wrong])
                    pr = probe[col[wi]]
                    for tally, sel in ((bad, ~pr), (bad_probe, pr)):
                        for kind, n in zip(*np.unique(kinds[sel], return_counts=True)):
                            tally[str(kind)] = tally.get(str(kind), 0) + int(n)
                    for j, kind in list(zip(wi.tolist(), kinds.tolist()))[: max(0, max_witnesses - len(found))]:
                        found.append((level, j, kind + (" (paused choice)" if which else "")))
                    bad_cols.update(np.unique(col[wi]).tolist())
            go = ~final
            if go.any():
                gi = idx[go]
                nx_state = res[go]
                fab = fabric_arrival[st[gi]] & ~probe[col[gi]]  # host traffic's dependencies (as the CDG check)
                if fab.any():
                    edge_parts.append(np.unique(st[gi[fab]] << 32 | nx_state[fab]))
                nxt_parts.append(col[gi] * ns + nx_state)
                par_parts.append(gi)
                alt_parts.append(np.full(len(gi), which))
        if not nxt_parts:
            break
        nxt = np.concatenate(nxt_parts)
        node, first = np.unique(nxt, return_index=True)
        history.append((node, np.concatenate(par_parts)[first], np.concatenate(alt_parts)[first]))
        level += 1
        if len(edge_parts) > 64:
            edge_parts = [np.unique(np.concatenate(edge_parts))]
    edges = np.unique(np.concatenate(edge_parts)) if edge_parts else np.zeros(0, dtype=np.int64)
    witnesses = [_trace(history, lv, i, ns) for lv, i, _ in found]
    return UnionWalk(nodes, max_level, max_hops, bad, bad_probe, len(bad_cols), witnesses, [k for _, _, k in found], edges,
                     paused_hops)


def _kinds(codes: np.ndarray) -> np.ndarray:
    """Outcome kind per wrong final code (a delivery that is wrong is a misdelivery)."""
    u, inv = np.unique(codes, return_inverse=True)
    return np.array([outcome_kind(int(c), None) for c in u.tolist()])[inv.reshape(-1)]


def _trace(history: list[tuple[np.ndarray, np.ndarray, np.ndarray]], level: int, i: int, ns: int) -> list[tuple[int, int, bool]]:
    """The walk to node ``i`` of ``level``: (column, state, reached by a paused choice) per hop."""
    out: list[tuple[int, int, bool]] = []
    while level >= 0 and i >= 0:
        nodes, parent, alt = history[level]
        n = int(nodes[i])
        out.append((n // ns, n % ns, bool(alt[i])))
        i = int(parent[i])
        level -= 1
    return out[::-1]


def describe_walk(ch: Choices, walk: list[tuple[int, int, bool]], columns: list[str]) -> dict[str, Any]:
    """A witness walk as names: the destination and the channels a frame arrives on, hop by hop."""
    col = walk[0][0]
    hops = []
    for _, st, alt in walk:
        sw, port, pcp = ch.decode(np.array([st]))
        name = ch.names[int(sw[0])]
        peer = ch.fabric.peer(name, int(port[0]))
        where = f"{name}:{int(port[0])}" + ("" if int(pcp[0]) < 0 else f"@{int(pcp[0])}")
        if peer is not None and peer.is_host:
            where = f"{peer.node} -> {where}"
        hops.append(where + (" (after a paused choice)" if alt else ""))
    return {"destination": columns[col], "walk": hops}
