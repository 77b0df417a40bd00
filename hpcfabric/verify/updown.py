"""Up*/down* proof for fat-trees and folded Clos: delivery and deadlock freedom under
*any* set of paused ports, from a check of each switch's rules on its own.

The union proof (:mod:`hpcfabric.verify.union.proof`) walks every destination column through
every reachable line; symmetries (:mod:`hpcfabric.verify.union.orbits`) cut that down for
Dragonflies and Flattened Butterflies, but a 4-stage folded Clos with the paper's truncated
wiring has almost none (its core level deals uplinks round-robin). Up-down
fabrics have something better: a local invariant that implies the global
properties. :func:`check_up_down` checks, at every switch ``s`` separately,
for every ingress port class, every arrival VLAN PCP a frame can carry, and
every destination class (:func:`hpcfabric.verify.engine.batch.switch_classes`, the
engine's :class:`~hpcfabric.verify.engine.batch.MatchClasses` over ``s``'s entries installed and
paused: destinations that meet the same ``eth_dst`` entries), unpaused **and** with every
PORT_STATE entry flipped to "paused":

* **cone rule** (assigned host addresses): let ``cone(s)`` be the access
  switches below ``s`` (reached over links to lower levels only). If the
  destination's access switch is ``s``, the frame leaves, untagged, on the
  destination host's port; if it is in ``cone(s)``, the frame leaves on exactly
  one port, a link down to a switch whose cone holds it; otherwise on exactly
  one uplink (a link to a higher level);
* **no return** (addresses nobody owns, :func:`hpcfabric.verify.probes.probe_addresses`):
  dropped, or one fabric output; never to a host; never up after arriving
  from above;
* no punt, no flood, no pipeline error for any data frame.

Every fabric link must join switches of different levels (checked).

Why this proves the properties for every set of paused ports: a frame meets
at most one PORT_STATE entry on a switch (``goto`` only leads to later
tables), so its decision under any set of paused ports is either the
unpaused one or the one with the entry it meets flipped -- both checked.
By the cone rule a frame to host ``d`` climbs while ``d`` is not below it
(levels are bounded, and a switch without uplinks must have ``d`` below it or
the check fails), and once ``d`` is below it descends through switches that
keep ``d`` below them to ``d``'s access switch, which delivers it untagged:
**every pair is delivered, within 2(L-1) links, with no loop**, L = number of
levels. Every route is up* then down*, so every channel dependency goes from
an up channel to a higher up channel or to a down channel, or from a down
channel to a lower one: the union channel dependency graph over all pause
states (every VLAN class) is **acyclic**. Unowned addresses also go up*
down* (no return), so they are dropped within 2(L-1) links.

The check is sound, not complete: a rule set can fail it and still work
(e.g. a detour through a lower level). The per-switch decisions come from
the same vectorised engine as the verifier (:mod:`hpcfabric.verify.engine`), and
``tests/test_updown.py`` cross-checks the verdict against the brute-force
CDG oracle (:mod:`hpcfabric.verify.oracle.cdg`) on the small shipped fabrics and on broken rule sets.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from hpcfabric.errors import VerificationError
from hpcfabric.rules.fabrics.updown import UP_DOWN_KINDS, updown_level
from hpcfabric.rules.flows import PushVlan, SetField
from hpcfabric.verify.codes import UNTAGGED
from hpcfabric.verify.engine import forward_data_flows, port_classes
from hpcfabric.verify.engine import Destinations, Row, evaluate_rows
from hpcfabric.verify.engine.batch import switch_classes
from hpcfabric.verify.graphs import core_graph
from hpcfabric.verify.probes import probe_addresses
from hpcfabric.verify.scenarios import pausable_ports, paused_data_flows

__all__ = ["UpDownReport", "check_up_down", "arrival_pcps"]

HOST = "host"  # arrival key of lines from host ports (always reachable)

#: failures kept verbatim in the report (the count covers all of them)
MAX_FAILURES = 20


@dataclass(frozen=True)
class UpDownReport:
    """Verdict of :func:`check_up_down` (``as_dict`` is JSON-ready)."""

    switches: int
    levels: int
    access_switches: int
    probes: int
    pausable_ports: int
    destination_classes: int  # summed over switches
    decision_lines: int  # (ingress port class, arrival PCP) lines decided, unpaused and paused
    arrival_pcps: tuple[int, ...]  # PCPs frames can carry on fabric links (-1: untagged)
    failure_count: int
    failures: tuple[str, ...]
    seconds: float
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.failure_count == 0

    @property
    def max_links(self) -> int:
        """Longest route (links between switches) the proof allows: up to the top and down."""
        return 2 * (self.levels - 1)

    def as_dict(self) -> dict[str, Any]:
        return {"method": "up-down (local invariant; any set of paused ports)", "ok": self.ok,
                "delivered_under_any_pause": self.ok, "acyclic_under_any_pause": self.ok,
                "max_links": self.max_links, "switches": self.switches, "levels": self.levels,
                "access_switches": self.access_switches, "probes": self.probes,
                "pausable_ports": self.pausable_ports, "destination_classes": self.destination_classes,
                "decision_lines": self.decision_lines,
                "arrival_pcps": ["untagged" if p == UNTAGGED else p for p in self.arrival_pcps],
                "failure_count": self.failure_count, "failures": list(self.failures),
                "seconds": round(self.seconds, 3), "timings": {k: round(v, 3) for k, v in self.timings.items()}}


class _Failures:
    """Failures per arrival PCP (only PCPs that can reach a fabric port count in the end)."""

    def __init__(self) -> None:
        self.count: dict[Any, int] = {}
        self.first: dict[Any, list[str]] = {}

    def add(self, pcp: Any, n: int, message: Callable[[], str]) -> None:
        self.count[pcp] = self.count.get(pcp, 0) + n
        kept = self.first.setdefault(pcp, [])
        if len(kept) < MAX_FAILURES:
            kept.append(message())


def check_up_down(
    compiled: Any, *, progress: Callable[[int, int, float], None] | None = None, raise_on_failure: bool = False
) -> UpDownReport:
    """Prove delivery and deadlock freedom of an up-down fabric's compiled rules under
    every set of paused ports (module docstring), or report what breaks the proof.

    Parameters
    ----------
    compiled : CompiledFabric
        A fat-tree or folded-Clos fabric, any routing policy and addressing.
    progress : callable, optional
        ``progress(switches done, switches, seconds)`` every 1,000 switches.
    raise_on_failure : bool
        Raise :class:`VerificationError` instead of returning a failed report.

    Returns
    -------
    UpDownReport
        ``ok`` when every switch satisfies the invariant and no unowned address
        can loop or reach a host.
    """
    t0 = time.perf_counter()
    fabric, plan = compiled.fabric, compiled.plan
    if fabric.kind not in UP_DOWN_KINDS:
        raise VerificationError(f"the up-down proof applies to fat-trees and folded Clos, not to a {fabric.kind}")
    fails = _Failures()
    level = {s.name: updown_level(fabric, s) for s in fabric.switches}
    for link in fabric.links:
        if level[link.a] == level[link.b]:
            fails.add(HOST, 1, lambda link=link: f"link {link.a}:{link.a_port}-{link.b}:{link.b_port} joins two "
                                                 f"switches of level {level[link.a]}: no up/down direction")
    access = [s.name for s in fabric.access_switches]
    col_of = {t: i for i, t in enumerate(access)}
    ncol = len(access)
    rep_host = [fabric.hosts_on(t)[0].name for t in access]
    col_macs = np.array([plan.host_mac[h] for h in rep_host], dtype=np.uint64)
    probes = probe_addresses(plan)
    probe_macs = np.array([mac for mac, _ in probes], dtype=np.uint64)
    n_probe = len(probes)

    # cones, bottom-up: access switches below each switch (over links to lower levels)
    order = sorted(fabric.switches, key=lambda s: level[s.name])
    cone: dict[str, np.ndarray] = {}
    for s in order:
        c = np.zeros(ncol, dtype=bool)
        if s.name in col_of:
            c[col_of[s.name]] = True
        for peer in fabric.fabric_ports(s.name).values():
            if level[peer.node] < level[s.name]:
                c |= cone[peer.node]
        cone[s.name] = c
    t_cones = time.perf_counter()

    relevant = forward_data_flows(compiled, "the up-down proof", VerificationError)
    pcps = arrival_pcps(relevant)  # every PCP a frame can carry (untagged, pushed, set)
    pcp_ix = {v: i for i, v in enumerate(pcps)}
    # unowned addresses: a graph over (probe, switch, arrival port, arrival PCP)
    port_base: dict[str, int] = {}
    n_states = 0
    for s in fabric.switches:
        port_base[s.name] = n_states
        n_states += (max(fabric.ports(s.name), default=0) + 1) * len(pcps)
    probe_graph = _ProbeGraph(n_probe, n_states)

    emitted: dict[Any, set[int]] = {}  # arrival ("host" or PCP) -> PCPs put on fabric links by those lines
    classes = lines = 0
    n = len(order)
    for i, s in enumerate(order):
        name = s.name
        own = fabric.hosts_on(name)
        macs = np.concatenate([col_macs, np.array([plan.host_mac[h.name] for h in own], dtype=np.uint64), probe_macs])
        n_host = ncol + len(own)
        target = np.full(n_host, -1, dtype=np.int64)  # host delivery: the required output port
        for j, h in enumerate(own):
            target[ncol + j] = h.port
        if name in col_of:
            target[col_of[name]] = own[0].port  # the column's representative is this switch's first host
        deliver = target >= 0
        below = np.concatenate([cone[name], np.zeros(len(own), dtype=bool)]) & ~deliver
        elsewhere = ~below & ~deliver
        ports = fabric.ports(name)
        top = max(ports, default=0) + 1
        kind = np.zeros(top + 1, dtype=np.int8)  # 0 none, 1 host, 2 down, 3 up
        arrive = np.full(top + 1, -1, dtype=np.int64)  # state base of the peer's arrival port
        down_ok = np.zeros((top + 1, n_host), dtype=bool)  # down port p leads towards destination
        for p, peer in ports.items():
            if peer.is_host:
                kind[p] = 1
                continue
            kind[p] = 2 if level[peer.node] < level[name] else 3
            arrive[p] = port_base[peer.node] + peer.port * len(pcps)
            if kind[p] == 2:
                down_ok[p, :ncol] = cone[peer.node]
        hosts = np.arange(n_host)

        rel = relevant[name]
        flipped, same = paused_data_flows(compiled, name, rel)
        cls, reps = switch_classes([rel] if same else [rel, flipped], macs)
        classes += len(reps)
        dst = Destinations(macs[reps])
        attrs: dict = {}
        members: dict[int, list[int]] = {}
        for p, c in port_classes(fabric, name, rel, {}).items():
            members.setdefault(c, []).append(p)
        todo = [(mem, pcp, paused, flows) for mem in members.values()
                for pcp in ([UNTAGGED] if ports[mem[0]].is_host else pcps)
                for paused, flows in ((False, rel), (True, flipped)) if not (paused and same)]
        outcomes = evaluate_rows([  # every line of the switch in one evaluation
            Row(name, (mem[0],), plan.host_mac[ports[mem[0]].node] if ports[mem[0]].is_host else None, False,
                pcp).build(flows, attrs) for mem, pcp, _, flows in todo], dst)
        lines += len(todo)
        for (mem, pcp, paused, _), res in zip(todo, outcomes):
            p = mem[0]
            peer = ports[p]
            from_below = any(kind[q] != 3 for q in mem)
            arrival = HOST if peer.is_host else pcp
            out_pcp, punt, err = (np.asarray(v)[cls] for v in (res.out_pcp, res.punt, res.err))
            on = np.asarray(res.out_n)[cls].astype(np.int64)
            op = np.clip(np.asarray(res.out_port)[cls], 0, top)
            okind = np.where(on == 1, kind[op], 0)
            broken = punt | err | (on > 1)
            fab = (on == 1) & (okind >= 2)
            emitted.setdefault(arrival, set()).update(np.unique(out_pcp[fab]).tolist())
            h_on, h_op, h_kind = on[:n_host], op[:n_host], okind[:n_host]
            bad = broken[:n_host].copy()
            bad |= deliver & ((h_on != 1) | (h_op != target) | (out_pcp[:n_host] != UNTAGGED))
            bad |= below & ((h_on != 1) | (h_kind != 2) | ~down_ok[h_op, hosts])
            if from_below:  # frames from above have their destination below (cone rule one level up)
                bad |= elsewhere & ((h_on != 1) | (h_kind != 3))
            nbad = int(bad.sum())
            if nbad:
                k = int(np.flatnonzero(bad)[0])
                fails.add(arrival, nbad, lambda k=k, p=p, pcp=pcp, paused=paused, on=on, op=op, out_pcp=out_pcp,
                          punt=punt, err=err: (
                    f"{name} in_port {p} PCP {_pcp_name(pcp)}{' (paused)' if paused else ''} to "
                    f"{rep_host[k] if k < ncol else own[k - ncol].name} "
                    f"({'deliver' if deliver[k] else 'below' if below[k] else 'not below'}): "
                    f"{_did(k, on, op, out_pcp, punt, err, kind)}"))
            if n_probe:
                sl = slice(n_host, None)
                fab_mem = [q for q in mem if kind[q] != 1]
                probe_graph.add(
                    [port_base[name] + q * len(pcps) + pcp_ix[pcp] for q in fab_mem], fab_mem,
                    bool(peer.is_host), on[sl], op[sl], okind[sl], out_pcp[sl], arrive, pcp_ix,
                    broken[sl])
        if progress is not None and (i + 1) % 1000 == 0:
            progress(i + 1, n, time.perf_counter() - t0)
    t_switches = time.perf_counter()
    # PCPs a frame can carry into a fabric port: from hosts' lines, then from those lines' outputs
    reach: set[int] = set(emitted.get(HOST, ()))
    while True:
        more = set().union(*(emitted.get(q, set()) for q in reach)) - reach
        if not more:
            break
        reach |= more
    counted = [HOST] + sorted(reach)  # lines from hosts always count; fabric lines if their PCP can arrive
    failure_count = sum(fails.count.get(q, 0) for q in counted)
    kept = [m for q in counted for m in fails.first.get(q, [])]
    probe_fail = probe_graph.check(lambda state: _state_name(fabric, port_base, pcps, state), probes)
    failure_count += len(probe_fail)
    kept = (kept + probe_fail)[:MAX_FAILURES]
    t1 = time.perf_counter()
    rep = UpDownReport(
        switches=n,
        levels=len(set(level.values())),
        access_switches=ncol,
        probes=n_probe,
        pausable_ports=len(pausable_ports(compiled)),
        destination_classes=classes,
        decision_lines=lines,
        arrival_pcps=tuple(sorted(reach)),
        failure_count=failure_count,
        failures=tuple(kept),
        seconds=t1 - t0,
        timings={"cones": t_cones - t0, "switches": t_switches - t_cones, "probes": t1 - t_switches},
    )
    if raise_on_failure and not rep.ok:
        raise VerificationError(f"up-down proof failed ({failure_count} decisions): {kept[0]}")
    return rep


def arrival_pcps(relevant: dict[str, list[Any]]) -> list[int]:
    """Arrival PCPs a frame can carry: untagged, and what the entries push or set."""
    vals = {UNTAGGED}
    for flows in relevant.values():
        for f in flows:
            for a in f.actions:
                if isinstance(a, PushVlan):
                    vals.add(0)
                elif isinstance(a, SetField) and a.field == "vlan_pcp":
                    vals.add(int(a.value))
    return sorted(vals)


def _pcp_name(pcp: int) -> str:
    return "untagged" if pcp == UNTAGGED else str(pcp)


def _did(k: int, on: np.ndarray, op: np.ndarray, out_pcp: np.ndarray, punt: np.ndarray, err: np.ndarray,
         kind: np.ndarray) -> str:
    if err[k]:
        return "pipeline error"
    if punt[k]:
        return "punt"
    if on[k] != 1:
        return f"{on[k]} outputs"
    return f"port {op[k]} ({['-', 'host', 'down', 'up'][kind[op[k]]]}, PCP {_pcp_name(int(out_pcp[k]))})"


def _state_name(fabric: Any, port_base: dict[str, int], pcps: list[int], state: int) -> str:
    names = sorted(port_base, key=port_base.get)  # type: ignore[arg-type]
    bases = np.array([port_base[s] for s in names])
    i = int(np.searchsorted(bases, state, side="right") - 1)
    off = state - bases[i]
    return f"{names[i]}:{off // len(pcps)}@{_pcp_name(pcps[off % len(pcps)])}"


class _ProbeGraph:
    """Where unowned addresses can go, over every pause state: nodes are (probe, switch,
    arrival port, arrival PCP); an edge per decision (unpaused and paused) that outputs
    to a fabric port. Checked after all switches: no state reachable from a host may
    deliver to a host, punt, flood or error, and the reachable graph must be acyclic."""

    def __init__(self, n_probe: int, n_states: int) -> None:
        self.n_probe, self.n_states = n_probe, n_states
        self.src: list[np.ndarray] = []
        self.dst: list[np.ndarray] = []
        self.starts: list[np.ndarray] = []
        self.bad_src: list[np.ndarray] = []  # states (with probe) whose decision is wrong
        self.bad_start: list[np.ndarray] = []  # injected straight into a wrong decision

    def add(self, states: list[int], ports: list[int], from_host: bool, on: np.ndarray, op: np.ndarray,
            okind: np.ndarray, out_pcp: np.ndarray, arrive: np.ndarray, pcp_ix: dict[int, int],
            broken: np.ndarray) -> None:
        """One decision line of one switch: ``states``/``ports``, the fabric ingress ports it stands for.
        A frame sent back out of its own ingress port is dropped (OpenFlow), so that is no edge."""
        k = np.arange(self.n_probe, dtype=np.int64)
        wrong = broken | ((on == 1) & (okind == 1))  # to a host, punt, flood or error
        fab = (on == 1) & (okind >= 2) & ~broken
        nxt = np.full(self.n_probe, -1, dtype=np.int64)
        if fab.any():
            pix = np.array([pcp_ix.get(int(v), -1) for v in out_pcp[fab]], dtype=np.int64)
            nxt[fab] = arrive[op[fab]] + pix
        node = k * self.n_states
        if from_host:
            self.starts.append((node + nxt)[nxt >= 0])
            self.bad_start.append(k[wrong])
            return
        st = np.asarray(states, dtype=np.int64)
        if not len(st):
            return
        ok = nxt >= 0
        if ok.any():
            back = op[ok][None, :] == np.asarray(ports, dtype=np.int64)[:, None]  # (member, probe)
            src = (node[ok][None, :] + st[:, None])[~back]
            dst = np.broadcast_to((node + nxt)[ok][None, :], (len(st), int(ok.sum())))[~back]
            self.src.append(src)
            self.dst.append(dst)
        if wrong.any():
            self.bad_src.append((node[wrong][None, :] + st[:, None]).reshape(-1))

    def check(self, name: Callable[[int], str], probes: list[tuple[int, str]]) -> list[str]:
        out: list[str] = []
        for k in np.unique(np.concatenate(self.bad_start)) if self.bad_start else ():
            out.append(f"unowned {probes[int(k)][1]}: a host's frame is delivered, punted, flooded or errs at once")
        if not self.starts:
            return out
        src = np.concatenate(self.src) if self.src else np.zeros(0, dtype=np.int64)
        dst = np.concatenate(self.dst) if self.dst else np.zeros(0, dtype=np.int64)
        edges = np.unique(src << 32 | dst) if len(src) else np.zeros(0, dtype=np.int64)
        src, dst = edges >> 32, edges & 0xFFFFFFFF
        # reachable from the hosts' injections
        seen = np.unique(np.concatenate(self.starts))
        frontier = seen
        while len(frontier):
            sel = np.isin(src, frontier)
            new = np.setdiff1d(np.unique(dst[sel]), seen, assume_unique=True)
            seen = np.union1d(seen, new)
            frontier = new
        bad = np.unique(np.concatenate(self.bad_src)) if self.bad_src else np.zeros(0, dtype=np.int64)
        for node in bad[np.isin(bad, seen)][:MAX_FAILURES]:
            k, state = divmod(int(node), self.n_states)
            out.append(f"unowned {probes[k][1]}: reaches {name(state)}, which delivers it to a host, punts, floods "
                       f"or errs")
        keep = np.isin(src, seen)
        core = core_graph(src[keep], dst[keep])
        if core.number_of_edges():
            import networkx as nx

            cyc = nx.find_cycle(core)
            k = int(cyc[0][0]) // self.n_states
            walk = " -> ".join(name(int(u) % self.n_states) for u, _ in cyc)
            out.append(f"unowned {probes[k][1]} can loop: {walk}")
        return out
