"""A repair's tables travel as patches of the tables in force (hpcfabric.repair.patch), and the installer passes kept
entries over by identity (hpcfabric.openflow.syncplan.plan_change): the same tables and the same flow-mods as
sending them whole, a fraction of the pickle."""

from __future__ import annotations

import pickle
import random
from pathlib import Path

import pytest

from hpcfabric.config import load_config
from hpcfabric.openflow.reconcile import diff
from hpcfabric.openflow.syncplan import plan_change
from hpcfabric.repair.patch import PatchMismatch, make_patch, rebuild, table_digest
from hpcfabric.repair.plan import Repairer
from hpcfabric.repair.service import slim
from hpcfabric.rules.flows import FlowSpec, Match, Output, RuleClass, make_cookie
from hpcfabric.topology.failures import Failures

ROOT = Path(__file__).resolve().parent.parent

OURS = make_cookie(RuleClass.ROUTE, 3)


def route(prio: int, dst: int, port: int) -> FlowSpec:
    return FlowSpec(1, prio, Match(eth_dst=(dst, (1 << 48) - 1)), (Output(port),), OURS)


def edited(rng: random.Random, old: list[FlowSpec]) -> list[FlowSpec]:
    """``old`` with some entries dropped, some changed in place (same key, another port), some added, equal copies of
    the rest (as the planner's compile makes them: equal, not the same objects)."""
    out = []
    for f in old:
        r = rng.random()
        if r < 0.1:
            continue
        out.append(FlowSpec(f.table, f.priority, f.match, (Output(99),), OURS) if r < 0.2 else
                   FlowSpec(f.table, f.priority, f.match, f.actions, f.cookie))
    for k in range(rng.randrange(4)):
        out.insert(rng.randrange(len(out) + 1), route(500, 10_000 + k, 7))
    return out


@pytest.mark.parametrize("seed", range(20))
def test_a_rebuilt_table_equals_the_new_one_and_keeps_the_old_objects(seed):
    rng = random.Random(seed)
    old = [route(1000, d, d % 5) for d in range(rng.randrange(0, 60))]
    new = edited(rng, old)
    patch = pickle.loads(pickle.dumps(make_patch(old, new)))  # as it crosses the pipe
    got = rebuild(tuple(old), patch)
    assert got == tuple(new)
    mine = {id(f) for f in old}
    assert sum(id(f) in mine for f in got) == sum(f in set(old) for f in new)  # every kept entry: the old object
    # the installer's diff: the same flow-mods as against the whole new table
    assert plan_change(old, got).messages() == plan_change(old, new).messages()
    assert plan_change(old, got).changes == diff(new, old).changes


def test_a_patch_for_another_table_is_refused():
    old = tuple(route(1000, d, 1) for d in range(10))
    patch = make_patch(old, old[:5])
    with pytest.raises(PatchMismatch):
        rebuild(old[:9], patch)
    with pytest.raises(PatchMismatch):
        rebuild(old, (10, table_digest(old), ((4, 12),)))


def test_a_patch_for_a_table_of_the_same_length_but_other_entries_is_refused():
    old = tuple(route(1000, d, 1) for d in range(10))
    patch = make_patch(old, old[:5] + (route(500, 99, 2),))
    other = old[:3] + (route(1000, 3, 2),) + old[4:]  # one entry's action differs: the same length
    assert len(other) == len(old) and table_digest(other) != table_digest(old)
    with pytest.raises(PatchMismatch, match="digest"):
        rebuild(other, patch)
    assert rebuild(tuple(old), patch) == old[:5] + (route(500, 99, 2),)  # equal copies of the table fit
    assert table_digest(tuple(FlowSpec(f.table, f.priority, f.match, f.actions, f.cookie) for f in old)) == \
        table_digest(old)
    assert table_digest(old[1:] + old[:1]) != table_digest(old)  # the order counts


DIGEST = """
import sys
from hpcfabric.repair.patch import table_digest
from hpcfabric.rules.flows import FlowSpec, Match, Output, SetField, PushVlan
t = (FlowSpec(1, 10, Match(in_port=3, eth_dst=(5, 7)), (SetField("vlan_pcp", 2), PushVlan(), Output(4)), 9, None, None),
     FlowSpec(0, 1, Match(), (), 0, 2, (1, 3), 5))
print(table_digest(t).hex())
"""


def test_the_digest_is_the_same_in_every_process():
    import os
    import subprocess
    import sys

    seen = {subprocess.run([sys.executable, "-c", DIGEST], capture_output=True, text=True, check=True, cwd=ROOT,
                           env=dict(os.environ, PYTHONHASHSEED=str(seed))).stdout.strip() for seed in (1, 2, 3)}
    assert len(seen) == 1 and len(next(iter(seen))) == 32


def test_a_plans_patches_rebuild_its_tables_from_the_controllers_and_are_smaller(tmp_path):
    path = tmp_path / "c.conf"
    path.write_text(f"[hpcfabric]\ntopology = {ROOT / 'topologies' / 'dragonfly-a4-p2-h2.yaml'}\n"
                    "routing = conditional\n")
    config = load_config(str(path), deadlock=False)
    rep = Repairer(config, prove=False)
    link = next(link for link in config.fabric.links if link.kind == "global")
    plan = rep.plan(Failures.of(config.fabric, [(link.a, link.a_port)]))
    assert plan.desired
    whole, patched = slim(plan), slim(plan, rep.desired)
    assert "desired" not in patched and set(patched["patches"]) == set(plan.desired)
    assert len(pickle.dumps(patched)) < len(pickle.dumps(whole)) / 3
    # the controller's copy of the tables in force: a config loaded on its own (other objects, equal tables)
    mine = load_config(str(path), deadlock=False).desired
    got = {s: rebuild(mine[s], p) for s, p in pickle.loads(pickle.dumps(patched))["patches"].items()}
    assert got == dict(plan.desired)
    for s, table in got.items():
        assert plan_change(mine[s], table).messages() == plan_change(mine[s], plan.desired[s]).messages()


def test_a_patch_that_does_not_fit_the_controllers_table_is_asked_for_whole(tmp_path, caplog):
    """The controller's table in force for a changed switch differs from the planner's (here: one entry short): its
    patch is refused, the table comes whole from the planner process, and the switch ends up with the plan's table."""
    import logging

    from test_ops_failover import port_status
    from test_ops_fakes import fake_fabric, ours, wait_reroute

    from hpcfabric.openflow.reconcile import canonical

    app, sws = fake_fabric(tmp_path)
    try:
        link = next(link for link in app.fabric.links if link.kind == "global")
        expected = Repairer(app.config, prove=False).plan(Failures.of(app.fabric, [(link.a, link.a_port)]))
        victim = expected.changed[0]
        app.state.tables.repaired[victim] = app.config.desired[victim][:-1]  # not what the planner holds
        with caplog.at_level(logging.ERROR, logger="hpcfabric.controller"):
            port_status(sws[link.a], link.a_port, True)
            port_status(sws[link.b], link.b_port, True)
            wait_reroute(app)
        st = app.status()["failover"]
        assert st["repairs"] == 1 and st["last"]["installed"], st
        assert any("asked for whole" in r.getMessage() and victim in r.getMessage() for r in caplog.records)
        assert app.state.tables.repaired[victim] == expected.desired[victim]
        for n in expected.changed:
            assert ours(sws[n].table()) == {canonical(f) for f in expected.desired[n]}, n
    finally:
        app.stop()
