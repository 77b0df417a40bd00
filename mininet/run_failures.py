#!/usr/bin/env python3
"""Failures under traffic in Mininet (``make failures``): links and then a switch fail one after another
while steady pings run; every repair must be proven and lose nothing outside its fast-failover window.

    .venv/bin/python mininet/run_failures.py --topology topologies/dragonfly-a6-p3-h3.yaml
    .venv/bin/python mininet/run_failures.py --config configs/dragonfly-a4-p2-h2.conf --links 2 --prefix fl

1. The controller with conditional routing, ``flow_control = pfc``, guards on, ``[failover] recompute = on``
   and ``fast_failover = on`` (the config is loaded, and its tables proven, as ``hpcfabric check`` does; no
   fast-failover group in the tables fails the run); Mininet; rules in place, every link discovered, the
   repair planner ready; DMP; reachability (``before_ping_*``); every bridge holds the compiled tables.
2. Steady pings (``ping -D -O``, every ``--interval`` s) between ``--streams`` host pairs whose default
   routes together cross the most links (the reference pipeline through the compiled tables).
3. ``--links`` links fail one after another (global, local, global, ... where one carries a stream), then
   one switch (all its links at once, its hosts cut off; ``--no-switch`` skips it). Each is chosen, just
   before it fails, among those *measured* to carry a stream (frames/s out of its ports) whose loss
   leaves the fabric connected; the switch hosts no stream's end. After each: wait until the controller's
   last repair is for everything out (status ``failover``), proven and installed (``repair_ms``: port
   status -> last wave confirmed; flow-mods, waves, entries, plan time), then ``--settle`` s.
4. The PAUSE check (as ``run_fabric.py``'s) on a global port of the tables now in force that carries no
   stream (the streams would count in its counters): one flip, the
   traffic diverted, expiry restores.
5. Recovery: every failed link up at once; the repair back to the compiled tables.
6. The pings judged: every lost request must have been sent inside an event's window (``--inflight-ms``
   before the failure to its repair confirmed, plus ``--cache-ms``: Open vSwitch's datapath flow cache
   catches up with the new flows after the barrier; the fast-failover window); per event the loss burst.
7. Every bridge holds exactly the compiled flows (``ovs-ofctl diff-flows`` against the config's desired
   tables) and the groups it held at the start; reachability (``ping_*``) loses nothing.

The last stdout line is one JSON object; exit 0 if every check passed (1 a check failed, 2 bad arguments
or environment, 130 interrupted). Only processes this script started are stopped (by PID).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # a checkout without the package installed (mininet/ itself is the script's folder)
    sys.path.insert(0, str(ROOT))

from controller_proc import Controller, free_port  # noqa: E402  (mininet/, by path)
from fabric_setup import abs_path, describe, discovery_step, rules_in_place, setup_from_config, write_conf  # noqa: E402
from fabric_up import Run, Up, fabric_up, run_main  # noqa: E402
from failure_plan import Stream, Window, choose_link, choose_streams, choose_switch, judge  # noqa: E402
from failure_steps import (  # noqa: E402
    failover_status, link_rates, pause_target_in_force, set_ports, snapshot_groups, tables_step, wait_repair,
)  # fmt: skip
from pause_check import pause_run  # noqa: E402
from reachability import SteadyPing, ping_step  # noqa: E402
from runkit import CheckFailed, StepResult, UsageError, wait_until  # noqa: E402

from hpcfabric.topology.failures import Failures  # noqa: E402

PROG = "run_failures"
#: the kinds of link wanted in turn (the first that carries a stream, else any kind)
KINDS = ("global", "local")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="run_failures.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--topology", help="topology YAML (default: the --config's)")
    ap.add_argument("--config", help="a controller config to start from (the runner's settings go over it)")
    ap.add_argument("--links", type=int, default=3, help="links to fail one after another (default 3)")
    ap.add_argument("--no-switch", action="store_true", help="no switch failure after the links")
    ap.add_argument("--streams", type=int, default=6, help="steady ping streams (host pairs; default 6)")
    ap.add_argument("--interval", type=float, default=0.01, help="ping interval of the streams, s (default 0.01)")
    ap.add_argument("--settle", type=float, default=2.0, help="seconds of traffic after each confirmed repair (default 2)")
    ap.add_argument("--inflight-ms", type=float, default=100.0,
                    help="a request lost that was sent up to this long before a failure counts as the failure's "
                         "(it was on the wire; default 100)")
    ap.add_argument("--cache-ms", type=float, default=100.0,
                    help="a request lost that was sent up to this long after a repair was confirmed counts as the "
                         "failure's: Open vSwitch brings its datapath flow cache in line with a bundle's flows after "
                         "the barrier reply, in its revalidator threads (default 100)")
    ap.add_argument("--repair-timeout", type=float, default=120.0, help="seconds to wait for each repair (default 120)")
    ap.add_argument("--pause-seconds", type=float, default=2.0, help="how long the PAUSE check holds the port (default 2)")
    ap.add_argument("--link-speed-gbps", type=float, default=0.1,
                    help="link speed for PAUSE quanta (default 0.1: one frame covers 336 ms, docs/mininet.md)")
    ap.add_argument("--reach", choices=("all", "cover"), default="all", help="reachability pairs (default all)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the stream choice (default 1)")
    ap.add_argument("--ready-timeout", type=float, default=300.0, help="seconds to wait for the rules (default 300)")
    ap.add_argument("--prefix", default="", help="prefix for Mininet node names (run next to another net)")
    ap.add_argument("--json-only", action="store_true", help="no progress lines, only the JSON summary")
    args = ap.parse_args(argv)
    if not args.topology and not args.config:
        ap.error("give --topology and/or --config")
    if args.links < 0 or args.streams < 1 or not 0.002 <= args.interval <= 1:
        ap.error("--links >= 0, --streams >= 1 and --interval in [0.002, 1] required")
    if args.links == 0 and args.no_switch:
        ap.error("nothing to fail: --links 0 with --no-switch")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return run_main(PROG, lambda run: failures_run(args, run), quiet=args.json_only, wall_clock=True, passed=False)


def settings(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """The controller config's settings over ``--config`` (fabric_setup.write_conf writes them)."""
    hf: dict[str, Any] = {"routing": "conditional", "flow_control": "pfc", "log_level": "INFO", "reload_poll": 0,
                          "link_speed_gbps": args.link_speed_gbps}
    if args.topology:
        hf["topology"] = abs_path(args.topology)
    return {"hpcfabric": hf, "guards": {"source_check": "on", "punt_meters": "on"},
            "failover": {"recompute": "on", "fast_failover": "on"}}


def prefixed(step: StepResult, prefix: str, what: str) -> StepResult:
    return StepResult({prefix + k: v for k, v in step.fields.items()}, [f"{what}: {f}" for f in step.failures])


def failures_run(args: argparse.Namespace, run: Run) -> None:
    """The steps of the module docstring, into ``run.report``."""
    report, log, tmp = run.report, run.progress, run.work
    if args.config and not Path(args.config).is_file():
        raise UsageError(f"config file {args.config} does not exist")
    port = free_port()
    conf = write_conf(tmp / "failures.conf", settings(args), args.config, port=port, status=tmp / "status.json")
    t = time.monotonic()
    setup = setup_from_config(conf)  # the controller's config, its tables proven (as hpcfabric check)
    cfg, fabric = setup.config, setup.fabric
    ff = sum(len(g) for g in cfg.groups.values())
    report.update(**describe(setup), config_s=round(time.monotonic() - t, 1), fast_failover=cfg.fast_failover,
                  ff_groups=ff, stream_interval_ms=args.interval * 1000)
    log(f"{fabric.name}: {len(fabric.switches)} switches, {len(fabric.hosts)} hosts; {setup.routing} routing, "
        f"flow_control {cfg.flow_control}, deadlock {report.summary['deadlock']}, {ff} fast-failover groups "
        f"(config loaded and proven in {report.summary['config_s']} s)")
    if not ff:
        raise CheckFailed(f"fast_failover = on gives no fast-failover group on {fabric.name}: no window to judge")
    streams = choose_streams(cfg.compiled, args.streams, args.seed)
    report.update(streams=[{"src": s.src, "dst": s.dst, "path": list(s.path)} for s in streams])
    controller = Controller(conf, tmp / "status.json", port, tmp / "controller.log")

    def ready(up: Up) -> None:  # rules, LLDP, the repair planner's proof base
        report.add(rules_in_place(up.net, setup, controller, args.ready_timeout, log))
        report.add(discovery_step(controller, up.t_net, 120.0, log))
        planner = wait_until(lambda: (failover_status(controller).get("planner") or {}).get("ready")
                             and failover_status(controller)["planner"], args.ready_timeout, "the repair planner")
        report.update(planner=planner)
        log(f"repair planner ready ({planner.get('mode')}; proof base {planner.get('base_seconds')} s, "
            f"{planner.get('dependencies')} dependencies)")

    with fabric_up(fabric, setup.plan, [controller], prefix=args.prefix, ready=ready, report=report,
                   progress=log) as up:
        net = up.net
        report.add(prefixed(ping_step(net, fabric, log, args.reach), "before_", "before the failures"))
        groups0 = snapshot_groups(net)
        report.add(tables_step(net, cfg, groups0, "tables_at_start"))
        report.update(groups_at_start=sum(len(g) for g in groups0.values()))
        if report.failures:
            raise CheckFailed("the fabric is not as compiled before the failures")
        pings = {s.name: SteadyPing(net, s.src, s.dst, args.interval, deadline=7200, log=tmp / f"ping{i}.log")
                 for i, s in enumerate(streams)}
        log(f"{len(pings)} ping streams every {args.interval * 1000:g} ms: {', '.join(pings)}")
        failing = Failing(net, controller, args, report, log)
        try:
            time.sleep(args.settle)
            failing.fail_links(args.links)
            if not args.no_switch:
                failing.fail_switch(streams)
            failing.pause_check(setup)
            failing.recover()
        finally:
            results = {name: p.stop() for name, p in pings.items()}
        judge_pings(pings, results, failing.windows, failing.events, args, report, log)
        report.update(events=failing.events)
        report.add(tables_step(net, cfg, groups0, "tables_restored"))
        log(f"tables after recovery: {'the compiled ones' if report.summary['tables_restored'] else 'DIFFERENT'} "
            f"({report.summary['tables_restored_flows_differing']} flow line(s) differ)")
        report.add(ping_step(net, fabric, log, args.reach))


class Failing:
    """Steps 3-5 on one net: the failures in force, the events and their windows."""

    def __init__(self, net: Any, controller: Controller, args: argparse.Namespace, report: Any, log: Any) -> None:
        self.net, self.fabric, self.controller, self.args, self.report, self.log = \
            net, net.hf_fabric, controller, args, report, log
        self.events: list[dict[str, Any]] = []
        self.windows: list[Window] = []
        self.before = failover_status(controller)  # the status after the last repair
        self.links: list[Any] = []  # failed links
        self.ports: list[tuple[str, int]] = []  # every (switch, port) taken down
        self.switch: str | None = None
        self.min_pps = 0.5 / args.interval  # half a stream's requests: LLDP is 1-2 frames/s

    def fail_links(self, n: int) -> None:
        """``n`` links, one after another, each carrying a stream when it fails."""
        fabric = self.fabric
        for k in range(n):
            kind = KINDS[k % len(KINDS)] if fabric.kind == "dragonfly" else None
            got = choose_link(fabric, link_rates(self.net), self.links, kind, self.min_pps)
            if got is None:
                raise CheckFailed(f"link failure {k + 1}: no live link carries a stream ({self.min_pps:g} frames/s) "
                                  "and can go without disconnecting the fabric")
            link, pps = got
            self.links.append(link)
            self.ports += [(link.a, link.a_port), (link.b, link.b_port)]
            what = f"{link.a}:{link.a_port}-{link.b}:{link.b_port}"
            self.log(f"link {k + 1}: {what} ({link.kind}, carrying {pps:.0f} frames/s) down")
            t0 = set_ports(self.net, fabric, [(link.a, link.a_port)], up=False)
            self.repaired(f"link {k + 1}", t0, {"kind": "link", "link": what, "link_kind": link.kind,
                                                "carried_pps": round(pps)})
        self.report.update(failed_links=[e["link"] for e in self.events if e["kind"] == "link"])

    def fail_switch(self, streams: list[Stream]) -> None:
        """The busiest switch without a stream's end: every link of it down at once."""
        fabric = self.fabric
        ends = [h for s in streams for h in (s.src, s.dst)]
        got = choose_switch(fabric, link_rates(self.net), self.links, ends, self.min_pps)
        if got is None:
            raise CheckFailed("switch failure: no switch without a stream's end carries a stream and can go")
        sw, pps = got
        self.switch = sw
        mine = [(sw, p) for p in sorted(fabric.ports(sw))]
        self.ports += [p for p in mine if p not in self.ports]
        self.log(f"switch {sw} ({len(fabric.fabric_ports(sw))} fabric links, {len(fabric.hosts_on(sw))} hosts, "
                 f"carrying {pps:.0f} frames/s): every link down at once")
        t0 = set_ports(self.net, fabric, mine, up=False)
        self.repaired("switch", t0, {"kind": "switch", "switch": sw, "carried_pps": round(pps)})
        self.report.update(failed_switch=sw)

    def out(self) -> Failures:
        """Everything out now, as the controller sees it (a link by either end)."""
        return Failures.of(self.fabric, self.ports)

    def pause_check(self, setup: Any) -> None:
        """Step 4: the PAUSE check on a global port of the tables in force."""
        redirect = bool(((self.before.get("last") or {}).get("verdict") or {}).get("redirect_detours"))
        busy = {port for port, pps in link_rates(self.net).items() if pps >= self.min_pps}  # the streams' ports
        target = pause_target_in_force(setup.config, self.out(), redirect, [self.switch] if self.switch else [], busy)
        if target is None:
            self.report.fail("PAUSE check after the failures: no global port without a stream carries a host's default "
                             "route with an alternative in the tables in force")
            return
        self.report.add(prefixed(pause_run(self.net, setup, target, self.controller, self.log, self.args.pause_seconds),
                                 "", "PAUSE check after the failures"))

    def recover(self) -> None:
        """Step 5: every failed link up at once; the repair back to the compiled tables."""
        if not self.ports:
            return
        t0 = set_ports(self.net, self.fabric, self.ports, up=True)
        self.log(f"recovery: {len(self.ports)} port(s) up")
        self.ports, self.links = [], []
        self.repaired("recovery", t0, {"kind": "recovery"})

    def repaired(self, name: str, t0: float, event: dict[str, Any]) -> None:
        """Wait for the repair of everything out now after an event at ``t0`` (wall clock); its record into
        ``events``, its fast-failover window into ``windows``; a repair refused or not proven fails the run."""
        before, args = self.before, self.args
        got = wait_repair(self.controller, self.out(), before, args.repair_timeout)
        fo = self.before = got["failover"]
        last = fo.get("last") or {}
        end = last.get("confirmed_at") or got["seen_at"]
        verdicts = [(r.get("verdict") or {}).get("verdict") for r in got["repairs"]]
        event.update(event=name, repairs=fo.get("repairs", 0) - before.get("repairs", 0),
                     refused=fo.get("refused", 0) - before.get("refused", 0), verdicts=verdicts,
                     installed=bool(last.get("installed")), repair_ms=last.get("ms"),
                     window_ms=round((end - t0) * 1000, 1), seen_ms=round((got["seen_at"] - t0) * 1000, 1),
                     flow_mods=fo.get("flow_mods", 0) - before.get("flow_mods", 0), waves=last.get("waves"),
                     changed=last.get("changed"), entries=last.get("entries"),
                     plan_ms=round(last["seconds"] * 1000, 1) if last.get("seconds") is not None else None,
                     redirect_detours=(last.get("verdict") or {}).get("redirect_detours"),
                     planner_timings=last.get("timings"))
        self.events.append(event)
        self.windows.append(Window(name, t0 - args.inflight_ms / 1000, end + args.cache_ms / 1000))
        self.log(f"  {name}: {event['repairs']} repair(s) {verdicts}, confirmed {event['repair_ms']} ms after the port "
                 f"status ({event['window_ms']} ms after the command), {event['flow_mods']} flow-mods in waves "
                 f"{event['waves']} ({event['changed']} switches changed, plan {event['plan_ms']} ms)")
        if event["refused"] or not event["installed"]:
            self.report.fail(f"{name}: repair refused (not proven): {fo.get('unproven')}")
        bad = [v for v in verdicts if v != "proven"]
        if bad:
            self.report.fail(f"{name}: repair verdict(s) {bad}, expected 'proven': "
                             f"{(last.get('verdict') or {}).get('explanation')}")
        time.sleep(args.settle)


def judge_pings(pings: dict[str, SteadyPing], results: dict[str, dict], windows: list, events: list,
                args: argparse.Namespace, report: Any, log: Any) -> None:
    """Step 6: losses only inside the events' windows; per event the burst."""
    timelines = {name: p.timeline() for name, p in pings.items()}
    verdict = judge(timelines, windows, args.interval)
    for e in events:
        e.update(verdict["windows"].get(e["event"], {}))
    outside = verdict["outside"]
    report.update(ping_streams={n: {k: r[k] for k in ("sent", "received", "lost", "longest_gap", "rtt_avg_ms")}
                                for n, r in results.items()},
                  pings_sent=sum(r["sent"] for r in results.values()),
                  pings_lost=sum(r["lost"] for r in results.values()),
                  lost_outside=len(outside), lost_outside_examples=outside[:10])
    for e in events:
        log(f"  {e['event']}: {e.get('lost', 0)} request(s) lost on {len(e.get('streams', []))} stream(s), burst "
            f"{e.get('burst_ms')} ms, longest gap {e.get('longest_gap_ms')} ms, window {e['window_ms']} ms")
    log(f"pings: {report.summary['pings_sent']} sent, {report.summary['pings_lost']} lost, {len(outside)} outside "
        f"every fast-failover window")
    if outside:
        report.fail(f"{len(outside)} ping(s) lost outside the fast-failover windows, e.g. {outside[:3]}")
    last_end = max((w.end for w in windows), default=0.0)
    for name, tl in timelines.items():
        answered = [t for _, t, ok in tl if ok]
        if not answered or answered[-1] < last_end:
            report.fail(f"stream {name} stopped before the last event's window closed ({results[name]})")


if __name__ == "__main__":
    sys.exit(main())
