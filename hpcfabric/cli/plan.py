"""``hpcfabric plan FILE``: the hierarchical MAC of every host (table, JSON or CSV)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from hpcfabric.cli.common import add_addressing_options, command, emit, load, plan_of


def add_parser(sub: Any) -> None:
    p = command(sub, "plan", run, "print the hierarchical MAC of every host")
    add_addressing_options(p)
    p.add_argument("--format", choices=("table", "json", "csv"), default="table")


def run(args: argparse.Namespace) -> int:
    fabric = load(args.file)
    plan = plan_of(fabric, args)
    rows = plan.rows()
    if args.format == "json":
        emit({"fabric": fabric.name, "addressing": plan.mode, "layout": plan.layout.describe(), "hosts": rows})
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
