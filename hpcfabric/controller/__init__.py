"""The hpcfabric os-ken application (OpenFlow 1.3): thin event handlers over collaborators.

Run it with either::

    hpcfabric controller --config configs/dragonfly-a4-p2-h2.conf
    osken-manager --config-file configs/dragonfly-a4-p2-h2.conf hpcfabric.controller
    .venv-ryu/bin/ryu-manager --config-file configs/dragonfly-a4-p2-h2.conf hpcfabric.controller

(or set ``HPCFABRIC_CONFIG=FILE`` for ``osken-manager hpcfabric.controller``).
See docs/controller.md. The application class is defined in this module on
purpose: os-ken's app manager only loads ``OSKenApp`` subclasses whose
``__module__`` is the module it was asked to load.

Design. The state a reload replaces lives in one
:class:`~hpcfabric.controller.state.State` (``config``, ``fabric``, the switch maps
``switches``/``by_dpid``, ``tables``, the pure ``pause`` state, ``discovery``; the
session maps ``retired``, ``unknown``, ``unmanaged``), built by
:func:`~hpcfabric.controller.state.build_state` at start and at every reload
and put in force by one :meth:`~hpcfabric.controller.state.State.swap`. The app
also holds the ``counters``, the encoded flow-mod ``cache``, the HA lease
``ha`` and ``changes`` (what the status loop polls). Its event handlers
classify an event and hand it to the collaborator that owns the reaction. Each
collaborator is one module with one responsibility and is given only what it
uses -- the state, the channel, the counters, and the siblings' callables it
really calls (the constructor calls in ``__init__`` are the arrows; the two
back to the sessions are bound right after it) -- never the app. status and
metrics render one snapshot (:mod:`hpcfabric.controller.snapshot`: each
collaborator's ``as_dict()``). The decisions
live in pure modules below the controller (:mod:`hpcfabric.openflow.reconcile`,
:mod:`hpcfabric.protocols.pause`, :mod:`~hpcfabric.protocols.cnm`,
:mod:`~hpcfabric.protocols.lldp`, :mod:`hpcfabric.controller.discovery`,
:mod:`hpcfabric.repair.plan`, :mod:`hpcfabric.config`), with time passed in
as ``now``. Collaborators (module: class as app attribute -- what it owns):

* ``state``: ``State`` as ``state``, ``build_state``, ``Changes`` as ``changes``;
* ``snapshot``: ``Sources`` as ``sources`` and ``snapshot()`` -- what status and metrics read;
* ``framework``: the seam to os-ken or Ryu, the only module that imports them (app
  base class, events, decorators, OpenFlow 1.3 modules, hub, app manager,
  its CONF; which one: the manager that loaded the app, else ``HPCFABRIC_FRAMEWORK``);
* ``launch``: :func:`~hpcfabric.controller.launch.run` (``hpcfabric controller``),
  the startup config under osken-manager, logging, listen address checks, signals;
* ``channel``: ``Channel`` as ``channel`` -- xids, sends, waiters for replies,
  errors collected per xid;
* ``switches``: ``SwitchState`` per managed switch (connection, generation,
  table counts, NO_FWD ports), built and carried over by ``build_switches``;
* ``tables``: ``Tables`` as ``tables`` -- what each switch should hold:
  compiled tables, the repaired ones, fast-failover groups, the pause overlay;
* ``sessions``: ``Sessions`` as ``sessions`` -- connect and disconnect, the HA
  role claim, the sync loop (retry with backoff), resyncs;
* ``admission``: ``Admission`` as ``admission`` -- which session speaks for a
  dpid: certificate names (TLS), one live session per dpid (echo probe),
  refusals; ``tls``: the listener's TLS handshake (``TlsGate``);
* ``install``: ``Installer`` as ``installer`` -- one reconciliation: meters
  and groups, flow dump, diff, one bundle or flow-mods, barrier, errors;
* ``pausing``: ``Pausing`` as ``pausing`` -- PAUSE/PFC/CNM packet-ins to
  flips, flip confirmation and reaction times, the expiry loop;
* ``wiring``: ``Wiring`` as ``wiring`` -- LLDP rounds and probes, LLDP
  packet-ins, quarantine (NO_FWD) enforcement, the discovery report;
* ``failover``: ``Failover`` as ``failover`` -- fabric ports down, switches
  gone, proven repairs (planned off the hub, installed in waves, diff only);
* ``ha``: ``HaState`` as ``ha`` (the lease file, the role) and ``HaAgent`` as
  ``ha_agent`` (lease loop, role changes);
* ``reload``: ``Reloader`` as ``reloader`` -- file stamps, the reload loop,
  validation and the applied difference;
* ``status``: ``StatusReporter`` as ``reporter`` -- the status dict and file;
* ``polling``: ``StatsPoller`` as ``poller`` -- DMP/guard/meter counters polled;
* ``heap``: ``Heap`` as ``heap`` -- the long-lived heap frozen out of the cyclic GC at settle points;
* ``metrics``: the Prometheus collector, served by a ``framework.HttpServer`` as ``metrics``; ``linkmetrics``:
  ``LinkView`` as ``links`` -- per-link congestion (``linkload``) for the metrics and the page;
* ``web``: ``FabricPage``, served by a ``framework.HttpServer`` as ``web`` -- the read-only fabric page (``webview``
  layouts, ``webfeed`` snapshots);
* ``ofmsg``: the framework's OpenFlow objects a switch reports back -> FlowSpecs.

Latency-critical events (packet-ins, barrier replies, errors) are handled in
the datapath's receive green thread (:data:`HpcfabricController.DIRECT_HANDLERS`);
:meth:`HpcfabricController.start` starts one green thread per loop (status,
LLDP, pause expiry, reload, stats poll, HA lease).
"""

from __future__ import annotations

import collections
import logging
import time
from typing import Any

from hpcfabric.controller import launch
from hpcfabric.controller.admission import Admission
from hpcfabric.controller.channel import Channel, Disconnected
from hpcfabric.controller.failover import Failover
from hpcfabric.controller.framework import (
    DEAD_DISPATCHER,
    MAIN_DISPATCHER,
    App,
    HttpServer,
    hub,
    ofp_event,
    ofproto,
    run_native,
    service_brick,
    set_ev_cls,
    set_ev_handler,
)
from hpcfabric.controller.ha import HaAgent, make_ha
from hpcfabric.controller.heap import Heap
from hpcfabric.controller.install import Installer
from hpcfabric.controller.linkmetrics import LinkView
from hpcfabric.controller.metrics import metrics_app
from hpcfabric.controller.pausing import Pausing
from hpcfabric.controller.polling import StatsPoller
from hpcfabric.controller.reload import Reloader
from hpcfabric.controller.sessions import Sessions
from hpcfabric.controller.status import StatusReporter
from hpcfabric.controller.snapshot import Sources
from hpcfabric.controller.state import STATE_ATTRS, Changes, build_state
from hpcfabric.controller.storm import Storm
from hpcfabric.controller.web import FabricPage
from hpcfabric.controller.webfeed import link_inputs, live
from hpcfabric.controller.wiring import Wiring
from hpcfabric.openflow import ofwire
from hpcfabric.rules.flows import ETH_TYPE_CNM, ETH_TYPE_DMP, ETH_TYPE_LLDP, ETH_TYPE_PAUSE, FlowSpec

#: LLDP packet-ins one receive path handles in a row before other green threads run (a datapath's read
#: loop dispatches a whole buffer at once: at Table III a burst of ~100 frames held the hub for ~16 ms)
LLDP_BURST = 16

LOG = logging.getLogger("hpcfabric.controller")


class HpcfabricController(App):
    """Proactive OpenFlow 1.3 controller for an hpcfabric fabric (see the module docstring)."""

    OFP_VERSIONS = [ofproto.OFP_VERSION]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        config = launch.startup_config()
        self.started = time.time()
        self.counters: collections.Counter = collections.Counter()
        self.ha = make_ha(config)
        self.state = state = build_state(config, self.ha)  # a reload swaps its content (State.swap)
        self.changes = changes = Changes()
        self.cache = cache = ofwire.FlowModCache()
        counters, ha = self.counters, self.ha
        active = self.running
        self.channel = channel = Channel(counters, lambda dpid: state.by_dpid.get(dpid))
        self.heap = Heap(enabled=launch.OWN_PROCESS)
        self.storm = Storm(state)
        self.pausing = Pausing(state, channel, cache, counters, ha, changes, active)
        self.installer = Installer(state, channel, cache, counters, changes, self.pausing.adopt, self.heap.confirmed)
        self.admission = Admission(state, channel, counters, changes)
        self._restore_listener = self.admission.install()  # before the framework's listener starts
        self.failover = Failover(state, ha, changes, active, self.installer.apply_change)
        self.sessions = Sessions(state, channel, ha, counters, changes, active, self.admission, self.failover,
                                 self.installer.sync, self.pausing.forget)
        # the two arrows back to the sessions: a session an echo probe cleared, a switch a repair could not patch
        self.admission.admit = self.sessions.admit
        self.failover.resync = self.sessions.resync
        self.wiring = Wiring(state, channel, counters, ha, self.storm, changes, active)
        self.ha_agent = HaAgent(state, ha, counters, changes, active, self.sessions.session, self.pausing.forget)
        self.reloader = Reloader(state, ha, cache, counters, changes, active, self.sessions, self.failover.reconfigure)
        self.poller = StatsPoller(state, channel, ha, counters, changes, self.storm, active)
        # the link figures read the snapshot Sources built next (the one ``sources``, bound before any call)
        self.links = LinkView(lambda: state.fabric, lambda now: link_inputs(sources, now),
                              lambda: state.config.view, run_native)
        self.sources = sources = Sources(state, counters, cache, ha, self.heap, self.started, self.wiring,
                                         self.pausing, self.poller, self.admission, self.reloader, self.failover,
                                         self.links)
        self.web = HttpServer(config.view.web_listen,
                              lambda: FabricPage(lambda: state.fabric, lambda: live(sources), self.links, run_native),
                              "hpcfabric.controller.web.http", "fabric page", started=lambda page: hub.spawn(page.warm))
        self.reporter = StatusReporter(sources, changes, active, launch.OVERRIDES.get("status_file"))
        self.metrics = HttpServer(config.metrics_listen, lambda: metrics_app(sources),
                                  "hpcfabric.controller.metrics.http", "metrics", "metrics")
        self.lldp_burst = 0  # LLDP packet-ins handled since this receive path last gave the hub back
        self.heap.settle("config loaded and compiled")  # the bulk of the heap: out of every full collection
        self._threads: list[Any] = []
        self._restore_sighup: Any = None
        fabric = config.fabric
        LOG.info(
            "hpcfabric controller: %s (%s, %d switches, %d hosts), %s addressing, %s routing, %d rules",
            fabric.name, fabric.kind, len(fabric.switches), len(fabric.hosts), config.addressing,
            config.routing, config.rules_expected,
        )

    # ------------------------------------------------------------------ life
    def start(self) -> Any:
        super().start()
        brick = service_brick("ofp_event")
        if brick is None:  # pragma: no cover - os-ken loads ofp_handler with every OpenFlow app
            raise RuntimeError("os-ken's ofp_event service is not running")
        for name, ev_cls in self.DIRECT_HANDLERS:
            brick.register_handler(ev_cls, getattr(self, name))
        for fn in (self.reporter.loop, self.wiring.loop, self.pausing.loop, self.reloader.loop, self.poller.loop,
                   self.ha_agent.loop):
            self._threads.append(hub.spawn(fn))
        self._restore_sighup = launch.on_sighup(self.reloader.request)  # SIGHUP = reload
        for server in (self.metrics, self.web):
            thread = server.start()
            if thread is not None:
                self._threads.append(thread)
        self.failover.prepare()  # the repair's proof base, off the hub: the first failure finds it ready
        self.reporter.write()
        return None

    def stop(self) -> None:
        self.is_active = False
        if self._restore_sighup is not None:
            self._restore_sighup()
        self.metrics.stop()
        self.web.stop()
        self.failover.stop()
        self._restore_listener()
        self.heap.close()
        self.ha.release()
        brick = service_brick("ofp_event")
        for name, ev_cls in self.DIRECT_HANDLERS if brick is not None else ():
            try:
                brick.unregister_handler(ev_cls, getattr(self, name))
            except ValueError:
                pass
        for t in self._threads:
            hub.kill(t)
        self._threads.clear()
        super().stop()

    def close(self) -> None:
        try:
            self.reporter.write(running=False)
        except Exception:  # pragma: no cover
            LOG.exception("final status write failed")

    # ---------------------------------------------------------------- API
    def running(self) -> bool:
        """Is the app active? (the loops' condition)"""
        return self.is_active

    def desired(self, name: str) -> tuple[FlowSpec, ...]:
        """The switch's desired table with PORT_STATE entries as the pause state says."""
        return self.state.desired(name)

    def status(self, running: bool = True) -> dict[str, Any]:
        """The status file's content (docs/controller.md)."""
        return self.reporter.status(running)

    def reload(self, reason: str = "request") -> bool:
        """Validate the config file (and topology) again and apply the differences; False if it is invalid."""
        return self.reloader.reload(reason)

    def unknown_dpids(self) -> list[str]:
        return self.wiring.unknown_dpids()

    # ------------------------------------------------------------ events
    # Latency-critical events (packet-ins, barrier replies) are handled in
    # the datapath's receive green thread, like os-ken's own ofp_handler does, not
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
        ("_echo_reply", ofp_event.EventOFPEchoReply),
    )

    @set_ev_cls(ofp_event.EventOFPStateChange, [MAIN_DISPATCHER, DEAD_DISPATCHER])
    def _state_change(self, ev: Any) -> None:
        dp = ev.datapath
        if ev.state == MAIN_DISPATCHER:
            self.sessions.connected(dp)
        elif ev.state == DEAD_DISPATCHER and dp.id is not None:
            self.sessions.disconnected(dp)

    @set_ev_handler(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
    def _barrier_reply(self, ev: Any) -> None:
        try:
            msg = ev.msg
            if self._heard(msg) and not self.pausing.barrier(msg.datapath.id, msg.xid):
                self.channel.wake(msg.datapath.id, msg.xid, reply=msg)
        except Exception:  # pragma: no cover - never kill the receive loop
            LOG.exception("barrier reply handling failed")

    @set_ev_handler(ofp_event.EventOFPErrorMsg, MAIN_DISPATCHER)
    def _error(self, ev: Any) -> None:
        try:
            if self._heard(ev.msg):
                self.channel.record_error(ev.msg)
        except Exception:  # pragma: no cover - never kill the receive loop
            LOG.exception("error message handling failed")

    @set_ev_handler(ofp_event.EventOFPEchoReply, MAIN_DISPATCHER)
    def _echo_reply(self, ev: Any) -> None:
        """An echo reply: the answer to :class:`~hpcfabric.controller.admission.Admission`'s liveness probe."""
        msg = ev.msg
        if self.admission.admitted(msg.datapath):
            self.channel.wake(msg.datapath.id, msg.xid, reply=msg)

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
            sw_in = self.state.by_dpid.get(msg.datapath.id)
            if (sw_in.dp is not msg.datapath) if sw_in is not None else not self.admission.admitted(msg.datapath):
                c["unadmitted_messages"] += 1  # a refused or held session: its frames change nothing
                return
            if not self.ha.master or (sw_in is not None and not self.ha.master_of(sw_in.name)):
                c["not_master_packet_ins"] += 1
                return
            if eth_type == ETH_TYPE_PAUSE:
                self.pausing.on_pause(msg, bytes(data), in_port, t0)
            elif eth_type == ETH_TYPE_CNM:
                self.pausing.on_cnm(msg, bytes(data), in_port, t0)
            else:
                self.wiring.on_lldp(msg, bytes(data), in_port, t0)
                self.lldp_burst += 1
                if self.lldp_burst >= LLDP_BURST:  # a switch's buffer of LLDP frames must not hold a PAUSE back
                    self.lldp_burst = 0
                    hub.sleep(0)
        except Disconnected:
            pass
        except Exception:  # pragma: no cover - never kill the receive loop
            c["packet_in_errors"] += 1
            LOG.exception("packet-in handling failed")

    def _heard(self, msg: Any) -> bool:
        """Is ``msg`` from its dpid's admitted session? (counted when not: it changes nothing)"""
        if self.admission.admitted(msg.datapath):
            return True
        self.counters["unadmitted_messages"] += 1
        return False

    @set_ev_cls(ofp_event.EventONFBundleCtrlMsg, MAIN_DISPATCHER)
    def _bundle_reply(self, ev: Any) -> None:
        if self._heard(ev.msg):
            self.channel.wake(ev.msg.datapath.id, ev.msg.xid, reply=ev.msg)

    @set_ev_cls(ofp_event.EventOFPRoleReply, MAIN_DISPATCHER)
    def _role_reply(self, ev: Any) -> None:
        if self._heard(ev.msg):
            self.channel.wake(ev.msg.datapath.id, ev.msg.xid, reply=ev.msg)

    @set_ev_cls([ofp_event.EventOFPFlowStatsReply, ofp_event.EventOFPMeterConfigStatsReply,
                 ofp_event.EventOFPMeterStatsReply, ofp_event.EventOFPGroupDescStatsReply,
                 ofp_event.EventOFPPortStatsReply], MAIN_DISPATCHER)
    def _multipart_reply(self, ev: Any) -> None:
        """Collect a multipart reply (flow stats, meters, groups) for the waiter of its xid."""
        if self._heard(ev.msg):
            self.channel.multipart_reply(ev.msg)

    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    def _port_status(self, ev: Any) -> None:
        msg = ev.msg
        if not self._heard(msg):  # a refused or held session's port status changes nothing
            return
        deleted = msg.reason == msg.datapath.ofproto.OFPPR_DELETE
        self.wiring.port_status(msg.datapath, msg.desc, deleted)
        self.failover.port_status(msg.datapath, msg.desc, deleted)
        self.changes.mark()


def _from_state(name: str) -> property:
    return property(lambda app: getattr(app.state, name), doc=f"The running state's ``{name}`` (read only).")


for _name in STATE_ATTRS:  # app.config, app.switches, ...: read through to the state a reload swaps
    setattr(HpcfabricController, _name, _from_state(_name))
