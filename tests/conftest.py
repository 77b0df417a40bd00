"""Shared pytest configuration, and the ``etcd_cluster`` fixture (a real 3-member cluster per test module)."""

import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "ovs: needs root and a running Open vSwitch (userspace bridges are created)")
    config.addinivalue_line("markers", "mininet: needs root, Open vSwitch and Mininet (builds emulated fabrics)")


@pytest.fixture(scope="module")
def etcd_cluster():
    """:class:`hpcfabric.emu.etcd_cluster.EtcdCluster` of 3 members, started; skips without etcd / etcd3gw."""
    from hpcfabric.emu.etcd_cluster import EtcdCluster, missing

    why = missing()
    if why:
        pytest.skip(why)
    cluster = EtcdCluster(3)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()
