"""Takeover time after ``kill -9`` of the master, etcd backend, for two etcd tunings side by side.

For each setting a real 3-member etcd cluster (hpcfabric.emu.etcd_cluster) is started; a master process (a
Python process ticking :class:`hpcfabric.controller.etcdha.EtcdHa` every ttl/5, as the controller's HA
agent does) holds the partition, a standby ticks in this process; the master is killed with SIGKILL and
the time until the standby is master is measured, ``--runs`` times. Prints median and max per setting:

* etcd defaults (heartbeat 100 ms, election 1000 ms): the smallest lease etcd grants is 2 s;
* heartbeat 50 ms, election 500 ms: ``ttl = 1`` is granted as 1 s.

    .venv/bin/python bench/ha_takeover.py [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import replace
from pathlib import Path

from hpcfabric.emu.etcd_cluster import EtcdCluster, missing as etcd_missing

ROOT = Path(__file__).resolve().parent.parent

MASTER = """
import sys, time
from dataclasses import replace
from hpcfabric.config import load_config
from hpcfabric.controller.etcdha import EtcdHa
ha = EtcdHa(replace(load_config(sys.argv[1], compile=False), ha_instance="a"))
while True:
    ha.tick()
    if ha.active:
        print("master", flush=True)
    time.sleep(ha.ttl / 5)
"""


def conf(path: Path, endpoints, ttl: int, prefix: str) -> Path:
    path.write_text(f"[hpcfabric]\ntopology = {ROOT / 'topologies' / 'dragonfly-a4-p2-h2.yaml'}\n"
                    f"[ha]\nbackend = etcd\nendpoints = {','.join(endpoints)}\nttl = {ttl}\nprefix = {prefix}\n")
    return path


def run_setting(hb: int, el: int, ttl: int, runs: int) -> list[float]:
    from hpcfabric.config import load_config
    from hpcfabric.controller.etcdha import EtcdHa

    out = []
    with EtcdCluster(3, heartbeat_ms=hb, election_ms=el) as cluster, tempfile.TemporaryDirectory() as tmp:
        for _ in range(runs):
            path = conf(Path(tmp) / "c.conf", cluster.endpoints, ttl, f"/bench-{uuid.uuid4().hex[:6]}")
            proc = subprocess.Popen([sys.executable, "-c", MASTER, str(path)], stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL, text=True)
            try:
                assert proc.stdout.readline().strip() == "master"
                b = EtcdHa(replace(load_config(path, compile=False), ha_instance="b"))
                for _ in range(5):
                    b.tick()
                    time.sleep(b.ttl / 5)
                assert not b.active
                t0 = time.monotonic()
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(10)
                while not b.active:
                    b.tick()
                    time.sleep(b.ttl / 5)
                out.append(time.monotonic() - t0)
                b.release()
            finally:
                if proc.poll() is None:
                    os.kill(proc.pid, signal.SIGKILL)
                    proc.wait(10)
        granted = b.granted
    print(f"  etcd heartbeat {hb} ms / election {el} ms, ttl = {ttl} (granted {granted} s): takeover median "
          f"{statistics.median(out):.2f} s, max {max(out):.2f} s over {len(out)} kills")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    why = etcd_missing()
    if why:
        print(f"skipped: {why}")
        return 0
    print("kill -9 of the master -> standby master (etcd backend, one partition)")
    a = run_setting(100, 1000, 2, args.runs)
    b = run_setting(50, 500, 1, args.runs)
    print(f"  ratio default / tuned: {statistics.median(a) / statistics.median(b):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
