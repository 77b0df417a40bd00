"""Fast-failover groups (:mod:`hpcfabric.failover.groups`), proved with the fake pipeline.

* the reference pipeline executes groups (first live bucket, no live bucket drops, never back out of the
  ingress port) and loses outputs to down ports;
* on every shipped small fabric, with the groups installed and any single fabric link down (before any
  recomputation): nothing loops, floods, punts or is misdelivered, invalid probes are still dropped, and
  exactly the pairs whose path used an *unprotected* end of the failed link are dropped -- none at all on
  the Flattened Butterflies and the paper's Dragonfly, whose every fabric port is protected;
* the vectorised verifier (groups resolved per down set) agrees with the scalar pipeline executing the
  groups itself, pair by pair;
* conditional routing: unpaused PORT_STATE entries go through the group, PAUSE flips still work.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from hpcfabric.rules.addressing import plan_addresses
from hpcfabric.rules.compiler import compile_fabric
from hpcfabric.rules.port_state import port_state_flow
from hpcfabric.errors import CompileError
from hpcfabric.failover.groups import fast_failover_groups, group_id, link_ends
from hpcfabric.verify.reference.pipeline import resolve_groups
from hpcfabric.rules.flows import TABLE_PORT_STATE, Bucket, FlowSpec, Group, GroupSpec, Match, Output
from hpcfabric.verify.reference.pipeline import Frame, Pipeline, PipelineError
from hpcfabric.topology.loader import load_topology
from hpcfabric.verify.oracle.allpairs import verify, walk_pair

ROOT = Path(__file__).resolve().parent.parent

#: (topology, routing, links checked: every n-th)
FABRICS = [
    ("fat-tree-k4", "minimal", 1),
    ("fb-2d-3x3", "conditional", 1),
    ("fb-2d-4x4", "conditional", 1),
    ("dragonfly-a4-p2-h2", "conditional", 1),
    ("fb-2d-3x3", "conditional+cos", 1),  # VLAN PCP classes (hop/2): tags pushed, stepped, popped
    ("dragonfly-a4-p2-h2", "conditional+cos", 2),  # top/3
    ("clos-4stage-small", "minimal", 5),
    ("explicit-ring4", "minimal", 1),
]
_CACHE: dict = {}


def build(name: str, routing: str):
    key = (name, routing)
    if key not in _CACHE:
        fab = load_topology(ROOT / "topologies" / f"{name}.yaml")
        plan = plan_addresses(fab, (fab.params.get("addressing") or {}).get("mode") or "compact")
        policy, _, cos = routing.partition("+")
        comp = compile_fabric(fab, plan, routing=policy, cos=bool(cos))
        ff = fast_failover_groups(comp)
        grouped = replace(comp, tables={k: replace(v, flows=ff.flows[k]) for k, v in comp.tables.items()})
        _CACHE[key] = (comp, ff, grouped)
    return _CACHE[key]


# -- the reference pipeline ------------------------------------------------------------------------


def _pipe(down=()):
    flows = [FlowSpec(0, 10, Match(eth_dst=(0x1, 0xFFFFFFFFFFFF)), (Group(group_id(2)),)),
             FlowSpec(0, 10, Match(eth_dst=(0x2, 0xFFFFFFFFFFFF)), (Output(2),))]
    g = GroupSpec(group_id(2), (Bucket(2, (Output(2),)), Bucket(3, (Output(3),)), Bucket(4, (Output(4),))))
    return Pipeline(flows, [g], down)


def test_pipeline_group_takes_first_live_bucket():
    assert _pipe().process(Frame(1, 9, 0x1)).ports == (2,)
    assert _pipe({2}).process(Frame(1, 9, 0x1)).ports == (3,)
    assert _pipe({2, 3}).process(Frame(1, 9, 0x1)).ports == (4,)
    assert _pipe({2, 3, 4}).process(Frame(1, 9, 0x1)).dropped
    # a bucket leading back out of the ingress port is dropped (OpenFlow needs OFPP_IN_PORT for that)
    assert _pipe({2}).process(Frame(3, 9, 0x1)).dropped
    # a plain output to a down port is lost
    assert _pipe({2}).process(Frame(1, 9, 0x2)).dropped and _pipe().process(Frame(1, 9, 0x2)).ports == (2,)


def test_pipeline_rejects_unknown_group():
    with pytest.raises(PipelineError):
        Pipeline([FlowSpec(0, 1, Match(), (Group(group_id(7)),))]).process(Frame(1, 1, 1))


def test_resolve_groups_matches_the_pipeline():
    flows, g = _pipe().flows, list(_pipe().groups.values())
    for down in [(), (2,), (2, 3), (2, 3, 4)]:
        plain = Pipeline(resolve_groups(flows, g, down))
        for dst in (0x1, 0x2):
            assert plain.process(Frame(1, 9, dst)).ports == Pipeline(flows, g, down).process(Frame(1, 9, dst)).ports


# -- which ports are protected -----------------------------------------------------------------------


def test_protected_ports_per_fabric():
    comp, ff, _ = build("fb-2d-4x4", "conditional")
    assert ff.stats()["unprotected_ports"] == 0 and ff.stats()["groups"] == 96
    for sw in comp.fabric.switches:  # FB: the detour stays in the port's dimension
        fp = comp.fabric.fabric_ports(sw.name)
        for g in ff.groups[sw.name]:
            primary, *alts = [b.watch_port for b in g.buckets]
            assert g.group_id == group_id(primary) and alts
            assert all(fp[a].kind == fp[primary].kind for a in alts)
    comp, ff, _ = build("dragonfly-a4-p2-h2", "conditional")
    assert ff.stats() == {"groups": 180, "switches_with_groups": 36, "protected_ports": 180, "unprotected_ports": 0}
    comp, ff, _ = build("fat-tree-k4", "minimal")
    for sw in comp.fabric.switches:  # up-down: uplinks protected (by another uplink), downlinks are not
        fp = comp.fabric.fabric_ports(sw.name)
        ups = {p for p, peer in fp.items() if _level(comp.fabric.switch(peer.node).role) > _level(sw.role)}
        assert set(ff.protected[sw.name]) == ups, sw.name
        for g in ff.groups[sw.name]:
            assert {b.watch_port for b in g.buckets} <= ups
    # a Dragonfly with one local and one global port per switch has no detour at all
    fab = load_topology(ROOT / "topologies" / "dragonfly-a2-p1-h1.yaml")
    comp = compile_fabric(fab, plan_addresses(fab, "compact"), routing="conditional")
    ff = fast_failover_groups(comp)
    assert ff.stats()["groups"] == 0 and ff.flows == {k: t.flows for k, t in comp.tables.items()}


def _level(role: str) -> int:
    return {"edge": 0, "aggregation": 1, "core": 2}[role]


def test_analysis_limit_is_a_clear_error():
    comp, _, _ = build("fb-2d-3x3", "conditional")
    with pytest.raises(CompileError, match="too large"):
        fast_failover_groups(comp, limit=10)


# -- any single link down, groups installed, no recomputation ----------------------------------------


def _intact_hops(comp, grouped, ff):
    """(src, dst) -> set of (switch, port) the frame leaves through with nothing down."""
    fabric, plan = comp.fabric, comp.plan
    pipes = {n: Pipeline(grouped.tables[n].flows, ff.groups[n]) for n in grouped.tables}
    out = {}
    for s in fabric.hosts:
        for d in fabric.hosts:
            if s is d:
                continue
            sw, frame, hops = s.switch, Frame(s.port, plan.host_mac[s.name], plan.host_mac[d.name]), set()
            for _ in range(len(fabric.switches) + 1):
                res = pipes[sw].process(frame)
                port, sent = res.outputs[0]
                peer = fabric.peer(sw, port)
                if peer.is_host:
                    break
                hops.add((sw, port))
                sw, frame = peer.node, replace(sent, in_port=peer.port, metadata=0)
            out[(s.name, d.name)] = hops
    return out


@pytest.mark.parametrize("name,routing,step", FABRICS, ids=[f"{f[0]}-{f[1]}" for f in FABRICS])
def test_single_link_down_with_groups(name, routing, step):
    comp, ff, grouped = build(name, routing)
    intact = verify(grouped, groups=ff.groups)
    assert intact.ok and intact.delivered == intact.pairs
    hops = _intact_hops(comp, grouped, ff)
    full = 0
    links = comp.fabric.links[::step]
    for link in links:
        ends = link_ends(link)
        unprotected = {(s, p) for s, p in ends if p not in ff.protected[s]}
        expected_drops = sum(1 for h in hops.values() if h & unprotected)
        r = verify(grouped, groups=ff.groups, down=ends)
        assert r.loops == r.floods == r.misdelivered == r.punted == r.tagged == 0, (link, r.failures[:3])
        assert r.invalid_probe_failures == 0, (link, r.failures[:3])
        assert r.dropped == expected_drops and r.delivered == r.pairs - expected_drops, (link, r.failures[:3])
        full += not unprotected
    if name in ("fb-2d-3x3", "fb-2d-4x4", "dragonfly-a4-p2-h2"):
        assert full == len(links)  # every single link failure is bridged by the groups
    elif name == "fat-tree-k4":
        assert full == 0  # every link carries traffic downwards, which has one path
    else:
        assert 0 < full < len(links)


@pytest.mark.parametrize("name,routing", [("fb-2d-3x3", "conditional"), ("dragonfly-a4-p2-h2", "conditional"),
                                          ("fat-tree-k4", "minimal")])
def test_vectorised_verifier_agrees_with_the_pipeline_executing_groups(name, routing):
    comp, ff, grouped = build(name, routing)
    fabric, plan = comp.fabric, comp.plan
    for link in fabric.links[:: max(1, len(fabric.links) // 6)]:
        ends = link_ends(link)
        pipes = {n: Pipeline(grouped.tables[n].flows, ff.groups[n], {p for s, p in ends if s == n})
                 for n in grouped.tables}
        delivered = sum(
            walk_pair(grouped, s.name, plan.host_mac[d.name], pipelines=pipes).host == d.name
            for s in fabric.hosts for d in fabric.hosts if s is not d
        )
        assert delivered == verify(grouped, groups=ff.groups, down=ends).delivered, link


@pytest.mark.parametrize("name", ["fb-2d-3x3", "dragonfly-a4-p2-h2"])
def test_classes_of_service_keep_every_detour(name):
    """With CoS the proof walks tagged frames (pushed at the host, stepped, popped before delivery: a frame
    reaching its host still tagged would fail it): the same ports are protected by the same buckets."""
    plain, ff_plain, _ = build(name, "conditional")
    tagged, ff_cos, _ = build(name, "conditional+cos")
    assert tagged.cos is not None and plain.cos is None
    assert ff_cos.stats() == ff_plain.stats() and ff_cos.stats()["unprotected_ports"] == 0
    assert ff_cos.groups == ff_plain.groups


def test_conditional_port_state_entries_use_the_group_and_still_flip():
    comp, ff, grouped = build("dragonfly-a4-p2-h2", "conditional")
    sw = comp.fabric.switches[0].name
    ps = [f for f in grouped.tables[sw].flows if f.table == TABLE_PORT_STATE and f.match.metadata is not None]
    assert ps and all(f == port_state_flow(f.match.metadata[0], False, group_id(f.match.metadata[0])) for f in ps)
    port = ps[0].match.metadata[0]
    r = verify(grouped, [(sw, port)], groups=ff.groups)
    assert r.paused == (f"{sw}:{port}",) and r.ok and r.delivered == r.pairs
    # paused and its link down at once: the ALTERNATIVE fallback goes through the group; nothing loops
    peer = comp.fabric.peer(sw, port)
    r = verify(grouped, [(sw, port)], groups=ff.groups, down={(sw, port), (peer.node, peer.port)})
    assert r.paused == (f"{sw}:{port}",)
    assert r.loops == r.floods == r.misdelivered == r.punted == 0, r.failures[:3]


def test_transform_is_pure_and_only_touches_protected_outputs():
    comp, ff, grouped = build("fat-tree-k4", "minimal")
    again = fast_failover_groups(comp)
    assert again.flows == ff.flows and again.groups == ff.groups
    for name, t in comp.tables.items():
        prot = set(ff.protected[name])
        for old, new in zip(t.flows, ff.flows[name]):
            assert old.key() == new.key()
            if old != new:
                assert [a.port for a in old.actions if isinstance(a, Output)] and all(
                    isinstance(a, Group) and a.group_id & 0xFFFF in prot for a in new.actions)
