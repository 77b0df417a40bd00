"""One repair planner for the partitions of a host (hpcfabric.repair.shared.SharedPlanner), in process: a failure set
is planned once, each partition gets the patches of its switches against the tables IT has in force -- equal to what
a single controller installs there --, a controller one plan behind gets both plans' changes, one whose epoch the
planner does not know gets its tables whole, and an unproven plan is refused for every partition (planned once)."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest

from hpcfabric.config import load_config
from hpcfabric.repair.patch import PatchMismatch, rebuild
from hpcfabric.repair.plan import Repairer
from hpcfabric.repair.shared import SharedPlanner
from hpcfabric.topology.failures import Failures, parse_failures
from hpcfabric.topology.partition import partition_fabric

ROOT = Path(__file__).resolve().parent.parent
EIGHT = ["g4s1:4", "g6s0:4", "g5s0:3", "g1s2:4", "g1s3:3", "g1s1:3", "g2s0:3", "g0s0:4"]  # test_repair_refused


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    path = tmp_path_factory.mktemp("shared") / "c.conf"
    path.write_text(f"[hpcfabric]\ntopology = {ROOT / 'topologies' / 'dragonfly-a4-p2-h2.yaml'}\nrouting = conditional\n"
                    "[guards]\nsource_check = on\npunt_meters = on\n")
    return load_config(str(path), deadlock=False)


def parts(config) -> list[frozenset[str]]:
    return [frozenset(p.switches) for p in partition_fabric(config.fabric, 2)]


def link_down(config, *kinds: str) -> Failures:
    """The first link of each kind; a global one between the two partitions."""
    a, _ = parts(config)
    links = [next(x for x in config.fabric.links if x.kind == kind and (kind != "global" or (x.a in a) != (x.b in a)))
             for kind in kinds]
    return Failures.of(config.fabric, [(link.a, link.a_port) for link in links])


def installed(reply, in_force) -> dict:
    """What the controller rebuilds of a reply (as it crossed the socket) from its tables in force."""
    reply = pickle.loads(pickle.dumps(reply))
    out = {s: rebuild(in_force[s], p) for s, p in reply["patches"].items()}
    out.update(reply["desired"])
    return out


def test_a_failure_is_planned_once_and_each_partition_gets_what_one_controller_installs(config):
    shared = SharedPlanner(Repairer(config, prove=True), True, "gen-a")
    solo = Repairer(config, prove=True)  # one controller for the whole fabric
    failures = link_down(config, "global")
    expected = solo.plan(failures)
    assert expected.proven and expected.desired
    got: dict = {}
    for names in parts(config):
        reply = shared.plan(failures, None, names)
        assert reply["proven"] and reply["epoch"] == 1 and reply["generation"] == "gen-a"
        mine = installed(reply, config.desired)
        assert set(mine) == set(expected.desired) & names  # its switches only
        assert set(reply["changed"]) <= names and all(set(w) <= names for w in reply["waves"])
        got.update(mine)
    assert shared.plans == 1  # planned once for both partitions
    assert got == dict(expected.desired)
    assert any(set(expected.desired) & names for names in parts(config)[1:])  # the other partition had changes too


def test_a_controller_one_plan_behind_gets_both_plans_changes(config):
    shared = SharedPlanner(Repairer(config, prove=True), True, "gen-b")
    solo = Repairer(config, prove=True)
    first, second = link_down(config, "global"), link_down(config, "global", "local")
    p1 = solo.plan(first)
    solo.apply(p1)
    p2 = solo.plan(second)
    solo.apply(p2)
    assert p1.proven and p2.proven
    a, b = parts(config)
    tables_a, tables_b = dict(config.desired), dict(config.desired)
    reply = shared.plan(first, None, a)  # A installs plan 1
    tables_a.update(installed(reply, tables_a))
    at_a = (reply["generation"], reply["epoch"])
    stale = shared.plan(second, at_a, a)  # A asks plan 2 (B has not even installed plan 1)
    tables_a.update(installed(stale, tables_a))
    behind = shared.plan(second, None, b)  # B: from the compiled tables straight to plan 2
    assert shared.plans == 2 and behind["epoch"] == stale["epoch"] == 2
    tables_b.update(installed(behind, tables_b))
    for names, tables in ((a, tables_a), (b, tables_b)):
        assert {s: tables[s] for s in names} == {s: solo.desired[s] for s in names}
    moved = set(p1.desired) & b
    assert moved and moved <= set(behind["patches"])  # plan 1's changes of B's switches came with plan 2
    # A's patch (made for its tables after plan 1) does not fit B's tables of the compiled fabric
    s = next(s for s in stale["patches"] if s in p1.desired)
    with pytest.raises(PatchMismatch):
        rebuild(config.desired[s], stale["patches"][s])


def test_a_controller_of_another_planner_generation_gets_its_repaired_tables_whole(config):
    shared = SharedPlanner(Repairer(config, prove=True), True, "gen-c")
    a, _ = parts(config)
    failures = link_down(config, "global")
    solo = Repairer(config, prove=True)
    plan = solo.plan(failures)
    held = sorted(a)[:3]  # tables this controller holds repaired from a planner that died
    reply = shared.plan(failures, ("gen-dead", 4), a, held)
    assert not reply["patches"] and set(reply["desired"]) == (set(plan.desired) & a) | set(held)
    assert all(reply["desired"][s] == plan.desired.get(s, config.desired[s]) for s in reply["desired"])


def test_an_unproven_plan_is_refused_for_every_partition_and_planned_once(config):
    rep = Repairer(config, prove=True)
    rep.plan = lambda failures: rep._plan(failures, redirect=False)  # bypasses only: a cycle (test_repair_refused)
    shared = SharedPlanner(rep, True, "gen-d")
    failures = parse_failures(config.fabric, EIGHT)
    replies = [shared.plan(failures, None, names) for names in parts(config)]
    assert shared.plans == 1 and all(not r["proven"] and r["verdict"]["verdict"] == "cycle" for r in replies)
    assert all("patches" not in r and "desired" not in r for r in replies)  # nothing to install
    assert shared.epochs.head == 0 and rep.failures != failures  # the tables in force stay


def _planner_config(tmp_path, failover: str, ha: str = "") -> Path:
    path = tmp_path / "p.conf"
    path.write_text(f"[hpcfabric]\ntopology = {ROOT / 'topologies' / 'dragonfly-a4-p2-h2.yaml'}\n"
                    f"[failover]\n{failover}\n[ha]\n{ha}\n")
    return path


def test_the_planner_key_resolves_and_refuses_bad_values_in_one_line(tmp_path):
    import subprocess
    import sys

    from hpcfabric.errors import ConfigError

    parted = f"partitions = 2\npartition = 1\nlease_file = {tmp_path / 'lease'}\n"
    assert load_config(_planner_config(tmp_path, ""), compile=False).planner == "own"  # one controller
    assert load_config(_planner_config(tmp_path, "", parted), compile=False).planner == "shared"  # auto, partitioned
    assert load_config(_planner_config(tmp_path, "planner = own", parted), compile=False).planner == "own"
    got = load_config(_planner_config(tmp_path, f"planner = shared\nfailures_dir = {tmp_path / 'f'}"), compile=False)
    assert got.planner == "shared" and got.failures_dir == str(tmp_path / "f")
    deep = tmp_path / ("d" * 90)
    assert load_config(_planner_config(tmp_path, f"failures_dir = {deep}", parted), compile=False).planner == "own"
    for failover, field in (("planner = sometimes", "failover.planner"), ("planner = shared", "failover.planner"),
                            (f"planner = shared\nfailures_dir = {deep}", "failover.failures_dir")):
        with pytest.raises(ConfigError) as err:
            load_config(_planner_config(tmp_path, failover), compile=False)
        assert err.value.field == field
    run = subprocess.run([sys.executable, "-m", "hpcfabric.cli", "check", str(_planner_config(tmp_path, "planner = x"))],
                         capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1 and "failover.planner" in run.stderr
    assert "auto, own, shared" in run.stderr and "Traceback" not in run.stderr


def test_the_planner_socket_is_the_owners_only(tmp_path):
    """Requests and replies are pickles: nobody but the controllers' user may connect (mode 0600 from the bind on)."""
    import stat

    from hpcfabric.repair.shared import Server

    path = str(tmp_path / "planner.sock")
    server = Server(path)
    try:
        assert stat.S_ISSOCK(os.stat(path).st_mode)
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    finally:
        server.sock.close()
