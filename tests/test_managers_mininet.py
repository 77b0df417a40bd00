"""The app under the frameworks' own managers, end to end in real Mininet/OVS.

``osken-manager hpcfabric.controller`` (this venv) and ``ryu-manager hpcfabric.controller`` (the Ryu
venv, ``.venv-ryu``, made by ``scripts/bootstrap.sh --ryu``, which ``make test`` runs) each run the
demo Dragonfly (a4-p2-h2) through ``mininet/run_fabric.py --manager``: every rule confirmed, DMP on every host,
all pairs ping, a PAUSE flips the conditional rules and expiry restores them. The status file names the
framework that ran it, so a test that silently fell back to os-ken would fail.

The Ryu run is skipped only when the Ryu venv does not exist (``make test`` always makes it).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = [pytest.mark.mininet]

from mininet_gate import require_mininet  # noqa: E402

require_mininet()

from controller_proc import manager_available  # noqa: E402  (mininet/controller_proc.py)

TOPOLOGY = "dragonfly-a4-p2-h2"  # the demo fabric: 36 switches, 72 hosts, 90 links
FRAMEWORK = {"osken": "os_ken ", "ryu": "ryu "}


@pytest.mark.parametrize("manager", ["ryu", "osken"])
def test_manager_runs_the_dragonfly_end_to_end(manager: str) -> None:
    missing = manager_available(manager)
    if missing:
        pytest.skip(missing)
    cmd = [sys.executable, str(ROOT / "mininet" / "run_fabric.py"), "--config", str(ROOT / "configs" / f"{TOPOLOGY}.conf"),
           "--manager", manager, "--link-speed-gbps", "0.01", "--json-only", "--prefix", f"m{manager[0]}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=str(ROOT))
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert lines, f"no JSON summary (exit {proc.returncode}): {proc.stderr[-2000:]}"
    s = json.loads(lines[-1])
    assert proc.returncode == 0 and s["passed"], s.get("failures") or s
    assert s["manager"] == manager and s["framework"].startswith(FRAMEWORK[manager]), s["framework"]
    assert s["rules_installed"] == s["rules_expected"] > 0 and s["flows_match_compiler"]
    assert s["dmp_assigned"] == s["hosts"] == 72
    assert s["ping_pairs"] == 72 * 71 and s["ping_lost"] == 0 and s["ping_unreachable_pairs"] == 0
    assert s["links_discovered"] == s["links_expected"] == 90
    assert s["pause_flips"] >= 1 and s["diverted"] is True and s["restored"] is True


def test_h1_dragonfly_global_pause_detours_through_the_neighbour() -> None:
    """dragonfly-a2-p1-h1, conditional: PAUSE on g0s0's only global port (2). Frames g0s0h0 injects
    towards a remote group leave through the local port (3) to the neighbour, which forwards them
    through its own global port; nothing waits on the paused port, no ping is lost (docs/routing.md)."""
    cmd = [sys.executable, str(ROOT / "mininet" / "run_fabric.py"), "--config", str(ROOT / "configs" / "dragonfly-a2-p1-h1.conf"),
           "--link-speed-gbps", "0.01", "--json-only", "--prefix", "mh", "--pause-port", "g0s0:2"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=str(ROOT))
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert lines, f"no JSON summary (exit {proc.returncode}): {proc.stderr[-2000:]}"
    s = json.loads(lines[-1])
    assert proc.returncode == 0 and s["passed"], s.get("failures") or s
    p = s["pause"]
    assert (p["switch"], p["port"], p["alt_port"]) == ("g0s0", 2, 3)
    assert p["flipped"] and p["diverted"] and p["restored"] and p["ping_lost"] == 0
    during = p["during"]
    assert during["alt_tx"] >= 0.9 * during["state"] > 0 and during["tx"] <= 0.1 * during["state"]
