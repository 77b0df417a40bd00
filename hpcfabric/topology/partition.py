"""Partitions of a fabric for several controller instances: contiguous ranges of groups.

A partition is the unit of controller ownership (one master, the other live
instances standbys; docs/ha.md). It is derived from the topology, not written
by hand: the switches' ``group`` (Dragonfly group, FB row = slice along
dimension 1, fat-tree pod; fat-tree cores have group -1 and form a range of
their own) split into ``count`` contiguous ranges of nearly equal switch
counts. When the fabric has fewer groups than ``count``, the switches
themselves (in topology order) are split instead.
"""

from __future__ import annotations

from dataclasses import dataclass

from hpcfabric.errors import TopologyError
from hpcfabric.topology.model import Fabric


@dataclass(frozen=True, slots=True)
class Partition:
    """``name`` (``p<i>``), a label saying what it covers, and its switch names (topology order)."""

    name: str
    label: str
    switches: tuple[str, ...]


def _chunks(items: list, count: int, weight) -> list[list]:
    """Split ``items`` (in order) into ``count`` contiguous non-empty runs of nearly equal total weight."""
    total = sum(weight(x) for x in items)
    out: list[list] = []
    run: list = []
    acc = 0
    for i, x in enumerate(items):
        run.append(x)
        acc += weight(x)
        left_items = len(items) - i - 1
        left_parts = count - len(out) - 1
        target = total * (len(out) + 1) / count
        if left_parts > 0 and (acc >= target or left_items == left_parts):
            out.append(run)
            run = []
    if run:
        out.append(run)
    return out


def partition_fabric(fabric: Fabric, count: int) -> tuple[Partition, ...]:
    """``count`` partitions of ``fabric`` (contiguous group ranges; switch ranges if groups are too few)."""
    n_sw = len(fabric.switches)
    if count < 1 or count > n_sw:
        raise TopologyError(f"{count} partitions for {n_sw} switches: expected 1..{n_sw}", fabric.name, "ha.partitions")
    groups: dict[int, list[str]] = {}
    for sw in fabric.switches:
        groups.setdefault(sw.group, []).append(sw.name)
    order = sorted(groups)
    if len(order) >= count:
        runs = _chunks(order, count, lambda g: len(groups[g]))
        out = []
        for i, run in enumerate(runs):
            label = f"group {run[0]}" if len(run) == 1 else f"groups {run[0]}..{run[-1]}"
            out.append(Partition(f"p{i}", label, tuple(n for g in run for n in groups[g])))
        return tuple(out)
    names = [sw.name for sw in fabric.switches]
    runs = _chunks(names, count, lambda _n: 1)
    return tuple(Partition(f"p{i}", f"switches {run[0]}..{run[-1]}", tuple(run)) for i, run in enumerate(runs))


def assign(partitions: list[str], members: list[str], current: dict[str, str | None] | None = None) -> dict[str, str]:
    """Balanced owner of each partition among live ``members``, moving as few as possible from ``current``.

    Every member ends with ``len(partitions) // len(members)`` or one more. Current owners that are live
    keep their partitions up to that share (the lowest-numbered first); the rest go one by one to the
    least-loaded member (ties: by name). Deterministic: instances that read the same store agree.
    """
    live = sorted(set(members))
    if not live:
        return {}
    current = current or {}
    order = sorted(partitions, key=_pkey)
    base, extra = divmod(len(order), len(live))
    held: dict[str, list[str]] = {m: [] for m in live}
    for p in order:
        owner = current.get(p)
        if owner in held and len(held[owner]) < base + 1:
            held[owner].append(p)
    # at most `extra` members may keep base + 1: the others give their last one back
    full = [m for m in live if len(held[m]) == base + 1]
    for m in full[extra:] if len(full) > extra else ():
        held[m].pop()
    out = {p: m for m, ps in held.items() for p in ps}
    for p in order:
        if p not in out:
            m = min(live, key=lambda x: (len(held[x]), x))
            held[m].append(p)
            out[p] = m
    return out


def _pkey(name: str) -> tuple[int, str]:
    digits = name[1:]
    return (int(digits), name) if digits.isdigit() else (1 << 30, name)
