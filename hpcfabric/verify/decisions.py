"""One switch's rules, on their own, for the checks that look at one switch at a time (the up/down proof,
:mod:`hpcfabric.verify.updown`; the union proof's choices, :mod:`hpcfabric.verify.union.choices`):

* :func:`forward_data_flows`: per switch, the entries a data frame can meet (resubmits inlined),
  refusing what a per-switch check does not model;
* :func:`port_classes`: ingress ports whose ``in_port`` entries are equal but for the port.

Destination classes come from the engine (:class:`hpcfabric.verify.engine.batch.MatchClasses`).
"""

from __future__ import annotations

from typing import Any

from hpcfabric.rules.flows import OFPP_IN_PORT, Output, PopVlan, PushVlan, SetField
from hpcfabric.topology.model import Fabric
from hpcfabric.verify.engine import Unsupported, data_flows, data_relevant, entry_key
from hpcfabric.verify.reference.pipeline import describe_flow

__all__ = ["forward_data_flows", "port_classes"]


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
