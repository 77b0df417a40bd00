"""What every runner does around its steps: the one preamble (:func:`run_main`) and the one bring-up
(:func:`fabric_up`).

:func:`run_main` gives a runner its progress lines, JSON report and work directory, makes SIGINT/SIGTERM
raise (so every teardown runs), checks root and Open vSwitch, runs the runner's body and maps what
happened to the exit code: 0 every check passed, 1 a check failed, 2 bad arguments or environment
(not root, no Open vSwitch, a config error), 130 interrupted. The JSON summary is the last stdout line;
the work directory is removed when the run passed (or left it empty), else named in the summary
(``logs``).

:func:`fabric_up` is a context manager: start the controllers, build and start the Mininet net, wait
until it is ready, DMP on every host (each must hold its planned MAC) and static neighbour entries;
on exit (also on errors and Ctrl-C, with further signals ignored meanwhile) the net is stopped, then
every controller by PID::

    with fabric_up(cfg.fabric, cfg.plan, [Controller(conf, status, port, log)], progress=log) as up:
        ...  # up.net, up.status (the controller's status once ready), up.dmp, up.controllers
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from controller_proc import Controller  # mininet/controller_proc.py
from dmp_hosts import DmpOutcome, assign_planned_macs, set_static_neighbours
from fabric_topo import FabricNetError, build_net, ovs_running, stop_net
from runkit import (
    EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, CheckFailed, Progress, Report, UsageError, raise_on_signals,
    restore_signals, shield_signals,
)  # fmt: skip

from hpcfabric.errors import HpcfabricError


@dataclass
class Run:
    """What :func:`run_main` hands the runner's body."""

    report: Report
    progress: Progress
    work: Path  # the run's own temporary directory


def run_main(prog: str, body: Callable[[Run], None], *, quiet: bool = False, wall_clock: bool = False,
             echo: bool = True, needs_tc: bool = False, errors: tuple[type[Exception], ...] = (),
             log_level: str = "error", **fields: Any) -> int:
    """Run ``body(run)`` as a runner: see the module docstring. ``quiet``: no progress lines; ``echo``: the
    failures also on stderr; ``errors``: the runner's own exception types that fail a check (exit 1, no
    traceback) besides CheckFailed, FabricNetError and HpcfabricError; ``log_level``: Mininet's;
    ``fields``: the summary's first keys."""
    progress = Progress(quiet, prog, wall_clock)
    report = Report(prog, **fields)
    work = Path(tempfile.mkdtemp(prefix=f"hf{prog}-"))
    old = raise_on_signals()
    code = EXIT_FAILED
    try:
        if os.geteuid() != 0:
            raise UsageError("must run as root (Mininet, Open vSwitch, raw sockets)")
        if not ovs_running():
            raise UsageError("Open vSwitch is not running ('ovs-vsctl show' fails): run scripts/bootstrap.sh --ovs-only")
        if needs_tc and shutil.which("tc") is None:
            raise UsageError("tc (iproute2) is not installed")
        from mininet.log import setLogLevel

        setLogLevel(log_level)
        body(Run(report, progress, work))
        code = EXIT_FAILED if report.failures else EXIT_OK
    except UsageError as err:
        report.fail(str(err))
        code = EXIT_USAGE
    except (CheckFailed, FabricNetError, HpcfabricError, *errors) as err:
        report.fail(str(err))
        code = EXIT_USAGE if getattr(err, "exit_code", 1) == 2 else EXIT_FAILED
    except KeyboardInterrupt:
        report.fail("interrupted")
        code = EXIT_INTERRUPTED
    except Exception as err:  # noqa: BLE001 - report, exit 1
        import traceback

        traceback.print_exc()
        report.fail(f"internal error: {type(err).__name__}: {err}")
        code = EXIT_FAILED
    finally:
        shield_signals()
        if code == EXIT_OK or not any(work.iterdir()):
            shutil.rmtree(work, ignore_errors=True)
        else:
            report.update(logs=str(work))
        restore_signals(old)
    report.emit(code == EXIT_OK, seconds=round(progress.elapsed(), 2), echo=echo and not quiet)
    return code


@dataclass
class Up:
    """A fabric brought up by :func:`fabric_up`. ``controllers`` are stopped on exit: a phase that starts
    another one adds it here."""

    net: Any = None
    controllers: list[Controller] = field(default_factory=list)
    status: Any = None  # what the ready step returned (by default the first controller's status)
    dmp: DmpOutcome | None = None
    bringup_s: float | None = None  # Mininet build + start
    t_net: float = 0.0  # time.monotonic() when the build started


@contextmanager
def fabric_up(fabric: Any, plan: Any, controllers: Sequence[Controller] = (), *, prefix: str = "",
              seed: int | None = None, link_bw: float | None = None, ready: Callable[[Up], Any] | None = None,
              ready_timeout: float = 120.0, dmp: bool = True, report: Report | None = None,
              progress: Callable[[str], None] | None = None) -> Iterator[Up]:
    """Bring ``fabric`` up, yield an :class:`Up`, tear it down (see the module docstring).

    The switches connect to the first controller (none: no controller, e.g. static flows). ``ready(up)``
    waits until the fabric is ready and returns what the runner wants as ``up.status``; default: the first
    controller has every switch confirmed and every rule installed (``ready_timeout`` s). ``dmp``: DMP and
    neighbour entries (CheckFailed names the hosts without their planned MAC). ``report``: the summary gets
    ``bringup_s``, the DMP keys and ``teardown_s``/``teardown_parts``; a failed net stop fails it, and the
    controllers' log tails are kept (``controller_logs``) when the run fails.
    """
    say = progress or (lambda _m: None)
    up = Up(controllers=list(controllers))
    failing = False
    try:
        for c in up.controllers:
            took = c.start()
            say(f"controller ({c.manager}) listening on 127.0.0.1:{c.port} after {took:.1f} s (pid {c.pid}, log {c.log_path})")
        up.t_net = time.monotonic()
        up.net = build_net(fabric, plan, controller_port=up.controllers[0].port if up.controllers else None,
                           link_bw=link_bw, prefix=prefix, seed=seed)
        up.bringup_s = round(time.monotonic() - up.t_net, 2)
        say(f"Mininet up in {up.bringup_s} s")
        if report is not None:
            report.update(bringup_s=up.bringup_s)
        if ready is not None:
            up.status = ready(up)
        elif up.controllers:
            up.status = up.controllers[0].wait_ready(len(fabric.switches), ready_timeout, progress)
        if dmp:
            up.dmp = assign_planned_macs(up.net, plan)
            if report is not None:
                report.update(**up.dmp.fields())
            say(f"DMP: {len(up.dmp.assigned)}/{len(fabric.hosts)} hosts hold their planned MAC ({up.dmp.fields()['dmp_s']} s)")
            if up.dmp.problem():
                raise CheckFailed(f"DMP: {up.dmp.problem()}")
            set_static_neighbours(up.net, plan)
        yield up
    except BaseException:
        failing = True
        raise
    finally:
        old = shield_signals()
        try:
            tear_down(up, report, say, failing)
        finally:
            restore_signals(old)


def tear_down(up: Up, report: Report | None, say: Callable[[str], None], failing: bool) -> None:
    """Stop the net, then the controllers (by PID): see :func:`fabric_up`."""
    t = time.monotonic()
    if up.net is not None:
        say("stopping Mininet")
        err = stop_net(up.net)
        if err is not None:
            if report is None:
                say(f"net.stop failed: {err}")
            else:
                report.fail(f"net.stop failed: {err}")
    for c in up.controllers:
        if c.alive():
            say(f"stopping controller (pid {c.pid})")
        rc = c.stop()
        if report is not None and (failing or report.failures or rc not in (0, None, -signal.SIGTERM)):
            report.summary.setdefault("controller_logs", {})[c.log_path.name] = c.log_tail(15)
    if report is not None:
        report.update(teardown_s=round(time.monotonic() - t, 2), teardown_parts=getattr(up.net, "hf_teardown", None))
