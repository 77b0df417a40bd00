"""Generators: counts against closed forms, diameters, port conventions, bad parameters."""

from __future__ import annotations

from collections import Counter
from itertools import combinations
from math import prod

import networkx as nx
import pytest

from hpcfabric.errors import TopologyError
from hpcfabric.topology import dragonfly_fabric, fat_tree_fabric, flattened_butterfly_fabric
from hpcfabric.topology.generators import xor_arrangement_applies
from hpcfabric.topology.model import Fabric, Peer


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------
def check_consistent(f: Fabric) -> None:
    """Invariants every generated fabric must satisfy."""
    dpids = [sw.dpid for sw in f.switches]
    assert len(set(dpids)) == len(dpids), "dpids must be unique"
    assert all(d >= 1 for d in dpids)
    names = [sw.name for sw in f.switches] + [h.name for h in f.hosts]
    assert len(set(names)) == len(names), "node names must be unique"
    for link in f.links:
        assert link.a != link.b
        assert f.peer(link.a, link.a_port) == Peer(link.b, link.b_port, link.kind)
        assert f.peer(link.b, link.b_port) == Peer(link.a, link.a_port, link.kind)
    for host in f.hosts:
        peer = f.peer(host.switch, host.port)
        assert peer is not None and peer.is_host and peer.node == host.name
    # host index = rank by port on its switch, 0-based
    for sw in f.switches:
        on = f.hosts_on(sw.name)
        assert [h.index for h in on] == list(range(len(on)))
        assert [h.port for h in on] == sorted(h.port for h in on)
    # every port in use is accounted for exactly once
    used = sum(f.radix(sw.name) for sw in f.switches)
    assert used == len(f.hosts) + 2 * len(f.links)
    assert nx.is_connected(f.switch_graph) or len(f.switches) == 1


def parallel_counts(f: Fabric, kind: str) -> Counter:
    """Links of ``kind`` per unordered pair of groups."""
    c: Counter = Counter()
    for link in f.links:
        if link.kind == kind:
            ga, gb = f.switch(link.a).group, f.switch(link.b).group
            c[frozenset((ga, gb))] += 1
    return c


def diameter(f: Fabric) -> int:
    return nx.diameter(f.switch_graph)


# ---------------------------------------------------------------------------
# Dragonfly
# ---------------------------------------------------------------------------
def _dragonfly_cases():
    cases = []
    for a in range(1, 6):
        for h in range(1, 4):
            gmax = a * h + 1
            gs = sorted({1, 2, 3, gmax // 2 + 1, gmax - 1, gmax} & set(range(1, gmax + 1)))
            for g in gs:
                p = 1 + (a + h + g) % 3  # spread p over 1..3 without tripling the case count
                cases.append((a, p, h, g, "palmtree"))
                if xor_arrangement_applies(a, h, g):
                    cases.append((a, p, h, g, "xor"))
    return cases


DRAGONFLY_CASES = _dragonfly_cases()


@pytest.mark.parametrize("a,p,h,g,arrangement", DRAGONFLY_CASES, ids=lambda v: str(v))
def test_dragonfly_counts_and_structure(a, p, h, g, arrangement):
    f = dragonfly_fabric(a, p, h, g, arrangement=arrangement)
    check_consistent(f)
    assert f.kind == "dragonfly"
    assert f.params == {"a": a, "p": p, "h": h, "g": g, "arrangement": arrangement}
    assert len(f.switches) == a * g
    assert len(f.hosts) == a * g * p
    local = [l for l in f.links if l.kind == "local"]
    glob = [l for l in f.links if l.kind == "global"]
    assert len(local) == g * a * (a - 1) // 2
    assert len(local) + len(glob) == len(f.links)
    for link in local:
        assert f.switch(link.a).group == f.switch(link.b).group
    for link in glob:
        assert f.switch(link.a).group != f.switch(link.b).group, "a global link must join different groups"
    pairs = parallel_counts(f, "global")
    if g > 1:
        assert set(pairs) == {frozenset(x) for x in combinations(range(g), 2)}, "every pair of groups needs a global link"
    if arrangement == "palmtree" and g > 1:
        r = a * h // (g - 1)
        assert set(pairs.values()) == {r}
        assert len(glob) == g * (g - 1) * r // 2
    if arrangement == "xor":
        assert set(pairs.values()) == {1}
    # every switch: p host ports, a-1 local ports, at most h global ports
    for sw in f.switches:
        fabric_ports = f.fabric_ports(sw.name)
        n_global = sum(1 for peer in fabric_ports.values() if peer.kind == "global")
        assert n_global <= h
        assert f.radix(sw.name) == p + (a - 1) + n_global
        assert f.radix(sw.name) <= p + h + a - 1
    # diameter closed form: 3 (local, global, local) for g > 1 and a > 1, except that a palmtree
    # with at least a parallel links per pair of groups (r >= a) brings every pair within 2 hops
    if g > 1 and a > 1:
        short = arrangement == "palmtree" and a * h // (g - 1) >= a
        assert diameter(f) == (2 if short else 3)
    elif g > 1:  # a == 1: one switch per group, groups all-to-all
        assert diameter(f) == 1
    else:
        assert diameter(f) == (1 if a > 1 else 0)


@pytest.mark.parametrize("a,p,h,g,arrangement", DRAGONFLY_CASES[::3], ids=lambda v: str(v))
def test_dragonfly_port_numbering(a, p, h, g, arrangement):
    """Docstring convention: hosts 1..p, global p+1..p+h, local p+h+1.. by peer index."""
    f = dragonfly_fabric(a, p, h, g, arrangement=arrangement)
    for sw in f.switches:
        i, s = sw.group, sw.index
        assert sw.name == f"g{i}s{s}"
        assert sw.dpid == i * a + s + 1
        assert sw.coords == (i, s)
        assert sw.role == "access"
        for t, host in enumerate(f.hosts_on(sw.name)):
            assert host.name == f"g{i}s{s}h{t}" and host.port == t + 1 and host.index == t
        others = [o for o in range(a) if o != s]
        for n, o in enumerate(others):
            assert f.peer(sw.name, p + h + 1 + n) == Peer(f"g{i}s{o}", p + h + 1 + (s if s < o else s - 1), "local")
        for port, peer in f.fabric_ports(sw.name).items():
            if peer.kind == "global":
                assert p + 1 <= port <= p + h


@pytest.mark.parametrize("a,p,h,g,arrangement", DRAGONFLY_CASES[1::2], ids=lambda v: str(v))
def test_dragonfly_global_slot_formulas(a, p, h, g, arrangement):
    """Slot k of group i sits on switch k // h, port p+1 + k % h, and reaches the documented group."""
    f = dragonfly_fabric(a, p, h, g, arrangement=arrangement)
    if g < 2:
        return
    base = g if arrangement == "xor" and g & (g - 1) == 0 and g <= a * h else a * h
    for i in range(g):
        for k in range(a * h):
            peer = f.peer(f"g{i}s{k // h}", p + 1 + k % h)
            if arrangement == "palmtree":
                r = a * h // (g - 1)
                expected = (i + k % (g - 1) + 1) % g if k < r * (g - 1) else None
            elif i == base:  # the extra group of the xor arrangement
                expected = k if k < base else None
            elif k == 0:
                expected = base if base != g else None
            else:
                expected = i ^ k if k < base else None
            got = None if peer is None else f.switch(peer.node).group
            assert got == expected, (i, k)


def test_dragonfly_fig9_port_layout_palmtree():
    """Fig. 9: switch 0 of group 0 -- ports 1-2 hosts, 3-4 global to G1/G2, 5-7 local to switches 1-3;
    groups 3,4 behind port 5, 5,6 behind port 6, 7,8 behind port 7."""
    f = dragonfly_fabric(4, 2, 2, arrangement="palmtree")
    assert (len(f.switches), len(f.hosts), f.max_radix, f.params["g"]) == (36, 72, 7, 9)
    ports = f.ports("g0s0")
    assert sorted(ports) == [1, 2, 3, 4, 5, 6, 7]
    assert ports[1] == Peer("g0s0h0", None, "host") and ports[2] == Peer("g0s0h1", None, "host")
    assert ports[3].kind == ports[4].kind == "global"
    assert [f.switch(ports[q].node).group for q in (3, 4)] == [1, 2]
    assert [ports[q].node for q in (5, 6, 7)] == ["g0s1", "g0s2", "g0s3"]
    assert all(ports[q].kind == "local" for q in (5, 6, 7))
    behind = {}
    for q in (5, 6, 7):
        nb = ports[q].node
        behind[q] = sorted(f.switch(pp.node).group for pp in f.fabric_ports(nb).values() if pp.kind == "global")
    assert behind == {5: [3, 4], 6: [5, 6], 7: [7, 8]}


def test_dragonfly_default_is_fig9_fabric_with_xor_blocks():
    f = dragonfly_fabric(4, 2, 2)
    assert f.params["arrangement"] == "xor"  # auto: g = a*h+1 with a*h = 8 a power of two
    assert (len(f.switches), len(f.hosts), len(f.links), f.max_radix) == (36, 72, 90, 7)
    ports = f.ports("g0s0")
    assert [ports[q].kind for q in range(1, 8)] == ["host"] * 2 + ["global"] * 2 + ["local"] * 3
    assert [ports[q].node for q in (5, 6, 7)] == ["g0s1", "g0s2", "g0s3"]
    # xor: switch s of group 0 reaches groups 2s, 2s+1 (slot 0 -> extra group 8)
    assert [f.switch(ports[q].node).group for q in (3, 4)] == [8, 1]
    for s in range(1, 4):
        got = sorted(f.switch(pp.node).group for pp in f.fabric_ports(f"g0s{s}").values() if pp.kind == "global")
        assert got == [2 * s, 2 * s + 1]


def test_dragonfly_table3_counts():
    f = dragonfly_fabric(16, 8, 8)
    assert f.params["g"] == 129
    assert (len(f.switches), len(f.hosts), f.max_radix) == (2064, 16512, 31)


def test_dragonfly_h0_single_group():
    f = dragonfly_fabric(3, 2, 0)
    assert f.params["g"] == 1 and len(f.switches) == 3 and len(f.links) == 3


def test_dragonfly_default_name():
    assert dragonfly_fabric(2, 1, 1).name == "dragonfly-a2-p1-h1-g3"
    assert dragonfly_fabric(2, 1, 1, name="x").name == "x"


# ---------------------------------------------------------------------------
# Flattened Butterfly
# ---------------------------------------------------------------------------
FB_DIMS = [
    [2], [3], [5],
    [2, 2], [2, 3], [3, 2], [4, 4], [4, 5], [5, 5],
    [2, 2, 2], [2, 3, 4], [3, 3, 3], [4, 2, 5],
    [2, 2, 2, 2], [2, 3, 2, 3], [3, 3, 3, 3], [5, 2, 3, 2],
]  # fmt: skip
FB_CASES = [(dims, 1 + i % 3) for i, dims in enumerate(FB_DIMS)]


@pytest.mark.parametrize("dims,t", FB_CASES, ids=lambda v: str(v))
def test_flattened_butterfly(dims, t):
    f = flattened_butterfly_fabric(dims, t)
    check_consistent(f)
    n = prod(dims)
    assert f.kind == "flattened_butterfly"
    assert len(f.switches) == n
    assert len(f.hosts) == n * t
    assert 2 * len(f.links) == n * sum(k - 1 for k in dims)
    radix = t + sum(k - 1 for k in dims)
    assert all(f.radix(sw.name) == radix for sw in f.switches)
    assert diameter(f) == len(dims)
    assert f.name == f"fb-{'x'.join(map(str, dims))}-t{t}"

    bases = [t + 1 + sum(k - 1 for k in dims[:d]) for d in range(len(dims))]
    by_coords = {sw.coords: sw for sw in f.switches}
    assert len(by_coords) == n
    for sw in f.switches:
        c = sw.coords
        assert sw.name == "s" + "_".join(map(str, c))
        assert sw.index == c[0]
        group = 0
        for d in range(len(dims) - 1, 0, -1):
            group = group * dims[d] + c[d]
        assert sw.group == group
        for q, host in enumerate(f.hosts_on(sw.name)):
            assert host.port == q + 1 and host.index == q
        for d, k in enumerate(dims):
            for v in range(k):
                if v == c[d]:
                    continue
                port = bases[d] + (v if v < c[d] else v - 1)
                other = by_coords[c[:d] + (v,) + c[d + 1 :]]
                peer = f.peer(sw.name, port)
                assert peer is not None and peer.node == other.name and peer.kind == f"dim{d}"
    for link in f.links:  # a dim-d link changes coordinate d only
        ca, cb = f.switch(link.a).coords, f.switch(link.b).coords
        diff = [d for d in range(len(dims)) if ca[d] != cb[d]]
        assert diff == [int(link.kind[3:])]
    # (group, index) is unique: it is the addressing hierarchy
    assert len({(sw.group, sw.index) for sw in f.switches}) == n


def test_flattened_butterfly_fig3b_4x4():
    f = flattened_butterfly_fabric([4, 4], 4)
    assert (len(f.switches), len(f.hosts), len(f.links), f.max_radix) == (16, 64, 48, 10)
    ports = f.ports("s0_0")
    assert [ports[q].kind for q in range(1, 11)] == ["host"] * 4 + ["dim0"] * 3 + ["dim1"] * 3
    assert [ports[q].node for q in range(5, 11)] == ["s1_0", "s2_0", "s3_0", "s0_1", "s0_2", "s0_3"]


# ---------------------------------------------------------------------------
# fat-tree
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("k", [2, 4, 6, 8])
def test_fat_tree(k):
    f = fat_tree_fabric(k)
    check_consistent(f)
    half = k // 2
    assert f.kind == "fat_tree" and f.name == f"fat-tree-k{k}"
    assert 4 * len(f.switches) == 5 * k * k
    assert 4 * len(f.hosts) == k**3
    assert 2 * len(f.links) == k**3
    assert all(f.radix(sw.name) == k for sw in f.switches)
    assert diameter(f) == 4
    roles = Counter(sw.role for sw in f.switches)
    assert roles == {"edge": k * half, "aggregation": k * half, "core": half * half}
    assert {sw.name for sw in f.access_switches} == {sw.name for sw in f.switches if sw.role == "edge"}
    for pod in range(k):
        for i in range(half):
            e = f"p{pod}e{i}"
            assert f.switch(e).group == pod
            for t in range(half):
                assert f.peer(e, 1 + t) == Peer(f"p{pod}e{i}h{t}", None, "host")
            for j in range(half):
                assert f.peer(e, half + 1 + j) == Peer(f"p{pod}a{j}", 1 + i, "edge-agg")
        for j in range(half):
            a = f"p{pod}a{j}"
            assert f.switch(a).group == pod
            for m in range(half):
                assert f.peer(a, half + 1 + m) == Peer(f"c{j}_{m}", 1 + pod, "agg-core")
    for j in range(half):
        for m in range(half):
            c = f.switch(f"c{j}_{m}")
            assert c.group == -1 and c.index == j * half + m
            assert set(f.ports(c.name)) == set(range(1, k + 1))


# ---------------------------------------------------------------------------
# invalid parameters
# ---------------------------------------------------------------------------
BAD = [
    (lambda: dragonfly_fabric(4, 2, 2, 10), "g"),
    (lambda: dragonfly_fabric(2, 1, 1, 4), "g"),
    (lambda: dragonfly_fabric(2, 1, 1, 0), "g"),
    (lambda: dragonfly_fabric(0, 1, 1), "a"),
    (lambda: dragonfly_fabric(2, 0, 1), "p"),
    (lambda: dragonfly_fabric(2, 1, -1), "h"),
    (lambda: dragonfly_fabric(True, 1, 1), "a"),
    (lambda: dragonfly_fabric(2, False, 1), "p"),
    (lambda: dragonfly_fabric(2, 1, 1, True), "g"),
    (lambda: dragonfly_fabric(2, 1.0, 1), "p"),
    (lambda: dragonfly_fabric("4", 2, 2), "a"),
    (lambda: dragonfly_fabric(3, 1, 3, 10, arrangement="xor"), "arrangement"),  # h=3 not a power of two
    (lambda: dragonfly_fabric(4, 1, 2, 6, arrangement="xor"), "arrangement"),  # g=6 not a power of two
    (lambda: dragonfly_fabric(3, 1, 1, 4, arrangement="xor"), "arrangement"),  # g=a*h+1 but a*h=3
    (lambda: dragonfly_fabric(4, 2, 2, arrangement="spiral"), "arrangement"),
    (lambda: fat_tree_fabric(5), "k"),
    (lambda: fat_tree_fabric(0), "k"),
    (lambda: fat_tree_fabric(True), "k"),
    (lambda: fat_tree_fabric(4.0), "k"),
    (lambda: flattened_butterfly_fabric([4, 1], 2), "dims[1]"),
    (lambda: flattened_butterfly_fabric([1], 2), "dims[0]"),
    (lambda: flattened_butterfly_fabric([3, True], 2), "dims[1]"),
    (lambda: flattened_butterfly_fabric([], 2), "dims"),
    (lambda: flattened_butterfly_fabric([2] * 9, 1), "dims"),
    (lambda: flattened_butterfly_fabric(4, 2), "dims"),
    (lambda: flattened_butterfly_fabric([4, 4], 0), "hosts_per_switch"),
    (lambda: flattened_butterfly_fabric([4, 4], True), "hosts_per_switch"),
]


@pytest.mark.parametrize("build,field", BAD, ids=[f"{i}-{f}" for i, (_, f) in enumerate(BAD)])
def test_invalid_parameters(build, field):
    with pytest.raises(TopologyError) as info:
        build()
    err = info.value
    assert err.field == field
    assert err.source is None
    assert str(err).startswith(f"{field}: ")
    assert err.exit_code == 2
