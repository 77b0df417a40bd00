"""The fabric page open in a real browser (Debian's Chromium, headless, driven by selenium) for the benches.

:func:`measure` opens the page, takes its render time as the browser measures it (``performance.now()``
from navigation start until the page has drawn the view with its live state and the frame after it ran:
``window.hfReady``; the loads' colours follow: ``window.hfLoaded``), drills into one group and back (same measure), then runs ``during()`` with the page still open
and live (server-sent events) and returns everything. Used by ``bench/control_scale.py --web``.
"""

from __future__ import annotations

import shutil
import time
from typing import Any, Callable


def browser() -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not chromium or not driver:
        raise RuntimeError("Debian's chromium and chromium-driver are needed (scripts/bootstrap.sh)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,860",
                "--disable-extensions", "--no-first-run"):
        opts.add_argument(arg)
    return webdriver.Chrome(service=Service(driver), options=opts)


def wait_ready(drv: Any, timeout: float = 60.0) -> float:
    """The page's own render time (ms since navigation start: ``window.hfReady``) once it says it is ready."""
    end = time.monotonic() + timeout
    while drv.execute_script("return document.body && document.body.dataset.ready") != "1":
        if time.monotonic() > end:
            raise TimeoutError("the page did not render")
        time.sleep(0.02)
    return float(drv.execute_script("return window.hfReady"))


def measure(url: str, during: Callable[[], dict], group: int = 1, shot: str | None = None) -> dict[str, Any]:
    drv = browser()
    try:
        t = time.monotonic()
        drv.get(url)
        render_ms = wait_ready(drv)
        wall_ms = (time.monotonic() - t) * 1000.0
        loaded_ms = wait_loaded(drv)
        level = drv.execute_script("return document.getElementById('title').textContent")
        edges = drv.execute_script("return document.querySelectorAll('path.edge').length")
        t0 = drv.execute_script("return performance.now()")
        drv.execute_script(f"location.hash = 'group={group}'")
        drill_at = wait_ready_after(drv, t0)
        drill_edges = drv.execute_script("return document.querySelectorAll('path.edge').length")
        if shot:
            drv.save_screenshot(shot)
        t0 = drv.execute_script("return performance.now()")
        drv.execute_script("location.hash = ''")
        back_at = wait_ready_after(drv, t0)
        events0 = drv.execute_script("return window.hfEvents || 0")
        result = during()
        events = drv.execute_script("return window.hfEvents || 0") - events0
        return {"render_ms": round(render_ms, 1), "open_wall_ms": round(wall_ms, 1), "loads_ms": loaded_ms, "title": level, "edges": edges,
                "drill_ms": round(drill_at, 1), "drill_edges": drill_edges, "back_ms": round(back_at, 1),
                "events_during": events, "during": result}
    finally:
        drv.quit()


def wait_loaded(drv: Any, timeout: float = 30.0) -> float | None:
    """ms since navigation start until the loads were applied (``window.hfLoaded``; None: not within timeout)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = drv.execute_script("return window.hfLoaded || null")
        if got is not None:
            return round(float(got), 1)
        time.sleep(0.02)
    return None


def wait_ready_after(drv: Any, t0: float, timeout: float = 60.0) -> float:
    """ms from ``t0`` (the page's clock) until the view drawn after a hash change is ready."""
    end = time.monotonic() + timeout
    while True:
        ready = drv.execute_script("return document.body.dataset.ready === '1' && window.hfReady > arguments[0] ? "
                                   "window.hfReady : null", t0)
        if ready is not None:
            return float(ready) - t0
        if time.monotonic() > end:
            raise TimeoutError("the drilled view did not render")
        time.sleep(0.02)
