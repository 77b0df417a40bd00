"""Controller step: ``hpcfabric controller`` (or ``osken-manager``/``ryu-manager``) as a subprocess, and its status file.

:class:`Controller` starts the controller (``manager``: :data:`MANAGERS`) in its own session (Ctrl-C reaches only the runner), waits
until it listens, stops it by PID (SIGTERM, then SIGKILL), reads its status file and waits until
every switch is confirmed and every rule installed (:meth:`Controller.wait_ready`). The status helpers
(:func:`ready`, :func:`summarise_status`, :func:`status_changes`) read the file's JSON.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from runkit import CheckFailed

from hpcfabric.emu.driver import free_port, listening, stop_process  # noqa: F401  (free_port: for the runners)

ROOT = Path(__file__).resolve().parent.parent


def controller_available() -> bool:
    """True if the controller package ``hpcfabric.controller`` can be imported (exists)."""
    try:
        return importlib.util.find_spec("hpcfabric.controller") is not None
    except (ImportError, ValueError):
        return False


def controller_command() -> list[str]:
    exe = Path(sys.executable).with_name("hpcfabric")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "hpcfabric.cli"]


#: how the controller can be started: ``hpcfabric controller`` (this venv), ``osken-manager`` (this
#: venv), ``ryu-manager`` (the Ryu venv, ``.venv-ryu`` made by ``scripts/bootstrap.sh --ryu``)
MANAGERS = ("hpcfabric", "osken", "ryu")
#: the Ryu venv (``HPCFABRIC_RYU_VENV`` overrides it)
RYU_VENV = Path(os.environ.get("HPCFABRIC_RYU_VENV") or ROOT / ".venv-ryu")


def manager_executable(manager: str) -> Path:
    """The ``osken-manager`` next to this Python, or the Ryu venv's ``ryu-manager``."""
    if manager == "osken":
        return Path(sys.executable).with_name("osken-manager")
    if manager == "ryu":
        return RYU_VENV / "bin" / "ryu-manager"
    raise ValueError(f"manager {manager!r}: expected one of {', '.join(MANAGERS)}")


def manager_available(manager: str) -> str | None:
    """None if ``manager`` can be started here, else why not."""
    if manager == "hpcfabric":
        return None if controller_available() else "the package hpcfabric.controller is not installed"
    exe = manager_executable(manager)
    if not exe.exists():
        hint = " (scripts/bootstrap.sh --ryu makes it)" if manager == "ryu" else ""
        return f"{exe} does not exist{hint}"
    return None


def manager_command(manager: str, config: Path, status_file: Path, port: int) -> list[str]:
    """The command line that starts the app with ``manager`` (the status file comes from ``config`` for the managers)."""
    if manager == "hpcfabric":
        return controller_command() + ["controller", "--config", str(config), "--status-file", str(status_file),
                                       "--listen-port", str(port)]
    return [str(manager_executable(manager)), "--config-file", str(config), "--ofp-tcp-listen-port", str(port),
            "hpcfabric.controller"]


# ---------------------------------------------------------------------------
# status file


def ready(status: dict[str, Any], n_switches: int) -> bool:
    """Every switch connected and confirmed, and rules_installed == rules_expected > 0."""
    return (
        status.get("switches_expected") == n_switches
        and status.get("switches_confirmed") == n_switches
        and status.get("switches_connected", n_switches) == n_switches
        and status.get("rules_expected", 0) > 0
        and status.get("rules_installed") == status.get("rules_expected")
    )


def summarise_status(status: dict[str, Any] | None) -> str:
    if not status:
        return "no status file yet"
    keys = ("switches_expected", "switches_connected", "switches_confirmed", "rules_installed", "rules_expected")
    return ", ".join(f"{k}={status.get(k)}" for k in keys)


def status_changes(status: dict[str, Any]) -> int:
    """Flow-mods of the last reconcile: entries added, modified and deleted on every switch."""
    return sum((s.get("added") or 0) + (s.get("modified") or 0) + (s.get("deleted") or 0)
               for s in (status.get("per_switch") or {}).values())


# ---------------------------------------------------------------------------
# the process


class Controller:
    """The controller as a subprocess in its own session (Ctrl-C reaches only us).

    ``manager``: ``hpcfabric`` (``hpcfabric controller``, the default), ``osken`` (``osken-manager``) or
    ``ryu`` (``ryu-manager`` from the Ryu venv); with a manager the status file must be the config's
    ``status_file`` (``fabric_setup.write_config`` writes it).
    """

    def __init__(self, config: Path, status_file: Path, listen_port: int, log_path: Path, manager: str = "hpcfabric"):
        if manager not in MANAGERS:
            raise ValueError(f"manager {manager!r}: expected one of {', '.join(MANAGERS)}")
        self.manager = manager
        self.config = config
        self.status_file = status_file
        self.port = listen_port
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def start(self, timeout: float = 30.0) -> float:
        """Start and wait until it listens; returns seconds taken. Raises CheckFailed if it dies."""
        t0 = time.monotonic()
        try:  # a stale file from a previous (killed) controller must not look "ready"
            self.status_file.unlink()
        except FileNotFoundError:
            pass
        cmd = manager_command(self.manager, self.config, self.status_file, self.port)
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=str(ROOT)
            )
        finally:
            log.close()
        self.starts += 1
        while time.monotonic() - t0 < timeout:
            if self.proc.poll() is not None:
                raise CheckFailed(f"controller exited with status {self.proc.returncode}: {self.log_tail()}")
            if listening(self.port):
                return time.monotonic() - t0
            time.sleep(0.1)
        raise CheckFailed(f"controller not listening on port {self.port} after {timeout:g} s: {self.log_tail()}")

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM, grace: float = 5.0) -> int | None:
        """Send ``sig`` to our controller PID, then SIGKILL after ``grace`` seconds. Returns its exit status."""
        proc, self.proc = self.proc, None
        return None if proc is None else stop_process(proc, grace, sig)

    def status(self) -> dict[str, Any] | None:
        try:
            with open(self.status_file, encoding="utf-8") as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return " | ".join(text[-lines:]) or "(empty log)"

    def wait_ready(self, n_switches: int, timeout: float, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
        """Wait until every switch is confirmed and rules_installed == rules_expected; returns the status."""
        t0 = time.monotonic()
        last_note = t0
        status: dict[str, Any] | None = None
        while True:
            if not self.alive():
                raise CheckFailed(f"controller died (status {self.proc.returncode if self.proc else '?'}): {self.log_tail()}")
            status = self.status()
            if status and status.get("pid", self.pid) == self.pid and ready(status, n_switches):
                return status
            now = time.monotonic()
            if now - t0 > timeout:
                raise CheckFailed(f"not ready after {timeout:g} s: {summarise_status(status)}")
            if progress and now - last_note > 5:
                progress(f"  waiting: {summarise_status(status)}")
                last_note = now
            time.sleep(0.2)
