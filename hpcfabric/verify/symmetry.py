"""Symmetries of a compiled fabric, checked entry by entry: the paused-port sweep of ~300k-host fabrics.

A *symmetry* ``σ`` maps switches to switches, each switch's ports to the image
switch's ports and hosts to hosts, such that every link maps to a link, and it
commutes with every switch's pipeline: for every ingress port ``p`` and arrival
VLAN PCP of switch ``s`` and every destination MAC ``d``, what ``s`` does with
the frame (outputs, their port and PCP, punt, pipeline error, the PORT_STATE
entry met, and all of that again with the PORT_STATE entries flipped to
"paused") equals, ports mapped, what ``σ(s)`` does with ``σ(d)`` arriving on
``σ(p)``. Then the walk of host pair ``(a, d)`` with port ``x`` paused maps hop
by hop, channel by channel, to the walk of ``(σa, σd)`` with ``σ(x)`` paused.

Consequences used by :func:`hpcfabric.verify.sweep.symmetric_sweep`:

* **Delivery.** If every orbit of access switches under the symmetries has a
  representative in ``D0``, every pair in every single-paused-port scenario is
  the image of a pair with its destination behind ``D0`` in another
  single-paused-port scenario. Sweeping every scenario for destinations in
  ``D0`` proves delivery for all pairs.
* **Deadlock.** The union dependency graph over all destinations is the union
  of the images of ``G0`` (the union graph for destinations in ``D0``). Map
  every channel to its orbit: a cycle in the full union maps to a closed walk
  in the quotient ``G0 / Γ``; an acyclic quotient proves the full union acyclic
  (the converse does not hold, so a cyclic quotient is reported as
  inconclusive, never as a pass).

Why checking the rules is exact, not sampled: at switch ``s`` the pipeline
depends on the destination only through the ``eth_dst`` matches of its entries;
destinations that meet the same entries (``s``'s *destination classes*, see
:func:`hpcfabric.verify.decisions.destination_classes`) decide alike. Hosts of one access switch ``t`` are alike at
every switch but ``t`` (checked by :func:`hpcfabric.verify.columns.structural_splits`),
so the destinations are one representative per access switch plus ``s``'s own
hosts. Classes that every row of ``s`` decides alike (unpaused and paused) are
merged into behaviour classes; the check pairs the behaviour classes of ``s``
and ``σ(s)`` (they must correspond one to one under ``σ``) and compares the
decisions on one representative per class. Frames meet at most one PORT_STATE
entry (``goto`` only leads to later tables and resubmits are inlined), so
"every entry flipped" gives, for each destination, exactly the decision with
the entry it meets flipped alone.

Candidate generators come from the generator's structure (Dragonfly, palmtree
arrangement: rotate groups by one; xor arrangement: XOR group numbers with a
power of two; flattened butterfly: add one to a coordinate, modulo its size);
a candidate that is not an automorphism of the topology or whose rules do not
commute is dropped with the reason, never trusted.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from hpcfabric.verify.automorphism import (
    Automorphism,
    automorphism,
    candidate_generators,
    channel_orbits,
    orbit_representatives,
)
from hpcfabric.verify.codes import UNTAGGED
from hpcfabric.verify.decisions import arrival_pcps, decide_line, destination_classes, forward_data_flows, port_classes, unique_rows
from hpcfabric.verify.engine import Destinations, Row
from hpcfabric.verify.scenarios import paused_data_flows

__all__ = [
    "Automorphism",
    "SymmetryReport",
    "candidate_generators",
    "automorphism",
    "check_symmetries",
    "orbit_representatives",
    "channel_orbits",
    "symmetric_sweep",
    "SymmetricSweepReport",
]


@dataclass(frozen=True)
class SymmetryReport:
    """Which candidate symmetries hold on the compiled tables (``as_dict`` is JSON-ready)."""

    kept: tuple[Automorphism, ...]
    dropped: dict[str, str]  # generator name -> why
    switches: int
    destination_classes: int  # summed over switches
    decision_lines: int  # (port class, PCP) lines decided, base and flipped
    seconds: float
    timings: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "kept": [a.name for a in self.kept],
            "dropped": dict(self.dropped),
            "switches": self.switches,
            "destination_classes": self.destination_classes,
            "decision_lines": self.decision_lines,
            "seconds": round(self.seconds, 3),
            "timings": {k: round(v, 3) for k, v in self.timings.items()},
        }



# ---------------------------------------------------------------------------
# the check on the compiled tables


@dataclass
class _Behaviour:
    """What one switch does: destination classes and per (port class, PCP) line the
    decisions on one representative per class, unpaused and with PORT_STATE flipped."""

    cls: np.ndarray  # class per destination element (columns, then own hosts)
    reps: np.ndarray  # element index per class
    port_class: dict[int, int]
    lines: dict[tuple[int, int], int]  # (port class, PCP) -> line
    base: list[tuple[np.ndarray, ...]]  # per line: out_n, out_port, out_pcp, punt, err, ps_port
    alt: list[tuple[np.ndarray, ...]]
    own: list[str]  # own host names, in element order after the columns


class _Checker:
    def __init__(self, compiled: Any) -> None:
        self.compiled = compiled
        fabric = self.fabric = compiled.fabric
        plan = compiled.plan
        self.relevant = forward_data_flows(compiled, "the symmetry check")
        self.flipped: dict[str, list[Any]] = {}
        self.pcps = arrival_pcps(self.relevant)
        self.access = [s.name for s in fabric.access_switches]
        self.col_of = {t: i for i, t in enumerate(self.access)}
        self.rep_host = {t: fabric.hosts_on(t)[0].name for t in self.access}
        self.col_macs = np.array([plan.host_mac[self.rep_host[t]] for t in self.access], dtype=np.uint64)
        self.hid = {h.name: i for i, h in enumerate(fabric.hosts)}
        self.lines = 0
        self.classes = 0

    def behaviour(self, switch: str) -> _Behaviour:
        fabric, plan = self.fabric, self.compiled.plan
        own = [h.name for h in fabric.hosts_on(switch)]
        macs = np.concatenate([self.col_macs, np.array([plan.host_mac[h] for h in own], dtype=np.uint64)])
        relevant = self.relevant[switch]
        flipped, same = paused_data_flows(self.compiled, switch, relevant)
        cls, reps = destination_classes(relevant, macs)  # flipping changes actions, never matches
        dst = Destinations(macs[reps])
        attrs: dict = {}  # per switch: the engine's view caches would otherwise hold every switch's entries
        pc = port_classes(fabric, switch, relevant, {})
        lines: dict[tuple[int, int], int] = {}
        base: list[tuple[np.ndarray, ...]] = []
        alt: list[tuple[np.ndarray, ...]] = []
        done: set[int] = set()
        for p, c in pc.items():
            if c in done:
                continue
            done.add(c)
            peer = fabric.peer(switch, p)
            src_mac = plan.host_mac[peer.node] if peer.is_host else None  # type: ignore[union-attr]
            for pcp in ([UNTAGGED] if peer.is_host else self.pcps):  # type: ignore[union-attr]
                row = Row(switch, (p,), src_mac, False, pcp).build(relevant, attrs)
                lines[(c, pcp)] = len(base)
                base.append(decide_line(row, dst))
                if same:  # no PORT_STATE entry to flip
                    alt.append(base[-1])
                else:
                    alt.append(decide_line(Row(switch, (p,), src_mac, False, pcp).build(flipped, attrs), dst))
        # destination classes by behaviour: classes of entries met that every line
        # decides alike, unpaused and paused, are one class (compaction differs between
        # switches that behave alike, so only behaviour can correspond under a symmetry)
        table = np.column_stack([np.asarray(v).astype(np.int64) for line in base + alt for v in line])
        first, inv = unique_rows(table)
        order = np.argsort(first)
        rank = np.empty(len(order), dtype=np.int64)
        rank[order] = np.arange(len(order))
        keep = first[order]
        cls = rank[inv.reshape(-1)][cls].astype(np.int32)
        reps = reps[keep]
        base = [tuple(v[keep] for v in line) for line in base]
        alt = [tuple(v[keep] for v in line) for line in alt]
        self.lines += 2 * len(base)
        self.classes += len(reps)
        return _Behaviour(cls, reps, pc, lines, base, alt, own)

    def compare(self, a: Automorphism, s: str, bs: _Behaviour, bt: _Behaviour) -> str | None:
        """None when ``a`` commutes with switch ``s``'s pipeline, else what differs."""
        fabric = self.fabric
        t = a.switch[s]
        ncol = len(self.access)
        perm = self._perm(a)
        own_t = {h: i for i, h in enumerate(bt.own)}
        try:
            own_map = np.array([ncol + own_t[a.host[h]] for h in bs.own], dtype=np.int64)
        except KeyError:
            return f"hosts of {s} do not map onto hosts of {t}"
        emap = np.concatenate([perm, own_map])
        pairs = np.unique(bs.cls.astype(np.int64) << 32 | bt.cls[emap].astype(np.int64))
        if not (len(pairs) == len(bs.reps) == len(bt.reps)):
            return f"destination classes of {s} and {t} do not correspond ({len(bs.reps)} vs {len(bt.reps)})"
        phi = bt.cls[emap[bs.reps]]
        pi = a.port[s]
        checked: set[tuple[int, int]] = set()
        for p, c in bs.port_class.items():
            q = int(pi[p])
            ct = bt.port_class.get(q)
            if ct is None:
                return f"port {s}:{p} maps to {t}:{q}, which has no row"
            for pcp in ([UNTAGGED] if fabric.peer(s, p).is_host else self.pcps):  # type: ignore[union-attr]
                la, lb = bs.lines[(c, pcp)], bt.lines[(ct, pcp)]
                if (la, lb) in checked:
                    continue
                checked.add((la, lb))
                for what, x, y in (("unpaused", bs.base[la], bt.base[lb]), ("paused", bs.alt[la], bt.alt[lb])):
                    why = _differs(x, y, phi, pi, a.port[t])
                    if why is not None:
                        k = why[0]
                        d = int(bs.reps[k])
                        dname = self.rep_host[self.access[d]] if d < ncol else bs.own[d - ncol]
                        pcp_s = "untagged" if pcp == UNTAGGED else pcp
                        return (f"{s} port {p} PCP {pcp_s} to {dname} ({what}): {why[1]}, "
                                f"but {t} port {q} to its image: {why[2]}")
        return None

    def _perm(self, a: Automorphism) -> np.ndarray:
        got = getattr(a, "_perm_cache", None)
        if got is None:
            got = np.array([self.col_of.get(a.switch[t], -1) for t in self.access], dtype=np.int64)
            for t in self.access:
                if a.host.get(self.rep_host[t]) != self.rep_host.get(a.switch[t]):
                    raise _NoMatch(f"the first host of {t} does not map to the first host of {a.switch[t]}")
            if (got < 0).any():
                raise _NoMatch("an access switch maps to a switch without hosts")
            object.__setattr__(a, "_perm_cache", got)
        return got


class _NoMatch(Exception):
    pass


def _differs(x: tuple[np.ndarray, ...], y: tuple[np.ndarray, ...], phi: np.ndarray,
             pi_s: np.ndarray, pi_t: np.ndarray) -> tuple[int, str, str] | None:
    """First class whose decision at the image switch is not the mapped one."""
    n, port, pcp, punt, err, ps = x
    n2, port2, pcp2, punt2, err2, ps2 = (v[phi] for v in y)
    out = n > 0
    mport = np.where(out, pi_s[np.clip(port, 0, len(pi_s) - 1)], 0)
    mport = np.where(out & ((port < 0) | (port >= len(pi_s))), -2, mport)
    mps = np.where(ps >= 0, pi_s[np.clip(ps, 0, len(pi_s) - 1)], -1)
    bad = (n != n2) | (punt != punt2) | (err != err2) | (mps != ps2)
    bad |= out & ((mport != port2) | (pcp != pcp2))
    if not bad.any():
        return None
    k = int(np.flatnonzero(bad)[0])

    def show(nn: int, pp: int, cc: int, pu: bool, ee: bool, ss: int) -> str:
        if ee:
            return "pipeline error"
        parts = [f"{nn} output(s)"] + ([f"port {pp} PCP {cc}"] if nn else []) + (["punt"] if pu else [])
        return ", ".join(parts) + (f", PORT_STATE {ss}" if ss >= 0 else "")

    mine = show(int(n[k]), int(mport[k]), int(pcp[k]), bool(punt[k]), bool(err[k]), int(mps[k]))
    theirs = show(int(n2[k]), int(port2[k]), int(pcp2[k]), bool(punt2[k]), bool(err2[k]), int(ps2[k]))
    return k, f"{mine} (ports mapped)", theirs


def check_symmetries(
    compiled: Any,
    candidates: Sequence[tuple[str, dict[str, str]]] | None = None,
    *,
    progress: Callable[[int, int, float], None] | None = None,
) -> SymmetryReport:
    """Keep the candidate automorphisms that commute with every switch's pipeline
    (default candidates: :func:`candidate_generators`)."""
    t0 = time.perf_counter()
    fabric = compiled.fabric
    dropped: dict[str, str] = {}
    autos: list[Automorphism] = []
    for name, m in candidate_generators(fabric) if candidates is None else candidates:
        a, why = automorphism(fabric, name, m)
        if a is None:
            dropped[name] = f"not an automorphism of the topology: {why}"
        else:
            autos.append(a)
    timings = {"topology": time.perf_counter() - t0}
    chk = _Checker(compiled)
    if not autos:
        return SymmetryReport((), dropped, len(fabric.switches), 0, 0, time.perf_counter() - t0, timings)
    for a in autos:
        try:
            chk._perm(a)
        except _NoMatch as e:
            dropped[a.name] = str(e)
    live = [a for a in autos if a.name not in dropped]
    inverse = {a.name: {v: k for k, v in a.switch.items()} for a in live}
    names = [s.name for s in fabric.switches]
    cache: dict[str, _Behaviour] = {}
    done: set[tuple[str, str]] = set()
    t1 = time.perf_counter()
    for i, s in enumerate(names):
        if not live:
            break
        cache[s] = chk.behaviour(s)
        before = len(live)
        for a in list(live):
            for src in (s, inverse[a.name][s]):
                dst = a.switch[src]
                if (a.name, src) in done or src not in cache or dst not in cache:
                    continue
                done.add((a.name, src))
                why = chk.compare(a, src, cache[src], cache[dst])
                if why is not None and a.name not in dropped:
                    dropped[a.name] = f"the rules do not commute with it: {why}"
                    live.remove(a)
        look = list(cache) if len(live) < before else {s, *(a.switch[s] for a in live),
                                                         *(inverse[a.name][s] for a in live)}
        for x in look:  # every cached switch when a generator was just dropped
            if x in cache and all((a.name, x) in done and (a.name, inverse[a.name][x]) in done for a in live):
                del cache[x]  # compared as source and as image under every live generator
        if progress is not None and (i + 1) % 1000 == 0:
            progress(i + 1, len(names), time.perf_counter() - t0)
    timings["rules"] = time.perf_counter() - t1
    kept = tuple(a for a in autos if a.name not in dropped)
    return SymmetryReport(kept, dropped, len(fabric.switches), chk.classes, chk.lines, time.perf_counter() - t0, timings)


# ---------------------------------------------------------------------------
# the reduced sweep


@dataclass(frozen=True)
class SymmetricSweepReport:
    """Every single paused port, reduced by the checked symmetries (``as_dict`` is JSON-ready)."""

    symmetry: SymmetryReport
    representatives: tuple[str, ...]  # access switches whose hosts were walked to
    sweep: Any  # hpcfabric.verify.sweep.SweepReport over those destinations
    quotient_channels: int
    quotient_dependencies: int
    quotient_acyclic: bool | None  # None: no symmetry kept (the sweep's own union verdict applies)
    quotient_cycle: tuple[str, ...] | None
    seconds: float
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def delivered(self) -> bool:
        return self.sweep.failed_scenarios == 0

    @property
    def acyclic(self) -> bool:
        return self.sweep.acyclic if self.quotient_acyclic is None else self.quotient_acyclic

    @property
    def ok(self) -> bool:
        """Every pair delivered in every scenario, and the union CDG over all destinations acyclic."""
        return self.delivered and self.acyclic

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "delivered": self.delivered,
            "acyclic": self.acyclic,
            "symmetry": self.symmetry.as_dict(),
            "representatives": len(self.representatives),
            "quotient_channels": self.quotient_channels,
            "quotient_dependencies": self.quotient_dependencies,
            "quotient_acyclic": self.quotient_acyclic,
            "quotient_cycle": list(self.quotient_cycle) if self.quotient_cycle else None,
            "sweep": self.sweep.as_dict(),
            "seconds": round(self.seconds, 3),
            "timings": {k: round(v, 3) for k, v in self.timings.items()},
        }


def symmetric_sweep(
    compiled: Any,
    *,
    progress: Callable[[str, int, int, float], None] | None = None,
) -> SymmetricSweepReport:
    """:func:`hpcfabric.verify.sweep.sweep_single_paused` over every port with a PORT_STATE
    entry, destinations reduced to one access switch per orbit of the symmetries
    :func:`check_symmetries` keeps; the union dependency graph is checked on its
    quotient by those symmetries. (Every port, never a sample: the images of a
    sample's scenarios are other scenarios, which a sample need not hold.)"""
    import networkx as nx

    from hpcfabric.verify.columns import host_groups, structural_splits
    from hpcfabric.verify.engine import Engine
    from hpcfabric.verify.sweep import sweep_single_paused

    t0 = time.perf_counter()
    timings: dict[str, float] = {}
    last = [t0]

    def lap(name: str) -> None:
        now = time.perf_counter()
        timings[name] = now - last[0]
        last[0] = now

    fabric = compiled.fabric
    eng = Engine(compiled, per_port=True, lazy=True)
    split = structural_splits(eng, host_groups(eng))
    lap("engine")
    if split:  # the check compares one host per access switch: it needs them alike everywhere else
        sym = SymmetryReport((), {"all": f"{len(split)} access switches have hosts other switches tell apart"},
                             len(fabric.switches), 0, 0, 0.0)
    else:
        sym = check_symmetries(compiled, progress=None if progress is None else
                               (lambda i, n, t: progress("symmetry", i, n, t)))
    reps = tuple(orbit_representatives(fabric, sym.kept))
    lap("symmetry")
    rep = sweep_single_paused(
        compiled, "single", keep=True, destinations=reps if sym.kept else None,
        progress=None if progress is None else (lambda i, n, t: progress("sweep", i, n, t)),
        _split=split, _engine=eng if sym.kept else None,
    )
    lap("sweep")
    if not sym.kept:
        return SymmetricSweepReport(sym, reps, rep, 0, 0, None, None, time.perf_counter() - t0, timings)
    orbit = channel_orbits(fabric, sym.kept)
    names: dict[tuple[int, str], str] = {}

    def node(ch: str) -> tuple[int, str]:
        sw_port, pcp = ch.rsplit("@", 1)
        sw, port = sw_port.rsplit(":", 1)
        key = (orbit(sw, int(port)), pcp)
        names.setdefault(key, ch)
        return key

    q = nx.DiGraph()
    q.add_edges_from({(node(a), node(b)) for a, b in rep.edges or ()})
    try:
        cyc = nx.find_cycle(q)
        cycle: tuple[str, ...] | None = tuple(names[u] for u, _ in cyc) + (names[cyc[0][0]],)
    except nx.NetworkXNoCycle:
        cycle = None
    lap("quotient")
    return SymmetricSweepReport(sym, reps, rep, q.number_of_nodes(), q.number_of_edges(), cycle is None, cycle,
                                time.perf_counter() - t0, timings)
