"""``hpcfabric traffic generate|check``, and ``--traffic FILE`` for ``rules``, ``verify``, ``sweep`` and ``prove``
(docs/workload.md).

``--traffic FILE`` compiles the tables with the intermediates chosen for that matrix
(:mod:`hpcfabric.rules.policies.workload`), so ``verify``/``sweep``/``prove`` prove exactly the tables a
controller with ``[hpcfabric] traffic = FILE`` installs. ``traffic generate`` writes the matrix of a pattern
(:func:`hpcfabric.topology.traffic.pattern_traffic`) in the documented format; ``traffic check`` loads one
against a fabric and prints what it holds. Errors name the file, row and field; exit 2, no traceback.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from hpcfabric.errors import ConfigError
from hpcfabric.topology.model import Fabric


def add_traffic_option(p: argparse.ArgumentParser) -> None:
    """``--traffic FILE`` on a compiling command."""
    p.add_argument("--traffic", default=None, metavar="FILE",
                   help="traffic matrix (docs/workload.md): choose the Valiant intermediates for it "
                   "(needs --routing valiant or conditional); the tables checked are those a controller with "
                   "[hpcfabric] traffic = FILE installs")


def traffic_keywords(args: argparse.Namespace, fabric: Fabric) -> dict[str, Any]:
    """``compile_fabric`` keywords for ``--traffic``: {} without it, else ``{"traffic": matrix}``."""
    path = getattr(args, "traffic", None)
    if not path:
        return {}
    if (args.routing or "minimal") == "minimal":
        raise ConfigError("a traffic matrix chooses Valiant intermediates: give --routing valiant or conditional",
                          source="<arguments>", field="--traffic")
    from hpcfabric.rules.policies.workload import choose_intermediates
    from hpcfabric.topology.traffic import load_traffic

    choice = choose_intermediates(fabric, load_traffic(path, fabric), args.routing)
    args.workload_choice = choice  # for workload_report
    return {"intermediates": choice.intermediates}


def workload_report(args: argparse.Namespace) -> dict[str, Any] | None:
    """What ``--traffic`` chose (for ``rules``): host ports moved off the static intermediates, the model's
    largest expected top-link load with static and chosen intermediates, and the time taken; None without it."""
    choice = getattr(args, "workload_choice", None)
    if choice is None:
        return None
    return {"traffic": args.traffic, "host_ports": choice.host_ports, "moved": choice.moved,
            "static_max_load": round(choice.static_max, 6), "chosen_max_load": round(choice.chosen_max, 6),
            "minimal_max_load": round(choice.minimal_max, 6), "seconds": round(choice.seconds, 3)}


def cmd_traffic_generate(args: argparse.Namespace) -> int:
    from hpcfabric.topology.loader import load_topology
    from hpcfabric.topology.traffic import pattern_traffic, write_traffic

    fabric = load_topology(args.fabric)
    kw: dict[str, Any] = {}
    for item in args.param or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--param {item!r}: expected KEY=VALUE", source="<arguments>", field="--param")
        kw[key.strip()] = _number(value.strip())
    matrix = pattern_traffic(fabric, args.pattern, **kw)
    try:
        write_traffic(matrix, args.output)
    except OSError as err:
        raise ConfigError(f"cannot write {args.output}: {err.strerror or err}", source=args.output,
                          field="--output") from None
    print(f"{args.output}: {args.pattern} on {fabric.name}: {_describe(matrix)}")
    return 0


def cmd_traffic_check(args: argparse.Namespace) -> int:
    from hpcfabric.topology.loader import load_topology
    from hpcfabric.topology.traffic import load_traffic

    fabric = load_topology(args.fabric)
    matrix = load_traffic(args.file, fabric)
    if args.json:
        print(json.dumps({"file": args.file, "fabric": fabric.name, **_summary(matrix)}))
    else:
        print(f"{args.file}: ok: traffic matrix for {fabric.name}: {_describe(matrix)}")
    return 0


def _number(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _summary(matrix: Any) -> dict[str, Any]:
    """What a matrix holds: level, entries, endpoints that send / receive, total weight."""
    return {"level": matrix.level, "entries": len(matrix), "senders": len(set(matrix.src.tolist())),
            "receivers": len(set(matrix.dst.tolist())), "endpoints": len(matrix.names),
            "total_weight": round(float(matrix.weight.sum()), 6)}


def _describe(matrix: Any) -> str:
    return ", ".join(f"{k} {v}" for k, v in _summary(matrix).items()) or "loaded"


def add_parser(sub: Any) -> None:
    """``hpcfabric traffic generate|check`` (docs/workload.md)."""
    p = sub.add_parser("traffic", help="traffic matrices for workload-aware routing: generate one for a pattern, "
                       "check one", description="traffic matrices (docs/workload.md): generate the matrix of a "
                       "traffic pattern for a fabric, or check a matrix file against a fabric")
    tsub = p.add_subparsers(dest="traffic_command", metavar="ACTION")
    tsub.required = True
    g = tsub.add_parser("generate", help="write the matrix of a pattern", description="write the traffic matrix "
                        "of a pattern on a fabric (docs/workload.md lists the patterns)")
    g.set_defaults(func=cmd_traffic_generate)
    g.add_argument("--fabric", required=True, metavar="TOPO", help="topology YAML file")
    g.add_argument("--pattern", required=True, metavar="NAME",
                   help="uniform (un), adversarial (adv), stencil (--param width=N), transpose, bitrev "
                   "(hpcfabric.topology.traffic.TRAFFIC_PATTERNS; docs/workload.md)")
    g.add_argument("--param", action="append", metavar="KEY=VALUE", help="pattern parameter (repeatable)")
    g.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="output file: CSV src,dst,weight, or YAML for .yaml/.yml")
    c = tsub.add_parser("check", help="load a matrix against a fabric and summarise it",
                        description="load a traffic matrix against a fabric; errors name file, row and field")
    c.set_defaults(func=cmd_traffic_check)
    c.add_argument("file", metavar="FILE", help="traffic matrix file")
    c.add_argument("--fabric", required=True, metavar="TOPO", help="topology YAML file")
    c.add_argument("--json", action="store_true")
