"""A fake OpenFlow 1.3 switch for the operations tests (imported by the other ``test_ops_*`` modules).

:class:`FakeSwitch` is a datapath the real controller app talks to: it keeps
a flow table, meters, groups and the OpenFlow role state (generation ids,
stale claims rejected, a slave's writes refused -- like Open vSwitch), and
answers every request synchronously by calling the app's own handlers.
It rejects ONF bundles, so the app uses plain flow-mods. ``log`` records
every message type received, so tests count flow-mods exactly.
"""

from __future__ import annotations

import struct
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from os_ken.ofproto import ofproto_parser
    from os_ken.ofproto import ofproto_v1_3 as O
    from os_ken.ofproto import ofproto_v1_3_parser as P
    from os_ken.ofproto.ofproto_protocol import ProtocolDesc

import hpcfabric.controller as ctl
from hpcfabric.controller import launch
from hpcfabric.openflow import ofwire
from hpcfabric.config import load_config
from hpcfabric.controller import ofmsg
from hpcfabric.rules.flows import FlowSpec, Group, cookie_class
from hpcfabric.openflow.reconcile import canonical

ROOT = Path(__file__).resolve().parent.parent
DESC = ProtocolDesc(O.OFP_VERSION)

MP_FLOW, MP_PORT_STATS, MP_GROUP_DESC, MP_METER, MP_METER_CONFIG = 1, 4, 7, 9, 10


def make_app(config_path: str | Path, status: Path | None = None):
    cfg = load_config(config_path)
    launch.PRELOADED = cfg
    launch.OVERRIDES.clear()
    if status is not None:
        launch.OVERRIDES["status_file"] = str(status)
    try:
        return ctl.HpcfabricController()
    finally:
        launch.PRELOADED = None


def ev(**kw: Any) -> SimpleNamespace:
    return SimpleNamespace(msg=SimpleNamespace(**kw))


class FakeSwitch:
    ofproto = O
    ofproto_parser = P

    def __init__(self, app: Any, dpid: int, ports: list[int] | None = None, *, gen_cache: dict | None = None):
        self.app = app
        self.id = dpid
        self.xid = 1000
        self.address = ("127.0.0.1", 40000 + dpid)
        ports = ports if ports is not None else list(range(1, 9))
        self.ports = {p: SimpleNamespace(port_no=p, hw_addr="02:00:00:%02x:%02x:%02x" % (dpid >> 8 & 255, dpid & 255, p),
                                         config=0, state=0) for p in ports}
        self.flows: dict[tuple, FlowSpec] = {}
        self.counts: dict[tuple, int] = {}
        self.tx: dict[int, int] = {}  # port -> tx_bytes the port statistics report
        self.meters: dict[int, tuple[int, int, int]] = {}
        self.groups: dict[int, tuple] = {}
        self.log: list[str] = []
        self.packet_outs: list[bytes] = []
        self.role = O.OFPCR_ROLE_EQUAL
        # OVS keeps the election id per switch, shared by all connections: pass one dict to both apps' fakes
        self.gen = gen_cache if gen_cache is not None else {}
        self.alive = True

    # -- what the app calls ---------------------------------------------------------------------
    def set_xid(self, msg: Any) -> None:
        self.xid = (self.xid + 1) & 0xFFFFFFFF
        msg.set_xid(self.xid)

    def send(self, data: bytes) -> bool:
        if not self.alive:
            return False
        buf = bytes(data)
        while buf:
            _, mtype, length, xid = ofproto_parser.header(buf)
            self._handle(mtype, xid, buf[:length])
            buf = buf[length:]
        return True

    # -- helpers for tests ----------------------------------------------------------------------
    def connect(self) -> None:
        self.app.sessions.connected(self)

    def table(self) -> set[FlowSpec]:
        return set(self.flows.values())

    def install(self, flows) -> None:
        for f in flows:
            f = canonical(f)
            self.flows[f.key()] = f

    def count(self, kind: str) -> int:
        return self.log.count(kind)

    def flow_mods(self) -> int:
        return self.count("flow_mod")

    def packet_in(self, in_port: int, data: bytes) -> None:
        self.app._packet_in(ev(datapath=self, match={"in_port": in_port}, data=data))

    # -- the switch ---------------------------------------------------------------------------
    def _error(self, xid: int, etype: int, code: int) -> None:
        self.app._error(ev(datapath=self, xid=xid, type=etype, code=code))

    def _is_slave(self) -> bool:
        return self.role == O.OFPCR_ROLE_SLAVE

    def _handle(self, mtype: int, xid: int, buf: bytes) -> None:
        app = self.app
        if mtype == O.OFPT_BARRIER_REQUEST:
            self.log.append("barrier")
            app._barrier_reply(ev(datapath=self, xid=xid))
        elif mtype == O.OFPT_EXPERIMENTER:
            self.log.append("bundle")
            self._error(xid, O.OFPET_BAD_REQUEST, O.OFPBRC_BAD_EXPERIMENTER)
        elif mtype == O.OFPT_ROLE_REQUEST:
            role, gen = struct.unpack_from("!I4xQ", buf, 8)
            self.log.append("role")
            cached = self.gen.get("id")
            if role in (O.OFPCR_ROLE_MASTER, O.OFPCR_ROLE_SLAVE):
                if cached is not None and ((gen - cached) & (1 << 64) - 1) >= 1 << 63:
                    self._error(xid, O.OFPET_ROLE_REQUEST_FAILED, O.OFPRRFC_STALE)
                    return
                self.gen["id"] = gen
                if role == O.OFPCR_ROLE_MASTER:
                    for other in self.gen.setdefault("conns", []):
                        if other is not self and other.role == O.OFPCR_ROLE_MASTER:
                            other.role = O.OFPCR_ROLE_SLAVE
                self.role = role
            if self not in self.gen.setdefault("conns", []):
                self.gen["conns"].append(self)
            app._role_reply(ev(datapath=self, xid=xid, role=self.role, generation_id=gen))
        elif mtype == O.OFPT_FLOW_MOD:
            if self._is_slave():
                self.log.append("refused")
                self._error(xid, O.OFPET_BAD_REQUEST, O.OFPBRC_IS_SLAVE)
                return
            self.log.append("flow_mod")
            msg = ofproto_parser.msg(DESC, O.OFP_VERSION, mtype, len(buf), xid, buf)
            self._flow_mod(msg, xid)
        elif mtype == O.OFPT_METER_MOD:
            if self._is_slave():
                self._error(xid, O.OFPET_BAD_REQUEST, O.OFPBRC_IS_SLAVE)
                return
            self.log.append("meter_mod")
            cmd, flags, mid = struct.unpack_from("!HHI", buf, 8)
            if cmd == ofwire.OFPMC_DELETE:
                self.meters.pop(mid, None)
                return
            _, _, rate, burst = struct.unpack_from("!HHII", buf, 16)
            if cmd == ofwire.OFPMC_ADD and mid in self.meters:
                self._error(xid, O.OFPET_METER_MOD_FAILED, O.OFPMMFC_METER_EXISTS)
                return
            if cmd == ofwire.OFPMC_MODIFY and mid not in self.meters:
                self._error(xid, O.OFPET_METER_MOD_FAILED, O.OFPMMFC_UNKNOWN_METER)
                return
            self.meters[mid] = (flags, rate, burst)
        elif mtype == O.OFPT_GROUP_MOD:
            if self._is_slave():
                self._error(xid, O.OFPET_BAD_REQUEST, O.OFPBRC_IS_SLAVE)
                return
            self.log.append("group_mod")
            msg = _parse_group_mod(buf)
            if msg.command == O.OFPGC_DELETE:
                self.groups.pop(msg.group_id, None)
                return
            if msg.command == O.OFPGC_ADD and msg.group_id in self.groups:
                self._error(xid, O.OFPET_GROUP_MOD_FAILED, O.OFPGMFC_GROUP_EXISTS)
                return
            self.groups[msg.group_id] = (msg.type, msg.buckets)
        elif mtype == O.OFPT_MULTIPART_REQUEST:
            (mp,) = struct.unpack_from("!H", buf, 8)
            self.log.append(f"multipart_{mp}")
            self._multipart(mp, xid, buf)
        elif mtype == O.OFPT_PACKET_OUT:
            self.log.append("packet_out")
            self.packet_outs.append(buf)
        elif mtype == O.OFPT_PORT_MOD:
            self.log.append("port_mod")
        elif mtype == O.OFPT_ECHO_REQUEST:
            self.log.append("echo")
            app._echo_reply(ev(datapath=self, xid=xid))
        else:
            self.log.append(f"type_{mtype}")

    def _flow_mod(self, msg: Any, xid: int) -> None:
        if msg.command == O.OFPFC_ADD:
            spec = canonical(ofmsg.from_flow_mod(msg))
            if any(isinstance(a, Group) and a.group_id not in self.groups for a in spec.actions):
                self._error(xid, O.OFPET_BAD_ACTION, O.OFPBAC_BAD_OUT_GROUP)  # as OVS: the group must exist
                return
            if spec.meter is not None and spec.meter not in self.meters:
                self._error(xid, O.OFPET_METER_MOD_FAILED, O.OFPMMFC_UNKNOWN_METER)
                return
            self.flows[spec.key()] = spec
            self.counts.setdefault(spec.key(), 0)
            return
        match = ofmsg.from_match(msg.match)
        key = (msg.table_id, msg.priority, canonical(FlowSpec(msg.table_id, msg.priority, match)).match)
        cur = self.flows.get(key)
        if cur is None or (msg.cookie_mask and (cur.cookie & msg.cookie_mask) != (msg.cookie & msg.cookie_mask)):
            return
        if msg.command == O.OFPFC_DELETE_STRICT:
            del self.flows[key]
        elif msg.command == O.OFPFC_MODIFY_STRICT:
            spec = canonical(ofmsg.from_flow_mod(msg))
            from dataclasses import replace

            self.flows[key] = replace(spec, cookie=cur.cookie)

    def _multipart(self, mp: int, xid: int, buf: bytes) -> None:
        app = self.app
        if mp == MP_FLOW:
            table, out_port, out_group, cookie, mask = struct.unpack_from("!B3xII4xQQ", buf, 16)
            body = []
            for f in self.flows.values():
                if mask and (f.cookie & mask) != (cookie & mask):
                    continue
                match = ofwire.encode_match(f.match)
                inst = ofwire.encode_instructions(f)
                head = struct.pack("!HBxIIHHHH4xQQQ", 48 + len(match) + len(inst), f.table, 5, 0, f.priority, 0, 0, 0,
                                   f.cookie, self.counts.get(f.key(), 0), 0)
                body.append(ofwire.FlowStatsEntry(head + match + inst))
            app._multipart_reply(ev(datapath=self, xid=xid, body=body, flags=0))
        elif mp == MP_METER_CONFIG:
            body = [SimpleNamespace(meter_id=mid, flags=flags, bands=[SimpleNamespace(rate=rate, burst_size=burst)])
                    for mid, (flags, rate, burst) in self.meters.items()]
            app._multipart_reply(ev(datapath=self, xid=xid, body=body, flags=0))
        elif mp == MP_METER:
            body = [SimpleNamespace(meter_id=mid, band_stats=[SimpleNamespace(packet_band_count=7)])
                    for mid in self.meters]
            app._multipart_reply(ev(datapath=self, xid=xid, body=body, flags=0))
        elif mp == MP_PORT_STATS:
            body = [SimpleNamespace(port_no=p, tx_bytes=self.tx.get(p, 0)) for p in self.ports]
            app._multipart_reply(ev(datapath=self, xid=xid, body=body, flags=0))
        elif mp == MP_GROUP_DESC:
            body = [SimpleNamespace(group_id=gid, type=t, buckets=b) for gid, (t, b) in self.groups.items()]
            app._multipart_reply(ev(datapath=self, xid=xid, body=body, flags=0))
        else:
            self._error(xid, O.OFPET_BAD_REQUEST, O.OFPBRC_BAD_MULTIPART)


def _parse_group_mod(buf: bytes) -> SimpleNamespace:
    """GROUP_MOD (os-ken parses only switch-to-controller messages): command, type, group_id, buckets with
    ``watch_port`` and os-ken action objects (what a group-desc reply carries)."""
    command, gtype, gid = struct.unpack_from("!HBxI", buf, 8)
    buckets, off = [], 16
    while off < len(buf):
        length, _, watch_port, watch_group = struct.unpack_from("!HHII", buf, off)
        actions, a = [], off + 16
        while a < off + length:
            act = P.OFPAction.parser(buf, a)
            actions.append(act)
            a += act.len
        buckets.append(SimpleNamespace(watch_port=watch_port, watch_group=watch_group, actions=actions))
        off += length
    return SimpleNamespace(command=command, type=gtype, group_id=gid, buckets=buckets)


def settle(rounds: int = 50) -> None:
    """Let the app's green threads run (sessions, syncs)."""
    from os_ken.lib import hub

    for _ in range(rounds):
        hub.sleep(0)


def wait_planner(app: Any, timeout: float = 120.0) -> None:
    """Until the repair planner (its own process: config loaded, proof base built) is ready."""
    import time

    from os_ken.lib import hub

    app.failover.prepare()
    end = time.monotonic() + timeout
    while not app.failover.planner.ready and time.monotonic() < end:
        hub.sleep(0.05)
    assert app.failover.planner.ready, "the repair planner did not get ready"


def fake_fabric(tmp_path: Path, extra: str = "", *, planner: bool = True, topology: str = "dragonfly-a4-p2-h2",
                ports: int = 7) -> tuple[Any, dict[str, "FakeSwitch"]]:
    """The controller app on a shipped Dragonfly (default the demo's; conditional routing; ``extra``: more INI
    lines), a connected :class:`FakeSwitch` per switch (ports 1..``ports``), and (``planner``) its repair
    planner ready."""
    path = tmp_path / "c.conf"
    path.write_text(f"[hpcfabric]\ntopology = {ROOT / 'topologies' / (topology + '.yaml')}\nrouting = conditional\n"
                    f"reload_poll = 0\n{extra}")
    app = make_app(path)
    sws = {st.name: FakeSwitch(app, st.dpid, list(range(1, ports + 1))) for st in app.switches.values()}
    for sw in sws.values():
        sw.connect()
    settle()
    if planner:
        wait_planner(app)
    return app, sws


def wait_reroute(app: Any, timeout: float = 60.0) -> None:
    """Let a scheduled repair finish (planned by the planner process, installed in waves), then settle."""
    import time

    from os_ken.lib import hub

    end = time.monotonic() + timeout
    while (app.failover.pending or app.failover.running) and time.monotonic() < end:
        hub.sleep(0.01)
    settle(200)


def ours(flows) -> set:
    return {f for f in flows if cookie_class(f.cookie) is not None}


def controller_process(conf: Path) -> tuple["subprocess.Popen", Any]:
    """``hpcfabric controller --config conf`` as a child process, its output in ``log`` beside ``conf``: the
    process and that open file (close it once the process has ended)."""
    import subprocess
    import sys

    log = (conf.parent / "log").open("w")
    return subprocess.Popen([sys.executable, "-m", "hpcfabric.cli", "controller", "--config", str(conf)],
                            stdout=log, stderr=subprocess.STDOUT), log
