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
* :func:`bring_ups` / :class:`Job`: a routing's static and workload-aware variants share one bring-up; before
  each (pattern, variant) the controller gets the pattern's matrix or none by the diff-only reload
  (``job_switch``: the matrix file replaced and/or the ``traffic`` key set or emptied, SIGHUP, every resynced
  switch confirmed); the flow-mods it cost go into the first run's record.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from job_switch import reload_and_wait, set_traffic_key  # mininet/job_switch.py

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


def bring_ups(policies: tuple[str, ...]) -> list[tuple[str, tuple[str, ...]]]:
    """The runner's bring-ups: (policy that names the bring-up, the variants measured on it). A workload-aware
    policy shares the bring-up of its static one when both run (the controller switched between them by reload)."""
    out: list[tuple[str, tuple[str, ...]]] = []
    for pol in policies:
        if pol.endswith("-wl") and pol[:-3] in policies:
            continue
        wl = f"{pol}-wl"
        out.append((pol, (pol, wl) if wl in policies else (pol,)))
    return out


class Job:
    """What a running controller's ``[hpcfabric] traffic`` holds (None: the static intermediates), and the switch
    to another job by the diff-only reload (``job_switch``): the matrix file replaced and/or the key set or
    emptied in the config copy, SIGHUP, every resynced switch confirmed."""

    def __init__(self, traffic_file: Path | None, tmp: Path) -> None:
        self.traffic_file, self.tmp = traffic_file, tmp
        self.pattern: str | None = None

    @property
    def current_file(self) -> Path | None:
        return self.traffic_file if self.pattern is not None else None

    def start(self, fabric: Any, name: str) -> None:
        """Before the controller starts: its config will name ``name``'s matrix."""
        assert self.traffic_file is not None
        self.traffic_file.write_bytes(matrix_file(fabric, name, self.tmp).read_bytes())
        self.pattern = name

    def use(self, controller: Any, conf: Path, fabric: Any, name: str | None) -> dict[str, Any]:
        """Make the running controller use pattern ``name``'s matrix (None: none). Returns the reload's counts as
        ``reload_*`` keys, {} when nothing had to change."""
        if name == self.pattern:
            return {}
        assert self.traffic_file is not None
        if name is not None:
            tmp = self.traffic_file.with_suffix(".new")
            tmp.write_bytes(matrix_file(fabric, name, self.tmp).read_bytes())
            tmp.replace(self.traffic_file)
        if (name is None) != (self.pattern is None):
            set_traffic_key(conf, self.traffic_file if name is not None else None)
        last = reload_and_wait(controller)
        self.pattern = name
        return {"reload_job": f"{'static' if name is None else name + ' matrix'}",
                "reload_flow_mods": last["flow_mods_sent"], "reload_table_diff": last["table_diff"],
                "reload_group_mods": last.get("group_mods_sent"), "reload_rules_total": last["rules_total"],
                "reload_apply_s": last["apply_s"]}
