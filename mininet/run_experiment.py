#!/usr/bin/env python3
"""Adaptive-routing experiments on emulated lossless fabrics: uniform vs adversarial traffic per routing policy.

    .venv/bin/python mininet/run_experiment.py            # full: see --help for the plan
    .venv/bin/python mininet/run_experiment.py --quick    # <= 10 minutes

For every fabric (default Dragonfly a=4 p=2 h=2 and 2-D Flattened Butterfly
4x4) and routing policy (``minimal``, ``conditional``; ``conditional`` in the
switch-local PAUSE mode too where the controller supports it), the runner
starts the controller and a fresh Mininet net, checks DMP and all-pairs
reachability, shapes every fabric link (``lossless.shape_links``: htb
``--link-mbit`` + a byte FIFO), and then for every traffic pattern
(``hpcfabric.topology.patterns``: UN, ADV) and repeat:

1. starts the PAUSE emulator (``lossless.py``: XOFF into the upstream port
   when a link's queue passes ``--xoff`` bytes, XON below ``--xon``);
2. starts one generator per host (``traffic.py``: Poisson UDP at
   ``load x link rate`` per host, fixed frame size, a common start time);
3. collects the measured window: aggregate delivered throughput,
   per-source throughput, loss, one-way latency (p50/p99), PAUSE frames sent
   by the emulator, controller flips and frames through table ALTERNATIVE.

Writes ``results.json``, PNG plots and ``report.md`` to ``--out`` and ends
with one JSON line: ``df_adv_ratio``, ``df_un_ratio``, ``fb_adv_ratio``
(conditional / minimal aggregate throughput, means over the repeats, measured
in this run), the UN loss of both policies, and where to find the results.
Exit 0 when the run completed (the ratios are reported, not judged: see
``--check``), 1 on a failed step, 2 on bad arguments or environment.

The steps live next to this file: bring-up from ``controller_proc``, ``fabric_topo``,
``dmp_hosts``, ``reachability``; one measured run in ``exp_traffic``; table, ratios, plots and
report in ``exp_report`` (docs/mininet.md, "The step library").
"""


from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # a checkout without the package installed (mininet/ itself is the script's folder)
    sys.path.insert(0, str(ROOT))

import lossless  # noqa: E402  (mininet/lossless.py, by path)
from controller_proc import Controller, free_port  # noqa: E402
from exp_report import check_targets, plots, ratios, report_md, table  # noqa: E402
from exp_traffic import SWITCH_MODE_MAX_IDLE_MS, Plan, check_send_buffer, measure, set_max_idle  # noqa: E402
from exp_workload import PATTERN_NAMES, POLICIES, Job, bring_ups, pattern_dests  # noqa: E402
from fabric_setup import FABRICS, fabric_config, fabric_labels, write_conf  # noqa: E402
from fabric_up import Run, fabric_up, run_main  # noqa: E402
from reachability import reachable_all_pairs  # noqa: E402
from runkit import CheckFailed, Progress, UsageError  # noqa: E402

from hpcfabric.config import load_config  # noqa: E402
from hpcfabric.errors import HpcfabricError  # noqa: E402

PROG = "run_experiment"



def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="run_experiment.py", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one repeat, short windows (<= 10 minutes)")
    ap.add_argument("--fabrics", default="df,fb", help=f"comma list of {', '.join(FABRICS)}")
    ap.add_argument("--policies", default=None,
                    help="comma list: minimal, valiant, conditional, conditional-switch (conditional with the "
                         "switch-local PAUSE reaction, [hpcfabric] pause_reaction = switch), conditional-wl / "
                         "valiant-wl (intermediates chosen for each pattern's traffic matrix, [hpcfabric] traffic, "
                         "loaded by the diff-only reload before the pattern runs); default minimal, valiant, "
                         "valiant-wl, conditional, conditional-wl, conditional-switch (quick: without "
                         "conditional-switch)")
    ap.add_argument("--switch-local-on", default=None,
                    help="fabrics that also run conditional-switch (default: all; with --quick: none)")
    ap.add_argument("--patterns", default=None,
                    help="comma list: adv, un, stencil (nearest neighbour, one grid row per group), transpose, "
                         "bitrev (hpcfabric.topology.traffic); default adv, un, stencil, transpose (quick: without un)")
    ap.add_argument("--repeats", type=int, default=None, help="runs per (fabric, policy, pattern) (default 3; quick 1)")
    ap.add_argument("--measure", type=float, default=None, help="measured window, s (default 20; quick 3)")
    ap.add_argument("--warmup", type=float, default=None, help="warm-up before the window, s (default 3; quick 1.5)")
    ap.add_argument("--drain", type=float, default=None,
                    help="load kept on after the window while it drains, s (default 1.5; quick 0.5)")
    ap.add_argument("--link-mbit", type=float, default=1.0, help="fabric link rate, Mbit/s (default 1)")
    ap.add_argument("--queue-bytes", type=int, default=30000, help="byte FIFO per fabric link direction")
    ap.add_argument("--size", type=int, default=1400, help="UDP payload bytes per frame (fewer frames per bit: less OVS CPU)")
    ap.add_argument("--load-adv", type=float, default=0.5, help="offered load per host under ADV, x link rate")
    ap.add_argument("--load-un", type=float, default=0.3, help="offered load per host under UN, x link rate")
    ap.add_argument("--load-app", type=float, default=0.5,
                    help="offered load per sending host under stencil/transpose/bitrev, x link rate")
    ap.add_argument("--xoff", type=int, default=5000, help="emulated receiver: XOFF at this queue backlog, bytes")
    ap.add_argument("--xon", type=int, default=1000, help="emulated receiver: XON below this backlog, bytes")
    ap.add_argument("--refresh-ms", type=float, default=100.0, help="XOFF repeat interval while congested")
    ap.add_argument("--poll-ms", type=float, default=10.0, help="backlog poll interval")
    ap.add_argument("--quanta", type=int, default=400, help="XOFF quanta (512 bit times at the link rate)")
    ap.add_argument("--pause-hold-ms", type=float, default=None,
                    help="override the controller's [hpcfabric] pause_hold_ms (minimum time a flipped port stays flipped; "
                         "default: the config's, 50 ms)")
    ap.add_argument("--spread", action="store_true",
                    help="congestion spreading: a switch with a congested output also pauses the fabric links into it "
                         "(lossless.py --spread; default: a congested link pauses only its own sender)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--prefix", default="", help="bridge/interface name prefix (next to another net)")
    ap.add_argument("--out", default=None, help="results directory (default results/experiment-<time>)")
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 unless df_adv_ratio >= 2, df_un_ratio >= 0.9 and fb_adv_ratio > 1 (when measured)")
    args = ap.parse_args(argv)
    try:
        args.plan = make_plan(args)
    except UsageError as err:
        ap.error(str(err))
    return args


def make_plan(args: argparse.Namespace) -> Plan:
    fabrics = tuple(fabric_labels(args.fabrics))
    default = "minimal,valiant,valiant-wl,conditional,conditional-wl" + ("" if args.quick else ",conditional-switch")
    policies = tuple(x.strip() for x in (args.policies or default).split(",") if x.strip())
    bad = [p for p in policies if p not in POLICIES]
    if bad or not policies:
        raise UsageError(f"--policies: unknown {', '.join(bad) or '(empty)'}; expected {', '.join(POLICIES)}")
    patterns = tuple(x.strip().lower() for x in (args.patterns or ("adv,stencil,transpose" if args.quick else
                                                                   "adv,un,stencil,transpose")).split(",") if x.strip())
    bad = [p for p in patterns if p not in PATTERN_NAMES]
    if bad or not patterns:
        raise UsageError(f"--patterns: unknown {', '.join(bad) or '(empty)'}; expected adv, un, stencil, transpose, "
                         "bitrev")
    patterns = tuple(PATTERN_NAMES[p] for p in patterns)
    repeats = args.repeats if args.repeats is not None else (1 if args.quick else 3)
    measure = args.measure if args.measure is not None else (3.0 if args.quick else 20.0)
    drain = args.drain if args.drain is not None else (0.5 if args.quick else 1.5)
    warmup = args.warmup if args.warmup is not None else (1.5 if args.quick else 3.0)
    for name, value, low in (("--repeats", repeats, 1), ("--measure", measure, 1), ("--link-mbit", args.link_mbit, 0.01),
                             ("--size", args.size, 64), ("--queue-bytes", args.queue_bytes, 2 * args.size)):
        if value < low:
            raise UsageError(f"{name} must be >= {low}, got {value}")
    if not 0 < args.load_adv <= 4 or not 0 < args.load_un <= 4 or not 0 < args.load_app <= 4:
        raise UsageError("--load-adv/--load-un/--load-app must be in (0, 4] (x link rate per host)")
    if not 0 <= args.xon < args.xoff:
        raise UsageError(f"need 0 <= --xon ({args.xon}) < --xoff ({args.xoff})")
    if args.xoff >= args.queue_bytes:
        raise UsageError(f"--xoff ({args.xoff}) must be below --queue-bytes ({args.queue_bytes})")
    if not 0 < args.quanta <= 0xFFFF:
        raise UsageError(f"--quanta must be 1..65535, got {args.quanta}")
    if args.switch_local_on is None:
        switch_on = () if args.quick else fabrics
    else:
        switch_on = tuple(x.strip() for x in args.switch_local_on.split(",") if x.strip())
    return Plan(fabrics, policies, switch_on, patterns, repeats, warmup, measure, drain, args.link_mbit, args.queue_bytes,
                args.size, {"adversarial": args.load_adv, "uniform": args.load_un,
                            **{p: args.load_app for p in patterns if p not in ("adversarial", "uniform")}},
                args.xoff, args.xon,
                args.refresh_ms, args.poll_ms, args.quanta, args.seed, args.spread, args.pause_hold_ms)



def policy_settings(policy: str, link_mbit: float, pause_hold_ms: float | None = None,
                    traffic: Path | None = None) -> dict[str, dict[str, str]]:
    """What the runner sets in the shipped config for ``policy``: the routing, the emulated link speed, SIGHUP-only
    reloads, ``traffic`` (the matrix file of a workload-aware policy), no metrics listener."""
    routing, switch_local, _ = POLICIES[policy]
    hf = {"routing": routing, "reload_poll": "0",  # a job switch is one SIGHUP, never a second reload from the poll
          "link_speed_gbps": repr(link_mbit / 1000)}  # PAUSE quanta are 512 bit times at the emulated rate
    if traffic is not None:
        hf["traffic"] = str(traffic)
    if pause_hold_ms is not None:
        hf["pause_hold_ms"] = f"{pause_hold_ms:g}"
    settings = {"hpcfabric": hf, "metrics": {"listen": ""}}  # one run at a time must not fight over a metrics port
    if switch_local:  # fast-failover groups and the switch-local reaction do not combine
        hf["pause_reaction"] = "switch"
        settings["failover"] = {"fast_failover": "off"}
    return settings


def run_policy(label: str, policy: str, plan: Plan, prefix: str, work: Path, progress: Progress,
               variants: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """Controller + net for one (fabric, policy), then every pattern x variant x repeat. ``variants``: the policies
    measured on this bring-up (default ``(policy,)``): a routing's static and workload-aware (``-wl``) variants
    share it, the controller switched between them by the diff-only reload. Returns one record per run."""
    variants = variants or (policy,)
    label, cfg_file = fabric_config(label)
    tmp = work / f"{label}-{policy}"
    tmp.mkdir(parents=True, exist_ok=True)
    port = free_port()
    status_file = tmp / "status.json"
    traffic = tmp / "traffic.csv" if any(POLICIES[v][2] for v in variants) else None
    job = Job(traffic, tmp)
    if POLICIES[variants[0]][2]:  # start with the first pattern's matrix
        job.start(load_config(cfg_file, compile=False).fabric, plan.patterns[0])
    settings = policy_settings(policy, plan.link_mbit, plan.pause_hold_ms, job.current_file)
    conf = write_conf(tmp / f"{policy}.conf", settings, cfg_file, port=port, status=status_file)
    try:
        cfg = load_config(conf)
    except HpcfabricError as err:
        raise UsageError(f"{policy} on {label}: {err}") from None
    fabric = cfg.fabric
    controller = Controller(conf, status_file, port, tmp / "controller.log")
    records: list[dict[str, Any]] = []
    max_idle = set_max_idle(SWITCH_MODE_MAX_IDLE_MS) if policy == "conditional-switch" else None
    try:
        with fabric_up(fabric, cfg.plan, [controller], prefix=prefix, progress=progress) as up:
            net, status = up.net, up.status
            ping = reachable_all_pairs(net, fabric)
            progress(f"{label}/{policy}: {status['rules_installed']} rules, DMP {len(fabric.hosts)}/{len(fabric.hosts)}, "
                     f"all-pairs ping: {ping['pairs']} pairs reachable")
            links = lossless.fabric_directions(fabric, prefix)
            check_send_buffer(plan, len(links))
            lossless.shape_links(links, lossless.LinkShape(plan.link_mbit, plan.queue_bytes))
            links_file = tmp / "links.json"
            links_file.write_text(json.dumps([l.__dict__ for l in links]))
            for pat, variant, rep in ((p, v, r) for p in plan.patterns for v in variants for r in range(plan.repeats)):
                dests = pattern_dests(fabric, pat)
                pps = plan.load[pat] * plan.link_mbit * 1e6 / (plan.size * 8)
                moved = job.use(controller, conf, fabric, pat if POLICIES[variant][2] else None) if rep == 0 else {}
                if moved.get("reload_flow_mods") is not None:
                    progress(f"  {label} {variant}: {moved['reload_job']}: reload sent {moved['reload_flow_mods']} "
                             f"flow-mods (table diff {moved['reload_table_diff']} of {moved['reload_rules_total']}) in "
                             f"{moved['reload_apply_s']} s")
                seed = plan.seed + rep
                what = {"fabric": label, "topology": fabric.name, "policy": variant, "pattern": pat, "repeat": rep,
                        "seed": seed, "load": plan.load[pat], "pps_per_host": round(pps, 3)}
                rec = measure(net, fabric, controller, what, dests, pps, plan, seed, tmp / f"{pat}-{variant}",
                              links_file, links)
                rec.update(moved)
                records.append(rec)
                progress(f"  {label} {variant:18s} {pat:11s} #{rep}: {rec['throughput_mbps']:.2f} of "
                         f"{rec['offered_mbps']:.2f} Mbit/s, loss {rec['loss']:.1%}, p50 {rec['latency_ms']['p50']} ms, "
                         f"XOFF {rec['pause_xoff_frames']}, flips {rec['controller_flips']}, "
                         f"diverted {rec['alternative_frames']}")
        return records
    finally:
        if max_idle is not None:
            set_max_idle(max_idle or None)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return run_main(PROG, lambda run: experiment(args, run), needs_tc=True, errors=(lossless.LosslessError,),
                    passed=False)


def experiment(args: argparse.Namespace, run: Run) -> None:
    """Every (fabric, policy) bring-up and its runs; results, plots and report.md in ``--out``."""
    plan, progress, report = args.plan, run.progress, run.report
    summary = report.summary
    records: list[dict[str, Any]] = []
    out = Path(args.out) if args.out else ROOT / "results" / time.strftime("experiment-%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    progress(f"plan: fabrics {','.join(plan.fabrics)}, policies {','.join(plan.policies)}, patterns "
             f"{','.join(plan.patterns)}, {plan.repeats} repeat(s) x {plan.measure:g} s; links {plan.link_mbit:g} Mbit/s; "
             f"results in {out}")
    for label in plan.fabrics:
        for policy, variants in bring_ups(plan.policies):
            if policy == "conditional-switch" and label not in plan.switch_local_on:
                continue
            for attempt in (1, 2):  # Mininet's shell plumbing fails now and then (e.g. a UTF-8 read split)
                try:
                    records += run_policy(label, policy, plan, args.prefix, run.work, progress, variants)
                    break
                except (UsageError, KeyboardInterrupt):
                    raise
                except Exception as err:  # noqa: BLE001 - one retry from a fresh net, then report
                    progress(f"{label}/{policy}: attempt {attempt} failed: {type(err).__name__}: {err}")
                    if attempt == 2:
                        report.fail(f"{label}/{policy}: {type(err).__name__}: {err}")
    if not records:
        raise CheckFailed("no run completed")
    rows = table(records)
    summary.update(ratios(rows))
    (out / "results.json").write_text(json.dumps({"plan": plan.__dict__, "rows": rows, "runs": records}, indent=1))
    files = [] if args.no_plots else plots(records, rows, out)
    (out / "report.md").write_text(report_md(rows, summary, plan, files))
    summary["results"] = str(out)
    if args.check:
        for failure in check_targets(summary):
            report.fail(failure)


if __name__ == "__main__":
    sys.exit(main())
