"""The fabric page's WSGI application and layouts (controller.web, controller.webview), and a running
controller serving it: read-only (GET only, else 405), 404/400 for unknown paths and bad queries, bound to
localhost by default, server-sent events that follow the live state."""

from __future__ import annotations

import json
import re
import signal
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from test_ops_fakes import controller_process

from hpcfabric.controller.linkload import LinkInputs
from hpcfabric.controller.linkmetrics import LinkView
from hpcfabric.controller.web import FabricPage
from hpcfabric.controller.webview import GroupIndex, drill_view, edge_buckets, edge_loads, group_view, switch_view, view_for
from hpcfabric.topology.generators import dragonfly_fabric, fat_tree_fabric, flattened_butterfly_fabric

ROOT = Path(__file__).resolve().parent.parent


def call(app, path: str, method: str = "GET", query: str = "") -> tuple[str, dict, bytes]:
    got = {}

    def start_response(status, headers):
        got["status"], got["headers"] = status, dict(headers)

    body = b"".join(app({"REQUEST_METHOD": method, "PATH_INFO": path, "QUERY_STRING": query}, start_response))
    return got["status"], got["headers"], body


def page_for(fabric, state=None, inputs=None):
    from hpcfabric.config.view import ViewSettings

    live = state if state is not None else {"paused": [], "down": [], "quarantined": [], "flips": 0, "load_round": 0}
    links = LinkView(lambda: fabric, lambda now: inputs or LinkInputs(), lambda: ViewSettings())
    return FabricPage(lambda: fabric, lambda: dict(live), links), live


def test_switch_views_lay_out_every_structure():
    for fab in (dragonfly_fabric(2, 1, 1), flattened_butterfly_fabric((3, 4), 1), fat_tree_fabric(4)):
        v = switch_view(fab)
        assert {n["id"] for n in v["nodes"]} == {s.name for s in fab.switches}
        assert len(v["edges"]) == len(fab.links) and all(len(e["ends"]) == 2 for e in v["edges"])
        assert all(0 <= n["x"] <= 1 and 0 <= n["y"] <= 1 for n in v["nodes"])
        assert len({(n["x"], n["y"]) for n in v["nodes"]}) == len(fab.switches)  # no two switches on one spot
    fb = switch_view(flattened_butterfly_fabric((3, 4), 1))
    at = {n["id"]: (n["x"], n["y"]) for n in fb["nodes"]}
    assert at["s0_0"][1] == at["s2_0"][1] and at["s0_0"][0] == at["s0_3"][0]  # dim0 across, dim1 down
    ft = switch_view(fat_tree_fabric(4))
    ys = {n["id"][0]: n["y"] for n in ft["nodes"]}
    assert ys["c"] < min(n["y"] for n in ft["nodes"] if n["id"].startswith("p"))  # core above the pods


def test_table3_opens_at_group_level_and_drills_down():
    from hpcfabric.topology.loader import load_topology

    fab = load_topology(ROOT / "topologies" / "dragonfly-table3.yaml")
    v = view_for(fab)
    assert v["level"] == "group" and len(v["nodes"]) == 129 and len(v["edges"]) == 129 * 128 // 2
    assert sum(e["count"] for e in v["edges"]) == sum(1 for lk in fab.links if lk.kind == "global")
    d = view_for(fab, 5)
    switches = [n for n in d["nodes"] if n["kind"] == "switch"]
    assert len(switches) == 16 and {n["group"] for n in switches} == {5}
    local = [e for e in d["edges"] if e["cls"] == "local"]
    glob = [e for e in d["edges"] if e["cls"] == "global"]
    assert len(local) == 16 * 15 // 2 and len(glob) == 128 and len([n for n in d["nodes"] if n["kind"] == "stub"]) == 128
    index = GroupIndex(fab)
    lk = next(lk for lk in fab.links if lk.kind == "global")
    ga, gb = sorted((fab.switch(lk.a).group, fab.switch(lk.b).group))
    assert index.state([f"{lk.a}:{lk.a_port}"]) == {"edges": [f"G{ga}-G{gb}"], "groups": [fab.switch(lk.a).group]}
    with pytest.raises(KeyError):
        drill_view(fab, 129)


def test_edge_loads_take_the_busier_direction():
    fab = dragonfly_fabric(2, 1, 1)
    lk = next(lk for lk in fab.links if lk.kind == "global")
    inputs = LinkInputs(bps={(lk.a, lk.a_port): 1e9, (lk.b, lk.b_port): 3e9}, default_speed=10e9)
    page, _ = page_for(fab, inputs=inputs)
    figs, table = page.links.figures(), page.links.table
    assert edge_loads(edge_buckets(switch_view(fab), table), figs) == {f"{lk.a}:{lk.a_port}-{lk.b}:{lk.b_port}": pytest.approx(0.3)}
    g = edge_loads(edge_buckets(group_view(fab), table), figs)
    ga, gb = sorted((fab.switch(lk.a).group, fab.switch(lk.b).group))
    assert g == {f"G{ga}-G{gb}": pytest.approx(0.3)}
    status, _, body = call(page, "/api/load")
    assert status.startswith("200") and json.loads(body)["loads"] == {f"{lk.a}:{lk.a_port}-{lk.b}:{lk.b_port}": 0.3}
    top = json.loads(call(page, "/api/top", query="n=1")[2])["top"]
    assert [(t["switch"], t["port"]) for t in top] == [(lk.b, lk.b_port)]


def test_read_only_and_bad_requests():
    page, _ = page_for(dragonfly_fabric(2, 1, 1))
    for path in ("/", "/api/view", "/api/state", "/events", "/static/fabric.js"):
        for method in ("POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"):
            status, headers, _ = call(page, path, method)
            assert status.startswith("405") and headers["Allow"] == "GET", (path, method)
    for path in ("/nope", "/static/../web.py", "/static/index.html", "/api", "/api/state/x"):
        assert call(page, path)[0].startswith("404"), path
    for path, query in (("/api/view", "group=x"), ("/api/view", "group=99"), ("/api/view", "grp=1"),
                        ("/api/view", "group=1&group=2"), ("/api/top", "n=-1"), ("/api/top", "n=1e3"),
                        ("/api/state", "x=1"), ("/", "a=b"), ("/api/load", "group=")):
        assert call(page, path, query=query)[0].startswith("400"), (path, query)
    status, headers, body = call(page, "/")
    assert status.startswith("200") and b"/static/fabric.js" in body
    assert "default-src 'self'" in headers["Content-Security-Policy"] and headers["Cache-Control"] == "no-store"
    for name in ("fabric.js", "fabric.css"):
        text = call(page, f"/static/{name}")[2].decode()
        assert not re.search(r"https?://(?!www\.w3\.org/2000/svg)", text), name  # no CDN, no external fonts


def test_event_stream_follows_the_live_state():
    fab = dragonfly_fabric(2, 1, 1)
    page, live = page_for(fab)
    status, headers, _ = call(page, "/api/state")
    stream = page.stream()
    assert next(stream).startswith(b"retry:")
    first = next(stream).decode()
    assert first.startswith("id: ") and json.loads(first.split("data: ", 1)[1])["paused"] == []
    live["paused"] = ["g0s0:2"]
    page.publisher.at = -1.0  # the next look recomputes (the stream itself waits TICK between looks)
    second = next(stream).decode()
    assert json.loads(second.split("data: ", 1)[1])["paused"] == ["g0s0:2"]
    stream.close()
    assert page.streams == 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(port: int) -> list[str]:
    """Local addresses of TCP sockets listening on ``port`` (from /proc/net/tcp)."""
    out = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        addr, p = local.split(":")
        if int(p, 16) == port and state == "0A":
            out.append(socket.inet_ntoa(bytes.fromhex(addr)[::-1]))
    return out


def _first_answer(url: str, timeout: float):
    """The JSON at ``url`` once the server answers (None after ``timeout`` s)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                return json.loads(r.read())
        except OSError:
            time.sleep(0.1)
    return None


def test_running_controller_serves_the_page_on_localhost(tmp_path):
    of_port, web_port = _free_port(), _free_port()
    conf = tmp_path / "c.conf"
    conf.write_text(f"[hpcfabric]\ntopology = {ROOT / 'topologies' / 'dragonfly-a2-p1-h1.yaml'}\n"
                    f"[openflow]\nlisten_port = {of_port}\n[web]\nlisten = {web_port}\n")
    proc, log = controller_process(conf)
    try:
        state = _first_answer(f"http://127.0.0.1:{web_port}/api/state", 30)
        assert state is not None, (tmp_path / "log").read_text()
        assert state["switches"] == {"expected": 6, "connected": 0, "confirmed": 0} and state["deadlock"]["proven"]
        assert _listening(web_port) == ["127.0.0.1"]  # a port alone binds localhost
        req = urllib.request.Request(f"http://127.0.0.1:{web_port}/api/state", data=b"x", method="POST")
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=2)
        assert err.value.code == 405
        with urllib.request.urlopen(f"http://127.0.0.1:{web_port}/events", timeout=5) as r:
            assert r.headers["Content-Type"] == "text/event-stream"
            assert r.readline() == b"retry: 1000\n"
            r.readline()
            assert r.readline().startswith(b"id: ") and json.loads(r.readline()[6:])["switches"]["expected"] == 6
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)
        log.close()
    assert "Traceback" not in (tmp_path / "log").read_text()


def test_ha_masters_per_partition_from_the_ha_dicts():
    from hpcfabric.controller.webfeed import masters

    etcd = {"mode": "etcd", "partitions": [
        {"partition": "p0", "covers": "groups 0-4", "switches": 20, "master": "ctl-a", "standbys": ["ctl-b"]},
        {"partition": "p1", "covers": "groups 5-8", "switches": 16, "master": None, "standbys": []}]}
    assert masters(etcd) == [{"partition": "p0", "master": "ctl-a", "switches": 20},
                             {"partition": "p1", "master": "", "switches": 16}]  # p1 has no master: shown as such
    assert masters({"role": "master", "lease_holder": "ctl-a", "instance": "ctl-a"})[0]["master"] == "ctl-a"
    assert masters({"role": "slave", "lease_holder": None, "instance": ""})[0]["master"] == ""
