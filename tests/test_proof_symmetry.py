"""The union proof's symmetry reduction (hpcfabric/verify/orbits.py): one destination column per orbit.

With the reduction (the default) and without it (``symmetry=False``) the verdicts must be the same;
where a candidate symmetry does not hold on the rules, the check must drop it with a reason and
the proof must walk every column; where the quotient is cyclic, the full walk's report is returned;
where walks fail under an acyclic quotient, the walked columns' failures count once per orbit member.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_policies import compiled
from test_sweep import _mutate

from hpcfabric.rules.addressing import plan_addresses
from hpcfabric.rules.compiler import compile_fabric
from hpcfabric.rules.flows import TABLE_ROUTE, Output
from hpcfabric.topology.loader import parse_topology
from hpcfabric.verify.allpairs import verify
from hpcfabric.verify.proof import prove

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
