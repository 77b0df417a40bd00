"""Starting the controller: the config it runs with, logging, the listen address, signals, the in-process manager.

Two ways in. ``hpcfabric controller`` calls :func:`run`, which loads nothing
twice: it hands its config to the app through :data:`PRELOADED` (and the
``--status-file`` override through :data:`OVERRIDES`) and runs the framework's
app manager in this process until SIGTERM/SIGINT. Under ``osken-manager
hpcfabric.controller`` (or ``ryu-manager hpcfabric.controller``) the app calls :func:`startup_config`, which finds the
config file (:func:`config_path`), applies ``[openflow] listen_*`` and checks
the address is free (:func:`check_listen_address`). Either way a bad config
is one logged line and exit 2 before anything listens.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
from typing import Any, Callable

from hpcfabric.config import ControllerConfig, load_config
from hpcfabric.controller.hubwatch import from_env as hub_watch_from_env
from hpcfabric.controller.receive import install as install_receive_loop
from hpcfabric.controller.framework import (
    LOGGER_NAME, conf, hub, init_conf, manager, patch, set_flow_stats_body, set_packet_in_parser, stream_addresses,
)
from hpcfabric.errors import ConfigError, HpcfabricError
from hpcfabric.openflow import ofwire
from hpcfabric.openflow.packetin import packet_in_parser

LOG = logging.getLogger("hpcfabric.controller")

#: the config :func:`run` loaded, for the app it starts (so the config is not loaded and compiled twice)
PRELOADED: ControllerConfig | None = None
#: command-line overrides for that app (``status_file``)
OVERRIDES: dict[str, Any] = {}
#: the app has its process to itself (``hpcfabric controller``, osken-manager/ryu-manager), not a test's:
#: it may freeze its heap out of the garbage collector (:mod:`hpcfabric.controller.heap`)
OWN_PROCESS = False

APP_MODULE = "hpcfabric.controller"


class ListenError(HpcfabricError):
    exit_code = 1


def config_path() -> str | None:
    """``HPCFABRIC_CONFIG``, else the last ``--config-file`` given to osken-manager/ryu-manager that has [hpcfabric]."""
    env = os.environ.get("HPCFABRIC_CONFIG")
    if env:
        return env
    try:
        files = list(conf().config_file or [])
    except Exception:  # pragma: no cover - CONF not parsed
        files = []
    for path in reversed(files):
        try:
            with open(path, encoding="utf-8") as fh:
                if any(line.strip() == "[hpcfabric]" for line in fh):
                    return path
        except OSError:
            continue
    return files[-1] if files else None


def startup_config() -> ControllerConfig:
    """The config the app runs with: :data:`PRELOADED`, else the file the framework's manager was given
    (loaded, listen address applied and checked; any error: logged, ``SystemExit``)."""
    global OWN_PROCESS
    config = PRELOADED
    if config is not None:
        return config
    OWN_PROCESS = True  # loaded by the framework's manager
    path = config_path()
    if not path:
        LOG.error("no configuration: pass --config-file FILE to osken-manager/ryu-manager or set HPCFABRIC_CONFIG")
        raise SystemExit(2)
    try:
        config = load_config(path)
    except HpcfabricError as err:
        LOG.error("hpcfabric: error: %s", err)
        raise SystemExit(getattr(err, "exit_code", 2)) from None
    setup_logging(config.log_level, quiet_osken=False)
    host, port = apply_listen_overrides(config)
    try:
        apply_tls(config)
        check_listen_address(host, port)
    except HpcfabricError as err:
        LOG.error("hpcfabric: error: %s", err)
        raise SystemExit(err.exit_code) from None
    return config


def setup_logging(level: str, quiet_osken: bool = True) -> None:
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
    logging.getLogger("hpcfabric").setLevel(level)
    if quiet_osken:
        root.setLevel(logging.WARNING)
        logging.getLogger(LOGGER_NAME).setLevel(logging.DEBUG if level == "DEBUG" else logging.WARNING)


def apply_listen_overrides(config: ControllerConfig) -> tuple[str, int]:
    """Under osken-manager/ryu-manager: use [openflow] listen_* unless given on its command line."""
    cfg = conf()
    argv = " ".join(sys.argv)
    if "--ofp-listen-host" not in argv:
        cfg.set_override("ofp_listen_host", config.listen_host)
    if "--ofp-tcp-listen-port" not in argv:
        cfg.set_override("ofp_tcp_listen_port", config.listen_port)
    return cfg.ofp_listen_host, cfg.ofp_tcp_listen_port or 6653


#: the framework's TLS options (``--ctl-privkey`` ...) and the ``[openflow]`` keys that set them
TLS_OPTIONS = (("ctl_privkey", "tls_key"), ("ctl_cert", "tls_cert"), ("ca_certs", "tls_ca"))


def apply_tls(config: ControllerConfig) -> None:
    """``[openflow] tls*`` -> the framework's own TLS options (its listener then speaks only TLS, on
    ``listen_port``). The INI decides: the same options given to a manager otherwise (command line,
    ``[DEFAULT]``) are refused (ConfigError) unless they name the INI's files."""
    cfg = conf()
    tls = config.tls
    for opt, key in TLS_OPTIONS:
        want = getattr(tls, key[4:]) if tls else None
        cfg.clear_override(opt)  # ours from an earlier run in this process (tests) is not the user's
        have = getattr(cfg, opt, None)
        if have and (want is None or os.path.realpath(have) != os.path.realpath(want)):
            raise ConfigError(f"--{opt.replace('_', '-')} {have}: TLS is configured in the config file "
                              f"([openflow] tls = on, {key}); remove the option", source=config.path,
                              field=f"openflow.{key}")
        cfg.set_override(opt, want)
    cfg.set_override("ofp_ssl_listen_port", (cfg.ofp_tcp_listen_port or config.listen_port) if tls else None)


def check_listen_address(host: str, port: int) -> None:
    """Fail early if ``host:port`` is taken.

    eventlet listens with SO_REUSEPORT, so a second controller on the same
    port would *not* fail: the kernel would split the switches between the
    two. A plain bind (no SO_REUSEPORT) detects the other listener.
    """
    try:
        infos = stream_addresses(host, port)  # not getaddrinfo(type=...): eventlet 0.33 under ryu-manager
    except OSError as err:
        raise ConfigError(f"cannot resolve listen address {host!r}: {err}", field="openflow.listen_host") from None
    family, _, _, _, addr = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(addr)
        except OSError as err:
            raise ListenError(f"cannot listen on {host}:{port}: {err.strerror or err} (another controller?)") from None


class FastFlowStats:
    """Body class for the parser's OFPFlowStatsReply: entries decoded by :mod:`hpcfabric.openflow.ofwire` (~10x faster)."""

    @staticmethod
    def parser(buf: Any, offset: int) -> ofwire.FlowStatsEntry:
        return ofwire.FlowStatsEntry(buf, offset)


def install_fast_flow_stats() -> None:
    """Make the framework hand flow-stats entries over as :class:`hpcfabric.openflow.ofwire.FlowStatsEntry`.

    os-ken's object parser costs ~40 us per entry, which dominates the
    re-sync of large tables after a restart. This replaces the entry class of
    ``OFPFlowStatsReply`` process-wide, so :func:`run` (``hpcfabric controller``,
    where this app is alone) does it; under ``osken-manager`` other apps may
    expect os-ken objects, so it is left alone there (both kinds are handled).
    """
    set_flow_stats_body(FastFlowStats)


def install_fast_packet_in() -> Callable[..., Any]:
    """Make the framework parse PACKET_IN with :func:`hpcfabric.openflow.packetin.packet_in_parser`.

    The message is still the framework's ``OFPPacketIn`` (so ``EventOFPPacketIn``
    handlers fire), its match a lazy ``OFPMatch`` read from the TLVs for
    ``in_port`` & co. and built in full on first other use: the parse of an
    LLDP/PAUSE packet-in ~4x cheaper (``bench/packet_in_parse.py``). Process-wide,
    like :func:`install_fast_flow_stats`, so only :func:`run` does it. Returns the
    parser it replaced.
    """
    return set_packet_in_parser(packet_in_parser)


def on_sighup(handler: Callable[[], None]) -> Callable[[], None]:
    """Call ``handler()`` on SIGHUP (it must only set a flag); returns the function that restores the old handler.

    Both ``hpcfabric controller`` and osken-manager start apps in the main thread; elsewhere this does nothing.
    """
    try:
        old = signal.signal(signal.SIGHUP, lambda _signum, _frame: handler())
    except (ValueError, OSError):  # pragma: no cover - not the main thread
        return lambda: None

    def restore() -> None:
        try:
            signal.signal(signal.SIGHUP, old)
        except (ValueError, OSError):  # pragma: no cover
            pass

    return restore


def run(
    config: ControllerConfig,
    *,
    listen_host: str | None = None,
    listen_port: int | None = None,
    status_file: str | None = None,
) -> int:
    """Run the framework's app manager in this process with the hpcfabric app until SIGTERM/SIGINT."""
    global PRELOADED, OWN_PROCESS
    patch(thread=False)  # green sockets before anything listens (as osken-manager does first)
    setup_logging(config.log_level)
    init_conf()
    host = listen_host or config.listen_host
    port = listen_port or config.listen_port
    check_listen_address(host, port)
    cfg = conf()
    cfg.set_override("ofp_listen_host", host)
    cfg.set_override("ofp_tcp_listen_port", port)
    apply_tls(config)
    patch(thread=True)
    install_fast_flow_stats()
    install_fast_packet_in()
    install_receive_loop()  # no garbage per idle read, the hub given back within 2 ms (controller.receive)
    hub_watch_from_env()
    PRELOADED = config
    OWN_PROCESS = True
    if status_file is not None:
        OVERRIDES["status_file"] = status_file

    stop = {"signal": None}

    def _on_signal(signum: int, _frame: Any) -> None:
        stop["signal"] = signum

    old = {s: signal.signal(s, _on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    app_mgr = manager()
    rc = 0
    try:
        app_mgr.load_apps([APP_MODULE])
        contexts = app_mgr.create_contexts()
        services = app_mgr.instantiate_apps(**contexts)
        LOG.info("listening for OpenFlow 1.3 switches on %s:%d%s (pid %d)", host, port,
                 " (TLS, client certificates of %s)" % config.tls.ca if config.tls else "", os.getpid())
        while stop["signal"] is None:
            hub.sleep(0.1)
            dead = [t for t in services if getattr(t, "dead", False)]
            if dead:
                LOG.error("the OpenFlow listener stopped (is %s:%d free and valid?)", host, port)
                rc = 1
                break
        if stop["signal"] is not None:
            LOG.info("signal %d: shutting down", stop["signal"])
    finally:
        try:
            app_mgr.close()
        finally:
            for s, h in old.items():
                signal.signal(s, h)
    return rc
