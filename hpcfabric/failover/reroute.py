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

from typing import Any, Iterable

import numpy as np

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


def hop_distances(names: list[str], adj: dict[str, list[tuple[int, str]]], dead: set[str],
                  chunk: int = 256) -> np.ndarray:
    """Hop counts between all switches of the surviving graph: ``d[t, s]`` from switch ``s`` to target ``t``
    (indices in ``names``), -1 where unreachable or ``t`` is dead. A breadth-first search from every
    target at once, level by level, vectorised over the targets (``chunk`` rows at a time)."""
    n = len(names)
    index = {name: i for i, name in enumerate(names)}
    cols: list[int] = []
    starts: list[int] = []
    has = []  # switches with at least one surviving neighbour (reduceat needs non-empty segments)
    for i, name in enumerate(names):
        nbs = [index[nb] for _, nb in adj[name] if nb not in dead]
        if nbs and name not in dead:
            has.append(i)
            starts.append(len(cols))
            cols.extend(nbs)
    col = np.array(cols, dtype=np.int64)
    start = np.array(starts, dtype=np.int64)
    live = np.array(has, dtype=np.int64)
    dist = np.full((n, n), -1, dtype=np.int32)
    for lo in range(0, n, chunk):
        rows = np.arange(lo, min(n, lo + chunk))
        alive = np.array([names[t] not in dead for t in rows])
        frontier = np.zeros((len(rows), n), dtype=bool)
        frontier[np.flatnonzero(alive), rows[alive]] = True
        seen = frontier.copy()
        block = dist[lo:lo + len(rows)]
        block[frontier] = 0
        level = 0
        while frontier.any() and len(col):
            level += 1
            reach = np.zeros_like(frontier)
            reach[:, live] = np.logical_or.reduceat(frontier[:, col], start, axis=1)
            reach &= ~seen
            block[reach] = level
            seen |= reach
            frontier = reach
    return dist


def next_hops(to_dests: np.ndarray, me: int, neighbours: list[int], ranks: np.ndarray) -> np.ndarray:
    """Per destination row of ``to_dests`` (hops from every switch to it), the index into ``neighbours``
    of switch ``me``'s next hop: among the neighbours one hop closer, number ``rank % count``; -1 where
    ``me`` is the destination, cannot reach it, or has no neighbour closer."""
    d = to_dests[:, me]
    if not neighbours:
        return np.full(len(d), -1, dtype=np.int64)
    closer = (to_dests[:, neighbours] == (d - 1)[:, None]) & (d >= 1)[:, None]
    count = closer.sum(axis=1)
    k = ranks % np.maximum(count, 1)
    pick = np.argmax(np.cumsum(closer, axis=1) == (k + 1)[:, None], axis=1)
    return np.where(count > 0, pick, -1)


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
    names = [sw.name for sw in fabric.switches]
    index = {n: i for i, n in enumerate(names)}
    dist = hop_distances(names, adj, dead)  # dist[target, switch]: hops, -1 unreachable
    targets = np.array([index[d[0]] for d in dests], dtype=np.int64)
    ranks = np.arange(len(dests), dtype=np.int64)
    to_dests = dist[targets]  # dests x switches
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
        ports = np.array([p for p, _ in adj[sw.name]], dtype=np.int64)
        picked = next_hops(to_dests, index[sw.name], [index[nb] for _, nb in adj[sw.name]], ranks)
        for rank in np.flatnonzero(picked >= 0).tolist():
            target, bits, length, host = dests[rank]
            port = int(ports[picked[rank]])
            if pipe is not None:  # keep the compiled next hop when it is one of the shortest
                row = to_dests[rank]
                d = int(row[index[sw.name]])
                res = pipe.process(Frame(in_port=in_port, eth_src=0x020000000000, eth_dst=plan.host_mac[host]))
                outs = [p for p, _ in res.outputs] + list(res.to_ingress)  # the probe's own port is a route too
                if len(outs) == 1 and any(p == outs[0] and row[index[nb]] == d - 1 for p, nb in adj[sw.name]):
                    port = outs[0]
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
