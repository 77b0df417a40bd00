"""Rule counts and verification that scale to the paper's ~300,000-host builds.

:func:`count_rules` compiles every switch (or a chosen subset) and keeps only
counts and the results of **structural checks**, never the tables, so memory
stays bounded; with ``jobs > 1`` the switches are compiled by forked worker
processes that share the fabric, the address plan and the precomputed
:class:`~hpcfabric.rules.context.Context` copy-on-write and return only counts.

Structural checks, on every compiled switch (complete, not sampled):

* no two entries of one table with equal priority overlap (OpenFlow would
  pick either: a compile bug);
* every ``output`` of a forwarding entry is a port in use on the switch, and
  every ``in_port`` match names one;
* per-group addressing: access switches hold exactly Eq. 1 entries;
* compact addressing on Flattened Butterfly, fat-tree and folded Clos: entries
  = ports in use (the lower bound); Dragonfly: Eq. 1 >= entries >= ports in use.

:func:`verify_at_scale` adds the forwarding check: :func:`hpcfabric.verify.oracle.allpairs.verify`
with ``sample=N`` walks every source to N random destinations (plus the
invalid-address probes) through the full compiled tables. Its ``coverage``
field states both parts.
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass, field
from statistics import mean
from typing import Any, Iterable, Sequence

from hpcfabric.rules.addressing import AddressPlan, plan_addresses
from hpcfabric.analysis.distributed import map_tasks
from hpcfabric.analysis.progress import bar
from hpcfabric.errors import ConfigError
from hpcfabric.rules.flows import OFPP_CONTROLLER, OFPP_IN_PORT, TABLE_ROUTE, Output
from hpcfabric.topology.model import Fabric, gc_paused

#: Kinds whose compact tables must hold exactly one entry per port in use.
LOWER_BOUND_KINDS = frozenset({"flattened_butterfly", "fat_tree", "folded_clos"})


@dataclass(frozen=True, slots=True)
class SwitchCount:
    """Counts and check results of one compiled switch."""

    name: str
    role: str
    access: bool
    ports: int  # ports in use
    rules: int  # forwarding entries (host + route classes of table ROUTE)
    flows: int  # every entry of every table
    overlaps: int  # equal-priority overlapping pairs
    bad_ports: int  # outputs / in_port matches naming a port not in use
    eq1: int | None  # Eq. 1 for access switches


@dataclass
class RuleCounts:
    """Per-switch counts of one (fabric, addressing) compilation, and their summary."""

    fabric: Fabric
    plan: AddressPlan
    counts: list[SwitchCount]
    seconds: float
    jobs: int
    sampled: bool = False
    notes: list[str] = field(default_factory=list)
    routing: str = "minimal"
    cos: tuple[str | None, int] = (None, 0)  # (scheme, levels) compiled

    @property
    def access(self) -> list[SwitchCount]:
        return [c for c in self.counts if c.access]

    def summary(self) -> dict[str, Any]:
        f, mode = self.fabric, self.plan.mode
        acc = [c.rules for c in self.access] or [0]
        every = [c.rules for c in self.counts] or [0]
        out: dict[str, Any] = {
            "fabric": f.name,
            "kind": f.kind,
            "addressing": mode,
            "layout": self.plan.layout.describe(),
            "switches": len(f.switches),
            "hosts": len(f.hosts),
            "compiled_switches": len(self.counts),
            "rules_min": min(acc),
            "rules_mean": round(mean(acc), 3),
            "rules_max": max(acc),
            "all_rules_min": min(every),
            "all_rules_max": max(every),
            "routing": self.routing,
            "cos": f"{self.cos[0]}/{self.cos[1]}" if self.cos[0] else "off",
            # every entry of every table of an access switch (CoS push/step entries and pop twins included)
            "flows_mean": round(mean([c.flows for c in self.access] or [0]), 3),
            "flows_max": max([c.flows for c in self.access] or [0]),
            "lower_bound_met": all(c.rules == c.ports for c in self.counts),
            "overlaps": sum(c.overlaps for c in self.counts),
            "bad_ports": sum(c.bad_ports for c in self.counts),
        }
        if mode == "per-group":
            out["eq1_met"] = all(c.rules == c.eq1 for c in self.access)
        if f.kind == "dragonfly":
            from hpcfabric.rules.fabrics.dragonfly import dragonfly_band

            out["paper_band"] = list(dragonfly_band(f))
        out["structural_ok"] = not self.problems()
        out["coverage"] = self.coverage()
        return out

    def problems(self) -> list[str]:
        """Violated structural invariants (empty when everything holds)."""
        bad: list[str] = []
        over = [c.name for c in self.counts if c.overlaps]
        if over:
            bad.append(f"equal-priority overlaps on {len(over)} switch(es), e.g. {over[0]}")
        ports = [c.name for c in self.counts if c.bad_ports]
        if ports:
            bad.append(f"entries naming ports not in use on {len(ports)} switch(es), e.g. {ports[0]}")
        mode, kind = self.plan.mode, self.fabric.kind
        if mode == "per-group":
            off = [c for c in self.access if c.rules != c.eq1]
            if off:
                bad.append(f"{len(off)} access switch(es) differ from Eq. 1, e.g. {off[0].name}: {off[0].rules} != {off[0].eq1}")
        if mode == "compact" and kind in LOWER_BOUND_KINDS:
            off = [c for c in self.counts if c.rules != c.ports]
            if off:
                bad.append(f"{len(off)} switch(es) above/below the lower bound, e.g. {off[0].name}: {off[0].rules} rules, {off[0].ports} ports")
        if mode == "compact" and kind == "dragonfly":
            off = [c for c in self.access if not c.ports <= c.rules <= (c.eq1 or 0)]
            if off:
                bad.append(f"{len(off)} Dragonfly switch(es) outside [ports, Eq. 1], e.g. {off[0].name}")
        return bad

    def coverage(self) -> str:
        n, total = len(self.counts), len(self.fabric.switches)
        which = f"all {total} switches" if n == total else f"a sample of {n} of {total} switches"
        return f"structural checks (overlaps, ports, rule counts) on {which}"


# ---------------------------------------------------------------------------
# compilation, in-process or by forked workers

_WORK: dict[str, Any] = {}  # set in the parent before forking; read by the workers


def _group_sizes(fabric: Fabric) -> tuple[int, dict[int, int]]:
    sizes: dict[int, int] = {}
    for sw in fabric.access_switches:
        sizes[sw.group] = sizes.get(sw.group, 0) + 1
    return len(sizes), sizes


def _check_switch(fabric: Fabric, name: str, flows: Sequence[Any]) -> tuple[int, int]:
    from hpcfabric.verify.reference.pipeline import check_overlaps

    overlaps = len(check_overlaps(flows))
    ports = fabric.ports(name)
    bad = 0
    for f in flows:
        if f.match.in_port is not None and f.match.in_port not in ports:
            bad += 1
        if f.table == TABLE_ROUTE:
            for a in f.actions:
                if isinstance(a, Output) and a.port not in ports and a.port not in (OFPP_IN_PORT, OFPP_CONTROLLER):
                    bad += 1
    return overlaps, bad


def _compile_range(indices: Sequence[int]) -> list[tuple[int, SwitchCount]]:
    from hpcfabric.rules.compiler import compile_switch

    ctx, checks = _WORK["ctx"], _WORK["checks"]
    fabric = ctx.fabric
    n_groups, sizes = _WORK["groups"]
    out = []
    with gc_paused():
        for i in indices:
            sw = fabric.switches[i]
            table = compile_switch(ctx, sw)
            access = table.access
            rules = table.forwarding
            overlaps, bad = _check_switch(fabric, sw.name, table.flows) if checks else (0, 0)
            eq1 = (n_groups - 1) + (sizes[sw.group] - 1) + len(fabric.hosts_on(sw.name)) if access else None
            out.append((i, SwitchCount(sw.name, sw.role, access, table.ports, rules, len(table.flows), overlaps, bad, eq1)))
    return out


def spread(members: Sequence[int], n: int) -> list[int]:
    """``n`` deterministic, evenly spaced members (first and last included): the switches a sample compiles."""
    if len(members) <= n:
        return list(members)
    return sorted({members[round(j * (len(members) - 1) / (n - 1))] for j in range(n)})


def count_rules(
    fabric: Fabric,
    plan: AddressPlan | str,
    *,
    switches: Iterable[int] | None = None,
    jobs: int = 1,
    checks: bool = True,
    progress: bool = False,
    desc: str | None = None,
    routing: str = "minimal",
    cos: bool | str | None = None,
) -> RuleCounts:
    """Compile the switches of ``fabric`` (all, or the indices in ``switches``)
    and return their counts and structural check results (no tables kept).

    Parameters
    ----------
    plan : AddressPlan or str
        An address plan for ``fabric``, or an addressing mode to plan with.
    jobs : int
        Worker processes (fork); 1 compiles in this process. The workers share
        the fabric, plan and compile context copy-on-write and return counts.
    checks : bool
        Run the per-switch structural checks (overlaps, ports).
    progress : bool
        Show a progress bar on stderr.
    routing, cos
        As :func:`~hpcfabric.rules.compiler.compile_fabric`: the default ``cos=None`` counts the
        tables the compiler installs by default (the proven deadlock-free classes,
        :func:`~hpcfabric.rules.cos.default_cos`); ``cos=False`` the untagged ones.
    """
    from hpcfabric.rules.cos import resolve_cos
    from hpcfabric.rules.context import Context

    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ConfigError(f"--jobs must be a positive integer, got {jobs!r}", field="--jobs")
    t0 = time.perf_counter()
    if isinstance(plan, str):
        plan = plan_addresses(fabric, plan)
    idx = list(range(len(fabric.switches))) if switches is None else sorted(set(switches))
    scheme, levels = resolve_cos(fabric, routing, cos, None)
    with gc_paused():
        ctx = Context(fabric, plan, routing)
        ctx.cos, ctx.cos_levels = scheme, levels
    _WORK.update(ctx=ctx, checks=checks, groups=_group_sizes(fabric))
    results: list[tuple[int, SwitchCount]] = []
    pb = bar(len(idx), desc or f"{fabric.name} {plan.mode}", progress)
    try:
        jobs = min(jobs, max(1, len(idx) // 64))
        chunk = max(1, len(idx) // 100) if jobs == 1 else max(1, min(2000, len(idx) // (jobs * 8)))

        def collect(part: list[tuple[int, SwitchCount]]) -> None:
            results.extend(part)
            pb.update(len(part))

        map_tasks(_compile_range, [idx[s : s + chunk] for s in range(0, len(idx), chunk)], jobs, None, collect)
    finally:
        pb.close()
        _WORK.clear()
    results.sort(key=lambda r: r[0])
    return RuleCounts(
        fabric, plan, [c for _, c in results], time.perf_counter() - t0, jobs, sampled=switches is not None,
        routing=routing, cos=(scheme, levels),
    )


def peak_rss_mb() -> dict[str, float]:
    """Peak resident set of this process and of its largest finished child, MiB."""
    me = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {"peak_rss_mb": round(me, 1), "worker_peak_rss_mb": round(kids, 1)}


def default_jobs() -> int:
    """Worker processes to use by default: the CPUs this process may run on, at most 2."""
    try:
        return max(1, min(2, len(os.sched_getaffinity(0))))
    except AttributeError:  # pragma: no cover - non-Linux
        return 1


def verify_at_scale(
    fabric: Fabric, mode: str = "compact", *, sample: int = 64, seed: int = 0, jobs: int = 1, progress: bool = False
) -> dict[str, Any]:
    """Structural checks on every switch + sampled all-sources forwarding check.

    Returns a JSON-ready dict: the :meth:`RuleCounts.summary` fields, the
    verifier's counts (``pairs``, ``delivered``, ``loops``...), ``ok`` (both
    parts pass) and ``coverage`` stating what was checked exhaustively and
    what by sampling.
    """
    from hpcfabric.rules.compiler import compile_fabric
    from hpcfabric.verify.oracle.allpairs import verify

    plan = plan_addresses(fabric, mode)
    counts = count_rules(fabric, plan, jobs=jobs, progress=progress)
    summary = counts.summary()
    compiled = compile_fabric(fabric, plan)
    report = verify(compiled, sample=sample, seed=seed)
    rep = report.as_dict()
    problems = counts.problems()
    return {
        **summary,
        "ok": report.ok and not problems,
        "problems": problems,
        "pairs": rep["pairs"],
        "delivered": rep["delivered"],
        "misdelivered": rep["misdelivered"],
        "dropped": rep["dropped"],
        "loops": rep["loops"],
        "max_hops": rep["max_hops"],
        "invalid_probes": rep["invalid_probes"],
        "invalid_probe_failures": rep["invalid_probe_failures"],
        "verify_seconds": rep["seconds"],
        "coverage": f"{summary['coverage']}; forwarding: {rep['coverage']} (+ {rep['invalid_probes']} invalid-address probes)",
    }
