#!/usr/bin/env python3
"""Digests of simulator runs, to show that two versions of hpcfabric.sim give the same results.

Runs routers x patterns x switch models x seeds on a fabric (default the 72-host Dragonfly) and
prints one JSON line per run: the result's figures and SHA-256 digests of the counters, the
latency histogram and the per-frame trace (src, dst, ticks). Run it with two versions on
``PYTHONPATH`` and compare the outputs (``diff``): equal lines = bit-identical runs.

    PYTHONPATH=/path/to/other/checkout .venv/bin/python bench/sim_identical.py > other.jsonl
    .venv/bin/python bench/sim_identical.py > this.jsonl && diff other.jsonl this.jsonl
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import numpy as np

from hpcfabric.sim.engine import Simulator
from hpcfabric.sim.params import SimParams
from hpcfabric.sim.sweep import Routers
from hpcfabric.sim.traffic import Traffic
from hpcfabric.topology.loader import load_topology

ROOT = Path(__file__).resolve().parent.parent
CASES = "MIN:uniform:0.4,MIN:uniform:1.0,VAL:uniform:0.9,MIN:adv:0.5,VAL:adv:0.6,COND-ideal:adv:0.3,COND-switch:adv:0.4,PB:adv:0.5"


def _digest(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a, dtype=np.int64).tobytes()).hexdigest()[:16]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--topology", default=str(ROOT / "topologies/dragonfly-a4-p2-h2.yaml"))
    ap.add_argument("--cases", default=CASES, help="ROUTER:PATTERN:LOAD,...")
    ap.add_argument("--switches", default="shared,fifo,voq,iq")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--slots", type=int, default=600, help="warm-up and window, each (frame times); drain the same")
    args = ap.parse_args()
    rt = Routers(load_topology(args.topology))
    for case in args.cases.split(","):
        name, pattern, load = case.split(":")
        for switch in args.switches.split(","):
            p = SimParams(warmup_slots=args.slots, window_slots=args.slots, drain_slots=args.slots, switch=switch)
            for seed in (int(x) for x in args.seeds.split(",")):
                sim = Simulator(rt.router(name), Traffic(rt.fabric, pattern), Routers.params_for(name, p), seed=seed,
                                trace=True)
                r = sim.run(float(load))
                print(json.dumps({
                    "router": name, "pattern": pattern, "load": float(load), "switch": switch, "seed": seed,
                    "latency_ns": r.latency_ns, "accepted": r.accepted, "hops": r.hops, "delivered": r.delivered,
                    "generated": r.generated, "refused": r.refused, "flips": r.flips, "ticks": r.ticks,
                    "counters": _digest(sim.c), "latency_hist": _digest(sim.s.lat),
                    "trace": _digest(np.concatenate(sim.trace)), "occ": _digest(sim.s.occ + sim.s.hr),
                }), flush=True)


if __name__ == "__main__":
    main()
