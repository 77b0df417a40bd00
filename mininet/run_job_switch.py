#!/usr/bin/env python3
"""Job switch under live traffic: a new traffic matrix reloaded into a running controller, frames counted.

    .venv/bin/python mininet/run_job_switch.py                       # demo Dragonfly and FB 4x4, valiant
    .venv/bin/python mininet/run_job_switch.py --fabrics df --routing conditional --jobs adv,stencil

For every fabric (``df``: configs/dragonfly-a4-p2-h2.conf, ``fb``: configs/fb-2d-4x4.conf, or a
controller ``.conf``): write the jobs' traffic matrices (``--jobs``, patterns of
``hpcfabric.topology.traffic`` or matrix files), start the controller with ``[hpcfabric] traffic`` =
the first job and ``--routing`` (default ``valiant``: every remote frame goes through its host's
intermediate entry, so the entries a job switch changes carry traffic), build the Mininet net, DMP,
then start a UDP generator on every host (``traffic.py``: Poisson, sequence-numbered, to every other
host) and, 2 s in, switch to each next job: the matrix file is replaced and the controller gets SIGHUP
(``job_switch.switch_job``). Measured per switch: ``table_diff`` (entries that differ, from the
controller's status), ``expected_diff`` (the same computed here from the two configs),
``flow_mods_sent`` (what the controller sent for it), ``rules_total``, ``apply_s``; per fabric the
frames sent and lost across the run (``lost`` must be 0) plus a 10-ms ping across the switches.

The last stdout line is one JSON object; exit 0 if every check passed (flow-mods sent == table diff,
table diff < rules total, group-mods sent <= fast-failover groups differing -- fewer when a switch still
holds a group from an earlier job --, no frame lost), 1 if one failed, 2 on bad arguments or environment.
The steps are in ``job_switch.py``; bring-up from ``controller_proc``, ``fabric_topo``, ``dmp_hosts``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # a checkout without the package installed (mininet/ itself is the script's folder)
    sys.path.insert(0, str(ROOT))

from controller_proc import Controller, free_port  # noqa: E402  (mininet/, by path)
from fabric_setup import FABRICS, fabric_config, fabric_labels, write_conf  # noqa: E402
from fabric_up import Run, fabric_up, run_main  # noqa: E402
from job_switch import Generators, expected_diff, job_settings, switch_job, write_matrices  # noqa: E402
from reachability import SteadyPing  # noqa: E402
from runkit import Progress, Report, UsageError  # noqa: E402

from hpcfabric.config import load_config  # noqa: E402
from hpcfabric.errors import HpcfabricError  # noqa: E402

PROG = "run_job_switch"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="run_job_switch.py", description=__doc__.splitlines()[0])
    ap.add_argument("--fabrics", default="df,fb", help=f"comma list of {', '.join(FABRICS)} or controller .conf files")
    ap.add_argument("--routing", default="valiant", choices=("valiant", "conditional"))
    ap.add_argument("--jobs", default="adversarial,transpose,stencil",
                    help="comma list of traffic patterns (stencil:width=N for a parameter) or matrix files: the "
                    "controller starts with the first, then switches to each next one under traffic")
    ap.add_argument("--pps", type=float, default=20.0, help="UDP frames per second per host (default 20)")
    ap.add_argument("--gap", type=float, default=3.0, help="seconds of traffic before, between and after switches")
    ap.add_argument("--prefix", default="js", help="Mininet node name prefix (default js)")
    args = ap.parse_args(argv)
    try:
        args.fabric_list = fabric_labels(args.fabrics)
    except UsageError as err:
        ap.error(str(err))
    args.job_list = [x.strip() for x in args.jobs.split(",") if x.strip()]
    if len(args.job_list) < 2:
        ap.error("--jobs: give at least two jobs (the first is loaded at start, the others are switched to)")
    if not 0 < args.pps <= 500 or args.gap < 1:
        ap.error("--pps must be in (0, 500] and --gap >= 1")
    return args


def run_fabric(label: str, args: argparse.Namespace, work: Path, report: Report, log: Progress) -> None:
    name, base = fabric_config(label)
    tmp = work / name
    tmp.mkdir(parents=True)
    fabric = load_config(base, compile=False).fabric
    try:
        jobs = write_matrices(fabric, args.job_list, tmp)
    except HpcfabricError as err:
        raise UsageError(f"--jobs on {name}: {err}") from None
    traffic = tmp / "traffic.csv"
    shutil.copyfile(jobs[0], traffic)
    port, status = free_port(), tmp / "status.json"
    conf = write_conf(tmp / f"{args.routing}.conf", job_settings(args.routing, traffic), base, port=port, status=status)
    # the same config per job, for the expected table differences
    confs = []
    for i, job in enumerate(jobs):
        (tmp / f"j{i}").mkdir()
        confs.append(write_conf(tmp / f"j{i}" / f"{args.routing}.conf", job_settings(args.routing, job), base,
                                port=port, status=status))
    try:
        cfg = load_config(conf)
    except HpcfabricError as err:
        raise UsageError(f"{name}: {err}") from None
    with fabric_up(cfg.fabric, cfg.plan, [Controller(conf, status, port, tmp / "controller.log")], prefix=args.prefix,
                   progress=log) as up:
        net, ctl, st = up.net, up.controllers[0], up.status
        log(f"{name}: {args.routing}, job {args.job_list[0]}: {st['rules_installed']} rules on "
            f"{len(cfg.fabric.switches)} switches")
        hosts = [h.name for h in cfg.fabric.hosts]
        seconds = args.gap * len(jobs)
        gen = Generators(net, cfg.fabric, args.pps, seconds, tmp / "gen")
        ping = SteadyPing(net, hosts[0], hosts[-1], 0.01, deadline=int(seconds) + 5)
        gen.wait_started()
        switches = []
        for i in range(1, len(jobs)):
            time.sleep(max(0.0, gen.start + args.gap * i - time.monotonic()))
            last = switch_job(ctl, traffic, jobs[i])
            want, total = expected_diff(confs[i - 1], confs[i])
            rec = {"from": args.job_list[i - 1], "to": args.job_list[i], "table_diff": last["table_diff"],
                   "expected_diff": sum(want.values()), "flow_mods_sent": last["flow_mods_sent"],
                   "rules_total": last["rules_total"], "switches_changed": len(want),
                   "group_diff": last.get("group_diff"), "group_mods_sent": last.get("group_mods_sent"),
                   "switches_resynced": len(last["resynced"]), "apply_s": last["apply_s"]}
            switches.append(rec)
            log(f"  {rec['from']} -> {rec['to']}: {rec['flow_mods_sent']} flow-mods sent, table diff "
                f"{rec['table_diff']} (expected {rec['expected_diff']}) of {rec['rules_total']} entries, "
                f"{rec['group_mods_sent']} group-mods (groups differing {rec['group_diff']}), "
                f"{rec['switches_resynced']} switches, applied in {rec['apply_s']} s")
            if not (rec["flow_mods_sent"] == rec["table_diff"] == rec["expected_diff"]):
                report.fail(f"{name} {rec['from']}->{rec['to']}: flow-mods sent {rec['flow_mods_sent']}, table diff "
                            f"{rec['table_diff']}, expected {rec['expected_diff']}")
            if rec["group_mods_sent"] > rec["group_diff"]:  # fewer: a group still on the switch from an earlier job
                report.fail(f"{name} {rec['from']}->{rec['to']}: group-mods sent {rec['group_mods_sent']} > groups "
                            f"differing {rec['group_diff']}")
            if rec["table_diff"] >= rec["rules_total"]:  # 0 is right when the model keeps both jobs' tables
                report.fail(f"{name} {rec['from']}->{rec['to']}: table diff {rec['table_diff']} not below "
                            f"{rec['rules_total']}")
        frames = gen.totals()
        pinged = ping.stop()
        log(f"  traffic: {frames['sent']} frames sent by {frames['hosts']} hosts, {frames['lost']} lost; ping "
            f"{pinged['sent']} sent, {pinged['lost']} lost")
        report.update(**{f"{name}_switches": switches, f"{name}_frames": frames,
                         f"{name}_ping": {k: pinged[k] for k in ("sent", "received", "lost", "longest_gap")}})
        if frames["lost"] or frames["send_errors"] or pinged["lost"]:
            report.fail(f"{name}: frames lost across the job switches: {frames['lost']} of {frames['sent']} UDP, "
                        f"{pinged['lost']} pings")
        if frames["sent"] == 0:
            report.fail(f"{name}: no traffic was sent")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    def body(run: Run) -> None:
        for label in args.fabric_list:
            run_fabric(label, args, run.work, run.report, run.progress)

    return run_main(PROG, body, routing=args.routing, jobs=args.job_list)


if __name__ == "__main__":
    sys.exit(main())
