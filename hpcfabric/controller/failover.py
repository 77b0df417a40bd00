"""The failover reaction: fabric ports down, switches gone, and the proven repair around them.

:class:`Failover` keeps which fabric ports are down (port status of its own switches, damped when they
flap: :class:`hpcfabric.failover.damping.FlapDamper`), the failures other controllers report
(:meth:`remote`, through the HA backend's failures prefix), and which switches stayed disconnected
longer than ``lldp_timeout``. On any change it schedules one repair, once the burst has settled (no event for
``[failover] settle_ms``, at most :data:`SETTLE_CAP` times that after its first: a switch's failure is many
port events from its neighbours); a plan that events overtook while it was planned is discarded and planned
again for them all (at most :data:`MAX_REPLANS` times in a row), never installed and then repaired. The
repair planner (:mod:`hpcfabric.controller.planner`: :class:`hpcfabric.repair.plan.Repairer` in a process
of its own) compiles the surviving fabric on the switches the failures can affect and proves the new
tables -- and every mix of old and new ones during the update -- before anything is sent (under
``flow_control = pfc``). A proven plan is installed in its waves, only the
entries that differ, one bundle per switch; each wave is confirmed (barriers) before the next starts. A
plan that is not proven is not installed: the tables in force stay, the log says why (the cycle, as
channels), the status and the metrics show it. Only with ``[failover] recompute = on``; fast-failover
groups are the switches' own first line.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Iterable

from hpcfabric.config import ControllerConfig
from hpcfabric.controller.board import make_board
from hpcfabric.controller.channel import Disconnected, SyncError
from hpcfabric.controller.framework import hub
from hpcfabric.controller.planner import Planner
from hpcfabric.controller.state import Changes, State
from hpcfabric.failover.damping import FlapDamper
from hpcfabric.repair.patch import PatchMismatch, rebuild
from hpcfabric.topology.failures import NO_FAILURES, Failures

LOG = logging.getLogger("hpcfabric.controller")

#: a burst is planned at the latest this many settle windows after its first event (a steady trickle too)
SETTLE_CAP = 20
#: a plan overtaken by events is planned again for all of them at most this many times in a row (then installed
#: if proven, and repaired again for what came since)
MAX_REPLANS = 4


def dead_switches(switches: Iterable[Any], now: float, grace: float) -> set[str]:
    """Switches that were connected, lost their connection and stayed away longer than ``grace`` seconds."""
    return {s.name for s in switches
            if not s.connected and s.disconnected_at is not None and now - s.disconnected_at > grace}


def _unbound(*_args: Any) -> None:
    raise RuntimeError("no sessions bound to resync a switch")


class Failover:
    """Ports down, switches gone and repairs of ``state``'s switches and ``tables`` (only while ``ha`` says we
    are master). ``apply_change(sw, dp, old, new)``: put a repaired table on a confirmed switch (the installer);
    ``resync(sw)``: a full reconciliation (the sessions', which tell this failover of switches coming and going:
    the app binds it once the sessions exist); ``active()``: the app still runs."""

    def __init__(self, state: State, ha: Any, changes: Changes, active: Callable[[], bool],
                 apply_change: Callable[[Any, Any, Any, Any], int], resync: Callable[[Any], None] | None = None) -> None:
        self.state, self.ha, self.changes, self.active = state, ha, changes, active
        self.apply_change = apply_change
        self.resync: Callable[[Any], None] = resync or _unbound
        self.damper = FlapDamper()
        self.remote_ports: set[tuple[str, int]] = set()  # reported by other controllers (their switches)
        self.remote_switches: set[str] = set()
        self.dead: set[str] = set()
        self.events = 0
        self.plans = 0  # plans asked of the planner
        self.superseded = 0  # plans discarded unapplied: events came while they were planned
        self.repairs = 0
        self.refused = 0
        self.flow_mods = 0
        self.last_ms: float | None = None
        self.last: dict[str, Any] | None = None  # the last plan (as_dict) and how it went
        self.unproven: dict[str, Any] | None = None  # the failures in force have no proven repair: why
        self.pending = False
        self.running = False
        self.again = False
        self.since: float | None = None  # the first event not yet in a plan
        self.last_event = 0.0
        self.planner: Any = None  # Planner, or SharedPlanner (controller.shared_planner)
        self.board: Any = None  # the failures board of a partitioned fabric (None: one controller)
        self.in_force: Failures = NO_FAILURES  # the failures the installed tables route around
        self._applied_ports: set[tuple[str, int]] = set()

    # ------------------------------------------------------------ the planner
    def prepare(self) -> None:
        """Start the repair planner (its own process builds the proof base while the switches come up) and, for a
        partitioned fabric, the failures board (:mod:`hpcfabric.controller.board`)."""
        fab = self.state
        config = fab.config
        if not config.recompute or self.planner is not None:
            return
        if config.planner == "shared":  # one planner for the partitions of this host (controller.shared_planner)
            from hpcfabric.controller.shared_planner import SharedPlanner

            self.planner = SharedPlanner(config, repaired=lambda: tuple(fab.tables.repaired),
                                         again=lambda: self.changed(time.monotonic()))
        else:
            self.planner = Planner(config)
        hub.spawn(self.planner.start)
        if self.board is None:
            self.board = make_board(config, self.ha)
            if self.board is not None:
                board = self.board
                hub.spawn(board.watch, self.remote, lambda: self.active() and self.board is board)

    def stop(self) -> None:
        if self.planner is not None:
            self.planner.stop()
        if self.board is not None:
            self.board.close()
            self.board = None

    # ------------------------------------------------------------ events
    def port_status(self, dp: Any, desc: Any, deleted: bool) -> None:
        """A fabric port of a managed switch changed: repair if what counts as down changed."""
        fab = self.state
        sw = fab.by_dpid.get(dp.id)
        if sw is None or sw.dp is not dp or not fab.config.recompute or desc.port_no not in fab.fabric.fabric_ports(
                sw.name):
            return
        o = dp.ofproto
        is_down = bool(deleted or desc.state & o.OFPPS_LINK_DOWN or desc.config & o.OFPPC_PORT_DOWN)
        self.observe(sw.name, desc.port_no, is_down, time.monotonic())

    def connected(self, sw: Any, dp: Any) -> None:
        """A managed switch (re)connected: its fabric ports as its port descriptions say (a port that went down or
        came back while it had no controller is seen now)."""
        if not self.state.config.recompute:
            return
        o = dp.ofproto
        now = time.monotonic()
        for port in self.state.fabric.fabric_ports(sw.name):
            desc = (dp.ports or {}).get(port)
            if desc is None:  # not described: nothing to tell
                continue
            down = bool(desc.state & o.OFPPS_LINK_DOWN or desc.config & o.OFPPC_PORT_DOWN)
            if down or self.damper.is_down((sw.name, port), now):
                self.observe(sw.name, port, down, now)

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
            self.publish()
            self.changed(now)
        self._hold_timer(now)

    def _hold_timer(self, now: float) -> None:
        nxt = self.damper.next_change(now)
        if nxt is not None:
            hub.spawn_after(max(0.0, nxt - now) + 0.01, self._hold_over)

    def _hold_over(self) -> None:
        now = time.monotonic()
        if self.ports_down(now) != self._applied_ports:
            self.publish()
            self.changed(now)
        self._hold_timer(now)

    def remote(self, ports: set[tuple[str, int]], switches: set[str]) -> None:
        """The failures other controllers report now (their switches' ports, switches they saw go)."""
        if ports == self.remote_ports and switches == self.remote_switches:
            return
        self.remote_ports, self.remote_switches = set(ports), set(switches)
        self.changed(time.monotonic())

    def switch_lost(self) -> None:
        """A switch disconnected: if it stays away longer than ``lldp_timeout``, route around it."""
        hub.spawn_after(self.state.config.lldp_timeout + 0.05, self.check_dead)

    def check_dead(self) -> None:
        fab = self.state
        if dead_switches(fab.switches.values(), time.monotonic(), fab.config.lldp_timeout) != self.dead:
            self.publish()
            self.changed(time.monotonic())

    def ports_down(self, now: float) -> set[tuple[str, int]]:
        return self.damper.down(now)

    def failures(self, now: float) -> Failures:
        """Everything out now: our ports down (damped), other controllers' reports, switches gone."""
        fab = self.state
        dead = dead_switches(fab.switches.values(), now, fab.config.lldp_timeout) | self.remote_switches
        return Failures.of(fab.fabric, self.ports_down(now) | self.remote_ports, dead)

    def publish(self) -> None:
        """Tell the other controllers what our switches see (the failures board of a partitioned fabric)."""
        if self.board is None:
            return
        now = time.monotonic()
        mine = dead_switches(self.state.switches.values(), now, self.state.config.lldp_timeout)
        try:
            self.board.publish(self.ports_down(now), mine)
        except Exception as err:  # pragma: no cover - the next change publishes again
            LOG.warning("failover: could not publish failures: %s", err)

    # ------------------------------------------------------------ repairs
    def changed(self, now: float) -> None:
        """What is out changed at ``now``: one repair once the burst has settled."""
        self.last_event = now
        if self.since is None:
            self.since = now
        self.schedule()

    def settle_s(self) -> float:
        return max(0.0, float(self.state.config.settle_ms)) / 1000.0

    def unsettled(self, now: float) -> float:
        """Seconds until the burst under way counts as settled (0: it has)."""
        if self.since is None:
            return 0.0
        settle = self.settle_s()
        return max(0.0, min(self.last_event + settle, self.since + SETTLE_CAP * settle) - now)

    def schedule(self) -> None:
        """One repair once the events have settled (a burst shares it); only a master repairs."""
        if self.pending or not self.ha.master or not self.state.config.recompute:
            return
        self.pending = True
        hub.spawn_after(max(self.unsettled(time.monotonic()), 0.001), self._settled)

    def _settled(self) -> None:
        wait = self.unsettled(time.monotonic())
        if wait > 0:
            hub.spawn_after(wait, self._settled)
            return
        self.repair()

    def repair(self) -> None:
        """Plan the repair for what is out now (off the hub), install it if proven, in its waves."""
        fab = self.state
        self.pending = False
        if self.running:
            self.again = True
            return
        self.running = True
        t0 = self.since if self.since is not None else time.monotonic()
        try:
            config = fab.config
            if self.planner is None:
                self.prepare()
            planner = self.planner
            assert planner is not None
            replans = 0
            settled = time.monotonic()
            while True:
                now = time.monotonic()
                self.since = None  # events from now on: after this plan's snapshot
                failures, ports = self.failures(now), set(self.ports_down(now))
                if failures == self.in_force:  # the tables in force are proven for it: nothing refused any more
                    self.unproven = None
                    return
                self.plans += 1
                plan = planner.plan(failures)
                if fab.config is not config or planner is not self.planner:  # reloaded meanwhile
                    planner.decide(False)
                    return
                if plan is None:
                    break
                if replans >= MAX_REPLANS or self.since is None or self.failures(time.monotonic()) == failures:
                    break
                planner.decide(False)  # overtaken: planned again for everything out now, once it has settled
                self.superseded += 1
                replans += 1
                LOG.info("failover: more changed while %s was planned: planned again for all",
                         ", ".join(failures.describe()) or "everything back")
                while self.unsettled(time.monotonic()) > 0:
                    hub.sleep(self.unsettled(time.monotonic()))
            if plan is None:  # the shared planner went away (asked again once one is ready) or failed: nothing installed
                self.refused += 1
                self.unproven = {"failures": failures.as_dict(), "verdict": "no planner",
                                 "explanation": "the shared repair planner went away during the plan (another is "
                                                "started and the repair asked again once it is ready) or failed on it",
                                 "cycle": None}
                LOG.error("failover: %s: no plan (the shared repair planner went away or failed); the tables in force "
                          "stay", ", ".join(failures.describe()) or "no failures")
                self.last = {"at": time.time(), "failures": failures.as_dict(), "installed": False,
                             "verdict": {"verdict": "no planner"}}
                return
            self._applied_ports = ports
            verdict = plan["verdict"]
            planned = time.monotonic()
            record = {"at": time.time(), **plan["summary"],
                      "phases_ms": {"settle": round((settled - t0) * 1000.0, 3),
                                    "planning": round((planned - settled) * 1000.0, 3),
                                    "last_plan": plan.get("phases_ms"), "replans": replans}}
            if not plan["proven"] and config.flow_control == "pfc":
                planner.decide(False)
                self.refused += 1
                self.unproven = {"failures": failures.as_dict(), "verdict": verdict.get("verdict"),
                                 "explanation": verdict.get("explanation"), "cycle": verdict.get("cycle")}
                LOG.error("failover: %s: %s; the last proven tables stay in force (%s)", ", ".join(failures.describe())
                          or "no failures", verdict.get("verdict"), verdict.get("explanation"))
                self.last = {**record, "installed": False}
                return
            self.unproven = None
            try:  # before the planner applies it: a patch that does not fit asks for that table whole
                desired = self.tables_of(plan)
            except Exception:
                planner.decide(False)  # the planner's proof base back to the tables in force
                raise
            planner.decide(True)
            self.in_force = failures
            self.dead = set(failures.switches)
            installing = time.monotonic()
            waves_ms: list[float] = []
            sent = self.install(plan, desired, waves_ms)
            self.repairs += 1
            self.flow_mods += sent
            done = time.monotonic()
            self.last_ms = round((done - t0) * 1000.0, 3)
            record["phases_ms"].update(decide=round((installing - planned) * 1000.0, 3),
                                       install=round((done - installing) * 1000.0, 3), waves=waves_ms)
            self.last = {**record, "installed": True, "flow_mods": sent, "ms": self.last_ms, "confirmed_at": time.time()}
            LOG.warning("failover: %s -> %s repair (%s), %d switch(es) changed in %d wave(s), %d flow-mod(s), "
                        "confirmed %.1f ms after the event (plan %.1f ms)",
                        ", ".join(failures.describe()) or "everything back", verdict.get("verdict"),
                        "redirected detours" if verdict.get("redirect_detours") else "bypasses",
                        len(plan["changed"]), len(plan["waves"]), sent, self.last_ms, plan["seconds"] * 1000.0)
        except Exception:  # pragma: no cover - never kill the loop
            LOG.exception("repair failed")
        finally:
            self.running = False
            self.changes.milestone = True  # operators and benches wait for a repair: no status gap
            self.changes.mark()
        if self.again:
            self.again = False
            self.schedule()

    def tables_of(self, plan: Any) -> dict[str, Any]:
        """The tables ``plan`` installs: rebuilt from its patches of the tables in force here (the planner holds the
        same ones; kept entries stay the very objects in force), or whole where a patch does not fit (asked of the
        planner, and logged). Raises :class:`PatchMismatch` if a table cannot be had (nothing of the plan is installed)."""
        if "patches" not in plan:
            return dict(plan["desired"])
        tables = self.state.tables
        out: dict[str, Any] = dict(plan.get("desired") or {})  # the shared planner: whole where it cannot patch
        misfits = []
        for name, patch in plan["patches"].items():
            try:
                out[name] = rebuild(tables.base(name), patch)
            except PatchMismatch:
                misfits.append(name)
        if misfits:
            LOG.error("failover: the planner's tables in force differ from ours on %d switch(es) (%s): their repaired "
                      "tables asked for whole", len(misfits), ", ".join(misfits[:5]))
            assert self.planner is not None
            whole = self.planner.tables(misfits)
            missing = [name for name in misfits if name not in whole]
            if missing:  # never a part of a proven plan: the caller discards it whole
                raise PatchMismatch(f"the planner did not send the tables of {', '.join(missing[:5])}")
            out.update((name, whole[name]) for name in misfits)
        return out

    def install(self, plan: Any, desired: dict[str, Any], waves_ms: list[float] | None = None) -> int:
        """The plan's tables (``desired``: :meth:`tables_of`) in force, wave by wave: each switch gets the entries that
        differ (one bundle and a barrier); a wave is confirmed before the next starts. Returns the flow-mods sent (each
        wave's ms appended to ``waves_ms``)."""
        fab = self.state
        tables = fab.tables
        old = {name: fab.desired(name) for name in desired}
        tables.repaired.update(desired)
        if plan["groups"] or tables.groups:
            from hpcfabric.controller.tables import group_buckets

            tables.groups = group_buckets(plan["groups"])
        for name in list(tables.repaired):  # back to the compiled table: nothing to keep apart
            if tables.repaired[name] == fab.config.desired.get(name):
                del tables.repaired[name]
        sent = 0
        for wave in plan["waves"]:
            began = time.monotonic()
            threads = []
            for name in wave:
                st = fab.switches.get(name)
                if st is None or name not in old:
                    continue
                if st.connected and st.dp is not None and st.confirmed and not st.syncing and self.ha.master_of(name):
                    threads.append(hub.spawn(self._apply, st, st.dp, old[name], fab.desired(name)))
                elif st.connected and st.dp is not None:
                    self.resync(st)  # not settled: a full reconciliation
            for t in threads:
                sent += t.wait() or 0
            if waves_ms is not None:
                waves_ms.append(round((time.monotonic() - began) * 1000.0, 3))
        return sent

    def _apply(self, st: Any, dp: Any, old: Any, new: Any) -> int:
        try:
            return self.apply_change(st, dp, old, new)
        except Disconnected:
            return 0
        except SyncError as err:
            LOG.error("failover: switch %s: repair rejected (%s): reconciling it in full", st.name, err)
            self.resync(st)
            return 0

    def reconfigure(self, new: ControllerConfig) -> None:
        """After a reload: forget ports of switches no longer managed; repair the new tables around what is out."""
        fab = self.state
        self.damper.forget(lambda k: k[0] in fab.switches)
        self.stop()
        self.planner = None
        self.in_force = NO_FAILURES
        fab.tables.repaired = {}
        self.prepare()
        if self.ports_down(time.monotonic()) or self.dead or self.remote_ports or self.remote_switches:
            self.changed(time.monotonic())

    def as_dict(self) -> dict[str, Any]:
        """The status file's ``failover`` entry."""
        config = self.state.config
        now = time.monotonic()
        planner = self.planner
        return {"fast_failover": config.fast_failover, "recompute": config.recompute,
                "proof": "on" if planner is not None and planner.prove else "off",
                "planner": planner.as_dict() if planner is not None else None,
                "ports_down": [f"{s}:{p}" for s, p in sorted(self.ports_down(now))],
                "damped": [f"{s}:{p}" for s, p in sorted(self.damper.damped(now))],
                "remote": [f"{s}:{p}" for s, p in sorted(self.remote_ports)] + sorted(self.remote_switches),
                "switches_gone": sorted(self.dead), "repaired": bool(self.state.tables.repaired),
                "events": self.events, "plans": self.plans, "superseded": self.superseded, "repairs": self.repairs, "refused": self.refused, "flow_mods": self.flow_mods,
                "last_ms": self.last_ms, "last": self.last, "unproven": self.unproven}

