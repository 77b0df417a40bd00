"""Paper Fig. 12 regenerated: latency vs offered load and accepted vs offered load, UN and ADV.

:func:`run` sweeps the routers of :data:`hpcfabric.sim.sweep.ROUTERS` (MIN, VAL, PB,
conditional with ideal / switch-local / controller reaction) over loads and seeds on one fabric
with the frame-level simulator (:mod:`hpcfabric.sim`; default switch model ``shared``), one task
per router x pattern x seed (a router whose seeds share one warm-up per point, ``warmup``: one task
per router x pattern, run first), the tasks spread over ``jobs`` forked worker processes or over a Dask
cluster (:mod:`hpcfabric.analysis.distributed`); a task stops one load after it saturates (accepted
< 90 % of offered or measured frames left undelivered). Points are summarised over their seeds
(mean and 95 % interval). Writes ``fig12.csv`` (one row
per point), ``fig12.json`` (points, parameters, saturation bounds of the tables, timing, peak
memory) and ``fig12.png``.
"""

from __future__ import annotations

import os
import resource
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from hpcfabric.analysis.distributed import map_tasks
from hpcfabric.analysis.results import partial_path, plot_curves, write_csv, write_results
from hpcfabric.sim.bounds import dragonfly_adv_closed_forms, saturation_bound
from hpcfabric.sim.params import SimParams
from hpcfabric.sim.sweep import ROUTERS, Routers, run_branches, run_point, shares_warmup, summarise
from hpcfabric.sim.tables import SimError
from hpcfabric.sim.traffic import Traffic
from hpcfabric.topology.model import Fabric

__all__ = ["run", "LOADS", "QUICK_LOADS", "PATTERNS", "PARAMS", "QUICK_PARAMS", "plot"]

PATTERNS = ("uniform", "adversarial")
LOADS = {"uniform": (0.05, 0.2, 0.4, 0.6, 0.8, 0.9), "adversarial": (0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5)}
QUICK_LOADS = {"uniform": (0.1, 0.4, 0.7), "adversarial": (0.05, 0.2, 0.4)}
#: default windows (frame times) and switch model: the commodity shared-buffer switch (docs/simulation.md)
PARAMS = dict(warmup_slots=500, window_slots=500, drain_slots=1000, switch="shared")
QUICK_PARAMS = dict(warmup_slots=300, window_slots=300, drain_slots=600, switch="shared")
FIELDS = ("router", "pattern", "load", "seeds", "latency_ns", "latency_ci_ns", "p99_ns", "accepted", "accepted_ci",
          "unfinished", "refused", "lost", "conserved", "deadlock", "flips", "wall_s", "ticks", "hops", "simulated_ns",
          "warmup", "warmup_ticks", "settled", "tail_accepted")

_STATE: dict[str, Any] = {}  # the parent's routers, inherited by forked workers; a Dask worker's own


def _routers(fabric: Any) -> Routers:
    """The Routers of ``fabric`` (a Fabric, or a topology path a Dask worker loads), built once per process."""
    key = fabric if isinstance(fabric, str) else fabric.name
    rt = _STATE.get("routers")
    if rt is None or _STATE.get("key") != key:
        if isinstance(fabric, str):
            from hpcfabric.topology.loader import load_topology

            fabric = load_topology(fabric)
        rt = Routers(fabric)
        _STATE.update(routers=rt, key=key)
    return rt


def _saturated(r: Any, load: float) -> bool:
    return bool(r.deadlock) or r.unfinished > 0 or r.accepted < 0.9 * load


def _curve(task: tuple[Any, str, str, tuple[float, ...], tuple[int, ...], SimParams]) -> list[tuple[str, str, float, Any]]:
    """One router x pattern x seed over rising loads; stops one load after it saturates. Several seeds:
    they branch from one shared warm-up per load (``run_branches``) and stop after any saturates."""
    fabric, name, pattern, loads, seeds, params = task
    routers = _routers(fabric)
    out = []
    for load in loads:
        rs = run_branches(routers, name, pattern, load, params, list(seeds)) if len(seeds) > 1 else \
            [run_point(routers, name, pattern, load, params, seeds[0])]
        out.extend((name, pattern, load, r) for r in rs)
        if any(_saturated(r, load) for r in rs):
            break  # saturated: higher loads only cost time
    return out


def _points(runs: list[tuple[str, str, float, Any]]) -> list[dict[str, Any]]:
    """Runs grouped per (router, pattern, load), summarised over their seeds."""
    by: dict[tuple[str, str, float], list[Any]] = {}
    for name, pat, load, r in runs:
        by.setdefault((name, pat, load), []).append(r)
    rows = []
    for (name, pat, load), rs in by.items():
        row = summarise(rs)
        row.update(router=name, pattern=pat, load=load)
        rows.append(row)
    return rows


def run(fabric: Fabric, out: str | os.PathLike[str], *, quick: bool = False, routers: Sequence[str] = ROUTERS,
        patterns: Sequence[str] = PATTERNS, loads: dict[str, Sequence[float]] | None = None, seeds: int | None = None,
        params: SimParams | None = None, jobs: int = 1, plots: bool = True, progress: Callable[[int, int], None] | None = None,
        log: Callable[[str], None] | None = None, dask: str | None = None, warmup: str = "auto") -> tuple[dict[str, Any], list[Path]]:
    """Sweep (module docstring); ``dask``: run the curves on a Dask cluster instead of ``jobs`` local processes;
    ``warmup``: which routers' seeds branch from one shared warm-up (:data:`hpcfabric.sim.sweep.WARMUPS`)."""
    t0 = time.perf_counter()
    loads = dict(loads or (QUICK_LOADS if quick else LOADS))
    seeds = seeds or (1 if quick else 2)
    params = params or SimParams(**(QUICK_PARAMS if quick else PARAMS))
    rt = Routers(fabric)
    names = [n for n in routers if rt.supports(n)]
    for n in names:  # compile and precompute before forking (workers share them)
        if log:
            log(f"{fabric.name}: tables for {n}")
        rt.router(n)
    _STATE.update(routers=rt, key=fabric.name)
    t_tables = time.perf_counter() - t0
    bounds: dict[str, Any] = {}
    for pat in patterns:
        tr = Traffic(fabric, pat)
        for n, pol in (("MIN", "minimal"), ("VAL", "valiant")):
            if n in names:
                b, pid = saturation_bound(rt.forwarding(pol), tr)
                pm = rt.forwarding(pol).pm
                bounds[f"{n}/{pat}"] = {"saturation": b, "link": f"{pm.names[int(pm.sw[pid])]}:{int(pm.port[pid])}"}
    if fabric.kind == "dragonfly":
        try:
            bounds["closed_forms_adversarial"] = dragonfly_adv_closed_forms(fabric)
        except SimError as why:
            bounds["closed_forms_adversarial"] = str(why)
    ref: Any = fabric.params.get("source") if dask and fabric.params.get("source") else fabric
    shared = [n for n in names if seeds > 1 and shares_warmup(n, params, warmup)]
    tasks = [(ref, n, pat, tuple(loads[pat]), tuple(range(seeds)), params) for n in shared for pat in patterns]
    tasks += [(ref, n, pat, tuple(loads[pat]), (seed,), params) for pat in patterns for n in names if n not in shared
              for seed in range(seeds)]  # the shared-warm-up curves first: the longest tasks
    runs: list[Any] = []
    outdir = Path(out)
    outdir.mkdir(parents=True, exist_ok=True)
    partial = partial_path(outdir, "fig12")  # points as their curves finish (a long run can be read while it goes)

    def collect(got: list[Any]) -> None:
        runs.extend(got)
        write_csv(partial, _points(runs), FIELDS)
        if progress:
            progress(1, len(tasks))

    map_tasks(_curve, tasks, jobs, dask, collect)
    _STATE.clear()
    rows = _points(runs)
    rows.sort(key=lambda r: (r["pattern"], ROUTERS.index(r["router"]) if r["router"] in ROUTERS else 99, r["load"]))
    wall = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rss_children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    sim_ns = sum(r["simulated_ns"] for r in rows)
    sim_wall = sum(r["wall_s"] for r in rows)
    result = {
        "fabric": fabric.name, "switches": len(fabric.switches), "hosts": len(fabric.hosts), "quick": quick,
        "params": {k: v for k, v in params.as_dict().items() if k != "extra"}, "seeds": seeds, "routers": names,
        "shared_warmup": shared,
        "bounds": bounds, "points": rows,
        "timing": {"wall_s": wall, "tables_s": t_tables, "jobs": jobs, "dask": dask,
                   "simulated_us_per_wall_s": sim_ns / 1e3 / max(sim_wall, 1e-9),
                   "frame_hops_per_s": sum(r["hops"] for r in rows) / max(sim_wall, 1e-9),
                   "peak_rss_mib_parent": rss, "peak_rss_mib_worker": rss_children},
    }
    return result, write_results(outdir, "fig12", rows, result, FIELDS, plot if plots else None)


def plot(result: dict[str, Any], path: Path) -> None:
    pats = sorted({r["pattern"] for r in result["points"]}, key=lambda p: PATTERNS.index(p) if p in PATTERNS else 9)
    plot_curves(result, path, pats)
