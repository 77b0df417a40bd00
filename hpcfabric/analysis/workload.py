"""Workload-aware routing judged in the simulator: ``hpcfabric analyze workload`` (docs/workload.md).

For every pattern (a :class:`~hpcfabric.topology.traffic.TrafficMatrix` from
:func:`~hpcfabric.topology.traffic.pattern_traffic`): the intermediates the policy chooses for it
(:func:`~hpcfabric.rules.policies.workload.choose_intermediates`, model loads and time), the
saturation bound of the oblivious tables (MIN, VAL, VAL+WA: exact channel loads over the compiled
tables, :func:`~hpcfabric.sim.bounds.saturation_bound`), and latency / accepted load vs offered load
from the frame-level simulator for MIN, VAL, VAL+WA, COND-ideal, COND-ideal+WA (``+WA``: the
tables compiled with ``traffic=`` that matrix). A pattern ``NAME:spread`` places the ranks of
stencil/transpose/bitrev one per access switch (``pattern_traffic(..., placement="spread")``). Writes ``workload.csv``, ``workload.json`` and
``workload.png``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from hpcfabric.analysis.distributed import map_tasks
from hpcfabric.analysis.results import partial_path, plot_curves, write_csv, write_results
from hpcfabric.rules.policies.workload import choose_intermediates
from hpcfabric.sim.bounds import saturation_bound
from hpcfabric.sim.params import SimParams
from hpcfabric.sim.sweep import WA, Routers, run_point, summarise
from hpcfabric.sim.traffic import Traffic
from hpcfabric.topology.model import Fabric
from hpcfabric.topology.traffic import pattern_traffic

__all__ = ["run", "PATTERNS", "ROUTERS", "LOADS", "QUICK_LOADS", "plot"]

PATTERNS = ("uniform", "adversarial", "stencil", "transpose")
ROUTERS = ("MIN", "VAL", "VAL" + WA, "COND-ideal", "COND-ideal" + WA)
LOADS = {"uniform": (0.1, 0.3, 0.5, 0.7), "adversarial": (0.05, 0.1, 0.2, 0.3, 0.4, 0.5),
         "stencil": (0.05, 0.1, 0.2, 0.3, 0.4, 0.5), "transpose": (0.1, 0.2, 0.3, 0.5, 0.7, 0.9),
         "bitrev": (0.1, 0.2, 0.3, 0.5, 0.7, 0.9)}
QUICK_LOADS = {"uniform": (0.1, 0.4), "adversarial": (0.1, 0.3), "stencil": (0.1, 0.3),
               "transpose": (0.1, 0.5), "bitrev": (0.1, 0.5)}
FIELDS = ("router", "pattern", "load", "seeds", "latency_ns", "latency_ci_ns", "p99_ns", "accepted", "accepted_ci",
          "unfinished", "refused", "lost", "conserved", "deadlock", "flips", "wall_s")

_STATE: dict[str, Any] = {}


def _traffic(fabric: Fabric, pattern: str, matrix: Any) -> Traffic:
    # UN and ADV through the simulator's arithmetic draws (same distribution as their matrices)
    return Traffic(fabric, pattern) if pattern in ("uniform", "adversarial") else Traffic.from_matrix(fabric, matrix)


def _curve(task: tuple[str, str, tuple[float, ...], int, SimParams]) -> list[dict[str, Any]]:
    name, pattern, loads, seeds, params = task
    routers: Routers = _STATE["routers"]
    tr: Traffic = _STATE["traffic"][pattern]
    share = float(np.mean(tr.rate)) if isinstance(tr.rate, np.ndarray) else 1.0
    rows = []
    for load in loads:
        s = summarise(run_point(routers, name, pattern, load, params, seed, traffic=tr) for seed in range(seeds))
        # accepted per sending host (silent hosts of a matrix do not count)
        s["accepted"] /= share
        s["accepted_ci"] /= share
        s.update(router=name, pattern=pattern, load=load)
        rows.append(s)
        if s["deadlock"] or s["unfinished"] > 0 or s["accepted"] < 0.9 * load:
            break
    return rows


def run(fabric: Fabric, out: str | os.PathLike[str], *, quick: bool = False, routers: Sequence[str] = ROUTERS,
        patterns: Sequence[str] = PATTERNS, loads: dict[str, Sequence[float]] | None = None, seeds: int | None = None,
        params: SimParams | None = None, jobs: int = 1, plots: bool = True,
        log: Callable[[str], None] | None = None) -> tuple[dict[str, Any], list[Path]]:
    """Model, bounds and simulated curves of every (router, pattern); see the module docstring."""
    t0 = time.perf_counter()
    loads = dict(loads or {p: (QUICK_LOADS if quick else LOADS)[p.partition(":")[0]] for p in patterns})
    seeds = seeds or (1 if quick else 2)
    params = params or (SimParams(warmup_slots=300, window_slots=300, drain_slots=600) if quick else
                        SimParams(warmup_slots=500, window_slots=500, drain_slots=1000))
    say = log or (lambda _m: None)
    rt = Routers(fabric)
    model: dict[str, Any] = {}
    bounds: dict[str, Any] = {}
    traffic: dict[str, Traffic] = {}
    for pat in patterns:
        base, _, placement = pat.partition(":")
        matrix = pattern_traffic(fabric, base, placement=placement or "packed")
        rt.set_traffic(pat, matrix)
        traffic[pat] = _traffic(fabric, pat, matrix)
        for routing in ("valiant", "conditional"):
            c = choose_intermediates(fabric, matrix, routing)
            model[f"{routing}/{pat}"] = {"static_max": c.static_max, "chosen_max": c.chosen_max,
                                         "minimal_max": c.minimal_max, "moved": c.moved, "host_ports": c.host_ports,
                                         "seconds": round(c.seconds, 3)}
            say(f"{fabric.name} {pat} {routing}: model max load static {c.static_max:g} -> chosen {c.chosen_max:g}, "
                f"{c.moved}/{c.host_ports} host ports moved, {c.seconds:.1f} s")
        for name in routers:
            say(f"{fabric.name}: tables for {name} / {pat}")
            rt.router(name, pat if name.endswith(WA) else None)
            if name in ("MIN", "VAL", "VAL" + WA):
                pol = {"MIN": "minimal"}.get(name, "valiant")
                fw = rt.forwarding(pol, pat if name.endswith(WA) else None)
                b, pid = saturation_bound(fw, traffic[pat])
                bounds[f"{name}/{pat}"] = {"saturation": b,
                                           "link": f"{fw.pm.names[int(fw.pm.sw[pid])]}:{int(fw.pm.port[pid])}"}
    _STATE.update(routers=rt, traffic=traffic)
    tasks = [(n, pat, tuple(loads[pat]), seeds, params) for pat in patterns for n in routers]
    rows: list[dict[str, Any]] = []
    outdir = Path(out)
    outdir.mkdir(parents=True, exist_ok=True)
    partial = partial_path(outdir, "workload")

    def collect(got: list[dict[str, Any]]) -> None:
        rows.extend(got)
        write_csv(partial, rows, FIELDS)
        say(f"curve {got[0]['router']} / {got[0]['pattern']} done ({len(rows)} points)")

    map_tasks(_curve, tasks, jobs, None, collect)
    _STATE.clear()
    rows.sort(key=lambda r: (r["pattern"], list(routers).index(r["router"]), r["load"]))
    result = {"fabric": fabric.name, "switches": len(fabric.switches), "hosts": len(fabric.hosts), "quick": quick,
              "params": {k: v for k, v in params.as_dict().items() if k != "extra"}, "seeds": seeds,
              "routers": list(routers), "patterns": list(patterns), "model": model, "bounds": bounds, "points": rows,
              "wall_s": time.perf_counter() - t0}
    return result, write_results(outdir, "workload", rows, result, FIELDS, plot if plots else None)


def plot(result: dict[str, Any], path: Path) -> None:
    """Latency (top) and accepted load (bottom) vs offered load, one column per pattern (+WA dashed)."""
    plot_curves(result, path, result["patterns"], width=5, accepted="accepted load per sending host",
                style=lambda name: "--" if name.endswith(WA) else "-")
