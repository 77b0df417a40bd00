"""etcd3gw under eventlet, as the controller runs it: request latencies and whether the hub keeps running.

Starts a real 3-member etcd cluster (hpcfabric.emu.etcd_cluster), monkey-patches eventlet like osken-manager,
then measures per operation of the HA round (lease keepalive, prefix range, claim txn) the latency, and
runs 8 greenlets doing txns beside a 10-ms ticker greenlet: if the client blocked the hub (grpc-style
threads, blocking sockets) the ticker's worst lateness would be the request time; green sockets keep it
near one tick. Prints figures only (docs/ha.md quotes them).

    .venv/bin/python bench/etcd_client.py [--n 300]
"""

from __future__ import annotations

import eventlet

eventlet.monkey_patch()

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

from hpcfabric.controller.etcdstore import EtcdStore  # noqa: E402
from hpcfabric.emu.etcd_cluster import EtcdCluster, missing as etcd_missing  # noqa: E402


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=300)
    args = ap.parse_args()
    why = etcd_missing()
    if why:
        print(f"skipped: {why}")
        return 0
    with EtcdCluster(3) as cluster:
        st = EtcdStore(cluster.endpoints, timeout=2.0)
        lease, granted = st.grant(2)
        print(f"etcd 3-member cluster on loopback; lease TTL asked 2 s, granted {granted} s")
        ops = {
            "keepalive": lambda i: st.keepalive(lease),
            "range prefix": lambda i: st.range_prefix("/bench/"),
            "claim txn (CAS)": lambda i: st.txn([(f"/bench/m{i}", "create", 0)],
                                                [("put", f"/bench/g{i}", "1"), ("put", f"/bench/m{i}", "x", lease)]),
        }
        for name, op in ops.items():
            lat = []
            for i in range(args.n):
                t = time.perf_counter()
                op(i)
                lat.append(time.perf_counter() - t)
            print(f"  {name:<16} median {statistics.median(lat) * 1000:6.2f} ms  p99 {pct(lat, 0.99):6.2f} ms  "
                  f"{len(lat) / sum(lat):7.0f} ops/s (one client)")
        # concurrency under the eventlet hub
        late = []
        done = [False]

        def ticker():
            while not done[0]:
                t = time.perf_counter()
                eventlet.sleep(0.01)
                late.append(time.perf_counter() - t - 0.01)

        def worker(k):
            for i in range(args.n // 8):
                st.txn([(f"/bench/w{k}-{i}", "create", 0)], [("put", f"/bench/w{k}-{i}", "x")])

        tk = eventlet.spawn(ticker)
        t0 = time.perf_counter()
        pool = [eventlet.spawn(worker, k) for k in range(8)]
        [g.wait() for g in pool]
        el = time.perf_counter() - t0
        done[0] = True
        tk.wait()
        n = 8 * (args.n // 8)
        print(f"  8 greenlets x {args.n // 8} txns: {n / el:7.0f} txns/s; a 10-ms ticker greenlet meanwhile: "
              f"{len(late)} ticks, worst lateness {max(late) * 1000:.1f} ms, median {statistics.median(late) * 1000:.2f} ms")
        print(f"  requests {st.requests}, endpoint failovers {st.failovers}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
