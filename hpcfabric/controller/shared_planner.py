"""The repair planner shared by the partitions of a fabric on one host (``[failover] planner = shared``).

:class:`SharedPlanner` has the interface of :class:`hpcfabric.controller.planner.Planner` (``start``, ``plan``,
``tables``, ``decide``, ``stop``, ``as_dict``) but asks :mod:`hpcfabric.repair.shared` over a Unix socket,
``planner.sock`` in the failures directory. The first controller to find no planner there starts one -- whoever
takes ``planner.lock`` (``flock``, not blocking); the planner process inherits the lock and holds it while it lives,
so the others wait for its socket and connect. The planner ends when its last controller has gone.

Each plan it sends is against the tables this controller has in force: the controller tells it its epoch (the
planner's generation and the last plan it installed) and the switches it holds repaired tables for. If the planner
dies, the plan under way is not installed (under ``flow_control = pfc`` the last proven tables stay: logged, status
``unproven``, as for an unproven plan) and a planner is started again (or connected to) in the background; the
repair is asked again once it is ready. The socket is green (eventlet): waiting for the planner never blocks the hub.
"""

from __future__ import annotations

import fcntl
import logging
import os
import socket
import subprocess
import sys
import time
from typing import Any, Callable, Iterable

from hpcfabric.controller.framework import hub
from hpcfabric.controller.planner import phases
from hpcfabric.repair.plan import proves
from hpcfabric.repair.service import read_message, write_message

LOG = logging.getLogger("hpcfabric.controller")

__all__ = ["SharedPlanner", "socket_path", "lock_path"]

#: the longest wait between attempts to reach a planner that keeps ending before it is ready
BACKOFF_MAX_S = 300.0
#: names in the failures directory
SOCKET_NAME, LOCK_NAME = "planner.sock", "planner.lock"


def socket_path(directory: str) -> str:
    return os.path.join(directory, SOCKET_NAME)


def lock_path(directory: str) -> str:
    return os.path.join(directory, LOCK_NAME)


class SharedPlanner:
    """Asks the host's shared planner for the repairs of ``config``'s switches (module docstring); ``repaired()``:
    the switches this controller holds repaired tables for (told to a planner that does not know our epoch);
    ``again()``: called once a planner is ready after one died (the repair it missed is asked again)."""

    mode = "shared"

    def __init__(self, config: Any, repaired: Callable[[], Iterable[str]] = tuple,
                 again: Callable[[], None] | None = None) -> None:
        self.config = config
        self.prove = proves(config)
        os.makedirs(config.failures_dir, exist_ok=True)
        self.path = socket_path(config.failures_dir)
        self.repaired, self.again = repaired, again
        self.names = sorted(config.managed)
        self.ready = False
        self.starting = False
        self.stopped = False
        self.info: dict[str, Any] = {}
        self.conn: socket.socket | None = None
        self.rfile: Any = None
        self.wfile: Any = None
        self.started_here = 0  # planner processes this controller started
        self.lost = 0  # times the planner went away under us
        self.failed_starts = 0  # attempts that ended before a planner was ready (e.g. its base did not fit)
        self.epoch: tuple[Any, int] = (None, 0)  # (generation, epoch) of the tables in force here
        self.pending: tuple[Any, int] | None = None  # the last plan's
        self.last: dict[str, Any] | None = None

    # ------------------------------------------------------------ connecting
    def start(self) -> None:
        """Connect to the host's planner, starting it if nobody has (a green thread: may wait minutes for its base)."""
        if self.starting or self.stopped:
            return
        self.starting = True
        try:
            failed = 0
            while not self.stopped:
                try:
                    self._connect()
                    return
                except (OSError, ValueError, EOFError) as err:
                    failed += 1
                    wait = min(BACKOFF_MAX_S, 0.5 * 4 ** (failed - 1))  # a planner that cannot start: not a loop
                    self.failed_starts += 1
                    (LOG.error if failed > 1 else LOG.warning)(
                        "failover: shared repair planner: %s (%d time(s) in a row; its log is the starting controller's); "
                        "trying again in %.1f s", err, failed, wait)
                    self._close()
                    hub.sleep(wait)
        finally:
            self.starting = False

    def _connect(self) -> None:
        waited = time.monotonic()
        while True:
            if self.stopped:
                raise EOFError("stopped")
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(self.path)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                sock.close()
            if self._start_planner():
                LOG.warning("failover: started the shared repair planner (%s)", self.path)
            elif time.monotonic() - waited > 5.0:
                LOG.info("failover: waiting for the shared repair planner at %s", self.path)
                waited = time.monotonic()
            hub.sleep(0.1)
        self.conn, self.rfile, self.wfile = sock, sock.makefile("rb"), sock.makefile("wb")
        write_message(self.wfile, ("hello", self.names))
        got = read_message(self.rfile)  # once its proof base is built
        if not got or not got.get("ready"):
            raise EOFError("the shared repair planner ended before it was ready")
        self.info = got
        self.ready = True
        LOG.info("failover: shared repair planner ready (pid %s, %s switches; its base took %.1f s, %s dependencies)",
                 got.get("pid"), got.get("switches"), got.get("seconds", 0.0), got.get("dependencies"))
        if self.lost and self.again is not None:
            self.again()

    def _start_planner(self) -> bool:
        """Start the planner if nobody holds the lock (True); the process keeps the lock for its life."""
        fd = os.open(lock_path(self.config.failures_dir), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False  # a planner lives (or is starting): its socket comes
            env = dict(os.environ, PYTHONUNBUFFERED="1")
            proc = subprocess.Popen([sys.executable, "-m", "hpcfabric.repair.shared", self.path, self.config.path],
                                    stdin=subprocess.PIPE, pass_fds=(fd,), start_new_session=True, env=env)
            assert proc.stdin is not None
            proc.stdin.write(self.config.source_text.encode())  # what we loaded, not the file now
            proc.stdin.close()
            self.started_here += 1
            return True
        finally:
            os.close(fd)

    def _close(self) -> None:
        self.ready = False
        for f in (self.rfile, self.wfile, self.conn):
            try:
                if f is not None:
                    f.close()
            except OSError:
                pass
        self.conn = self.rfile = self.wfile = None

    def _lost(self, err: Any) -> None:
        LOG.error("failover: the shared repair planner went away (%s): nothing is installed until one is ready "
                  "again; starting or joining another", err)
        self.lost += 1
        self._close()
        hub.spawn(self.start)

    # ------------------------------------------------------------ the planner interface
    def plan(self, failures: Any) -> dict[str, Any] | None:
        """The plan for ``failures`` as patches of our tables in force; None if the planner went away (not installed)."""
        while not self.ready and not self.stopped:
            if not self.starting:
                hub.spawn(self.start)
            hub.sleep(0.05)
        asked = time.monotonic()
        try:
            write_message(self.wfile, ("plan", failures, self.epoch, tuple(self.repaired())))
            got = read_message(self.rfile)
        except (OSError, ValueError, AttributeError, EOFError) as err:
            got, why = None, err
        else:
            why = "the connection closed"
        if got is None:
            self._lost(why)
            self.pending = None
            return None
        if (got.get("verdict") or {}).get("verdict") == "planner error":  # said in the planner's log: no plan
            LOG.error("failover: the shared repair planner failed on %s: %s", failures,
                      got["verdict"].get("explanation"))
            self.pending = None
            return None
        got["phases_ms"] = phases(asked, got.pop("stamps", None), time.monotonic())
        self.pending = (got.get("generation"), got.get("epoch", 0))
        self.last = got
        return got

    def tables(self, names: Any) -> dict[str, Any]:
        """The last plan's tables of ``names``, whole (a patch that did not fit)."""
        if self.pending is None or not self.ready:
            return {}
        try:
            write_message(self.wfile, ("tables", tuple(names), self.pending[1]))
            return read_message(self.rfile) or {}
        except (OSError, ValueError, EOFError) as err:
            self._lost(err)
            return {}

    def decide(self, install: bool) -> None:
        """The last plan was installed here (our epoch moves to it), or not (it stays)."""
        if install and self.pending is not None:
            self.epoch = self.pending
        self.pending = None

    def stop(self) -> None:
        self.stopped = True
        if self.wfile is not None:
            try:
                write_message(self.wfile, ("stop",))
            except (OSError, ValueError):
                pass
        self._close()

    def as_dict(self) -> dict[str, Any]:
        return {"mode": "shared", "ready": self.ready, "pid": self.info.get("pid"), "socket": self.path,
                "base_seconds": self.info.get("seconds"), "dependencies": self.info.get("dependencies"),
                "nice": self.info.get("nice"),
                "generation": self.epoch[0] or self.info.get("generation"), "epoch": self.epoch[1],
                "started_here": self.started_here, "lost": self.lost, "failed_starts": self.failed_starts,
                "planner_plans": (self.last or {}).get("planner_plans")}  # plans the shared planner made in all
