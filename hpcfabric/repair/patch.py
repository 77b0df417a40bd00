"""A repaired table as a patch of the table in force (pure): what the planner process sends the controller.

Both ends hold the tables in force (the planner proves the repair on them), and a repair changes a few of a
switch's ~200 entries. Pickling every entry of every changed switch both ways cost more than the plan at Table
III (~45 us to pickle and ~20 us to unpickle a FlowSpec: 194 switches x 185 entries, ~2.5 s); a patch pickles
the new entries only and names the kept ones by their place in the old table. The rebuilt table holds the old
table's very objects where entries are kept, so the installer's diff passes them over by identity
(:func:`hpcfabric.openflow.syncplan.plan_change`).

A patch is ``(len(old), digest(old), items)``: each item is a ``(start, stop)`` slice of ``old`` or a new entry, in
the new table's order. :func:`rebuild` refuses a patch made for another table (:class:`PatchMismatch`): another
length, or another content (:func:`table_digest`: the same in every process, unlike ``hash()``, which is seeded per
process for strings and by address for ``None`` in Python 3.11).
"""

from __future__ import annotations

from dataclasses import fields
from hashlib import blake2b
from operator import attrgetter
from typing import Any, Sequence

from hpcfabric.rules.flows import FlowSpec, Match, Output

__all__ = ["Patch", "PatchMismatch", "canonical", "changes", "entry_digest", "make_patch", "rebuild", "table_digest"]

Patch = tuple[int, bytes, tuple[Any, ...]]

#: entries whose digest is cached (id -> (entry, digest)): tables in force keep most of their entries from one
#: repair to the next (a rebuilt table holds the old objects), so a table's digest is mostly cache hits
_ENTRIES: dict[int, tuple[Any, bytes]] = {}
#: tables whose digest is cached (id -> (table, digest))
_TABLES: dict[int, tuple[Any, bytes]] = {}
#: the caches start again past this many entries (their objects are kept alive while cached)
CACHE_LIMIT = 400_000


class PatchMismatch(ValueError):
    """The patch was made for another table than the one it is applied to."""


_FLOW_FIELDS = attrgetter(*(f.name for f in fields(FlowSpec)))
_MATCH_FIELDS = attrgetter(*(f.name for f in fields(Match)))
_MATCH_AT = [f.name for f in fields(FlowSpec)].index("match")
_ACTIONS_AT = [f.name for f in fields(FlowSpec)].index("actions")


def canonical(entry: Any) -> str:
    """A text naming ``entry``'s content, the same in every process: a FlowSpec's fields in order (its match's fields,
    an output action as its port, other actions as their ``repr``: frozen dataclasses of ints, strings, tuples and
    None), else ``repr(entry)``. Read by ``attrgetter`` from the dataclasses' own field lists (a new field counts)."""
    if type(entry) is not FlowSpec:
        return repr(entry)
    vals = list(_FLOW_FIELDS(entry))
    vals[_MATCH_AT] = _MATCH_FIELDS(vals[_MATCH_AT])
    vals[_ACTIONS_AT] = tuple(a.port if type(a) is Output else repr(a) for a in vals[_ACTIONS_AT])
    return repr(vals)


def entry_digest(entry: Any) -> bytes:
    """8 bytes naming ``entry``'s content (blake2b of :func:`canonical`), the same in every process; cached per object."""
    got = _ENTRIES.get(id(entry))
    if got is not None and got[0] is entry:
        return got[1]
    d = blake2b(canonical(entry).encode(), digest_size=8).digest()
    if len(_ENTRIES) >= CACHE_LIMIT:
        _ENTRIES.clear()
    _ENTRIES[id(entry)] = (entry, d)
    return d


def table_digest(table: Sequence[Any]) -> bytes:
    """16 bytes naming a table's content and order (its entries' :func:`entry_digest`), cached per table object."""
    got = _TABLES.get(id(table))
    if got is not None and got[0] is table:
        return got[1]
    d = blake2b(b"".join(map(entry_digest, table)), digest_size=16).digest()
    if len(_TABLES) >= CACHE_LIMIT // 100:
        _TABLES.clear()
    _TABLES[id(table)] = (table, d)
    return d


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
    return len(old), table_digest(old), tuple(items)


def rebuild(old: Sequence[Any], patch: Patch) -> tuple[Any, ...]:
    """The new table of ``patch`` made for ``old``; raises :class:`PatchMismatch` for another table's patch."""
    n, digest, items = patch
    if n != len(old):
        raise PatchMismatch(f"patch for a table of {n} entries, the table has {len(old)}")
    if digest != table_digest(old):
        raise PatchMismatch(f"patch for another table of {n} entries (content digest differs)")
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


def changes(patch: Patch) -> int:
    """Entries only in the old or only in the new table of ``patch`` (the kept ones are its slices)."""
    n, _, items = patch
    kept = sum(b - a for a, b in (i for i in items if type(i) is tuple))
    return (n - kept) + sum(1 for i in items if type(i) is not tuple)
