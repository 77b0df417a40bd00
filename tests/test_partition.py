"""Partitions of a fabric for several controller instances (hpcfabric.topology.partition): pure."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcfabric.errors import TopologyError
from hpcfabric.topology.loader import load_topology
from hpcfabric.topology.partition import assign, partition_fabric

ROOT = Path(__file__).resolve().parent.parent


def fabric(name):
    return load_topology(ROOT / "topologies" / f"{name}.yaml")


def test_dragonfly_group_ranges_cover_every_switch_once():
    f = fabric("dragonfly-a4-p2-h2")
    for count in (1, 2, 3, 4, 9):
        parts = partition_fabric(f, count)
        assert len(parts) == count
        names = [n for p in parts for n in p.switches]
        assert sorted(names) == sorted(sw.name for sw in f.switches)  # each switch exactly once
        groups = [{f.switch(n).group for n in p.switches} for p in parts]
        assert all(not (a & b) for i, a in enumerate(groups) for b in groups[i + 1:])  # a group is never split
        sizes = [len(p.switches) for p in parts]
        assert max(sizes) - min(sizes) <= 4  # within one group's size (a = 4)
    assert [p.label for p in partition_fabric(f, 3)] == ["groups 0..2", "groups 3..5", "groups 6..8"]
    assert [p.label for p in partition_fabric(f, 2)] == ["groups 0..4", "groups 5..8"]


def test_more_partitions_than_groups_split_switches_and_limits():
    f = fabric("dragonfly-a4-p2-h2")
    parts = partition_fabric(f, 12)  # 9 groups: ranges of switches instead
    assert [len(p.switches) for p in parts] == [3] * 12
    assert parts[0].label == "switches g0s0..g0s2"
    with pytest.raises(TopologyError, match="expected 1..36"):
        partition_fabric(f, 37)
    fb = partition_fabric(fabric("fb-2d-3x3"), 3)  # FB: one row (slice along dimension 1) each
    assert [p.switches for p in fb] == [("s0_0", "s1_0", "s2_0"), ("s0_1", "s1_1", "s2_1"), ("s0_2", "s1_2", "s2_2")]


def test_assign_balances_and_moves_as_few_as_possible():
    parts = [f"p{i}" for i in range(10)]
    a = assign(parts, ["b", "a", "c"])  # nothing held yet: least loaded first, ties by name
    assert [a[p] for p in parts] == ["a", "b", "c"] * 3 + ["a"]
    assert assign(parts, []) == {}
    assert set(assign(parts, ["x"]).values()) == {"x"}
    # a alone holds everything; b joins: a keeps p0..p4, b gets p5..p9
    two = assign(parts, ["a", "b"], {p: "a" for p in parts})
    assert [two[p] for p in parts] == ["a"] * 5 + ["b"] * 5
    # c joins: a and b keep three each (their lowest), c gets the rest; nobody else moves
    three = assign(parts, ["a", "b", "c"], two)
    loads = {m: sum(1 for p in parts if three[p] == m) for m in "abc"}
    assert sorted(loads.values()) == [3, 3, 4]
    assert all(three[p] == two[p] for p in parts if three[p] != "c")
    # b dies: only b's partitions move, to the least loaded survivors
    after = assign(parts, ["a", "c"], {p: m for p, m in three.items() if m != "b"})
    assert all(after[p] == three[p] for p in parts if three[p] != "b")
    assert sorted(sum(1 for p in parts if after[p] == m) for m in "ac") == [5, 5]
    # a current owner that is not live is ignored
    assert assign(["p0"], ["a"], {"p0": "gone"}) == {"p0": "a"}
