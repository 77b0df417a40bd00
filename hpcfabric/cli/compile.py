"""``hpcfabric compile --config FILE``: compile and prove a config's fabric once and write the tables per
partition for its controllers (``[hpcfabric] compiled = DIR`` loads them; docs/ha.md)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from hpcfabric.cli.common import config_command, emit
from hpcfabric.errors import ConfigError


def add_parser(sub: Any) -> None:
    p = config_command(sub, "compile", run, "compile and prove a config's fabric once for its controllers",
                       "compile and prove a controller config's fabric once and write the tables per partition "
                       "([hpcfabric] compiled = DIR loads them; docs/ha.md)")
    p.add_argument("--out", default=None, metavar="DIR", help="artifact directory (default: [hpcfabric] compiled)")
    p.add_argument("--partitions", type=int, default=None, metavar="K",
                   help="partition files to write (default: [ha] partitions)")


def run(args: argparse.Namespace) -> int:
    from hpcfabric.config import load_config
    from hpcfabric.config.artifact import write_artifact

    cfg = load_config(args.config, compile=False)
    out = args.out or cfg.compiled_dir
    if not out:
        raise ConfigError("no output directory: give --out DIR or set [hpcfabric] compiled", source=args.config,
                          field="hpcfabric.compiled")
    parts = cfg.ha_partitions if args.partitions is None else args.partitions
    m = write_artifact(cfg, out, parts, progress=lambda m: print(m, file=sys.stderr))
    emit({"artifact": out, **{k: m[k] for k in ("fabric", "switches", "rules", "compile_s", "total_s")},
          "deadlock": m["deadlock"].get("verdict"), "partitions": [p["label"] for p in m["partitions"]]})
    return 0
