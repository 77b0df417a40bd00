"""The ``hpcfabric`` command line.

Subcommands: ``check`` (validate a topology or a controller config), ``plan`` (host addresses),
``rules`` (compiled tables: summary, JSON or ``ovs-ofctl`` syntax),
``verify`` (all-pairs forwarding check), ``sweep`` (every single paused port) and ``prove``
(delivery and deadlock freedom under any set of paused ports), each with ``--traffic FILE``
(workload-aware intermediates), and ``traffic`` (matrices: :mod:`hpcfabric.cli_traffic`). Errors print one line on stderr
and exit 2 for bad input, never a traceback (set ``HPCFABRIC_DEBUG=1`` to
see one for internal errors).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Callable, Sequence

from hpcfabric import __version__
from hpcfabric.cli_traffic import add_traffic_option, add_traffic_parser, workload_report
from hpcfabric.rules.addressing import MODES, AddressPlan, plan_addresses
from hpcfabric.errors import ConfigError, HpcfabricError
from hpcfabric.topology.model import Fabric

DEFAULT_MODE = "compact"


def _widths(text: str) -> dict[str, int]:
    """``group=8,switch=4,host=3`` -> dict (argparse type)."""
    out: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        if not sep or not value.strip().isdigit():
            raise argparse.ArgumentTypeError(f"expected FIELD=BITS[,FIELD=BITS...], got {part!r}")
        out[name.strip()] = int(value)
    return out


def _load(path: str) -> Fabric:
    from hpcfabric.topology.loader import load_topology

    return load_topology(path)


def _plan(fabric: Fabric, args: argparse.Namespace) -> AddressPlan:
    """Mode and widths: command line first, then the file's ``addressing`` section."""
    defaults = fabric.params.get("addressing") or {}
    mode = args.addressing or defaults.get("mode") or DEFAULT_MODE
    if args.widths is not None:
        return plan_addresses(fabric, mode, args.widths)
    file_widths = defaults.get("widths") if defaults.get("mode", mode) == mode else None
    try:
        return plan_addresses(fabric, mode, file_widths)
    except ConfigError as err:
        if file_widths and err.source is None:
            raise type(err)(err.detail, source=fabric.params.get("source"), field=err.field) from None
        raise


def _emit(data: Any) -> None:
    print(json.dumps(data, indent=None, separators=(", ", ": ")))


# -- subcommands -----------------------------------------------------------


CONFIG_SUFFIXES = (".conf", ".ini", ".cfg")


def is_controller_config(path: str) -> bool:
    """A controller INI file (by suffix, else by a first ``[section]`` line) rather than a topology YAML."""
    if path.lower().endswith(CONFIG_SUFFIXES):
        return True
    if path.lower().endswith((".yaml", ".yml", ".json")):
        return False
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for _, line in zip(range(200), fh):
                line = line.strip()
                if not line or line.startswith(("#", ";")):
                    continue
                return line.startswith("[") and line.endswith("]")
    except OSError:
        return False
    return False


def cmd_check(args: argparse.Namespace) -> int:
    if is_controller_config(args.file):
        return _check_config(args)
    fabric = _load(args.file)
    s = fabric.summary()
    if args.json:
        _emit(s)
        return 0
    extra = " ".join(f"{k}={v}" for k, v in s.items() if k not in ("name", "kind", "switches", "hosts", "links", "radix"))
    print(
        f"{args.file}: ok: {s['name']}: {s['kind']}, {s['switches']} switches, {s['hosts']} hosts, "
        f"{s['links']} links, radix {s['radix']}" + (f" ({extra})" if extra else "")
    )
    return 0


def _check_config(args: argparse.Namespace) -> int:
    """``check`` for a controller config: load, check the topology, plan, compile, guards -- all of it."""
    from hpcfabric.config import validate_config

    s = validate_config(args.file)
    if args.json:
        _emit(s)
        return 0
    print(
        f"{args.file}: ok: controller config for {s['fabric']}: {s['kind']}, {s['switches']} switches, "
        f"{s['hosts']} hosts, {s['links']} links; {s['addressing']} addressing ({s['layout']}), {s['routing']} routing, "
        f"{s['rules_expected']} rules, host_mac={s['host_mac']}, listen {s['listen']}, guards={s['guards']}, "
        f"metrics={s['metrics']}, ha={s['ha']}, fast_failover={s['fast_failover']}"
        + (f" ({s['ff_groups']} groups)" if s["fast_failover"] == "on" else "")
        + (f", traffic matrix {s['traffic']}" if s.get("traffic") else "")
    )
    print(f"  classes of service {s['cos']}, flow_control = {s['flow_control']}: deadlock {s['deadlock']}: "
          f"{s['deadlock_explanation']}")
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    fabric = _load(args.file)
    plan = _plan(fabric, args)
    rows = plan.rows()
    if args.format == "json":
        _emit({"fabric": fabric.name, "addressing": plan.mode, "layout": plan.layout.describe(), "hosts": rows})
    elif args.format == "csv":
        import csv

        names = list(plan.layout.names)
        writer = csv.writer(sys.stdout)
        writer.writerow(["host", "switch", "port", "mac", *names])
        for r in rows:
            writer.writerow([r["host"], r["switch"], r["port"], r["mac"], *(r["fields"][n] for n in names)])
    else:
        print(f"# {fabric.name}: {plan.mode} addressing, layout {plan.layout.describe()}")
        fields = [n for n in plan.layout.names]
        print(f"{'host':<16} {'switch':<12} {'port':>4}  {'mac':<17}  " + " ".join(f"{n:>7}" for n in fields))
        for r in rows:
            print(
                f"{r['host']:<16} {r['switch']:<12} {r['port']:>4}  {r['mac']:<17}  "
                + " ".join(f"{r['fields'][n]:>7}" for n in fields)
            )
    return 0


def _rules_report(compiled: Any) -> dict[str, Any]:
    from hpcfabric.rules.destinations import eq1
    from hpcfabric.rules.fabrics.dragonfly import dragonfly_band

    fabric = compiled.fabric
    stats = compiled.stats()
    per_switch = []
    for sw in fabric.switches:
        table = compiled.tables[sw.name]
        row = {"switch": sw.name, "dpid": sw.dpid, "role": sw.role, "ports": table.ports, "rules": table.forwarding}
        if table.access:
            row["eq1"] = eq1(fabric, sw)
        per_switch.append(row)
    stats["lower_bound_met"] = all(r["rules"] == r["ports"] for r in per_switch)
    if fabric.kind == "dragonfly":
        low, high = dragonfly_band(fabric)
        stats["paper_band"] = [low, high]
    stats["per_switch"] = per_switch
    return stats


def cmd_rules(args: argparse.Namespace) -> int:
    from hpcfabric.rules.compiler import compile_fabric
    from hpcfabric.openflow.ofctl import flows_text

    fabric = _load(args.file)
    plan = _plan(fabric, args)
    compiled = compile_fabric(fabric, plan, **_policy(args, fabric))
    if args.switch and not fabric.has_switch(args.switch):
        raise ConfigError(f"no switch {args.switch!r} in {fabric.name}", field="--switch")
    names = [args.switch] if args.switch else [sw.name for sw in fabric.switches]
    if args.format == "ofctl":
        for name in names:
            sw = fabric.switch(name)
            print(f"# switch {name} dpid {sw.dpid:#018x}: ovs-ofctl -O OpenFlow13 add-flows <bridge> <this block>")
            sys.stdout.write(flows_text(compiled.flows(name)))
        return 0
    report = _rules_report(compiled)
    if workload_report(args):
        report["workload"] = workload_report(args)
    if args.switch:
        report["per_switch"] = [r for r in report["per_switch"] if r["switch"] == args.switch]
    if args.format == "json":
        _emit(report)
        return 0
    band = f", paper band {report['paper_band']}" if "paper_band" in report else ""
    print(
        f"{fabric.name}: {plan.mode} addressing ({report['layout']}), {report['switches']} switches, "
        f"{report['hosts']} hosts"
    )
    print(
        f"  routing entries per access switch: min {report['rules_min']}, max {report['rules_max']}, "
        f"mean {report['rules_mean']}{band}; all switches {report['all_rules_min']}..{report['all_rules_max']}"
    )
    print(
        f"  lower bound (rules == ports in use) met on every switch: {'yes' if report['lower_bound_met'] else 'no'}; "
        f"DMP entries {report['dmp_rules']}; total flows {report['total_flows']}"
    )
    if compiled.routing != "minimal" or compiled.cos:
        print(
            f"  {compiled.routing} routing, CoS {compiled.cos or 'off'} ({compiled.cos_levels} PCP levels); per access "
            f"switch besides routing: PORT_STATE {report['port_state_rules_max']}, ALTERNATIVE "
            f"{report['alternative_rules_min']}..{report['alternative_rules_max']}, CoS {report['cos_rules_max']}"
        )
    if "workload" in report:
        w = report["workload"]
        print(f"  intermediates for {w['traffic']}: {w['moved']} of {w['host_ports']} host ports off the static choice; "
              f"largest expected top-link load {w['chosen_max_load']:g} (static {w['static_max_load']:g}, minimal "
              f"{w['minimal_max_load']:g}), chosen in {w['seconds']:g} s")
    return 0


def _policy(args: argparse.Namespace, fabric: Fabric) -> dict[str, Any]:
    """compile_fabric keywords from --routing / --cos / --cos-levels / --traffic (hpcfabric.cli_traffic)."""
    from hpcfabric.cli_traffic import traffic_keywords

    cos = {"default": None, "on": True, "off": False}.get(args.cos, args.cos)
    return {"routing": args.routing or "minimal", "cos": cos, "cos_levels": args.cos_levels,
            **traffic_keywords(args, fabric)}


def cmd_verify(args: argparse.Namespace) -> int:
    from hpcfabric.rules.compiler import compile_fabric
    from hpcfabric.verify.allpairs import verify

    fabric = _load(args.file)
    plan = _plan(fabric, args)
    compiled = compile_fabric(fabric, plan, **_policy(args, fabric))
    paused = []
    if args.paused not in (None, "all"):
        sw, _, port = args.paused.rpartition(":")
        if not (port.isdigit() and fabric.has_switch(sw) and fabric.peer(sw, int(port)) is not None):
            raise ConfigError(f"--paused {args.paused!r}: expected all or SWITCH:PORT of a port in {fabric.name}",
                              field="--paused")
        paused = [(sw, int(port))]
    per_port = {"auto": None, "per-port": True, "merged": False}[args.ingress]
    report = verify(compiled, paused, sample=args.sample, per_port=per_port)
    data = {"fabric": fabric.name, "addressing": plan.mode, **report.as_dict()}
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
    _emit(data)
    return 0 if ok else 1


def cmd_sweep(args: argparse.Namespace) -> int:
    """Every single paused port: delivery of every pair and the union CDG (docs/routing.md)."""
    import sys
    import time

    from hpcfabric.rules.compiler import compile_fabric

    fabric = _load(args.file)
    if args.up_down and args.symmetric:
        raise ConfigError("--up-down and --symmetric are two different methods; give one", source="<arguments>")
    if args.up_down:
        from hpcfabric.rules.fabrics.updown import UP_DOWN_KINDS

        if fabric.kind not in UP_DOWN_KINDS:
            raise ConfigError(f"--up-down applies to fat-trees and folded Clos, not to a {fabric.kind}; "
                              f"use --symmetric or the full sweep", source=args.file)
    plan = _plan(fabric, args)
    compiled = compile_fabric(fabric, plan, **_policy(args, fabric))
    t0 = time.perf_counter()

    def progress(*parts: Any) -> None:
        if args.progress:
            *what, i, n, _ = parts
            print(f"# {' '.join(map(str, what))} {i}/{n} {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)

    if args.up_down:
        from hpcfabric.verify.updown import check_up_down

        ud = check_up_down(compiled, progress=lambda i, n, t: progress("switches", i, n, t))
        data = {"fabric": fabric.name, "addressing": plan.mode, "routing": compiled.routing, "cos": compiled.cos,
                "cos_levels": compiled.cos_levels, **ud.as_dict()}
    elif args.symmetric:
        from hpcfabric.verify.symmetry import symmetric_sweep

        rep = symmetric_sweep(compiled, progress=progress)
        data = {"fabric": fabric.name, "addressing": plan.mode, **rep.as_dict()}
    else:
        from hpcfabric.verify.sweep import sweep_single_paused

        full = sweep_single_paused(compiled, progress=progress)
        data = {"addressing": plan.mode, **full.as_dict()}
    _emit(data)
    return 0 if data["ok"] else 1


def cmd_prove(args: argparse.Namespace) -> int:
    """Delivery and deadlock freedom under any set of paused ports (hpcfabric.verify.proof)."""
    import time

    from hpcfabric.rules.compiler import compile_fabric
    from hpcfabric.verify.proof import prove

    t0 = time.perf_counter()
    fabric = _load(args.file)
    plan = _plan(fabric, args)
    compiled = compile_fabric(fabric, plan, **_policy(args, fabric))
    compile_s = time.perf_counter() - t0
    rep = prove(compiled, fallback=None if args.fallback == "none" else args.fallback)
    data = {"addressing": plan.mode, "compile_seconds": round(compile_s, 3), **rep.as_dict()}
    if args.json:
        _emit(data)
        return 0 if rep.ok else 1
    what = (f"{rep.switches} switches, {rep.hosts} hosts, {rep.routing} routing, CoS {rep.cos or 'off'}: "
            f"{rep.pausable_ports} pausable ports")
    if rep.ok:
        print(f"{args.file}: ok: {what}; every host pair delivered and {len(rep.classes_used)} class(es) of "
              f"{rep.channels} channels acyclic under any set of paused ports (compile {compile_s:.2f} s, "
              f"proof {rep.seconds:.2f} s)")
        return 0
    bad = ", ".join(f"{n} {k}" for k, n in {**rep.undelivered, **{f"probe {k}": n for k, n in
                                                                  rep.probe_failures.items()}}.items())
    print(f"{args.file}: FAILED: {what}; union of every pause state: "
          f"{'delivered' if rep.delivered else 'not delivered (' + (bad or f'{rep.overlaps} overlaps') + ')'}, "
          f"{'acyclic' if rep.acyclic else 'dependency cycle'}")
    for f in rep.failures[:5]:
        print("  " + (" -> ".join(f["cycle"]) if "cycle" in f else f"{f['kind']}: {f['destination']}: "
                      + " -> ".join(f["walk"])))
    if rep.fallback is not None:
        print(f"  single paused ports ({rep.fallback['method']}): {rep.fallback['verdict']}")
    return 1


# -- parser ----------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hpcfabric",
        description="HPC fabrics on OpenFlow switches: topologies, hierarchical MACs, compacted rules.",
    )
    parser.add_argument("--version", action="version", version=f"hpcfabric {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    def add(name: str, func: Callable[[argparse.Namespace], int], help_: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_, description=help_)
        p.set_defaults(func=func)
        p.add_argument("file", metavar="FILE", help="topology YAML file (see docs/topology-yaml.md)")
        return p

    def policy(p: argparse.ArgumentParser) -> None:
        from hpcfabric.rules.compiler import ROUTINGS
        from hpcfabric.rules.cos import COS_SCHEMES

        p.add_argument("--routing", choices=ROUTINGS, default=None,
                       help="routing policy (default minimal; docs/routing.md)")
        p.add_argument("--cos", choices=("default", "on", "off", *COS_SCHEMES), default="default",
                       help="classes of service in a VLAN PCP: on = the fabric's default scheme, or a scheme "
                       "(default: on for valiant, off otherwise)")
        p.add_argument("--cos-levels", type=int, default=None, metavar="N", help="PCP values to use (1..8)")
        add_traffic_option(p)

    def addressing(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--addressing",
            choices=MODES,
            default=None,
            help=f"addressing mode (default: the file's addressing.mode, else {DEFAULT_MODE})",
        )
        p.add_argument(
            "--widths",
            type=_widths,
            default=None,
            metavar="F=BITS,...",
            help="field widths, e.g. group=18,switch=20,host=8 (default: the mode's)",
        )

    p = add("check", cmd_check, "validate a topology file or a controller config (.conf) and print a one-line summary")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    for action in p._actions:
        if action.dest == "file":
            action.help = "topology YAML file (docs/topology-yaml.md) or controller config (.conf, docs/controller.md)"

    p = add("plan", cmd_plan, "print the hierarchical MAC of every host")
    addressing(p)
    p.add_argument("--format", choices=("table", "json", "csv"), default="table")

    p = add("rules", cmd_rules, "compile the flow tables and report rule counts or print them")
    addressing(p)
    p.add_argument("--format", choices=("summary", "json", "ofctl"), default="summary")
    p.add_argument("--switch", help="only this switch")
    policy(p)

    p = add("verify", cmd_verify, "walk a frame between every pair of hosts through the compiled rules")
    addressing(p)
    p.add_argument("--sample", type=int, default=None, metavar="N", help="verify N random destinations only")
    p.add_argument(
        "--ingress", choices=("auto", "per-port", "merged"), default="auto",
        help="decision rows per fabric ingress port (a frame sent back out of its ingress port is dropped, as "
        "on a switch) or merged where no rule tells ports apart (much faster on big fabrics; the report then "
        "says ingress_exact: false); auto: per-port up to 4,096 fabric ports",
    )
    policy(p)
    p.add_argument(
        "--paused", default=None, metavar="all|SWITCH:PORT",
        help="also check with one port paused (its PORT_STATE entry flipped), or 'all': every port alone; "
        "with --routing, --paused or --cos the channel dependency graph is checked too (docs/routing.md)",
    )

    p = add("sweep", cmd_sweep, "every single paused port: delivery of every host pair and the union CDG")
    addressing(p)
    policy(p)
    p.add_argument("--symmetric", action="store_true",
                   help="walk to one access switch per orbit of the symmetries the rules are checked to have "
                   "(hpcfabric.verify.symmetry; what makes ~300k-host fabrics feasible)")
    p.add_argument("--up-down", action="store_true",
                   help="fat-tree / folded Clos: prove delivery and deadlock freedom under any set of paused "
                   "ports from a per-switch up*/down* invariant (hpcfabric.verify.updown; no pair walk)")
    p.add_argument("--progress", action="store_true", help="progress lines on stderr")

    p = add("prove", cmd_prove, "prove delivery and deadlock freedom under any set of paused ports "
            "(per-destination decisions; docs/routing.md)")
    addressing(p)
    policy(p)
    p.add_argument("--fallback", choices=("sweep", "symmetric", "none"), default="sweep",
                   help="when the union fails, also check single paused ports (default sweep) and report both")
    p.add_argument("--json", action="store_true", help="print the report as JSON")

    def cmd_controller(args: argparse.Namespace) -> int:
        from hpcfabric.config import load_config

        config = load_config(args.config)  # ConfigError -> exit 2 before anything starts
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # eventlet's deprecation banner
            from hpcfabric.controller.launch import run  # the framework (os-ken) comes in here

        return run(config, listen_port=args.listen_port, status_file=args.status_file)

    p = sub.add_parser("controller", help="run the OpenFlow controller", description="run the OpenFlow 1.3 controller "
                       "(os-ken in-process) for a config file; see docs/controller.md")
    p.set_defaults(func=cmd_controller)
    p.add_argument("--config", required=True, metavar="FILE", help="controller INI file (see configs/)")
    p.add_argument("--status-file", default=None, metavar="F", help="override [hpcfabric] status_file")
    p.add_argument("--listen-port", type=int, default=None, metavar="N", help="override [openflow] listen_port")

    def cmd_compile(args: argparse.Namespace) -> int:
        from hpcfabric.config import load_config
        from hpcfabric.config.artifact import write_artifact

        cfg = load_config(args.config, compile=False)
        out = args.out or cfg.compiled_dir
        if not out:
            raise ConfigError("no output directory: give --out DIR or set [hpcfabric] compiled", source=args.config,
                              field="hpcfabric.compiled")
        parts = cfg.ha_partitions if args.partitions is None else args.partitions
        m = write_artifact(cfg, out, parts, progress=lambda m: print(m, file=sys.stderr))
        _emit({"artifact": out, **{k: m[k] for k in ("fabric", "switches", "rules", "compile_s", "total_s")},
               "deadlock": m["deadlock"].get("verdict"), "partitions": [p["label"] for p in m["partitions"]]})
        return 0

    p = sub.add_parser("compile", help="compile and prove a config's fabric once for its controllers",
                       description="compile and prove a controller config's fabric once and write the tables per "
                       "partition ([hpcfabric] compiled = DIR loads them; docs/ha.md)")
    p.set_defaults(func=cmd_compile)
    p.add_argument("--config", required=True, metavar="FILE", help="controller INI file")
    p.add_argument("--out", default=None, metavar="DIR", help="artifact directory (default: [hpcfabric] compiled)")
    p.add_argument("--partitions", type=int, default=None, metavar="K",
                   help="partition files to write (default: [ha] partitions)")

    def cmd_status(args: argparse.Namespace) -> int:
        from hpcfabric.config import load_config
        from hpcfabric.controller.coord import describe, format_status

        view = describe(load_config(args.config, compile=False))
        print(json.dumps(view, indent=2) if args.json else format_status(view))
        return 0

    p = sub.add_parser("status", help="HA: per partition its master, standbys, generation and lease age",
                       description="read the HA coordination store (etcd or the lease file) of a controller "
                       "config; see docs/ha.md")
    p.set_defaults(func=cmd_status)
    p.add_argument("--config", required=True, metavar="FILE", help="controller INI file")
    p.add_argument("--json", action="store_true", help="print JSON")

    add_traffic_parser(sub)  # traffic generate | check (docs/workload.md)
    from hpcfabric.analysis.cli import add_analyze_parser

    add_analyze_parser(sub)  # analyze rules | power | onoff | scale (docs/analysis.md)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except HpcfabricError as err:
        print(f"hpcfabric: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("hpcfabric: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as err:  # pragma: no cover - internal errors
        if os.environ.get("HPCFABRIC_DEBUG"):
            raise
        print(
            f"hpcfabric: internal error: {type(err).__name__}: {err} (set HPCFABRIC_DEBUG=1 for a traceback)",
            file=sys.stderr,
        )
        return 3


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
