"""The etcd HA backend against a real 3-member etcd cluster (the ``etcd_cluster`` fixture of conftest.py): no mocks.

Instances are :class:`hpcfabric.controller.etcdha.EtcdHa` objects ticking in threads (as the controller's
HA agent does every ttl/5) and, for kill -9, a real ``hpcfabric controller`` process. A sampler checks
every 10 ms that no partition has two instances acting as master (``master_of``, the check every write
to a switch passes). Mininet scenarios with the switches' roles: mininet/run_reliability.py.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from channel_probe import crash

from hpcfabric.config import load_config
from hpcfabric.controller.etcdha import EtcdHa
from hpcfabric.controller.etcdstore import EtcdStore
from hpcfabric.controller.snapshot import ha_partitions

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


def balanced(instances) -> bool:
    """Each partition has exactly one master among ``instances`` and their loads differ by at most one."""
    own = owners(instances)
    loads = [sum(1 for v in own.values() if h.instance in v) for h in instances]
    return (len(own) == len(instances[0].parts) and all(len(v) == 1 for v in own.values())
            and max(loads) - min(loads) <= 1)


def gens(cluster, prefix: str) -> dict[str, int]:
    kvs, _ = EtcdStore(cluster.endpoints, 2.0).range_prefix(prefix)
    return {k.rsplit("/", 1)[1]: int(v["value"]) for k, v in kvs.items() if "/gen/" in k}


def test_partitions_balanced_and_claims_are_compare_and_swap(tmp_path, etcd_cluster):
    prefix = f"/t-{uuid.uuid4().hex[:6]}"
    a = instance(tmp_path, etcd_cluster, "a", prefix)
    b = instance(tmp_path, etcd_cluster, "b", prefix)
    assert [p.label for p in a.parts] == ["groups 0..2", "groups 3..5", "groups 6..8"]
    assert a.tick() == {"p0": "master", "p1": "master", "p2": "master"}  # alone: a takes all
    for _ in range(4):  # b joins: a keeps two, hands p2 (b's balanced share) over, b claims it with generation 2
        b.tick()
        a.tick()
    assert owners([a, b]) == {"p0": ["a"], "p1": ["a"], "p2": ["b"]}
    # the metric hpcfabric_ha_partition_master: each instance exports every partition, 1 for its own
    assert dict(ha_partitions(a, None)) == {"p0": True, "p1": True, "p2": False}
    assert dict(ha_partitions(b, None)) == {"p0": False, "p1": False, "p2": True}
    assert gens(etcd_cluster, prefix + "/") == {"p0": 1, "p1": 1, "p2": 2}
    assert b.generation_of("g6s0") == 2 and a.generation_of("g6s0") == 2 and a.generation_of("g0s0") == 1
    st = b.as_dict()
    assert st["members"] == ["a", "b"] and st["partitions"][2]["standbys"] == ["a"]
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
    assert sorted(bool(r) for r in res.values()) == [False, True], (res, c.as_dict(), d.as_dict())
    assert c.claims + d.claims == 1
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
        crash(proc)
        took = wait(lambda: bool(b.active), 15)
        print(f"\ntakeover after kill -9: {took:.2f} s (granted ttl {b.granted} s)")
        assert run.changes[-1][1] == {"p0": "master"} and run.changes[-1][0] >= t_kill
        assert took <= b.granted + 1.5  # the lease TTL, etcd's expiry sweep (0.5 s), one round
        assert gens(etcd_cluster, prefix + "/") == {"p0": 2} and b.generation_of("g0s0") == 2
        assert b.members == ["b"]  # a's member key went with its lease
    finally:
        crash(proc)
        if run is not None:
            run.stop()
            run.ha.release()


def test_etcd_leader_killed_roles_kept_never_two_masters(tmp_path, etcd_cluster):
    prefix = f"/t-{uuid.uuid4().hex[:6]}"
    # a lease that outlives the election with room (2.5 s seen on a loaded 2-core machine; ttl 2 leaves ~1.4 s)
    a = instance(tmp_path, etcd_cluster, "a", prefix, ttl=5)
    b = instance(tmp_path, etcd_cluster, "b", prefix, ttl=5)
    runs = [Runner(a), Runner(b)]
    [r.start() for r in runs]
    sampler = Sampler([a, b])
    try:
        wait(lambda: balanced([a, b]), 15)
        sampler.start()
        before = {p: owners([a, b])[p] for p in ("p0", "p1", "p2")}
        changes = len(runs[0].changes) + len(runs[1].changes)
        leader = etcd_cluster.leader()
        etcd_cluster.kill_member(leader)
        t0 = time.monotonic()
        elected = wait(lambda: etcd_cluster.leader() not in (None, leader), 15)
        time.sleep(3 * a.granted)  # several lease periods on the new leader
        role_changes = len(runs[0].changes) + len(runs[1].changes) - changes
        print(f"\netcd leader m{leader} killed: new leader after {elected:.2f} s; role changes {role_changes}; "
              f"errors a={a.errors} b={b.errors}; ownerless samples {sampler.ownerless}")
        assert sampler.double == 0
        after = owners([a, b])
        assert all(len(after.get(p, [])) == 1 for p in ("p0", "p1", "p2")), after
        assert time.monotonic() - t0 > 2 * a.granted
        # the new leader extends every lease (docs/ha.md): each partition keeps its master, no role changes
        assert after == before and role_changes == 0, (before, after, runs[0].changes[-3:], runs[1].changes[-3:])
    finally:
        sampler.stop()
        [r.stop() for r in runs]
        a.release()
        b.release()
        etcd_cluster.start_member(leader)
        etcd_cluster.wait_healthy()


def test_all_etcd_stopped_master_stops_at_lease_expiry_and_resumes(tmp_path, etcd_cluster):
    prefix = f"/t-{uuid.uuid4().hex[:6]}"
    a = instance(tmp_path, etcd_cluster, "a", prefix, partitions=1)
    run = Runner(a)
    run.start()
    try:
        wait(lambda: a.master_of("g0s0"), 10)
        gen = a.generation_of("g0s0")
        etcd_cluster.kill_all()
        t_down = time.monotonic()
        last_ok = a.lease_ok
        late = []  # seconds since its last renewal of any "master" answer read after the lease had run out

        def stopped() -> bool:
            t = time.monotonic()  # before the answer: a late reader can only make the check looser, never fail it
            if a.master_of("g0s0"):
                if t - a.lease_ok >= a.granted:
                    late.append(round(t - a.lease_ok, 3))
                return False
            return True

        wait(stopped, 3 * a.granted)
        t_stop = time.monotonic()
        # it stopped acting once its lease (counted from the start of its last renewal) had run out,
        # never later -- etcd itself expires the lease only after that; exact, whatever the machine's load
        assert not late, late
        assert t_stop - last_ok >= a.granted - 0.4
        assert a.errors > 0 and "unreachable" in a.last_error
        time.sleep(1.0)
        assert not a.master and run.changes[-1][1] == {"p0": "slave"}
        for i in range(etcd_cluster.size):
            etcd_cluster.start_member(i)
        t_up = time.monotonic()
        back = wait(lambda: a.master_of("g0s0"), 30)
        print(f"\nall etcd down: master stopped {t_stop - last_ok:.2f} s after its last renewal "
              f"(ttl {a.granted} s); etcd restarted, master again after {back:.2f} s, "
              f"generation {gen} -> {a.generation_of('g0s0')}; etcd down {t_up - t_down:.1f} s")
        assert a.generation_of("g0s0") >= gen
    finally:
        run.stop()
        a.release()
        for i in range(etcd_cluster.size):
            if i not in etcd_cluster.running():
                etcd_cluster.start_member(i)
        etcd_cluster.wait_healthy()


class Blackhole(threading.Thread):
    """A TCP relay to one etcd endpoint that can be blackholed: connections stay open, nothing passes."""

    def __init__(self, target: str) -> None:
        super().__init__(daemon=True)
        host, _, port = target.rpartition("//")[2].rpartition(":")
        self.target = (host, int(port))
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.endpoint = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.dropping = threading.Event()
        self.closed = False

    def run(self) -> None:
        while not self.closed:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            try:
                u = socket.create_connection(self.target, timeout=2)
            except OSError:
                c.close()
                continue
            for src, dst in ((c, u), (u, c)):
                threading.Thread(target=self.pipe, args=(src, dst), daemon=True).start()

    def pipe(self, src, dst) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if not self.dropping.is_set():
                    dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.closed = True
        self.sock.close()


def test_blackholed_instance_never_two_masters(tmp_path, etcd_cluster):
    """One instance's only etcd endpoint is blackholed: it stops acting before the other takes over."""
    prefix = f"/t-{uuid.uuid4().hex[:6]}"
    hole = Blackhole(etcd_cluster.endpoints[0])
    hole.start()
    a = instance(tmp_path, etcd_cluster, "a", prefix, endpoints=[hole.endpoint])
    b = instance(tmp_path, etcd_cluster, "b", prefix)
    runs = [Runner(a), Runner(b)]
    sampler = Sampler([a, b])
    try:
        [r.start() for r in runs]
        wait(lambda: balanced([a, b]), 15)
        sampler.start()
        pa = sorted(a.active)[0]  # a partition a masters
        g0 = gens(etcd_cluster, prefix + "/")[pa]
        hole.dropping.set()
        t0 = time.monotonic()
        took = wait(lambda: sorted(b.active) == ["p0", "p1", "p2"], 20)
        print(f"\na blackholed: b master of a's partitions after {took:.2f} s; a stopped acting "
              f"{[t - t0 for t, ch in runs[0].changes if 'slave' in ch.values()][-1:]} s after the blackhole")
        assert not a.active and not a.master
        assert sampler.double == 0
        assert gens(etcd_cluster, prefix + "/")[pa] == g0 + 1
        hole.dropping.clear()  # healed: a renews nothing (its lease expired), joins again, gets its share back
        wait(lambda: balanced([a, b]), 30)
        assert sampler.double == 0 and len(a.active) >= 1
    finally:
        sampler.stop()
        [r.stop() for r in runs]
        hole.close()
        a.release()
        b.release()


def cli(*args: str) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("hpcfabric")
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=60)


def test_status_command_shows_master_standbys_generation_lease_age(tmp_path, etcd_cluster):
    prefix = f"/t-{uuid.uuid4().hex[:6]}"
    a = instance(tmp_path, etcd_cluster, "a", prefix)
    a.tick()
    b = instance(tmp_path, etcd_cluster, "b", prefix)
    runs = [Runner(a), Runner(b)]  # renewing, as the controllers do
    [r.start() for r in runs]
    try:
        wait(lambda: owners([a, b]) == {"p0": ["a"], "p1": ["a"], "p2": ["b"]}, 15)
        r = cli("status", "--config", str(config(tmp_path, etcd_cluster, "c", prefix=prefix)), "--json")
        assert r.returncode == 0, r.stderr
        view = json.loads(r.stdout)
        assert view["members"] == ["a", "b"]
        rows = {p["partition"]: p for p in view["partitions"]}
        assert [rows[p]["master"] for p in ("p0", "p1", "p2")] == ["a", "a", "b"]
        assert rows["p2"]["standbys"] == ["a"] and rows["p2"]["generation"] == 2 and rows["p0"]["generation"] == 1
        assert all(0 <= rows[p]["lease_age"] <= 2 for p in rows) and rows["p0"]["switches"] == 12, view
        text = cli("status", "--config", str(config(tmp_path, etcd_cluster, "c", prefix=prefix))).stdout
        assert "p1         groups 3..5" in text and "live instances: a, b" in text, text
    finally:
        [r.stop() for r in runs]
        a.release()
        b.release()
    # nobody holds anything after a clean stop (the leases were revoked)
    view = json.loads(cli("status", "--config", str(config(tmp_path, etcd_cluster, "c", prefix=prefix)), "--json").stdout)
    assert view["members"] == [] and [p["master"] for p in view["partitions"]] == [None] * 3


def test_config_errors_exit_2_with_file_and_field(tmp_path):
    pytest.importorskip("etcd3gw")  # without it, backend = etcd is refused first (ha.backend)
    base = f"[hpcfabric]\ntopology = {TOPO}\n[ha]\n"
    cases = {"backend = zookeeper\n": "ha.backend",
             "backend = etcd\n": "ha.endpoints",
             "backend = etcd\nendpoints = 127.0.0.1:2379\n": "ha.endpoints",
             "backend = etcd\nendpoints = http://127.0.0.1:2379\nttl = 0\n": "ha.ttl",
             "backend = etcd\nendpoints = http://127.0.0.1:2379\npartitions = 37\n": "ha.partitions",
             "backend = etcd\nendpoints = http://127.0.0.1:2379\nrole = slave\n": "ha.role",
             "endpoints = http://127.0.0.1:2379\n": "ha.endpoints"}
    for i, (text, field) in enumerate(cases.items()):
        path = tmp_path / f"bad{i}.conf"
        path.write_text(base + text)
        r = cli("status", "--config", str(path))
        assert r.returncode == 2 and f"{path}: {field}:" in r.stderr and "Traceback" not in r.stderr, (text, r.stderr)
    # a valid config whose etcd is down: a clear error, exit 1
    path = tmp_path / "down.conf"
    path.write_text(base + f"backend = etcd\nendpoints = http://127.0.0.1:{free_port()}\n")
    r = cli("status", "--config", str(path))
    assert r.returncode == 1 and "etcd unreachable" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_status_command_with_the_lease_file_backend(tmp_path):
    lease = tmp_path / "ha.lease"
    path = tmp_path / "f.conf"
    path.write_text(f"[hpcfabric]\ntopology = {TOPO}\n[ha]\nrole = auto\nlease_file = {lease}\nlease_timeout = 60\n")
    view = json.loads(cli("status", "--config", str(path), "--json").stdout)
    assert view["partitions"][0]["master"] is None and view["partitions"][0]["switches"] == 36
    lease.write_text(json.dumps({"holder": "ctl-a", "generation": 7, "expires": time.time() + 59}))
    r = cli("status", "--config", str(path))
    assert r.returncode == 0 and "ctl-a" in r.stdout and "    7 " in r.stdout, r.stdout
    view = json.loads(cli("status", "--config", str(path), "--json").stdout)
    assert view["partitions"][0]["master"] == "ctl-a" and 0.5 < view["partitions"][0]["lease_age"] < 30


def test_three_instances_one_partition_each_reassigned_when_one_dies(tmp_path, etcd_cluster):
    prefix = f"/t-{uuid.uuid4().hex[:6]}"
    hs = [instance(tmp_path, etcd_cluster, n, prefix) for n in ("a", "b", "c")]
    runs = [Runner(h) for h in hs]
    sampler = Sampler(hs)
    try:
        [r.start() for r in runs]
        wait(lambda: balanced(hs) and all(len(h.active) == 1 for h in hs), 20)  # one each
        sampler.start()
        before = {p: v[0] for p, v in owners(hs).items()}
        lost = next(iter(hs[1].active))
        runs[1].stop()  # b stops renewing (as if it had died): its lease expires, its partition goes to a live one
        took = wait(lambda: set(owners(hs).get(lost, [])) & {"a", "c"}, 15)
        wait(lambda: hs[0].members == ["a", "c"] and hs[2].members == ["a", "c"], 5)
        time.sleep(1.0)
        after = {p: v[0] for p, v in owners(hs).items()}
        print(f"\nb died: {lost} reassigned after {took:.2f} s to {after[lost]}")
        assert balanced([hs[0], hs[2]]) and not hs[1].master and sampler.double == 0
        assert all(after[p] == before[p] for p in after if p != lost)  # sticky: the others did not move
    finally:
        sampler.stop()
        for r in runs:
            if r.is_alive():
                r.stop()
        for h in hs:
            h.release()


def test_failures_board_on_etcd_shared_and_gone_with_the_lease(tmp_path, etcd_cluster):
    """The partitions' failures board on a real etcd: what one instance publishes the other reads (its own
    entry left out); an empty report deletes the key; a revoked lease (a stopped instance) takes it away."""
    from hpcfabric.controller.board import EtcdBoard

    prefix = f"/fb{int(time.time() * 1000)}"
    a, b = instance(tmp_path, etcd_cluster, "a", prefix, partitions=2), instance(tmp_path, etcd_cluster, "b", prefix,
                                                                              partitions=2)
    a.tick(), b.tick()
    assert a.lease and b.lease
    board_a, board_b = EtcdBoard(a), EtcdBoard(b)
    board_a.publish({("g0s1", 4), ("g0s2", 5)}, {"g1s0"})
    board_b.publish({("g5s0", 6)}, set())
    assert board_b.read() == ({("g0s1", 4), ("g0s2", 5)}, {"g1s0"})
    assert board_a.read() == ({("g5s0", 6)}, set())
    board_a.publish({("g0s1", 4)}, set())
    assert board_b.read() == ({("g0s1", 4)}, set())
    board_a.publish(set(), set())  # nothing out: no key
    assert board_b.read() == (set(), set())
    board_a.publish({("g0s3", 7)}, set())
    a.release()  # the lease goes, and the entry with it
    assert board_b.read() == (set(), set())
    b.release()
