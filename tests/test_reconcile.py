"""Desired vs installed flow tables."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcfabric.rules.port_state import port_state_flow
from hpcfabric.config import load_config
from hpcfabric.rules.flows import FlowSpec, Match, Output, RuleClass, make_cookie
from hpcfabric.openflow.reconcile import canonical, diff, is_ours

ROOT = Path(__file__).resolve().parent.parent
OURS = make_cookie(RuleClass.ROUTE, 3)


def route(prio: int, dst: int, port: int, cookie: int = OURS) -> FlowSpec:
    return FlowSpec(1, prio, Match(eth_dst=(dst, (1 << 48) - 1)), (Output(port),), cookie)


def test_empty_switch_gets_everything():
    want = [route(1000, 1, 1), route(1000, 2, 2)]
    d = diff(want, [])
    assert d.add == tuple(want) and not d.modify and not d.delete and not d.keep and d.changes == 2


def test_in_sync():
    want = [route(1000, 1, 1), route(1000, 2, 2)]
    d = diff(want, list(reversed(want)))
    assert d.in_sync and d.keep == tuple(want) and d.counts()["keep"] == 2


def test_changed_actions_cookie_goto_metadata_are_modifications():
    a = route(1000, 1, 1)
    cases = [
        FlowSpec(a.table, a.priority, a.match, (Output(9),), a.cookie),
        FlowSpec(a.table, a.priority, a.match, a.actions, make_cookie(RuleClass.ROUTE, 9)),
        FlowSpec(a.table, a.priority, a.match, (), a.cookie, goto=2),
        FlowSpec(a.table, a.priority, a.match, a.actions, a.cookie, write_metadata=(1, 0xFF)),
    ]
    for installed in cases:
        d = diff([a], [installed])
        assert d.modify == (a,) and not d.add and not d.delete and not d.keep


def test_stale_ours_deleted_foreign_untouched():
    foreign = FlowSpec(0, 5, Match(in_port=7), (Output(8),), cookie=0x1234)
    zero_cookie = FlowSpec(0, 6, Match(in_port=7), (Output(8),), cookie=0)
    stale = route(1000, 9, 9)
    d = diff([route(1000, 1, 1)], [stale, foreign, zero_cookie])
    assert d.delete == (stale,) and set(d.foreign) == {foreign, zero_cookie} and d.add == (route(1000, 1, 1),)
    assert not d.conflicts


def test_foreign_flow_on_our_key_is_a_conflict():
    want = route(1000, 1, 1)
    squatter = FlowSpec(want.table, want.priority, want.match, (Output(5),), cookie=0xBEEF)
    d = diff([want], [squatter])
    assert d.add == (want,) and d.conflicts == (squatter,) and d.foreign == (squatter,) and not d.delete


def test_same_match_other_priority_is_another_entry():
    a, b = route(1000, 1, 1), route(1001, 1, 1)
    d = diff([a], [b])
    assert d.add == (a,) and d.delete == (b,)


def test_zero_masks_are_wildcards():
    want = FlowSpec(1, 0, Match(), (), make_cookie(RuleClass.INFRA, 1))
    installed = FlowSpec(1, 0, Match(eth_dst=(0, 0), metadata=(0, 0)), (), make_cookie(RuleClass.INFRA, 1))
    assert canonical(installed) == want
    assert diff([want], [installed]).in_sync


def test_tagged_only_entry_is_another_key():
    """A CoS delivery entry (vlan_vid=0x1000/0x1000) and its untagged predecessor are different entries:
    switching a fabric to CoS adds the tagged one and deletes the old one; canonical keeps vlan_vid."""
    untagged = route(1000, 1, 1)
    tagged = FlowSpec(1, 1000, Match(eth_dst=(1, (1 << 48) - 1), vlan_vid=(0x1000, 0x1000)), untagged.actions, OURS)
    assert canonical(tagged) == tagged
    d = diff([tagged], [untagged])
    assert d.add == (tagged,) and d.delete == (untagged,) and not d.modify
    assert diff([tagged], [tagged]).in_sync


def test_duplicate_desired_keys_rejected():
    with pytest.raises(ValueError, match="share table"):
        diff([route(1000, 1, 1), route(1000, 1, 2)], [])
    assert diff([route(1000, 1, 1), route(1000, 1, 1)], []).changes == 1


def test_pause_flip_is_a_modification():
    d = diff([port_state_flow(3, True)], [port_state_flow(3, False)])
    assert d.modify == (port_state_flow(3, True),)


def test_is_ours():
    assert is_ours(route(1, 1, 1)) and not is_ours(route(1, 1, 1, cookie=0x4845 << 48))


def test_whole_fabric_round_trip():
    cfg = load_config(ROOT / "configs" / "dragonfly-a4-p2-h2.conf")
    for name, flows in cfg.desired.items():
        assert diff(flows, flows).in_sync
        d = diff(flows, flows[: len(flows) // 2])
        assert len(d.add) == len(flows) - len(flows) // 2 and not d.delete
        other = cfg.desired[next(n for n in cfg.desired if n != name)]
        d = diff(flows, other)
        assert len(d.add) + len(d.modify) + len(d.keep) == len(flows)
        assert len(d.delete) + len(d.modify) + len(d.keep) == len(other)
        break
