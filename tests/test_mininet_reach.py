"""Paced reachability against real Mininet hosts (fb-2d-3x3, static flows: 9 bridges, 18 hosts).

One host stops answering echo requests (``net.ipv4.icmp_echo_ignore_all`` in its namespace): the
17 pairs towards it are reported lost after every retry pass, all 289 others reached. Answering again
after the first pass: those pairs count as reached (and retried). The covering set reaches every
switch pair. The fast teardown removes the net's bridges and interfaces. Needs root and Open vSwitch
(the caller holds /tmp/hpcfabric-ovs.lock, as for every Mininet test).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = [
    pytest.mark.mininet,
    pytest.mark.filterwarnings("ignore:distutils Version classes are deprecated:DeprecationWarning"),
]

from mininet_gate import require_mininet  # noqa: E402

fn = require_mininet()

from paced_ping import Pacing, paced_reachability  # noqa: E402  (mininet/paced_ping.py)
from reachability import all_pairs_ping, pair_targets  # noqa: E402  (mininet/reachability.py)
from mininet.log import setLogLevel  # noqa: E402

from hpcfabric.rules.addressing import plan_addresses  # noqa: E402
from hpcfabric.rules.compiler import compile_fabric  # noqa: E402
from hpcfabric.topology.loader import load_topology  # noqa: E402

setLogLevel("error")
PREFIX = "rq"  # own node names: runs beside another net of the same fabric
SILENT = "s1_1h0"


def _ignore_echo(net, host: str, on: bool) -> None:  # noqa: ANN001
    fn.node(net, host).cmd(f"sysctl -qw net.ipv4.icmp_echo_ignore_all={int(on)}")


@pytest.fixture(scope="module")
def net():  # noqa: ANN201
    fabric = load_topology(ROOT / "topologies" / "fb-2d-3x3.yaml")
    plan = plan_addresses(fabric, "compact")
    compiled = compile_fabric(fabric, plan, routing="minimal")
    net = fn.build_net(fabric, plan, controller_port=None, prefix=PREFIX, seed=3)
    try:
        fn.install_static_flows(net, {n: t.flows for n, t in compiled.tables.items()})
        assert all(r.get("returncode") == 0 for r in fn.run_dmp(net).values())
        fn.set_static_neighbours(net, plan)
        yield net
    finally:
        assert fn.stop_net(net) is None
        left = subprocess.run(["ovs-vsctl", "list-br"], capture_output=True, text=True).stdout.split()
        assert not [b for b in left if b.startswith(PREFIX)], left
        links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
        assert f" {PREFIX}s" not in links


def test_every_pair_reached(net) -> None:  # noqa: ANN001
    res = all_pairs_ping(net, net.hf_fabric)
    assert res["tool"] == "fping (paced)"
    assert res["pairs"] == 18 * 17 and res["lost"] == 0 and res["reached"] == 306, res


def test_silent_host_is_lost_after_retries_all_others_reached(net) -> None:  # noqa: ANN001
    _ignore_echo(net, SILENT, True)
    try:
        pacing = Pacing(width=8, rate_pps=2000, timeout_ms=200, retries=1, passes=3, settle_s=0.2, backoff_loss=0.1)
        res = paced_reachability(net, pair_targets(net.hf_fabric), pacing)
    finally:
        _ignore_echo(net, SILENT, False)
    assert res["lost"] == 17 and res["reached"] == 306 - 17, res
    assert sorted(res["lost_pairs"]) == sorted(f"{h.name}->{SILENT}" for h in net.hf_fabric.hosts if h.name != SILENT)
    assert res["passes"] == 3 and res["probes"] == 306 + 2 * 17


def test_pair_lost_once_then_answering_counts_as_reached(net) -> None:  # noqa: ANN001
    _ignore_echo(net, SILENT, True)
    pacing = Pacing(width=8, rate_pps=2000, timeout_ms=200, retries=0, passes=3, settle_s=0.2, backoff_loss=0.1)
    try:
        res = paced_reachability(net, pair_targets(net.hf_fabric), pacing,
                                 between_passes=lambda _n: _ignore_echo(net, SILENT, False))
    finally:
        _ignore_echo(net, SILENT, False)
    assert res["lost"] == 0 and res["reached"] == 306, res
    assert res["retried"] == 17 and res["retried_reached"] == 17 and res["passes"] == 2


def test_covering_set_reaches_every_switch_pair(net) -> None:  # noqa: ANN001
    fabric = net.hf_fabric
    targets = pair_targets(fabric, "cover")
    sw = {h.name: h.switch for h in fabric.hosts}
    covered = {(sw[s], sw[d]) for s, dsts in targets.items() for d in dsts}
    names = [s.name for s in fabric.switches]
    assert covered >= {(a, b) for a in names for b in names if a != b}
    assert {d for dsts in targets.values() for d in dsts} == set(sw)  # every host answers someone
    res = all_pairs_ping(net, fabric, coverage="cover")
    assert res["lost"] == 0 and res["pairs"] == sum(len(d) for d in targets.values()) < 306, res
