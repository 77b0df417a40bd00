"""The fabric page in a real browser (Debian's Chromium driven by selenium) over a running Mininet Dragonfly.

``hpcfabric controller`` with ``[web] listen`` drives ``dragonfly-a4-p2-h2`` in Mininet (the shared
bring-up, ``mininet/fabric_up.py``). The page must show a global link as paused within 1 s of the first
frame of a PAUSE train injected into it (``mininet/pause_inject.py``) and back once the train is over;
a link taken down (both interfaces, as ``configLinkStatus`` does) must show as failed. The screenshot goes
to ``$HPCFABRIC_SCREENSHOT`` (docs/img/fabric-page.png is made that way), else to the test's tmp dir.

Skipped only if not root, Open vSwitch is not running, or Chromium / chromedriver / selenium are missing
(``scripts/bootstrap.sh`` installs them). Nothing here calls ``mn -c``.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.mininet,
    pytest.mark.filterwarnings("ignore:distutils Version classes are deprecated:DeprecationWarning"),
]

from mininet_gate import require_mininet  # noqa: E402

fn = require_mininet()

from controller_proc import Controller, free_port  # noqa: E402  (mininet/controller_proc.py)
from fabric_setup import setup_from_config, write_conf  # noqa: E402
from fabric_up import fabric_up  # noqa: E402
from failure_steps import set_ports  # noqa: E402
from pause_inject import PauseTrain, pause_plan  # noqa: E402
from mininet.log import setLogLevel  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
import page_open  # noqa: E402  (bench/page_open.py)

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
LINK_SPEED_GBPS = 0.01  # one frame of 66 quanta lasts 3.4 ms: the 10 Gb/s situation, refreshed by the train
setLogLevel("error")


def browser():
    try:
        import selenium  # noqa: F401
    except ImportError:
        pytest.skip("selenium is not installed (scripts/bootstrap.sh)")
    if not CHROMIUM or not DRIVER:
        pytest.skip("Debian's chromium and chromium-driver are not installed (scripts/bootstrap.sh)")
    return page_open.browser()  # headless Chromium as the benches drive it (bench/page_open.py)


def edge_classes(drv, edge_id: str) -> list[str]:
    return drv.execute_script("const e = document.querySelector(`path.edge[data-id=\"${arguments[0]}\"]`);"
                              "return e ? Array.from(e.classList) : null;", edge_id)


def wait_for(drv, edge_id: str, cls: str, present: bool, timeout: float) -> float:
    """Monotonic time at which the edge's class ``cls`` was seen ``present`` (polled every ~10 ms)."""
    end = time.monotonic() + timeout
    while True:
        classes = edge_classes(drv, edge_id)
        if classes is not None and (cls in classes) == present:
            return time.monotonic()
        if time.monotonic() > end:
            raise AssertionError(f"{edge_id}: class {cls!r} {'never came' if present else 'stayed'} within {timeout} s "
                                 f"(classes {classes})")
        time.sleep(0.01)


def test_page_shows_pause_and_failure_live(tmp_path):
    drv = browser()
    of_port, web_port = free_port(), free_port()
    status = tmp_path / "status.json"
    conf = write_conf(tmp_path / "controller.conf",
                      {"hpcfabric": {"routing": "conditional", "link_speed_gbps": LINK_SPEED_GBPS},
                       "web": {"listen": f"127.0.0.1:{web_port}"}, "metrics": {"poll_interval": 1}},
                      ROOT / "configs" / "dragonfly-a4-p2-h2.conf", port=of_port, status=status)
    setup = setup_from_config(conf)
    fabric = setup.fabric
    glob = [lk for lk in fabric.links if lk.kind == "global"]
    paused_link, failed_link = glob[0], next(lk for lk in fabric.links if lk.kind == "local")
    pid = f"{paused_link.a}:{paused_link.a_port}-{paused_link.b}:{paused_link.b_port}"
    fid = f"{failed_link.a}:{failed_link.a_port}-{failed_link.b}:{failed_link.b_port}"
    try:
        with fabric_up(fabric, setup.plan, [Controller(conf, status, of_port, tmp_path / "controller.log")],
                       dmp=False) as up:
            drv.get(f"http://127.0.0.1:{web_port}/")
            end = time.monotonic() + 20
            while drv.execute_script("return document.body.dataset.ready") != "1":
                assert time.monotonic() < end, "the page did not render"
                time.sleep(0.05)
            assert edge_classes(drv, pid) is not None and "paused" not in edge_classes(drv, pid)
            assert drv.execute_script("return document.getElementById('switches').textContent").startswith(
                f"switches: {len(fabric.switches)}/{len(fabric.switches)} confirmed")
            # a PAUSE train into the global link's a-end: that port stops sending -> the link shows paused
            plan = pause_plan(LINK_SPEED_GBPS, 2.0, 66)
            train = PauseTrain(fabric, paused_link.a, paused_link.a_port, plan["quanta"], plan["interval_s"], plan["hold_s"])
            first = train.start()
            try:
                seen = wait_for(drv, pid, "paused", True, 3.0)
                assert seen - first <= 1.0, f"paused shown {seen - first:.3f} s after the first PAUSE frame"
                listed = drv.execute_script("return document.getElementById('paused').textContent")
                assert f"{paused_link.a}:{paused_link.a_port}" in listed
                train.join(10)
            finally:
                train.stop()
            back, last = wait_for(drv, pid, "paused", False, 3.0), train.last
            assert train.sent > 100 and back - last <= 1.0 + 0.05, f"still paused {back - last:.3f} s after the last frame"
            # a failed link: both interfaces down (Open vSwitch reports the carrier loss)
            t_down = time.monotonic()
            set_ports(up.net, fabric, [(failed_link.a, failed_link.a_port)], up=False)
            failed = wait_for(drv, fid, "failed", True, 10.0)
            assert "failed" not in edge_classes(drv, pid)
            # for the picture: the global link paused again while the local link is down
            train = PauseTrain(fabric, paused_link.a, paused_link.a_port, plan["quanta"], plan["interval_s"], 3.0)
            train.start()
            try:
                wait_for(drv, pid, "paused", True, 3.0)
                shot = Path(os.environ.get("HPCFABRIC_SCREENSHOT") or tmp_path / "fabric-page.png")
                assert drv.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
            finally:
                train.stop()
            print(f"\npaused shown after {seen - first:.3f} s, cleared {back - last:.3f} s after the last "
                  f"frame (hold 50 ms), failed shown after {failed - t_down:.3f} s; screenshot {shot}")
    finally:
        drv.quit()
