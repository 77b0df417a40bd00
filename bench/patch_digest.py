"""What the content digest on repair patches costs (hpcfabric.repair.patch.table_digest), beside the plan it rides on.

Plans one link down on a config (default Table III, one global and one local link) without the proof, then times
the digests of the tables the plan patches: cold (no entry seen before: the first repair), cached (the same table
objects: the planner's tables in force), a rebuilt table of the same entries (the controller after a patch), and
the whole patch making. Prints one JSON object.

    .venv/bin/python bench/patch_digest.py [--config configs/dragonfly-table3.conf]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hpcfabric.config import load_config  # noqa: E402
from hpcfabric.repair import patch as P  # noqa: E402
from hpcfabric.repair.plan import Repairer  # noqa: E402
from hpcfabric.topology.failures import Failures  # noqa: E402


def measure(rep: Repairer, kind: str) -> dict:
    fabric = rep.config.fabric
    link = next(x for x in fabric.links if x.kind == kind)
    plan = rep.plan(Failures.of(fabric, [(link.a, link.a_port)]))
    names = list(plan.desired)
    old = [rep.desired[s] for s in names]
    P._ENTRIES.clear()
    P._TABLES.clear()
    t0 = time.perf_counter()
    for t in old:
        P.table_digest(t)
    t1 = time.perf_counter()
    for t in old:
        P.table_digest(t)
    t2 = time.perf_counter()
    rebuilt = [tuple(list(t)) for t in old]  # other table objects, the same entries
    t3 = time.perf_counter()
    for t in rebuilt:
        P.table_digest(t)
    t4 = time.perf_counter()
    for s in names:
        P.make_patch(rep.desired[s], plan.desired[s])
    t5 = time.perf_counter()
    return {"link": f"{link.a}:{link.a_port}", "switches": len(names), "entries": sum(map(len, old)),
            "plan_s": round(plan.seconds, 4), "digest_cold_s": round(t1 - t0, 4), "digest_cached_s": round(t2 - t1, 5),
            "digest_rebuilt_table_s": round(t4 - t3, 4), "patches_s": round(t5 - t4, 4),
            "cold_share_of_plan": round((t1 - t0) / plan.seconds, 3) if plan.seconds else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default=str(ROOT / "configs" / "dragonfly-table3.conf"))
    args = ap.parse_args()
    cfg = load_config(args.config, deadlock=False)
    rep = Repairer(cfg, prove=False)
    out = {"bench": "patch_digest", "config": args.config, "switches": len(cfg.fabric.switches),
           "entries": sum(map(len, cfg.desired.values()))}
    for kind in ("global", "local"):
        out[kind] = measure(Repairer(cfg, prove=False, compiled=rep.compiled), kind)
    t0 = time.perf_counter()
    P._ENTRIES.clear()
    P._TABLES.clear()
    for t in cfg.desired.values():
        P.table_digest(t)
    out["every_table_cold_s"] = round(time.perf_counter() - t0, 3)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
