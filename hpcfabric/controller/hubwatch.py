"""Diagnostics: the longest spans the controller's green threads hold the interpreter, and GC pauses.

Green threads are cooperative: while one runs, no packet-in is read. With
``HPCFABRIC_HUB_WATCH=MS`` in the environment, ``hpcfabric controller``
installs :func:`install`: a greenlet trace hook timestamps every switch, and a
span longer than ``MS`` milliseconds is logged (WARNING, ``hub span``) with
the wall-clock time it ended, its CPU time (process CPU over the span: a
span with little CPU was the machine's other load, not ours) and where the
green thread gave the hub back (its innermost hpcfabric frames, which name
the loop). Garbage collections of generation 2 are logged the same way, young
ones when they take over half the threshold.
With ``HPCFABRIC_HUB_WATCH_MESSAGES=1`` too, each long span also names the
OpenFlow messages a receive loop handled in it (type, count, milliseconds from
each one's parse to the next: parse, dispatch and handlers).
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
ENV_MESSAGES = "HPCFABRIC_HUB_WATCH_MESSAGES"
#: OpenFlow 1.3 message types a controller receives, by number
MSG_NAMES = {0: "hello", 1: "error", 2: "echo_request", 3: "echo_reply", 4: "experimenter", 6: "features_reply",
             10: "packet_in", 11: "flow_removed", 12: "port_status", 19: "multipart_reply", 21: "barrier_reply",
             25: "role_reply", 27: "get_async_reply"}


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
        self.young_t0 = 0.0
        self.kinds: dict[int, list[float]] = {}  # message type -> [count, seconds] in the current span
        self.msg_kind = -1
        self.msg_t = 0.0

    def _close_message(self, now: float) -> None:
        if self.msg_kind >= 0:
            acc = self.kinds.setdefault(self.msg_kind, [0, 0.0])
            acc[0] += 1
            acc[1] += now - self.msg_t
            self.msg_kind = -1

    def wrap(self, parse: Any) -> Any:
        """The framework's message parse, attributing the time until the next message (or switch) to this one's type."""

        def timed(datapath: Any, version: int, msg_type: int, *rest: Any) -> Any:
            now = time.perf_counter()
            self._close_message(now)
            self.msg_kind, self.msg_t = msg_type, now
            msg = parse(datapath, version, msg_type, *rest)
            took = time.perf_counter() - now
            if took > self.threshold / 2:
                LOG.warning("slow parse: %s of %d bytes took %.1f ms", MSG_NAMES.get(msg_type, msg_type), rest[0],
                            took * 1000)
            return msg

        return timed

    def breakdown(self) -> str:
        if not self.kinds:
            return ""
        top = sorted(self.kinds.items(), key=lambda kv: -kv[1][1])[:4]
        return " [" + ", ".join(f"{MSG_NAMES.get(k, k)} x{int(n)} {s * 1000:.1f} ms" for k, (n, s) in top) + "]"

    def trace(self, event: str, args: Any) -> None:
        if event not in ("switch", "throw"):
            return
        now = time.perf_counter()
        self._close_message(now)
        span = now - self.since
        if span > self.threshold:
            # called once the switch is made: the origin is suspended where it gave the hub back
            cpu = time.process_time() - self.cpu_since
            self.spans += 1
            origin = args[0]
            LOG.warning("hub span %.1f ms (cpu %.1f ms) ending %.3f in %s%s", span * 1000, cpu * 1000, time.time(),
                        where(getattr(origin, "gr_frame", None)), self.breakdown())
            now = time.perf_counter()
        if self.kinds:
            self.kinds = {}
        self.since = now
        self.cpu_since = time.process_time()

    def on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if info.get("generation") != 2:
            if phase == "start":
                self.young_t0 = time.perf_counter()
            elif (ms := (time.perf_counter() - self.young_t0) * 1000) > self.threshold * 500:  # half the span threshold
                LOG.warning("gc gen%d %.1f ms (%d collected) ending %.3f", info.get("generation"), ms,
                            info.get("collected", 0), time.time())
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
    if os.environ.get(ENV_MESSAGES):
        from hpcfabric.controller.framework import wrap_message_parse

        wrap_message_parse(watch.wrap)
    greenlet.settrace(watch.trace)
    gc.callbacks.append(watch.on_gc)
    LOG.warning("hub watch: logging green-thread spans and gen-2 GCs over %.1f ms, young GCs over half that",
                threshold_ms)
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
