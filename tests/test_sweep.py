"""The incremental single-paused-port sweep (hpcfabric/verify/sweep.py) equals the brute force.

Brute force per scenario (the unpaused fabric and each port paused alone):
``verify(compiled, paused=[port])`` for every host pair and the scenario's own
channel dependency graph from :class:`hpcfabric.verify.lines.DecisionLines` walking every host
pair. The sweep must give the same undelivered counts per kind in every
scenario, the same cyclic verdict per scenario, and the same union graph --
on the shipped small fabrics and on deliberately broken rule sets, so that
neither the destination classes nor the affected-pairs restriction can hide
a failure.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_policies import compiled

from hpcfabric.verify.cdg import check_deadlock_freedom, pausable_ports
from hpcfabric.rules.flows import TABLE_ALTERNATIVE, TABLE_PORT_STATE, TABLE_ROUTE, FlowSpec, Match, Output, RuleClass
from hpcfabric.verify.sweep import brute_force_single_paused, sweep_single_paused
from hpcfabric.verify.allpairs import verify


def assert_same(comp, ports):
    rep = sweep_single_paused(comp, ports, keep=True)
    ref = brute_force_single_paused(comp, ports)
    assert set(rep.per_scenario) == set(ref)
    for name, want in ref.items():
        got = rep.per_scenario[name]
        assert got["undelivered"] == want["undelivered"], name
        assert got["cyclic"] == want["cyclic"], name
    union = set().union(*(v["edges"] for v in ref.values()))
    assert set(rep.edges) == union
    assert rep.dependencies == len(union)
    assert rep.scenarios == len(ref)
    assert rep.failed_scenarios == sum(1 for v in ref.values() if v["undelivered"])
    assert rep.cyclic_scenarios == sum(1 for v in ref.values() if v["cyclic"])
    return rep, ref


CASES = [
    ("dragonfly-a2-p1-h1", "valiant", 1),
    ("dragonfly-a2-p1-h1", "conditional", 1),
    ("dragonfly-a4-p2-h2", "conditional", 30),  # 2 hosts per switch: destination classes
    ("fb-2d-3x3", "conditional", 1),
    ("fb-2d-3x3", "valiant", 2),
    ("fat-tree-k4", "conditional", 8),
]


@pytest.mark.parametrize("name,routing,step", CASES)
def test_sweep_equals_brute_force_on_shipped_fabrics(name, routing, step):
    comp = compiled(name, routing)
    ports = pausable_ports(comp)[::step]
    rep, _ = assert_same(comp, ports)
    assert rep.ok and rep.exact_fallbacks == 0 and rep.split_groups == 0
    cdg = check_deadlock_freedom(comp, ports)
    assert (cdg.acyclic, cdg.failed_scenarios, cdg.dependencies) == (rep.acyclic, rep.failed_scenarios, rep.dependencies)


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
@pytest.mark.parametrize("name,step", [("fb-2d-3x3", 4)])
def test_sweep_equals_brute_force_on_broken_rules(name, step, mutation):
    base = compiled(name, "conditional")
    comp = mutation(base)
    touched = {sw for sw in comp.tables if comp.tables[sw] is not base.tables[sw]}
    every = pausable_ports(comp)
    ports = sorted(set(every[::step]) | {p for p in every if p[0] in touched})
    rep, ref = assert_same(comp, ports)
    assert not rep.ok  # the mutation is seen
    if mutation in (remote_host_entry, swapped_delivery):
        assert rep.split_groups >= 1


def test_a_frame_sent_back_out_of_its_ingress_port_is_dropped():
    """Valiant FB without the row condition: unpaused already, frames for the own row bounce at the
    intermediate; the per-port walks (sweep, CDG) and the scalar pipeline all count them dropped."""
    comp = valiant_without_row_condition(compiled("fb-2d-3x3", "valiant"))
    ports = pausable_ports(comp)[::3]
    rep, ref = assert_same(comp, ports)
    assert not rep.ok and ref[None]["undelivered"].get("dropped", 0) > 0
    scalar = verify(comp, engine="scalar")
    assert scalar.dropped == ref[None]["undelivered"]["dropped"] == verify(comp).dropped
    assert not check_deadlock_freedom(comp, "none").ok


@pytest.mark.parametrize("name", ["dragonfly-a2-p1-h1", "fb-2d-3x3"])
def test_sweep_equals_brute_force_with_a_cyclic_union(name):
    """CoS off: the union has cycles; per-scenario verdicts come from re-walked scenarios."""
    comp = compiled(name, "conditional", cos=False)
    rep, ref = assert_same(comp, pausable_ports(comp))
    assert not rep.acyclic and rep.cycle and rep.rewalked_scenarios >= rep.cyclic_scenarios
    if name == "dragonfly-a2-p1-h1":
        assert rep.cyclic_scenarios == len(ref)  # minimal Dragonfly routing alone needs 2 classes
    else:  # docs/routing.md: every scenario acyclic, the union is not
        assert rep.cyclic_scenarios == 0


def test_minimal_routing_has_nothing_to_pause():
    comp = compiled("fb-2d-4x4", "minimal")
    rep = sweep_single_paused(comp)
    assert rep.scenarios == 1 and rep.paused_ports == 0 and rep.ok
    assert rep.pairs_per_scenario == len(comp.fabric.hosts) * (len(comp.fabric.hosts) - 1)
    assert pausable_ports(comp) == []
