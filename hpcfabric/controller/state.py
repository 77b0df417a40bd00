"""The controller's running state: one object built from a config, at start and at every reload.

:func:`build_state` derives everything a config determines -- the fabric, the
switch states (connections carried over by dpid), the desired tables, the
pure PAUSE state (paused ports kept where they still exist) and the LLDP
discovery state (connected switches and their quarantines carried over) --
from the config, the HA lease (the discovery scope) and the running state
(None at start). :meth:`State.swap` puts a new one in force in one step: every
collaborator holds the same :class:`State` and reads it afresh, so a reload is
seen by all at once. :class:`Changes` is what the status loop and the
discovery report poll: something changed (``mark``), a milestone was reached.
"""

from __future__ import annotations

import time
from typing import Any

from hpcfabric.config import ControllerConfig
from hpcfabric.controller.framework import hub
from hpcfabric.controller.ha import scoped_discovery
from hpcfabric.controller.switches import SwitchState, build_switches
from hpcfabric.controller.tables import Tables, group_buckets
from hpcfabric.protocols.pause import PauseState
from hpcfabric.rules.flows import FlowSpec

#: what a reload replaces (:meth:`State.swap`)
DERIVED = ("config", "fabric", "switches", "by_dpid", "tables", "pause", "discovery", "carried")
#: what the app shows of its state (read only: ``app.config``, ``app.switches``, ...)
STATE_ATTRS = DERIVED[:-1] + ("retired", "unknown", "unmanaged")


class State:
    """The running config and what derives from it; the session maps (``retired``, ``unknown``,
    ``unmanaged``) outlive a reload (the same dicts are handed on)."""

    def __init__(self, config: ControllerConfig, switches: dict[str, SwitchState], by_dpid: dict[int, SwitchState],
                 tables: Tables, pause: PauseState, discovery: Any, carried: list[SwitchState],
                 retired: dict[int, SwitchState], unknown: dict[int, dict[str, Any]], unmanaged: dict[int, Any]) -> None:
        self.config = config
        self.fabric = config.fabric
        self.switches = switches
        self.by_dpid = by_dpid
        self.tables = tables
        self.pause = pause
        self.discovery = discovery
        self.carried = carried  # the switches whose connection came over from the previous state
        self.retired = retired  # removed from the topology by a reload, flows being cleared
        self.unknown = unknown  # dpids the topology does not know: first_seen, connected, dp, address
        self.unmanaged = unmanaged  # switches of the fabric another instance manages ([ha] switches)

    def desired(self, name: str) -> tuple[FlowSpec, ...]:
        """The switch's desired table with PORT_STATE entries as the pause state says."""
        return self.tables.desired(name, {p for (s, p) in self.pause.paused_ports() if s == name})

    def swap(self, new: State) -> None:
        """Put ``new`` in force (a reload): one step, no yield."""
        for name in DERIVED:
            setattr(self, name, getattr(new, name))


def build_state(config: ControllerConfig, ha: Any, old: State | None = None) -> State:
    """The state of ``config`` (``ha``: the lease, for the discovery scope); ``old``: the running state whose
    connections, paused ports and quarantines carry over where they still exist."""
    switches, by_dpid, carried = build_switches(config, dict(old.by_dpid) if old is not None else {})
    tables = Tables(config, group_buckets(config))  # groups are empty unless [failover] fast_failover
    until: dict[tuple[str, int], float] = {}
    if old is not None and config.routing == "conditional":  # keep the ports that still exist as fabric ports
        until = {k: v for k, v in old.pause.until.items()
                 if k[0] in switches and k[1] in config.fabric.fabric_ports(k[0])}
    pause = PauseState(config.link_speed_bps, hold=config.pause_hold_ms / 1000.0, until=until)
    discovery = scoped_discovery(config, config.fabric, ha)  # a partition expects only its links
    now = time.monotonic()
    for st in switches.values():  # discovery starts over (LLDP refreshes it within one interval)
        if st.connected:
            discovery.switch_up(st.dpid, now)
            for port in st.no_fwd:
                discovery.adopt_quarantine(st.name, port)
    if old is None:
        return State(config, switches, by_dpid, tables, pause, discovery, carried, {}, {}, {})
    return State(config, switches, by_dpid, tables, pause, discovery, carried, old.retired, old.unknown, old.unmanaged)


class Changes:
    """What the status loop polls (marking never wakes a green thread): ``status`` -- something the status
    shows changed; ``discovery`` -- the discovery report too. ``milestone`` -- e.g. the last switch
    confirmed, a repair -- does wake the loop (``reached``): written at once, not after the full gap."""

    def __init__(self) -> None:
        self.status = False
        self.discovery = False
        self.reached = hub.Event()

    @property
    def milestone(self) -> bool:
        return self.reached.is_set()

    @milestone.setter
    def milestone(self, value: bool) -> None:
        if value:
            self.reached.set()
        else:
            self.reached.clear()

    def mark(self, rediscover: bool = False) -> None:
        """Something the status shows changed (``rediscover``: the discovery report too)."""
        if rediscover:
            self.discovery = True
        self.status = True
