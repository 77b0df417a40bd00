"""The repair planner the controller asks: a process of its own (:mod:`hpcfabric.repair.service`), else inline.

Compiling and proving a repair is seconds of CPU at Table III, and building the proof base a minute: in
the controller's process that would hold the interpreter lock against the hub, and every PAUSE reaction
would wait. :class:`Planner` starts ``python -m hpcfabric.repair.service CONFIG`` beside the controller
(it loads the same config and builds the proof base while the switches come up) and talks to it over a
pipe; reads block a native thread, never the hub. If the process cannot start or dies, the planner runs
in a native thread of the controller instead (:class:`hpcfabric.repair.plan.Repairer`), and the log
says so. Partitions on one host share one planner instead (``[failover] planner``:
:mod:`hpcfabric.controller.shared_planner`).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from typing import Any

from hpcfabric.controller.framework import hub, run_native
from hpcfabric.repair.plan import Repairer, proves
from hpcfabric.repair.service import read_message, slim, write_message

LOG = logging.getLogger("hpcfabric.controller")

__all__ = ["Planner", "phases"]


def phases(asked: float, stamps: dict[str, float] | None, answered: float) -> dict[str, float]:
    """Where a plan's round trip went, in ms (one monotonic clock on the host): ``request`` (sent -> the planner read
    it), ``plan`` (its plan, with its own bookkeeping), ``patches`` (the tables as patches), ``reply`` (pickled,
    through the pipe, unpickled), ``total``."""
    out = {"total": round((answered - asked) * 1000.0, 3)}
    if stamps:
        slimmed = stamps.get("slimmed", stamps["planned"])
        out.update(request=round((stamps["received"] - asked) * 1000.0, 3),
                   plan=round((stamps["planned"] - stamps["received"]) * 1000.0, 3),
                   patches=round((slimmed - stamps["planned"]) * 1000.0, 3),
                   reply=round((answered - slimmed) * 1000.0, 3))
    return out


class Planner:
    """Plans repairs for ``config`` (module docstring); ``process=False``: inline from the start."""

    def __init__(self, config: Any, process: bool = True) -> None:
        self.config = config
        self.prove = proves(config)
        self.proc: subprocess.Popen | None = None
        self.ready = False
        self.info: dict[str, Any] = {}
        self.inline: Repairer | None = None
        self.mode = "process" if process and config.path else "inline"
        self.started = time.monotonic()
        self.last: dict[str, Any] | None = None

    def start(self) -> None:
        if self.mode == "inline":
            self._plan_inline(None)
            return
        try:
            env = dict(os.environ, PYTHONUNBUFFERED="1")
            self.proc = subprocess.Popen([sys.executable, "-m", "hpcfabric.repair.service", self.config.path],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
            write_message(self.proc.stdin, ("config", self.config.source_text))  # what we loaded, not the file now
        except OSError as err:
            self._plan_inline(f"the repair planner process did not start ({err})")
            return
        got = self._read()
        if got is None or not got.get("ready"):
            self._plan_inline("the repair planner process stopped before it was ready")
            return
        self.info = got
        self.ready = True
        LOG.info("failover: repair planner ready in %.1f s (proof base: %s dependencies)", got.get("seconds", 0.0),
                 got.get("dependencies"))

    def plan(self, failures: Any) -> dict[str, Any] | None:
        """The plan for ``failures`` (:func:`hpcfabric.repair.service.slim`): waits until the planner is ready."""
        while not self.ready and self.mode == "process" and self.proc is not None:
            hub.sleep(0.05)
        if self.mode == "process":
            try:
                assert self.proc is not None and self.proc.stdin is not None
                asked = time.monotonic()
                write_message(self.proc.stdin, ("plan", failures))
                got = self._read()
            except (OSError, ValueError, AssertionError) as err:
                got = None
                LOG.error("failover: repair planner: %s", err)
            if got is not None:
                got["phases_ms"] = phases(asked, got.pop("stamps", None), time.monotonic())
                self.last = got
                return got
            self._plan_inline("the repair planner process died")
        assert self.inline is not None
        plan = run_native(self.inline.plan, failures)
        self.last = {**slim(plan), "_plan": plan}
        return self.last

    def tables(self, names: Any) -> dict[str, Any]:
        """The last plan's tables of switches ``names``, whole (where a patch did not fit the table in force)."""
        if self.mode != "process":
            wanted = set(names)
            return {s: t for s, t in ((self.last or {}).get("desired") or {}).items() if s in wanted}
        assert self.proc is not None and self.proc.stdin is not None
        write_message(self.proc.stdin, ("tables", tuple(names)))
        return self._read() or {}

    def decide(self, install: bool) -> None:
        """The last plan was installed (or not)."""
        if self.mode == "process":
            try:
                assert self.proc is not None and self.proc.stdin is not None
                write_message(self.proc.stdin, ("apply",) if install else ("discard",))
            except (OSError, ValueError, AssertionError) as err:
                LOG.error("failover: repair planner: %s", err)
            return
        plan = (self.last or {}).get("_plan")
        if self.inline is not None and plan is not None:
            if install:
                self.inline.apply(plan)
                if not plan.proven and self.inline.prove:  # installed as at load (pause): a new base
                    self.inline.state = None
                    run_native(self.inline.base)
            else:
                self.inline.discard(plan)

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            if proc.stdin is not None:
                write_message(proc.stdin, ("stop",))
                proc.stdin.close()
            proc.wait(timeout=5)
        except Exception:  # pragma: no cover - it goes anyway
            proc.kill()

    def as_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "ready": self.ready, "pid": self.proc.pid if self.proc is not None else os.getpid(),
                "base_seconds": self.info.get("seconds"), "dependencies": self.info.get("dependencies"),
                "nice": self.info.get("nice")}

    def _read(self) -> Any:
        proc = self.proc
        if proc is None or proc.stdout is None:
            return None
        return run_native(read_message, proc.stdout)

    def _plan_inline(self, why: str | None) -> None:
        """Plan inline (in the controller's own process) from now on; ``why``: the process failed (logged)."""
        if why is not None:
            LOG.error("failover: %s: planning inline from now on (the controller's own process)", why)
        if self.proc is not None:
            try:
                self.proc.kill()
            except OSError:
                pass
            self.proc = None
        self.mode = "inline"
        self.inline = Repairer(self.config, prove=self.prove)
        if self.prove:
            run_native(self.inline.base)
        self.ready = True
