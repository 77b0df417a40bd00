"""The failover reaction: fabric ports down (port status), switches gone, and the reroute around them.

:class:`Failover` keeps which fabric ports are down and which switches stayed
disconnected longer than ``lldp_timeout`` (:func:`dead_switches`), and on any
change schedules one reroute: the tables recomputed by the pure
:func:`hpcfabric.failover.reroute.reroute` (or the compiled ones once
everything is back) go to :attr:`Tables.rerouted <hpcfabric.controller.tables.Tables.rerouted>`
and every switch whose desired table changed is reconciled. Only with
``[failover] recompute = on``; fast-failover groups are the switches' own first line.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Iterable

from hpcfabric.config import ControllerConfig
from hpcfabric.controller.framework import hub, run_native
from hpcfabric.failover.reroute import reroute

LOG = logging.getLogger("hpcfabric.controller")


def dead_switches(switches: Iterable[Any], now: float, grace: float) -> set[str]:
    """Switches that were connected, lost their connection and stayed away longer than ``grace`` seconds."""
    return {s.name for s in switches
            if not s.connected and s.disconnected_at is not None and now - s.disconnected_at > grace}


class Failover:
    """Ports down, switches gone and reroutes for the app ``app`` (its ``switches``, ``tables``, ``sessions``)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.down: set[tuple[str, int]] = set()
        self.dead: set[str] = set()
        self.events = 0
        self.recomputes = 0
        self.last_ms: float | None = None
        self.pending = False
        self.running = False  # a recomputation is in its native thread
        self.again = False  # something changed while it ran
        self.t0 = 0.0

    def port_status(self, dp: Any, desc: Any, deleted: bool) -> None:
        """A fabric port of a managed switch changed: reroute if it went down or came back."""
        app = self.app
        sw = app.by_dpid.get(dp.id)
        if sw is None or sw.dp is not dp or not app.config.recompute or desc.port_no not in app.fabric.fabric_ports(
                sw.name):
            return
        o = dp.ofproto
        key = (sw.name, desc.port_no)
        is_down = bool(deleted or desc.state & o.OFPPS_LINK_DOWN or desc.config & o.OFPPC_PORT_DOWN)
        if is_down != (key in self.down):
            if is_down:
                self.down.add(key)
                self.events += 1
                LOG.warning("failover: %s port %d is down", sw.name, desc.port_no)
            else:
                self.down.discard(key)
                LOG.info("failover: %s port %d is up again", sw.name, desc.port_no)
            self.schedule()

    def switch_lost(self) -> None:
        """A switch disconnected: if it stays away longer than ``lldp_timeout``, route around it."""
        hub.spawn_after(self.app.config.lldp_timeout + 0.05, self.check_dead)

    def check_dead(self) -> None:
        app = self.app
        if dead_switches(app.switches.values(), time.monotonic(), app.config.lldp_timeout) != self.dead:
            self.schedule()

    def schedule(self, delay: float = 0.02) -> None:
        """One reroute soon (events in a burst share it); only the master reroutes."""
        if self.pending or not self.app.ha.master:
            return
        self.pending = True
        self.t0 = time.monotonic()
        hub.spawn_after(delay, self.reroute)

    def reroute(self) -> None:
        """Recompute the tables around what is down (or back to the compiled ones) and reconcile the switches.

        The recomputation runs in a native thread (:func:`run_native`): at Table III it is seconds of
        work, and green threads are cooperative -- done here it would hold every PAUSE, LLDP and
        barrier reply for that long. Events arriving meanwhile make one more pass afterwards."""
        app = self.app
        self.pending = False
        if self.running:
            self.again = True  # this pass's result is stale: one more when it is done
            return
        self.running = True
        t0 = self.t0
        try:
            dead = dead_switches(app.switches.values(), time.monotonic(), app.config.lldp_timeout)
            down = set(self.down)
            config = app.config
            rerouted = run_native(reroute, config, down, dead) if down or dead else {}
            if app.config is not config:  # reloaded meanwhile: the reload recomputed for the new config
                return
            before = {name: app.desired(name) for name in app.switches}
            app.tables.rerouted = rerouted
            if rerouted:
                self.dead = dead
                self.recomputes += 1
            else:
                self.dead = set()
            changed = []
            for st in app.switches.values():
                if app.desired(st.name) != before[st.name] and st.connected and st.dp is not None:
                    app.sessions.resync(st)
                    changed.append(st)
            LOG.warning("failover: %s; %d switch(es) to reconcile",
                        f"{len(down)} port(s) down, {len(dead)} switch(es) gone" if rerouted
                        else "everything is back: compiled tables", len(changed))
            end = time.monotonic() + 30.0
            while changed and time.monotonic() < end and not all(s.confirmed or not s.connected for s in changed):
                hub.sleep(0.002)
            self.last_ms = round((time.monotonic() - t0) * 1000.0, 3)
            LOG.info("failover: reroute applied %.1f ms after the event", self.last_ms)
        except Exception:  # pragma: no cover - never kill the loop
            LOG.exception("reroute failed")
        finally:
            self.running = False
        app.mark()
        if self.again:
            self.again = False
            self.schedule()

    def reconfigure(self, new: ControllerConfig) -> None:
        """After a reload: forget ports of switches no longer managed, recompute around what is still down."""
        app = self.app
        self.down = {k for k in self.down if k[0] in app.switches}
        if self.down or self.dead:
            self.dead &= set(app.switches)
            app.tables.rerouted = reroute(new, set(self.down), self.dead) if new.recompute else {}

    def as_dict(self) -> dict[str, Any]:
        """The status file's ``failover`` entry."""
        config = self.app.config
        return {"fast_failover": config.fast_failover, "recompute": config.recompute,
                "ports_down": [f"{s}:{p}" for s, p in sorted(self.down)],
                "switches_gone": sorted(self.dead), "rerouted": bool(self.app.tables.rerouted),
                "events": self.events, "recomputes": self.recomputes, "last_ms": self.last_ms}
