"""Benchmark: routing policies with classes of service on the paper's Table III Dragonfly.

topologies/dragonfly-table3.yaml: a=16 p=8 h=8 g=129, 2,064 switches, 16,512 hosts.
Per policy (default CoS: minimal 'top'/2, valiant and conditional 'top'/3):

* the all-pairs verifier (272,629,632 pairs, CoS on the fast path), unpaused;
* the channel dependency graph of the unpaused fabric and of a seeded sample
  of single paused ports (``--paused N``; the tests sweep every port of the
  smaller fabrics, Table III has 47,472 pausable ports), checked for cycles
  per class of service, and delivery of every pair in every sampled scenario.

Any set of paused ports (the union proof, which covers all 47,472 single ones): bench/prove_scale.py.

Prints one JSON line per policy. ``peak_rss_mb`` is the process's peak so far.

Usage: .venv/bin/python bench/cdg_table3.py [--routings minimal,valiant,conditional]
       [--paused 12] [--seed 1] [--sample N] [--no-cdg]
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hpcfabric.rules.addressing import plan_addresses  # noqa: E402
from hpcfabric.verify.oracle.cdg import check_deadlock_freedom, pausable_ports  # noqa: E402
from hpcfabric.rules.compiler import compile_fabric  # noqa: E402
from hpcfabric.topology.loader import load_topology  # noqa: E402
from hpcfabric.verify.oracle.allpairs import verify  # noqa: E402


def peak_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # Linux: KiB


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--topology", default=str(ROOT / "topologies" / "dragonfly-table3.yaml"))
    ap.add_argument("--routings", default="minimal,valiant,conditional")
    ap.add_argument("--paused", type=int, default=12, help="single paused ports sampled for the CDG")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--sample", type=int, default=None, help="random destinations for the verifier (default all)")
    ap.add_argument("--no-cdg", action="store_true", help="skip the channel dependency graph")
    args = ap.parse_args(argv)

    fabric = load_topology(args.topology)
    widths = (fabric.params.get("addressing") or {}).get("widths")
    plan = plan_addresses(fabric, "compact", widths)
    ok = True
    for routing in args.routings.split(","):
        t0 = time.perf_counter()
        compiled = compile_fabric(fabric, plan, routing=routing, cos=True)
        compile_seconds = time.perf_counter() - t0
        report = verify(compiled, sample=args.sample)
        line = {
            "fabric": fabric.name,
            "routing": routing,
            "cos": compiled.cos,
            "cos_levels": compiled.cos_levels,
            "compile_seconds": round(compile_seconds, 2),
            "pairs": report.pairs,
            "delivered": report.delivered,
            "tagged": report.tagged,
            "max_hops": report.max_hops,
            "verify_ok": report.ok,
            "verify_engine": report.engine,
            "verify_seconds": round(report.seconds, 2),
        }
        ok = ok and report.ok
        if not args.no_cdg:
            ports = pausable_ports(compiled)
            sample = sorted(random.Random(args.seed).sample(ports, min(args.paused, len(ports)))) if ports else []
            cdg = check_deadlock_freedom(compiled, sample)
            line.update(
                cdg_acyclic=cdg.acyclic,
                cdg_cycle=list(cdg.cycle) if cdg.cycle else None,
                cdg_per_cos={k: (list(v) if v else None) for k, v in cdg.per_cos.items()},
                cdg_channels=cdg.channels,
                cdg_dependencies=cdg.dependencies,
                scenarios=cdg.scenarios,
                paused_sample=[f"{s}:{p}" for s, p in sample],
                failed_scenarios=cdg.failed_scenarios,
                scenario_failures=list(cdg.scenario_failures),
                cdg_seconds=round(cdg.seconds, 2),
            )
            ok = ok and cdg.ok
        line["peak_rss_mb"] = peak_rss_mb()
        print(json.dumps(line), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
