"""Scale machinery: the level-wise ORTC, the Dragonfly route fast path, count_rules
(in-process and forked workers), structural checks, sampled verification, the bench."""

from __future__ import annotations

import gc
import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Iterable

import pytest

from hpcfabric.rules.addressing import plan_addresses
from hpcfabric.analysis.scale import RuleCounts, SwitchCount, count_rules, verify_at_scale
from hpcfabric.rules.compaction import DROP, compact_prefixes
from hpcfabric.rules.compiler import compile_fabric
from hpcfabric.rules.context import Context
from hpcfabric.rules.fabrics.dragonfly import dragonfly_remote_routes
from hpcfabric.rules.tables import Route
from hpcfabric.errors import ConfigError, TopologyError
from hpcfabric.rules.flows import RuleClass
from hpcfabric.rules.routing import DragonflyRouter
from hpcfabric.topology import dragonfly_fabric, flattened_butterfly_fabric
from hpcfabric.topology.clos import folded_clos_fabric
from hpcfabric.topology.model import Fabric, Host, Link, Switch, gc_paused

ROOT = Path(__file__).resolve().parent.parent


# -- reference ORTC: the original node-object implementation ------------------
class _Node:
    __slots__ = ("children", "nh", "hops")

    def __init__(self) -> None:
        self.children = None
        self.nh = None
        self.hops = 0


def reference_ortc(routes: Iterable[tuple[int, int, int]], length: int) -> list[tuple[int, int, int]]:
    routes = list(routes)
    values = sorted({nh for _, _, nh in routes} | {DROP})
    index = {nh: i for i, nh in enumerate(values)}
    root = _Node()
    for bits, plen, nh in routes:
        node = root
        for depth in range(plen):
            if node.children is None:
                node.children = [_Node(), _Node()]
            node = node.children[(bits >> (plen - 1 - depth)) & 1]
        node.nh = index[nh]

    def sets(node, inherited):
        nh = node.nh if node.nh is not None else inherited
        if node.children is None:
            node.hops = 1 << nh
            return node.hops
        a, b = sets(node.children[0], nh), sets(node.children[1], nh)
        node.hops = (a & b) or (a | b)
        return node.hops

    sets(root, index[DROP])
    out = []

    def choose(node, bits, plen, inherited):
        if node.hops >> inherited & 1:
            chosen = inherited
        else:
            chosen = (node.hops & -node.hops).bit_length() - 1
            out.append((bits, plen, values[chosen]))
        if node.children is not None:
            choose(node.children[0], bits << 1, plen + 1, chosen)
            choose(node.children[1], (bits << 1) | 1, plen + 1, chosen)

    choose(root, 0, 0, index[DROP])
    out.sort(key=lambda r: (r[1], r[0]))
    return out


def test_ortc_matches_reference_on_random_tables():
    rng = random.Random(7)
    for _ in range(3000):
        length = rng.randint(0, 9)
        routes = []
        for _ in range(rng.randint(0, 14)):
            plen = rng.randint(0, length)
            routes.append((rng.randrange(1 << plen) if plen else 0, plen, rng.choice([0, 1, 2, 3, 7, 70, 71])))
        assert compact_prefixes(routes, length) == reference_ortc(routes, length), routes


def test_ortc_matches_reference_on_dragonfly_tables():
    from hpcfabric.rules.destinations import per_group_routes

    for fabric in (dragonfly_fabric(6, 3, 3, arrangement="palmtree"), dragonfly_fabric(8, 4, 4)):
        plan = plan_addresses(fabric, "compact")
        ctx = Context(fabric, plan)
        for sw in fabric.switches[::5]:
            hops = [(r.bits, r.length, r.port) for r in per_group_routes(ctx, sw)]
            assert compact_prefixes(hops, plan.layout.used_bits) == reference_ortc(hops, plan.layout.used_bits)


def test_ortc_rejects_bad_prefixes():
    with pytest.raises(ValueError):
        compact_prefixes([(4, 2, 1)], 4)
    assert compact_prefixes([], 8) == []
    assert compact_prefixes([(0, 0, 5)], 0) == [(0, 0, 5)]


@pytest.mark.parametrize("arrangement", ["palmtree", "xor"])
def test_dragonfly_remote_routes_equal_router(arrangement):
    fabric = dragonfly_fabric(4, 2, 2, arrangement=arrangement) if arrangement == "xor" else dragonfly_fabric(6, 2, 5, 12)
    ctx = Context(fabric, plan_addresses(fabric, "per-group"))
    router = ctx.router
    assert type(router) is DragonflyRouter
    for sw in fabric.switches:
        fast = dragonfly_remote_routes(ctx, router, sw)
        slow = [
            Route(*ctx.group_prefix[g], router.to_group(sw, g, spread=g), RuleClass.ROUTE, True)
            for g in ctx.groups
            if g != sw.group
        ]
        assert fast == slow


def test_gc_paused_restores_state():
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_fabric_fast_path_keeps_error_messages():
    s = (Switch("a", 1, 0, 0, (0,)), Switch("b", 2, 0, 1, (1,)))
    with pytest.raises(TopologyError, match="port 1 of 'a' is used twice") as err:
        Fabric("explicit", "x", s, (Host("h", "a", 1, 0),), (Link("a", 1, "b", 1),))
    assert err.value.field == "links[0].a"
    with pytest.raises(TopologyError, match="unknown switch 'c'"):
        Fabric("explicit", "x", s, (), (Link("a", 1, "c", 1),))
    with pytest.raises(TopologyError, match="must be an integer >= 1"):
        Fabric("explicit", "x", s, (Host("h", "a", True, 0),), ())
    with pytest.raises(TopologyError, match="duplicate node name 'a'"):
        Fabric("explicit", "x", s, (Host("a", "b", 1, 0),), ())


@pytest.mark.parametrize("mode", ["per-group", "compact"])
def test_count_rules_workers_equal_in_process(mode):
    fabric = dragonfly_fabric(8, 4, 4)  # 264 switches: enough for two workers
    one = count_rules(fabric, mode, jobs=1)
    two = count_rules(fabric, mode, jobs=2)
    assert one.counts == two.counts
    assert two.jobs == 2
    compiled = compile_fabric(fabric, plan_addresses(fabric, mode))
    assert [c.rules for c in one.counts] == [compiled.tables[sw.name].forwarding for sw in fabric.switches]
    assert not one.problems()
    s = one.summary()
    assert s["structural_ok"] and s["paper_band"] == [22, 43]
    if mode == "per-group":
        assert s["eq1_met"] and s["rules_min"] == s["rules_max"] == 43


def test_count_rules_subset_and_lower_bound():
    fabric = flattened_butterfly_fabric([4, 4, 3], 3)
    rc = count_rules(fabric, "compact", switches=[0, 5, 47])
    assert [c.name for c in rc.counts] == [fabric.switches[i].name for i in (0, 5, 47)]
    assert rc.sampled and "a sample of 3 of 48" in rc.coverage()
    assert all(c.rules == c.ports == 3 + 3 + 3 + 2 for c in rc.counts)
    assert rc.summary()["lower_bound_met"]


def test_count_rules_bad_jobs():
    with pytest.raises(ConfigError):
        count_rules(dragonfly_fabric(2, 1, 1), "compact", jobs=0)


def test_structural_problems_are_reported():
    fabric = folded_clos_fabric(4, 3)
    plan = plan_addresses(fabric, "compact")
    good = count_rules(fabric, plan)
    bad = SwitchCount("p0e0", "edge", True, 4, 5, 9, 1, 2, 6)
    rc = RuleCounts(fabric, plan, [bad] + good.counts[1:], 0.0, 1)
    problems = rc.problems()
    assert any("overlaps" in p for p in problems)
    assert any("ports not in use" in p for p in problems)
    assert any("lower bound" in p for p in problems)
    assert not rc.summary()["structural_ok"]


def test_verify_at_scale_states_coverage():
    fabric = folded_clos_fabric(6, 4, pods=8)
    res = verify_at_scale(fabric, "compact", sample=7)
    assert res["ok"] and res["delivered"] == res["pairs"] == 72 * 7 - 7
    assert "structural checks" in res["coverage"] and "all 84 switches" in res["coverage"]
    assert "7 random destinations" in res["coverage"]


def test_bench_one_fabric_line():
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "compile_scale.py"), "--jobs", "1", "--modes", "compact,per-group",
         "--cos", "default", str(ROOT / "topologies" / "clos-4stage-small.yaml")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    lines = [json.loads(x) for x in out.stdout.splitlines()]
    assert [x["addressing"] for x in lines] == ["compact", "per-group"]
    assert all(x["cos"] == "off" for x in lines)  # up*/down* Clos: the proven default is untagged
    for x in lines:
        for key in ("fabric", "switches", "hosts", "seconds", "peak_rss_mb", "rules_min", "rules_mean", "rules_max", "under_4k"):
            assert key in x
    assert lines[0]["lower_bound_met"] and lines[0]["rules_max"] == 6
    assert lines[1]["eq1_met"] and not lines[1]["under_4k"]  # 72 hosts: the claim is about >= 300,000


def test_replace_reuses_index_only_for_identical_tuples():
    import dataclasses

    f = dragonfly_fabric(4, 2, 2)
    g = dataclasses.replace(f, params={**f.params, "source": "x.yaml"})
    assert g.ports("g0s0") is f.ports("g0s0") and g.params["source"] == "x.yaml"
    h = dataclasses.replace(f, links=f.links[:-1])
    assert h.ports("g0s0") is not f.ports("g0s0") and len(h.links) == len(f.links) - 1
    bad = f.links + (Link("g0s0", 1, "g0s1", 99),)  # port 1 of g0s0 is a host port
    with pytest.raises(TopologyError, match="used twice"):
        dataclasses.replace(f, links=bad)


def test_bench_prices_the_default_classes_beside_untagged():
    """compile_scale --cos off,default: same forwarding rules, more flows with the default classes."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "compile_scale.py"), "--jobs", "1", "--cos", "off,default",
         str(ROOT / "topologies" / "dragonfly-a4-p2-h2.yaml")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    off, default = (json.loads(x) for x in out.stdout.splitlines())
    assert (off["cos"], default["cos"]) == ("off", "top/2")  # minimal Dragonfly needs 2 classes
    assert default["rules_mean"] == off["rules_mean"] and default["flows_mean"] > off["flows_mean"]
    assert default["install_s_per_switch_est"] > off["install_s_per_switch_est"] > 0
