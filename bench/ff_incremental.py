"""Benchmark: the fast-failover analysis after a repair, from scratch vs kept between repairs.

With ``fast_failover = on`` every repair needs the fast-failover groups of the repaired tables
(:mod:`hpcfabric.failover.groups`). A :class:`~hpcfabric.repair.plan.Repairer` keeps one
:class:`~hpcfabric.failover.groups.FailoverAnalysis` between repairs and walks again only what the changed
switches can alter. For a sequence of repairs on one fabric (one link, three links, one switch, everything
back: seeded), this runs both side by side in one process on the same tables -- ``fast_failover_groups``
from scratch (what every repair did before) and the kept analysis -- and prints one JSON object:
``fresh_s`` / ``incremental_s`` (wall) and ``*_cpu_s`` per repair, ``equal`` (tables, groups, protected and
unprotected ports identical), what the kept analysis redid (``redone``), the first analysis (``warm_s``, the
planner does it before it is ready), the speed-up and the load average before and after.

The repairs' tables come from the real planner (surviving fabric compiled, guards as at load); their
compile is not timed here. Run under ``flock /tmp/hpcfabric-bench.lock`` (timed figures).

Usage: .venv/bin/python bench/ff_incremental.py [--topology topologies/dragonfly-a6-p3-h3.yaml] [--seed 27]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def config_for(topology: Path, tmp: str):
    """configs/dragonfly-a4-p2-h2.conf (fast_failover = on) with another topology."""
    from hpcfabric.config import load_config

    text = (ROOT / "configs" / "dragonfly-a4-p2-h2.conf").read_text()
    text = re.sub(r"(?m)^topology\s*=.*$", f"topology = {topology.resolve()}", text)
    path = Path(tmp) / "ff_incremental.conf"
    path.write_text(text)
    cfg = load_config(path, compile=True, deadlock=False)
    assert cfg.fast_failover, "the config must ask for fast_failover"
    return cfg


def scenarios(fabric, rng: random.Random):
    from hpcfabric.topology.failures import NO_FAILURES, Failures

    def links(n: int):
        return [(link.a, link.a_port) for link in rng.sample(fabric.links, n)]

    switch = rng.choice([s.name for s in fabric.switches])
    return [("one link", Failures.of(fabric, links(1))), ("three links", Failures.of(fabric, links(3))),
            ("one switch", Failures.of(fabric, [], [switch])), ("all back", NO_FAILURES)]


def timed(fn):
    t, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - t, time.process_time() - c


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--topology", default=str(ROOT / "topologies" / "dragonfly-a6-p3-h3.yaml"))
    ap.add_argument("--seed", type=int, default=27)
    args = ap.parse_args(argv)
    from hpcfabric.config.build import adapt_tables
    from hpcfabric.failover.groups import FailoverAnalysis, fast_failover_groups
    from hpcfabric.repair.plan import Repairer

    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        cfg = config_for(Path(args.topology), tmp)
    plain = replace(cfg, fast_failover=False)  # the repairs' tables before groups
    rep = Repairer(plain, prove=False)
    macs = dict(cfg.real_macs)
    kept = FailoverAnalysis(rep.compiled, source_macs=macs)
    _, warm, warm_cpu = timed(lambda: kept.update(adapt_tables(plain, rep.compiled).desired))
    rows = []
    for name, failures in scenarios(cfg.fabric, random.Random(args.seed)):
        plan = rep.plan(failures)
        rep.apply(plan)
        tables = adapt_tables(plain, plan.compiled).desired
        fresh, f_s, f_cpu = timed(lambda: fast_failover_groups(plan.compiled, tables, source_macs=macs))
        inc, i_s, i_cpu = timed(lambda: kept.update(tables))
        equal = (dict(fresh.flows), dict(fresh.groups), dict(fresh.protected), dict(fresh.unprotected)) == \
            (dict(inc.flows), dict(inc.groups), dict(inc.protected), dict(inc.unprotected))
        rows.append({"repair": name, "failures": failures.describe() if failures else [],
                     "changed_switches": len(plan.changed), "fresh_s": round(f_s, 2), "incremental_s": round(i_s, 2),
                     "fresh_cpu_s": round(f_cpu, 2), "incremental_cpu_s": round(i_cpu, 2),
                     "speedup": round(f_s / i_s, 1) if i_s else None, "equal": equal, "redone": kept.stats,
                     "groups": fresh.stats()["groups"]})
    out = {"fabric": cfg.fabric.name, "switches": len(cfg.fabric.switches), "hosts": len(cfg.fabric.hosts),
           "warm_s": round(warm, 2), "warm_cpu_s": round(warm_cpu, 2), "repairs": rows,
           "all_equal": all(r["equal"] for r in rows),
           "fresh_total_s": round(sum(r["fresh_s"] for r in rows), 2),
           "incremental_total_s": round(sum(r["incremental_s"] for r in rows), 2),
           "loadavg_before": [round(x, 2) for x in load_before], "loadavg_after": [round(x, 2) for x in os.getloadavg()],
           "cpus": os.cpu_count()}
    print(json.dumps(out))
    return 0 if out["all_equal"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
