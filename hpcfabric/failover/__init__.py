"""Proven repairs: fast-failover groups and rerouting around failed links."""
