"""What every switch's compilation shares (:class:`Context`) and how routes
become table-ROUTE entries: interned prefix entries (:class:`FlowCache`) and
longest-prefix tables, ORTC-compacted on request (:func:`lpm_flows`)."""

from __future__ import annotations

import weakref
from typing import Any, Iterable, Mapping

from hpcfabric.errors import CompileError
from hpcfabric.rules.addressing import AddressPlan, Layout
from hpcfabric.rules.compaction import DROP, compact_prefixes
from hpcfabric.rules.flows import TABLE_PORT_STATE, TABLE_ROUTE, FlowSpec, Match, Output, RuleClass, make_cookie
from hpcfabric.rules.routing import router_for
from hpcfabric.topology.failures import NO_FAILURES, Failures
from hpcfabric.rules.tables import (
    COND_HOP,
    DIMS_HOP_SHIFT,
    METADATA_DIMS_SHIFT,
    METADATA_MASK,
    PRIO_LPM_BASE,
    Route,
)
from hpcfabric.topology.model import Fabric, Switch


class Context:
    """What every switch's compilation shares: the fabric, plan, router, the
    prefixes of every host, switch and group, and interned flow entries."""

    def __init__(self, fabric: Fabric, plan: AddressPlan, routing: str = "minimal",
                 failures: Failures = NO_FAILURES) -> None:
        self.fabric = fabric
        #: what is out of service: the router routes the surviving fabric (topology.failures)
        self.failures = failures
        #: with failures: redirect detours into groups without a live link at the source (compile_fabric)
        self.redirect = True
        self.plan = plan
        self.layout = plan.layout
        self.routing = routing
        #: class-of-service scheme (None: untagged) and PCP levels, set by compile_fabric
        self.cos: str | None = None
        self.cos_levels = 0
        self.cnm_snoop = False
        self.pause_reaction = "controller"
        self.switch_hold_s = 1
        #: per switch, per host port, its Valiant ports in preference order (traffic-chosen,
        #: :mod:`hpcfabric.rules.policies.workload`); empty: the static choice
        self.intermediates: Mapping[str, Mapping[int, tuple[int, ...]]] = {}
        self.router = router_for(fabric, failures)
        #: tables shared by several switches' compilations (e.g. a Dragonfly group's global links)
        self.shared: dict[Any, Any] = {}
        #: what depends on the plan only (interned entries, members, prefixes): made once per plan, shared by
        #: every compile of it (a repair compiles often)
        prefixes = _PER_PLAN.get(plan)
        if prefixes is None:
            prefixes = _PER_PLAN[plan] = _PlanPrefixes(fabric, plan)
        self.cache = prefixes.cache
        self.members = prefixes.members
        self.groups = prefixes.groups
        self.host_prefix = prefixes.host_prefix
        self.switch_prefix = prefixes.switch_prefix
        self.group_prefix = prefixes.group_prefix


class _PlanPrefixes:
    """Members per group, the prefix of every host, access switch and group, and interned entries of a plan."""

    def __init__(self, fabric: Fabric, plan: AddressPlan) -> None:
        layout = plan.layout
        self.cache = FlowCache(layout)
        self.members: dict[int, list[Switch]] = {}
        for sw in fabric.access_switches:
            self.members.setdefault(sw.group, []).append(sw)
        self.groups = sorted(self.members)
        names = layout.names
        self.host_prefix = {
            h.name: field_prefix(layout, [(n, plan.host_fields[h.name][n]) for n in names]) for h in fabric.hosts
        }
        self.switch_prefix: dict[str, tuple[int, int]] = {}
        self.group_prefix: dict[int, tuple[int, int]] = {}
        if "switch" in names:
            for sw in fabric.access_switches:
                fv = plan.switch_fields(sw)
                lead = [(n, fv[n]) for n in names if n != "host"]
                self.switch_prefix[sw.name] = field_prefix(layout, lead)
        if "group" in names:
            self.group_prefix = {g: field_prefix(layout, [("group", g)]) for g in self.groups}


_PER_PLAN: "weakref.WeakKeyDictionary[AddressPlan, _PlanPrefixes]" = weakref.WeakKeyDictionary()


def field_prefix(layout: Layout, fields: Iterable[tuple[str, int]]) -> tuple[int, int]:
    """Leading fields -> (bits, prefix length) over the layout's used bits."""
    bits, length = 0, 0
    expected = iter(layout.fields)
    for name, value in fields:
        f = next(expected)
        if f.name != name:
            raise CompileError(f"route fields are not a prefix of layout {layout.describe()}")
        bits = (bits << f.width) | value
        length += f.width
    return bits, length


class FlowCache:
    """Interns flow entries: identical entries (same prefix, port, class and
    condition) recur on many switches, so each is built once and shared."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.flows: dict[tuple, FlowSpec] = {}

    def route(
        self, bits: int, length: int, port: int | None, rule_class: int, metadata: int | None = None
    ) -> FlowSpec:
        """A table-ROUTE prefix entry: output ``port`` (drop if None), or, for a
        conditional default rule (``metadata`` given), write it and go to PORT_STATE."""
        key = (bits, length, port, rule_class, metadata)
        flow = self.flows.get(key)
        if flow is None:
            value, mask = self.layout.prefix_match(bits, length)
            flow = route_entry(PRIO_LPM_BASE + length, Match(eth_dst=(value, mask)), port, rule_class, metadata)
            self.flows[key] = flow
        return flow

    def dimension(self, d: int, v: int, port: int | None, metadata: int | None) -> FlowSpec:
        """The FB entry matching only ``dim_d == v`` (drop for ``port=None``)."""
        key = ("dim", d, v, port, metadata)
        flow = self.flows.get(key)
        if flow is None:
            value, mask = self.layout.match({f"dim{d}": v})
            flow = route_entry(PRIO_LPM_BASE + 1 + d, Match(eth_dst=(value, mask)), port, RuleClass.ROUTE, metadata)
            self.flows[key] = flow
        return flow


def route_entry(priority: int, match: Match, port: int | None, rule_class: int, metadata: int | None) -> FlowSpec:
    cookie = make_cookie(rule_class, port or 0)
    if metadata is not None:
        return FlowSpec(TABLE_ROUTE, priority, match, (), cookie, goto=TABLE_PORT_STATE, write_metadata=(metadata, METADATA_MASK))
    return FlowSpec(TABLE_ROUTE, priority, match, () if port is None else (Output(port),), cookie)


def lpm_flows(cache: FlowCache, routes: list[Route], compact: bool, conditional: bool = False) -> list[FlowSpec]:
    """Prefix entries for ``routes``; compacted with ORTC when ``compact``.

    With ``conditional``, routes marked conditional become default rules
    (metadata = port, go to PORT_STATE); ORTC then keeps conditional and
    unconditional next hops apart, so it never merges the two kinds.
    """
    hops: list[tuple[int, int, int]] = []
    classes: dict[int, int] = {}
    for r in routes:
        if r.port is None:
            hop = DROP
        elif conditional and r.conditional:
            hop = r.port | COND_HOP | r.dims << DIMS_HOP_SHIFT
        else:
            hop = r.port
        hops.append((r.bits, r.length, hop))
        if r.rule_class == RuleClass.HOST:
            classes[hop] = RuleClass.HOST
    if compact:
        hops = compact_prefixes(hops, cache.layout.used_bits)
    flows = []
    for bits, length, hop in hops:
        port = None if hop == DROP else hop & (COND_HOP - 1)
        metadata = port | (hop >> DIMS_HOP_SHIFT) << METADATA_DIMS_SHIFT if hop & COND_HOP else None
        flows.append(cache.route(bits, length, port, classes.get(hop, RuleClass.ROUTE), metadata))
    return flows
