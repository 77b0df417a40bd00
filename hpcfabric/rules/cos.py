"""Classes of service for deadlock freedom: a VLAN tag whose PCP rises on class-changing hops.

Frames from hosts get a tag with PCP 0 at INGRESS; on the ports the scheme
names a frame's PCP rises by one (saturating at ``levels - 1``); the tag is
popped before delivery to a host (:func:`pop_before_hosts`). Schemes
(:data:`COS_SCHEMES`), the levels a fabric needs (:func:`cos_levels_needed`)
and the defaults ``cos=True`` selects (:func:`default_cos`): docs/routing.md.
The compiler's default (``cos=None``) is :func:`default_cos` for every fabric and policy,
untagged where that is one class (``none``: up*/down* fat-tree and Clos, FB minimal): the
default tables are deadlock-free under per-priority flow control (PFC).
"""

from __future__ import annotations

from dataclasses import replace

from hpcfabric.errors import CompileError
from hpcfabric.rules.flows import (
    TABLE_INGRESS,
    TABLE_ROUTE,
    VLAN_TAGGED,
    VLAN_UNTAGGED,
    FlowSpec,
    Match,
    Output,
    PopVlan,
    PushVlan,
    RuleClass,
    SetField,
    make_cookie,
)
from hpcfabric.rules.tables import COOKIE_COS_PUSH, COOKIE_COS_STEP, COOKIE_COS_UNTAGGED, PRIO_COS
from hpcfabric.topology.model import Fabric, Switch

#: Class-of-service schemes: which arrivals raise the VLAN PCP by one.
#: ``none`` tags every frame with PCP 0 and never changes it (one class);
#: ``top`` raises it on arrival over a top-level link (Dragonfly global link,
#: Flattened Butterfly highest dimension, fat-tree aggregation-core);
#: ``hop`` on arrival over any fabric link.
COS_SCHEMES = ("none", "top", "hop")
MAX_COS_LEVELS = 8  # 3-bit PCP


def cos_step_ports(fabric: Fabric, sw: Switch, scheme: str) -> list[int]:
    """Fabric ports of ``sw`` whose arrivals raise the PCP under ``scheme``."""
    if scheme == "none":
        return []
    ports = fabric.fabric_ports(sw.name)
    if scheme == "hop":
        return sorted(ports)
    kind = top_link_kind(fabric)
    return sorted(p for p, peer in ports.items() if peer.kind == kind)


def top_link_kind(fabric: Fabric) -> str:
    if fabric.kind == "dragonfly":
        return "global"
    if fabric.kind == "flattened_butterfly":
        return f"dim{len(fabric.params['dims']) - 1}"
    if fabric.kind == "fat_tree":
        return "agg-core"
    raise CompileError(f"CoS scheme 'top' has no top-level link kind on a {fabric.kind} fabric; use 'hop'")


def cos_flows(fabric: Fabric, sw: Switch, scheme: str, levels: int) -> list[FlowSpec]:
    """Table INGRESS entries carrying the class of service in the VLAN PCP.

    Frames from hosts get a VLAN tag with PCP 0 (below the DMP echo and the
    control punts, which keep matching first); on the ports ``scheme`` names,
    a frame arriving with PCP k < levels-1 leaves INGRESS with PCP k+1
    (saturating at levels-1). The tag is popped before delivery to a host
    (:func:`pop_before_hosts`). The steps also match ``vlan_vid`` =
    :data:`~hpcfabric.rules.flows.VLAN_TAGGED` (any tag): switches check OXM
    prerequisites, and a ``vlan_pcp`` match or ``set_field vlan_pcp`` without a
    preceding ``push_vlan`` needs a match that guarantees the tag.
    """
    flows = []
    for h in fabric.hosts_on(sw.name):
        flows.append(
            FlowSpec(
                TABLE_INGRESS,
                PRIO_COS,
                Match(in_port=h.port),
                (PushVlan(), SetField("vlan_pcp", 0)),
                make_cookie(RuleClass.INFRA, COOKIE_COS_PUSH | h.port),
                goto=TABLE_ROUTE,
            )
        )
    for port in cos_step_ports(fabric, sw, scheme):
        for k in range(levels - 1):
            flows.append(
                FlowSpec(
                    TABLE_INGRESS,
                    PRIO_COS,
                    Match(in_port=port, vlan_pcp=k, vlan_vid=VLAN_TAGGED),
                    (SetField("vlan_pcp", k + 1),),
                    make_cookie(RuleClass.INFRA, COOKIE_COS_STEP | k << 24 | port),
                    goto=TABLE_ROUTE,
                )
            )
    return flows


def pop_before_hosts(
    flows: list[FlowSpec], host_ports: set[int], cache: dict[FlowSpec, tuple[FlowSpec, ...]]
) -> list[FlowSpec]:
    """Insert ``pop_vlan`` before every output to a host port (frames reach hosts untagged).

    Switches check OXM prerequisites: ``pop_vlan`` needs a match that guarantees a
    tag, so such an entry becomes two at the same priority: ``vlan_vid`` =
    :data:`~hpcfabric.rules.flows.VLAN_TAGGED` with the pops (every data frame leaves
    INGRESS tagged with CoS), and ``vlan_vid`` = :data:`~hpcfabric.rules.flows.VLAN_UNTAGGED`
    with the original actions. The untagged twin keeps what the entry did for
    untagged frames (none of our switches sends one onto a fabric link): without
    it such a frame would fall through to a shorter prefix and could be routed
    away from its own access switch and back (a loop). The twin is a CoS entry
    (cookie class INFRA, :data:`~hpcfabric.rules.tables.COOKIE_COS_UNTAGGED`), not a routing rule: the
    paper's count stays the tagged entry's."""
    out = []
    for f in flows:
        if f.table == TABLE_INGRESS or not any(isinstance(a, Output) and a.port in host_ports for a in f.actions):
            out.append(f)
            continue
        new = cache.get(f)
        if new is None:
            if f.match.vlan_vid is not None:
                raise CompileError(f"entry already matches vlan_vid: {f}")
            actions: list = []
            for a in f.actions:
                if isinstance(a, Output) and a.port in host_ports:
                    actions.append(PopVlan())
                actions.append(a)
            new = cache[f] = (
                replace(f, match=replace(f.match, vlan_vid=VLAN_TAGGED), actions=tuple(actions)),
                replace(f, match=replace(f.match, vlan_vid=VLAN_UNTAGGED),
                        cookie=make_cookie(RuleClass.INFRA, COOKIE_COS_UNTAGGED | (f.cookie & 0xFFFFFFFF))),
            )
        out.extend(new)
    return out


def cos_levels_needed(fabric: Fabric, routing: str, scheme: str) -> int:
    """PCP values a frame can carry on fabric links under ``scheme`` without saturating."""
    if scheme == "none":
        return 1
    nonminimal = routing != "minimal"
    kind = fabric.kind
    if kind == "dragonfly":
        links, top = (4, 2) if nonminimal else (3, 1)  # g-l-g-l / l-g-l
    elif kind == "flattened_butterfly":
        n = len(fabric.params["dims"])
        links, top = (n + 1, 2) if nonminimal else (n, 1)
    elif kind == "fat_tree":
        links, top = 4, 1
    else:
        links, top = len(fabric.switches) - 1, 0
    # a link carries the PCP raised by the arrivals before it; the last arrival raises nothing used
    need = links if scheme == "hop" else 1 + min(top, links - 1)
    return max(1, min(MAX_COS_LEVELS, need))


def default_cos(fabric: Fabric, routing: str) -> tuple[str, int]:
    """(scheme, levels) that ``cos=True`` selects: the fewest classes for which the
    channel dependency graph of the shipped fabrics is acyclic over every single
    paused port (:mod:`hpcfabric.verify.oracle.cdg`; measurements and the cycles found with one
    class less in docs/routing.md)."""
    kind = fabric.kind
    if kind == "dragonfly":  # +1 per global link: l-g-l needs 2, g-l-g-l 3
        return "top", 2 if routing == "minimal" else 3
    if kind == "flattened_butterfly":
        if routing == "minimal":  # dimension order: one class
            return "none", 1
        if routing == "valiant":  # one extra top-dimension hop first: 2
            return "top", 2
        return "hop", len(fabric.params["dims"])  # minimal adaptive in any order + Valiant: N
    if kind in ("fat_tree", "folded_clos"):  # up-down: one class
        return "none", 1
    return "hop", cos_levels_needed(fabric, routing, "hop")


def resolve_cos(
    fabric: Fabric, routing: str, cos: bool | str | None, cos_levels: int | None
) -> tuple[str | None, int]:
    if cos is None:  # the safe default: the fewest classes the CDG check proves, untagged where one suffices
        scheme, levels = default_cos(fabric, routing)
        if scheme == "none" and cos_levels is None:
            return None, 0
        cos = True
    if cos is False:
        if cos_levels:
            raise CompileError("cos_levels needs cos enabled")
        return None, 0
    if cos is True:
        scheme, levels = default_cos(fabric, routing)
    else:
        scheme = cos
        if scheme not in COS_SCHEMES:
            raise CompileError(f"unknown CoS scheme {scheme!r}; expected one of {', '.join(COS_SCHEMES)}")
        if scheme == "top":
            top_link_kind(fabric)
        levels = cos_levels_needed(fabric, routing, scheme)
    if cos_levels is not None:
        levels = cos_levels
    if not 1 <= levels <= MAX_COS_LEVELS:
        raise CompileError(f"cos_levels must be 1..{MAX_COS_LEVELS} (3-bit VLAN PCP), got {levels}")
    return scheme, levels
