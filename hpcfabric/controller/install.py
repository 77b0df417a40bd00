"""One switch's reconciliation: meters and groups, flow dump, diff, the changes in a bundle or as flow-mods.

:meth:`Installer.sync` installs the punt meters and fast-failover groups the
flows need (only if they differ), dumps the switch's flows, plans the
difference against the desired table (the pure :mod:`hpcfabric.openflow.syncplan`:
what to send) and sends only that -- deletions first -- in one ONF bundle (or
plain flow-mods where the switch has no bundles), closed by a barrier. Never a
delete-all, so reconnects do not disturb traffic. Errors of the sent xids
fail the sync (the session retries); flips that raced with it are re-asserted.
"""

from __future__ import annotations

import logging
import struct
import time
from typing import Any, Callable

from hpcfabric.controller.channel import MAX_XID, Channel, Disconnected, SyncError, err_text, install_timeout
from hpcfabric.controller.ofmsg import Unrepresentable, from_action, from_flow_stats
from hpcfabric.controller.state import Changes, State
from hpcfabric.openflow import ofwire
from hpcfabric.openflow.syncplan import ADD, DELETE, SyncPlan, plan_change, plan_groups, plan_meters, plan_sync
from hpcfabric.rules.flows import FlowSpec

LOG = logging.getLogger("hpcfabric.controller")


class Installer:
    """Reconciles ``state``'s switches with their desired tables over ``channel`` (flow-mods encoded by
    ``cache``). ``adopt(switch, installed)``: the pausing's look at PORT_STATE entries found paused;
    ``settled(everything)``: a switch was confirmed (everything: all of them; the heap's settle point)."""

    def __init__(self, state: State, channel: Channel, cache: Any, counters: Any, changes: Changes,
                 adopt: Callable[[str, list[FlowSpec]], None], settled: Callable[[bool], None]) -> None:
        self.state, self.channel, self.cache, self.counters, self.changes = state, channel, cache, counters, changes
        self.adopt, self.settled = adopt, settled
        self.bundle_id = 0

    def sync(self, sw: Any, dp: Any, gen: int) -> None:
        """Reconcile ``sw`` (session ``dp``, generation ``gen``): meters and groups, flow dump, the plan
        (:func:`~hpcfabric.openflow.syncplan.plan_sync`), its flow-mods, a barrier."""
        fab = self.state
        t0 = time.monotonic()
        ranges: list[tuple[int, int]] = []
        sw.syncing = True
        sw.flipped_during_sync.clear()
        try:
            if not sw.retired:
                self.sync_meters(sw, dp)
                self.sync_groups(sw, dp)
            installed, opaque = self.dump_flows(dp, sw)
            if not sw.retired:
                self.adopt(sw.name, installed)
            desired = () if sw.retired else fab.desired(sw.name)
            plan = plan_sync(desired, installed, opaque)
            d = plan.diff
            if plan.opaque:
                LOG.warning("switch %s: %d flow(s) with our cookie that hpcfabric cannot express: deleting them",
                            sw.name, len(plan.opaque))
            changes = plan.changes
            method = self.send(sw, dp, plan, ranges) if changes else "none"
            self.confirm(sw, dp, gen, ranges, changes)
            if sw.retired:
                LOG.warning("switch dpid %016x (was %s) is no longer in the topology: %d flows of ours deleted",
                            sw.dpid, sw.name, plan.deleted)
            # flips that raced with the sync: re-assert the current PORT_STATE entries
            for port in sorted(sw.flipped_during_sync):
                flow = fab.tables.port_state_flow(sw.name, port, fab.pause.is_paused(sw.name, port, time.monotonic()))
                x = self.channel.xids(dp, 1)
                self.channel.send(dp, self.cache.encode(flow, x, ofwire.OFPFC_MODIFY_STRICT))
            sw.confirmed = not sw.retired
            if sw.confirmed and sw.ready_gen != gen:  # its LLDP punts work from now: links pending from here
                sw.ready_gen = gen
                fab.discovery.switch_ready(sw.dpid, time.monotonic())
            sw.rules_installed = len(desired)
            sw.added, sw.modified, sw.deleted, sw.kept = len(d.add), len(d.modify), plan.deleted, len(d.keep)
            sw.foreign = plan.foreign
            sw.conflicts = len(d.conflicts)
            sw.method = method
            sw.sync_seconds = time.monotonic() - t0
            sw.confirmed_at = time.time()
            sw.syncs += 1
            sw.error = None
            self.counters["rules_sent"] += changes
            LOG.info(
                "switch %s (dpid %016x) confirmed: %d rules (added %d, modified %d, deleted %d, kept %d) in %.3f s via %s",
                sw.name, sw.dpid, sw.rules_installed, sw.added, sw.modified, sw.deleted, sw.kept, sw.sync_seconds,
                method,
            )
            everything = all(s.confirmed for s in fab.switches.values())
            self.settled(everything)
            if everything:  # operators and benches wait for this: no status gap
                self.changes.milestone = True
            if sw.foreign:
                LOG.warning("switch %s holds %d foreign flow(s) (not ours, left alone)", sw.name, sw.foreign)
            if d.conflicts:
                LOG.warning("switch %s: %d foreign flow(s) sat on keys we need and were replaced", sw.name, len(d.conflicts))
        finally:
            sw.syncing = False
            self.changes.mark()

    def send(self, sw: Any, dp: Any, plan: SyncPlan, ranges: list[tuple[int, int]]) -> str:
        """Send the plan's flow-mods: one ONF bundle where the switch takes them (``[openflow] bundles``),
        else plain flow-mods; their xids are added to ``ranges``. Returns the method used."""
        bundles = self.state.config.bundles
        if (bundles == "on" or (bundles == "auto" and sw.bundles is not False)) and self.install_bundle(
                sw, dp, plan, ranges):
            return "bundle"
        self.install_flowmods(dp, plan, ranges)
        return "flowmods"

    def confirm(self, sw: Any, dp: Any, gen: int, ranges: list[tuple[int, int]], changes: int) -> None:
        """A barrier after what was sent (``ranges``: its xids); raises SyncError for the switch's errors among
        them, Disconnected if the session was superseded meanwhile."""
        ch = self.channel
        xid = ch.xids(dp, 1)
        ranges.append((xid, 1))
        ch.wait(dp, xid, ofwire.barrier(xid), timeout=install_timeout(changes))
        errs = ch.take_errors(dp.id, ranges)
        if errs:
            raise SyncError(f"{len(errs)} error(s) from the switch, first: {err_text(errs[0])}")
        if sw.gen != gen:
            raise Disconnected("superseded")

    def apply_change(self, sw: Any, dp: Any, old: tuple[FlowSpec, ...], new: tuple[FlowSpec, ...]) -> int:
        """A confirmed switch from desired table ``old`` to ``new`` (a repair): only the entries that differ
        (:func:`~hpcfabric.openflow.syncplan.plan_change`), in one ONF bundle (or flow-mods), its fast-failover
        groups first if they changed, then a barrier. No flow dump: ``old`` is what the switch was confirmed with.
        Returns the flow-mods sent; raises SyncError / Disconnected (the caller falls back to a full
        reconciliation)."""
        gen = sw.gen
        self.sync_groups(sw, dp)
        plan = plan_change(old, new)
        changes = plan.changes
        ranges: list[tuple[int, int]] = []
        if changes and self.state.config.bundles != "off" and sw.bundles is True:
            self.install_bundle_pipelined(dp, plan, ranges)  # its last barrier is the confirmation
            if sw.gen != gen:
                raise Disconnected("superseded")
        else:
            if changes:
                self.send(sw, dp, plan, ranges)
            self.confirm(sw, dp, gen, ranges, changes)
        sw.rules_installed = len(new)
        sw.confirmed_at = time.time()
        self.counters["rules_sent"] += changes
        self.counters["repair_flow_mods"] += changes
        return changes

    def dump_flows(self, dp: Any, sw: Any) -> tuple[list[FlowSpec], list[Any]]:
        """The switch's flows: those a FlowSpec expresses, and the others (opaque, e.g. foreign)."""
        p, o = dp.ofproto_parser, dp.ofproto
        req = p.OFPFlowStatsRequest(dp, 0, o.OFPTT_ALL, o.OFPP_ANY, o.OFPG_ANY, 0, 0, p.OFPMatch())
        dp.set_xid(req)
        req.serialize()
        t0 = time.monotonic()
        w = self.channel.wait(dp, req.xid, bytes(req.buf))
        if w.error is not None:
            raise SyncError(f"flow stats request rejected: {w.error}")
        t1 = time.monotonic()
        specs, opaque = [], []
        for stats in w.parts:
            if isinstance(stats, ofwire.FlowStatsEntry):  # decoded by ofwire (see launch.install_fast_flow_stats)
                if stats.spec is None:
                    opaque.append(stats)
                else:
                    specs.append(stats.spec)
                continue
            try:
                specs.append(from_flow_stats(stats))
            except Unrepresentable:
                opaque.append(stats)
        sw.dump_seconds = time.monotonic() - t0
        LOG.debug("switch %s: %d flow stats in %.3f s, converted in %.3f s", sw.name, len(w.parts), t1 - t0,
                  time.monotonic() - t1)
        return specs, opaque

    def encode(self, dp: Any, plan: SyncPlan, xid0: int) -> list[bytes]:
        """The plan's flow-mods encoded in its order (:meth:`~hpcfabric.openflow.syncplan.SyncPlan.messages`),
        with consecutive xids from ``xid0``."""
        out = []
        enc = self.cache.encode
        for i, (kind, f) in enumerate(plan.messages()):
            x = (xid0 + i) & MAX_XID
            if kind == ADD:  # ADD replaces the entry with the same table/priority/match
                out.append(enc(f, x))
            elif kind == DELETE:
                out.append(enc(f, x, ofwire.OFPFC_DELETE_STRICT))
            elif isinstance(f, ofwire.FlowStatsEntry):
                body = ofwire.flow_mod_raw_match(f.table, f.priority, f.match_raw)
                out.append(ofwire.header(ofwire.OFPT_FLOW_MOD, 8 + len(body), x) + body)
            else:
                p, o = dp.ofproto_parser, dp.ofproto
                fm = p.OFPFlowMod(
                    dp, cookie=ofwire.OUR_COOKIE, cookie_mask=ofwire.COOKIE_APP_MASK, table_id=f.table_id,
                    command=o.OFPFC_DELETE_STRICT, priority=f.priority, out_port=o.OFPP_ANY, out_group=o.OFPG_ANY,
                    match=f.match,
                )
                fm.set_xid(x)
                fm.serialize()
                out.append(bytes(fm.buf))
        return out

    def install_flowmods(self, dp: Any, plan: SyncPlan, ranges: list[tuple[int, int]]) -> None:
        n = plan.changes
        xid0 = self.channel.xids(dp, n)
        ranges.append((xid0, n))
        self.channel.send_chunks(dp, self.encode(dp, plan, xid0))

    def install_bundle(self, sw: Any, dp: Any, plan: SyncPlan, ranges: list[tuple[int, int]]) -> bool:
        """Install the plan atomically in one ONF bundle; False if the switch has no bundles."""
        ch = self.channel
        self.bundle_id = (self.bundle_id + 1) & MAX_XID
        bid = self.bundle_id
        xid = ch.xids(dp, 1)
        w = ch.wait(dp, xid, ofwire.bundle_ctrl(xid, bid, ofwire.ONF_BCT_OPEN_REQUEST))
        ch.pop_error(dp.id, xid)
        if w.error is not None:
            if self.state.config.bundles == "on":
                raise SyncError(f"bundle open rejected: {err_text(w.error)}")
            LOG.info("switch %s does not take ONF bundles (%s); using plain flow-mods", sw.name, err_text(w.error))
            sw.bundles = False
            return False
        sw.bundles = True
        n = plan.changes
        xid0 = ch.xids(dp, n)
        span = [(xid0, n)]
        ch.send_chunks(dp, [ofwire.bundle_add((xid0 + i) & MAX_XID, bid, m)
                            for i, m in enumerate(self.encode(dp, plan, xid0))])
        # adds are validated one by one: a barrier tells us all verdicts are in
        bx = ch.xids(dp, 1)
        ch.wait(dp, bx, ofwire.barrier(bx), timeout=install_timeout(n))
        errs = ch.take_errors(dp.id, span)
        if errs:
            cx = ch.xids(dp, 1)
            ch.wait(dp, cx, ofwire.bundle_ctrl(cx, bid, ofwire.ONF_BCT_DISCARD_REQUEST))
            ch.take_errors(dp.id, [(cx, 1)])
            raise SyncError(f"bundle discarded: {len(errs)} rejected message(s), first: {err_text(errs[0])}")
        cx = ch.xids(dp, 1)
        w = ch.wait(dp, cx, ofwire.bundle_ctrl(cx, bid, ofwire.ONF_BCT_COMMIT_REQUEST), timeout=install_timeout(n))
        if w.error is not None:
            errs = ch.take_errors(dp.id, span + [(cx, 1)])
            more = f" ({len(errs)} error(s), first {err_text(errs[0])})" if errs else ""
            raise SyncError(f"bundle commit failed: {err_text(w.error)}{more}")
        ch.pop_error(dp.id, cx)
        return True

    def install_bundle_pipelined(self, dp: Any, plan: SyncPlan, ranges: list[tuple[int, int]]) -> None:
        """:meth:`install_bundle` for a switch known to take bundles (a repair), in two round trips instead of four:
        the open, the adds and a barrier in one go (every add's verdict is in at the barrier; an error discards the
        bundle, as there), then -- only if none was rejected -- the commit and a barrier, whose reply confirms it
        (the commit's reply or error comes before it). Raises SyncError for a rejected open, add or commit."""
        ch = self.channel
        self.bundle_id = (self.bundle_id + 1) & MAX_XID
        bid = self.bundle_id
        n = plan.changes
        x = ch.xids(dp, n + 2)  # open, n adds, barrier
        first = (x + 1) & MAX_XID
        ch.send_chunks(dp, [ofwire.bundle_ctrl(x, bid, ofwire.ONF_BCT_OPEN_REQUEST)]
                       + [ofwire.bundle_add((first + i) & MAX_XID, bid, m)
                          for i, m in enumerate(self.encode(dp, plan, first))])
        bx = (x + n + 1) & MAX_XID
        ch.wait(dp, bx, ofwire.barrier(bx), timeout=install_timeout(n))
        ranges.append((x, n + 2))
        errs = ch.take_errors(dp.id, [(x, n + 1)])
        if errs:
            cx = ch.xids(dp, 1)
            ch.wait(dp, cx, ofwire.bundle_ctrl(cx, bid, ofwire.ONF_BCT_DISCARD_REQUEST))
            ch.take_errors(dp.id, [(cx, 1)])
            raise SyncError(f"bundle discarded: {len(errs)} rejected message(s), first: {err_text(errs[0])}")
        cx = ch.xids(dp, 2)  # commit, barrier
        ch.send(dp, ofwire.bundle_ctrl(cx, bid, ofwire.ONF_BCT_COMMIT_REQUEST))
        ch.wait(dp, (cx + 1) & MAX_XID, ofwire.barrier((cx + 1) & MAX_XID), timeout=install_timeout(n))
        ranges.append((cx, 2))
        errs = ch.take_errors(dp.id, [(cx, 2)])
        if errs:
            raise SyncError(f"bundle commit failed: {err_text(errs[0])}")

    # ---------------------------------------------------------- meters/groups
    def sync_meters(self, sw: Any, dp: Any) -> None:
        """Install or correct the punt meters (before the flows that use them); nothing if they are right."""
        fab = self.state
        ch = self.channel
        wanted = {m.meter_id: (m.rate, m.burst) for m in fab.config.meters}
        if not wanted or sw.installed_meters == wanted:
            return
        p, o = dp.ofproto_parser, dp.ofproto
        have: dict[int, tuple[int, int]] = {}
        for st in ch.multipart(dp, p.OFPMeterConfigStatsRequest(dp, 0, o.OFPM_ALL)):
            if st.meter_id in wanted and st.bands and st.flags & o.OFPMF_PKTPS:
                band = st.bands[0]
                have[st.meter_id] = (band.rate, band.burst_size if st.flags & o.OFPMF_BURST else 0)
        mods = plan_meters(wanted, have)
        x = ch.xids(dp, len(mods)) if mods else 0
        msgs = [ofwire.meter_mod((x + i) & MAX_XID, mid, rate, burst, cmd)
                for i, (mid, rate, burst, cmd) in enumerate(mods)]
        self._send_mods(dp, msgs, "meter-mod rejected ({}): does the switch support meters? "
                        "else set [guards] punt_meters = off")
        if msgs:
            self.counters["meter_mods"] += len(msgs)
            LOG.info("switch %s: %d punt meter(s) installed/updated", sw.name, len(msgs))
        sw.installed_meters = wanted

    def sync_groups(self, sw: Any, dp: Any) -> None:
        """Install or correct the fast-failover groups the desired flows use (before the flows)."""
        fab = self.state
        ch = self.channel
        wanted = fab.tables.groups.get(sw.name) or {}
        if not wanted or sw.installed_groups == wanted:
            return
        p = dp.ofproto_parser
        have: dict[int, Any] = {}
        for st in ch.multipart(dp, p.OFPGroupDescStatsRequest(dp, 0)):
            if st.group_id in wanted:
                have[st.group_id] = tuple(
                    (b.watch_port, tuple(from_action(a) for a in b.actions)) for b in st.buckets
                )
        mods = plan_groups(wanted, have)
        x = ch.xids(dp, len(mods)) if mods else 0
        msgs = [ofwire.group_mod((x + i) & MAX_XID, gid, buckets, cmd) for i, (gid, buckets, cmd) in enumerate(mods)]
        self._send_mods(dp, msgs, "group-mod rejected ({}): does the switch support fast-failover "
                        "groups? else set [failover] fast_failover = off")
        if msgs:
            self.counters["group_mods"] += len(msgs)
            LOG.info("switch %s: %d fast-failover group(s) installed/updated", sw.name, len(msgs))
        sw.installed_groups = dict(wanted)

    def _send_mods(self, dp: Any, msgs: list[bytes], error: str) -> None:
        """Send meter/group mods (consecutive xids) and a barrier; a rejected one raises SyncError(``error``)."""
        if not msgs:
            return
        ch = self.channel
        xid0 = struct.unpack_from("!I", msgs[0], 4)[0]
        bx = ch.xids(dp, 1)
        ch.wait(dp, bx, b"".join(msgs) + ofwire.barrier(bx))
        errs = ch.take_errors(dp.id, [(xid0, len(msgs))])
        if errs:
            raise SyncError(error.format(err_text(errs[0])))
