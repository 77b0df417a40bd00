#!/usr/bin/env python3
"""Control-plane scale: the unchanged controller against emulated OpenFlow 1.3 switches, one JSON line per fabric.

For each fabric: ``hpcfabric controller`` subprocess(es) (``--controllers K``:
K partitions by ``[ha] switches``, each its own process and port) and
emulator processes (:mod:`hpcfabric.emu`, real OpenFlow 1.3 over TCP, tables
applied, LLDP delivered along the cabling). Measured:

* ``listen_s``: controller start (config load and compile) until it listens;
* ``connect_to_confirmed_s``: the switches connect -> every switch confirmed
  with all its rules (the latest per-switch ``confirmed_at`` the controllers
  report; each confirmation is a barrier reply after the bundle commit);
  ``connect_to_status_seen_s``: until the status files showed it (they are
  written at most every 50 x their cost: at 300k partitions that lags by
  minutes); ``flow_mods``, ``bundles`` as received by the switches;
* ``links_discovered`` / ``discovery_s``: LLDP closes on the emulated cabling;
* ``controller``: peak RSS (VmHWM), CPU seconds of the bring-up (``bringup_controller_hub_cpu_s``: of its
  main thread, the hub, without native threads such as the TLS handshakes'), CPU share in
  steady state (LLDP at ``lldp_interval`` and stats polling running),
  ``lldp_round_s`` (the controller's time to send one round);
* ``pause``: ``--pauses`` PAUSE packet-ins injected on fabric ports spread
  over the fabric while LLDP and polling run; reaction = packet-in written by
  the switch -> the flip's flow-mod read by that switch (p50/p99, ms), and
  flow-mods per PAUSE (a flip and its expiry: 2); ``switch_p50_ms`` is the emulated switch's own CPU in a
  reaction (packet-in built, encrypted, written; flow-mod decrypted, parsed), ``beyond_switch_p50_ms`` the
  rest's p50 (channel, kernel, controller); ``controller_cpu_share`` / ``harness_cpu_share`` the
  controller's and the emulators' CPU over the phase;
* ``failures``: links and switches out and back (bench/failure_scenarios.py): per scenario port status ->
  every partition confirmed the proven repair, the flow-mods it took (and their share of the installed
  entries), its proof time, whether a PAUSE still flips with one flow-mod; a link flapping ten times in a
  second. ``--baseline DIR``: the same bench of an older checkout (its ``reroute`` figures) in the same run;
* ``restart``: controller(s) restarted onto full tables -> all confirmed, and
  the flow-mods that needed (0);
* ``steady_harness_cpu_share``: the emulators' CPU share in the same steady window;
* ``harness``: the emulator processes' own CPU and RSS (not the controller's); ``bringup_harness_cpu_s``
  counts from their start, ``harness_start_cpu_s`` is the part before they connect (TLS: loading one
  context per switch), ``bringup_harness_cpu_after_start_s`` the rest.
* ``--web``: the controller serves the fabric page (``[web] listen``); after the PAUSE phase the page is
  opened in headless Chromium (bench/page_open.py: render and drill-down times as the browser measures
  them) and the same PAUSE phase runs again with the page open and live (``page.during``), then with a
  client asking what the page asks but no browser (bench/page_client.py: the controller's own cost, apart
  from Chromium's CPU on the same cores; ``page_client``), then once more without either (``pause_after``):
  ``pause_page`` puts the p50/p99s side by side, and each phase's ``controller_cpu_share`` (the
  controller's CPU seconds over the phase's wall time: what the page costs it, which a loaded machine
  does not blur as it blurs p99).

CPU seconds are each process's own (``/proc/PID/stat`` of the controller, ``getrusage`` of each
emulator process): on a shared machine they separate the controller's cost from the harness's, which wall
times cannot.

Figures read after a phase (links, flips, the controller's PAUSE times) come
from a status file written after it (waited for up to ``STATUS_WAIT_S``); its
age at the read is ``links_status_age_s`` / ``pause.status_age_s`` (> 0: stale).

``--tls on`` runs the OpenFlow channel over TLS (``[openflow] tls = on``; a CA, the
controller's and one certificate per switch made first, outside the timings);
``--tls both`` runs each fabric over plain TCP and then over TLS and adds a
``control_scale_tls`` line with both figures side by side and their ratios
(bring-up and PAUSE p50/p99; target: TLS within 20 % of TCP).

    .venv/bin/python bench/control_scale.py                       # default + a6p3h3 Dragonfly
    .venv/bin/python bench/control_scale.py --fabric table3       # Table III, 2,064 switches
    .venv/bin/python bench/control_scale.py --fabric 300k --controllers 4 --emulators 4 --pauses 0
    .venv/bin/python bench/control_scale.py --fabric table3 --emulators 2 --lldp-interval 5 --poll-interval 10 --tls both
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from hpcfabric.emu.driver import Cluster  # noqa: E402

import failure_scenarios  # noqa: E402  (bench/, beside this script)
import page_client  # noqa: E402
import page_open  # noqa: E402

FABRICS = {
    "default": "dragonfly-a4-p2-h2.yaml",
    "a6p3h3": "dragonfly-a6-p3-h3.yaml",
    "table3": "dragonfly-table3.yaml",
    "300k": "dragonfly-300k.yaml",
}
TARGETS = {"table3": {"connect_to_confirmed_s": 30.0, "peak_rss_mb": 2048.0, "pause_p50_ms": 1.0, "pause_p99_ms": 5.0},
           "300k": {"connect_to_confirmed_s": 120.0}}
#: seconds the bench waits for a status file written after a phase (not a stale one)
STATUS_WAIT_S = 120.0
#: TLS against plain TCP (``--tls both``): at most this ratio for bring-up and PAUSE p50/p99
TLS_RATIO = 1.2


def pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))], 3)


def emu_sum(stats: list[dict], key: str) -> float:
    return sum(s.get(key, 0) for s in stats)


def quiet_since(c: Cluster, t_from: float, quiet: float = 2.0, timeout: float = 120.0) -> float:
    """Seconds from ``t_from`` to the last flow-mod any switch received, once none arrived for ``quiet`` s."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        stats = c.emu_stats()
        last = max(s["last_write"] for s in stats)
        if time.monotonic() - last >= quiet and time.monotonic() - t_from >= quiet:
            return max(0.0, last - t_from)
        time.sleep(0.2)
    raise TimeoutError("flow-mods did not stop")


def pauses(c: Cluster, n: int, gap: float, hold: float) -> dict:
    rng = random.Random(16)
    ports = [(sw, p) for sw in c.names for p in sorted(c.fabric.fabric_ports(sw))]
    busy: dict[str, float] = {}
    samples: list[float] = []
    own: list[float] = []  # the switch's own CPU in each reaction (its TLS, if any), ms
    events: list[dict] = []  # the raw reaction events (wall clock of the flow-mod), kept in the workdir
    before = [c.status(i).get("pause", {}) for i in range(len(c.parts))]
    cpu0, wall0 = sum(s["cpu_s"] for s in c.controller_stats()), time.monotonic()
    emu0 = emu_sum(c.emu_stats(), "cpu_s")
    sent = 0
    lost = 0
    pending: dict[int, tuple[str, float]] = {}

    def collect() -> None:
        """Take the emulators' reaction events: PAUSE injected -> flow-mod received, in ms."""
        for e in c.emus:
            while not e.events.empty():
                ev = e.events.get()
                if ev.get("ev") == "reaction":
                    samples.append(ev["us"] / 1000.0)
                    own.append(ev.get("switch_us", 0.0) / 1000.0)
                    events.append(ev)
                    pending.pop(ev["id"], None)

    for k in range(n):
        while True:
            sw, port = rng.choice(ports)
            if time.monotonic() - busy.get(sw, -1e9) > hold + 0.1:
                break
        busy[sw] = time.monotonic()
        c.emulator_of(sw).send(op="pause", switch=sw, port=port, quanta=0xFFFF, id=k)
        pending[k] = (sw, time.monotonic())
        sent += 1
        time.sleep(gap)
        collect()
    deadline = time.monotonic() + 5
    while pending and time.monotonic() < deadline:
        collect()
        time.sleep(0.05)
    lost = len(pending)
    cpu_s, wall_s = sum(s["cpu_s"] for s in c.controller_stats()) - cpu0, time.monotonic() - wall0
    emu_s = emu_sum(c.emu_stats(), "cpu_s") - emu0
    (c.workdir / "pause_reactions.json").write_text(json.dumps(events))
    time.sleep(hold + 0.5)  # expiries
    fresh = time.time()
    after_st = fresh_statuses(c, fresh)
    after = [s.get("pause", {}) for s in after_st]
    flips = sum(a.get("flips", 0) - b.get("flips", 0) for a, b in zip(after, before))
    fms = sum(a.get("flow_mods", 0) - b.get("flow_mods", 0) for a, b in zip(after, before))
    ctl = [x for a in after for x in a.get("reaction_ms", [])]
    return {"injected": sent, "reacted": len(samples), "no_reaction": lost, "p10_ms": pct(samples, 0.1),
            "p50_ms": pct(samples, 0.5),
            "p99_ms": pct(samples, 0.99), "max_ms": pct(samples, 1.0), "flips": flips, "flip_flow_mods": fms,
            "flow_mods_per_flip": round(fms / flips, 3) if flips else None,
            "switch_p50_ms": pct(own, 0.5), "switch_p99_ms": pct(own, 0.99),
            "beyond_switch_p50_ms": pct([a - b for a, b in zip(samples, own)], 0.5),
            "controller_p10_ms": pct(ctl, 0.1),
            "controller_p50_ms": pct(ctl, 0.5), "controller_p99_ms": pct(ctl, 0.99), "gap_ms": gap * 1000,
            "status_age_s": status_age(after_st, fresh), "controller_cpu_s": round(cpu_s, 2),
            "controller_cpu_share": round(cpu_s / wall_s, 3) if wall_s > 0 else None,
            "harness_cpu_share": round(emu_s / wall_s, 3) if wall_s > 0 else None}


def fresh_statuses(c: Cluster, since: float, timeout: float = STATUS_WAIT_S) -> list[dict]:
    """Every controller's status once written after ``since`` (wall clock), or the last one after ``timeout``
    s: a big fabric's controller writes it at most every 50 x its cost (Table III under load: 10-60 s)."""
    deadline = time.monotonic() + timeout
    while True:
        statuses = [c.status(i) for i in range(len(c.parts))]
        if all(s.get("time", 0) >= since for s in statuses) or time.monotonic() >= deadline:
            return statuses
        time.sleep(0.2)


def status_age(statuses: list[dict], at: float) -> float:
    """How old the oldest status was at ``at`` (negative: written after it): a stale read shows here."""
    return round(max(at - s.get("time", 0) for s in statuses), 1)


def wait_partitions(c: Cluster, timeout: float) -> tuple[list[float | None], float]:
    """Seconds (since now) until each partition's controller reports all its switches confirmed (None: not
    within ``timeout``), and the highest 1-minute load average seen meanwhile."""
    t0 = time.monotonic()
    done: list[float | None] = [None] * len(c.parts)
    load = os.getloadavg()[0]
    while None in done and time.monotonic() - t0 < timeout:
        for i in range(len(c.parts)):
            if done[i] is None:
                s = c.status(i)
                if s and s.get("switches_confirmed") == s.get("switches_expected"):
                    done[i] = time.monotonic() - t0
        load = max(load, os.getloadavg()[0])
        time.sleep(0.25)
    return done, load


def last_confirmed(status: dict) -> float | None:
    """Wall time a controller confirmed the last of its switches (its per-switch ``confirmed_at``)."""
    times = [v.get("confirmed_at") for v in (status.get("per_switch") or {}).values()]
    return max(times) if times and all(times) else None


def run(name: str, args: argparse.Namespace, workdir: Path, tls: bool = False) -> dict:
    topo = str(ROOT / "topologies" / FABRICS.get(name, name))
    extra = ("deadlock_check = off\n" if not args.deadlock_check else "") + \
        f"[metrics]\npoll_interval = {args.poll_interval}\n" + (f"[web]\nlisten = {args.web_port}\n" if args.web else "")
    c = Cluster(topo, workdir, controllers=args.controllers, emulators=args.emulators, extra=extra,
                lldp_interval=args.lldp_interval, artifact=args.artifact_dir or args.artifact, tls=tls,
                connects=args.connects)
    out: dict = {"bench": "control_scale", "tls": tls, "fabric": c.fabric.name, "switches": len(c.names),
                 "hosts": len(c.fabric.hosts), "links": len(c.fabric.links), "controllers": len(c.parts),
                 "emulator_processes": args.emulators, "lldp_interval": args.lldp_interval,
                 "poll_interval": args.poll_interval, "connects": args.connects or None}

    def stop(signum, frame):  # noqa: ARG001
        c.stop()
        raise SystemExit(130)

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    try:
        if args.artifact_dir:
            out["compile"] = {"artifact": args.artifact_dir, "reused": True}
        elif args.artifact:
            out["compile"] = c.compile()
        out["listen_s"] = [round(x, 2) for x in c.start_controllers()]
        cs0 = c.controller_stats()
        out["listen_cpu_s"] = [round(s["cpu_s"], 2) for s in cs0]
        out["listen_rss_mb"] = [round(s["peak_rss_mb"], 1) for s in cs0]
        cpu0 = [s["cpu_s"] for s in cs0]
        hub0 = [s.get("main_cpu_s", 0.0) for s in cs0]
        t0, t0_wall = time.monotonic(), time.time()
        c.start_emulators()
        emu_ready = time.monotonic() - t0
        per, load_max = wait_partitions(c, args.timeout)
        total = time.monotonic() - t0
        out["load_avg_1m_max"] = round(load_max, 2)
        statuses = [c.status(i) for i in range(len(c.parts))]
        # when each controller confirmed its last switch (its own clock), not when its status file said so
        last = [last_confirmed(s) if x is not None else None for s, x in zip(statuses, per)]
        out["partition_confirmed_s"] = [None if x is None else round(x - t0_wall - emu_ready, 2) for x in last]
        out["partition_status_seen_s"] = [None if x is None else round(x, 2) for x in per]
        if None in per:
            cs = c.controller_stats()
            st = c.emu_stats()
            out["timed_out_after_s"] = args.timeout
            out["switches_confirmed"] = sum(s.get("switches_confirmed", 0) for s in statuses)
            out["rules_installed"] = sum(s.get("rules_installed", 0) for s in statuses)
            out["sync_failures"] = sum(s.get("errors", {}).get("sync_failures", 0) for s in statuses)
            out["controller"] = {"peak_rss_mb": round(max(s["peak_rss_mb"] for s in cs), 1),
                                 "cpu_s": [round(s["cpu_s"], 1) for s in cs]}
            out["harness"] = {"emulator_cpu_s": round(emu_sum(st, "cpu_s"), 2),
                              "emulator_rss_mb": [s["rss_mb"] for s in st]}
            out["load_avg_1m"] = round(os.getloadavg()[0], 2)
            return out
        st = c.emu_stats()
        cs = c.controller_stats()
        out["emulator_start_s"] = round(emu_ready, 2)
        out["connect_to_status_seen_s"] = round(total - emu_ready, 2)
        known = [x for x in out["partition_confirmed_s"] if x is not None]
        out["connect_to_confirmed_s"] = max(known) if len(known) == len(per) else out["connect_to_status_seen_s"]
        out["rules"] = sum(s["rules_expected"] for s in statuses)
        out["rules_in_switches"] = emu_sum(st, "flows")
        out["flow_mods"] = emu_sum(st, "flow_mods")
        out["bundles"] = emu_sum(st, "bundles")
        out["switch_errors"] = emu_sum(st, "errors")
        out["bringup_controller_cpu_s"] = round(sum(s["cpu_s"] - c0 for s, c0 in zip(cs, cpu0)), 2)
        out["bringup_cpu_per_controller_s"] = [round(s["cpu_s"] - c0, 2) for s, c0 in zip(cs, cpu0)]
        # the controllers' main threads (the hub: every green thread), without the native threads (TLS handshakes)
        out["bringup_controller_hub_cpu_s"] = round(sum(s.get("main_cpu_s", 0.0) - h0 for s, h0 in zip(cs, hub0)), 2)
        out["bringup_harness_cpu_s"] = round(emu_sum(st, "cpu_s"), 2)
        start_cpu = sum(getattr(e, "start_cpu_s", 0.0) for e in c.emus)  # TLS: loading the switches' contexts
        out["harness_start_cpu_s"] = round(start_cpu, 2)
        out["bringup_harness_cpu_after_start_s"] = round(emu_sum(st, "cpu_s") - start_cpu, 2)
        if args.bringup_only:
            out["controller"] = {"peak_rss_mb": round(max(s["peak_rss_mb"] for s in cs), 1)}
            out["load_avg_1m"] = round(os.getloadavg()[0], 2)
            return out
        try:
            # a round probes at most LLDP_MAX_PPS x interval ports (Table III: 10,000 of 47,472): several rounds
            out["discovery_s"] = round(c.wait("links", max(60.0, 12 * args.lldp_interval)) + total, 2)
        except TimeoutError:
            out["discovery_s"] = None
        t_links = time.time()
        statuses = fresh_statuses(c, t_links) if out["discovery_s"] is None else [c.status(i) for i in range(len(c.parts))]
        out["links_discovered"] = [s["links_discovered"] for s in statuses]
        out["links_status_age_s"] = status_age(statuses, t_links)
        out["links_expected"] = [s["links_expected"] for s in statuses]
        # steady state: LLDP and polling only
        a, ea = c.controller_stats(), emu_sum(c.emu_stats(), "cpu_s")
        time.sleep(args.window)
        b, eb = c.controller_stats(), emu_sum(c.emu_stats(), "cpu_s")
        statuses = fresh_statuses(c, time.time() - args.window / 2)
        out["controller"] = {
            "peak_rss_mb": round(max(s["peak_rss_mb"] for s in b), 1),
            "steady_cpu_share": [round((y["cpu_s"] - x["cpu_s"]) / args.window, 3) for x, y in zip(a, b)],
            "lldp_round_s": [s.get("lldp", {}).get("round_s") for s in statuses],
            "lldp_sent": sum(s.get("lldp", {}).get("sent", 0) for s in statuses),
        }
        out["steady_harness_cpu_share"] = round((eb - ea) / args.window, 3)  # the emulators', same window
        if args.pauses:
            out["pause"] = pauses(c, args.pauses, args.pause_gap, 0.05)
            if args.web:
                out["page"] = page_open.measure(f"http://127.0.0.1:{args.web_port}/",
                                                lambda: pauses(c, args.pauses, args.pause_gap, 0.05), shot=args.web_shot)
                with page_client.PageClient(f"http://127.0.0.1:{args.web_port}") as pc:
                    out["page_client"] = pauses(c, args.pauses, args.pause_gap, 0.05)
                    out["page_client"].update(events=pc.events, fetches=pc.fetches)
                out["pause_after"] = pauses(c, args.pauses, args.pause_gap, 0.05)
                runs = [out["pause"], out["page"]["during"], out["page_client"], out["pause_after"]]
                out["pause_page"] = {"order": ["closed", "browser", "client", "closed"],
                                     "p99_ms": [r["p99_ms"] for r in runs], "p50_ms": [r["p50_ms"] for r in runs],
                                     "controller_cpu_share": [r["controller_cpu_share"] for r in runs]}
        if args.failures:
            out["failures"] = failure_scenarios.scenarios(
                c, quiet_since=quiet_since, emu_sum=emu_sum, installed=int(out["rules"]),
                many=args.many_failures, flap=args.flap)
        if args.restart:
            before = emu_sum(c.emu_stats(), "flow_mods")
            for i in range(len(c.parts)):
                c.stop_controller(i)
            t_wall = time.time()
            t = time.monotonic()
            c.start_controllers()
            listen = time.monotonic() - t
            c.wait("confirmed", args.timeout, since=t_wall)
            out["restart"] = {"listen_s": round(listen, 2), "to_confirmed_s": round(time.monotonic() - t - listen, 2),
                              "flow_mods": emu_sum(c.emu_stats(), "flow_mods") - before}
        st = c.emu_stats()
        out["harness"] = {"emulator_cpu_s": round(emu_sum(st, "cpu_s"), 2),
                          "emulator_rss_mb": [s["rss_mb"] for s in st],
                          "packet_ins": emu_sum(st, "packet_ins"), "packet_outs": emu_sum(st, "packet_outs")}
        tg = TARGETS.get(name)
        if tg:
            got = {"connect_to_confirmed_s": out["connect_to_confirmed_s"], "peak_rss_mb": out["controller"]["peak_rss_mb"],
                   "pause_p50_ms": (out.get("pause") or {}).get("p50_ms"),
                   "pause_p99_ms": (out.get("pause") or {}).get("p99_ms")}
            out["targets"] = {k: {"target": v, "got": got[k], "met": got[k] is not None and got[k] <= v}
                              for k, v in tg.items()}
        out["load_avg_1m"] = round(os.getloadavg()[0], 2)
    finally:
        c.stop()
    return out


def parser() -> argparse.ArgumentParser:
    """The bench's options (also bench/hub_profile.py's pass-through)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fabric", action="append", help=f"{', '.join(FABRICS)} or a topology file name (repeatable)")
    ap.add_argument("--controllers", type=int, default=1, help="partitions (controller processes)")
    ap.add_argument("--emulators", type=int, default=1, help="emulator processes")
    ap.add_argument("--lldp-interval", type=float, default=1.0)
    ap.add_argument("--poll-interval", type=float, default=2.0, help="[metrics] poll_interval (stats polling)")
    ap.add_argument("--pauses", type=int, default=200)
    ap.add_argument("--pause-gap", type=float, default=0.02, help="seconds between injected PAUSEs")
    ap.add_argument("--window", type=float, default=10.0, help="steady-state CPU window (s)")
    ap.add_argument("--timeout", type=float, default=900.0)
    ap.add_argument("--workdir", default="", help="keep configs, status files and logs here")
    ap.add_argument("--no-failures", "--no-reroute", dest="failures", action="store_false",
                    help="skip the failure scenarios (bench/failure_scenarios.py)")
    ap.add_argument("--no-many-failures", dest="many_failures", action="store_false",
                    help="failure scenarios: skip the switch-and-ten-links one")
    ap.add_argument("--no-flap", dest="flap", action="store_false", help="failure scenarios: skip the flapping link")
    ap.add_argument("--baseline", default="", metavar="DIR",
                    help="also run DIR/bench/control_scale.py (an older checkout) on the same fabric with the same "
                    "options, in this run: its failure figures (reroute, failures) beside these ('baseline')")
    ap.add_argument("--no-restart", dest="restart", action="store_false")
    ap.add_argument("--artifact", action="store_true",
                    help="compile once (hpcfabric compile) and let every controller load its partition from it")
    ap.add_argument("--artifact-dir", default="", metavar="DIR",
                    help="use this artifact (from hpcfabric compile with the same settings) instead of compiling")
    ap.add_argument("--no-deadlock-check", dest="deadlock_check", action="store_false",
                    help="[hpcfabric] deadlock_check = off (the union proof of the whole fabric is skipped); 300k: leave it on with --artifact (proved once in the compile: ~6 min, 6.5 GB), not per controller")
    ap.add_argument("--web", action="store_true", help="serve the fabric page and measure PAUSE with it open")
    ap.add_argument("--web-port", type=int, default=19480, help="--web: the page's port on 127.0.0.1")
    ap.add_argument("--web-shot", default="", help="--web: save a screenshot of the drilled-down group here")
    ap.add_argument("--connects", type=int, default=0, help="connects in flight per emulator process (TCP connect "
                    "to the controller's HELLO, the TLS handshake included; 0: the emulator's default, 32)")
    ap.add_argument("--bringup-only", action="store_true", help="stop after connect -> confirmed (no LLDP window, "
                    "PAUSEs, reroute, restart)")
    ap.add_argument("--tls", choices=("off", "on", "both"), default="off",
                    help="OpenFlow over TLS ([openflow] tls = on, certificates made first); both: TCP, then TLS, "
                    "and a control_scale_tls line comparing them")
    return ap


def main() -> int:
    args = parser().parse_args()
    modes = {"off": [False], "on": [True], "both": [False, True]}[args.tls]
    for name in args.fabric or ["default", "a6p3h3"]:
        runs = []
        for tls in modes:
            if args.workdir:
                d = Path(args.workdir) / (name + ("-tls" if tls else ""))
                d.mkdir(parents=True, exist_ok=True)
                runs.append(run(name, args, d, tls))
            else:
                with tempfile.TemporaryDirectory(prefix="hf-cscale-") as d:
                    runs.append(run(name, args, Path(d), tls))
            if args.baseline and not tls:  # the older checkout's figures beside these (plain TCP)
                runs[-1]["baseline"] = baseline(args, name)
            print(json.dumps(runs[-1]), flush=True)
        if len(runs) == 2:
            print(json.dumps(compare_tls(*runs)), flush=True)
    return 0


def baseline(args: argparse.Namespace, name: str) -> dict:
    """The same bench of an older checkout (``--baseline DIR``) on fabric ``name``: its JSON line."""
    import subprocess

    root = Path(args.baseline).resolve()
    cmd = [sys.executable, str(root / "bench" / "control_scale.py"), "--fabric", name,
           "--controllers", str(args.controllers), "--emulators", str(args.emulators),
           "--lldp-interval", str(args.lldp_interval), "--poll-interval", str(args.poll_interval),
           "--pauses", "0", "--no-restart", "--window", "1", "--timeout", str(args.timeout)]
    if args.artifact:
        cmd.append("--artifact")
    if not args.deadlock_check:
        cmd.append("--no-deadlock-check")
    got = subprocess.run(cmd, capture_output=True, text=True, cwd=root, timeout=4 * args.timeout)
    lines = [ln for ln in got.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        return {"root": str(root), "error": (got.stderr or got.stdout)[-500:]}
    old = json.loads(lines[-1])
    return {"root": str(root), "connect_to_confirmed_s": old.get("connect_to_confirmed_s"),
            "rules": old.get("rules"), "reroute": old.get("reroute"), "failures": old.get("failures")}


def compare_tls(tcp: dict, tls: dict) -> dict:
    """Plain TCP and TLS runs of one fabric side by side: bring-up and PAUSE p50/p99, ratios, the 20 % target."""
    def pick(r: dict, key: str) -> float | None:
        if key == "steady_cpu_share":  # the controller's, LLDP and polling running
            return sum((r.get("controller") or {}).get(key) or []) or None
        return (r.get("pause") or {}).get(key[6:]) if key.startswith("pause_") else r.get(key)

    out: dict = {"bench": "control_scale_tls", "fabric": tcp.get("fabric"), "switches": tcp.get("switches"),
                 "target_ratio": TLS_RATIO}
    for key in ("connect_to_confirmed_s", "bringup_controller_cpu_s", "bringup_controller_hub_cpu_s", "bringup_harness_cpu_s",
                "bringup_harness_cpu_after_start_s", "steady_cpu_share", "steady_harness_cpu_share", "pause_p50_ms",
                "pause_p99_ms", "pause_switch_p50_ms", "pause_beyond_switch_p50_ms", "pause_controller_p50_ms",
                "pause_controller_p99_ms", "pause_controller_cpu_share", "pause_harness_cpu_share"):
        a, b = pick(tcp, key), pick(tls, key)
        ratio = round(b / a, 3) if a and b is not None else None
        out[key] = {"tcp": a, "tls": b, "ratio": ratio}
        if key in ("connect_to_confirmed_s", "pause_p50_ms", "pause_p99_ms"):
            out[key]["met"] = ratio is not None and ratio <= TLS_RATIO
    out["peak_rss_mb"] = {"tcp": (tcp.get("controller") or {}).get("peak_rss_mb"),
                          "tls": (tls.get("controller") or {}).get("peak_rss_mb")}
    out["load_avg_1m"] = {"tcp": tcp.get("load_avg_1m"), "tls": tls.get("load_avg_1m")}
    return out


if __name__ == "__main__":
    sys.exit(main())
