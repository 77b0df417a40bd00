"""Repairs after failures are proven before they are installed (issue 27's property), exactly.

* random failure sets (1-8 links, 0-2 switches, seeded) on the shipped Dragonfly and Flattened Butterfly
  configs: every plan the controller would install is proven -- the whole-fabric union proof of its tables
  on the surviving fabric agrees (acyclic; delivered, or the lost pairs said) -- or it is refused with its
  reason; never installed unproven;
* the mutation: without the proof step, some installed table set has a dependency cycle (the property
  above fails on it);
* the incremental proof base stays exact through a sequence of failures and recoveries: its dependency
  graph (with counts), its nodes' depths and every column's reach equal a full walk of the tables in force;
* flap damping (pure) and ``hpcfabric prove --config --fail``.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys

import numpy as np
import pytest

from hpcfabric.config import load_config
from hpcfabric.failover.damping import FlapDamper
from hpcfabric.repair.plan import Repairer
from hpcfabric.topology.failures import Failures, parse_failures
from hpcfabric.verify.incremental.delta import ProofState
from hpcfabric.verify.incremental.depgraph import topo_rank
from hpcfabric.verify.union.proof import prove

from test_ops_fakes import ROOT

CONFIGS = ["dragonfly-a4-p2-h2.conf", "dragonfly-a2-p1-h1.conf", "fb-2d-4x4.conf", "fb-2d-3x3.conf"]


def random_failures(fabric, rng: random.Random) -> Failures:
    links = rng.sample(fabric.links, rng.randint(1, min(8, len(fabric.links) // 4)))
    switches = rng.sample([s.name for s in fabric.switches], rng.randint(0, 2))
    return Failures.of(fabric, [(link.a, link.a_port) for link in links], switches)


def check_plan(plan) -> str:
    """The property for one plan; returns its verdict."""
    verdict = plan.verdict.get("verdict")
    if not plan.proven:
        assert verdict in ("cycle", "misrouted", "no proven update order", "not proven", "not repairable")
        assert plan.verdict.get("explanation"), plan.verdict
        return verdict
    full = prove(plan.compiled, overlaps=False)
    assert full.acyclic, (plan.failures.describe(), full.cycle)
    assert not {k for k in full.undelivered if k != "dropped"}, full.undelivered
    assert (verdict == "proven") == full.delivered, (verdict, full.undelivered)
    return verdict


@pytest.mark.parametrize("name", CONFIGS)
def test_every_installed_table_set_is_proven(name):
    cfg = load_config(ROOT / "configs" / name)
    rep = Repairer(cfg, prove=True)
    rng = random.Random(27)
    seen: dict[str, int] = {}
    for _ in range(10):
        plan = rep.plan(random_failures(cfg.fabric, rng))
        v = check_plan(plan)
        seen[v] = seen.get(v, 0) + 1
        rep.discard(plan)
    if name.startswith("dragonfly"):  # the Dragonfly repairs prove
        assert seen.get("proven", 0) + seen.get("proven, pairs lost", 0) >= 8, seen


def test_without_the_proof_a_cycle_is_installed():
    """The mutation check: the same plans with the proof step removed install a table set with a dependency
    cycle (eight global links out: most groups miss a link, too few relays are clean, and the bypass routes
    of several lost group pairs chain through class 2)."""
    cfg = load_config(ROOT / "configs" / "dragonfly-a4-p2-h2.conf")
    failures = parse_failures(cfg.fabric, ["g4s1:4", "g6s0:4", "g5s0:3", "g1s2:4", "g1s3:3", "g1s1:3", "g2s0:3",
                                           "g0s0:4"])
    unproven = Repairer(cfg, prove=False).plan(failures)
    assert unproven.proven and unproven.verdict["verdict"] == "not checked"  # it would be installed
    with pytest.raises(AssertionError):
        check_plan(unproven)
    full = prove(unproven.compiled, overlaps=False)
    assert not full.acyclic and all(ch.endswith("@2") for ch in full.cycle)
    proven = Repairer(cfg, prove=True).plan(failures)  # the proof refuses those tables and finds others
    assert check_plan(proven) in ("proven", "proven, pairs lost")
    assert proven.verdict["redirect_detours"] is True


@pytest.mark.parametrize("name,seed", [("dragonfly-a4-p2-h2.conf", 7), ("dragonfly-a2-p1-h1.conf", 3)])
def test_incremental_base_stays_exact(name, seed):
    cfg = load_config(ROOT / "configs" / name)
    fabric = cfg.fabric
    rep = Repairer(cfg, prove=True)
    rng = random.Random(seed)
    links: set = set()
    switches: set = set()
    for _ in range(12):
        if (links or switches) and rng.random() < 0.35:
            if links and (not switches or rng.random() < 0.7):
                links.discard(rng.choice(sorted(links)))
            else:
                switches.discard(rng.choice(sorted(switches)))
        elif rng.random() < 0.85 or len(switches) >= 1:
            link = rng.choice(fabric.links)
            links.add((link.a, link.a_port))
        else:
            switches.add(rng.choice([s.name for s in fabric.switches]))
        plan = rep.plan(Failures.of(fabric, links, switches))
        assert plan.proven, plan.verdict
        rep.apply(plan)
        st, fresh = rep.state, ProofState.build(rep.compiled)
        assert np.array_equal(st.graph.edges, fresh.graph.edges) and np.array_equal(st.graph.count, fresh.graph.count)
        assert np.array_equal(st.graph.depth, topo_rank(fresh.graph.edges, st.ch.n_states))  # kept by the commits
        for c, col in enumerate(st.cols.names):
            got = set(st.reach[np.unpackbits(st.reached.row(c))[:len(st.reach)] == 1].tolist())
            f = fresh.cols.names.index(col)
            want = set(fresh.reach[np.unpackbits(fresh.reached.row(f))[:len(fresh.reach)] == 1].tolist())
            assert got == want, col


def test_flap_damping():
    d = FlapDamper(window=2.0, limit=3, hold=2.0, max_hold=30.0)
    k = ("s", 1)
    assert d.report(k, True, 0.0) and d.is_down(k, 0.0)
    assert d.report(k, False, 0.1) and not d.is_down(k, 0.1)  # a single bounce: back at once
    assert d.report(k, True, 0.2) and d.is_down(k, 0.2)  # the third change within 2 s: damped
    for i in range(8):  # keeps flapping (down, up, ... last up at 1.0): held down from the last change
        d.report(k, i % 2 == 0, 0.3 + i * 0.1)
    assert d.is_down(k, 1.0) and d.damped(1.0) == {k}
    assert d.is_down(k, 2.95) and not d.is_down(k, 3.05)
    assert d.next_change(1.0) == pytest.approx(3.0)
    d.report(k, True, 10.0)
    d.report(k, False, 10.1)
    d.report(k, True, 10.2)  # a second episode: the hold doubles
    d.report(k, False, 10.3)
    assert d.is_down(k, 14.25) and not d.is_down(k, 14.35)
    assert d.damped_total == 2
    assert not d.report(k, False, 20.0)  # no change, no event


def test_cli_prove_config_fail():
    cmd = [sys.executable, "-m", "hpcfabric.cli", "prove", "--config", str(ROOT / "configs" / "dragonfly-a2-p1-h1.conf")]
    got = subprocess.run(cmd + ["--fail", "g0s0:2", "--json"], capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, got.stderr
    out = json.loads(got.stdout)
    assert out["ok"] and out["failures"]["links"] == ["g0s0:2-g2s0:2"] and out["repair"]["proven"]
    assert out["repair"]["changed"] > 0 and out["tables"]["proven"]
    bad = subprocess.run(cmd + ["--fail", "g0s0:1"], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "host port" in bad.stderr and "Traceback" not in bad.stderr
    none = subprocess.run(cmd[:4] + ["--fail", "g0s0:2"], capture_output=True, text=True, timeout=300)
    assert none.returncode == 2 and "--config" in none.stderr


def test_planner_process_plans_for_the_text_its_controller_loaded(tmp_path):
    """The planner process loads the INI text the controller sends, not the file as it is by then (a reload
    may have failed on it meanwhile); a controller that goes away while it builds leaves no traceback."""
    from hpcfabric.repair.service import read_message, write_message

    good = (ROOT / "configs" / "dragonfly-a2-p1-h1.conf").read_text()
    conf = tmp_path / "c.conf"
    conf.write_text(good.replace("topology = ../topologies/", f"topology = {ROOT / 'topologies'}/")
                    + "\n[guards]\nsource_check = perhaps\n")  # what the file says now: invalid
    text = good.replace("topology = ../topologies/", f"topology = {ROOT / 'topologies'}/")
    cmd = [sys.executable, "-m", "hpcfabric.repair.service", str(conf)]
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    write_message(p.stdin, ("config", text))
    ready = read_message(p.stdout)
    assert ready and ready["ready"], p.stderr.read().decode()[-2000:]
    write_message(p.stdin, ("plan", parse_failures(load_config(ROOT / "configs" / "dragonfly-a2-p1-h1.conf").fabric,
                                                   ["g0s0:2"])))
    plan = read_message(p.stdout)
    assert plan["proven"] and plan["changed"]
    write_message(p.stdin, ("stop",))
    p.stdin.close()
    assert p.wait(30) == 0 and b"Traceback" not in p.stderr.read()
    # the controller gone before the planner is ready: it ends quietly
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    write_message(p.stdin, ("config", text))
    p.stdin.close()
    p.stdout.close()
    assert p.wait(60) == 0 and b"Traceback" not in p.stderr.read()
