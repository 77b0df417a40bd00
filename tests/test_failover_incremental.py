"""Fast-failover groups after a repair, kept between analyses (:class:`hpcfabric.failover.groups.FailoverAnalysis`).

* random failure sets (links and switches, seeded) and recoveries, repaired by the real planner (the
  surviving fabric compiled, guards added as at load): the kept analysis gives exactly what an analysis
  from scratch gives -- tables, groups, protected and unprotected ports -- repair after repair;
* the mutation: an analysis that does not process again the steps of a switch whose tables changed
  (forgets to invalidate it) differs from the analysis from scratch on some repair;
* an error (tables the pipeline refuses) drops the kept state: the next analysis is again exact;
* the repairer keeps one analysis between its plans, and its groups equal those of a fresh adapt;
* frames that stand for several hosts (none on the shipped fabrics; made here by eth_dst rewrites): random
  table edits, kept analysis equal to a fresh one.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from hpcfabric.config import load_config
from hpcfabric.config.build import adapt_tables
from hpcfabric.failover.detours import DetourAnalysis
from hpcfabric.failover.groups import FailoverAnalysis, fast_failover_groups
from hpcfabric.repair.plan import Repairer
from hpcfabric.rules.flows import FlowSpec, Match
from hpcfabric.topology.failures import NO_FAILURES, Failures
from hpcfabric.verify.reference.pipeline import PipelineError

from test_ops_fakes import ROOT

CONFIGS = ["dragonfly-a4-p2-h2.conf", "fb-2d-4x4.conf", "fat-tree-k4.conf"]


def failure_sets(fabric, rng: random.Random, n: int) -> list[Failures]:
    """``n`` failure sets: one link, three links, a switch (and links), everything back, at random."""
    out = []
    for _ in range(n):
        kind = rng.choice(["link", "links", "switch", "back"])
        if kind == "back":
            out.append(NO_FAILURES)
            continue
        links = rng.sample(fabric.links, {"link": 1, "links": 3, "switch": rng.randint(0, 1)}[kind])
        switches = rng.sample([s.name for s in fabric.switches], 1 if kind == "switch" else 0)
        out.append(Failures.of(fabric, [(link.a, link.a_port) for link in links], switches))
    return out


def repaired_tables(name: str, n: int, seed: int):
    """The config, then the tables (as installed, before groups) after each of ``n`` random repairs."""
    cfg = load_config(ROOT / "configs" / name)
    plain = replace(cfg, fast_failover=False)
    rep = Repairer(plain, prove=False)
    rng = random.Random(seed)
    seq = [(NO_FAILURES, adapt_tables(plain, rep.compiled).desired)]
    for failures in failure_sets(cfg.fabric, rng, n):
        plan = rep.plan(failures)
        rep.apply(plan)
        seq.append((failures, adapt_tables(plain, plan.compiled).desired))
    return cfg, rep.compiled, seq


def same(a, b) -> bool:
    return (dict(a.flows), dict(a.groups), dict(a.protected), dict(a.unprotected)) == \
        (dict(b.flows), dict(b.groups), dict(b.protected), dict(b.unprotected))


def run(cfg, compiled, seq) -> list[tuple[str, bool, dict]]:
    """Each repair's tables through one kept analysis, against an analysis from scratch."""
    macs = dict(cfg.real_macs)
    kept = FailoverAnalysis(compiled, source_macs=macs)
    out = []
    for failures, tables in seq:
        got = kept.update(tables)
        fresh = fast_failover_groups(compiled, tables, source_macs=macs)
        assert fresh.stats()["groups"]  # the comparison is about real groups
        out.append((failures.describe() if failures else "none", same(got, fresh), kept.stats))
    return out


@pytest.mark.parametrize("name", CONFIGS)
def test_kept_analysis_equals_a_fresh_one_after_random_repairs(name):
    cfg, compiled, seq = repaired_tables(name, 6, seed=27)
    results = run(cfg, compiled, seq)
    assert all(ok for _, ok, _ in results), results
    assert any(st["switches_changed"] for _, _, st in results[1:])  # repairs did change tables
    # redone only in part: some repair re-walked less than everything
    assert any(0 < st["switches_changed"] < len(cfg.fabric.switches) for _, _, st in results[1:]), results


def test_forgetting_a_changed_switch_is_caught(monkeypatch):
    """The mutation: steps of changed switches are never processed again -> some repair differs."""
    cfg, compiled, seq = repaired_tables("dragonfly-a4-p2-h2.conf", 6, seed=27)
    monkeypatch.setattr(DetourAnalysis, "_restep", lambda self, sw, prev, pipe: [])
    results = run(cfg, compiled, seq)
    assert not all(ok for _, ok, _ in results), results


def test_an_error_drops_the_kept_state():
    cfg, compiled, seq = repaired_tables("fb-2d-3x3.conf", 2, seed=5)
    macs = dict(cfg.real_macs)
    kept = FailoverAnalysis(compiled, source_macs=macs)
    kept.update(seq[0][1])
    bad = dict(seq[1][1])
    sw = sorted(bad)[0]
    bad[sw] = bad[sw] + (FlowSpec(3, 1, Match(), (), goto=1),)  # goto backwards: the pipeline refuses it
    with pytest.raises(PipelineError):
        kept.update(bad)
    assert not kept.detours.flows  # dropped
    got = kept.update(seq[1][1])
    assert kept.stats["switches_changed"] == len(seq[1][1])  # from scratch
    assert same(got, fast_failover_groups(compiled, seq[1][1], source_macs=macs))


def test_the_repairer_keeps_one_analysis():
    cfg = load_config(ROOT / "configs" / "fb-2d-3x3.conf")
    rep = Repairer(cfg, prove=False)
    kept = rep.failover_analysis()  # what the planner process does before it is ready
    assert kept is not None and kept.stats["switches_changed"] == len(cfg.fabric.switches)
    link = cfg.fabric.links[0]
    plan = rep.plan(Failures.of(cfg.fabric, [(link.a, link.a_port)]))
    assert rep.failover is kept and 0 < kept.stats["switches_changed"] < len(cfg.fabric.switches)
    fresh = adapt_tables(cfg, plan.compiled)
    assert dict(plan.groups) == dict(fresh.groups)
    assert {s: plan.desired[s] for s in plan.changed} == {s: fresh.desired[s] for s in plan.changed}


def test_frames_standing_for_several_hosts_stay_exact():
    """Where one frame stands for several hosts (here: switches that rewrite eth_dst on some routes), the host
    of the last walk counts, as in one pass; random table edits keep the kept analysis equal to a fresh one."""
    from hpcfabric.rules.addressing import plan_addresses
    from hpcfabric.rules.compiler import compile_fabric
    from hpcfabric.rules.flows import TABLE_ROUTE, Output, SetField
    from hpcfabric.topology.loader import load_topology

    fab = load_topology(ROOT / "topologies" / "explicit-ring4.yaml")
    plan = plan_addresses(fab, "compact")
    comp = compile_fabric(fab, plan, routing="minimal")
    base = {n: t.flows for n, t in comp.tables.items()}
    macs = sorted(plan.host_mac.values())
    rng = random.Random(3)
    tables, kept, seen = dict(base), FailoverAnalysis(comp), 0
    for _ in range(12):
        sw = rng.choice(sorted(tables))
        routes = [i for i, f in enumerate(base[sw]) if f.table == TABLE_ROUTE and
                  any(isinstance(a, Output) and a.port != 1 for a in f.actions)]
        flows = list(tables[sw])
        for i in rng.sample(routes, rng.randint(0, len(routes))):  # these routes rewrite eth_dst (or stop)
            f = base[sw][i]
            flows[i] = f if rng.random() < 0.3 else replace(f, actions=(SetField("eth_dst", rng.choice(macs)),
                                                                         *f.actions))
        tables[sw] = tuple(flows)
        got = kept.update(tables)
        seen += len(kept.detours.ambiguous)
        assert same(got, fast_failover_groups(comp, tables))
    assert seen  # the case was there
