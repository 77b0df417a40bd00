"""The union proof (hpcfabric/verify/union/proof.py) against today's checks.

Cross-checks on the shipped small fabrics, every policy, CoS on and off: the proof's verdicts
(delivered, acyclic) equal those of the brute-force CDG oracle over every single paused port (every
host pair in every scenario, union dependency graph) and of all-pairs verify; its dependency graph
contains the oracle's (and equals it where nothing can be paused). On broken rule
sets it must fail, name what fails and run the fallback (the oracle). The batch decisions behind it are
compared with the scalar reference pipeline cell by cell.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from test_policies import applicable, compiled
from test_oracle import MUTATIONS, _mutate, valiant_without_row_condition

from hpcfabric.errors import VerificationError
from hpcfabric.rules.flows import TABLE_ALTERNATIVE, TABLE_ROUTE, Output, SetField
from hpcfabric.verify.oracle.allpairs import verify
from hpcfabric.verify.oracle.cdg import check_deadlock_freedom, pausable_ports
from hpcfabric.verify.union.choices import SLOT_BITS, Choices
from hpcfabric.verify.codes import DROP, FLOOD, PUNT
from hpcfabric.verify.engine import forward_data_flows
from hpcfabric.verify.reference.pipeline import Frame, Pipeline, PipelineError
from hpcfabric.verify.union.proof import prove

ROOT = Path(__file__).resolve().parent.parent
FABRICS = ["dragonfly-a4-p2-h2", "fb-2d-3x3", "fb-3d-4x4x4", "fat-tree-k4"]
CASES = [(n, r, c) for n in FABRICS for r in ("minimal", "conditional", "valiant") for c in (True, False)
         if applicable(n, r)]


@pytest.mark.parametrize("name,routing,cos", CASES)
def test_same_verdicts_as_the_oracle_and_verify(name, routing, cos):
    comp = compiled(name, routing, cos=cos)
    rep = prove(comp, keep=True)
    if name == "fb-3d-4x4x4" and routing != "minimal" and not cos:  # the oracle takes 3-7 s here: verify + a sample
        ref_ok = verify(comp).ok and check_deadlock_freedom(comp, pausable_ports(comp)[::7]).ok
        assert rep.ok == ref_ok
        assert not rep.ok and rep.delivered and not rep.acyclic
        return
    sw = check_deadlock_freedom(comp, keep=True)
    assert (rep.delivered, rep.acyclic, rep.ok) == (sw.failed_scenarios == 0, sw.acyclic, sw.ok)
    assert rep.edges >= sw.edges  # any set of paused ports covers every single one
    assert rep.dependencies == len(rep.edges) and rep.channels >= sw.channels
    assert rep.hosts == len(comp.fabric.hosts) and rep.pausable_ports == len(pausable_ports(comp))
    if not rep.acyclic:
        assert rep.cycle and rep.cycle[0] == rep.cycle[-1]
        assert any(f["kind"] == "cdg cycle" for f in rep.failures)
    if routing == "minimal":  # nothing to pause: exactly the CDG of the unpaused fabric
        cdg = check_deadlock_freedom(comp, "none")
        assert rep.pausable_ports == 0 and rep.paused_choices == 0
        assert (rep.acyclic, rep.dependencies, rep.channels) == (cdg.acyclic, cdg.dependencies, cdg.channels)
        assert rep.edges == sw.edges
        assert verify(comp).ok == rep.delivered


@pytest.mark.parametrize("mutation", MUTATIONS, ids=lambda m: m.__name__)
def test_broken_rules_fail_with_a_witness(mutation):
    comp = mutation(compiled("fb-2d-3x3", "conditional"))
    rep = prove(comp, fallback="cdg")
    sw = check_deadlock_freedom(comp)
    assert not rep.ok and not sw.ok
    kinds = {k for f in sw.scenario_failures for k in f.get("undelivered", {})}
    assert kinds <= set(rep.undelivered)  # every kind a single port shows, the union shows
    assert rep.failing_columns >= 1 and rep.failures
    walk = next(f for f in rep.failures if "walk" in f)
    assert walk["destination"] and walk["walk"] and walk["kind"].split(" ")[0] in rep.undelivered
    assert rep.fallback["method"] == "cdg" and rep.fallback["report"]["ok"] is False
    assert rep.fallback["verdict"].startswith("fails also")


def test_a_dropped_entry_is_found_and_named():
    comp = compiled("dragonfly-a4-p2-h2", "conditional")
    sw = comp.fabric.access_switches[5].name
    gone = next(f for f in comp.tables[sw].flows if f.table == TABLE_ROUTE and f.match.eth_dst is not None
                and any(isinstance(a, Output) and comp.fabric.peer(sw, a.port) and
                        not comp.fabric.peer(sw, a.port).is_host for a in f.actions))
    broken = _mutate(comp, sw, lambda flows: [f for f in flows if f is not gone])
    rep = prove(broken)
    ref = verify(broken)
    assert rep.ok is False and rep.acyclic and sum(rep.undelivered.values()) > 0 and not ref.ok
    names = {"misdelivered": "misdelivered", "dropped": "dropped", "loops": "loop", "punted": "punted",
             "floods": "flood", "tagged": "tagged"}
    kinds = {k for key, k in names.items() if ref.as_dict()[key]}
    assert kinds and kinds <= set(rep.undelivered)  # a lower-priority entry catches them: misdelivered
    assert any(sw in hop for f in rep.failures if "walk" in f for hop in f["walk"])
    assert prove(comp).ok


def test_a_forwarding_loop_is_a_loop_and_a_cycle():
    """Three switches of one FB row hand one destination's frames round in a circle."""
    comp = compiled("fb-2d-3x3", "minimal")
    f = comp.fabric
    row = ["s0_0", "s0_1", "s0_2"]
    target = f.hosts_on("s2_2")[0]
    mac = comp.plan.host_mac[target.name]
    out = {}
    for a, b in zip(row, row[1:] + row[:1]):
        out[a] = next(p for p, peer in f.ports(a).items() if peer.node == b)
    broken = comp
    for sw in row:
        bad = replace(next(x for x in comp.tables[sw].flows if x.table == TABLE_ROUTE and x.match.eth_dst is not None),
                      priority=2000, match=replace(comp.tables[sw].flows[0].match.__class__(),
                                                   eth_dst=(mac, (1 << 48) - 1)), actions=(Output(out[sw]),))
        broken = _mutate(broken, sw, lambda flows, bad=bad: flows + [bad])
    rep = prove(broken, fallback="cdg")
    assert rep.undelivered.get("loop", 0) > 0 and not rep.acyclic
    assert any(f["kind"] == "loop" and f["destination"] == target.name for f in rep.failures)
    assert verify(broken).loops > 0
    assert rep.fallback["report"]["ok"] is False


def test_a_frame_sent_back_out_of_its_ingress_port_is_dropped():
    comp = valiant_without_row_condition(compiled("fb-2d-3x3", "valiant"))
    rep = prove(comp)
    assert rep.undelivered.get("dropped", 0) > 0 and not rep.ok
    assert verify(comp).dropped > 0


def test_rules_the_proof_does_not_model_are_refused():
    comp = compiled("fb-2d-3x3", "minimal")
    sw = comp.fabric.switches[0].name
    rewrite = _mutate(comp, sw, lambda flows: [
        replace(f, actions=(SetField("eth_dst", 1), *f.actions)) if f.table == TABLE_ROUTE and f.match.eth_dst else f
        for f in flows])
    with pytest.raises(VerificationError, match=f"{sw}: the union proof .*eth_dst"):
        prove(rewrite)
    with pytest.raises(ValueError, match="fallback"):
        prove(comp, fallback="bogus")


@pytest.mark.parametrize("name,routing", [("dragonfly-a4-p2-h2", "conditional"), ("fb-2d-3x3", "valiant"),
                                          ("fat-tree-k4", "conditional")])
def test_batch_decisions_equal_the_scalar_pipeline(name, routing):
    """Every cell (line, destination class) of both variants against the reference pipeline."""
    comp = compiled(name, routing)
    relevant = forward_data_flows(comp, "test", VerificationError, actions=True)
    macs = np.array([comp.plan.host_mac[h.name] for h in comp.fabric.hosts], dtype=np.uint64)
    ch = Choices(comp, relevant, macs)
    flat_lists = ch.flat
    checked = 0
    for line in range(ch.lines):
        i = int(ch.line_switch[line])
        sw = ch.names[i]
        first = ch.state_base[i]
        st = int(np.flatnonzero(ch.state_line[first:ch.state_base[i + 1]] == line)[0])
        port, pcp = st // 9, st % 9 - 1
        for which, arr, variant in (("unpaused", ch.base, i), ("paused", ch.alt, int(ch.alt_variant[i]))):
            pipe = Pipeline(_variant_flows(ch, variant, relevant, comp, sw))
            for t, mac in enumerate(macs.tolist()):
                k = int(ch.cls[i, t])
                got = int(arr[int(ch.line_off[line]) + k])
                try:
                    res = pipe.process(Frame(in_port=port, eth_src=0, eth_dst=mac, vlan_pcp=None if pcp < 0 else pcp))
                except PipelineError:
                    res = None
                want = _choice(res, port, comp.fabric.peer(sw, port).is_host, ch.in_port_out[i])
                if want is None:  # back out of the ingress port by number: the port is the choice
                    assert got >> SLOT_BITS == port, (sw, port, pcp, which, t)
                else:
                    assert got == want, (sw, port, pcp, which, t)
                checked += 1
    assert checked > 100 and flat_lists.n_variants >= len(ch.names)


def _variant_flows(ch, variant, relevant, comp, sw):
    from hpcfabric.verify.scenarios import paused_data_flows

    return relevant[sw] if variant < len(ch.names) else paused_data_flows(comp, sw, relevant[sw])[0]


def _choice(res, in_port, from_host, in_port_out):
    """The choice the batch engine must make, from the reference pipeline's result (None: only the port
    is known -- an output back to the ingress port by number, which the walk drops on fabric arrivals)."""
    if res is None:  # a pipeline error drops the frame
        return DROP
    if res.punted:
        return PUNT
    n = len(res.outputs) + len(res.to_ingress)
    if n > 1:
        return FLOOD
    if n == 0:
        return DROP
    if res.to_ingress:
        return DROP if in_port_out and not from_host else None
    port, frame = res.outputs[0]
    return port << SLOT_BITS | ((-1 if frame.vlan_pcp is None else frame.vlan_pcp) + 1)


def test_cli_prove(tmp_path):
    fb = str(ROOT / "topologies" / "fb-2d-3x3.yaml")
    run = [sys.executable, "-m", "hpcfabric.cli", "prove", fb]
    ok = subprocess.run(run + ["--routing", "conditional", "--cos", "on"], capture_output=True, text=True)
    assert ok.returncode == 0 and ": ok: " in ok.stdout and "any set of paused ports" in ok.stdout
    bad = subprocess.run(run + ["--routing", "conditional", "--cos", "off"], capture_output=True, text=True)
    assert bad.returncode == 1 and "FAILED" in bad.stdout and "dependency cycle" in bad.stdout
    assert "single paused ports (cdg)" in bad.stdout
    js = subprocess.run(run + ["--routing", "valiant", "--json", "--fallback", "none"], capture_output=True, text=True)
    import json

    data = json.loads(js.stdout)
    assert js.returncode == 0 and data["ok"] and data["pausable_ports"] > 0 and "fallback" not in data
    missing = subprocess.run([sys.executable, "-m", "hpcfabric.cli", "prove", str(tmp_path / "nope.yaml")],
                             capture_output=True, text=True)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr and "nope.yaml" in missing.stderr
    levels = subprocess.run(run + ["--cos-levels", "9"], capture_output=True, text=True)
    assert levels.returncode == 2 and "cos_levels" in levels.stderr and "Traceback" not in levels.stderr


def test_a_failure_that_needs_two_paused_ports_is_union_only():
    """s0_2's fallback for its port to s0_1 turns frames back to s0_0. Alone harmless: no frame for
    s0_1 reaches s0_2 from s0_0 -- unless s0_0's own port to s0_1 is paused too (its Valiant
    alternative goes through s0_2): then the frame goes back out of its ingress port, dropped.
    The union sees it; every single paused port passes, and the fallback says so."""
    comp = compiled("fb-2d-3x3", "conditional")
    f = comp.fabric
    to = {(a, b): next(p for p, x in f.ports(a).items() if x.node == b) for a, b in
          (("s0_2", "s0_1"), ("s0_2", "s0_0"), ("s0_0", "s0_1"))}

    def back(flows):
        return [replace(x, actions=tuple(Output(to["s0_2", "s0_0"]) if isinstance(a, Output) and a.port == to["s0_2", "s0_1"]
                                         else a for a in x.actions)) if x.table == TABLE_ALTERNATIVE else x for x in flows]

    broken = _mutate(comp, "s0_2", back)
    rep = prove(broken, fallback="cdg")
    assert not rep.ok and rep.acyclic and rep.undelivered == {"dropped": rep.undelivered["dropped"]}
    w = rep.failures[0]
    assert w["kind"] == "dropped (paused choice)" and w["destination"].startswith("s0_1h")
    assert rep.fallback["report"]["ok"] and rep.fallback["verdict"].startswith("union only")
    both = [("s0_0", to["s0_0", "s0_1"]), ("s0_2", to["s0_2", "s0_1"])]
    assert verify(broken, both).dropped > 0  # the two ports paused together really drop frames
    assert all(verify(broken, [p]).ok for p in both)


def test_dependency_keys_stay_exact_past_2_31():
    """fb-4d-300k conditional has 11.5 M states x 567 egress slots: int32 states times the width pass 2^31,
    and a wrapped key named a wrong dependency (the proof then indexed state 2^32 - 8)."""
    from hpcfabric.verify.codes import PCP_SLOTS
    from hpcfabric.verify.union.unions import dependency_keys
    width = 63 * PCP_SLOTS
    arrival = np.array([0, 3_787_000, 11_481_749], dtype=np.int32)
    code = np.array([(61 << SLOT_BITS) | 8, 5 << SLOT_BITS, (2 << SLOT_BITS) | 3], dtype=np.int32)
    keys = dependency_keys(arrival, code, width)
    mask = (1 << SLOT_BITS) - 1
    assert keys.tolist() == [a * width + (c >> SLOT_BITS) * PCP_SLOTS + (c & mask)
                             for a, c in zip(arrival.tolist(), code.tolist())]
    assert (keys // width).tolist() == arrival.tolist()
