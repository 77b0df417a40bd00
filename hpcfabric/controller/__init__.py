"""The hpcfabric os-ken application (OpenFlow 1.3): the controller shell around the pure core.

Run it with either::

    hpcfabric controller --config configs/dragonfly-a4-p2-h2.conf
    osken-manager --config-file configs/dragonfly-a4-p2-h2.conf hpcfabric.controller

(or set ``HPCFABRIC_CONFIG=FILE`` for ``osken-manager hpcfabric.controller``).
See docs/controller.md. The application class is defined in this module on
purpose: os-ken's app manager only loads ``OSKenApp`` subclasses whose
``__module__`` is the module it was asked to load.

What it does (all decisions live in the pure modules it calls):

* start: load and compile the config (errors: log, exit 2, never listen);
* switch connects: unknown dpid -> warning, nothing installed; known ->
  dump its flows, :func:`hpcfabric.reconcile.diff` against the desired table,
  send only the difference in one ONF bundle (or plain flow-mods), barrier,
  confirmed. Never a delete-all, so reconnects do not disturb traffic;
* LLDP out of every non-host port every ``lldp_interval``;
  :class:`hpcfabric.discovery.DiscoveryState` judges the wiring, miswired
  ports get ``OFPPC_NO_FWD`` until healed;
* PAUSE/PFC packet-ins on fabric ports -> :class:`hpcfabric.pause.PauseState`
  -> one ``OFPFC_MODIFY_STRICT`` of the port's PORT_STATE entry + barrier per flip;
* a JSON status file, rewritten atomically on change (<= 10/s) and every second.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import secrets
import signal
import struct
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import DEAD_DISPATCHER, MAIN_DISPATCHER, set_ev_cls, set_ev_handler
from os_ken.lib import hub
from os_ken.ofproto import ofproto_v1_3

from hpcfabric import ofwire
from hpcfabric.compiler import port_state_flow
from hpcfabric.config import ControllerConfig, load_config
from hpcfabric.controller import ofmsg
from hpcfabric.discovery import DiscoveryState, MalformedLLDP, build_lldp, parse_lldp, quarantine_changes
from hpcfabric.errors import HpcfabricError
from hpcfabric.flows import ETH_TYPE_LLDP, ETH_TYPE_PAUSE, TABLE_PORT_STATE, FlowSpec, cookie_class
from hpcfabric.pause import Flip, MalformedFrame, PauseState, parse_mac_control
from hpcfabric.reconcile import diff

LOG = logging.getLogger("hpcfabric.controller")

#: set by :func:`run` so the app does not load and compile the config twice
_PRELOADED: ControllerConfig | None = None
_OVERRIDES: dict[str, Any] = {}

MAX_XID = 0xFFFFFFFF
SEND_CHUNK = 256 * 1024  # bytes per Datapath.send (its queue holds 16 entries)
REPLY_TIMEOUT = 60.0
STATUS_MIN_GAP = 0.1  # at most 10 status writes per second
STATUS_LIST_CAP = 1000  # longer link lists are cut (their *_count keys hold the totals)
LLDP_TTL = 120
OFPPC_NO_FWD = ofproto_v1_3.OFPPC_NO_FWD
_XID = struct.Struct("!I")
_BARRIER_HEAD = ofwire.barrier(0)[:4]


class SyncError(Exception):
    pass


class Disconnected(SyncError):
    pass


def config_path() -> str | None:
    """``HPCFABRIC_CONFIG``, else the last ``--config-file`` given to osken-manager that has [hpcfabric]."""
    env = os.environ.get("HPCFABRIC_CONFIG")
    if env:
        return env
    try:
        from os_ken import cfg

        files = list(cfg.CONF.config_file or [])
    except Exception:  # pragma: no cover - CONF not parsed
        files = []
    for path in reversed(files):
        try:
            with open(path, encoding="utf-8") as fh:
                if any(line.strip() == "[hpcfabric]" for line in fh):
                    return path
        except OSError:
            continue
    return files[-1] if files else None


@dataclass
class SwitchState:
    name: str
    dpid: int
    rules_expected: int
    dp: Any = None
    connected: bool = False
    confirmed: bool = False
    rules_installed: int = 0
    added: int = 0
    modified: int = 0
    deleted: int = 0
    kept: int = 0
    foreign: int = 0
    conflicts: int = 0
    method: str | None = None
    sync_seconds: float | None = None
    dump_seconds: float | None = None
    confirmed_at: float | None = None
    connected_at: float | None = None
    syncs: int = 0
    error: str | None = None
    gen: int = 0
    bundles: bool | None = None  # None: not tried yet
    syncing: bool = False
    flipped_during_sync: set[int] = field(default_factory=set)
    no_fwd: set[int] = field(default_factory=set)
    probing: set[int] = field(default_factory=set)

    def as_dict(self) -> dict[str, Any]:
        return {
            "dpid": f"{self.dpid:016x}",
            "connected": self.connected,
            "confirmed": self.confirmed,
            "rules_expected": self.rules_expected,
            "rules_installed": self.rules_installed,
            "added": self.added,
            "modified": self.modified,
            "deleted": self.deleted,
            "kept": self.kept,
            "foreign": self.foreign,
            "method": self.method,
            "sync_seconds": None if self.sync_seconds is None else round(self.sync_seconds, 6),
            "dump_seconds": None if self.dump_seconds is None else round(self.dump_seconds, 6),
            "confirmed_at": self.confirmed_at,
            "syncs": self.syncs,
            "error": self.error,
            "no_fwd_ports": sorted(self.no_fwd),
        }


class _Waiter:
    __slots__ = ("event", "reply", "error", "parts")

    def __init__(self) -> None:
        self.event = hub.Event()
        self.reply: Any = None
        self.error: Any = None
        self.parts: list[Any] = []


class HpcfabricController(app_manager.OSKenApp):
    """Proactive OpenFlow 1.3 controller for an hpcfabric fabric (see the module docstring)."""

    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        config = _PRELOADED
        if config is None:
            path = config_path()
            if not path:
                LOG.error("no configuration: pass --config-file FILE to osken-manager or set HPCFABRIC_CONFIG")
                raise SystemExit(2)
            try:
                config = load_config(path)
            except HpcfabricError as err:
                LOG.error("hpcfabric: error: %s", err)
                raise SystemExit(getattr(err, "exit_code", 2)) from None
            _setup_logging(config.log_level, quiet_osken=False)
            host, port = _apply_listen_overrides(config)
            try:
                check_listen_address(host, port)
            except HpcfabricError as err:
                LOG.error("hpcfabric: error: %s", err)
                raise SystemExit(err.exit_code) from None
        self.config = config
        self.status_file = _OVERRIDES.get("status_file", config.status_file)
        self.fabric = config.fabric
        self.started = time.time()
        self.switches = {
            sw.name: SwitchState(sw.name, sw.dpid, len(config.desired[sw.name])) for sw in self.fabric.switches
        }
        self.by_dpid = {s.dpid: s for s in self.switches.values()}
        self.unknown: dict[int, dict[str, Any]] = {}
        self.discovery = DiscoveryState(self.fabric, config.lldp_timeout)
        self.pause = PauseState(config.link_speed_bps, hold=config.pause_hold_ms / 1000.0)
        self.conditional = config.routing == "conditional"
        self.cache = ofwire.FlowModCache()
        self.nonce = secrets.token_bytes(8)
        self.waiters: dict[tuple[int, int], _Waiter] = {}
        self.errors: dict[int, dict[int, tuple[int, int]]] = collections.defaultdict(dict)
        self.pending_flips: dict[tuple[int, int], tuple[float, Flip, int]] = {}
        self.reaction_ms: collections.deque[float] = collections.deque(maxlen=1000)
        self.counters = collections.Counter()
        self._bundle_id = 0
        self._lldp_cache: dict[tuple[int, int, str], bytes] = {}
        self._dirty = False  # polled by the status loop: marking never wakes a green thread
        self._pause_wakeup = hub.Event()
        self._expiry_wait_until = 0.0  # when the expiry loop wakes up anyway
        self._last_report: dict[str, Any] = {}
        self._report_at = -1.0
        self._logged_problems: set[str] = set()
        self._own_threads: list[Any] = []
        self._flip_parts: dict[tuple[int, bool], tuple[bytes, bytes]] = {}
        self._report_cost = 0.0
        self._status_cost = 0.0
        LOG.info(
            "hpcfabric controller: %s (%s, %d switches, %d hosts), %s addressing, %s routing, %d rules",
            self.fabric.name,
            self.fabric.kind,
            len(self.fabric.switches),
            len(self.fabric.hosts),
            config.addressing,
            config.routing,
            config.rules_expected,
        )

    # ------------------------------------------------------------------ life
    def start(self) -> Any:
        super().start()
        brick = app_manager.lookup_service_brick("ofp_event")
        if brick is None:  # pragma: no cover - os-ken loads ofp_handler with every OpenFlow app
            raise RuntimeError("os-ken's ofp_event service is not running")
        for name, ev_cls in self.DIRECT_HANDLERS:
            brick.register_handler(ev_cls, getattr(self, name))
        for fn in (self._status_loop, self._lldp_loop, self._expiry_loop):
            t = hub.spawn(fn)
            self._own_threads.append(t)
        self._write_status()
        return None

    def stop(self) -> None:
        self.is_active = False
        brick = app_manager.lookup_service_brick("ofp_event")
        for name, ev_cls in self.DIRECT_HANDLERS if brick is not None else ():
            try:
                brick.unregister_handler(ev_cls, getattr(self, name))
            except ValueError:
                pass
        for t in self._own_threads:
            hub.kill(t)
        self._own_threads.clear()
        super().stop()

    def close(self) -> None:
        try:
            self._write_status(running=False)
        except Exception:  # pragma: no cover
            LOG.exception("final status write failed")

    # ------------------------------------------------------------- helpers
    def _xids(self, dp: Any, n: int) -> int:
        start = (dp.xid + 1) & MAX_XID
        dp.xid = (dp.xid + n) & MAX_XID
        return start

    def _send(self, dp: Any, data: bytes) -> None:
        if not dp.send(data):
            raise Disconnected("connection closing")

    def _send_chunks(self, dp: Any, parts: Any) -> None:
        buf = bytearray()
        for p in parts:
            buf += p
            if len(buf) >= SEND_CHUNK:
                self._send(dp, bytes(buf))
                buf = bytearray()
        if buf:
            self._send(dp, bytes(buf))

    def _wait(self, dp: Any, xid: int, data: bytes | None = None, timeout: float = REPLY_TIMEOUT) -> _Waiter:
        """Register a waiter for ``xid``, send ``data``, wait for the reply or error."""
        w = _Waiter()
        key = (dp.id, xid)
        self.waiters[key] = w
        try:
            if data is not None:
                self._send(dp, data)
            if not w.event.wait(timeout=timeout):
                raise SyncError(f"no reply to xid {xid:#x} within {timeout:g} s")
        finally:
            self.waiters.pop(key, None)
        if w.reply is Disconnected:
            raise Disconnected("switch disconnected")
        return w

    def _wake(self, dpid: int, xid: int, reply: Any = None, error: Any = None, done: bool = True) -> bool:
        w = self.waiters.get((dpid, xid))
        if w is None:
            return False
        if error is not None:
            w.error = error
        if reply is not None:
            w.reply = reply
        if done:
            w.event.set()
        return True

    def _mark(self, rediscover: bool = False) -> None:
        if rediscover:
            self._report_at = -1.0  # the next status recomputes the discovery report
        self._dirty = True

    def desired(self, name: str) -> tuple[FlowSpec, ...]:
        """The switch's desired table with PORT_STATE entries as the pause state says."""
        base = self.config.desired[name]
        paused = {p for (s, p) in self.pause.paused_ports() if s == name}
        if not paused:
            return base
        out = []
        for f in base:
            if f.table == TABLE_PORT_STATE and f.match.metadata is not None:
                port = f.match.metadata[0]
                if port in paused and f == port_state_flow(port, False):
                    f = port_state_flow(port, True)
            out.append(f)
        return tuple(out)

    # ------------------------------------------------------ switch lifecycle
    @set_ev_cls(ofp_event.EventOFPStateChange, [MAIN_DISPATCHER, DEAD_DISPATCHER])
    def _state_change(self, ev: Any) -> None:
        dp = ev.datapath
        if ev.state == MAIN_DISPATCHER:
            self._connected(dp)
        elif ev.state == DEAD_DISPATCHER and dp.id is not None:
            self._disconnected(dp)

    def _connected(self, dp: Any) -> None:
        now = time.monotonic()
        sw = self.by_dpid.get(dp.id)
        if sw is None:
            info = self.unknown.setdefault(dp.id, {"first_seen": time.time()})
            info["connected"] = True
            info["address"] = "%s:%s" % tuple(dp.address[:2]) if dp.address else None
            self.discovery.switch_up(dp.id, now)
            LOG.warning(
                "unknown switch dpid %016x from %s connected: not in %s, nothing installed",
                dp.id,
                info["address"],
                self.fabric.name,
            )
            self._mark(rediscover=True)
            return
        if sw.dp is not None and sw.dp is not dp:
            LOG.info("switch %s (dpid %016x) reconnected; replacing the old connection", sw.name, sw.dpid)
            self._fail_waiters(sw.dpid)
        sw.dp = dp
        sw.connected = True
        sw.confirmed = False
        sw.connected_at = now
        sw.error = None
        sw.gen += 1
        sw.no_fwd = {p for p, d in (dp.ports or {}).items() if d.config & OFPPC_NO_FWD}
        for port in sw.no_fwd:
            self.discovery.adopt_quarantine(sw.name, port)
        self.discovery.switch_up(dp.id, now)
        LOG.info("switch %s (dpid %016x) connected from %s", sw.name, sw.dpid, dp.address[0] if dp.address else "?")
        hub.spawn(self._sync_loop, sw, dp, sw.gen)
        self._mark(rediscover=True)

    def _disconnected(self, dp: Any) -> None:
        sw = self.by_dpid.get(dp.id)
        if sw is None:
            if dp.id in self.unknown:
                self.unknown[dp.id]["connected"] = False
                self.discovery.unknown.discard(dp.id)
                self._mark(rediscover=True)
            return
        if sw.dp is not dp:
            return  # an old connection of a switch that has reconnected
        sw.dp = None
        sw.connected = False
        sw.confirmed = False
        sw.gen += 1
        self.discovery.switch_down(dp.id)
        self._fail_waiters(dp.id)
        LOG.warning("switch %s (dpid %016x) disconnected", sw.name, sw.dpid)
        self._mark(rediscover=True)

    def _fail_waiters(self, dpid: int) -> None:
        for (d, xid), w in list(self.waiters.items()):
            if d == dpid:
                w.reply = Disconnected
                w.event.set()
        for key in [k for k in self.pending_flips if k[0] == dpid]:
            del self.pending_flips[key]

    # --------------------------------------------------------------- reconcile
    def _sync_loop(self, sw: SwitchState, dp: Any, gen: int) -> None:
        attempt = 0
        while self.is_active and sw.gen == gen:
            try:
                self._sync(sw, dp, gen)
                return
            except Disconnected:
                return
            except Exception as err:  # any failure: report, retry with backoff
                attempt += 1
                sw.error = str(err)
                self.counters["sync_failures"] += 1
                LOG.error("switch %s: sync failed (attempt %d): %s", sw.name, attempt, err)
                self._mark()
                hub.sleep(min(30.0, 2.0**attempt))

    def _dump_flows(self, dp: Any, sw: SwitchState) -> tuple[list[FlowSpec], list[Any]]:
        p, o = dp.ofproto_parser, dp.ofproto
        req = p.OFPFlowStatsRequest(
            dp, 0, o.OFPTT_ALL, o.OFPP_ANY, o.OFPG_ANY, 0, 0, p.OFPMatch()
        )
        dp.set_xid(req)
        req.serialize()
        t0 = time.monotonic()
        w = self._wait(dp, req.xid, bytes(req.buf))
        if w.error is not None:
            raise SyncError(f"flow stats request rejected: {w.error}")
        t1 = time.monotonic()
        specs, opaque = [], []
        for stats in w.parts:
            if isinstance(stats, ofwire.FlowStatsEntry):  # decoded by ofwire (see install_fast_flow_stats)
                if stats.spec is None:
                    opaque.append(stats)
                else:
                    specs.append(stats.spec)
                continue
            try:
                specs.append(ofmsg.from_flow_stats(stats))
            except ofmsg.Unrepresentable:
                opaque.append(stats)
        sw.dump_seconds = time.monotonic() - t0
        LOG.debug("switch %s: %d flow stats in %.3f s, converted in %.3f s", sw.name, len(w.parts), t1 - t0,
                  time.monotonic() - t1)
        return specs, opaque

    def _sync(self, sw: SwitchState, dp: Any, gen: int) -> None:
        t0 = time.monotonic()
        ranges: list[tuple[int, int]] = []
        sw.syncing = True
        sw.flipped_during_sync.clear()
        try:
            installed, opaque = self._dump_flows(dp, sw)
            desired = self.desired(sw.name)
            d = diff(desired, installed)
            ours_opaque = [s for s in opaque if cookie_class(s.cookie) is not None]
            if ours_opaque:
                LOG.warning("switch %s: %d flow(s) with our cookie that hpcfabric cannot express: deleting them",
                            sw.name, len(ours_opaque))
            changes = d.changes + len(ours_opaque)
            method = "none"
            if changes:
                use_bundle = self.config.bundles == "on" or (self.config.bundles == "auto" and sw.bundles is not False)
                if use_bundle:
                    method = "bundle" if self._install_bundle(sw, dp, d, ours_opaque, ranges) else "flowmods"
                if method != "bundle":
                    method = "flowmods"
                    self._install_flowmods(dp, d, ours_opaque, ranges)
            xid = self._xids(dp, 1)
            ranges.append((xid, 1))
            self._wait(dp, xid, ofwire.barrier(xid), timeout=_install_timeout(changes))
            errs = self._take_errors(dp.id, ranges)
            if errs:
                raise SyncError(f"{len(errs)} error(s) from the switch, first: {_err_text(errs[0])}")
            if sw.gen != gen:
                raise Disconnected("superseded")
            # flips that raced with the sync: re-assert the current PORT_STATE entries
            for port in sorted(sw.flipped_during_sync):
                flow = port_state_flow(port, self.pause.is_paused(sw.name, port, time.monotonic()))
                x = self._xids(dp, 1)
                self._send(dp, self.cache.encode(flow, x, ofwire.OFPFC_MODIFY_STRICT))
            sw.confirmed = True
            sw.rules_installed = len(desired)
            sw.added, sw.modified, sw.deleted, sw.kept = len(d.add), len(d.modify), len(d.delete) + len(ours_opaque), len(d.keep)
            sw.foreign = len(d.foreign) + len(opaque) - len(ours_opaque)
            sw.conflicts = len(d.conflicts)
            sw.method = method
            sw.sync_seconds = time.monotonic() - t0
            sw.confirmed_at = time.time()
            sw.syncs += 1
            sw.error = None
            self.counters["rules_sent"] += changes
            LOG.info(
                "switch %s (dpid %016x) confirmed: %d rules (added %d, modified %d, deleted %d, kept %d) in %.3f s via %s",
                sw.name,
                sw.dpid,
                sw.rules_installed,
                sw.added,
                sw.modified,
                sw.deleted,
                sw.kept,
                sw.sync_seconds,
                method,
            )
            if sw.foreign:
                LOG.warning("switch %s holds %d foreign flow(s) (not ours, left alone)", sw.name, sw.foreign)
            if d.conflicts:
                LOG.warning("switch %s: %d foreign flow(s) sat on keys we need and were replaced", sw.name, len(d.conflicts))
        finally:
            sw.syncing = False
            self._mark()

    def _change_messages(self, dp: Any, d: Any, opaque: list[Any], xid0: int) -> list[bytes]:
        """Encoded flow-mods, deletions first, with consecutive xids from ``xid0``."""
        out = []
        x = xid0
        enc = self.cache.encode
        for f in d.delete:
            out.append(enc(f, x, ofwire.OFPFC_DELETE_STRICT))
            x = (x + 1) & MAX_XID
        for s in opaque:
            if isinstance(s, ofwire.FlowStatsEntry):
                body = ofwire.flow_mod_raw_match(s.table, s.priority, s.match_raw)
                out.append(ofwire.header(ofwire.OFPT_FLOW_MOD, 8 + len(body), x) + body)
                x = (x + 1) & MAX_XID
                continue
            p, o = dp.ofproto_parser, dp.ofproto
            fm = p.OFPFlowMod(
                dp, cookie=ofwire.OUR_COOKIE, cookie_mask=ofwire.COOKIE_APP_MASK, table_id=s.table_id,
                command=o.OFPFC_DELETE_STRICT, priority=s.priority, out_port=o.OFPP_ANY, out_group=o.OFPG_ANY,
                match=s.match,
            )
            fm.set_xid(x)
            fm.serialize()
            out.append(bytes(fm.buf))
            x = (x + 1) & MAX_XID
        for f in d.add:
            out.append(enc(f, x))
            x = (x + 1) & MAX_XID
        for f in d.modify:  # ADD replaces the entry with the same table/priority/match
            out.append(enc(f, x))
            x = (x + 1) & MAX_XID
        return out

    def _install_flowmods(self, dp: Any, d: Any, opaque: list[Any], ranges: list[tuple[int, int]]) -> None:
        n = len(d.delete) + len(opaque) + len(d.add) + len(d.modify)
        xid0 = self._xids(dp, n)
        ranges.append((xid0, n))
        self._send_chunks(dp, self._change_messages(dp, d, opaque, xid0))

    def _install_bundle(
        self, sw: SwitchState, dp: Any, d: Any, opaque: list[Any], ranges: list[tuple[int, int]]
    ) -> bool:
        """Install the changes atomically in one ONF bundle; False if the switch has no bundles."""
        self._bundle_id = (self._bundle_id + 1) & MAX_XID
        bid = self._bundle_id
        xid = self._xids(dp, 1)
        w = self._wait(dp, xid, ofwire.bundle_ctrl(xid, bid, ofwire.ONF_BCT_OPEN_REQUEST))
        self.errors.get(dp.id, {}).pop(xid, None)
        if w.error is not None:
            if self.config.bundles == "on":
                raise SyncError(f"bundle open rejected: {_err_text(w.error)}")
            LOG.info("switch %s does not take ONF bundles (%s); using plain flow-mods", sw.name, _err_text(w.error))
            sw.bundles = False
            return False
        sw.bundles = True
        n = len(d.delete) + len(opaque) + len(d.add) + len(d.modify)
        xid0 = self._xids(dp, n)
        span = [(xid0, n)]
        msgs = self._change_messages(dp, d, opaque, xid0)
        x = xid0
        wrapped = []
        for m in msgs:
            wrapped.append(ofwire.bundle_add(x, bid, m))
            x = (x + 1) & MAX_XID
        self._send_chunks(dp, wrapped)
        # adds are validated one by one: a barrier tells us all verdicts are in
        bx = self._xids(dp, 1)
        self._wait(dp, bx, ofwire.barrier(bx), timeout=_install_timeout(n))
        errs = self._take_errors(dp.id, span)
        if errs:
            cx = self._xids(dp, 1)
            self._wait(dp, cx, ofwire.bundle_ctrl(cx, bid, ofwire.ONF_BCT_DISCARD_REQUEST))
            self._take_errors(dp.id, [(cx, 1)])
            raise SyncError(f"bundle discarded: {len(errs)} rejected message(s), first: {_err_text(errs[0])}")
        cx = self._xids(dp, 1)
        w = self._wait(dp, cx, ofwire.bundle_ctrl(cx, bid, ofwire.ONF_BCT_COMMIT_REQUEST), timeout=_install_timeout(n))
        if w.error is not None:
            errs = self._take_errors(dp.id, span + [(cx, 1)])
            more = f" ({len(errs)} error(s), first {_err_text(errs[0])})" if errs else ""
            raise SyncError(f"bundle commit failed: {_err_text(w.error)}{more}")
        self.errors.get(dp.id, {}).pop(cx, None)
        return True

    def _take_errors(self, dpid: int, ranges: list[tuple[int, int]] | None = None) -> list[tuple[int, int, int]]:
        """Collected errors (xid, type, code) whose xid lies in ``ranges`` ((start, count), ...; None: all)."""
        errs = self.errors.get(dpid, {})
        out = []
        for x in list(errs):
            if ranges is None or any(((x - start) & MAX_XID) < n for start, n in ranges):
                out.append((x, *errs.pop(x)))
        return sorted(out)

    # ------------------------------------------------------------ replies
    # Latency-critical events (packet-ins, barrier replies) are handled in the
    # datapath's receive green thread, like os-ken's own ofp_handler does, not
    # through this app's event queue: a queue hop and a green-thread switch
    # less each way (~0.2 ms each). ``set_ev_handler`` (not ``set_ev_cls``)
    # keeps the app from also subscribing to them; ``start`` registers them
    # with the ofp_event brick. They must never raise.
    # Errors go the same way so that they are recorded before the barrier
    # reply that follows them on the wire is seen.
    DIRECT_HANDLERS = (
        ("_packet_in", ofp_event.EventOFPPacketIn),
        ("_barrier_reply", ofp_event.EventOFPBarrierReply),
        ("_error", ofp_event.EventOFPErrorMsg),
    )

    @set_ev_handler(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
    def _barrier_reply(self, ev: Any) -> None:
        try:
            msg = ev.msg
            dpid = msg.datapath.id
            pending = self.pending_flips.pop((dpid, msg.xid), None)
            if pending is not None:
                self._flip_confirmed(dpid, pending)
                return
            self._wake(dpid, msg.xid, reply=msg)
        except Exception:  # pragma: no cover - never kill the receive loop
            LOG.exception("barrier reply handling failed")

    @set_ev_cls(ofp_event.EventONFBundleCtrlMsg, MAIN_DISPATCHER)
    def _bundle_reply(self, ev: Any) -> None:
        self._wake(ev.msg.datapath.id, ev.msg.xid, reply=ev.msg)

    @set_ev_cls(ofp_event.EventOFPFlowStatsReply, MAIN_DISPATCHER)
    def _flow_stats_reply(self, ev: Any) -> None:
        msg = ev.msg
        w = self.waiters.get((msg.datapath.id, msg.xid))
        if w is None:
            return
        w.parts.extend(msg.body)
        if not msg.flags & msg.datapath.ofproto.OFPMPF_REPLY_MORE:
            w.reply = msg
            w.event.set()

    @set_ev_handler(ofp_event.EventOFPErrorMsg, MAIN_DISPATCHER)
    def _error(self, ev: Any) -> None:
        try:
            self._record_error(ev.msg)
        except Exception:  # pragma: no cover - never kill the receive loop
            LOG.exception("error message handling failed")

    def _record_error(self, msg: Any) -> None:
        dpid = msg.datapath.id
        err = (msg.type, msg.code)
        self.counters["switch_errors"] += 1
        self.errors[dpid][msg.xid] = err
        if self._wake(dpid, msg.xid, error=err):
            return
        if len(self.errors[dpid]) > 10000:  # nobody collects: keep the newest
            for k in list(self.errors[dpid])[:5000]:
                del self.errors[dpid][k]
        sw = self.by_dpid.get(dpid)
        if sw is not None and sw.syncing:
            return  # the sync collects and reports its errors
        LOG.warning(
            "switch %s: OpenFlow error xid=%#x %s", sw.name if sw else f"{dpid:016x}", msg.xid, _err_text((msg.xid, *err))
        )

    # --------------------------------------------------------------- packet-in
    @set_ev_handler(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def _packet_in(self, ev: Any) -> None:
        t0 = time.monotonic()
        try:
            msg = ev.msg
            data = msg.data
            if len(data) < 14:
                return
            eth_type = data[12] << 8 | data[13]
            if eth_type == ETH_TYPE_PAUSE:
                self._on_pause(msg, data, t0)
            elif eth_type == ETH_TYPE_LLDP:
                self._on_lldp(msg, data, t0)
            else:
                self.counters["other_packet_ins"] += 1
        except Disconnected:
            pass
        except Exception:  # pragma: no cover - never kill the receive loop
            LOG.exception("packet-in handling failed")

    def _on_pause(self, msg: Any, data: bytes, t0: float) -> None:
        self.counters["pause_frames"] += 1
        sw = self.by_dpid.get(msg.datapath.id)
        in_port = msg.match["in_port"]
        if sw is None:
            self._mark()
            return
        peer = self.fabric.peer(sw.name, in_port)
        if peer is None:
            self.counters["pause_unknown_port"] += 1
            self._mark()
            return
        if peer.is_host:
            self.counters["pause_host_port"] += 1
            self._mark()
            return
        try:
            frame = parse_mac_control(data)
        except MalformedFrame as err:
            self.counters["pause_malformed"] += 1
            LOG.debug("switch %s port %d: malformed MAC-control frame dropped: %s", sw.name, in_port, err)
            self._mark()
            return
        if not self.conditional:
            self._mark()
            return
        flips = self.pause.on_frame(sw.name, in_port, frame, t0)
        for flip in flips:
            self._apply_flip(flip, t0)
        deadline = self.pause.until.get((sw.name, in_port))
        if deadline is not None and deadline < self._expiry_wait_until:
            self._pause_wakeup.set()  # only an earlier deadline needs the expiry loop now
        self._mark()

    def _apply_flip(self, flip: Flip, t0: float) -> None:
        sw = self.switches[flip.switch]
        self.counters["flips"] += 1
        if flip.cause == "expiry":
            self.counters["expiries"] += 1
        dp = sw.dp
        if dp is None:
            return  # desired() carries the state into the next sync
        if sw.syncing:
            sw.flipped_during_sync.add(flip.port)
        parts = self._flip_parts.get((flip.port, flip.paused))
        if parts is None:  # the two versions of a port's PORT_STATE entry, encoded once
            parts = self.cache.parts(port_state_flow(flip.port, flip.paused), ofwire.OFPFC_MODIFY_STRICT)
            self._flip_parts[(flip.port, flip.paused)] = parts
        xid = self._xids(dp, 2)
        bxid = (xid + 1) & MAX_XID
        data = b"".join((parts[0], _XID.pack(xid), parts[1], _BARRIER_HEAD, _XID.pack(bxid)))
        self.pending_flips[(dp.id, bxid)] = (t0, flip, xid)
        self.counters["flip_flow_mods"] += 1
        if not dp.send(data):
            self.pending_flips.pop((dp.id, bxid), None)

    def _flip_confirmed(self, dpid: int, pending: tuple[float, Flip, int]) -> None:
        t0, flip, xid = pending
        ms = (time.monotonic() - t0) * 1000.0
        err = self.errors.get(dpid, {}).pop(xid, None)
        if err is not None:
            LOG.error("flip %s:%d rejected by the switch: %s", flip.switch, flip.port, _err_text((xid, *err)))
            self.counters["flip_errors"] += 1
            return
        if flip.cause != "expiry":
            self.reaction_ms.append(ms)
        LOG.info(
            "flip %s:%d %s (%s) reaction %.3f ms",
            flip.switch,
            flip.port,
            "paused" if flip.paused else "resumed",
            flip.cause,
            ms,
        )
        self._mark()

    def _expiry_loop(self) -> None:
        while self.is_active:
            self._pause_wakeup.clear()
            deadline = self.pause.next_deadline()
            now = time.monotonic()
            wait = 1.0 if deadline is None else min(max(deadline - now, 0.0), 1.0)
            self._expiry_wait_until = now + wait
            if wait > 0:
                self._pause_wakeup.wait(timeout=wait)
            now = time.monotonic()
            for flip in self.pause.expire(now):
                self._apply_flip(flip, now)
                self._mark()

    # ---------------------------------------------------------------- LLDP
    def _lldp_ports(self, sw: SwitchState) -> list[int]:
        """Every port but host ports and reserved ones (unused ports too: extra cables show up)."""
        dp = sw.dp
        if dp is None or not dp.ports:
            return []
        hosts = set(self.fabric.host_ports(sw.name))
        return [p for p in sorted(dp.ports) if p < 0xFFFFFF00 and p not in hosts]

    def _lldp_frame(self, dpid: int, port: int, hw_addr: str) -> bytes:
        key = (dpid, port, hw_addr)
        frame = self._lldp_cache.get(key)
        if frame is None:
            frame = build_lldp(dpid, port, bytes.fromhex(hw_addr.replace(":", "")), LLDP_TTL, self.nonce)
            self._lldp_cache[key] = frame
        return frame

    def _send_lldp(self, sw: SwitchState) -> None:
        dp = sw.dp
        parts = []
        probes = []
        for port in self._lldp_ports(sw):
            desc = dp.ports.get(port)
            if desc is None:
                continue
            if port in sw.no_fwd:
                probes.append(port)
                continue
            frame = self._lldp_frame(sw.dpid, port, desc.hw_addr)
            parts.append(ofwire.packet_out(self._xids(dp, 1), [port], frame))
            self.counters["lldp_sent"] += 1
        if parts:
            self._send_chunks(dp, parts)
        if probes:
            hub.spawn(self._probe_quarantined, sw, dp, probes)

    def _probe_quarantined(self, sw: SwitchState, dp: Any, ports: list[int]) -> None:
        """LLDP out of quarantined ports, which drop packet-outs too.

        NO_FWD is lifted, a barrier round trip lets the switch apply that
        (OVS re-reads port config between message batches), then the LLDP and
        the NO_FWD again go out back to back: the port forwards for about one
        controller round trip per LLDP interval. Without the probes two
        quarantined ends of a cable could never see each other again (swapped
        cables put back).
        """
        for port in ports:
            desc = (dp.ports or {}).get(port)
            if desc is None or sw.dp is not dp or port not in sw.no_fwd:
                continue
            hw = bytes.fromhex(desc.hw_addr.replace(":", ""))
            x = self._xids(dp, 2)
            sw.probing.add(port)  # port-status echoes of our own port-mods are not news
            try:
                try:
                    self._wait(dp, (x + 1) & MAX_XID, ofwire.port_mod(x, port, hw, 0, OFPPC_NO_FWD)
                               + ofwire.barrier((x + 1) & MAX_XID), timeout=2.0)
                except Disconnected:
                    return
                except SyncError:
                    pass
                frame = self._lldp_frame(sw.dpid, port, desc.hw_addr)
                data = ofwire.packet_out(self._xids(dp, 1), [port], frame)
                if (sw.name, port) in self.discovery.quarantine():
                    data += ofwire.port_mod(self._xids(dp, 1), port, hw, OFPPC_NO_FWD, OFPPC_NO_FWD)
                else:
                    sw.no_fwd.discard(port)  # healed meanwhile: leave it forwarding
                    LOG.info("discovery: %s port %d healed: NO_FWD cleared", sw.name, port)
                self.counters["lldp_sent"] += 1
                self.counters["lldp_probes"] += 1
                if not dp.send(data):
                    return
            finally:
                sw.probing.discard(port)

    def _lldp_loop(self) -> None:
        while self.is_active:
            t = time.monotonic()
            for sw in list(self.switches.values()):
                if sw.dp is not None and sw.connected:
                    try:
                        self._send_lldp(sw)
                    except Disconnected:
                        pass
                    except Exception:  # pragma: no cover - keep discovering
                        LOG.exception("LLDP round on %s failed", sw.name)
            hub.sleep(max(0.01, self.config.lldp_interval - (time.monotonic() - t)))

    def _on_lldp(self, msg: Any, data: bytes, now: float) -> None:
        try:
            info = parse_lldp(data)
        except MalformedLLDP:
            self.counters["lldp_malformed"] += 1
            return
        if info.dpid is None or info.port is None:
            self.counters["lldp_foreign"] += 1  # somebody else's LLDP (a host, a legacy switch)
            return
        self.counters["lldp_received"] += 1
        dpid, in_port = msg.datapath.id, msg.match["in_port"]
        self.discovery.observed(info.dpid, info.port, dpid, in_port, now, trusted=info.nonce == self.nonce)
        self._enforce_quarantine()
        self._mark()

    def _enforce_quarantine(self) -> None:
        wanted = self.discovery.quarantine()
        for sw in self.switches.values():
            dp = sw.dp
            if dp is None:
                continue
            mine = {(n, p) for (n, p) in wanted if n == sw.name and p not in sw.probing}
            current = {(sw.name, p) for p in sw.no_fwd if p not in sw.probing}
            add, remove = quarantine_changes(mine, current)
            for (_, port), config in [(a, OFPPC_NO_FWD) for a in add] + [(r, 0) for r in remove]:
                desc = (dp.ports or {}).get(port)
                if desc is None:
                    continue
                hw = bytes.fromhex(desc.hw_addr.replace(":", ""))
                if not dp.send(ofwire.port_mod(self._xids(dp, 1), port, hw, config, OFPPC_NO_FWD)):
                    break  # that switch is going away; the others still get theirs
                if config:
                    sw.no_fwd.add(port)
                    LOG.warning("discovery: %s port %d is miswired: set NO_FWD (quarantined)", sw.name, port)
                else:
                    sw.no_fwd.discard(port)
                    LOG.info("discovery: %s port %d healed: NO_FWD cleared", sw.name, port)

    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    def _port_status(self, ev: Any) -> None:
        msg = ev.msg
        dp = msg.datapath
        desc = msg.desc
        o = dp.ofproto
        if msg.reason == o.OFPPR_DELETE or desc.state & o.OFPPS_LINK_DOWN:
            self.discovery.port_down(dp.id, desc.port_no)
        sw = self.by_dpid.get(dp.id)
        if sw is not None and msg.reason != o.OFPPR_DELETE and desc.port_no not in sw.probing:
            if desc.config & OFPPC_NO_FWD:
                sw.no_fwd.add(desc.port_no)
            else:
                sw.no_fwd.discard(desc.port_no)
            if sw.dp is dp:
                self._enforce_quarantine()  # e.g. a re-created port comes back without NO_FWD
        self._mark()

    # --------------------------------------------------------------- status
    def _discovery_report(self, now: float) -> dict[str, Any]:
        # at most every 0.5 s, and never more than ~10% of the time on huge fabrics
        if now - self._report_at >= max(0.5, 10 * self._report_cost) or not self._last_report:
            t = time.monotonic()
            rep = self.discovery.report(now)
            self._last_report = rep.as_dict()
            self._report_at = now
            self._log_problems(self._last_report)
            self._report_cost = time.monotonic() - t
        return self._last_report

    def _log_problems(self, rep: dict[str, Any]) -> None:
        problems = set()
        for m in rep["missing_links"]:
            if m.get("switch_down"):
                continue  # the disconnected switch is the problem; its links would only add noise
            problems.add(f"link {m['a']}:{m['a_port']} - {m['b']}:{m['b_port']} missing")
        for m in rep["miswired"]:
            problems.add(f"{m['switch']} port {m['port']} miswired: expected {m['expected']}, sees {m['actual']}")
        for e in rep["extra_links"]:
            problems.add(f"unexpected link {e['a']} - {e['b']}")
        for d in rep["unknown_dpids"]:
            problems.add(f"unknown dpid {d}")
        for p in sorted(problems - self._logged_problems):
            LOG.warning("discovery: %s", p)
        for p in sorted(self._logged_problems - problems):
            LOG.info("discovery: resolved: %s", p)
        self._logged_problems = problems

    def status(self, running: bool = True) -> dict[str, Any]:
        now = time.monotonic()
        rep = self._discovery_report(now)
        sws = self.switches.values()
        samples = list(self.reaction_ms)
        c = self.counters
        unknown = sorted(
            {f"{d:016x}" for d, i in self.unknown.items() if i.get("connected")} | set(rep["unknown_dpids"])
        )
        return {
            "time": time.time(),
            "running": running,
            "pid": os.getpid(),
            "started": self.started,
            "config": self.config.path,
            "fabric": self.fabric.name,
            "routing": self.config.routing,
            "addressing": self.config.addressing,
            "switches_expected": len(self.switches),
            "switches_connected": sum(1 for s in sws if s.connected),
            "switches_confirmed": sum(1 for s in sws if s.confirmed),
            "unknown_dpids": unknown,
            "rules_expected": sum(s.rules_expected for s in sws),
            "rules_installed": sum(s.rules_installed for s in sws if s.confirmed),
            "per_switch": {s.name: s.as_dict() for s in sws},
            "links_expected": rep["links_expected"],
            "links_discovered": rep["links_discovered"],
            "missing_links": rep["missing_links"][:STATUS_LIST_CAP],
            "missing_links_count": len(rep["missing_links"]),
            "extra_links": rep["extra_links"][:STATUS_LIST_CAP],
            "extra_links_count": len(rep["extra_links"]),
            "miswired": rep["miswired"][:STATUS_LIST_CAP],
            "miswired_count": len(rep["miswired"]),
            "quarantined": rep["quarantined"],
            "lldp": {
                "sent": c["lldp_sent"],
                "received": c["lldp_received"],
                "malformed": c["lldp_malformed"],
                "foreign": c["lldp_foreign"],
                "probes": c["lldp_probes"],
            },
            "pause": {
                "enabled": self.conditional,
                "flips": c["flips"],
                "expiries": c["expiries"],
                "flow_mods": c["flip_flow_mods"],
                "paused_ports": [f"{s}:{p}" for s, p in self.pause.paused_ports()],
                "reaction_ms": [round(x, 4) for x in samples],
                "frames": c["pause_frames"],
                "malformed": c["pause_malformed"],
                "host_port_frames": c["pause_host_port"],
                "unknown_port_frames": c["pause_unknown_port"],
                "errors": c["flip_errors"],
            },
            "errors": {"switch_errors": c["switch_errors"], "sync_failures": c["sync_failures"]},
            "flowmod_cache": {"entries": len(self.cache), "hits": self.cache.hits, "misses": self.cache.misses},
        }

    def _write_status(self, running: bool = True) -> None:
        if not self.status_file:
            if running:
                self._discovery_report(time.monotonic())  # keeps discovery logging alive
            return
        data = json.dumps(self.status(running), separators=(",", ":"))
        tmp = f"{self.status_file}.tmp.{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(data)
        os.replace(tmp, self.status_file)

    def _status_loop(self) -> None:
        last = 0.0
        while self.is_active:
            min_gap = max(STATUS_MIN_GAP, 10 * self._status_cost)  # big fabrics: <= ~10% of the time
            hub.sleep(min_gap)
            if not self._dirty and time.monotonic() - last < 1.0:
                continue
            # green threads are cooperative: never serialise the status while a flip is in flight
            for _ in range(50):
                if not self.pending_flips:
                    break
                hub.sleep(0.001)
            self._dirty = False
            t = time.monotonic()
            try:
                self._write_status()
                self._status_cost = time.monotonic() - t
            except Exception as err:  # pragma: no cover - disk full etc.
                LOG.error("cannot write status file %s: %s", self.status_file, err)
                hub.sleep(1.0)
            last = time.monotonic()


def _install_timeout(changes: int) -> float:
    """Reply timeout for an install of ``changes`` flow-mods: hardware switches may take ~1 ms per entry."""
    return REPLY_TIMEOUT + changes / 500.0


class _FastFlowStats:
    """Body class for os-ken's OFPFlowStatsReply: entries decoded by :mod:`hpcfabric.ofwire` (~10x faster)."""

    @staticmethod
    def parser(buf: Any, offset: int) -> ofwire.FlowStatsEntry:
        return ofwire.FlowStatsEntry(buf, offset)


def install_fast_flow_stats() -> None:
    """Make os-ken hand flow-stats entries over as :class:`hpcfabric.ofwire.FlowStatsEntry`.

    os-ken's object parser costs ~40 us per entry, which dominates the
    re-sync of large tables after a restart. This replaces the entry class of
    ``OFPFlowStatsReply`` process-wide, so :func:`run` (``hpcfabric controller``,
    where this app is alone) does it; under ``osken-manager`` other apps may
    expect os-ken objects, so it is left alone there (both kinds are handled).
    """
    from os_ken.ofproto import ofproto_v1_3_parser

    ofproto_v1_3_parser.OFPFlowStatsReply.cls_stats_body_cls = _FastFlowStats


def _err_text(err: tuple[int, ...]) -> str:
    """'(xid,) type, code' -> 'OFPET_... / code' text."""
    etype, code = err[-2], err[-1]
    o = ofproto_v1_3
    try:
        tname = o.ofp_error_type_to_str(etype)
        cname = o.ofp_error_code_to_str(etype, code)
    except Exception:  # pragma: no cover
        tname, cname = str(etype), str(code)
    return f"{tname}/{cname}"


# ---------------------------------------------------------------------------
# running os-ken in-process (``hpcfabric controller``)


def _setup_logging(level: str, quiet_osken: bool = True) -> None:
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
    logging.getLogger("hpcfabric").setLevel(level)
    if quiet_osken:
        root.setLevel(logging.WARNING)
        logging.getLogger("os_ken").setLevel(logging.DEBUG if level == "DEBUG" else logging.WARNING)


def _apply_listen_overrides(config: ControllerConfig) -> tuple[str, int]:
    """Under osken-manager: use [openflow] listen_* unless given on its command line."""
    from os_ken import cfg

    argv = " ".join(sys.argv)
    if "--ofp-listen-host" not in argv:
        cfg.CONF.set_override("ofp_listen_host", config.listen_host)
    if "--ofp-tcp-listen-port" not in argv:
        cfg.CONF.set_override("ofp_tcp_listen_port", config.listen_port)
    return cfg.CONF.ofp_listen_host, cfg.CONF.ofp_tcp_listen_port or 6653


def check_listen_address(host: str, port: int) -> None:
    """Fail early if ``host:port`` is taken.

    eventlet listens with SO_REUSEPORT, so a second controller on the same
    port would *not* fail: the kernel would split the switches between the
    two. A plain bind (no SO_REUSEPORT) detects the other listener.
    """
    import socket as _socket

    from hpcfabric.errors import ConfigError

    try:
        infos = _socket.getaddrinfo(host, port, type=_socket.SOCK_STREAM)
    except OSError as err:
        raise ConfigError(f"cannot resolve listen address {host!r}: {err}", field="openflow.listen_host") from None
    family, _, _, _, addr = infos[0]
    with _socket.socket(family, _socket.SOCK_STREAM) as sock:
        sock.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
        try:
            sock.bind(addr)
        except OSError as err:
            raise ListenError(f"cannot listen on {host}:{port}: {err.strerror or err} (another controller?)") from None


class ListenError(HpcfabricError):
    exit_code = 1


def run(
    config: ControllerConfig,
    *,
    listen_host: str | None = None,
    listen_port: int | None = None,
    status_file: str | None = None,
) -> int:
    """Run os-ken's app manager in this process with the hpcfabric app until SIGTERM/SIGINT.

    The caller must have called ``os_ken.lib.hub.patch(thread=False)`` before
    importing this module (``hpcfabric controller`` does).
    """
    global _PRELOADED
    from os_ken import cfg
    from os_ken import __version__ as osken_version
    from os_ken.base.app_manager import AppManager

    import os_ken.controller.controller  # noqa: F401  (registers the ofp_* options)

    _setup_logging(config.log_level)
    cfg.CONF(args=[], project="os_ken", version=f"hpcfabric/os-ken {osken_version}", default_config_files=[])
    host = listen_host or config.listen_host
    port = listen_port or config.listen_port
    check_listen_address(host, port)
    cfg.CONF.set_override("ofp_listen_host", host)
    cfg.CONF.set_override("ofp_tcp_listen_port", port)
    hub.patch(thread=True)
    install_fast_flow_stats()
    _PRELOADED = config
    if status_file is not None:
        _OVERRIDES["status_file"] = status_file

    stop = {"signal": None}

    def _on_signal(signum: int, _frame: Any) -> None:
        stop["signal"] = signum

    old = {s: signal.signal(s, _on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    app_mgr = AppManager.get_instance()
    rc = 0
    try:
        app_mgr.load_apps([__name__])
        contexts = app_mgr.create_contexts()
        services = app_mgr.instantiate_apps(**contexts)
        LOG.info("listening for OpenFlow 1.3 switches on %s:%d (pid %d)", host, port, os.getpid())
        while stop["signal"] is None:
            hub.sleep(0.1)
            dead = [t for t in services if getattr(t, "dead", False)]
            if dead:
                LOG.error("the OpenFlow listener stopped (is %s:%d free and valid?)", host, port)
                rc = 1
                break
        if stop["signal"] is not None:
            LOG.info("signal %d: shutting down", stop["signal"])
    finally:
        try:
            app_mgr.close()
        finally:
            for s, h in old.items():
                signal.signal(s, h)
    return rc
