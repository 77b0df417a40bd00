"""The ``hpcfabric`` command line: one module per command, registered by :func:`build_parser`.

``check`` (a topology or a controller config), ``plan`` (host addresses), ``rules`` (compiled tables:
summary, JSON or ``ovs-ofctl`` syntax), ``verify`` (all-pairs forwarding check), ``prove`` (delivery and
deadlock freedom under any set of paused ports; ``sweep`` is its deprecated alias),
``controller``, ``compile`` (the tables of a config for its controllers), ``status`` (HA), ``traffic``
(matrices) and ``analyze`` (:mod:`hpcfabric.analysis.cli`). The compiling commands share
:func:`hpcfabric.cli.common.compiled_from_args` (load -> plan -> compile, ``--traffic`` included).
Errors print one line on stderr and exit 2 for bad input, never a traceback (set
``HPCFABRIC_DEBUG=1`` to see one for internal errors).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from hpcfabric import __version__
from hpcfabric.analysis import cli as analyze
from hpcfabric.cli import check, controller, plan, prove, rules, status, sweep, traffic, verify
from hpcfabric.cli import compile as compile_  # the module (the name keeps the builtin free)
from hpcfabric.errors import HpcfabricError

#: the commands in the order ``hpcfabric --help`` lists them; each module's ``add_parser(sub)`` registers it
COMMANDS = (check, plan, rules, verify, sweep, prove, controller, compile_, status, traffic)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hpcfabric",
        description="HPC fabrics on OpenFlow switches: topologies, hierarchical MACs, compacted rules.",
    )
    parser.add_argument("--version", action="version", version=f"hpcfabric {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for command in COMMANDS:
        command.add_parser(sub)
    analyze.add_analyze_parser(sub)  # analyze rules | power | onoff | scale (docs/analysis.md)
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
