"""A real etcd cluster on loopback ports, for the HA tests, bench/ and ``mininet/run_reliability.py``.

:class:`EtcdCluster` starts Debian's ``etcd`` (3.4) members with temporary data dirs, knows each member's
PID, kills / restarts single members or all of them, finds the raft leader, and cleans everything up
(processes killed by PID, data dirs removed). :func:`missing` says why it cannot run here
(``scripts/bootstrap.sh --etcd`` installs etcd and etcd3gw). Standard library only; the tests' fixture
``etcd_cluster`` is in ``tests/conftest.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
import uuid

ETCD = shutil.which("etcd") or "/usr/bin/etcd"


def missing() -> str | None:
    """Why a real cluster cannot run here (no ``etcd`` binary or no ``etcd3gw``), else None."""
    import importlib.util

    if shutil.which("etcd") is None or importlib.util.find_spec("etcd3gw") is None:
        return "needs etcd and etcd3gw (scripts/bootstrap.sh --etcd)"
    return None


def free_ports(n: int) -> list[int]:
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


class EtcdCluster:
    """``size`` etcd members on 127.0.0.1; ``endpoints`` are their client URLs."""

    def __init__(self, size: int = 3, heartbeat_ms: int = 100, election_ms: int = 1000) -> None:
        self.size = size
        self.heartbeat_ms = heartbeat_ms
        self.election_ms = election_ms
        base = "/dev/shm" if os.path.isdir("/dev/shm") else None
        self.root = tempfile.mkdtemp(prefix="hpcfabric-etcd-", dir=base)
        ports = free_ports(2 * size)
        self.client_ports = ports[:size]
        self.peer_ports = ports[size:]
        self.names = [f"m{i}" for i in range(size)]
        self.endpoints = tuple(f"http://127.0.0.1:{p}" for p in self.client_ports)
        self.token = "hpcfabric-" + uuid.uuid4().hex[:8]
        self.procs: list[subprocess.Popen | None] = [None] * size

    def command(self, i: int) -> list[str]:
        cluster = ",".join(f"{n}=http://127.0.0.1:{p}" for n, p in zip(self.names, self.peer_ports))
        return [ETCD, "--name", self.names[i], "--data-dir", os.path.join(self.root, self.names[i]),
                "--listen-client-urls", self.endpoints[i], "--advertise-client-urls", self.endpoints[i],
                "--listen-peer-urls", f"http://127.0.0.1:{self.peer_ports[i]}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.peer_ports[i]}",
                "--initial-cluster", cluster, "--initial-cluster-state", "new",
                "--initial-cluster-token", self.token,
                "--heartbeat-interval", str(self.heartbeat_ms), "--election-timeout", str(self.election_ms),
                "--logger", "zap", "--log-outputs", os.path.join(self.root, f"{self.names[i]}.log")]

    # ------------------------------------------------------------ processes
    def start_member(self, i: int) -> None:
        assert self.procs[i] is None or self.procs[i].poll() is not None, f"member {i} is running"
        self.procs[i] = subprocess.Popen(self.command(i), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL, start_new_session=True)

    def start(self, timeout: float = 30.0) -> "EtcdCluster":
        for i in range(self.size):
            self.start_member(i)
        self.wait_healthy(timeout)
        return self

    def kill_member(self, i: int) -> None:
        """SIGKILL member ``i`` (by PID) and reap it."""
        p = self.procs[i]
        if p is not None and p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
            p.wait(10)

    def kill_all(self) -> None:
        for i in range(self.size):
            self.kill_member(i)

    def close(self) -> None:
        self.kill_all()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "EtcdCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------ state
    def running(self) -> list[int]:
        return [i for i, p in enumerate(self.procs) if p is not None and p.poll() is None]

    def status(self, i: int, timeout: float = 1.0) -> dict | None:
        req = urllib.request.Request(self.endpoints[i] + "/v3/maintenance/status", data=b"{}", method="POST")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return json.loads(resp.read())
        except OSError:
            return None

    def leader(self) -> int | None:
        """Index of the member that is raft leader (as the running members agree), or None."""
        for i in self.running():
            st = self.status(i)
            if st and st.get("leader") and st.get("header", {}).get("member_id") == st["leader"]:
                return i
        return None

    def wait_healthy(self, timeout: float = 30.0) -> float:
        """Wait until a leader is elected and a linearizable read succeeds on every running member; seconds taken."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self.leader() is not None and all(self._read_ok(i) for i in self.running()):
                return time.monotonic() - t0
            time.sleep(0.05)
        logs = {n: open(os.path.join(self.root, f"{n}.log")).read()[-800:]
                for n in self.names if os.path.exists(os.path.join(self.root, f"{n}.log"))}
        raise RuntimeError(f"etcd cluster not healthy after {timeout}s: {logs}")

    def _read_ok(self, i: int) -> bool:
        req = urllib.request.Request(self.endpoints[i] + "/v3/kv/range", data=b'{"key": "AA=="}', method="POST")
        try:
            with urllib.request.urlopen(req, timeout=1.0) as resp:
                return resp.status == 200
        except OSError:
            return False

