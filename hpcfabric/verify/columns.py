"""Destination classes ("columns") and the decision lines a paused-port sweep walks.

The hosts of one access switch ``t`` form one *column* when no rule can tell them apart outside
``t`` (:func:`structural_splits`, checked on every ``eth_dst`` match of every other switch) and
``t`` treats them alike up to the delivery port (:meth:`ColumnLines.own_alike`, checked on every
decision line of ``t``, also under a scenario's rules). :class:`ColumnLines` is
:class:`hpcfabric.verify.lines.DecisionLines` over one representative host per column, with the
unpaused walks recorded per visited switch (:meth:`ColumnLines.walk_pairs`) so that a scenario
re-walks only the pairs it can affect (:func:`expand_affected`). Used by
:mod:`hpcfabric.verify.sweep`.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from hpcfabric.verify.codes import DELIVER, LOOP, channel_name
from hpcfabric.verify.engine import Destinations, Engine, Row
from hpcfabric.verify.lines import DecisionLines

__all__ = ["SELF", "VISIT_BATCH", "NotAlike", "host_groups", "groups_of_hosts", "structural_splits",
           "structural_splits_of", "ColumnLines", "expand_affected", "edge_names"]

SELF = -(2**30)  # "delivered to the destination itself" in normalised decisions
VISIT_BATCH = 1 << 20  # pairs walked at once


class NotAlike(Exception):
    """A destination group is not alike at its own switch under a scenario's rules."""



def host_groups(eng: Engine) -> dict[str, np.ndarray]:
    """Host ids per access switch."""
    return groups_of_hosts(eng.hosts)


def groups_of_hosts(hosts: Sequence[Any]) -> dict[str, np.ndarray]:
    """Host ids (positions in ``hosts``) per access switch."""
    by_sw: dict[str, list[int]] = {}
    for h, host in enumerate(hosts):
        by_sw.setdefault(host.switch, []).append(h)
    return {sw: np.array(ids, dtype=np.int64) for sw, ids in by_sw.items()}


def structural_splits(eng: Engine, groups: dict[str, np.ndarray]) -> set[str]:
    """Access switches ``t`` whose hosts some ``eth_dst`` match on another switch tells apart."""
    return structural_splits_of(eng.relevant, eng.host_macs, groups)


def structural_splits_of(relevant: dict[str, list[Any]], host_macs: np.ndarray, groups: dict[str, np.ndarray]) -> set[str]:
    """:func:`structural_splits` from the data-relevant entries per switch and the host MACs.

    For each mask: groups whose hosts differ under the mask, then every entry
    with that mask whose value is one of those hosts' masked addresses (true
    for some hosts of the group and false for others) on a switch other than
    the group's own."""
    names = list(groups)
    gid = np.empty(len(host_macs), dtype=np.int64)
    for i, sw in enumerate(names):
        gid[groups[sw]] = i
    order = np.argsort(gid, kind="stable")
    starts = np.searchsorted(gid[order], np.arange(len(names)))
    by_mask: dict[int, list[tuple[str, int]]] = {}
    for sw, flows in relevant.items():
        for f in flows:
            if f.match.eth_dst is not None:
                v, m = f.match.eth_dst
                by_mask.setdefault(m, []).append((sw, v & m))
    split: set[str] = set()
    for m, entries in by_mask.items():
        masked = (host_macs & np.uint64(m))[order]
        lo = np.minimum.reduceat(masked, starts)
        hi = np.maximum.reduceat(masked, starts)
        differ = np.flatnonzero(lo != hi)
        if not differ.size:
            continue
        in_differ = np.zeros(len(names), dtype=bool)
        in_differ[differ] = True
        hosts = np.flatnonzero(in_differ[gid])
        owner: dict[int, set[int]] = {}
        for h, val in zip(hosts.tolist(), (host_macs[hosts] & np.uint64(m)).tolist()):
            owner.setdefault(val, set()).add(int(gid[h]))
        for sw, v in entries:
            for g in owner.get(v, ()):
                if names[g] != sw:
                    split.add(names[g])
    return split



class ColumnLines(DecisionLines):
    """:class:`hpcfabric.verify.lines.DecisionLines` over destination classes (one representative
    host each), with the pairs' unpaused walks recorded per visited switch."""

    def __init__(
        self,
        compiled: Any,
        split: set[str],
        *,
        scenarios: bool,
        only: set[str] | None = None,
        engine: Engine | None = None,
    ) -> None:
        self.compiled = compiled
        eng = self.eng = engine if engine is not None else Engine(compiled, per_port=True)
        if eng.scalar_rows:
            raise ValueError("the sweep does not model source-dependent (eth_src) rules")
        self.groups = host_groups(eng)
        self.split = set(split)
        cols: list[np.ndarray] = []
        for sw, ids in self.groups.items():
            if only is not None and sw not in only:
                continue  # destinations restricted to the hosts of `only`
            if sw in self.split or len(ids) == 1:
                cols.extend(ids[i : i + 1] for i in range(len(ids)))
            else:
                cols.append(ids)
        self.col_hosts = cols
        self.rep = np.array([c[0] for c in cols], dtype=np.int64)
        self.col_size = np.array([len(c) for c in cols], dtype=np.int64)
        self.col_of_host = np.full(len(eng.hosts), -1, dtype=np.int64)  # -1: not a destination
        for i, c in enumerate(cols):
            self.col_of_host[c] = i
        self.alike = {
            sw for sw, ids in self.groups.items()
            if sw not in self.split and len(ids) > 1 and (only is None or sw in only)
        }
        self.group_col = {eng.hosts[int(c[0])].switch: i for i, c in enumerate(cols) if len(c) > 1}
        self.dst = Destinations(eng.host_macs[self.rep])
        self.n = self.dst.n
        self.track = scenarios  # keep the PORT_STATE port per line (scenarios need it)
        self.base_relevant = dict(eng.relevant)
        self.li: list[int] = []
        self.sigs: list[tuple] = []
        self.uniq: list[np.ndarray] = []
        self._ups: dict[int, np.ndarray] = {}
        self._sig_id: dict[tuple, int] = {}
        self._U: np.ndarray | None = None
        self.fabric_row = np.zeros(0, dtype=bool)
        self.rows_at: dict[str, list[int]] = {}
        self._fkeys: dict[int, tuple] = {}
        self._met: dict[str, tuple[int, set[int]]] = {}
        self.not_alike: set[str] = set()
        self._own_dst: dict[str, tuple[Destinations, np.ndarray]] = {}
        self.ensure_base()

    # -- lines --------------------------------------------------------------
    def ensure_base(self) -> None:
        """Base lines of rows created so far (own-switch check on new lines)."""
        eng = self.eng
        start = len(self.li)
        while len(self.li) < len(eng.rows):
            r = len(self.li)
            row = eng.rows[r]
            sig = self.signature(row)
            u = self._sig_id.get(sig)
            if u is None:
                ps: list = []
                line = eng.decide(row, self.dst, ps if self.track else None)
                u = self._sig_id[sig] = len(self.uniq)
                self.uniq.append(line)
                if self.track:
                    self._ups[u] = ps[0].astype(np.int32)
                if row.switch in self.alike and not self.own_alike(row, None):
                    self.not_alike.add(row.switch)
            self.li.append(u)
            self.sigs.append(sig)
        self.index_rows(start)
        self.sw_of_row = self._sw_index()

    def _sw_index(self) -> np.ndarray:
        names = getattr(self, "_sw_names", None)
        if names is None:
            names = self._sw_names = {s.name: i for i, s in enumerate(self.compiled.fabric.switches)}
        have = getattr(self, "sw_of_row", np.zeros(0, dtype=np.int32))
        if len(have) == len(self.li):
            return have
        extra = np.array([names[self.eng.rows[r].switch] for r in range(len(have), len(self.li))], dtype=np.int32)
        return np.concatenate([have, extra])

    def unique_matrix(self) -> np.ndarray:
        """The unique lines stacked (grown with spare capacity; sink handled by the walk)."""
        U = self._U
        if U is None or U.shape[0] < len(self.uniq):
            cap = len(self.uniq) + max(16, len(self.uniq) // 16)
            new = np.empty((cap, self.n), dtype=np.int32)
            start = 0
            if U is not None:
                start = self._U_filled
                new[:start] = U[:start]
            U = self._U = new
            self._U_filled = start
        for u in range(self._U_filled, len(self.uniq)):
            U[u] = self.uniq[u]
            self.uniq[u] = U[u]  # a view: one copy in memory
        self._U_filled = len(self.uniq)
        return U

    def ups(self, r: int) -> np.ndarray:
        return self._ups[self.li[r]]

    def met_ports(self, switch: str) -> set[int]:
        """PORT_STATE ports some row of ``switch`` meets for some column: pausing
        any other port of ``switch`` changes no decision."""
        rows = self.rows_at.get(switch, [])
        got = self._met.get(switch)
        if got is None or got[0] != len(rows):
            lines = {self.li[r] for r in rows}
            met = set(np.unique(np.concatenate([self._ups[u] for u in lines])).tolist()) if lines else set()
            got = self._met[switch] = (len(rows), met)
        return got[1]

    def own_alike(self, row: Row, flows: list | None) -> bool:
        """Do the hosts of ``row``'s switch decide alike at ``row`` (delivery to
        oneself normalised, same PORT_STATE entry met)? ``flows``: scenario rules."""
        eng = self.eng
        got = self._own_dst.get(row.switch)
        if got is None:
            ids = self.groups[row.switch]
            got = self._own_dst[row.switch] = (Destinations(eng.host_macs[ids]), DELIVER - ids)
        dst, selfcode = got
        if flows is not None:
            row = Row(row.switch, row.ports, row.src_mac, row.scalar, row.pcp).build(flows, eng.attrs)
        ps: list = []
        code = eng.decide(row, dst, ps).astype(np.int64)
        code[code == selfcode] = SELF
        return bool((code == code[0]).all() and (ps[0] == ps[0][0]).all())

    def _check_row(self, row: Row, flows: list | None, cols: np.ndarray | None) -> None:
        """A row re-decided at an alike switch must stay alike there (else the sweep restarts split)."""
        own = self.group_col.get(row.switch) if row.switch in self.alike else None
        if own is None or (cols is not None and own not in cols):
            return
        if not self.own_alike(row, flows):
            raise NotAlike(row.switch)

    # -- pairs --------------------------------------------------------------
    def source_classes(self, changed: dict[int, np.ndarray] | None = None) -> tuple[np.ndarray, list[np.ndarray]]:
        """(first row, host ids) per class of sources: hosts of one switch whose first rows share a line."""
        eng = self.eng
        by: dict[tuple[str, Any], list[int]] = {}
        content: dict[int, bytes] = {}  # line -> its decisions (lines of equal content decide alike)
        for h, host in enumerate(eng.hosts):
            r = eng.first_row(host)
            if changed and r in changed:
                key: Any = ("row", r)
            else:
                u = self.li[r]
                if u not in content:
                    content[u] = self.uniq[u].tobytes()
                key = ("line", content[u])
            by.setdefault((host.switch, key), []).append(h)
        first = np.array([eng.first_row(eng.hosts[m[0]]) for m in by.values()], dtype=np.int64)
        return first, [np.array(m, dtype=np.int64) for m in by.values()]

    def pair_weights(self, members: list[np.ndarray]) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
        """weight(class, column) = |class| x |column| - |class and column| (self-pairs excluded)."""
        size = np.array([len(m) for m in members], dtype=np.int64)
        keys: list[np.ndarray] = []
        cnts: list[np.ndarray] = []
        n = self.n
        for k, m in enumerate(members):
            c, cnt = np.unique(self.col_of_host[m], return_counts=True)
            keys.append(k * n + c[c >= 0])
            cnts.append(cnt[c >= 0])
        kk = np.concatenate(keys)
        order = np.argsort(kk)
        kk, cc = kk[order], np.concatenate(cnts)[order]

        def weight(cls: np.ndarray, col: np.ndarray) -> np.ndarray:
            w = size[cls] * self.col_size[col]
            key = cls * n + col
            pos = np.minimum(np.searchsorted(kk, key), len(kk) - 1)
            return w - np.where(kk[pos] == key, cc[pos], 0)

        return weight

    def walk_pairs(
        self,
        first: np.ndarray,
        col: np.ndarray,
        changed: dict[int, np.ndarray] | None = None,
        *,
        visits: list | None = None,
        pair_ids: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Walk each pair (first row, column) to its end: (final codes, dependency edges).
        ``visits`` collects ``switch index << 32 | pair id`` for every hop."""
        U = self.unique_matrix()
        n = self.n
        flat = U.reshape(-1)
        li = getattr(self, "_li_arr", None)
        if li is None or len(li) != len(self.li):
            li = self._li_arr = np.array(self.li, dtype=np.int64)
        over = None
        if changed:
            over = np.full(len(li), -1, dtype=np.int64)
            rows = list(changed)
            over[rows] = np.arange(len(rows))
            X = np.stack([changed[r] for r in rows]).reshape(-1)
        bound = len(self.compiled.fabric.switches) + 1
        ingress = self.eng.ingress_ids()  # a step back out of the ingress port is a drop
        codes = np.empty(len(first), dtype=np.int32)
        edges: list[np.ndarray] = []
        for b0 in range(0, len(first), VISIT_BATCH):
            idx = np.arange(b0, min(b0 + VISIT_BATCH, len(first)))
            cur = first[idx].astype(np.int64)
            c = col[idx].astype(np.int64)
            hop = 1
            snap = None
            next_snap = 2
            while idx.size:
                if visits is not None:
                    pid = idx if pair_ids is None else pair_ids[idx]
                    visits.append(self.sw_of_row[cur].astype(np.int64) << 32 | pid)
                code = flat[li[cur] * n + c]
                if over is not None:
                    o = over[cur]
                    m = o >= 0
                    if m.any():
                        code[m] = X[o[m] * n + c[m]]
                self.eng.drop_back_to_ingress(ingress, cur, code)
                keep = (code >= 0) & self.fabric_row[cur]
                if keep.any():
                    edges.append(np.unique(cur[keep] << 32 | code[keep].astype(np.int64)))
                done = code < 0
                if done.any():
                    codes[idx[done]] = code[done]
                    live = ~done
                    idx, cur, c = idx[live], code[live].astype(np.int64), c[live]
                    if snap is not None:
                        snap = snap[live]
                else:
                    cur = code.astype(np.int64)
                if not idx.size:
                    break
                hop += 1
                if hop > bound:
                    codes[idx] = LOOP
                    break
                if snap is not None:
                    cyc = cur == snap
                    if cyc.any():
                        codes[idx[cyc]] = LOOP
                        live = ~cyc
                        idx, cur, c, snap = idx[live], cur[live], c[live], snap[live]
                if hop == next_snap:
                    snap = cur.copy()
                    next_snap *= 2
        e = np.unique(np.concatenate(edges)) if edges else np.zeros(0, dtype=np.int64)
        return codes, e

    def translate(self, other: "ColumnLines", edges: np.ndarray) -> np.ndarray:
        """Edges between rows of ``other`` (same fabric) as edges between rows of this sweep."""
        eng, fabric = self.eng, self.compiled.fabric
        memo: dict[int, int] = {}

        def row(r: int) -> int:
            got = memo.get(r)
            if got is None:
                sw_a, port_a, pcp = other.eng.channel(r)  # type: ignore[misc]
                peer = fabric.peer(sw_a, port_a)
                got = memo[r] = eng.row(peer.node, eng.class_of[(peer.node, peer.port)], pcp)
            return got

        out = [row(int(x) >> 32) << 32 | row(int(x) & 0xFFFFFFFF) for x in edges.tolist()]
        self.ensure_base()
        return np.array(sorted(set(out)), dtype=np.int64)

    def channel(self, r: int) -> str:
        return channel_name(self.eng.channel(r))  # type: ignore[arg-type]


def expand_affected(
    sw: ColumnLines,
    pc: np.ndarray,
    pcol: np.ndarray,
    w: np.ndarray,
    first: np.ndarray,
    members: list[np.ndarray],
    first_rows: list[np.ndarray],
    local: Sequence[int],
    changed: dict[int, np.ndarray],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The affected pairs as walks (first row, column, weight): a source class whose
    members' first rows the scenario changed is split by first row."""
    hit = [k for k in local if any(int(r) in changed for r in first_rows[k])]
    if not hit:
        return first[pc], pcol, w
    keep = ~np.isin(pc, hit)
    fs, cs, ws = [first[pc[keep]]], [pcol[keep]], [w[keep]]
    for k in hit:
        sel = pcol[pc == k]
        if not sel.size:
            continue
        sub: dict[int, list[int]] = {}
        for h, r in zip(members[k].tolist(), first_rows[k].tolist()):
            sub.setdefault(r if r in changed else -1, []).append(h)
        for key, hs in sub.items():
            ids = np.array(hs, dtype=np.int64)
            r0 = int(first_rows[k][members[k] == ids[0]][0])
            cid = sw.col_of_host[ids]
            inter = np.bincount(cid[cid >= 0], minlength=sw.n)[sel]
            fs.append(np.full(len(sel), r0, dtype=np.int64))
            cs.append(sel)
            ws.append(len(ids) * sw.col_size[sel] - inter)
    return np.concatenate(fs), np.concatenate(cs), np.concatenate(ws)



def edge_names(sw: ColumnLines, edges: np.ndarray) -> set[tuple[str, str]]:
    """Row-pair edges as channel-name pairs."""
    return {(sw.channel(int(x) >> 32), sw.channel(int(x) & 0xFFFFFFFF)) for x in edges.tolist()}
