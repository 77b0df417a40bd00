"""The PAUSE reaction: PAUSE/PFC and CNM packet-ins become port-state flips on the switch.

:class:`Pausing` feeds a frame from a fabric port to the pure
:class:`hpcfabric.protocols.pause.PauseState` (or :func:`hpcfabric.protocols.cnm.on_cnm`)
and applies the flips it returns: one ``OFPFC_MODIFY_STRICT`` of the port's
PORT_STATE entry plus a barrier, sent as one buffer from pre-encoded parts.
The barrier reply confirms the flip and records the reaction time
(:meth:`Pausing.barrier`). A green thread (:meth:`Pausing.loop`) flips
ports back when their pause expires. With ``pause_reaction = switch`` the
switch reacts itself and PAUSEs are only counted.
"""

from __future__ import annotations

import collections
import logging
import struct
import time
from typing import Any, Callable

from hpcfabric.controller.channel import MAX_XID, Channel, err_text
from hpcfabric.controller.framework import hub
from hpcfabric.controller.linkload import PauseClock
from hpcfabric.controller.metrics import ReactionHistogram
from hpcfabric.controller.state import Changes, State
from hpcfabric.openflow import ofwire
from hpcfabric.protocols.cnm import on_cnm, parse_cnm
from hpcfabric.protocols.pause import Flip, MalformedFrame, parse_mac_control
from hpcfabric.rules.port_state import port_state_flow
from hpcfabric.rules.flows import TABLE_PORT_STATE, FlowSpec

LOG = logging.getLogger("hpcfabric.controller")

_XID = struct.Struct("!I")
_BARRIER_HEAD = ofwire.barrier(0)[:4]


class Pausing:
    """PAUSE/PFC/CNM -> flips of ``state``'s ``pause`` state, sent over ``channel`` (flow-mods encoded by
    ``cache``) while ``ha`` says we master the switch; ``active()``: the app still runs."""

    def __init__(self, state: State, channel: Channel, cache: Any, counters: Any, ha: Any, changes: Changes,
                 active: Callable[[], bool]) -> None:
        self.state, self.channel, self.cache, self.counters, self.ha = state, channel, cache, counters, ha
        self.changes, self.active = changes, active
        #: (dpid, barrier xid) -> (start, flip, flow-mod xid) of flips in flight
        self.pending: dict[tuple[int, int], tuple[float, Flip, int]] = {}
        self.reaction_ms: collections.deque[float] = collections.deque(maxlen=1000)
        self.hist = ReactionHistogram()
        self.port_flips: collections.Counter = collections.Counter()  # (switch, port) -> flips
        self.port_pauses: collections.Counter = collections.Counter()  # switch mode: (switch, port) -> PAUSEs seen
        self.port_frames: collections.Counter = collections.Counter()  # (switch, port) -> well-formed PAUSE/PFC frames
        self.clock = PauseClock()  # seconds each port spent paused (controller.linkload)
        self.wakeup = hub.Event()
        self.wait_until = 0.0  # when the expiry loop wakes up anyway
        self.parts: dict[FlowSpec, tuple[bytes, bytes]] = {}

    @property
    def conditional(self) -> bool:
        return self.state.config.routing == "conditional"

    # ------------------------------------------------------------ frames
    def on_pause(self, msg: Any, data: bytes, in_port: int, t0: float) -> None:
        fab, mark = self.state, self.changes.mark
        c = self.counters
        c["pause_frames"] += 1
        sw = fab.by_dpid.get(msg.datapath.id)
        if sw is None:
            c["pause_unknown_switch"] += 1
            mark()
            return
        peer = fab.fabric.peer(sw.name, in_port)
        if peer is None:
            c["pause_unknown_port"] += 1
            mark()
            return
        if peer.is_host:
            c["pause_host_port"] += 1
            mark()
            return
        try:
            frame = parse_mac_control(data)
        except MalformedFrame as err:
            c["pause_malformed"] += 1
            LOG.debug("switch %s port %d: malformed MAC-control frame dropped: %s", sw.name, in_port, err)
            mark()
            return
        self.port_frames[(sw.name, in_port)] += 1
        if not self.conditional:
            c["pause_minimal"] += 1
            mark()
            return
        if fab.config.pause_reaction == "switch":  # the switch learned its override from this very frame
            c["pause_switch_local"] += 1
            self.port_pauses[(sw.name, in_port)] += 1
            mark()
            return
        c["pause_used"] += 1
        for flip in fab.pause.on_frame(sw.name, in_port, frame, t0):
            self.apply_flip(flip, t0)
        self._wake_for(sw.name, in_port)
        mark()

    def on_cnm(self, msg: Any, data: bytes, in_port: int, t0: float) -> None:
        """An 802.1Qau CNM copied from a fabric port: the same flip as a PAUSE, held
        ``cnm_max_hold_ms * qFb / 63`` (:func:`hpcfabric.protocols.cnm.on_cnm`, docs/routing.md)."""
        fab = self.state
        c = self.counters
        c["cnm_frames"] += 1
        sw = fab.by_dpid.get(msg.datapath.id)
        peer = fab.fabric.peer(sw.name, in_port) if sw is not None else None
        if sw is None or peer is None:
            c["cnm_unknown_port"] += 1
        elif peer.is_host:
            c["cnm_host_port"] += 1  # a congestion point in a host says nothing about the fabric
        else:
            try:
                cnm = parse_cnm(data)
            except MalformedFrame as err:
                c["cnm_malformed"] += 1
                LOG.debug("switch %s port %d: malformed CNM dropped: %s", sw.name, in_port, err)
            else:
                if not self.conditional:
                    c["cnm_minimal"] += 1
                elif cnm.qfb == 0:
                    c["cnm_no_feedback"] += 1
                else:
                    c["cnm_used"] += 1
                    flips = on_cnm(fab.pause, sw.name, in_port, cnm, t0, max_hold=fab.config.cnm_max_hold_ms / 1000.0)
                    for flip in flips:
                        c["cnm_flips"] += 1
                        self.apply_flip(flip, t0)
                    self._wake_for(sw.name, in_port)
        self.changes.mark()

    def _wake_for(self, switch: str, port: int) -> None:
        deadline = self.state.pause.until.get((switch, port))
        if deadline is not None and deadline < self.wait_until:
            self.wakeup.set()  # only an earlier deadline needs the expiry loop now

    # ------------------------------------------------------------- flips
    def apply_flip(self, flip: Flip, t0: float) -> None:
        """Send the flip's flow-mod and barrier (nothing while disconnected or not master: the next sync does it)."""
        fab, c = self.state, self.counters
        sw = fab.switches.get(flip.switch)
        if sw is None:  # removed by a reload meanwhile
            return
        c["flips"] += 1
        self.port_flips[(flip.switch, flip.port)] += 1
        self.clock.flip((flip.switch, flip.port), flip.paused, flip.at)
        if flip.cause == "expiry":
            c["expiries"] += 1
        dp = sw.dp
        if dp is None or not self.ha.master_of(sw.name):
            return  # desired() carries the state into the next sync
        if sw.syncing:
            sw.flipped_during_sync.add(flip.port)
        flow = fab.tables.port_state_flow(sw.name, flip.port, flip.paused)
        parts = self.parts.get(flow)
        if parts is None:  # the versions of a port's PORT_STATE entry, encoded once
            parts = self.cache.parts(flow, ofwire.OFPFC_MODIFY_STRICT)
            self.parts[flow] = parts
        xid = self.channel.xids(dp, 2)
        bxid = (xid + 1) & MAX_XID
        data = b"".join((parts[0], _XID.pack(xid), parts[1], _BARRIER_HEAD, _XID.pack(bxid)))
        self.pending[(dp.id, bxid)] = (t0, flip, xid)
        c["flip_flow_mods"] += 1
        if not dp.send(data):
            self.pending.pop((dp.id, bxid), None)

    def barrier(self, dpid: int, xid: int) -> bool:
        """A barrier reply: True if it confirmed a flip (then it is no one else's)."""
        pending = self.pending.pop((dpid, xid), None)
        if pending is None:
            return False
        t0, flip, fxid = pending
        ms = (time.monotonic() - t0) * 1000.0
        err = self.channel.pop_error(dpid, fxid)
        if err is not None:
            LOG.error("flip %s:%d rejected by the switch: %s", flip.switch, flip.port, err_text((fxid, *err)))
            self.counters["flip_errors"] += 1
            return True
        if flip.cause != "expiry":
            self.reaction_ms.append(ms)
            self.hist.observe(ms / 1000.0)
        LOG.info("flip %s:%d %s (%s) reaction %.3f ms", flip.switch, flip.port, "paused" if flip.paused else "resumed",
                 flip.cause, ms)
        self.changes.mark()
        return True

    def in_flight(self) -> bool:
        """Is a flip waiting for its barrier reply?"""
        return bool(self.pending)

    def as_dict(self, now: float | None = None) -> dict[str, Any]:
        """What status, metrics and the page show: PAUSEs seen per port in switch mode, well-formed PAUSE/PFC
        frames and flips per port, seconds paused per port at ``now`` (default: now), the last reaction times
        (ms), the reaction histogram (cumulative buckets, sum in seconds), flips in flight."""
        now = time.monotonic() if now is None else now
        return {"port_pauses": dict(self.port_pauses), "port_frames": dict(self.port_frames),
                "port_flips": dict(self.port_flips), "paused_s": self.clock.seconds(now),
                "reaction_ms": list(self.reaction_ms), "hist_buckets": self.hist.cumulative(),
                "hist_sum": self.hist.sum, "in_flight": len(self.pending)}

    def forget(self, dpid: int | None = None) -> None:
        """Drop the flips in flight on ``dpid`` (a lost connection), or all of them (None: no longer master)."""
        if dpid is None:
            self.pending.clear()
            return
        for key in [k for k in self.pending if k[0] == dpid]:
            del self.pending[key]

    def loop(self) -> None:
        """Flip ports back when their pause runs out (woken early by a new, earlier deadline)."""
        while self.active():
            self.wakeup.clear()
            deadline = self.state.pause.next_deadline()
            now = time.monotonic()
            wait = 1.0 if deadline is None else min(max(deadline - now, 0.0), 1.0)
            self.wait_until = now + wait
            if wait > 0:
                self.wakeup.wait(timeout=wait)
            now = time.monotonic()
            for flip in self.state.pause.expire(now):  # read afresh: a reload may have replaced it
                self.apply_flip(flip, now)
                self.changes.mark()

    def adopt(self, switch: str, installed: list[FlowSpec]) -> None:
        """PORT_STATE entries found paused (set by a previous controller run or the previous master) stay
        paused for one hold time instead of being rewritten now: reconciliation sends nothing, and the
        expiry (or a fresh PAUSE) decides afterwards."""
        if not self.conditional:
            return
        pause = self.state.pause
        now = time.monotonic()
        for f in installed:
            if f.table == TABLE_PORT_STATE and f.goto is not None and f.match.metadata is not None:
                port = f.match.metadata[0]
                if f == port_state_flow(port, True) and not pause.is_paused(switch, port, now):
                    pause.until[(switch, port)] = now + max(pause.hold, 0.05)
                    self.wakeup.set()
                    LOG.info("switch %s port %d found paused: adopted until its hold expires", switch, port)
