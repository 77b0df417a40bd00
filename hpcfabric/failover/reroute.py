"""Routing around failed links and switches (pure): the tables the controller installs while something is down.

The compiled rules are static per topology (paper Sec. III); a dead link or
switch black-holes the paths over it. :func:`reroute` recomputes the ROUTE
table of every switch on the *surviving* graph:

* per destination access switch D (its address prefix: every address field
  but ``host``; per host in flat addressing), a BFS from D gives every
  switch's distance to it; a switch forwards towards D through a surviving
  port whose neighbour is one hop closer. Distances strictly decrease along
  any path, so forwarding is loop-free for every destination; unreachable
  destinations are dropped (never looped);
* among equally short next hops the one the compiled table already uses is
  kept (found with the reference pipeline on fabrics up to
  :data:`PREFER_LIMIT` switch x destination pairs), else they are spread by
  destination -- so routes that did not cross the failure keep their port;
* the prefixes are compacted (ORTC, as the compiler does) into table ROUTE;
  INGRESS (DMP, punts, guards) and the table-miss entries are kept, the
  conditional tables (PORT_STATE, ALTERNATIVE) are left out: while a
  reroute is in force the fabric runs minimal routing on the surviving graph
  and PAUSE flips have nothing to switch (they resume when everything is back).

Fast-failover groups are the first line (:mod:`hpcfabric.failover.groups`): where the
topology offers a proved detour the switch itself moves the traffic when the port
goes down; this recomputation follows and replaces the tables (the rerouted tables
use plain outputs: the groups stay installed, unused, until the compiled tables return).
"""

from __future__ import annotations

from collections import deque
from typing import Any, Iterable

from hpcfabric.failover.groups import fast_failover_groups  # noqa: F401  (public: the groups' transform)
from hpcfabric.rules.flows import TABLE_INGRESS, TABLE_ROUTE, FlowSpec, Output, RuleClass, SetField, sort_flows

#: above this many (switch, destination) pairs the previous next hops are not looked up (speed)
PREFER_LIMIT = 200_000


def dead_links(fabric: Any, down: Iterable[tuple[str, int]], dead_switches: Iterable[str] = ()) -> set[int]:
    """Indices in ``fabric.links`` of links with a down end or a dead switch."""
    down = set(down)
    dead = set(dead_switches)
    out = set()
    for i, link in enumerate(fabric.links):
        if (link.a, link.a_port) in down or (link.b, link.b_port) in down or link.a in dead or link.b in dead:
            out.add(i)
    return out


def reroute(config: Any, down: Iterable[tuple[str, int]], dead_switches: Iterable[str] = ()
            ) -> dict[str, tuple[FlowSpec, ...]]:
    """Per switch, the table to install while the ports ``down`` (switch, port) and the switches
    ``dead_switches`` are out of service. ``config`` is a compiled :class:`~hpcfabric.config.ControllerConfig`."""
    from hpcfabric.rules.context import Context
    from hpcfabric.rules.destinations import access_prefix, host_routes, route_flows
    from hpcfabric.rules.tables import Route
    from hpcfabric.verify.pipeline import Frame, Pipeline

    fabric, plan = config.fabric, config.plan
    gone = dead_links(fabric, down, dead_switches)
    dead = set(dead_switches)
    adj: dict[str, list[tuple[int, str]]] = {sw.name: [] for sw in fabric.switches}
    for i, link in enumerate(fabric.links):
        if i in gone:
            continue
        adj[link.a].append((link.a_port, link.b))
        adj[link.b].append((link.b_port, link.a))
    for ports in adj.values():
        ports.sort()
    ctx = Context(fabric, plan, "minimal")
    # destinations: (key switch, prefix bits, prefix length, a host there for the pipeline lookup)
    dests: list[tuple[str, int, int, str]] = []
    for sw in fabric.access_switches:
        hosts = fabric.hosts_on(sw.name)
        prefix = access_prefix(ctx, sw)
        if prefix is not None:
            dests.append((sw.name, *prefix, hosts[0].name))
        else:
            for h in hosts:
                dests.append((sw.name, *ctx.host_prefix[h.name], h.name))
    dist: dict[str, dict[str, int]] = {}
    for target in {d[0] for d in dests}:
        if target in dead:
            dist[target] = {}
            continue
        seen = {target: 0}
        queue = deque([target])
        while queue:
            cur = queue.popleft()
            for _, nb in adj[cur]:
                if nb not in seen and nb not in dead:
                    seen[nb] = seen[cur] + 1
                    queue.append(nb)
        dist[target] = seen
    prefer = len(fabric.switches) * len(dests) <= PREFER_LIMIT
    real = dict(getattr(config, "real_macs", ()) or ())
    groups = getattr(config, "groups", None) or {}
    out: dict[str, tuple[FlowSpec, ...]] = {}
    for sw in fabric.switches:
        base = config.desired.get(sw.name, ())
        if sw.name in dead:
            out[sw.name] = tuple(base)
            continue
        pipe = Pipeline(base, groups.get(sw.name, ())) if prefer else None
        in_port = min(fabric.ports(sw.name)) if fabric.ports(sw.name) else 1
        routes = host_routes(ctx, sw) if fabric.hosts_on(sw.name) else []
        for rank, (target, bits, length, host) in enumerate(dests):
            if target == sw.name:
                continue
            d = dist[target].get(sw.name)
            if d is None:
                continue  # unreachable: dropped by the table miss
            cands = [p for p, nb in adj[sw.name] if dist[target].get(nb) == d - 1]
            if not cands:
                continue
            port = None
            if pipe is not None:
                res = pipe.process(Frame(in_port=in_port, eth_src=0x020000000000, eth_dst=plan.host_mac[host]))
                outs = [p for p, _ in res.outputs] + list(res.to_ingress)  # the probe's own port is a route too
                if len(outs) == 1 and outs[0] in cands:
                    port = outs[0]
            if port is None:
                port = cands[rank % len(cands)]
            routes.append(Route(bits, length, port, RuleClass.ROUTE))
        rflows = route_flows(ctx, routes, compact=True)
        if getattr(getattr(config, "compiled", None), "cos", None) is not None:
            # classes of service: INGRESS (kept) tags every frame, so deliveries pop the tag as compiled
            from hpcfabric.rules.cos import pop_before_hosts

            rflows = pop_before_hosts(list(rflows), set(fabric.host_ports(sw.name)), {})
        if real:  # host_mac = rewrite: deliveries set the host's real MAC back
            hosts = {h.port: h.name for h in fabric.hosts_on(sw.name)}
            fixed = []
            for f in rflows:
                acts = []
                for a in f.actions:
                    if isinstance(a, Output) and a.port in hosts:
                        acts.append(SetField("eth_dst", real[hosts[a.port]]))
                    acts.append(a)
                fixed.append(FlowSpec(f.table, f.priority, f.match, tuple(acts), f.cookie, f.goto, f.write_metadata))
            rflows = fixed
        # INGRESS and ROUTE's table-miss entry stay; the CoS untagged delivery twins are rebuilt with the routes
        keep = [f for f in base if f.table == TABLE_INGRESS
                or (f.table == TABLE_ROUTE and f.rule_class == RuleClass.INFRA and f.match.vlan_vid is None)]
        out[sw.name] = sort_flows(keep + rflows)
    return out


def failover_groups(config: Any) -> dict[str, tuple[Any, ...]]:
    """The fast-failover groups (:class:`~hpcfabric.rules.flows.GroupSpec`) per switch of a loaded config
    (computed at load time by :func:`hpcfabric.failover.groups.fast_failover_groups`; empty unless
    ``[failover] fast_failover = on``)."""
    return dict(getattr(config, "groups", None) or {})
