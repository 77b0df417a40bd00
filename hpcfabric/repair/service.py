"""The repair planner as a process of its own: a :class:`~hpcfabric.repair.plan.Repairer` behind a pipe.

The controller's hub must keep answering PAUSEs while a repair is compiled and proven (seconds of numpy and
Python at Table III, and a minute to build the proof base at start), so the planner runs beside it:
``python -m hpcfabric.repair.service CONFIG`` loads the same config (the first message, ``("config", text)``,
is the INI text the controller loaded: a file changed since is not read), builds the proof base (at nice +10 for
two minutes at most: the controller's bring-up goes first; then at nice -5 where permitted, as every plan after it:
:class:`Priority`), says ``ready``, then answers requests read from stdin, one at a time, each a length-prefixed
pickle:

* ``("plan", failures)`` -> the plan for that set of failures (:func:`slim`: what the controller installs, as
  patches of the tables in force, and what is proven -- not the whole fabric's tables);
* ``("tables", names)`` -> the last plan's tables of those switches, whole (a patch that did not fit);
* ``("apply",)`` / ``("discard",)`` -> the last plan is in force / is not installed;
* ``("stop",)``.

Replies go to stdout the same way; the log goes to stderr. Both ends are trusted (the controller starts
the process itself).

What is built to last -- the config's compiled tables, the proof base, the tables in force after an ``apply``
-- is moved out of the cyclic garbage collector's sight (:func:`settle_heap`, ``gc.freeze``), as the controller
does for its own heap (:mod:`hpcfabric.controller.heap`): at Table III the compiled tables alone are ~1.4 M
objects, and a full collection over them took 3.9-4.4 s (loaded machine); one falls inside a plan whenever the
objects earlier plans left behind cross CPython's threshold (a quarter of the old ones).
Reference counting still frees what a later plan replaces; only garbage in reference cycles among those
objects would stay (the tables and the proof base hold none).
"""

from __future__ import annotations

import gc
import logging
import os
import pickle
import struct
import sys
import threading
import time
from typing import Any, BinaryIO, Mapping

from hpcfabric.repair.patch import make_patch

__all__ = ["read_message", "write_message", "slim", "settle_heap", "set_nice", "Priority", "main"]

LOG = logging.getLogger("hpcfabric.repair")


def write_message(out: BinaryIO, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    out.write(struct.pack("!Q", len(data)) + data)
    out.flush()


def read_message(inp: BinaryIO) -> Any:
    """The next message, or None at the end of the stream."""
    head = inp.read(8)
    if len(head) < 8:
        return None
    (n,) = struct.unpack("!Q", head)
    data = b""
    while len(data) < n:
        chunk = inp.read(n - len(data))
        if not chunk:
            return None
        data += chunk
    return pickle.loads(data)


def slim(plan: Any, in_force: Mapping[str, tuple[Any, ...]] | None = None) -> dict[str, Any]:
    """What the controller needs of a :class:`~hpcfabric.repair.plan.RepairPlan`: with ``in_force`` (the tables in
    force, as the controller holds them too) the tables to install as ``patches`` of those
    (:mod:`hpcfabric.repair.patch`: only the new entries go through the pipe), else whole as ``desired``."""
    out = {"failures": plan.failures, "changed": plan.changed, "groups": dict(plan.groups), "waves": plan.waves,
           "entries": plan.entries, "verdict": dict(plan.verdict), "seconds": plan.seconds,
           "timings": dict(plan.timings), "proven": plan.proven, "summary": plan.as_dict()}
    if in_force is None:
        out["desired"] = dict(plan.desired)
    else:
        out["patches"] = {s: make_patch(in_force.get(s, ()), new) for s, new in plan.desired.items()}
    return out


def settle_heap() -> None:
    """What is alive now is long-lived: collected once (cycles made while building), then frozen."""
    gc.collect()
    gc.freeze()


#: niceness while the proof base is built (a minute of CPU at Table III, beside the controller's bring-up) ...
BUILD_NICE = 10
#: ... for this many seconds at most, then at ``PLAN_NICE``: no repair is proven without it, and a host whose
#: controllers' steady work (LLDP, stats polling) keeps every core busy starves it even at normal priority
#: (dragonfly-300k, 8 partitions on 2 cores: ~3 % of a core at +10, ~16 % at 0 -- half an hour for its ~6 min of CPU)
BUILD_GRACE_S = 120.0
#: niceness once the base is built, where permitted (root): a plan is on the fabric's critical path, ahead of the
#: host's controllers' background work; idle between plans, it costs them nothing (docs/ha.md)
PLAN_NICE = -5


def set_nice(value: int) -> bool:
    """Every thread of this process at niceness ``value`` (Linux keeps one per thread; a thread started later
    inherits its starter's); False where not permitted."""
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:  # pragma: no cover - not Linux
        tids = [0]
    for tid in tids:
        try:
            os.setpriority(os.PRIO_PROCESS, tid, value)
        except ProcessLookupError:  # that thread has ended
            continue
        except OSError:
            return False
    return True


class Priority:
    """The planner's niceness: ``BUILD_NICE`` while the proof base is built (``BUILD_GRACE_S`` at most), then
    ``PLAN_NICE`` (or normal where that is not permitted), for the rest of the build and the plans."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.built = False
        self.niced = set_nice(BUILD_NICE)  # the base is built while the switches come up: the controllers go first
        self.timer: threading.Timer | None = None
        if self.niced:
            self.timer = threading.Timer(BUILD_GRACE_S, self.grace)
            self.timer.daemon = True
            self.timer.start()

    def grace(self) -> None:
        """The bring-up has had its head start: no repair can be proven before the base is built."""
        with self.lock:
            if not self.built:
                niceness = self.raise_priority()
                LOG.info("proof base not built after %.0f s at nice +%d: at nice %d now", BUILD_GRACE_S, BUILD_NICE,
                         niceness)

    def raise_priority(self) -> int:
        """``PLAN_NICE``, else normal priority, else (no permission) where it was; the niceness in force."""
        if set_nice(PLAN_NICE):
            return PLAN_NICE
        if set_nice(0):
            return 0
        return os.getpriority(os.PRIO_PROCESS, 0)

    def planning(self) -> int:
        """The base is built: plans from now on at ``PLAN_NICE`` where permitted; the niceness in force."""
        with self.lock:
            self.built = True
            if self.timer is not None:
                self.timer.cancel()
            niceness = self.raise_priority()
            if niceness > 0:
                LOG.warning("repairs are planned at nice +%d (no permission to raise the priority again)", niceness)
            return niceness


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s repair planner: %(message)s")
    from hpcfabric.config import load_config
    from hpcfabric.errors import ConfigError

    inp, out = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing but messages on the pipe
    t0 = time.monotonic()
    priority = Priority()
    first = read_message(inp)  # ("config", text): the INI text the controller loaded
    if first is None or first[0] == "stop":
        return 0
    try:
        cfg = load_config(argv[0], deadlock=False, text=first[1] if first[0] == "config" else None)
    except ConfigError as err:  # cannot happen with the controller's own text; said in one line if it does
        LOG.error("cannot load the config: %s", err)
        return 2
    rep, ready = prepare(cfg, priority, t0)
    try:
        return serve(rep, inp, out, ready)
    except BrokenPipeError:  # the controller went away: nothing left to plan for
        return 0


def prepare(cfg: Any, priority: Priority, t0: float) -> tuple[Any, dict[str, Any]]:
    """A :class:`~hpcfabric.repair.plan.Repairer` of ``cfg`` ready to plan (its proof base built, the fast-failover
    analysis of the tables in force kept, the heap settled, at the planning priority), and the ``ready`` message
    (``t0``: when the planner started; ``nice``: the niceness plans run at)."""
    from hpcfabric.repair.plan import Repairer, proves

    rep = Repairer(cfg, prove=proves(cfg))
    report = rep.base().report if rep.prove else None
    rep.failover_analysis()  # fast_failover: the analysis of the tables in force, kept for the repairs
    settle_heap()
    niceness = priority.planning()
    return rep, {"ready": True, "seconds": round(time.monotonic() - t0, 3), "report": report, "nice": niceness,
                 "dependencies": rep.state.graph.size if rep.state is not None else 0}


def serve(rep: Any, inp: BinaryIO, out: BinaryIO, ready: dict[str, Any]) -> int:
    """Say ``ready``, then answer requests until ``stop`` or the end of input."""
    write_message(out, ready)
    plan = None
    while True:
        msg = read_message(inp)
        if msg is None or msg[0] == "stop":
            return 0
        if msg[0] == "plan":
            got = time.monotonic()
            plan = rep.plan(msg[1])
            planned = time.monotonic()
            reply = slim(plan, rep.desired)  # patches of the tables in force (rep.apply comes later)
            reply["stamps"] = {"received": got, "planned": planned, "slimmed": time.monotonic()}  # CLOCK_MONOTONIC
            write_message(out, reply)
        elif msg[0] == "tables":  # the pending plan's tables whole (the controller could not apply a patch)
            write_message(out, {s: plan.desired[s] for s in msg[1] if plan is not None and s in plan.desired})
        elif msg[0] == "apply" and plan is not None:
            rep.apply(plan)
            if not plan.proven and rep.prove:  # installed as at load under pause: the base is built again
                rep.state = None
                rep.base()
            plan = None
            gc.freeze()  # the tables in force now: long-lived
        elif msg[0] == "discard" and plan is not None:
            rep.discard(plan)
            plan = None


if __name__ == "__main__":
    raise SystemExit(main())
