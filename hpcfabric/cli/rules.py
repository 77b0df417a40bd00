"""``hpcfabric rules FILE``: compile the flow tables and report rule counts (summary, JSON) or print them (ofctl)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from hpcfabric.cli.common import add_addressing_options, add_policy_options, command, compiled_from_args, emit
from hpcfabric.cli.traffic import workload_report
from hpcfabric.errors import ConfigError


def add_parser(sub: Any) -> None:
    p = command(sub, "rules", run, "compile the flow tables and report rule counts or print them")
    add_addressing_options(p)
    p.add_argument("--format", choices=("summary", "json", "ofctl"), default="summary")
    p.add_argument("--switch", help="only this switch")
    add_policy_options(p)


def report_of(compiled: Any) -> dict[str, Any]:
    """Rule counts per switch and overall, the lower bound, Eq. 1 per access switch, the paper's band."""
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


def run(args: argparse.Namespace) -> int:
    from hpcfabric.openflow.ofctl import flows_text

    built = compiled_from_args(args)
    fabric, plan, compiled = built.fabric, built.plan, built.compiled
    if args.switch and not fabric.has_switch(args.switch):
        raise ConfigError(f"no switch {args.switch!r} in {fabric.name}", field="--switch")
    names = [args.switch] if args.switch else [sw.name for sw in fabric.switches]
    if args.format == "ofctl":
        for name in names:
            sw = fabric.switch(name)
            print(f"# switch {name} dpid {sw.dpid:#018x}: ovs-ofctl -O OpenFlow13 add-flows <bridge> <this block>")
            sys.stdout.write(flows_text(compiled.flows(name)))
        return 0
    report = report_of(compiled)
    if workload_report(args):
        report["workload"] = workload_report(args)
    if args.switch:
        report["per_switch"] = [r for r in report["per_switch"] if r["switch"] == args.switch]
    if args.format == "json":
        emit(report)
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
