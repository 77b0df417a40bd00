"""Multi-stage folded Clos: counts vs closed forms, wiring, up-down routing, compact lower bound."""

from __future__ import annotations

from collections import Counter
from math import ceil

import networkx as nx
import pytest

from hpcfabric.rules.addressing import plan_addresses
from hpcfabric.rules.compiler import compile_fabric
from hpcfabric.errors import TopologyError
from hpcfabric.rules.routing import ROUTERS, router_for
from hpcfabric.topology import fat_tree_fabric
from hpcfabric.rules.fabrics.updown import split_masks
from hpcfabric.rules.routing import FoldedClosRouter
from hpcfabric.topology.clos import folded_clos_fabric, folded_clos_shape
from hpcfabric.topology.loader import load_topology, parse_topology
from hpcfabric.verify.oracle.allpairs import verify, walk_pair

SMALL = "topologies/clos-4stage-small.yaml"


def check_structure(f) -> None:
    k, n = f.params["radix"], f.params["stages"]
    half = k // 2
    used = sum(f.radix(sw.name) for sw in f.switches)
    assert used == len(f.hosts) + 2 * len(f.links)
    assert nx.is_connected(f.switch_graph)
    for sw in f.switches:
        level = sw.coords[0]
        ports = f.ports(sw.name)
        assert max(ports) <= k
        if level < n:  # half down, half up, uplinks to the next level only
            assert sorted(ports) == list(range(1, k + 1)), sw.name
            for p, peer in ports.items():
                if peer.is_host:
                    assert level == 1 and p <= half
                    continue
                other = f.switch(peer.node).coords[0]
                assert other == (level + 1 if p > half else level - 1), (sw.name, p, peer)
        else:
            assert all(f.switch(peer.node).coords[0] == n - 1 for peer in ports.values())
    assert {sw.role for sw in f.switches if sw.coords[0] == 1} == {"edge"}
    assert {sw.role for sw in f.switches if sw.coords[0] == n} == {"core"}


@pytest.mark.parametrize(
    "k,n,pods",
    [(4, 3, None), (4, 3, 3), (6, 3, None), (4, 4, None), (6, 4, 8), (8, 4, 10), (4, 5, None), (8, 4, None)],
)
def test_counts_match_closed_forms(k, n, pods):
    f = folded_clos_fabric(k, n, pods=pods)
    half = k // 2
    P = pods or k * half ** (n - 3)
    edges = P * half
    assert len(f.hosts) == edges * half
    assert len(f.switches) == (n - 1) * edges + ceil(edges * half / k)
    assert len(f.links) == (n - 1) * edges * half
    shape = folded_clos_shape(k, n, pods=pods)
    assert (shape.switches, shape.hosts, shape.links) == (len(f.switches), len(f.hosts), len(f.links))
    check_structure(f)


def test_paper_300k_arithmetic():
    s = folded_clos_shape(72, 4, hosts=303_264)
    assert s.pods == 234 == 6.5 * 36
    assert s.per_level == (8424, 8424, 8424, 4212)
    assert s.switches == 29_484 == round(6.5 * (36 * 72 + 1296)) + 4212
    assert s.hosts == 303_264
    # 6 full stage-3 groups of 1,296 level-3 switches + a half group of 648
    assert s.per_level[2] == 6 * 1296 + 648
    assert folded_clos_shape(72, 3).hosts == 72**3 // 4  # Table I: P^3/4


def test_full_three_stage_is_the_fat_tree():
    for k in (4, 6, 8):
        clos, ft = folded_clos_fabric(k, 3), fat_tree_fabric(k)
        half = k // 2

        def norm(name: str) -> str:  # fat-tree core c{j}_{m} is our c{j*half+m}
            if name.startswith("c") and "_" in name:
                j, m = name[1:].split("_")
                return f"c{int(j) * half + int(m)}"
            return name

        ours = {(l.a, l.a_port, l.b, l.b_port) for l in clos.links}
        theirs = {(norm(l.a), l.a_port, norm(l.b), l.b_port) for l in ft.links}
        assert ours == theirs
        assert [h.name for h in clos.hosts] == [h.name for h in ft.hosts]


def test_partial_group_parallel_links_and_core_reach():
    # radix 8: stage-3 groups of 4 pods; 10 pods = 2 full groups + a half group of 2 pods,
    # like the paper's 6.5 groups: the half group's level-3 switches get 2 links per pod.
    f = folded_clos_fabric(8, 4, pods=10)
    half = 4
    l3 = [sw for sw in f.switches if sw.coords[0] == 3]
    last_prefix = max(sw.coords[1] for sw in l3)
    partial = [sw for sw in l3 if sw.coords[1] == last_prefix]
    assert len(partial) == 2 * half  # half of a full group's 16
    for sw in partial:
        pods = Counter(f.switch(peer.node).group for p, peer in f.ports(sw.name).items() if p <= half)
        assert len(pods) == 2 and set(pods.values()) == {2}
    # every core reaches every stage-3 group; every level-3 switch reaches every pod of its group
    groups = sorted({sw.coords[1] for sw in l3})
    for core in (sw for sw in f.switches if sw.coords[0] == 4):
        reached = {f.switch(peer.node).coords[1] for peer in f.ports(core.name).values()}
        assert reached == set(groups)
    router = router_for(f)
    assert isinstance(router, FoldedClosRouter)
    for sw in l3:
        below = {g for g in router.down[sw.name]}
        assert below == {s.group for s in f.switches if s.coords[0] == 2 and s.group >> 2 == sw.coords[1]}


def test_group_ids_are_block_aligned():
    f = folded_clos_fabric(8, 4, pods=10)
    w = f.params["group_bits"]
    assert w == 2
    pods = sorted({sw.group for sw in f.switches if sw.coords[0] == 1})
    assert pods == [b * 4 + q for b in range(3) for q in range(4 if b < 2 else 2)]


@pytest.mark.parametrize(
    "kwargs,field",
    [
        ({"radix": 5}, "radix"),
        ({"radix": 2}, "radix"),
        ({"radix": 4, "stages": 2}, "stages"),
        ({"radix": 4, "stages": 7}, "stages"),
        ({"radix": 72, "stages": 4, "hosts": 300_000}, "hosts"),
        ({"radix": 4, "stages": 3, "pods": 5}, "pods"),
        ({"radix": 4, "stages": 4, "pods": 5}, "pods"),  # last group too small to reach every core
        ({"radix": 4, "stages": 3, "pods": 2, "hosts": 8}, "hosts"),
        ({"radix": 4.0}, "radix"),
        ({"radix": 6, "stages": 5, "pods": 20}, "pods"),  # only stage-(n-1) groups may be partial
    ],
)
def test_bad_parameters(kwargs, field):
    with pytest.raises(TopologyError) as err:
        folded_clos_fabric(**kwargs)
    assert err.value.field == field


def test_hosts_error_suggests_whole_pods():
    with pytest.raises(TopologyError, match="use 299,376 or 300,672"):
        folded_clos_shape(72, 4, hosts=300_000)


def test_loader_kind_and_validation():
    f = load_topology(SMALL)
    assert (f.kind, len(f.switches), len(f.hosts)) == ("folded_clos", 84, 72)
    assert f.params["addressing"] == {"mode": "compact"}
    f = parse_topology("kind: folded_clos\nradix: 4\nstages: 4\n", "x.yaml")
    assert len(f.switches) == 56
    for text, field in [
        ("kind: folded_clos\nradix: '4'\n", "radix"),
        ("kind: folded_clos\nradix: 4\nk: 4\n", "k"),
        ("kind: folded_clos\nstages: 4\n", "radix"),
        ("kind: folded_clos\nradix: 5\n", "radix"),
        ("kind: folded_clos\nradix: 200\nstages: 4\n", None),  # size guard
    ]:
        with pytest.raises(Exception) as err:
            parse_topology(text, "x.yaml")
        assert err.value.field == field and err.value.source == "x.yaml"


def test_router_registered():
    assert ROUTERS["folded_clos"] is FoldedClosRouter


@pytest.mark.parametrize("mode", ["flat", "per-switch", "per-group", "compact"])
def test_small_four_stage_verifies_all_pairs(mode):
    f = load_topology(SMALL)
    compiled = compile_fabric(f, plan_addresses(f, mode))
    r = verify(compiled)
    assert r.ok, r.failures[:3]
    assert r.pairs == 72 * 71 and r.loops == 0
    assert r.max_hops <= 2 * (4 - 1) + 1
    assert r.invalid_probes > 0 and r.invalid_probe_failures == 0


@pytest.mark.parametrize("mode", ["per-group", "compact"])
def test_paths_are_up_down(mode):
    f = load_topology(SMALL)
    compiled = compile_fabric(f, plan_addresses(f, mode))
    hosts = f.hosts
    for src in hosts[::5]:
        for dst in hosts[::3]:
            if src is dst:
                continue
            w = walk_pair(compiled, src.name, compiled.plan.host_mac[dst.name])
            assert w.host == dst.name
            levels = [f.switch(s).coords[0] for s in w.path]
            top = levels.index(max(levels))
            assert all(a + 1 == b for a, b in zip(levels[:top], levels[1 : top + 1])), levels
            assert all(a - 1 == b for a, b in zip(levels[top:], levels[top + 1 :])), levels
            # minimal: up exactly to the lowest level that has both pods below it
            s, d = f.switch(src.switch), f.switch(dst.switch)
            if s.name == d.name:
                need = 1
            elif s.group == d.group:
                need = 2
            elif s.group >> f.params["group_bits"] == d.group >> f.params["group_bits"]:
                need = 3
            else:
                need = 4
            assert max(levels) == need


@pytest.mark.parametrize("k,n,pods", [(6, 4, 8), (8, 4, 10), (4, 5, None), (8, 3, 5), (4, 4, None)])
def test_compact_rules_equal_ports_on_every_switch(k, n, pods):
    f = folded_clos_fabric(k, n, pods=pods)
    compiled = compile_fabric(f, plan_addresses(f, "compact"))
    for sw in f.switches:
        t = compiled.tables[sw.name]
        assert t.forwarding == t.ports == f.radix(sw.name), sw.name
    assert verify(compiled).ok


def test_split_masks_partition():
    for n in range(1, 20):
        for free in range(0, 7):
            cubes = split_masks(n, free)
            assert len(cubes) == (min(n, 1 << free) if free else 1)
            m = max(b for _, _, b in cubes)
            covered = Counter()
            for r in range(1 << m):
                hits = [c for c in cubes if r & c[1] == c[0]]
                covered[len(hits)] += 1
            assert covered == Counter({1: 1 << m})  # disjoint and complete
