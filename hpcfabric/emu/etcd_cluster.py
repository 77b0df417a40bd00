"""A real etcd cluster on loopback ports, for the HA tests, bench/ and ``mininet/run_reliability.py``.

:class:`EtcdCluster` starts Debian's ``etcd`` (3.4) members with temporary data dirs, knows each member's
PID, kills / restarts single members or all of them, finds the raft leader, and cleans everything up
(processes killed by PID, data dirs removed). :func:`missing` says why it cannot run here
(``scripts/bootstrap.sh --etcd`` installs etcd and etcd3gw). Standard library only; the tests' fixture
``etcd_cluster`` is in ``tests/conftest.py``.

``EtcdCluster(3, tls=True, auth=True)`` (fixture ``etcd_tls_cluster``) is the secured cluster of
docs/operations.md "Securing the control plane": certificates made here (:class:`hpcfabric.emu.pki.Authority`),
client and peer URLs over TLS with client certificates required (``--client-cert-auth``,
``--peer-client-cert-auth``), and etcd's auth enabled with the users ``root``, ``hpcfabric`` (role
``hpcfabric``: read-write on ``auth_prefix``) and ``reader`` (read-only there); :meth:`EtcdCluster.ha_keys`
gives a controller config's ``[ha] etcd_*`` lines.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid

from hpcfabric.emu.driver import free_range

ETCD = shutil.which("etcd") or "/usr/bin/etcd"


def missing() -> str | None:
    """Why a real cluster cannot run here (no ``etcd`` binary or no ``etcd3gw``), else None."""
    import importlib.util

    if shutil.which("etcd") is None or importlib.util.find_spec("etcd3gw") is None:
        return "needs etcd and etcd3gw (scripts/bootstrap.sh --etcd)"
    return None


class EtcdCluster:
    """``size`` etcd members on 127.0.0.1; ``endpoints`` are their client URLs."""

    def __init__(self, size: int = 3, heartbeat_ms: int = 100, election_ms: int = 1000, *, tls: bool = False,
                 auth: bool = False, auth_prefix: str = "/hpcfabric") -> None:
        self.size = size
        self.tls, self.auth, self.auth_prefix = tls, auth, auth_prefix
        self.heartbeat_ms = heartbeat_ms
        self.election_ms = election_ms
        base = "/dev/shm" if os.path.isdir("/dev/shm") else None
        self.root = tempfile.mkdtemp(prefix="hpcfabric-etcd-", dir=base)
        base = free_range(2 * size)  # below the ephemeral range: no outgoing connection takes one meanwhile
        self.client_ports = list(range(base, base + size))
        self.peer_ports = list(range(base + size, base + 2 * size))
        self.names = [f"m{i}" for i in range(size)]
        self.scheme = "https" if tls else "http"
        self.endpoints = tuple(f"{self.scheme}://127.0.0.1:{p}" for p in self.client_ports)
        self.token = "hpcfabric-" + uuid.uuid4().hex[:8]
        self.procs: list[subprocess.Popen | None] = [None] * size
        self.files: dict[str, str] = self.certificates() if tls else {}
        self.passwords = {u: uuid.uuid4().hex for u in ("root", "hpcfabric", "reader")} if auth else {}
        self.auth_on = False
        self.tokens: dict[int, str] = {}

    def certificates(self) -> dict[str, str]:
        """CA, one server/peer certificate per member (IP 127.0.0.1), client certificates for root, hpcfabric,
        reader; and a client certificate of another CA (``stranger``)."""
        from hpcfabric.emu.pki import Authority

        ca = Authority(os.path.join(self.root, "pki"), "etcd test CA")
        files = {"ca": str(ca.ca)}
        for n in self.names:
            cert, key = ca.issue(n, ips=("127.0.0.1",))
            files[n], files[n + "-key"] = str(cert), str(key)
        for user in ("root", "hpcfabric", "reader"):  # no commonName: etcd's gateway refuses one once auth is on
            cert, key = ca.issue(user, common_name=False)
            files[user], files[user + "-key"] = str(cert), str(key)
        other = Authority(os.path.join(self.root, "pki-other"), "another CA")
        cert, key = other.issue("hpcfabric", common_name=False)
        files["stranger"], files["stranger-key"] = str(cert), str(key)
        return files

    def command(self, i: int) -> list[str]:
        cluster = ",".join(f"{n}={self.scheme}://127.0.0.1:{p}" for n, p in zip(self.names, self.peer_ports))
        cmd = [ETCD, "--name", self.names[i], "--data-dir", os.path.join(self.root, self.names[i]),
               "--listen-client-urls", self.endpoints[i], "--advertise-client-urls", self.endpoints[i],
               "--listen-peer-urls", f"{self.scheme}://127.0.0.1:{self.peer_ports[i]}",
               "--initial-advertise-peer-urls", f"{self.scheme}://127.0.0.1:{self.peer_ports[i]}",
               "--initial-cluster", cluster, "--initial-cluster-state", "new",
               "--initial-cluster-token", self.token,
               "--heartbeat-interval", str(self.heartbeat_ms), "--election-timeout", str(self.election_ms),
               "--logger", "zap", "--log-outputs", os.path.join(self.root, f"{self.names[i]}.log")]
        if self.tls:
            f, n = self.files, self.names[i]
            cmd += ["--cert-file", f[n], "--key-file", f[n + "-key"], "--trusted-ca-file", f["ca"], "--client-cert-auth",
                    "--peer-cert-file", f[n], "--peer-key-file", f[n + "-key"], "--peer-trusted-ca-file", f["ca"],
                    "--peer-client-cert-auth"]
        return cmd

    def ha_keys(self, user: str = "hpcfabric", cert: str | None = None) -> str:
        """``[ha] etcd_*`` lines for a controller config: CA, a client certificate (``cert``: the files of that
        name, default the user's), the user and a file with its password."""
        if not self.tls:
            return ""
        cert = cert or user
        lines = f"etcd_ca = {self.files['ca']}\netcd_cert = {self.files[cert]}\netcd_key = {self.files[cert + '-key']}\n"
        if self.auth:
            pw = os.path.join(self.root, f"{user}.password")
            with open(pw, "w", encoding="utf-8") as fh:
                fh.write(self.passwords.get(user, "wrong-password") + "\n")
            os.chmod(pw, 0o600)
            lines += f"etcd_user = {user}\netcd_password_file = {pw}\n"
        return lines

    # ------------------------------------------------------------ HTTP (TLS, token)
    def request(self, i: int, path: str, body: dict, timeout: float = 1.0, token: bool = True) -> dict:
        """POST ``body`` to member ``i``'s ``/v3/<path>`` as root (client certificate, token once auth is on)."""
        ctx = None
        if self.tls:
            ctx = ssl.create_default_context(cafile=self.files["ca"])
            ctx.load_cert_chain(self.files["root"], self.files["root-key"])
        headers = {}
        if token and self.auth_on:
            if i not in self.tokens:
                self.tokens[i] = self.request(i, "auth/authenticate", {"name": "root", "password": self.passwords["root"]},
                                              timeout, token=False)["token"]
            headers["Authorization"] = self.tokens[i]
        req = urllib.request.Request(f"{self.endpoints[i]}/v3/{path}", data=json.dumps(body).encode(), method="POST",
                                     headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=ctx) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as err:
            if token and self.tokens.pop(i, None) is not None:  # a restarted member forgot the token: log in again
                return self.request(i, path, body, timeout)
            raise OSError(f"{path}: HTTP {err.code}: {err.read()[:200]!r}") from None

    def enable_auth(self) -> None:
        """Users root, hpcfabric (read-write on auth_prefix), reader (read-only there); then auth on."""
        b64 = lambda t: base64.b64encode(t.encode()).decode()  # noqa: E731
        end = self.auth_prefix[:-1] + chr(ord(self.auth_prefix[-1]) + 1)
        i = self.leader() or 0
        for user, role, perm in (("root", "root", None), ("hpcfabric", "hpcfabric", "READWRITE"),
                                 ("reader", "reader", "READ")):
            self.request(i, "auth/user/add", {"name": user, "password": self.passwords[user]})
            self.request(i, "auth/role/add", {"name": role})
            if perm:
                self.request(i, "auth/role/grant", {"name": role, "perm": {"permType": perm, "key": b64(self.auth_prefix),
                                                                           "range_end": b64(end)}})
            self.request(i, "auth/user/grant", {"user": user, "role": role})
        self.request(i, "auth/enable", {})
        self.auth_on = True

    # ------------------------------------------------------------ processes
    def start_member(self, i: int) -> None:
        assert self.procs[i] is None or self.procs[i].poll() is not None, f"member {i} is running"
        self.procs[i] = subprocess.Popen(self.command(i), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL, start_new_session=True)

    def start(self, timeout: float = 30.0) -> "EtcdCluster":
        for i in range(self.size):
            self.start_member(i)
        self.wait_healthy(timeout)
        if self.auth and not self.auth_on:
            self.enable_auth()
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
        try:
            return self.start()
        except BaseException:
            self.close()  # no member left running when the start fails
            raise

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------ state
    def running(self) -> list[int]:
        return [i for i, p in enumerate(self.procs) if p is not None and p.poll() is None]

    def status(self, i: int, timeout: float = 1.0) -> dict | None:
        try:
            return self.request(i, "maintenance/status", {}, timeout)
        except (OSError, ValueError, KeyError):
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
        try:
            self.request(i, "kv/range", {"key": "AA=="})
            return True
        except (OSError, ValueError, KeyError):
            return False

