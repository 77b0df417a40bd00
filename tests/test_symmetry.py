"""Symmetries checked on the compiled rules, and the sweep they reduce (hpcfabric/verify/symmetry.py).

The reduction is only as good as the check: a symmetry is kept when every
switch's pipeline commutes with it, so these tests break single switches and
require either the symmetry to be dropped or the reduced sweep to fail, and
compare the reduced sweep's verdicts with the full sweep on fabrics small
enough for both.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_policies import compiled
from test_sweep import MUTATIONS, _mutate

from hpcfabric.rules.addressing import plan_addresses
from hpcfabric.verify.cdg import pausable_ports
from hpcfabric.rules.compiler import compile_fabric
from hpcfabric.rules.flows import TABLE_ROUTE, Output, RuleClass
from hpcfabric.verify.sweep import sweep_single_paused
from hpcfabric.verify.symmetry import (
    automorphism,
    candidate_generators,
    channel_orbits,
    check_symmetries,
    orbit_representatives,
    symmetric_sweep,
)
from hpcfabric.topology.generators import dragonfly_fabric, flattened_butterfly_fabric


def palmtree_df(routing: str, cos: bool = True):
    fab = dragonfly_fabric(4, 2, 2, 9, arrangement="palmtree")
    return compile_fabric(fab, plan_addresses(fab, "compact", None), routing=routing, cos=cos)


def test_candidates_are_checked_against_the_topology():
    fab = dragonfly_fabric(4, 2, 2, 9, arrangement="palmtree")
    (name, rot), = candidate_generators(fab)
    auto, why = automorphism(fab, name, rot)
    assert why is None and auto.switch["g0s1"] == "g1s1"
    assert all(auto.map_port(s, p) == p for s in ("g0s0", "g3s2") for p in fab.ports(s))  # palmtree: same slots
    swapped = dict(rot, g0s0=rot["g0s1"], g0s1=rot["g0s0"])  # still a bijection, no longer link-preserving
    auto, why = automorphism(fab, "broken", swapped)
    assert auto is None and "no link" in why
    fb = flattened_butterfly_fabric([3, 4], 2)
    names = [n for n, _ in candidate_generators(fb)]
    assert names == ["shift-dim0", "shift-dim1"]
    for n, m in candidate_generators(fb):
        auto, why = automorphism(fb, n, m)
        assert why is None
        for link in fb.links:  # ports follow links, so port numbers change under a shift
            peer = fb.peer(auto.switch[link.a], auto.map_port(link.a, link.a_port))
            assert (peer.node, peer.port) == (auto.switch[link.b], auto.map_port(link.b, link.b_port))


def test_the_rules_decide_which_symmetries_hold():
    comp = compiled("fb-2d-3x3", "minimal")
    rep = check_symmetries(comp)
    assert [a.name for a in rep.kept] == ["shift-dim0", "shift-dim1"] and not rep.dropped
    assert orbit_representatives(comp.fabric, rep.kept) == ["s0_0"]
    # Valiant picks the intermediate by the host's rank among the top-dimension ports: a shift of
    # that dimension changes the choice, and the check names the switch, port and destination
    rep = check_symmetries(compiled("fb-2d-3x3", "valiant"))
    assert [a.name for a in rep.kept] == ["shift-dim0"]
    assert "do not commute" in rep.dropped["shift-dim1"] and "port" in rep.dropped["shift-dim1"]
    rep = check_symmetries(palmtree_df("conditional"))
    assert [a.name for a in rep.kept] == ["rotate-groups"]
    assert orbit_representatives(palmtree_df("conditional").fabric, rep.kept) == [f"g0s{i}" for i in range(4)]


def test_one_changed_entry_drops_the_symmetry():
    comp = compiled("fb-2d-3x3", "minimal")
    sw = "s1_1"
    ports = sorted(comp.fabric.fabric_ports(sw))

    def fn(flows):  # one route leaves by another fabric port (still delivered, differently)
        i = next(i for i, f in enumerate(flows) if f.table == TABLE_ROUTE and f.rule_class == RuleClass.ROUTE)
        old = flows[i].actions[0].port
        flows[i] = replace(flows[i], actions=(Output(ports[(ports.index(old) + 1) % len(ports)]),))
        return flows

    rep = check_symmetries(_mutate(comp, sw, fn))
    assert rep.kept == () and set(rep.dropped) == {"shift-dim0", "shift-dim1"}
    assert all(sw in why for why in rep.dropped.values())


CASES = {
    "df-palmtree-cond": lambda: palmtree_df("conditional"),
    "df-palmtree-valiant": lambda: palmtree_df("valiant"),
    "fb3x3-cond": lambda: compiled("fb-2d-3x3", "conditional"),
    "fb4x4x4-cond": lambda: compiled("fb-3d-4x4x4", "conditional"),
    "df-xor-cond": lambda: compiled("dragonfly-a4-p2-h2", "conditional"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_reduced_sweep_agrees_with_the_full_sweep(case):
    comp = CASES[case]()
    sym = symmetric_sweep(comp)
    full = sweep_single_paused(comp, keep=True)
    assert sym.symmetry.kept, sym.symmetry.dropped
    assert len(sym.representatives) < len(comp.fabric.access_switches)
    assert sym.sweep.scenarios == full.scenarios
    assert (sym.ok, sym.delivered, sym.acyclic) == (full.ok, full.failed_scenarios == 0, full.acyclic) == (True,) * 3
    # the reduced union is part of the full one, and every full edge has an image in the quotient
    assert set(sym.sweep.edges) <= set(full.edges)
    orbit = channel_orbits(comp.fabric, sym.symmetry.kept)

    def q(ch):
        swp, pcp = ch.rsplit("@", 1)
        s, p = swp.rsplit(":", 1)
        return orbit(s, int(p)), pcp

    assert {(q(a), q(b)) for a, b in full.edges} == {(q(a), q(b)) for a, b in sym.sweep.edges}


@pytest.mark.parametrize("mutation", MUTATIONS, ids=lambda m: m.__name__)
def test_broken_rules_are_never_hidden(mutation):
    """Each broken rule set fails the reduced sweep: the symmetry is dropped or the sweep sees it."""
    comp = mutation(compiled("fb-2d-3x3", "conditional"))
    rep = symmetric_sweep(comp)
    assert not rep.ok
    full = sweep_single_paused(comp)
    assert rep.sweep.failed_scenarios <= full.failed_scenarios and full.failed_scenarios > 0


def test_a_cyclic_union_shows_in_the_quotient():
    """CoS off: the full union has a cycle, so its image in the quotient has one too."""
    comp = palmtree_df("conditional", cos=False)
    rep = symmetric_sweep(comp)
    assert rep.symmetry.kept and rep.quotient_acyclic is False and rep.quotient_cycle
    assert not rep.ok
    assert not sweep_single_paused(comp).acyclic


@pytest.mark.parametrize("name", ["fb-3d-4x4x4", "dragonfly-a4-p2-h2"])
def test_destination_classes_decide_alike(name):
    """The classes the check compares representatives of are sound: every host of a class
    gets the same decision in every row of the switch, unpaused and with PORT_STATE flipped."""
    import numpy as np

    from hpcfabric.verify.codes import UNTAGGED
    from hpcfabric.verify.decisions import arrival_pcps as _pcp_values, destination_classes as _classes
    from hpcfabric.verify.engine import Destinations as _Dst, Row as _Row, data_flows, data_relevant as _relevant
    from hpcfabric.verify.engine import evaluate as _evaluate
    from hpcfabric.verify.scenarios import flip_port_states as _flipped

    comp = compiled(name, "conditional")
    fab = comp.fabric
    macs = np.array([comp.plan.host_mac[h.name] for h in fab.hosts], dtype=np.uint64)
    dst = _Dst(macs)
    relevant = {s.name: [f for f in data_flows(comp.tables[s.name].flows) if _relevant(f)] for s in fab.switches}
    pcps = _pcp_values(relevant)
    sizes = []
    for sw in fab.switches[::3]:
        cls, reps = _classes(relevant[sw.name], macs)
        sizes.append(len(reps))
        flipped = [f for f in data_flows(_flipped(comp.tables[sw.name].flows)) if _relevant(f)]
        for p, peer in fab.ports(sw.name).items():
            src = comp.plan.host_mac[peer.node] if peer.is_host else None
            for pcp in [UNTAGGED] if peer.is_host else pcps:
                for flows in (relevant[sw.name], flipped):
                    res = _evaluate(_Row(sw.name, (p,), src, False, pcp).build(flows), dst, track=True)
                    for v in (res.out_n, res.out_port, res.out_pcp, res.punt, res.err, res.ps_port):
                        assert (v == v[reps][cls]).all(), (sw.name, p, pcp)
    assert max(sizes) < len(fab.hosts)  # the classes do reduce
