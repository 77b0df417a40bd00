#!/usr/bin/env python3
"""Reliability run in Mininet (``make reliability``): restart, HA failover, link failure, fuzzing, spoofing.

    .venv/bin/python mininet/run_reliability.py [--topology T] [--prefix rl] [--pings 1000]
        [--phases restart,failover,fuzz,link] [--fast-failover] [--link-interval 0.002]

On a small Dragonfly (default ``topologies/dragonfly-a2-p1-h1.yaml``, bridge
names prefixed so it can run next to another Mininet) with guards on:

1. two controllers (``[ha] role = auto``, one lease file) -- in phase 1 only
   the first runs: ping at 10 ms across ``kill -9`` + restart of it
   (``restart_lost``; ``restart_flow_mods`` sent by the restarted one);
2. the second starts as slave; ping at 10 ms across ``kill -9`` of the master
   (``failover_lost``, ``failover_flow_mods``, ``failover_takeover_s``);
3. spoofing and fuzzing: one host sends frames with foreign source MACs
   (``spoof_delivered`` must be 0; its own-MAC control frames must arrive)
   and garbage (PAUSE, PFC, CNM, LLDP, DMP, random bytes); garbage is also
   written into fabric links; the controller must survive (``fuzz_crashes``)
   and the other hosts' pings lose nothing (``others_lost``);
4. link failure: ``ip link set … down`` on a fabric link carrying a ping ->
   the controller reroutes (``link_recovery_ms``, ``link_traffic_gap_ms``),
   all-pairs ping with the link down, link up, all-pairs ping again. With
   ``--fast-failover`` the config turns the groups on (the cut link is one
   protected at both ends) and ``ff_link_recovery_ms`` is the traffic gap;
5. etcd (``etcd_phases.py``): two controllers on a real 3-member etcd cluster, two partitions; kill -9
   of a master, kill of the etcd leader, all etcd stopped and restarted, under steady pings
   (``etcd_*_lost``, ``etcd_kill_takeover_s``; the switches' roles sampled: ``etcd_double_master_samples``).

The last stdout line is one JSON object; exit 0 if every check passed (1 a check failed, 2 bad
arguments or environment, 130 interrupted). Only processes this script started are stopped (by PID);
never ``mn -c``.
The phases live in ``reliability_phases.py`` and ``spoof_fuzz.py``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # a checkout without the package installed (mininet/ itself is the script's folder)
    sys.path.insert(0, str(ROOT))

from controller_proc import Controller, free_port  # noqa: E402  (mininet/, by path)
from etcd_phases import etcd_phase  # noqa: E402
from fabric_setup import write_conf  # noqa: E402
from fabric_up import Run, fabric_up, run_main  # noqa: E402
from reachability import all_pairs_ping  # noqa: E402
from reliability_phases import (  # noqa: E402
    Testbed, failover_phase, is_master_ready, lease_settings, link_phase, pick_link, restart_phase, status_of,
)  # fmt: skip
from runkit import wait_until  # noqa: E402
from spoof_fuzz import fuzz_phase  # noqa: E402

from hpcfabric.config import load_config  # noqa: E402

PROG = "run_reliability"
PHASES = ("restart", "failover", "fuzz", "link", "etcd")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="run_reliability.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--topology", default=str(ROOT / "topologies" / "dragonfly-a2-p1-h1.yaml"))
    ap.add_argument("--prefix", default="rl", help="prefix of Mininet node names (default rl)")
    ap.add_argument("--pings", type=int, default=1000, help="pings per steady-traffic phase (10 ms apart)")
    ap.add_argument("--fuzz", type=int, default=10000,
                    help="garbage frames in all (default 10000): half from a host, half into the fabric links' ends")
    ap.add_argument("--spoof", type=int, default=1000, help="spoofed frames")
    ap.add_argument("--fuzz-rate", type=float, default=2500,
                    help="frames/s of the spoofing and of all garbage injectors together (default 2500: Open vSwitch's "
                         "userspace datapath takes it without dropping on receive)")
    ap.add_argument("--phases", default=",".join(PHASES),
                    help=f"comma-separated subset of {','.join(PHASES)} (default: all)")
    ap.add_argument("--fast-failover", action="store_true",
                    help="[failover] fast_failover = on (needs a topology with protected ports, e.g. fb-2d-3x3); "
                         "adds ff_link_recovery_ms (the traffic gap across the cut, bridged by the groups)")
    ap.add_argument("--link-interval", type=float, default=0.002,
                    help="ping interval (s) across the link cut (default 0.002: 2 ms resolution)")
    args = ap.parse_args(argv)
    args.phase_list = [p.strip() for p in args.phases.split(",") if p.strip()]
    if not args.phase_list or set(args.phase_list) - set(PHASES):
        ap.error(f"--phases: expected a comma-separated subset of {','.join(PHASES)}")
    if not args.fuzz_rate > 0:
        ap.error(f"--fuzz-rate: expected frames per second > 0, got {args.fuzz_rate:g}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return run_main(PROG, lambda run: reliability(args, run), wall_clock=True, echo=False,
                    topology=Path(args.topology).stem, passed=False)


def reliability(args: argparse.Namespace, run: Run) -> None:
    phases, report, log, tmp = args.phase_list, run.report, run.progress, run.work
    if [p for p in phases if p != "etcd"]:  # the lease-file phases share one fabric
        topology = Path(args.topology).resolve()
        conf = write_conf(tmp / "reliability.conf", lease_settings(topology, tmp / "ha.lease", args.fast_failover))
        cfg = load_config(conf)
        fabric, plan = cfg.fabric, cfg.plan
        n = len(fabric.switches)
        ports = [free_port(), free_port()]
        a = Controller(conf, tmp / "a.json", ports[0], tmp / "a.log")
        b = Controller(conf, tmp / "b.json", ports[1], tmp / "b.log")
        with fabric_up(fabric, plan, [a], prefix=args.prefix, seed=11, report=report, progress=log,
                       ready=lambda up: wait_until(lambda: is_master_ready(a, n), 90,
                                                   "controller A master with every switch confirmed")) as up:
            up.controllers.append(b)  # started by the failover phase, stopped with A
            log(f"fabric up: {n} switches, controller A master (pid {a.pid})")
            base = all_pairs_ping(up.net, fabric)
            report.update(baseline_lost=base["lost"])
            if base["lost"]:
                report.fail(f"baseline all-pairs ping lost {base['lost']}")
            link = pick_link(cfg)
            src, dst = fabric.hosts_on(link.a)[0].name, fabric.hosts_on(link.b)[0].name
            bed = Testbed(up.net, cfg, args.prefix, a, b, ports, src, dst, link, master=a, st0=status_of(a))
            if "restart" in phases:  # 1. kill -9 + restart
                restart_phase(bed, args.pings, report, log)
            if "failover" in phases:  # 2. HA failover
                failover_phase(bed, args.pings, report, log)
            if "fuzz" in phases:  # 3. spoofing and fuzzing
                fuzz_phase(bed, args.spoof, args.fuzz, report, log, rate=args.fuzz_rate)
            if "link" in phases:  # 4. link failure
                link_phase(bed, args.pings, args.link_interval, args.fast_failover, report, log)
    if "etcd" in phases:  # 5. controllers on etcd: own fabric, own cluster (etcd_phases.py)
        etcd_phase(Path(args.topology).resolve(), args.prefix + "e", args.pings, report, log, tmp)


if __name__ == "__main__":
    sys.exit(main())
