"""The union proof (hpcfabric/verify/union/proof.py) agrees with the brute-force CDG oracle (hpcfabric/verify/oracle/cdg.py).

The oracle walks every host pair in every scenario (the unpaused fabric and each port paused alone) and
builds the union channel dependency graph; its per-scenario delivery is checked against the all-pairs
verifier with that port paused (``verify(compiled, paused=[port])``). The proof covers any set of paused
ports: where the oracle passes, it must pass with a dependency graph containing the oracle's; on the
shipped small fabrics and on deliberately broken rule sets (destination classes must split, a
failure must never hide) the verdicts must agree, also with a cyclic union (CoS off).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_policies import compiled

from hpcfabric.rules.flows import TABLE_ALTERNATIVE, TABLE_PORT_STATE, TABLE_ROUTE, FlowSpec, Match, Output, RuleClass
from hpcfabric.verify.oracle.allpairs import verify
from hpcfabric.verify.oracle.cdg import check_deadlock_freedom, pausable_ports
from hpcfabric.verify.union.proof import prove


def assert_oracle_is_brute_force(comp, ports, oracle):
    """The oracle's failed scenarios are those where the verifier, that port paused, leaves a host pair
    undelivered (a scenario counts the pairs its pause changes: with the unpaused fabric failing, the others
    that fail only as it does are not counted again)."""
    failing = [p for p in ports if undelivered(comp, [p])]
    if undelivered(comp, []):
        assert 1 <= oracle.failed_scenarios <= 1 + len(failing) and len(failing) == len(ports)
    else:
        assert oracle.failed_scenarios == len(failing)
    assert oracle.scenarios == 1 + len(ports)
    return failing


def undelivered(comp, paused):
    rep = verify(comp, paused)
    return rep.delivered < rep.pairs


CASES = [
    ("dragonfly-a2-p1-h1", "valiant", 1),
    ("dragonfly-a2-p1-h1", "conditional", 1),
    ("dragonfly-a4-p2-h2", "conditional", 30),  # 2 hosts per switch: destination classes
    ("fb-2d-3x3", "conditional", 1),
    ("fb-2d-3x3", "valiant", 2),
    ("fat-tree-k4", "conditional", 8),
]


@pytest.mark.parametrize("name,routing,step", CASES)
def test_proof_agrees_with_the_oracle_on_shipped_fabrics(name, routing, step):
    comp = compiled(name, routing)
    ports = pausable_ports(comp)[::step]
    oracle = check_deadlock_freedom(comp, ports, keep=True)
    assert_oracle_is_brute_force(comp, ports, oracle)
    rep = prove(comp, keep=True)
    assert rep.ok and oracle.ok and rep.split_groups == 0
    assert rep.edges >= oracle.edges  # any set of paused ports covers every single one
    assert oracle.dependencies == len(oracle.edges)


# ---------------------------------------------------------------------------
# broken rule sets


def _mutate(comp, switch, fn):
    table = comp.tables[switch]
    return replace(comp, tables={**comp.tables, switch: replace(table, flows=tuple(fn(list(table.flows))))})


def _first(flows, pred):
    return next(i for i, f in enumerate(flows) if pred(f))


def valiant_to_a_host(comp):
    """A Valiant alternative outputs to a host port: wrong only while some port is paused."""
    sw = comp.fabric.access_switches[1].name
    host_port = sorted(comp.fabric.host_ports(sw))[-1]

    def fn(flows):
        i = _first(flows, lambda f: f.table == TABLE_ALTERNATIVE and f.rule_class == RuleClass.ALTERNATIVE
                   and f.match.in_port is not None)
        flows[i] = replace(flows[i], actions=(Output(host_port),))
        return flows

    return _mutate(comp, sw, fn)


def fallback_drops(comp):
    """The ALTERNATIVE fallback of one port drops: transit frames die while it is paused."""
    sw = comp.fabric.switches[2].name

    def fn(flows):
        i = _first(flows, lambda f: f.table == TABLE_ALTERNATIVE and f.rule_class == RuleClass.PORT_STATE)
        flows[i] = replace(flows[i], actions=())
        return flows

    return _mutate(comp, sw, fn)


def fallback_bounces(comp):
    """The fallback of one port sends frames back where they came from (loops, misdeliveries)."""
    sw = comp.fabric.switches[3].name
    ports = sorted(comp.fabric.fabric_ports(sw))

    def fn(flows):
        for i, f in enumerate(flows):
            if f.table == TABLE_ALTERNATIVE and f.rule_class == RuleClass.PORT_STATE:
                p = f.match.metadata[0]
                flows[i] = replace(f, actions=(Output(ports[(ports.index(p) + 1) % len(ports)]),))
        return flows

    return _mutate(comp, sw, fn)


def remote_host_entry(comp):
    """A switch routes one remote host (exact address) elsewhere: its switch's hosts are no
    longer alike (destination classes must split)."""
    f = comp.fabric
    target = f.hosts_on(f.access_switches[-1].name)[-1]
    sw = f.access_switches[0].name
    mac = comp.plan.host_mac[target.name]
    wrong = sorted(f.host_ports(sw))[0]  # misdelivered to a host of another switch
    bad = FlowSpec(TABLE_ROUTE, 1900, Match(eth_dst=(mac, (1 << 48) - 1)), (Output(wrong),), 0)
    return _mutate(comp, sw, lambda flows: flows + [bad])


def swapped_delivery(comp):
    """Two hosts' delivery ports swapped at their switch (not alike at their own switch)."""
    f = comp.fabric
    sw = f.access_switches[0].name
    a, b = sorted(f.host_ports(sw))[:2]

    def fn(flows):
        out = []
        for fl in flows:
            acts = tuple(
                Output(b if x.port == a else a) if isinstance(x, Output) and x.port in (a, b) and fl.table != 0 else x
                for x in fl.actions
            )
            out.append(replace(fl, actions=acts))
        return out

    return _mutate(comp, sw, fn)


def valiant_without_row_condition(comp):
    """FB Valiant entries without their metadata (row) condition: a frame for the own top-dimension
    row comes straight back to the intermediate's ingress port, which a switch drops (docs/routing.md)."""
    def loose(f):
        if f.table == TABLE_PORT_STATE and f.rule_class == RuleClass.ALTERNATIVE and f.match.metadata is not None:
            return replace(f, match=replace(f.match, metadata=None))
        return f

    return replace(comp, tables={n: replace(t, flows=tuple(map(loose, t.flows))) for n, t in comp.tables.items()})


MUTATIONS = [valiant_to_a_host, fallback_drops, fallback_bounces, remote_host_entry, swapped_delivery]


@pytest.mark.parametrize("mutation", MUTATIONS, ids=lambda m: m.__name__)
def test_proof_and_oracle_fail_on_broken_rules(mutation):
    base = compiled("fb-2d-3x3", "conditional")
    comp = mutation(base)
    rep = prove(comp, fallback="cdg")
    assert not rep.ok  # the mutation is seen
    oracle = check_deadlock_freedom(comp)
    assert not oracle.ok and rep.fallback["report"] == {**oracle.as_dict(), "seconds": rep.fallback["report"]["seconds"]}
    failing = assert_oracle_is_brute_force(comp, pausable_ports(comp), oracle)
    assert rep.fallback["verdict"].startswith("fails also")
    if not failing and not undelivered(comp, []):  # delivered in every single scenario: the oracle's cycle is the proof's
        assert not oracle.acyclic and not rep.acyclic
    if mutation in (remote_host_entry, swapped_delivery):
        assert rep.split_groups >= 1  # the switch's hosts are no longer one column


def test_a_frame_sent_back_out_of_its_ingress_port_is_dropped():
    """Valiant FB without the row condition: unpaused already, frames for the own row bounce at the
    intermediate; the per-port walks (proof, CDG oracle) and the scalar pipeline all count them dropped."""
    comp = valiant_without_row_condition(compiled("fb-2d-3x3", "valiant"))
    ports = pausable_ports(comp)[::3]
    oracle = check_deadlock_freedom(comp, ports)
    assert_oracle_is_brute_force(comp, ports, oracle)
    unpaused = next(f for f in oracle.scenario_failures if f["paused"] is None)
    rep = prove(comp)
    assert not rep.ok and not oracle.ok and unpaused["undelivered"].get("dropped", 0) > 0
    scalar = verify(comp, engine="scalar")
    assert scalar.dropped == unpaused["undelivered"]["dropped"] == verify(comp).dropped
    assert rep.undelivered.get("dropped", 0) > 0
    assert not check_deadlock_freedom(comp, "none").ok


@pytest.mark.parametrize("name", ["dragonfly-a2-p1-h1", "fb-2d-3x3"])
def test_proof_agrees_with_the_oracle_on_a_cyclic_union(name):
    """CoS off: the union has cycles; the oracle re-walks scenarios for their own verdicts."""
    comp = compiled(name, "conditional", cos=False)
    rep = prove(comp, fallback="cdg", keep=True)
    oracle = rep.fallback["report"]
    assert not rep.acyclic and rep.cycle and not oracle["cdg_acyclic"] and oracle["cdg_cycle"]
    assert rep.fallback["verdict"].startswith("fails also")
    full = check_deadlock_freedom(comp, keep=True)
    assert rep.edges >= full.edges and full.cyclic_scenarios == oracle["cyclic_scenarios"]
    if name == "dragonfly-a2-p1-h1":
        assert oracle["cyclic_scenarios"] == oracle["scenarios"]  # minimal Dragonfly routing alone needs 2 classes
    else:  # docs/routing.md: every scenario acyclic, the union is not
        assert oracle["cyclic_scenarios"] == 0


def test_minimal_routing_has_nothing_to_pause():
    comp = compiled("fb-2d-4x4", "minimal")
    oracle = check_deadlock_freedom(comp)
    assert oracle.scenarios == 1 and oracle.paused_ports == () and oracle.ok
    assert oracle.pairs_per_scenario == len(comp.fabric.hosts) * (len(comp.fabric.hosts) - 1)
    assert pausable_ports(comp) == []
    rep = prove(comp)
    assert rep.ok and rep.pausable_ports == 0 and rep.paused_choices == 0
