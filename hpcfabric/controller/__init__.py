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
  dump its flows, :func:`hpcfabric.openflow.reconcile.diff` against the desired table,
  send only the difference in one ONF bundle (or plain flow-mods), barrier,
  confirmed. Never a delete-all, so reconnects do not disturb traffic;
* LLDP out of every non-host port every ``lldp_interval``;
  :class:`hpcfabric.controller.discovery.DiscoveryState` judges the wiring, miswired
  ports get ``OFPPC_NO_FWD`` until healed;
* PAUSE/PFC packet-ins on fabric ports -> :class:`hpcfabric.protocols.pause.PauseState`
  -> one ``OFPFC_MODIFY_STRICT`` of the port's PORT_STATE entry + barrier per flip
  (``pause_reaction = switch``: the switch reacts itself, PAUSEs are only counted);
* 802.1Qau CNM packet-ins on fabric ports (``cnm = on``) -> :func:`hpcfabric.protocols.cnm.on_cnm`
  -> the same flips, held for a time derived from the feedback;
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
from dataclasses import dataclass, field, replace
from typing import Any

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import DEAD_DISPATCHER, MAIN_DISPATCHER, set_ev_cls, set_ev_handler
from os_ken.lib import hub
from os_ken.ofproto import ofproto_v1_3

from hpcfabric.openflow import ofwire
from hpcfabric.rules.port_state import port_state_flow
from hpcfabric.failover.groups import group_id
from hpcfabric.config import ControllerConfig, load_config
from hpcfabric.controller import ofmsg
from hpcfabric.controller.discovery import DiscoveryState, MalformedLLDP, build_lldp, parse_lldp, quarantine_changes
from hpcfabric.errors import HpcfabricError
from hpcfabric.controller.metrics import ReactionHistogram
from hpcfabric.rules.flows import (
    ETH_TYPE_CNM,
    ETH_TYPE_DMP,
    ETH_TYPE_LLDP,
    ETH_TYPE_PAUSE,
    TABLE_PORT_STATE,
    FlowSpec,
    cookie_class,
)
from hpcfabric.protocols.pause import Flip, MalformedFrame, PauseState, parse_mac_control
from hpcfabric.openflow.reconcile import diff, is_learned

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
    installed_meters: dict[int, tuple[int, int]] | None = None  # meter -> (rate, burst) as last seen/installed
    installed_groups: dict[int, Any] | None = None  # group -> buckets as last seen/installed
    retired: bool = False  # removed from the topology by a reload: its flows are being cleared
    role_gen: int | None = None  # generation of our last accepted MASTER claim on this connection
    disconnected_at: float | None = None  # monotonic time the connection was lost (None: never connected / up)

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


class HaState:
    """High availability: this instance's OpenFlow role and the shared lease (see docs/operations.md).

    ``role = equal``: no role requests (one controller, the default).
    ``auto``: the holder of an unexpired lease in ``lease_file`` is master, the
    others slaves; a slave takes the lease over once it has expired
    (``lease_timeout`` without renewal) with generation + 1, and claims
    MASTER on every switch with that generation id -- the switches reject
    stale claims (fencing). ``master`` / ``slave``: fixed roles (the
    master still uses the lease's generation when there is one).
    """

    def __init__(self, config: ControllerConfig) -> None:
        import socket as _socket

        self.mode = config.ha_role
        self.lease_file = config.ha_lease_file
        self.timeout = config.ha_lease_timeout
        self.instance = config.ha_instance or f"{_socket.gethostname()}:{os.getpid()}"
        self.generation = 0
        self.role = "equal" if self.mode == "equal" else "slave"
        self.takeovers = 0
        self.changed_at = time.time()
        self.holder: str | None = None

    @property
    def master(self) -> bool:
        """May this instance write to the switches?"""
        return self.role in ("equal", "master")

    def _locked(self, update: Any) -> dict[str, Any]:
        import fcntl

        fd = os.open(self.lease_file, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            raw = b""
            while True:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                raw += chunk
            try:
                lease = json.loads(raw.decode("utf-8")) if raw.strip() else {}
                if not isinstance(lease, dict):
                    lease = {}
            except (ValueError, UnicodeDecodeError):
                lease = {}
            new = update(dict(lease))
            if new is not None and new != lease:
                data = json.dumps(new).encode()
                os.lseek(fd, 0, os.SEEK_SET)
                os.ftruncate(fd, 0)
                os.write(fd, data)
                lease = new
            return lease
        finally:
            os.close(fd)  # closing releases the lock

    def tick(self, now: float | None = None) -> str | None:
        """Renew or take the lease; returns the new role if it changed (None otherwise)."""
        if self.mode == "equal":
            return None
        now = time.time() if now is None else now
        want_master = self.mode in ("auto", "master")
        if not self.lease_file:  # fixed master without a lease: the generation is the start time (ms)
            if self.role != "master" and want_master:
                self.generation = int(now * 1000)
                return self._set("master")
            return None
        me = self.instance

        def update(lease: dict[str, Any]) -> dict[str, Any] | None:
            holder, expires, gen = lease.get("holder"), float(lease.get("expires") or 0), int(lease.get("generation") or 0)
            mine = holder == me and gen == self.generation and self.role == "master"
            if mine or (want_master and (holder is None or expires <= now or self.mode == "master" and holder != me)):
                if not mine:
                    gen += 1
                return {"holder": me, "generation": gen, "expires": now + self.timeout, "pid": os.getpid()}
            return None

        lease = self._locked(update)
        self.holder = lease.get("holder")
        gen = int(lease.get("generation") or 0)
        if self.holder == me and lease.get("expires", 0) > now:
            if self.role != "master" or gen != self.generation:
                self.generation = gen
                self.takeovers += self.role == "slave"
                return self._set("master")
            return None
        self.generation = gen
        if self.role != "slave":
            return self._set("slave")
        return None

    def _set(self, role: str) -> str:
        self.role = role
        self.changed_at = time.time()
        return role

    def release(self) -> None:
        """On a clean stop: let the lease expire now, so a peer takes over without waiting."""
        if self.mode == "equal" or not self.lease_file or self.role != "master":
            return
        me, gen = self.instance, self.generation

        def update(lease: dict[str, Any]) -> dict[str, Any] | None:
            if lease.get("holder") == me and int(lease.get("generation") or 0) == gen:
                return {**lease, "expires": 0}
            return None

        try:
            self._locked(update)
        except OSError:  # pragma: no cover
            pass

    def as_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "role": self.role, "generation": self.generation, "instance": self.instance,
                "lease_holder": self.holder, "takeovers": self.takeovers, "since": self.changed_at}


@dataclass
class FailoverState:
    """Ports whose link is down (port status) and what was done about it (see :mod:`hpcfabric.failover.reroute`)."""

    down: set[tuple[str, int]] = field(default_factory=set)
    events: int = 0
    recomputes: int = 0
    last_ms: float | None = None


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
        self.switches: dict[str, SwitchState] = {}
        self.by_dpid: dict[int, SwitchState] = {}
        self.retired: dict[int, SwitchState] = {}  # removed from the topology by a reload, flows being cleared
        self.unknown: dict[int, dict[str, Any]] = {}
        self.unmanaged: dict[int, Any] = {}  # switches of the fabric another instance manages ([ha] switches)
        self.discovery = DiscoveryState(self.fabric, config.lldp_timeout)
        self.pause = PauseState(config.link_speed_bps, hold=config.pause_hold_ms / 1000.0)
        self.conditional = config.routing == "conditional"
        self.reaction = config.pause_reaction
        self._build_switches(config, {})
        self.cache = ofwire.FlowModCache()
        self.nonce = secrets.token_bytes(8)
        self.waiters: dict[tuple[int, int], _Waiter] = {}
        self.errors: dict[int, dict[int, tuple[int, int]]] = collections.defaultdict(dict)
        self.pending_flips: dict[tuple[int, int], tuple[float, Flip, int]] = {}
        self.reaction_ms: collections.deque[float] = collections.deque(maxlen=1000)
        self.counters = collections.Counter()
        self.port_flips: collections.Counter = collections.Counter()  # (switch, port) -> flips
        self.port_pauses: collections.Counter = collections.Counter()  # switch mode: (switch, port) -> PAUSEs seen
        self.served: dict[str, dict[str, dict[int, int]]] = {}  # switch -> kind -> port -> packets (polled)
        self.meter_drops: dict[str, dict[int, int]] = {}  # switch -> meter -> packets dropped by its band
        self.reloads: dict[str, Any] = {"ok": 0, "failed": 0, "last": None, "pending_restart": []}
        self._reload_requested = False
        self._bundle_id = 0
        self._lldp_cache: dict[tuple[int, int, str], bytes] = {}
        self._dirty = False  # polled by the status loop: marking never wakes a green thread
        self._pause_wakeup = hub.Event()
        self._expiry_wait_until = 0.0  # when the expiry loop wakes up anyway
        self._last_report: dict[str, Any] = {}
        self._report_at = -1.0
        self._logged_problems: set[str] = set()
        self._own_threads: list[Any] = []
        self._flip_parts: dict[FlowSpec, tuple[bytes, bytes]] = {}
        self._report_cost = 0.0
        self._status_cost = 0.0
        self.ha = HaState(config)
        self.failover = FailoverState()
        self.metrics: Any = None
        self.reaction_hist = ReactionHistogram()
        self._rerouted: dict[str, tuple[FlowSpec, ...]] = {}
        self._dead: set[str] = set()
        self._reroute_pending = False
        self._reroute_t0 = 0.0
        self._groups: dict[str, dict[int, Any]] = _failover_groups(config)  # switch -> fast-failover groups
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

    def _build_switches(self, config: ControllerConfig, old: dict[int, SwitchState]) -> list[SwitchState]:
        """SwitchStates for ``config`` (the switches this instance manages); connections carried over from ``old``
        (by dpid). Returns the carried-over switches whose desired table changed."""
        changed = []
        switches: dict[str, SwitchState] = {}
        for sw in config.fabric.switches:
            if not config.manages(sw.name):
                continue
            st = SwitchState(sw.name, sw.dpid, len(config.desired.get(sw.name, ())))
            prev = old.get(sw.dpid)
            if prev is not None:
                for attr in ("dp", "connected", "confirmed", "rules_installed", "added", "modified", "deleted", "kept",
                             "foreign", "conflicts", "method", "sync_seconds", "dump_seconds", "confirmed_at",
                             "connected_at", "syncs", "error", "gen", "bundles", "no_fwd", "probing", "installed_meters",
                             "installed_groups"):
                    setattr(st, attr, getattr(prev, attr))
                changed.append(st)
            switches[sw.name] = st
        self.switches = switches
        self.by_dpid = {s.dpid: s for s in switches.values()}
        return changed

    # ------------------------------------------------------------------ life
    def start(self) -> Any:
        super().start()
        brick = app_manager.lookup_service_brick("ofp_event")
        if brick is None:  # pragma: no cover - os-ken loads ofp_handler with every OpenFlow app
            raise RuntimeError("os-ken's ofp_event service is not running")
        for name, ev_cls in self.DIRECT_HANDLERS:
            brick.register_handler(ev_cls, getattr(self, name))
        for fn in (self._status_loop, self._lldp_loop, self._expiry_loop, self._reload_loop, self._poll_loop,
                   self._ha_loop):
            t = hub.spawn(fn)
            self._own_threads.append(t)
        try:  # SIGHUP = reload (hpcfabric controller and osken-manager both start apps in the main thread)
            self._old_sighup = signal.signal(signal.SIGHUP, self._on_sighup)
        except (ValueError, OSError):  # pragma: no cover - not the main thread
            self._old_sighup = None
        self._start_metrics()
        self._write_status()
        return None

    def _on_sighup(self, _signum: int, _frame: Any) -> None:
        self._reload_requested = True  # the reload loop picks it up (never work inside a signal handler)

    def stop(self) -> None:
        self.is_active = False
        if getattr(self, "_old_sighup", None) is not None:
            try:
                signal.signal(signal.SIGHUP, self._old_sighup)
            except (ValueError, OSError):  # pragma: no cover
                pass
        self._stop_metrics()
        self.ha.release()
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
        base = self.config.desired.get(name, ())
        if self._rerouted and self.config.recompute:
            base = self._rerouted.get(name, base)
        paused = {p for (s, p) in self.pause.paused_ports() if s == name}
        if not paused:
            return base
        out = []
        for f in base:
            if f.table == TABLE_PORT_STATE and f.match.metadata is not None:
                port = f.match.metadata[0]
                if port in paused and f.goto is None and f in (port_state_flow(port, False, reaction=self.reaction),
                                                               self._port_state_flow(name, port, False)):
                    f = port_state_flow(port, True)
            out.append(f)
        return tuple(out)

    def _port_state_flow(self, switch: str, port: int, paused: bool) -> FlowSpec:
        """A port's PORT_STATE entry; unpaused through its fast-failover group where the switch has one."""
        gid = group_id(port)
        return port_state_flow(port, paused, gid if not paused and gid in self._groups.get(switch, ()) else None,
                               reaction=self.reaction)

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
        if sw is None and dp.id in self.config.dpid_to_switch:  # another instance manages it ([ha] switches)
            self.unmanaged[dp.id] = dp
            LOG.info("switch %s (dpid %016x) connected; managed by another instance", self.config.dpid_to_switch[dp.id],
                     dp.id)
            return
        if sw is None:
            info = self.unknown.setdefault(dp.id, {"first_seen": time.time()})
            info["connected"] = True
            info["dp"] = dp
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
        sw.installed_meters = None
        sw.installed_groups = None
        sw.role_gen = None
        was_dead = sw.name in self._dead
        sw.disconnected_at = None
        if was_dead:
            self._schedule_reroute()
        LOG.info("switch %s (dpid %016x) connected from %s", sw.name, sw.dpid, dp.address[0] if dp.address else "?")
        hub.spawn(self._session, sw, dp, sw.gen)
        self._mark(rediscover=True)

    def _disconnected(self, dp: Any) -> None:
        if self.unmanaged.get(dp.id) is dp:
            del self.unmanaged[dp.id]
            return
        old = self.retired.get(dp.id)
        if old is not None and old.dp is dp:
            del self.retired[dp.id]
            old.gen += 1
            self._fail_waiters(dp.id)
        sw = self.by_dpid.get(dp.id)
        if sw is None:
            if dp.id in self.unknown:
                self.unknown[dp.id]["connected"] = False
                self.unknown[dp.id].pop("dp", None)
                self.discovery.unknown.discard(dp.id)
                self._mark(rediscover=True)
            return
        if sw.dp is not dp:
            return  # an old connection of a switch that has reconnected
        sw.dp = None
        sw.connected = False
        sw.confirmed = False
        sw.gen += 1
        sw.disconnected_at = time.monotonic()
        if self.config.recompute:  # gone for longer than lldp_timeout: routed around (reconnecting restores)
            hub.spawn_after(self.config.lldp_timeout + 0.05, self._check_dead)
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
    def _session(self, sw: SwitchState, dp: Any, gen: int) -> None:
        """A (re)connected switch, or one whose table or role changed: claim our role, then reconcile if master."""
        try:
            if not self._claim_role(sw, dp, gen):
                return
        except Disconnected:
            return
        except SyncError as err:
            sw.error = str(err)
            self.counters["role_failures"] += 1
            LOG.error("switch %s: role request failed: %s", sw.name, err)
            self._mark()
            return
        self._sync_loop(sw, dp, gen)

    def _claim_role(self, sw: SwitchState, dp: Any, gen: int) -> bool:
        """Send our role (HA) and wait for the reply; True if we may write to this switch."""
        ha = self.ha
        if ha.mode == "equal":
            return True
        role = ofwire.OFPCR_ROLE_MASTER if ha.role == "master" else ofwire.OFPCR_ROLE_SLAVE
        generation = ha.generation
        xid = self._xids(dp, 1)
        w = self._wait(dp, xid, ofwire.role_request(xid, role, generation), timeout=10.0)
        self.errors.get(dp.id, {}).pop(xid, None)
        if w.error is not None:
            raise SyncError(f"role {'MASTER' if role == ofwire.OFPCR_ROLE_MASTER else 'SLAVE'} generation "
                            f"{generation} rejected: {_err_text(w.error)}")
        if sw.gen != gen:
            raise Disconnected("superseded")
        if role == ofwire.OFPCR_ROLE_MASTER and ha.role == "master" and ha.generation == generation:
            sw.role_gen = generation
            return True
        sw.role_gen = None
        return False

    def _sync_loop(self, sw: SwitchState, dp: Any, gen: int) -> None:
        attempt = 0
        while self.is_active and sw.gen == gen:
            if not self.ha.master:
                return
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
            if not sw.retired:
                self._sync_meters(sw, dp)
                self._sync_groups(sw, dp)
            installed, opaque = self._dump_flows(dp, sw)
            opaque = [s for s in opaque if not is_learned(s.cookie)]  # switch-local PAUSE state, not ours to sync
            if not sw.retired:
                self._adopt_paused(sw, installed)
            desired = () if sw.retired else self.desired(sw.name)
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
            if sw.retired:
                LOG.warning("switch dpid %016x (was %s) is no longer in the topology: %d flows of ours deleted",
                            sw.dpid, sw.name, len(d.delete) + len(ours_opaque))
            # flips that raced with the sync: re-assert the current PORT_STATE entries
            for port in sorted(sw.flipped_during_sync):
                flow = self._port_state_flow(sw.name, port, self.pause.is_paused(sw.name, port, time.monotonic()))
                x = self._xids(dp, 1)
                self._send(dp, self.cache.encode(flow, x, ofwire.OFPFC_MODIFY_STRICT))
            sw.confirmed = not sw.retired
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
        """Every packet-in ends in exactly one counter (kind, and malformed/ignored/used): nothing goes uncounted."""
        t0 = time.monotonic()
        c = self.counters
        try:
            msg = ev.msg
            data = msg.data
            if not isinstance(data, (bytes, bytearray)) or len(data) < 14:
                c["packet_in_short"] += 1
                c["short_frames"] += 1
                return
            eth_type = data[12] << 8 | data[13]
            if eth_type == 0x8100 and len(data) >= 18:  # one VLAN tag: classify by the inner type
                eth_type = data[16] << 8 | data[17]
            try:
                in_port = msg.match["in_port"]
            except (KeyError, TypeError):
                in_port = None
            if eth_type == ETH_TYPE_PAUSE:
                c["packet_in_pause"] += 1
            elif eth_type == ETH_TYPE_LLDP:
                c["packet_in_lldp"] += 1
            elif eth_type == ETH_TYPE_CNM:
                c["packet_in_cnm"] += 1
            elif eth_type == ETH_TYPE_DMP:
                c["packet_in_dmp"] += 1
                c["dmp_packet_ins"] += 1  # the switches answer DMP; one punted here is ignored
                return
            else:
                c["packet_in_other"] += 1
                c["other_packet_ins"] += 1
                return
            if not isinstance(in_port, int):
                c["no_in_port"] += 1
                return
            if not self.ha.master:
                c["not_master_packet_ins"] += 1
                return
            if eth_type == ETH_TYPE_PAUSE:
                self._on_pause(msg, bytes(data), in_port, t0)
            elif eth_type == ETH_TYPE_CNM:
                self._on_cnm(msg, bytes(data), in_port, t0)
            else:
                self._on_lldp(msg, bytes(data), in_port, t0)
        except Disconnected:
            pass
        except Exception:  # pragma: no cover - never kill the receive loop
            c["packet_in_errors"] += 1
            LOG.exception("packet-in handling failed")

    def _on_pause(self, msg: Any, data: bytes, in_port: int, t0: float) -> None:
        self.counters["pause_frames"] += 1
        sw = self.by_dpid.get(msg.datapath.id)
        if sw is None:
            self.counters["pause_unknown_switch"] += 1
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
            self.counters["pause_minimal"] += 1
            self._mark()
            return
        if self.reaction == "switch":  # the switch learned its override from this very frame
            self.counters["pause_switch_local"] += 1
            self.port_pauses[(sw.name, in_port)] += 1
            self._mark()
            return
        self.counters["pause_used"] += 1
        flips = self.pause.on_frame(sw.name, in_port, frame, t0)
        for flip in flips:
            self._apply_flip(flip, t0)
        deadline = self.pause.until.get((sw.name, in_port))
        if deadline is not None and deadline < self._expiry_wait_until:
            self._pause_wakeup.set()  # only an earlier deadline needs the expiry loop now
        self._mark()

    def _on_cnm(self, msg: Any, data: bytes, in_port: int, t0: float) -> None:
        """An 802.1Qau CNM copied from a fabric port: the same flip as a PAUSE, held
        ``cnm_max_hold_ms * qFb / 63`` (:func:`hpcfabric.protocols.cnm.on_cnm`, docs/routing.md)."""
        from hpcfabric.protocols.cnm import on_cnm, parse_cnm

        c = self.counters
        c["cnm_frames"] += 1
        sw = self.by_dpid.get(msg.datapath.id)
        peer = self.fabric.peer(sw.name, in_port) if sw is not None else None
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
                    flips = on_cnm(self.pause, sw.name, in_port, cnm, t0,
                                   max_hold=self.config.cnm_max_hold_ms / 1000.0)
                    for flip in flips:
                        c["cnm_flips"] += 1
                        self._apply_flip(flip, t0)
                    deadline = self.pause.until.get((sw.name, in_port))
                    if deadline is not None and deadline < self._expiry_wait_until:
                        self._pause_wakeup.set()
        self._mark()

    def _apply_flip(self, flip: Flip, t0: float) -> None:
        sw = self.switches.get(flip.switch)
        if sw is None:  # removed by a reload meanwhile
            return
        self.counters["flips"] += 1
        self.port_flips[(flip.switch, flip.port)] += 1
        if flip.cause == "expiry":
            self.counters["expiries"] += 1
        dp = sw.dp
        if dp is None or not self.ha.master:
            return  # desired() carries the state into the next sync
        if sw.syncing:
            sw.flipped_during_sync.add(flip.port)
        flow = self._port_state_flow(sw.name, flip.port, flip.paused)
        parts = self._flip_parts.get(flow)
        if parts is None:  # the versions of a port's PORT_STATE entry, encoded once
            parts = self.cache.parts(flow, ofwire.OFPFC_MODIFY_STRICT)
            self._flip_parts[flow] = parts
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
            self.reaction_hist.observe(ms / 1000.0)
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
            for sw in list(self.switches.values()) if self.ha.master else ():
                if sw.dp is not None and sw.connected:
                    try:
                        self._send_lldp(sw)
                    except Disconnected:
                        pass
                    except Exception:  # pragma: no cover - keep discovering
                        LOG.exception("LLDP round on %s failed", sw.name)
            hub.sleep(max(0.01, self.config.lldp_interval - (time.monotonic() - t)))

    def _on_lldp(self, msg: Any, data: bytes, in_port: int, now: float) -> None:
        try:
            info = parse_lldp(data)
        except (MalformedLLDP, ValueError, IndexError, struct.error):
            self.counters["lldp_malformed"] += 1
            return
        if info.dpid is None or info.port is None:
            self.counters["lldp_foreign"] += 1  # somebody else's LLDP (a host, a legacy switch)
            return
        dpid = msg.datapath.id
        sw = self.by_dpid.get(dpid)
        trusted = info.nonce == self.nonce
        if not trusted and sw is not None:
            peer = self.fabric.peer(sw.name, in_port)
            if peer is not None and peer.is_host:
                # a host can forge any LLDP; only ours (a switch cabled to a host port) tells something there
                self.counters["lldp_host_untrusted"] += 1
                return
        self.counters["lldp_received"] += 1
        self.discovery.observed(info.dpid, info.port, dpid, in_port, now, trusted=info.nonce == self.nonce)
        self._enforce_quarantine()
        self._mark()

    def _enforce_quarantine(self) -> None:
        if not self.ha.master:
            return
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
        if sw is not None and sw.dp is dp and self.config.recompute and desc.port_no in self.fabric.fabric_ports(sw.name):
            key = (sw.name, desc.port_no)
            is_down = bool(msg.reason == o.OFPPR_DELETE or desc.state & o.OFPPS_LINK_DOWN
                           or desc.config & o.OFPPC_PORT_DOWN)
            if is_down != (key in self.failover.down):
                if is_down:
                    self.failover.down.add(key)
                    self.failover.events += 1
                    LOG.warning("failover: %s port %d is down", sw.name, desc.port_no)
                else:
                    self.failover.down.discard(key)
                    LOG.info("failover: %s port %d is up again", sw.name, desc.port_no)
                self._schedule_reroute()
        self._mark()

    # ------------------------------------------------------------- failover
    def _check_dead(self) -> None:
        if self._dead_switches(time.monotonic()) != self._dead:
            self._schedule_reroute()

    def _dead_switches(self, now: float) -> set[str]:
        """Switches that were connected, lost their connection and stayed away longer than lldp_timeout."""
        grace = self.config.lldp_timeout
        return {s.name for s in self.switches.values()
                if not s.connected and s.disconnected_at is not None and now - s.disconnected_at > grace}

    def _schedule_reroute(self, delay: float = 0.02) -> None:
        if self._reroute_pending or not self.ha.master:
            return
        self._reroute_pending = True
        self._reroute_t0 = time.monotonic()
        hub.spawn_after(delay, self._reroute)

    def _reroute(self) -> None:
        """Recompute the tables around what is down (or back to the compiled ones) and reconcile the switches."""
        self._reroute_pending = False
        t0 = self._reroute_t0
        try:
            dead = self._dead_switches(time.monotonic())
            before = {name: self.desired(name) for name in self.switches}
            if self.failover.down or dead:
                from hpcfabric.failover.reroute import reroute

                self._rerouted = reroute(self.config, set(self.failover.down), dead)
                self._dead = dead
                self.failover.recomputes += 1
            else:
                self._rerouted = {}
                self._dead = set()
            changed = []
            for st in self.switches.values():
                if self.desired(st.name) != before[st.name] and st.connected and st.dp is not None:
                    st.gen += 1
                    st.confirmed = False
                    changed.append(st)
                    hub.spawn(self._session, st, st.dp, st.gen)
            LOG.warning("failover: %s; %d switch(es) to reconcile",
                        f"{len(self.failover.down)} port(s) down, {len(dead)} switch(es) gone" if self._rerouted
                        else "everything is back: compiled tables", len(changed))
            end = time.monotonic() + 30.0
            while changed and time.monotonic() < end and not all(s.confirmed or not s.connected for s in changed):
                hub.sleep(0.002)
            self.failover.last_ms = round((time.monotonic() - t0) * 1000.0, 3)
            LOG.info("failover: reroute applied %.1f ms after the event", self.failover.last_ms)
        except Exception:  # pragma: no cover - never kill the loop
            LOG.exception("reroute failed")
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
        unknown = self.unknown_dpids()
        served = {k: sum(sum(v.get(k, {}).values()) for v in self.served.values())
                  for k in ("dmp", "spoofed", "host_punts")}
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
                "reaction": self.reaction,
                "switch_local_frames": c["pause_switch_local"],
                "switch_local_ports": {f"{s}:{p}": n for (s, p), n in sorted(self.port_pauses.items())},
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
            "cnm": {
                "enabled": self.config.cnm,
                "frames": c["cnm_frames"],
                "used": c["cnm_used"],
                "flips": c["cnm_flips"],
                "malformed": c["cnm_malformed"],
                "host_port_frames": c["cnm_host_port"],
                "unknown_port_frames": c["cnm_unknown_port"],
                "no_feedback": c["cnm_no_feedback"],
                "minimal": c["cnm_minimal"],
            },
            "errors": {"switch_errors": c["switch_errors"], "sync_failures": c["sync_failures"],
                       "packet_in_errors": c["packet_in_errors"], "role_failures": c["role_failures"]},
            "flowmod_cache": {"entries": len(self.cache), "hits": self.cache.hits, "misses": self.cache.misses},
            "packet_ins": {k: c[f"packet_in_{k}"] for k in ("pause", "lldp", "cnm", "dmp", "other", "short")},
            "dropped": {
                "short": c["short_frames"], "no_in_port": c["no_in_port"], "pause_malformed": c["pause_malformed"],
                "pause_host_port": c["pause_host_port"], "pause_unknown_port": c["pause_unknown_port"],
                "pause_unknown_switch": c["pause_unknown_switch"], "pause_minimal": c["pause_minimal"],
                "lldp_malformed": c["lldp_malformed"], "lldp_foreign": c["lldp_foreign"],
                "lldp_host_untrusted": c["lldp_host_untrusted"], "cnm_malformed": c["cnm_malformed"],
                "cnm_host_port": c["cnm_host_port"], "cnm_unknown_port": c["cnm_unknown_port"],
                "cnm_no_feedback": c["cnm_no_feedback"], "cnm_minimal": c["cnm_minimal"], "dmp": c["dmp_packet_ins"],
                "other": c["other_packet_ins"], "not_master": c["not_master_packet_ins"],
            },
            "guards": {
                "source_check": self.config.source_check,
                "punt_meters": self.config.punt_meters,
                "dmp_served": served["dmp"],
                "spoofed_dropped": served["spoofed"],
                "host_punts": served["host_punts"],
                "meter_drops": {sw: {str(k): v for k, v in d.items()} for sw, d in sorted(self.meter_drops.items())},
            },
            "reload": {k: v for k, v in self.reloads.items()},
            "ha": self.ha.as_dict(),
            "failover": {"fast_failover": self.config.fast_failover, "recompute": self.config.recompute,
                         "ports_down": [f"{s}:{p}" for s, p in sorted(self.failover.down)],
                         "switches_gone": sorted(self._dead), "rerouted": bool(self._rerouted),
                         "events": self.failover.events, "recomputes": self.failover.recomputes,
                         "last_ms": self.failover.last_ms},
            "metrics": f"{self.config.metrics_listen[0]}:{self.config.metrics_listen[1]}"
            if self.config.metrics_listen else None,
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

    # ------------------------------------------------------------ multipart
    def _multipart(self, dp: Any, req: Any, timeout: float = REPLY_TIMEOUT) -> list[Any]:
        """Send an os-ken multipart request and collect every part's body."""
        dp.set_xid(req)
        req.serialize()
        w = self._wait(dp, req.xid, bytes(req.buf), timeout=timeout)
        self.errors.get(dp.id, {}).pop(req.xid, None)
        if w.error is not None:
            raise SyncError(f"{type(req).__name__} rejected: {_err_text(w.error)}")
        return w.parts

    @set_ev_cls([ofp_event.EventOFPFlowStatsReply, ofp_event.EventOFPMeterConfigStatsReply,
                 ofp_event.EventOFPMeterStatsReply, ofp_event.EventOFPGroupDescStatsReply], MAIN_DISPATCHER)
    def _multipart_reply(self, ev: Any) -> None:
        """Collect a multipart reply (flow stats, meters, groups) for the waiter of its xid."""
        msg = ev.msg
        w = self.waiters.get((msg.datapath.id, msg.xid))
        if w is None:
            return
        w.parts.extend(msg.body)
        if not msg.flags & msg.datapath.ofproto.OFPMPF_REPLY_MORE:
            w.reply = msg
            w.event.set()

    @set_ev_cls(ofp_event.EventOFPRoleReply, MAIN_DISPATCHER)
    def _role_reply(self, ev: Any) -> None:
        self._wake(ev.msg.datapath.id, ev.msg.xid, reply=ev.msg)

    # ---------------------------------------------------------- meters/groups
    def _sync_meters(self, sw: SwitchState, dp: Any) -> None:
        """Install or correct the punt meters (before the flows that use them); nothing if they are right."""
        wanted = {m.meter_id: (m.rate, m.burst) for m in self.config.meters}
        if not wanted or sw.installed_meters == wanted:
            return
        p, o = dp.ofproto_parser, dp.ofproto
        have: dict[int, tuple[int, int]] = {}
        for st in self._multipart(dp, p.OFPMeterConfigStatsRequest(dp, 0, o.OFPM_ALL)):
            if st.meter_id in wanted and st.bands and st.flags & o.OFPMF_PKTPS:
                band = st.bands[0]
                have[st.meter_id] = (band.rate, band.burst_size if st.flags & o.OFPMF_BURST else 0)
        msgs = []
        n = 0
        for mid, (rate, burst) in sorted(wanted.items()):
            if have.get(mid) == (rate, burst):
                continue
            cmd = ofwire.OFPMC_MODIFY if mid in have else ofwire.OFPMC_ADD
            msgs.append(ofwire.meter_mod(self._xids(dp, 1), mid, rate, burst, cmd))
            n += 1
        if msgs:
            xid0 = struct.unpack_from("!I", msgs[0], 4)[0]
            bx = self._xids(dp, 1)
            self._wait(dp, bx, b"".join(msgs) + ofwire.barrier(bx))
            errs = self._take_errors(dp.id, [(xid0, n)])
            if errs:
                raise SyncError(f"meter-mod rejected ({_err_text(errs[0])}): does the switch support meters? "
                                "else set [guards] punt_meters = off")
            self.counters["meter_mods"] += n
            LOG.info("switch %s: %d punt meter(s) installed/updated", sw.name, n)
        sw.installed_meters = wanted

    def _sync_groups(self, sw: SwitchState, dp: Any) -> None:
        """Install or correct the fast-failover groups the desired flows use (before the flows)."""
        wanted = self._groups.get(sw.name) or {}
        if not wanted or sw.installed_groups == wanted:
            return
        p = dp.ofproto_parser
        have: dict[int, Any] = {}
        for st in self._multipart(dp, p.OFPGroupDescStatsRequest(dp, 0)):
            if st.group_id in wanted:
                have[st.group_id] = tuple(
                    (b.watch_port, tuple(ofmsg.from_action(a) for a in b.actions)) for b in st.buckets
                )
        msgs = []
        for gid, buckets in sorted(wanted.items()):
            if have.get(gid) == buckets:
                continue
            cmd = ofwire.OFPGC_MODIFY if gid in have else ofwire.OFPGC_ADD
            msgs.append(ofwire.group_mod(self._xids(dp, 1), gid, buckets, cmd))
        if msgs:
            xid0 = struct.unpack_from("!I", msgs[0], 4)[0]
            bx = self._xids(dp, 1)
            self._wait(dp, bx, b"".join(msgs) + ofwire.barrier(bx))
            errs = self._take_errors(dp.id, [(xid0, len(msgs))])
            if errs:
                raise SyncError(f"group-mod rejected ({_err_text(errs[0])}): does the switch support fast-failover "
                                "groups? else set [failover] fast_failover = off")
            self.counters["group_mods"] += len(msgs)
            LOG.info("switch %s: %d fast-failover group(s) installed/updated", sw.name, len(msgs))
        sw.installed_groups = dict(wanted)

    def _adopt_paused(self, sw: SwitchState, installed: list[FlowSpec]) -> None:
        """PORT_STATE entries found paused (set by a previous controller run or the previous master) stay
        paused for one hold time instead of being rewritten now: reconciliation sends nothing, and the
        expiry (or a fresh PAUSE) decides afterwards."""
        if not self.conditional:
            return
        now = time.monotonic()
        for f in installed:
            if f.table == TABLE_PORT_STATE and f.goto is not None and f.match.metadata is not None:
                port = f.match.metadata[0]
                if f == port_state_flow(port, True) and not self.pause.is_paused(sw.name, port, now):
                    self.pause.until[(sw.name, port)] = now + max(self.pause.hold, 0.05)
                    self._pause_wakeup.set()
                    LOG.info("switch %s port %d found paused: adopted until its hold expires", sw.name, port)

    # ---------------------------------------------------------------- reload
    #: settings a running controller cannot change (a reload keeps the running value and says so)
    RESTART_KEYS = ("listen_host", "listen_port", "metrics_listen", "ha_role", "ha_lease_file", "ha_instance")

    def _file_stamps(self) -> tuple:
        out = []
        for path in (self.config.path, self.config.topology):
            try:
                st = os.stat(path)
                out.append((path, st.st_mtime_ns, st.st_size, st.st_ino))
            except OSError:
                out.append((path, None))
        return tuple(out)

    def _reload_loop(self) -> None:
        stamps = self._file_stamps()
        last_poll = time.monotonic()
        while self.is_active:
            hub.sleep(0.1)
            reason = None
            if self._reload_requested:
                self._reload_requested = False
                reason = "SIGHUP"
            elif self.config.reload_poll > 0 and time.monotonic() - last_poll >= self.config.reload_poll:
                last_poll = time.monotonic()
                now = self._file_stamps()
                if now != stamps:
                    hub.sleep(0.1)  # let a writer finish (editors write in steps)
                    reason = "file change"
            if reason is None:
                continue
            try:
                self.reload(reason)
            except Exception:  # pragma: no cover - a reload must never kill the loop
                LOG.exception("reload failed unexpectedly")
            stamps = self._file_stamps()

    def reload(self, reason: str = "request") -> bool:
        """Validate the config file (and topology) again and apply the differences; False if it is invalid."""
        t0 = time.monotonic()
        path = self.config.path
        LOG.info("reload (%s): loading %s", reason, path)
        try:
            new = _load_config_off_loop(path)
        except HpcfabricError as err:
            return self._reload_failed(reason, str(err), t0)
        except Exception as err:  # noqa: BLE001 - reported, never fatal
            return self._reload_failed(reason, f"internal error: {type(err).__name__}: {err}", t0)
        kept = [k for k in self.RESTART_KEYS if getattr(new, k) != getattr(self.config, k)]
        if kept:
            new = replace(new, **{k: getattr(self.config, k) for k in kept})
            LOG.warning("reload: %s changed but needs a restart; the running value is kept", ", ".join(kept))
        resynced, retired, added = self._apply_config(new)
        self.reloads["ok"] += 1
        self.reloads["pending_restart"] = kept
        self.reloads["last"] = {
            "time": time.time(), "ok": True, "reason": reason, "error": None, "seconds": round(time.monotonic() - t0, 4),
            "resynced": resynced, "retired": retired, "added": added, "pending_restart": kept,
        }
        LOG.info("reload (%s) ok in %.3f s: %d switch(es) to reconcile, %d retired, %d new", reason,
                 time.monotonic() - t0, len(resynced), len(retired), len(added))
        self._mark(rediscover=True)
        return True

    def _reload_failed(self, reason: str, error: str, t0: float) -> bool:
        self.reloads["failed"] += 1
        self.reloads["last"] = {"time": time.time(), "ok": False, "reason": reason, "error": error,
                                "seconds": round(time.monotonic() - t0, 4)}
        LOG.error("reload (%s) rejected, the running configuration is unchanged: %s", reason, error)
        self._mark()
        return False

    def _apply_config(self, new: ControllerConfig) -> tuple[list[str], list[str], list[str]]:
        old_cfg = self.config
        old = dict(self.by_dpid)
        old_desired = {s.dpid: old_cfg.desired.get(s.name, ()) for s in old.values()}
        old_meters = old_cfg.meters
        self.config = new
        self.fabric = new.fabric
        self.conditional = new.routing == "conditional"
        self.reaction = new.pause_reaction
        if "status_file" not in _OVERRIDES:
            self.status_file = new.status_file
        logging.getLogger("hpcfabric").setLevel(new.log_level)
        carried = self._build_switches(new, old)
        self._rerouted.clear()
        old_groups = self._groups
        self._groups = {}
        if new.fast_failover:
            self._groups = _failover_groups(new)
        # pause state: keep the ports that still exist as fabric ports
        until = {k: v for k, v in self.pause.until.items()
                 if self.conditional and k[0] in self.switches and k[1] in self.fabric.fabric_ports(k[0])}
        self.pause = PauseState(new.link_speed_bps, hold=new.pause_hold_ms / 1000.0, until=until)
        # discovery starts over on the new fabric (LLDP refreshes it within one interval)
        now = time.monotonic()
        self.discovery = DiscoveryState(self.fabric, new.lldp_timeout)
        for st in self.switches.values():
            if st.connected:
                self.discovery.switch_up(st.dpid, now)
                for port in st.no_fwd:
                    self.discovery.adopt_quarantine(st.name, port)
        self.failover.down = {k for k in self.failover.down if k[0] in self.switches}
        if self.failover.down or self._dead:
            from hpcfabric.failover.reroute import reroute

            self._dead &= set(self.switches)
            self._rerouted = reroute(new, set(self.failover.down), self._dead) if new.recompute else {}
        self.cache.clear()
        resynced, retired, added = [], [], []
        meters_changed = new.meters != old_meters
        for st in carried:
            if not (st.connected and st.dp is not None):
                continue
            if meters_changed:
                st.installed_meters = None
            groups_changed = old_groups.get(st.name) != self._groups.get(st.name)
            if old_desired.get(st.dpid) != new.desired.get(st.name, ()) or meters_changed or groups_changed:
                st.gen += 1
                st.confirmed = False
                resynced.append(st.name)
                hub.spawn(self._session, st, st.dp, st.gen)
        # switches new to the topology that are connected already (as unknown dpids)
        for dpid, info in list(self.unknown.items()):
            st = self.by_dpid.get(dpid)
            if st is not None:
                dp = info.get("dp")
                del self.unknown[dpid]
                if dp is not None and info.get("connected"):
                    added.append(st.name)
                    self._connected(dp)
        for dpid, prev in old.items():
            if dpid in self.by_dpid or not (prev.connected and prev.dp is not None):
                continue
            prev.gen += 1
            if dpid in new.dpid_to_switch:  # now managed by another instance: leave its table alone
                self.unmanaged[dpid] = prev.dp
                continue
            prev.retired = True
            prev.confirmed = False
            self.retired[dpid] = prev
            self.unknown[dpid] = {"first_seen": time.time(), "connected": True, "dp": prev.dp,
                                  "address": None}
            retired.append(prev.name)
            hub.spawn(self._sync_loop, prev, prev.dp, prev.gen)
        return resynced, retired, added

    # ------------------------------------------------------------------- HA
    def _ha_loop(self) -> None:
        if self.ha.mode == "equal":
            return
        last_ok = time.monotonic()
        while self.is_active:
            try:
                change = self.ha.tick()
                last_ok = time.monotonic()
            except OSError as err:
                change = None
                self.counters["lease_errors"] += 1
                LOG.error("HA lease file %s: %s", self.ha.lease_file, err)
                if self.ha.role == "master" and time.monotonic() - last_ok > self.ha.timeout:
                    self.ha._set("slave")  # we cannot renew: the lease is gone by now, so are we
                    change = "slave"
            if change:
                self._role_changed(change)
            hub.sleep(max(0.05, self.ha.timeout / 5))

    def _role_changed(self, role: str) -> None:
        LOG.warning("HA: this instance (%s) is now %s (generation %d)", self.ha.instance, role.upper(),
                    self.ha.generation)
        for st in self.switches.values():
            if st.connected and st.dp is not None:
                st.gen += 1
                st.confirmed = False if role != "master" else st.confirmed
                hub.spawn(self._session, st, st.dp, st.gen)
        if role != "master":
            self.pending_flips.clear()
        self._mark()

    # ---------------------------------------------------------------- polls
    def _poll_loop(self) -> None:
        """Flow stats of the DMP and guard entries, meter stats: for the metrics and the status file."""
        from hpcfabric.rules.flows import COOKIE_APP_MASK, COOKIE_CLASS_SHIFT, ETH_TYPE_DMP, RuleClass, make_cookie
        from hpcfabric.rules.guards import GUARD_DROP, GUARD_HOST_PUNT, guard_kind

        class_mask = COOKIE_APP_MASK | (0xFF << COOKIE_CLASS_SHIFT)
        while self.is_active:
            hub.sleep(self.config.metrics_poll)
            if not self.ha.master:
                continue
            for sw in list(self.switches.values()):
                dp = sw.dp
                if dp is None or not sw.confirmed:
                    continue
                try:
                    p, o = dp.ofproto_parser, dp.ofproto
                    kinds: dict[str, dict[int, int]] = {"dmp": {}, "spoofed": {}, "host_punts": {}}
                    for rc in (RuleClass.DMP, RuleClass.GUARD):
                        req = p.OFPFlowStatsRequest(dp, 0, o.OFPTT_ALL, o.OFPP_ANY, o.OFPG_ANY, make_cookie(rc),
                                                    class_mask, p.OFPMatch())
                        for st in self._multipart(dp, req, timeout=10.0):
                            spec = st.spec if isinstance(st, ofwire.FlowStatsEntry) else None
                            cookie, count = st.cookie, st.packet_count
                            if rc == RuleClass.DMP:
                                eth_type = spec.match.eth_type if spec is not None else st.match.get("eth_type")
                                if eth_type == ETH_TYPE_DMP:
                                    port = cookie & 0xFFFFFFFF
                                    kinds["dmp"][port] = kinds["dmp"].get(port, 0) + count
                            else:
                                kind, port = guard_kind(cookie)
                                key = {GUARD_DROP: "spoofed", GUARD_HOST_PUNT: "host_punts"}.get(kind)
                                if key:
                                    kinds[key][port] = kinds[key].get(port, 0) + count
                    self.served[sw.name] = kinds
                    if self.config.meters:
                        drops = {}
                        for st in self._multipart(dp, p.OFPMeterStatsRequest(dp, 0, o.OFPM_ALL), timeout=10.0):
                            if st.band_stats:
                                drops[st.meter_id] = sum(b.packet_band_count for b in st.band_stats)
                        self.meter_drops[sw.name] = drops
                except Disconnected:
                    continue
                except Exception as err:  # noqa: BLE001 - polling is best effort
                    self.counters["poll_failures"] += 1
                    LOG.debug("poll of %s failed: %s", sw.name, err)
            self._mark()

    # -------------------------------------------------------------- metrics
    def _start_metrics(self) -> None:
        listen = self.config.metrics_listen
        if listen is None:
            return
        import eventlet
        import eventlet.wsgi
        from prometheus_client import make_wsgi_app

        from hpcfabric.controller.metrics import make_registry

        host, port = listen
        family = socket_family(host)
        sock = eventlet.listen((host, port), family=family)
        app = make_wsgi_app(make_registry(self))
        quiet = logging.getLogger("hpcfabric.controller.metrics.http")
        quiet.setLevel(logging.WARNING)
        t = hub.spawn(eventlet.wsgi.server, sock, app, log=quiet, log_output=False)
        self._own_threads.append(t)
        self.metrics = (sock, t)
        LOG.info("metrics: http://%s:%d/metrics", host, port)

    def _stop_metrics(self) -> None:
        if self.metrics is not None:
            sock, _ = self.metrics
            try:
                sock.close()
            except OSError:  # pragma: no cover
                pass
            self.metrics = None

    def unknown_dpids(self) -> list[str]:
        rep = self._last_report or {}
        return sorted({f"{d:016x}" for d, i in self.unknown.items() if i.get("connected")}
                      | set(rep.get("unknown_dpids", ())))



def socket_family(host: str) -> int:
    import socket as _socket

    return _socket.AF_INET6 if ":" in host else _socket.AF_INET


def _load_config_off_loop(path: str) -> ControllerConfig:
    """load_config in a native thread (eventlet tpool) so the loop keeps serving flips; inline if unavailable."""
    try:
        from eventlet import tpool
    except ImportError:  # pragma: no cover
        return load_config(path)
    return tpool.execute(load_config, path)


def _failover_groups(config: ControllerConfig) -> dict[str, dict[int, Any]]:
    """switch -> {group id: ((watch_port, actions), ...)}: the form ``_sync_groups`` compares and encodes."""
    from hpcfabric.failover.reroute import failover_groups

    out: dict[str, dict[int, Any]] = {}
    for sw, groups in failover_groups(config).items():
        if groups:
            out[sw] = {g.group_id: tuple((b.watch_port, tuple(b.actions)) for b in g.buckets) for g in groups}
    return out


def _install_timeout(changes: int) -> float:
    """Reply timeout for an install of ``changes`` flow-mods: hardware switches may take ~1 ms per entry."""
    return REPLY_TIMEOUT + changes / 500.0


class _FastFlowStats:
    """Body class for os-ken's OFPFlowStatsReply: entries decoded by :mod:`hpcfabric.openflow.ofwire` (~10x faster)."""

    @staticmethod
    def parser(buf: Any, offset: int) -> ofwire.FlowStatsEntry:
        return ofwire.FlowStatsEntry(buf, offset)


def install_fast_flow_stats() -> None:
    """Make os-ken hand flow-stats entries over as :class:`hpcfabric.openflow.ofwire.FlowStatsEntry`.

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
