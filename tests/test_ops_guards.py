"""Hostile and broken input: ingress guards, punt meters, and a fuzzed packet-in path.

* :func:`hpcfabric.rules.guards.guard_flows` (pure): spoofed sources dropped on host
  ports, DMP and the rewrite mode's real MAC excepted, every punt metered, and
  the all-pairs verifier still delivers every pair on guarded tables;
* DMP is answered only on host ports (every shipped config);
* PAUSE / PFC / CNM from host ports never flip a fabric rule;
* >= 10,000 frames (PAUSE, PFC, CNM, LLDP, DMP, VLAN, random bytes; host,
  fabric and unknown ports; known and unknown switches; no in_port) through
  the real controller's packet-in handler with fake switches: no exception,
  no state change from garbage, every frame accounted for in exactly one counter.
"""

from __future__ import annotations

import random
import struct
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_ops_fakes import ROOT, FakeSwitch, make_app, settle

from hpcfabric.config import load_config
from hpcfabric.protocols.lldp import build_lldp, parse_lldp
from hpcfabric.rules.flows import (
    ETH_TYPE_CNM,
    ETH_TYPE_DMP,
    ETH_TYPE_LLDP,
    ETH_TYPE_PAUSE,
    OFPP_CONTROLLER,
    OFPP_IN_PORT,
    Output,
    RuleClass,
)
from hpcfabric.protocols.cnm import build_cnm, parse_cnm
from hpcfabric.rules.guards import METER_FABRIC, METER_HOST
from hpcfabric.protocols.pause import MalformedFrame, build_pause, build_pfc, parse_mac_control
from hpcfabric.verify.reference.pipeline import Frame, Pipeline
from hpcfabric.verify.oracle.allpairs import verify

CONFIGS = ROOT / "configs"
TOPO = ROOT / "topologies"
SHIPPED = ["dragonfly-a4-p2-h2.conf", "dragonfly-a2-p1-h1.conf", "fb-2d-3x3.conf", "fb-2d-4x4.conf", "fat-tree-k4.conf"]


def guarded(cfg):
    """The shipped configs install the guards: their desired tables (and as a compiled fabric for verify)."""
    assert cfg.source_check and cfg.punt_meters
    tables = cfg.desired
    assert any(f.rule_class == RuleClass.GUARD for flows in tables.values() for f in flows)
    comp = cfg.compiled
    return tables, replace(comp, tables={n: replace(t, flows=tables[n]) for n, t in comp.tables.items()})


@pytest.mark.parametrize("name", SHIPPED)
def test_guarded_tables_pass_the_all_pairs_verifier(name):
    cfg = load_config(CONFIGS / name)
    tables, comp = guarded(cfg)
    report = verify(comp, groups=cfg.groups)
    assert report.ok and report.delivered == report.pairs and report.overlaps == 0, report.as_dict()
    assert report.engine.startswith("vectorised")


@pytest.mark.parametrize("name", SHIPPED)
def test_spoofed_sources_are_dropped_dmp_is_not(name):
    cfg = load_config(CONFIGS / name)
    tables, _ = guarded(cfg)
    plan = cfg.plan
    for sw in cfg.fabric.access_switches[:6]:
        pipe = Pipeline(tables[sw.name], cfg.groups.get(sw.name, ()))
        hosts = cfg.fabric.hosts_on(sw.name)
        for h in hosts:
            other = next(x for x in cfg.fabric.hosts if x.name != h.name)
            mine, theirs = plan.host_mac[h.name], plan.host_mac[other.name]
            ok = pipe.process(Frame(in_port=h.port, eth_src=mine, eth_dst=theirs))
            spoof = pipe.process(Frame(in_port=h.port, eth_src=theirs, eth_dst=mine))
            burnt_in = pipe.process(Frame(in_port=h.port, eth_src=0x001122334455, eth_dst=theirs))
            dmp = pipe.process(Frame(in_port=h.port, eth_src=0x001122334455, eth_dst=0x001122334455, eth_type=ETH_TYPE_DMP))
            assert ok.outputs or ok.hits[-1].table >= 1  # routed (output here or further on)
            for res in (spoof, burnt_in):
                assert res.dropped and res.hits[-1].rule_class == RuleClass.GUARD, (sw.name, h.name, res)
            assert [p for p, _ in dmp.outputs] == [h.port] and dmp.outputs[0][1].eth_src == mine
        # frames from other switches are never subject to the guard
        for port in cfg.fabric.fabric_ports(sw.name):
            res = pipe.process(Frame(in_port=port, eth_src=0x021234567890, eth_dst=plan.host_mac[hosts[0].name]))
            assert [p for p, _ in res.outputs] == [hosts[0].port]


def test_every_punt_is_metered_by_class():
    cfg = load_config(CONFIGS / "dragonfly-a2-p1-h1.conf")
    tables, _ = guarded(cfg)
    for sw in cfg.fabric.switches:
        hosts = {h.port for h in cfg.fabric.hosts_on(sw.name)}
        punts = [f for f in tables[sw.name] if any(isinstance(a, Output) and a.port == OFPP_CONTROLLER for a in f.actions)]
        assert punts
        for f in punts:
            assert f.meter == (METER_HOST if f.match.in_port in hosts else METER_FABRIC), f
            assert f.match.in_port is None or f.match.in_port in hosts
        # host ports: LLDP and MAC control each have their own metered punt
        assert {(f.match.in_port, f.match.eth_type) for f in punts if f.meter == METER_HOST} == {
            (p, t) for p in hosts for t in (ETH_TYPE_LLDP, ETH_TYPE_PAUSE)}


def test_rewrite_mode_real_mac_passes_the_guard(tmp_path):
    macs = "\n".join(f"g{g}s{s}h0 = 00:16:3e:00:0{g}:0{s}" for g in range(3) for s in range(2))
    path = tmp_path / "r.conf"
    path.write_text(f"[hpcfabric]\ntopology = {TOPO / 'dragonfly-a2-p1-h1.yaml'}\nhost_mac = rewrite\n"
                    f"[guards]\nsource_check = on\npunt_meters = on\n[hosts]\n{macs}\n")
    cfg = load_config(path)
    pipe = Pipeline(cfg.desired["g0s0"])
    h = cfg.fabric.hosts_on("g0s0")[0]
    dst = cfg.plan.host_mac["g0s1h0"]
    real = pipe.process(Frame(in_port=h.port, eth_src=0x00163E000000, eth_dst=dst))
    assert real.outputs and real.outputs[0][1].eth_src == cfg.plan.host_mac[h.name]
    assert pipe.process(Frame(in_port=h.port, eth_src=0x00163E000001, eth_dst=dst)).dropped  # g0s1h0's real MAC


@pytest.mark.parametrize("name", SHIPPED + ["dragonfly-table3.conf"])
def test_dmp_is_answered_only_on_host_ports(name):
    cfg = load_config(CONFIGS / name, compile=name != "dragonfly-table3.conf")
    if not cfg.desired:  # table3: compile just a few switches' worth through the generator of the rules
        from hpcfabric.rules.compiler import compile_switch
        from hpcfabric.rules.context import Context

        ctx = Context(cfg.fabric, cfg.plan, cfg.routing)
        tables = {sw.name: compile_switch(ctx, sw).flows for sw in cfg.fabric.switches[:40]}
    else:
        tables = cfg.desired
    for sw_name, flows in tables.items():
        hosts = {h.port for h in cfg.fabric.hosts_on(sw_name)}
        echo = [f for f in flows if any(isinstance(a, Output) and a.port == OFPP_IN_PORT for a in f.actions)]
        assert {f.match.in_port for f in echo} == hosts, sw_name
        assert all(f.match.eth_type == ETH_TYPE_DMP for f in echo)


# ---------------------------------------------------------------------------
# the controller's packet-in path


def guarded_app(tmp_path: Path, topo: str = "dragonfly-a2-p1-h1.yaml", routing: str = "conditional"):
    path = tmp_path / "g.conf"
    path.write_text(f"[hpcfabric]\ntopology = {TOPO / topo}\nrouting = {routing}\nreload_poll = 0\n"
                    "[guards]\nsource_check = on\npunt_meters = on\n")
    app = make_app(path, tmp_path / "status.json")
    sws = {}
    for st in app.switches.values():
        sws[st.name] = FakeSwitch(app, st.dpid, list(range(1, 6)))
        sws[st.name].connect()
    settle()
    assert all(s.confirmed for s in app.switches.values())
    return app, sws


def test_meters_installed_before_the_flows_that_use_them(tmp_path):
    app, sws = guarded_app(tmp_path)
    for sw in sws.values():
        assert set(sw.meters) == {METER_FABRIC, METER_HOST}
        assert sw.meters[METER_HOST][1] == 20 and sw.meters[METER_FABRIC][1] == 1000
        first_flow = sw.log.index("flow_mod")
        assert sw.log.index("meter_mod") < first_flow
    # a restart (new app, same switches) reconciles to nothing: meters and flows are right
    app2 = make_app(app.config.path)
    for sw in sws.values():
        sw.app, sw.log = app2, []
        sw.connect()
    settle()
    assert all(s.confirmed for s in app2.switches.values())
    assert all(sw.count("flow_mod") == 0 and sw.count("meter_mod") == 0 for sw in sws.values())


SRC = bytes.fromhex("020000aabbcc")


def test_pause_pfc_cnm_from_host_ports_never_flip(tmp_path):
    app, sws = guarded_app(tmp_path)
    sw = sws["g0s0"]  # port 1: host, 2 global, 3 local
    before = sw.flow_mods()
    cnm = bytes.fromhex("0180c2000000") + SRC + struct.pack("!H", ETH_TYPE_CNM) + bytes(40)
    for frame in (build_pause(SRC, 0xFFFF), build_pfc(SRC, {3: 0xFFFF}), cnm, build_pause(SRC, 0)):
        for _ in range(50):
            sw.packet_in(1, frame)
    assert sw.flow_mods() == before and app.pause.paused_ports() == []
    st = app.status()
    assert st["pause"]["host_port_frames"] == 150 and st["pause"]["flips"] == 0
    assert st["packet_ins"]["cnm"] == 50 and st["dropped"]["cnm_host_port"] == 50
    assert st["cnm"]["host_port_frames"] == 50 and st["cnm"]["flips"] == 0
    # a valid CNM with the most severe feedback from a host port does not flip either
    for _ in range(20):
        sw.packet_in(1, build_cnm(SRC, bytes.fromhex("020000000011"), 63))
    assert sw.flow_mods() == before and app.pause.paused_ports() == []
    assert app.status()["cnm"]["host_port_frames"] == 70
    # the same PAUSE on a fabric port does flip
    sw.packet_in(3, build_pause(SRC, 0xFFFF))
    assert sw.flow_mods() == before + 1 and app.pause.paused_ports() == [("g0s0", 3)]


def _lldp_variants(rng: random.Random, app, dpids: list[int]) -> bytes:
    frame = bytearray(build_lldp(rng.choice(dpids + [0x77, 2**63]), rng.randint(1, 6), SRC,
                                 nonce=app.wiring.nonce if rng.random() < 0.5 else rng.randbytes(8)))
    for _ in range(rng.randint(0, 4)):
        frame[rng.randrange(14, len(frame))] = rng.randrange(256)
    if rng.random() < 0.3:
        frame = frame[: rng.randint(14, len(frame))]
    return bytes(frame)


def _frame(rng: random.Random, app, dpids: list[int]) -> tuple[str, bytes]:
    r = rng.random()
    if r < 0.2:
        q = rng.choice([0, 1, 100, 0xFFFF, rng.randrange(65536)])
        frame = bytearray(build_pause(SRC if rng.random() < 0.9 else bytes([1]) + SRC[1:], q))
        if rng.random() < 0.4:  # opcode, destination, length mutations
            frame[rng.choice([14, 15, 0, 5, 6])] = rng.randrange(256)
        if rng.random() < 0.1:
            frame = frame[: rng.randint(14, 20)]
        return "pause", bytes(frame)
    if r < 0.35:
        frame = bytearray(build_pfc(SRC, {rng.randrange(8): rng.randrange(65536) for _ in range(rng.randint(1, 3))}))
        if rng.random() < 0.4:
            frame[16] = rng.randrange(256)  # class-enable vector (reserved bits)
        if rng.random() < 0.2:
            frame = frame[: rng.randint(14, 40)]
        return "pfc", bytes(frame)
    if r < 0.40:
        return "cnm", bytes.fromhex("0180c2000000") + SRC + struct.pack("!H", ETH_TYPE_CNM) + rng.randbytes(rng.randint(0, 80))
    if r < 0.45:  # well-formed CNMs (any feedback, tags, CN-TAG), some of them mutated or cut
        frame = bytearray(build_cnm(bytes.fromhex("020000000011"), SRC, rng.randrange(64), cpid=rng.getrandbits(64),
                                    rpid=rng.choice([None, rng.randrange(65536)]),
                                    vlan_pcp=rng.choice([None, rng.randrange(8)]), msdu=rng.randbytes(rng.randint(0, 64))))
        if rng.random() < 0.3:
            frame[rng.randrange(len(frame))] = rng.randrange(256)
        if rng.random() < 0.1:
            frame = frame[: rng.randint(14, len(frame))]
        return "cnm", bytes(frame)
    if r < 0.65:
        return "lldp", _lldp_variants(rng, app, dpids)
    if r < 0.72:
        return "dmp", SRC + SRC + struct.pack("!H", ETH_TYPE_DMP) + rng.randbytes(rng.randint(0, 60))
    if r < 0.78:  # VLAN-tagged control frame
        inner = rng.choice([ETH_TYPE_PAUSE, ETH_TYPE_LLDP, 0x0800])
        return "vlan", bytes(6) + SRC + struct.pack("!HHH", 0x8100, rng.randrange(65536), inner) + rng.randbytes(rng.randint(0, 60))
    return "random", rng.randbytes(rng.choice([0, 1, 13, 14, 15, rng.randint(0, 1600)]))


def _accounted(c) -> int:
    return (c["short_frames"] + c["cnm_malformed"] + c["cnm_host_port"] + c["cnm_unknown_port"] + c["cnm_no_feedback"]
            + c["cnm_minimal"] + c["cnm_used"] + c["pause_switch_local"]
            + c["dmp_packet_ins"] + c["other_packet_ins"] + c["no_in_port"]
            + c["not_master_packet_ins"] + c["pause_unknown_switch"] + c["pause_unknown_port"] + c["pause_host_port"]
            + c["pause_malformed"] + c["pause_minimal"] + c["pause_used"] + c["lldp_malformed"] + c["lldp_foreign"]
            + c["lldp_host_untrusted"] + c["lldp_received"]
            + c["unadmitted_messages"])  # from a session the app never admitted (here: the unconnected stranger)


def _is_garbage(kind: str, frame: bytes, port: int | None, known: bool, app, sw_name: str | None) -> bool:
    """Must this frame change nothing by design? Malformed frames, frames without in_port, PAUSE from host ports,
    unknown ports or unknown switches, LLDP not ours on host ports. (A well-formed LLDP anywhere else is evidence
    about the wiring -- also from an unknown switch or an unused port -- so it is not garbage.)"""
    if port is None or len(frame) < 14:
        return True
    eth_type = frame[12] << 8 | frame[13]
    peer = app.fabric.peer(sw_name, port) if known else None
    if eth_type == ETH_TYPE_LLDP:
        try:
            info = parse_lldp(frame)
        except Exception:  # noqa: BLE001
            return True
        if info.dpid is None or info.port is None:
            return True
        return known and peer is not None and peer.is_host and info.nonce != app.wiring.nonce
    if eth_type == ETH_TYPE_PAUSE:
        if not known or peer is None or peer.is_host:
            return True
        try:
            parse_mac_control(frame)
            return False
        except MalformedFrame:
            return True
    if eth_type == ETH_TYPE_CNM or (eth_type == 0x8100 and len(frame) >= 18 and frame[16:18] == b"\x22\xe9"):
        if not known or peer is None or peer.is_host:
            return True
        try:
            return parse_cnm(frame).qfb == 0  # feedback 0 changes nothing by design
        except MalformedFrame:
            return True
    return True


def _lldp_untrusted(frame: bytes, app) -> bool:
    try:
        return parse_lldp(frame).nonce != app.wiring.nonce
    except Exception:  # noqa: BLE001
        return True


def test_fuzzed_packet_ins_no_crash_no_state_change_every_drop_counted(tmp_path, caplog):
    app, sws = guarded_app(tmp_path)
    rng = random.Random(20240607)
    dpids = [s.dpid for s in app.switches.values()]
    strangers = {0x77: FakeSwitch(app, 0x77)}
    conns = list(sws.values()) + list(strangers.values())
    logs = {n: len(sw.log) for n, sw in sws.items()}
    neighbours = dict(app.discovery.neighbors)
    n_garbage = 0
    # phase 1: garbage only -- nothing may change, nothing may be sent
    while n_garbage < 8000:
        sw = rng.choice(conns)
        port = rng.choice([1, 2, 3, 4, 42, None]) if rng.random() < 0.97 else None
        kind, frame = _frame(rng, app, dpids)
        known = sw.id in app.by_dpid
        name = app.by_dpid[sw.id].name if known else None
        if not _is_garbage(kind, frame, port, known, app, name):
            continue
        match = {"in_port": port} if port is not None else {}
        app._packet_in(SimpleNamespace(
            msg=SimpleNamespace(datapath=sw, match=match, data=frame)))
        n_garbage += 1
    c = app.counters
    assert c["packet_in_errors"] == 0 and "packet-in handling failed" not in caplog.text
    assert {n: len(sw.log) for n, sw in sws.items()} == logs  # not one message to any switch
    assert app.pause.until == {} and c["flips"] == 0 and dict(app.discovery.neighbors) == neighbours
    assert app.discovery.quarantine() == set() and app.status()["unknown_dpids"] == []
    assert sum(c[f"packet_in_{k}"] for k in ("pause", "lldp", "cnm", "dmp", "other", "short")) == n_garbage
    assert _accounted(c) == n_garbage
    # phase 2: everything mixed, valid frames included: still no crash and every frame counted once
    n = 0
    while n < 4000:
        sw = rng.choice(conns)
        port = rng.choice([1, 2, 3, 42, None])
        kind, frame = _frame(rng, app, dpids)
        match = {"in_port": port} if port is not None else {}
        sw.packet_in(port, frame) if port is not None else app._packet_in(
            SimpleNamespace(msg=SimpleNamespace(
                datapath=sw, match=match, data=frame)))
        n += 1
    settle()
    assert c["packet_in_errors"] == 0 and "Traceback" not in caplog.text
    assert _accounted(c) == n_garbage + n
    assert c["pause_used"] > 0 and c["flips"] > 0  # the valid PAUSE frames did their job
    assert c["cnm_used"] > 0  # and so did the valid CNMs from fabric ports
    st = app.status()
    assert sum(st["packet_ins"].values()) == n_garbage + n
    assert all(s.confirmed for s in app.switches.values())  # no switch fell out of sync
