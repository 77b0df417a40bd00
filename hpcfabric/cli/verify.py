"""``hpcfabric verify FILE``: walk a frame between every pair of hosts through the compiled rules (and, with
``--routing``, ``--paused`` or ``--cos``, check the channel dependency graph)."""

from __future__ import annotations

import argparse
from typing import Any

from hpcfabric.cli.common import add_addressing_options, add_policy_options, command, compiled_from_args, emit
from hpcfabric.errors import ConfigError


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
    from hpcfabric.verify.allpairs import verify

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
        from hpcfabric.verify.cdg import check_deadlock_freedom

        cdg = check_deadlock_freedom(compiled, "single" if args.paused == "all" else paused)
        data.update(
            routing=compiled.routing,
            cos=compiled.cos,
            cos_levels=compiled.cos_levels,
            cdg_acyclic=cdg.acyclic,
            cdg_cycle=list(cdg.cycle) if cdg.cycle else None,
            cdg_per_cos={k: (list(v) if v else None) for k, v in cdg.per_cos.items()},
            cdg_channels=cdg.channels,
            cdg_dependencies=cdg.dependencies,
            scenarios=cdg.scenarios,
            scenario_failures=[dict(f) for f in cdg.scenario_failures],
            failed_scenarios=cdg.failed_scenarios,
            cdg_seconds=round(cdg.seconds, 3),
        )
        ok = ok and cdg.ok
        data["ok"] = ok
    emit(data)
    return 0 if ok else 1
