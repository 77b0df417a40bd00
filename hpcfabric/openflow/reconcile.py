"""Desired vs installed flow tables (pure): what to add, change and delete.

Flows are identified as OpenFlow identifies them: (table, priority, match).
An installed flow is *ours* when its cookie carries the hpcfabric tag
(0x4846 in the top 16 bits); anything else is *foreign*: reported, never
deleted. A foreign flow that sits exactly on a key we need is a *conflict*:
our flow replaces it (an OFPFC_ADD with the same match and priority
overwrites), because the fabric cannot work without it; it is reported.

Two flows with the same key are equal when actions, cookie, goto,
write-metadata and meter agree (after normalisation: a zero-mask field is a wildcard).

Entries the switch learned itself (cookie class ``LEARNED``: switch-local PAUSE
overrides, :func:`hpcfabric.rules.port_state.pause_learn_action`) are state, not
configuration: they are ignored (never deleted, not counted as foreign).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable

from hpcfabric.rules.flows import FlowSpec, Match, RuleClass, cookie_class

_ALL64 = (1 << 64) - 1


def _canon_masked(vm: tuple[int, int] | None) -> tuple[int, int] | None:
    if vm is None or vm[1] == 0:
        return None
    return vm


def canonical(flow: FlowSpec) -> FlowSpec:
    """The flow as a switch reports it back (zero masks dropped)."""
    m = flow.match
    wm = flow.write_metadata
    if not any(vm is not None and vm[1] == 0 for vm in (m.eth_src, m.eth_dst, m.metadata, m.reg0, wm)):
        return flow  # nothing to drop (almost every flow): no new Match built to find that out
    match = Match(
        in_port=m.in_port,
        eth_type=m.eth_type,
        eth_src=_canon_masked(m.eth_src),
        eth_dst=_canon_masked(m.eth_dst),
        vlan_pcp=m.vlan_pcp,
        metadata=_canon_masked(m.metadata),
        reg0=_canon_masked(m.reg0),
        vlan_vid=m.vlan_vid,
    )
    if wm is not None and wm[1] == 0:
        wm = None
    if match == m and wm == flow.write_metadata:
        return flow
    return replace(flow, match=match, write_metadata=wm)


def is_ours(flow: FlowSpec) -> bool:
    return cookie_class(flow.cookie) is not None


def is_learned(cookie: int) -> bool:
    """An entry the switch learned (switch-local PAUSE override): left alone by reconciliation."""
    return cookie_class(cookie) == RuleClass.LEARNED


def same_entry(a: FlowSpec, b: FlowSpec) -> bool:
    """Same instructions and cookie (keys assumed equal)."""
    return (
        a.actions == b.actions
        and a.cookie == b.cookie
        and a.goto == b.goto
        and a.write_metadata == b.write_metadata
        and a.meter == b.meter
    )


@dataclass(frozen=True)
class Diff:
    """``add``: desired, absent; ``modify``: desired, present with other content
    (the desired version); ``delete``: ours, installed, not desired (the installed
    version); ``keep``: desired and installed alike; ``foreign``: installed, not
    ours (untouched); ``conflicts``: the foreign flows among them that sit on a
    desired key (replaced by the ``add``/``modify`` entry)."""

    add: tuple[FlowSpec, ...]
    modify: tuple[FlowSpec, ...]
    delete: tuple[FlowSpec, ...]
    keep: tuple[FlowSpec, ...]
    foreign: tuple[FlowSpec, ...]
    conflicts: tuple[FlowSpec, ...]

    @property
    def changes(self) -> int:
        return len(self.add) + len(self.modify) + len(self.delete)

    @property
    def in_sync(self) -> bool:
        return self.changes == 0

    def counts(self) -> dict[str, int]:
        return {
            "add": len(self.add),
            "modify": len(self.modify),
            "delete": len(self.delete),
            "keep": len(self.keep),
            "foreign": len(self.foreign),
            "conflicts": len(self.conflicts),
        }


def diff(desired: Iterable[FlowSpec], installed: Iterable[FlowSpec]) -> Diff:
    """Compare the flows a switch should hold with the ones it holds.

    Raises
    ------
    ValueError
        ``desired`` holds two different flows with the same key (a switch
        could only keep one of them).
    """
    want: dict[tuple, FlowSpec] = {}
    for flow in desired:
        flow = canonical(flow)
        key = flow.key()
        old = want.get(key)
        if old is not None and not same_entry(old, flow):
            raise ValueError(f"two desired flows share table {key[0]}, priority {key[1]} and match {key[2]}")
        want[key] = flow
    have: dict[tuple, FlowSpec] = {}
    foreign: list[FlowSpec] = []
    for flow in installed:
        if is_learned(flow.cookie):
            continue
        flow = canonical(flow)
        if is_ours(flow):
            have[flow.key()] = flow
        else:
            foreign.append(flow)
    foreign_keys = {f.key(): f for f in foreign}
    add, modify, keep = [], [], []
    for key, flow in want.items():
        cur = have.get(key)
        if cur is None:
            add.append(flow)
        elif same_entry(cur, flow):
            keep.append(flow)
        else:
            modify.append(flow)
    delete = [flow for key, flow in have.items() if key not in want]
    conflicts = [foreign_keys[k] for k in want if k in foreign_keys and k not in have]
    return Diff(tuple(add), tuple(modify), tuple(delete), tuple(keep), tuple(foreign), tuple(conflicts))
