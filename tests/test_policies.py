"""Routing policies (minimal, valiant, conditional) with classes of service in the VLAN PCP.

* every shipped topology (except Table III and the ~300,000-host scale builds,
  whose proofs are benches: bench/prove_scale.py, with the union proof that
  tests/test_oracle.py checks against this brute force) x every policy it
  supports, CoS on: every pair delivered, untagged, no loop -- unpaused (full
  verifier, invalid probes included) and with every single fabric port paused;
* the fast engine (VLAN PCP as part of the row state) equals the scalar
  pipeline, paused ports included;
* what the policies compile to: rule counts against the paper's statements,
  Valiant intermediates, the DMP echo and control punts with CoS on, and the
  CompileErrors for combinations that do not exist.
"""

from __future__ import annotations

import json
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

import pytest

from hpcfabric.rules.addressing import plan_addresses
from hpcfabric.verify.oracle.cdg import check_deadlock_freedom, pausable_ports
from hpcfabric.rules.compiler import compile_fabric
from hpcfabric.rules.cos import default_cos
from hpcfabric.rules.port_state import port_state_flow
from hpcfabric.rules.tables import PRIO_VALIANT_ALWAYS
from hpcfabric.errors import CompileError
from hpcfabric.rules.flows import (
    ETH_TYPE_DMP,
    ETH_TYPE_LLDP,
    ETH_TYPE_PAUSE,
    TABLE_ALTERNATIVE,
    TABLE_INGRESS,
    TABLE_PORT_STATE,
    TABLE_ROUTE,
    Output,
    PopVlan,
    PushVlan,
    VLAN_TAGGED,
    VLAN_UNTAGGED,
    RuleClass,
)
from hpcfabric.verify.reference.pipeline import Frame, Pipeline
from hpcfabric.topology import flattened_butterfly_fabric
from hpcfabric.topology.loader import load_topology
from hpcfabric.verify.oracle.allpairs import apply_paused, verify, walk_pair
from pair_outcomes import pair_outcomes

TOPOLOGIES = Path(__file__).resolve().parent.parent / "topologies"
POLICIES = ("minimal", "valiant", "conditional")


@lru_cache(maxsize=None)
def fabric(name: str):
    return load_topology(TOPOLOGIES / f"{name}.yaml")


def _small_shipped() -> list[str]:
    out = []
    for p in sorted(TOPOLOGIES.glob("*.yaml")):
        if p.stem == "dragonfly-table3" or "300k" in p.stem:
            continue
        out.append(p.stem)
    return out


SMALL = _small_shipped()


@lru_cache(maxsize=None)
def compiled(name: str, routing: str, mode: str = "compact", cos: object = True, cos_levels: int | None = None):
    f = fabric(name)
    return compile_fabric(f, plan_addresses(f, mode), routing=routing, cos=cos, cos_levels=cos_levels)


#: (fabric kind, routing) the compiler refuses: Valiant on up*/down* fabrics (their minimal routing is already
#: oblivious multipath), non-minimal routing on an explicit fabric (no dimension or group structure)
UNSUPPORTED = {("fat_tree", "valiant"), ("folded_clos", "valiant"), ("explicit", "valiant"), ("explicit", "conditional")}


def applicable(name: str, routing: str) -> bool:
    """False for a pinned unsupported pair, after checking the compiler refuses it with a CompileError naming the
    routing; True otherwise: the test then compiles it, and any error there fails it (never a skip)."""
    if (fabric(name).kind, routing) not in UNSUPPORTED:
        return True
    with pytest.raises(CompileError, match=f"{routing} routing"):
        compiled(name, routing)
    return False


CASES = [(n, r) for n in SMALL for r in POLICIES]


@lru_cache(maxsize=None)
def sweep(name: str, routing: str):
    """CDG + delivery check over the unpaused fabric and every single paused port (cached: test_cdg reuses it)."""
    return check_deadlock_freedom(compiled(name, routing), "single")


def expected_max_hops(f, routing: str) -> int:
    """Switches traversed at most: minimal as in test_verify, one more link for a Valiant detour."""
    if f.kind == "dragonfly":
        base = 4 if f.params["a"] > 1 else 2
    elif f.kind == "flattened_butterfly":
        base = len(f.params["dims"]) + 1
    elif f.kind == "fat_tree":
        base = 5
    elif f.kind == "folded_clos":  # up to the core and down
        base = 2 * f.params["stages"] - 1
    else:
        base = len(f.switches)
    return base if routing == "minimal" else base + 1


# ---------------------------------------------------------------------------
# every shipped topology x policy


@pytest.mark.parametrize("name,routing", CASES)
def test_policy_delivers_every_pair_untagged_unpaused_and_with_every_single_port_paused(name, routing):
    if not applicable(name, routing):
        pytest.skip(f"{routing} does not apply to {name}")
    comp = compiled(name, routing)
    f = comp.fabric
    r = verify(comp)
    assert r.ok, r.failures[:3]
    assert r.engine == "vectorised", r.engine  # CoS tagging stays on the fast path
    assert r.tagged == 0 and r.invalid_probe_failures == 0 and r.overlaps == 0
    assert r.max_hops <= expected_max_hops(f, routing)
    rep = sweep(name, routing)
    assert rep.failed_scenarios == 0, rep.scenario_failures[:3]
    if routing == "minimal":
        assert rep.scenarios == 1  # nothing to pause: no PORT_STATE entries
    else:
        assert rep.scenarios == 1 + len(pausable_ports(comp)) == 1 + sum(len(f.fabric_ports(s.name)) for s in f.switches)


@pytest.mark.parametrize(
    "name,routing,mode",
    [
        ("dragonfly-a2-p1-h1", "valiant", "compact"),
        ("dragonfly-a2-p1-h1", "conditional", "per-group"),
        ("fb-2d-3x3", "conditional", "compact"),
        ("fb-2d-3x3", "valiant", "compact"),
        ("fb-2d-4x4", "conditional", "compact"),
        ("fb-2d-3x3", "valiant", "per-group"),
        ("fat-tree-k4", "conditional", "compact"),
        ("fat-tree-k4", "conditional", "per-group"),
    ],
)
def test_fast_engine_equals_scalar_pipeline_with_cos_and_paused_ports(name, routing, mode):
    comp = compiled(name, routing, mode)
    assert comp.cos is not None
    assert pair_outcomes(comp) == pair_outcomes(comp, engine="scalar")
    for sw, port in pausable_ports(comp)[::3]:
        flipped, applied = apply_paused(comp, [(sw, port)])
        assert applied == [(sw, port)]
        assert pair_outcomes(flipped) == pair_outcomes(flipped, engine="scalar"), (sw, port)


@pytest.mark.parametrize("mode", ["compact", "per-group"])
def test_fb_per_group_addressing_supports_the_adaptive_policies(mode):
    for name in ("fb-2d-4x4", "fb-3d-4x4x4"):
        for routing in ("valiant", "conditional"):
            comp = compiled(name, routing, mode)
            assert verify(comp).ok


# ---------------------------------------------------------------------------
# what the policies compile to


def _access(comp, name=None):
    sw = name or comp.fabric.access_switches[0].name
    return sw, comp.flows(sw)


def test_valiant_sends_injected_frames_to_the_hosts_intermediate():
    """Host t of a Dragonfly switch leaves through the switch's t-th global port for every remote group."""
    comp = compiled("dragonfly-a4-p2-h2", "valiant")
    f = comp.fabric
    for sw in f.access_switches[:8]:
        globals_ = sorted(p for p, peer in f.fabric_ports(sw.name).items() if peer.kind == "global")
        for h in f.hosts_on(sw.name):
            want = globals_[h.index % len(globals_)]
            for d in f.hosts:
                dsw = f.switch(d.switch)
                w = walk_pair(comp, h.name, comp.plan.host_mac[d.name])
                assert w.host == d.name
                first = Pipeline(comp.flows(sw.name)).process(
                    Frame(in_port=h.port, eth_src=comp.plan.host_mac[h.name], eth_dst=comp.plan.host_mac[d.name])
                )
                if dsw.group != sw.group:  # remote group: always the intermediate's global port
                    assert first.ports == (want,), (h.name, d.name)
                elif dsw.name != sw.name:  # own group: minimal (one local hop)
                    assert len(w.path) == 2


def test_valiant_fb_uses_the_top_dimension_port_of_the_host():
    """Destinations in another top-dimension row: the host's top-dimension port. In the own row:
    minimal (a top-dimension intermediate would send the frame straight back)."""
    comp = compiled("fb-2d-4x4", "valiant")
    f = comp.fabric
    sw = f.switches[5]
    top = [p for p, peer in sorted(f.fabric_ports(sw.name).items()) if peer.kind == "dim1"]
    detoured = minimal = 0
    for h in f.hosts_on(sw.name):
        for d in f.hosts:
            if d.switch == sw.name:
                continue
            res = Pipeline(comp.flows(sw.name)).process(
                Frame(in_port=h.port, eth_src=comp.plan.host_mac[h.name], eth_dst=comp.plan.host_mac[d.name])
            )
            if f.switch(d.switch).coords[1] != sw.coords[1]:
                assert res.ports == (top[h.index % len(top)],)
                detoured += 1
            else:
                (port,) = res.ports
                assert f.peer(sw.name, port).node == d.switch  # one dimension-0 hop
                minimal += 1
    assert detoured and minimal


def test_rule_counts_per_policy_against_the_paper():
    """Routing entries (the paper's count) and what each policy adds per access switch.

    Paper: FB minimal adaptive "without increasing the number of rules"; DF
    non-minimal "requires T additional rules". Ours: the same routing entries
    (DF: +1 where ORTC cannot merge a conditional and an unconditional route
    to one port), plus what stock OpenFlow needs to switch a rule off: one
    PORT_STATE entry and one fallback per fabric port, and copies of the
    lower-dimension routes in ALTERNATIVE.
    """
    # Flattened Butterfly 4x4x4, T=4: 9 fabric ports, lower-dimension ports 3+3
    fb_min, fb_val, fb_cond = (compiled("fb-3d-4x4x4", r, cos=False).stats() for r in POLICIES)
    assert fb_min["rules_max"] == fb_cond["rules_max"] == fb_val["rules_max"] == 13  # = ports in use
    assert fb_cond["port_state_rules_max"] == 9
    assert fb_cond["alternative_rules_max"] == 9 + (3 + 3) + 2 * 4  # fallbacks + lower dims + Valiant (+2nd)
    assert fb_val["alternative_rules_max"] == 9 + 4  # fallbacks + T Valiant entries
    # Dragonfly a=4 p=2 h=2: T=2, 5 fabric ports
    df_min, df_val, df_cond = (compiled("dragonfly-a4-p2-h2", r, cos=False).stats() for r in POLICIES)
    for extra in (df_cond, df_val):
        assert df_min["rules_min"] <= extra["rules_min"] <= df_min["rules_min"] + 1
        assert df_min["rules_max"] <= extra["rules_max"] <= df_min["rules_max"] + 1
        assert extra["port_state_rules_max"] == 5
    assert df_val["alternative_rules_max"] == 5 + 2  # fallbacks + T
    assert df_cond["alternative_rules_max"] == 5 + 2 * 2  # fallbacks + T + T second choices
    # fat-tree k=4 (edge switches): same routing entries, one alternative per uplink
    ft_min, ft_cond = compiled("fat-tree-k4", "minimal", cos=False).stats(), compiled(
        "fat-tree-k4", "conditional", cos=False
    ).stats()
    assert ft_min["rules_max"] == ft_cond["rules_max"] == 4
    assert ft_cond["alternative_rules_max"] == 2 + 2
    # CoS: T push entries + (levels-1) per raising port
    df = compiled("dragonfly-a4-p2-h2", "conditional")
    assert (df.cos, df.cos_levels) == ("top", 3)
    assert df.stats()["cos_rules_max"] == 2 + 2 * 2 + 2  # T=2 pushes + 2 global ports x 2 steps + T untagged delivery twins


def test_fat_tree_conditional_up_rules_go_through_port_state():
    comp = compiled("fat-tree-k4", "conditional", cos=False)
    f = comp.fabric
    edge = next(s for s in f.switches if s.role == "edge")
    flows = comp.flows(edge.name)
    ups = [x for x in flows if x.table == TABLE_ROUTE and x.match.in_port is not None]
    assert len(ups) == 2 and all(x.goto == TABLE_PORT_STATE and not x.actions for x in ups)
    alts = [x for x in flows if x.table == TABLE_ALTERNATIVE and x.rule_class == RuleClass.ALTERNATIVE]
    assert len(alts) == 2
    for alt in alts:  # the other uplink
        assert alt.match.metadata[0] != alt.actions[0].port and alt.actions[0].port > 2
    # pausing an uplink moves that source's traffic to the other uplink, still delivered
    host = f.hosts_on(edge.name)[0]
    (up,) = [x.write_metadata[0] for x in ups if x.match.in_port == host.port]
    paused, _ = apply_paused(comp, [(edge.name, up)])
    dst = next(h for h in f.hosts if f.switch(h.switch).group != edge.group)
    w = walk_pair(paused, host.name, comp.plan.host_mac[dst.name])
    assert w.host == dst.name and len(w.path) == 5
    res = Pipeline(paused.flows(edge.name)).process(
        Frame(in_port=host.port, eth_src=comp.plan.host_mac[host.name], eth_dst=comp.plan.host_mac[dst.name])
    )
    assert res.ports != (up,)


def test_transit_frames_keep_their_path_when_the_default_port_is_paused():
    """Only injected frames detour; a transit frame whose default port is paused waits on it."""
    comp = compiled("dragonfly-a4-p2-h2", "conditional")
    f = comp.fabric
    sw = "g0s0"
    glob = next(p for p, peer in f.fabric_ports(sw).items() if peer.kind == "global")
    local = next(p for p, peer in f.fabric_ports(sw).items() if peer.kind == "local")
    paused, _ = apply_paused(comp, [(sw, glob)])
    remote = f.switch(f.peer(sw, glob).node).group
    dst = next(h for h in f.hosts if f.switch(h.switch).group == remote)
    pipe = Pipeline(paused.flows(sw))
    transit = pipe.process(Frame(in_port=local, eth_src=0x020000000000, eth_dst=comp.plan.host_mac[dst.name], vlan_pcp=0))
    assert transit.ports == (glob,)
    host = f.hosts_on(sw)[0]
    injected = pipe.process(
        Frame(in_port=host.port, eth_src=comp.plan.host_mac[host.name], eth_dst=comp.plan.host_mac[dst.name])
    )
    assert injected.ports and injected.ports != (glob,)


@pytest.mark.parametrize("cos", [True, False])
def test_h1_dragonfly_detours_through_a_neighbours_global_port(cos):
    """Dragonfly a=2 p=1 h=1 (one global port per switch), conditional: with a switch's global port
    paused, every frame its host injects towards a remote group leaves by a local port, and the
    neighbour sends it on through *its* global port (the bounce entry); none uses the paused port.
    Unpaused, nothing changes: the bounce entries match only such detours."""
    comp = compiled("dragonfly-a2-p1-h1", "conditional", cos=cos)
    f = comp.fabric
    base = verify(comp)
    assert base.ok and base.max_hops == 4
    for sw in f.switches:
        glob = next(p for p, peer in f.fabric_ports(sw.name).items() if peer.kind == "global")
        behind = f.peer(sw.name, glob).node
        paused, _ = apply_paused(comp, [(sw.name, glob)])
        assert verify(paused).ok
        host = f.hosts_on(sw.name)[0]
        remote = [d for d in f.hosts if f.switch(d.switch).group != sw.group]
        for d in remote:
            before = walk_pair(comp, host.name, comp.plan.host_mac[d.name])
            after = walk_pair(paused, host.name, comp.plan.host_mac[d.name])
            assert before.host == after.host == d.name
            assert after.path[1] != behind, (sw.name, d.name, after.path)  # not through the paused port
            nb = f.switch(after.path[1])
            assert nb.group == sw.group and after.path[2] == f.peer(nb.name, next(
                p for p, peer in f.fabric_ports(nb.name).items() if peer.kind == "global")).node
            assert len(after.path) <= 6  # l-g-l-g-l: six switches
        # transit frames still wait on the paused port
        local = next(p for p, peer in f.fabric_ports(sw.name).items() if peer.kind == "local")
        dst = next(d for d in remote if f.switch(d.switch).group == f.switch(behind).group)
        transit = Pipeline(paused.flows(sw.name)).process(
            Frame(in_port=local, eth_src=0x020000000000, eth_dst=comp.plan.host_mac[dst.name], vlan_pcp=0 if cos else None))
        assert transit.ports == (glob,)
    if cos:
        rep = check_deadlock_freedom(comp)  # every single paused port, CoS top/3
        assert rep.ok and rep.acyclic and rep.failed_scenarios == 0 and rep.scenarios == 13


def test_h1_dragonfly_detour_rule_cost():
    """What the h = 1 detour costs: per switch one bounce entry per local port and one ALTERNATIVE entry
    per host; other Dragonflies (h > 1) get none."""
    comp = compiled("dragonfly-a2-p1-h1", "conditional", cos=False)
    for t in comp.tables.values():
        bounce = [fl for fl in t.flows if fl.table == TABLE_PORT_STATE and fl.match.in_port is not None]
        detour = [fl for fl in t.flows if fl.table == TABLE_ALTERNATIVE and fl.match.in_port is not None
                  and fl.match.metadata is not None]
        assert len(bounce) == 1 and len(detour) == 1
    other = compiled("dragonfly-a4-p2-h2", "conditional", cos=False)
    assert not any(fl.table == TABLE_PORT_STATE and fl.match.in_port is not None
                   for t in other.tables.values() for fl in t.flows)


# ---------------------------------------------------------------------------
# classes of service in the rules


def test_cos_tags_at_ingress_raises_on_global_arrival_and_pops_before_hosts():
    comp = compiled("dragonfly-a4-p2-h2", "valiant")
    f = comp.fabric
    src = f.hosts_on("g0s0")[0]
    dst = next(h for h in f.hosts if f.switch(h.switch).group == 5 and f.switch(h.switch).index == 3)
    frame = Frame(in_port=src.port, eth_src=comp.plan.host_mac[src.name], eth_dst=comp.plan.host_mac[dst.name])
    sw, pcps = "g0s0", []
    for _ in range(8):
        res = Pipeline(comp.flows(sw)).process(frame)
        ((port, sent),) = res.outputs
        peer = f.peer(sw, port)
        if peer.is_host:
            assert peer.node == dst.name and sent.vlan_pcp is None  # popped
            break
        pcps.append((f.peer(sw, port).kind, sent.vlan_pcp))
        sw, frame = peer.node, Frame(peer.port, sent.eth_src, sent.eth_dst, sent.eth_type, sent.vlan_pcp)
    else:
        pytest.fail("not delivered")
    assert pcps[0] == ("global", 0)  # Valiant: straight to the intermediate, class 0
    kinds = [k for k, _ in pcps]
    assert kinds.count("global") == 2
    # the PCP rises by one after each global link and never falls
    level = 0
    for kind, pcp in pcps:
        assert pcp == level
        if kind == "global":
            level += 1


@pytest.mark.parametrize("name,routing", [("dragonfly-a2-p1-h1", "conditional"), ("fb-2d-3x3", "valiant")])
def test_dmp_echo_and_control_punts_keep_working_with_cos(name, routing):
    comp = compiled(name, routing)
    assert comp.cos is not None
    f = comp.fabric
    for sw in f.access_switches:
        pipe = Pipeline(comp.flows(sw.name))
        for h in f.hosts_on(sw.name):
            vendor = 0x0A0000000001
            res = pipe.process(Frame(in_port=h.port, eth_src=vendor, eth_dst=vendor, eth_type=ETH_TYPE_DMP))
            ((port, out),) = res.outputs
            assert port == h.port and out.eth_src == comp.plan.host_mac[h.name] and out.vlan_pcp is None
        for port in f.ports(sw.name):
            for eth_type in (ETH_TYPE_LLDP, ETH_TYPE_PAUSE):
                for pcp in (None, 0, 1):
                    res = pipe.process(Frame(in_port=port, eth_src=0x020000000009, eth_dst=0x0180C2000001,
                                             eth_type=eth_type, vlan_pcp=pcp))
                    assert res.punted and not res.outputs
        cos = [x for x in comp.flows(sw.name) if x.table == TABLE_INGRESS and any(isinstance(a, PushVlan) for a in x.actions)]
        assert len(cos) == len(f.hosts_on(sw.name))
        # deliveries: the tagged entry pops (its match guarantees the tag, an OVS prerequisite), its untagged
        # twin at the same priority delivers as before (no frame falls through to a shorter prefix)
        tagged, untagged = [], []
        for x in comp.flows(sw.name):
            if x.table == TABLE_ROUTE and any(isinstance(a, Output) and a.port in f.host_ports(sw.name) for a in x.actions):
                assert x.match.vlan_vid in (VLAN_TAGGED, VLAN_UNTAGGED), x
                if x.match.vlan_vid == VLAN_TAGGED:
                    assert isinstance(x.actions[0], PopVlan)
                    tagged.append(replace(x.match, vlan_vid=None))
                else:
                    assert not any(isinstance(a, PopVlan) for a in x.actions)
                    untagged.append(replace(x.match, vlan_vid=None))
        assert tagged and tagged == untagged
        for pcp in (None, 0):  # either way a frame for a local host reaches it untagged, never routed away
            for h in f.hosts_on(sw.name):
                res = pipe.process(Frame(in_port=max(f.fabric_ports(sw.name)), eth_src=0x020000000009,
                                         eth_dst=comp.plan.host_mac[h.name], vlan_pcp=pcp))
                assert [(p, o.vlan_pcp) for p, o in res.outputs] == [(h.port, None)]


def test_the_default_is_the_proven_scheme_untagged_only_where_one_class_suffices():
    """cos=None compiles default_cos for every policy; tables stay untagged (no VLAN action or
    match at all) only where that is one class: FB minimal, fat-tree up*/down*; cos=False always."""
    for name, routing in [("dragonfly-a4-p2-h2", "minimal"), ("dragonfly-a4-p2-h2", "conditional"),
                          ("dragonfly-a4-p2-h2", "valiant"), ("fb-2d-3x3", "conditional")]:
        comp = compiled(name, routing, cos=None)
        assert (comp.cos, comp.cos_levels) == default_cos(comp.fabric, routing) and comp.cos != "none"
        assert any(isinstance(a, PushVlan) for t in comp.tables.values() for x in t.flows for a in x.actions)
    for name, routing, cos in [("fb-2d-3x3", "minimal", None), ("fat-tree-k4", "conditional", None),
                               ("dragonfly-a4-p2-h2", "conditional", False)]:
        comp = compiled(name, routing, cos=cos)
        assert comp.cos is None and comp.cos_levels == 0
        for t in comp.tables.values():
            for x in t.flows:
                assert not any(isinstance(a, (PushVlan, PopVlan)) for a in x.actions)
                assert x.match.vlan_pcp is None


def test_port_state_entries_are_unchanged_by_policies_and_cos():
    """The controller flips exactly port_state_flow(port, paused) entries: one per fabric port."""
    for name, routing in [("dragonfly-a4-p2-h2", "conditional"), ("fb-2d-4x4", "valiant"), ("fat-tree-k4", "conditional")]:
        comp = compiled(name, routing)
        f = comp.fabric
        for sw in f.switches:
            entries = [x for x in comp.flows(sw.name) if x.table == TABLE_PORT_STATE and x.rule_class == RuleClass.PORT_STATE]
            assert sorted(entries, key=lambda x: x.match.metadata) == [
                port_state_flow(p, False) for p in sorted(f.fabric_ports(sw.name))
            ]
    val = compiled("fb-2d-4x4", "valiant")
    sw, flows = _access(val)
    above = [x for x in flows if x.table == TABLE_PORT_STATE and x.priority == PRIO_VALIANT_ALWAYS]
    assert len(above) == len(val.fabric.hosts_on(sw)) and all(x.match.in_port for x in above)


def test_default_cos_per_fabric_and_policy():
    assert default_cos(fabric("dragonfly-a4-p2-h2"), "minimal") == ("top", 2)
    assert default_cos(fabric("dragonfly-a4-p2-h2"), "conditional") == ("top", 3)
    assert default_cos(fabric("fb-3d-4x4x4"), "conditional") == ("hop", 3)
    assert default_cos(fabric("fb-2d-4x4"), "valiant") == ("top", 2)
    assert default_cos(fabric("fb-2d-4x4"), "minimal") == ("none", 1)
    assert default_cos(fabric("fat-tree-k4"), "conditional") == ("none", 1)


# ---------------------------------------------------------------------------
# combinations that do not exist


@pytest.mark.parametrize(
    "name,routing,mode,message",
    [
        ("fat-tree-k4", "valiant", "compact", "already oblivious multipath"),
        ("explicit-ring4", "conditional", "compact", "conditional routing is implemented for"),
        ("explicit-ring4", "valiant", "per-group", "valiant routing is implemented for"),
        ("fb-2d-4x4", "conditional", "per-switch", "not for flattened_butterfly with per-switch"),
        ("fb-2d-4x4", "valiant", "flat", "not for flattened_butterfly with flat"),
    ],
)
def test_unsupported_policies_are_clear_compile_errors(name, routing, mode, message):
    f = fabric(name)
    with pytest.raises(CompileError, match=message):
        compile_fabric(f, plan_addresses(f, mode), routing=routing)


def test_fb_per_group_needs_power_of_two_lower_dimensions():
    f = flattened_butterfly_fabric([3, 3, 3], 1)
    with pytest.raises(CompileError, match="power-of-two"):
        compile_fabric(f, plan_addresses(f, "per-group"), routing="conditional")
    assert verify(compile_fabric(f, plan_addresses(f, "compact"), routing="conditional", cos=True)).ok
    g = flattened_butterfly_fabric([3, 5], 2)  # 2-D: dimension 0 is the switch field, any size works
    assert verify(compile_fabric(g, plan_addresses(g, "per-group"), routing="conditional", cos=True)).ok


def test_bad_cos_arguments():
    f = fabric("fb-2d-3x3")
    plan = plan_addresses(f, "compact")
    with pytest.raises(CompileError, match="unknown CoS scheme"):
        compile_fabric(f, plan, routing="valiant", cos="sideways")
    with pytest.raises(CompileError, match="1..8"):
        compile_fabric(f, plan, routing="valiant", cos=True, cos_levels=9)
    with pytest.raises(CompileError, match="needs cos enabled"):
        compile_fabric(f, plan, routing="valiant", cos=False, cos_levels=2)
    g = fabric("explicit-ring4")
    with pytest.raises(CompileError, match="top-level link"):
        compile_fabric(g, plan_addresses(g, "compact"), cos="top")
    with pytest.raises(CompileError, match="unknown routing policy"):
        compile_fabric(f, plan, routing="adaptive")


def test_rules_cli_reports_policy_counts(capsys):
    from hpcfabric.cli import main

    assert main(["rules", str(TOPOLOGIES / "fb-2d-4x4.yaml"), "--routing", "conditional", "--cos", "on"]) == 0
    out = capsys.readouterr().out
    assert "conditional routing, CoS hop (2 PCP levels)" in out and "PORT_STATE 6" in out
    assert main(["rules", str(TOPOLOGIES / "fb-2d-4x4.yaml"), "--routing", "valiant", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["routing"] == "valiant" and data["cos"] == "top" and data["cos_levels"] == 2
    assert main(["rules", str(TOPOLOGIES / "fat-tree-k4.yaml"), "--routing", "valiant"]) == 2
    assert "oblivious" in capsys.readouterr().err


def _bounces(comp, limit: int = 5) -> list[str]:
    """Pairs whose frame some switch sends back out of the port it arrived on (OpenFlow drops
    those: sending back needs OFPP_IN_PORT), walked here independently of the verifier."""
    f = comp.fabric
    pipes = {s.name: Pipeline(comp.flows(s.name)) for s in f.switches}
    out: list[str] = []
    for a in f.hosts:
        for b in f.hosts:
            if a is b:
                continue
            sw, fr = a.switch, Frame(in_port=a.port, eth_src=comp.plan.host_mac[a.name], eth_dst=comp.plan.host_mac[b.name])
            for _ in range(len(f.switches) + 1):
                res = pipes[sw].process(fr)
                if res.to_ingress:
                    out.append(f"{a.name}->{b.name} at {sw} port {res.to_ingress[0]}")
                    break
                if len(res.outputs) != 1:
                    break
                port, sent = res.outputs[0]
                peer = f.peer(sw, port)
                if peer is None or peer.is_host:
                    break
                sw, fr = peer.node, Frame(in_port=peer.port, eth_src=sent.eth_src, eth_dst=sent.eth_dst,
                                          vlan_pcp=sent.vlan_pcp)
            if len(out) >= limit:
                return out
    return out


@pytest.mark.parametrize("name,routing,step", [
    ("fb-2d-3x3", "valiant", 1), ("fb-2d-3x3", "conditional", 1), ("fb-2d-4x4", "valiant", 4),
    ("fb-2d-4x4", "conditional", 12), ("dragonfly-a2-p1-h1", "valiant", 1), ("dragonfly-a2-p1-h1", "conditional", 1),
    ("dragonfly-a4-p2-h2", "conditional", 61), ("fat-tree-k4", "conditional", 7),
])
def test_no_frame_leaves_through_its_ingress_port(name, routing, step):
    """Unpaused and with single ports paused, no switch sends a frame back where it came from. (FB
    Valiant via a top-dimension intermediate for a destination in the own row did: the intermediate's
    minimal route fixes the top coordinate first and goes straight back.)"""
    comp = compiled(name, routing)
    assert not _bounces(comp)
    for sw, port in pausable_ports(comp)[::step]:
        paused, _ = apply_paused(comp, [(sw, port)])
        assert not _bounces(paused), (sw, port)


def test_the_bounce_check_sees_fb_valiant_without_the_row_condition():
    from dataclasses import replace as dreplace

    comp = compiled("fb-2d-3x3", "valiant")
    loose = dreplace(comp, tables={
        n: dreplace(t, flows=tuple(dreplace(f, match=dreplace(f.match, metadata=None))
                                   if f.table == TABLE_PORT_STATE and f.rule_class == RuleClass.ALTERNATIVE else f
                                   for f in t.flows))
        for n, t in comp.tables.items()})
    assert _bounces(loose)
    exact = verify(loose)  # one row per ingress port: the frames sent back are dropped, as on OVS
    assert exact.ingress_exact and not exact.ok and exact.dropped > 0
    merged = verify(loose, per_port=False)  # merged ingress classes cannot see them
    assert merged.ok and not merged.ingress_exact
    assert verify(comp).ok and verify(comp).ingress_exact
