"""Rule compiler: fabric + address plan -> per-switch flow tables (pure).

Routing entries live in table ``ROUTE`` and match ``eth_dst`` with masks.
Per addressing mode, an access switch holds:

``flat``        one entry per host in the fabric (the CAM baseline)
``per-switch``  its T hosts + one entry per other access switch
``per-group``   its T hosts + (S-1) switches of its group + (G-1) groups (Eq. 1)
``compact``     the per-group function compacted:

  * Dragonfly and explicit fabrics: optimal longest-prefix compaction (ORTC)
    of the per-group table, priorities ``1000 + prefix length``;
  * Flattened Butterfly: one entry per port -- hosts exact, then for each
    dimension ``d`` and coordinate ``v`` an entry matching only ``dim_d = v``,
    higher dimensions at higher priority (dimension-order routing);
  * fat-tree and folded Clos: destinations below the switch matched by
    prefix, everything else sent up by ``in_port`` (the source's attachment
    point, i.e. a static hash of the source address bits): one entry per port.

All modes are loop-free for every destination address, including addresses
nobody owns (they are dropped, never forwarded in a circle).

Routing policies (``routing=``): ``minimal`` (the tables above), ``valiant``
(frames injected by host *t* always leave through the switch's *t*-th global /
highest-dimension port, minimal from there) and ``conditional`` (default rules
switch off while their port is PAUSEd; alternatives in table ALTERNATIVE).
Classes of service for deadlock freedom (``cos=``) ride in a VLAN tag pushed at
host ingress: its PCP rises on class-changing hops and the tag is popped before
delivery. See docs/routing.md.

:func:`compile_switch` puts one switch's table together from the parts:
ROUTE (:mod:`~hpcfabric.rules.policies.minimal`, from the per-mode routes of
:mod:`~hpcfabric.rules.destinations` and the per-kind tables of
:mod:`hpcfabric.rules.fabrics`), PORT_STATE (:mod:`~hpcfabric.rules.port_state`)
and the policy's entries (:mod:`~hpcfabric.rules.policies.valiant`,
:mod:`~hpcfabric.rules.policies.conditional`), classes of service
(:mod:`~hpcfabric.rules.cos`) and the infrastructure entries
(:mod:`~hpcfabric.rules.infra`). Priorities and the values produced:
:mod:`~hpcfabric.rules.tables`.
"""

from __future__ import annotations

from typing import Callable, Mapping

from hpcfabric.errors import CompileError
from hpcfabric.rules.addressing import AddressPlan
from hpcfabric.rules.context import Context
from hpcfabric.rules.cos import cos_flows, pop_before_hosts, resolve_cos
from hpcfabric.rules.fabrics.updown import UP_DOWN_KINDS
from hpcfabric.rules.flows import PAUSE_REACTIONS, sort_flows
from hpcfabric.rules.infra import cnm_snoop_flows, infra_flows
from hpcfabric.rules.policies.conditional import conditional_flows
from hpcfabric.rules.policies.minimal import minimal_flows
from hpcfabric.rules.policies.valiant import valiant_flows
from hpcfabric.rules.policies.workload import choose_intermediates
from hpcfabric.rules.port_state import default_rule_flows, switch_pause_flows
from hpcfabric.rules.tables import CompiledFabric, SwitchTable
from hpcfabric.rules.routing import router_for
from hpcfabric.topology.failures import NO_FAILURES, Failures
from hpcfabric.topology.model import Fabric, Switch, gc_paused
from hpcfabric.topology.traffic import TrafficMatrix

ROUTINGS = ("minimal", "valiant", "conditional")
#: what each non-minimal policy adds to the default rules' PORT_STATE entries and fallbacks
POLICY_FLOWS = {"valiant": valiant_flows, "conditional": conditional_flows}


def compile_switch(ctx: Context, sw: Switch, *, punts: bool = True) -> SwitchTable:
    """Compile the flow table of one switch."""
    fabric = ctx.fabric
    adaptive = ctx.routing != "minimal"
    flows = minimal_flows(ctx, sw, adaptive)
    if adaptive:
        flows += default_rule_flows(fabric, sw, ctx.pause_reaction)
        flows += POLICY_FLOWS[ctx.routing](ctx, sw)
    if ctx.cos is not None:
        flows = pop_before_hosts(flows, set(fabric.host_ports(sw.name)), ctx.shared.setdefault("cos-pop", {}))
        flows += cos_flows(fabric, sw, ctx.cos, ctx.cos_levels)
    if ctx.cnm_snoop:
        flows += cnm_snoop_flows(fabric, sw, ctx.cos, ctx.cos_levels)
    flows += infra_flows(fabric, ctx.plan, sw, punts)
    if adaptive and ctx.pause_reaction == "switch":
        flows += switch_pause_flows(fabric, sw, ctx.switch_hold_s, punts)
    return SwitchTable(sw.name, sw.dpid, sort_flows(flows), fabric.radix(sw.name), bool(fabric.hosts_on(sw.name)))


def _check_policy(fabric: Fabric, plan: AddressPlan, routing: str) -> None:
    if routing not in ROUTINGS:
        raise CompileError(f"unknown routing policy {routing!r}; expected one of {', '.join(ROUTINGS)}")
    if routing == "minimal":
        return
    kind, mode = fabric.kind, plan.mode
    if routing == "valiant" and kind in ("fat_tree", "folded_clos"):
        raise CompileError(
            f"valiant routing does not apply to a {kind}: up-down routing over per-source uplinks is already "
            f"oblivious multipath (every path is minimal); use minimal or conditional"
        )
    supported = (
        kind == "dragonfly"
        or (kind == "flattened_butterfly" and mode in ("compact", "per-group"))
        or (kind in UP_DOWN_KINDS and routing == "conditional")
    )
    if not supported:
        raise CompileError(
            f"{routing} routing is implemented for Dragonfly (any addressing), Flattened Butterfly (compact "
            f"and per-group addressing){' and fat-tree / folded Clos (any addressing)' if routing == 'conditional' else ''}; "
            f"not for {kind} with {mode} addressing"
        )


def compile_fabric(
    fabric: Fabric,
    plan: AddressPlan,
    *,
    routing: str = "minimal",
    punts: bool = True,
    cos: bool | str | None = None,
    cos_levels: int | None = None,
    cnm_snoop: bool = False,
    pause_reaction: str = "controller",
    switch_hold_s: int = 1,
    only: Callable[[str], bool] | None = None,
    traffic: TrafficMatrix | None = None,
    intermediates: Mapping[str, Mapping[int, tuple[int, ...]]] | None = None,
    failures: Failures | None = None,
    redirect_detours: bool = True,
) -> CompiledFabric:
    """Compile every switch of ``fabric`` for ``plan`` (its mode selects the table organisation).

    Parameters
    ----------
    routing : {'minimal', 'valiant', 'conditional'}
        Routing policy (docs/routing.md).
    cos : bool or str, optional
        Classes of service in a VLAN tag (PCP) for deadlock freedom: False =
        untagged frames; True = the fabric's default scheme and levels
        (:func:`~hpcfabric.rules.cos.default_cos`); or a scheme name from :data:`~hpcfabric.rules.cos.COS_SCHEMES`.
        Default (None): :func:`~hpcfabric.rules.cos.default_cos` for every policy -- the fewest
        classes for which the channel dependency graph is proven acyclic; untagged where that
        is one class (up*/down* fat-tree and Clos, FB minimal). docs/routing.md.
    cos_levels : int, optional
        PCP values to use (1..8); increments saturate at ``cos_levels - 1``.
        Default: :func:`~hpcfabric.rules.cos.default_cos` for ``cos=True``, else as many as the
        longest path can use (:func:`~hpcfabric.rules.cos.cos_levels_needed`).
    cnm_snoop : bool
        Copy 802.1Qau congestion notifications arriving on fabric ports to the
        controller (and keep forwarding them), for :func:`hpcfabric.protocols.cnm.on_cnm`.
    pause_reaction : {'controller', 'switch'}
        Who switches a paused port's default rules off: the controller (it
        flips the PORT_STATE entry on a punted PAUSE) or the switch itself
        (Open vSwitch ``learn``/``resubmit`` extensions: a PAUSE learns a
        timed override, :func:`~hpcfabric.rules.port_state.switch_pause_flows`). ``switch`` needs a
        policy with PORT_STATE entries (conditional or valiant).
    switch_hold_s : int
        Switch mode: seconds a learned override lasts after the last PAUSE
        (1..65535; OVS timeouts are whole seconds).
    only : callable, optional
        Compile only the switches whose name it accepts (a controller partition,
        ``[ha] switches``); the others have no table in the result.
    traffic : TrafficMatrix, optional
        An application's traffic matrix (:mod:`hpcfabric.topology.traffic`): the valiant and
        conditional policies take the Valiant ports of every host port from
        :func:`~hpcfabric.rules.policies.workload.choose_intermediates` for it (same entries per
        switch, same classes of service; docs/workload.md). None: the static choice, tables
        identical to a compile without it. Ignored by minimal routing.
    intermediates : mapping, optional
        Already chosen Valiant ports (``switch -> host port -> ports``, e.g. a
        :class:`~hpcfabric.rules.policies.workload.WorkloadChoice`'s) instead of ``traffic``.
    failures : Failures, optional
        Links and switches out of service (:mod:`hpcfabric.topology.failures`): compile the
        surviving fabric -- the same policy, PORT_STATE, alternatives and classes of service,
        with routes around what is out (:mod:`hpcfabric.rules.routing`). Every entry whose path
        does not cross a failure is the one compiled without failures; only the switches
        :func:`affected_switches` names can differ. Destinations with no surviving route are
        dropped. docs/routing.md, "Failures".
    redirect_detours : bool
        With ``failures``: Valiant and conditional detours of every host port that lead into a Dragonfly
        group without a live link to the destination's group are sent elsewhere at the source, so no path
        crosses more than two global links (more switches change); off: only the groups with a failure
        change, and such a detour crosses a third global link (:mod:`hpcfabric.rules.surviving`).

    Raises
    ------
    CompileError
        Unknown routing policy or CoS scheme, a policy the fabric does not
        support, or a fabric the mode cannot route (e.g. an explicit fabric
        with a group that is not connected inside itself).
    """
    _check_policy(fabric, plan, routing)
    if pause_reaction not in PAUSE_REACTIONS:
        raise CompileError(f"unknown pause reaction {pause_reaction!r}; expected one of {', '.join(PAUSE_REACTIONS)}")
    if pause_reaction == "switch" and routing == "minimal":
        raise CompileError("switch-local pause reaction needs conditional (or valiant) routing: "
                           "minimal routing has no PORT_STATE entries to switch")
    if not 1 <= switch_hold_s <= 0xFFFF:
        raise CompileError(f"switch_hold_s must be 1..65535 seconds, got {switch_hold_s}")
    scheme, levels = resolve_cos(fabric, routing, cos, cos_levels)
    if plan.fabric is not fabric:
        raise CompileError("address plan was made for another fabric")
    with gc_paused():
        ctx = Context(fabric, plan, routing, failures or NO_FAILURES)
        ctx.redirect = redirect_detours
        ctx.cos, ctx.cos_levels, ctx.cnm_snoop = scheme, levels, cnm_snoop
        ctx.pause_reaction, ctx.switch_hold_s = pause_reaction, switch_hold_s
        if routing in ("valiant", "conditional") and fabric.kind in ("dragonfly", "flattened_butterfly"):
            if intermediates is None and traffic is not None:
                intermediates = choose_intermediates(fabric, traffic, routing).intermediates
            ctx.intermediates = intermediates or {}
        tables = {sw.name: compile_switch(ctx, sw, punts=punts) for sw in fabric.switches if only is None or only(sw.name)}
    return CompiledFabric(fabric, plan, routing, tables, scheme, levels, pause_reaction, switch_hold_s,
                          ctx.intermediates, failures or NO_FAILURES)


def affected_switches(fabric: Fabric, failures: Failures, redirect_detours: bool = True) -> frozenset[str] | None:
    """Switches whose compiled tables ``failures`` can change (None: any of them); the others compile exactly
    as without failures, so a repair compiles only these (``compile_fabric(..., only=...)``)."""
    return router_for(fabric, failures).affected(redirect_detours)

