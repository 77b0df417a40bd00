"""Benchmark: verify ALL host pairs of the paper's Table III Dragonfly.

topologies/dragonfly-table3.yaml: a=16 p=8 h=8 g=129, 2,064 switches,
16,512 hosts = 272,629,632 ordered host pairs (self-pairs excluded). Compiles the fabric in
per-group and compact addressing (with the file's address widths) and runs
the vectorised all-pairs verifier; prints one JSON line per mode.

``peak_rss_mb`` is the process's peak resident set so far (getrusage), so the
second line includes the first mode's peak.

Usage: .venv/bin/python bench/verify_table3.py [--sample N] [--modes per-group,compact]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hpcfabric.rules.addressing import plan_addresses  # noqa: E402
from hpcfabric.rules.compiler import compile_fabric  # noqa: E402
from hpcfabric.topology.loader import load_topology  # noqa: E402
from hpcfabric.verify.oracle.allpairs import verify  # noqa: E402


def peak_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # Linux: KiB


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--topology", default=str(ROOT / "topologies" / "dragonfly-table3.yaml"))
    ap.add_argument("--modes", default="per-group,compact")
    ap.add_argument("--sample", type=int, default=None, help="random destinations per source (default: all)")
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    fabric = load_topology(args.topology)
    load_seconds = time.perf_counter() - t0
    widths = (fabric.params.get("addressing") or {}).get("widths")
    ok = True
    for mode in args.modes.split(","):
        t0 = time.perf_counter()
        plan = plan_addresses(fabric, mode, widths)
        compiled = compile_fabric(fabric, plan)
        compile_seconds = time.perf_counter() - t0
        report = verify(compiled, sample=args.sample)
        stats = compiled.stats()
        line = {
            "fabric": fabric.name,
            "mode": mode,
            "layout": plan.layout.describe(),
            "switches": len(fabric.switches),
            "hosts": len(fabric.hosts),
            "rules_mean": stats["rules_mean"],
            "total_flows": stats["total_flows"],
            "load_seconds": round(load_seconds, 3),
            "compile_seconds": round(compile_seconds, 3),
            "verify_seconds": round(report.seconds, 3),
            "pairs": report.pairs,
            "delivered": report.delivered,
            "dropped": report.dropped,
            "misdelivered": report.misdelivered,
            "loops": report.loops,
            "max_hops": report.max_hops,
            "mean_hops": report.mean_hops,
            "invalid_probes": report.invalid_probes,
            "invalid_probe_failures": report.invalid_probe_failures,
            "overlaps": report.overlaps,
            "ok": report.ok,
            "engine": report.engine,
            "coverage": report.coverage,
            "peak_rss_mb": peak_rss_mb(),
        }
        print(json.dumps(line), flush=True)
        ok = ok and report.ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
