"""The seam to the OpenFlow framework: the only module of hpcfabric that imports os-ken.

Everything else names the framework through this module: the application base
class and the event decorators (:data:`App`, :data:`ofp_event`,
:func:`set_ev_cls`, :func:`set_ev_handler`, the dispatchers), the OpenFlow 1.3
protocol modules (:data:`ofproto`, :data:`ofproto_parser`), the green-thread
:data:`hub`, the in-process app manager, its configuration object and the
green-thread helpers built on eventlet (a native thread, a WSGI server).
Ryu (``ryu-manager``) has the same API under the package ``ryu``; choosing
between the two belongs here and nowhere else.
"""

from __future__ import annotations

from typing import Any, Callable

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import DEAD_DISPATCHER, MAIN_DISPATCHER, set_ev_cls, set_ev_handler
from os_ken.lib import hub
from os_ken.ofproto import ofproto_v1_3 as ofproto
from os_ken.ofproto import ofproto_v1_3_parser as ofproto_parser

__all__ = [
    "App", "DEAD_DISPATCHER", "LOGGER_NAME", "MAIN_DISPATCHER", "hub", "ofp_event", "ofproto", "ofproto_parser", "set_ev_cls",
    "set_ev_handler", "conf", "error_text", "init_conf", "manager", "patch", "run_native", "serve_wsgi",
    "service_brick", "set_flow_stats_body",
]

#: base class of an application the framework's app manager loads
App = app_manager.OSKenApp
#: the framework's logger (quietened by ``hpcfabric controller``)
LOGGER_NAME = "os_ken"


def service_brick(name: str) -> Any:
    """A running framework service (e.g. ``"ofp_event"``, the OpenFlow handler), None if not loaded."""
    return app_manager.lookup_service_brick(name)


def conf() -> Any:
    """The framework's configuration object (oslo.config ``CONF``)."""
    from os_ken import cfg

    return cfg.CONF


def init_conf() -> None:
    """Register the OpenFlow listener options and parse an empty command line (in-process app manager)."""
    from os_ken import __version__

    import os_ken.controller.controller  # noqa: F401  (registers the ofp_* options)

    conf()(args=[], project="os_ken", version=f"hpcfabric/os-ken {__version__}", default_config_files=[])


def manager() -> Any:
    """The framework's app manager (``load_apps``, ``create_contexts``, ``instantiate_apps``, ``close``)."""
    return app_manager.AppManager.get_instance()


def patch(thread: bool) -> None:
    """Green the standard library (sockets, time; threads too with ``thread``), as the framework's manager does."""
    hub.patch(thread=thread)


def error_text(etype: int, code: int) -> str:
    """``OFPET_.../OFP..._...`` names of an OpenFlow error type and code (numbers if unknown)."""
    try:
        return f"{ofproto.ofp_error_type_to_str(etype)}/{ofproto.ofp_error_code_to_str(etype, code)}"
    except Exception:  # pragma: no cover
        return f"{etype}/{code}"


def set_flow_stats_body(cls: Any) -> None:
    """Make the parser build flow-stats entries with ``cls.parser(buf, offset)`` (process-wide)."""
    ofproto_parser.OFPFlowStatsReply.cls_stats_body_cls = cls


def run_native(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in a native thread (eventlet tpool) so the green threads keep running; inline if unavailable."""
    try:
        from eventlet import tpool
    except ImportError:  # pragma: no cover
        return fn(*args)
    return tpool.execute(fn, *args)


def serve_wsgi(host: str, port: int, family: int, wsgi_app: Any, log: Any) -> tuple[Any, Any]:
    """Serve ``wsgi_app`` on ``host:port`` in a green thread; returns (listening socket, thread)."""
    import eventlet
    import eventlet.wsgi

    sock = eventlet.listen((host, port), family=family)
    thread = hub.spawn(eventlet.wsgi.server, sock, wsgi_app, log=log, log_output=False)
    return sock, thread
