"""Diagnostics: the longest spans the controller's green threads hold the interpreter, and GC pauses.

Green threads are cooperative: while one runs, no packet-in is read. With
``HPCFABRIC_HUB_WATCH=MS`` in the environment, ``hpcfabric controller``
installs :func:`install`: a greenlet trace hook timestamps every switch, and a
span longer than ``MS`` milliseconds is logged (WARNING, ``hub span``) with
the wall-clock time it ended, its CPU time (process CPU over the span: a
span with little CPU was the machine's other load, not ours) and where the
green thread gave the hub back (its innermost hpcfabric frames, which name
the loop). Garbage collections of generation 2 are logged the same way.
Off by default: the hook costs ~1 us per switch.
"""

from __future__ import annotations

import gc
import logging
import os
import time
from typing import Any

from hpcfabric.controller.framework import hub

LOG = logging.getLogger("hpcfabric.controller")

ENV = "HPCFABRIC_HUB_WATCH"


def where(frame: Any, depth: int = 4) -> str:
    """The innermost ``depth`` hpcfabric frames of a suspended green thread (else its innermost frames)."""
    ours, other = [], []
    while frame is not None and len(ours) < depth:
        code = frame.f_code
        name = f"{os.path.basename(code.co_filename)}:{frame.f_lineno}:{code.co_name}"
        (ours if "hpcfabric" in code.co_filename else other).append(name)
        frame = frame.f_back
    return " < ".join(ours or other[:depth]) or "?"


class HubWatch:
    """Greenlet switch timestamps; spans over ``threshold_ms`` logged (and counted in ``spans``)."""

    def __init__(self, threshold_ms: float) -> None:
        self.threshold = threshold_ms / 1000.0
        self.since = time.perf_counter()
        self.cpu_since = time.process_time()
        self.spans = 0
        self.gc_t0 = 0.0
        self.gc_cpu0 = 0.0
        self.census_at = -1e9

    def trace(self, event: str, args: Any) -> None:
        if event not in ("switch", "throw"):
            return
        now = time.perf_counter()
        span = now - self.since
        if span > self.threshold:
            # called once the switch is made: the origin is suspended where it gave the hub back
            cpu = time.process_time() - self.cpu_since
            self.spans += 1
            origin = args[0]
            LOG.warning("hub span %.1f ms (cpu %.1f ms) ending %.3f in %s", span * 1000, cpu * 1000, time.time(),
                        where(getattr(origin, "gr_frame", None)))
            now = time.perf_counter()
        self.since = now
        self.cpu_since = time.process_time()

    def on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            self.gc_t0 = time.perf_counter()
            self.gc_cpu0 = time.process_time()
        else:
            ms = (time.perf_counter() - self.gc_t0) * 1000
            LOG.warning("gc gen2 %.1f ms (cpu %.1f ms, %d collected, %d objects left unfrozen) ending %.3f", ms,
                        (time.process_time() - self.gc_cpu0) * 1000, info.get("collected", 0),
                        sum(gc.get_count()) + len(gc.get_objects(generation=2)) if ms > 50 else -1, time.time())
            if ms > 100 and time.monotonic() - self.census_at > 60:
                self.census_at = time.monotonic()
                hub.spawn(self.census)  # not inside the collector's callback

    def census(self) -> None:
        """The commonest types in the collected generations (what a full collection walks besides the frozen)."""
        import collections

        objs = gc.get_objects(generation=2)
        kinds = collections.Counter(type(o).__name__ for o in objs)
        LOG.warning("gc census: %d objects in generation 2 (%d frozen): %s", len(objs), gc.get_freeze_count(),
                    ", ".join(f"{k} {n}" for k, n in kinds.most_common(12)))
        del objs


def install(threshold_ms: float) -> HubWatch:
    import greenlet

    watch = HubWatch(threshold_ms)
    greenlet.settrace(watch.trace)
    gc.callbacks.append(watch.on_gc)
    LOG.warning("hub watch: logging green-thread spans over %.1f ms and gen-2 GCs", threshold_ms)
    return watch


def from_env() -> HubWatch | None:
    """:func:`install` if ``HPCFABRIC_HUB_WATCH`` is set to a threshold in ms."""
    value = os.environ.get(ENV)
    if not value:
        return None
    try:
        return install(float(value))
    except ValueError:
        LOG.error("%s=%r: expected a threshold in milliseconds", ENV, value)
        return None
