"""The one gate of the Mininet test modules: root, Open vSwitch running, ``mininet/`` importable.

Call :func:`require_mininet` at module level, before importing anything from ``mininet/``::

    fn = require_mininet()   # skips the whole module with the reason otherwise

:func:`run_runner` runs one of the runners (``mininet/run_*.py``) and returns its JSON summary.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
MININET_DIR = ROOT / "mininet"


def require_mininet() -> ModuleType:
    """Skip the calling test module unless root with Open vSwitch running; return ``fabric_net``.

    Puts ``mininet/`` (the repository's scripts, not the Mininet package) first on ``sys.path`` so the
    caller can import ``fabric_net``, the step modules (``controller_proc``, ``pause_check``, ...) and the runners.
    """
    if str(MININET_DIR) not in sys.path:
        sys.path.insert(0, str(MININET_DIR))
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("Mininet tests need root", allow_module_level=True)
    import fabric_net

    if not fabric_net.ovs_running():
        pytest.skip("Open vSwitch is not running (scripts/bootstrap.sh --ovs-only)", allow_module_level=True)
    return fabric_net


def run_runner(script: str, *args: str, timeout: float = 600) -> dict[str, Any]:
    """Run ``mininet/<script>`` with ``args`` (this interpreter, from the repository root) and return its JSON
    summary (the last stdout line) with ``_rc`` (its exit status) and ``_stderr`` (the tail of its stderr)."""
    proc = subprocess.run([sys.executable, str(MININET_DIR / script), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=str(ROOT))
    lines = proc.stdout.strip().splitlines()
    assert lines, f"no output (exit {proc.returncode}): {proc.stderr[-3000:]}"
    data = json.loads(lines[-1])
    data["_stderr"] = proc.stderr[-4000:]
    data["_rc"] = proc.returncode
    return data
