"""With fast-failover groups, a repair updates every switch whose groups or protected outputs change, not only
those whose compiled table changes (found by ``mininet/run_failures.py``: after a switch failure and a recovery
seen in two steps, ``g7s2`` kept the intermediate repair's plain ``output:7`` and two switches kept stale groups).

The detours are proved on the whole surviving fabric, so a failure elsewhere can take a switch's detour away
(or give one back) while its compiled table stays: such a switch is *regrouped* (in the last wave). Checked
here as the controller installs plans (each wave's switches get the plan's tables and groups): after every
repair each switch holds exactly what adapting the tables in force gives, and after the recovery exactly the
tables and groups of the config.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from hpcfabric.config import load_config
from hpcfabric.config.build import adapt_tables
from hpcfabric.repair.plan import Repairer
from hpcfabric.topology.failures import NO_FAILURES, parse_failures

from test_ops_fakes import ROOT

#: g7s3's fabric links go down with two earlier failures; its recovery is seen in two steps
SEQUENCE = [
    ["g1s2:4"],
    ["g1s2:4", "g0s0:5"],
    ["g1s2:4", "g0s0:5", "g0s3:4", "g1s3:3", "g7s0:7", "g7s1:7", "g7s2:7"],
    ["g0s0:5", "g7s0:7", "g7s1:7"],
    [],
]


@pytest.fixture(scope="module")
def cfg():
    c = load_config(ROOT / "configs" / "dragonfly-a4-p2-h2.conf")
    assert c.fast_failover and c.groups
    return c


def test_a_repair_regroups_switches_whose_compiled_tables_stay(cfg):
    rep = Repairer(cfg, prove=True)
    installed, groups = dict(cfg.desired), {s: tuple(g) for s, g in cfg.groups.items()}
    regrouped = 0
    for items in SEQUENCE:
        plan = rep.plan(parse_failures(cfg.fabric, items) if items else NO_FAILURES)
        assert plan.proven, (items, plan.verdict)
        rep.apply(plan)
        for wave in plan.waves:  # what the controller sends
            for s in wave:
                installed[s], groups[s] = plan.desired[s], tuple(plan.groups.get(s, ()))
        assert not set(plan.regrouped) & set(plan.changed)
        regrouped += len(plan.regrouped)
        want = adapt_tables(cfg, plan.compiled)
        stale = sorted(s for s in installed if installed[s] != want.desired[s])
        stale_groups = sorted(s for s in groups.keys() | want.groups.keys()
                              if groups.get(s, ()) != tuple(want.groups.get(s, ())))
        assert not stale and not stale_groups, (items, stale, stale_groups)
    assert regrouped > 0  # the sequence does need it (without regrouping it leaves g7s2 and two groups stale)
    assert installed == dict(cfg.desired)
    assert {s: g for s, g in groups.items() if g} == {s: tuple(g) for s, g in cfg.groups.items() if g}


def test_no_regrouping_without_groups_or_change(cfg):
    assert not Repairer(cfg, prove=False).plan(NO_FAILURES).regrouped  # the config's tables are what adapting gives
    plain = replace(cfg, fast_failover=False, groups={})
    plan = Repairer(plain, prove=False).plan(parse_failures(cfg.fabric, SEQUENCE[2]))
    assert not plan.regrouped and set(plan.desired) == set(plan.changed)
