"""Seeds branching from one shared warm-up (Simulator.run_branches, fig12 ``--seed-warmup``).

On the 72-host Dragonfly: seconds each.
"""

from __future__ import annotations

import csv
import json

import pytest

from hpcfabric.sim import kernel as K
from hpcfabric.sim.engine import Simulator, branch_seed
from hpcfabric.sim.params import SimParams
from hpcfabric.sim.sweep import Routers, run_branches, run_point, shares_warmup
from hpcfabric.sim.traffic import Traffic
from hpcfabric.topology.loader import load_topology

DF = "topologies/dragonfly-a4-p2-h2.yaml"
P = SimParams(warmup_slots=600, window_slots=600, drain_slots=1500)


@pytest.fixture(scope="module")
def df() -> Routers:
    return Routers(load_topology(DF))


def _key(r) -> tuple:
    return (r.latency_ns, r.p99_ns, r.accepted, r.generated, r.refused, r.delivered, r.hops, r.flips, r.ticks)


def test_branches_share_the_warm_up_and_differ_after_it(df: Routers) -> None:
    runs = run_branches(df, "COND-switch", "adversarial", 0.3, P, [0, 1, 2])
    again = run_branches(df, "COND-switch", "adversarial", 0.3, P, [0, 1, 2])
    assert [_key(r) for r in runs] == [_key(r) for r in again]  # deterministic per seed
    assert len({_key(r) for r in runs}) == 3  # three different replications after the branch point
    assert len({r.accepted for r in runs}) == 3 and len({r.latency_ns for r in runs}) == 3
    # the branch of seed 1 alone from the same warm-up gives seed 1's result of the three
    solo = run_branches(df, "COND-switch", "adversarial", 0.3, P, [0, 1])
    assert _key(solo[1]) == _key(runs[1])
    for r in runs:
        assert r.conserved and r.extra["warmup"] == "shared" and r.extra["lost"] == 0
        assert r.extra["tail_accepted"] == runs[0].extra["tail_accepted"] > 0  # one warm-up, measured once
        assert abs(r.extra["tail_accepted"] - r.accepted) < 0.05  # steady state: last warm-up block ~ window


def test_the_warm_up_state_is_the_same_as_a_plain_run_until_the_branch(df: Routers) -> None:
    # a plain run with seed 0 and the shared warm-up (seed 0's stream) agree on every frame generated
    # before the branch point: only after it do the streams part
    tr = Traffic(df.fabric, "uniform")
    p = Routers.params_for("MIN", P)
    plain = Simulator(df.router("MIN"), tr, p, seed=0)
    w0 = p.warmup_slots
    plain._begin(0.5)
    plain._advance(0.5, 0, w0, w0 + p.window_slots, w0 + p.window_slots + p.drain_slots, None)
    gen_at_w0 = int(plain.c[K.C_GEN])
    br = Simulator(df.router("MIN"), tr, p, seed=0)
    res = br.run_branches(0.5, [0, 1])
    full = run_point(df, "MIN", "uniform", 0.5, P, 0)
    assert gen_at_w0 > 0 and res[0].generated > gen_at_w0 and res[1].generated > gen_at_w0
    assert _key(res[0]) != _key(full)  # seed 0's branch draws from branch_seed(0), not the warm-up's stream
    assert branch_seed(0) != 0 and len({branch_seed(s) for s in range(100)}) == 100


def test_which_routers_share_a_warm_up() -> None:
    p = SimParams(warmup_slots=500, window_slots=500, drain_slots=1000)
    # the routers that flip on PAUSE: their steady state comes only after the PAUSEs have backed up
    assert all(shares_warmup(n, p) for n in ("COND-controller", "COND-ideal", "COND-switch"))
    assert not any(shares_warmup(n, p) for n in ("MIN", "VAL", "PB"))
    assert shares_warmup("MIN", p, "shared") and not shares_warmup("COND-controller", p, "own")


def test_cli_fig12_shared_warm_up_has_intervals_in_the_csv(tmp_path, capsys) -> None:
    from hpcfabric.cli import main

    rc = main(["analyze", "fig12", DF, "--out", str(tmp_path), "--routers", "MIN,COND-switch", "--seeds", "3",
               "--loads-un", "0.3", "--loads-adv", "0.2", "--warmup", "400", "--window", "400", "--drain", "800",
               "--seed-warmup", "shared", "--no-plots", "--jobs", "1"])
    assert rc == 0
    rows = list(csv.DictReader((tmp_path / "fig12.csv").open()))
    assert len(rows) == 4 and all(r["warmup"] == "shared" and r["seeds"] == "3" for r in rows)
    for r in rows:
        assert float(r["accepted_ci"]) > 0 and float(r["latency_ci_ns"]) > 0  # the seeds really differ
        if r["pattern"] == "uniform":  # in steady state: the warm-up's last block as the window
            assert abs(float(r["tail_accepted"]) - float(r["accepted"])) < 0.01
    adv = {r["router"]: r for r in rows if r["pattern"] == "adversarial"}
    # COND-switch under ADV: after 400 frame times it was still recovering (the flips draining the backlog,
    # accepted 0.03 above the tail); the shared warm-up goes on until two blocks agree: steady, tail ~ window
    assert adv["COND-switch"]["settled"] == "True" and int(adv["COND-switch"]["warmup_ticks"]) > 400
    assert abs(float(adv["COND-switch"]["accepted"]) - float(adv["COND-switch"]["tail_accepted"])) < 0.01
    data = json.loads((tmp_path / "fig12.json").read_text())
    assert data["shared_warmup"] == ["MIN", "COND-switch"]
    # own warm-ups (the former behaviour) are still what auto gives these routers
    rc = main(["analyze", "fig12", DF, "--out", str(tmp_path / "own"), "--routers", "MIN", "--seeds", "2",
               "--patterns", "uniform", "--loads-un", "0.3", "--warmup", "400", "--window", "400", "--drain", "800",
               "--no-plots", "--jobs", "1"])
    assert rc == 0
    own = list(csv.DictReader((tmp_path / "own" / "fig12.csv").open()))
    assert own[0]["warmup"] == "own" and own[0]["tail_accepted"] == "" and own[0]["warmup_ticks"] == "400"


def test_a_reaction_lengthened_warm_up_ends_early_only_when_nothing_paused(df: Routers) -> None:
    # COND-controller's warm-up is 600 + 10,000 frame times (2 ms reaction); at UN 0.2 no port pauses, so nothing
    # is pending: the branches start once two blocks after the base warm-up agree; under ADV ports pause at once:
    # full length, then until two blocks agree
    p = SimParams(warmup_slots=600, window_slots=600, drain_slots=1500)
    un = run_branches(df, "COND-controller", "uniform", 0.2, p, [0, 1])
    w = un[0].extra["warmup_ticks"]
    assert 600 + 2 * 600 <= w < 10_600 and (w - 600) % 600 == 0 and un[0].extra["settled"] is True
    assert all(r.extra["warmup_ticks"] == w and r.flips == 0 and r.conserved for r in un)
    assert abs(un[0].extra["tail_accepted"] - 0.2) < 0.03  # the tail: the last agreeing block
    adv = run_branches(df, "COND-controller", "adversarial", 0.3, p, [0, 1])
    # the full 10,600 (its last block included), then window-long blocks until two agree
    w = adv[0].extra["warmup_ticks"]
    assert w >= 10_600 + 600 and (w - 10_600) % 600 == 0 and adv[0].extra["settled"] is True
    assert all(r.extra["warmup_ticks"] == w and r.flips > 0 and r.conserved for r in adv)
    assert adv[0].ticks >= w + 600 and _key(adv[0]) != _key(adv[1])
    # COND-controller under ADV after its full warm-up: in steady state (last warm-up block ~ window)
    assert abs(adv[0].extra["tail_accepted"] - adv[0].accepted) < 0.03


def test_a_network_filling_towards_its_first_pause_is_not_steady(df: Routers) -> None:
    # ADV 0.15 is over the 72-host Dragonfly's minimal bound (1/8): after a base warm-up of 100 frame times no
    # port has paused yet, but the queues behind each group's global link are still growing. Ending the warm-up
    # there (as a check of "nothing paused" alone did) measured MIN's plateau: 0.119 accepted, no flip
    # (Table III's default Fig. 12 had COND-controller "saturated" at ADV 0.02 so). It must go on until the
    # PAUSEs come, the rules flip and two blocks agree.
    p = SimParams(warmup_slots=100, window_slots=100, drain_slots=1500)
    runs = run_branches(df, "COND-controller", "adversarial", 0.15, p, [0, 1])
    for r in runs:
        assert r.extra["warmup_ticks"] > 10_100 and r.extra["settled"] is True
        assert r.flips > 0 and abs(r.accepted - 0.15) < 0.01 and r.conserved
