"""Channel dependency graph (CDG) of compiled tables: deadlock freedom per class of service.

A *channel* is (switch, egress port, CoS): the lossless queue a frame waits in
before crossing a link, one per VLAN PCP value when classes of service are on
(``untagged`` otherwise). A frame that arrives on channel c1 and leaves on c2
holds c1 while it waits for c2: a *dependency* c1 -> c2. With link-level flow
control (PAUSE/PFC) a cycle of dependencies can deadlock; no cycle, no
deadlock (Dally and Seitz). Deadlock freedom therefore needs an acyclic CDG.

What is built
-------------
Dependencies come from walking every host pair through the compiled tables
(the fast engine of :mod:`hpcfabric.verify.engine` through the decision lines of
:mod:`hpcfabric.verify.oracle.lines`, one decision row per ingress port and arrival PCP, so a row
*is* the channel the frame arrived on), for
every *scenario*: no port paused, and each fabric port paused alone (its
PORT_STATE entry flipped with :func:`hpcfabric.rules.port_state.port_state_flow`, as
the controller does on a PAUSE). Conditional routing mixes scenarios over
time (a port pauses, resumes, another pauses while frames of the first
scenario are still in the queues), so the check that matters is on the
**union** of every scenario's dependencies; each scenario's own graph is a
subgraph of the union (acyclic whenever the union is, and checked one by one
when it is not). Each scenario is also checked for delivery: every pair
delivered, untagged at the host, no loop.

The report names a cycle as channels ``switch:port@PCP`` in dependency order
(the first channel repeats at the end). Acyclicity is reported for the whole
graph (the deadlock criterion) and per class of service (the subgraph of one
PCP; a cycle can only cross classes if some hop lowers the PCP).
"""


from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from hpcfabric.verify.codes import channel_name, cos_label
from hpcfabric.verify.graphs import edge_graph, find_cycle
from hpcfabric.verify.oracle.lines import DecisionLines
from hpcfabric.verify.scenarios import apply_paused, pausable_ports

__all__ = ["CdgReport", "check_deadlock_freedom", "pausable_ports", "channel_name"]


@dataclass(frozen=True)
class CdgReport:
    """Deadlock-freedom check of one compiled fabric (``as_dict`` is JSON-ready)."""

    fabric: str
    routing: str
    cos: str | None
    cos_levels: int
    scenarios: int  # scenarios walked (the unpaused fabric + one per paused port)
    paused_ports: tuple[str, ...]  # the ports paused one at a time
    channels: int  # channels that carry a dependency
    dependencies: int  # edges of the union graph
    acyclic: bool  # the union of every scenario's dependencies
    cycle: tuple[str, ...] | None  # one cycle of the union, as channels
    per_cos: dict[str, tuple[str, ...] | None]  # class -> a cycle inside that class (None: acyclic)
    classes_used: tuple[str, ...]  # classes (PCP values, or 'untagged') carrying traffic
    scenario_failures: tuple[dict[str, Any], ...]  # scenarios with undelivered pairs or a cycle of their own
    failed_scenarios: int
    pairs_per_scenario: int
    seconds: float
    cyclic_scenarios: int = 0
    notes: tuple[str, ...] = field(default=())
    edges: frozenset[tuple[str, str]] | None = None  # keep=True: the union graph as channel-name pairs

    @property
    def ok(self) -> bool:
        """Acyclic union CDG and every pair delivered in every scenario."""
        return self.acyclic and self.failed_scenarios == 0

    def as_dict(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in ("fabric", "routing", "cos", "cos_levels", "ok")}
        out.update(cdg_acyclic=self.acyclic, cdg_cycle=list(self.cycle) if self.cycle else None,
                   cdg_per_cos={k: (list(v) if v else None) for k, v in self.per_cos.items()},
                   cos_classes_used=list(self.classes_used))
        out.update({k: getattr(self, k) for k in (
            "channels", "dependencies", "scenarios", "paused_ports", "pairs_per_scenario", "failed_scenarios",
            "cyclic_scenarios", "scenario_failures", "seconds", "notes")})
        out.update(paused_ports=len(self.paused_ports), scenario_failures=[dict(f) for f in self.scenario_failures],
                   seconds=round(self.seconds, 3), notes=list(self.notes))
        return out

def _cycle(lines: DecisionLines, g: Any) -> tuple[str, ...] | None:
    return find_cycle(g, lambda r: channel_name(lines.eng.channel(r)))  # type: ignore[arg-type]


def check_deadlock_freedom(
    compiled: Any,
    scenarios: str | Sequence[tuple[str, int]] = "single",
    *,
    max_failures: int = 20,
    keep: bool = False,
) -> CdgReport:
    """Build the CDG of ``compiled`` over ``scenarios`` and check it (see the module docstring).

    Parameters
    ----------
    scenarios : 'single', 'none' or a list of (switch, port)
        'single': the unpaused fabric and every port with a PORT_STATE entry
        paused alone; 'none': the unpaused fabric only; a list: the unpaused
        fabric and each listed port paused alone (a sample).
    """
    t0 = time.perf_counter()
    if scenarios == "single":
        ports = pausable_ports(compiled)
    elif scenarios == "none":
        ports = []
    elif isinstance(scenarios, str):
        raise ValueError(f"scenarios must be 'single', 'none' or a list of (switch, port), not {scenarios!r}")
    else:
        ports = list(scenarios)
    lines = DecisionLines(compiled)
    n_hosts = lines.n
    union: set[int] = set()
    scen: list[tuple[str, dict[int, np.ndarray]]] = []  # paused port, the decision lines it changes
    failures: list[dict[str, Any]] = []
    failed = 0
    notes = []
    base_edges, summary, _cols = lines.walk()
    union.update(base_edges.tolist())
    if summary["undelivered"]:
        failed += 1
        failures.append({"paused": None, **summary})
    ignored = 0
    walked = 1
    for sw, port in ports:
        flipped, applied = apply_paused(compiled, [(sw, port)])
        if not applied:
            ignored += 1
            continue
        walked += 1
        changed = lines.scenario(sw, port, flipped.tables[sw].flows)
        scen.append((f"{sw}:{port}", changed))
        if not changed:
            continue
        edges, summary, _cols = lines.walk(changed)
        union.update(edges.tolist())
        if summary["undelivered"]:
            failed += 1
            if len(failures) < max_failures:
                failures.append({"paused": f"{sw}:{port}", **summary})
    if ignored:
        notes.append(f"{ignored} listed ports have no PORT_STATE entry (nothing to pause)")
    g = edge_graph(union)
    cycle = _cycle(lines, g)
    per_cos: dict[str, tuple[str, ...] | None] = {}
    pcp_of = {r: lines.eng.channel(r)[2] for r in g.nodes}  # type: ignore[index]
    classes = sorted(set(pcp_of.values()))
    for k in classes:
        sub = g.subgraph([r for r, p in pcp_of.items() if p == k])
        per_cos[cos_label(k)] = _cycle(lines, sub)  # type: ignore[arg-type]
    cyclic = 0
    if cycle is not None:  # the union is cyclic: which scenarios are cyclic on their own? (walked again in full)
        for name, changed in [("none", {})] + scen:
            edges = base_edges if not changed else lines.walk(changed, only_changed=False)[0]
            c = _cycle(lines, edge_graph(edges.tolist()))
            if c is not None:
                cyclic += 1
                if len(failures) < max_failures:
                    failures.append({"paused": None if name == "none" else name, "cycle": list(c)})
    else:
        notes.append("every scenario's graph is a subgraph of the acyclic union: all acyclic")
    return CdgReport(
        fabric=compiled.fabric.name,
        routing=compiled.routing,
        cos=getattr(compiled, "cos", None),
        cos_levels=getattr(compiled, "cos_levels", 0),
        scenarios=walked,
        paused_ports=tuple(name for name, _ in scen),
        channels=g.number_of_nodes(),
        dependencies=g.number_of_edges(),
        acyclic=cycle is None,
        cycle=cycle,
        per_cos=per_cos,
        classes_used=tuple(cos_label(k) for k in classes),
        scenario_failures=tuple(failures),
        failed_scenarios=failed,
        pairs_per_scenario=n_hosts * (n_hosts - 1),
        seconds=time.perf_counter() - t0,
        cyclic_scenarios=cyclic,
        notes=tuple(notes),
        edges=frozenset((channel_name(lines.eng.channel(a)), channel_name(lines.eng.channel(b)))  # type: ignore[arg-type]
                        for a, b in g.edges) if keep else None,
    )

