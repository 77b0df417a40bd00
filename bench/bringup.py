#!/usr/bin/env python3
"""Bring-up time: switch connect -> all rules confirmed, for the default Dragonfly.

36 fresh userspace OVS bridges play the switches of
``topologies/dragonfly-a4-p2-h2.yaml`` (their dpids from the model); the
``hpcfabric controller`` (subprocess, compact addressing, conditional routing)
is started, then every bridge is pointed at it at once (t0). The time is t0 ->
the last switch's barrier reply confirming its full table (from the status
file), repeated ``--repeat`` times on emptied tables; also a controller
restart onto full tables (reconcile, nothing to send). Target: <= 5 s.

Prints one JSON line. Needs root and Open vSwitch. All bridges are created in one ovsdb
transaction and removed in one, also when interrupted (SIGINT, SIGTERM, SIGHUP). Any topology
works (``--topology topologies/dragonfly-table3.yaml``: 2,064 bridges; takes minutes on a shared
machine, as each bridge's flows are counted with ovs-ofctl).

    .venv/bin/python bench/bringup.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from install_rate import Bench, ensure_ovs  # noqa: E402  (shares the bridge/controller driver)

ROOT = Path(__file__).resolve().parent.parent
TARGET_S = 5.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--topology", default=str(ROOT / "topologies" / "dragonfly-a4-p2-h2.yaml"))
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    if os.geteuid() != 0 or not shutil.which("ovs-vsctl"):
        print(json.dumps({"skipped": "needs root and Open vSwitch"}))
        return 0
    ensure_ovs()

    def interrupted(signum, frame):  # noqa: ARG001 - turn SIGTERM/SIGHUP into the same unwind as Ctrl-C
        raise KeyboardInterrupt(signal.Signals(signum).name)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, interrupted)
    opts = argparse.Namespace(
        topology=args.topology, addressing="compact", routing="conditional", bundles="auto",
        bridges=10**6, log_level="WARNING",
    )
    with tempfile.TemporaryDirectory(prefix="hf-bringup-") as d:
        bench = Bench(opts, Path(d))
        try:
            bench.create()
            runs = [bench.ours(f"fresh{i}", clear=True) for i in range(max(1, args.repeat))]
            resync = bench.ours("restart")
        except KeyboardInterrupt as err:
            print(json.dumps({"bench": "bringup", "interrupted": str(err) or "SIGINT", "bridges_removed": len(bench.bridges)}))
            return 130
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                signal.signal(sig, signal.SIG_IGN)  # a second signal must not stop the cleanup
            bench.cleanup()
    times = sorted(r["seconds"] for r in runs)
    median = times[len(times) // 2]
    print(json.dumps({
        "bench": "bringup",
        "topology": bench.config.fabric.name,
        "switches": len(bench.switches),
        "rules": bench.rules,
        "runs_s": [r["seconds"] for r in runs],
        "median_s": median,
        "counts_ok": all(r["counts_ok"] for r in runs),
        "restart_onto_full_tables_s": resync["seconds"],
        "restart_flow_mods_sent": resync["flow_mods_sent"],
        "target_s": TARGET_S,
        "meets_target": median <= TARGET_S,
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
