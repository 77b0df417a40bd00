"""``mininet/run_failures.py`` end to end on the demo Dragonfly (root + Open vSwitch; bridge names prefixed ``fl``).

Two links (a global, then a local one, each carrying one of six 10-ms ping streams when it fails) and then a
switch (the busiest without a stream's end; all its links at once) fail one after another under the
controller with ``flow_control = pfc``, guards and fast-failover groups: every repair is proven and
installed, no ping is lost outside a fast-failover window (failure -> repair confirmed), the PAUSE check
passes on the repaired tables, and after recovery every bridge holds exactly the compiled flows and
groups again and every pair is reachable. About a minute on 2 cores. The acceptance run on
dragonfly-a6-p3-h3 (three links, a switch) is ``make failures`` (docs/mininet.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = [pytest.mark.mininet]

from mininet_gate import require_mininet, run_runner  # noqa: E402

fn = require_mininet()


@pytest.fixture(scope="module")
def result():
    return run_runner("run_failures.py", "--config", str(ROOT / "configs" / "dragonfly-a4-p2-h2.conf"), "--links", "2",
                      "--prefix", "fl", "--settle", "1")


def test_run_passes(result):
    assert result["passed"] and result["_rc"] == 0, (result["failures"], result["_stderr"])


def test_the_controller_runs_what_the_issue_asks(result):
    assert result["flow_control"] == "pfc" and result["routing"] == "conditional" and result["deadlock"] == "proven"
    assert result["fast_failover"] and result["ff_groups"] > 0 and result["groups_at_start"] == result["ff_groups"]
    assert result["tables_at_start"] is True and result["before_ping_lost"] == 0


def test_every_failure_crossed_a_stream_and_every_repair_is_proven(result):
    events = result["events"]
    assert [e["kind"] for e in events] == ["link", "link", "switch", "recovery"], events
    assert [e["link_kind"] for e in events[:2]] == ["global", "local"]
    for e in events:
        assert e["installed"] and e["refused"] == 0 and e["repairs"] >= 1, e
        assert e["verdicts"] and all(v == "proven" for v in e["verdicts"]), e
        assert e["repair_ms"] is not None and e["flow_mods"] > 0 and e["waves"], e
    for e in events[:3]:
        assert e["carried_pps"] >= 50, e  # a 10-ms stream crossed it when it failed
    assert result["failed_switch"] not in {s for st in result["streams"] for s in (st["path"][0], st["path"][-1])}


def test_no_ping_lost_outside_the_fast_failover_windows(result):
    assert result["lost_outside"] == 0, result["lost_outside_examples"]
    streams = result["ping_streams"]
    assert len(streams) == 6 and all(s["received"] > 500 for s in streams.values()), streams
    assert sum(e.get("lost", 0) for e in result["events"]) == result["pings_lost"]


def test_pause_check_after_the_failures_and_tables_restored(result):
    assert result["pause_flips"] >= 2 and result["pause_lapses"] == 0, result["pause"]
    assert result["diverted"] and result["restored"]
    assert result["tables_restored"] is True and result["tables_restored_flows_differing"] == 0
    assert result["tables_restored_groups_differing"] == []
    assert result["ping_lost"] == 0 and result["ping_pairs"] == 72 * 71
