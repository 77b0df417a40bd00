"""bench/bringup.py with a small topology: it finishes (one JSON line, counts right) and leaves no bridge
behind, also when stopped by SIGTERM or SIGINT while its bridges exist. Real Open vSwitch; needs root
(the caller holds /tmp/hpcfabric-ovs.lock, as for every OVS test)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench" / "bringup.py"
TOPO = ROOT / "topologies" / "dragonfly-a2-p1-h1.yaml"

pytestmark = pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0 or not shutil.which("ovs-vsctl"), reason="needs root and Open vSwitch"
)


def bridges_of(pid: int) -> list[str]:
    """The bench's bridges (named hfb<pid % 100>x<i>)."""
    out = subprocess.run(["ovs-vsctl", "list-br"], capture_output=True, text=True, timeout=30).stdout.split()
    return [b for b in out if b.startswith(f"hfb{pid % 100:02d}x")]


def start() -> subprocess.Popen:
    # SIGINT back to its default in the child: a test run started in the background (``cmd &``) ignores
    # SIGINT, and Python only turns SIGINT into KeyboardInterrupt when it starts with the default handler
    return subprocess.Popen([sys.executable, str(BENCH), "--topology", str(TOPO), "--repeat", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def test_bringup_finishes_and_removes_its_bridges() -> None:
    p = start()
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err[-2000:]
    line = json.loads(out.strip().splitlines()[-1])
    assert line["switches"] == 6 and line["counts_ok"] is True, line
    assert bridges_of(p.pid) == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_interrupted_bringup_removes_its_bridges(sig: signal.Signals) -> None:
    p = start()
    end = time.monotonic() + 120
    while not bridges_of(p.pid) and p.poll() is None and time.monotonic() < end:
        time.sleep(0.05)
    assert bridges_of(p.pid), "the bench never created its bridges"
    p.send_signal(sig)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 130, (p.returncode, err[-2000:])
    assert json.loads(out.strip().splitlines()[-1])["interrupted"]
    assert bridges_of(p.pid) == []
