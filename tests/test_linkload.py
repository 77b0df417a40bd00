"""Per-link congestion, pure (controller.linkload, config.view) and through the real app with fake switches."""

from __future__ import annotations

import pytest

from hpcfabric.config import load_config
from hpcfabric.controller.linkload import LinkInputs, LinkTable, PauseClock, PortRates
from hpcfabric.errors import ConfigError
from hpcfabric.topology.generators import dragonfly_fabric, fat_tree_fabric, flattened_butterfly_fabric

ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent


def test_rates_from_successive_counters_and_resets():
    r = PortRates()
    r.record("s", [(1, 1000), (2, 0)], now=10.0, speeds={1: 1e6})
    assert r.bps == {} and r.rounds == 0  # one sample: no rate yet
    r.record("s", [(1, 1000 + 125_000), (2, 0)], now=11.0)
    assert r.bps[("s", 1)] == pytest.approx(1e6) and r.bps[("s", 2)] == 0.0 and r.rounds == 0
    r.finish_round()
    r.finish_round()  # nothing new since: the same round
    assert r.rounds == 1
    r.record("s", [(1, 10)], now=12.0)  # counter went back: the switch restarted, no rate from that pair
    assert ("s", 1) not in r.bps
    r.record("s", [(1, 10 + 62_500)], now=13.0)
    assert r.bps[("s", 1)] == pytest.approx(5e5) and r.speed[("s", 1)] == 1e6
    r.record("s", [(1, 10 + 62_500)], now=13.0)  # same instant twice: no division by zero, rate kept
    assert r.bps[("s", 1)] == pytest.approx(5e5)


def test_pause_clock_counts_closed_and_running_pauses():
    c = PauseClock()
    c.flip(("a", 1), True, 1.0)
    c.flip(("a", 1), True, 1.5)  # still paused: the start stays
    c.flip(("a", 1), False, 3.0)
    c.flip(("b", 2), False, 3.0)  # a resume without a pause: nothing
    c.flip(("a", 1), True, 10.0)
    assert c.seconds(now=10.5) == {("a", 1): pytest.approx(2.5)}


def test_rows_name_the_sending_end_and_use_the_port_speed():
    fab = dragonfly_fabric(a=2, p=1, h=1)
    table = LinkTable(fab)
    assert len(table) == 2 * len(fab.links) and table.classes == ("global", "local")
    link = next(lk for lk in fab.links if lk.kind == "global")
    a, b = (link.a, link.a_port), (link.b, link.b_port)
    inp = LinkInputs(bps={a: 4e9, b: 1e9}, speed={b: 2e9}, default_speed=10e9, frames={a: 7}, flips={a: 2},
                     paused_s={a: 1.25}, paused=frozenset({a}), down=frozenset({b}))
    rows = {(r.switch, r.port): r for r in table.figures(inp).rows()}
    ra, rb = rows[a], rows[b]
    assert ra.peer == f"{link.b}:{link.b_port}" and ra.cls == "global"
    assert ra.util == pytest.approx(0.4) and rb.util == pytest.approx(0.5)  # b: its own speed (2 Gb/s)
    assert (ra.pause_frames, ra.flips, ra.paused_s, ra.paused) == (7, 2, 1.25, True)
    assert rb.paused is False and ra.failed and rb.failed  # one end down: both directions failed
    others = [r for k, r in rows.items() if k not in (a, b)]
    assert all(r.util is None and not r.failed for r in others)
    assert [(r.switch, r.port) for r in table.figures(inp).rows(only=[a])] == [a]


def test_class_figures_and_top_n():
    fab = dragonfly_fabric(a=2, p=1, h=1)
    table = LinkTable(fab)
    dirs = [(d[0], d[1]) for d in table.dirs]
    bps = {k: (i + 1) * 1e8 for i, k in enumerate(dirs)}
    columns = table.figures(LinkInputs(bps=bps, default_speed=10e9, frames={dirs[0]: 3}))
    rows = columns.rows()
    figs = columns.class_figures()
    for cls in ("global", "local"):
        utils = [r.util for r in rows if r.cls == cls]
        assert figs[cls]["max"] == pytest.approx(max(utils)) and figs[cls]["mean"] == pytest.approx(sum(utils) / len(utils))
        assert figs[cls]["links"] == len(utils)
    assert sum(f["pause_frames"] for f in figs.values()) == 3
    top = columns.top(3)
    assert [r.util for r in top] == sorted((r.util for r in rows), reverse=True)[:3]
    none = table.figures(LinkInputs())
    assert columns.top(0) == [] and none.top(5) == [] and none.class_figures()["global"]["max"] == 0.0


def test_classes_are_the_topologies_link_kinds():
    assert LinkTable(flattened_butterfly_fabric((3, 3), 1)).classes == ("dim0", "dim1")
    assert LinkTable(fat_tree_fabric(4)).classes == ("agg-core", "edge-agg")


def _conf(tmp_path, extra: str) -> str:
    p = tmp_path / "c.conf"
    p.write_text(f"[hpcfabric]\ntopology = {ROOT / 'topologies' / 'dragonfly-a2-p1-h1.yaml'}\n{extra}")
    return str(p)


def test_view_settings_defaults_and_choices(tmp_path):
    cfg = load_config(_conf(tmp_path, ""), compile=False)
    assert cfg.view.web_listen is None and cfg.view.links == () and cfg.view.top_links == 10
    cfg = load_config(_conf(tmp_path, "[web]\nlisten = 127.0.0.1:9400\n[metrics]\nlinks = all\ntop_links = 3\n"), compile=False)
    assert cfg.view.web_listen == ("127.0.0.1", 9400) and cfg.view.links == "all" and cfg.view.top_links == 3
    cfg = load_config(_conf(tmp_path, "[web]\nlisten = 9401\n"), compile=False)
    assert cfg.view.web_listen == ("127.0.0.1", 9401)  # a port alone binds localhost
    fab = cfg.fabric
    port = next(iter(fab.fabric_ports("g0s0")))
    cfg = load_config(_conf(tmp_path, f"[metrics]\nlinks = g0s0:{port}, g0s0:{port}\n"), compile=False)
    assert cfg.view.links == (("g0s0", port),)


@pytest.mark.parametrize("extra, field", [
    ("[web]\nlisten = nohost\n", "web.listen"),
    ("[web]\nlisten = 127.0.0.1:6653\n", "web.listen"),  # the OpenFlow port
    ("[metrics]\nlisten = 127.0.0.1:9302\n[web]\nlisten = 127.0.0.1:9302\n", "web.listen"),
    ("[metrics]\nlinks = g0s0:1\n", "metrics.links"),  # a host port
    ("[metrics]\nlinks = nosuch:3\n", "metrics.links"),
    ("[metrics]\nlinks = g0s0\n", "metrics.links"),
    ("[metrics]\ntop_links = -1\n", "metrics.top_links"),
    ("[web]\nport = 3\n", "web.port"),
])
def test_bad_view_keys_name_their_field(tmp_path, extra, field):
    with pytest.raises(ConfigError) as err:
        load_config(_conf(tmp_path, extra), compile=False)
    assert field in str(err.value), str(err.value)


def test_link_metrics_from_the_app_with_fake_switches(tmp_path):
    """Port statistics polled from the (fake) switches and PAUSE packet-ins -> the link metrics of a scrape."""
    from os_ken.lib import hub
    from test_ops_fakes import fake_fabric, settle
    from test_ops_metrics import sample

    from hpcfabric.controller.metrics import render
    from hpcfabric.protocols.pause import build_pause

    app, sws = fake_fabric(tmp_path, "link_speed_gbps = 0.01\n[metrics]\nlinks = g0s0:2\ntop_links = 2\n",
                           planner=False, topology="dragonfly-a2-p1-h1", ports=3)
    t0 = __import__("time").monotonic()  # before the first samples, after the second: dt >= the switch's own
    for name, sw in sws.items():
        app.poller.poll_ports(name, sw)
    hub.sleep(0.2)
    sws["g0s0"].tx[2] = 2500  # 20,000 bits over >= 0.2 s (the PAUSE below comes after) on the global port: <= 1 % of 10 Mb/s
    for name, sw in sws.items():
        app.poller.poll_ports(name, sw)
    dt = __import__("time").monotonic() - t0
    sws["g0s0"].packet_in(2, build_pause(bytes.fromhex("020000aabbcc"), 0xFFFF))  # 3.4 s at 10 Mb/s: paused now
    settle()
    hub.sleep(0.05)
    text = render(app).decode()
    util = sample(text, "hpcfabric_link_utilisation", switch="g0s0", port="2")
    assert 20_000 / dt / 1e7 <= util <= 20_000 / 0.2 / 1e7  # the rate over the configured speed (no curr_speed)
    assert sample(text, "hpcfabric_link_class_utilisation", cls="global", stat="max") == util
    n_global = 2 * sum(1 for lk in app.fabric.links if lk.kind == "global")
    assert sample(text, "hpcfabric_link_class_utilisation", cls="global", stat="mean") == pytest.approx(util / n_global)
    assert sample(text, "hpcfabric_link_class_utilisation", cls="local", stat="max") == 0.0
    assert sample(text, "hpcfabric_link_top_utilisation", rank="1", switch="g0s0", port="2") == util
    assert sample(text, "hpcfabric_link_top_utilisation", rank="2") == 0.0
    assert sample(text, "hpcfabric_link_top_utilisation", rank="3") is None  # top_links = 2
    assert sample(text, "hpcfabric_link_pause_frames_total", switch="g0s0", port="2") == 1
    assert sample(text, "hpcfabric_link_flips_total", switch="g0s0", port="2") == 1
    assert 0 < sample(text, "hpcfabric_link_paused_seconds_total", switch="g0s0", port="2") < 5
    assert sample(text, "hpcfabric_link_class_pause_frames_total", cls="global") == 1
    assert sample(text, "hpcfabric_link_class_flips_total", cls="global") == 1
    assert sample(text, "hpcfabric_link_class_pause_frames_total", cls="local") == 0
    per_link = [ln for ln in text.splitlines() if ln.startswith("hpcfabric_link_utilisation{")]
    assert len(per_link) == 1  # only the port the operator named: bounded cardinality


def test_columns_agree_with_each_direction_computed_alone():
    """Random inputs on a fabric with all kinds of entries: every row, class figure and the top N as the
    definitions say, one direction at a time (ties in the top N by switch, then port)."""
    import random

    rnd = random.Random(7)
    fab = dragonfly_fabric(a=4, p=2, h=2)
    table = LinkTable(fab)
    keys = [(d[0], d[1]) for d in table.dirs]
    pick = lambda k: rnd.sample(keys, k)  # noqa: E731
    bps = {k: rnd.choice([0.0, 2e9, 5e9, 2e10]) for k in pick(len(keys) // 2)}
    bps[("h0", 1)] = 1e9  # a host port: not a fabric direction, ignored
    inp = LinkInputs(bps=bps, speed={k: 4e9 for k in pick(10)}, default_speed=10e9,
                     frames={k: rnd.randint(1, 9) for k in pick(7)}, flips={k: 2 for k in pick(5)},
                     paused_s={k: 0.5 for k in pick(5)}, paused=frozenset(pick(4)), down=frozenset(pick(3)))
    figs = table.figures(inp)
    rows = figs.rows()
    far = {(d[0], d[1]): tuple(d[2].rsplit(":", 1)) for d in table.dirs}
    for r in rows:
        k = (r.switch, r.port)
        want = None if k not in bps else min(1.0, bps[k] / (inp.speed.get(k) or 10e9))
        assert r.util == (pytest.approx(want) if want is not None else None)
        assert (r.pause_frames, r.flips, r.paused_s) == (inp.frames.get(k, 0), inp.flips.get(k, 0), inp.paused_s.get(k, 0.0))
        assert r.paused == (k in inp.paused)
        assert r.failed == (k in inp.down or (far[k][0], int(far[k][1])) in inp.down)
    cf = figs.class_figures()
    for cls in table.classes:
        mine = [r for r in rows if r.cls == cls]
        rated = [r.util for r in mine if r.util is not None]
        assert cf[cls]["max"] == pytest.approx(max(rated)) and cf[cls]["mean"] == pytest.approx(sum(rated) / len(rated))
        assert cf[cls]["pause_frames"] == sum(r.pause_frames for r in mine) and cf[cls]["links"] == len(mine)
        assert cf[cls]["failed"] == sum(r.failed for r in mine) and cf[cls]["paused"] == sum(r.paused for r in mine)
    want_top = sorted((r for r in rows if r.util is not None), key=lambda r: (-r.util, r.switch, r.port))[:25]
    assert figs.top(25) == want_top
    assert [(r.switch, r.port) for r in figs.rows(only=[keys[5], ("nope", 1), keys[2]])] == [keys[2], keys[5]]
