"""The seam to the OpenFlow framework: the only module of hpcfabric that imports os-ken or Ryu.

Everything else names the framework through this module: the application base
class and the event decorators (:data:`App`, :data:`ofp_event`,
:func:`set_ev_cls`, :func:`set_ev_handler`, the dispatchers), the OpenFlow 1.3
protocol modules (:data:`ofproto`, :data:`ofproto_parser`), the green-thread
:data:`hub`, the in-process app manager, its configuration object and the
green-thread helpers built on eventlet (a native thread, a WSGI server).

Which framework (:data:`NAME`, ``"os_ken"`` or ``"ryu"``; :func:`choose`):

1. the one whose manager loads this app: ``osken-manager`` has imported
   ``os_ken``, ``ryu-manager`` has imported ``ryu`` before it loads any app
   (exactly one of the two is in ``sys.modules``) -- the app must subclass that
   manager's base class, so nothing overrides this;
2. else ``HPCFABRIC_FRAMEWORK=os_ken|ryu`` (``hpcfabric controller``, tests);
3. else os-ken if it is importable, else Ryu.

Ryu is the PyPI package ``csle-ryu-fork`` (4.37.dev, package ``ryu``), which
needs ``eventlet==0.33.2`` and ``dnspython<2.3``: it lives in its own venv
(``.venv-ryu``, ``scripts/bootstrap.sh --ryu``) so that os-ken keeps its own
eventlet (docs/controller.md, "os-ken and Ryu"). eventlet 0.33's green
``getaddrinfo`` takes its arguments positionally only (no ``type=`` keyword):
:func:`stream_addresses` is the one call that works with both.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import socket
import sys
from typing import Any, Callable

from hpcfabric.errors import HpcfabricError

FRAMEWORKS = ("os_ken", "ryu")
ENV = "HPCFABRIC_FRAMEWORK"
_ALIASES = {"os_ken": "os_ken", "os-ken": "os_ken", "osken": "os_ken", "ryu": "ryu"}


class FrameworkError(HpcfabricError):
    """No usable OpenFlow framework (bad ``HPCFABRIC_FRAMEWORK``, neither os-ken nor Ryu installed)."""

    exit_code = 2


def choose(modules: Any = None, environ: Any = None, importable: Callable[[str], bool] | None = None) -> str:
    """The framework to use: the one already loaded by a manager, else ``HPCFABRIC_FRAMEWORK``, else
    os-ken if importable, else Ryu (module docstring). Arguments default to this process's."""
    modules = sys.modules if modules is None else modules
    environ = os.environ if environ is None else environ
    if importable is None:
        importable = lambda name: importlib.util.find_spec(name) is not None  # noqa: E731
    loaded = [name for name in FRAMEWORKS if name in modules]
    if len(loaded) == 1:
        return loaded[0]
    wanted = environ.get(ENV, "").strip()
    if wanted:
        name = _ALIASES.get(wanted.lower())
        if name is None:
            raise FrameworkError(f"{ENV}={wanted!r}: expected os_ken or ryu")
        if not importable(name):
            raise FrameworkError(f"{ENV}={wanted}: the package {name!r} is not installed in {sys.prefix}")
        return name
    for name in FRAMEWORKS:
        if importable(name):
            return name
    raise FrameworkError("neither os-ken (pip install os-ken==3.1.0) nor Ryu (csle-ryu-fork) is installed")


#: the framework this process uses: ``"os_ken"`` or ``"ryu"``
NAME = choose()


def _mod(path: str) -> Any:
    return importlib.import_module(f"{NAME}.{path}")


app_manager = _mod("base.app_manager")
ofp_event = _mod("controller.ofp_event")
_handler = _mod("controller.handler")
DEAD_DISPATCHER = _handler.DEAD_DISPATCHER
MAIN_DISPATCHER = _handler.MAIN_DISPATCHER
set_ev_cls = _handler.set_ev_cls
set_ev_handler = _handler.set_ev_handler
hub = _mod("lib.hub")
ofproto = _mod("ofproto.ofproto_v1_3")
ofproto_parser = _mod("ofproto.ofproto_v1_3_parser")
_parser = _mod("ofproto.ofproto_parser")  # the version dispatch every receive loop calls (``msg``)

__all__ = [
    "App", "DEAD_DISPATCHER", "FrameworkError", "LOGGER_NAME", "MAIN_DISPATCHER", "NAME", "VERSION", "choose", "hub", "ofp_event", "ofproto", "ofproto_parser", "set_ev_cls",
    "set_ev_handler", "conf", "error_text", "init_conf", "manager", "patch", "run_native", "HttpServer",
    "service_brick", "set_flow_stats_body", "restore_packet_in_parser", "set_packet_in_parser",
    "wrap_message_parse", "parse_message", "set_receive_loop", "restore_receive_loop",
    "stream_addresses", "set_accept_hook",
]

#: base class of an application the framework's app manager loads
App = app_manager.OSKenApp if NAME == "os_ken" else app_manager.RyuApp
#: the framework's logger (quietened by ``hpcfabric controller``)
LOGGER_NAME = NAME
#: the framework's version (os-ken: ``os_ken.__version__``; Ryu: ``ryu.version``)
VERSION = str(getattr(sys.modules[NAME], "__version__", None) or getattr(sys.modules[NAME], "version", "?"))


def service_brick(name: str) -> Any:
    """A running framework service (e.g. ``"ofp_event"``, the OpenFlow handler), None if not loaded."""
    return app_manager.lookup_service_brick(name)


def conf() -> Any:
    """The framework's configuration object (oslo.config ``CONF``)."""
    return _mod("cfg").CONF


def init_conf() -> None:
    """Register the OpenFlow listener options and parse an empty command line (in-process app manager)."""
    _mod("controller.controller")  # registers the ofp_* options
    conf()(args=[], project=NAME, version=f"hpcfabric/{NAME} {VERSION}", default_config_files=[])


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


def set_packet_in_parser(make: Callable[[Any, Any, Callable[..., Any]], Callable[..., Any]]) -> Callable[..., Any]:
    """Parse PACKET_IN with ``make(OFPPacketIn, OFPMatch, the current parser)`` (process-wide); returns the
    parser it replaced (its table is what the framework's ``msg_parser`` looks up per message)."""
    table = ofproto_parser._MSG_PARSERS
    old = table[ofproto.OFPT_PACKET_IN]
    table[ofproto.OFPT_PACKET_IN] = make(ofproto_parser.OFPPacketIn, ofproto_parser.OFPMatch, old)
    return old


def parse_message(datapath: Any, version: int, msg_type: int, msg_len: int, xid: int, buf: Any) -> Any:
    """One OpenFlow message as the framework's receive loop parses it (None if malformed, logged)."""
    return _parser.msg(datapath, version, msg_type, msg_len, xid, buf)


def set_receive_loop(loop: Callable[[Any], None]) -> Callable[..., Any]:
    """Make every datapath run ``loop(datapath)`` as its receive loop (process-wide), the socket closed
    after it as the framework's own loop does; returns the method it replaced."""
    datapath_cls = _mod("controller.controller").Datapath
    old = datapath_cls._recv_loop

    def _recv_loop(self: Any) -> None:
        try:
            loop(self)
        finally:
            try:
                self.socket.close()
            except OSError:
                pass

    datapath_cls._recv_loop = _recv_loop
    return old


def restore_receive_loop(old: Callable[..., Any]) -> None:
    """Put back the method :func:`set_receive_loop` returned (tests)."""
    _mod("controller.controller").Datapath._recv_loop = old


#: the OpenFlow listener's accept queue (the kernel caps it at net.core.somaxconn)
LISTEN_BACKLOG = 1024


def set_accept_hook(hook: Callable[[Any, Any, dict[str, Any], Callable[[Any, Any], None]], None]) -> Callable[[], None]:
    """Hand every connection the framework's OpenFlow listener accepts to ``hook(sock, addr, tls_args, serve)``
    instead of its own TLS wrap (process-wide; listeners made after this call).

    ``tls_args`` are the TLS arguments the framework's ``server_loop`` built from ``--ctl-privkey``,
    ``--ctl-cert`` and ``--ca-certs`` (``keyfile``, ``certfile``, ``ca_certs``, ``cert_reqs``, ``ciphers``;
    empty for plain TCP); the hook does the handshake itself (or not) and calls ``serve(sock, addr)``, the
    framework's datapath factory. Returns the function that puts the framework's listener back.
    """
    module = _mod("controller.controller")
    base = getattr(module.StreamServer, "hpcfabric_base", module.StreamServer)

    class Listener(base):  # type: ignore[misc, valid-type]
        hpcfabric_base = base

        def __init__(self, listen_info: Any, handle: Any = None, backlog: Any = None, spawn: str = "default",
                     **tls_args: Any) -> None:
            super().__init__(listen_info, handle, backlog, spawn)
            try:  # the framework listens with eventlet's backlog of 50: thousands of switches connect at once
                self.server.listen(LISTEN_BACKLOG)
            except (AttributeError, OSError):  # pragma: no cover - a framework without ``server``
                pass
            self.handle = lambda sock, addr: hook(sock, addr, tls_args, handle)

    module.StreamServer = Listener

    def restore() -> None:
        module.StreamServer = base

    return restore


def wrap_message_parse(wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    """Replace the framework's per-message parse entry (``ofproto_parser.msg``, called by every
    datapath's receive loop) with ``wrap(current)`` (process-wide; diagnostics)."""
    _parser.msg = wrap(_parser.msg)


def restore_packet_in_parser(parser: Callable[..., Any]) -> None:
    """Put back a parser :func:`set_packet_in_parser` returned (tests)."""
    ofproto_parser._MSG_PARSERS[ofproto.OFPT_PACKET_IN] = parser


_TPOOL: list[Any] = []  # eventlet's tpool once imported (None: not installed), not an import per call


def run_native(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in a native thread (eventlet tpool) so the green threads keep running; inline if unavailable."""
    if not _TPOOL:
        try:
            from eventlet import tpool
        except ImportError:  # pragma: no cover
            tpool = None
        _TPOOL.append(tpool)
    tpool = _TPOOL[0]
    return fn(*args) if tpool is None else tpool.execute(fn, *args)


class HttpServer:
    """``listen`` = (HOST, PORT), or None (off): the WSGI app ``make_app()`` served in a green thread by
    eventlet's WSGI server (the one os-ken's ``WSGIApplication`` runs on); its access log at WARNING under
    ``logger``; ``started(app)`` runs once it listens; one log line ``WHAT: http://HOST:PORT/PATH``."""

    def __init__(self, listen: tuple[str, int] | None, make_app: Callable[[], Any], logger: str, what: str,
                 path: str = "", started: Callable[[Any], Any] | None = None) -> None:
        self.listen, self.make_app, self.logger, self.what, self.path = listen, make_app, logger, what, path
        self.started = started
        self.sock: Any = None

    def start(self) -> Any:
        """Listen and serve; the server's green thread (None when off)."""
        if self.listen is None:
            return None
        import logging

        import eventlet
        import eventlet.wsgi

        host, port = self.listen
        quiet = logging.getLogger(self.logger)
        quiet.setLevel(logging.WARNING)
        app = self.make_app()
        self.sock = eventlet.listen((host, port), family=socket.AF_INET6 if ":" in host else socket.AF_INET)
        thread = hub.spawn(eventlet.wsgi.server, self.sock, app, log=quiet, log_output=False)
        if self.started is not None:
            self.started(app)
        logging.getLogger("hpcfabric.controller").info("%s: http://%s:%d/%s", self.what,
                                                        host if ":" not in host else f"[{host}]", port, self.path)
        return thread

    def stop(self) -> None:
        sock, self.sock = self.sock, None
        if sock is not None:
            try:
                sock.close()
            except OSError:  # pragma: no cover
                pass


def stream_addresses(host: str, port: int) -> list[tuple[Any, ...]]:
    """``socket.getaddrinfo(host, port)`` for TCP, the same under every manager.

    Under ``ryu-manager`` the standard library is greened by eventlet 0.33.2, whose
    ``getaddrinfo(host, port, family=0, socktype=0, proto=0, flags=0)`` has no ``type``
    keyword (``getaddrinfo(..., type=SOCK_STREAM)`` raises TypeError there); the positional
    form means the same to the standard library and to every eventlet.
    """
    return socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)
