"""The reconciliation planner (hpcfabric.openflow.syncplan): what a sync sends, without a switch or a channel."""

from __future__ import annotations

from types import SimpleNamespace

from hpcfabric.openflow import ofwire
from hpcfabric.openflow.syncplan import ADD, DELETE, DELETE_OPAQUE, plan_change, plan_groups, plan_meters, plan_sync
from hpcfabric.rules.flows import FlowSpec, Match, Output, RuleClass, make_cookie

OURS = make_cookie(RuleClass.ROUTE, 3)


def route(prio: int, dst: int, port: int, cookie: int = OURS) -> FlowSpec:
    return FlowSpec(1, prio, Match(eth_dst=(dst, (1 << 48) - 1)), (Output(port),), cookie)


def test_a_sync_deletes_first_then_the_opaque_entries_then_adds_and_modifies():
    keep, changed, new, stale = route(1000, 1, 1), route(1000, 2, 2), route(1000, 3, 3), route(1000, 9, 9)
    installed = [keep, FlowSpec(changed.table, changed.priority, changed.match, (Output(7),), OURS), stale]
    foreign = FlowSpec(0, 5, Match(in_port=7), (Output(8),), cookie=0x1234)
    ours_opaque = SimpleNamespace(cookie=make_cookie(RuleClass.GUARD, 1))  # a dumped entry no FlowSpec expresses
    learned = SimpleNamespace(cookie=make_cookie(RuleClass.LEARNED, 1))  # switch-local PAUSE state: not ours
    theirs_opaque = SimpleNamespace(cookie=0xBEEF)
    plan = plan_sync([keep, changed, new], installed + [foreign], [ours_opaque, learned, theirs_opaque])
    assert plan.messages() == [(DELETE, stale), (DELETE_OPAQUE, ours_opaque), (ADD, new), (ADD, changed)]
    assert plan.changes == 4 and plan.deleted == 2
    assert plan.foreign == 2  # the foreign FlowSpec and the foreign opaque entry; the learned one is not counted
    assert plan.diff.keep == (keep,)


def test_a_switch_in_sync_gets_nothing():
    want = [route(1000, 1, 1), route(1000, 2, 2)]
    plan = plan_sync(want, list(reversed(want)), [])
    assert plan.messages() == [] and plan.changes == 0 and plan.foreign == 0


def test_a_retired_switch_loses_every_flow_of_ours_and_nothing_else():
    ours = [route(1000, 1, 1), route(900, 2, 2)]
    foreign = FlowSpec(0, 5, Match(in_port=7), (Output(8),), cookie=0x1234)
    plan = plan_sync((), ours + [foreign], [])
    assert [k for k, _ in plan.messages()] == [DELETE, DELETE] and {f for _, f in plan.messages()} == set(ours)
    assert plan.changes == 2 and plan.foreign == 1


def test_a_repair_sends_only_what_differs_between_the_two_tables():
    a, b, c = route(1000, 1, 1), route(1000, 2, 2), route(1000, 3, 3)
    b2 = FlowSpec(b.table, b.priority, b.match, (Output(5),), OURS)
    plan = plan_change([a, b], [a, b2, c])
    assert plan.messages() == [(ADD, c), (ADD, b2)] and plan.changes == 2
    assert plan_change([a, b], [a]).messages() == [(DELETE, b)]


def test_meters_only_where_they_differ_modify_what_the_switch_has():
    plan = plan_meters({1: (100, 10), 2: (200, 0), 3: (50, 5)}, {1: (100, 10), 2: (300, 0)})
    assert plan == [(2, 200, 0, ofwire.OFPMC_MODIFY), (3, 50, 5, ofwire.OFPMC_ADD)]
    assert plan_meters({1: (100, 10)}, {1: (100, 10)}) == []


def test_groups_only_where_they_differ_modify_what_the_switch_has():
    b1 = ((1, (Output(1),)), (2, (Output(2),)))
    b2 = ((2, (Output(2),)), (1, (Output(1),)))
    plan = plan_groups({7: b1, 8: b2, 9: b1}, {7: b1, 8: b1})
    assert plan == [(8, b2, ofwire.OFPGC_MODIFY), (9, b1, ofwire.OFPGC_ADD)]
