"""``hpcfabric check FILE``: validate a topology, or a whole controller config, and print a one-line summary."""

from __future__ import annotations

import argparse
from typing import Any

from hpcfabric.cli.common import command, emit, load

CONFIG_SUFFIXES = (".conf", ".ini", ".cfg")


def add_parser(sub: Any) -> None:
    p = command(sub, "check", run,
                "validate a topology file or a controller config (.conf) and print a one-line summary",
                file_help="topology YAML file (docs/topology-yaml.md) or controller config (.conf, docs/controller.md)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")


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


def run(args: argparse.Namespace) -> int:
    if is_controller_config(args.file):
        return check_config(args)
    fabric = load(args.file)
    s = fabric.summary()
    if args.json:
        emit(s)
        return 0
    extra = " ".join(f"{k}={v}" for k, v in s.items() if k not in ("name", "kind", "switches", "hosts", "links", "radix"))
    print(
        f"{args.file}: ok: {s['name']}: {s['kind']}, {s['switches']} switches, {s['hosts']} hosts, "
        f"{s['links']} links, radix {s['radix']}" + (f" ({extra})" if extra else "")
    )
    return 0


def check_config(args: argparse.Namespace) -> int:
    """``check`` for a controller config: load, check the topology, plan, compile, guards -- all of it."""
    from hpcfabric.config import validate_config

    s = validate_config(args.file)
    if args.json:
        emit(s)
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
    print(f"  {s['failures']}")
    return 0
