"""``hpcfabric controller --config FILE``: run the OpenFlow 1.3 controller (os-ken in-process; docs/controller.md)."""

from __future__ import annotations

import argparse
from typing import Any

from hpcfabric.cli.common import config_command


def add_parser(sub: Any) -> None:
    p = config_command(sub, "controller", run, "run the OpenFlow controller", "run the OpenFlow 1.3 controller "
                       "(os-ken in-process) for a config file; see docs/controller.md",
                       config_help="controller INI file (see configs/)")
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
