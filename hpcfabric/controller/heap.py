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
reroute, a restart), what survives each full collection, and every
FREEZE_EVERY seconds what survives a collection of the young generations
(:meth:`Heap.loop`). Frozen objects are still freed by reference counting when they
are dropped (a replaced table goes away as before); only reference cycles
among them are never collected: state that was alive at a freeze and dies
later inside a cycle (a disconnected switch's session objects) stays -- a
bounded leak per event, never per message. The collections that remain walk the young objects only.
"""

from __future__ import annotations

import gc
import logging
import time
from typing import Callable

from hpcfabric.controller.framework import hub

LOG = logging.getLogger("hpcfabric.controller")

#: seconds between the loop's young collection + freeze
FREEZE_EVERY = 2.0


class Heap:
    """Freezes the long-lived heap at the app's settle points (``settle``); ``frozen`` and ``freezes`` for the status."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled  # off where the app shares its process (tests): their garbage must stay collectable
        self.freezes = 0
        self.full_collections = 0
        self.young_passes = 0
        self.young_ms_max = 0.0  # CPU of the slowest young collection + freeze of the loop
        if enabled:
            gc.callbacks.append(self.after_collection)
        self.last_reason = ""
        self.synced_since = 0  # switches confirmed since the last freeze

    def settle(self, reason: str) -> int:
        """Freeze every object tracked now (cheap: list splicing, no walk); returns how many are frozen."""
        if not self.enabled:
            return 0
        t = time.perf_counter()
        gc.freeze()
        self.freezes += 1
        self.last_reason = reason
        frozen = gc.get_freeze_count()
        LOG.info("heap: %d objects frozen out of the collector (%s) in %.1f ms", frozen, reason,
                 (time.perf_counter() - t) * 1000)
        return frozen

    def after_collection(self, phase: str, info: dict[str, object]) -> None:
        """After each full (generation-2) collection, what survived it is frozen too: the next one walks only
        what was allocated since (without this, the per-round state LLDP and polling keep alive -- some
        100,000 objects at Table III -- was walked again by every full collection, tens of ms each)."""
        if phase == "stop" and info.get("generation") == 2:
            self.full_collections += 1
            gc.freeze()

    def loop(self, active: Callable[[], bool]) -> None:
        """Every FREEZE_EVERY seconds: collect the two young generations (at most ~7,700 objects by the
        collector's thresholds: a few ms), then freeze what survived. Full collections then find (almost)
        nothing to walk: at Table III they otherwise came every ~4 s at 50-120 ms of CPU each, walking
        ~70,000 live objects (LLDP's neighbour entries, the status) with nothing to collect."""
        while active():
            hub.sleep(FREEZE_EVERY)
            t = time.process_time()
            gc.collect(1)
            gc.freeze()
            self.young_passes += 1
            self.young_ms_max = max(self.young_ms_max, (time.process_time() - t) * 1000.0)

    def close(self) -> None:
        if self.after_collection in gc.callbacks:
            gc.callbacks.remove(self.after_collection)

    def confirmed(self, all_confirmed: bool) -> None:
        """A switch was confirmed: settle when all of them are (bring-up done, a reroute applied, a restart)."""
        self.synced_since += 1
        if all_confirmed:
            self.settle(f"all switches confirmed ({self.synced_since} sync(s) since the last freeze)")
            self.synced_since = 0

    def as_dict(self) -> dict[str, object]:
        return {"enabled": self.enabled, "frozen": gc.get_freeze_count(), "freezes": self.freezes, "last": self.last_reason,
                "full_collections_frozen": self.full_collections, "young_passes": self.young_passes,
                "young_ms_max": round(self.young_ms_max, 3),
                "collections": [s["collections"] for s in gc.get_stats()]}
