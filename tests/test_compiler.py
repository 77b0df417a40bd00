"""Rule compiler: counts against Eq. 1, the lower bound and the Dragonfly band; flow structure."""

import random

import pytest

from hpcfabric.rules.addressing import MODES, plan_addresses
from hpcfabric.rules.compaction import DROP, compact_prefixes, lookup
from hpcfabric.rules.compiler import compile_fabric
from hpcfabric.rules.destinations import eq1
from hpcfabric.rules.fabrics.dragonfly import dragonfly_band
from hpcfabric.rules.flows import (
    ETH_TYPE_DMP,
    OFPP_IN_PORT,
    TABLE_INGRESS,
    TABLE_ROUTE,
    Output,
    RuleClass,
    SetField,
)
from hpcfabric.topology import dragonfly_fabric, fat_tree_fabric, flattened_butterfly_fabric
from hpcfabric.topology.generators import xor_arrangement_applies

DRAGONFLIES = [
    (a, p, h, g, arr)
    for a, p, h in [(2, 1, 1), (4, 2, 2), (3, 2, 3), (4, 1, 4), (6, 3, 3), (8, 4, 4), (5, 2, 2)]
    for g in sorted({a * h + 1, max(2, (a * h) // 2), 2})
    for arr in ("palmtree", "xor")
    if arr == "palmtree" or xor_arrangement_applies(a, h, g)
]
FBS = [[2], [5], [3, 3], [4, 4], [2, 5], [3, 4, 5], [4, 4, 4], [2, 3, 2, 3]]


def _compile(fabric, mode):
    return compile_fabric(fabric, plan_addresses(fabric, mode))


@pytest.mark.parametrize("a,p,h,g,arr", DRAGONFLIES)
def test_dragonfly_counts_per_mode(a, p, h, g, arr):
    fabric = dragonfly_fabric(a, p, h, g, arrangement=arr)
    low, high = dragonfly_band(fabric)
    hosts = len(fabric.hosts)
    flat = _compile(fabric, "flat")
    per_switch = _compile(fabric, "per-switch")
    per_group = _compile(fabric, "per-group")
    compact = _compile(fabric, "compact")
    for sw in fabric.switches:
        assert flat.tables[sw.name].forwarding == hosts
        assert per_switch.tables[sw.name].forwarding == p + len(fabric.switches) - 1
        assert per_group.tables[sw.name].forwarding == eq1(fabric, sw) == p + (a - 1) + (g - 1) == high
        rules = compact.tables[sw.name].forwarding
        used_ports = len({port for f in compact.flows(sw.name) for port in _outputs(f)})
        assert used_ports <= rules <= high, (sw.name, rules, high)
        if arr == "xor":
            assert rules <= low + 1, (sw.name, rules, low)


def _outputs(flow):
    if flow.table != TABLE_ROUTE:
        return []
    return [a.port for a in flow.actions if isinstance(a, Output)]


@pytest.mark.parametrize("dims", FBS, ids=str)
@pytest.mark.parametrize("t", [1, 3])
def test_fb_compact_reaches_lower_bound_and_per_group_is_eq1(dims, t):
    fabric = flattened_butterfly_fabric(dims, t)
    compact = _compile(fabric, "compact")
    per_group = _compile(fabric, "per-group")
    for sw in fabric.switches:
        assert compact.tables[sw.name].forwarding == fabric.radix(sw.name) == t + sum(k - 1 for k in dims)
        assert per_group.tables[sw.name].forwarding == eq1(fabric, sw)


@pytest.mark.parametrize("k", [2, 4, 6, 8])
def test_fat_tree_compact_reaches_lower_bound_on_every_switch(k):
    fabric = fat_tree_fabric(k)
    compact = _compile(fabric, "compact")
    per_group = _compile(fabric, "per-group")
    for sw in fabric.switches:
        assert compact.tables[sw.name].forwarding == fabric.radix(sw.name) == k
        if sw.role == "edge":
            assert per_group.tables[sw.name].forwarding == eq1(fabric, sw) == (k - 1) + (k // 2 - 1) + k // 2


def test_fat_tree_uplinks_balanced_by_source():
    """Every host of a pod leaves through a different core switch (static source hash)."""
    fabric = fat_tree_fabric(4)
    compact = _compile(fabric, "compact")
    cores = set()
    for edge in ("p0e0", "p0e1"):
        for host in fabric.hosts_on(edge):
            up = [f for f in compact.flows(edge) if f.match.in_port == host.port and f.table == TABLE_ROUTE]
            agg = fabric.peer(edge, up[0].actions[0].port)
            agg_up = [f for f in compact.flows(agg.node) if f.match.in_port == agg.port]
            cores.add(fabric.peer(agg.node, agg_up[0].actions[0].port).node)
    assert len(cores) == 4


def test_paper_default_dragonfly_beats_band_top():
    fabric = dragonfly_fabric(4, 2, 2)
    stats = _compile(fabric, "compact").stats()
    low, high = dragonfly_band(fabric)
    assert (low, high) == (10, 13)
    assert stats["rules_max"] <= low < high


def test_table3_dragonfly_compact_at_band_bottom():
    fabric = dragonfly_fabric(16, 8, 8)
    stats = _compile(fabric, "compact").stats()
    low, high = dragonfly_band(fabric)
    assert (low, high) == (46, 151)
    assert stats["rules_max"] <= low


@pytest.mark.parametrize("mode", MODES)
def test_dmp_and_ingress_entries(mode):
    fabric = dragonfly_fabric(2, 2, 1)
    compiled = _compile(fabric, mode)
    for sw in fabric.switches:
        flows = compiled.flows(sw.name)
        dmp = [f for f in flows if f.rule_class == RuleClass.DMP]
        assert len(dmp) == len(fabric.hosts_on(sw.name))
        for f, host in zip(sorted(dmp, key=lambda f: f.match.in_port), fabric.hosts_on(sw.name)):
            assert f.table == TABLE_INGRESS
            assert f.match.in_port == host.port and f.match.eth_type == ETH_TYPE_DMP
            assert f.actions == (SetField("eth_src", compiled.plan.host_mac[host.name]), Output(OFPP_IN_PORT))
        miss = [f for f in flows if f.table == TABLE_INGRESS and f.priority == 0]
        assert len(miss) == 1 and miss[0].goto == TABLE_ROUTE


def test_no_two_entries_share_table_priority_and_match():
    for fabric in (dragonfly_fabric(4, 2, 2), flattened_butterfly_fabric([3, 4], 2), fat_tree_fabric(4)):
        for mode in MODES:
            compiled = _compile(fabric, mode)
            for sw in fabric.switches:
                keys = [f.key() for f in compiled.flows(sw.name)]
                assert len(keys) == len(set(keys)), (fabric.name, mode, sw.name)


def test_compilation_is_deterministic():
    fabric = dragonfly_fabric(4, 2, 2)
    a = _compile(fabric, "compact")
    b = _compile(fabric, "compact")
    assert all(a.flows(s.name) == b.flows(s.name) for s in fabric.switches)


def test_ortc_preserves_the_forwarding_function_and_never_grows():
    rng = random.Random(7)
    for _ in range(400):
        length = rng.randint(1, 7)
        routes = {}
        for _ in range(rng.randint(0, 14)):
            plen = rng.randint(0, length)
            routes[(rng.randrange(1 << plen) if plen else 0, plen)] = rng.choice([DROP, 1, 2, 3])
        table = [(b, p, n) for (b, p), n in routes.items()]
        out = compact_prefixes(table, length)
        assert len(out) <= len(table)
        for address in range(1 << length):
            assert lookup(out, length, address) == lookup(table, length, address)


def test_ortc_merges_aligned_blocks():
    # 4 destinations on port 1 and one exception on port 2 -> 2 entries
    table = [(0b00, 2, 1), (0b01, 2, 1), (0b10, 2, 1), (0b11, 2, 2)]
    assert compact_prefixes(table, 2) == [(0, 0, 1), (0b11, 2, 2)]
    # the table-miss already drops: unassigned space costs nothing
    assert compact_prefixes([(0b1, 1, 1)], 3) == [(0b1, 1, 1)]
