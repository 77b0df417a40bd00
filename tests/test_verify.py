"""All-pairs verifier: shipped fabrics in every mode, cross-check against the
scalar pipeline, and broken fabrics the verifier must catch.

Hops are *switches traversed*, the source's and the destination's switch
included (two hosts on one switch: 1). Minimal routing then gives at most:
Dragonfly 4 (local, global, local links: l-g-l = 4 switches), a
k-dimensional Flattened Butterfly k+1 (one link per dimension), a 3-level
fat-tree 5 (edge-agg-core-agg-edge). ``max_hops - 1`` is the number of
switch-to-switch links crossed.
"""

from __future__ import annotations

import dataclasses
import json
import random
from functools import lru_cache
from pathlib import Path

import networkx as nx
import pytest

from hpcfabric.rules.addressing import MODES, plan_addresses
from hpcfabric.rules.compiler import compile_fabric
from hpcfabric.rules.port_state import port_state_flow
from hpcfabric.rules.flows import (
    ETH_TYPE_LLDP,
    MAC_EXACT,
    OFPP_CONTROLLER,
    OFPP_IN_PORT,
    TABLE_PORT_STATE,
    TABLE_ROUTE,
    FlowSpec,
    Match,
    Output,
    SetField,
)
from hpcfabric.verify.reference.pipeline import Frame, Pipeline, PipelineError
from hpcfabric.topology.loader import load_topology
from hpcfabric.verify.oracle.allpairs import probe_addresses, verify, walk_pair
from pair_outcomes import pair_outcomes
from hpcfabric.verify.engine import Engine as _Engine

TOPOLOGIES = Path(__file__).resolve().parent.parent / "topologies"
#: the paper's large builds are verified by the benches (bench/verify_table3.py, bench/compile_scale.py)
SHIPPED = sorted(p.name for p in TOPOLOGIES.glob("*.yaml") if not any(k in p.name for k in ("table3", "300k")))


@lru_cache(maxsize=None)
def fabric(name: str):
    return load_topology(TOPOLOGIES / name)


@lru_cache(maxsize=None)
def compiled(name: str, mode: str):
    """Untagged minimal tables (cos=False): these tests check the engines on plain entries (mutations
    include source-dependent rules, which the fast engine does not combine with PCP rewrites); the
    tagged default tables are covered by test_cdg, test_proof and test_deadlock_config."""
    f = fabric(name)
    return compile_fabric(f, plan_addresses(f, mode), cos=False)


def expected_max_hops(f) -> int:
    if f.kind == "dragonfly":
        return 4 if f.params["a"] > 1 else 2
    if f.kind == "flattened_butterfly":
        return len(f.params["dims"]) + 1
    if f.kind == "fat_tree":
        return 5
    if f.kind == "folded_clos":  # up to the top stage and down again
        return 2 * (f.params["stages"] - 1) + 1
    return {"explicit-ring4": 3}[f.name]


def with_flows(comp, switch: str, flows) -> object:
    """A copy of ``comp`` with the flows of ``switch`` replaced."""
    st = dataclasses.replace(comp.tables[switch], flows=tuple(flows))
    return dataclasses.replace(comp, tables={**comp.tables, switch: st})


def route_entry(comp, switch: str, group: int) -> FlowSpec:
    match = comp.plan.layout.match({"group": group})
    (entry,) = [f for f in comp.flows(switch) if f.table == TABLE_ROUTE and f.match.eth_dst == match]
    return entry


def host_entry(comp, host: str) -> FlowSpec:
    """The entry that delivers to ``host`` on its switch (compaction may have widened it)."""
    h = comp.fabric.host(host)
    port = max(comp.fabric.ports(h.switch))  # a fabric port (or another host's port)
    frame = Frame(in_port=port, eth_src=0x020000000000, eth_dst=comp.plan.host_mac[host])
    res = Pipeline(comp.flows(h.switch)).process(frame)
    assert res.ports == (h.port,)
    return res.hits[-1]


def swap(flows, old: FlowSpec, new: FlowSpec | None):
    out = [new if f is old else f for f in flows]
    return [f for f in out if f is not None]


# ---------------------------------------------------------------------------
# healthy fabrics


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_fabric_delivers_all_pairs(name, mode):
    f = fabric(name)
    if mode == "flat" and len(f.hosts) > 2000:
        pytest.skip("flat tables of more than 2000 hosts")
    r = verify(compiled(name, mode))
    h = len(f.hosts)
    assert r.pairs == h * (h - 1)
    assert (r.delivered, r.misdelivered, r.dropped, r.loops, r.punted, r.floods) == (r.pairs, 0, 0, 0, 0, 0)
    assert r.failures == ()
    assert r.invalid_probes > 0 and r.invalid_probe_failures == 0
    assert r.overlaps == 0
    assert r.max_hops == expected_max_hops(f)
    assert sum(r.hop_histogram.values()) == r.pairs
    assert r.hop_histogram.get(1, 0) == sum(len(f.hosts_on(s.name)) * (len(f.hosts_on(s.name)) - 1) for s in f.switches)
    assert r.ok and r.engine == "vectorised"
    assert "all" in r.coverage and str(r.pairs) in r.coverage
    json.dumps(r.as_dict())


def test_probe_addresses_are_unowned_and_cover_fields():
    comp = compiled("dragonfly-a4-p2-h2.yaml", "compact")
    probes = probe_addresses(comp.plan)
    owned = set(comp.plan.host_mac.values())
    assert probes and all(mac not in owned for mac, _ in probes)
    text = " ".join(why for _, why in probes)
    assert "group=" in text and "above" in text and "multicast" in text
    r = verify(comp)
    assert r.invalid_probes == len(probes) * len(comp.fabric.access_switches)


@pytest.mark.parametrize(
    "name,modes",
    [
        ("dragonfly-a2-p1-h1.yaml", MODES),
        ("explicit-ring4.yaml", MODES),
        ("fat-tree-k4.yaml", MODES),
        ("fb-2d-3x3.yaml", MODES),
        ("dragonfly-a4-p2-h2.yaml", ("per-group", "compact")),
    ],
)
def test_fast_engine_matches_scalar_pipeline_per_pair(name, modes):
    for mode in modes:
        comp = compiled(name, mode)
        fast = pair_outcomes(comp)
        ref = pair_outcomes(comp, engine="scalar")
        assert fast == ref, mode
        h = len(comp.fabric.hosts)
        assert len(ref) == h * (h - 1)


def test_sampled_run_says_so():
    comp = compiled("fb-3d-4x4x4.yaml", "compact")
    r = verify(comp, sample=10, seed=3)
    assert r.pairs == 256 * 10 - 10
    assert r.delivered == r.pairs
    assert "10 random destinations" in r.coverage and "seed 3" in r.coverage
    assert verify(comp, sample=10, seed=3).hop_histogram == r.hop_histogram


def test_scalar_engine_agrees_with_fast_on_report():
    comp = compiled("fat-tree-k4.yaml", "compact")
    a, b = verify(comp), verify(comp, engine="scalar")
    assert b.engine == "scalar"
    for k in ("pairs", "delivered", "max_hops", "hop_histogram", "invalid_probes", "invalid_probe_failures"):
        assert getattr(a, k) == getattr(b, k), k


# ---------------------------------------------------------------------------
# conditional routing (metadata, PORT_STATE and ALTERNATIVE tables)


def paused(comp, switch: str, port: int):
    old, new = port_state_flow(port, paused=False), port_state_flow(port, paused=True)
    assert old in comp.flows(switch)
    return with_flows(comp, switch, [new if f == old else f for f in comp.flows(switch)])


@pytest.mark.parametrize(
    "name,mode",
    [
        ("dragonfly-a2-p1-h1.yaml", "per-group"),
        ("dragonfly-a4-p2-h2.yaml", "compact"),
        ("fb-2d-3x3.yaml", "compact"),
    ],
)
def test_conditional_routing_with_each_port_of_a_switch_paused(name, mode):
    f = fabric(name)
    comp = compile_fabric(f, plan_addresses(f, mode), routing="conditional", cos=False)  # one row per switch untagged
    base = verify(comp)
    assert base.ok and base.max_hops == expected_max_hops(f)
    # one row per switch: per-host-port ALTERNATIVE entries are unreachable from fabric ports; the only
    # fabric in_port matches are the h = 1 Dragonfly's bounce entries (one more row per such port)
    bounce = sum(1 for s in f.switches for fl in comp.flows(s.name)
                 if fl.table == TABLE_PORT_STATE and fl.match.in_port is not None)
    assert bounce == (len(f.switches) if name.startswith("dragonfly-a2-p1-h1") else 0)
    assert len(_Engine(comp).rows) == len(f.switches) + bounce
    assert pair_outcomes(comp) == pair_outcomes(comp, engine="scalar")
    sw = f.switches[0].name
    changed = 0
    for port in f.fabric_ports(sw):
        broken = paused(comp, sw, port)
        r = verify(broken)
        assert r.ok, (port, r.failures[:2])
        # a Valiant detour adds one switch; the h = 1 Dragonfly's neighbour detour (l-g-l-g-l) two
        assert r.max_hops <= expected_max_hops(f) + (2 if name.startswith("dragonfly-a2-p1-h1") else 1)
        changed += r.hop_histogram != base.hop_histogram
        assert pair_outcomes(broken) == pair_outcomes(broken, engine="scalar"), port
    assert changed


# ---------------------------------------------------------------------------
# broken fabrics the verifier must catch


def test_missing_route_entry_drops_exactly_the_pairs_through_it():
    comp = compiled("dragonfly-a4-p2-h2.yaml", "per-group")
    f = comp.fabric
    sw = "g0s0"
    broken = with_flows(comp, sw, swap(comp.flows(sw), route_entry(comp, sw, 1), None))
    expected = set()
    for s in f.hosts:
        for d in f.hosts:
            if s is d or f.switch(d.switch).group != 1:
                continue
            w = walk_pair(comp, s.name, comp.plan.host_mac[d.name])
            if sw in w.path:
                expected.add((s.name, d.name))
    assert expected
    r = verify(broken)
    assert r.dropped == len(expected) and r.delivered == r.pairs - len(expected)
    assert r.loops == r.misdelivered == 0 and not r.ok
    outcomes = pair_outcomes(broken)
    assert {p for p, o in outcomes.items() if o[0] == "dropped"} == expected
    assert r.failures
    for fail in r.failures:
        assert fail["kind"] == "dropped"
        assert (fail["src"], fail["dst"]) in expected
        assert fail["path"][-1] == sw and "table-miss entry of table 1" in fail["reason"]
        assert "note" not in fail


def _local_hop_to(comp, a: str):
    """(remote group g, local neighbour b, b's port back to a): a reaches g through b."""
    f = comp.fabric
    for g in range(1, f.params["g"]):
        peer = f.peer(a, route_entry(comp, a, g).actions[0].port)
        if f.switch(peer.node).group == 0:
            return g, peer.node, peer.port
    raise AssertionError("no remote group reached through a local link")


def test_wrong_port_back_to_the_sender_is_a_drop_not_a_loop():
    """b sends group-g frames back over the link a used to reach it: a switch never outputs to the
    ingress port by number, so frames from a die at b (and frames a bounces back die at a)."""
    comp = compiled("dragonfly-a4-p2-h2.yaml", "per-group")
    a = "g0s0"
    g, b, back = _local_hop_to(comp, a)
    old = route_entry(comp, b, g)
    broken = with_flows(comp, b, swap(comp.flows(b), old, dataclasses.replace(old, actions=(Output(back),))))
    r = verify(broken)
    assert r.ingress_exact and r.dropped > 0 and r.loops == 0 and not r.ok
    for fail in r.failures:
        assert fail["kind"] == "dropped" and "ingress port" in fail["reason"], fail
        assert fail["path"][-1] in (a, b)
    assert pair_outcomes(broken) == pair_outcomes(broken, engine="scalar")
    assert verify(broken, engine="scalar").dropped == r.dropped


def test_wrong_ports_creating_a_three_switch_loop():
    comp = compiled("dragonfly-a4-p2-h2.yaml", "per-group")
    f = comp.fabric
    a = "g0s0"
    g, b, _ = _local_hop_to(comp, a)
    c = next(s.name for s in f.switches if s.group == 0 and s.name not in (a, b))
    to = {(x, y): p for x in (a, b, c) for p, peer in f.ports(x).items() if not peer.is_host and (y := peer.node)}
    broken = comp
    for sw, nxt in ((b, c), (c, a)):  # a -> b -> c -> a
        old = route_entry(broken, sw, g)
        broken = with_flows(broken, sw, swap(broken.flows(sw), old, dataclasses.replace(old, actions=(Output(to[(sw, nxt)]),))))
    r = verify(broken)
    assert r.loops > 0 and not r.ok
    loops = [x for x in r.failures if x["kind"] == "loop"]
    assert loops
    for fail in loops:
        assert fail["hops"] is None and "loop" in fail["reason"]
        assert {a, b, c} <= set(fail["path"])
        assert f.switch(f.host(fail["dst"]).switch).group == g
    assert pair_outcomes(broken) == pair_outcomes(broken, engine="scalar")


def test_rule_delivering_to_the_wrong_host():
    comp = compiled("dragonfly-a4-p2-h2.yaml", "compact")
    f = comp.fabric
    h0, h1 = f.hosts_on("g2s1")
    old = host_entry(comp, h0.name)
    broken = with_flows(comp, "g2s1", swap(comp.flows("g2s1"), old, dataclasses.replace(old, actions=(Output(h1.port),))))
    r = verify(broken)
    assert r.misdelivered == len(f.hosts) - 1  # every source's frames for h0 reach h1
    assert r.delivered == r.pairs - r.misdelivered and not r.ok
    for fail in r.failures:
        assert fail["kind"] == "misdelivered" and fail["dst"] == h0.name and fail["reached"] == h1.name


def test_flood_punt_and_dead_port():
    comp = compiled("fb-2d-3x3.yaml", "per-group")
    f = comp.fabric
    (h0, h1), (h2, h3) = f.hosts_on("s0_0"), f.hosts_on("s1_0")
    flows = comp.flows("s0_0")
    e0, e1 = host_entry(comp, h0.name), host_entry(comp, h1.name)
    flows = swap(flows, e0, dataclasses.replace(e0, actions=(Output(h0.port), Output(h1.port))))
    flows = swap(flows, e1, dataclasses.replace(e1, actions=(Output(OFPP_CONTROLLER),)))
    broken = with_flows(comp, "s0_0", flows)
    e2 = host_entry(comp, h2.name)
    broken = with_flows(broken, "s1_0", swap(comp.flows("s1_0"), e2, dataclasses.replace(e2, actions=(Output(99),))))
    r = verify(broken)
    n = len(f.hosts) - 1
    assert (r.floods, r.punted, r.dropped) == (n, n, n)
    assert r.delivered == r.pairs - 3 * n
    assert pair_outcomes(broken) == pair_outcomes(broken, engine="scalar")


def test_invalid_probe_delivered_is_a_failure():
    comp = compiled("dragonfly-a4-p2-h2.yaml", "compact")
    layout = comp.plan.layout
    assert layout.used_bits < 46
    (bad_mac, _why) = next((m, w) for m, w in probe_addresses(comp.plan) if "above" in w)
    broken = comp
    for sw in comp.fabric.switches:
        leak = FlowSpec(TABLE_ROUTE, 3000, Match(eth_dst=(bad_mac, MAC_EXACT)), (Output(1),))
        broken = with_flows(broken, sw.name, comp.flows(sw.name) + (leak,))
    r = verify(broken)
    assert r.delivered == r.pairs
    assert r.invalid_probe_failures == len(comp.fabric.access_switches) and not r.ok
    assert all(x.get("probe") and x["dst"] is None for x in r.failures)


def test_equal_priority_overlap_is_reported():
    comp = compiled("dragonfly-a2-p1-h1.yaml", "per-group")
    sw = comp.fabric.switches[0].name
    e = route_entry(comp, sw, 1)
    twin = dataclasses.replace(e, actions=(Output(1),))
    r = verify(with_flows(comp, sw, comp.flows(sw) + (twin,)))
    assert r.overlaps == 1 and not r.ok
    assert r.delivered == r.pairs, "the first entry still wins, as in the scalar pipeline"
    assert sw in r.overlap_examples[0]


def test_frame_rewrites_fall_back_to_the_scalar_walk():
    comp = compiled("dragonfly-a2-p1-h1.yaml", "compact")
    broken = comp
    for h in comp.fabric.hosts:
        e = host_entry(broken, h.name)
        new = dataclasses.replace(e, actions=(SetField("eth_src", 0x02AAAAAAAAAA),) + e.actions)
        broken = with_flows(broken, h.switch, swap(broken.flows(h.switch), e, new))
    r = verify(broken)
    assert r.engine.startswith("scalar (fallback") and r.ok
    with pytest.raises(PipelineError, match="cannot model"):
        verify(broken, engine="fast")


def test_backward_goto_is_rejected():
    comp = compiled("dragonfly-a2-p1-h1.yaml", "compact")
    sw = comp.fabric.switches[0].name
    bad = FlowSpec(TABLE_ROUTE, 5, Match(eth_type=0x0800, in_port=9), (), goto=0)
    with pytest.raises(PipelineError, match="later table"):
        verify(with_flows(comp, sw, comp.flows(sw) + (bad,)))


# ---------------------------------------------------------------------------
# randomised cross-check: mutated tables, fast engine == scalar pipeline


def _random_prefix(rng: random.Random, macs: list[int]) -> tuple[int, int]:
    length = rng.choice([0, 8, 24, 40, 42, 44, 46, 47, 48])
    mask = MAC_EXACT ^ ((1 << (48 - length)) - 1)
    return rng.choice(macs) & mask, mask


def mutate(comp, rng: random.Random):
    f = comp.fabric
    macs = list(comp.plan.host_mac.values())
    tables = dict(comp.tables)
    for name, st in comp.tables.items():
        flows = list(st.flows)
        real = list(f.ports(name))
        ports = real + [max(real) + 1, OFPP_IN_PORT, OFPP_CONTROLLER]

        def out() -> tuple:
            return () if rng.random() < 0.1 else (Output(rng.choice(ports)),)

        for _ in range(rng.randint(0, 3)):
            op = rng.choice(
                ["delete", "reroute", "flood", "prefix", "in_port", "src", "meta", "tie", "table0", "noise", "late"]
            )
            routes = [i for i, x in enumerate(flows) if x.table == TABLE_ROUTE and x.actions]
            if op == "delete" and routes:
                del flows[rng.choice(routes)]
            elif op == "reroute" and routes:
                i = rng.choice(routes)
                flows[i] = dataclasses.replace(flows[i], actions=out())
            elif op == "flood" and routes:
                i = rng.choice(routes)
                flows[i] = dataclasses.replace(flows[i], actions=flows[i].actions + (Output(rng.choice(ports)),))
            elif op == "prefix":
                flows.append(FlowSpec(1, rng.randint(1000, 1050), Match(eth_dst=_random_prefix(rng, macs)), out()))
            elif op == "in_port":
                m = Match(in_port=rng.choice(real), eth_dst=_random_prefix(rng, macs) if rng.random() < 0.5 else None)
                flows.append(FlowSpec(1, rng.randint(400, 1100), m, out()))
            elif op == "src":
                m = Match(in_port=rng.choice([None] + real), eth_src=_random_prefix(rng, macs))
                flows.append(FlowSpec(1, rng.randint(900, 1100), m, out()))
            elif op == "meta":
                v = rng.randrange(4)
                flows.append(
                    FlowSpec(1, rng.randint(1000, 1060), Match(eth_dst=_random_prefix(rng, macs)), out(),
                             goto=rng.choice([2, 3]), write_metadata=(v << 4 | 1, 0x31))
                )
                for t in (2, 3):
                    for _ in range(rng.randint(0, 3)):
                        mm = (rng.randrange(4) << 4 | 1, rng.choice([0x31, 0x30, 0x1]))
                        mm = (mm[0] & mm[1], mm[1])
                        dst = _random_prefix(rng, macs) if rng.random() < 0.5 else None
                        goto = 3 if t == 2 and rng.random() < 0.3 else None
                        flows.append(FlowSpec(t, rng.randint(1, 9), Match(metadata=mm, eth_dst=dst), out(), goto=goto,
                                              write_metadata=(0x10, 0x30) if goto else None))
            elif op == "tie" and routes:
                i = rng.choice(routes)
                flows.insert(rng.choice([i, i + 1]), dataclasses.replace(flows[i], actions=out()))
            elif op == "table0":
                flows.append(FlowSpec(0, rng.randint(1, 100), Match(eth_dst=_random_prefix(rng, macs)), out(),
                                      goto=rng.choice([None, 1])))
            elif op == "late":  # per-port entries in later tables, reached only via some gotos
                m = Match(in_port=rng.choice(real), metadata=(0x11, 0x31) if rng.random() < 0.5 else None)
                flows.append(FlowSpec(rng.choice([2, 3]), rng.randint(1, 9), m, out()))
            elif op == "noise":
                m = rng.choice([Match(vlan_pcp=0), Match(eth_type=ETH_TYPE_LLDP, in_port=rng.choice(real))])
                flows.append(FlowSpec(rng.choice([0, 1]), 5000, m, (Output(rng.choice(ports)),)))
        tables[name] = dataclasses.replace(st, flows=tuple(sorted(flows, key=lambda x: x.table)))
    return dataclasses.replace(comp, tables=tables)


@pytest.mark.parametrize(
    "name,mode,seeds",
    [
        ("dragonfly-a2-p1-h1.yaml", "compact", 25),
        ("dragonfly-a2-p1-h1.yaml", "per-group", 25),
        ("explicit-ring4.yaml", "per-group", 25),
        ("fat-tree-k4.yaml", "compact", 12),
        ("fb-2d-3x3.yaml", "compact", 12),
    ],
)
def test_mutated_tables_fast_equals_scalar(name, mode, seeds):
    comp = compiled(name, mode)
    keys = ("pairs", "delivered", "misdelivered", "dropped", "loops", "punted", "floods", "hop_histogram",
            "invalid_probes", "invalid_probe_failures", "overlaps")
    seen = set()
    for seed in range(seeds):
        broken = mutate(comp, random.Random(seed))
        fast = pair_outcomes(broken)
        ref = pair_outcomes(broken, engine="scalar")
        assert fast == ref, f"seed {seed}"
        seen.update(kind for kind, _, _ in ref.values())
        a, b = verify(broken), verify(broken, engine="scalar")
        assert {k: getattr(a, k) for k in keys} == {k: getattr(b, k) for k in keys}, f"seed {seed}"
        assert all("note" not in x for x in a.failures), a.failures
    assert {"delivered", "dropped"} <= seen


@pytest.mark.parametrize(
    "name,mode",
    [
        ("dragonfly-a4-p2-h2.yaml", "compact"),
        ("dragonfly-a4-p2-h2.yaml", "per-switch"),
        ("fb-3d-4x4x4.yaml", "compact"),
        ("fat-tree-k4.yaml", "compact"),
        ("fat-tree-k4.yaml", "per-group"),
    ],
)
def test_hops_are_switches_on_a_minimal_path(name, mode):
    """hops == shortest switch path + 1 (switches, not links) on FB and fat-tree.

    Dragonfly minimal routing is local-global-local: never shorter than the
    graph's shortest path, at most 4 switches, but it may skip a 3-switch
    path that crosses two global links (e.g. g0s1-g2s1-g1s1 in a4-p2-h2).
    """
    comp = compiled(name, mode)
    f = comp.fabric
    dist = dict(nx.all_pairs_shortest_path_length(f.switch_graph))
    for (s, d), (kind, host, hops) in pair_outcomes(comp).items():
        assert kind == "delivered" and host == d
        shortest = dist[f.host(s).switch][f.host(d).switch] + 1
        if f.kind == "dragonfly":
            assert shortest <= hops <= 4
        else:
            assert hops == shortest, (s, d)
