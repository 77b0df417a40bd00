"""The etcd HA backend against a real 3-member etcd cluster (tests/etcd_cluster.py): no mocks.

Instances are :class:`hpcfabric.controller.etcdha.EtcdHa` objects ticking in threads (as the controller's
HA agent does every ttl/5) and, for kill -9, a real ``hpcfabric controller`` process. A sampler checks
every 10 ms that no partition has two instances acting as master (``master_of``, the check every write
to a switch passes). Mininet scenarios with the switches' roles: mininet/run_reliability.py.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
from etcd_cluster import etcd_cluster  # noqa: F401  (the fixture)

from hpcfabric.config import load_config
from hpcfabric.controller.etcdha import EtcdHa
from hpcfabric.controller.etcdstore import EtcdStore

ROOT = Path(__file__).resolve().parent.parent
TOPO = ROOT / "topologies" / "dragonfly-a4-p2-h2.yaml"


def config(tmp_path, cluster, name="a", partitions=3, endpoints=None, prefix=None, ttl=2):
    path = tmp_path / f"{name}.conf"
    path.write_text(f"[hpcfabric]\ntopology = {TOPO}\nreload_poll = 0\nstatus_file = {tmp_path / (name + '.json')}\n"
                    f"[openflow]\nlisten_port = {free_port()}\n"
                    f"[ha]\nbackend = etcd\nendpoints = {','.join(endpoints or cluster.endpoints)}\n"
                    f"partitions = {partitions}\ninstance = {name}\nttl = {ttl}\nprefix = {prefix or '/t'}\n")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def instance(tmp_path, cluster, name, prefix, **kw):
    return EtcdHa(load_config(config(tmp_path, cluster, name, prefix=prefix, **kw), compile=False))


class Runner(threading.Thread):
    """Ticks ``ha`` every ttl/5 like the controller's HA agent; records role changes with their time."""

    def __init__(self, ha: EtcdHa) -> None:
        super().__init__(daemon=True)
        self.ha = ha
        self.halt = threading.Event()
        self.changes: list[tuple[float, dict]] = []

    def run(self) -> None:
        while not self.halt.is_set():
            ch = self.ha.tick()
            if ch:
                self.changes.append((time.monotonic(), ch))
            self.halt.wait(self.ha.ttl / 5)

    def stop(self) -> None:
        self.halt.set()
        self.join(10)


class Sampler(threading.Thread):
    """Every 10 ms: which instances act as master of each partition; counts samples with two or more."""

    def __init__(self, instances: list[EtcdHa]) -> None:
        super().__init__(daemon=True)
        self.instances = instances
        self.halt = threading.Event()
        self.double = 0
        self.samples = 0
        self.ownerless: dict[str, int] = {}
        self.first = {p.name: next(iter(p.switches)) for p in instances[0].parts}

    def run(self) -> None:
        while not self.halt.is_set():
            for part, sw in self.first.items():
                masters = [h.instance for h in self.instances if h.master_of(sw)]
                self.double += len(masters) > 1
                if not masters:
                    self.ownerless[part] = self.ownerless.get(part, 0) + 1
            self.samples += 1
            time.sleep(0.01)

    def stop(self) -> None:
        self.halt.set()
        self.join(10)


def wait(pred, timeout: float, step: float = 0.02) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if pred():
            return time.monotonic() - t0
        time.sleep(step)
    raise AssertionError(f"condition not met within {timeout}s")


def owners(instances) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for h in instances:
        for p in h.parts:
            if h.master_of(p.switches[0]):
                out.setdefault(p.name, []).append(h.instance)
    return out


def gens(cluster, prefix: str) -> dict[str, int]:
    kvs, _ = EtcdStore(cluster.endpoints, 2.0).range_prefix(prefix)
    return {k.rsplit("/", 1)[1]: int(v["value"]) for k, v in kvs.items() if "/gen/" in k}


def test_partitions_balanced_and_claims_are_compare_and_swap(tmp_path, etcd_cluster):
    prefix = f"/t-{uuid.uuid4().hex[:6]}"
    a = instance(tmp_path, etcd_cluster, "a", prefix)
    b = instance(tmp_path, etcd_cluster, "b", prefix)
    assert [p.label for p in a.parts] == ["groups 0..2", "groups 3..5", "groups 6..8"]
    assert a.tick() == {"p0": "master", "p1": "master", "p2": "master"}  # alone: a takes all
    for _ in range(4):  # b joins: a hands p1 (b's balanced share) over, b claims it with generation 2
        b.tick()
        a.tick()
    assert owners([a, b]) == {"p0": ["a"], "p1": ["b"], "p2": ["a"]}
    assert gens(etcd_cluster, prefix + "/") == {"p0": 1, "p1": 2, "p2": 1}
    assert b.generation_of("g3s0") == 2 and a.generation_of("g3s0") == 2 and a.generation_of("g0s0") == 1
    st = b.as_dict()
    assert st["members"] == ["a", "b"] and st["partitions"][1]["standbys"] == ["a"]
    # a race for one free partition: c and d claim at the same moment, etcd lets exactly one win
    prefix2 = f"/t-{uuid.uuid4().hex[:6]}"
    c = instance(tmp_path, etcd_cluster, "c", prefix2, partitions=1)
    d = instance(tmp_path, etcd_cluster, "d", prefix2, partitions=1)
    c.free_since["p0"] = d.free_since["p0"] = float("-inf")  # both think it is free for long: both claim
    go = threading.Barrier(2)
    res = {}

    def claim(h):
        go.wait()
        res[h.instance] = h.tick()

    ts = [threading.Thread(target=claim, args=(h,)) for h in (c, d)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert sorted(bool(r) for r in res.values()) == [False, True]
    assert gens(etcd_cluster, prefix2 + "/") == {"p0": 1}
    for h in (a, b, c, d):
        h.release()


def test_kill_9_of_the_master_process_standby_takes_over(tmp_path, etcd_cluster):
    prefix = f"/t-{uuid.uuid4().hex[:6]}"
    path = config(tmp_path, etcd_cluster, "a", prefix=prefix, partitions=1)
    exe = Path(sys.executable).with_name("hpcfabric")
    proc = subprocess.Popen([str(exe), "controller", "--config", str(path)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    run = None
    try:
        status = tmp_path / "a.json"

        def a_master():
            try:
                return json.loads(status.read_text())["ha"]["partitions"][0]["master"] == "a"
            except (OSError, ValueError, KeyError, IndexError):
                return False

        wait(a_master, 60)
        b = instance(tmp_path, etcd_cluster, "b", prefix, partitions=1)
        run = Runner(b)
        run.start()
        time.sleep(1.5)
        assert not b.active and b.view["p0"]["master"] == "a"  # a renews; p0's balanced owner is a
        assert b.members == ["a", "b"]
        t_kill = time.monotonic()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        took = wait(lambda: bool(b.active), 15)
        print(f"\ntakeover after kill -9: {took:.2f} s (granted ttl {b.granted} s)")
        assert run.changes[-1][1] == {"p0": "master"} and run.changes[-1][0] >= t_kill
        assert took <= b.granted + 1.5  # the lease TTL, etcd's expiry sweep (0.5 s), one round
        assert gens(etcd_cluster, prefix + "/") == {"p0": 2} and b.generation_of("g0s0") == 2
        assert b.members == ["b"]  # a's member key went with its lease
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
        if run is not None:
            run.stop()
            run.ha.release()
