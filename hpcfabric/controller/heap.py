"""The heap and the cyclic garbage collector: long-lived state frozen out of the full collections.

A controller for a big fabric holds millions of long-lived objects (the
topology, the address plan, every switch's compiled table of FlowSpecs, the
encoded flow-mods). CPython's generation-2 collection walks all of them:
at Table III (2,064 switches, 381,696 rules) one took 1.3 to 17 s, measured
with ``HPCFABRIC_HUB_WATCH`` (:mod:`hpcfabric.controller.hubwatch`), and no
green thread runs meanwhile -- a PAUSE arriving then waited for it.

:class:`Heap` moves what exists at a few known points into the collector's
permanent generation (:func:`gc.freeze`): after the config is loaded and
compiled, once every managed switch is confirmed, after a reroute's tables
are in place. Frozen objects are still freed by reference counting when they
are dropped (a replaced table goes away as before); only reference cycles
among them are never collected, which our long-lived state does not make in
numbers. The collections that remain walk the young objects only.
"""

from __future__ import annotations

import gc
import logging
import time

LOG = logging.getLogger("hpcfabric.controller")


class Heap:
    """Freezes the long-lived heap at the app's settle points (``settle``); ``frozen`` and ``freezes`` for the status."""

    def __init__(self) -> None:
        self.freezes = 0
        self.last_reason = ""
        self.synced_since = 0  # switches confirmed since the last freeze

    def settle(self, reason: str) -> int:
        """Freeze every object tracked now (cheap: list splicing, no walk); returns how many are frozen."""
        t = time.perf_counter()
        gc.freeze()
        self.freezes += 1
        self.last_reason = reason
        frozen = gc.get_freeze_count()
        LOG.info("heap: %d objects frozen out of the collector (%s) in %.1f ms", frozen, reason,
                 (time.perf_counter() - t) * 1000)
        return frozen

    def confirmed(self, all_confirmed: bool) -> None:
        """A switch was confirmed: settle when all of them are (bring-up done, a reroute applied, a restart)."""
        self.synced_since += 1
        if all_confirmed:
            self.settle(f"all switches confirmed ({self.synced_since} sync(s) since the last freeze)")
            self.synced_since = 0

    def as_dict(self) -> dict[str, object]:
        return {"frozen": gc.get_freeze_count(), "freezes": self.freezes, "last": self.last_reason,
                "collections": [s["collections"] for s in gc.get_stats()]}
