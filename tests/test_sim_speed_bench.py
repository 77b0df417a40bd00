"""bench/sim_speed.py's curve mode and projection (the figure's time = per point its ticks with the
figure's windows x the CPU per tick measured), on the 72-host Dragonfly (a few seconds)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_curves_and_projection() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench/sim_speed.py"), "--topology", str(ROOT / "topologies/dragonfly-a4-p2-h2.yaml"),
         "--curves", "MIN:uniform:0.1/0.4,COND-switch:adversarial:0.2,VAL:uniform:1.0", "--project", "--slots", "60",
         "--fig-warmup", "100", "--fig-window", "80", "--fig-drain", "50", "--seeds", "3", "--jobs", "2"],
        capture_output=True, text=True, check=True, cwd=ROOT).stdout
    lines = [json.loads(x) for x in out.splitlines()]
    curves = [x for x in lines if "points" in x]
    proj = next(x["projection"] for x in lines if "projection" in x)
    assert [(c["router"], c["pattern"], [p["load"] for p in c["points"]]) for c in curves] == [
        ("MIN", "uniform", [0.1, 0.4]), ("COND-switch", "adversarial", [0.2]), ("VAL", "uniform", [1.0])]
    pts = [p for c in curves for p in c["points"]]
    assert pts[0]["result"]["delivered"] > 0 and pts[0]["ticks"] > 120
    assert pts[0]["drain"] is not None and 0 < pts[0]["drain"] < 60  # low load: drains in a few frame times
    assert pts[3]["drain"] is None  # VAL at overload: measured frames left when its short drain ended
    rows = proj["points"]
    assert proj["points_per_seed"] == 4 and [r[:3] for r in rows] == [
        ["MIN", "uniform", 0.1], ["MIN", "uniform", 0.4], ["COND-switch", "adversarial", 0.2], ["VAL", "uniform", 1.0]]
    # ticks: the figure's warm-up (+1 for COND-switch's 200 ns reaction) + window + the drain measured, or all of it
    assert rows[0][3] == 100 + 80 + pts[0]["drain"]
    assert rows[2][3] == 101 + 80 + min(pts[2]["drain"], 50) if pts[2]["drain"] is not None else rows[2][3] == 101 + 80 + 50
    assert rows[3][3] == 100 + 80 + 50
    assert [r[4] for r in rows] == [p["cpu_ms_per_tick"] for p in pts]
    assert proj["ticks_per_seed"] == sum(r[3] for r in rows)
    cpu = sum(r[3] * r[4] for r in rows) / 1e3
    assert abs(proj["cpu_s_per_seed"] - cpu) < 0.06
    assert abs(proj["wall_min_two_free_cores"] - (cpu * 3 / 2 + proj["tables_s"]) / 60) < 0.06
    wall = sum(r[3] * p["ms_per_tick"] for r, p in zip(rows, pts)) / 1e3
    assert abs(proj["wall_s_per_seed_at_this_load"] - wall) < 0.06


def test_shared_points() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench/sim_speed.py"), "--topology", str(ROOT / "topologies/dragonfly-a4-p2-h2.yaml"),
         "--shared", "COND-controller:adversarial:0.2,COND-controller:uniform:0.2", "--fig-warmup", "500",
         "--fig-window", "500", "--fig-drain", "1000", "--seeds", "3"],
        capture_output=True, text=True, check=True, cwd=ROOT).stdout
    adv, un = [json.loads(x) for x in out.splitlines() if '"router"' in x]
    assert adv["seeds"] == 3 and len(set(adv["accepted"])) == 3  # three branches, three results
    assert adv["warmup_ticks"] > 10_500 and adv["settled"] is True and all(t > adv["warmup_ticks"] for t in adv["ticks"])
    assert abs(adv["tail_accepted"] - 0.2) < 0.01 and all(abs(a - 0.2) < 0.01 for a in adv["accepted"])
    # nothing paused: the reaction's 10,000 are skipped once two blocks after the base warm-up agree
    assert 500 + 2 * 500 <= un["warmup_ticks"] < 10_500 and un["settled"] is True
    assert 0 < adv["warmup_wall_s"] <= adv["wall_s"]
