"""What every Mininet runner shares: exit codes, the two error kinds, progress lines, the JSON report, signals.

A runner (``run_fabric.py``, ``run_experiment.py``, ``run_reliability.py``) is argument parsing plus a
sequence of steps from the modules next to this one; a step returns what it measured as a
:class:`StepResult` (summary keys and failures), which the runner adds to its :class:`Report`. The
report's last act is the one-line JSON summary on stdout.

This module imports nothing from hpcfabric or Mininet: it is the bottom of the step library.
"""

from __future__ import annotations

import json
import signal
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class UsageError(Exception):
    """Bad arguments or environment: exit 2."""


class CheckFailed(Exception):
    """A step failed in a way that makes the following steps pointless."""


class Progress:
    """Progress lines on stderr: ``[PROG  12.3s] message`` (``wall_clock``: ``[PROG HH:MM:SS]``)."""

    def __init__(self, quiet: bool = False, prog: str = "hpcfabric", wall_clock: bool = False):
        self.quiet = quiet
        self.prog = prog
        self.wall_clock = wall_clock
        self.t0 = time.monotonic()

    def __call__(self, message: str) -> None:
        if self.quiet:
            return
        stamp = time.strftime("%H:%M:%S") if self.wall_clock else f"{self.elapsed():6.1f}s"
        print(f"[{self.prog} {stamp}] {message}", file=sys.stderr, flush=True)

    def elapsed(self) -> float:
        return time.monotonic() - self.t0


@dataclass
class StepResult:
    """What one step measured: keys of the JSON summary, and the checks it failed (empty: passed)."""

    fields: dict[str, Any] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)


class Report:
    """The runner's JSON summary and its failures; :meth:`emit` prints it as the last stdout line."""

    def __init__(self, prog: str, **fields: Any):
        self.prog = prog
        self.summary: dict[str, Any] = dict(fields)
        self.failures: list[str] = []

    def update(self, **fields: Any) -> None:
        self.summary.update(fields)

    def fail(self, message: str) -> None:
        self.failures.append(message)

    def add(self, step: StepResult) -> StepResult:
        self.summary.update(step.fields)
        self.failures.extend(step.failures)
        return step

    def emit(self, passed: bool, *, seconds: float | None = None, echo: bool = True) -> None:
        """Set ``failures``, ``passed`` (and ``seconds``), print the failures on stderr if ``echo``, then the JSON."""
        self.summary["failures"] = self.failures
        self.summary["passed"] = passed
        if seconds is not None:
            self.summary["seconds"] = seconds
        if echo:
            for f in self.failures:
                print(f"[{self.prog}] FAILED: {f}", file=sys.stderr)
        print(json.dumps(self.summary, sort_keys=True, default=str), flush=True)


def raise_on_signals() -> tuple[Any, Any]:
    """SIGINT and SIGTERM raise KeyboardInterrupt (also when started with SIGINT ignored, e.g. a background
    job), so the teardowns run. Returns the previous handlers for :func:`restore_signals`."""

    def on_signal(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    return signal.signal(signal.SIGINT, on_signal), signal.signal(signal.SIGTERM, on_signal)


def shield_signals() -> tuple[Any, Any]:
    """Ignore SIGINT and SIGTERM (a second Ctrl-C must not abort a teardown); the previous handlers."""
    return signal.signal(signal.SIGINT, signal.SIG_IGN), signal.signal(signal.SIGTERM, signal.SIG_IGN)


def restore_signals(old: tuple[Any, Any]) -> None:
    signal.signal(signal.SIGINT, old[0])
    signal.signal(signal.SIGTERM, old[1])


def wait_until(pred: Callable[[], Any], timeout: float, what: str, step: float = 0.05) -> Any:
    """Poll ``pred`` until it returns something true and return that; CheckFailed after ``timeout`` s."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = pred()
        if got:
            return got
        time.sleep(step)
    raise CheckFailed(f"timeout ({timeout:g} s) waiting for {what}")


def summary_stats(values: list[float]) -> dict[str, Any] | None:
    """n, min, median, p90, max of ``values`` (None if empty)."""
    if not values:
        return None
    v = sorted(values)
    return {
        "n": len(v),
        "min": round(v[0], 3),
        "median": round(statistics.median(v), 3),
        "p90": round(v[min(len(v) - 1, int(0.9 * len(v)))], 3),
        "max": round(v[-1], 3),
    }
