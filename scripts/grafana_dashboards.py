#!/usr/bin/env python3
"""Write the Grafana dashboards configs/grafana/*.json (docs/operations.md, "Monitoring").

Five dashboards over the controllers' metrics (a Prometheus data source chosen at import, variable
``datasource``; ``instance``: one or all scraped controllers): fabric overview, congestion and PAUSE,
failures and repairs, control plane, HA. The panels' queries are defined here once; the JSON files are
this script's output (``--check``: exit 1 if a file differs, as tests/test_monitoring.py does), and
tests/test_monitoring_mininet.py evaluates every query against a real Prometheus scraping a controller.

    python3 scripts/grafana_dashboards.py [--out configs/grafana] [--check]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "configs" / "grafana"
I = 'instance=~"$instance"'  # every query is filtered by the dashboard's instance variable
R = "$__rate_interval"
DS = {"type": "prometheus", "uid": "${datasource}"}

# A panel: (type, title, unit, [(expr, legend)], width, height). Types: stat, timeseries, table.
Panel = tuple


def q(expr: str, legend: str = "") -> tuple[str, str]:
    return expr, legend


OVERVIEW: list[Panel] = [
    ("stat", "Controllers up", "none", [q(f'sum(up{{job="hpcfabric", {I}}})', "up")], 4, 4),
    ("stat", "Switches connected / expected", "none",
     [q(f"sum(hpcfabric_switches_connected{{{I}}})", "connected"), q(f"sum(hpcfabric_switches_expected{{{I}}})", "expected")], 5, 4),
    ("stat", "Switches confirmed", "none", [q(f"sum(hpcfabric_switches_confirmed{{{I}}})", "confirmed")], 4, 4),
    ("stat", "Deadlock proven (1 = yes)", "none", [q(f"min(hpcfabric_deadlock_proven{{{I}}})", "proven")], 4, 4),
    ("stat", "Links discovered / expected", "none",
     [q(f"sum(hpcfabric_links_discovered{{{I}}})", "discovered"), q(f"sum(hpcfabric_links_expected{{{I}}})", "expected")], 7, 4),
    ("stat", "Ports paused now", "none", [q(f"sum(hpcfabric_port_paused{{{I}}})", "paused")], 4, 4),
    ("stat", "Ports down / damped / quarantined", "none",
     [q(f"sum(hpcfabric_ports_down{{{I}}})", "down"), q(f"sum(hpcfabric_ports_damped{{{I}}})", "damped"),
      q(f"sum(hpcfabric_quarantined_ports{{{I}}})", "quarantined")], 8, 4),
    ("stat", "Links missing / miswired ports", "none",
     [q(f"sum(hpcfabric_links_missing{{{I}}})", "missing"), q(f"sum(hpcfabric_miswired_ports{{{I}}})", "miswired")], 6, 4),
    ("stat", "HA partitions mastered", "none", [q(f"count(max by (partition) (hpcfabric_ha_partition_master{{{I}}}) == 1)", "mastered")], 6, 4),
    ("table", "Deadlock verdict", "none", [q(f"hpcfabric_deadlock_proven{{{I}}}", "")], 24, 5),
    ("timeseries", "Switches connected", "none", [q(f"sum by (instance) (hpcfabric_switches_connected{{{I}}})", "{{instance}}")], 12, 8),
    ("timeseries", "PAUSE flips per second", "ops", [q(f"sum(rate(hpcfabric_port_pause_flips_total{{{I}}}[{R}]))", "flips/s")], 12, 8),
]

CONGESTION: list[Panel] = [
    ("timeseries", "Link utilisation by class (max, mean)", "percentunit",
     [q(f"hpcfabric_link_class_utilisation{{{I}}}", "{{cls}} {{stat}}")], 12, 8),
    ("table", "Top congested links", "percentunit",
     [q(f"hpcfabric_link_top_utilisation{{{I}}}", "{{rank}} {{switch}}:{{port}} -> {{peer}}")], 12, 8),
    ("timeseries", "PAUSE/PFC frames per second by class", "ops",
     [q(f"sum by (cls) (rate(hpcfabric_link_class_pause_frames_total{{{I}}}[{R}]))", "{{cls}}")], 8, 8),
    ("timeseries", "Time paused by class (paused links on average)", "none",
     [q(f"sum by (cls) (rate(hpcfabric_link_class_paused_seconds_total{{{I}}}[{R}]))", "{{cls}}")], 8, 8),
    ("timeseries", "Flips per second by class", "ops",
     [q(f"sum by (cls) (rate(hpcfabric_link_class_flips_total{{{I}}}[{R}]))", "{{cls}}")], 8, 8),
    ("timeseries", "Ports paused (controller view)", "none", [q(f"sum by (instance) (hpcfabric_port_paused{{{I}}})", "{{instance}}")], 8, 8),
    ("table", "Most flipping ports", "ops",
     [q(f"topk(10, rate(hpcfabric_port_pause_flips_total{{{I}}}[{R}]))", "{{switch}}:{{port}}")], 8, 8),
    ("timeseries", "PAUSE and CNM frames at the controller", "ops",
     [q(f'sum(rate(hpcfabric_packet_ins_total{{kind="pause", {I}}}[{R}]))', "PAUSE packet-ins"),
      q(f"sum by (result) (rate(hpcfabric_cnm_frames_total{{{I}}}[{R}]))", "CNM {{result}}"),
      q(f"sum(rate(hpcfabric_pause_switch_local_frames_total{{{I}}}[{R}]))", "switch-local PAUSE")], 8, 8),
]

FAILURES: list[Panel] = [
    ("stat", "Last repair", "s", [q(f"max(hpcfabric_repair_seconds{{{I}}})", "repair")], 6, 4),
    ("stat", "Last repair's proof", "s", [q(f"max(hpcfabric_repair_proof_seconds{{{I}}})", "proof")], 6, 4),
    ("stat", "Failures without a proven repair (1 = yes)", "none", [q(f"max(hpcfabric_repair_unproven{{{I}}})", "unproven")], 6, 4),
    ("stat", "Switches disconnected", "none", [q(f"sum(1 - hpcfabric_switch_connected{{{I}}})", "disconnected")], 6, 4),
    ("timeseries", "Port-down events, repairs, refused repairs", "none",
     [q(f"sum(increase(hpcfabric_link_failures_total{{{I}}}[{R}]))", "port down"),
      q(f"sum(increase(hpcfabric_repairs_total{{{I}}}[{R}]))", "repairs"),
      q(f"sum(increase(hpcfabric_repairs_refused_total{{{I}}}[{R}]))", "refused")], 12, 8),
    ("timeseries", "Repair duration and proof time", "s",
     [q(f"hpcfabric_repair_seconds{{{I}}}", "repair {{instance}}"), q(f"hpcfabric_repair_proof_seconds{{{I}}}", "proof {{instance}}")], 12, 8),
    ("timeseries", "Ports down, damped (flapping), quarantined", "none",
     [q(f"sum(hpcfabric_ports_down{{{I}}})", "down"), q(f"sum(hpcfabric_ports_damped{{{I}}})", "damped"),
      q(f"sum(hpcfabric_quarantined_ports{{{I}}})", "quarantined")], 12, 8),
    ("timeseries", "Cabling: links missing, miswired ports, unknown switches", "none",
     [q(f"sum(hpcfabric_links_missing{{{I}}})", "missing"), q(f"sum(hpcfabric_miswired_ports{{{I}}})", "miswired"),
      q(f"sum(hpcfabric_unknown_switches{{{I}}})", "unknown switches")], 12, 8),
    ("timeseries", "Repair flow-mods per second", "ops",
     [q(f"sum(rate(hpcfabric_repair_flow_mods_total{{{I}}}[{R}]))", "repair flow-mods/s")], 12, 8),
    ("table", "Switch connections (0 = disconnected, first)", "none", [q(f"sort(hpcfabric_switch_connected{{{I}}})", "{{switch}}")], 12, 8),
]

CONTROL: list[Panel] = [
    ("timeseries", "PAUSE reaction p50 / p99 (frame to barrier reply)", "s",
     [q(f"histogram_quantile(0.5, sum by (le) (rate(hpcfabric_pause_reaction_seconds_bucket{{{I}}}[{R}])))", "p50"),
      q(f"histogram_quantile(0.99, sum by (le) (rate(hpcfabric_pause_reaction_seconds_bucket{{{I}}}[{R}])))", "p99")], 12, 8),
    ("timeseries", "PAUSE reactions per second", "ops",
     [q(f"sum(rate(hpcfabric_pause_reaction_seconds_count{{{I}}}[{R}]))", "reactions/s")], 12, 8),
    ("timeseries", "Flow-mods per second", "ops",
     [q(f"sum(rate(hpcfabric_flow_mods_sent_total{{{I}}}[{R}]))", "reconciliation"),
      q(f"sum(rate(hpcfabric_flip_flow_mods_total{{{I}}}[{R}]))", "PAUSE flips"),
      q(f"sum(rate(hpcfabric_repair_flow_mods_total{{{I}}}[{R}]))", "repairs")], 12, 8),
    ("timeseries", "Bring-up: switches confirmed, rules installed / expected", "none",
     [q(f"sum(hpcfabric_switches_confirmed{{{I}}})", "switches confirmed"),
      q(f"sum(hpcfabric_switch_rules_installed{{{I}}})", "rules installed"),
      q(f"sum(hpcfabric_switch_rules_expected{{{I}}})", "rules expected")], 12, 8),
    ("timeseries", "Packet-ins per second by kind", "ops",
     [q(f"sum by (kind) (rate(hpcfabric_packet_ins_total{{{I}}}[{R}]))", "{{kind}}")], 8, 8),
    ("timeseries", "Dropped frames per second (malformed, ignored)", "ops",
     [q(f"sum by (kind) (rate(hpcfabric_malformed_frames_total{{{I}}}[{R}]))", "malformed {{kind}}"),
      q(f"sum by (reason) (rate(hpcfabric_ignored_frames_total{{{I}}}[{R}]))", "ignored {{reason}}")], 8, 8),
    ("timeseries", "Reconciliations, switch errors, sync failures", "none",
     [q(f"sum(increase(hpcfabric_switch_syncs_total{{{I}}}[{R}]))", "syncs"),
      q(f"sum(increase(hpcfabric_switch_errors_total{{{I}}}[{R}]))", "OpenFlow errors"),
      q(f"sum(increase(hpcfabric_sync_failures_total{{{I}}}[{R}]))", "sync failures")], 8, 8),
    ("stat", "Config valid / reloads", "none",
     [q(f"min(hpcfabric_config_valid{{{I}}})", "valid"), q(f"sum by (result) (hpcfabric_reloads_total{{{I}}})", "reloads {{result}}")], 12, 4),
    ("stat", "Last reload: table diff / flow-mods", "none",
     [q(f"sum(hpcfabric_reload_table_diff{{{I}}})", "table diff"), q(f"sum(hpcfabric_reload_flow_mods{{{I}}})", "flow-mods")], 12, 4),
]

HA: list[Panel] = [
    ("table", "Partition masters (max over instances; 0 = no master)", "none",
     [q(f"max by (partition) (hpcfabric_ha_partition_master{{{I}}})", "{{partition}}")], 12, 8),
    ("table", "Who masters what", "none", [q(f"hpcfabric_ha_partition_master{{{I}}} == 1", "{{partition}} {{instance}}")], 12, 8),
    ("timeseries", "Master (1) per instance", "none", [q(f"hpcfabric_ha_master{{{I}}}", "{{instance}}")], 12, 8),
    ("timeseries", "Role generation per instance", "none", [q(f"hpcfabric_ha_generation{{{I}}}", "{{instance}}")], 12, 8),
    ("timeseries", "Takeovers and replaced sessions", "none",
     [q(f"sum by (instance) (increase(hpcfabric_ha_takeovers_total{{{I}}}[{R}]))", "takeovers {{instance}}"),
      q(f"sum by (instance) (increase(hpcfabric_replaced_sessions_total{{{I}}}[{R}]))", "replaced sessions {{instance}}")], 12, 8),
    ("timeseries", "Controllers up", "none", [q(f'up{{job="hpcfabric", {I}}}', "{{instance}}")], 12, 8),
]

DASHBOARDS = {
    "hpcfabric-overview": ("hpcfabric: fabric overview", OVERVIEW),
    "hpcfabric-congestion": ("hpcfabric: congestion and PAUSE", CONGESTION),
    "hpcfabric-failures": ("hpcfabric: failures and repairs", FAILURES),
    "hpcfabric-control-plane": ("hpcfabric: control plane", CONTROL),
    "hpcfabric-ha": ("hpcfabric: HA", HA),
}


def panel(pid: int, spec: Panel, x: int, y: int) -> dict:
    kind, title, unit, queries, w, h = spec
    p: dict = {
        "id": pid, "type": kind, "title": title, "datasource": DS, "gridPos": {"h": h, "w": w, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": [{"datasource": DS, "refId": chr(ord("A") + i), "expr": e, "legendFormat": lg,
                     **({"format": "table", "instant": True} if kind == "table" else {})}
                    for i, (e, lg) in enumerate(queries)],
    }
    if kind == "stat":
        p["options"] = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}, "colorMode": "value"}
    elif kind == "timeseries":
        p["options"] = {"legend": {"displayMode": "list", "placement": "bottom"}, "tooltip": {"mode": "multi"}}
    return p


def dashboard(uid: str, title: str, specs: list[Panel]) -> dict:
    panels, x, y, row_h = [], 0, 0, 0
    for i, spec in enumerate(specs, 1):
        w, h = spec[4], spec[5]
        if x + w > 24:
            x, y, row_h = 0, y + row_h, 0
        panels.append(panel(i, spec, x, y))
        x, row_h = x + w, max(row_h, h)
    instance = {"name": "instance", "label": "Controller", "type": "query", "datasource": DS,
                "query": {"query": "label_values(hpcfabric_up, instance)", "refId": "instance"},
                "definition": "label_values(hpcfabric_up, instance)", "includeAll": True, "allValue": ".*",
                "multi": True, "refresh": 2, "current": {"text": "All", "value": "$__all"}}
    return {
        "__inputs": [{"name": "DS_PROMETHEUS", "label": "Prometheus", "type": "datasource", "pluginId": "prometheus",
                      "pluginName": "Prometheus"}],
        "uid": uid, "title": title, "tags": ["hpcfabric"], "editable": True, "timezone": "browser",
        "schemaVersion": 37, "version": 1, "refresh": "5s", "time": {"from": "now-1h", "to": "now"},
        "templating": {"list": [
            {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
             "current": {"text": "${DS_PROMETHEUS}", "value": "${DS_PROMETHEUS}"}},
            instance,
        ]},
        "links": [{"title": "hpcfabric dashboards", "type": "dashboards", "tags": ["hpcfabric"], "asDropdown": True}],
        "panels": panels,
    }


def render_all() -> dict[str, str]:
    return {f"{uid}.json": json.dumps(dashboard(uid, title, specs), indent=2) + "\n"
            for uid, (title, specs) in DASHBOARDS.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--check", action="store_true", help="exit 1 if a file in --out differs from this script's output")
    args = ap.parse_args(argv)
    stale = []
    for name, text in render_all().items():
        path = args.out / name
        if args.check:
            if not path.is_file() or path.read_text() != text:
                stale.append(str(path))
        else:
            args.out.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    if stale:
        print(f"grafana_dashboards.py: stale (rerun without --check): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
