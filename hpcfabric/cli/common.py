"""What the commands share: the FILE argument, the addressing and policy options, JSON output, and the one
"compiled from args" step (load -> plan -> compile) of ``rules``, ``verify``, ``sweep`` and ``prove``."""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from typing import Any, Callable

from hpcfabric.cli.traffic import add_traffic_option, traffic_keywords
from hpcfabric.errors import ConfigError
from hpcfabric.rules.addressing import MODES, AddressPlan, plan_addresses
from hpcfabric.topology.model import Fabric

DEFAULT_MODE = "compact"
TOPOLOGY_FILE = "topology YAML file (see docs/topology-yaml.md)"


def command(sub: Any, name: str, run: Callable[[argparse.Namespace], int], help_: str,
            file_help: str = TOPOLOGY_FILE) -> argparse.ArgumentParser:
    """A subcommand taking one FILE, running ``run(args)``."""
    p = sub.add_parser(name, help=help_, description=help_)
    p.set_defaults(func=run)
    p.add_argument("file", metavar="FILE", help=file_help)
    return p


def config_command(sub: Any, name: str, run: Callable[[argparse.Namespace], int], help_: str, description: str,
                   config_help: str = "controller INI file") -> argparse.ArgumentParser:
    """A subcommand of a controller config (``--config FILE``, required), running ``run(args)``."""
    p = sub.add_parser(name, help=help_, description=description)
    p.set_defaults(func=run)
    p.add_argument("--config", required=True, metavar="FILE", help=config_help)
    return p


def widths(text: str) -> dict[str, int]:
    """``group=8,switch=4,host=3`` -> dict (argparse type)."""
    out: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        if not sep or not value.strip().isdigit():
            raise argparse.ArgumentTypeError(f"expected FIELD=BITS[,FIELD=BITS...], got {part!r}")
        out[name.strip()] = int(value)
    return out


def add_addressing_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--addressing",
        choices=MODES,
        default=None,
        help=f"addressing mode (default: the file's addressing.mode, else {DEFAULT_MODE})",
    )
    p.add_argument(
        "--widths",
        type=widths,
        default=None,
        metavar="F=BITS,...",
        help="field widths, e.g. group=18,switch=20,host=8 (default: the mode's)",
    )


def add_policy_options(p: argparse.ArgumentParser) -> None:
    """``--routing``, ``--cos``, ``--cos-levels`` and ``--traffic`` (the keywords of :func:`policy`)."""
    from hpcfabric.rules.compiler import ROUTINGS
    from hpcfabric.rules.cos import COS_SCHEMES

    p.add_argument("--routing", choices=ROUTINGS, default=None,
                   help="routing policy (default minimal; docs/routing.md)")
    p.add_argument("--cos", choices=("default", "on", "off", *COS_SCHEMES), default="default",
                   help="classes of service in a VLAN PCP: on = the fabric's default scheme, or a scheme "
                   "(default: on for valiant, off otherwise)")
    p.add_argument("--cos-levels", type=int, default=None, metavar="N", help="PCP values to use (1..8)")
    add_traffic_option(p)


def load(path: str) -> Fabric:
    from hpcfabric.topology.loader import load_topology

    return load_topology(path)


def plan_of(fabric: Fabric, args: argparse.Namespace) -> AddressPlan:
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


def policy(args: argparse.Namespace, fabric: Fabric) -> dict[str, Any]:
    """compile_fabric keywords from --routing / --cos / --cos-levels / --traffic (hpcfabric.cli.traffic)."""
    cos = {"default": None, "on": True, "off": False}.get(args.cos, args.cos)
    return {"routing": args.routing or "minimal", "cos": cos, "cos_levels": args.cos_levels,
            **traffic_keywords(args, fabric)}


@dataclass(frozen=True)
class FromArgs:
    """The fabric, its address plan and compiled tables as the arguments ask; ``seconds`` that took."""

    fabric: Fabric
    plan: AddressPlan
    compiled: Any
    seconds: float


def compiled_from_args(args: argparse.Namespace, fabric: Fabric | None = None) -> FromArgs:
    """Load ``args.file`` (unless ``fabric`` is given), plan its addresses and compile it with the policy options."""
    from hpcfabric.rules.compiler import compile_fabric

    t0 = time.perf_counter()
    fabric = fabric if fabric is not None else load(args.file)
    plan = plan_of(fabric, args)
    compiled = compile_fabric(fabric, plan, **policy(args, fabric))
    return FromArgs(fabric, plan, compiled, time.perf_counter() - t0)


def emit(data: Any) -> None:
    print(json.dumps(data, indent=None, separators=(", ", ": ")))
