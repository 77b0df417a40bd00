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
    OFP_NO_BUFFER_LEN,
    OFPP_CONTROLLER,
    OFPP_IN_PORT,
    TABLE_INGRESS,
    TABLE_ROUTE,
    FlowSpec,
    Match,
    Output,
    RuleClass,
    SetField,
    make_cookie,
    sort_flows,
)
from hpcfabric.routing import ExplicitRouter, Router, router_for
from hpcfabric.topology.model import Fabric, Switch

PRIO_DMP = 2000
PRIO_PUNT = 1900
PRIO_LPM_BASE = 1000
PRIO_UP = 500
PRIO_MISS = 0

ROUTINGS = ("minimal",)


@dataclass(frozen=True, slots=True)
class Route:
    """A destination unit (leading address fields) and the port serving it (None = drop)."""

    fields: tuple[tuple[str, int], ...]
    port: int | None
    rule_class: int


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


def _host_routes(fabric: Fabric, plan: AddressPlan, sw: Switch) -> list[Route]:
    names = plan.layout.names
    return [
        Route(tuple((n, plan.host_fields[h.name][n]) for n in names), h.port, RuleClass.HOST)
        for h in fabric.hosts_on(sw.name)
    ]


def _per_host_routes(fabric: Fabric, plan: AddressPlan, router: Router, sw: Switch) -> list[Route]:
    own = {h.name for h in fabric.hosts_on(sw.name)}
    routes = _host_routes(fabric, plan, sw)
    for i, h in enumerate(fabric.hosts):
        if h.name in own:
            continue
        port = router.to_switch(sw, fabric.switch(h.switch), spread=i)
        routes.append(Route((("host", plan.host_fields[h.name]["host"]),), port, RuleClass.ROUTE))
    return routes


def _per_switch_routes(fabric: Fabric, plan: AddressPlan, router: Router, sw: Switch) -> list[Route]:
    routes = _host_routes(fabric, plan, sw)
    for dst in fabric.access_switches:
        if dst.name == sw.name:
            continue
        rank = plan.switch_fields(dst)["switch"]
        routes.append(Route((("switch", rank),), router.to_switch(sw, dst, spread=rank), RuleClass.ROUTE))
    return routes


def _per_group_routes(fabric: Fabric, plan: AddressPlan, router: Router, sw: Switch) -> list[Route]:
    routes = _host_routes(fabric, plan, sw)
    within = isinstance(router, ExplicitRouter)
    groups = sorted({d.group for d in fabric.access_switches})
    for dst in fabric.access_switches:
        if dst.group != sw.group or dst.name == sw.name:
            continue
        fv = plan.switch_fields(dst)
        if within:
            port = router.to_switch(sw, dst, within_group=True)  # type: ignore[call-arg]
        else:
            port = router.to_switch(sw, dst, spread=fv["switch"])
        routes.append(Route((("group", fv["group"]), ("switch", fv["switch"])), port, RuleClass.ROUTE))
    for g in groups:
        if g == sw.group:
            continue
        routes.append(Route((("group", g),), router.to_group(sw, g, spread=g), RuleClass.ROUTE))
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
    """Interns route flows per layout: identical entries (same prefix, port and
    class) recur on many switches, so each is built once and shared."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.flows: dict[tuple[int, int, int | None, int], FlowSpec] = {}


    def route(self, bits: int, length: int, port: int | None, rule_class: int) -> FlowSpec:
        key = (bits, length, port, rule_class)
        flow = self.flows.get(key)
        if flow is None:
            value, mask = self.layout.prefix_match(bits, length)
            actions = () if port is None else (Output(port),)
            flow = FlowSpec(
                TABLE_ROUTE,
                PRIO_LPM_BASE + length,
                Match(eth_dst=(value, mask)),
                actions,
                make_cookie(rule_class, port or 0),
            )
            self.flows[key] = flow
        return flow


def _lpm_flows(cache: FlowCache, routes: list[Route], compact: bool) -> list[FlowSpec]:
    layout = cache.layout
    if not compact:
        out = []
        for r in routes:
            bits, length = _prefix(layout, r.fields)
            out.append(cache.route(bits, length, r.port, r.rule_class))
        return out
    classes: dict[int, int] = {}
    prefixes = []
    for r in routes:
        bits, length = _prefix(layout, r.fields)
        port = DROP if r.port is None else r.port
        prefixes.append((bits, length, port))
        if r.rule_class == RuleClass.HOST:
            classes[port] = RuleClass.HOST
    flows = []
    for bits, length, port in compact_prefixes(prefixes, layout.used_bits):
        rule_class = classes.get(port, RuleClass.ROUTE)
        flows.append(cache.route(bits, length, None if port == DROP else port, rule_class))
    return flows


def _fb_compact_flows(fabric: Fabric, plan: AddressPlan, cache: FlowCache, sw: Switch) -> list[FlowSpec]:
    """Flattened Butterfly at the lower bound: one entry per port in use."""
    layout = plan.layout
    dims = fabric.params["dims"]
    flows = []
    for r in _host_routes(fabric, plan, sw):
        bits, length = _prefix(layout, r.fields)
        flows.append(cache.route(bits, length, r.port, RuleClass.HOST))
    base = fabric.params["hosts_per_switch"] + 1
    for d, k in enumerate(dims):
        for v in range(k):
            if v == sw.coords[d]:
                continue
            port = base + (v if v < sw.coords[d] else v - 1)
            value, mask = layout.match({f"dim{d}": v})
            flows.append(
                FlowSpec(
                    TABLE_ROUTE,
                    PRIO_LPM_BASE + 1 + d,
                    Match(eth_dst=(value, mask)),
                    (Output(port),),
                    make_cookie(RuleClass.ROUTE, port),
                )
            )
        base += k - 1
    return flows


def _fat_tree_compact_flows(
    fabric: Fabric, plan: AddressPlan, router: Router, cache: FlowCache, sw: Switch
) -> list[FlowSpec]:
    """Fat-tree at the lower bound: down by destination prefix, up by in_port."""
    layout = plan.layout
    half = fabric.params["k"] // 2
    if sw.role == "core":
        return _lpm_flows(cache, _per_group_routes(fabric, plan, router, sw), compact=True)
    down: list[Route] = []
    if sw.role == "edge":
        down = _host_routes(fabric, plan, sw)
        # host on port 1+t (rank t) goes up to aggregation (t + edge index) mod k/2
        ups = [(h.port, half + 1 + (h.index + sw.index) % half) for h in fabric.hosts_on(sw.name)]
    else:  # aggregation: edges of its pod below, edge i goes up to core index i
        for dst in fabric.access_switches:
            if dst.group == sw.group:
                fv = plan.switch_fields(dst)
                down.append(Route((("group", fv["group"]), ("switch", fv["switch"])), 1 + dst.index, RuleClass.ROUTE))
        ups = [(1 + i, half + 1 + i % half) for i in range(half)]
    flows = _lpm_flows(cache, down, compact=True)
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


def compile_switch(
    fabric: Fabric,
    plan: AddressPlan,
    router: Router,
    sw: Switch,
    *,
    routing: str = "minimal",
    punts: bool = True,
    cache: FlowCache | None = None,
) -> SwitchTable:
    """Compile the flow table of one switch (``cache`` shares identical entries between switches)."""
    cache = cache or FlowCache(plan.layout)
    mode = plan.mode
    if mode == "flat":
        flows = _lpm_flows(cache, _per_host_routes(fabric, plan, router, sw), compact=False)
    elif mode == "per-switch":
        flows = _lpm_flows(cache, _per_switch_routes(fabric, plan, router, sw), compact=False)
    elif mode == "per-group":
        flows = _lpm_flows(cache, _per_group_routes(fabric, plan, router, sw), compact=False)
    elif fabric.kind == "flattened_butterfly":
        flows = _fb_compact_flows(fabric, plan, cache, sw)
    elif fabric.kind == "fat_tree":
        flows = _fat_tree_compact_flows(fabric, plan, router, cache, sw)
    else:
        flows = _lpm_flows(cache, _per_group_routes(fabric, plan, router, sw), compact=True)
    flows += _infra_flows(fabric, plan, sw, punts)
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
    if plan.fabric is not fabric:
        raise CompileError("address plan was made for another fabric")
    router = router_for(fabric)
    cache = FlowCache(plan.layout)
    tables = {
        sw.name: compile_switch(fabric, plan, router, sw, routing=routing, punts=punts, cache=cache)
        for sw in fabric.switches
    }
    return CompiledFabric(fabric, plan, routing, tables)
