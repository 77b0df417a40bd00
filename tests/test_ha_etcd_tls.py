"""The etcd HA backend against a real 3-member etcd cluster started with TLS and auth (no mocks).

The cluster (hpcfabric/emu/etcd_cluster.py, fixture ``etcd_tls_cluster`` in tests/conftest.py): client and peer URLs over TLS, client
certificates required, etcd auth on with users ``root``, ``hpcfabric`` (read-write on ``/hpcfabric``) and
``reader`` (read-only there). Instances authenticate with ``[ha] etcd_ca/etcd_cert/etcd_key/etcd_user/
etcd_password_file``:

* two instances balance the partitions and claim them by transaction; a real ``hpcfabric controller``
  masters over TLS and a standby takes over after its kill -9; ``hpcfabric status --config`` reads it all;
* every etcd member restarted (their auth tokens forgotten): the instance authenticates again and is
  master again;
* refused: a wrong password, the read-only user (RBAC: it can read, never claim), keys outside the granted
  prefix, a client certificate of another CA, no client certificate, plain HTTP.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from channel_probe import crash, until

from hpcfabric.config import load_config
from hpcfabric.controller.etcdha import EtcdHa
from hpcfabric.controller.etcdstore import EtcdStore, EtcdUnavailable
from hpcfabric.emu.driver import free_port

ROOT = Path(__file__).resolve().parent.parent
TOPO = ROOT / "topologies" / "dragonfly-a4-p2-h2.yaml"


def config(tmp_path, cluster, name, prefix, partitions=3, user="hpcfabric", cert=None, endpoints=None) -> Path:
    path = tmp_path / f"{name}.conf"
    path.write_text(f"[hpcfabric]\ntopology = {TOPO}\nreload_poll = 0\nstatus_file = {tmp_path / (name + '.json')}\n"
                    f"[openflow]\nlisten_port = {free_port()}\n"
                    f"[ha]\nbackend = etcd\nendpoints = {','.join(endpoints or cluster.endpoints)}\n"
                    f"partitions = {partitions}\ninstance = {name}\nttl = 2\nprefix = {prefix}\n"
                    + cluster.ha_keys(user, cert))
    return path


def instance(tmp_path, cluster, name, prefix, **kw) -> EtcdHa:
    return EtcdHa(load_config(config(tmp_path, cluster, name, prefix, **kw), compile=False))


def ticking(*instances: EtcdHa, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for h in instances:
            h.tick()
        time.sleep(0.4)


def prefix() -> str:
    return f"/hpcfabric/tls-{uuid.uuid4().hex[:6]}"  # under the prefix the hpcfabric user may write


def test_instances_balance_and_claim_over_tls_with_auth(tmp_path, etcd_tls_cluster):
    p = prefix()
    a = instance(tmp_path, etcd_tls_cluster, "a", p)
    b = instance(tmp_path, etcd_tls_cluster, "b", p)
    try:
        assert all(e.startswith("https://") for e in a.store.endpoints) and a.store.security.user == "hpcfabric"
        ticking(a, b, seconds=4)
        own = {part: [h.instance for h in (a, b) if h.master_of(sw)] for part, sw in
               (("p0", "g0s0"), ("p1", "g3s0"), ("p2", "g6s0"))}
        assert sorted(len(v) for v in own.values()) == [1, 1, 1] and {v[0] for v in own.values()} == {"a", "b"}, own
        assert a.errors == 0 and b.errors == 0 and a.store.authentications >= 1
        cli = [str(Path(sys.executable).with_name("hpcfabric")), "status", "--json", "--config",
               str(config(tmp_path, etcd_tls_cluster, "c", p))]
        status = subprocess.Popen(cli, stdout=subprocess.PIPE, text=True)
        while status.poll() is None:  # keep renewing (ttl 2 s) while the command starts and reads
            ticking(a, b, seconds=0.4)
        view = json.loads(status.stdout.read())
        assert status.returncode == 0
        assert view["members"] == ["a", "b"] and all(r["master"] in ("a", "b") for r in view["partitions"])
    finally:
        a.release()
        b.release()


def test_kill_9_of_a_tls_controller_standby_takes_over(tmp_path, etcd_tls_cluster):
    p = prefix()
    path = config(tmp_path, etcd_tls_cluster, "a", p, partitions=1)
    proc = subprocess.Popen([str(Path(sys.executable).with_name("hpcfabric")), "controller", "--config", str(path)],
                            stdout=(tmp_path / "a.log").open("w"), stderr=subprocess.STDOUT, start_new_session=True)
    b = None
    try:
        def a_master() -> bool:
            try:
                return json.loads((tmp_path / "a.json").read_text())["ha"]["partitions"][0]["master"] == "a"
            except (OSError, ValueError, KeyError, IndexError):
                return False

        until(a_master, 60, "controller a master of p0")
        b = instance(tmp_path, etcd_tls_cluster, "b", p, partitions=1)
        ticking(b, seconds=1.5)
        assert not b.active and b.view["p0"]["master"] == "a"
        crash(proc)
        t0 = time.monotonic()
        while not b.active and time.monotonic() - t0 < 15:
            b.tick()
            time.sleep(0.4)
        took = time.monotonic() - t0
        print(f"\nTLS + auth: takeover after kill -9 in {took:.2f} s")
        assert b.active and took <= b.granted + 2 and b.generation_of("g0s0") == 2
    finally:
        crash(proc)
        if b is not None:
            b.release()


def test_every_member_restarted_the_instance_authenticates_again(tmp_path, etcd_tls_cluster):
    p = prefix()
    a = instance(tmp_path, etcd_tls_cluster, "a", p, partitions=1)
    try:
        ticking(a, seconds=1.5)
        assert a.active and a.store.authentications >= 1
        auths = a.store.authentications
        etcd_tls_cluster.kill_all()
        for i in range(etcd_tls_cluster.size):
            etcd_tls_cluster.start_member(i)
        etcd_tls_cluster.wait_healthy()
        until(lambda: (a.tick(), a.active and a.store.authentications > auths)[1], 30, "a master again", 0.4)
        ticking(a, seconds=2)
        assert a.active and a.master_of("g0s0")  # the simple tokens died with the members: logged in again
    finally:
        a.release()


@pytest.mark.parametrize("who", ["wrong-password", "reader", "other-ca", "no-cert", "plain-http"])
def test_refused_clients_never_become_master(tmp_path, etcd_tls_cluster, who):
    c = etcd_tls_cluster
    p = prefix()
    if who == "wrong-password":
        h = instance(tmp_path, c, "x", p, user="nobody-knows", cert="hpcfabric")
    elif who == "reader":
        h = instance(tmp_path, c, "x", p, user="reader")
    elif who == "other-ca":
        h = instance(tmp_path, c, "x", p, cert="stranger")
    else:
        cfg = load_config(config(tmp_path, c, "x", p), compile=False)
        if who == "no-cert":
            sec = type(cfg.ha_etcd)(ca=cfg.ha_etcd.ca, user=cfg.ha_etcd.user, password=cfg.ha_etcd.password)
            h = EtcdHa(cfg, EtcdStore(cfg.ha_endpoints, 0.5, sec))
        else:
            h = EtcdHa(cfg, EtcdStore(tuple(e.replace("https://", "http://") for e in cfg.ha_endpoints), 0.5))
    ticking(h, seconds=2.5)
    assert not h.active and not h.master and h.errors > 0, h.last_error
    expect = {"wrong-password": "authentication failed", "reader": "permission denied", "other-ca": "TLS",
              "no-cert": "TLS", "plain-http": "etcd unreachable"}[who]
    assert expect in h.last_error, h.last_error
    if who == "reader":  # RBAC: it may read the prefix, never write it
        kvs, rev = h.store.range_prefix(p + "/")
        assert kvs == {} and rev > 0
        with pytest.raises(EtcdUnavailable, match="permission denied"):
            h.store.put(p + "/x", "1")
    ok = EtcdStore(c.endpoints, 2.0, load_config(config(tmp_path, c, "y", p), compile=False).ha_etcd)
    with pytest.raises(EtcdUnavailable, match="permission denied"):
        ok.put("/elsewhere/x", "1")  # outside the prefix the role grants
