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
every host and to every invalid probe address (:func:`hpcfabric.verify.oracle.allpairs.probe_addresses`)
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
from hpcfabric.failover.detours import DetourAnalysis
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
    pipeline lookups (very large fabrics). One analysis from scratch: :class:`FailoverAnalysis` keeps one
    between calls (repairs).
    """
    analysis = FailoverAnalysis(compiled, source_macs=source_macs, max_alternatives=max_alternatives, limit=limit,
                                keep=False)
    return analysis.update(tables if tables is not None else {n: t.flows for n, t in compiled.tables.items()})


class FailoverAnalysis:
    """:func:`fast_failover_groups` kept between calls: :meth:`update` gives exactly what
    ``fast_failover_groups(compiled, tables, ...)`` gives for new tables of the same fabric, walking again only
    what a change on a few switches can alter (:class:`hpcfabric.failover.detours.DetourAnalysis`); a repairer
    keeps one (:meth:`hpcfabric.repair.plan.Repairer.failover_analysis`). ``keep=False``: every update from
    scratch, without the records a later update needs (faster once: :func:`fast_failover_groups`). Not
    thread-safe; raises like :func:`fast_failover_groups`."""

    def __init__(self, compiled: Any, *, source_macs: Mapping[str, int] | None = None,
                 max_alternatives: int = MAX_ALTERNATIVES, limit: int = ANALYSIS_LIMIT, keep: bool = True) -> None:
        from hpcfabric.verify.oracle.allpairs import probe_addresses

        fabric, plan = compiled.fabric, compiled.plan
        dests: list[tuple[int, str | None]] = [(plan.host_mac[h.name], h.name) for h in fabric.hosts]
        dests += [(mac, None) for mac, _ in probe_addresses(plan)]
        cost = len(fabric.hosts) * len(dests) * 4
        if cost > limit:
            raise CompileError(
                f"fast-failover analysis of {fabric.name} needs ~{cost:,} pipeline lookups (limit {limit:,}): "
                "too large; rely on recomputation (fast_failover = off)"
            )
        self.fabric, self.plan = fabric, plan
        self.source_macs = dict(source_macs or {})
        src_of = self.source_macs
        self.detours = DetourAnalysis(fabric, dests, [(h, src_of.get(h.name, plan.host_mac[h.name]))
                                                      for h in fabric.hosts], max_alternatives, keep)
        self._kept: dict[str, tuple[Any, ...]] = {}  # switch -> (its decisions, flows out, groups, protected, unprotected)

    def fits(self, compiled: Any, source_macs: Mapping[str, int] | None = None) -> bool:
        """Is this the analysis of ``compiled``'s fabric and address plan, with these source MACs?"""
        return compiled.fabric is self.fabric and compiled.plan is self.plan and \
            dict(source_macs or {}) == self.source_macs

    @property
    def stats(self) -> dict[str, int]:
        """What the last :meth:`update` redid (switches changed, steps, walks, ports decided, checks walked)."""
        return dict(self.detours.stats)

    def update(self, tables: Mapping[str, Iterable[FlowSpec]]) -> FastFailover:
        """The fast-failover groups and grouped tables for ``tables`` (switch -> its flows)."""
        flows = {n: tuple(f) for n, f in tables.items()}
        decided = self.detours.update(flows)
        changed = self.detours.changed
        out_flows: dict[str, tuple[FlowSpec, ...]] = {}
        out_groups: dict[str, tuple[GroupSpec, ...]] = {}
        protected: dict[str, tuple[int, ...]] = {}
        unprotected: dict[str, tuple[int, ...]] = {}
        for sw in self.fabric.switches:
            name = sw.name
            kept = self._kept.get(name)
            if kept is None or name in changed or kept[0] != decided[name]:
                prot = tuple(p for p, alts in decided[name] if alts)
                groups = tuple(GroupSpec(group_id(p), tuple(Bucket(x, (Output(x),)) for x in [p, *alts]))
                               for p, alts in decided[name] if alts)
                kept = self._kept[name] = (decided[name], regroup(flows[name], set(prot)) if prot else flows[name],
                                           groups, prot, tuple(p for p, alts in decided[name] if not alts))
            out_flows[name], out_groups[name], protected[name], unprotected[name] = kept[1:]
        for name in flows:  # switches not in the fabric (should not happen) pass through
            out_flows.setdefault(name, flows[name])
        return FastFailover(out_flows, out_groups, protected, unprotected)


def regroup(flows: tuple[FlowSpec, ...], ports: set[int]) -> tuple[FlowSpec, ...]:
    """``flows`` with every output to one of ``ports`` in the grouped tables through that port's group."""
    out = []
    for f in flows:
        if f.table in GROUPED_TABLES and any(isinstance(a, Output) and a.port in ports for a in f.actions):
            acts = tuple(Group(group_id(a.port)) if isinstance(a, Output) and a.port in ports else a for a in f.actions)
            f = replace(f, actions=acts)
        out.append(f)
    return tuple(out)


def link_ends(link: Any) -> set[tuple[str, int]]:
    """Both (switch, port) ends of ``link`` (a failed link is down at both ends)."""
    return {(link.a, link.a_port), (link.b, link.b_port)}
