"""Workload-aware routing (issue 20): traffic matrices, the intermediates chosen for them, the
proofs on the tables compiled with them, and the simulator's view (docs/workload.md)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_policies import fabric

from hpcfabric.analysis import workload as wl_analysis
from hpcfabric.errors import CompileError, TopologyError
from hpcfabric.rules.addressing import plan_addresses
from hpcfabric.rules.compiler import compile_fabric
from hpcfabric.rules.flows import Output
from hpcfabric.rules.policies.valiant import static_intermediates, valiant_ports
from hpcfabric.rules.policies.workload import choose_intermediates
from hpcfabric.sim.bounds import saturation_bound
from hpcfabric.sim.tables import Forwarding
from hpcfabric.sim.traffic import Traffic
from hpcfabric.topology.patterns import PatternError
from hpcfabric.topology.traffic import TRAFFIC_PATTERNS, load_traffic, make_matrix, pattern_traffic, write_traffic
from hpcfabric.verify.oracle.allpairs import verify
from hpcfabric.verify.oracle.cdg import check_deadlock_freedom, pausable_ports

FABRICS = ("dragonfly-a2-p1-h1", "dragonfly-a4-p2-h2", "fb-2d-3x3", "fb-2d-4x4")


def _compile(name, routing, traffic=None, intermediates=None):
    f = fabric(name)
    return compile_fabric(f, plan_addresses(f, "compact"), routing=routing, cos=True, traffic=traffic,
                          intermediates=intermediates)


def _flows(comp):
    return {n: t.flows for n, t in comp.tables.items()}


# ---------------------------------------------------------------------------- the matrix


def _switch_level(m, fabric):
    """``m`` between access switches (host entries summed per switch pair)."""
    m.check(fabric)
    if m.level == "switch":
        return m
    names = tuple(sw.name for sw in fabric.access_switches)
    idx = {n: i for i, n in enumerate(names)}
    of_host = np.array([idx[fabric.host(h).switch] for h in m.names], dtype=np.int64)
    return make_matrix(fabric, "switch", names, of_host[m.src], of_host[m.dst], m.weight, m.source)


def test_patterns_roundtrip_through_csv_and_yaml(tmp_path):
    f = fabric("dragonfly-a4-p2-h2")
    for name in TRAFFIC_PATTERNS:
        m = pattern_traffic(f, name)
        assert len(m) > 0 and (m.weight > 0).all()
        for ext in ("csv", "yaml"):
            path = tmp_path / f"{name}.{ext}"
            write_traffic(m, str(path))
            back = load_traffic(str(path), f)
            assert back.same(m), (name, ext)


def test_pattern_contents():
    f = fabric("dragonfly-a4-p2-h2")  # 9 groups of 8 hosts
    st = pattern_traffic(f, "stencil")
    hosts = f.hosts
    group = {h.name: f.switch(h.switch).group for h in hosts}
    # every host: 4 neighbours, two of them (x +- 1) in the adjacent groups
    for i in range(len(hosts)):
        dsts = [st.names[d] for d in st.dst[st.src == i]]
        assert len(dsts) == 4
        g = group[hosts[i].name]
        assert sorted((group[d] - g) % 9 for d in dsts) == [0, 0, 1, 8]
    tr = pattern_traffic(f, "transpose")  # 8 x 8 ranks: (x, y) -> (y, x)
    pairs = set(zip(tr.src.tolist(), tr.dst.tolist()))
    assert (1, 8) in pairs and (8, 1) in pairs and len(pairs) == 64 - 8
    adv = _switch_level(pattern_traffic(f, "adv"), f)
    for a, b, _ in adv.entries():
        assert f.switch(b).group == (f.switch(a).group + 1) % 9
    with pytest.raises(PatternError, match="unknown traffic pattern"):
        pattern_traffic(f, "nope")


def test_switch_level_rows_spread_over_hosts():
    f = fabric("dragonfly-a4-p2-h2")
    m = pattern_traffic(f, "adversarial")
    rate, off, dsts, prob = m.host_rows(f)
    assert np.allclose(rate, 1.0)
    g1 = {i for i, h in enumerate(f.hosts) if f.switch(h.switch).group == 1}
    row = dsts[off[0]:off[1]]
    assert set(row.tolist()) == g1 and np.allclose(prob[off[0]:off[1]], 1 / len(g1))


@pytest.mark.parametrize("text,where,what", [
    ("g0s0h0,g1s0h0,1\ng0s0h0,nobody,2\n", "row 2, dst", "not in the fabric"),
    ("src,dst,weight\ng0s0h0,g1s0h0,-1\n", "row 2, weight", "not a positive number"),
    ("g0s0h0,g1s0h0,abc\n", "row 1, weight", "not a positive number"),
    ("# comment\ng0s0h0,g1s0h0\n", "row 2", "expected 3 comma-separated fields"),
    ("g0s0h0,g1s0h0,1\ng0s0,g1s0,1\n", "row 2, src", "use one level per file"),
    ("g0s0h0,g0s0h0,1\n", "row 1, dst", "sends to itself"),
    ("# nothing\n", None, "no traffic entry"),
])
def test_csv_errors_name_file_row_and_field(tmp_path, text, where, what):
    f = fabric("dragonfly-a4-p2-h2")
    path = tmp_path / "t.csv"
    path.write_text(text)
    with pytest.raises(TopologyError) as err:
        load_traffic(str(path), f)
    msg = str(err.value)
    assert msg.startswith(str(path)) and what in msg, msg
    if where:
        assert f": {where}: " in msg, msg
    assert err.value.exit_code == 2


@pytest.mark.parametrize("text,field,what", [
    ("format: other\nentries: []\n", "format", "hpcfabric-traffic/1"),
    ("format: hpcfabric-traffic/1\nfabric: x\nentries: []\n", "fabric", "the topology is"),
    ("format: hpcfabric-traffic/1\nentries: [{dst: g0s0h0}]\n", "entries[0]", "missing src"),
    ("format: hpcfabric-traffic/1\nentries: [{src: g0s0h0, dst: g1s0h0, weight: 0}]\n", "entries[0], weight", "positive"),
    ("format: hpcfabric-traffic/1\nentries: [[g0s0h0, g1s0h0]]\n", "entries[0]", "expected {src"),
    ("format: hpcfabric-traffic/1\nbogus: 1\nentries: []\n", "bogus", "unknown key"),
])
def test_yaml_errors_name_file_entry_and_field(tmp_path, text, field, what):
    path = tmp_path / "t.yaml"
    path.write_text(text)
    with pytest.raises(TopologyError) as err:
        load_traffic(str(path), fabric("dragonfly-a4-p2-h2"))
    assert str(err.value).startswith(f"{path}: {field}: ") and what in str(err.value), str(err.value)


def test_missing_file_and_other_fabric(tmp_path):
    with pytest.raises(TopologyError, match="no such traffic matrix file"):
        load_traffic(str(tmp_path / "none.csv"), fabric("dragonfly-a4-p2-h2"))
    m = pattern_traffic(fabric("dragonfly-a4-p2-h2"), "transpose")
    with pytest.raises(TopologyError, match="not a host"):
        m.check(fabric("dragonfly-a2-p1-h1"))


# ---------------------------------------------------------------------------- the policy

@pytest.mark.parametrize("name", FABRICS)
@pytest.mark.parametrize("routing", ["valiant", "conditional"])
def test_no_traffic_and_the_static_choice_give_todays_tables(name, routing):
    f = fabric(name)
    base = _compile(name, routing)
    assert base.intermediates == {}
    static = {sw.name: {h.port: static_intermediates(valiant_ports(f, sw), h.index) for h in f.hosts_on(sw.name)}
              for sw in f.access_switches if valiant_ports(f, sw)}
    assert _flows(_compile(name, routing, intermediates=static)) == _flows(base)


@pytest.mark.parametrize("name", FABRICS)
@pytest.mark.parametrize("routing", ["valiant", "conditional"])
@pytest.mark.parametrize("pattern", ["adversarial", "stencil", "transpose"])
def test_traffic_chosen_tables_deliver_and_are_deadlock_free_under_every_single_pause(name, routing, pattern):
    f = fabric(name)
    m = pattern_traffic(f, pattern)
    choice = choose_intermediates(f, m, routing)
    assert choice.chosen_max <= choice.static_max + 1e-9  # the model never rates it worse than static
    comp = _compile(name, routing, intermediates=choice.intermediates)
    base = _compile(name, routing)
    # same rule budget, same classes of service
    assert {n: len(t.flows) for n, t in comp.tables.items()} == {n: len(t.flows) for n, t in base.tables.items()}
    assert (comp.cos, comp.cos_levels) == (base.cos, base.cos_levels)
    for sw in f.access_switches:
        ports = set(valiant_ports(f, sw))
        for h in f.hosts_on(sw.name):
            chosen = comp.intermediates[sw.name][h.port]
            assert set(chosen) <= ports and len(set(chosen)) == len(chosen)
    r = verify(comp)
    assert r.ok and r.overlaps == 0, r.failures[:3]
    rep = check_deadlock_freedom(comp, "single")
    assert rep.acyclic and rep.cycle is None and rep.failed_scenarios == 0, (rep.cycle, rep.scenario_failures[:3])
    assert rep.scenarios == 1 + len(pausable_ports(comp))


def test_detour_entries_output_the_chosen_ports():
    name, routing = "dragonfly-a4-p2-h2", "conditional"
    f = fabric(name)
    choice = choose_intermediates(f, pattern_traffic(f, "transpose"), routing)
    assert choice.moved > 0
    comp = _compile(name, routing, intermediates=choice.intermediates)
    for sw in f.access_switches:
        for h in f.hosts_on(sw.name):
            outs = [fl.actions[0].port for fl in comp.tables[sw.name].flows
                    if fl.match.in_port == h.port and fl.actions and isinstance(fl.actions[0], Output)
                    and fl.actions[0].port in valiant_ports(f, sw)]
            assert outs and set(outs) <= set(choice.intermediates[sw.name][h.port])
            assert choice.intermediates[sw.name][h.port][0] in outs


def test_transpose_static_intermediates_collide_and_the_chosen_ones_do_not():
    """The static choice sends every group's host 0 through the extra group (xor arrangement), whose one
    link to group 0 then carries 7 hosts' transpose traffic; measured on the compiled tables."""
    f = fabric("dragonfly-a4-p2-h2")
    m = pattern_traffic(f, "transpose")
    choice = choose_intermediates(f, m, "valiant")
    assert choice.static_max == 7 and choice.chosen_max <= 3
    tr = Traffic.from_matrix(f, m)
    static, _ = saturation_bound(Forwarding(_compile("dragonfly-a4-p2-h2", "valiant")), tr)
    chosen, _ = saturation_bound(Forwarding(_compile("dragonfly-a4-p2-h2", "valiant", traffic=m)), tr)
    assert math.isclose(static, 1 / 7) and chosen >= 2.5 * static


def test_uniform_keeps_the_static_choice_on_the_dragonfly():
    f = fabric("dragonfly-a4-p2-h2")
    for routing in ("valiant", "conditional"):
        c = choose_intermediates(f, pattern_traffic(f, "uniform"), routing)
        assert c.moved == 0 and c.chosen_max == c.static_max


def test_policy_refuses_fabrics_without_valiant_ports():
    f = fabric("fat-tree-k4")
    with pytest.raises(CompileError, match="Dragonfly and Flattened Butterfly"):
        choose_intermediates(f, pattern_traffic(f, "transpose"))
    # the compiler ignores a matrix where no policy uses it (minimal; fat-tree conditional)
    plan = plan_addresses(f, "compact")
    assert compile_fabric(f, plan, routing="conditional", traffic=pattern_traffic(f, "transpose")).intermediates == {}


# ---------------------------------------------------------------------------- the simulator

def test_matrix_traffic_draws_destinations_by_weight(tmp_path):
    f = fabric("dragonfly-a4-p2-h2")
    path = tmp_path / "t.csv"
    path.write_text("g0s0h0,g1s0h0,3\ng0s0h0,g2s0h0,1\ng0s0h1,g3s0h0,2\n")
    tr = Traffic.from_matrix(f, load_traffic(str(path), f))
    hid = {h.name: i for i, h in enumerate(f.hosts)}
    assert tr.rate[hid["g0s0h0"]] == 1.0 and tr.rate[hid["g0s0h1"]] == 0.5 and tr.rate[hid["g5s0h0"]] == 0.0
    d = tr.sample(np.full(40000, hid["g0s0h0"]), np.random.default_rng(1))
    share = (d == hid["g1s0h0"]).mean()
    assert set(d.tolist()) == {hid["g1s0h0"], hid["g2s0h0"]} and abs(share - 0.75) < 0.01
    assert set(tr.sample(np.full(100, hid["g0s0h1"]), np.random.default_rng(2)).tolist()) == {hid["g3s0h0"]}


def test_analyze_workload_runs_the_routers_on_the_matrix(tmp_path):
    f = fabric("dragonfly-a4-p2-h2")
    res, paths = wl_analysis.run(f, tmp_path, quick=True, routers=["VAL", "VAL+WA", "COND-ideal+WA"],
                                 patterns=["transpose"], loads={"transpose": (0.1,)}, plots=False)
    assert [p.name for p in paths] == ["workload.csv", "workload.json"] and all(p.exists() for p in paths)
    pts = {r["router"]: r for r in res["points"]}
    assert set(pts) == {"VAL", "VAL+WA", "COND-ideal+WA"}
    for r in pts.values():
        assert r["lost"] == 0 and r["conserved"] and not r["deadlock"]
        assert abs(r["accepted"] - 0.1) < 0.03
    assert res["bounds"]["VAL+WA/transpose"]["saturation"] > res["bounds"]["VAL/transpose"]["saturation"]


def test_spread_placement_puts_one_rank_on_every_access_switch():
    f = fabric("dragonfly-a4-p2-h2")  # 36 switches: 6 x 6 transpose over their first hosts
    m = pattern_traffic(f, "transpose", placement="spread")
    senders = {m.names[i] for i in m.src.tolist()} | {m.names[i] for i in m.dst.tolist()}
    assert all(f.host(h).index == 0 for h in senders) and len(senders) == 30  # the diagonal sends nothing
    st = pattern_traffic(f, "stencil", placement="spread")  # rows of 4 switches = one group each
    group = {h.name: f.switch(h.switch).group for h in f.hosts}
    for a, b, _ in st.entries():
        assert (group[b] - group[a]) % 9 in (0, 1, 8)
    with pytest.raises(PatternError, match="unknown placement"):
        pattern_traffic(f, "transpose", placement="random")


def test_cli_analyze_workload_refuses_an_unknown_pattern(capsys):
    from hpcfabric.cli import main

    code = main(["analyze", "workload", "topologies/dragonfly-a4-p2-h2.yaml", "--patterns", "adversarial:spread"])
    err = capsys.readouterr().err
    assert code == 2 and "--patterns" in err and "unknown pattern 'adversarial:spread'" in err and "Traceback" not in err
