#!/usr/bin/env python3
"""End-to-end run of an hpcfabric fabric in Mininet (userspace Open vSwitch).

    .venv/bin/python mininet/run_fabric.py --topology topologies/X.yaml --config configs/X.conf
    .venv/bin/python mininet/run_fabric.py --topology topologies/X.yaml --static

Controller mode (default) starts ``hpcfabric controller`` as a subprocess
(own config copy, status file and listen port in a temp dir); ``--static``
installs the compiled flows with ``ovs-ofctl --bundle add-flows`` instead and
plays the controller's part in the PAUSE test itself (flow-table baseline).

Steps (progress on stderr): controller -> Mininet net -> wait until every
switch is confirmed and rules_installed == rules_expected (and each bridge
holds exactly the compiled flows) -> LLDP discovery complete -> DMP on every
host -> every host's MAC equals the plan (hosts without it ask again, up to 3
rounds) -> static neighbour entries -> paced reachability (paced_ping.py:
every pair, a pair lost only after retries) -> PCP capture (tcpdump
before and after a global hop: the PCP rises on it) -> PAUSE test (PFC frames for the
classes in use, or 802.3x without classes: flip to table 3, traffic diverted, expiry
restores the default path) ->
teardown, batched (also on Ctrl-C / SIGTERM / errors). The last stdout line is a
one-line JSON summary; exit 0 only if every check passed (1 failed checks,
2 bad arguments or environment, 130 interrupted).

Each step lives in a module next to this one (docs/mininet.md, "The step library").
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # a checkout without the package installed (mininet/ itself is the script's folder)
    sys.path.insert(0, str(ROOT))

from controller_proc import MANAGERS, Controller, free_port, manager_available  # noqa: E402  (mininet/, by path)
from fabric_setup import (  # noqa: E402
    describe, discovery_step, rules_in_place, setup_from_config, setup_from_topology, write_config,
)  # fmt: skip
from fabric_topo import cleanup_all_mininet  # noqa: E402
from fabric_up import Run, Up, fabric_up, run_main  # noqa: E402
from pause_check import choose_pause_target, pause_run, pause_skip_reason  # noqa: E402
from pause_inject import MAX_QUANTA  # noqa: E402
from pcp_capture import capture_step, choose_capture  # noqa: E402
from reachability import ping_step  # noqa: E402
from runkit import Progress, UsageError  # noqa: E402

PROG = "run_fabric"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="run_fabric.py",
        description="Run an hpcfabric fabric in Mininet end to end (controller or static flows) and print a JSON summary.",
    )
    p.add_argument("--topology", help="topology YAML (default: the config's)")
    p.add_argument("--config", help="controller config (INI); the runner gives the controller a copy with overrides")
    p.add_argument("--manager", choices=MANAGERS, default="hpcfabric",
                   help="how the controller is started: hpcfabric controller (default), osken-manager, or ryu-manager "
                        "(from .venv-ryu: scripts/bootstrap.sh --ryu)")
    p.add_argument("--static", action="store_true", help="no controller: install flows with ovs-ofctl, flip PAUSE ports itself")
    p.add_argument("--addressing", choices=("flat", "per-switch", "per-group", "compact"), help="override the addressing mode")
    p.add_argument("--routing", choices=("minimal", "valiant", "conditional"), help="override the routing policy")
    p.add_argument("--link-speed-gbps", type=float, help="override link_speed_gbps (PAUSE quanta -> seconds)")
    p.add_argument("--pause-port", metavar="SWITCH:PORT", help="fabric port to PAUSE (default: a global/top-dimension port with traffic)")
    p.add_argument("--quanta", type=int, help="quanta per PAUSE frame (default: enough for --pause-seconds, at most 65535)")
    p.add_argument("--pause-seconds", type=float, default=2.0, help="how long the port stays paused (a PAUSE train if one frame is shorter; default 2.0)")
    p.add_argument("--pause-interval-ms", type=float, help="spacing of the frames of a PAUSE train (default: a third of one frame's pause)")
    p.add_argument("--no-pause", action="store_true", help="skip the PAUSE test")
    p.add_argument("--reach", choices=("all", "cover"), default="all",
                   help="reachability pairs: all ordered pairs (default), or a covering set (every host to one host "
                        "on every other switch, all pairs on 4 sampled switches) for fabrics too large for all pairs")
    p.add_argument("--discovery-timeout", type=float, default=60.0,
                   help="seconds to wait (after the rules) until the controller has discovered every link")
    p.add_argument("--link-bw", type=float, help="shape every link to this many Mbit/s (TCLink/htb)")
    p.add_argument("--ready-timeout", type=float, default=120.0, help="seconds to wait for the controller to install everything")
    p.add_argument("--prefix", default="", help="prefix for Mininet node names (run next to another net)")
    p.add_argument("--json-only", action="store_true", help="no progress lines, only the JSON summary")
    p.add_argument("--keep", action="store_true", help="open the Mininet CLI before tearing down")
    p.add_argument("--cleanup", action="store_true", help="run 'mn -c' (kills EVERY Mininet on this machine) and exit")
    args = p.parse_args(argv)
    if args.quanta is not None and not 1 <= args.quanta <= MAX_QUANTA:
        p.error("--quanta must be 1..65535")
    if args.pause_seconds <= 0 or args.pause_seconds > 30:
        p.error("--pause-seconds must be in (0, 30]")
    if args.link_speed_gbps is not None and args.link_speed_gbps <= 0:
        p.error("--link-speed-gbps must be positive")
    if args.pause_port and not re.fullmatch(r"[^:\s]+:\d+", args.pause_port):
        p.error("--pause-port must look like SWITCH:PORT, e.g. g0s0:3")
    if not args.cleanup and not args.topology and not args.config:
        p.error("give --topology and/or --config")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.cleanup:
        Progress(args.json_only, PROG)("mn -c: removing every Mininet bridge, interface and process on this machine")
        return cleanup_all_mininet()
    return run_main(PROG, lambda run: fabric_run(args, run), quiet=args.json_only,
                    log_level="error" if args.json_only else "warning", mode="static" if args.static else "controller",
                    passed=False)


def fabric_run(args: argparse.Namespace, run: Run) -> None:
    """The steps of the module docstring, into ``run.report``."""
    report, progress, tmp = run.report, run.progress, run.work
    summary = report.summary
    port = free_port()
    config_path = None
    missing = None if args.static else manager_available(args.manager)
    if missing:
        raise UsageError(f"cannot start the controller with --manager {args.manager}: {missing}")
    if not args.static or args.config:
        config_path = write_config(args, tmp, port, tmp / "status.json")
        setup = setup_from_config(config_path)
    else:
        setup = setup_from_topology(args)
    fabric, plan = setup.fabric, setup.plan
    report.update(**describe(setup))
    progress(
        f"{fabric.name}: {len(fabric.switches)} switches, {len(fabric.hosts)} hosts, {len(fabric.links)} links; "
        f"{plan.mode} addressing ({plan.layout.describe()}), {setup.routing} routing, {summary['mode']} mode"
    )
    pause_skip = pause_skip_reason(setup.routing, args.no_pause)
    # resolved before anything starts: a bad --pause-port fails fast
    target = None if pause_skip else choose_pause_target(fabric, plan, setup.desired, args.pause_port)
    controller = None
    if not args.static:
        controller = Controller(config_path, tmp / "status.json", port, tmp / "controller.log", args.manager)
        report.update(manager=args.manager)

    def ready(up: Up) -> None:  # rules in place; LLDP discovery complete (OVS settled before hundreds of hosts ask DMP)
        if controller is not None:
            report.update(controller_pid=controller.pid)
        report.add(rules_in_place(up.net, setup, controller, args.ready_timeout, progress))
        if controller is not None:
            report.add(discovery_step(controller, up.t_net, args.discovery_timeout, progress))

    with fabric_up(fabric, plan, [controller] if controller else [], link_bw=args.link_bw, prefix=args.prefix,
                   ready=ready, report=report, progress=progress) as up:
        net = up.net
        report.add(ping_step(net, fabric, progress, args.reach))  # paced reachability
        report.add(capture_step(net, fabric, choose_capture(setup.compiled), progress))  # PCP on the wire

        report.update(pause_flips=0, pause_reaction_ms=None, diverted=None, restored=None)  # PAUSE
        if target is None:
            summary["pause"] = pause_skip
        else:
            report.add(pause_run(net, setup, target, controller, progress, args.pause_seconds, args.quanta,
                                 (args.pause_interval_ms or 0) / 1000 or None))
        if controller is not None:
            status = controller.status() or {}
            report.update(**{k: status.get(k) for k in ("links_expected", "links_discovered", "miswired", "framework")})
        if args.keep:
            from mininet.cli import CLI

            progress("--keep: Mininet CLI (exit to tear down)")
            CLI(net)


if __name__ == "__main__":
    sys.exit(main())
