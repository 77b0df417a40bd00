"""Routers by name, runs over loads and seeds, and confidence intervals.

Router names (the Fig. 12 curves): ``MIN``, ``VAL`` (the compiled minimal / valiant tables),
``PB`` (the piggyback reference router over the minimal tables, :mod:`hpcfabric.sim.pb`) and
``COND-ideal``, ``COND-switch``, ``COND-controller`` (the compiled conditional tables with the
PORT_STATE flip reaction of :data:`hpcfabric.sim.params.REACTIONS`); beside them ``VAL-R``
and ``UGAL-L`` (BookSim2's Valiant and UGAL, :mod:`hpcfabric.sim.pb`) for the peer comparison.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Callable, Iterable

import numpy as np

from hpcfabric.sim.engine import RunResult, Simulator, TableRouter
from hpcfabric.sim.params import SimParams
from hpcfabric.sim.pb import PBRouter, UGALRouter, VALRRouter
from hpcfabric.sim.tables import Forwarding, SimError, compile_policy
from hpcfabric.sim.traffic import Traffic
from hpcfabric.topology.model import Fabric

__all__ = ["ROUTERS", "EXTRA_ROUTERS", "WA", "WARMUPS", "Routers", "run_point", "run_branches", "shares_warmup", "summarise",
           "t_quantile"]

ROUTERS = ("MIN", "VAL", "PB", "COND-ideal", "COND-switch", "COND-controller")
#: suffix of a router whose Valiant intermediates are chosen for the run's traffic matrix
#: (``VAL+WA``, ``COND-ideal+WA``, ...; :mod:`hpcfabric.rules.policies.workload`)
WA = "+WA"
#: routers beside the Fig. 12 curves: BookSim2's Valiant (random intermediate node), for the peer bench
EXTRA_ROUTERS = ("VAL-R", "UGAL-L")
_POLICY = {"MIN": "minimal", "VAL": "valiant", "PB": "minimal", "VAL-R": "minimal", "UGAL-L": "minimal", "COND-ideal": "conditional",
           "COND-switch": "conditional", "COND-controller": "conditional"}


#: flip hold per COND-* router (ns): none, the switch-local learn timeout (1 s), the controller's pause_hold_ms
HOLDS_NS = {"ideal": 0.0, "switch": 1.0e9, "controller": 50.0e6}


class Routers:
    """Compiles each policy once per fabric and builds routers by name."""

    def __init__(self, fabric: Fabric, mode: str = "compact") -> None:
        self.fabric = fabric
        self.mode = mode
        self._fw: dict[Any, Forwarding] = {}
        self._traffic: dict[str, Any] = {}

    def set_traffic(self, key: str, matrix: Any) -> None:
        """The TrafficMatrix the ``+WA`` routers of pattern ``key`` choose their intermediates for."""
        self._traffic[key] = matrix

    def forwarding(self, policy: str, traffic_key: str | None = None) -> Forwarding:
        key = (policy, traffic_key)
        fw = self._fw.get(key)
        if fw is None:
            matrix = self._traffic[traffic_key] if traffic_key is not None else None
            fw = self._fw[key] = Forwarding(compile_policy(self.fabric, policy, self.mode, matrix))
        return fw

    def router(self, name: str, traffic_key: str | None = None) -> Any:
        base = name.removesuffix(WA)
        if base not in _POLICY or (name.endswith(WA) and base in ("MIN", "PB", "VAL-R", "UGAL-L")):
            raise SimError(f"unknown router {name!r}: expected one of {', '.join(ROUTERS)} "
                           f"(VAL and COND-* also with {WA})")
        if name.endswith(WA) and traffic_key not in self._traffic:
            raise SimError(f"router {name} needs a traffic matrix (set_traffic) for {traffic_key!r}")
        fw = self.forwarding(_POLICY[base], traffic_key if name.endswith(WA) else None)
        if name in ("PB", "VAL-R", "UGAL-L"):
            return {"PB": PBRouter, "VAL-R": VALRRouter, "UGAL-L": UGALRouter}[name](fw)
        return TableRouter(fw)

    @staticmethod
    def params_for(name: str, params: SimParams) -> SimParams:
        """The flip reaction and hold a COND-* router runs with (other routers: unchanged).

        ``COND-ideal``: flip while paused, no delay, no hold (the paper's idealised rule);
        ``COND-switch``: one switch latency, held :data:`SWITCH_HOLD_NS` (the switch-local mode's
        learned override lives ``switch_hold_s`` = 1 s); ``COND-controller``: the measured
        reaction, held ``pause_hold_ms`` = 50 ms (the controller's defaults). A hold the user set
        (``params.pause_hold_ns`` > 0) wins. The warm-up is lengthened by the reaction so the
        window sees flipped rules."""
        if not name.startswith("COND-"):
            return params
        reaction = name.removesuffix(WA).split("-", 1)[1]
        hold = params.pause_hold_ns or HOLDS_NS[reaction]
        p = replace(params, reaction=reaction, pause_hold_ns=hold)
        extra = -(-int(p.reaction_ns) // int(p.frame_ns))
        return replace(p, warmup_slots=p.warmup_slots + extra)

    def supports(self, name: str) -> bool:
        if name == "PB":
            return self.fabric.kind in ("dragonfly", "flattened_butterfly")
        return name not in EXTRA_ROUTERS or self.fabric.kind == "dragonfly"


def run_point(routers: Routers, name: str, pattern: str, load: float, params: SimParams, seed: int,
              progress: Callable[[int, int], None] | None = None, traffic: Traffic | None = None) -> RunResult:
    """One run; ``traffic``: the frames' destinations (default: ``Traffic(fabric, pattern)``); a
    ``+WA`` router uses the matrix :meth:`Routers.set_traffic` gave for ``pattern``."""
    tr = traffic if traffic is not None else Traffic(routers.fabric, pattern)
    sim = Simulator(routers.router(name, pattern if name.endswith(WA) else None), tr,
                    Routers.params_for(name, params), seed=seed)
    return sim.run(load, progress)


#: ``auto``: the COND-* routers' seeds share one warm-up that goes on until the network is steady (their
#: flips come only once PAUSEs have backed up: at Table III under ADV that is thousands of frame times past
#: the base warm-up); ``shared``: every router; ``own``: every seed its own warm-up of the base length
WARMUPS = ("auto", "shared", "own")


def shares_warmup(name: str, params: SimParams, mode: str = "auto") -> bool:
    """Whether the seeds of ``name`` branch from one shared warm-up (:data:`WARMUPS`)."""
    if mode != "auto":
        return mode == "shared"
    return name.startswith("COND-")


def run_branches(routers: Routers, name: str, pattern: str, load: float, params: SimParams, seeds: list[int],
                 traffic: Traffic | None = None) -> list[RunResult]:
    """One warm-up (with the first seed's stream), then window and drain once per seed from its state
    (:meth:`hpcfabric.sim.engine.Simulator.run_branches`): replications from a common state."""
    tr = traffic if traffic is not None else Traffic(routers.fabric, pattern)
    sim = Simulator(routers.router(name, pattern if name.endswith(WA) else None), tr,
                    Routers.params_for(name, params), seed=seeds[0])
    return sim.run_branches(load, list(seeds))


_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}


def t_quantile(dof: int) -> float:
    """Student's t 0.975 quantile (95 % two-sided interval)."""
    return _T975.get(dof, 1.96 if dof > 30 else 2.04)


def summarise(runs: Iterable[RunResult]) -> dict[str, Any]:
    """Mean and 95 % confidence half-width over seeds of latency and accepted load, and the checks."""
    runs = list(runs)
    lat = np.array([r.latency_ns for r in runs], dtype=float)
    acc = np.array([r.accepted for r in runs], dtype=float)
    n = len(runs)

    def ci(x: np.ndarray) -> float:
        x = x[np.isfinite(x)]
        return float(t_quantile(len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x))) if len(x) > 1 else 0.0

    return {
        "seeds": n,
        "latency_ns": float(np.nanmean(lat)) if np.isfinite(lat).any() else float("nan"),
        "latency_ci_ns": ci(lat),
        "p99_ns": float(np.nanmean([r.p99_ns for r in runs])),
        "accepted": float(acc.mean()),
        "accepted_ci": ci(acc),
        "unfinished": int(sum(r.unfinished for r in runs)),
        "refused": int(sum(r.refused for r in runs)),
        "lost": int(sum(r.bad + r.overflow for r in runs)),
        "conserved": all(r.conserved for r in runs),
        "deadlock": next((r.deadlock for r in runs if r.deadlock), None),
        "flips": int(sum(r.flips for r in runs)),
        "wall_s": float(sum(r.wall_s for r in runs)),
        "ticks": int(sum(r.ticks for r in runs)),
        "hops": int(sum(r.hops for r in runs)),
        "simulated_ns": float(sum(r.extra["simulated_ns"] for r in runs)),
        "warmup": "shared" if any(r.extra.get("warmup") == "shared" for r in runs) else "own",
        "warmup_ticks": int(max(r.extra.get("warmup_ticks", 0) for r in runs)),
        "settled": next((r.extra["settled"] for r in runs if r.extra.get("settled") is not None), ""),
        "tail_accepted": float(np.mean([r.extra["tail_accepted"] for r in runs])) if all(
            "tail_accepted" in r.extra for r in runs) else None,
    }
