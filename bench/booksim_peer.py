#!/usr/bin/env python3
"""BookSim2 side by side with hpcfabric's simulator: same fabric, routing, pattern and load, in one run.

Fabric: BookSim2's ``dragonflynew`` (k=2: 72 hosts, k=4: 1,056, k=8: 16,512 = Table III) and
:func:`hpcfabric.sim.booksim.booksim_dragonfly`, the same wiring in our model; our parameters in
BookSim's units (:func:`hpcfabric.sim.booksim.booksim_params`: frame time = cycle = 200 ns,
local/global/terminal links 10/100/1 cycles, 3-cycle router, 256-frame buffers per class and
port). Routers: ``MIN`` (our compiled minimal tables) vs BookSim ``min``; ``VAL-R`` vs ``val4``
(the same random-intermediate Valiant, our reference implementation; ``val4``/``ugal4`` are the
runner's deadlock-free versions of BookSim's ``val``/``ugal``, :mod:`hpcfabric.sim.booksim`);
``VAL`` (our compiled Valiant, fixed intermediates) vs ``val4``; ``UGAL-L`` vs ``ugal4`` (the same
algorithm) and ``PB`` (ours) vs ``ugal4``. Every point runs BookSim once (``dragonfly_base.cfg``,
its convergence rules) and ours once per switch model (``iq``, BookSim's router with a calibrated
output queue, first and timed; ``iqvc``, BookSim's router with its VC allocation per output VC and its
output buffer bound only by credits, within 5 % of every BookSim saturation point at BookSim's horizon,
below); one JSON line per point: both accepted loads (flits/cycle/node =
fraction of the link rate), both mean latencies in cycles and ns, cycles simulated, wall times,
and the ratio BookSim wall / ours (the default model's). BookSim runs one at a time beside
nothing of ours (both single-threaded). Last line: the targets (saturation points within 5 % /
PB within 10 %, >= 10x faster per point at k=4 and k=8).

    .venv/bin/python bench/booksim_peer.py [--k 2,4,8] [--points NAME,...] [--models iq,iqvc,shared,voq,fifo]
        [--booksim-timeout S] [--sample-period N] [--warmup N --window N] [--seed N]  # under flock /tmp/hpcfabric-bench.lock

Ours measures the window after its warm-up (default 2,000 + 2,000 cycles; k=8 1,500 + 1,000). BookSim
measures from the end of its 3 warm-up sample periods to its convergence (with ``--sample-period
2000``: cycles 6,000 to 12,000-17,600); ``--warmup 6000 --window 8000`` measures ours over that span:
at overload the 256-frame buffers fill for thousands of cycles, so the horizon moves saturation
points by up to 10 % (docs/simulation.md).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hpcfabric.sim.booksim import CYCLE_NS, BookSim, booksim_dragonfly, booksim_params  # noqa: E402
from hpcfabric.sim.sweep import Routers, run_point  # noqa: E402

#: (name, k, our router, pattern, load, role): role 'sat' = offered above saturation (accepted is the
#: saturation throughput), 'low' = low load (latency), 'mid' = below saturation
POINTS = [
    ("k2-min-un-low", 2, "MIN", "uniform", 0.1, "low"),
    ("k2-min-un-sat", 2, "MIN", "uniform", 1.0, "sat"),
    ("k2-min-adv-sat", 2, "MIN", "adversarial", 0.3, "sat"),
    ("k2-valr-un-mid", 2, "VAL-R", "uniform", 0.3, "mid"),
    ("k2-valr-un-sat", 2, "VAL-R", "uniform", 1.0, "sat"),
    ("k2-valr-adv-sat", 2, "VAL-R", "adversarial", 0.6, "sat"),
    ("k2-val-adv-sat", 2, "VAL", "adversarial", 0.6, "sat"),
    ("k2-ugal-adv-sat", 2, "UGAL-L", "adversarial", 0.6, "sat"),
    ("k2-pb-adv-sat", 2, "PB", "adversarial", 0.6, "sat"),
    ("k4-min-un-low", 4, "MIN", "uniform", 0.1, "low"),
    ("k4-min-un-sat", 4, "MIN", "uniform", 1.0, "sat"),
    ("k4-min-adv-sat", 4, "MIN", "adversarial", 0.1, "sat"),
    ("k4-valr-adv-sat", 4, "VAL-R", "adversarial", 0.6, "sat"),
    ("k4-ugal-adv-sat", 4, "UGAL-L", "adversarial", 0.6, "sat"),
    ("k4-pb-adv-sat", 4, "PB", "adversarial", 0.6, "sat"),
    ("k8-min-adv-sat", 8, "MIN", "adversarial", 0.02, "sat"),
]
BOOKSIM_OF = {"MIN": "min", "VAL-R": "val4", "VAL": "val4", "UGAL-L": "ugal4", "PB": "ugal4"}


def ours(rt: Routers, router: str, pattern: str, load: float, model: str, k: int, warmup: int | None = None,
         window: int | None = None, seed: int = 1) -> dict:
    # windows in cycles: long enough for 100-cycle global links (a zero-load path is ~130 cycles)
    warm, window0, drain = (2000, 2000, 4000) if k < 8 else (1500, 1000, 3000)
    warm = warm if warmup is None else warmup
    window = window0 if window is None else window
    p = booksim_params(warmup_slots=warm, window_slots=window, drain_slots=drain, switch=model)
    r = run_point(rt, router, pattern, load, p, seed=seed)
    return {"accepted": round(r.accepted, 4), "latency_cycles": round(r.latency_ns / CYCLE_NS, 1),
            "latency_ns": round(r.latency_ns), "cycles": r.ticks, "wall_s": round(r.wall_s, 2),
            "lost": r.bad + r.overflow, "deadlock": bool(r.deadlock), "unfinished": r.unfinished}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", default="2,4,8", help="BookSim k values to run (2,4,8)")
    ap.add_argument("--points", default=None, help="point names (default: all of the chosen k)")
    ap.add_argument("--models", default="iq,iqvc,shared,voq,fifo", help="our switch models; the first one is timed against BookSim")
    ap.add_argument("--warmup", type=int, default=None, help="our warm-up in cycles (default 2,000; k=8 1,500)")
    ap.add_argument("--window", type=int, default=None, help="our measurement window in cycles (default 2,000; k=8 1,000)")
    ap.add_argument("--seed", type=int, default=1, help="our seed")
    ap.add_argument("--booksim-timeout", type=float, default=3600.0, help="stop a BookSim run after S seconds")
    ap.add_argument("--sample-period", type=int, default=None, help="BookSim sample_period (default: the config's 10,000)")
    ap.add_argument("--no-booksim", action="store_true", help="ours only")
    args = ap.parse_args()
    ks = {int(x) for x in args.k.split(",")}
    names = set(args.points.split(",")) if args.points else None
    models = args.models.split(",")
    bs = BookSim()
    if not args.no_booksim:
        bs.build()
    extra = {"sample_period": args.sample_period} if args.sample_period else {}
    routers: dict[int, Routers] = {}
    peer: dict[tuple, object] = {}
    rows = []
    for name, k, router, pattern, load, role in POINTS:
        if k not in ks or (names and name not in names):
            continue
        if k not in routers:
            t0 = time.perf_counter()
            routers[k] = Routers(booksim_dragonfly(k))
            print(json.dumps({"k": k, "tables_s": round(time.perf_counter() - t0, 1)}), flush=True)
        rt = routers[k]
        row = {"point": name, "k": k, "hosts": len(rt.fabric.hosts), "router": router, "booksim": BOOKSIM_OF[router],
               "pattern": pattern, "load": load, "role": role}
        t0 = time.perf_counter()
        rt.router(router)
        row["ours_tables_s"] = round(time.perf_counter() - t0, 2)
        for m in models:
            row[m] = ours(rt, router, pattern, load, m, k, args.warmup, args.window, args.seed)
        if not args.no_booksim:
            key = (k, BOOKSIM_OF[router], pattern, load)
            if key not in peer:  # VAL and VAL-R, UGAL-L and PB share BookSim's run
                peer[key] = bs.run(k, BOOKSIM_OF[router], pattern, load, timeout=args.booksim_timeout, **extra)
            b = peer[key]
            row["booksim_run"] = {"accepted": round(b.accepted, 4), "latency_cycles": round(b.latency_cycles, 1),
                                  "latency_ns": round(b.latency_ns), "cycles": b.cycles, "wall_s": round(b.wall_s, 2),
                                  "cpu_s": round(b.cpu_s, 2), "complete": b.complete, "deadlock": b.deadlock}
            row["ratio_wall"] = round(b.wall_s / max(row[models[0]]["wall_s"], 1e-9), 1)
            row["accepted_rel"] = {m: round(row[m]["accepted"] / b.accepted - 1, 3) if b.accepted else None for m in models}
        rows.append(row)
        print(json.dumps(row), flush=True)
    summary = {"machine": platform.node(), "points": len(rows)}
    if not args.no_booksim and rows:
        for k in sorted(ks):
            rk = [r for r in rows if r["k"] == k]
            if rk:
                summary[f"k{k}_min_ratio_wall"] = min(r["ratio_wall"] for r in rk)
        for m in models:
            sat = [r for r in rows if r["role"] == "sat" and r["router"] in ("MIN", "VAL-R", "UGAL-L")
                   and r["booksim_run"]["complete"]]
            summary[f"{m}_sat_within_5pct"] = [r["point"] for r in sat if abs(r["accepted_rel"][m]) <= 0.05]
            summary[f"{m}_sat_outside_5pct"] = [r["point"] for r in sat if abs(r["accepted_rel"][m]) > 0.05]
            pb = [r for r in rows if r["router"] == "PB"]
            summary[f"{m}_pb_within_10pct"] = [r["point"] for r in pb if abs(r["accepted_rel"][m]) <= 0.10]
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
