"""``hpcfabric sweep``: deprecated alias of ``hpcfabric prove --json``.

The single-paused-port sweep is retired: the union proof (:func:`hpcfabric.verify.union.proof.prove`) covers every
single paused port and any set of them, and ``prove --fallback cdg`` (the default) runs the brute-force CDG
oracle over single paused ports when the union fails. Kept as an alias, not removed, so that scripts calling
``sweep`` (JSON, exit 0 ok / 1 not / 2 bad input) keep working: one deprecation line on stderr, then prove's
report as JSON. ``--symmetric`` is accepted and ignored (prove reduces by symmetry itself); ``--up-down`` is
``prove --up-down``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from hpcfabric.cli.common import command
from hpcfabric.cli.prove import add_options
from hpcfabric.cli.prove import run as run_prove

DEPRECATED = ("hpcfabric: warning: 'sweep' is deprecated and runs 'prove --json' (the union proof covers every "
              "single paused port and any set of them; docs/routing.md)")


def add_parser(sub: Any) -> None:
    p = command(sub, "sweep", run, "deprecated: runs 'prove --json' (the single-paused-port sweep is retired)")
    add_options(p)
    p.add_argument("--symmetric", action="store_true", help="ignored: prove reduces by symmetry itself")


def run(args: argparse.Namespace) -> int:
    print(DEPRECATED, file=sys.stderr, flush=True)
    args.json = True
    return run_prove(args)
