"""configs/prometheus and configs/grafana without a fabric: promtool accepts the config and the rules, the
rules' unit tests (configs/prometheus/alerts_test.yml: every alert fires on its series and only there) pass,
every dashboard query parses (promtool, as a recording rule) and names metrics the controller exports,
and every alert is documented. The live check is tests/test_monitoring_mininet.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "mininet"))

from prom_server import config_copy, dashboard_queries  # noqa: E402  (mininet/prom_server.py)

from hpcfabric.controller.metrics import METRICS  # noqa: E402

PROM = ROOT / "configs" / "prometheus"
#: the per-link congestion metrics of issue 29 item 1 (branch web29): the congestion dashboard uses them
CONGESTION_METRICS = ("hpcfabric_link_class_utilisation", "hpcfabric_link_class_pause_frames",
                      "hpcfabric_link_class_paused_seconds", "hpcfabric_link_class_flips", "hpcfabric_link_top_utilisation")
ALERTS = ("HpcfabricControllerDown", "HpcfabricDeadlockNotProven", "HpcfabricRepairUnproven", "HpcfabricPauseStorm",
          "HpcfabricLinkFlapping", "HpcfabricCablesMissing", "HpcfabricMiswiredPorts", "HpcfabricPartitionWithoutMaster",
          "HpcfabricRepairSlow", "HpcfabricSwitchDisconnected", "HpcfabricConfigInvalid")


def promtool(*args: str, cwd: Path = PROM) -> subprocess.CompletedProcess:
    exe = shutil.which("promtool") or "/usr/bin/promtool"
    if not Path(exe).exists():
        pytest.skip("promtool is not installed (scripts/bootstrap.sh --prometheus)")
    return subprocess.run([exe, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def rules() -> list[dict]:
    return [r for g in yaml.safe_load((PROM / "alerts.yml").read_text())["groups"] for r in g["rules"]]


def test_promtool_accepts_config_and_rules():
    for args in (("check", "config", "prometheus.yml"), ("check", "rules", "alerts.yml")):
        res = promtool(*args)
        assert res.returncode == 0, (args, res.stdout, res.stderr)
    assert "SUCCESS: 11 rules found" in promtool("check", "rules", "alerts.yml").stdout
    assert sorted(r["alert"] for r in rules()) == sorted(ALERTS)


def test_rule_unit_tests_pass_and_cover_every_alert():
    res = promtool("test", "rules", "alerts_test.yml")
    assert res.returncode == 0 and "SUCCESS" in res.stdout, res.stdout + res.stderr
    tested = {t["alertname"] for g in yaml.safe_load((PROM / "alerts_test.yml").read_text())["tests"]
              for t in g.get("alert_rule_test", ()) if t["exp_alerts"]}
    assert tested == set(ALERTS)


def test_a_rule_unit_test_fails_when_a_rule_is_broken(tmp_path):
    """The unit tests can fail: the PAUSE storm rule with a 10-minute hold no longer fires where it must."""
    text = (PROM / "alerts.yml").read_text()
    broken = re.sub(r"(alert: HpcfabricPauseStorm\n(?:.*\n)*?\s+for: )30s", r"\g<1>10m", text)
    assert broken != text
    (tmp_path / "alerts.yml").write_text(broken)
    shutil.copy(PROM / "alerts_test.yml", tmp_path)
    res = promtool("test", "rules", "alerts_test.yml", cwd=tmp_path)
    assert res.returncode != 0 and "HpcfabricPauseStorm" in res.stdout + res.stderr


def test_config_copy_keeps_expressions_shortens_holds(tmp_path):
    conf = config_copy(tmp_path, ["127.0.0.1:1234"], interval="1s", hold="2s", labels={"fabric": "t"})
    got = yaml.safe_load((tmp_path / "alerts.yml").read_text())["groups"][0]["rules"]
    assert [r["expr"] for r in got] == [r["expr"] for r in rules()]
    assert {r["for"] for r in got} == {"2s"}
    assert promtool("check", "config", str(conf), cwd=tmp_path).returncode == 0
    c = yaml.safe_load(conf.read_text())
    assert c["global"]["scrape_interval"] == "1s" and c["scrape_configs"][0]["static_configs"][0]["targets"] == ["127.0.0.1:1234"]


def test_dashboards_are_generated_and_well_formed():
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "grafana_dashboards.py"), "--check"],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    files = sorted((ROOT / "configs" / "grafana").glob("*.json"))
    assert [f.name for f in files] == ["hpcfabric-congestion.json", "hpcfabric-control-plane.json", "hpcfabric-failures.json",
                                       "hpcfabric-ha.json", "hpcfabric-overview.json"]
    for f in files:
        d = json.loads(f.read_text())
        assert d["uid"] == f.stem and d["panels"]
        for p in d["panels"]:
            assert p["targets"] and all(t["expr"] for t in p["targets"]), (f.name, p["title"])
            g = p["gridPos"]
            assert 0 <= g["x"] and g["x"] + g["w"] <= 24


def test_every_dashboard_query_parses_and_names_exported_metrics(tmp_path):
    queries = dashboard_queries()
    assert len(queries) >= 60
    group = {"groups": [{"name": "dashboards", "rules": [{"record": f"dashboard:q{i}", "expr": e}
                                                       for i, (_, _, e) in enumerate(queries)]}]}
    (tmp_path / "q.yml").write_text(yaml.safe_dump(group))
    res = promtool("check", "rules", "q.yml", cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    known = set(METRICS) | set(CONGESTION_METRICS)
    for name, title, expr in queries:
        for m in re.findall(r"\bhpcfabric_\w+", expr):
            base = re.sub(r"_(total|bucket|count|sum)$", "", m)
            assert base in known, (name, title, m)


def test_every_alert_is_documented():
    doc = (ROOT / "docs" / "operations.md").read_text()
    assert [a for a in ALERTS if f"`{a}`" not in doc] == []


def test_prom_server_cli_starts_the_shipped_config_and_stops_it_by_pid(tmp_path):
    """mininet/prom_server.py start: the shipped config on a free port, every rule loaded; stop PID ends it;
    a missing config and a PID that is not Prometheus: one line, exit 2."""
    promtool("--version")  # skips without the Debian package
    cli = [sys.executable, str(ROOT / "mininet" / "prom_server.py")]
    res = subprocess.run([*cli, "start", "--data", str(tmp_path / "data")], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout)
    try:
        import urllib.request

        with urllib.request.urlopen(f"{info['url']}/api/v1/rules", timeout=10) as r:
            groups = json.load(r)["data"]["groups"]
        assert sorted(r["name"] for g in groups for r in g["rules"]) == sorted(ALERTS)
        assert Path(f"/proc/{info['pid']}/comm").read_text().strip() == "prometheus"
        bad = subprocess.run([*cli, "stop", str(os.getpid())], capture_output=True, text=True, timeout=30)
        assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "not prometheus" in bad.stderr, bad.stderr
    finally:
        stop = subprocess.run([*cli, "stop", str(info["pid"])], capture_output=True, text=True, timeout=30)
    assert stop.returncode == 0, stop.stderr
    assert not Path(f"/proc/{info['pid']}").exists() or "zombie" in Path(f"/proc/{info['pid']}/status").read_text()
    res = subprocess.run([*cli, "start", "--config", str(tmp_path / "none.yml"), "--data", str(tmp_path / "d2")],
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 2 and res.stderr.strip().endswith("none.yml: no such config file") and "Traceback" not in res.stderr
