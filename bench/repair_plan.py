"""Benchmark: the repair planner alone (compile of the surviving fabric + incremental proof), no switches.

Builds the proof base of a config once, then plans ``--links`` single global-link failures in turn (every
``--stride``-th global link), each applied and followed by its recovery, and prints one JSON line per plan
(wall seconds, the planner's timings, the proof's stage timings, changed switches, verdict). This is the
part of a repair that ``bench/control_scale.py`` cannot separate from the install (docs/scale.md
"Failures at Table III").

Usage: .venv/bin/python bench/repair_plan.py [--config configs/dragonfly-table3.conf] [--links 4] [--stride 97]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hpcfabric.config import load_config  # noqa: E402
from hpcfabric.repair.plan import Repairer  # noqa: E402
from hpcfabric.topology.failures import NO_FAILURES, Failures  # noqa: E402


def line(kind: str, link: str, plan, wall: float) -> dict:
    return {"plan": kind, "link": link, "wall_s": round(wall, 3), "verdict": plan.verdict.get("verdict"),
            "changed": len(plan.changed), "timings": {k: round(v, 3) for k, v in plan.timings.items()},
            "proof_stages": {k: round(v, 3) for k, v in (plan.verdict.get("timings") or {}).items()}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(ROOT / "configs" / "dragonfly-table3.conf"))
    ap.add_argument("--links", type=int, default=4)
    ap.add_argument("--stride", type=int, default=97)
    args = ap.parse_args()
    cfg = load_config(args.config)
    fabric = cfg.fabric
    t0 = time.perf_counter()
    rep = Repairer(cfg, prove=True)
    rep.base()
    print(json.dumps({"bench": "repair_plan", "fabric": fabric.name, "switches": len(fabric.switches),
                      "base_s": round(time.perf_counter() - t0, 2), "load_avg_1m": round(os.getloadavg()[0], 2)}),
          flush=True)
    globs = [link for link in fabric.links if link.kind == "global"]
    for i in range(args.links):
        link = globs[(i * args.stride) % len(globs)]
        name = f"{link.a}:{link.a_port}-{link.b}:{link.b_port}"
        t = time.perf_counter()
        plan = rep.plan(Failures.of(fabric, [(link.a, link.a_port)], []))
        print(json.dumps(line("failure", name, plan, time.perf_counter() - t)), flush=True)
        rep.apply(plan)
        t = time.perf_counter()
        back = rep.plan(NO_FAILURES)
        print(json.dumps(line("recovery", name, back, time.perf_counter() - t)), flush=True)
        rep.apply(back)
    return 0


if __name__ == "__main__":
    sys.exit(main())
