"""The union proof's destination columns, injections and dependency verdict, shared by the whole-fabric
proof (:mod:`hpcfabric.verify.union.proof`) and the incremental one (:mod:`hpcfabric.verify.incremental.delta`).

:func:`prepare` reads a compiled fabric once: the data-relevant entries, the destination columns (one per
alike access switch, one per host otherwise, then the invalid probes), their :class:`~hpcfabric.verify.union.choices.Choices`
and where hosts inject (:class:`Columns`). On the surviving fabric (``compiled.failures``) a failed switch injects
nothing, and a pair the failures disconnect (a failed switch's hosts among them) is no pair to deliver --
its frames are walked all the same: they wait in queues until dropped, so their dependencies count. :func:`cdg_verdict` checks a set of packed dependency edges for cycles, whole and per class.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import networkx as nx
import numpy as np

from hpcfabric.errors import VerificationError
from hpcfabric.verify.union.choices import SLOT_BITS, Choices
from hpcfabric.verify.codes import DELIVER, DROP, UNTAGGED, channel_name, cos_label
from hpcfabric.verify.engine import forward_data_flows
from hpcfabric.verify.graphs import LOW32, core_graph, find_cycle
from hpcfabric.verify.probes import probe_addresses

__all__ = ["Inputs", "prepare", "Columns", "checked_columns", "alike", "channel_namer", "edge_names", "cdg_verdict",
           "groups_of_hosts", "structural_splits_of"]

SELF = -(2**30)  # "delivered to the destination itself" in normalised decisions


@dataclass
class Inputs:
    """What :func:`prepare` read: entries, targets, choices and columns of one compiled fabric."""

    relevant: dict[str, list[Any]]
    host_macs: np.ndarray
    groups: dict[str, np.ndarray]  # access switch -> its host ids (failed switches left out)
    split: set[str]
    targets: np.ndarray
    probes: list[Any]
    ch: Choices
    cols: "Columns"
    timings: dict[str, float] = field(default_factory=dict)


def prepare(compiled: Any, *, progress: Callable[[int, int, float], None] | None = None,
            relevant: dict[str, list[Any]] | None = None, every_port: bool = False) -> Inputs:
    """Entries, columns and choices of ``compiled`` (module docstring); ``every_port``: hosts inject from
    every host port (:meth:`Columns.injections`)."""
    t0 = time.perf_counter()
    timings: dict[str, float] = {}
    fabric, plan = compiled.fabric, compiled.plan
    if relevant is None:
        relevant = forward_data_flows(compiled, "the union proof", VerificationError, actions=True)
    hosts = fabric.hosts
    host_macs = np.array([plan.host_mac[h.name] for h in hosts], dtype=np.uint64)
    failures = getattr(compiled, "failures", None)
    every = groups_of_hosts(hosts)
    split = structural_splits_of(relevant, host_macs, every)
    groups = every  # a failed switch's hosts are still destinations: frames to them travel until dropped
    target_host = np.concatenate([ids if t in split else ids[:1] for t, ids in groups.items()]) if groups else \
        np.zeros(0, dtype=np.int64)
    probes = probe_addresses(plan)
    targets = np.concatenate([host_macs[target_host], np.array([m for m, _ in probes], dtype=np.uint64)])
    timings["entries"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    ch = Choices(compiled, relevant, targets, progress=progress)
    timings["decisions"] = time.perf_counter() - t1
    timings.update({f"decisions.{k}": v for k, v in ch.timings.items()})
    cols = Columns(ch, groups, split, target_host, len(probes))
    cols.injections(ch, groups, fabric, every_port, failed=failures.switches if failures else frozenset())
    if failures:
        cols.surviving(ch, failures)
    return Inputs(relevant, host_macs, groups, split, targets, probes, ch, cols, timings)


class Columns:
    """Destination columns: one per alike access switch, one per host otherwise, then the probes."""

    def __init__(self, ch: Choices, groups: dict[str, np.ndarray], split: set[str], target_host: np.ndarray,
                 n_probes: int) -> None:
        fabric = ch.fabric
        target_of = {int(h): i for i, h in enumerate(target_host.tolist())}
        self.split = set(split) | {t for t, ids in groups.items() if t not in split and len(ids) > 1
                                   and not alike(ch, t)}
        host: list[int] = []
        target: list[int] = []
        own: list[tuple[int, int, int]] = []  # (column, switch index, class there) for per-host columns
        self.single: list[bool] = []
        for t, ids in groups.items():
            per_host = t in self.split or len(ids) == 1
            own_ids, own_cls = ch.own_classes(t)
            pos = {h: i for i, h in enumerate(own_ids)}
            for h in (ids if per_host else ids[:1]):
                h = int(h)
                if per_host:
                    own.append((len(host), ch.sw_index[t], int(own_cls[pos[h]])))
                host.append(h)
                target.append(target_of.get(h, target_of.get(int(ids[0]), -1)))
                self.single.append(per_host)
        self.n_host_columns = len(host)
        nt = len(target_host)
        target += list(range(nt, nt + n_probes))
        target_ids = self.target = np.array(target, dtype=np.int64)  # per column: its target (Choices.targets)
        self.own = own  # (column, switch index, class there) of the per-host columns at their own switch
        if not own and np.array_equal(target_ids, np.arange(ch.cls.shape[1])):
            self.cls = ch.cls  # the targets in column order: no copy (switches x columns cells, 1.1 GB at 300k)
        else:
            self.cls = ch.cls[:, target_ids] if target else np.zeros((len(ch.names), 0), np.int32)
        for c, s, k in own:
            self.cls[s, c] = k
        self.host = np.array(host, dtype=np.int64)
        self.want = np.concatenate([DELIVER - self.host, np.full(n_probes, DROP, dtype=np.int64)])
        self.probe = np.concatenate([np.zeros(len(host), dtype=bool), np.ones(n_probes, dtype=bool)])
        self.single += [False] * n_probes
        self.names = [fabric.hosts[h].name for h in host] + [f"probe {i}" for i in range(n_probes)]
        self.state_comp: np.ndarray | None = None  # surviving(): switch -> connected component
        self.components: tuple[np.ndarray, np.ndarray] | None = None  # surviving(): per switch, per column
        self.unreachable = 0
        self.col_sw = np.array([ch.sw_index[fabric.hosts[h].switch] for h in host], dtype=np.int64)
        self.decode = ch.decode

    def injections(self, ch: Choices, groups: dict[str, np.ndarray], fabric: Any, every_port: bool = False,
                   failed: Any = frozenset()) -> None:
        """Where hosts inject (:meth:`starts`): per switch and host port class one port (another member
        for the column of that port's own host: the self pair is no pair); probes from the first host
        of every access switch. ``every_port``: from every host port (the incremental proof's base: a
        change may set one host port apart from its class), probes too. A ``failed`` switch injects nothing."""
        rep_state, rep_host, alt_state = [], [], []
        probe_from = []
        for t in groups:
            if t in failed:
                continue
            members: dict[int, list[int]] = {}
            for p in sorted(fabric.host_ports(t)):
                members.setdefault(-p if every_port else ch.port_class[ch.sw_index[t]][p], []).append(p)
            for ports in members.values():
                rep_state.append(ch.state(t, ports[0], UNTAGGED))
                rep_host.append(ch.hid[fabric.peer(t, ports[0]).node])
                alt_state.append(ch.state(t, ports[1], UNTAGGED) if len(ports) > 1 else -1)
            host_ports = sorted(fabric.host_ports(t)) if every_port else [fabric.hosts[int(groups[t][0])].port]
            probe_from += [ch.state(t, p, UNTAGGED) for p in host_ports]
        self._inject = tuple(np.array(x, dtype=np.int64) for x in (rep_state, rep_host, alt_state))
        self._probe_from = np.array(probe_from, dtype=np.int64)

    def surviving(self, ch: Choices, failures: Any) -> None:
        """On the surviving fabric, a host pair whose switches the failures disconnect is no pair to deliver
        (its frames are still walked: their dependencies count until they are dropped): :attr:`components`
        for :func:`~hpcfabric.verify.union.unions.walk_union`, :attr:`unreachable` counts those injections."""
        fabric = ch.fabric
        g = nx.Graph()
        g.add_nodes_from(ch.names)
        dead = failures.dead_ports(fabric)
        for link in fabric.links:
            if link.a_port not in dead.get(link.a, ()) and link.a not in failures.switches \
                    and link.b not in failures.switches:
                g.add_edge(link.a, link.b)
        comp = np.zeros(len(ch.names), dtype=np.int64)
        for i, members in enumerate(nx.connected_components(g)):
            comp[[ch.sw_index[m] for m in members]] = i
        self.state_comp = comp
        self.components = (comp, np.concatenate([comp[self.col_sw], np.full(len(self.want) - len(self.col_sw), -1)]))

    def starts(self, which: np.ndarray | None = None, probes: bool = True,
               comp: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(column, state) of every host injection into the host columns ``which`` (all: None), then,
        with ``probes``, of the probe columns (:meth:`injections` first). Built only for the columns
        asked: all of them are columns x injection ports (300k Dragonfly: 16,668 x 300,024)."""
        n_host_cols = self.n_host_columns
        which = np.arange(n_host_cols, dtype=np.int64) if which is None else np.asarray(which, dtype=np.int64)
        rs, rh, ra = self._inject
        col = np.tile(which, len(rs))
        st = np.repeat(rs, len(which))
        single = np.array(self.single[:n_host_cols], dtype=bool)
        same = np.repeat(rh, len(which)) == np.where(single, self.host, -1)[col]
        st[same] = np.repeat(ra, len(which))[same]
        keep = st >= 0
        col, st = col[keep], st[keep]
        comp = self.state_comp if comp is None else comp
        if comp is not None:  # the surviving fabric: pairs it no longer connects (walked, not to be delivered)
            self.unreachable += int((comp[self.decode(st)[0]] != comp[self.col_sw[col]]).sum())
        n_probe = len(self.want) - n_host_cols
        if n_probe and probes:
            first = self._probe_from
            col = np.concatenate([col, np.tile(np.arange(n_host_cols, n_host_cols + n_probe), len(first))])
            st = np.concatenate([st, np.repeat(first, n_probe)])
        return col, st


def groups_of_hosts(hosts: Sequence[Any]) -> dict[str, np.ndarray]:
    """Host ids (positions in ``hosts``) per access switch."""
    by_sw: dict[str, list[int]] = {}
    for h, host in enumerate(hosts):
        by_sw.setdefault(host.switch, []).append(h)
    return {sw: np.array(ids, dtype=np.int64) for sw, ids in by_sw.items()}


def structural_splits_of(relevant: dict[str, list[Any]], host_macs: np.ndarray, groups: dict[str, np.ndarray]) -> set[str]:
    """Access switches ``t`` whose hosts some ``eth_dst`` match on another switch tells apart (from the
    data-relevant entries per switch and the host MACs).

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


def checked_columns(cols: Columns) -> np.ndarray:
    """The host columns whose injections the symmetry check reads: the first column of several hosts
    (they all share its injections) and every per-host column."""
    single = np.array(cols.single[:cols.n_host_columns], dtype=bool)
    many = np.flatnonzero(~single)
    return np.concatenate([many[:1], np.flatnonzero(single)])


def alike(ch: Choices, switch: str) -> bool:
    """Do the hosts of ``switch`` get the same choices in every line there (delivery to oneself
    normalised), unpaused and paused?"""
    own, cls = ch.own_classes(switch)
    fabric = ch.fabric
    own_port = np.array([fabric.hosts[h].port for h in own], dtype=np.int64)
    selfcode = own_port << SLOT_BITS  # one output to the host's own port, untagged (slot 0)
    for line in ch.lines_at.get(switch, []):
        off = ch.line_off[line]
        for arr in (ch.base, ch.alt):
            code = arr[off + cls].astype(np.int64)
            code = np.where(code == selfcode, SELF, code)
            if not (code == code[0]).all():
                return False
    return True


def channel_namer(ch: Choices) -> Callable[[int], str]:
    """State -> the name of the channel a frame waited in before arriving there (sender's egress)."""
    def name(state: int) -> str:
        sw, port, pcp = (int(x[0]) for x in ch.decode(np.array([state], dtype=np.int64)))
        peer = ch.fabric.peer(ch.names[sw], port)
        return channel_name((peer.node, peer.port, pcp))  # type: ignore[union-attr]

    return name


def edge_names(ch: Choices, edges: np.ndarray) -> frozenset[tuple[str, str]]:
    name = channel_namer(ch)
    return frozenset((name(int(e) >> 32), name(int(e) & LOW32)) for e in edges.tolist())


def cdg_verdict(ch: Choices, edges: np.ndarray) -> dict[str, Any]:
    """Cycle check of the dependency edges (states of fabric arrivals), whole graph and per class."""
    src, dst = edges >> 32, edges & LOW32
    _, _, pcp = ch.decode(np.arange(ch.n_states, dtype=np.int64))
    name = channel_namer(ch)

    cycle = find_cycle(core_graph(src, dst), name)
    nodes = np.unique(np.concatenate([src, dst])) if len(edges) else np.zeros(0, dtype=np.int64)
    classes = sorted(set(pcp[nodes].tolist()))
    per_cos: dict[str, tuple[str, ...] | None] = {}
    same = pcp[src] == pcp[dst]
    for k in classes:
        sel = same & (pcp[src] == k)
        per_cos[cos_label(k)] = find_cycle(core_graph(src[sel], dst[sel]), name)
    return {"cycle": cycle, "per_cos": per_cos, "classes": tuple(cos_label(k) for k in classes), "channels": len(nodes)}
