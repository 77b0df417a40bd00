"""A repaired table as a patch of the table in force (pure): what the planner process sends the controller.

Both ends hold the tables in force (the planner proves the repair on them), and a repair changes a few of a
switch's ~200 entries. Pickling every entry of every changed switch both ways cost more than the plan at Table
III (~45 us to pickle and ~20 us to unpickle a FlowSpec: 194 switches x 185 entries, ~2.5 s); a patch pickles
the new entries only and names the kept ones by their place in the old table. The rebuilt table holds the old
table's very objects where entries are kept, so the installer's diff passes them over by identity
(:func:`hpcfabric.openflow.syncplan.plan_change`).

A patch is ``(len(old), items)``: each item is a ``(start, stop)`` slice of ``old`` or a new entry, in the new
table's order. :func:`rebuild` refuses a patch made for a table of another length (:class:`PatchMismatch`).
"""

from __future__ import annotations

from typing import Any, Sequence

__all__ = ["Patch", "PatchMismatch", "make_patch", "rebuild"]

Patch = tuple[int, tuple[Any, ...]]


class PatchMismatch(ValueError):
    """The patch was made for another table than the one it is applied to."""


def make_patch(old: Sequence[Any], new: Sequence[Any], index: dict[Any, int] | None = None) -> Patch:
    """``new`` as slices of ``old`` and new entries (``index``: entry -> its place in ``old``, if kept already)."""
    if index is None:
        index = {f: i for i, f in enumerate(old)}
    items: list[Any] = []
    start = stop = -1
    for f in new:
        i = index.get(f)
        if i is not None and i == stop:
            stop += 1
            continue
        if start >= 0:
            items.append((start, stop))
            start = stop = -1
        if i is None:
            items.append(f)
        else:
            start, stop = i, i + 1
    if start >= 0:
        items.append((start, stop))
    return len(old), tuple(items)


def rebuild(old: Sequence[Any], patch: Patch) -> tuple[Any, ...]:
    """The new table of ``patch`` made for ``old``; raises :class:`PatchMismatch` for another table's patch."""
    n, items = patch
    if n != len(old):
        raise PatchMismatch(f"patch for a table of {n} entries, the table has {len(old)}")
    out: list[Any] = []
    for item in items:
        if type(item) is tuple:
            a, b = item
            if not 0 <= a < b <= n:
                raise PatchMismatch(f"slice {a}:{b} outside a table of {n} entries")
            out.extend(old[a:b])
        else:
            out.append(item)
    return tuple(out)
