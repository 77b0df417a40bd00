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
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

from hpcfabric.sim.params import SimParams
from hpcfabric.sim.sweep import Routers, run_point
from hpcfabric.topology.loader import load_topology

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--topology", default=str(ROOT / "topologies/dragonfly-table3.yaml"))
    ap.add_argument("--router", default="COND-ideal")
    ap.add_argument("--pattern", default="uniform")
    ap.add_argument("--loads", default="0.1,0.5")
    ap.add_argument("--slots", type=int, default=300, help="warm-up and window, each (frame times)")
    ap.add_argument("--switch", default="shared", choices=("fifo", "voq", "shared"), help="switch model")
    args = ap.parse_args()
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


if __name__ == "__main__":
    main()
