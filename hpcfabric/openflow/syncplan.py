"""What one reconciliation sends (pure): planned from the desired and the installed state, no I/O, no xids.

:func:`plan_sync` turns a switch's desired table and its flow dump into a
:class:`SyncPlan`: the difference (:func:`hpcfabric.openflow.reconcile.diff`)
and, in the order they go out (:meth:`SyncPlan.messages`), the deletions, our
flows no FlowSpec expresses (deleted too), the additions and the
modifications. :func:`plan_change` is a repair's plan (no flow dump: from the
table the switch was confirmed with). :func:`plan_meters` and
:func:`plan_groups` give the meter-mods and group-mods that bring the punt
meters and fast-failover groups in line. The controller's installer encodes
and sends them (``hpcfabric.controller.install``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from hpcfabric.openflow import ofwire
from hpcfabric.openflow.reconcile import Diff, diff, is_learned
from hpcfabric.rules.flows import FlowSpec, cookie_class

#: kinds of :meth:`SyncPlan.messages`: a strict delete of a FlowSpec, a strict delete of a dumped entry no
#: FlowSpec expresses, an add (a modification is an add: it replaces the entry with the same table/priority/match)
DELETE, DELETE_OPAQUE, ADD = "delete", "delete_opaque", "add"


@dataclass(frozen=True)
class SyncPlan:
    """The flow-mods of one reconciliation: ``diff``; ``opaque``: dumped entries with our cookie that no FlowSpec
    expresses (deleted); ``foreign``: entries not ours, left alone."""

    diff: Diff
    opaque: tuple[Any, ...] = ()
    foreign: int = 0

    @property
    def changes(self) -> int:
        """Flow-mods to send."""
        return self.diff.changes + len(self.opaque)

    @property
    def deleted(self) -> int:
        return len(self.diff.delete) + len(self.opaque)

    def messages(self) -> list[tuple[str, Any]]:
        """(kind, flow) in sending order: deletions first, then the opaque entries, additions, modifications."""
        d = self.diff
        return ([(DELETE, f) for f in d.delete] + [(DELETE_OPAQUE, s) for s in self.opaque]
                + [(ADD, f) for f in d.add] + [(ADD, f) for f in d.modify])


def plan_sync(desired: Iterable[FlowSpec], installed: Iterable[FlowSpec], opaque: Iterable[Any]) -> SyncPlan:
    """The plan that turns the dumped table (``installed`` FlowSpecs, ``opaque`` other entries with ``cookie``)
    into ``desired``. Entries the switch learned (switch-local PAUSE state) are not ours to sync."""
    opaque = [s for s in opaque if not is_learned(s.cookie)]
    ours = tuple(s for s in opaque if cookie_class(s.cookie) is not None)
    d = diff(desired, installed)
    return SyncPlan(d, ours, len(d.foreign) + len(opaque) - len(ours))


def plan_change(old: Iterable[FlowSpec], new: Iterable[FlowSpec]) -> SyncPlan:
    """A confirmed switch from desired table ``old`` to ``new``: only the entries that differ. An entry that is the
    very same object in both (a repaired table rebuilt from the one in force, :mod:`hpcfabric.repair.patch`) is
    kept without a look: a table holds one entry per key, so it adds, changes and deletes nothing (only the plan's
    ``keep`` leaves it out)."""
    old, new = tuple(old), tuple(new)
    same = {id(f) for f in old}.intersection(map(id, new))
    if same:
        old = tuple(f for f in old if id(f) not in same)
        new = tuple(f for f in new if id(f) not in same)
    return SyncPlan(diff(new, old))


def plan_meters(wanted: Mapping[int, tuple[int, int]],
                have: Mapping[int, tuple[int, int]]) -> list[tuple[int, int, int, int]]:
    """(meter id, rate, burst, command) for each ``wanted`` meter (id -> (rate, burst)) the switch does not
    ``have`` alike, by id: MODIFY where it has the id, else ADD."""
    return [(mid, rate, burst, ofwire.OFPMC_MODIFY if mid in have else ofwire.OFPMC_ADD)
            for mid, (rate, burst) in sorted(wanted.items()) if have.get(mid) != (rate, burst)]


def plan_groups(wanted: Mapping[int, Any], have: Mapping[int, Any]) -> list[tuple[int, Any, int]]:
    """(group id, buckets, command) for each ``wanted`` group (id -> buckets) the switch does not ``have``
    alike: MODIFY where it has the id, else ADD."""
    return [(gid, buckets, ofwire.OFPGC_MODIFY if gid in have else ofwire.OFPGC_ADD)
            for gid, buckets in sorted(wanted.items()) if have.get(gid) != buckets]
