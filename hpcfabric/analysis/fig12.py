"""Paper Fig. 12 regenerated: latency vs offered load and accepted vs offered load, UN and ADV.

:func:`run` sweeps the routers of :data:`hpcfabric.sim.sweep.ROUTERS` (MIN, VAL, PB,
conditional with ideal / switch-local / controller reaction) over loads and seeds on one fabric
with the frame-level simulator (:mod:`hpcfabric.sim`), one curve (router x pattern) per task, the
tasks spread over ``jobs`` forked worker processes; a curve stops one load after it saturates
(accepted < 90 % of offered or measured frames left undelivered). Writes ``fig12.csv`` (one row
per point), ``fig12.json`` (points, parameters, saturation bounds of the tables, timing, peak
memory) and ``fig12.png``.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import resource
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Sequence

from hpcfabric.analysis.results import partial_path, write_csv, write_results
from hpcfabric.sim.bounds import dragonfly_adv_closed_forms, saturation_bound
from hpcfabric.sim.params import SimParams
from hpcfabric.sim.sweep import ROUTERS, Routers, run_point, summarise
from hpcfabric.sim.tables import SimError
from hpcfabric.sim.traffic import Traffic
from hpcfabric.topology.model import Fabric

__all__ = ["run", "LOADS", "QUICK_LOADS", "PATTERNS", "plot"]

PATTERNS = ("uniform", "adversarial")
LOADS = {"uniform": (0.05, 0.2, 0.4, 0.6, 0.8, 0.9), "adversarial": (0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5)}
QUICK_LOADS = {"uniform": (0.1, 0.4, 0.7), "adversarial": (0.05, 0.2, 0.4)}
FIELDS = ("router", "pattern", "load", "seeds", "latency_ns", "latency_ci_ns", "p99_ns", "accepted", "accepted_ci",
          "unfinished", "refused", "lost", "conserved", "deadlock", "flips", "wall_s", "ticks", "hops", "simulated_ns")

_STATE: dict[str, Any] = {}  # the parent's routers, inherited by forked workers


def _curve(task: tuple[str, str, tuple[float, ...], int, SimParams]) -> list[dict[str, Any]]:
    name, pattern, loads, seeds, params = task
    routers: Routers = _STATE["routers"]
    rows = []
    for load in loads:
        runs = [run_point(routers, name, pattern, load, params, seed) for seed in range(seeds)]
        s = summarise(runs)
        s.update(router=name, pattern=pattern, load=load)
        rows.append(s)
        if s["deadlock"] or s["unfinished"] > 0 or s["accepted"] < 0.9 * load:
            break  # saturated: higher loads only cost time
    return rows


def run(fabric: Fabric, out: str | os.PathLike[str], *, quick: bool = False, routers: Sequence[str] = ROUTERS,
        patterns: Sequence[str] = PATTERNS, loads: dict[str, Sequence[float]] | None = None, seeds: int | None = None,
        params: SimParams | None = None, jobs: int = 1, plots: bool = True, progress: Callable[[int, int], None] | None = None,
        log: Callable[[str], None] | None = None) -> tuple[dict[str, Any], list[Path]]:
    t0 = time.perf_counter()
    loads = dict(loads or (QUICK_LOADS if quick else LOADS))
    seeds = seeds or (1 if quick else 2)
    params = params or (SimParams(warmup_slots=300, window_slots=300, drain_slots=600) if quick else
                        SimParams(warmup_slots=500, window_slots=500, drain_slots=1000))
    rt = Routers(fabric)
    names = [n for n in routers if rt.supports(n)]
    for n in names:  # compile and precompute before forking (workers share them)
        if log:
            log(f"{fabric.name}: tables for {n}")
        rt.router(n)
    _STATE["routers"] = rt
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
    tasks = [(n, pat, tuple(loads[pat]), seeds, params) for pat in patterns for n in names]
    rows: list[dict[str, Any]] = []
    outdir = Path(out)
    outdir.mkdir(parents=True, exist_ok=True)
    partial = partial_path(outdir, "fig12")  # curves as they finish (a long run can be read while it goes)

    def collect(got: list[dict[str, Any]]) -> None:
        rows.extend(got)
        write_csv(partial, rows, FIELDS)
        if progress:
            progress(len({(r["router"], r["pattern"]) for r in rows}), len(tasks))

    if jobs > 1 and len(tasks) > 1:
        with mp.get_context("fork").Pool(min(jobs, len(tasks))) as pool:
            for got in pool.imap_unordered(_curve, tasks):
                collect(got)
    else:
        for task in tasks:
            collect(_curve(task))
    _STATE.clear()
    rows.sort(key=lambda r: (r["pattern"], ROUTERS.index(r["router"]), r["load"]))
    wall = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rss_children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    sim_ns = sum(r["simulated_ns"] for r in rows)
    sim_wall = sum(r["wall_s"] for r in rows)
    result = {
        "fabric": fabric.name, "switches": len(fabric.switches), "hosts": len(fabric.hosts), "quick": quick,
        "params": {k: v for k, v in params.as_dict().items() if k != "extra"}, "seeds": seeds, "routers": names,
        "bounds": bounds, "points": rows,
        "timing": {"wall_s": wall, "tables_s": t_tables, "jobs": jobs, "simulated_us_per_wall_s": sim_ns / 1e3 / max(sim_wall, 1e-9),
                   "frame_hops_per_s": sum(r["hops"] for r in rows) / max(sim_wall, 1e-9),
                   "peak_rss_mib_parent": rss, "peak_rss_mib_worker": rss_children},
    }
    return result, write_results(outdir, "fig12", rows, result, FIELDS, plot if plots else None)


def plot(result: dict[str, Any], path: Path) -> None:
    from hpcfabric.analysis.plotting import pyplot, save_figure

    plt = pyplot()
    pats = sorted({r["pattern"] for r in result["points"]}, key=lambda p: PATTERNS.index(p) if p in PATTERNS else 9)
    fig, axes = plt.subplots(2, max(1, len(pats)), figsize=(6 * max(1, len(pats)), 8), squeeze=False)
    for j, pat in enumerate(pats):
        for name in result["routers"]:
            pts = [r for r in result["points"] if r["pattern"] == pat and r["router"] == name]
            if not pts:
                continue
            x = [r["load"] for r in pts]
            axes[0][j].errorbar(x, [r["latency_ns"] / 1000 for r in pts], yerr=[r["latency_ci_ns"] / 1000 for r in pts],
                                marker="o", ms=3, label=name, capsize=2)
            axes[1][j].errorbar(x, [r["accepted"] for r in pts], yerr=[r["accepted_ci"] for r in pts], marker="o", ms=3,
                                label=name, capsize=2)
        axes[0][j].set(title=f"{result['fabric']}: {pat}", xlabel="offered load (fraction of link rate)",
                       ylabel="average latency (us)", yscale="log")
        axes[1][j].plot([0, 1], [0, 1], color="grey", lw=0.5)
        axes[1][j].set(xlabel="offered load", ylabel="accepted load", xlim=(0, 1), ylim=(0, 1))
        axes[0][j].legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)
