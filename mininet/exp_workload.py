"""Experiment steps for workload-aware routing (issue 20): policies, application-like patterns, job switches.

* :data:`POLICIES`: the runner's policies -> (``[hpcfabric] routing``, switch-local PAUSE reaction,
  workload-aware). ``conditional-wl`` / ``valiant-wl`` are conditional / Valiant routing with the
  intermediates chosen for the pattern's traffic matrix (``[hpcfabric] traffic``,
  :mod:`hpcfabric.rules.policies.workload`); without ``-wl`` the intermediates are the static ones.
* :func:`pattern_dests`: who sends to whom for a pattern -- UN and ADV as before
  (:func:`hpcfabric.topology.patterns.pattern`), the application-like ``stencil``, ``transpose`` and
  ``bitrev`` from their traffic matrices (:func:`hpcfabric.topology.traffic.pattern_traffic`): every
  host draws its destinations with the matrix's probabilities (a host the matrix leaves silent only
  receives).
* :func:`load_job`: a workload-aware controller gets the pattern's matrix before the pattern runs, by
  the diff-only reload (``job_switch.switch_job``: the matrix file replaced, SIGHUP, every resynced
  switch confirmed); the flow-mods it cost go into the run's record.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from job_switch import switch_job  # mininet/job_switch.py

from hpcfabric.topology.patterns import ALIASES, pattern

#: policy -> (routing, switch-local PAUSE reaction, workload-aware intermediates)
POLICIES = {
    "minimal": ("minimal", False, False),
    "valiant": ("valiant", False, False),
    "valiant-wl": ("valiant", False, True),
    "conditional": ("conditional", False, False),
    "conditional-wl": ("conditional", False, True),
    "conditional-switch": ("conditional", True, False),
}
#: patterns the runner accepts: UN/ADV (hpcfabric.topology.patterns) and the matrices' application-like ones
APP_PATTERNS = ("stencil", "transpose", "bitrev")
PATTERN_NAMES = {**ALIASES, **{p: p for p in APP_PATTERNS}}
#: destinations per host at most when weights are approximated by repetition
MAX_COPIES = 16


def pattern_dests(fabric: Any, name: str) -> dict[str, tuple[str, ...]]:
    """``host -> destinations`` drawn uniformly by the generator (repeats approximate unequal weights)."""
    if name in ("uniform", "adversarial"):
        return pattern(fabric, name)
    from hpcfabric.topology.traffic import pattern_traffic

    _, off, dsts, prob = pattern_traffic(fabric, name).host_rows(fabric)
    names = [h.name for h in fabric.hosts]
    out: dict[str, tuple[str, ...]] = {}
    for i, h in enumerate(names):
        lo, hi = int(off[i]), int(off[i + 1])
        if lo == hi:
            out[h] = ()
            continue
        p = prob[lo:hi]
        copies = [max(1, round(MAX_COPIES * x / p.max())) for x in p.tolist()] if p.max() > p.min() * 1.0001 \
            else [1] * (hi - lo)
        out[h] = tuple(names[int(d)] for d, c in zip(dsts[lo:hi].tolist(), copies) for _ in range(c))
    return out


def matrix_file(fabric: Any, name: str, tmp: Path) -> Path:
    """The pattern's traffic matrix as a CSV in ``tmp``."""
    from hpcfabric.topology.traffic import pattern_traffic, write_traffic

    path = tmp / f"matrix-{name}.csv"
    if not path.exists():
        write_traffic(pattern_traffic(fabric, name), str(path))
    return path


def load_job(controller: Any, traffic_file: Path, fabric: Any, name: str, tmp: Path) -> dict[str, Any]:
    """Give the running workload-aware controller the matrix of pattern ``name`` (diff-only reload).
    Returns ``{reload_flow_mods, reload_table_diff, reload_rules_total, reload_apply_s}`` (zeros when the
    controller already runs that matrix)."""
    new = matrix_file(fabric, name, tmp)
    if traffic_file.exists() and traffic_file.read_bytes() == new.read_bytes():
        return {"reload_flow_mods": 0, "reload_table_diff": 0, "reload_rules_total": None, "reload_apply_s": 0.0}
    last = switch_job(controller, traffic_file, new)
    return {"reload_flow_mods": last["flow_mods_sent"], "reload_table_diff": last["table_diff"],
            "reload_rules_total": last["rules_total"], "reload_apply_s": last["apply_s"]}
