"""``hpcfabric sweep FILE``: every single paused port -- delivery of every host pair and the union CDG
(docs/routing.md); ``--symmetric`` walks one access switch per orbit, ``--up-down`` proves fat-trees from a
per-switch up*/down* invariant."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from hpcfabric.cli.common import add_addressing_options, add_policy_options, command, compiled_from_args, emit, load
from hpcfabric.errors import ConfigError


def add_parser(sub: Any) -> None:
    p = command(sub, "sweep", run, "every single paused port: delivery of every host pair and the union CDG")
    add_addressing_options(p)
    add_policy_options(p)
    p.add_argument("--symmetric", action="store_true",
                   help="walk to one access switch per orbit of the symmetries the rules are checked to have "
                   "(hpcfabric.verify.symmetry; what makes ~300k-host fabrics feasible)")
    p.add_argument("--up-down", action="store_true",
                   help="fat-tree / folded Clos: prove delivery and deadlock freedom under any set of paused "
                   "ports from a per-switch up*/down* invariant (hpcfabric.verify.updown; no pair walk)")
    p.add_argument("--progress", action="store_true", help="progress lines on stderr")


def run(args: argparse.Namespace) -> int:
    fabric = load(args.file)
    if args.up_down and args.symmetric:
        raise ConfigError("--up-down and --symmetric are two different methods; give one", source="<arguments>")
    if args.up_down:
        from hpcfabric.rules.fabrics.updown import UP_DOWN_KINDS

        if fabric.kind not in UP_DOWN_KINDS:
            raise ConfigError(f"--up-down applies to fat-trees and folded Clos, not to a {fabric.kind}; "
                              f"use --symmetric or the full sweep", source=args.file)
    built = compiled_from_args(args, fabric)
    compiled, mode = built.compiled, built.plan.mode
    t0 = time.perf_counter()

    def progress(*parts: Any) -> None:
        if args.progress:
            *what, i, n, _ = parts
            print(f"# {' '.join(map(str, what))} {i}/{n} {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)

    if args.up_down:
        from hpcfabric.verify.updown import check_up_down

        ud = check_up_down(compiled, progress=lambda i, n, t: progress("switches", i, n, t))
        data = {"fabric": fabric.name, "addressing": mode, "routing": compiled.routing, "cos": compiled.cos,
                "cos_levels": compiled.cos_levels, **ud.as_dict()}
    elif args.symmetric:
        from hpcfabric.verify.symmetry import symmetric_sweep

        rep = symmetric_sweep(compiled, progress=progress)
        data = {"fabric": fabric.name, "addressing": mode, **rep.as_dict()}
    else:
        from hpcfabric.verify.sweep import sweep_single_paused

        full = sweep_single_paused(compiled, progress=progress)
        data = {"addressing": mode, **full.as_dict()}
    emit(data)
    return 0 if data["ok"] else 1
