"""Channel dependency graph: deadlock freedom per class of service, over every single paused port.

* every shipped topology x policy (CoS on, the defaults): the union CDG of all
  single-paused-port scenarios is acyclic, per class and as a whole;
* the minimum number of classes per fabric and policy (compiler defaults) and
  the cycle the check prints with one class less -- among them the paper's
  2 classes for an adaptive Dragonfly, and CoS off altogether;
* why the union matters: a Flattened Butterfly whose every scenario is
  acyclic on its own but whose union is not;
* the API and the ``verify --routing`` command line.
"""

from __future__ import annotations

import json

import pytest
from test_policies import CASES, TOPOLOGIES, applicable, compiled, fabric, sweep

from hpcfabric.rules.addressing import plan_addresses
from hpcfabric.verify.oracle.cdg import CdgReport, check_deadlock_freedom, pausable_ports
from hpcfabric.rules.compiler import compile_fabric
from hpcfabric.rules.cos import default_cos
from hpcfabric.topology import flattened_butterfly_fabric
from hpcfabric.verify.oracle.allpairs import verify


def minimum_cos_levels(fabric, plan, routing, scheme, *, scenarios="single", max_levels=8):
    """Smallest ``cos_levels`` for which the union CDG under ``scheme`` is acyclic
    (None if none up to ``max_levels``), and the report of every level tried."""
    reports: dict[int, CdgReport] = {}
    for levels in range(1, max_levels + 1):
        compiled = compile_fabric(fabric, plan, routing=routing, cos=scheme, cos_levels=levels)
        rep = reports[levels] = check_deadlock_freedom(compiled, scenarios)
        if rep.acyclic:
            return levels, reports
    return None, reports


def assert_real_cycle(f, cycle):
    """Each channel's link ends at the switch whose channel comes next (a closed walk of links)."""
    assert cycle[0] == cycle[-1] and len(cycle) >= 3
    for a, b in zip(cycle, cycle[1:]):
        sw, rest = a.split(":")
        port = int(rest.split("@")[0])
        assert f.peer(sw, port).node == b.split(":")[0], (a, b)


@pytest.mark.parametrize("name,routing", CASES)
def test_union_cdg_is_acyclic_per_class_with_the_default_cos(name, routing):
    if not applicable(name, routing):
        pytest.skip(f"{routing} does not apply to {name}")
    comp = compiled(name, routing)
    rep = sweep(name, routing)
    assert rep.acyclic and rep.cycle is None, rep.cycle
    assert all(c is None for c in rep.per_cos.values()), rep.per_cos
    assert rep.ok and rep.cyclic_scenarios == 0
    assert (comp.cos, comp.cos_levels) == default_cos(comp.fabric, routing)
    assert len(rep.classes_used) <= comp.cos_levels
    assert set(rep.classes_used) <= {str(k) for k in range(comp.cos_levels)}
    json.dumps(rep.as_dict())


# ---------------------------------------------------------------------------
# the minimum and the cycle with one class less


@pytest.mark.parametrize(
    "name,routing,scheme,minimum",
    [
        ("dragonfly-a2-p1-h1", "minimal", "top", 2),  # l-g-l
        ("dragonfly-a2-p1-h1", "valiant", "top", 3),  # g-l-g-l
        ("dragonfly-a2-p1-h1", "conditional", "top", 3),  # the paper says 2: the check finds a cycle
        ("dragonfly-a2-p1-h1", "conditional", "hop", 4),  # h = 1: the neighbour detour l-g-l-g-l (docs/routing.md)
        ("fb-2d-3x3", "minimal", "none", 1),  # dimension order
        ("fb-2d-3x3", "valiant", "top", 2),
        ("fb-2d-3x3", "conditional", "hop", 2),  # N = 2 dimensions
        ("fat-tree-k4", "conditional", "none", 1),  # up-down
    ],
)
def test_minimum_classes_and_the_cycle_with_one_less(name, routing, scheme, minimum, capsys):
    f = fabric(name)
    plan = plan_addresses(f, "compact")
    found, reports = minimum_cos_levels(f, plan, routing, scheme)
    assert found == minimum
    if minimum > 1:
        fewer = reports[minimum - 1]
        assert not fewer.acyclic and fewer.cycle
        assert_real_cycle(f, fewer.cycle)
        with capsys.disabled():
            print(f"\n{name} {routing} {scheme} with {minimum - 1} class(es): cycle {' -> '.join(fewer.cycle)}")


def test_the_papers_two_classes_deadlock_an_adaptive_dragonfly():
    """Paper Sec. V-E: 2 CoS levels "since there are at most 2 local hops and 2 global hops". With
    Valiant detours a class-1 local link carries both intermediate-group and final hops, and class 1
    closes a cycle local -> global -> local -> ... (the a=4 p=2 h=2 default fabric)."""
    comp = compiled("dragonfly-a4-p2-h2", "conditional", cos="top", cos_levels=2)
    rep = check_deadlock_freedom(comp)
    assert not rep.acyclic and rep.per_cos["0"] is None and rep.per_cos["1"] is not None
    assert_real_cycle(comp.fabric, rep.per_cos["1"])
    assert all(ch.endswith("@1") for ch in rep.per_cos["1"])
    assert rep.failed_scenarios == 0  # it delivers everything: the defect is only a possible deadlock


@pytest.mark.parametrize("name,routing", [("dragonfly-a4-p2-h2", "minimal"), ("dragonfly-a4-p2-h2", "conditional")])
def test_without_cos_the_dragonfly_cdg_has_a_cycle(name, routing):
    comp = compiled(name, routing, cos=False)
    assert comp.cos is None and verify(comp).ok
    rep = check_deadlock_freedom(comp, "none")
    assert not rep.acyclic and rep.classes_used == ("untagged",)
    assert_real_cycle(comp.fabric, rep.cycle)
    assert rep.cycle == rep.per_cos["untagged"] or rep.per_cos["untagged"] is not None
    assert not rep.ok and rep.cyclic_scenarios == 1


def test_a_union_can_be_cyclic_when_every_scenario_is_not():
    """FB 2x2x2 conditional with one class per top-dimension level: each single paused port on its
    own gives an acyclic graph, but an adaptive function mixes scenarios over time."""
    f = flattened_butterfly_fabric([2, 2, 2], 1)
    comp = compile_fabric(f, plan_addresses(f, "compact"), routing="conditional", cos="top", cos_levels=3)
    rep = check_deadlock_freedom(comp)
    assert not rep.acyclic and rep.cyclic_scenarios == 0 and rep.failed_scenarios == 0
    assert_real_cycle(f, rep.cycle)
    ok = check_deadlock_freedom(compile_fabric(f, plan_addresses(f, "compact"), routing="conditional", cos=True))
    assert ok.acyclic and ok.ok and ok.cos_levels == 3


def test_fb_conditional_needs_one_class_per_dimension():
    f = flattened_butterfly_fabric([2, 2, 2], 1)
    found, reports = minimum_cos_levels(f, plan_addresses(f, "compact"), "conditional", "hop")
    assert found == 3 and not reports[2].acyclic


# ---------------------------------------------------------------------------
# API and command line


def test_scenario_selection_and_errors():
    comp = compiled("dragonfly-a2-p1-h1", "conditional")
    ports = pausable_ports(comp)
    assert len(ports) == sum(len(comp.fabric.fabric_ports(s.name)) for s in comp.fabric.switches)
    one = check_deadlock_freedom(comp, [ports[0]])
    assert one.scenarios == 2 and one.paused_ports == (f"{ports[0][0]}:{ports[0][1]}",)
    none = check_deadlock_freedom(comp, "none")
    assert none.scenarios == 1 and none.acyclic
    host_port = next(iter(comp.fabric.host_ports(ports[0][0])))
    skipped = check_deadlock_freedom(comp, [(ports[0][0], host_port)])
    assert skipped.scenarios == 1 and any("no PORT_STATE" in n for n in skipped.notes)
    with pytest.raises(ValueError, match="scenarios"):
        check_deadlock_freedom(comp, "some")
    with pytest.raises(ValueError, match="no port"):
        check_deadlock_freedom(comp, [("nowhere", 1)])


def test_verify_with_paused_ports():
    comp = compiled("dragonfly-a4-p2-h2", "conditional")
    sw, port = pausable_ports(comp)[3]
    r = verify(comp, [(sw, port)])
    assert r.ok and r.paused == (f"{sw}:{port}",) and r.as_dict()["paused"] == [f"{sw}:{port}"]
    minimal = compiled("dragonfly-a4-p2-h2", "minimal")
    assert verify(minimal, [(sw, port)]).paused == ()  # no PORT_STATE entry: nothing to flip, as in the controller
    with pytest.raises(ValueError):
        verify(comp, [(sw, 99)])


def _cli(capsys, *argv):
    from hpcfabric.cli import main

    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_verify_routing_reports_the_cdg(capsys):
    topo = str(TOPOLOGIES / "dragonfly-a2-p1-h1.yaml")
    code, out, _ = _cli(capsys, "verify", topo, "--routing", "conditional", "--cos", "on", "--paused", "all")
    data = json.loads(out)
    assert code == 0 and data["ok"] and data["cdg_acyclic"] is True
    assert data["cos_levels"] == 3 and data["cos"] == "top" and data["scenarios"] == 13
    assert data["scenario_failures"] == [] and data["delivered"] == data["pairs"]
    code, out, _ = _cli(capsys, "verify", topo, "--routing", "conditional", "--cos", "off", "--paused", "g0s0:2")
    data = json.loads(out)  # untagged conditional tables: the CDG has a cycle, the exit status says so
    assert code == 1 and data["cdg_acyclic"] is False and data["cdg_cycle"] and data["paused"] == ["g0s0:2"]
    assert data["scenarios"] == 2 and data["cos_levels"] == 0 and data["delivered"] == data["pairs"]
    code, out, _ = _cli(capsys, "verify", topo, "--routing", "valiant")
    data = json.loads(out)
    assert code == 0 and data["cdg_acyclic"] and data["cos"] == "top" and data["scenarios"] == 1
    code, _, err = _cli(capsys, "verify", topo, "--routing", "conditional", "--paused", "g0s0:99")
    assert code == 2 and "--paused" in err
    code, out, _ = _cli(capsys, "verify", topo)  # without --routing: the report as before, no CDG
    assert code == 0 and "cdg_acyclic" not in json.loads(out)
