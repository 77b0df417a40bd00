"""The operator's view keys: ``[web] listen`` (the live fabric page) and ``[metrics] links`` /
``top_links`` (which per-link congestion series are exported), checked against the fabric."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hpcfabric.config.ini import config_error, get_value, integer, parse_listen

#: ``[metrics] top_links`` upper bound (the top-N series stay few whatever the fabric)
MAX_TOP_LINKS = 1000


@dataclass(frozen=True)
class ViewSettings:
    """``web_listen``: (host, port) of the page or None (off); ``links``: per-link series -- ``"all"``, or
    the sending ends ((switch, port), ...) the operator named (empty: none); ``top_links``: N of the top view."""

    web_listen: tuple[str, int] | None = None
    links: Any = ()
    top_links: int = 10


def view_keys(source: str, parser: Any, fabric: Any, listen: tuple[str, int], metrics_listen: Any) -> ViewSettings:
    """Parse and check ``[web] listen`` (``PORT`` alone: 127.0.0.1), ``[metrics] links`` and ``top_links``."""
    text = get_value(parser, "web", "listen").strip()
    if text.isdigit():  # a port alone: localhost (the page binds elsewhere only when told)
        text = f"127.0.0.1:{text}"
    web = parse_listen(source, "web.listen", text)
    if web is not None:
        taken = {("openflow.listen_port", listen[1], listen[0])}
        if metrics_listen is not None:
            taken.add(("metrics.listen", metrics_listen[1], metrics_listen[0]))
        for key, port, host in taken:
            if web[1] == port and (host == web[0] or "0.0.0.0" in (host, web[0]) or "::" in (host, web[0])):
                raise config_error(source, "web.listen", f"port {port} is already {key}'s; pick another")
    top = integer(source, "metrics.top_links", get_value(parser, "metrics", "top_links"), low=0, high=MAX_TOP_LINKS)
    text = get_value(parser, "metrics", "links").strip()
    links: Any = ()
    if text.lower() == "all":
        links = "all"
    elif text:
        out = []
        for item in (t.strip() for t in text.split(",")):
            sw, sep, port = item.rpartition(":")
            if not sep or not sw or not port.isdigit():
                raise config_error(source, "metrics.links", f"{item!r}: expected all, or SWITCH:PORT,... (e.g. g0s0:3)")
            peer = fabric.peer(sw, int(port)) if fabric.has_switch(sw) else None
            if peer is None or peer.is_host:
                raise config_error(source, "metrics.links", f"{item!r} is not a fabric port of {fabric.name} "
                                   "(expected SWITCH:PORT of a switch-to-switch link)")
            out.append((sw, int(port)))
        links = tuple(sorted(set(out)))
    return ViewSettings(web, links, top)
