"""Rule compiler: fabric + address plan -> per-switch flow tables (pure).

Routing entries live in table ``ROUTE`` and match ``eth_dst`` with masks.
Per addressing mode, an access switch holds:

``flat``        one entry per host in the fabric (the CAM baseline)
``per-switch``  its T hosts + one entry per other access switch
``per-group``   its T hosts + (S-1) switches of its group + (G-1) groups (Eq. 1)
``compact``     the per-group function compacted:

  * Dragonfly and explicit fabrics: optimal longest-prefix compaction (ORTC)
    of the per-group table, priorities ``1000 + prefix length``;
  * Flattened Butterfly: one entry per port -- hosts exact, then for each
    dimension ``d`` and coordinate ``v`` an entry matching only ``dim_d = v``,
    higher dimensions at higher priority (dimension-order routing);
  * fat-tree: destinations below the switch matched by prefix, everything
    else sent up by ``in_port`` (the source's attachment point, i.e. a
    static hash of the source address bits): one entry per port.

All modes are minimal routing and loop-free for every destination address,
including addresses nobody owns (they are dropped, never forwarded in a circle).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import mean
from typing import Any, Iterable, Mapping

from hpcfabric.addressing import AddressPlan, Layout
from hpcfabric.compaction import DROP, compact_prefixes
from hpcfabric.errors import CompileError
from hpcfabric.flows import (
    ETH_TYPE_DMP,
    ETH_TYPE_LLDP,
    ETH_TYPE_PAUSE,
    OFPP_CONTROLLER,
    OFPP_IN_PORT,
    TABLE_ALTERNATIVE,
    TABLE_INGRESS,
    TABLE_PORT_STATE,
    TABLE_ROUTE,
    FlowSpec,
    Match,
    Output,
    RuleClass,
    SetField,
    make_cookie,
    sort_flows,
)
from hpcfabric.routing import ExplicitRouter, router_for
from hpcfabric.topology.model import Fabric, Switch

PRIO_DMP = 2000
PRIO_PUNT = 1900
PRIO_LPM_BASE = 1000
PRIO_UP = 500
PRIO_MISS = 0

ROUTINGS = ("minimal", "conditional")

PRIO_PORT_STATE = 100
PRIO_ALT_DIM = 30
PRIO_VALIANT = 20
PRIO_FALLBACK = 1

#: metadata written by conditional default rules: output port in the low 16
#: bits, FB lower dimensions allowed as alternatives in the next 8.
METADATA_PORT_MASK = 0xFFFF
METADATA_DIMS_SHIFT = 16
METADATA_MASK = 0xFFFFFF
COND_HOP = 1 << 24  # marks conditional next hops inside ORTC


@dataclass(frozen=True, slots=True)
class Route:
    """A destination prefix (``bits``/``length`` over the layout's used bits) and
    the port serving it (None = drop)."""

    bits: int
    length: int
    port: int | None
    rule_class: int
    conditional: bool = False  # a default rule that may switch off while its port is paused


@dataclass(frozen=True, eq=False)
class SwitchTable:
    """Compiled flows of one switch, with the counts the paper reports."""

    switch: str
    dpid: int
    flows: tuple[FlowSpec, ...]
    ports: int
    access: bool

    @property
    def forwarding(self) -> int:
        """Routing/forwarding entries (host delivery + routing), as the paper counts them."""
        return sum(1 for f in self.flows if f.rule_class in RuleClass.FORWARDING)

    def count(self, rule_class: int) -> int:
        return sum(1 for f in self.flows if f.rule_class == rule_class)


@dataclass(frozen=True, eq=False)
class CompiledFabric:
    fabric: Fabric
    plan: AddressPlan
    routing: str
    tables: Mapping[str, SwitchTable] = field(default_factory=dict)

    def flows(self, switch: str) -> tuple[FlowSpec, ...]:
        return self.tables[switch].flows

    @property
    def total_flows(self) -> int:
        return sum(len(t.flows) for t in self.tables.values())

    def stats(self) -> dict[str, Any]:
        """Rule counts: ``rules_*`` over access switches (the paper's count),
        ``all_rules_*`` over every switch, plus DMP and total flow counts."""
        access = [t.forwarding for t in self.tables.values() if t.access] or [0]
        every = [t.forwarding for t in self.tables.values()] or [0]
        return {
            "fabric": self.fabric.name,
            "kind": self.fabric.kind,
            "addressing": self.plan.mode,
            "layout": self.plan.layout.describe(),
            "routing": self.routing,
            "switches": len(self.fabric.switches),
            "hosts": len(self.fabric.hosts),
            "rules_min": min(access),
            "rules_max": max(access),
            "rules_mean": round(mean(access), 3),
            "all_rules_min": min(every),
            "all_rules_max": max(every),
            "dmp_rules": sum(t.count(RuleClass.DMP) for t in self.tables.values()),
            "total_flows": self.total_flows,
        }


def eq1(fabric: Fabric, switch: Switch) -> int:
    """The paper's Eq. 1, R = (G-1) + (S-1) + T, for an access switch.

    G: groups with hosts, S: access switches in this switch's group, T: its hosts.
    """
    groups: dict[int, int] = {}
    for sw in fabric.access_switches:
        groups[sw.group] = groups.get(sw.group, 0) + 1
    return (len(groups) - 1) + (groups.get(switch.group, 0) - 1) + len(fabric.hosts_on(switch.name))


def dragonfly_band(fabric: Fabric) -> tuple[int, int]:
    """The paper's compact-Dragonfly band [T+(S-1)+h+(S-1), T+(S-1)+(G-1)]."""
    prm = fabric.params
    t, s, h, g = prm["p"], prm["a"], prm["h"], prm["g"]
    return t + (s - 1) + h + (s - 1), t + (s - 1) + (g - 1)


# ---------------------------------------------------------------------------
# destination functions


class Context:
    """What every switch's compilation shares: the fabric, plan, router, the
    prefixes of every host, switch and group, and interned flow entries."""

    def __init__(self, fabric: Fabric, plan: AddressPlan, routing: str = "minimal") -> None:
        self.fabric = fabric
        self.plan = plan
        self.layout = plan.layout
        self.routing = routing
        self.router = router_for(fabric)
        self.cache = FlowCache(plan.layout)
        self.members: dict[int, list[Switch]] = {}
        for sw in fabric.access_switches:
            self.members.setdefault(sw.group, []).append(sw)
        self.groups = sorted(self.members)
        names = self.layout.names
        self.host_prefix = {
            h.name: _prefix(self.layout, [(n, plan.host_fields[h.name][n]) for n in names]) for h in fabric.hosts
        }
        self.switch_prefix: dict[str, tuple[int, int]] = {}
        self.group_prefix: dict[int, tuple[int, int]] = {}
        if "switch" in names:
            for sw in fabric.access_switches:
                fv = plan.switch_fields(sw)
                lead = [(n, fv[n]) for n in names if n != "host"]
                self.switch_prefix[sw.name] = _prefix(self.layout, lead)
        if "group" in names:
            self.group_prefix = {g: _prefix(self.layout, [("group", g)]) for g in self.groups}


def _host_routes(ctx: Context, sw: Switch) -> list[Route]:
    return [Route(*ctx.host_prefix[h.name], h.port, RuleClass.HOST) for h in ctx.fabric.hosts_on(sw.name)]


def _per_host_routes(ctx: Context, sw: Switch) -> list[Route]:
    fabric, router = ctx.fabric, ctx.router
    routes = _host_routes(ctx, sw)
    for i, h in enumerate(fabric.hosts):
        if h.switch == sw.name:
            continue
        dst = fabric.switch(h.switch)
        port = router.to_switch(sw, dst, spread=i)
        routes.append(Route(*ctx.host_prefix[h.name], port, RuleClass.ROUTE, dst.group != sw.group))
    return routes


def _per_switch_routes(ctx: Context, sw: Switch) -> list[Route]:
    routes = _host_routes(ctx, sw)
    for rank, dst in enumerate(ctx.fabric.access_switches):
        if dst.name == sw.name:
            continue
        port = ctx.router.to_switch(sw, dst, spread=rank)
        routes.append(Route(*ctx.switch_prefix[dst.name], port, RuleClass.ROUTE, dst.group != sw.group))
    return routes


def _per_group_routes(ctx: Context, sw: Switch) -> list[Route]:
    router = ctx.router
    routes = _host_routes(ctx, sw)
    within = isinstance(router, ExplicitRouter)
    for dst in ctx.members.get(sw.group, ()):
        if dst.name == sw.name:
            continue
        if within:
            port = router.to_switch(sw, dst, within_group=True)  # type: ignore[call-arg]
        else:
            port = router.to_switch(sw, dst, spread=dst.index)
        routes.append(Route(*ctx.switch_prefix[dst.name], port, RuleClass.ROUTE))
    for g in ctx.groups:
        if g != sw.group:
            routes.append(Route(*ctx.group_prefix[g], router.to_group(sw, g, spread=g), RuleClass.ROUTE, True))
    return routes


def _prefix(layout: Layout, fields: Iterable[tuple[str, int]]) -> tuple[int, int]:
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


# ---------------------------------------------------------------------------
# flow emission


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
            flow = _route_entry(PRIO_LPM_BASE + length, Match(eth_dst=(value, mask)), port, rule_class, metadata)
            self.flows[key] = flow
        return flow

    def dimension(self, d: int, v: int, port: int, metadata: int | None) -> FlowSpec:
        """The FB entry matching only ``dim_d == v``."""
        key = ("dim", d, v, port, metadata)
        flow = self.flows.get(key)
        if flow is None:
            value, mask = self.layout.match({f"dim{d}": v})
            flow = _route_entry(PRIO_LPM_BASE + 1 + d, Match(eth_dst=(value, mask)), port, RuleClass.ROUTE, metadata)
            self.flows[key] = flow
        return flow


def _route_entry(priority: int, match: Match, port: int | None, rule_class: int, metadata: int | None) -> FlowSpec:
    cookie = make_cookie(rule_class, port or 0)
    if metadata is not None:
        return FlowSpec(TABLE_ROUTE, priority, match, (), cookie, goto=TABLE_PORT_STATE, write_metadata=(metadata, METADATA_MASK))
    return FlowSpec(TABLE_ROUTE, priority, match, () if port is None else (Output(port),), cookie)


def _lpm_flows(cache: FlowCache, routes: list[Route], compact: bool, conditional: bool = False) -> list[FlowSpec]:
    """Prefix entries for ``routes``; compacted with ORTC when ``compact``.

    With ``conditional``, routes marked conditional become default rules
    (metadata = port, go to PORT_STATE); ORTC then keeps conditional and
    unconditional next hops apart, so it never merges the two kinds.
    """
    hops: list[tuple[int, int, int]] = []
    classes: dict[int, int] = {}
    for r in routes:
        hop = DROP if r.port is None else r.port | (COND_HOP if conditional and r.conditional else 0)
        hops.append((r.bits, r.length, hop))
        if r.rule_class == RuleClass.HOST:
            classes[hop] = RuleClass.HOST
    if compact:
        hops = compact_prefixes(hops, cache.layout.used_bits)
    flows = []
    for bits, length, hop in hops:
        port = None if hop == DROP else hop & ~COND_HOP
        metadata = port if hop & COND_HOP else None
        flows.append(cache.route(bits, length, port, classes.get(hop, RuleClass.ROUTE), metadata))
    return flows


def _fb_dim_ports(fabric: Fabric, sw: Switch) -> list[tuple[int, int, int]]:
    """(dimension, coordinate, port) of every fabric port of an FB switch."""
    out = []
    base = fabric.params["hosts_per_switch"] + 1
    for d, k in enumerate(fabric.params["dims"]):
        for v in range(k):
            if v != sw.coords[d]:
                out.append((d, v, base + (v if v < sw.coords[d] else v - 1)))
        base += k - 1
    return out


def _fb_compact_flows(ctx: Context, sw: Switch, conditional: bool = False) -> list[FlowSpec]:
    """Flattened Butterfly at the lower bound: one entry per port in use.

    Conditional default rules carry in metadata, above the port, the mask of
    the lower dimensions a paused frame may turn to (minimal adaptive routing).
    """
    flows = [ctx.cache.route(r.bits, r.length, r.port, RuleClass.HOST) for r in _host_routes(ctx, sw)]
    for d, v, port in _fb_dim_ports(ctx.fabric, sw):
        metadata = port | (((1 << d) - 1) << METADATA_DIMS_SHIFT) if conditional else None
        flows.append(ctx.cache.dimension(d, v, port, metadata))
    return flows


def _fat_tree_compact_flows(ctx: Context, sw: Switch) -> list[FlowSpec]:
    """Fat-tree at the lower bound: down by destination prefix, up by in_port."""
    half = ctx.fabric.params["k"] // 2
    if sw.role == "core":
        return _lpm_flows(ctx.cache, _per_group_routes(ctx, sw), compact=True)
    if sw.role == "edge":
        down = _host_routes(ctx, sw)
        # host on port 1+t (rank t) goes up to aggregation (t + edge index) mod k/2
        ups = [(h.port, half + 1 + (h.index + sw.index) % half) for h in ctx.fabric.hosts_on(sw.name)]
    else:  # aggregation: edges of its pod below, edge i goes up to core index i
        down = [Route(*ctx.switch_prefix[e.name], 1 + e.index, RuleClass.ROUTE) for e in ctx.members[sw.group]]
        ups = [(1 + i, half + 1 + i % half) for i in range(half)]
    flows = _lpm_flows(ctx.cache, down, compact=True)
    for in_port, out in ups:
        flows.append(
            FlowSpec(TABLE_ROUTE, PRIO_UP, Match(in_port=in_port), (Output(out),), make_cookie(RuleClass.ROUTE, out))
        )
    return flows


def _infra_flows(fabric: Fabric, plan: AddressPlan, sw: Switch, punts: bool) -> list[FlowSpec]:
    flows = []
    for h in fabric.hosts_on(sw.name):
        flows.append(
            FlowSpec(
                TABLE_INGRESS,
                PRIO_DMP,
                Match(in_port=h.port, eth_type=ETH_TYPE_DMP),
                (SetField("eth_src", plan.host_mac[h.name]), Output(OFPP_IN_PORT)),
                make_cookie(RuleClass.DMP, h.port),
            )
        )
    if punts:
        for eth_type in (ETH_TYPE_LLDP, ETH_TYPE_PAUSE):
            flows.append(
                FlowSpec(
                    TABLE_INGRESS,
                    PRIO_PUNT,
                    Match(eth_type=eth_type),
                    (Output(OFPP_CONTROLLER),),
                    make_cookie(RuleClass.PUNT, eth_type),
                )
            )
    flows.append(FlowSpec(TABLE_INGRESS, PRIO_MISS, Match(), (), make_cookie(RuleClass.INFRA, 0), goto=TABLE_ROUTE))
    flows.append(FlowSpec(TABLE_ROUTE, PRIO_MISS, Match(), (), make_cookie(RuleClass.INFRA, 1)))
    return flows


def port_state_flow(port: int, paused: bool) -> FlowSpec:
    """The PORT_STATE entry of one fabric port: output it, or (paused) go to ALTERNATIVE.

    Both states share table, priority and match, so a flip is one
    OFPFC_MODIFY_STRICT flow-mod however many default rules use the port.
    """
    match = Match(metadata=(port, METADATA_PORT_MASK))
    cookie = make_cookie(RuleClass.PORT_STATE, port)
    if paused:
        return FlowSpec(TABLE_PORT_STATE, PRIO_PORT_STATE, match, (), cookie, goto=TABLE_ALTERNATIVE)
    return FlowSpec(TABLE_PORT_STATE, PRIO_PORT_STATE, match, (Output(port),), cookie)


def _conditional_flows(fabric: Fabric, plan: AddressPlan, sw: Switch) -> list[FlowSpec]:
    """PORT_STATE and ALTERNATIVE entries of one switch for conditional routing.

    ALTERNATIVE holds, by priority: FB lower-dimension routes (minimal
    adaptive, taken only when the metadata allows that dimension), Valiant
    rules for frames injected by this switch's hosts (one intermediate per
    host port, as in the paper's Fig. 10, and a second one for when the first
    sits behind the paused port itself), and per-port fallbacks: transit
    frames whose default port is paused keep their minimal path and wait
    (lossless), so they can never loop.
    """
    flows = []
    fabric_ports = sorted(fabric.fabric_ports(sw.name))
    for port in fabric_ports:
        flows.append(port_state_flow(port, paused=False))
        flows.append(
            FlowSpec(
                TABLE_ALTERNATIVE,
                PRIO_FALLBACK,
                Match(metadata=(port, METADATA_PORT_MASK)),
                (Output(port),),
                make_cookie(RuleClass.PORT_STATE, port),
            )
        )
    if fabric.kind == "flattened_butterfly":
        dims = fabric.params["dims"]
        for d, v, port in _fb_dim_ports(fabric, sw):
            if d == len(dims) - 1:
                continue
            value, mask = plan.layout.match({f"dim{d}": v})
            bit = 1 << (METADATA_DIMS_SHIFT + d)
            flows.append(
                FlowSpec(
                    TABLE_ALTERNATIVE,
                    PRIO_ALT_DIM + d,
                    Match(eth_dst=(value, mask), metadata=(bit, bit)),
                    (Output(port),),
                    make_cookie(RuleClass.ALTERNATIVE, port),
                )
            )
        top = len(dims) - 1
        valiant = [port for d, _, port in _fb_dim_ports(fabric, sw) if d == top]
    else:
        valiant = [port for port in fabric_ports if fabric.peer(sw.name, port).kind == "global"]  # type: ignore[union-attr]
    for host in fabric.hosts_on(sw.name) if valiant else ():
        out = valiant[host.index % len(valiant)]
        flows.append(
            FlowSpec(
                TABLE_ALTERNATIVE,
                PRIO_VALIANT,
                Match(in_port=host.port),
                (Output(out),),
                make_cookie(RuleClass.ALTERNATIVE, out),
            )
        )
        if len(valiant) > 1:  # the host's intermediate is behind the paused port itself: take the next one
            second = valiant[(host.index + 1) % len(valiant)]
            flows.append(
                FlowSpec(
                    TABLE_ALTERNATIVE,
                    PRIO_VALIANT + 1,
                    Match(in_port=host.port, metadata=(out, METADATA_PORT_MASK)),
                    (Output(second),),
                    make_cookie(RuleClass.ALTERNATIVE, second),
                )
            )
    return flows


def compile_switch(ctx: Context, sw: Switch, *, punts: bool = True) -> SwitchTable:
    """Compile the flow table of one switch."""
    fabric, mode = ctx.fabric, ctx.plan.mode
    cond = ctx.routing == "conditional"
    if mode == "flat":
        flows = _lpm_flows(ctx.cache, _per_host_routes(ctx, sw), False, cond)
    elif mode == "per-switch":
        flows = _lpm_flows(ctx.cache, _per_switch_routes(ctx, sw), False, cond)
    elif mode == "per-group":
        flows = _lpm_flows(ctx.cache, _per_group_routes(ctx, sw), False, cond)
    elif fabric.kind == "flattened_butterfly":
        flows = _fb_compact_flows(ctx, sw, cond)
    elif fabric.kind == "fat_tree":
        flows = _fat_tree_compact_flows(ctx, sw)
    elif fabric.kind == "folded_clos":
        from hpcfabric.topology.clos import folded_clos_compact_flows

        flows = folded_clos_compact_flows(ctx, sw)
    else:
        flows = _lpm_flows(ctx.cache, _per_group_routes(ctx, sw), True, cond)
    if cond:
        flows += _conditional_flows(fabric, ctx.plan, sw)
    flows += _infra_flows(fabric, ctx.plan, sw, punts)
    return SwitchTable(sw.name, sw.dpid, sort_flows(flows), fabric.radix(sw.name), bool(fabric.hosts_on(sw.name)))


def compile_fabric(
    fabric: Fabric, plan: AddressPlan, *, routing: str = "minimal", punts: bool = True
) -> CompiledFabric:
    """Compile every switch of ``fabric`` for ``plan`` (its mode selects the table organisation).

    Raises
    ------
    CompileError
        Unknown routing policy, or a fabric the mode cannot route (e.g. an
        explicit fabric with a group that is not connected inside itself).
    """
    if routing not in ROUTINGS:
        raise CompileError(f"unknown routing policy {routing!r}; expected one of {', '.join(ROUTINGS)}")
    if routing == "conditional":
        supported = fabric.kind == "dragonfly" or (fabric.kind == "flattened_butterfly" and plan.mode == "compact")
        if not supported:
            raise CompileError(
                f"conditional routing is implemented for Dragonfly (any addressing) and Flattened Butterfly "
                f"(compact addressing); not for {fabric.kind} with {plan.mode} addressing"
            )
    if plan.fabric is not fabric:
        raise CompileError("address plan was made for another fabric")
    ctx = Context(fabric, plan, routing)
    tables = {sw.name: compile_switch(ctx, sw, punts=punts) for sw in fabric.switches}
    return CompiledFabric(fabric, plan, routing, tables)
