"""What each switch should hold: the compiled table, repaired around failures, with the pause state laid over.

:class:`Tables` is the target of every reconciliation. It holds the config's
compiled tables, the fast-failover groups, and the tables a proven repair
put in force (``repaired``, :mod:`hpcfabric.repair.plan`); :meth:`Tables.desired`
lays the paused ports' PORT_STATE entries over them. Pure: no switch, no clock.
"""

from __future__ import annotations

from typing import Any

from hpcfabric.config import ControllerConfig
from hpcfabric.failover.groups import group_id
from hpcfabric.rules.port_state import port_state_flow
from hpcfabric.rules.flows import TABLE_PORT_STATE, FlowSpec


def group_buckets(groups_of: Any) -> dict[str, dict[int, Any]]:
    """switch -> {group id: ((watch_port, actions), ...)} of a config (its ``groups``) or of a mapping switch ->
    :class:`~hpcfabric.rules.flows.GroupSpec` s: the form the installer compares and encodes."""
    out: dict[str, dict[int, Any]] = {}
    groups_of = getattr(groups_of, "groups", groups_of) or {}
    for sw, groups in groups_of.items():
        if groups:
            out[sw] = {g.group_id: tuple((b.watch_port, tuple(b.actions)) for b in g.buckets) for g in groups}
    return out


class Tables:
    """The desired tables of ``config``'s switches; ``groups`` as :func:`group_buckets` gives them."""

    def __init__(self, config: ControllerConfig, groups: dict[str, dict[int, Any]]) -> None:
        self.config = config
        self.groups = groups
        #: switch -> the table a proven repair put in force around what is out (empty: the compiled tables)
        self.repaired: dict[str, tuple[FlowSpec, ...]] = {}

    def port_state_flow(self, switch: str, port: int, paused: bool) -> FlowSpec:
        """A port's PORT_STATE entry; unpaused through its fast-failover group where the switch has one."""
        gid = group_id(port)
        return port_state_flow(port, paused, gid if not paused and gid in self.groups.get(switch, ()) else None,
                               reaction=self.config.pause_reaction)

    def base(self, name: str) -> tuple[FlowSpec, ...]:
        """The switch's table in force: repaired, else compiled (no pause state)."""
        return self.repaired.get(name) or self.config.desired.get(name, ())

    def desired(self, name: str, paused: set[int]) -> tuple[FlowSpec, ...]:
        """The switch's desired table with the PORT_STATE entries of the ``paused`` ports paused."""
        base = self.base(name)
        if not paused:
            return base
        out = []
        for f in base:
            if f.table == TABLE_PORT_STATE and f.match.metadata is not None:
                port = f.match.metadata[0]
                if port in paused and f.goto is None and f in (
                        port_state_flow(port, False, reaction=self.config.pause_reaction),
                        self.port_state_flow(name, port, False)):
                    f = port_state_flow(port, True)
            out.append(f)
        return tuple(out)
