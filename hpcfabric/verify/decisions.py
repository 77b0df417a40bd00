"""Per-switch decisions over destination classes: one switch's rules, on their own.

The local checks (the up/down proof, :mod:`hpcfabric.verify.updown`; the per-destination proof,
:mod:`hpcfabric.verify.union.proof`) look at one switch at a time and need, for it:

* :func:`forward_data_flows`: per switch, the entries a data frame can meet (resubmits inlined),
  refusing what a per-switch check does not model;
* :func:`destination_classes`: destinations no entry of the switch tells apart (exact: the
  *capture* rule below), so one representative per class decides for all;
* :func:`port_classes`: ingress ports whose ``in_port`` entries are equal but for the port;
* :func:`arrival_pcps`: every VLAN PCP a frame can carry (untagged, and what entries push or set);
* :func:`decide_lines`: the engine's outcome of rows for a destination set, as arrays.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hpcfabric.rules.flows import OFPP_IN_PORT, Output, PopVlan, PushVlan, SetField
from hpcfabric.topology.model import Fabric
from hpcfabric.verify.codes import UNTAGGED
from hpcfabric.verify.engine import Destinations, Row, Unsupported, data_flows, data_relevant, entry_key, evaluate_rows
from hpcfabric.verify.reference.pipeline import describe_flow

__all__ = ["forward_data_flows", "destination_classes", "port_classes", "arrival_pcps", "decide_lines"]


def arrival_pcps(relevant: dict[str, list[Any]]) -> list[int]:
    """Arrival PCPs a frame can carry: untagged, and what the entries push or set."""
    vals = {UNTAGGED}
    for flows in relevant.values():
        for f in flows:
            for a in f.actions:
                if isinstance(a, PushVlan):
                    vals.add(0)
                elif isinstance(a, SetField) and a.field == "vlan_pcp":
                    vals.add(int(a.value))
    return sorted(vals)


def destination_classes(relevant: list[Any], macs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Destination classes at one switch: elements of ``macs`` that no entry tells apart.

    Per table, entries in the pipeline's order (priority, then emission): an
    entry whose only condition is ``eth_dst`` *captures* the destinations it
    matches (they meet it, whatever the row, and nothing below it in that
    table); an entry with other conditions (``in_port``, metadata, PCP) only
    splits the destinations it matches from the others. Two destinations with
    the same capturing entry and the same splits in every table meet the same
    entries in every row: they decide alike."""
    n = len(macs)
    key = np.zeros(n, dtype=np.int64)
    by_table: dict[int, list[Any]] = {}
    for f in relevant:
        by_table.setdefault(f.table, []).append(f)
    for t in sorted(by_table):
        entries = sorted(by_table[t], key=lambda f: -f.priority)  # stable, as the pipeline
        free = np.ones(n, dtype=bool)
        captured = np.full(n, -1, dtype=np.int64)
        for i, f in enumerate(entries):
            m = f.match
            only_dst = (m.in_port is None and m.metadata is None and m.vlan_pcp is None and m.vlan_vid is None
                        and m.eth_src is None and m.reg0 is None)
            if m.eth_dst is None:
                if only_dst:  # matches every remaining destination in every row
                    captured[free] = i
                    break
                continue  # no destination condition: splits nothing
            v, mask = m.eth_dst
            hit = free & ((macs & np.uint64(mask)) == np.uint64(v & mask))
            if not hit.any():
                continue
            if only_dst:
                captured[hit] = i
                free &= ~hit
            else:
                key = key * 2 + hit
                if int(key.max(initial=0)) > 1 << 50:
                    key = np.unique(key, return_inverse=True)[1].reshape(-1).astype(np.int64)
        key = key * (len(entries) + 2) + captured + 1
        key = np.unique(key, return_inverse=True)[1].reshape(-1).astype(np.int64)
    _, first, inv = np.unique(key, return_index=True, return_inverse=True)
    order = np.argsort(first)  # classes numbered by first element
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return rank[inv.reshape(-1)].astype(np.int32), first[order]


def port_classes(fabric: Fabric, switch: str, relevant: list[Any], cache: dict) -> dict[int, int]:
    """Ports whose ``in_port`` entries are equal but for the port share a class."""
    ports = sorted(fabric.ports(switch))
    if any(isinstance(a, Output) and a.port == OFPP_IN_PORT for f in relevant for a in f.actions):
        return {p: i for i, p in enumerate(ports)}
    named: dict[int, list[tuple]] = {}
    for f in relevant:
        if f.match.in_port is not None:
            named.setdefault(f.match.in_port, []).append(entry_key(f, cache))
    sigs: dict[tuple, int] = {}
    out = {}
    for p in ports:
        sig = (fabric.peer(switch, p).is_host, tuple(named.get(p, ())))  # type: ignore[union-attr]
        out[p] = sigs.setdefault(sig, len(sigs))
    return out


def decide_lines(rows: list[Row], dst: Destinations) -> list[tuple[np.ndarray, ...]]:
    """Per row, evaluated together: (outputs, last output port, its PCP, punt, pipeline error, PORT_STATE
    port met or -1) per destination."""
    return [(res.out_n, res.out_port, res.out_pcp, res.punt, res.err, res.ps_port)
            for res in evaluate_rows(rows, dst, track=True)]


def forward_data_flows(compiled: Any, method: str, error: type[Exception] = ValueError, *,
                       actions: bool = False, only: Any = None) -> dict[str, list[Any]]:
    """Per switch, the entries a data frame can meet (resubmits inlined); raises ``error``
    for what the per-switch checks do not model: an entry going back to an earlier
    table, source-dependent (``eth_src``) rules, and, with ``actions``, actions other than
    outputs and VLAN push/pop/PCP (MAC rewrites, groups: resolve them first). ``only``: those switches."""
    out: dict[str, list[Any]] = {}
    for sw in compiled.fabric.switches:
        if only is not None and sw.name not in only:
            continue
        try:
            flows = data_flows(compiled.tables[sw.name].flows)
        except Unsupported as why:
            raise error(f"{sw.name}: {method} cannot model these rules: {why}") from None
        for f in flows:
            if f.goto is not None and f.goto <= f.table:
                raise error(f"{sw.name}: an entry goes back to table {f.goto}; {method} needs a forward pipeline")
            if f.match.eth_src is not None and data_relevant(f):
                raise error(f"{sw.name}: {method} does not model source-dependent (eth_src) rules")
        out[sw.name] = [f for f in flows if data_relevant(f)]
        if actions:
            for f in out[sw.name]:
                for a in f.actions:
                    if isinstance(a, SetField) and a.field != "vlan_pcp" or not isinstance(a, (Output, SetField, PushVlan, PopVlan)):
                        raise error(f"{sw.name}: {method} does not model the action {a!r} of {describe_flow(f)} "
                                    "(entries that rewrite data frames or use groups)")
    return out
