"""Fast-failover groups (pure): a precomputed detour per fabric port, taken by the switch itself.

:func:`fast_failover_groups` turns compiled tables into tables whose outputs to
*protected* fabric ports go through an OpenFlow fast-failover group
(``OFPGT_FF``) instead::

    group HF|p: bucket 1  watch_port=p  output:p     (the compiled next hop)
                bucket 2  watch_port=q  output:q     (a detour, proved below)
                bucket 3  watch_port=r  output:r     (a second detour, if any)

The switch uses the first bucket whose watch port is live, so when the link
behind ``p`` goes down its traffic takes the detour within the switch's own
port-liveness reaction, before the controller has seen the port status;
the proven repair (:mod:`hpcfabric.repair.plan`) then replaces the tables
and restores them when the link comes back (bucket 1 is live again at once).

Which ports are protected is **not assumed per topology but proved with the
reference pipeline**: for a switch S and a fabric port p (peer N), every data
frame S sends out p in the compiled tables -- from every ingress port, to
every host and to every invalid probe address (:func:`hpcfabric.verify.allpairs.probe_addresses`)
-- is collected. Another fabric port q (peer M) is a safe detour when, with
the link S-N down, each of those frames sent out q is walked switch by switch
from M through the unchanged tables and

* a frame for a host is delivered to that host, a probe is dropped,
* it never comes back to S, never needs the dead link, is never punted or
  flooded, and stays within the hop bound (so no loop),
* it did not arrive at S through q (a switch never sends a frame back out of
  its ingress port).

A port is protected when at least one detour is safe (up to
``max_alternatives`` detours become buckets, same link kind first, rotated by
port so that detours spread); ports with none keep their plain output and
rely on recomputation. What this gives on the shipped fabrics (docs/operations.md):
fat-tree/folded-Clos uplinks (any other uplink) but not downlinks (a pod has
one path down), Dragonfly local ports (via another switch of the group) and
global ports of switches with more than one (via the other global link's
group: a Valiant-like detour), Flattened Butterfly ports (via another switch
of the same dimension).

Proved for one failed link at a time; the detours of two simultaneous
failures are not analysed (they can drop, or even circulate, frames until
the recomputation that follows the first port status replaces the tables --
hence fast_failover needs ``recompute = on``).

Conditional routing: protected outputs are replaced in ROUTE, PORT_STATE and
ALTERNATIVE alike. The unpaused PORT_STATE entry of a protected port becomes
``metadata=p -> group:HF|p`` (:func:`hpcfabric.rules.port_state.port_state_flow` with
``group``); its paused version is unchanged (``goto`` ALTERNATIVE), so a
PAUSE flip is still one MODIFY_STRICT and un-pausing restores the group. A
paused port whose link goes down keeps sending its ALTERNATIVE fallbacks
through the group (the detour), Valiant rules leave through their own
(possibly protected) ports.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping

from hpcfabric.errors import CompileError
from hpcfabric.rules.flows import (
    GROUP_TAG,
    TABLE_ALTERNATIVE,
    TABLE_PORT_STATE,
    TABLE_ROUTE,
    Bucket,
    FlowSpec,
    Group,
    GroupSpec,
    Output,
)
from hpcfabric.verify.pipeline import Frame, Pipeline, PipelineError

#: refuse fabrics whose analysis needs more pipeline lookups than this (switch ports x destinations)
ANALYSIS_LIMIT = 3_000_000
#: detours per group after the primary bucket
MAX_ALTERNATIVES = 2
#: tables whose outputs to a protected port go through its group
GROUPED_TABLES = (TABLE_ROUTE, TABLE_PORT_STATE, TABLE_ALTERNATIVE)


def group_id(port: int) -> int:
    """hpcfabric's group id protecting ``port`` (the same on every switch)."""
    return GROUP_TAG | port


@dataclass(frozen=True)
class FastFailover:
    """Result of :func:`fast_failover_groups`; unpacks as ``flows, groups``.

    ``flows``: per switch, the tables with protected outputs through groups;
    ``groups``: per switch, its groups (ordered by id); ``protected`` /
    ``unprotected``: per switch, the fabric ports that carry traffic with /
    without a proved detour.
    """

    flows: Mapping[str, tuple[FlowSpec, ...]]
    groups: Mapping[str, tuple[GroupSpec, ...]]
    protected: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    unprotected: Mapping[str, tuple[int, ...]] = field(default_factory=dict)

    def __iter__(self):  # flows, groups = fast_failover_groups(...)
        yield self.flows
        yield self.groups

    def stats(self) -> dict[str, int]:
        return {
            "groups": sum(len(g) for g in self.groups.values()),
            "switches_with_groups": sum(1 for g in self.groups.values() if g),
            "protected_ports": sum(len(p) for p in self.protected.values()),
            "unprotected_ports": sum(len(p) for p in self.unprotected.values()),
        }


def fast_failover_groups(
    compiled: Any,
    tables: Mapping[str, Iterable[FlowSpec]] | None = None,
    *,
    source_macs: Mapping[str, int] | None = None,
    max_alternatives: int = MAX_ALTERNATIVES,
    limit: int = ANALYSIS_LIMIT,
) -> FastFailover:
    """Protect every fabric port of ``compiled`` (a :class:`~hpcfabric.rules.tables.CompiledFabric`) that has a
    proved detour (module docstring).

    ``tables`` (default: the compiled ones) are the tables to transform, e.g. the controller's desired tables
    with guards; ``source_macs`` the MAC a host sends with when it is not its planned one (``host_mac =
    rewrite``). Raises :class:`~hpcfabric.errors.CompileError` if the analysis would exceed ``limit``
    pipeline lookups (very large fabrics).
    """
    from hpcfabric.verify.allpairs import probe_addresses

    fabric, plan = compiled.fabric, compiled.plan
    flows = {n: tuple(f) for n, f in (tables or {n: t.flows for n, t in compiled.tables.items()}).items()}
    probes = [mac for mac, _ in probe_addresses(plan)]
    dests: list[tuple[int, str | None]] = [(plan.host_mac[h.name], h.name) for h in fabric.hosts]
    dests += [(mac, None) for mac in probes]
    cost = len(fabric.hosts) * len(dests) * 4
    if cost > limit:
        raise CompileError(
            f"fast-failover analysis of {fabric.name} needs ~{cost:,} pipeline lookups (limit {limit:,}): "
            "too large; rely on recomputation (fast_failover = off)"
        )
    pipes = _Memo({n: Pipeline(f) for n, f in flows.items()})
    src_of = dict(source_macs or {})
    traffic = _traffic(fabric, plan, pipes, flows, dests, src_of)
    out_flows: dict[str, tuple[FlowSpec, ...]] = {}
    out_groups: dict[str, tuple[GroupSpec, ...]] = {}
    protected: dict[str, tuple[int, ...]] = {}
    unprotected: dict[str, tuple[int, ...]] = {}
    for sw in fabric.switches:
        name = sw.name
        fports = fabric.fabric_ports(name)
        sent = traffic.get(name, {})
        ports = sorted(sent)
        groups: list[GroupSpec] = []
        prot: list[int] = []
        for p in ports:
            peer_p = fports[p]
            dead = {(name, p), (peer_p.node, peer_p.port)}
            others = sorted(fports)
            k = others.index(p)
            rotated = others[k + 1:] + others[:k]
            rotated.sort(key=lambda q: fports[q].kind != peer_p.kind)  # stable: same link kind first
            arrivals = {f.in_port for f in sent[p]}
            frames = {replace(f, in_port=0): expect for f, expect in sent[p].items()}  # the walk resets in_port
            alts: list[int] = []
            for q in rotated:
                if q in arrivals:
                    continue
                peer_q = fports[q]
                if all(_detour_ok(pipes, fabric, peer_q.node, peer_q.port, frame, expect, name, dead)
                       for frame, expect in frames.items()):
                    alts.append(q)
                    if len(alts) >= max_alternatives:
                        break
            if alts:
                prot.append(p)
                groups.append(GroupSpec(group_id(p), tuple(Bucket(x, (Output(x),)) for x in [p, *alts])))
        if prot:
            unprotected[name] = tuple(p for p in ports if p not in prot)
            protected[name] = tuple(prot)
            out_flows[name] = _regroup(flows[name], set(prot))
        else:
            unprotected[name] = tuple(ports)
            protected[name] = ()
            out_flows[name] = flows[name]
        out_groups[name] = tuple(groups)
    for name in flows:  # switches not in the fabric (should not happen) pass through
        out_flows.setdefault(name, flows[name])
    return FastFailover(out_flows, out_groups, protected, unprotected)


class _Memo:
    """switch -> pipeline, with ``process`` memoised per (switch, frame) (pipelines are pure); a
    :class:`PipelineError` is remembered as None."""

    def __init__(self, pipes: dict[str, Pipeline]) -> None:
        self.pipes = pipes
        self.memo: dict[tuple[str, Frame], Any] = {}

    def process(self, switch: str, frame: Frame) -> Any:
        key = (switch, frame)
        try:
            return self.memo[key]
        except KeyError:
            pass
        try:
            res = self.pipes[switch].process(frame)
        except PipelineError:
            res = None
        self.memo[key] = res
        return res


def _traffic(fabric: Any, plan: Any, pipes: _Memo, flows: Mapping[str, tuple[FlowSpec, ...]],
             dests: list[tuple[int, str | None]], src_of: Mapping[str, int]) -> dict[str, dict[int, dict[Frame, Any]]]:
    """The data frames the compiled tables really send out of each fabric port: every host to every host and
    every probe address, walked switch by switch. switch -> port -> {frame as sent, with its ingress port at
    that switch: the host it is for (None: a probe)}. Frames are keyed without their source address when no
    entry matches ``eth_src`` outside host ports (the source check), so one frame stands for every source."""
    fabric_src = any(f.match.eth_src is not None and (f.match.in_port is None or fabric.peer(n, f.match.in_port) is None
                                                      or not fabric.peer(n, f.match.in_port).is_host)
                     for n, fl in flows.items() for f in fl)
    bound = len(fabric.switches) + 1
    out: dict[str, dict[int, dict[Frame, Any]]] = {}
    for host in fabric.hosts:
        src = src_of.get(host.name, plan.host_mac[host.name])
        for mac, expect in dests:
            if expect == host.name:
                continue
            sw, fr = host.switch, Frame(in_port=host.port, eth_src=src, eth_dst=mac)
            for _ in range(bound):
                res = pipes.process(sw, fr)
                if res is None or res.punted or len(res.outputs) != 1:
                    break
                port, sent = res.outputs[0]
                peer = fabric.peer(sw, port)
                if peer is None or peer.is_host:
                    break
                if not fabric_src:
                    sent = replace(sent, eth_src=0)
                out.setdefault(sw, {}).setdefault(port, {})[replace(sent, in_port=fr.in_port)] = expect
                sw, fr = peer.node, replace(sent, in_port=peer.port, metadata=0)
    return out


def _regroup(flows: tuple[FlowSpec, ...], ports: set[int]) -> tuple[FlowSpec, ...]:
    out = []
    for f in flows:
        if f.table in GROUPED_TABLES and any(isinstance(a, Output) and a.port in ports for a in f.actions):
            acts = tuple(Group(group_id(a.port)) if isinstance(a, Output) and a.port in ports else a for a in f.actions)
            f = replace(f, actions=acts)
        out.append(f)
    return tuple(out)


def _detour_ok(pipes: _Memo, fabric: Any, start: str, in_port: int, frame: Frame,
               expect: str | None, avoid: str, dead: set[tuple[str, int]]) -> bool:
    """Does ``frame``, arriving at ``start`` on ``in_port`` with the ``dead`` link down, reach host ``expect``
    (a probe, ``expect`` None: get dropped) without returning to ``avoid``, looping, punting or flooding?"""
    sw, fr = start, replace(frame, in_port=in_port, metadata=0)
    for _ in range(len(fabric.switches) + 1):
        if sw == avoid:
            return False
        res = pipes.process(sw, fr)
        if res is None or res.punted or len(res.outputs) > 1:
            return False
        if not res.outputs:
            return expect is None
        port, out = res.outputs[0]
        if (sw, port) in dead:
            return False
        peer = fabric.peer(sw, port)
        if peer is None:
            return expect is None
        if peer.is_host:
            return peer.node == expect and out.vlan_pcp is None
        sw, fr = peer.node, replace(out, in_port=peer.port, metadata=0)
    return False


def link_ends(link: Any) -> set[tuple[str, int]]:
    """Both (switch, port) ends of ``link`` (a failed link is down at both ends)."""
    return {(link.a, link.a_port), (link.b, link.b_port)}
