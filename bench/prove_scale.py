"""Benchmark: the deadlock proofs at scale, one fresh process per topology x policy.

For each topology x policy (CoS: the compiler's default, ``cos=True``) runs the union proof
(:func:`hpcfabric.verify.union.proof.prove`: every host pair delivered and the channel dependency graph
acyclic under any set of paused ports; the symmetry reduction on) or, with ``--up-down`` (fat-tree,
folded Clos), the per-switch up*/down* proof (:func:`hpcfabric.verify.updown.check_up_down`), and
prints one JSON line: the verdict, ``compile_seconds``, ``seconds`` (the proof), its phase
``timings``, the symmetry reduction, ``peak_rss_mb`` (the child process: compile + proof) and the
machine's 1-minute load average before and after.

``--max-gb N`` caps the child's address space (``RLIMIT_AS``): a proof that does not fit reports
``MemoryError`` instead of pushing the machine into the OOM killer.

Usage: nice -n 10 .venv/bin/python bench/prove_scale.py [--routings minimal,valiant,conditional]
       [--up-down] [--max-gb N] TOPOLOGY.yaml ...
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def peak_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # Linux: KiB


def run_one(path: str, routing: str, up_down: bool = False) -> dict:
    from hpcfabric.errors import CompileError
    from hpcfabric.rules.addressing import plan_addresses
    from hpcfabric.rules.compiler import compile_fabric
    from hpcfabric.topology.loader import load_topology

    t0 = time.perf_counter()
    fabric = load_topology(path)
    section = fabric.params.get("addressing") or {}
    plan = plan_addresses(fabric, section.get("mode", "compact"), section.get("widths"))
    try:
        compiled = compile_fabric(fabric, plan, routing=routing, cos=True)
    except CompileError as err:
        return {"fabric": fabric.name, "routing": routing, "applicable": False, "why": str(err)}
    compile_seconds = time.perf_counter() - t0

    def progress(i: int, n: int, t: float) -> None:
        print(f"# {fabric.name} {routing}: {i}/{n}, {t:.0f} s", file=sys.stderr, flush=True)

    if up_down:
        from hpcfabric.verify.updown import check_up_down

        out = check_up_down(compiled, progress=progress).as_dict()
    else:
        from hpcfabric.verify.union.proof import prove

        out = prove(compiled).as_dict()
        out.pop("failures", None)
    out.update(fabric=fabric.name, routing=routing, cos=compiled.cos, cos_levels=compiled.cos_levels,
               compile_seconds=round(compile_seconds, 2), peak_rss_mb=peak_rss_mb())
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("topologies", nargs="*", default=[str(ROOT / "topologies" / "dragonfly-table3.yaml")])
    ap.add_argument("--routings", default="minimal,valiant,conditional")
    ap.add_argument("--up-down", action="store_true",
                    help="fat-tree / folded Clos: the per-switch up*/down* proof (hpcfabric.verify.updown)")
    ap.add_argument("--max-gb", type=float, default=None, help="cap the child's address space (GB)")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # child process
    args = ap.parse_args(argv)
    ok = True
    for path in args.topologies:
        for routing in args.routings.split(","):
            if args.one:
                if args.max_gb:
                    cap = int(args.max_gb * (1 << 30))
                    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
                line = run_one(path, routing, args.up_down)
            else:  # a fresh process per run: peak RSS per run
                cmd = [sys.executable, __file__, path, "--routings", routing, "--one"] + (
                    ["--up-down"] if args.up_down else []) + (["--max-gb", str(args.max_gb)] if args.max_gb else [])
                load0 = os.getloadavg()[0]
                t0 = time.perf_counter()
                res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                if res.returncode != 0 or not res.stdout.strip():
                    why = (res.stderr.strip().splitlines() or [f"exit {res.returncode}"])[-1]
                    line = {"topology": path, "routing": routing, "error": why, "exit": res.returncode}
                else:
                    line = json.loads(res.stdout.strip().splitlines()[-1])
                line.update(wall_seconds=round(time.perf_counter() - t0, 1), load_avg_1m=[round(load0, 2),
                            round(os.getloadavg()[0], 2)])
            if line.get("applicable", True):
                ok = ok and bool(line.get("ok"))
            print(json.dumps(line), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
