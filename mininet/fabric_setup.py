"""What runs, and the wait-for-rules step: fabric, address plan and the flows every switch must hold.

* The runners' one config writer, :func:`write_conf`: a controller config (a shipped one, or none) with
  the runner's settings over it, the topology path absolute, our status file and listen port;
  :func:`read_conf` reads one as the controller does. :func:`write_config` is ``run_fabric.py``'s
  settings (``--config`` plus the command-line overrides).
* :class:`Setup`: :func:`setup_from_config` computes it exactly as the controller does from that
  copy; :func:`setup_from_topology` compiles it from a topology (static mode without a config).
* :func:`rules_in_place`: the controller (or ``ovs-ofctl --bundle``, static mode) installs the rules;
  then every bridge's ``dump-flows`` count must equal the desired flows for that switch;
  :func:`discovery_step`: the controller's LLDP has found every link.
"""

from __future__ import annotations

import argparse
import configparser
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from ovs_flows import flow_counts, install_static_flows  # mininet/ovs_flows.py
from runkit import StepResult, UsageError

from hpcfabric.config.ini import read_ini
from hpcfabric.rules.addressing import AddressPlan
from hpcfabric.rules.compiler import compile_fabric
from hpcfabric.topology.loader import load_topology
from hpcfabric.topology.model import Fabric


#: the shipped fabrics the experiment runners know by label (``--fabrics``): label -> controller config
FABRICS = {"df": "configs/dragonfly-a4-p2-h2.conf", "fb": "configs/fb-2d-4x4.conf"}
ROOT = Path(__file__).resolve().parent.parent


def fabric_labels(text: str) -> list[str]:
    """``--fabrics``: a comma list of :data:`FABRICS` labels or controller ``.conf`` files (UsageError otherwise)."""
    labels = [x.strip() for x in text.split(",") if x.strip()]
    bad = [f for f in labels if f not in FABRICS and not (f.endswith(".conf") and Path(f).is_file())]
    if bad or not labels:
        raise UsageError(f"--fabrics: unknown {', '.join(bad) or '(empty)'}; expected a comma list of "
                         f"{', '.join(FABRICS)} or controller .conf files")
    return labels


def fabric_config(label: str) -> tuple[str, Path]:
    """(name, controller config) of a :func:`fabric_labels` entry."""
    return (label, ROOT / FABRICS[label]) if label in FABRICS else (Path(label).stem, Path(label).resolve())


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
    config: Any = None  # the loaded ControllerConfig (setup_from_config), None in static mode without a config


def conditional_ok(fabric: Fabric, mode: str) -> bool:
    """Does the fabric support conditional routing with addressing ``mode`` (the runners' default policy)?"""
    return fabric.kind == "dragonfly" or (fabric.kind == "flattened_butterfly" and mode == "compact")


def abs_path(path: str, base: Path | None = None) -> str:
    p = Path(os.path.expanduser(path))
    if not p.is_absolute():
        p = (base or Path.cwd()) / p
    return os.path.normpath(str(p))


def read_conf(path: Path | str | None = None) -> configparser.ConfigParser:
    """A controller config parsed as the controller parses it (:func:`hpcfabric.config.ini.read_ini`: case kept, no
    interpolation); empty without ``path``."""
    return read_ini(str(path)) if path is not None else read_ini("(no config)", "")


def write_conf(out: Path, settings: Mapping[str, Mapping[str, Any]], base: Path | str | None = None, *,
               port: int | None = None, status: Path | None = None) -> Path:
    """Write the controller's config ``out``: ``base`` (a controller config; its ``topology`` made absolute
    from the config's folder) with ``settings`` (``{section: {key: value}}``) over it, ``status`` as its
    ``status_file`` and ``port`` as its listen port on 127.0.0.1. Replaced atomically (a running
    controller may read it). Returns ``out``."""
    parser = read_conf(base)
    hf = parser["hpcfabric"] if "hpcfabric" in parser else None
    if base is not None and hf is not None and hf.get("topology", "").strip():
        hf["topology"] = abs_path(hf["topology"].strip(), Path(base).resolve().parent)
    extra: dict[str, dict[str, Any]] = {"hpcfabric": {"status_file": status}} if status is not None else {}
    if port is not None:
        extra["openflow"] = {"listen_host": "127.0.0.1", "listen_port": port}
    for section, values in [*settings.items(), *extra.items()]:
        if section not in parser:
            parser[section] = {}
        parser[section].update({k: str(v) for k, v in values.items()})
    tmp = out.with_name(out.name + ".new")
    with open(tmp, "w", encoding="utf-8") as f:
        parser.write(f)
    os.replace(tmp, out)
    return out


def write_config(args: argparse.Namespace, tmp: Path, listen_port: int, status_file: Path) -> Path:
    """``run_fabric.py``'s config: ``--config`` (if any) with the command-line overrides (``--topology``,
    ``--addressing``, ``--routing``, ``--link-speed-gbps``; conditional routing by default where the
    fabric supports it), our status file and listen port."""
    if args.config and not Path(args.config).is_file():
        raise UsageError(f"config file {args.config} does not exist")
    conf = read_conf(args.config)
    given = dict(conf["hpcfabric"]) if "hpcfabric" in conf else {}
    hf: dict[str, str] = {}
    if args.topology:
        hf["topology"] = abs_path(args.topology)
    elif not given.get("topology", "").strip():
        raise UsageError("no topology: give --topology or a --config with [hpcfabric] topology")
    if args.addressing:
        hf["addressing"] = args.addressing
        if not args.config:
            hf["widths"] = ""
    if args.routing:
        hf["routing"] = args.routing
    elif not given.get("routing", "").strip():  # our default where the fabric supports it
        fabric = load_topology(hf.get("topology") or abs_path(given["topology"].strip(), Path(args.config).resolve().parent))
        mode = hf.get("addressing") or given.get("addressing", "").strip() or \
            (fabric.params.get("addressing") or {}).get("mode") or "compact"
        hf["routing"] = "conditional" if conditional_ok(fabric, mode) else "minimal"
    if args.link_speed_gbps:
        hf["link_speed_gbps"] = repr(args.link_speed_gbps)
    return write_conf(tmp / "controller.conf", {"hpcfabric": hf}, args.config, port=listen_port, status=status_file)


def setup_from_config(path: Path) -> Setup:
    """Fabric, plan and desired flows exactly as the controller computes them from ``path``."""
    from hpcfabric.config import load_config
    from hpcfabric.verify.reference.pipeline import resolve_groups

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
        cfg,
    )


def setup_from_topology(args: argparse.Namespace) -> Setup:
    """Static mode without a config: compile from --topology and the overrides."""
    from hpcfabric.cli.common import plan_of  # mode and widths as ``hpcfabric rules`` takes them

    fabric = load_topology(args.topology)
    plan = plan_of(fabric, argparse.Namespace(addressing=args.addressing, widths=None))
    routing = args.routing or ("conditional" if conditional_ok(fabric, plan.mode) else "minimal")
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


def discovery_step(controller: Any, t_net: float, timeout: float, progress: Callable[[str], None]) -> StepResult:
    """Wait until the controller's (a :class:`controller_proc.Controller`) LLDP has discovered every expected
    link; ``discovery_s`` counts from the start of the Mininet build (``t_net``)."""
    end = time.monotonic() + timeout
    status: dict[str, Any] = {}
    while True:
        status = controller.status() or {}
        exp, got = status.get("links_expected"), status.get("links_discovered")
        if exp is not None and got is not None and got >= exp or time.monotonic() > end:
            break
        time.sleep(0.2)
    res = StepResult({"discovery_s": round(time.monotonic() - t_net, 2)})
    progress(f"LLDP discovery: {got}/{exp} links, {res.fields['discovery_s']} s after the build started")
    if exp is None or got is None or got < exp:
        res.failures.append(f"LLDP discovery: {got}/{exp} links after {timeout:g} s")
    return res
