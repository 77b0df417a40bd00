"""Proven repairs: fast-failover groups and rerouting around failed links."""

from hpcfabric.compat import forwarder

# the names of the old hpcfabric.failover module, found on use in reroute (then groups)
__getattr__ = forwarder("failover")
del forwarder
