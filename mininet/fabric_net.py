"""Mininet adapter for hpcfabric, in one import: a :class:`~hpcfabric.topology.model.Fabric` as a Mininet network.

This file lives in ``mininet/`` *without* an ``__init__.py`` on purpose
(``import mininet`` must keep resolving to Debian's Mininet). Import it by
path, e.g. from a runner or a test::

    sys.path.insert(0, "<repo>/mininet"); import fabric_net

It gathers what the Mininet tests use from the step modules that own it (see ``docs/mininet.md``;
anything else, import from its module):

* :mod:`fabric_topo` -- :func:`build_net`, :func:`stop_net`, :func:`intf_name`, :func:`node`, :func:`ovs_running`;
* :mod:`ovs_flows` -- :func:`dump_flows`, :func:`flow_counts`, :func:`port_stats`, :func:`sync_stats`,
  :func:`install_static_flows`;
* :mod:`dmp_hosts` -- :func:`run_dmp`, :func:`host_macs`, :func:`set_static_neighbours`;
* :mod:`pause_inject` -- :func:`inject_pause`.
"""

from __future__ import annotations

from dmp_hosts import host_macs, run_dmp, set_static_neighbours
from fabric_topo import FabricNetError, build_net, intf_name, node, ovs_running, stop_net
from ovs_flows import OFCTL, dump_flows, flow_counts, install_static_flows, port_stats, sync_stats
from pause_inject import inject_pause

from hpcfabric.rules.addressing import format_mac

__all__ = [
    "OFCTL", "FabricNetError", "build_net", "dump_flows", "flow_counts", "format_mac", "host_macs", "inject_pause",
    "install_static_flows", "intf_name", "node", "ovs_running", "port_stats", "run_dmp", "set_static_neighbours",
    "stop_net", "sync_stats",
]
