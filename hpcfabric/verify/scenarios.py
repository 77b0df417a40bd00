"""Pause and link-down states applied to compiled tables, as the switches would hold them.

* :func:`pausable_ports`: the ports a PAUSE can switch (those with a PORT_STATE entry);
* :func:`apply_paused`: tables with some ports paused (PORT_STATE entries flipped, or the
  switch-local reaction's learned override added), as the controller / switch does;
* :func:`apply_down`: fast-failover groups resolved and outputs to down ports removed;
* :func:`flip_port_states` / :func:`paused_data_flows`: one switch's entries with *every*
  PORT_STATE entry paused at once. A frame meets at most one PORT_STATE entry on a switch
  (``goto`` only leads to later tables), so this gives, for every frame, the decision with the
  entry it meets flipped: together with the unpaused tables, every decision the switch can make
  under any set of paused ports.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Iterable, Mapping, Sequence

from hpcfabric.rules.port_state import learned_override_flow, port_state_flow
from hpcfabric.rules.flows import GROUP_TAG, TABLE_PORT_STATE, RuleClass
from hpcfabric.verify.engine.rows import data_flows, data_relevant
from hpcfabric.verify.reference.pipeline import resolve_groups

__all__ = ["pausable_ports", "apply_paused", "apply_down", "flip_port_states", "paused_data_flows"]


def pausable_ports(compiled: Any) -> list[tuple[str, int]]:
    """(switch, port) of every PORT_STATE entry (the ports a PAUSE can switch)."""
    out = []
    for name, table in compiled.tables.items():
        for f in table.flows:
            if f.table == TABLE_PORT_STATE and f.rule_class == RuleClass.PORT_STATE and f.match.metadata is not None:
                out.append((name, f.match.metadata[0]))
    return sorted(set(out))


def apply_paused(compiled: Any, paused: Iterable[tuple[str, int]]) -> tuple[Any, list[tuple[str, int]]]:
    """``compiled`` with the PORT_STATE entry of every (switch, port) in ``paused``
    flipped to its paused version (:func:`hpcfabric.rules.port_state.port_state_flow`),
    or, switch-local reaction, the learned override of the port added
    (:func:`hpcfabric.rules.port_state.learned_override_flow`), and the flips applied. Ports without a PORT_STATE entry (minimal routing,
    host ports) are left alone, as the controller leaves them; an unknown
    switch or port raises ValueError."""
    switch_local = getattr(compiled, "pause_reaction", "controller") == "switch"
    by_switch: dict[str, set[int]] = {}
    for sw, port in paused:
        if not compiled.fabric.has_switch(sw) or compiled.fabric.peer(sw, port) is None:
            raise ValueError(f"no port {sw}:{port} in {compiled.fabric.name}")
        by_switch.setdefault(sw, set()).add(port)
    if not by_switch:
        return compiled, []
    tables = dict(compiled.tables)
    applied = []
    for sw, ports in sorted(by_switch.items()):
        flows = list(tables[sw].flows)
        for port in sorted(ports):
            if switch_local:
                if port_state_flow(port, False, reaction="switch") in flows:
                    flows.append(learned_override_flow(port))
                    applied.append((sw, port))
                continue
            old, new = port_state_flow(port, False), port_state_flow(port, True)
            grouped = port_state_flow(port, False, GROUP_TAG | port)  # protected by a fast-failover group
            for i, f in enumerate(flows):
                if f == old or f == grouped:
                    flows[i] = new
                    applied.append((sw, port))
        tables[sw] = replace(tables[sw], flows=tuple(flows))
    return replace(compiled, tables=tables), applied


def apply_down(compiled: Any, groups: Mapping[str, Iterable[Any]] | None, down: Iterable[tuple[str, int]]) -> Any:
    """``compiled`` as the switches execute it while the ports ``down`` (switch, port) are down: outputs to
    them lose the frame and every fast-failover group (``groups``: switch -> GroupSpecs) takes its first live
    bucket (:func:`hpcfabric.verify.reference.pipeline.resolve_groups`), so both engines see plain tables."""
    by_switch: dict[str, set[int]] = {}
    for sw, port in down:
        by_switch.setdefault(sw, set()).add(port)
    if not groups and not by_switch:
        return compiled
    tables = dict(compiled.tables)
    for sw, t in tables.items():
        if (groups and groups.get(sw)) or sw in by_switch:
            tables[sw] = replace(t, flows=resolve_groups(t.flows, (groups or {}).get(sw, ()), by_switch.get(sw, ())))
    return replace(compiled, tables=tables)


_PS_FLOWS: dict[int, tuple[Any, ...]] = {}  # port -> its PORT_STATE entries: unpaused, paused, grouped, switch-local


def flip_port_states(flows: Sequence[Any]) -> list[Any]:
    """``flows`` with every PORT_STATE entry in its paused form: the unpaused entry (also the one
    protected by a fast-failover group) flipped, as :func:`apply_paused` does on a PAUSE; with the
    switch-local reaction, the port's learned override added (:func:`hpcfabric.rules.port_state.learned_override_flow`)."""
    out = []
    learned = []
    for f in flows:
        if f.table == TABLE_PORT_STATE and f.rule_class == RuleClass.PORT_STATE and f.match.metadata is not None:
            p = f.match.metadata[0]
            forms = _PS_FLOWS.get(p)
            if forms is None:
                forms = _PS_FLOWS[p] = (port_state_flow(p, False), port_state_flow(p, True),
                                        port_state_flow(p, False, GROUP_TAG | p),
                                        port_state_flow(p, False, reaction="switch"))
            if f == forms[0] or f == forms[2]:
                f = forms[1]
            elif f == forms[3]:
                learned.append(learned_override_flow(p))
        out.append(f)
    return out + learned


def paused_data_flows(compiled: Any, switch: str, relevant: list[Any]) -> tuple[list[Any], bool]:
    """``switch``'s data-relevant entries with every PORT_STATE entry paused, and whether
    that changed nothing (no PORT_STATE entry: the paused line is the unpaused one)."""
    flows = compiled.tables[switch].flows
    if not any(f.table == TABLE_PORT_STATE and f.rule_class == RuleClass.PORT_STATE and f.match.metadata is not None
               for f in flows):  # nothing that flip_port_states flips
        return list(relevant), True
    flipped = [f for f in data_flows(flip_port_states(flows)) if data_relevant(f)]
    return flipped, len(flipped) == len(relevant) and all(a is b for a, b in zip(flipped, relevant))
