"""Workload-aware intermediates: the Valiant port of every host port chosen from a traffic matrix.

The valiant and conditional policies give every host port of an access switch one Valiant port
(Dragonfly global port, Flattened Butterfly top-dimension port) and, under conditional routing, a
second one for when the first is the paused default port itself. Statically that is host ``t`` ->
port ``t mod n`` and the next one (:func:`~hpcfabric.rules.policies.valiant.static_intermediates`).
:func:`choose_intermediates` instead chooses them for an application's
:class:`~hpcfabric.topology.traffic.TrafficMatrix` (Lugones et al., paper notes §4): the same
number of entries per switch, the same entry shapes and classes of service, only other ports in
them -- so the deadlock and delivery proofs hold as for the static choice (docs/workload.md) and
the verifier checks them again on the compiled tables.

**Model.** Only the *top links* (Dragonfly global links, FB top-dimension links; directed, one per
``(switch, port)``) are loaded; a frame whose destination block (group / top-dimension row) is
its source's own never detours. A flow (host -> destination block, weight ``w``) loads

* minimally: the top link its minimal route crosses (the routing of :mod:`hpcfabric.rules.routing`);
* through intermediate port ``v`` (leading to switch ``x`` of block ``b``): link ``(s, v)`` and,
  unless ``b`` is the destination block, the top link of ``x``'s minimal route to it. Under
  conditional routing a flow whose default port *is* ``v`` (paused) takes the second port.

Which share ``d`` of a flow detours: the valiant policy detours everything (``d = 1``). The
conditional policy detours only while the default port is paused, i.e. where the minimal route is
overloaded: ``d = max(0, 1 - mean / M)`` with ``M`` the minimal load of the flow's top link and
``mean`` the mean minimal load over all top links (the *pressure model*: under UN or any
matrix minimal routing spreads evenly nothing detours and the static choice stays; under ADV
almost everything on the hot link does). Expected load of a link = the minimal loads of the
``1 - d`` shares + the Valiant loads of the ``d`` shares.

**Optimisation.** Minimise the maximum expected top-link load. Greedy: host ports by decreasing
remote weight, each takes the first port minimising (the largest load among the links it touches,
then the increase of the sum of squared loads, then the distance from the static port); its
second port likewise for the flows whose default it is (else the next port after it, as
statically). Then local search: every host port touching a link loaded to >= :data:`HOT` of the
maximum is removed and placed again (kept only if strictly better), until a sweep moves nothing or
``passes`` sweeps are done. Deterministic (fixed orders, ties to the static choice).
Cost O(passes x host ports x Valiant ports x destination blocks per host), numpy per candidate.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from hpcfabric.errors import CompileError
from hpcfabric.rules.fabrics.flattened_butterfly import fb_dim_ports
from hpcfabric.rules.policies.valiant import static_intermediates, valiant_ports
from hpcfabric.topology.model import Fabric
from hpcfabric.topology.traffic import TrafficMatrix

#: per switch, per host port: Valiant ports in preference order (first, second)
Intermediates = Mapping[str, Mapping[int, tuple[int, ...]]]
ROUTINGS = ("conditional", "valiant")
#: local search revisits only host ports touching a link loaded to at least this share of the maximum
HOT = 0.9


@dataclass(frozen=True)
class WorkloadChoice:
    """The chosen intermediates and what the model says about them.

    ``static_max`` / ``chosen_max``: the largest expected top-link load (in matrix weight units per
    unit of weight) with the static and the chosen intermediates; ``moved``: host ports whose
    ports differ from the static choice; ``seconds``: time to choose."""

    intermediates: Intermediates
    static_max: float
    chosen_max: float
    minimal_max: float
    moved: int
    host_ports: int
    seconds: float


class _Model:
    """Top links, the blocks, the second-hop link table and the host flows of one fabric + matrix."""

    def __init__(self, fabric: Fabric, traffic: TrafficMatrix, routing: str) -> None:
        if fabric.kind not in ("dragonfly", "flattened_butterfly"):
            raise CompileError(f"workload-aware intermediates apply to Dragonfly and Flattened Butterfly fabrics, "
                               f"not {fabric.kind}")
        self.fabric = fabric
        sws = fabric.switches
        self.sidx = {s.name: i for i, s in enumerate(sws)}
        fb = fabric.kind == "flattened_butterfly"
        blk = [s.coords[-1] if fb else s.group for s in sws]
        keys = sorted(set(blk))
        bpos = {b: i for i, b in enumerate(keys)}
        self.block = np.array([bpos[b] for b in blk], dtype=np.int64)
        nb = len(keys)
        self.valiant: list[list[int]] = [valiant_ports(fabric, s) for s in sws]
        self.lid: dict[tuple[int, int], int] = {}
        self.peer: dict[tuple[int, int], int] = {}
        for i, s in enumerate(sws):
            for port in self.valiant[i]:
                self.lid[(i, port)] = len(self.lid)
                self.peer[(i, port)] = self.sidx[fabric.peer(s.name, port).node]
        self.nlinks = len(self.lid)
        # second-hop table: top link of switch i's minimal route to block B (-1: own block)
        l2 = np.full((len(sws), nb), -1, dtype=np.int64)
        if fb:
            top = len(fabric.params["dims"]) - 1
            for i, s in enumerate(sws):
                for d, v, port in fb_dim_ports(fabric, s):
                    if d == top:
                        l2[i, bpos[v]] = self.lid[(i, port)]
        else:
            links: dict[int, dict[int, list[tuple[int, int]]]] = {}
            index_of = {(s.group, s.index): i for i, s in enumerate(sws)}
            for (i, port), j in self.peer.items():
                links.setdefault(sws[i].group, {}).setdefault(sws[j].group, []).append((sws[i].index, port))
            for per in links.values():
                for lst in per.values():
                    lst.sort()
            for i, s in enumerate(sws):
                for g, lst in links.get(s.group, {}).items():
                    mine = [port for k, port in lst if k == s.index]
                    if mine:
                        l2[i, bpos[g]] = self.lid[(i, mine[0])]
                    else:  # as DragonflyRouter.to_group: the holder chosen by the group number
                        k = lst[g % len(lst)][0]
                        h = index_of[(s.group, k)]
                        l2[i, bpos[g]] = self.lid[(h, [p for kk, p in lst if kk == k][0])]
        self.l2 = l2
        self._flows(fabric, traffic, routing)

    def _flows(self, fabric: Fabric, traffic: TrafficMatrix, routing: str) -> None:
        """Per host (fabric order): remote destination blocks and the weights that detour, CSR; the
        minimal loads of the rest (module docstring)."""
        hosts = fabric.hosts
        nb = self.l2.shape[1]
        h_sw = np.array([self.sidx[h.switch] for h in hosts], dtype=np.int64)
        traffic.check(fabric)
        if traffic.level == "host":
            hid = {h.name: i for i, h in enumerate(hosts)}
            ids = np.array([hid[n] for n in traffic.names], dtype=np.int64)
            src = ids[traffic.src]
            dblk = self.block[h_sw[ids[traffic.dst]]]
            key = src * nb + dblk
            w = traffic.weight
        else:
            ids = np.array([self.sidx[n] for n in traffic.names], dtype=np.int64)
            ssw, dblk = ids[traffic.src], self.block[ids[traffic.dst]]
            row = np.bincount(ssw * nb + dblk, weights=traffic.weight, minlength=len(self.block) * nb)
            row = row.reshape(len(self.block), nb)
            cnt = np.bincount(h_sw, minlength=len(self.block)).astype(np.float64)
            per = row[h_sw] / cnt[h_sw][:, None]  # hosts x blocks (dense; blocks are few)
            hsrc, hb = np.nonzero(per)
            key, w = hsrc * nb + hb, per[hsrc, hb]
        remote = (key % nb) != self.block[h_sw[key // nb]]
        uniq, inv = np.unique(key[remote], return_inverse=True)
        agg = np.bincount(inv, weights=np.asarray(w)[remote], minlength=len(uniq))
        self.fhost, self.fblock, self.fw = uniq // nb, uniq % nb, agg
        self.off = np.concatenate([[0], np.cumsum(np.bincount(self.fhost, minlength=len(hosts)))]).astype(np.int64)
        self.h_sw = h_sw
        dflt = self.l2[h_sw[self.fhost], self.fblock]
        full = np.bincount(dflt, weights=agg, minlength=self.nlinks)
        self.minimal_max = float(full.max(initial=0.0))
        if routing == "valiant":
            share = np.ones(len(agg))
        else:
            mean = float(full.mean()) if len(full) else 0.0  # an even spread over every top link
            share = np.clip(1.0 - mean / np.maximum(full[dflt], 1e-300), 0.0, 1.0)
        self.fw = agg * share
        self.minimal = np.bincount(dflt, weights=agg - self.fw, minlength=self.nlinks)

    def contribution(self, hi: int, first: int, second: int | None) -> tuple[np.ndarray, np.ndarray]:
        """(links, amounts) host ``hi``'s flows add through ``first`` (``second`` for the flows whose
        default port is ``first``; None: no second entry, they take ``first`` too)."""
        a, b = self.off[hi], self.off[hi + 1]
        blocks, w = self.fblock[a:b], self.fw[a:b]
        s = self.h_sw[hi]
        f = self.lid[(s, first)]
        dflt = self.l2[s, blocks]
        via = np.full(len(blocks), first, dtype=np.int64)
        if second is not None:
            via[dflt == f] = second
        links, amounts = [], []
        for port in np.unique(via).tolist():
            m = via == port
            wm = w[m]
            links.append(np.array([self.lid[(s, port)]]))
            amounts.append(np.array([wm.sum()]))
            hop2 = self.l2[self.peer[(s, port)], blocks[m]]
            keep = hop2 >= 0
            links.append(hop2[keep])
            amounts.append(wm[keep])
        return np.concatenate(links), np.concatenate(amounts)


def _score(load: np.ndarray, links: np.ndarray, amounts: np.ndarray, beta: float) -> tuple[float, float]:
    """(largest resulting load among the touched links, increase of the sum of squared loads)."""
    if not len(links):
        return 0.0, 0.0
    uniq, inv = np.unique(links, return_inverse=True)
    old = load[uniq]
    new = old + np.bincount(inv, weights=amounts * beta, minlength=len(uniq))
    return float(new.max()), float((new * new - old * old).sum())


class _Search:
    """Greedy placement and local search over one model (module docstring)."""

    def __init__(self, model: _Model, routing: str, static: dict[int, tuple[int, ...]]) -> None:
        self.m = model
        self.beta = 1.0
        self.two = routing == "conditional"
        self.static = static
        self.load = model.minimal.copy()
        self.chosen: dict[int, tuple[int, ...]] = {}
        self.added: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def contribution(self, i: int, ports: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        return self.m.contribution(i, ports[0], ports[1] if self.two and len(ports) > 1 else None)

    def apply(self, i: int, ports: tuple[int, ...]) -> None:
        links, amounts = self.added[i] = self.contribution(i, ports)
        self.chosen[i] = ports
        np.add.at(self.load, links, self.beta * amounts)

    def remove(self, i: int) -> tuple[int, ...]:
        links, amounts = self.added.pop(i)
        np.add.at(self.load, links, -self.beta * amounts)
        return self.chosen.pop(i)

    def keys(self, i: int, ports: list[int], blocks: np.ndarray, w: np.ndarray) -> np.ndarray:
        """Per candidate port: (largest resulting load among the links it touches, increase of the sum
        of squares) for host ``i``'s flows ``blocks``/``w`` all through it, vectorised. A candidate's
        links are distinct (one first hop out of the source block, one second hop per other block)."""
        m, load, beta = self.m, self.load, self.beta
        s = int(m.h_sw[i])
        first = np.array([m.lid[(s, p)] for p in ports])
        hop2 = m.l2[np.array([m.peer[(s, p)] for p in ports])][:, blocks]  # candidates x flows
        ok = hop2 >= 0
        old2 = np.where(ok, load[np.maximum(hop2, 0)], 0.0)
        new2 = np.where(ok, old2 + beta * w, 0.0)
        f_old = load[first]
        f_new = f_old + beta * w.sum()
        worst = np.maximum(f_new, new2.max(axis=1, initial=0.0))
        sq = f_new ** 2 - f_old ** 2 + (new2 ** 2 - old2 ** 2).sum(axis=1)
        return np.stack([worst, sq], axis=1)

    def place(self, i: int) -> tuple[int, ...]:
        """The best ports for host ``i`` given the other placements (ties: the static order)."""
        m = self.m
        s = int(m.h_sw[i])
        ports = m.valiant[s]
        n = len(ports)
        start = ports.index(self.static[i][0])
        cand = [ports[(start + r) % n] for r in range(n)]  # static order: ties go to the static port
        blocks, w = m.fblock[m.off[i]:m.off[i + 1]], m.fw[m.off[i]:m.off[i + 1]]
        k = self.keys(i, cand, blocks, w)
        best = cand[int(np.lexsort((np.arange(n), k[:, 1], k[:, 0]))[0])]
        nxt = ports[(ports.index(best) + 1) % n]
        if not self.two or n < 2:
            return (best,)
        mask = m.l2[s, blocks] == m.lid[(s, best)]
        if not mask.any():
            return (best, nxt)  # no flow of this host has its default port there: the second is never used
        rest = [ports[(ports.index(best) + r) % n] for r in range(1, n)]
        k2 = self.keys(i, rest, blocks[mask], w[mask])
        return (best, rest[int(np.lexsort((np.arange(n - 1), k2[:, 1], k2[:, 0]))[0])])

    def sweep(self, order: list[int]) -> bool:
        """Every host port removed and placed again; True if any moved to a strictly better place."""
        changed = False
        hot = HOT * float(self.load.max(initial=0.0))
        for i in order:
            links = self.added[i][0]
            if not len(links) or float(self.load[links].max()) < hot:
                continue  # touches no link near the maximum: moving it cannot lower the objective now
            old = self.remove(i)
            new = self.place(i)
            if new != old:
                nl, na = self.contribution(i, new)
                ol, oa = self.contribution(i, old)
                if _score(self.load, nl, na, self.beta) >= _score(self.load, ol, oa, self.beta):
                    new = old
            changed |= new != old
            self.apply(i, new)
        return changed

    def objective(self) -> tuple[float, float]:
        return float(self.load.max(initial=0.0)), float((self.load * self.load).sum())


def choose_intermediates(fabric: Fabric, traffic: TrafficMatrix, routing: str = "conditional",
                         passes: int = 4) -> WorkloadChoice:
    """Per access switch, per host port, the Valiant ports (first, second) for ``traffic`` (module
    docstring). ``routing``: ``conditional`` (pressure model, two ports) or ``valiant`` (one port).
    Two searches run: greedy from nothing and local search from the static choice; the better one
    (largest load, then sum of squares; the static-seeded one on a tie) is returned if its largest
    load is strictly lower than the static choice's, else the static choice itself: the model never
    rates the choice worse than static, and no host port moves without a strictly lower maximum.

    Raises
    ------
    CompileError
        A fabric kind without Valiant ports (fat-tree, Clos, explicit) or an unknown routing.
    """
    if routing not in ROUTINGS:
        raise CompileError(f"workload-aware intermediates are for valiant or conditional routing, not {routing!r}")
    t0 = time.perf_counter()
    model = _Model(fabric, traffic, routing)
    hosts = fabric.hosts
    static = {i: static_intermediates(model.valiant[int(model.h_sw[i])], h.index) for i, h in enumerate(hosts)
              if model.valiant[int(model.h_sw[i])]}
    weight = np.array([model.fw[model.off[i]:model.off[i + 1]].sum() for i in range(len(hosts))])
    order = [i for i in np.argsort(-weight, kind="stable").tolist()
             if weight[i] > 0 and len(model.valiant[int(model.h_sw[i])]) > 1]
    seeded = _Search(model, routing, static)
    for i in order:
        seeded.apply(i, static[i])
    static_max = seeded.objective()[0]
    greedy = _Search(model, routing, static)
    for i in order:
        greedy.apply(i, greedy.place(i))
    for search in (seeded, greedy):
        for _ in range(passes):
            if not search.sweep(order):
                break
    best = greedy if greedy.objective() < seeded.objective() else seeded
    if best.objective()[0] >= static_max * (1 - 1e-9):
        best = _Search(model, routing, static)  # no strictly lower maximum: keep the static choice
        for i in order:
            best.apply(i, static[i])
    result: dict[str, dict[int, tuple[int, ...]]] = {}
    moved = 0
    for i, h in enumerate(hosts):
        if i not in static:
            continue
        ports = best.chosen.get(i, static[i])
        if routing != "conditional":
            ports = ports[:1]
        result.setdefault(h.switch, {})[h.port] = ports
        moved += ports != static[i][:len(ports)]
    return WorkloadChoice(result, static_max, best.objective()[0], model.minimal_max, int(moved),
                          len(order), time.perf_counter() - t0)
