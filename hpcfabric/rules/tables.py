"""The compiler's shared vocabulary: priorities, metadata layout, cookie details
and the values compilation produces (:class:`Route`, :class:`SwitchTable`,
:class:`CompiledFabric`).

Priorities by table (tables: :mod:`hpcfabric.rules.flows`):

* INGRESS: DMP echo 2000, switch-local PAUSE learn 1901, control punts 1900,
  CoS push/steps 100 (CNM copies 99/101), table miss 0;
* ROUTE: prefix entries ``1000 + prefix length`` (longest prefix first); on a surviving fabric
  FB two-coordinate entries 1050+e and in_port overrides 1100;
  fat-tree / folded-Clos up entries by ``in_port`` 500, table miss 0;
* PORT_STATE: Valiant's always-detour entries 200, one entry per port 100;
* ALTERNATIVE: FB lower dimensions 30+d, Valiant detours 20/21, fat-tree
  next uplink 10, per-port fallbacks 1;
* PAUSE_LEARN / PAUSE_SELECT: the switch-local PAUSE reaction
  (:mod:`hpcfabric.rules.port_state`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import mean
from typing import Any, Mapping

from hpcfabric.rules.addressing import AddressPlan
from hpcfabric.rules.flows import TABLE_ALTERNATIVE, TABLE_PORT_STATE, FlowSpec, RuleClass
from hpcfabric.topology.model import Fabric

PRIO_DMP = 2000
PRIO_PUNT = 1900
PRIO_LPM_BASE = 1000
PRIO_BYPASS = 1100  # table ROUTE, surviving Dragonfly: in_port + group, for frames arriving on the bypass port
PRIO_FB_PAIR = 1050  # table ROUTE, surviving FB: two coordinates of a destination (+ the lower one's dimension)
PRIO_UP = 500
PRIO_MISS = 0

PRIO_PORT_STATE = 100
PRIO_VALIANT_ALWAYS = 200  # table PORT_STATE, valiant policy: injected frames -> intermediate
PRIO_BOUNCE = 150  # table PORT_STATE, conditional Dragonfly h=1: a neighbour's detour -> own global port
PRIO_ALT_DIM = 30
PRIO_VALIANT = 20
PRIO_ALT_UP = 10  # fat-tree: another uplink while the default one is paused
PRIO_FALLBACK = 1

#: switch-local PAUSE reaction (``pause_reaction="switch"``, docs/controller.md)
PRIO_PAUSE_LEARN = 1901  # table INGRESS, per fabric port, above the generic MAC-control punt (1900)
PRIO_LEARNED = 100  # table PAUSE_LEARN: the overrides the switch learns
PRIO_SELECT_PAUSED = 200  # table PAUSE_SELECT: an override is present -> ALTERNATIVE
PRIO_SELECT_PORT = 100  # table PAUSE_SELECT: per port -> output it
REG_PAUSED = (1, 1)  # reg0 bit 0: "the port in the metadata has a learned override"
COOKIE_LEARN_NOOP = 2  # INFRA detail of the table PAUSE_LEARN miss entry
COOKIE_SELECT_PAUSED = 1 << 16  # PORT_STATE detail of the PAUSE_SELECT "paused" entry

PRIO_COS = 100  # table INGRESS: push on host ports, PCP transitions on fabric ports
#: INFRA cookie details of the CoS entries (above the table-miss details 0 and 1)
COOKIE_COS_PUSH = 1 << 32
COOKIE_COS_STEP = 2 << 32
COOKIE_COS_UNTAGGED = 3 << 32  # untagged twin of a delivery entry (table ROUTE, :func:`hpcfabric.rules.cos.pop_before_hosts`)

#: metadata written by conditional default rules: output port in the low 16
#: bits, FB lower dimensions allowed as alternatives in the next 8.
METADATA_PORT_MASK = 0xFFFF
METADATA_DIMS_SHIFT = 16
METADATA_MASK = 0xFFFFFF
COND_HOP = 1 << 24  # marks conditional next hops inside ORTC
DIMS_HOP_SHIFT = 32  # ... and their FB lower-dimension mask above it


@dataclass(frozen=True, slots=True)
class Route:
    """A destination prefix (``bits``/``length`` over the layout's used bits) and
    the port serving it (None = drop)."""

    bits: int
    length: int
    port: int | None
    rule_class: int
    conditional: bool = False  # a default rule that may switch off while its port is paused
    dims: int = 0  # FB: lower dimensions a paused frame may turn to (bit d = dimension d)


@dataclass(frozen=True, eq=False)
class SwitchTable:
    """Compiled flows of one switch, with the counts the paper reports."""

    switch: str
    dpid: int
    flows: tuple[FlowSpec, ...]
    ports: int
    access: bool

    @property
    def forwarding(self) -> int:
        """Routing/forwarding entries (host delivery + routing), as the paper counts them."""
        return sum(1 for f in self.flows if f.rule_class in RuleClass.FORWARDING)

    def count(self, rule_class: int) -> int:
        return sum(1 for f in self.flows if f.rule_class == rule_class)


@dataclass(frozen=True, eq=False)
class CompiledFabric:
    """Compiled tables of every switch. ``cos``: the class-of-service scheme
    (None: frames stay untagged), ``cos_levels``: PCP values in use (0 untagged)."""

    fabric: Fabric
    plan: AddressPlan
    routing: str
    tables: Mapping[str, SwitchTable] = field(default_factory=dict)
    cos: str | None = None
    cos_levels: int = 0
    pause_reaction: str = "controller"
    switch_hold_s: int = 1
    #: traffic-chosen Valiant ports per switch and host port (empty: static; rules.policies.workload)
    intermediates: Mapping[str, Mapping[int, tuple[int, ...]]] = field(default_factory=dict)
    #: links and switches out of service the tables route around (topology.failures; empty: none)
    failures: Any = None

    def flows(self, switch: str) -> tuple[FlowSpec, ...]:
        return self.tables[switch].flows

    @property
    def total_flows(self) -> int:
        return sum(len(t.flows) for t in self.tables.values())

    def stats(self) -> dict[str, Any]:
        """Rule counts: ``rules_*`` over access switches (the paper's count),
        ``all_rules_*`` over every switch, plus DMP and total flow counts."""
        access = [t.forwarding for t in self.tables.values() if t.access] or [0]
        every = [t.forwarding for t in self.tables.values()] or [0]
        return {
            "fabric": self.fabric.name,
            "kind": self.fabric.kind,
            "addressing": self.plan.mode,
            "layout": self.plan.layout.describe(),
            "routing": self.routing,
            "switches": len(self.fabric.switches),
            "hosts": len(self.fabric.hosts),
            "rules_min": min(access),
            "rules_max": max(access),
            "rules_mean": round(mean(access), 3),
            "all_rules_min": min(every),
            "all_rules_max": max(every),
            "dmp_rules": sum(t.count(RuleClass.DMP) for t in self.tables.values()),
            "total_flows": self.total_flows,
            "cos": self.cos,
            "cos_levels": self.cos_levels,
            **policy_counts(self),
        }


def policy_counts(compiled: "CompiledFabric") -> dict[str, Any]:
    """Entries per access switch beyond the routing rules (min/max): PORT_STATE,
    ALTERNATIVE (incl. valiant entries in PORT_STATE) and CoS entries."""
    cols: dict[str, list[int]] = {"port_state": [], "alternative": [], "cos": []}
    for t in compiled.tables.values():
        if not t.access:
            continue
        ps = alt = cos = 0
        for f in t.flows:
            rc = f.rule_class
            if f.table == TABLE_PORT_STATE and rc == RuleClass.PORT_STATE:
                ps += 1
            elif f.table in (TABLE_PORT_STATE, TABLE_ALTERNATIVE):
                alt += 1
            elif rc == RuleClass.INFRA and f.cookie & (3 << 32):  # pushes, steps (INGRESS), untagged twins (ROUTE)
                cos += 1
        cols["port_state"].append(ps)
        cols["alternative"].append(alt)
        cols["cos"].append(cos)
    out: dict[str, Any] = {}
    for k, v in cols.items():
        out[f"{k}_rules_min"] = min(v, default=0)
        out[f"{k}_rules_max"] = max(v, default=0)
    return out
