"""Prometheus metrics: values from the real app with fake switches, and a real scrape over HTTP.

Every metric in :data:`hpcfabric.controller.metrics.METRICS` must appear in a scrape
and be documented in docs/operations.md.
"""

from __future__ import annotations

import re
import signal
import socket
import time
import urllib.request
from pathlib import Path

from test_ops_fakes import ROOT, FakeSwitch, controller_process, make_app, settle

from hpcfabric.controller.metrics import METRICS, render
from hpcfabric.protocols.pause import build_pause

SRC = bytes.fromhex("020000aabbcc")


def sample(text: str, name: str, **labels: str) -> float | None:
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        m = re.match(r"^(\w+)(\{(.*)\})? (\S+)$", line)
        if not m or m.group(1) != name:
            continue
        got = dict(re.findall(r'(\w+)="([^"]*)"', m.group(3) or ""))
        if all(got.get(k) == v for k, v in labels.items()):
            return float(m.group(4))
    return None


def test_metric_values_from_the_app(tmp_path):
    from os_ken.lib import hub

    path = tmp_path / "m.conf"
    path.write_text(f"[hpcfabric]\ntopology = {ROOT / 'topologies' / 'dragonfly-a2-p1-h1.yaml'}\nrouting = conditional\n"
                    "reload_poll = 0\nlink_speed_gbps = 0.01\n[guards]\nsource_check = on\npunt_meters = on\n[metrics]\npoll_interval = 0.1\n")
    app = make_app(path)
    sws = {}
    for st in app.switches.values():
        sws[st.name] = FakeSwitch(app, st.dpid, [1, 2, 3])
        sws[st.name].connect()
    settle()
    sw = sws["g0s0"]
    # DMP and guard counters come from polled flow stats: pretend the switch counted some packets
    for key, f in sw.flows.items():
        if f.match.eth_type == 0x88B5:
            sw.counts[key] = 3
        elif f.rule_class == 8 and f.match.eth_src is None and f.match.eth_type is None:
            sw.counts[key] = 11  # the source-check drop entry
    sw.packet_in(3, build_pause(SRC, 0xFFFF))
    sw.packet_in(1, build_pause(SRC, 0xFFFF))  # host port: ignored
    sw.packet_in(3, b"\x00" * 5)  # short
    settle()
    app.reload("test")
    (tmp_path / "m.conf").write_text(path.read_text() + "routing = bogus\n")
    app.reload("test")
    t = hub.spawn(app.poller.loop)
    hub.sleep(0.35)
    hub.kill(t)
    app.wiring.report(time.monotonic())
    text = render(app.sources).decode()
    assert sample(text, "hpcfabric_switches_confirmed") == 6
    assert sample(text, "hpcfabric_switch_rules_installed", switch="g0s0") == len(app.desired("g0s0"))
    assert sample(text, "hpcfabric_port_paused", switch="g0s0", port="3") == 1
    assert sample(text, "hpcfabric_port_pause_flips_total", switch="g0s0", port="3") == 1
    assert sample(text, "hpcfabric_pause_reaction_seconds_count") == 1
    assert sample(text, "hpcfabric_dmp_requests_served_total", switch="g0s0", port="1") == 3
    assert sample(text, "hpcfabric_spoofed_frames_dropped_total", switch="g0s0", port="1") == 11
    assert sample(text, "hpcfabric_meter_dropped_packets_total", switch="g0s0", meter="host") == 7
    assert sample(text, "hpcfabric_packet_ins_total", kind="pause") == 2
    assert sample(text, "hpcfabric_packet_ins_total", kind="short") == 1
    assert sample(text, "hpcfabric_ignored_frames_total", reason="pause_host_port") == 1
    assert sample(text, "hpcfabric_malformed_frames_total", kind="short") == 1
    assert sample(text, "hpcfabric_reloads_total", result="ok") == 1
    assert sample(text, "hpcfabric_reloads_total", result="failed") == 1
    assert sample(text, "hpcfabric_config_valid") == 0
    assert sample(text, "hpcfabric_ha_partition_master", partition="all") == 1  # no HA: this instance masters all
    assert sample(text, "hpcfabric_links_expected") == 6


def test_every_metric_is_documented():
    doc = (ROOT / "docs" / "operations.md").read_text()
    missing = [m for m in METRICS if f"`{m}" not in doc]
    assert not missing, missing


def test_scrape_the_running_controller(tmp_path):
    ports = []
    for _ in range(2):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    of_port, http_port = ports
    status = tmp_path / "status.json"
    conf = tmp_path / "c.conf"
    conf.write_text(f"[hpcfabric]\ntopology = {ROOT / 'topologies' / 'dragonfly-a2-p1-h1.yaml'}\nstatus_file = {status}\n"
                    f"[openflow]\nlisten_port = {of_port}\n[metrics]\nlisten = 127.0.0.1:{http_port}\n")
    proc, log = controller_process(conf)
    try:
        text = None
        end = time.monotonic() + 30
        while time.monotonic() < end and text is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=2) as r:
                    assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain")
                    text = r.read().decode()
            except OSError:
                time.sleep(0.1)
        assert text is not None, (tmp_path / "log").read_text()
        for name, (kind, _) in METRICS.items():
            suffix = "_total" if kind == "counter" else ("_count" if kind == "histogram" else "")
            typed = f"# TYPE {name}{'_total' if kind == 'counter' else ''} {kind}" in text
            assert typed and (re.search(rf"^{name}{suffix}(\{{| )", text, re.M) or "{" in text), name
        assert sample(text, "hpcfabric_switches_expected") == 6 and sample(text, "hpcfabric_switches_connected") == 0
        assert sample(text, "hpcfabric_up") == 1
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)
        log.close()
    assert "Traceback" not in Path(tmp_path / "log").read_text()
