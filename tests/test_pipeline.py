"""The fake OpenFlow 1.3 pipeline: matching, priorities, tables, actions, overlaps."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcfabric.rules.addressing import plan_addresses
from hpcfabric.rules.compiler import compile_fabric
from hpcfabric.rules.flows import (
    ETH_TYPE_DMP,
    ETH_TYPE_LLDP,
    MAC_EXACT,
    OFPP_CONTROLLER,
    OFPP_IN_PORT,
    TABLE_INGRESS,
    TABLE_ROUTE,
    FlowSpec,
    Match,
    Output,
    PopVlan,
    PushVlan,
    SetField,
)
from hpcfabric.verify.reference.pipeline import (
    Frame,
    Pipeline,
    PipelineError,
    check_overlaps,
    describe_flow,
    match_frame,
    matches_overlap,
)
from hpcfabric.topology.loader import load_topology

TOPOLOGIES = Path(__file__).resolve().parent.parent / "topologies"

A = 0x020000000101
B = 0x020000000202


def fl(table=0, priority=1, actions=(), goto=None, write_metadata=None, **match):
    return FlowSpec(table, priority, Match(**match), tuple(actions), 0, goto, write_metadata)


@pytest.fixture(scope="module")
def df_compact():
    fabric = load_topology(TOPOLOGIES / "dragonfly-a4-p2-h2.yaml")
    return compile_fabric(fabric, plan_addresses(fabric, "compact"))


# ---------------------------------------------------------------------------
# matching


def test_masked_match_is_value_under_mask():
    m = Match(eth_dst=(0x020000000100, 0xFFFFFFFFFF00))
    assert match_frame(m, Frame(1, A, 0x020000000101))
    assert match_frame(m, Frame(1, A, 0x0200000001FF))
    assert not match_frame(m, Frame(1, A, 0x020000000201))
    assert match_frame(Match(eth_src=(A, MAC_EXACT)), Frame(1, A, B))
    assert not match_frame(Match(eth_src=(A, MAC_EXACT)), Frame(1, B, A))
    assert match_frame(Match(metadata=(0x10, 0xF0)), Frame(1, A, B, metadata=0x1F))
    assert not match_frame(Match(metadata=(0x10, 0xF0)), Frame(1, A, B, metadata=0x2F))


def test_exact_fields_and_untagged_vlan():
    f = Frame(3, A, B)
    assert match_frame(Match(), f)
    assert match_frame(Match(in_port=3, eth_type=0x0800), f)
    assert not match_frame(Match(in_port=4), f)
    assert not match_frame(Match(eth_type=ETH_TYPE_DMP), f)
    assert not match_frame(Match(vlan_pcp=0), f), "vlan_pcp never matches an untagged frame"
    assert match_frame(Match(vlan_pcp=5), Frame(3, A, B, vlan_pcp=5))
    assert not match_frame(Match(vlan_pcp=4), Frame(3, A, B, vlan_pcp=5))


def test_match_rejects_value_outside_mask():
    with pytest.raises(ValueError):
        Match(eth_dst=(0x1FF, 0xF0))


# ---------------------------------------------------------------------------
# priorities, tables, goto, metadata


def test_highest_priority_wins_regardless_of_order():
    flows = [
        fl(priority=10, eth_dst=(B & ~0xFF, MAC_EXACT & ~0xFF), actions=[Output(1)]),
        fl(priority=20, eth_dst=(B, MAC_EXACT), actions=[Output(2)]),
    ]
    for order in (flows, flows[::-1]):
        res = Pipeline(order).process(Frame(9, A, B))
        assert res.ports == (2,)
        assert res.hits == (flows[1],)
    assert Pipeline(flows).process(Frame(9, A, B | 0x01)).ports == (1,)


def test_equal_priority_first_given_wins_and_is_reported():
    a = fl(priority=5, eth_dst=(B, MAC_EXACT), actions=[Output(1)])
    b = fl(priority=5, in_port=9, actions=[Output(2)])
    assert Pipeline([a, b]).process(Frame(9, A, B)).ports == (1,)
    assert Pipeline([b, a]).process(Frame(9, A, B)).ports == (2,)
    assert check_overlaps([a, b]) == [(a, b)]
    assert Pipeline([a, b]).check_overlaps() == [(a, b)]


def test_table_miss_drops():
    p = Pipeline([fl(eth_dst=(B, MAC_EXACT), actions=[Output(1)])])
    res = p.process(Frame(1, A, A))
    assert res.dropped and not res.outputs and not res.punted
    assert res.miss_table == 0 and res.hits == ()
    assert Pipeline([]).process(Frame(1, A, B)).dropped


def test_drop_entry_and_goto_to_missing_table():
    drop = fl(priority=9, eth_dst=(B, MAC_EXACT))
    res = Pipeline([drop, fl(actions=[Output(1)])]).process(Frame(1, A, B))
    assert res.dropped and res.miss_table is None and res.hits == (drop,)
    res = Pipeline([fl(goto=3)]).process(Frame(1, A, B))
    assert res.dropped and res.miss_table == 3


def test_goto_continues_and_outputs_accumulate():
    flows = [
        fl(table=0, actions=[Output(7)], goto=2),
        fl(table=2, eth_dst=(B, MAC_EXACT), actions=[Output(8)]),
    ]
    res = Pipeline(flows).process(Frame(1, A, B))
    assert res.ports == (7, 8)
    assert res.hits == tuple(flows)
    res = Pipeline(flows).process(Frame(1, A, A))  # table 2 misses after table 0 output
    assert res.ports == (7,) and not res.dropped and res.miss_table == 2


def test_output_to_the_ingress_port_is_dropped_unless_by_in_port():
    """OpenFlow (and Open vSwitch: "skipping output to input port"): an output naming the ingress
    port by number sends nothing; OFPP_IN_PORT does; other outputs of the entry still go out."""
    p = Pipeline([fl(actions=[Output(1), Output(5)])])
    res = p.process(Frame(1, A, B))
    assert res.ports == (5,) and res.to_ingress == (1,)
    res = Pipeline([fl(actions=[Output(1)])]).process(Frame(1, A, B))
    assert res.dropped and res.to_ingress == (1,)
    res = Pipeline([fl(actions=[Output(OFPP_IN_PORT)])]).process(Frame(1, A, B))
    assert res.ports == (1,) and res.to_ingress == ()
    assert Pipeline([fl(actions=[Output(1)])]).process(Frame(2, A, B)).ports == (1,)


@pytest.mark.parametrize("goto", [0, 1])
def test_goto_must_go_forward(goto):
    with pytest.raises(PipelineError, match="later table"):
        Pipeline([fl(table=1, goto=goto)])


def test_write_metadata_masked_then_matched():
    flows = [
        fl(table=0, write_metadata=(0xA5, 0x0F), goto=1),
        fl(table=1, priority=2, metadata=(0xF5, 0xFF), actions=[Output(3)]),
        fl(table=1, priority=1, metadata=(0x05, 0x0F), actions=[Output(2)]),
    ]
    p = Pipeline(flows)
    assert p.process(Frame(1, A, B, metadata=0xF0)).ports == (3,)  # 0xF0 -> 0xF5
    res = p.process(Frame(1, A, B))  # 0x00 -> 0x05
    assert res.ports == (2,)
    assert res.outputs[0][1].metadata == 0, "metadata does not leave the switch"


# ---------------------------------------------------------------------------
# actions


def test_set_field_applies_in_action_order():
    flows = [fl(actions=[Output(1), SetField("eth_dst", A), Output(2), SetField("eth_src", B)], goto=1),
             fl(table=1, eth_src=(B, MAC_EXACT), actions=[Output(3)])]
    res = Pipeline(flows).process(Frame(5, A, B))
    (p1, f1), (p2, f2), (p3, f3) = res.outputs
    assert (p1, f1.eth_dst, f1.eth_src) == (1, B, A)
    assert (p2, f2.eth_dst, f2.eth_src) == (2, A, A)
    assert (p3, f3.eth_dst, f3.eth_src) == (3, A, B), "later tables see the rewritten frame"


def test_in_port_output_and_controller_punt():
    res = Pipeline([fl(actions=[Output(OFPP_IN_PORT)])]).process(Frame(4, A, B))
    assert res.ports == (4,)
    res = Pipeline([fl(actions=[Output(OFPP_CONTROLLER)])]).process(Frame(4, A, B))
    assert res.punted and not res.outputs and not res.dropped
    assert res.punts[0].eth_dst == B


def test_vlan_push_set_pop():
    flows = [
        fl(table=0, actions=[PushVlan()], goto=1),
        fl(table=1, vlan_pcp=0, actions=[SetField("vlan_pcp", 3)], goto=2),
        fl(table=2, vlan_pcp=3, actions=[Output(1), PopVlan(), Output(2)]),
    ]
    res = Pipeline(flows).process(Frame(9, A, B))
    assert [(p, f.vlan_pcp) for p, f in res.outputs] == [(1, 3), (2, None)]
    # a tagged frame keeps its PCP when another tag is pushed (the new tag copies the outer one)
    assert Pipeline(flows[:1] + [fl(table=1, vlan_pcp=6, actions=[Output(5)])]).process(
        Frame(9, A, B, vlan_pcp=6)
    ).ports == (5,)
    with pytest.raises(PipelineError, match="untagged"):
        Pipeline([fl(actions=[SetField("vlan_pcp", 1)])]).process(Frame(1, A, B))
    with pytest.raises(PipelineError, match="untagged"):
        Pipeline([fl(actions=[PopVlan()])]).process(Frame(1, A, B))
    with pytest.raises(PipelineError, match="unsupported field"):
        Pipeline([fl(actions=[SetField("eth_type", 1)])]).process(Frame(1, A, B))


# ---------------------------------------------------------------------------
# compiled tables


def test_dmp_echo_returns_planned_mac_on_same_port(df_compact):
    fabric, plan = df_compact.fabric, df_compact.plan
    for host in fabric.hosts[:6]:
        pipe = Pipeline(df_compact.flows(host.switch))
        frame = Frame(in_port=host.port, eth_src=0x020000ABCDEF, eth_dst=0xFFFFFFFFFFFF, eth_type=ETH_TYPE_DMP)
        res = pipe.process(frame)
        assert len(res.outputs) == 1 and not res.punted
        port, sent = res.outputs[0]
        assert port == host.port
        assert sent.eth_src == plan.host_mac[host.name]
        assert sent.eth_type == ETH_TYPE_DMP and sent.eth_dst == 0xFFFFFFFFFFFF


def test_compiled_switch_routes_data_and_punts_lldp(df_compact):
    fabric, plan = df_compact.fabric, df_compact.plan
    src, dst = fabric.hosts[0], fabric.hosts[1]  # same switch
    pipe = Pipeline(df_compact.flows(src.switch))
    res = pipe.process(Frame(src.port, plan.host_mac[src.name], plan.host_mac[dst.name]))
    assert res.ports == (dst.port,)
    assert [h.table for h in res.hits] == [TABLE_INGRESS, TABLE_ROUTE]
    res = pipe.process(Frame(src.port, plan.host_mac[src.name], 0x0180C200000E, eth_type=ETH_TYPE_LLDP))
    assert res.punted and not res.outputs
    # unowned destination (bit above the used bits): dropped
    res = pipe.process(Frame(src.port, plan.host_mac[src.name], plan.host_mac[dst.name] | (1 << 39)))
    assert res.dropped


# ---------------------------------------------------------------------------
# overlaps


def test_overlap_rules():
    dst = Match(eth_dst=(0x020000000100, 0xFFFFFFFFFF00))
    assert matches_overlap(dst, Match(eth_dst=(0x020000000101, MAC_EXACT)))
    assert not matches_overlap(dst, Match(eth_dst=(0x020000000201, MAC_EXACT)))
    assert matches_overlap(Match(in_port=1), Match(eth_dst=(B, MAC_EXACT)))
    assert not matches_overlap(Match(in_port=1), Match(in_port=2))
    assert not matches_overlap(Match(eth_type=0x0800), Match(eth_type=ETH_TYPE_DMP))
    assert not matches_overlap(Match(metadata=(1, 1)), Match(metadata=(0, 1)))


def test_check_overlaps_same_priority_only():
    a = fl(priority=5, eth_dst=(B, MAC_EXACT), actions=[Output(1)])
    dup = fl(priority=5, eth_dst=(B, MAC_EXACT), actions=[Output(2)])
    other = fl(priority=5, eth_dst=(A, MAC_EXACT), actions=[Output(2)])
    lower = fl(priority=4, eth_dst=(B, MAC_EXACT), actions=[Output(2)])
    other_table = fl(table=1, priority=5, eth_dst=(B, MAC_EXACT), actions=[Output(2)])
    assert check_overlaps([a, other, lower, other_table]) == []
    assert check_overlaps([a, other, dup]) == [(a, dup)]  # same-shape fast path
    wide = fl(priority=5, eth_dst=(B & ~0xFF, MAC_EXACT & ~0xFF), actions=[Output(3)])
    assert check_overlaps([a, other, wide]) == [(a, wide)]  # mixed shapes: pairwise


def test_compiled_tables_have_no_overlaps(df_compact):
    for name in df_compact.tables:
        assert check_overlaps(df_compact.flows(name)) == [], name


def test_describe_flow_is_readable():
    text = describe_flow(fl(table=1, priority=7, in_port=2, eth_dst=(B, MAC_EXACT),
                            actions=[SetField("eth_src", A), Output(OFPP_IN_PORT)], goto=3))
    assert "table=1" in text and "in_port=2" in text and "output:IN_PORT" in text and "goto_table:3" in text
