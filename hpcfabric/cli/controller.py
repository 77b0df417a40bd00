"""``hpcfabric controller --config FILE``: run the OpenFlow 1.3 controller (os-ken in-process; docs/controller.md)."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(sub: Any) -> None:
    p = sub.add_parser("controller", help="run the OpenFlow controller", description="run the OpenFlow 1.3 controller "
                       "(os-ken in-process) for a config file; see docs/controller.md")
    p.set_defaults(func=run)
    p.add_argument("--config", required=True, metavar="FILE", help="controller INI file (see configs/)")
    p.add_argument("--status-file", default=None, metavar="F", help="override [hpcfabric] status_file")
    p.add_argument("--listen-port", type=int, default=None, metavar="N", help="override [openflow] listen_port")


def run(args: argparse.Namespace) -> int:
    from hpcfabric.config import load_config

    config = load_config(args.config)  # ConfigError -> exit 2 before anything starts
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # eventlet's deprecation banner
        from hpcfabric.controller.launch import run as run_controller  # the framework (os-ken) comes in here

    return run_controller(config, listen_port=args.listen_port, status_file=args.status_file)
