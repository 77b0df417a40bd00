"""Check: the repair planner of this checkout plans exactly what another revision's plans (entries, waves, verdicts).

Plans a seeded sequence of random failure sets (1-8 links, 0-2 switches; every fifth step everything back)
against the tables in force -- a proven plan applied or (at random) discarded, as the controller does --
once with this checkout's ``hpcfabric`` and once with ``--ref``'s (``git archive`` into a temporary directory),
each in a process of its own, and compares per plan: the switches changed and regrouped, the waves, the
entries to install (every switch's flows, fingerprinted), the groups, the verdict (proven or why not, the
cycle, the lost pairs) and the incremental proof's own figures (columns, start nodes, nodes walked, nodes
below the change, new dependencies). Prints one JSON line per plan with both revisions' seconds and a
summary; exit 1 if any plan differs.

Usage: .venv/bin/python bench/repair_equal.py [--ref main] [--config configs/dragonfly-a4-p2-h2.conf]
       [--sets 50] [--seed 27]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: verdict fields that say what was proven and how (timings and seconds left out: they differ)
PROOF_FIELDS = ("proven", "verdict", "explanation", "acyclic", "delivered", "cycle", "undelivered", "failures",
                "switches", "columns", "starts", "nodes", "below", "new_edges", "full_check", "waves",
                "redirect_detours")


def fingerprint(plan) -> dict:
    """What a plan installs and what it proves, comparable across revisions."""
    desired = hashlib.sha256(repr(sorted((s, tuple(flows)) for s, flows in plan.desired.items())).encode()).hexdigest()
    groups = hashlib.sha256(repr(sorted(plan.groups.items())).encode()).hexdigest()
    verdict = {k: plan.verdict[k] for k in PROOF_FIELDS if k in plan.verdict}
    return {"changed": list(plan.changed), "regrouped": list(plan.regrouped), "waves": [list(w) for w in plan.waves],
            "entries": plan.entries, "desired": desired, "groups": groups,
            "verdict": json.loads(json.dumps(verdict, default=str))}


def dump(args) -> int:
    sys.path.insert(0, str(Path(args.root).resolve()))
    import hpcfabric
    from hpcfabric.config import load_config
    from hpcfabric.repair.plan import Repairer

    if Path(hpcfabric.__file__).resolve().parent.parent != Path(args.root).resolve():  # the revision asked for
        raise SystemExit(f"repair_equal: imported {hpcfabric.__file__}, not the one under {args.root}")
    from hpcfabric.topology.failures import NO_FAILURES, Failures

    cfg = load_config(args.config)
    fabric = cfg.fabric
    rep = Repairer(cfg, prove=True)
    rep.base()
    rng = random.Random(args.seed)
    names = [s.name for s in fabric.switches]
    for i in range(args.sets):
        if i % 5 == 4:
            failures = NO_FAILURES
        else:
            links = rng.sample(fabric.links, rng.randint(1, min(8, len(fabric.links) // 4)))
            failures = Failures.of(fabric, [(link.a, link.a_port) for link in links], rng.sample(names, rng.randint(0, 2)))
        t = time.perf_counter()
        plan = rep.plan(failures)
        seconds = time.perf_counter() - t
        keep = plan.proven and rng.random() < 0.7
        (rep.apply if keep else rep.discard)(plan)
        print(json.dumps({"i": i, "failures": failures.describe() if failures else "none", "applied": keep,
                          "seconds": round(seconds, 3), **fingerprint(plan)}), flush=True)
    return 0


def run(root: Path, args) -> list[dict]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--dump", "--root", str(root), "--config", args.config,
           "--sets", str(args.sets), "--seed", str(args.seed)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ref", default="main", help="the revision to compare with (git)")
    ap.add_argument("--config", default=str(ROOT / "configs" / "dragonfly-a4-p2-h2.conf"))
    ap.add_argument("--sets", type=int, default=50)
    ap.add_argument("--seed", type=int, default=27)
    ap.add_argument("--dump", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--root", default=str(ROOT), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.dump:
        return dump(args)
    with tempfile.TemporaryDirectory(prefix="repair-equal-") as tmp:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.ref, "hpcfabric"], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        theirs = run(Path(tmp), args)
    ours = run(ROOT, args)
    differ = 0
    for a, b in zip(theirs, ours):
        same = {k: v for k, v in a.items() if k != "seconds"} == {k: v for k, v in b.items() if k != "seconds"}
        differ += not same
        print(json.dumps({"i": a["i"], "same": same, "verdict": b["verdict"].get("verdict"), "changed": len(b["changed"]),
                          "seconds": {args.ref: a["seconds"], "this": b["seconds"]}}
                         | ({} if same else {args.ref: a, "this": b})), flush=True)
    total = {k: round(sum(r["seconds"] for r in rows), 2) for k, rows in ((args.ref, theirs), ("this", ours))}
    ok = not differ and len(theirs) == len(ours) == args.sets
    print(json.dumps({"bench": "repair_equal", "config": Path(args.config).name, "ref": args.ref, "plans": len(ours),
                      "differ": differ, "equal": ok, "seconds": total,
                      "proven": sum(bool(r["verdict"].get("proven")) for r in ours)}), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
