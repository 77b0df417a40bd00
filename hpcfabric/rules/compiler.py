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

All modes are loop-free for every destination address, including addresses
nobody owns (they are dropped, never forwarded in a circle).

Routing policies (``routing=``): ``minimal`` (the tables above), ``valiant``
(frames injected by host *t* always leave through the switch's *t*-th global /
highest-dimension port, minimal from there) and ``conditional`` (default rules
switch off while their port is PAUSEd; alternatives in table ALTERNATIVE).
Classes of service for deadlock freedom (``cos=``) ride in a VLAN tag pushed at
host ingress: its PCP rises on class-changing hops and the tag is popped before
delivery. See docs/routing.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from statistics import mean
from typing import Any, Iterable, Mapping

from hpcfabric.rules.addressing import USABLE_BITS, AddressPlan, Layout, mask_to_mac, to_mac
from hpcfabric.rules.compaction import DROP, compact_prefixes
from hpcfabric.errors import CompileError
from hpcfabric.rules.flows import (
    ETH_TYPE_CNM,
    ETH_TYPE_DMP,
    ETH_TYPE_LLDP,
    ETH_TYPE_PAUSE,
    OFPP_CONTROLLER,
    OFPP_IN_PORT,
    PAUSE_REACTIONS,
    TABLE_ALTERNATIVE,
    TABLE_INGRESS,
    TABLE_PAUSE_LEARN,
    TABLE_PAUSE_SELECT,
    TABLE_PORT_STATE,
    TABLE_ROUTE,
    VLAN_TAGGED,
    VLAN_UNTAGGED,
    FlowSpec,
    Group,
    Learn,
    LearnLoad,
    LearnMatch,
    Match,
    Output,
    PopVlan,
    PushVlan,
    Resubmit,
    RuleClass,
    SetField,
    make_cookie,
    sort_flows,
)
from hpcfabric.rules.routing import DragonflyRouter, ExplicitRouter, router_for
from hpcfabric.topology.model import Fabric, Switch, gc_paused

PRIO_DMP = 2000
PRIO_PUNT = 1900
PRIO_LPM_BASE = 1000
PRIO_UP = 500
PRIO_MISS = 0

ROUTINGS = ("minimal", "valiant", "conditional")

PRIO_PORT_STATE = 100
PRIO_VALIANT_ALWAYS = 200  # table PORT_STATE, valiant policy: injected frames -> intermediate
PRIO_ALT_DIM = 30
PRIO_VALIANT = 20
PRIO_ALT_UP = 10  # fat-tree: another uplink while the default one is paused
PRIO_FALLBACK = 1

#: switch-local PAUSE reaction (``pause_reaction="switch"``, docs/controller.md)
PRIO_PAUSE_LEARN = 1901  # table INGRESS, per fabric port, above the generic MAC-control punt (1900)
PRIO_LEARNED = 100  # table PAUSE_LEARN: the overrides the switch learns
PRIO_SELECT_PAUSED = 200  # table PAUSE_SELECT: an override is present -> ALTERNATIVE
PRIO_SELECT_PORT = 100  # table PAUSE_SELECT: per port -> output it
REG_PAUSED = (1, 1)  # reg0 bit 0: "the port in the metadata has a learned override"
COOKIE_LEARN_NOOP = 2  # INFRA detail of the table PAUSE_LEARN miss entry
COOKIE_SELECT_PAUSED = 1 << 16  # PORT_STATE detail of the PAUSE_SELECT "paused" entry

#: Class-of-service schemes: which arrivals raise the VLAN PCP by one.
#: ``none`` tags every frame with PCP 0 and never changes it (one class);
#: ``top`` raises it on arrival over a top-level link (Dragonfly global link,
#: Flattened Butterfly highest dimension, fat-tree aggregation-core);
#: ``hop`` on arrival over any fabric link.
COS_SCHEMES = ("none", "top", "hop")
PRIO_COS = 100  # table INGRESS: push on host ports, PCP transitions on fabric ports
MAX_COS_LEVELS = 8  # 3-bit PCP
#: INFRA cookie details of the CoS entries (above the table-miss details 0 and 1)
COOKIE_COS_PUSH = 1 << 32
COOKIE_COS_STEP = 2 << 32
COOKIE_COS_UNTAGGED = 3 << 32  # untagged twin of a delivery entry (table ROUTE, :func:`_pop_before_hosts`)

#: metadata written by conditional default rules: output port in the low 16
#: bits, FB lower dimensions allowed as alternatives in the next 8.
METADATA_PORT_MASK = 0xFFFF
METADATA_DIMS_SHIFT = 16
METADATA_MASK = 0xFFFFFF
COND_HOP = 1 << 24  # marks conditional next hops inside ORTC
DIMS_HOP_SHIFT = 32  # ... and their FB lower-dimension mask above it


@dataclass(frozen=True, slots=True)
class Route:
    """A destination prefix (``bits``/``length`` over the layout's used bits) and
    the port serving it (None = drop)."""

    bits: int
    length: int
    port: int | None
    rule_class: int
    conditional: bool = False  # a default rule that may switch off while its port is paused
    dims: int = 0  # FB: lower dimensions a paused frame may turn to (bit d = dimension d)


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
    """Compiled tables of every switch. ``cos``: the class-of-service scheme
    (None: frames stay untagged), ``cos_levels``: PCP values in use (0 untagged)."""

    fabric: Fabric
    plan: AddressPlan
    routing: str
    tables: Mapping[str, SwitchTable] = field(default_factory=dict)
    cos: str | None = None
    cos_levels: int = 0
    pause_reaction: str = "controller"
    switch_hold_s: int = 1

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
            "cos": self.cos,
            "cos_levels": self.cos_levels,
            **policy_counts(self),
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
        #: class-of-service scheme (None: untagged) and PCP levels, set by compile_fabric
        self.cos: str | None = None
        self.cos_levels = 0
        self.cnm_snoop = False
        self.pause_reaction = "controller"
        self.switch_hold_s = 1
        self.router = router_for(fabric)
        self.cache = FlowCache(plan.layout)
        #: tables shared by several switches' compilations (e.g. a Dragonfly group's global links)
        self.shared: dict[Any, Any] = {}
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


# -- public helpers for code that builds ROUTE tables of its own (hpcfabric.failover.reroute) --------


def host_routes(ctx: Context, sw: Switch) -> list[Route]:
    """Delivery routes (one per host of ``sw``, exact host prefix -> its port)."""
    return _host_routes(ctx, sw)


def access_prefix(ctx: Context, sw: Switch) -> tuple[int, int] | None:
    """(bits, length) of the prefix every host of access switch ``sw`` shares (all address fields but
    ``host``), or None when the layout does not end in a ``host`` field after others (e.g. flat)."""
    names = ctx.layout.names
    if not ("host" in names and len(names) > 1 and names[-1] == "host"):
        return None
    fv = ctx.plan.switch_fields(sw)
    return _prefix(ctx.layout, [(n, fv[n]) for n in names if n != "host"])


def route_flows(ctx: Context, routes: list[Route], compact: bool = True) -> list[FlowSpec]:
    """Table-ROUTE entries for ``routes`` (plain outputs; drop for ``port=None``), compacted with
    ORTC when ``compact`` -- exactly as the compiler emits prefix tables."""
    return _lpm_flows(ctx.cache, routes, compact)


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
    if type(router) is DragonflyRouter:
        routes += _dragonfly_remote_routes(ctx, router, sw)
        return routes
    for g in ctx.groups:
        if g != sw.group:
            routes.append(Route(*ctx.group_prefix[g], router.to_group(sw, g, spread=g), RuleClass.ROUTE, True))
    return routes


def _dragonfly_remote_routes(ctx: Context, router: DragonflyRouter, sw: Switch) -> list[Route]:
    """Routes to every remote group: what ``router.to_group(sw, g, spread=g)``
    returns, from a table shared by the switches of a group (the global links
    of the group are looked up once, not once per switch), and Route values
    interned per (group, port)."""
    table = ctx.shared.get(("df-remote", sw.group))
    if table is None:
        table = []
        per_group = router.globals.get(sw.group, {})
        for g in ctx.groups:
            if g == sw.group:
                continue
            links = per_group.get(g)
            if not links:
                raise CompileError(f"no global link from group {sw.group} to group {g}")
            mine: dict[int, int] = {}
            for s, port in links:  # sorted: the first port of a switch is its lowest
                mine.setdefault(s, port)
            table.append((g, mine, links[g % len(links)][0]))
        ctx.shared[("df-remote", sw.group)] = table
    interned = ctx.shared.setdefault("df-routes", {})
    s, base = sw.index, router.p + router.h + 1
    out = []
    for g, mine, holder in table:
        port = mine.get(s)
        if port is None:
            port = base + (holder if holder < s else holder - 1)
        route = interned.get((g, port))
        if route is None:
            route = interned[(g, port)] = Route(*ctx.group_prefix[g], port, RuleClass.ROUTE, True)
        out.append(route)
    return out


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


def _fat_tree_compact_flows(ctx: Context, sw: Switch, conditional: bool = False) -> list[FlowSpec]:
    """Fat-tree at the lower bound: down by destination prefix, up by in_port.

    With ``conditional`` the up entries are default rules (metadata = uplink,
    go to PORT_STATE); down entries stay unconditional (one path down).
    """
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
        cookie = make_cookie(RuleClass.ROUTE, out)
        if conditional:
            flows.append(
                FlowSpec(TABLE_ROUTE, PRIO_UP, Match(in_port=in_port), (), cookie, goto=TABLE_PORT_STATE,
                         write_metadata=(out, METADATA_MASK))
            )
        else:
            flows.append(FlowSpec(TABLE_ROUTE, PRIO_UP, Match(in_port=in_port), (Output(out),), cookie))
    return flows


UP_DOWN_KINDS = ("fat_tree", "folded_clos")


def updown_level(fabric: Fabric, sw: Switch) -> int:
    """Level of ``sw`` in an up-down fabric (fat-tree, folded Clos): 1 = edge, rising to the core."""
    if fabric.kind == "folded_clos":
        return int(sw.coords[0])
    return {"edge": 1, "aggregation": 2, "core": 3}[sw.role]


def _uplinks(fabric: Fabric, sw: Switch) -> list[int]:
    """Fat-tree, folded Clos: the ports of ``sw`` that lead one level up (edge -> ... -> core)."""
    level = updown_level(fabric, sw)
    return sorted(
        p for p, peer in fabric.fabric_ports(sw.name).items() if updown_level(fabric, fabric.switch(peer.node)) > level
    )


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


def port_state_flow(port: int, paused: bool, group: int | None = None, *, reaction: str = "controller") -> FlowSpec:
    """The PORT_STATE entry of one fabric port: output it, or (paused) go to ALTERNATIVE.

    Both states share table, priority and match, so a flip is one
    OFPFC_MODIFY_STRICT flow-mod however many default rules use the port.
    ``group``: the port is protected by that fast-failover group
    (:mod:`hpcfabric.failover.groups`); the unpaused entry outputs through it
    (controller reaction only: fast failover and the switch-local reaction
    are not combined, the config refuses it).
    With ``reaction="switch"`` the unpaused entry asks the switch-local state
    instead of outputting (:func:`_switch_pause_flows`): ``resubmit`` to
    PAUSE_LEARN (a learned override sets reg0 bit 0), then to PAUSE_SELECT
    (output the port, or ALTERNATIVE); the paused entry is the same in both
    modes (the controller can still force a port, e.g. on a CNM).
    """
    match = Match(metadata=(port, METADATA_PORT_MASK))
    cookie = make_cookie(RuleClass.PORT_STATE, port)
    if paused:
        return FlowSpec(TABLE_PORT_STATE, PRIO_PORT_STATE, match, (), cookie, goto=TABLE_ALTERNATIVE)
    if reaction == "switch":
        return FlowSpec(TABLE_PORT_STATE, PRIO_PORT_STATE, match,
                        (Resubmit(TABLE_PAUSE_LEARN), Resubmit(TABLE_PAUSE_SELECT)), cookie)
    action = Output(port) if group is None else Group(group)
    return FlowSpec(TABLE_PORT_STATE, PRIO_PORT_STATE, match, (action,), cookie)


def pause_learn_action(hold_s: int) -> Learn:
    """The ``learn`` a PAUSE frame runs in switch mode: an entry in PAUSE_LEARN matching
    ``metadata[0..15] == in_port`` (the port it arrived on) that sets reg0 bit 0, for
    ``hold_s`` seconds after the last such frame."""
    return Learn(
        table=TABLE_PAUSE_LEARN,
        priority=PRIO_LEARNED,
        hard_timeout=hold_s,
        cookie=make_cookie(RuleClass.LEARNED, 0),
        matches=(LearnMatch("metadata", "in_port", 16),),
        loads=(LearnLoad("reg0", 1, 1),),
    )


def learned_override_flow(port: int) -> FlowSpec:
    """What the switch holds while ``port`` is paused in switch mode: the entry
    :func:`pause_learn_action` learns from a PAUSE received on ``port`` (its timeout aside)."""
    return FlowSpec(
        TABLE_PAUSE_LEARN,
        PRIO_LEARNED,
        Match(metadata=(port, METADATA_PORT_MASK)),
        (LearnLoad("reg0", 1, 1),),
        make_cookie(RuleClass.LEARNED, 0),
    )


def _switch_pause_flows(fabric: Fabric, sw: Switch, hold_s: int, punts: bool) -> list[FlowSpec]:
    """Switch-local PAUSE reaction (OVS ``learn`` + ``resubmit``; docs/controller.md).

    INGRESS, per fabric port: a MAC-control frame (PAUSE, PFC, XON alike --
    OpenFlow cannot read the pause time) learns the port's override and is
    copied to the controller (counted there; ``punts=False``: not copied).
    PAUSE_LEARN: the learned overrides and a no-op miss entry. PAUSE_SELECT:
    reg0 bit 0 set -> resubmit to ALTERNATIVE, else output the port in the metadata.
    """
    learn = pause_learn_action(hold_s)
    flows = []
    ports = sorted(fabric.fabric_ports(sw.name))
    for port in ports:
        actions: tuple = (learn, Output(OFPP_CONTROLLER)) if punts else (learn,)
        flows.append(FlowSpec(TABLE_INGRESS, PRIO_PAUSE_LEARN, Match(in_port=port, eth_type=ETH_TYPE_PAUSE), actions,
                              make_cookie(RuleClass.PUNT, ETH_TYPE_PAUSE | port << 16)))
        flows.append(FlowSpec(TABLE_PAUSE_SELECT, PRIO_SELECT_PORT, Match(metadata=(port, METADATA_PORT_MASK)),
                              (Output(port),), make_cookie(RuleClass.PORT_STATE, port)))
    flows.append(FlowSpec(TABLE_PAUSE_LEARN, PRIO_MISS, Match(), (), make_cookie(RuleClass.INFRA, COOKIE_LEARN_NOOP)))
    flows.append(FlowSpec(TABLE_PAUSE_SELECT, PRIO_SELECT_PAUSED, Match(reg0=REG_PAUSED), (Resubmit(TABLE_ALTERNATIVE),),
                          make_cookie(RuleClass.PORT_STATE, COOKIE_SELECT_PAUSED)))
    return flows


def _fb_dim_match(fabric: Fabric, plan: AddressPlan, d: int, v: int) -> tuple[int, int]:
    """(value, mask) on eth_dst matching FB coordinate ``dim_d == v`` only.

    Compact addressing has a field per dimension. Per-group addressing has
    ``group`` = the dimensions >= 1 in mixed radix (dimension 1 lowest) and
    ``switch`` = dimension 0: dimension 0 is the switch field; dimension d >= 1
    is a bit range of the group field when k_1 ... k_d are powers of two.
    """
    layout = plan.layout
    if plan.mode == "compact":
        return layout.match({f"dim{d}": v})
    if plan.mode != "per-group":
        raise CompileError(f"no per-dimension match in {plan.mode} addressing")
    if d == 0:
        return layout.match({"switch": v})
    dims = fabric.params["dims"]
    shift = 0
    for k in dims[1:d]:
        shift += k.bit_length() - 1
    if any(k & (k - 1) for k in dims[1 : d + 1]):
        raise CompileError(
            f"conditional/valiant routing on a Flattened Butterfly with per-group addressing needs power-of-two "
            f"sizes for dimensions 1..{d} (dims {list(dims)}): dimension {d} is not a bit range of the group "
            f"field; use compact addressing"
        )
    group = layout.field("group")
    width = dims[d].bit_length() - 1
    mask46 = ((1 << USABLE_BITS) - 1) & ~((1 << layout.used_bits) - 1)
    mask46 |= ((1 << width) - 1) << (group.shift + shift)
    return to_mac(v << (group.shift + shift)), mask_to_mac(mask46)


def _adaptive_flows(ctx: Context, sw: Switch) -> list[FlowSpec]:
    """PORT_STATE and ALTERNATIVE entries of one switch (conditional and valiant policies).

    PORT_STATE: one entry per fabric port (output it; ``goto`` ALTERNATIVE
    while paused). With ``valiant`` it also holds, above them, one entry per
    host port sending every frame this switch's hosts inject towards a remote
    destination to the host's intermediate (always non-minimal).

    ALTERNATIVE holds, by priority: FB lower-dimension routes (minimal
    adaptive, taken only when the metadata allows that dimension); fat-tree:
    the next uplink (any uplink is minimal); conditional only: Valiant rules
    for frames injected by this switch's hosts (one intermediate per host
    port, as in the paper's Fig. 10, and a second one for when the first sits
    behind the paused port itself); and per-port fallbacks: transit frames
    whose default port is paused keep their minimal path and wait (lossless),
    so they can never loop.
    """
    fabric, plan = ctx.fabric, ctx.plan
    flows = []
    fabric_ports = sorted(fabric.fabric_ports(sw.name))
    for port in fabric_ports:
        flows.append(port_state_flow(port, False, reaction=ctx.pause_reaction))
        flows.append(
            FlowSpec(
                TABLE_ALTERNATIVE,
                PRIO_FALLBACK,
                Match(metadata=(port, METADATA_PORT_MASK)),
                (Output(port),),
                make_cookie(RuleClass.PORT_STATE, port),
            )
        )
    if fabric.kind in UP_DOWN_KINDS:
        ups = _uplinks(fabric, sw)
        for i, port in enumerate(ups if len(ups) > 1 else ()):
            nxt = ups[(i + 1) % len(ups)]
            flows.append(
                FlowSpec(
                    TABLE_ALTERNATIVE,
                    PRIO_ALT_UP,
                    Match(metadata=(port, METADATA_PORT_MASK)),
                    (Output(nxt),),
                    make_cookie(RuleClass.ALTERNATIVE, nxt),
                )
            )
        return flows
    valiant = _valiant_ports(fabric, sw)
    if fabric.kind == "flattened_butterfly":
        top = len(fabric.params["dims"]) - 1
        for d, v, port in _fb_dim_ports(fabric, sw) if ctx.routing == "conditional" else ():
            if d == top:
                continue
            value, mask = _fb_dim_match(fabric, plan, d, v)
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
    # FB: only frames whose default port is in the top dimension (destination in another top-dimension
    # row) detour. From a top-dimension intermediate the minimal route fixes the top coordinate first, so
    # a destination in the own row would go straight back through the port it came in on, which an
    # OpenFlow switch never does (it drops the frame). The metadata of every FB default rule carries its
    # lower dimensions; dimension top-1 is among them exactly when the default port is a top one.
    row_bit = 0
    if fabric.kind == "flattened_butterfly" and len(fabric.params["dims"]) > 1:
        row_bit = 1 << (METADATA_DIMS_SHIFT + len(fabric.params["dims"]) - 2)
    for host in fabric.hosts_on(sw.name) if valiant else ():
        out = valiant[host.index % len(valiant)]
        if ctx.routing == "valiant":
            flows.append(
                FlowSpec(
                    TABLE_PORT_STATE,
                    PRIO_VALIANT_ALWAYS,
                    Match(in_port=host.port, metadata=(row_bit, row_bit) if row_bit else None),
                    (Output(out),),
                    make_cookie(RuleClass.ALTERNATIVE, out),
                )
            )
            continue
        flows.append(
            FlowSpec(
                TABLE_ALTERNATIVE,
                PRIO_VALIANT,
                Match(in_port=host.port, metadata=(row_bit, row_bit) if row_bit else None),
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
                    Match(in_port=host.port, metadata=(out | row_bit, METADATA_PORT_MASK | row_bit)),
                    (Output(second),),
                    make_cookie(RuleClass.ALTERNATIVE, second),
                )
            )
    return flows


def _valiant_ports(fabric: Fabric, sw: Switch) -> list[int]:
    """Ports towards Valiant intermediates: Dragonfly global ports, FB highest-dimension ports."""
    if fabric.kind == "flattened_butterfly":
        top = len(fabric.params["dims"]) - 1
        return [port for d, _, port in _fb_dim_ports(fabric, sw) if d == top]
    return [p for p, peer in sorted(fabric.fabric_ports(sw.name).items()) if peer.kind == "global"]


# ---------------------------------------------------------------------------
# classes of service (VLAN PCP)


def _cos_step_ports(fabric: Fabric, sw: Switch, scheme: str) -> list[int]:
    """Fabric ports of ``sw`` whose arrivals raise the PCP under ``scheme``."""
    if scheme == "none":
        return []
    ports = fabric.fabric_ports(sw.name)
    if scheme == "hop":
        return sorted(ports)
    kind = _top_link_kind(fabric)
    return sorted(p for p, peer in ports.items() if peer.kind == kind)


def _top_link_kind(fabric: Fabric) -> str:
    if fabric.kind == "dragonfly":
        return "global"
    if fabric.kind == "flattened_butterfly":
        return f"dim{len(fabric.params['dims']) - 1}"
    if fabric.kind == "fat_tree":
        return "agg-core"
    raise CompileError(f"CoS scheme 'top' has no top-level link kind on a {fabric.kind} fabric; use 'hop'")


def _cos_flows(fabric: Fabric, sw: Switch, scheme: str, levels: int) -> list[FlowSpec]:
    """Table INGRESS entries carrying the class of service in the VLAN PCP.

    Frames from hosts get a VLAN tag with PCP 0 (below the DMP echo and the
    control punts, which keep matching first); on the ports ``scheme`` names,
    a frame arriving with PCP k < levels-1 leaves INGRESS with PCP k+1
    (saturating at levels-1). The tag is popped before delivery to a host
    (:func:`_pop_before_hosts`). The steps also match ``vlan_vid`` =
    :data:`~hpcfabric.rules.flows.VLAN_TAGGED` (any tag): switches check OXM
    prerequisites, and a ``vlan_pcp`` match or ``set_field vlan_pcp`` without a
    preceding ``push_vlan`` needs a match that guarantees the tag.
    """
    flows = []
    for h in fabric.hosts_on(sw.name):
        flows.append(
            FlowSpec(
                TABLE_INGRESS,
                PRIO_COS,
                Match(in_port=h.port),
                (PushVlan(), SetField("vlan_pcp", 0)),
                make_cookie(RuleClass.INFRA, COOKIE_COS_PUSH | h.port),
                goto=TABLE_ROUTE,
            )
        )
    for port in _cos_step_ports(fabric, sw, scheme):
        for k in range(levels - 1):
            flows.append(
                FlowSpec(
                    TABLE_INGRESS,
                    PRIO_COS,
                    Match(in_port=port, vlan_pcp=k, vlan_vid=VLAN_TAGGED),
                    (SetField("vlan_pcp", k + 1),),
                    make_cookie(RuleClass.INFRA, COOKIE_COS_STEP | k << 24 | port),
                    goto=TABLE_ROUTE,
                )
            )
    return flows


def _cnm_snoop_flows(fabric: Fabric, sw: Switch, scheme: str | None, levels: int) -> list[FlowSpec]:
    """Table INGRESS entries copying 802.1Qau CNMs to the controller while they keep
    being forwarded to their reaction point (:mod:`hpcfabric.protocols.cnm`).

    Untagged fabrics: one entry per fabric port, at the punt priority. With
    classes of service, CNMs from fabric ports must take the same PCP step as
    data (they are routed like data): per fabric port, one entry per step
    (above the step) and one for the arrivals that do not step (below the
    steps); CNMs from hosts are not copied (a congestion point in a host says
    nothing about the fabric) and get the CoS push as any frame.
    """
    def cookie(port: int, k: int = 0) -> int:
        return make_cookie(RuleClass.PUNT, ETH_TYPE_CNM | port << 16 | (k + 1) << 32)

    if scheme is None:  # one copy entry per fabric port: CNMs from hosts are never copied
        return [
            FlowSpec(TABLE_INGRESS, PRIO_PUNT, Match(in_port=port, eth_type=ETH_TYPE_CNM), (Output(OFPP_CONTROLLER),),
                     cookie(port), goto=TABLE_ROUTE)
            for port in sorted(fabric.fabric_ports(sw.name))
        ]
    flows = []
    steps = set(_cos_step_ports(fabric, sw, scheme))
    for port in sorted(fabric.fabric_ports(sw.name)):
        for k in range(levels - 1) if port in steps else ():
            flows.append(
                FlowSpec(TABLE_INGRESS, PRIO_COS + 1, Match(in_port=port, eth_type=ETH_TYPE_CNM, vlan_pcp=k,
                                                         vlan_vid=VLAN_TAGGED),
                         (Output(OFPP_CONTROLLER), SetField("vlan_pcp", k + 1)), cookie(port, k), goto=TABLE_ROUTE)
            )
        flows.append(
            FlowSpec(TABLE_INGRESS, PRIO_COS - 1, Match(in_port=port, eth_type=ETH_TYPE_CNM),
                     (Output(OFPP_CONTROLLER),), cookie(port, -1), goto=TABLE_ROUTE)
        )
    return flows


def _pop_before_hosts(
    flows: list[FlowSpec], host_ports: set[int], cache: dict[FlowSpec, tuple[FlowSpec, ...]]
) -> list[FlowSpec]:
    """Insert ``pop_vlan`` before every output to a host port (frames reach hosts untagged).

    Switches check OXM prerequisites: ``pop_vlan`` needs a match that guarantees a
    tag, so such an entry becomes two at the same priority: ``vlan_vid`` =
    :data:`~hpcfabric.rules.flows.VLAN_TAGGED` with the pops (every data frame leaves
    INGRESS tagged with CoS), and ``vlan_vid`` = :data:`~hpcfabric.rules.flows.VLAN_UNTAGGED`
    with the original actions. The untagged twin keeps what the entry did for
    untagged frames (none of our switches sends one onto a fabric link): without
    it such a frame would fall through to a shorter prefix and could be routed
    away from its own access switch and back (a loop). The twin is a CoS entry
    (cookie class INFRA, :data:`COOKIE_COS_UNTAGGED`), not a routing rule: the
    paper's count stays the tagged entry's."""
    out = []
    for f in flows:
        if f.table == TABLE_INGRESS or not any(isinstance(a, Output) and a.port in host_ports for a in f.actions):
            out.append(f)
            continue
        new = cache.get(f)
        if new is None:
            if f.match.vlan_vid is not None:
                raise CompileError(f"entry already matches vlan_vid: {f}")
            actions: list = []
            for a in f.actions:
                if isinstance(a, Output) and a.port in host_ports:
                    actions.append(PopVlan())
                actions.append(a)
            new = cache[f] = (
                replace(f, match=replace(f.match, vlan_vid=VLAN_TAGGED), actions=tuple(actions)),
                replace(f, match=replace(f.match, vlan_vid=VLAN_UNTAGGED),
                        cookie=make_cookie(RuleClass.INFRA, COOKIE_COS_UNTAGGED | (f.cookie & 0xFFFFFFFF))),
            )
        out.extend(new)
    return out


def cos_levels_needed(fabric: Fabric, routing: str, scheme: str) -> int:
    """PCP values a frame can carry on fabric links under ``scheme`` without saturating."""
    if scheme == "none":
        return 1
    nonminimal = routing != "minimal"
    kind = fabric.kind
    if kind == "dragonfly":
        links, top = (4, 2) if nonminimal else (3, 1)  # g-l-g-l / l-g-l
    elif kind == "flattened_butterfly":
        n = len(fabric.params["dims"])
        links, top = (n + 1, 2) if nonminimal else (n, 1)
    elif kind == "fat_tree":
        links, top = 4, 1
    else:
        links, top = len(fabric.switches) - 1, 0
    # a link carries the PCP raised by the arrivals before it; the last arrival raises nothing used
    need = links if scheme == "hop" else 1 + min(top, links - 1)
    return max(1, min(MAX_COS_LEVELS, need))


def default_cos(fabric: Fabric, routing: str) -> tuple[str, int]:
    """(scheme, levels) that ``cos=True`` selects: the fewest classes for which the
    channel dependency graph of the shipped fabrics is acyclic over every single
    paused port (:mod:`hpcfabric.verify.cdg`; measurements and the cycles found with one
    class less in docs/routing.md)."""
    kind = fabric.kind
    if kind == "dragonfly":  # +1 per global link: l-g-l needs 2, g-l-g-l 3
        return "top", 2 if routing == "minimal" else 3
    if kind == "flattened_butterfly":
        if routing == "minimal":  # dimension order: one class
            return "none", 1
        if routing == "valiant":  # one extra top-dimension hop first: 2
            return "top", 2
        return "hop", len(fabric.params["dims"])  # minimal adaptive in any order + Valiant: N
    if kind in ("fat_tree", "folded_clos"):  # up-down: one class
        return "none", 1
    return "hop", cos_levels_needed(fabric, routing, "hop")


def _resolve_cos(
    fabric: Fabric, routing: str, cos: bool | str | None, cos_levels: int | None
) -> tuple[str | None, int]:
    if cos is None:
        cos = routing == "valiant"
    if cos is False:
        if cos_levels:
            raise CompileError("cos_levels needs cos enabled")
        return None, 0
    if cos is True:
        scheme, levels = default_cos(fabric, routing)
    else:
        scheme = cos
        if scheme not in COS_SCHEMES:
            raise CompileError(f"unknown CoS scheme {scheme!r}; expected one of {', '.join(COS_SCHEMES)}")
        if scheme == "top":
            _top_link_kind(fabric)
        levels = cos_levels_needed(fabric, routing, scheme)
    if cos_levels is not None:
        levels = cos_levels
    if not 1 <= levels <= MAX_COS_LEVELS:
        raise CompileError(f"cos_levels must be 1..{MAX_COS_LEVELS} (3-bit VLAN PCP), got {levels}")
    return scheme, levels


def policy_counts(compiled: "CompiledFabric") -> dict[str, Any]:
    """Entries per access switch beyond the routing rules (min/max): PORT_STATE,
    ALTERNATIVE (incl. valiant entries in PORT_STATE) and CoS entries."""
    cols: dict[str, list[int]] = {"port_state": [], "alternative": [], "cos": []}
    for t in compiled.tables.values():
        if not t.access:
            continue
        ps = alt = cos = 0
        for f in t.flows:
            rc = f.rule_class
            if f.table == TABLE_PORT_STATE and rc == RuleClass.PORT_STATE:
                ps += 1
            elif f.table in (TABLE_PORT_STATE, TABLE_ALTERNATIVE):
                alt += 1
            elif rc == RuleClass.INFRA and f.cookie & (3 << 32):  # pushes, steps (INGRESS), untagged twins (ROUTE)
                cos += 1
        cols["port_state"].append(ps)
        cols["alternative"].append(alt)
        cols["cos"].append(cos)
    out: dict[str, Any] = {}
    for k, v in cols.items():
        out[f"{k}_rules_min"] = min(v, default=0)
        out[f"{k}_rules_max"] = max(v, default=0)
    return out


def compile_switch(ctx: Context, sw: Switch, *, punts: bool = True) -> SwitchTable:
    """Compile the flow table of one switch."""
    fabric, mode = ctx.fabric, ctx.plan.mode
    adaptive = ctx.routing != "minimal"
    if fabric.kind in UP_DOWN_KINDS and adaptive and mode != "compact":
        ups = set(_uplinks(fabric, sw))
        route_fn = {"flat": _per_host_routes, "per-switch": _per_switch_routes, "per-group": _per_group_routes}[mode]
        routes = [replace(r, conditional=r.port in ups) for r in route_fn(ctx, sw)]
        flows = _lpm_flows(ctx.cache, routes, False, True)
    elif fabric.kind == "flattened_butterfly" and adaptive and mode == "per-group":
        # every FB route is a default rule (in-row destinations too, as in compact addressing)
        dim_of = {port: d for d, _, port in _fb_dim_ports(fabric, sw)}
        routes = [
            r if r.rule_class == RuleClass.HOST else replace(r, conditional=True, dims=(1 << dim_of[r.port]) - 1)
            for r in _per_group_routes(ctx, sw)
        ]
        flows = _lpm_flows(ctx.cache, routes, False, True)
    elif mode == "flat":
        flows = _lpm_flows(ctx.cache, _per_host_routes(ctx, sw), False, adaptive)
    elif mode == "per-switch":
        flows = _lpm_flows(ctx.cache, _per_switch_routes(ctx, sw), False, adaptive)
    elif mode == "per-group":
        flows = _lpm_flows(ctx.cache, _per_group_routes(ctx, sw), False, adaptive)
    elif fabric.kind == "flattened_butterfly":
        flows = _fb_compact_flows(ctx, sw, adaptive)
    elif fabric.kind == "fat_tree":
        flows = _fat_tree_compact_flows(ctx, sw, adaptive)
    elif fabric.kind == "folded_clos":
        from hpcfabric.topology.clos import folded_clos_compact_flows

        flows = folded_clos_compact_flows(ctx, sw, adaptive)
    else:
        flows = _lpm_flows(ctx.cache, _per_group_routes(ctx, sw), True, adaptive)
    if adaptive:
        flows += _adaptive_flows(ctx, sw)
    if ctx.cos is not None:
        flows = _pop_before_hosts(flows, set(fabric.host_ports(sw.name)), ctx.shared.setdefault("cos-pop", {}))
        flows += _cos_flows(fabric, sw, ctx.cos, ctx.cos_levels)
    if ctx.cnm_snoop:
        flows += _cnm_snoop_flows(fabric, sw, ctx.cos, ctx.cos_levels)
    flows += _infra_flows(fabric, ctx.plan, sw, punts)
    if adaptive and ctx.pause_reaction == "switch":
        flows += _switch_pause_flows(fabric, sw, ctx.switch_hold_s, punts)
    return SwitchTable(sw.name, sw.dpid, sort_flows(flows), fabric.radix(sw.name), bool(fabric.hosts_on(sw.name)))


def _check_policy(fabric: Fabric, plan: AddressPlan, routing: str) -> None:
    if routing not in ROUTINGS:
        raise CompileError(f"unknown routing policy {routing!r}; expected one of {', '.join(ROUTINGS)}")
    if routing == "minimal":
        return
    kind, mode = fabric.kind, plan.mode
    if routing == "valiant" and kind in ("fat_tree", "folded_clos"):
        raise CompileError(
            f"valiant routing does not apply to a {kind}: up-down routing over per-source uplinks is already "
            f"oblivious multipath (every path is minimal); use minimal or conditional"
        )
    supported = (
        kind == "dragonfly"
        or (kind == "flattened_butterfly" and mode in ("compact", "per-group"))
        or (kind in UP_DOWN_KINDS and routing == "conditional")
    )
    if not supported:
        raise CompileError(
            f"{routing} routing is implemented for Dragonfly (any addressing), Flattened Butterfly (compact "
            f"and per-group addressing){' and fat-tree / folded Clos (any addressing)' if routing == 'conditional' else ''}; "
            f"not for {kind} with {mode} addressing"
        )


def compile_fabric(
    fabric: Fabric,
    plan: AddressPlan,
    *,
    routing: str = "minimal",
    punts: bool = True,
    cos: bool | str | None = None,
    cos_levels: int | None = None,
    cnm_snoop: bool = False,
    pause_reaction: str = "controller",
    switch_hold_s: int = 1,
) -> CompiledFabric:
    """Compile every switch of ``fabric`` for ``plan`` (its mode selects the table organisation).

    Parameters
    ----------
    routing : {'minimal', 'valiant', 'conditional'}
        Routing policy (docs/routing.md).
    cos : bool or str, optional
        Classes of service in a VLAN tag (PCP) for deadlock freedom: False =
        untagged frames; True = the fabric's default scheme and levels
        (:func:`default_cos`); or a scheme name from :data:`COS_SCHEMES`.
        Default: on for ``valiant``, off for ``minimal`` and ``conditional``
        (what the controller and the Mininet runner install today; see
        docs/routing.md for why).
    cos_levels : int, optional
        PCP values to use (1..8); increments saturate at ``cos_levels - 1``.
        Default: :func:`default_cos` for ``cos=True``, else as many as the
        longest path can use (:func:`cos_levels_needed`).
    cnm_snoop : bool
        Copy 802.1Qau congestion notifications arriving on fabric ports to the
        controller (and keep forwarding them), for :func:`hpcfabric.protocols.cnm.on_cnm`.
    pause_reaction : {'controller', 'switch'}
        Who switches a paused port's default rules off: the controller (it
        flips the PORT_STATE entry on a punted PAUSE) or the switch itself
        (Open vSwitch ``learn``/``resubmit`` extensions: a PAUSE learns a
        timed override, :func:`_switch_pause_flows`). ``switch`` needs a
        policy with PORT_STATE entries (conditional or valiant).
    switch_hold_s : int
        Switch mode: seconds a learned override lasts after the last PAUSE
        (1..65535; OVS timeouts are whole seconds).

    Raises
    ------
    CompileError
        Unknown routing policy or CoS scheme, a policy the fabric does not
        support, or a fabric the mode cannot route (e.g. an explicit fabric
        with a group that is not connected inside itself).
    """
    _check_policy(fabric, plan, routing)
    if pause_reaction not in PAUSE_REACTIONS:
        raise CompileError(f"unknown pause reaction {pause_reaction!r}; expected one of {', '.join(PAUSE_REACTIONS)}")
    if pause_reaction == "switch" and routing == "minimal":
        raise CompileError("switch-local pause reaction needs conditional (or valiant) routing: "
                           "minimal routing has no PORT_STATE entries to switch")
    if not 1 <= switch_hold_s <= 0xFFFF:
        raise CompileError(f"switch_hold_s must be 1..65535 seconds, got {switch_hold_s}")
    scheme, levels = _resolve_cos(fabric, routing, cos, cos_levels)
    if plan.fabric is not fabric:
        raise CompileError("address plan was made for another fabric")
    with gc_paused():
        ctx = Context(fabric, plan, routing)
        ctx.cos, ctx.cos_levels, ctx.cnm_snoop = scheme, levels, cnm_snoop
        ctx.pause_reaction, ctx.switch_hold_s = pause_reaction, switch_hold_s
        tables = {sw.name: compile_switch(ctx, sw, punts=punts) for sw in fabric.switches}
    return CompiledFabric(fabric, plan, routing, tables, scheme, levels, pause_reaction, switch_hold_s)
