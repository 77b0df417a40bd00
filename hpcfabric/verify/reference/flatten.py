"""Resubmit chains as plain entries, for the vectorised verifier.

The switch-local PAUSE reaction (``compiled.pause_reaction == "switch"``) uses Open vSwitch's
``resubmit`` and ``learn``; the scalar reference (:mod:`hpcfabric.verify.reference.pipeline`) runs them
literally, the vectorised engine (:mod:`hpcfabric.verify.engine`) needs plain tables:
:func:`inline_resubmits` rewrites every resubmitting entry into an equivalent plain one.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterable

from hpcfabric.rules.flows import FlowSpec, Learn, LearnLoad, Resubmit, SetField
from hpcfabric.verify.reference.pipeline import MAX_RESUBMIT_DEPTH, PipelineError, describe_flow

__all__ = ["Unflattenable", "inline_resubmits"]


class Unflattenable(PipelineError):
    """A resubmit chain whose outcome depends on more than the entry's own match."""


def inline_resubmits(flows: Iterable[FlowSpec]) -> list[FlowSpec]:
    """``flows`` with every entry that resubmits replaced by an equivalent plain entry.

    The switch-local PAUSE machinery (``PORT_STATE: metadata=P -> resubmit
    PAUSE_LEARN, resubmit PAUSE_SELECT``) decides only on the metadata the
    entry itself matches and on ``reg0``, which only entries reached by
    resubmit set (it is 0 on entry). So the chain can be run once per entry
    with a frame carrying that metadata; entries reached by a resubmit must
    match nothing but ``metadata`` bits the resubmitting entry fixes and
    ``reg0``. A resubmit as the very last action whose table lookup depends
    on the frame becomes a ``goto`` (equivalent when nothing follows it).
    Tables reached only by resubmit whose entries use the extensions (reg0,
    loads, resubmits) are left out afterwards; the rest is unchanged.
    Raises :class:`Unflattenable` for other shapes.
    """
    flows = list(flows)
    if not any(isinstance(a, Resubmit) for f in flows for a in f.actions):
        return flows
    by_table: dict[int, list[FlowSpec]] = {}
    for f in flows:
        by_table.setdefault(f.table, []).append(f)
    for entries in by_table.values():
        entries.sort(key=lambda f: -f.priority)
    gotos = {0} | {f.goto for f in flows if f.goto is not None}
    resubmitted = {a.table for f in flows for a in f.actions if isinstance(a, Resubmit)}
    for f in flows:
        if f.table not in resubmitted and any(
            isinstance(a, (LearnLoad, SetField)) and getattr(a, "field", getattr(a, "dst", None)) == "reg0"
            for a in f.actions
        ):
            raise Unflattenable(f"{describe_flow(f)} sets reg0 outside a resubmit chain")
    internal = {t for t in resubmitted - gotos
                if any(g.match.reg0 is not None or any(isinstance(a, (Resubmit, LearnLoad, Learn)) for a in g.actions)
                       for g in by_table.get(t, ()))}
    out = []
    for f in flows:
        if f.table in internal:
            continue
        if not any(isinstance(a, Resubmit) for a in f.actions):
            out.append(f)
            continue
        fixed = f.match.metadata or (0, 0)
        actions: list = []
        goto, _ = _inline(f, list(f.actions), fixed, 0, by_table, actions, 0)
        if goto is not None and f.goto is not None:
            raise Unflattenable(f"{describe_flow(f)}: a final resubmit and a goto")
        out.append(replace(f, actions=tuple(actions), goto=goto if goto is not None else f.goto))
    bad = [f for f in out if f.goto in internal]
    if bad:
        raise Unflattenable(f"{describe_flow(bad[0])} goes to a table only resubmits should reach")
    return out


def _inline(entry: FlowSpec, acts: list, fixed: tuple[int, int], reg0: int,
            by_table: dict[int, list[FlowSpec]], out: list, depth: int) -> tuple[int | None, int]:
    """Append the effect of ``acts`` (run by ``entry``, whose match fixes the ``fixed``
    metadata bits) to ``out``. Returns (the table a final resubmit becomes a goto to, reg0 after)."""
    if depth > MAX_RESUBMIT_DEPTH:
        raise Unflattenable("resubmit loop")
    meta = fixed[0]
    for i, a in enumerate(acts):
        if not isinstance(a, Resubmit):
            if isinstance(a, LearnLoad) and a.dst == "reg0":
                mask = ((1 << a.n_bits) - 1) << a.dst_ofs
                reg0 = reg0 & ~mask | (a.value << a.dst_ofs) & mask
            elif isinstance(a, SetField) and a.field == "reg0":
                reg0 = a.value
            elif isinstance(a, (LearnLoad, Learn)):
                raise Unflattenable(f"{a!r} inside a resubmit chain")
            else:
                out.append(a)
            continue
        last = i == len(acts) - 1
        winner: FlowSpec | None = None
        for g in by_table.get(a.table, ()):
            m = g.match
            depends = any(x is not None for x in (m.in_port, m.eth_type, m.eth_src, m.eth_dst, m.vlan_pcp, m.vlan_vid)) or (
                m.metadata is not None and m.metadata[1] & ~fixed[1])
            if depends:
                if not last:
                    raise Unflattenable(f"{describe_flow(g)} depends on the frame inside a resubmit chain")
                if a.table <= entry.table:
                    raise Unflattenable(f"final resubmit to table {a.table} from table {entry.table} cannot be a goto")
                return a.table, reg0
            if m.metadata is not None and meta & m.metadata[1] != m.metadata[0]:
                continue
            if m.reg0 is not None and reg0 & m.reg0[1] != m.reg0[0]:
                continue
            winner = g
            break
        if winner is None:
            continue
        if winner.write_metadata is not None:
            raise Unflattenable(f"{describe_flow(winner)} writes metadata inside a resubmit chain")
        sub_acts = list(winner.actions)
        if winner.goto is not None:
            if not last:
                raise Unflattenable(f"{describe_flow(winner)} goes to a table inside a resubmit chain")
            sub_acts.append(Resubmit(winner.goto))
        goto, reg0 = _inline(entry, sub_acts, fixed, reg0, by_table, out, depth + 1)
        if goto is not None:
            if not last:
                raise Unflattenable(f"resubmit to table {a.table} ends in a table lookup before other actions")
            return goto, reg0
    return None, reg0
