"""Benchmark: every single paused port, all host pairs + channel dependency graph, at scale.

For each topology x policy (CoS: the compiler defaults, ``cos=True``) runs
:func:`hpcfabric.verify.sweep.sweep_single_paused` over the unpaused fabric and every
port with a PORT_STATE entry paused alone (``--ports N``: a seeded sample of N
ports instead, for rate measurements) and prints one JSON line: scenarios,
pairs per scenario, verdicts (failed scenarios, union CDG acyclic per class),
``seconds`` (sweep), ``compile_seconds``, phase ``timings``, ``peak_rss_mb``
(this process; each topology x policy runs in its own process with ``--fork``),
``scenarios_per_second`` and, for a sample, ``extrapolated_seconds`` for all ports.

Minimal routing has no PORT_STATE entries: a PAUSE changes nothing, so its only
scenario is the unpaused fabric.

``--symmetric``: destinations reduced by the symmetries checked on the rules
(:mod:`hpcfabric.verify.symmetry`); ``--up-down`` (fat-tree, folded Clos): the
per-switch up*/down* proof (:mod:`hpcfabric.verify.updown`), which covers every set
of paused ports at once.

Usage: nice -n 19 .venv/bin/python bench/paused_sweep.py [--routings minimal,valiant,conditional]
       [--ports all|N] [--seed 1] [--symmetric | --up-down] TOPOLOGY.yaml ...
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def peak_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # Linux: KiB


def run_one(path: str, routing: str, ports_arg: str, seed: int, symmetric: bool = False, up_down: bool = False) -> dict:
    from hpcfabric.rules.addressing import plan_addresses
    from hpcfabric.verify.cdg import pausable_ports
    from hpcfabric.rules.compiler import compile_fabric
    from hpcfabric.errors import CompileError
    from hpcfabric.verify.sweep import sweep_single_paused
    from hpcfabric.topology.loader import load_topology

    t0 = time.perf_counter()
    fabric = load_topology(path)
    widths = (fabric.params.get("addressing") or {}).get("widths")
    plan = plan_addresses(fabric, (fabric.params.get("addressing") or {}).get("mode", "compact"), widths)
    try:
        compiled = compile_fabric(fabric, plan, routing=routing, cos=True)
    except CompileError as err:
        return {"fabric": fabric.name, "routing": routing, "applicable": False, "why": str(err)}
    compile_seconds = time.perf_counter() - t0
    every = pausable_ports(compiled)
    ports = every if ports_arg == "all" else sorted(random.Random(seed).sample(every, min(int(ports_arg), len(every))))

    def progress(i: int, n: int, t: float) -> None:
        print(f"# {fabric.name} {routing}: {i}/{n} scenarios, {t:.0f} s", file=sys.stderr, flush=True)

    if up_down:
        from hpcfabric.verify.updown import check_up_down

        if ports_arg != "all":
            raise SystemExit("--up-down covers every set of paused ports at once (no sample)")
        urep = check_up_down(compiled, progress=lambda i, n, t: progress(i, n, t))
        out = urep.as_dict()
        out.update(fabric=fabric.name, routing=routing, cos=compiled.cos, cos_levels=compiled.cos_levels,
                   compile_seconds=round(compile_seconds, 2), peak_rss_mb=peak_rss_mb())
        return out
    if symmetric:
        from hpcfabric.verify.symmetry import symmetric_sweep

        def sprogress(phase: str, i: int, n: int, t: float) -> None:
            print(f"# {fabric.name} {routing} {phase}: {i}/{n}, {t:.0f} s", file=sys.stderr, flush=True)

        if ports_arg != "all":
            raise SystemExit("--symmetric sweeps every port (a sample's images are not in the sample)")
        srep = symmetric_sweep(compiled, progress=sprogress)
        out = srep.as_dict()
        out.update(fabric=fabric.name, routing=routing, compile_seconds=round(compile_seconds, 2),
                   pausable_ports=len(every), peak_rss_mb=peak_rss_mb())
        return out
    rep = sweep_single_paused(compiled, ports, progress=progress)
    out = rep.as_dict()
    out.update(
        compile_seconds=round(compile_seconds, 2),
        pausable_ports=len(every),
        sampled=ports_arg != "all" and len(ports) < len(every),
        peak_rss_mb=peak_rss_mb(),
    )
    scen = rep.timings.get("scenarios", 0.0)
    if rep.paused_ports:
        rate = rep.paused_ports / scen if scen > 0 else float("inf")
        out["scenarios_per_second"] = round(rate, 2)
        if out["sampled"]:
            fixed = rep.seconds - scen
            out["extrapolated_seconds"] = round(fixed + len(every) / rate, 1)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("topologies", nargs="*", default=[str(ROOT / "topologies" / "dragonfly-table3.yaml")])
    ap.add_argument("--routings", default="minimal,valiant,conditional")
    ap.add_argument("--ports", default="all", help="'all' or a number of sampled ports")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--symmetric", action="store_true",
                    help="reduce destinations by the symmetries checked on the rules (hpcfabric.verify.symmetry)")
    ap.add_argument("--up-down", action="store_true",
                    help="fat-tree / folded Clos: the per-switch up*/down* proof (hpcfabric.verify.updown) instead of walks")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # child process
    args = ap.parse_args(argv)
    ok = True
    for path in args.topologies:
        for routing in args.routings.split(","):
            if args.one:
                line = run_one(path, routing, args.ports, args.seed, args.symmetric, args.up_down)
            else:  # a fresh process per run: peak RSS per run
                cmd = [sys.executable, __file__, path, "--routings", routing, "--ports", args.ports,
                       "--seed", str(args.seed), "--one"] + (["--symmetric"] if args.symmetric else []) + (
                    ["--up-down"] if args.up_down else [])
                res = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
                if res.returncode not in (0, 1) or not res.stdout.strip():
                    line = {"topology": path, "routing": routing, "error": f"exit {res.returncode}"}
                else:
                    line = json.loads(res.stdout.strip().splitlines()[-1])
            if line.get("applicable", True):
                ok = ok and bool(line.get("ok"))
            print(json.dumps(line), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
