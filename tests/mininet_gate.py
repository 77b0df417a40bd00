"""The one gate of the Mininet test modules: root, Open vSwitch running, ``mininet/`` importable.

Call :func:`require_mininet` at module level, before importing anything from ``mininet/``::

    fn = require_mininet()   # skips the whole module with the reason otherwise
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import ModuleType

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
