"""Benchmark: build and compile the paper's ~300,000-host fabrics (Sec. VI-A).

For each topology (default: topologies/clos-300k.yaml, fb-4d-300k.yaml,
dragonfly-300k.yaml) a fresh Python process loads the YAML, plans addresses
and compiles every switch with :func:`hpcfabric.analysis.scale.count_rules`
(``--jobs`` forked workers that return counts and structural-check results,
not tables), then prints one JSON line:

``fabric, kind, addressing, switches, hosts, seconds`` (build + plan +
compile), ``build_seconds``, ``compile_seconds``, ``peak_rss_mb`` (the main
process), ``worker_peak_rss_mb`` (largest worker), ``rules_min/mean/max``
(forwarding entries per access switch), ``lower_bound_met`` (every switch:
entries = ports in use; expected for FB and Clos), ``paper_band`` (Dragonfly),
``under_4k`` (the paper's claim: >= 300,000 hosts with < 4K entries),
``structural_ok`` and ``coverage``, plus ``within_budget`` (<= 30 s, <= 4 GiB).

``--cos off,default`` (the default) runs each fabric untagged and with the compiler's default
classes (the proven deadlock-free scheme) side by side; ``routing``, ``cos``, ``flows_mean/max``
(every entry of an access switch), ``flows_total`` and ``install_s_per_switch_est`` (flows_mean at
the controller's measured bundle rate) show what the classes cost.

Usage: .venv/bin/python bench/compile_scale.py [--jobs N] [--modes compact,per-group] [--cos off,default]
       [--routing minimal|valiant|conditional] [FILE ...]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DEFAULT = ["topologies/clos-300k.yaml", "topologies/fb-4d-300k.yaml", "topologies/dragonfly-300k.yaml"]
BUDGET_SECONDS = 30.0
BUDGET_MB = 4096.0


#: the controller's measured install rate (docs/controller.md, bench/install_rate.py: 61-67k rules/s per bundle)
INSTALL_RULES_PER_S = 64_000.0


def run_one(path: str, mode: str, jobs: int, cos: str = "default", routing: str = "minimal") -> dict:
    from hpcfabric.rules.addressing import plan_addresses
    from hpcfabric.analysis.scale import count_rules, peak_rss_mb
    from hpcfabric.topology.loader import load_topology

    t0 = time.perf_counter()
    fabric = load_topology(path)
    t1 = time.perf_counter()
    plan = plan_addresses(fabric, mode)
    cos_arg = {"default": None, "off": False}[cos]
    counts = count_rules(fabric, plan, jobs=jobs, progress=sys.stderr.isatty(), routing=routing, cos=cos_arg)
    t2 = time.perf_counter()
    s = counts.summary()
    line = {
        "fabric": s["fabric"],
        "kind": s["kind"],
        "addressing": mode,
        "layout": s["layout"],
        "switches": s["switches"],
        "hosts": s["hosts"],
        "jobs": jobs,
        "seconds": round(t2 - t0, 2),
        "build_seconds": round(t1 - t0, 2),
        "compile_seconds": round(t2 - t1, 2),
        **peak_rss_mb(),
        "rules_min": s["rules_min"],
        "rules_mean": s["rules_mean"],
        "rules_max": s["rules_max"],
        "all_rules_max": s["all_rules_max"],
        "routing": s["routing"],
        "cos": s["cos"],
        "flows_mean": s["flows_mean"],  # every entry of an access switch (CoS entries and pop twins included)
        "flows_max": s["flows_max"],
        "flows_total": sum(c.flows for c in counts.counts),
        # one access switch's table at the controller's measured bundle rate (estimate, not an OVS run)
        "install_s_per_switch_est": round(s["flows_mean"] / INSTALL_RULES_PER_S, 4),
    }
    if fabric.kind == "dragonfly":
        line["paper_band"] = s["paper_band"]
    else:
        line["lower_bound_met"] = s["lower_bound_met"]
    if mode == "per-group":
        line["eq1_met"] = s["eq1_met"]
    line["under_4k"] = bool(s["hosts"] >= 300_000 and s["rules_max"] < 4096)
    line["structural_ok"] = s["structural_ok"]
    line["problems"] = counts.problems()
    line["coverage"] = s["coverage"]
    rss = max(line["peak_rss_mb"], line["worker_peak_rss_mb"])
    line["within_budget"] = bool(line["seconds"] <= BUDGET_SECONDS and rss <= BUDGET_MB)
    return line


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", default=DEFAULT, metavar="FILE")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument("--modes", default="compact", help="addressing modes, comma-separated (default compact)")
    ap.add_argument("--cos", default="off,default",
                    help="classes of service, comma-separated: off (untagged) and/or default (the compiler's "
                         "proven deadlock-free default; default: both, side by side)")
    ap.add_argument("--routing", default="minimal", choices=("minimal", "valiant", "conditional"))
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # child: run in this process
    args = ap.parse_args(argv)
    if args.jobs < 1:
        ap.error("--jobs must be >= 1")
    modes = [m for m in args.modes.split(",") if m]
    coses = [c for c in args.cos.split(",") if c]
    if any(c not in ("off", "default") for c in coses):
        ap.error("--cos takes off and/or default")
    if args.one:
        for path in args.files:
            for mode in modes:
                for cos in coses:
                    print(json.dumps(run_one(path, mode, args.jobs, cos, args.routing)), flush=True)
        return 0
    ok = True
    for path in args.files:
        for mode, cos in [(m, c) for m in modes for c in coses]:
            # a fresh process per fabric, so peak_rss_mb is that fabric's own
            cmd = [sys.executable, __file__, "--one", "--jobs", str(args.jobs), "--modes", mode, "--cos", cos,
                   "--routing", args.routing,
                   str(ROOT / path) if not Path(path).is_absolute() and not Path(path).exists() else path]
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
            sys.stdout.write(proc.stdout)
            sys.stdout.flush()
            if proc.returncode != 0:
                ok = False
                continue
            line = json.loads(proc.stdout.strip().splitlines()[-1])
            ok &= line["structural_ok"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
