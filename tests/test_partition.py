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


def test_assign_balances_round_robin_over_live_members():
    parts = [f"p{i}" for i in range(10)]
    a = assign(parts, ["b", "a", "c"])
    assert [a[p] for p in parts] == ["a", "b", "c"] * 3 + ["a"]
    assert assign(parts, []) == {}
    assert set(assign(parts, ["x"]).values()) == {"x"}
