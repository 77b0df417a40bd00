"""Discovery report cost: the whole fabric vs one partition's scope (``DiscoveryState.set_scope``), one JSON line.

Timed, every switch connected and every cable seen from both ends:

* ``report_whole_s``: one ``report()`` with no scope (what every partition's controller walked before);
* ``set_scope_from_whole_s``: ``set_scope(partition 0)`` on that state (it forgets the other partitions'
  ~7/8 of the views: the most a scope change drops);
* ``set_scope_s``: ``set_scope`` from one partition to the next (min / max over the ``--partitions``);
* ``report_partition_s``: one ``report()`` per partition, its views fed after the scope change (as a
  partition's controller holds them), min / max;
* ``disconnect_all_s``: ``switch_down`` of every switch of the last partition (a controller losing its
  switches at once, e.g. an emulator or a rack gone), side by side with ``disconnect_scan_per_switch_s``,
  the former implementation (a scan of every view per disconnect) timed on a copy over 20 switches, and
  its extrapolation to the partition, ``disconnect_scan_all_s``.

Usage::

    .venv/bin/python bench/discovery_report.py                    # dragonfly-300k (bench/control_scale --fabric 300k)
    .venv/bin/python bench/discovery_report.py --fabric table3 --partitions 4
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from hpcfabric.controller.discovery import DiscoveryState  # noqa: E402
from hpcfabric.topology.loader import load_topology  # noqa: E402
from hpcfabric.topology.partition import partition_fabric  # noqa: E402

FABRICS = {"default": "dragonfly-a4-p2-h2.yaml", "table3": "dragonfly-table3.yaml", "300k": "dragonfly-300k.yaml"}


def timed(fn, *args, **kw):
    t = time.perf_counter()
    out = fn(*args, **kw)
    return time.perf_counter() - t, out


def feed(st: DiscoveryState, fabric, scope: frozenset[str] | None, now: float) -> None:
    """Every switch of ``scope`` (all: None) up; every cable seen from each of its in-scope ends."""
    dpid = {sw.name: sw.dpid for sw in fabric.switches}
    for name in dpid if scope is None else scope:
        st.switch_up(dpid[name], now)
    for link in fabric.links:
        a, b = (dpid[link.a], link.a_port), (dpid[link.b], link.b_port)
        if scope is None or link.a in scope:
            st.observed(*b, *a, now, trusted=False)  # b's frame arrived on a
        if scope is None or link.b in scope:
            st.observed(*a, *b, now, trusted=False)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fabric", default="300k", help=f"{', '.join(FABRICS)} or a topology file name")
    ap.add_argument("--partitions", type=int, default=8)
    args = ap.parse_args()
    path = ROOT / "topologies" / FABRICS.get(args.fabric, args.fabric)
    if not path.exists():
        print(f"error: {path}: no such topology", file=sys.stderr)
        return 2
    gc.disable()  # the timings are the report's own work, not the cyclic GC's over a 300k fabric
    load_s, fabric = timed(load_topology, path)
    parts = partition_fabric(fabric, args.partitions)
    build_s, st = timed(DiscoveryState, fabric, 3.5)
    feed(st, fabric, None, 0.0)
    whole_s, whole = timed(st.report, 1.0)
    from_whole_s, _ = timed(st.set_scope, parts[0].switches)
    scope_s, report_s, expected = [], [], []
    for k, part in enumerate(parts):
        if k:
            t, _ = timed(st.set_scope, part.switches)
            scope_s.append(t)
        feed(st, fabric, frozenset(part.switches), 0.0)
        t, rep = timed(st.report, 1.0)
        report_s.append(t)
        expected.append(rep.links_expected)
        assert rep.links_discovered == rep.links_expected and not rep.missing_links
    last = [sw.dpid for sw in fabric.switches if sw.name in parts[-1].switches]
    views = dict(st.neighbors)

    def scan(dpid: int) -> None:  # the former switch_down: every view visited per disconnect
        for end in [e for e, (peer, _) in views.items() if e[0] == dpid or peer[0] == dpid]:
            del views[end]
    sample = last[:20]
    scan_s, _ = timed(lambda: [scan(d) for d in sample])
    down_s, _ = timed(lambda: [st.switch_down(d) for d in last])
    assert not st.neighbors, "every view of the partition is gone with its switches"
    r = lambda x: round(x, 4)  # noqa: E731
    print(json.dumps({
        "bench": "discovery_report", "fabric": fabric.name, "switches": len(fabric.switches),
        "links": len(fabric.links), "partitions": len(parts), "load_s": r(load_s), "state_build_s": r(build_s),
        "report_whole_s": r(whole_s), "links_expected_whole": whole.links_expected,
        "links_expected_partition": [min(expected), max(expected)],
        "set_scope_from_whole_s": r(from_whole_s), "set_scope_s": [r(min(scope_s)), r(max(scope_s))],
        "report_partition_s": [r(min(report_s)), r(max(report_s))],
        "disconnect_switches": len(last), "disconnect_all_s": r(down_s),
        "disconnect_scan_per_switch_s": r(scan_s / len(sample)), "disconnect_scan_all_s": r(scan_s / len(sample) * len(last)),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
