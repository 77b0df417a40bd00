"""Mininet adapter for hpcfabric, in one import: a :class:`~hpcfabric.topology.model.Fabric` as a Mininet network.

This file lives in ``mininet/`` *without* an ``__init__.py`` on purpose
(``import mininet`` must keep resolving to Debian's Mininet). Import it by
path, e.g. from a runner or a test::

    sys.path.insert(0, "<repo>/mininet"); import fabric_net

It gathers the adapter's public API from the step modules that own it (see ``docs/mininet.md``):

* :mod:`fabric_topo` -- building: :class:`FabricTopo`, :func:`build_net`, names and addresses
  (:func:`intf_name`, :func:`host_ip`, :func:`node`, :func:`host_intf`), :func:`ovs_running`;
* :mod:`ovs_flows` -- :func:`dump_flows` (:class:`FlowStat`), :func:`flow_counts`, :func:`port_stats`,
  :func:`sync_stats`, :func:`install_static_flows`;
* :mod:`dmp_hosts` -- :func:`run_dmp`, :func:`host_macs`, :func:`set_static_neighbours`;
* :mod:`pause_inject` -- :func:`inject_pause` and :data:`PAUSE_TRAIN_SCRIPT` for trains.
"""

from __future__ import annotations

from dmp_hosts import dmp_command, host_macs, run_dmp, set_static_neighbours
from fabric_topo import (
    HOST_PORT,
    IFNAMSIZ,
    IP_PREFIX,
    ROOT,
    FabricHost,
    FabricNetError,
    FabricTopo,
    QuietRemoteController,
    build_net,
    check_names,
    conflicts,
    host_intf,
    host_ip,
    host_ips,
    intf_name,
    node,
    ovs_running,
    random_vendor_mac,
    run_cmd,
    stop_net,
)
from ovs_flows import OFCTL, FlowStat, dump_flows, flow_counts, install_static_flows, parse_dump_flows, port_stats, sync_stats
from pause_inject import PAUSE_TRAIN_SCRIPT, inject_pause

from hpcfabric.rules.addressing import format_mac

__all__ = [
    "HOST_PORT", "IFNAMSIZ", "IP_PREFIX", "OFCTL", "PAUSE_TRAIN_SCRIPT", "ROOT", "FabricHost", "FabricNetError",
    "FabricTopo", "FlowStat", "QuietRemoteController", "build_net", "check_names", "conflicts", "dmp_command",
    "dump_flows", "flow_counts", "format_mac", "host_intf", "host_ip", "host_ips", "host_macs", "inject_pause",
    "install_static_flows", "intf_name", "node", "ovs_running", "parse_dump_flows", "port_stats",
    "random_vendor_mac", "run_cmd", "run_dmp", "set_static_neighbours", "stop_net", "sync_stats",
]  # fmt: skip
