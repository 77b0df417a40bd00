"""Fast-failover groups on real Open vSwitch (root + OVS; bridge names prefixed ``ff``).

``mininet/run_reliability.py --fast-failover --phases link`` on the 3x3 Flattened Butterfly: the controller
installs its 36 fast-failover groups (OVS 3.x userspace accepts OFPGT_FF with watch_port, and the flows
referencing them), a fabric link carrying a 2 ms ping is cut with ``ip link``, OVS's groups move the traffic
before the controller's recomputation is confirmed, every pair is reachable with the link down and after it
is back.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = [pytest.mark.mininet]

from mininet_gate import require_mininet, run_runner  # noqa: E402

fn = require_mininet()


def test_groups_bridge_a_link_cut_before_the_reroute():
    r = run_runner("run_reliability.py", "--prefix", "ff", "--phases", "link", "--fast-failover", "--topology",
                   str(ROOT / "topologies" / "fb-2d-3x3.yaml"))
    assert r["passed"] and r["_rc"] == 0, (r["failures"], r["_stderr"])
    assert r["ff_groups"] == 36 and r["baseline_lost"] == 0
    # the groups moved the ping before the recomputation was confirmed on every switch
    assert r["ff_link_recovery_ms"] is not None and r["link_recovery_ms"] is not None
    assert r["ff_link_recovery_ms"] < r["link_recovery_ms"], r
    assert r["link_after_pairs_lost"] == 0 and r["link_restored_lost"] == 0
