"""Switch sessions: connect and disconnect, the role claim, and the sync loop around one reconciliation.

:class:`Sessions` decides what a (re)connected datapath is: a managed switch
(a new session: claim our HA role, then reconcile while master, retrying with
backoff), a switch another instance manages, or an unknown dpid (nothing
installed). Every session carries the switch's generation: a reconnect, a
reload, a reroute or a role change bumps it and the old session stops.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

from hpcfabric.controller.admission import Admission
from hpcfabric.controller.channel import Channel, Disconnected, SyncError, err_text
from hpcfabric.controller.failover import Failover
from hpcfabric.controller.framework import hub
from hpcfabric.controller.state import Changes, State
from hpcfabric.openflow import ofwire
from hpcfabric.openflow.ofwire import OFPPC_NO_FWD

LOG = logging.getLogger("hpcfabric.controller")


class Sessions:
    """Connections and sessions of ``state``'s switches: ``admission`` judges a session (claim, admitted,
    forget), ``failover`` hears of switches coming and going, ``sync(sw, dp, gen)`` reconciles one switch
    (the installer's), ``forget(dpid)`` drops its flips in flight (the pausing's); the HA role from ``ha``;
    ``active()``: the app still runs."""

    def __init__(self, state: State, channel: Channel, ha: Any, counters: Any, changes: Changes,
                 active: Callable[[], bool], admission: Admission, failover: Failover, sync: Callable[[Any, Any, int], None],
                 forget: Callable[[int], None]) -> None:
        self.state, self.channel, self.ha, self.counters, self.changes = state, channel, ha, counters, changes
        self.active, self.admission, self.failover, self.sync, self.forget = active, admission, failover, sync, forget

    # ---------------------------------------------------------- connections
    def connected(self, dp: Any) -> None:
        """A session reached MAIN_DISPATCHER: taken if :class:`~hpcfabric.controller.admission.Admission`
        admits it (identity, one live session per dpid), else refused or held there."""
        if self.admission.claim(dp):
            self.admit(dp)

    def admit(self, dp: Any) -> None:
        """Take session ``dp`` as its dpid's: a managed switch, another instance's, or an unknown dpid."""
        fab = self.state
        now = time.monotonic()
        sw = fab.by_dpid.get(dp.id)
        if sw is None and dp.id in fab.config.dpid_to_switch:  # another instance manages it ([ha] switches)
            fab.unmanaged[dp.id] = dp
            LOG.info("switch %s (dpid %016x) connected; managed by another instance", fab.config.dpid_to_switch[dp.id],
                     dp.id)
            return
        if sw is None:
            info = fab.unknown.setdefault(dp.id, {"first_seen": time.time()})
            info["connected"] = True
            info["dp"] = dp
            info["address"] = "%s:%s" % tuple(dp.address[:2]) if dp.address else None
            fab.discovery.switch_up(dp.id, now)
            LOG.warning("unknown switch dpid %016x from %s connected: not in %s, nothing installed", dp.id,
                        info["address"], fab.fabric.name)
            self.changes.mark(rediscover=True)
            return
        if sw.dp is not None and sw.dp is not dp:  # the old session is dead (admission probed or saw it)
            LOG.info("switch %s (dpid %016x) reconnected; its dead session is dropped", sw.name, sw.dpid)
            self.fail(sw.dpid)
        sw.dp = dp
        sw.connected = True
        sw.confirmed = False
        sw.connected_at = now
        sw.error = None
        sw.gen += 1
        sw.no_fwd = {p for p, d in (dp.ports or {}).items() if d.config & OFPPC_NO_FWD}
        for port in sw.no_fwd:
            fab.discovery.adopt_quarantine(sw.name, port)
        fab.discovery.switch_up(dp.id, now)
        sw.installed_meters = None
        sw.installed_groups = None
        sw.role_gen = None
        was_dead = sw.name in self.failover.dead
        sw.disconnected_at = None
        if was_dead:
            self.failover.schedule()
        self.failover.connected(sw, dp)
        LOG.info("switch %s (dpid %016x) connected from %s", sw.name, sw.dpid, dp.address[0] if dp.address else "?")
        hub.spawn(self.session, sw, dp, sw.gen)
        self.changes.mark(rediscover=True)

    def disconnected(self, dp: Any) -> None:
        fab = self.state
        if not self.admission.admitted(dp):  # refused, held, or the dead session of a switch that reconnected
            self.admission.forget(dp)
            return
        if fab.unmanaged.get(dp.id) is dp:
            del fab.unmanaged[dp.id]
            return
        old = fab.retired.get(dp.id)
        if old is not None and old.dp is dp:
            del fab.retired[dp.id]
            old.gen += 1
            self.fail(dp.id)
        sw = fab.by_dpid.get(dp.id)
        if sw is None:
            if dp.id in fab.unknown:
                fab.unknown[dp.id]["connected"] = False
                fab.unknown[dp.id].pop("dp", None)
                fab.discovery.unknown.discard(dp.id)
                self.changes.mark(rediscover=True)
            return
        if sw.dp is not dp:
            return  # an old connection of a switch that has reconnected
        sw.dp = None
        sw.connected = False
        sw.confirmed = False
        sw.gen += 1
        sw.disconnected_at = time.monotonic()
        if fab.config.recompute:  # gone for longer than lldp_timeout: routed around (reconnecting restores)
            self.failover.switch_lost()
        fab.discovery.switch_down(dp.id)
        self.fail(dp.id)
        LOG.warning("switch %s (dpid %016x) disconnected", sw.name, sw.dpid)
        self.changes.mark(rediscover=True)

    def fail(self, dpid: int) -> None:
        """A connection of ``dpid`` is gone: its waiters fail, its flips in flight are forgotten."""
        self.channel.fail(dpid)
        self.forget(dpid)

    # ------------------------------------------------------------- sessions
    def resync(self, sw: Any) -> None:
        """The switch's desired table changed: a new session (the running one stops) reconciles it."""
        sw.gen += 1
        sw.confirmed = False
        hub.spawn(self.session, sw, sw.dp, sw.gen)

    def session(self, sw: Any, dp: Any, gen: int) -> None:
        """A (re)connected switch, or one whose table or role changed: claim our role, then reconcile if master."""
        try:
            if not self.claim_role(sw, dp, gen):
                return
        except Disconnected:
            return
        except SyncError as err:
            sw.error = str(err)
            self.counters["role_failures"] += 1
            LOG.error("switch %s: role request failed: %s", sw.name, err)
            self.changes.mark()
            return
        self.sync_loop(sw, dp, gen)

    def claim_role(self, sw: Any, dp: Any, gen: int) -> bool:
        """Send our role (HA) and wait for the reply; True if we may write to this switch."""
        ha = self.ha
        if ha.mode == "equal":
            return True
        ch = self.channel
        master = ha.master_of(sw.name)
        role = ofwire.OFPCR_ROLE_MASTER if master else ofwire.OFPCR_ROLE_SLAVE
        generation = ha.generation_of(sw.name)
        xid = ch.xids(dp, 1)
        w = ch.wait(dp, xid, ofwire.role_request(xid, role, generation), timeout=10.0)
        ch.pop_error(dp.id, xid)
        if w.error is not None:
            raise SyncError(f"role {'MASTER' if role == ofwire.OFPCR_ROLE_MASTER else 'SLAVE'} generation "
                            f"{generation} rejected: {err_text(w.error)}")
        if sw.gen != gen:
            raise Disconnected("superseded")
        if role == ofwire.OFPCR_ROLE_MASTER and ha.master_of(sw.name) and ha.generation_of(sw.name) == generation:
            sw.role_gen = generation
            return True
        sw.role_gen = None
        return False

    def sync_loop(self, sw: Any, dp: Any, gen: int) -> None:
        """Reconcile until confirmed (retrying with backoff), superseded, disconnected or no longer master."""
        attempt = 0
        while self.active() and sw.gen == gen:
            if not self.ha.master_of(sw.name):
                return
            try:
                self.sync(sw, dp, gen)
                return
            except Disconnected:
                return
            except Exception as err:  # any failure: report, retry with backoff
                attempt += 1
                sw.error = str(err)
                self.counters["sync_failures"] += 1
                LOG.error("switch %s: sync failed (attempt %d): %s", sw.name, attempt, err)
                self.changes.mark()
                hub.sleep(min(30.0, 2.0**attempt))
