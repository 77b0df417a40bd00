"""The failover reaction: fabric ports down, switches gone, and the proven repair around them.

:class:`Failover` keeps which fabric ports are down (port status of its own switches, damped when they
flap: :class:`hpcfabric.failover.damping.FlapDamper`), the failures other controllers report
(:meth:`remote`, through the HA backend's failures prefix), and which switches stayed disconnected
longer than ``lldp_timeout``. On any change it schedules one repair (events in a burst share it): the
pure :class:`hpcfabric.failover.repair.Repairer` compiles the surviving fabric on the switches the
failures can affect and proves the new tables -- and every mix of old and new ones during the update --
before anything is sent (under ``flow_control = pfc``). A proven plan is installed in its waves, only the
entries that differ, one bundle per switch; each wave is confirmed (barriers) before the next starts. A
plan that is not proven is not installed: the tables in force stay, the log says why (the cycle, as
channels), the status and the metrics show it. Only with ``[failover] recompute = on``; fast-failover
groups are the switches' own first line.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Iterable

from hpcfabric.config import ControllerConfig
from hpcfabric.controller.channel import Disconnected, SyncError
from hpcfabric.controller.framework import hub, run_native
from hpcfabric.failover.damping import FlapDamper
from hpcfabric.failover.repair import Repairer
from hpcfabric.topology.failures import Failures

LOG = logging.getLogger("hpcfabric.controller")

#: events closer than this share one repair (both ends of a link report within microseconds)
COALESCE_S = 0.01


def dead_switches(switches: Iterable[Any], now: float, grace: float) -> set[str]:
    """Switches that were connected, lost their connection and stayed away longer than ``grace`` seconds."""
    return {s.name for s in switches
            if not s.connected and s.disconnected_at is not None and now - s.disconnected_at > grace}


def proves(config: ControllerConfig) -> bool:
    """Does ``config``'s flow control ask for proven repairs? (``pfc``: refused if not proven; ``pause``: proven
    and reported, as at load; ``none``, ``deadlock_check = off``: no proof.)"""
    return config.flow_control in ("pfc", "pause") and bool(config.deadlock_check)


class Failover:
    """Ports down, switches gone and repairs for the app ``app`` (its ``switches``, ``tables``, ``installer``)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.damper = FlapDamper()
        self.remote_ports: set[tuple[str, int]] = set()  # reported by other controllers (their switches)
        self.remote_switches: set[str] = set()
        self.dead: set[str] = set()
        self.events = 0
        self.repairs = 0
        self.refused = 0
        self.flow_mods = 0
        self.last_ms: float | None = None
        self.last: dict[str, Any] | None = None  # the last plan (as_dict) and how it went
        self.unproven: dict[str, Any] | None = None  # the failures in force have no proven repair: why
        self.pending = False
        self.running = False
        self.again = False
        self.t0 = 0.0
        self.repairer: Repairer | None = None
        self.base_ready = False
        self._applied_ports: set[tuple[str, int]] = set()

    # ------------------------------------------------------------ the proof base
    def prepare(self) -> None:
        """Build the repair's proof base (a full union walk) off the hub, so the first failure finds it ready."""
        config = self.app.config
        if not config.recompute or self.repairer is not None:
            return
        self.repairer = Repairer(config, prove=proves(config))
        if self.repairer.prove:
            hub.spawn(self._build_base, self.repairer)

    def _build_base(self, repairer: Repairer) -> None:
        t0 = time.monotonic()
        try:
            run_native(repairer.base)
            self.base_ready = repairer is self.repairer
            LOG.info("failover: proof base ready in %.1f s (%d dependencies)", time.monotonic() - t0,
                     len(repairer.state.graph.edges) if repairer.state is not None else 0)
        except Exception:  # pragma: no cover - the first repair builds it then
            LOG.exception("failover: building the proof base failed")

    # ------------------------------------------------------------ events
    def port_status(self, dp: Any, desc: Any, deleted: bool) -> None:
        """A fabric port of a managed switch changed: repair if what counts as down changed."""
        app = self.app
        sw = app.by_dpid.get(dp.id)
        if sw is None or sw.dp is not dp or not app.config.recompute or desc.port_no not in app.fabric.fabric_ports(
                sw.name):
            return
        o = dp.ofproto
        is_down = bool(deleted or desc.state & o.OFPPS_LINK_DOWN or desc.config & o.OFPPC_PORT_DOWN)
        self.observe(sw.name, desc.port_no, is_down, time.monotonic())

    def observe(self, switch: str, port: int, is_down: bool, now: float) -> None:
        """A port of ours reported ``is_down`` at ``now``."""
        key = (switch, port)
        before = self.damper.is_down(key, now)
        if not self.damper.report(key, is_down, now):
            return
        if is_down:
            self.events += 1
            LOG.warning("failover: %s port %d is down", switch, port)
        else:
            LOG.info("failover: %s port %d is up again%s", switch, port,
                     " (flapping: held down)" if self.damper.is_down(key, now) else "")
        if self.damper.is_down(key, now) != before:
            self.t0 = now
            self.publish()
            self.schedule()
        self._hold_timer(now)

    def _hold_timer(self, now: float) -> None:
        nxt = self.damper.next_change(now)
        if nxt is not None:
            hub.spawn_after(max(0.0, nxt - now) + 0.01, self._hold_over)

    def _hold_over(self) -> None:
        now = time.monotonic()
        if self.ports_down(now) != self._applied_ports:
            self.t0 = now
            self.publish()
            self.schedule()
        self._hold_timer(now)

    def remote(self, ports: set[tuple[str, int]], switches: set[str]) -> None:
        """The failures other controllers report now (their switches' ports, switches they saw go)."""
        if ports == self.remote_ports and switches == self.remote_switches:
            return
        self.remote_ports, self.remote_switches = set(ports), set(switches)
        self.t0 = time.monotonic()
        self.schedule()

    def switch_lost(self) -> None:
        """A switch disconnected: if it stays away longer than ``lldp_timeout``, route around it."""
        hub.spawn_after(self.app.config.lldp_timeout + 0.05, self.check_dead)

    def check_dead(self) -> None:
        app = self.app
        if dead_switches(app.switches.values(), time.monotonic(), app.config.lldp_timeout) != self.dead:
            self.t0 = time.monotonic()
            self.publish()
            self.schedule()

    def ports_down(self, now: float) -> set[tuple[str, int]]:
        return self.damper.down(now)

    def failures(self, now: float) -> Failures:
        """Everything out now: our ports down (damped), other controllers' reports, switches gone."""
        app = self.app
        dead = dead_switches(app.switches.values(), now, app.config.lldp_timeout) | self.remote_switches
        return Failures.of(app.fabric, self.ports_down(now) | self.remote_ports, dead)

    def publish(self) -> None:
        """Tell the other controllers what our switches see (HA backends with a failures channel)."""
        ha = self.app.ha
        if hasattr(ha, "publish_failures"):
            now = time.monotonic()
            mine = dead_switches(self.app.switches.values(), now, self.app.config.lldp_timeout)
            try:
                ha.publish_failures(self.ports_down(now), mine)
            except Exception as err:  # pragma: no cover - the next change publishes again
                LOG.warning("failover: could not publish failures: %s", err)

    # ------------------------------------------------------------ repairs
    def schedule(self, delay: float = COALESCE_S) -> None:
        """One repair soon (events in a burst share it); only a master repairs."""
        if self.pending or not self.app.ha.master or not self.app.config.recompute:
            return
        self.pending = True
        hub.spawn_after(delay, self.repair)

    def repair(self) -> None:
        """Plan the repair for what is out now (off the hub), install it if proven, in its waves."""
        app = self.app
        self.pending = False
        if self.running:
            self.again = True
            return
        self.running = True
        t0 = self.t0
        try:
            now = time.monotonic()
            failures = self.failures(now)
            config = app.config
            if self.repairer is None:
                self.prepare()
            repairer = self.repairer
            assert repairer is not None
            if failures == repairer.failures:
                return
            plan = run_native(repairer.plan, failures)
            if app.config is not config or repairer is not self.repairer:  # reloaded meanwhile
                repairer.discard(plan)
                return
            self._applied_ports = set(self.ports_down(now))
            record = {"at": time.time(), **plan.as_dict()}
            if not plan.proven and config.flow_control == "pfc":
                repairer.discard(plan)
                self.refused += 1
                self.unproven = {"failures": failures.as_dict(), "verdict": plan.verdict.get("verdict"),
                                 "explanation": plan.verdict.get("explanation"), "cycle": plan.verdict.get("cycle")}
                LOG.error("failover: %s: %s; the last proven tables stay in force (%s)", ", ".join(failures.describe())
                          or "no failures", plan.verdict.get("verdict"), plan.verdict.get("explanation"))
                self.last = {**record, "installed": False}
                return
            self.unproven = None
            repairer.apply(plan)
            if not plan.proven and repairer.prove:  # flow_control = pause: installed as at load, said; the proof
                repairer.state = None  # base no longer matches the tables: built again, off the hub
                self.base_ready = False
                hub.spawn(self._build_base, repairer)
            self.dead = set(failures.switches)
            sent = self.install(plan)
            self.repairs += 1
            self.flow_mods += sent
            self.last_ms = round((time.monotonic() - t0) * 1000.0, 3)
            self.last = {**record, "installed": True, "flow_mods": sent, "ms": self.last_ms}
            LOG.warning("failover: %s -> %s repair (%s), %d switch(es) changed in %d wave(s), %d flow-mod(s), "
                        "confirmed %.1f ms after the event (plan %.1f ms)",
                        ", ".join(failures.describe()) or "everything back", plan.verdict.get("verdict"),
                        "redirected detours" if plan.verdict.get("redirect_detours") else "bypasses",
                        len(plan.changed), len(plan.waves), sent, self.last_ms, plan.seconds * 1000.0)
        except Exception:  # pragma: no cover - never kill the loop
            LOG.exception("repair failed")
        finally:
            self.running = False
            app.mark()
        if self.again:
            self.again = False
            self.schedule()

    def install(self, plan: Any) -> int:
        """The plan's tables in force, wave by wave: each switch gets the entries that differ (one bundle and a
        barrier); a wave is confirmed before the next starts. Returns the flow-mods sent."""
        app = self.app
        tables = app.tables
        old = {name: app.desired(name) for name in plan.desired}
        tables.repaired.update(plan.desired)
        if plan.groups or tables.groups:
            from hpcfabric.controller.tables import group_buckets

            tables.groups = group_buckets(plan.groups)
        for name in list(tables.repaired):  # back to the compiled table: nothing to keep apart
            if tables.repaired[name] == app.config.desired.get(name):
                del tables.repaired[name]
        sent = 0
        for wave in plan.waves:
            threads = []
            for name in wave:
                st = app.switches.get(name)
                if st is None or name not in old:
                    continue
                if st.connected and st.dp is not None and st.confirmed and not st.syncing and app.ha.master_of(name):
                    threads.append(hub.spawn(self._apply, st, st.dp, old[name], app.desired(name)))
                elif st.connected and st.dp is not None:
                    app.sessions.resync(st)  # not settled: a full reconciliation
            for t in threads:
                sent += t.wait() or 0
        return sent

    def _apply(self, st: Any, dp: Any, old: Any, new: Any) -> int:
        try:
            return self.app.installer.apply_change(st, dp, old, new)
        except Disconnected:
            return 0
        except SyncError as err:
            LOG.error("failover: switch %s: repair rejected (%s): reconciling it in full", st.name, err)
            self.app.sessions.resync(st)
            return 0

    def reconfigure(self, new: ControllerConfig) -> None:
        """After a reload: forget ports of switches no longer managed; repair the new tables around what is out."""
        app = self.app
        self.damper.forget(lambda k: k[0] in app.switches)
        self.repairer = None
        self.base_ready = False
        app.tables.repaired = {}
        self.prepare()
        if self.ports_down(time.monotonic()) or self.dead or self.remote_ports or self.remote_switches:
            self.t0 = time.monotonic()
            self.schedule()

    def as_dict(self) -> dict[str, Any]:
        """The status file's ``failover`` entry."""
        config = self.app.config
        now = time.monotonic()
        repairer = self.repairer
        return {"fast_failover": config.fast_failover, "recompute": config.recompute,
                "proof": "on" if repairer is not None and repairer.prove else "off", "proof_base_ready": self.base_ready,
                "ports_down": [f"{s}:{p}" for s, p in sorted(self.ports_down(now))],
                "damped": [f"{s}:{p}" for s, p in sorted(self.damper.damped(now))],
                "remote": [f"{s}:{p}" for s, p in sorted(self.remote_ports)] + sorted(self.remote_switches),
                "switches_gone": sorted(self.dead), "repaired": bool(self.app.tables.repaired),
                "events": self.events, "repairs": self.repairs, "refused": self.refused, "flow_mods": self.flow_mods,
                "last_ms": self.last_ms, "last": self.last, "unproven": self.unproven}
