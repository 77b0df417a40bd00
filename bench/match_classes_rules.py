"""Benchmark: destination classes per switch under three capture rules, scalar, the design
check of the writer rule :class:`~hpcfabric.verify.engine.batch.MatchClasses` applies (issue 28;
``hpcfabric/verify/engine/writer.py``, tested in ``tests/test_match_classes.py``).

A switch's destination class is the set of ``eth_dst`` keys (mask, masked value) a destination *meets*
in the installed tables and in their paused copy (:func:`~hpcfabric.verify.scenarios.paused_data_flows`).
Tables are read in order from table 0 with the metadata values that can arrive there (0 at table 0, then
what the ``goto`` entries met before write); within a table, entries in priority order:

* ``none``: every entry whose ``eth_dst`` matches is met;
* ``capture`` (``MatchClasses`` before the writer rule): an entry whose only condition is ``eth_dst`` ends the table for
  the destinations it matches;
* ``writer`` (``MatchClasses``): as ``capture``, and an entry whose only conditions are ``eth_dst`` and
  ``metadata`` also ends the table when every metadata value that can arrive satisfies it; an entry whose
  ``metadata`` condition no arriving value satisfies is not met. Sound: an entry dropped is one that never
  wins for that destination (an earlier entry always matches whatever arrives). Switches with ``Resubmit`` or
  ``LearnLoad`` (switch-local pause reaction) get unknown metadata: ``writer`` is ``capture`` there.

``--check`` runs every line (ingress port x PCP, untagged included) of both variants through the reference
pipeline (:class:`~hpcfabric.verify.reference.pipeline.Pipeline`) for every destination and counts the
``writer`` classes whose destinations decide unlike (must be 0) and the behaviour classes (the fewest any
sound rule can give). Prints one JSON line.

Usage: .venv/bin/python bench/match_classes_rules.py [--switches N] [--check] TOPOLOGY.yaml ROUTING
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RULES = ("none", "capture", "writer")


def _extra_free(m, allow_meta: bool) -> bool:
    """No condition besides ``eth_dst`` (and ``metadata`` if ``allow_meta``)."""
    return (m.in_port is None and m.vlan_pcp is None and m.vlan_vid is None and m.eth_type is None
            and m.reg0 is None and m.eth_src is None and (allow_meta or m.metadata is None))


def met_keys(flows, dst: int, rule: str) -> frozenset:
    """The ``eth_dst`` keys destination ``dst`` meets in ``flows`` under ``rule`` (module docstring)."""
    by_table = defaultdict(list)
    for f in flows:
        by_table[f.table].append(f)
    from hpcfabric.rules.flows import LearnLoad, Resubmit

    # None: unknown values (Resubmit and LearnLoad change metadata outside goto's order: not modelled)
    odd = any(isinstance(a, (LearnLoad, Resubmit)) for f in flows for a in f.actions)
    arriving: dict[int, set[int] | None] = {0: None if odd else {0}}
    met = set()
    for t in sorted(by_table):
        if t not in arriving:
            continue  # no entry met so far goes there
        arr = arriving[t]
        for f in sorted(by_table[t], key=lambda f: -f.priority):  # stable: given order within a priority
            m = f.match
            if m.eth_dst is not None and dst & m.eth_dst[1] != m.eth_dst[0]:
                continue
            if (rule == "writer" and m.metadata is not None and arr is not None
                    and not any(a & m.metadata[1] == m.metadata[0] for a in arr)):
                continue  # no arriving value admits it
            if m.eth_dst is not None:
                met.add((m.eth_dst[1], m.eth_dst[0]))
            if f.goto is not None:
                new = arr
                if f.write_metadata is not None and arr is not None:
                    v, mask = f.write_metadata
                    new = {(a & ~mask) | (v & mask) for a in arr}
                old = arriving.get(f.goto, set())
                arriving[f.goto] = None if new is None or old is None else old | new
            if rule != "none" and m.eth_dst is not None:
                if _extra_free(m, False):
                    break
                if (rule == "writer" and _extra_free(m, True) and arr is not None
                        and all(a & m.metadata[1] == m.metadata[0] for a in arr)):
                    break
    return frozenset(met)


def behaviour(pipes, ports, dst: int) -> tuple:
    from hpcfabric.verify.reference.pipeline import Frame

    out = []
    for pipe in pipes:
        for in_port in ports:
            for pcp in (None, 0, 1, 2):
                try:
                    r = pipe.process(Frame(in_port, 0x1, dst, vlan_pcp=pcp))
                    out.append((tuple((p, fr.vlan_pcp) for p, fr in r.outputs), r.punted))
                except Exception as err:  # a pipeline error is a decision too
                    out.append(("error", type(err).__name__))
    return tuple(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("topology")
    ap.add_argument("routing")
    ap.add_argument("--switches", type=int, default=0, help="only the first N switches (0: all)")
    ap.add_argument("--check", action="store_true", help="compare the writer classes with the reference pipeline")
    args = ap.parse_args()
    from hpcfabric.rules.addressing import plan_addresses
    from hpcfabric.rules.compiler import compile_fabric
    from hpcfabric.topology.loader import load_topology
    from hpcfabric.verify.engine.rows import data_flows, data_relevant
    from hpcfabric.verify.reference.pipeline import Pipeline
    from hpcfabric.verify.scenarios import flip_port_states, paused_data_flows

    t0 = time.perf_counter()
    fabric = load_topology(args.topology)
    section = fabric.params.get("addressing") or {}
    plan = plan_addresses(fabric, section.get("mode", "compact"), section.get("widths"))
    compiled = compile_fabric(fabric, plan, routing=args.routing, cos=True)
    dsts = sorted({int(plan.host_mac[h.name]) for h in fabric.hosts})
    switches = sorted(compiled.tables)[:args.switches or None]
    classes = dict.fromkeys(RULES, 0)
    unlike = behaviours = 0
    for sw in switches:
        flows = compiled.flows(sw)
        paused, _ = paused_data_flows(compiled, sw, [f for f in data_flows(flows) if data_relevant(f)])
        for rule in RULES:
            labels = {d: (met_keys(flows, d, rule), met_keys(paused, d, rule)) for d in dsts}
            classes[rule] += len(set(labels.values()))
        if args.check:
            pipes = (Pipeline(flows), Pipeline(flip_port_states(flows)))
            ports = range(1, max(fabric.ports(sw), default=0) + 1)
            seen: dict[frozenset, set] = defaultdict(set)
            every = set()
            for d in dsts:
                b = behaviour(pipes, ports, d)
                seen[labels[d]].add(b)
                every.add(b)
            unlike += sum(len(s) > 1 for s in seen.values())
            behaviours += len(every)
    n = len(switches)
    out = {"fabric": fabric.name, "routing": args.routing, "switches": n, "destinations": len(dsts),
           "classes_per_switch": {r: round(classes[r] / n, 2) for r in RULES}}
    if args.check:
        out.update(behaviour_classes_per_switch=round(behaviours / n, 2), writer_classes_deciding_unlike=unlike)
    out["seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
