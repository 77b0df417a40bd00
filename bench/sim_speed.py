#!/usr/bin/env python3
"""Simulator speed: simulated time per wall second and frame-hops per second.

Runs one router (default COND-ideal) at a few loads on a fabric (default the Table III
Dragonfly, 2,064 switches, 16,512 hosts) for a short window and prints, per load, the wall time
per tick, simulated microseconds per wall second, frame-hops per second and delivered frames per
second, the CPU time per frame-hop (robust against other jobs' time slices, not against their
cache traffic) and the run's outcome (latency, hops, delivered, ...: two versions of the simulator
with the same seed must print the same), plus the time to compile and precompute the tables (and
the kernel, compiled or loaded by a tiny run before the timed ones) and the peak RSS, as one JSON line.
For scale: BookSim2 on a Dragonfly of this size needs ~190 s of CPU per 1,000 cycles
(issue 19); a cycle there is one flit time.

    .venv/bin/python bench/sim_speed.py [--topology FILE] [--router COND-ideal] [--loads 0.1,0.5] [--slots 300]

``--curves MIN:uniform:0.1/0.4,...`` (or ``--fig12``: the 33 points per seed of the Table III figure
in docs/simulation.md) runs several routers and patterns with one set of tables, one JSON line per
curve, and ``--project`` adds a last line: per point the ticks that point takes with the figure's
``--warmup/--window/--drain`` (300/300/400; the drain measured here, the whole drain where the short
run did not finish) x its CPU time per tick here, summed over points and ``--seeds`` and divided by
``--jobs`` (``wall_min_two_free_cores``: CPU time, i.e. two free cores; ``wall_min_at_this_load``: with the wall
time per tick of this run, i.e. at the machine's load now). Run it with another checkout first on
``PYTHONPATH`` to compare two versions.
``--shared ROUTER:PATTERN:LOAD/...,...`` runs those points as the figure does for a router whose seeds
share one warm-up (``--seeds`` branches, the figure's windows): one JSON line per point with where the
window started, whether the warm-up settled, the warm-up's and the whole point's wall and CPU time.
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

from hpcfabric.sim.params import SimParams
from hpcfabric.sim.sweep import Routers, run_branches, run_point
from hpcfabric.topology.loader import load_topology

ROOT = Path(__file__).resolve().parent.parent
#: the Table III figure of docs/simulation.md (--routers MIN,VAL,PB,COND-ideal,COND-switch --loads-un 0.1,0.4,0.7,0.9
#: --loads-adv 0.02,0.1,0.25,0.4): per curve the loads it runs before it stops at saturation (33 per seed)
FIG12 = ("MIN:uniform:0.1/0.4/0.7/0.9,VAL:uniform:0.1/0.4/0.7,PB:uniform:0.1/0.4/0.7/0.9,COND-ideal:uniform:0.1/0.4/0.7/0.9,"
         "COND-switch:uniform:0.1/0.4/0.7/0.9,MIN:adversarial:0.02,VAL:adversarial:0.02/0.1/0.25/0.4,"
         "PB:adversarial:0.02/0.1/0.25/0.4,COND-ideal:adversarial:0.02,COND-switch:adversarial:0.02/0.1/0.25/0.4")


def _point(rt: Routers, router: str, pattern: str, load: float, p: SimParams) -> dict:
    cpu0 = time.process_time()
    r = run_point(rt, router, pattern, load, p, seed=1)
    cpu = time.process_time() - cpu0
    sim_us = r.extra["simulated_ns"] / 1e3
    w1 = Routers.params_for(router, p).warmup_slots + p.window_slots  # ticks = frame times (ticks_per_frame 1)
    return {
        "load": load, "ticks": r.ticks, "wall_s": round(r.wall_s, 2), "ms_per_tick": round(1e3 * r.wall_s / r.ticks, 2),
        "cpu_ms_per_tick": round(1e3 * cpu / r.ticks, 2),
        "simulated_us_per_wall_s": round(sim_us / r.wall_s, 2), "frame_hops_per_s": round(r.hops / r.wall_s),
        "delivered_frames_per_s": round(r.delivered / r.wall_s), "accepted": round(r.accepted, 4),
        "cpu_s": round(cpu, 2), "cpu_us_per_hop": round(1e6 * cpu / max(r.hops, 1), 3),
        "drain": r.ticks - w1 if r.unfinished == 0 else None,  # ticks after the window (None: not drained)
        # the run's outcome, to compare two versions of the simulator (same seed -> same figures)
        "result": {"latency_ns": r.latency_ns, "hops": r.hops, "delivered": r.delivered, "generated": r.generated,
                   "refused": r.refused, "measured": r.measured, "flips": r.flips, "p99_ns": r.p99_ns},
    }


def _projection(curves: list[dict], args: argparse.Namespace, tables_s: float) -> dict:
    """Per point: ticks with the figure's windows x CPU ms per tick measured here; the sum over points, seeds, jobs."""
    total_ms, wall_ms, ticks_all, rows = 0.0, 0.0, 0, []
    base = SimParams(warmup_slots=args.fig_warmup, window_slots=args.fig_window, drain_slots=args.fig_drain)
    for cur in curves:
        for pt in cur["points"]:
            drain = pt["drain"] if pt["drain"] is not None and pt["drain"] < args.slots else args.fig_drain
            ticks = Routers.params_for(cur["router"], base).warmup_slots + args.fig_window + min(drain, args.fig_drain)
            ms = ticks * pt["cpu_ms_per_tick"]
            total_ms += ms
            wall_ms += ticks * pt["ms_per_tick"]  # the same with the wall time per tick: at this run's load
            ticks_all += ticks
            rows.append([cur["router"], cur["pattern"], pt["load"], ticks, pt["cpu_ms_per_tick"], round(ms / 1e3, 1)])
    per_seed = total_ms / 1e3
    return {"projection": {"warmup": args.fig_warmup, "window": args.fig_window, "drain": args.fig_drain,
                           "seeds": args.seeds, "jobs": args.jobs, "points_per_seed": len(rows), "ticks_per_seed": ticks_all,
                           "cpu_s_per_seed": round(per_seed, 1),
                           "tables_s": tables_s,
                           "wall_min_two_free_cores": round((per_seed * args.seeds / args.jobs + tables_s) / 60, 1),
                           "wall_s_per_seed_at_this_load": round(wall_ms / 1e3, 1),
                           "wall_min_at_this_load": round((wall_ms / 1e3 * args.seeds / args.jobs + tables_s) / 60, 1),
                           "points": rows}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--topology", default=str(ROOT / "topologies/dragonfly-table3.yaml"))
    ap.add_argument("--router", default="COND-ideal")
    ap.add_argument("--pattern", default="uniform")
    ap.add_argument("--loads", default="0.1,0.5")
    ap.add_argument("--slots", type=int, default=300, help="warm-up and window, each (frame times)")
    ap.add_argument("--switch", default="shared", choices=("fifo", "voq", "shared"), help="switch model")
    ap.add_argument("--curves", help="ROUTER:PATTERN:LOAD/LOAD/...,... (instead of --router/--pattern/--loads)")
    ap.add_argument("--fig12", action="store_true", help="the curves of the Table III figure (docs/simulation.md)")
    ap.add_argument("--project", action="store_true", help="project the figure's time from the CPU per tick")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--fig-warmup", type=int, default=300)
    ap.add_argument("--fig-window", type=int, default=300)
    ap.add_argument("--fig-drain", type=int, default=400)
    ap.add_argument("--shared", help="ROUTER:PATTERN:LOAD/LOAD,... with --seeds branches from one warm-up each")
    args = ap.parse_args()
    if args.shared:
        _shared(args)
        return
    if args.fig12 or args.curves:
        _curves(args)
        return
    fabric = load_topology(args.topology)
    t0 = time.perf_counter()
    rt = Routers(fabric)
    rt.router(args.router)
    run_point(rt, args.router, args.pattern, 0.01, SimParams(warmup_slots=2, window_slots=2, drain_slots=2,
                                                             switch=args.switch), seed=1)  # compile (or load) the kernel
    tables_s = time.perf_counter() - t0
    out = {"fabric": fabric.name, "switches": len(fabric.switches), "hosts": len(fabric.hosts), "router": args.router,
           "pattern": args.pattern, "tables_s": round(tables_s, 1), "points": []}
    p = SimParams(warmup_slots=args.slots, window_slots=args.slots, drain_slots=args.slots, switch=args.switch)
    for load in (float(x) for x in args.loads.split(",")):
        cpu0 = time.process_time()
        r = run_point(rt, args.router, args.pattern, load, p, seed=1)
        cpu = time.process_time() - cpu0
        sim_us = r.extra["simulated_ns"] / 1e3
        out["points"].append({
            "load": load, "ticks": r.ticks, "wall_s": round(r.wall_s, 2), "ms_per_tick": round(1e3 * r.wall_s / r.ticks, 2),
            "simulated_us_per_wall_s": round(sim_us / r.wall_s, 2), "frame_hops_per_s": round(r.hops / r.wall_s),
            "delivered_frames_per_s": round(r.delivered / r.wall_s), "accepted": round(r.accepted, 4),
            "cpu_s": round(cpu, 2), "cpu_us_per_hop": round(1e6 * cpu / max(r.hops, 1), 3),
            # the run's outcome, to compare two versions of the simulator (same seed -> same figures)
            "result": {"latency_ns": r.latency_ns, "hops": r.hops, "delivered": r.delivered, "generated": r.generated,
                       "refused": r.refused, "measured": r.measured, "flips": r.flips, "p99_ns": r.p99_ns},
        })
    out["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    print(json.dumps(out))


def _curves(args: argparse.Namespace) -> None:
    fabric = load_topology(args.topology)
    spec = [c.split(":") for c in (FIG12 if args.fig12 else args.curves).split(",")]
    t0 = time.perf_counter()
    rt = Routers(fabric)
    for name in dict.fromkeys(c[0] for c in spec):
        rt.router(name)
    run_point(rt, spec[0][0], spec[0][1], 0.01, SimParams(warmup_slots=2, window_slots=2, drain_slots=2, switch=args.switch),
              seed=1)  # compile (or load) the kernel
    tables_s = round(time.perf_counter() - t0, 1)
    print(json.dumps({"fabric": fabric.name, "hosts": len(fabric.hosts), "tables_s": tables_s}), flush=True)
    p = SimParams(warmup_slots=args.slots, window_slots=args.slots, drain_slots=args.slots, switch=args.switch)
    curves = []
    for router, pattern, loads in spec:
        cur = {"router": router, "pattern": pattern,
               "points": [_point(rt, router, pattern, float(x), p) for x in loads.split("/")]}
        curves.append(cur)
        print(json.dumps(cur), flush=True)
    if args.project:
        print(json.dumps(_projection(curves, args, tables_s)))
    print(json.dumps({"peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}))


def _shared(args: argparse.Namespace) -> None:
    fabric = load_topology(args.topology)
    spec = [c.split(":") for c in args.shared.split(",")]
    t0 = time.perf_counter()
    rt = Routers(fabric)
    for name in dict.fromkeys(c[0] for c in spec):
        rt.router(name)
    tables_s = round(time.perf_counter() - t0, 1)
    print(json.dumps({"fabric": fabric.name, "hosts": len(fabric.hosts), "tables_s": tables_s}), flush=True)
    p = SimParams(warmup_slots=args.fig_warmup, window_slots=args.fig_window, drain_slots=args.fig_drain, switch=args.switch)
    for router, pattern, loads in spec:
        for load in (float(x) for x in loads.split("/")):
            cpu0, w0 = time.process_time(), time.perf_counter()
            rs = run_branches(rt, router, pattern, load, p, list(range(args.seeds)))
            x = rs[0].extra
            print(json.dumps({"router": router, "pattern": pattern, "load": load, "seeds": len(rs),
                              "warmup_ticks": x["warmup_ticks"], "settled": x["settled"],
                              "tail_accepted": round(x["tail_accepted"], 4), "accepted": [round(r.accepted, 4) for r in rs],
                              "latency_ns": [round(r.latency_ns, 1) for r in rs], "ticks": [r.ticks for r in rs],
                              "warmup_wall_s": round(x["warmup_wall_s"], 1), "wall_s": round(time.perf_counter() - w0, 1),
                              "cpu_s": round(time.process_time() - cpu0, 1)}), flush=True)
    print(json.dumps({"peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}))


if __name__ == "__main__":
    main()
