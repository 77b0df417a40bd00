"""Shared pytest configuration, and the ``etcd_cluster`` / ``etcd_tls_cluster`` fixtures (a real 3-member cluster
per test module; the second with TLS, client certificates and etcd auth)."""

import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "ovs: needs root and a running Open vSwitch (userspace bridges are created)")
    config.addinivalue_line("markers", "mininet: needs root, Open vSwitch and Mininet (builds emulated fabrics)")


def _cluster(**kw):
    from hpcfabric.emu.etcd_cluster import EtcdCluster, missing

    why = missing()
    if why:
        pytest.skip(why)
    cluster = EtcdCluster(3, **kw)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(scope="module")
def etcd_cluster():
    """:class:`hpcfabric.emu.etcd_cluster.EtcdCluster` of 3 members, started; skips without etcd / etcd3gw."""
    yield from _cluster()


@pytest.fixture(scope="module")
def etcd_tls_cluster():
    """The same over TLS with client certificates and etcd auth (users root, hpcfabric, reader)."""
    yield from _cluster(tls=True, auth=True)
