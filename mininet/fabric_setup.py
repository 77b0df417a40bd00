"""What runs, and the wait-for-rules step: fabric, address plan and the flows every switch must hold.

* Config copies for the controller: :func:`read_conf` / :func:`write_conf` (ConfigParser as the
  controller reads it), :func:`write_config` (``run_fabric.py``'s: ``--config`` plus the command-line
  overrides, absolute topology path, our status file and listen port).
* :class:`Setup`: :func:`setup_from_config` computes it exactly as the controller does from that
  copy; :func:`setup_from_topology` compiles it from a topology (static mode without a config).
* :func:`rules_in_place`: the controller (or ``ovs-ofctl --bundle``, static mode) installs the rules;
  then every bridge's ``dump-flows`` count must equal the desired flows for that switch.
"""

from __future__ import annotations

import argparse
import configparser
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ovs_flows import flow_counts, install_static_flows  # mininet/ovs_flows.py
from runkit import StepResult, UsageError

from hpcfabric.rules.addressing import AddressPlan, plan_addresses
from hpcfabric.rules.compiler import compile_fabric
from hpcfabric.topology.loader import load_topology
from hpcfabric.topology.model import Fabric


@dataclass
class Setup:
    fabric: Fabric
    plan: AddressPlan
    routing: str
    link_speed_gbps: float
    desired: dict[str, tuple]  # switch -> flows the switch must hold
    config_path: str | None = None  # the config given to the controller (controller mode)
    compiled: Any = None
    #: the config's deadlock verdict (hpcfabric.config.deadlock), None in static mode without a config
    deadlock: Any = None


def conditional_ok(fabric: Fabric, mode: str) -> bool:
    """Does the fabric support conditional routing with addressing ``mode`` (the runners' default policy)?"""
    return fabric.kind == "dragonfly" or (fabric.kind == "flattened_butterfly" and mode == "compact")


def abs_path(path: str, base: Path | None = None) -> str:
    p = Path(os.path.expanduser(path))
    if not p.is_absolute():
        p = (base or Path.cwd()) / p
    return os.path.normpath(str(p))


def read_conf(path: Path | None = None) -> configparser.ConfigParser:
    """A controller config as the controller parses it (case kept, no interpolation); empty without ``path``."""
    parser = configparser.ConfigParser(interpolation=None, inline_comment_prefixes=(";", "#"), default_section="\0none")
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    if path is not None:
        parser.read(path, encoding="utf-8")
    return parser


def write_conf(parser: configparser.ConfigParser, path: Path) -> Path:
    with open(path, "w", encoding="utf-8") as f:
        parser.write(f)
    return path


def write_config(args: argparse.Namespace, tmp: Path, listen_port: int, status_file: Path) -> Path:
    """The controller's config: a copy of ``--config`` (if any) with the command-line overrides,
    absolute paths, our status file and listen port."""
    parser = read_conf()
    base = Path.cwd()
    if args.config:
        src = Path(args.config)
        if not src.is_file():
            raise UsageError(f"config file {args.config} does not exist")
        parser.read(src, encoding="utf-8")
        base = src.resolve().parent
    for section in ("hpcfabric", "openflow"):
        if section not in parser:
            parser[section] = {}
    hf = parser["hpcfabric"]
    if args.topology:
        hf["topology"] = abs_path(args.topology)
    elif hf.get("topology", "").strip():
        hf["topology"] = abs_path(hf["topology"].strip(), base)
    else:
        raise UsageError("no topology: give --topology or a --config with [hpcfabric] topology")
    if args.addressing:
        hf["addressing"] = args.addressing
        if not args.config:
            hf["widths"] = ""
    if args.routing:
        hf["routing"] = args.routing
    elif not hf.get("routing", "").strip():  # our default where the fabric supports it
        fabric = load_topology(hf["topology"])
        mode = hf.get("addressing", "").strip() or (fabric.params.get("addressing") or {}).get("mode") or "compact"
        hf["routing"] = "conditional" if conditional_ok(fabric, mode) else "minimal"
    if args.link_speed_gbps:
        hf["link_speed_gbps"] = repr(args.link_speed_gbps)
    hf["status_file"] = str(status_file)
    parser["openflow"]["listen_host"] = "127.0.0.1"
    parser["openflow"]["listen_port"] = str(listen_port)
    return write_conf(parser, tmp / "controller.conf")


def setup_from_config(path: Path) -> Setup:
    """Fabric, plan and desired flows exactly as the controller computes them from ``path``."""
    from hpcfabric.config import load_config
    from hpcfabric.verify.pipeline import resolve_groups

    cfg = load_config(path)
    return Setup(
        cfg.fabric,
        cfg.plan,
        cfg.routing,
        cfg.link_speed_gbps,
        # fast-failover groups resolved as the switches run them with every link up (same entries, plain
        # outputs), so the reference pipeline needs no group table
        {k: resolve_groups(v, cfg.groups.get(k, ()), ()) for k, v in cfg.desired.items()},
        str(path),
        cfg.compiled,
        dict(cfg.deadlock) if cfg.deadlock else None,
    )


def setup_from_topology(args: argparse.Namespace) -> Setup:
    """Static mode without a config: compile from --topology and the overrides."""
    fabric = load_topology(args.topology)
    defaults = fabric.params.get("addressing") or {}
    mode = args.addressing or defaults.get("mode") or "compact"
    widths = defaults.get("widths") if defaults.get("mode", mode) == mode else None
    plan = plan_addresses(fabric, mode, widths)
    routing = args.routing or ("conditional" if conditional_ok(fabric, mode) else "minimal")
    compiled = compile_fabric(fabric, plan, routing=routing)
    desired = {name: t.flows for name, t in compiled.tables.items()}
    return Setup(fabric, plan, routing, args.link_speed_gbps or 10.0, desired, None, compiled)


def describe(setup: Setup) -> dict[str, Any]:
    """The JSON summary's keys that say what runs."""
    fabric, compiled = setup.fabric, setup.compiled
    return {
        "topology": fabric.name,
        "switches": len(fabric.switches),
        "hosts": len(fabric.hosts),
        "links": len(fabric.links),
        "addressing": setup.plan.mode,
        "routing": setup.routing,
        "cos": f"{compiled.cos}/{compiled.cos_levels}" if compiled is not None and compiled.cos is not None else "off",
        "cos_scheme": (compiled.cos if compiled is not None else None) or "off",
        "cos_levels": compiled.cos_levels if compiled is not None and compiled.cos is not None else 1,
        "link_speed_gbps": setup.link_speed_gbps,
        "flow_control": (setup.deadlock or {}).get("flow_control"),
        "deadlock": (setup.deadlock or {}).get("verdict"),
    }


def rules_in_place(net: Any, setup: Setup, controller: Any, timeout: float,
                   progress: Callable[[str], None]) -> StepResult:
    """Wait until the rules are installed and check every bridge holds exactly the desired flows.

    ``controller`` (a :class:`controller_proc.Controller`): wait until its status file says every switch
    is confirmed and rules_installed == rules_expected. None (static mode, no controller): install the
    compiled tables (no guards, meters or groups) with ``ovs-ofctl --bundle``. Summary keys
    ``rules_expected``, ``rules_installed``, ``flows_match_compiler``, ``ready_s`` (with the per-bridge
    flow count check), ``confirm_s`` (controller: until every switch is confirmed).
    """
    t = time.monotonic()
    res = StepResult()
    desired = setup.desired
    if controller is not None:
        status = controller.wait_ready(len(setup.fabric.switches), timeout, progress)
        res.fields["confirm_s"] = round(time.monotonic() - t, 2)  # net up -> every switch confirmed
        res.fields.update(rules_expected=status.get("rules_expected"), rules_installed=status.get("rules_installed"))
    else:
        if setup.compiled is not None:
            desired = {n: tb.flows for n, tb in setup.compiled.tables.items()}
        install_static_flows(net, desired)
        res.fields["rules_expected"] = sum(len(v) for v in desired.values())
    counts = flow_counts(net)
    wanted = {name: len(flows) for name, flows in desired.items()}
    if controller is None:
        res.fields["rules_installed"] = sum(counts.values())
    bad = sorted(n for n in wanted if counts.get(n) != wanted[n])
    res.fields["flows_match_compiler"] = not bad
    if bad:
        res.failures.append(
            "flow counts differ from the compiler on " + ", ".join(f"{n} ({counts.get(n)} != {wanted[n]})" for n in bad[:5])
        )
    installed, expected = res.fields["rules_installed"], res.fields["rules_expected"]
    if installed != expected:
        res.failures.append(f"rules_installed {installed} != rules_expected {expected}")
    res.fields["ready_s"] = round(time.monotonic() - t, 2)
    progress(f"rules in place: {installed}/{expected} after {res.fields['ready_s']} s")
    return res
