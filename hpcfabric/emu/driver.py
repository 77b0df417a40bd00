"""Driving a bench run: controller subprocesses (one per partition) and emulator processes, their status.

:class:`Cluster` writes one controller config per partition (``[ha] partitions``
and ``partition``: derived partitions, its own listen port and status file, the failures board
``[failover] failures_dir`` in the work directory; with ``artifact``, ``[hpcfabric] compiled`` and one ``hpcfabric compile`` first), starts
``hpcfabric controller`` for each and ``python -m hpcfabric.emu`` processes
that connect every switch to its partition's controller, and reads both
sides: the controllers' status files, the emulators' JSON lines (stats,
PAUSE reaction events). Everything it starts is stopped by PID in
:meth:`Cluster.stop` (also called on SIGINT/SIGTERM by the benches).
"""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_handed = 0


def free_range(count: int, kind: int = socket.SOCK_STREAM, low: int = 10000, high: int = 32000) -> int:
    """A base port such that ``base .. base+count-1`` are free (``kind``: TCP or UDP) on 127.0.0.1, below
    the kernel's ephemeral range (32768-60999) so that no outgoing connection takes one meanwhile."""
    global _handed
    start = low + (os.getpid() * 7919 + _handed) % max(1, high - low - count)
    _handed += count  # two clusters of one process never get the same range
    for k in range(0, high - low, max(count, 1)):
        base = low + (start - low + k) % max(1, high - low - count)
        held = []
        try:
            for port in range(base, base + count):
                s = socket.socket(socket.AF_INET, kind)
                held.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in held:
                s.close()
    raise RuntimeError(f"no {count} consecutive free ports in {low}..{high}")


def listening(port: int) -> bool:
    """Is a TCP socket LISTENing on ``port``? (/proc/net/tcp: no connection is made)"""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as fh:
                next(fh)
                if any(f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port for f in map(str.split, fh)):
                    return True
        except (OSError, StopIteration):
            continue
    return False


def stop_process(proc: subprocess.Popen, grace: float, sig: int = signal.SIGTERM) -> int | None:
    """Send ``sig`` to ``proc`` (by its PID) unless it has exited, SIGKILL after ``grace`` s; its exit status."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    return proc.returncode


def partition(fabric: Any, parts: int) -> list[list[str]]:
    """The switches of each of ``parts`` partitions as the controllers derive them (``[ha] partitions``:
    :func:`hpcfabric.topology.partition.partition_fabric`, contiguous group ranges)."""
    from hpcfabric.topology.partition import partition_fabric

    return [list(p.switches) for p in partition_fabric(fabric, parts)]


def proc_stats(pid: int) -> dict[str, float]:
    """CPU seconds (user+system) of a process (all its threads) and of its main thread (``main_cpu_s``: a
    controller's hub), RSS / peak RSS (MiB), from /proc."""
    def cpu_of(stat: str) -> float:
        fields = Path(stat).read_text(encoding="ascii").rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    try:
        cpu, main = cpu_of(f"/proc/{pid}/stat"), cpu_of(f"/proc/{pid}/task/{pid}/stat")
        rss = hwm = 0.0
        with open(f"/proc/{pid}/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) / 1024
                elif line.startswith("VmHWM:"):
                    hwm = int(line.split()[1]) / 1024
        return {"cpu_s": cpu, "main_cpu_s": main, "rss_mb": rss, "peak_rss_mb": hwm}
    except (OSError, IndexError, ValueError):
        return {"cpu_s": 0.0, "main_cpu_s": 0.0, "rss_mb": 0.0, "peak_rss_mb": 0.0}


class Emulator:
    def __init__(self, cmd: list[str], log: Path) -> None:
        self.log = open(log, "w", encoding="utf-8")  # noqa: SIM115 - closed in stop()
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True,
                                  bufsize=1, cwd=ROOT)
        self.stats: "queue.Queue[dict]" = queue.Queue()
        self.events: "queue.Queue[dict]" = queue.Queue()
        self.start_cpu_s = 0.0  # CPU seconds until it started connecting (its "started" event)
        threading.Thread(target=self.read, daemon=True).start()

    def read(self) -> None:
        assert self.p.stdout is not None
        for line in self.p.stdout:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            (self.stats if ev.get("ev") in ("stats", "dump") else self.events).put(ev)

    def send(self, **cmd: Any) -> None:
        assert self.p.stdin is not None
        self.p.stdin.write(json.dumps(cmd) + "\n")
        self.p.stdin.flush()

    def ask(self, timeout: float = 60.0, **cmd: Any) -> dict:
        self.send(**cmd)
        return self.stats.get(timeout=timeout)


class Cluster:
    """Partitioned controllers and emulator processes for one fabric (see the module docstring)."""

    def __init__(self, topology: str, workdir: Path, *, controllers: int = 1, emulators: int = 1,
                 extra: str = "", lldp_interval: float = 1.0, mgmt: bool = False, log_level: str = "WARNING",
                 artifact: bool | str = False, tls: bool | dict[str, Any] = False, openflow: str = "",
                 connects: int = 0) -> None:
        from hpcfabric.topology.loader import load_topology

        self.topology = str(Path(topology).resolve())
        self.fabric = load_topology(self.topology)
        self.workdir = Path(workdir)
        self.names = [s.name for s in self.fabric.switches]
        self.parts = partition(self.fabric, controllers) if controllers > 1 else [self.names]
        #: the compiled artifact the controllers load (a given directory, or compile() writes one here)
        self.artifact = Path(artifact) if isinstance(artifact, str) and artifact else \
            self.workdir / "compiled" if artifact else None
        self.n_emu = emulators
        self.connects = connects  # connects in flight per emulator process (0: the emulator's default)
        self.extra, self.lldp_interval, self.log_level = extra, lldp_interval, log_level
        self.ports = [free_port() for _ in self.parts]
        self.udp_base = free_range(emulators, socket.SOCK_DGRAM)
        self.mgmt_base = free_range(len(self.names)) if mgmt else 0
        self.ctl: list[subprocess.Popen | None] = [None] * len(self.parts)
        self.emus: list[Emulator] = []
        self.owner = {n: i for i, part in enumerate(self.parts) for n in part}
        self.emu_of = {n: i * emulators // len(self.names) for i, n in enumerate(self.names)}
        #: ``tls``: True -- a CA, the controller's certificate and one per switch made in ``workdir/pki``; or the
        #: controller's files {"ca", "cert", "key"} (and "names": ``tls_names``) made elsewhere (ovs-pki)
        self.pki: dict[str, Any] | None = dict(tls) if isinstance(tls, dict) else self.certificates() if tls else None
        self.openflow = openflow  # more [openflow] lines (e.g. echo_timeout)

    def certificates(self) -> dict[str, Path]:
        """A CA, the controllers' certificate and one per switch (commonName = switch name), in workdir/pki."""
        from hpcfabric.emu.pki import Authority

        ca = Authority(self.workdir / "pki")
        cert, key = ca.issue("controller", ips=("127.0.0.1",))
        switches = self.workdir / "pki" / "switches"
        for n in self.names:
            ca.issue(n, directory=switches)
        return {"ca": ca.ca, "cert": cert, "key": key, "switches": switches}
    def status_path(self, i: int) -> Path:
        return self.workdir / f"status{i}.json"

    def config_text(self, i: int) -> str:
        ha = (f"[failover]\nfailures_dir = {self.workdir / 'failures'}\n"  # the partitions' failures board
              f"[ha]\npartitions = {len(self.parts)}\npartition = {i}\n") if len(self.parts) > 1 else ""
        compiled = f"compiled = {self.artifact}\n" if self.artifact else ""
        return (f"[hpcfabric]\ntopology = {self.topology}\nrouting = conditional\nstatus_file = {self.status_path(i)}\n"
                f"{compiled}"
                f"log_level = {self.log_level}\nlldp_interval = {self.lldp_interval}\n{self.extra}\n"
                f"[openflow]\nlisten_host = 127.0.0.1\nlisten_port = {self.ports[i]}\n{self.tls_keys()}"
                f"[guards]\nsource_check = on\npunt_meters = on\n{ha}")

    def tls_keys(self) -> str:
        if self.pki is None:
            return self.openflow
        names = f"tls_names = {self.pki['names']}\n" if self.pki.get("names") else ""
        return (f"tls = on\ntls_key = {self.pki['key']}\ntls_cert = {self.pki['cert']}\ntls_ca = {self.pki['ca']}\n"
                f"{names}{self.openflow}")

    def compile(self) -> dict[str, Any]:
        """``hpcfabric compile`` once for every partition (with ``artifact``): seconds, CPU, peak RSS."""
        path = self.workdir / "compile.conf"
        path.write_text(self.config_text(0))
        import resource

        t0, r0 = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
        with open(self.workdir / "compile.log", "w", encoding="utf-8") as log:
            p = subprocess.Popen([sys.executable, "-m", "hpcfabric.cli", "compile", "--config", str(path)],
                                 stdout=subprocess.PIPE, stderr=log, text=True, cwd=ROOT)
            out, _ = p.communicate()
        if p.returncode:
            raise RuntimeError(f"hpcfabric compile exited with {p.returncode}; see {self.workdir / 'compile.log'}")
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime
        return {"wall_s": round(time.monotonic() - t0, 2), "cpu_s": round(cpu, 1),
                "peak_rss_mb": round(r1.ru_maxrss / 1024, 1), **json.loads(out)}

    def start_controller(self, i: int, wait: float = 900.0) -> float:
        """Start controller ``i``; seconds until it listens (load and compile included)."""
        self.spawn_controller(i)
        return self.wait_listening(i, wait)

    def spawn_controller(self, i: int) -> None:
        path = self.workdir / f"ctl{i}.conf"
        path.write_text(self.config_text(i))
        try:
            self.status_path(i).unlink()
        except FileNotFoundError:
            pass
        log = open(self.workdir / f"ctl{i}.log", "a", encoding="utf-8")  # noqa: SIM115
        self.ctl[i] = subprocess.Popen([sys.executable, "-m", "hpcfabric.cli", "controller", "--config", str(path)],
                                       stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        self.spawned = getattr(self, "spawned", {})
        self.spawned[i] = time.monotonic()

    def wait_listening(self, i: int, wait: float = 900.0) -> float:
        t0 = self.spawned[i]
        log = self.workdir / f"ctl{i}.log"
        while time.monotonic() - t0 < wait:
            if self.ctl[i].poll() is not None:
                raise RuntimeError(f"controller {i} exited with {self.ctl[i].returncode}; see {log}")
            if listening(self.ports[i]):  # not a connection: a TLS listener would count it as refused
                return time.monotonic() - t0
            time.sleep(0.1)
        raise TimeoutError(f"controller {i} not listening after {wait} s")

    def start_controllers(self) -> list[float]:
        """Start every partition's controller at once; seconds until each listens."""
        for i in range(len(self.parts)):
            self.spawn_controller(i)
        return [self.wait_listening(i) for i in range(len(self.parts))]

    def start_emulators(self) -> None:
        for k in range(self.n_emu):
            self.emus.append(self.spawn_emulator(f"emu{k}", index=k, procs=self.n_emu, udp_base=self.udp_base))
        for e in self.emus:
            ev = e.events.get(timeout=600)
            if ev.get("ev") != "started":
                raise RuntimeError(f"emulator did not start: {ev}")
            e.start_cpu_s = ev.get("cpu_s", 0.0)

    def spawn_emulator(self, log: str, *args: str, index: int = 0, procs: int = 1, udp_base: int = 0,
                       tls: bool = True) -> Emulator:
        """An emulator process for slice ``index`` of ``procs`` connecting to the partitions' controllers (with
        the cluster's own certificates and ``tls``: each switch's); ``args``: more options, e.g. another
        certificate for an impostor (``--tls-cert F --tls-key K``) instead of the switches' own. Not in
        :attr:`emus`: the caller stops it (``send(op="quit")``) unless it adds it there."""
        cmap = self.workdir / "connect.json"
        if not cmap.exists():
            cmap.write_text(json.dumps({n: self.ports[self.owner[n]] for n in self.names}))
        cmd = [sys.executable, "-m", "hpcfabric.emu", "--topology", self.topology, "--index", str(index), "--procs",
               str(procs), "--connect", f"127.0.0.1:{self.ports[0]}", "--connect-map", str(cmap),
               "--udp-base", str(udp_base or free_range(procs, socket.SOCK_DGRAM))]
        if self.mgmt_base:
            cmd += ["--mgmt-base", str(self.mgmt_base)]
        if self.connects:
            cmd += ["--connects", str(self.connects)]
        if tls and self.pki is not None and "switches" in self.pki:
            cmd += [] if "--tls-ca" in args else ["--tls-ca", str(self.pki["ca"])]
            cmd += [] if "--tls-cert" in args else ["--tls-dir", str(self.pki["switches"])]
        return Emulator(cmd + list(args), self.workdir / f"{log}.log")

    def status(self, i: int) -> dict[str, Any]:
        """Controller ``i``'s status file, parsed again only when it was rewritten (benches poll it every few ms
        while they wait: at Table III it is ~0.8 MB, ~40 ms of CPU to parse, taken from the controller's cores)."""
        path = self.status_path(i)
        try:
            st = path.stat()
            key = (st.st_ino, st.st_mtime_ns, st.st_size)
            cache = self.__dict__.setdefault("_status_cache", {})
            got = cache.get(i)
            if got is not None and got[0] == key:
                return got[1]
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return {}
        cache[i] = (key, data)
        return data

    def wait(self, cond: str = "confirmed", timeout: float = 600.0, since: float = 0.0) -> float:
        """Seconds until every controller reports all its switches confirmed (``cond='links'``: all links seen)."""
        got, want = ("switches_confirmed", "switches_expected") if cond == "confirmed" else \
            ("links_discovered", "links_expected")
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            statuses = [self.status(i) for i in range(len(self.parts))]  # each written at or after ``since``
            if all(s and s.get("time", 0) >= since and s.get(got) == s.get(want) for s in statuses):
                return time.monotonic() - t0
            time.sleep(0.05)
        raise TimeoutError(f"not all {cond} after {timeout} s")

    def emu_stats(self) -> list[dict]:
        return [e.ask(op="stats") for e in self.emus]

    def controller_stats(self) -> list[dict[str, float]]:
        return [proc_stats(p.pid) if p is not None else {} for p in self.ctl]

    def emulator_of(self, switch: str) -> Emulator:
        return self.emus[self.emu_of[switch]]

    def stop_controller(self, i: int) -> None:
        if self.ctl[i] is not None:
            stop_process(self.ctl[i], 20)
        self.ctl[i] = None

    def stop(self) -> None:
        for e in self.emus:
            try:
                e.send(op="quit")
            except (OSError, ValueError):
                pass
        for e in self.emus:
            try:
                e.p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                e.p.kill()
            e.log.close()
        self.emus.clear()
        for i in range(len(self.ctl)):
            self.stop_controller(i)
