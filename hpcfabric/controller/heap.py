"""The heap and the cyclic garbage collector: long-lived state frozen out of the full collections.

A controller for a big fabric holds millions of long-lived objects (the
topology, the address plan, every switch's compiled table of FlowSpecs, the
encoded flow-mods). CPython's generation-2 collection walks all of them:
at Table III (2,064 switches, 381,696 rules) one took 1.3 to 17 s, measured
with ``HPCFABRIC_HUB_WATCH`` (:mod:`hpcfabric.controller.hubwatch`), and no
green thread runs meanwhile -- a PAUSE arriving then waited for it.

:class:`Heap` moves what exists at a few known points into the collector's
permanent generation (:func:`gc.freeze`): after the config is loaded and
compiled, once every managed switch is confirmed (after a bring-up, a
reroute, a restart), and after every collection the collector runs anyway
(:meth:`Heap.after_collection`): the older generations stay empty, and each
collection walks only what was allocated since the last one. Once every switch is
confirmed the young threshold is lowered to ``YOUNG_THRESHOLD`` so that this is little: at Table
III, with survivors frozen after generation-1 collections only, those took
10-30 ms (~30,000 young objects: tuples from free lists, which the
threshold does not count, and the frames of 4,128 suspended green threads)
and PAUSEs waited for them; with every collection's survivors frozen and
the threshold at 150, 32 collections in a run took over 1.5 ms, the longest
under 5 ms.

Frozen objects are still freed by reference counting when they are dropped
(a replaced table goes away as before); only reference cycles among them are
never collected: an object that survived one young collection and later
dies inside a cycle stays. Cycles must therefore not be made on the
steady-state paths: the one that was (a read timeout per idle switch, ~25
objects each: 0.65 MB/s at Table III) is avoided by the receive loop
(:mod:`hpcfabric.controller.receive`); measured flat since (docs/scale.md).
The status file's ``heap.frozen`` shows the count as of the last settle point: counting walks the
permanent generation (:func:`gc.get_freeze_count`: ~200 ms at Table III's 5.4 M objects), so it is
done there and never in the status write (where it held the hub and PAUSEs waited).
"""

from __future__ import annotations

import gc
import logging
import time

LOG = logging.getLogger("hpcfabric.controller")

#: generation-0 threshold (CPython's default is 700 counted allocations)
YOUNG_THRESHOLD = 150


class Heap:
    """Freezes the long-lived heap at the app's settle points (``settle``); ``frozen`` and ``freezes`` for the status."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled  # off where the app shares its process (tests): their garbage must stay collectable
        self.freezes = 0
        self.full_collections = 0
        self.young_passes = 0  # young collections followed by a freeze
        self.threshold = gc.get_threshold()
        if enabled:
            gc.callbacks.append(self.after_collection)
        self.last_reason = ""
        self.synced_since = 0  # switches confirmed since the last freeze
        self.frozen = 0  # gc.get_freeze_count() at the last settle (counting is a walk: never per status write)

    def settle(self, reason: str) -> int:
        """Freeze every object tracked now (cheap: list splicing, no walk); returns how many are frozen."""
        if not self.enabled:
            return 0
        t = time.perf_counter()
        gc.freeze()
        self.freezes += 1
        self.last_reason = reason
        frozen = self.frozen = gc.get_freeze_count()
        LOG.info("heap: %d objects frozen out of the collector (%s) in %.1f ms", frozen, reason,
                 (time.perf_counter() - t) * 1000)
        return frozen

    def after_collection(self, phase: str, info: dict[str, object]) -> None:
        """After each collection the collector ran anyway, what survived it is frozen: the next one walks
        only what is new (a list splice, no walk). Without this, at Table III full collections came every
        ~4 s at 50-120 ms of CPU each walking ~70,000 live objects (LLDP's neighbour entries, the status),
        and young ones took 10-30 ms while survivors were kept in generation 1."""
        if phase != "stop":
            return
        if info.get("generation") == 2:
            self.full_collections += 1
        else:
            self.young_passes += 1
        gc.freeze()

    def close(self) -> None:
        if self.after_collection in gc.callbacks:
            gc.callbacks.remove(self.after_collection)
            gc.set_threshold(*self.threshold)

    def confirmed(self, all_confirmed: bool) -> None:
        """A switch was confirmed: settle when all of them are (bring-up done, a reroute applied, a restart)."""
        self.synced_since += 1
        if all_confirmed:
            self.settle(f"all switches confirmed ({self.synced_since} sync(s) since the last freeze)")
            self.synced_since = 0
            self.steady()

    def steady(self) -> None:
        """Steady state: young collections at ``YOUNG_THRESHOLD`` from now on (a bring-up keeps the default:
        its allocations are many and short-lived, and PAUSEs are not yet at stake)."""
        if self.enabled:
            gc.set_threshold(YOUNG_THRESHOLD, *self.threshold[1:])

    def as_dict(self) -> dict[str, object]:
        return {"enabled": self.enabled, "frozen": self.frozen, "freezes": self.freezes, "last": self.last_reason,
                "full_collections_frozen": self.full_collections, "young_passes_frozen": self.young_passes,
                "young_threshold": gc.get_threshold()[0],
                "collections": [s["collections"] for s in gc.get_stats()]}
