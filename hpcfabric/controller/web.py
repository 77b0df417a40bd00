"""The live fabric page (``[web] listen = HOST:PORT``, off by default), read-only, see docs/operations.md.

:class:`FabricPage` is a WSGI application over callables (the fabric, the live state of
:func:`hpcfabric.controller.webfeed.live`, the :class:`~hpcfabric.controller.linkmetrics.LinkView`);
nothing it serves can change the controller (GET only: anything else 405; unknown path 404; bad or
unknown query 400). The app serves it in a green thread through the framework seam's WSGI
server (``framework.HttpServer``, eventlet's, as the metrics are: one hub, no second event loop, and
the same server under os-ken and Ryu); layouts and loads of big fabrics are computed by ``offload``
(the controller's native thread, ``framework.run_native``) so the hub keeps reacting to PAUSE. Paths:

* ``/`` and ``/static/NAME``: the page (HTML, JS, CSS shipped in the package, no CDN);
* ``/api/view[?group=N]``: the layout (:mod:`hpcfabric.controller.webview`), cached per fabric;
* ``/api/state``: the live state (paused ports, failed links, quarantine, flips/s, deadlock, HA);
* ``/api/load[?group=N]``: utilisation per drawn edge, ``/api/top[?n=N]``: the most loaded directions;
* ``/events``: server-sent events, the live state each time it changes (checked every :data:`TICK` s).
"""

from __future__ import annotations

import json
import logging
import time
from importlib import resources
from typing import Any, Callable, Iterator
from urllib.parse import parse_qs

import numpy as np

from hpcfabric.controller.framework import hub
from hpcfabric.controller.webview import SWITCH_VIEW_MAX, GroupIndex, edge_buckets, edge_loads, group_state, view_for

LOG = logging.getLogger("hpcfabric.controller")

#: seconds between two looks at the live state for the event streams (a change reaches the page within it)
TICK = 0.2
#: an event stream sends a comment line this often when nothing changes (keeps proxies from closing it)
KEEPALIVE = 15.0
#: event streams served at once (more get 503)
MAX_STREAMS = 16
_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
          ".css": "text/css; charset=utf-8", ".png": "image/png", ".svg": "image/svg+xml"}
_HEADERS = [("Cache-Control", "no-store"), ("X-Content-Type-Options", "nosniff"),
            ("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'"),
            ("X-Frame-Options", "DENY")]


class BadRequest(ValueError):
    """A 400: the message names the parameter."""


def static_files() -> dict[str, bytes]:
    """The page's assets shipped in the package (``hpcfabric/controller/webstatic``)."""
    root = resources.files("hpcfabric.controller") / "webstatic"
    return {p.name: p.read_bytes() for p in root.iterdir() if p.is_file() and not p.name.startswith(".")}


class Publisher:
    """The live state, computed at most once per :data:`TICK` for every stream, with flips per second."""

    def __init__(self, live: Callable[[], dict[str, Any]], index: Callable[[], GroupIndex | None]) -> None:
        self.live, self.index = live, index
        self.at = -1.0
        self.state: dict[str, Any] = {}
        self.text = ""
        self.seq = 0
        self.flips: list[tuple[float, int]] = []

    def current(self, now: float | None = None) -> tuple[int, str, dict[str, Any]]:
        now = time.monotonic() if now is None else now
        if now - self.at >= TICK * 0.9:
            self.at = now
            st = self.live()
            self.flips.append((now, st.get("flips", 0)))
            while len(self.flips) > 2 and now - self.flips[1][0] >= 1.0:
                self.flips.pop(0)
            t0, f0 = self.flips[0]
            st["flips_per_s"] = round((st.get("flips", 0) - f0) / (now - t0), 2) if now - t0 >= 0.5 else 0.0
            index = self.index()
            if index is not None:
                st["groups"] = group_state(index, st)
            text = json.dumps(st, separators=(",", ":"), sort_keys=True)
            if text != self.text:
                self.seq += 1
                self.text, self.state = text, st
        return self.seq, self.text, self.state


class FabricPage:
    """The page's WSGI application: ``fabric()`` the running fabric, ``live()`` its state (plain dict),
    ``links`` the link rows (:class:`~hpcfabric.controller.linkmetrics.LinkView`)."""

    def __init__(self, fabric: Callable[[], Any], live: Callable[[], dict[str, Any]], links: Any,
                 offload: Callable[..., Any] | None = None) -> None:
        self.offload = offload or (lambda fn, *args: fn(*args))  # heavy pure work off the hub (LinkView's)
        self._index: tuple[Any, GroupIndex | None] | None = None
        self.fabric, self.links = fabric, links
        self.files = static_files()
        self.streams = 0
        self._views: dict[Any, tuple[Any, dict[str, Any], bytes]] = {}
        self._loads: dict[Any, tuple[Any, bytes]] = {}
        self._buckets: dict[Any, tuple[Any, Any, Any]] = {}
        self.publisher = Publisher(live, self.group_index)

    # ------------------------------------------------------------ views
    def group_index(self) -> GroupIndex | None:
        """Port -> group edge of the running fabric when it opens at group level (else None)."""
        fabric = self.fabric()
        if self._index is None or self._index[0] is not fabric:
            self._index = (fabric, self.offload(GroupIndex, fabric) if len(fabric.switches) > SWITCH_VIEW_MAX else None)
        return self._index[1]

    def warm(self) -> None:
        """Build what the first page open needs (layout, group index, link columns, loads) before anyone asks."""
        try:
            self.group_index()
            self.load(None)
        except Exception:  # pragma: no cover - a request builds it again and reports
            LOG.exception("fabric page: warm-up failed")

    def view(self, group: int | None) -> tuple[dict[str, Any], bytes]:
        fabric = self.fabric()
        hit = self._views.get(group)
        if hit is None or hit[0] is not fabric:
            if len(self._views) > 64:
                self._views.clear()
            try:
                v, data = self.offload(_view_json, fabric, group)
            except KeyError:
                raise BadRequest(f"group={group}: no such group in {fabric.name}") from None
            hit = (fabric, v, data)
            self._views[group] = hit
        return hit[1], hit[2]

    def load(self, group: int | None) -> bytes:
        """Loads per drawn edge of ``group``'s view, computed once per load round."""
        view, _ = self.view(group)
        key = (group, self.publisher.current()[2].get("load_round"))
        hit = self._loads.get(group)
        if hit is None or hit[0] != key:
            table = self.links.table
            buckets = self._buckets.get(group)
            if buckets is None or buckets[0] is not table or buckets[1] is not view:
                if len(self._buckets) > 64:
                    self._buckets.clear()
                buckets = (table, view, self.offload(edge_buckets, view, table))
                self._buckets[group] = buckets
            hit = (key, self.offload(_loads_json, buckets[2], self.links.figures()))
            self._loads[group] = hit
        return hit[1]

    def top(self, n: int) -> bytes:
        return self.offload(_top_json, self.links.figures(), n)

    # ------------------------------------------------------------ WSGI
    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        method = environ.get("REQUEST_METHOD", "GET")
        path = environ.get("PATH_INFO", "/") or "/"
        try:
            query = parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True, strict_parsing=False)
        except ValueError:
            return _reply(start_response, "400 Bad Request", b"bad query string\n")
        if method != "GET":
            return _reply(start_response, "405 Method Not Allowed", b"read-only: GET only\n", extra=[("Allow", "GET")])
        try:
            return self.route(environ, path, query, start_response)
        except BadRequest as err:
            return _reply(start_response, "400 Bad Request", f"{err}\n".encode())

    def route(self, environ: dict[str, Any], path: str, query: dict[str, list[str]], start_response: Callable[..., Any]) -> Any:
        if path in ("/", "/index.html"):
            _only(query)
            return _reply(start_response, "200 OK", self.files["index.html"], _TYPES[".html"])
        if path.startswith("/static/"):
            _only(query)
            name = path[len("/static/"):]
            body = self.files.get(name)
            if body is None or name == "index.html":
                return _reply(start_response, "404 Not Found", b"no such file\n")
            return _reply(start_response, "200 OK", body, _TYPES.get(name[name.rfind("."):], "application/octet-stream"))
        if path == "/api/view":
            return _json(start_response, self.view(_group(query))[1])
        if path == "/api/state":
            _only(query)
            return _json(start_response, self.publisher.current()[1].encode())
        if path == "/api/load":
            return _json(start_response, self.load(_group(query)))
        if path == "/api/top":
            _only(query, "n")
            return _json(start_response, self.top(_int(query, "n", 10, 0, 1000)))
        if path == "/events":
            _only(query)
            environ["eventlet.minimum_write_chunk_size"] = 0  # each event goes out at once
            if self.streams >= MAX_STREAMS:
                return _reply(start_response, "503 Service Unavailable", b"too many event streams\n")
            start_response("200 OK", [("Content-Type", "text/event-stream"), *_HEADERS])
            return self.stream()
        return _reply(start_response, "404 Not Found", b"not found\n")

    def stream(self) -> Iterator[bytes]:
        """Server-sent events: the live state at once, then each time it changes."""
        self.streams += 1
        try:
            sent, last = -1, time.monotonic()
            yield b"retry: 1000\n\n"
            while True:
                seq, text, _ = self.publisher.current()
                now = time.monotonic()
                if seq != sent:
                    sent, last = seq, now
                    yield f"id: {seq}\ndata: {text}\n\n".encode()
                elif now - last >= KEEPALIVE:
                    last = now
                    yield b": keepalive\n\n"
                hub.sleep(TICK)
        finally:
            self.streams -= 1


def _view_json(fabric: Any, group: int | None) -> tuple[dict[str, Any], bytes]:
    v = view_for(fabric, group)
    return v, json.dumps(v, separators=(",", ":")).encode()


def _loads_json(buckets: Any, figures: Any) -> bytes:
    loads = edge_loads(buckets, figures)
    return json.dumps({"loads": dict(zip(loads, np.round(list(loads.values()), 4).tolist()))},
                      separators=(",", ":")).encode()


def _top_json(figures: Any, n: int) -> bytes:
    return json.dumps({"top": [{"switch": r.switch, "port": r.port, "peer": r.peer, "cls": r.cls, "util": round(r.util, 4),
                                "paused": r.paused} for r in figures.top(n)]}).encode()


def _only(query: dict[str, list[str]], *allowed: str) -> None:
    extra = sorted(set(query) - set(allowed))
    if extra:
        raise BadRequest(f"unknown parameter {extra[0]!r}" + (f" (expected {', '.join(allowed)})" if allowed else ""))


def _int(query: dict[str, list[str]], key: str, default: int | None, low: int, high: int) -> int | None:
    vals = query.get(key)
    if not vals:
        return default
    text = vals[-1].strip()
    if len(vals) > 1 or not text.lstrip("-").isdigit() or not low <= int(text) <= high:
        raise BadRequest(f"{key}={vals[-1]!r}: expected one integer {low}..{high}")
    return int(text)


def _group(query: dict[str, list[str]]) -> int | None:
    _only(query, "group")
    return _int(query, "group", None, -1, 10**7)


def _reply(start_response: Callable[..., Any], status: str, body: bytes, ctype: str = "text/plain; charset=utf-8",
           extra: list[tuple[str, str]] | None = None) -> list[bytes]:
    start_response(status, [("Content-Type", ctype), ("Content-Length", str(len(body))), *_HEADERS, *(extra or [])])
    return [body]


def _json(start_response: Callable[..., Any], body: bytes) -> list[bytes]:
    return _reply(start_response, "200 OK", body, "application/json")
