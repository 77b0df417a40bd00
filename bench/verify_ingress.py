"""Benchmark: ``verify()`` with merged ingress classes vs one row per fabric ingress port.

Per topology (compact addressing, the given routing), both engines run side by side in this
process on the same compiled rules; one JSON line each with seconds, verdict, delivered pairs,
dropped pairs and ``ingress_exact``, then one line with the ratio per-port / merged. The
per-port engine is the one that sees a frame sent back out of its ingress port
(docs/routing.md, "Frames sent back out of their ingress port"); ``verify(per_port=None)``
picks it up to ``PER_PORT_AUTO_PORTS`` fabric ports.

Usage: .venv/bin/python bench/verify_ingress.py [--routing conditional] [TOPOLOGY.yaml ...]
(default: dragonfly-a4-p2-h2, fb-3d-4x4x4, fat-tree-k4, dragonfly-table3; Table III per port
takes about 6 minutes here).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hpcfabric.rules.addressing import plan_addresses  # noqa: E402
from hpcfabric.rules.compiler import compile_fabric  # noqa: E402
from hpcfabric.topology.loader import load_topology  # noqa: E402
from hpcfabric.verify.oracle.allpairs import PER_PORT_AUTO_PORTS, verify  # noqa: E402

DEFAULT = ["dragonfly-a4-p2-h2", "fb-3d-4x4x4", "fat-tree-k4", "dragonfly-table3"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("topologies", nargs="*", default=[str(ROOT / "topologies" / f"{n}.yaml") for n in DEFAULT])
    ap.add_argument("--routing", default="conditional")
    args = ap.parse_args(argv)
    for path in args.topologies:
        fabric = load_topology(path)
        compiled = compile_fabric(fabric, plan_addresses(fabric, "compact"), routing=args.routing)
        fabric_ports = sum(len(fabric.fabric_ports(s.name)) for s in fabric.switches)
        seconds = {}
        for per_port in (False, True):
            t0 = time.perf_counter()
            rep = verify(compiled, per_port=per_port)
            seconds[per_port] = time.perf_counter() - t0
            print(json.dumps({
                "topology": fabric.name, "routing": args.routing, "rows": "per-port" if per_port else "merged",
                "fabric_ports": fabric_ports, "auto_would_use": "per-port" if fabric_ports <= PER_PORT_AUTO_PORTS
                else "merged", "seconds": round(seconds[per_port], 3), "ok": rep.ok, "pairs": rep.pairs,
                "delivered": rep.delivered, "dropped": rep.dropped, "ingress_exact": rep.ingress_exact,
            }), flush=True)
        print(json.dumps({"topology": fabric.name, "per_port_over_merged": round(seconds[True] / seconds[False], 1)}),
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
