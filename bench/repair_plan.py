"""Benchmark: the repair planner alone (compile of the surviving fabric + incremental proof), no switches.

Builds the proof base of a config once, then plans ``--links`` single global-link failures in turn (every
``--stride``-th global link) and (``--many``) a switch with ten links across groups, each applied and followed
by its recovery, and prints one JSON line per plan (wall seconds, the planner's timings, the proof's stage
timings, changed switches, verdict, ``gc_s``: seconds the cyclic garbage collector ran inside the plan, and
its full collections). This is the part of a repair that ``bench/control_scale.py`` cannot separate from the
install (docs/scale.md "Failures at Table III"). ``--gc both`` (default): the whole sequence with the
collector as CPython leaves it, then again after :func:`hpcfabric.repair.service.settle_heap` (the planner
process's own setting: what is long-lived frozen), side by side in one run.

``--ref REV`` (e.g. ``main``): the same sequence with REV's ``hpcfabric`` (``git archive`` into a temporary
directory) and with this checkout's, each in a process of its own, ``--rounds`` times in the order REV, this, this,
REV, ... (the load drifts: each side goes first as often); one JSON line per plan with both sides' walls (each
side's best of its rounds) and the ratio this/REV, and a summary (docs/scale.md "The plan's decisions kept per class").

Usage: .venv/bin/python bench/repair_plan.py [--config configs/dragonfly-table3.conf] [--links 4] [--stride 97]
       [--many] [--local N] [--gc both|default|frozen] [--ref main [--rounds 2]] [--base quotient|dense]

``--base dense`` builds the base by walking every column (as before the quotient, issue 27 at 300k); the
default walks one column per symmetry orbit when one serves (:mod:`hpcfabric.verify.incremental.quotient`).
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import os
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: the hpcfabric to time: this checkout's, or (``--root``, with ``--ref``) another revision's
sys.path.insert(0, sys.argv[sys.argv.index("--root") + 1] if "--root" in sys.argv else str(ROOT))

from hpcfabric.config import load_config  # noqa: E402
from hpcfabric.repair.plan import Repairer  # noqa: E402
from hpcfabric.topology.failures import NO_FAILURES, Failures  # noqa: E402


class GcClock:
    """Seconds the cyclic collector ran, and its full (generation 2) collections, since :meth:`reset`."""

    def __init__(self) -> None:
        self.seconds, self.full, self._t = 0.0, 0, 0.0
        gc.callbacks.append(self._cb)

    def _cb(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._t
            self.full += info.get("generation") == 2

    def reset(self) -> None:
        self.seconds, self.full = 0.0, 0


CLOCK = GcClock()


def switch_and_ten(fabric, seed: int = 27) -> tuple[str, list]:
    """A switch's links and ten links in ten other groups (bench/failure_scenarios.py's scenario)."""
    rng = random.Random(seed)
    victim = rng.choice(fabric.switches).name
    own = [(victim, p) for p in sorted(fabric.fabric_ports(victim))]
    groups, ten = {fabric.switch(victim).group}, []
    for link in rng.sample(list(fabric.links), len(fabric.links)):
        g = fabric.switch(link.a).group
        if g not in groups and len(ten) < 10:
            groups.add(g)
            ten.append((link.a, link.a_port))
    return f"{victim} + 10 links", own + ten


def line(kind: str, link: str, plan, wall: float) -> dict:
    return {"plan": kind, "link": link, "wall_s": round(wall, 3), "gc_s": round(CLOCK.seconds, 3),
            "gc_full": CLOCK.full, "verdict": plan.verdict.get("verdict"),
            "changed": len(plan.changed), "waves": plan.verdict.get("waves"),
            "columns": plan.verdict.get("columns"), "new_edges": plan.verdict.get("new_edges"), "timings": {k: round(v, 3) for k, v in plan.timings.items()},
            "proof_stages": {k: round(v, 3) for k, v in (plan.verdict.get("timings") or {}).items()}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(ROOT / "configs" / "dragonfly-table3.conf"))
    ap.add_argument("--links", type=int, default=4)
    ap.add_argument("--stride", type=int, default=97)
    ap.add_argument("--many", action="store_true", help="also a switch and ten links across groups at once")
    ap.add_argument("--local", type=int, default=0, help="also N single local-link failures (every --stride-th)")
    ap.add_argument("--gc", choices=("both", "default", "frozen"), default="both")
    ap.add_argument("--ref", help="the revision (git) to time side by side, first")
    ap.add_argument("--rounds", type=int, default=1, help="with --ref: runs per side, alternating which goes first")
    ap.add_argument("--base", choices=("quotient", "dense"), default="quotient",
                    help="the proof base: one column per symmetry orbit when it serves (default), or every column")
    ap.add_argument("--root", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.ref:
        return side_by_side(args)
    cfg = load_config(args.config)
    fabric = cfg.fabric
    t0 = time.perf_counter()
    rep = Repairer(cfg, prove=True)
    if args.base == "dense":
        from hpcfabric.verify.incremental.delta import ProofState

        rep.state = ProofState.build(rep.compiled, symmetry=False)
    rep.base()
    sym = rep.state.report.get("symmetry") or {}
    print(json.dumps({"bench": "repair_plan", "fabric": fabric.name, "switches": len(fabric.switches),
                      "base": args.base, "base_s": round(time.perf_counter() - t0, 2),
                      "base_ok": rep.state.report["ok"], "quotient": sym.get("used"), "group": sym.get("group"),
                      "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                      "load_avg_1m": round(os.getloadavg()[0], 2)}), flush=True)
    globs = [link for link in fabric.links if link.kind == "global"]
    cases = []
    for i in range(args.links):
        link = globs[(i * args.stride) % len(globs)]
        cases.append((f"{link.a}:{link.a_port}-{link.b}:{link.b_port}", [(link.a, link.a_port)]))
    locs = [link for link in fabric.links if link.kind == "local"]
    for i in range(args.local):
        link = locs[(i * args.stride) % len(locs)]
        cases.append((f"{link.a}:{link.a_port}-{link.b}:{link.b_port}", [(link.a, link.a_port)]))
    if args.many:
        cases.append(switch_and_ten(fabric))
    for mode in (("default", "frozen") if args.gc == "both" else (args.gc,)):
        if mode == "frozen":
            from hpcfabric.repair.service import settle_heap

            settle_heap()
        for name, ports in cases:
            for kind, failures in (("failure", Failures.of(fabric, ports, [])), ("recovery", NO_FAILURES)):
                CLOCK.reset()
                t = time.perf_counter()
                plan = rep.plan(failures)
                print(json.dumps({"gc": mode, **line(kind, name, plan, time.perf_counter() - t)}), flush=True)
                rep.apply(plan)
                if mode == "frozen":
                    gc.freeze()  # as the planner process does after an apply
    return 0


def side_by_side(args) -> int:
    """The sequence with ``args.ref``'s hpcfabric, then this checkout's, each in a process of its own; per plan both
    walls and this/ref."""
    import subprocess
    import tempfile

    argv, skip = [], 0
    for a in sys.argv[1:]:  # this run's options but --ref / --rounds
        if skip or a in ("--ref", "--rounds"):
            skip = not skip and a in ("--ref", "--rounds")
            continue
        argv.append(a)
    runs: dict[str, list[list[dict]]] = {args.ref: [], "this": []}
    with tempfile.TemporaryDirectory(prefix="repair-plan-") as tmp:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.ref, "hpcfabric"], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        order = [(args.ref, tmp), ("this", str(ROOT))]
        for r in range(args.rounds):
            for name, root in (order if r % 2 == 0 else order[::-1]):
                out = subprocess.run([sys.executable, str(Path(__file__).resolve()), *argv, "--root", root],
                                     check=True, capture_output=True, text=True).stdout
                rows = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
                runs[name].append(rows[1:])
                print(json.dumps({"run": name, "round": r, **rows[0],
                                  "walls": [row["wall_s"] for row in rows[1:]]}), flush=True)

    def best(rounds: list[list[dict]]) -> list[dict]:
        return [min(rows, key=lambda row: row["wall_s"]) for rows in zip(*rounds)]

    ref, this = best(runs[args.ref]), best(runs["this"])
    for a, b in zip(ref, this):
        print(json.dumps({"gc": b["gc"], "plan": b["plan"], "link": b["link"], "changed": b["changed"],
                          "verdict": b["verdict"], "same_verdict": a["verdict"] == b["verdict"],
                          "wall_s": {args.ref: a["wall_s"], "this": b["wall_s"]},
                          "ratio": round(b["wall_s"] / a["wall_s"], 3) if a["wall_s"] else None,
                          "timings": {args.ref: a["timings"], "this": b["timings"]},
                          "proof_stages": {args.ref: a["proof_stages"], "this": b["proof_stages"]}}), flush=True)
    total = {k: round(sum(r["wall_s"] for r in rows), 3) for k, rows in ((args.ref, ref), ("this", this))}
    print(json.dumps({"bench": "repair_plan side by side", "ref": args.ref, "plans": len(this), "wall_s": total,
                      "ratio": round(total["this"] / total[args.ref], 3) if total[args.ref] else None,
                      "load_avg_1m": round(os.getloadavg()[0], 2)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
