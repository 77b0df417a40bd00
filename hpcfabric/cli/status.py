"""``hpcfabric status --config FILE``: HA -- per partition its master, standbys, generation and lease age
(read from the coordination store, etcd or the lease file; docs/ha.md)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from hpcfabric.cli.common import config_command


def add_parser(sub: Any) -> None:
    p = config_command(sub, "status", run, "HA: per partition its master, standbys, generation and lease age",
                       "read the HA coordination store (etcd or the lease file) of a controller config; see docs/ha.md")
    p.add_argument("--json", action="store_true", help="print JSON")


def run(args: argparse.Namespace) -> int:
    from hpcfabric.config import load_config
    from hpcfabric.controller.coord import describe, format_status

    view = describe(load_config(args.config, compile=False))
    print(json.dumps(view, indent=2) if args.json else format_status(view))
    return 0
