"""Switching jobs in Mininet (issue 20): a new traffic matrix reloaded into a running controller while every host
sends sequence-numbered UDP (and one host pings every 10 ms) loses no frame, and the reload sends exactly the
entries that differ (``mininet/run_job_switch.py`` on the 3x3 Flattened Butterfly, Valiant routing: every
remote frame crosses the intermediate entries the job switch rewrites)."""

from __future__ import annotations

import json
import subprocess
import sys

from mininet_gate import ROOT, require_mininet

require_mininet()


def test_job_switch_under_traffic_loses_nothing_and_sends_only_the_diff():
    cmd = [sys.executable, str(ROOT / "mininet" / "run_job_switch.py"), "--fabrics", str(ROOT / "configs" / "fb-2d-3x3.conf"),
           "--jobs", "adversarial,transpose,bitrev,uniform", "--gap", "2", "--pps", "40", "--prefix", "tj"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert res.returncode == 0 and summary["passed"], (summary, res.stderr[-2000:])
    frames, ping = summary["fb-2d-3x3_frames"], summary["fb-2d-3x3_ping"]
    assert frames["sent"] > 1000 and frames["lost"] == 0 and frames["received"] == frames["sent"]
    assert ping["sent"] > 300 and ping["lost"] == 0
    switches = summary["fb-2d-3x3_switches"]
    assert [(s["from"], s["to"]) for s in switches] == [("adversarial", "transpose"), ("transpose", "bitrev"),
                                                        ("bitrev", "uniform")]
    for s in switches:
        assert s["flow_mods_sent"] == s["table_diff"] == s["expected_diff"], s
        assert 0 < s["table_diff"] < s["rules_total"] == 324
        assert s["group_mods_sent"] <= s["group_diff"]
