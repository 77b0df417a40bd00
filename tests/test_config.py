"""Controller config files: shipped configs, every error names file and field, exit code 2."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from hpcfabric.config import load_config, rewrite_flows, validate_config
from hpcfabric.errors import ConfigError
from hpcfabric.rules.flows import TABLE_INGRESS, Output, PushVlan, RuleClass, SetField

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "configs"
TOPO = ROOT / "topologies"

SHIPPED = [
    "dragonfly-a4-p2-h2.conf",
    "dragonfly-a2-p1-h1.conf",
    "fb-2d-3x3.conf",
    "fb-2d-4x4.conf",
    "fat-tree-k4.conf",
    "dragonfly-table3.conf",
    "dragonfly-a2-p1-h1-valiant.conf",
    "fb-2d-3x3-cos.conf",
]


def write(tmp_path: Path, body: str, name: str = "c.conf") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body).lstrip(), encoding="utf-8")
    return path


def base(extra: str = "", topo: str = "dragonfly-a2-p1-h1.yaml", openflow: str = "") -> str:
    return f"[hpcfabric]\ntopology = {TOPO / topo}\n{extra}\n[openflow]\n{openflow}\n"


# ---------------------------------------------------------------------------
# shipped and valid files


@pytest.mark.parametrize("name", [n for n in SHIPPED if n != "dragonfly-table3.conf"])
def test_shipped_configs_load(name):
    from hpcfabric.verify.reference.pipeline import resolve_groups
    from hpcfabric.rules.guards import guard_flows

    cfg = load_config(CONFIGS / name)
    assert set(cfg.desired) == {sw.name for sw in cfg.fabric.switches}
    assert cfg.lldp_timeout > cfg.lldp_interval
    # secure defaults: guards on everywhere, fast failover wherever the fabric has proved detours
    assert cfg.source_check and cfg.punt_meters and cfg.recompute and cfg.meters
    assert cfg.fast_failover == (not name.startswith("dragonfly-a2-p1-h1")) and bool(cfg.groups) == cfg.fast_failover
    # installed = compiled + guards, with protected outputs through groups that (every link up) output the same
    guarded = guard_flows(cfg.fabric, cfg.plan, {n: t.flows for n, t in cfg.compiled.tables.items()},
                          source_check=True, punt_meters=True, cos=cfg.compiled.cos is not None)
    for n, flows in cfg.desired.items():
        assert resolve_groups(flows, cfg.groups.get(n, ()), ()) == tuple(guarded[n]), n
    assert cfg.rules_expected == sum(len(f) for f in guarded.values()) > cfg.compiled.total_flows


def test_all_shipped_configs_listed():
    assert sorted(p.name for p in CONFIGS.glob("*.conf")) == sorted(SHIPPED)


def test_table3_config_parses_without_compiling():
    cfg = load_config(CONFIGS / "dragonfly-table3.conf", compile=False)
    assert len(cfg.fabric.switches) == 2064 and cfg.listen_host == "0.0.0.0"
    assert cfg.metrics_listen == ("127.0.0.1", 9302) and cfg.source_check and cfg.punt_meters
    assert not cfg.fast_failover  # too large for the detour analysis (see test_fast_failover_config_errors)


def test_demo_defaults():
    cfg = load_config(CONFIGS / "dragonfly-a4-p2-h2.conf")
    assert (cfg.addressing, cfg.routing, cfg.host_mac) == ("compact", "conditional", "dmp")
    assert cfg.listen_port == 6653 and cfg.status_file is None and cfg.bundles == "auto"
    assert cfg.metrics_listen is None  # tests and demos run several controllers on one machine
    assert cfg.link_speed_bps == 10e9
    assert cfg.pause_hold_ms == 50


def test_relative_paths_resolve_against_config_dir(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "t.yaml").write_text((TOPO / "dragonfly-a2-p1-h1.yaml").read_text())
    path = write(tmp_path, "[hpcfabric]\ntopology = sub/t.yaml\nstatus_file = status.json\n")
    cfg = load_config(path)
    assert cfg.topology == str(tmp_path / "sub" / "t.yaml")
    assert cfg.status_file == str(tmp_path / "status.json")


def test_defaults_and_inline_comments(tmp_path):
    path = write(tmp_path, base("routing = minimal   ; comment\nwidths =   # none\n"))
    cfg = load_config(path)
    assert cfg.routing == "minimal" and cfg.widths is None and cfg.addressing == "compact"
    assert cfg.lldp_interval == 1.0 and cfg.lldp_timeout == 3.5


def test_default_section_belongs_to_oslo(tmp_path):
    path = write(tmp_path, "[DEFAULT]\nofp_tcp_listen_port = 7000\nwhatever = 1\n" + base())
    assert load_config(path).listen_port == 6653


def test_widths_and_addressing(tmp_path):
    path = write(tmp_path, base("addressing = per-group\nwidths = group=8,switch=4,host=3\n"))
    cfg = load_config(path)
    assert cfg.widths == (("group", 8), ("switch", 4), ("host", 3))
    assert cfg.plan.layout.describe() == "group(8) | switch(4) | host(3)"


def test_validate_config_summary():
    s = validate_config(CONFIGS / "dragonfly-a2-p1-h1.conf")
    cfg = load_config(CONFIGS / "dragonfly-a2-p1-h1.conf")
    compiled = sum(len(cfg.compiled.flows(sw.name)) for sw in cfg.fabric.switches)
    # the compiled entries (classes on by default: top/3, more than the 84 untagged ones) + 4 guard
    # entries per host port (source check pair, metered host punts)
    assert s["switches"] == 6 and s["rules_expected"] == compiled + 4 * 6 and s["routing"] == "conditional"
    assert s["cos"] == "top/3" and compiled > 84
    assert s["flow_control"] == "pfc" and s["deadlock"] == "proven"
    assert s["guards"] == "source_check,punt_meters" and s["fast_failover"] == "off"


def test_rewrite_mode(tmp_path):
    macs = "\n".join(f"g{g}s{s}h0 = 00:16:3e:00:0{g}:0{s}" for g in range(3) for s in range(2))
    path = write(tmp_path, base("host_mac = rewrite\nrouting = conditional\ncos = off\nflow_control = none\n")
                 + "[hosts]\n" + macs + "\n")  # untagged tables: the rewrite entries alone (tagged: test_mac_rewrite_with_cos)
    cfg = load_config(path)
    real = dict(cfg.real_macs)
    assert real["g1s0h0"] == 0x00163E000100
    flows = cfg.desired["g1s0"]
    assert not [f for f in flows if f.match.eth_type == 0x88B5], "no DMP echo in rewrite mode"
    ingress = [f for f in flows if f.table == TABLE_INGRESS and f.rule_class == RuleClass.DMP]
    assert len(ingress) == 1
    (rw,) = ingress
    assert rw.match.in_port == 1 and rw.match.eth_src == (real["g1s0h0"], (1 << 48) - 1)
    assert rw.actions == (SetField("eth_src", cfg.plan.host_mac["g1s0h0"]),) and rw.goto == 1
    deliver = [f for f in flows if Output(1) in f.actions]
    assert deliver and all(f.actions[f.actions.index(Output(1)) - 1] == SetField("eth_dst", real["g1s0h0"]) for f in deliver)
    # everything else is the compiled table
    compiled = cfg.compiled.flows("g1s0")
    assert len(flows) == len(compiled)  # one DMP entry replaced by one rewrite entry


def test_rewrite_flows_is_pure():
    cfg = load_config(CONFIGS / "dragonfly-a2-p1-h1.conf")
    real = {h.name: 0x001600000000 + i for i, h in enumerate(cfg.fabric.hosts)}
    tables = {n: t.flows for n, t in cfg.compiled.tables.items()}
    out = rewrite_flows(cfg.fabric, cfg.plan, tables, real)
    assert out.keys() == tables.keys() and tables == {n: t.flows for n, t in cfg.compiled.tables.items()}


# ---------------------------------------------------------------------------
# errors: (config text, expected field, words in the message)

ERRORS = [
    ("[hpcfabric]\ntopology = {topo}\nrouting = adaptive\n", "hpcfabric.routing", "adaptive"),
    ("[hpcfabric]\ntopology = {topo}\naddresing = compact\n", "hpcfabric.addresing", "did you mean 'addressing'"),
    ("[hpcfabric]\ntopology = {topo}\n[openflw]\n", "openflw", "did you mean 'openflow'"),
    ("[hpcfabric]\ntopology = {topo}\naddressing = compakt\n", "hpcfabric.addressing", "did you mean 'compact'"),
    ("[hpcfabric]\ntopology = {topo}\nwidths = group:8\n", "hpcfabric.widths", "FIELD=BITS"),
    ("[hpcfabric]\ntopology = {topo}\nwidths = group=1,switch=1,host=1\n", "hpcfabric.widths", "needs"),
    ("[hpcfabric]\ntopology = {topo}\nwidths = dim0=3\n", "hpcfabric.widths", "do not exist"),
    ("[hpcfabric]\ntopology = {topo}\nlink_speed_gbps = fast\n", "hpcfabric.link_speed_gbps", "not a number"),
    ("[hpcfabric]\ntopology = {topo}\nlink_speed_gbps = 0\n", "hpcfabric.link_speed_gbps", "out of range"),
    ("[hpcfabric]\ntopology = {topo}\nlink_speed_gbps = nan\n", "hpcfabric.link_speed_gbps", "finite"),
    ("[hpcfabric]\ntopology = {topo}\nlldp_interval = 0\n", "hpcfabric.lldp_interval", "out of range"),
    ("[hpcfabric]\ntopology = {topo}\npause_hold_ms = -1\n", "hpcfabric.pause_hold_ms", "out of range"),
    ("[hpcfabric]\ntopology = {topo}\nlldp_interval = 2\nlldp_timeout = 1\n", "hpcfabric.lldp_timeout", "longer"),
    ("[hpcfabric]\ntopology = {topo}\nlog_level = LOUD\n", "hpcfabric.log_level", "LOUD"),
    ("[hpcfabric]\ntopology = {topo}\nhost_mac = spoof\n", "hpcfabric.host_mac", "spoof"),
    ("[hpcfabric]\ntopology = {topo}\nhost_mac = rewrite\n", "hpcfabric.host_mac", "[hosts]"),
    ("[hpcfabric]\ntopology = {topo}\n[hosts]\ng0s0h0 = 00:16:3e:00:00:01\n", "hosts", "only used with host_mac = rewrite"),
    ("[hpcfabric]\ntopology = {topo}\nhost_mac = rewrite\n[hosts]\ng0s0h0 = 00:16:3e:00:00:01\n", "hosts", "no real MAC for"),
    ("[hpcfabric]\ntopology = {topo}\nhost_mac = rewrite\n[hosts]\ng0s0h9 = 00:16:3e:00:00:01\n", "hosts.g0s0h9", "did you mean 'g0s0h0'"),
    ("[hpcfabric]\ntopology = {topo}\nhost_mac = rewrite\n[hosts]\ng0s0h0 = 01:00:5e:00:00:01\n", "hosts.g0s0h0", "multicast"),
    ("[hpcfabric]\ntopology = {topo}\nhost_mac = rewrite\n[hosts]\ng0s0h0 = zz:00\n", "hosts.g0s0h0", "malformed MAC"),
    ("[hpcfabric]\ntopology = {topo}\n[openflow]\nlisten_port = 70000\n", "openflow.listen_port", "out of range"),
    ("[hpcfabric]\ntopology = {topo}\n[openflow]\nlisten_port = http\n", "openflow.listen_port", "not an integer"),
    ("[hpcfabric]\ntopology = {topo}\n[openflow]\nbundles = maybe\n", "openflow.bundles", "maybe"),
    ("[hpcfabric]\ntopology = {topo}\n[openflow]\nlisten_host = a b\n", "openflow.listen_host", "not a host"),
    ("[hpcfabric]\ntopology = {topo}\nrouting = minimal\nrouting = conditional\n", "hpcfabric.routing", "appears twice"),
    ("[hpcfabric]\ntopology = {topo}\n[hpcfabric]\n", "hpcfabric", "appears twice"),
    ("[openflow]\nlisten_port = 6653\n", "hpcfabric", "missing section [hpcfabric]"),
    ("[hpcfabric]\nrouting = minimal\n", "hpcfabric.topology", "missing"),
    ("[hpcfabric]\ntopology = nowhere.yaml\n", "hpcfabric.topology", "does not exist"),
    ("[hpcfabric]\ntopology = {topo}\nstatus_file = nodir/status.json\n", "hpcfabric.status_file", "does not exist"),
    ("[hpcfabric]\ntopology = {topo}\nrouting = valiant\ncos = sideways\n", "hpcfabric.cos", "'sideways' is not one of"),
    ("[hpcfabric]\ntopology = {topo}\nrouting = valiant\ncos = of\n", "hpcfabric.cos", "did you mean 'off'"),
    ("[hpcfabric]\ntopology = {topo}\nrouting = valiant\ncos_levels = 9\n", "hpcfabric.cos_levels", "out of range 1..8"),
    ("[hpcfabric]\ntopology = {topo}\nrouting = valiant\ncos_levels = two\n", "hpcfabric.cos_levels", "not an integer"),
    ("[hpcfabric]\ntopology = {topo}\nrouting = valiant\ncos = off\ncos_levels = 2\n", "hpcfabric.cos_levels",
     "needs classes of service"),
    ("[hpcfabric]\ntopology = {topo}\ncos = off\ncos_levels = 2\n", "hpcfabric.cos_levels", "(cos is off)"),
    ("[hpcfabric]\ntopology = {topo}\nflow_control = 8021qbb\n", "hpcfabric.flow_control", "pfc"),
    ("[hpcfabric]\ntopology = {topo}\nrouting = valiant\npause_reaction = switch\n", "hpcfabric.pause_reaction",
     "needs routing = conditional"),
]


@pytest.mark.parametrize("text,field,words", ERRORS, ids=[e[1] + ":" + e[2][:14] for e in ERRORS])
def test_config_errors(tmp_path, text, field, words):
    path = write(tmp_path, text.format(topo=TOPO / "dragonfly-a2-p1-h1.yaml"))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    err = info.value
    assert err.source == str(path) and err.field == field
    assert str(path) in str(err) and f"{field}:" in str(err)
    assert words in str(err)
    assert err.exit_code == 2


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "none.conf")
    assert info.value.source == str(tmp_path / "none.conf") and "no such config file" in str(info.value)
    assert info.value.exit_code == 2


def test_not_ini(tmp_path):
    path = write(tmp_path, "topology = x.yaml\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(path) in str(info.value) and "line 1" in str(info.value) and info.value.exit_code == 2


def test_conditional_routing_on_explicit_fabric_fails_at_load(tmp_path):
    path = write(tmp_path, base("routing = conditional\n", topo="explicit-ring4.yaml"))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.source == str(path) and info.value.field == "hpcfabric.routing"
    assert "conditional routing is implemented for" in str(info.value) and info.value.exit_code == 2


def test_topology_errors_keep_their_own_source(tmp_path):
    topo = tmp_path / "bad.yaml"
    topo.write_text("kind: dragonfly\na: 2\np: 1\nh: x\n")
    path = write(tmp_path, f"[hpcfabric]\ntopology = {topo}\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.source == str(topo) and info.value.field == "h" and info.value.exit_code == 2


def test_widths_from_topology_file_are_reported_against_it(tmp_path):
    topo = tmp_path / "t.yaml"
    topo.write_text("kind: dragonfly\na: 2\np: 1\nh: 1\naddressing:\n  mode: compact\n  widths: {group: 1}\n")
    path = write(tmp_path, f"[hpcfabric]\ntopology = {topo}\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.source == str(topo) and "group" in info.value.field


def test_cli_controller_bad_config_exits_2(tmp_path, capsys):
    from hpcfabric.cli import main

    path = write(tmp_path, base("routing = sideways\n"))
    assert main(["controller", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "hpcfabric.routing" in err and "Traceback" not in err


def test_fast_failover_config_errors(tmp_path):
    for body, field, words in [
        (base("[failover]\nfast_failover = on\n"), "failover.fast_failover", "no fabric port"),
        (base("[failover]\nfast_failover = on\nrecompute = off\n", topo="fb-2d-3x3.yaml"),
         "failover.fast_failover", "needs recompute = on"),
    ]:
        with pytest.raises(ConfigError) as exc:
            load_config(write(tmp_path, body))
        assert exc.value.field == field and words in str(exc.value), str(exc.value)
    cfg = load_config(write(tmp_path, base("[failover]\nfast_failover = on\n", topo="fb-2d-3x3.yaml")))
    assert cfg.summary()["ff_groups"] == 36


# ---------------------------------------------------------------------------
# routing policies and classes of service


def _tag_prerequisites_hold(flows) -> list:
    """Entries OVS would refuse (OFPBMC_BAD_PREREQ / OFPBAC_MATCH_INCONSISTENT): a vlan_pcp match without a
    vlan_vid that requires the tag, set_field vlan_pcp or pop_vlan with neither such a match nor a push before."""
    from hpcfabric.rules.flows import OFPVID_PRESENT, PopVlan, PushVlan

    bad = []
    for f in flows:
        m = f.match
        tagged = m.vlan_vid is not None and m.vlan_vid[1] & OFPVID_PRESENT and m.vlan_vid[0] & OFPVID_PRESENT
        if m.vlan_pcp is not None and not tagged:
            bad.append(f)
            continue
        for a in f.actions:
            if isinstance(a, PushVlan):
                tagged = True
            elif isinstance(a, PopVlan) or (isinstance(a, SetField) and a.field == "vlan_pcp"):
                if not tagged:
                    bad.append(f)
                    break
                if isinstance(a, PopVlan):
                    tagged = False
    return bad


def _walk_all_pairs(cfg) -> tuple[int, list[str]]:
    """Every host pair through the installed tables (reference pipeline, groups included): delivered
    untagged to the right host (with its real MAC in rewrite mode), never sent back out of its ingress port."""
    from hpcfabric.verify.reference.pipeline import Frame, Pipeline

    pipes = {n: Pipeline(f, cfg.groups.get(n, ())) for n, f in cfg.desired.items()}
    real = dict(cfg.real_macs)
    fails, pairs = [], 0
    for s in cfg.fabric.hosts:
        for d in cfg.fabric.hosts:
            if s is d:
                continue
            pairs += 1
            sw = s.switch
            fr = Frame(in_port=s.port, eth_src=real.get(s.name, cfg.plan.host_mac[s.name]), eth_dst=cfg.plan.host_mac[d.name])
            for _ in range(len(cfg.fabric.switches) + 1):
                res = pipes[sw].process(fr)
                if len(res.outputs) != 1 or res.outputs[0][0] == fr.in_port:
                    fails.append(f"{s.name}->{d.name} at {sw}: {res.ports}")
                    break
                port, out = res.outputs[0]
                peer = cfg.fabric.peer(sw, port)
                if peer.is_host:
                    if peer.node != d.name or out.vlan_pcp is not None or out.eth_dst != real.get(d.name, out.eth_dst):
                        fails.append(f"{s.name}->{d.name}: reached {peer.node} pcp {out.vlan_pcp}")
                    break
                sw, fr = peer.node, Frame(in_port=peer.port, eth_src=out.eth_src, eth_dst=out.eth_dst,
                                          vlan_pcp=out.vlan_pcp)
            else:
                fails.append(f"{s.name}->{d.name}: loop")
    return pairs, fails


GUARDS = "[guards]\nsource_check = on\npunt_meters = on\n"
REWRITE_HOSTS = "[hosts]\n" + "\n".join(f"g{g}s{s}h0 = 00:16:3e:00:0{g}:0{s}" for g in range(3) for s in range(2))


@pytest.mark.parametrize("topo,extra,sections,cos", [
    ("dragonfly-a2-p1-h1.yaml", "routing = valiant", GUARDS, "top/3"),
    ("dragonfly-a2-p1-h1.yaml", "routing = conditional\ncos = on", GUARDS, "top/3"),
    ("dragonfly-a2-p1-h1.yaml", "routing = conditional\ncos = hop\ncos_levels = 4", GUARDS, "hop/4"),
    ("dragonfly-a2-p1-h1.yaml", "routing = conditional\ncos = on\nhost_mac = rewrite", GUARDS + REWRITE_HOSTS, "top/3"),
    ("dragonfly-a2-p1-h1.yaml", "routing = conditional\ncos = on\npause_reaction = switch", GUARDS, "top/3"),
    ("dragonfly-a2-p1-h1.yaml", "routing = conditional\ncos = on\ncnm = on", GUARDS, "top/3"),
    ("dragonfly-a2-p1-h1.yaml", "routing = minimal\ncos = on", "", "top/2"),
    ("fb-2d-3x3.yaml", "routing = conditional\ncos = on", GUARDS + "[failover]\nfast_failover = on\n", "hop/2"),
    ("fat-tree-k4.yaml", "routing = conditional\ncos = top\ncos_levels = 2", GUARDS, "top/2"),
])
def test_cos_configs_install_cleanly_and_deliver(tmp_path, topo, extra, sections, cos):
    cfg = load_config(write(tmp_path, f"[hpcfabric]\ntopology = {TOPO / topo}\n{extra}\n{sections}"))
    assert cfg.summary()["cos"] == cos and cfg.compiled.cos is not None
    for name, flows in cfg.desired.items():
        assert not _tag_prerequisites_hold(flows), (name, _tag_prerequisites_hold(flows)[:2])
        # every entry that lets a host's frame into ROUTE tags it (the CoS push, and above it guards/rewrite)
        for f in flows:
            if f.table == TABLE_INGRESS and f.goto is not None and f.match.in_port in cfg.fabric.host_ports(name):
                assert f.actions[:2] == (PushVlan(), SetField("vlan_pcp", 0)), f
    pairs, fails = _walk_all_pairs(cfg)
    assert pairs and not fails, fails[:3]


def test_cos_default_is_the_proven_scheme_and_off_gives_untagged_tables(tmp_path):
    plain = load_config(write(tmp_path, base("routing = conditional\n")))
    on = load_config(write(tmp_path, base("routing = conditional\ncos = on\n"), "on.conf"))
    assert plain.compiled.cos == "top" and plain.compiled.cos_levels == 3 and plain.summary()["cos"] == "top/3"
    assert on.desired == plain.desired
    # cos = off: untagged tables, accepted only where deadlock is not claimed (pause reports, none skips)
    off = load_config(write(tmp_path, base("routing = conditional\ncos = off\nflow_control = none\n"), "off.conf"))
    assert off.compiled.cos is None and off.summary()["cos"] == "off"
    assert not any(f.match.vlan_vid or f.match.vlan_pcp is not None for fl in off.desired.values() for f in fl)
    valiant = load_config(write(tmp_path, base("routing = valiant\ncos = off\nflow_control = pause\n"), "v.conf"))
    assert valiant.compiled.cos is None and valiant.routing == "valiant"
    ft = load_config(write(tmp_path, base("routing = conditional\n", topo="fat-tree-k4.yaml"), "ft.conf"))
    assert ft.compiled.cos is None and ft.deadlock["verdict"] == "proven"  # up*/down*: one class suffices


def test_cos_compile_errors_name_the_key(tmp_path):
    path = write(tmp_path, base("cos = top\n", topo="explicit-ring4.yaml"))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.field == "hpcfabric.cos" and "top-level link kind" in str(info.value)
    path = write(tmp_path, base("routing = valiant\n", topo="fat-tree-k4.yaml"), "ft.conf")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.field == "hpcfabric.routing" and "does not apply to a fat_tree" in str(info.value)


def test_valiant_on_flattened_butterfly_never_sends_a_frame_back_out_of_its_ingress_port(tmp_path):
    """FB Valiant detours only frames for another top-dimension row: from a top-dimension intermediate
    the minimal route fixes the top coordinate first, so a frame for the own row would leave through
    the port it came in on (OpenFlow drops it). Installed tables: every pair delivered, none bounced."""
    from dataclasses import replace

    from hpcfabric.rules.flows import TABLE_PORT_STATE, RuleClass

    cfg = load_config(write(tmp_path, base("routing = valiant\n", topo="fb-2d-3x3.yaml")))
    assert cfg.routing == "valiant" and cfg.compiled.cos is not None
    pairs, fails = _walk_all_pairs(cfg)
    assert pairs == len(cfg.fabric.hosts) * (len(cfg.fabric.hosts) - 1)
    assert not fails, fails[:3]
    # the premise: without the row condition on the Valiant entries, some pairs do bounce
    loose = {
        n: tuple(replace(f, match=replace(f.match, metadata=None))
                 if f.table == TABLE_PORT_STATE and f.rule_class == RuleClass.ALTERNATIVE else f for f in flows)
        for n, flows in cfg.desired.items()
    }
    _, fails = _walk_all_pairs(replace(cfg, desired=loose))
    assert fails and all("at s" in x for x in fails)
