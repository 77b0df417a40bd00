"""The union proof's symmetry reduction (hpcfabric/verify/union/orbits.py): one destination column per orbit.

With the reduction (the default) and without it (``symmetry=False``) the verdicts must be the same;
where a candidate symmetry does not hold on the rules, the check must drop it with a reason and
the proof must walk every column; where the quotient is cyclic, the full walk's report is returned;
where walks fail under an acyclic quotient, the walked columns' failures count once per orbit member.
The candidates (hpcfabric/verify/union/automorphism.py) are checked against the topology; the rules decide
which of them hold (a changed entry drops every symmetry through its switch, naming it); a cyclic union
shows with the symmetry kept but unused; the reduced proof agrees with the brute-force CDG oracle.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_policies import compiled
from test_oracle import _mutate

from hpcfabric.rules.addressing import plan_addresses
from hpcfabric.rules.compiler import compile_fabric
from hpcfabric.rules.flows import TABLE_ROUTE, Output
from hpcfabric.topology.loader import parse_topology
from hpcfabric.rules.flows import RuleClass
from hpcfabric.topology.generators import dragonfly_fabric, flattened_butterfly_fabric
from hpcfabric.verify.oracle.allpairs import verify
from hpcfabric.verify.union.automorphism import automorphism, candidate_generators
from hpcfabric.verify.oracle.cdg import check_deadlock_freedom
from hpcfabric.verify.union.proof import prove

PALMTREE = "kind: dragonfly\nname: df-a4p2h2-palmtree\na: 4\np: 2\nh: 2\narrangement: palmtree\n"


def palmtree(routing: str, cos: object = True):
    f = parse_topology(PALMTREE, "test")
    return compile_fabric(f, plan_addresses(f, "compact"), routing=routing, cos=cos)


def _verdicts(rep) -> dict:
    d = rep.as_dict()
    keep = ("ok", "delivered", "acyclic", "undelivered", "probe_failures", "overlaps", "per_cos", "classes_used")
    return {k: d[k] for k in keep}


CASES = [("palmtree", r, c) for r in ("minimal", "conditional", "valiant") for c in (True, False)] + \
        [(n, r, True) for n in ("dragonfly-a4-p2-h2", "fb-2d-3x3") for r in ("minimal", "conditional")]


@pytest.mark.parametrize("name,routing,cos", CASES)
def test_reduced_and_full_proofs_agree(name, routing, cos):
    comp = palmtree(routing, cos) if name == "palmtree" else compiled(name, routing, cos=cos)
    full = prove(comp, symmetry=False)
    rep = prove(comp)
    assert full.symmetry is None and rep.symmetry is not None
    assert _verdicts(rep) == _verdicts(full)
    assert rep.failing_columns == full.failing_columns
    if rep.symmetry["used"]:  # only with an acyclic quotient: walked fewer columns
        assert rep.acyclic and rep.symmetry["kept"] and rep.symmetry["columns_walked"] < full.columns
        assert rep.nodes < full.nodes and rep.dependencies <= full.dependencies
    else:  # a failing or cyclic union: every column walked, the same report
        assert rep.nodes == full.nodes and rep.dependencies == full.dependencies and rep.failures == full.failures


def test_failures_of_walked_columns_count_for_their_orbits():
    # palmtree g=6: the paused choices drop some frames; the rotation still commutes with the rules
    f = parse_topology("kind: dragonfly\nname: t\na: 4\np: 2\nh: 2\ng: 6\narrangement: palmtree\n", "t")
    comp = compile_fabric(f, plan_addresses(f, "compact"), routing="conditional", cos=True)
    full, rep = prove(comp, symmetry=False), prove(comp)
    assert rep.symmetry["used"] and rep.symmetry["columns_walked"] == 4 and full.columns == 24
    assert full.undelivered == rep.undelivered == {"dropped": 48}
    assert full.failing_columns == rep.failing_columns == 24 and not rep.delivered and rep.acyclic
    assert rep.failures and all(w["kind"].startswith("dropped") for w in rep.failures)


def test_the_reduction_is_used_where_the_rules_are_symmetric():
    rep = prove(palmtree("conditional"))
    assert rep.ok and rep.symmetry["used"] and rep.symmetry["kept"] == ["rotate-groups"]
    assert rep.symmetry["columns_walked"] == 4  # 9 groups x 4 access switches, one group walked
    rep = prove(compiled("fb-2d-3x3", "minimal"))
    assert rep.ok and rep.symmetry["used"] and set(rep.symmetry["kept"]) == {"shift-dim0", "shift-dim1"}
    assert rep.symmetry["columns_walked"] == 1


def _route_out(comp, sw, pred):
    f = comp.fabric
    return next(x for x in comp.tables[sw].flows if x.table == TABLE_ROUTE and x.match.eth_dst is not None
                and any(isinstance(a, Output) and f.peer(sw, a.port) is not None and pred(f.peer(sw, a.port))
                        for a in x.actions))


def test_a_symmetry_that_does_not_hold_is_dropped_and_not_used():
    """One switch of a group the reduction does not walk drops one remote host's frames: rotations
    no longer commute with the rules; the proof must find the drop anyway."""
    comp = palmtree("minimal")
    f = comp.fabric
    sw = f.access_switches[-1].name  # last group: the walked representatives are the first group's
    gone = _route_out(comp, sw, lambda peer: not peer.is_host)  # a route to the fabric now drops
    drop = replace(gone, actions=())
    broken = _mutate(comp, sw, lambda flows: [drop if x is gone else x for x in flows])
    rep = prove(broken)
    assert rep.symmetry["used"] is False and rep.symmetry["kept"] == []
    assert sw in rep.symmetry["dropped"]["rotate-groups"]
    assert not rep.ok and rep.undelivered.get("dropped", 0) > 0 and verify(broken).dropped > 0
    assert _verdicts(rep) == _verdicts(prove(broken, symmetry=False))
    assert any(sw in hop for f in rep.failures if "walk" in f for hop in f["walk"])


def test_a_correct_but_asymmetric_change_is_dropped_and_proved_in_full():
    """Fabric still correct, rules no longer symmetric: one FB switch sends one column's frames the
    other way round a row (a two-hop detour that still delivers). The check must drop the shift
    of that dimension; the proof walks every column and agrees with the full proof and verify."""
    comp = compiled("fb-2d-3x3", "minimal", cos=False)
    f = comp.fabric
    to_s02 = _route_out(comp, "s0_0", lambda peer: peer.node == "s0_2")
    via = next(p for p, peer in f.ports("s0_0").items() if peer.node == "s0_1")  # instead of s0_0 -> s0_2
    detour = replace(to_s02, actions=tuple(Output(via) if isinstance(a, Output) else a for a in to_s02.actions))
    broken = _mutate(comp, "s0_0", lambda flows: [detour if x is to_s02 else x for x in flows])
    rep = prove(broken)
    assert not rep.symmetry["used"] and rep.symmetry["kept"] == []
    assert "decides column" in rep.symmetry["dropped"]["shift-dim1"]  # the detour: along the row
    assert rep.nodes == prove(broken, symmetry=False).nodes
    assert _verdicts(rep) == _verdicts(prove(broken, symmetry=False))
    assert rep.delivered == verify(broken).ok


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
    rep = prove(compiled("fb-2d-3x3", "minimal"))
    assert rep.symmetry["kept"] == ["shift-dim0", "shift-dim1"] and not rep.symmetry["dropped"]
    assert rep.symmetry["used"] and rep.symmetry["columns_walked"] == 1  # one access switch per orbit
    # Valiant picks the intermediate by the host's rank among the top-dimension ports: a shift of
    # that dimension changes the choice, and the check names why
    rep = prove(compiled("fb-2d-3x3", "valiant"))
    assert rep.symmetry["kept"] == ["shift-dim0"] and set(rep.symmetry["dropped"]) == {"shift-dim1"}
    rep = prove(palmtree("conditional"))
    assert rep.symmetry["kept"] == ["rotate-groups"] and rep.symmetry["columns_walked"] == 4  # group 0


def test_one_changed_entry_drops_the_symmetry():
    comp = compiled("fb-2d-3x3", "minimal")
    sw = "s1_1"
    ports = sorted(comp.fabric.fabric_ports(sw))

    def fn(flows):  # one route leaves by another fabric port (still delivered, differently)
        i = next(i for i, f in enumerate(flows) if f.table == TABLE_ROUTE and f.rule_class == RuleClass.ROUTE)
        old = flows[i].actions[0].port
        flows[i] = replace(flows[i], actions=(Output(ports[(ports.index(old) + 1) % len(ports)]),))
        return flows

    rep = prove(_mutate(comp, sw, fn))
    assert rep.symmetry["kept"] == [] and set(rep.symmetry["dropped"]) == {"shift-dim0", "shift-dim1"}
    assert all(sw in why for why in rep.symmetry["dropped"].values())


@pytest.mark.parametrize("case", ["fb4x4x4-cond", "df-palmtree-valiant"])
def test_reduced_proof_agrees_with_the_oracle(case):
    comp = compiled("fb-3d-4x4x4", "conditional") if case == "fb4x4x4-cond" else palmtree("valiant")
    rep, oracle = prove(comp), check_deadlock_freedom(comp)
    assert rep.symmetry["used"] and rep.symmetry["columns_walked"] < len(comp.fabric.access_switches)
    assert (rep.ok, rep.delivered, rep.acyclic) == (oracle.ok, oracle.failed_scenarios == 0, oracle.acyclic) == (True,) * 3


def test_a_cyclic_union_shows_with_the_symmetry_kept_but_unused():
    """CoS off: the full union has a cycle, so the quotient has one too: every column is walked."""
    comp = palmtree("conditional", cos=False)
    rep = prove(comp)
    assert rep.symmetry["kept"] and rep.symmetry["used"] is False and not rep.acyclic and rep.cycle
    assert not rep.ok and not check_deadlock_freedom(comp).acyclic

