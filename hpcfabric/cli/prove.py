"""``hpcfabric prove FILE``: delivery and deadlock freedom under any set of paused ports
(:func:`hpcfabric.verify.proof.prove`; docs/routing.md).

:func:`add_parser` holds the options, :func:`run` compiles (:func:`~hpcfabric.cli.common.compiled_from_args`)
and proves, :func:`print_verdict` writes the text form (``--json``: the report as JSON). Exit 0 when proven,
1 when not.
"""

from __future__ import annotations

import argparse
from typing import Any

from hpcfabric.cli.common import add_addressing_options, add_policy_options, command, compiled_from_args, emit


def add_parser(sub: Any) -> None:
    p = command(sub, "prove", run, "prove delivery and deadlock freedom under any set of paused ports "
                "(per-destination decisions; docs/routing.md)")
    add_addressing_options(p)
    add_policy_options(p)
    p.add_argument("--fallback", choices=("sweep", "symmetric", "none"), default="sweep",
                   help="when the union fails, also check single paused ports (default sweep) and report both")
    p.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args: argparse.Namespace) -> int:
    from hpcfabric.verify.proof import prove

    built = compiled_from_args(args)
    rep = prove(built.compiled, fallback=None if args.fallback == "none" else args.fallback)
    if args.json:
        emit({"addressing": built.plan.mode, "compile_seconds": round(built.seconds, 3), **rep.as_dict()})
    else:
        print_verdict(args.file, rep, built.seconds)
    return 0 if rep.ok else 1


def print_verdict(path: str, rep: Any, compile_s: float) -> None:
    """One line (ok or FAILED), then up to five failures and the fallback's verdict."""
    what = (f"{rep.switches} switches, {rep.hosts} hosts, {rep.routing} routing, CoS {rep.cos or 'off'}: "
            f"{rep.pausable_ports} pausable ports")
    if rep.ok:
        print(f"{path}: ok: {what}; every host pair delivered and {len(rep.classes_used)} class(es) of "
              f"{rep.channels} channels acyclic under any set of paused ports (compile {compile_s:.2f} s, "
              f"proof {rep.seconds:.2f} s)")
        return
    bad = ", ".join(f"{n} {k}" for k, n in {**rep.undelivered, **{f"probe {k}": n for k, n in
                                                                  rep.probe_failures.items()}}.items())
    print(f"{path}: FAILED: {what}; union of every pause state: "
          f"{'delivered' if rep.delivered else 'not delivered (' + (bad or f'{rep.overlaps} overlaps') + ')'}, "
          f"{'acyclic' if rep.acyclic else 'dependency cycle'}")
    for f in rep.failures[:5]:
        print("  " + (" -> ".join(f["cycle"]) if "cycle" in f else f"{f['kind']}: {f['destination']}: "
                      + " -> ".join(f["walk"])))
    if rep.fallback is not None:
        print(f"  single paused ports ({rep.fallback['method']}): {rep.fallback['verdict']}")
