"""Hierarchical MAC addressing: layouts, round trips, widths, errors."""

import pytest

from hpcfabric.rules.addressing import (
    FLAG_MASK,
    FLAG_VALUE,
    MODES,
    PAPER_WIDTHS,
    Layout,
    format_mac,
    from_mac,
    parse_mac,
    plan_addresses,
    to_mac,
)
from hpcfabric.errors import AddressingError
from hpcfabric.topology import dragonfly_fabric, fat_tree_fabric, flattened_butterfly_fabric

FABRICS = [
    dragonfly_fabric(4, 2, 2),
    dragonfly_fabric(3, 3, 1, arrangement="palmtree"),
    flattened_butterfly_fabric([4, 4], 4),
    flattened_butterfly_fabric([3, 4, 5], 2),
    fat_tree_fabric(4),
]


@pytest.mark.parametrize("value", [0, 1, 0x3FFF_FFFF_FFFF, 0x1234_5678_9AB, 1 << 45, (1 << 40) - 1])
def test_mac_placement_round_trip_and_flags(value):
    mac = to_mac(value)
    assert mac & FLAG_MASK == FLAG_VALUE  # locally administered, unicast
    assert from_mac(mac) == value
    assert parse_mac(format_mac(mac)) == mac


def test_small_addresses_start_with_0x02():
    assert format_mac(to_mac(0x0000_0001_0001)) == "02:00:00:01:00:01"  # the paper's Fig. 7 address


def test_from_mac_rejects_global_and_multicast():
    with pytest.raises(AddressingError, match="locally administered"):
        from_mac(0x00_20_12_77_14_4E)
    with pytest.raises(AddressingError):
        from_mac(0x03_00_00_00_00_01)


@pytest.mark.parametrize("text", ["02:00:00:01:00", "02:00:00:01:00:zz", "0200.0001.0001", ""])
def test_parse_mac_errors(text):
    with pytest.raises(AddressingError, match="MAC"):
        parse_mac(text)


def test_paper_default_widths_fill_46_bits():
    for mode, widths in PAPER_WIDTHS.items():
        assert sum(widths.values()) == 46, mode


@pytest.mark.parametrize("fabric", FABRICS, ids=lambda f: f.name)
@pytest.mark.parametrize("mode", MODES)
def test_plan_round_trip_and_uniqueness(fabric, mode):
    plan = plan_addresses(fabric, mode)
    macs = list(plan.host_mac.values())
    assert len(set(macs)) == len(fabric.hosts)
    for host in fabric.hosts:
        mac = plan.host_mac[host.name]
        assert mac & FLAG_MASK == FLAG_VALUE
        assert plan.layout.decode(mac) == dict(plan.host_fields[host.name])
        assert plan.host_by_mac(mac) == host.name
    assert plan.layout.used_bits <= 46


def test_per_group_fields_follow_the_topology():
    fabric = dragonfly_fabric(4, 2, 2)
    plan = plan_addresses(fabric, "per-group")
    assert plan.layout.describe() == "group(18) | switch(20) | host(8)"
    for host in fabric.hosts:
        sw = fabric.switch(host.switch)
        assert plan.host_fields[host.name] == {"group": sw.group, "switch": sw.index, "host": host.index}
    # group 1, switch 2, host 1 -> fields packed host lowest
    assert format_mac(plan.host_mac["g1s2h1"]) == format_mac(to_mac((1 << 28) | (2 << 8) | 1))


def test_fb_compact_uses_one_field_per_dimension():
    fabric = flattened_butterfly_fabric([3, 4, 5], 2)
    plan = plan_addresses(fabric, "compact")
    assert plan.layout.names == ("dim2", "dim1", "dim0", "host")
    assert [f.width for f in plan.layout.fields] == [3, 2, 2, 1]
    sw = fabric.switch("s2_3_4")
    assert plan.switch_fields(sw) == {"dim0": 2, "dim1": 3, "dim2": 4}


def test_compact_widths_are_tight():
    plan = plan_addresses(dragonfly_fabric(16, 8, 8), "compact")
    assert plan.layout.describe() == "group(8) | switch(4) | host(3)"


def test_custom_widths_and_overflow_error_names_the_field():
    fabric = dragonfly_fabric(4, 2, 2)
    plan = plan_addresses(fabric, "per-group", {"group": 10, "switch": 10, "host": 4})
    assert plan.layout.describe() == "group(10) | switch(10) | host(4)"
    with pytest.raises(AddressingError) as err:
        plan_addresses(fabric, "per-group", {"group": 3})
    assert err.value.field == "addressing.widths.group"
    assert "9 values" in str(err.value) and "3 bits" in str(err.value)
    assert err.value.exit_code == 2


def test_widths_over_46_bits_rejected():
    with pytest.raises(AddressingError, match="46 usable bits"):
        plan_addresses(dragonfly_fabric(4, 2, 2), "per-group", {"group": 30, "switch": 20})


def test_unknown_field_and_mode():
    with pytest.raises(AddressingError, match="do not exist"):
        plan_addresses(dragonfly_fabric(4, 2, 2), "per-switch", {"group": 4})
    with pytest.raises(AddressingError, match="unknown addressing mode"):
        plan_addresses(dragonfly_fabric(4, 2, 2), "hierarchical")


def test_layout_match_pins_flags_and_unused_high_bits():
    layout = Layout.build([("group", 4), ("switch", 2), ("host", 1)])
    value, mask = layout.match({"group": 3})
    assert mask & FLAG_MASK == FLAG_MASK and value & FLAG_MASK == FLAG_VALUE
    # bits above the 7 used bits are all in the mask (must be zero), the low 3 are wildcarded
    assert from_mac((mask & ~FLAG_MASK) | FLAG_VALUE) == ((1 << 46) - 1) & ~0b111
    assert layout.decode(value) == {"group": 3, "switch": 0, "host": 0}
    with pytest.raises(AddressingError, match="above"):
        layout.decode(to_mac(1 << 20))


# ---------------------------------------------------------------------------
# frames to unassigned addresses (docs/addressing.md, "Addresses nobody owns")


def _unassigned_walks(name: str, routing: str):
    from collections import Counter
    from pathlib import Path

    from hpcfabric.rules.compiler import compile_fabric
    from hpcfabric.topology import load_topology
    from hpcfabric.verify.oracle.allpairs import walk_pair
    from hpcfabric.verify.codes import DROP

    f = load_topology(Path(__file__).resolve().parent.parent / "topologies" / f"{name}.yaml")
    plan = plan_addresses(f, "compact")
    comp = compile_fabric(f, plan, routing=routing)
    owned = set(plan.host_mac.values())
    used = plan.layout.used_bits
    base = min(owned) & ~((1 << used) - 1)
    free = [base | v for v in range(1 << used) if base | v not in owned]  # every unassigned value of every field
    codes, visited = Counter(), Counter()
    for h in f.hosts:
        for mac in free:
            w = walk_pair(comp, h.name, mac)
            codes["dropped" if w.code == DROP else w.code] += 1
            visited[len(w.path)] += 1
    return len(free), codes, visited


@pytest.mark.parametrize("name,routing,free,farthest", [
    ("dragonfly-a2-p1-h1", "conditional", 10, 4),  # host=1 on every switch, group=3: travel to the owner's switch
    ("fb-2d-3x3", "minimal", 14, 2),
    ("fb-2d-3x3", "conditional", 14, 2),
    ("dragonfly-a4-p2-h2", "conditional", 56, 1),  # groups 9..15 only: no route covers them
])
def test_frames_to_unassigned_addresses_are_dropped_but_may_travel(name, routing, free, farthest):
    """Compaction covers unassigned values with the prefixes of real ones: such a frame follows the
    route of its prefix and is dropped by the switch that owns the prefix -- never delivered,
    looped or flooded, but not necessarily at the first switch (the docs said so; they were wrong)."""
    n, codes, visited = _unassigned_walks(name, routing)
    assert n == free
    assert set(codes) == {"dropped"}
    assert max(visited) == farthest
