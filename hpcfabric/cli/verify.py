"""``hpcfabric verify FILE``: walk a frame between every pair of hosts through the compiled rules (and, with
``--routing``, ``--paused`` or ``--cos``, check the channel dependency graph)."""

from __future__ import annotations

import argparse
from typing import Any

from hpcfabric.cli.common import add_addressing_options, add_policy_options, command, compiled_from_args, emit
from hpcfabric.errors import ConfigError

#: the report's keys -> the CDG check's (:meth:`hpcfabric.verify.oracle.cdg.CdgReport.as_dict`)
CDG_KEYS = {"cdg_acyclic": "cdg_acyclic", "cdg_cycle": "cdg_cycle", "cdg_per_cos": "cdg_per_cos",
            "cdg_channels": "channels", "cdg_dependencies": "dependencies", "scenarios": "scenarios",
            "scenario_failures": "scenario_failures", "failed_scenarios": "failed_scenarios", "cdg_seconds": "seconds"}


def add_parser(sub: Any) -> None:
    p = command(sub, "verify", run, "walk a frame between every pair of hosts through the compiled rules")
    add_addressing_options(p)
    p.add_argument("--sample", type=int, default=None, metavar="N", help="verify N random destinations only")
    p.add_argument(
        "--ingress", choices=("auto", "per-port", "merged"), default="auto",
        help="decision rows per fabric ingress port (a frame sent back out of its ingress port is dropped, as "
        "on a switch) or merged where no rule tells ports apart (much faster on big fabrics; the report then "
        "says ingress_exact: false); auto: per-port up to 4,096 fabric ports",
    )
    add_policy_options(p)
    p.add_argument(
        "--paused", default=None, metavar="all|SWITCH:PORT",
        help="also check with one port paused (its PORT_STATE entry flipped), or 'all': every port alone; "
        "with --routing, --paused or --cos the channel dependency graph is checked too (docs/routing.md)",
    )


def run(args: argparse.Namespace) -> int:
    from hpcfabric.verify.oracle.allpairs import verify

    built = compiled_from_args(args)
    fabric, compiled = built.fabric, built.compiled
    paused = []
    if args.paused not in (None, "all"):
        sw, _, port = args.paused.rpartition(":")
        if not (port.isdigit() and fabric.has_switch(sw) and fabric.peer(sw, int(port)) is not None):
            raise ConfigError(f"--paused {args.paused!r}: expected all or SWITCH:PORT of a port in {fabric.name}",
                              field="--paused")
        paused = [(sw, int(port))]
    per_port = {"auto": None, "per-port": True, "merged": False}[args.ingress]
    report = verify(compiled, paused, sample=args.sample, per_port=per_port)
    data = {"fabric": fabric.name, "addressing": built.plan.mode, **report.as_dict()}
    ok = report.ok
    if args.routing is not None or args.paused is not None or args.cos != "default":
        from hpcfabric.verify.oracle.cdg import check_deadlock_freedom

        cdg = check_deadlock_freedom(compiled, "single" if args.paused == "all" else paused)
        report_cdg = cdg.as_dict()
        data.update(routing=compiled.routing, cos=compiled.cos, cos_levels=compiled.cos_levels,
                    **{key: report_cdg[name] for key, name in CDG_KEYS.items()})
        ok = ok and cdg.ok
        data["ok"] = ok
    emit(data)
    return 0 if ok else 1
