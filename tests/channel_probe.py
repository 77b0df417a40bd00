"""Helpers shared by the control-channel tests (test_admission_emu, test_tls_ovs, test_ha_etcd*): polling, the
metrics scrape, a sample of it, the controller's refusal lines, a child controller's crash. Polling is ``mininet/runkit.py``'s ``wait_until``."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import socket
import sys
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "mininet") not in sys.path:
    sys.path.insert(0, str(ROOT / "mininet"))

from runkit import wait_until as until  # noqa: E402,F401  (runkit imports neither Mininet nor hpcfabric)

#: an OpenFlow 1.3 HELLO
HELLO = bytes.fromhex("0400000800000001")


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.read().decode()


def sample(text: str, name: str, **labels: str) -> float:
    """The value of one sample (labels in the exposition's order), 0 if absent."""
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    m = re.search(rf"^{name}(?:\{{{want}\}})? (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def refused_dpids(log: Path, reason: str) -> set[str]:
    """dpids the controller logged a WARNING refusal for (one line per dpid, address and reason a minute)."""
    return set(re.findall(rf"WARNING .*session for \S+ \(dpid ([0-9a-f]{{16}})\) from \S+ refused: {reason}:",
                          log.read_text()))


def plain_client(port: int) -> bytes:
    """An OpenFlow HELLO in plain TCP to ``port``; what came back before the close (b"" if reset)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(HELLO)
        try:
            return s.recv(100)
        except ConnectionResetError:
            return b""


def crash(proc: subprocess.Popen) -> None:
    """``kill -9`` a child process and reap it; nothing when it has already exited."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
