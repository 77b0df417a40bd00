"""``hpcfabric prove FILE``: delivery and deadlock freedom under any set of paused ports
(:func:`hpcfabric.verify.union.proof.prove`; docs/routing.md). ``hpcfabric prove --config FILE [--fail SWITCH:PORT
| SWITCH ...]``: the tables the controller installs -- with those links and switches out, the repair it would
install (:class:`hpcfabric.repair.plan.Repairer`: compiled for the surviving fabric, proven with its
update order; docs/routing.md "Failures") -- or why none can be proven. ``--up-down``: the up*/down* proof of a
fat-tree or folded Clos (:func:`hpcfabric.verify.updown.check_up_down`).

:func:`add_parser` holds the options, :func:`run` compiles (:func:`~hpcfabric.cli.common.compiled_from_args`)
and proves, :func:`print_verdict` writes the text form (``--json``: the report as JSON). Exit 0 when proven,
1 when not, 2 for a bad file or failure name.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Callable

from hpcfabric.cli.common import add_addressing_options, add_policy_options, command, compiled_from_args, emit, load
from hpcfabric.errors import ConfigError


def add_parser(sub: Any) -> None:
    add_options(command(sub, "prove", run, "prove delivery and deadlock freedom under any set of paused ports "
                        "(per-destination decisions; docs/routing.md); with --config, the controller's tables and, "
                        "with --fail, the repair it would install"))


def add_options(p: argparse.ArgumentParser) -> None:
    """prove's options (shared with the deprecated ``sweep`` alias)."""
    p.set_defaults(file=None)
    p._positionals.title = "positional arguments"  # noqa: SLF001 - argparse has no public way to rename it
    p._actions[-1].nargs = "?"  # noqa: SLF001 - FILE is optional with --config
    p.add_argument("--config", metavar="FILE", help="a controller config: prove what the controller installs "
                   "(its flow control, guards off as at load; instead of a topology FILE)")
    p.add_argument("--fail", action="append", default=[], metavar="SWITCH[:PORT]",
                   help="with --config: a link out (SWITCH:PORT, by either end) or a switch out; repeatable")
    add_addressing_options(p)
    add_policy_options(p)
    p.add_argument("--fallback", choices=("cdg", "none"), default="cdg",
                   help="when the union fails, also run the brute-force CDG oracle over every single paused port "
                   "(default cdg) and report both verdicts")
    p.add_argument("--up-down", action="store_true",
                   help="fat-tree / folded Clos: the per-switch up*/down* proof instead (hpcfabric.verify.updown; "
                   "any set of paused ports, no pair walk; JSON)")
    p.add_argument("--progress", action="store_true", help="progress lines on stderr")
    p.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args: argparse.Namespace) -> int:
    from hpcfabric.verify.union.proof import prove

    if args.config or args.fail:
        return run_config(args)
    if args.file is None:
        raise ConfigError("prove needs a topology FILE or --config FILE", source="hpcfabric prove")
    if args.up_down:
        return run_up_down(args)
    built = compiled_from_args(args)
    rep = prove(built.compiled, fallback=None if args.fallback == "none" else args.fallback,
                progress=progress_printer(args.progress))
    if args.json:
        emit({"addressing": built.plan.mode, "compile_seconds": round(built.seconds, 3), **rep.as_dict()})
    else:
        print_verdict(args.file, rep, built.seconds)
    return 0 if rep.ok else 1


def progress_printer(on: bool) -> Callable[..., None] | None:
    """``--progress``: ``# [what] i/n seconds`` lines on stderr."""
    if not on:
        return None
    t0 = time.perf_counter()

    def progress(*parts: Any) -> None:
        *what, i, n, _ = parts
        print(" ".join(["#", *map(str, what), f"{i}/{n}", f"{time.perf_counter() - t0:.0f} s"]), file=sys.stderr,
              flush=True)

    return progress


def run_up_down(args: argparse.Namespace) -> int:
    """``prove --up-down``: the up*/down* proof of a fat-tree or folded Clos, as JSON (exit 2 for other fabrics)."""
    from hpcfabric.rules.fabrics.updown import UP_DOWN_KINDS
    from hpcfabric.verify.updown import check_up_down

    fabric = load(args.file)
    if fabric.kind not in UP_DOWN_KINDS:
        raise ConfigError(f"--up-down applies to fat-trees and folded Clos, not to a {fabric.kind}; "
                          "use the union proof (prove without --up-down)", source=args.file)
    built = compiled_from_args(args, fabric)
    compiled = built.compiled
    progress = progress_printer(args.progress)
    ud = check_up_down(compiled, progress=None if progress is None else lambda i, n, t: progress("switches", i, n, t))
    emit({"fabric": fabric.name, "addressing": built.plan.mode, "routing": compiled.routing, "cos": compiled.cos,
          "cos_levels": compiled.cos_levels, **ud.as_dict()})
    return 0 if ud.ok else 1


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


def run_config(args: argparse.Namespace) -> int:
    """``prove --config FILE [--fail ...]``: the controller's tables, or its repair for the failures given."""
    from hpcfabric.config import load_config
    from hpcfabric.repair.plan import Repairer
    from hpcfabric.topology.failures import parse_failures

    if not args.config:
        raise ConfigError("--fail needs --config FILE (the controller's tables)", source="hpcfabric prove")
    if args.file is not None:
        raise ConfigError(f"give a topology FILE or --config FILE, not both ({args.file!r} and {args.config!r})",
                          source="hpcfabric prove")
    t0 = time.perf_counter()
    cfg = load_config(args.config, deadlock=False)
    failures = parse_failures(cfg.fabric, args.fail, source="--fail")
    load_s = time.perf_counter() - t0
    rep = Repairer(cfg, prove=True)
    t1 = time.perf_counter()
    base = rep.base().report
    base_s = time.perf_counter() - t1
    plan = rep.plan(failures)
    out = {"config": args.config, "fabric": cfg.fabric.name, "flow_control": cfg.flow_control,
           "failures": failures.as_dict(), "tables": {"proven": base["ok"], **base},
           "repair": plan.as_dict(), "load_seconds": round(load_s, 3), "base_seconds": round(base_s, 3)}
    ff = fast_failover_verdict(cfg, failures, rep) if cfg.fast_failover and failures else None
    if ff is not None:
        out["fast_failover"] = ff
    ok = base["ok"] and (plan.proven or not failures) and (ff is None or ff["proven"])
    if args.json:
        emit({"ok": ok, **out})
    else:
        print_repair(args.config, cfg, failures, base, plan, ff)
    return 0 if ok else 1


def fast_failover_verdict(cfg: Any, failures: Any, rep: Any) -> dict[str, Any]:
    """The fast-failover detours in force between the failure and the repair: the compiled tables with their
    groups, every group taking its first live bucket, proven against the tables in force (incrementally)."""
    from dataclasses import replace

    from hpcfabric.failover.groups import fast_failover_groups
    from hpcfabric.verify.scenarios import apply_down

    compiled = rep.initial
    ff = fast_failover_groups(compiled)
    grouped = replace(compiled, tables={n: replace(t, flows=ff.flows[n]) for n, t in compiled.tables.items()})
    down = [(s, p) for s, ports in failures.dead_ports(cfg.fabric).items() for p in ports]
    resolved = replace(apply_down(grouped, ff.groups, down), failures=failures)
    changed = [n for n, t in resolved.tables.items() if t.flows != compiled.tables[n].flows]
    state = rep.base()
    undo = state.snapshot()
    try:
        got = state.check(resolved, changed, mix=False)
    finally:
        state.restore(undo)
    return {"proven": got.acyclic, "delivered": got.delivered, "switches": len(changed), **got.as_dict()}


def print_repair(path: str, cfg: Any, failures: Any, base: dict[str, Any], plan: Any, ff: Any) -> None:
    what = f"{cfg.fabric.name}, {cfg.routing} routing, flow_control = {cfg.flow_control}"
    print(f"{path}: tables {'proven' if base['ok'] else 'NOT proven'}: {what}; {base['dependencies']} dependencies "
          f"({base['seconds']:.2f} s)")
    if not failures:
        return
    v = plan.verdict
    items = ", ".join(failures.describe())
    head = f"{path}: with {items} out: {v.get('verdict')}"
    if plan.proven:
        print(f"{head}: {len(plan.changed)} switch(es) change, {plan.entries} entries differ, update in "
              f"{len(plan.waves)} wave(s){'; detours redirected at their source' if v.get('redirect_detours') else ''}"
              f" (plan {plan.seconds:.2f} s)")
    else:
        print(f"{head}: nothing would be installed; the last proven tables stay")
    if v.get("explanation") and v.get("verdict") != "proven":
        print("  " + str(v["explanation"]))
    if ff is not None:
        print(f"  fast-failover detours under these failures: {'proven' if ff['proven'] else 'dependency cycle'}"
              + ("" if ff["delivered"] else f", not delivered: {ff['undelivered']}")
              + (f": {' -> '.join(ff['cycle'])}" if ff.get("cycle") else ""))
