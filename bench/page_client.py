"""What an open fabric page asks of the controller, without a browser: the event stream, and on every
new load round the loads and the top links (as fabric.js does). For ``control_scale.py --web-client``:
the controller's own cost of an open page, apart from a browser's CPU on the same machine."""

from __future__ import annotations

import json
import threading
import urllib.request
from typing import Any


class PageClient:
    """A thread reading ``/events`` at ``base`` and fetching ``/api/load`` and ``/api/top`` on each new round."""

    def __init__(self, base: str) -> None:
        self.base = base.rstrip("/")
        self.events = 0
        self.fetches = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.base + path, timeout=30) as r:
            self.fetches += 1
            return json.loads(r.read())

    def run(self) -> None:
        self.get("/api/view")
        round_ = None
        with urllib.request.urlopen(self.base + "/events", timeout=60) as stream:
            for line in stream:
                if self.stop.is_set():
                    return
                if line.startswith(b"data: "):
                    self.events += 1
                    st = json.loads(line[6:])
                    if st.get("load_round") != round_:
                        round_ = st.get("load_round")
                        self.get("/api/load")
                        self.get("/api/top?n=10")

    def __enter__(self) -> "PageClient":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
