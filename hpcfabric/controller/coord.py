"""``hpcfabric status``: who masters which partition, read from the HA backend's store.

:func:`describe` reads the store itself (not a controller's status file), so it also works when no
controller runs: per partition its master, standbys, generation and lease age.
"""

from __future__ import annotations

import json
import time
from typing import Any

from hpcfabric.config import ControllerConfig
from hpcfabric.errors import CoordinationError


def describe(config: ControllerConfig) -> dict[str, Any]:
    """The coordination store's view: ``{backend, members, partitions: [{partition, covers, switches, master,
    standbys, generation, lease_age}]}``; :class:`CoordinationError` if the store cannot be read."""
    if config.ha_backend == "etcd":
        return _describe_etcd(config)
    return _describe_file(config)


def _describe_file(config: ControllerConfig) -> dict[str, Any]:
    n = len(config.fabric.switches)
    row = {"partition": "all", "covers": "the whole fabric", "switches": n, "master": None, "standbys": [],
           "generation": 0, "lease_age": None}
    if config.ha_role == "equal" or not config.ha_lease_file:
        return {"backend": "none (role = equal: one controller, no roles)", "members": [], "partitions": [row]}
    try:
        with open(config.ha_lease_file, encoding="utf-8") as fh:
            lease = json.load(fh)
    except FileNotFoundError:
        lease = {}
    except (OSError, ValueError) as err:
        raise CoordinationError(f"{config.ha_lease_file}: cannot read the lease: {err}") from None
    expires = float(lease.get("expires") or 0)
    alive = expires > time.time()
    row.update(master=lease.get("holder") if alive else None, generation=int(lease.get("generation") or 0),
               lease_age=round(time.time() - (expires - config.ha_lease_timeout), 3) if alive else None)
    return {"backend": f"file {config.ha_lease_file}", "members": [row["master"]] if alive else [],
            "partitions": [row]}


def _describe_etcd(config: ControllerConfig) -> dict[str, Any]:
    from hpcfabric.controller.etcdstore import EtcdStore, EtcdUnavailable
    from hpcfabric.topology.partition import partition_fabric

    store = EtcdStore.for_config(config, timeout=2.0)
    prefix = f"{config.ha_prefix.rstrip('/')}/{config.fabric.name}/"
    try:
        kvs, _ = store.range_prefix(prefix)
        members = sorted(k[len(prefix) + len("members/"):] for k in kvs if k.startswith(prefix + "members/"))
        rows, ages = [], {}
        for part in partition_fabric(config.fabric, config.ha_partitions):
            kv = kvs.get(prefix + "master/" + part.name)
            gen = kvs.get(prefix + "gen/" + part.name)
            master, age = None, None
            if kv is not None:
                try:
                    master = json.loads(kv["value"]).get("instance")
                except ValueError:
                    master = "?"
                if kv["lease"] and kv["lease"] not in ages:
                    left, granted = store.time_to_live(kv["lease"])
                    ages[kv["lease"]] = granted - left if left >= 0 else None
                age = ages.get(kv["lease"])
            rows.append({"partition": part.name, "covers": part.label, "switches": len(part.switches),
                         "master": master, "standbys": [m for m in members if m != master],
                         "generation": int(gen["value"]) if gen else 0, "lease_age": age})
    except EtcdUnavailable as err:
        raise CoordinationError(f"{config.path}: [ha] endpoints: {err}") from None
    return {"backend": f"etcd {','.join(config.ha_endpoints)} {prefix}", "members": members, "partitions": rows}


def format_status(view: dict[str, Any]) -> str:
    lines = [f"backend: {view['backend']}", f"live instances: {', '.join(view['members']) or '-'}",
             f"{'partition':<10} {'covers':<22} {'switches':>8}  {'master':<16} {'gen':>5} {'lease age':>9}  standbys"]
    for r in view["partitions"]:
        age = "-" if r["lease_age"] is None else f"{r['lease_age']:.0f} s" if isinstance(r["lease_age"], int) \
            else f"{r['lease_age']:.1f} s"
        lines.append(f"{r['partition']:<10} {r['covers']:<22} {r['switches']:>8}  {r['master'] or '(none)':<16} "
                     f"{r['generation']:>5} {age:>9}  {', '.join(r['standbys']) or '-'}")
    return "\n".join(lines)
