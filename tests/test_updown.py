"""The up*/down* proof (hpcfabric/verify/updown.py) agrees with the brute force.

Where the local invariant holds, the brute-force CDG oracle (every host pair, the
unpaused fabric and every port paused alone, union channel dependency graph)
must find every pair delivered and the graph acyclic; and every broken rule
set below must fail the proof *and* be really broken (the brute force or the
verifier finds the fault), so the proof neither passes broken tables nor
blames a detail that does not matter.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from test_policies import TOPOLOGIES, compiled, fabric

from hpcfabric.verify.oracle.cdg import check_deadlock_freedom, pausable_ports
from hpcfabric.cli import main
from hpcfabric.errors import VerificationError
from hpcfabric.rules.flows import TABLE_ALTERNATIVE, TABLE_ROUTE, FlowSpec, Match, Output, RuleClass
from hpcfabric.verify.updown import check_up_down
from hpcfabric.verify.oracle.allpairs import apply_paused, verify

UPDOWN = ["fat-tree-k4", "clos-4stage-small"]


@pytest.mark.parametrize("name", UPDOWN)
@pytest.mark.parametrize("routing", ["minimal", "conditional"])
@pytest.mark.parametrize("mode,cos", [("compact", False), ("compact", True), ("per-group", "hop"), ("flat", False)])
def test_proof_holds_and_brute_force_agrees(name, routing, mode, cos):
    comp = compiled(name, routing, mode, cos=cos)
    rep = check_up_down(comp)
    assert rep.ok, rep.failures
    assert rep.pausable_ports == len(pausable_ports(comp))
    assert rep.levels == (3 if name == "fat-tree-k4" else 4) and rep.max_links == 2 * (rep.levels - 1)
    assert rep.probes > 0 and rep.decision_lines > 0
    brute = check_deadlock_freedom(comp, "single")
    assert brute.ok and brute.acyclic and brute.failed_scenarios == 0
    v = verify(comp)
    assert v.ok and v.invalid_probe_failures == 0
    assert v.max_hops - 1 <= rep.max_links  # switches traversed - 1 = links


def test_folded_clos_conditional_rules():
    """Every non-core level: up entries are default rules, one alternative (the next uplink) per uplink."""
    comp = compiled("clos-4stage-small", "conditional", cos=False)
    f = comp.fabric
    half = f.params["radix"] // 2
    for sw in f.switches:
        flows = comp.flows(sw.name)
        ups = [x for x in flows if x.table == TABLE_ROUTE and x.match.in_port is not None]
        alts = [x for x in flows if x.table == TABLE_ALTERNATIVE and x.rule_class == RuleClass.ALTERNATIVE]
        if sw.role == "core":
            assert not ups and not alts
            continue
        assert len(ups) == half and all(not x.actions and x.write_metadata[0] > half for x in ups)
        uplinks = {p for p in f.fabric_ports(sw.name) if p > half}
        assert {a.match.metadata[0] for a in alts} == uplinks
        assert all(a.actions[0].port in uplinks - {a.match.metadata[0]} for a in alts)
    # an edge switch's uplink paused: that host's frames leave on the next uplink, all still delivered
    edge = f.access_switches[0].name
    paused, applied = apply_paused(comp, [(edge, half + 1)])
    assert applied == [(edge, half + 1)]
    assert verify(paused).ok


# ---------------------------------------------------------------------------
# broken rule sets: the proof fails, and the fault is real


def _mutate(comp, switch, fn):
    table = comp.tables[switch]
    return replace(comp, tables={**comp.tables, switch: replace(table, flows=tuple(fn(list(table.flows))))})


def alternative_to_a_host(comp):
    """An edge switch's alternative uplink is a host port: wrong only while that uplink is paused."""
    f = comp.fabric
    sw = f.access_switches[0].name
    host_port = sorted(f.host_ports(sw))[-1]

    def fn(flows):
        i = next(i for i, x in enumerate(flows) if x.table == TABLE_ALTERNATIVE and x.rule_class == RuleClass.ALTERNATIVE)
        flows[i] = replace(flows[i], actions=(Output(host_port),))
        return flows

    return _mutate(comp, sw, fn), "paused"


def down_to_the_wrong_child(comp):
    """A level-2 switch sends one edge switch's hosts down to another edge switch."""
    f = comp.fabric
    sw = next(s.name for s in f.switches if s.role == "aggregation")

    def fn(flows):
        i = next(i for i, x in enumerate(flows) if x.table == TABLE_ROUTE and x.match.eth_dst is not None
                 and x.actions and x.actions[0].port == 1)
        flows[i] = replace(flows[i], actions=(Output(2),))
        return flows

    return _mutate(comp, sw, fn), "unpaused"


def fallback_goes_down(comp):
    """The fallback of an aggregation uplink sends transit frames down instead of waiting."""
    f = comp.fabric
    sw = next(s.name for s in f.switches if s.role == "aggregation")
    half = f.params.get("radix", f.params.get("k")) // 2

    def fn(flows):
        for i, x in enumerate(flows):
            if x.table == TABLE_ALTERNATIVE and x.rule_class == RuleClass.PORT_STATE and x.match.metadata[0] > half:
                flows[i] = replace(x, actions=(Output(1),))
        return flows

    # take out the next-uplink alternatives too, so that the fallback is used
    comp2 = _mutate(comp, sw, fn)
    return _mutate(comp2, sw, lambda fl: [x for x in fl if not (x.table == TABLE_ALTERNATIVE
                                                                 and x.rule_class == RuleClass.ALTERNATIVE)]), "paused"


def unowned_addresses_loop(comp):
    """What no entry matches circles A -> B1 -> C -> B2 -> A (two core switches A, C and two
    switches B1, B2 below both; lowest priority, so host traffic is untouched): addresses nobody
    owns loop. (No hop sends a frame back out of its ingress port: OpenFlow drops those, and the
    proof's probe graph models that, so a two-switch ping-pong would be no loop.)"""
    f = comp.fabric

    def port(x, y):
        return min(p for p, peer in f.fabric_ports(x).items() if peer.node == y)

    cores = [s.name for s in f.switches if s.role == "core"]
    for a in cores:
        below_a = {peer.node for peer in f.fabric_ports(a).values()}
        for c in cores:
            both = sorted(below_a & {peer.node for peer in f.fabric_ports(c).values()}) if c != a else []
            if len(both) >= 2:
                b1, b2 = both[:2]
                break
        else:
            continue
        break
    rules = {
        a: [FlowSpec(TABLE_ROUTE, 1, Match(), (Output(port(a, b1)),), 0)],
        b1: [FlowSpec(TABLE_ROUTE, 1, Match(in_port=port(b1, a)), (Output(port(b1, c)),), 0)],
        c: [FlowSpec(TABLE_ROUTE, 1, Match(in_port=port(c, b1)), (Output(port(c, b2)),), 0)],
        b2: [FlowSpec(TABLE_ROUTE, 1, Match(in_port=port(b2, c)), (Output(port(b2, a)),), 0)],
    }
    for sw, extra in rules.items():
        comp = _mutate(comp, sw, lambda fl, extra=extra: fl + extra)
    return comp, "probes"


BROKEN = [alternative_to_a_host, down_to_the_wrong_child, fallback_goes_down, unowned_addresses_loop]


@pytest.mark.parametrize("name", UPDOWN)
@pytest.mark.parametrize("breaker", BROKEN, ids=lambda b: b.__name__)
def test_broken_rules_fail_the_proof_and_are_really_broken(name, breaker):
    comp, where = breaker(compiled(name, "conditional", cos=False))
    rep = check_up_down(comp)
    assert not rep.ok and rep.failure_count > 0 and rep.failures
    with pytest.raises(VerificationError, match="up-down proof failed"):
        check_up_down(comp, raise_on_failure=True)
    if where == "probes":
        v = verify(comp)
        assert v.invalid_probe_failures > 0
        assert any("unowned" in m and "loop" in m for m in rep.failures), rep.failures
        return
    brute = check_deadlock_freedom(comp, "single")
    assert not brute.ok
    if where == "unpaused":
        assert not verify(comp).ok
    else:
        assert verify(comp).ok  # only a pause shows it
        assert any("(paused)" in m for m in rep.failures), rep.failures


def test_other_fabrics_are_refused():
    with pytest.raises(VerificationError, match="fat-trees and folded Clos"):
        check_up_down(compiled("dragonfly-a2-p1-h1", "conditional"))


def test_cli_prove_up_down(capsys):
    path = str(TOPOLOGIES / "clos-4stage-small.yaml")
    assert main(["prove", path, "--routing", "conditional", "--up-down"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["ok"] and out["method"].startswith("up-down") and out["switches"] == len(fabric("clos-4stage-small").switches)
    assert main(["prove", str(TOPOLOGIES / "fb-2d-3x3.yaml"), "--up-down"]) == 2
    assert "fat-trees and folded Clos" in capsys.readouterr().err
    assert main(["sweep", path, "--routing", "conditional", "--up-down"]) == 0  # the deprecated alias
    got = capsys.readouterr()
    alias = json.loads(got.out.strip().splitlines()[-1])
    assert {k: v for k, v in alias.items() if k not in ("seconds", "timings")} == \
        {k: v for k, v in out.items() if k not in ("seconds", "timings")}
    assert "'sweep' is deprecated" in got.err


@pytest.mark.parametrize("name", ["fb-3d-4x4x4", "dragonfly-a4-p2-h2"])
def test_destination_classes_decide_alike(name):
    """The classes the up/down proof decides one representative of (``MatchClasses`` of the switch's entries,
    installed and flipped) are sound: every host of a class gets the same decision in every row of the switch,
    unpaused and with PORT_STATE flipped."""
    import numpy as np

    from hpcfabric.verify.codes import UNTAGGED
    from hpcfabric.verify.engine import Destinations as _Dst, Row as _Row, data_flows, data_relevant as _relevant
    from hpcfabric.verify.engine.batch import switch_classes
    from hpcfabric.verify.engine import evaluate as _evaluate
    from hpcfabric.verify.scenarios import flip_port_states as _flipped
    from hpcfabric.verify.updown import arrival_pcps as _pcp_values

    comp = compiled(name, "conditional")
    fab = comp.fabric
    macs = np.array([comp.plan.host_mac[h.name] for h in fab.hosts], dtype=np.uint64)
    dst = _Dst(macs)
    relevant = {s.name: [f for f in data_flows(comp.tables[s.name].flows) if _relevant(f)] for s in fab.switches}
    pcps = _pcp_values(relevant)
    sizes = []
    for sw in fab.switches[::3]:
        flipped = [f for f in data_flows(_flipped(comp.tables[sw.name].flows)) if _relevant(f)]
        cls, reps = switch_classes([relevant[sw.name], flipped], macs)
        sizes.append(len(reps))
        for p, peer in fab.ports(sw.name).items():
            src = comp.plan.host_mac[peer.node] if peer.is_host else None
            for pcp in [UNTAGGED] if peer.is_host else pcps:
                for flows in (relevant[sw.name], flipped):
                    res = _evaluate(_Row(sw.name, (p,), src, False, pcp).build(flows), dst, track=True)
                    for v in (res.out_n, res.out_port, res.out_pcp, res.punt, res.err, res.ps_port):
                        assert (v == v[reps][cls]).all(), (sw.name, p, pcp)
    assert max(sizes) < len(fab.hosts)  # the classes do reduce
