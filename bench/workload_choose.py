#!/usr/bin/env python3
"""Cost of choosing workload-aware Valiant intermediates (docs/workload.md).

Per pattern x policy: time to build the matrix, time of
:func:`hpcfabric.rules.policies.workload.choose_intermediates`, the model's maximum top-link load
with the static and the chosen intermediates, host ports moved, peak RSS; one JSON line each.
Default: the Table III Dragonfly (2,064 switches, 16,512 hosts); ``--topology
topologies/dragonfly-300k.yaml`` for the ~300k-host build.

    .venv/bin/python bench/workload_choose.py [--topology FILE] [--specs transpose:valiant,adversarial:conditional]
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

from hpcfabric.rules.policies.workload import choose_intermediates
from hpcfabric.topology.loader import load_topology
from hpcfabric.topology.traffic import pattern_traffic

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--topology", default=str(ROOT / "topologies/dragonfly-table3.yaml"))
    ap.add_argument("--specs", default="transpose:valiant,transpose:conditional,adversarial:conditional,"
                                       "stencil:conditional,bitrev:valiant", help="PATTERN[:spread]:POLICY,...")
    args = ap.parse_args()
    t0 = time.perf_counter()
    fabric = load_topology(args.topology)
    load_s = time.perf_counter() - t0
    for spec in args.specs.split(","):
        parts = spec.split(":")
        pattern, routing = parts[0], parts[-1]
        placement = parts[1] if len(parts) == 3 else "packed"
        t1 = time.perf_counter()
        matrix = pattern_traffic(fabric, pattern, placement=placement)
        t2 = time.perf_counter()
        c = choose_intermediates(fabric, matrix, routing)
        print(json.dumps({
            "bench": "workload_choose", "fabric": fabric.name, "hosts": len(fabric.hosts),
            "switches": len(fabric.switches), "pattern": pattern, "placement": placement, "routing": routing,
            "entries": len(matrix), "fabric_load_s": round(load_s, 1), "matrix_s": round(t2 - t1, 2),
            "choose_s": round(c.seconds, 2), "static_max": c.static_max, "chosen_max": c.chosen_max,
            "minimal_max": c.minimal_max, "moved": c.moved, "host_ports": c.host_ports,
            "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        }), flush=True)


if __name__ == "__main__":
    main()
