"""Switch-local PAUSE reaction (``pause_reaction = switch``) and the CNM trigger, without a switch.

* compiler: the learn/resubmit pipeline; the reference pipeline runs it
  literally (a PAUSE learns an override, data then takes the alternative);
* verifier: the vectorised engine (resubmit chains inlined) agrees with the
  scalar reference and with controller mode for every pausable port;
* wire: ofwire bytes == os-ken's for the new actions/match, decoding back;
  ``ovs-ofctl`` text; reconciliation ignores learned entries;
* config keys; the controller's packet-in handling of PAUSE in switch mode
  and of 802.1Qau CNMs in both modes.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from os_ken.ofproto import ofproto_v1_3 as O

from hpcfabric.openflow import ofwire
from hpcfabric.rules.addressing import plan_addresses
from hpcfabric.verify.oracle.cdg import check_deadlock_freedom, pausable_ports
from hpcfabric.protocols.cnm import build_cnm
from hpcfabric.rules.compiler import compile_fabric
from hpcfabric.rules.port_state import learned_override_flow, port_state_flow
from hpcfabric.config import load_config
from hpcfabric.errors import CompileError, ConfigError
from hpcfabric.rules.flows import ETH_TYPE_PAUSE, TABLE_PAUSE_LEARN, FlowSpec, Match, RuleClass, make_cookie
from hpcfabric.openflow.ofctl import flows_text
from hpcfabric.protocols.pause import build_pause
from hpcfabric.verify.reference.flatten import inline_resubmits
from hpcfabric.verify.reference.pipeline import Frame, Pipeline
from hpcfabric.openflow.reconcile import diff
from hpcfabric.topology.loader import load_topology
from hpcfabric.verify.oracle.allpairs import verify

import hpcfabric.controller as ctl
from hpcfabric.controller import launch
from hpcfabric.controller import ofmsg
from test_controller_unit import DP, FakeDatapath, osken_bytes, packet_in, parse

ROOT = Path(__file__).resolve().parent.parent
SRC = bytes.fromhex("020000aabbcc")


def compiled(name: str, routing: str = "conditional", reaction: str = "switch", **kw):
    f = load_topology(ROOT / "topologies" / f"{name}.yaml")
    return compile_fabric(f, plan_addresses(f, "compact"), routing=routing, pause_reaction=reaction, **kw)


# ---------------------------------------------------------------------------
# compiler and reference pipeline


def test_switch_mode_tables_equal_controller_mode_once_inlined():
    sw_mode, ctl_mode = compiled("dragonfly-a4-p2-h2"), compiled("dragonfly-a4-p2-h2", reaction="controller")
    for name in ctl_mode.tables:
        flat = [f for f in inline_resubmits(sw_mode.flows(name)) if f.table < TABLE_PAUSE_LEARN
                and not (f.match.eth_type == ETH_TYPE_PAUSE and f.match.in_port is not None)]
        assert flat == list(ctl_mode.flows(name)), name
    assert pausable_ports(sw_mode) == pausable_ports(ctl_mode)


def test_minimal_routing_and_bad_values_are_compile_errors():
    with pytest.raises(CompileError, match="conditional"):
        compiled("dragonfly-a2-p1-h1", routing="minimal")
    with pytest.raises(CompileError, match="pause reaction"):
        compiled("dragonfly-a2-p1-h1", reaction="asic")
    with pytest.raises(CompileError, match="switch_hold_s"):
        compiled("dragonfly-a2-p1-h1", switch_hold_s=0)


def test_a_pause_frame_learns_an_override_that_diverts_the_hosts_traffic():
    c = compiled("dragonfly-a2-p1-h1", switch_hold_s=3)
    flows = c.flows("g0s0")  # port 1 host, 2 global, 3 local
    pipe = Pipeline(flows)
    far = c.plan.host_mac["g1s0h0"]  # reached over local port 3 by a default rule
    assert pipe.process(Frame(1, 0x020000000077, far)).ports == (3,)
    res = pipe.process(Frame(3, int.from_bytes(SRC, "big"), 0x0180C2000001, eth_type=ETH_TYPE_PAUSE))
    assert res.punted and res.learned == (learned_override_flow(3),)
    learn = next(a for a in flows if a.match.in_port == 3 and a.match.eth_type == ETH_TYPE_PAUSE).actions[0]
    assert learn.hard_timeout == 3
    paused = Pipeline(flows + res.learned)
    assert paused.process(Frame(1, 0x020000000077, far)).ports == (2,)  # Valiant port of host 0
    # transit frames keep their minimal port and wait (per-port fallback), as in controller mode
    assert paused.process(Frame(2, 0x020000000077, far)).ports == (3,)
    # a PAUSE (or XON: OpenFlow cannot tell them apart) from the host port learns nothing
    assert pipe.process(Frame(1, 0x02, 0x0180C2000001, eth_type=ETH_TYPE_PAUSE)).learned == ()


# ---------------------------------------------------------------------------
# verifier


@pytest.mark.parametrize("name", ["dragonfly-a4-p2-h2", "fb-2d-4x4", "fat-tree-k4"])
def test_vectorised_verifier_agrees_with_reference_and_controller_mode(name):
    sw_mode, ctl_mode = compiled(name), compiled(name, reaction="controller")
    ports = pausable_ports(sw_mode)
    keys = ("delivered", "dropped", "loops", "punted", "floods", "hop_histogram", "paused", "ok")
    for port in ports[:: max(1, len(ports) // 12)]:
        fast = verify(sw_mode, paused=[port], engine="fast").as_dict()
        ref = verify(sw_mode, paused=[port], engine="scalar").as_dict()
        other = verify(ctl_mode, paused=[port], engine="fast").as_dict()
        assert fast["engine"] == "vectorised"
        assert {k: fast[k] for k in keys} == {k: ref[k] for k in keys} == {k: other[k] for k in keys}, port
    a, b = check_deadlock_freedom(sw_mode), check_deadlock_freedom(ctl_mode)
    assert (a.acyclic, a.scenarios, a.failed_scenarios) == (b.acyclic, b.scenarios, b.failed_scenarios)


# ---------------------------------------------------------------------------
# wire encoding, ofctl text, reconciliation


def test_new_actions_and_reg0_match_encode_like_osken_and_decode_back():
    c = compiled("dragonfly-a2-p1-h1")
    cache = ofwire.FlowModCache()
    seen = set()
    for name in c.tables:
        for flow in c.flows(name):
            mine = cache.encode(flow, 9)
            assert mine == osken_bytes(flow, 9), flow
            assert ofmsg.from_flow_mod(parse(mine)) == flow
            entry = _stats_entry(flow)
            assert entry.spec == flow, entry.reason
            seen |= {type(a).__name__ for a in flow.actions} | ({"reg0"} if flow.match.reg0 else set())
    assert {"Learn", "Resubmit", "reg0"} <= seen


def _stats_entry(flow: FlowSpec) -> ofwire.FlowStatsEntry:
    import struct

    body = ofwire.encode_match(flow.match) + ofwire.encode_instructions(flow)
    head = struct.pack("!HBxIIHHHH4xQQQ", 48 + len(body), flow.table, 1, 0, flow.priority, 0, 0, 0, flow.cookie, 5, 300)
    return ofwire.FlowStatsEntry(head + body)


def test_ovs_answers_in_port_as_nxm_in_learn_specs_and_that_decodes_too():
    learn = compiled("dragonfly-a2-p1-h1").flows("g0s0")
    flow = next(f for f in learn if f.match.eth_type == ETH_TYPE_PAUSE and f.match.in_port == 2)
    raw = bytearray(ofwire.encode_learn(flow.actions[0]))
    i = raw.index(bytes.fromhex("80000004"))
    raw[i : i + 4] = bytes.fromhex("00000002")  # NXM_OF_IN_PORT
    assert ofwire._decode_actions(bytes(raw), 0, len(raw)) == (flow.actions[0],)


def test_ofctl_text_uses_ovs_syntax():
    text = flows_text(compiled("dragonfly-a2-p1-h1").flows("g0s0"))
    assert ("learn(table=4,hard_timeout=1,priority=100,cookie=0x4846090000000000,"
            "OXM_OF_METADATA[0..15]=NXM_OF_IN_PORT[],load:0x1->NXM_NX_REG0[0])") in text
    assert "actions=resubmit(,4),resubmit(,5)" in text and "reg0=0x1/0x1,actions=resubmit(,3)" in text


def test_reconciliation_ignores_learned_entries():
    desired = compiled("dragonfly-a2-p1-h1").flows("g0s0")
    installed = list(desired) + [learned_override_flow(3), learned_override_flow(2)]
    d = diff(desired, installed)
    assert d.in_sync and not d.foreign and len(d.keep) == len(desired)
    # a stale controller-owned entry in the same table is still deleted
    stale = FlowSpec(TABLE_PAUSE_LEARN, 7, Match(metadata=(9, 0xFFFF)), (), make_cookie(RuleClass.INFRA, 9))
    assert diff(desired, installed + [stale]).delete == (stale,)


# ---------------------------------------------------------------------------
# configuration


def _conf(tmp_path: Path, extra: str, routing: str = "conditional") -> Path:
    p = tmp_path / "t.conf"
    p.write_text(f"[hpcfabric]\ntopology = {ROOT / 'topologies' / 'dragonfly-a2-p1-h1.yaml'}\n"
                 f"routing = {routing}\n{extra}")
    return p


def test_config_keys(tmp_path):
    cfg = load_config(_conf(tmp_path, "pause_reaction = switch\nswitch_hold_s = 2\ncnm = on\ncnm_max_hold_ms = 100\n"))
    assert (cfg.pause_reaction, cfg.switch_hold_s, cfg.cnm, cfg.cnm_max_hold_ms) == ("switch", 2, True, 100.0)
    assert cfg.compiled.pause_reaction == "switch" and cfg.summary()["pause_reaction"] == "switch"
    assert any(f.match.eth_type == 0x22E9 and f.match.in_port == 2 for f in cfg.desired["g0s0"])
    assert not any(f.match.eth_type == 0x22E9 and f.match.in_port == 1 for f in cfg.desired["g0s0"])  # host port
    default = load_config(_conf(tmp_path, ""))
    assert (default.pause_reaction, default.cnm) == ("controller", False)
    assert not any(f.match.eth_type == 0x22E9 for f in default.desired["g0s0"])
    for extra, field, routing in [("pause_reaction = asic\n", "hpcfabric.pause_reaction", "conditional"),
                                  ("pause_reaction = switch\n", "hpcfabric.pause_reaction", "minimal"),
                                  ("switch_hold_s = 0.5\n", "hpcfabric.switch_hold_s", "conditional"),
                                  ("switch_hold_s = 0\n", "hpcfabric.switch_hold_s", "conditional"),
                                  ("cnm = maybe\n", "hpcfabric.cnm", "conditional"),
                                  ("cnm_max_hold_ms = -1\n", "hpcfabric.cnm_max_hold_ms", "conditional")]:
        with pytest.raises(ConfigError) as err:
            load_config(_conf(tmp_path, extra, routing))
        assert err.value.field == field and "\n" not in str(err.value), str(err.value)


# ---------------------------------------------------------------------------
# the controller's packet-in handling


def make_app(tmp_path: Path, extra: str):
    launch.PRELOADED = load_config(_conf(tmp_path, "link_speed_gbps = 10\n" + extra))
    launch.OVERRIDES.clear()
    try:
        return ctl.HpcfabricController()
    finally:
        launch.PRELOADED = None


def attach(app, dpid: int) -> FakeDatapath:
    dp = FakeDatapath(dpid)
    sw = app.by_dpid[dpid]
    sw.dp, sw.connected = dp, True
    return dp


def test_switch_mode_pause_sends_nothing_and_is_counted(tmp_path):
    app = make_app(tmp_path, "pause_reaction = switch\n")
    dp = attach(app, 1)
    for q in (0xFFFF, 0, 100):
        app._packet_in(packet_in(dp, 3, build_pause(SRC, q)))
    app._packet_in(packet_in(dp, 1, build_pause(SRC, 0xFFFF)))  # host port: still only counted as such
    assert dp.messages() == [] and app.pause.paused_ports() == []
    st = app.status()["pause"]
    assert st["reaction"] == "switch" and st["switch_local_frames"] == 3 and st["flips"] == 0
    assert st["switch_local_ports"] == {"g0s0:3": 3} and st["host_port_frames"] == 1
    assert app.desired("g0s0") == app.config.desired["g0s0"]


@pytest.mark.parametrize("reaction", ["controller", "switch"])
def test_cnm_on_a_fabric_port_flips_it_for_a_feedback_derived_hold(tmp_path, reaction):
    app = make_app(tmp_path, f"pause_reaction = {reaction}\ncnm = on\ncnm_max_hold_ms = 200\npause_hold_ms = 10\n")
    dp = attach(app, 1)  # g0s0: port 1 host, 2 global, 3 local
    rp = app.config.plan.host_mac["g0s0h0"].to_bytes(6, "big")
    app._packet_in(packet_in(dp, 2, build_cnm(rp, SRC, 0)))  # no congestion: nothing
    assert dp.messages() == []
    t0 = __import__("time").monotonic()
    app._packet_in(packet_in(dp, 2, build_cnm(rp, SRC, 21, cpid=5)))
    t1 = __import__("time").monotonic()
    fm, barrier = dp.messages()
    assert fm.command == O.OFPFC_MODIFY_STRICT and ofmsg.from_flow_mod(fm) == port_state_flow(2, True)
    # held cnm_max_hold_ms x qFb / 63 from the frame's arrival (between t0 and t1): exact, whatever the load
    until = app.pause.until[("g0s0", 2)]
    assert t0 + 0.2 * 21 / 63 - 1e-9 <= until <= t1 + 0.2 * 21 / 63 + 1e-9
    app._barrier_reply(SimpleNamespace(msg=SimpleNamespace(datapath=dp, xid=barrier.xid)))
    # a milder CNM never shortens the hold; a more severe one extends it without a flow-mod
    app._packet_in(packet_in(dp, 2, build_cnm(rp, SRC, 1)))
    app._packet_in(packet_in(dp, 2, build_cnm(rp, SRC, 63)))
    assert dp.messages() == [] and app.pause.until[("g0s0", 2)] - t0 > 0.19
    # expiry writes the mode's unpaused entry back
    deadline = app.pause.next_deadline()
    for flip in app.pause.expire(deadline + 1e-6):
        app.pausing.apply_flip(flip, deadline)
    fm, _ = dp.messages()
    assert ofmsg.from_flow_mod(fm) == port_state_flow(2, False, reaction=reaction)
    st = app.status()
    assert st["cnm"]["frames"] == 4 and st["cnm"]["used"] == 3 and st["cnm"]["flips"] == 1
    assert st["cnm"]["no_feedback"] == 1 and st["packet_ins"]["cnm"] == 4


def test_cnm_from_host_unknown_port_malformed_or_minimal_changes_nothing(tmp_path):
    app = make_app(tmp_path, "cnm = on\n")
    dp = attach(app, 1)
    rp = app.config.plan.host_mac["g0s0h0"].to_bytes(6, "big")
    good = build_cnm(rp, SRC, 63)
    app._packet_in(packet_in(dp, 1, good))  # host port
    app._packet_in(packet_in(dp, 42, good))  # not in the topology
    bad = bytearray(good)
    bad[14] = 0x10  # version 1
    app._packet_in(packet_in(dp, 3, bytes(bad)))
    app._packet_in(packet_in(dp, 3, bytes.fromhex("0180c2000000") + good[6:]))  # multicast destination
    tagged = build_cnm(rp, SRC, 63, vlan_pcp=3)  # one VLAN tag: classified and parsed
    assert dp.messages() == [] and app.pause.paused_ports() == []
    st = app.status()
    assert (st["cnm"]["host_port_frames"], st["cnm"]["unknown_port_frames"], st["cnm"]["malformed"]) == (1, 1, 2)
    assert st["dropped"]["cnm_malformed"] == 2 and st["dropped"]["cnm_host_port"] == 1
    app._packet_in(packet_in(dp, 3, tagged))
    assert [type(m).__name__ for m in dp.messages()] == ["OFPFlowMod", "BarrierRequest"]
    minimal = load_config(_conf(tmp_path, "cnm = on\n", routing="minimal"))
    launch.PRELOADED = minimal
    try:
        app2 = ctl.HpcfabricController()
    finally:
        launch.PRELOADED = None
    dp2 = attach(app2, 1)
    app2._packet_in(packet_in(dp2, 3, good))
    assert dp2.messages() == [] and app2.status()["cnm"]["minimal"] == 1
