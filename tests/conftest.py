"""Shared pytest configuration, and the ``etcd_cluster`` / ``etcd_tls_cluster`` fixtures (a real 3-member cluster
per test module; the second with TLS, client certificates and etcd auth)."""

import os
import re
from pathlib import Path

import pytest

#: A test module whose source matches this drives shared machinery (Open vSwitch, Mininet, etcd, Prometheus,
#: a browser, the switch emulator's sockets and clocks): under ``pytest -n`` (pytest-xdist, ``make test``) such
#: modules run one after another in one worker (xdist group "fabric"); the pure ones spread over the others.
SHARED = re.compile(r"mininet|Mininet|ovs|openvswitch|etcd|prometheus|chromium|selenium|run_fabric|hpcfabric\.emu"
                    r"|ryu-manager|osken-manager|wall-clock|time\.monotonic")
#: ... and these, whose assertions bound wall-clock time, run there too (a pure worker is niced, see below).
TIMED = {"test_dmp.py", "test_status_milestone.py"}
_shared: dict[Path, bool] = {}


def shared(path: Path) -> bool:
    """True when the test module at ``path`` must run in the serial "fabric" group."""
    if path not in _shared:
        _shared[path] = path.name in TIMED or bool(SHARED.search(path.read_text(errors="replace")))
    return _shared[path]


def pytest_collection_modifyitems(config, items):
    for item in items:
        if shared(Path(str(item.path))):
            item.add_marker(pytest.mark.xdist_group("fabric"))


@pytest.fixture(autouse=True)
def _priority(request):
    """Under xdist, pure tests run at nice 10 so the serial fabric tests beside them keep a core's worth of CPU."""
    if "PYTEST_XDIST_WORKER" in os.environ:
        os.setpriority(os.PRIO_PROCESS, 0, 0 if shared(Path(str(request.node.path))) else 10)
    yield


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
