"""Fabric models, generators and the YAML loader."""

from hpcfabric.topology.generators import (
    dragonfly_fabric,
    fat_tree_fabric,
    flattened_butterfly_fabric,
)
from hpcfabric.topology.model import Fabric, Host, Link, Peer, Switch

__all__ = [
    "Fabric",
    "Host",
    "Link",
    "Peer",
    "Switch",
    "dragonfly_fabric",
    "fat_tree_fabric",
    "flattened_butterfly_fabric",
]

from hpcfabric.topology.explicit import explicit_fabric  # noqa: E402
from hpcfabric.topology.loader import load_topology, parse_topology  # noqa: E402

__all__ += ["explicit_fabric", "load_topology", "parse_topology"]
