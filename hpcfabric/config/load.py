"""Loading a controller config: INI file -> checked values -> topology -> :class:`ControllerConfig`.

Every key is checked here (ranges, choices, files and directories, the
combinations that cannot work together); :mod:`hpcfabric.config.build` then
plans addresses and compiles the rules.
"""

from __future__ import annotations

import configparser
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from hpcfabric.config.build import address_plan, build_tables
from hpcfabric.config.deadlock import FLOW_CONTROLS, deadlock_verdict, failures_promise
from hpcfabric.config.ini import (
    BUNDLE_MODES,
    COS_CHOICES,
    HA_BACKENDS,
    PLANNERS,
    HA_ROLES,
    HOST_MAC_MODES,
    LOG_LEVELS,
    ON_OFF,
    ROUTINGS,
    check_names,
    choice,
    closest,
    config_error,
    get_value,
    integer,
    number,
    parse_listen,
    parse_widths,
    read_ini,
    resolve_path,
)
from hpcfabric.config.model import ControllerConfig
from hpcfabric.config.security import check_tls_names, etcd_keys, tls_keys
from hpcfabric.config.view import view_keys
from hpcfabric.errors import HpcfabricError, read_user_file
from hpcfabric.rules.addressing import MODES, format_mac, parse_mac
from hpcfabric.rules.flows import PAUSE_REACTIONS
from hpcfabric.topology.model import Fabric


def load_config(path: str | os.PathLike[str], *, compile: bool = True, deadlock: bool = True,
                text: str | None = None) -> ControllerConfig:
    """Read, validate and (with ``compile``) compile the controller config at ``path``, then (``deadlock``)
    prove its tables deadlock-free under ``flow_control`` (:func:`hpcfabric.config.deadlock.deadlock_verdict`:
    with ``pfc``, tables the proof does not show acyclic are refused).

    Raises
    ------
    ConfigError
        Anything wrong with the file, the topology it names, the address plan
        or the rules (``source`` = file, ``field`` = ``section.key``).

    ``text``: the file's contents as read before (the repair planner loads exactly what its controller
    loaded, whatever the file says now); relative paths still resolve against ``path``'s directory.
    """
    source = os.fspath(path)
    if text is None:
        text = read_user_file(source, "an INI config file", "no such config file")
    parser = read_ini(source, text)
    check_names(source, parser)
    base = Path(source).resolve().parent

    topo_value = get_value(parser, "hpcfabric", "topology")
    if not topo_value:
        raise config_error(source, "hpcfabric.topology", "missing: the topology YAML file this controller runs")
    topology = resolve_path(base, topo_value)
    if not os.path.exists(topology):
        raise config_error(
            source,
            "hpcfabric.topology",
            f"topology file {topology} does not exist (relative paths are resolved against the config file's directory)",
        )

    routing = choice(source, "hpcfabric.routing", get_value(parser, "hpcfabric", "routing"), ROUTINGS)
    cos_text = get_value(parser, "hpcfabric", "cos")
    cos = choice(source, "hpcfabric.cos", cos_text, COS_CHOICES) if cos_text else None
    levels_text = get_value(parser, "hpcfabric", "cos_levels")
    cos_levels = integer(source, "hpcfabric.cos_levels", levels_text, low=1, high=8) if levels_text else None
    if cos_levels is not None and cos == "off":
        raise config_error(source, "hpcfabric.cos_levels",
                           f"{cos_levels} needs classes of service: set cos = on|none|top|hop (cos is off)")
    flow_control = choice(source, "hpcfabric.flow_control", get_value(parser, "hpcfabric", "flow_control"),
                          FLOW_CONTROLS)
    deadlock_check = choice(source, "hpcfabric.deadlock_check", get_value(parser, "hpcfabric", "deadlock_check"),
                            ON_OFF) == "on"
    link_speed = number(source, "hpcfabric.link_speed_gbps", get_value(parser, "hpcfabric", "link_speed_gbps"), low=0, high=1e4)
    hold_ms = number(source, "hpcfabric.pause_hold_ms", get_value(parser, "hpcfabric", "pause_hold_ms"), low=0, high=60000,
                      low_open=False)
    pause_reaction = choice(source, "hpcfabric.pause_reaction", get_value(parser, "hpcfabric", "pause_reaction"),
                             PAUSE_REACTIONS)
    if pause_reaction == "switch" and routing != "conditional":
        raise config_error(source, "hpcfabric.pause_reaction",
                           f"switch needs routing = conditional (routing = {routing} has no conditional rules to switch)")
    switch_hold_s = integer(source, "hpcfabric.switch_hold_s", get_value(parser, "hpcfabric", "switch_hold_s"), low=1,
                             high=65535)
    cnm_on = choice(source, "hpcfabric.cnm", get_value(parser, "hpcfabric", "cnm"), ON_OFF) == "on"
    cnm_max_hold_ms = number(source, "hpcfabric.cnm_max_hold_ms", get_value(parser, "hpcfabric", "cnm_max_hold_ms"),
                              low=0, high=60000)
    host_mac = choice(source, "hpcfabric.host_mac", get_value(parser, "hpcfabric", "host_mac"), HOST_MAC_MODES)
    status = get_value(parser, "hpcfabric", "status_file")
    status_file = resolve_path(base, status) if status else None
    if status_file and os.path.isdir(status_file):
        raise config_error(source, "hpcfabric.status_file", f"{status_file} is a directory; expected a file path")
    if status_file and not os.path.isdir(os.path.dirname(status_file) or "."):
        raise config_error(source, "hpcfabric.status_file", f"directory {os.path.dirname(status_file)} does not exist")
    log_level = choice(source, "hpcfabric.log_level", get_value(parser, "hpcfabric", "log_level"), LOG_LEVELS, str.upper)
    interval = number(source, "hpcfabric.lldp_interval", get_value(parser, "hpcfabric", "lldp_interval"), low=0.01, high=3600, low_open=False)
    timeout_text = get_value(parser, "hpcfabric", "lldp_timeout")
    timeout = (
        number(source, "hpcfabric.lldp_timeout", timeout_text, low=0, high=36000) if timeout_text else 3.5 * interval
    )
    if timeout <= interval:
        raise config_error(source, "hpcfabric.lldp_timeout", f"{timeout:g} must be longer than lldp_interval ({interval:g})")
    traffic_text = get_value(parser, "hpcfabric", "traffic")
    traffic = resolve_path(base, traffic_text) if traffic_text else None
    if traffic and not os.path.isfile(traffic):
        raise config_error(source, "hpcfabric.traffic", f"traffic matrix {traffic} "
                           f"{'is a directory' if os.path.isdir(traffic) else 'does not exist'} (relative paths are "
                           "resolved against the config file's directory; docs/workload.md has the format)")
    if traffic and routing == "minimal":
        raise config_error(source, "hpcfabric.traffic", "a traffic matrix chooses Valiant intermediates: it needs "
                           "routing = valiant or conditional (this config has routing = minimal)")
    widths = parse_widths(source, "hpcfabric.widths", get_value(parser, "hpcfabric", "widths"))
    addressing_text = get_value(parser, "hpcfabric", "addressing")

    listen_host = get_value(parser, "openflow", "listen_host")
    if any(c.isspace() for c in listen_host) or not listen_host:
        raise config_error(source, "openflow.listen_host", f"{listen_host!r} is not a host name or address")
    listen_port = integer(source, "openflow.listen_port", get_value(parser, "openflow", "listen_port"), low=1, high=65535)
    bundles = choice(source, "openflow.bundles", get_value(parser, "openflow", "bundles"), BUNDLE_MODES)
    tls, echo_timeout = tls_keys(source, parser, base)
    reload_poll = number(source, "hpcfabric.reload_poll", get_value(parser, "hpcfabric", "reload_poll"), low=0, high=3600,
                          low_open=False)

    def on_off(section: str, key: str) -> bool:
        return choice(source, f"{section}.{key}", get_value(parser, section, key), ON_OFF) == "on"

    source_check = on_off("guards", "source_check")
    punt_meters = on_off("guards", "punt_meters")
    fabric_pps = integer(source, "guards.fabric_punt_pps", get_value(parser, "guards", "fabric_punt_pps"), low=1, high=10**7)
    host_pps = integer(source, "guards.host_punt_pps", get_value(parser, "guards", "host_punt_pps"), low=1, high=10**7)
    burst_text = get_value(parser, "guards", "punt_burst")
    punt_burst = integer(source, "guards.punt_burst", burst_text, low=1, high=10**7) if burst_text else None
    metrics_listen = parse_listen(source, "metrics.listen", get_value(parser, "metrics", "listen"))
    metrics_poll = number(source, "metrics.poll_interval", get_value(parser, "metrics", "poll_interval"), low=0.1,
                           high=3600, low_open=False)
    if metrics_listen is not None:
        if metrics_listen[1] == listen_port and metrics_listen[0] in (listen_host, "0.0.0.0", "::"):
            raise config_error(source, "metrics.listen", f"port {metrics_listen[1]} is the OpenFlow listen port; pick another")
    ha_role = choice(source, "ha.role", get_value(parser, "ha", "role"), HA_ROLES)
    ha_backend = choice(source, "ha.backend", get_value(parser, "ha", "backend"), HA_BACKENDS)
    ha_endpoints, ha_ttl, ha_partitions, ha_prefix = _etcd_keys(source, parser, ha_backend, ha_role)
    ha_etcd = etcd_keys(source, parser, base, ha_backend, ha_endpoints)
    if ha_backend == "etcd":
        ha_role = "auto"
    lease_text = get_value(parser, "ha", "lease_file")
    ha_lease_file = resolve_path(base, lease_text) if lease_text else None
    if ha_role in ("auto", "slave") and not ha_lease_file and ha_backend == "file":
        raise config_error(source, "ha.lease_file",
                           f"role = {ha_role} needs a lease file shared by the instances (e.g. /run/hpcfabric.lease)")
    if ha_lease_file and not os.path.isdir(os.path.dirname(ha_lease_file) or "."):
        raise config_error(source, "ha.lease_file", f"directory {os.path.dirname(ha_lease_file)} does not exist")
    if ha_lease_file and os.path.isdir(ha_lease_file):
        raise config_error(source, "ha.lease_file", f"{ha_lease_file} is a directory; expected a file path")
    ha_lease_timeout = number(source, "ha.lease_timeout", get_value(parser, "ha", "lease_timeout"), low=0.2, high=600,
                               low_open=False)
    ha_instance = get_value(parser, "ha", "instance")
    if any(c.isspace() for c in ha_instance):
        raise config_error(source, "ha.instance", f"{ha_instance!r} must not contain spaces")
    ha_switches = tuple(p for p in (x.strip() for x in get_value(parser, "ha", "switches").split(",")) if p)
    ha_partition = _partition_key(source, parser, ha_backend, ha_partitions, ha_switches)
    compiled_text = get_value(parser, "hpcfabric", "compiled")
    compiled_dir = resolve_path(base, compiled_text) if compiled_text else None
    if compiled_dir and os.path.exists(compiled_dir) and not os.path.isdir(compiled_dir):
        raise config_error(source, "hpcfabric.compiled", f"{compiled_dir} is a file; expected the directory "
                           "`hpcfabric compile` writes")
    fast_failover = on_off("failover", "fast_failover")
    recompute = on_off("failover", "recompute")
    settle_ms = number(source, "failover.settle_ms", get_value(parser, "failover", "settle_ms"), low=0, high=10000,
                       low_open=False)
    failures_text = get_value(parser, "failover", "failures_dir")
    failures_dir = resolve_path(base, failures_text) if failures_text else (
        f"{ha_lease_file}.failures" if ha_lease_file and (ha_switches or ha_partitions > 1) else None)
    if failures_dir and os.path.exists(failures_dir) and not os.path.isdir(failures_dir):
        raise config_error(source, "failover.failures_dir", f"{failures_dir} is a file; expected a directory the "
                           "partitions' controllers share (it is created if missing)")
    planner = _planner_key(source, get_value(parser, "failover", "planner"), failures_dir,
                           partitioned=bool(ha_switches) or ha_partitions > 1, file_mode=ha_backend == "file")
    if fast_failover and not recompute:
        raise config_error(source, "failover.fast_failover", "on needs recompute = on: the groups only bridge the time "
                           "until recomputation replaces the tables (they are proved for one failed link at a time)")
    if fast_failover and pause_reaction == "switch":
        raise config_error(source, "failover.fast_failover", "on cannot be combined with [hpcfabric] pause_reaction = switch "
                           "(the switch-local PORT_STATE entries resubmit instead of outputting through a group); "
                           "set fast_failover = off or pause_reaction = controller")

    # -- the fabric (topology errors carry their own source and field) ----
    from hpcfabric.topology.loader import load_topology

    fabric = load_topology(topology)
    file_addr = fabric.params.get("addressing") or {}
    if addressing_text:
        addressing = choice(source, "hpcfabric.addressing", addressing_text, MODES)
    else:
        addressing = file_addr.get("mode") or "compact"

    real_macs = _hosts_section(source, parser, fabric, host_mac)
    check_tls_names(source, tls, [sw.name for sw in fabric.switches] + [f"{sw.dpid:016x}" for sw in fabric.switches])
    if ha_switches:
        import fnmatch

        names = [sw.name for sw in fabric.switches]
        known = set(names)
        for pat in ha_switches:
            if pat not in known and not any(fnmatch.fnmatchcase(n, pat) for n in names):
                raise config_error(source, "ha.switches", f"pattern {pat!r} matches no switch of {fabric.name}{closest(pat, names)}")

    if ha_partition is not None:
        from hpcfabric.errors import TopologyError
        from hpcfabric.topology.partition import partition_fabric

        try:
            ha_switches = partition_fabric(fabric, ha_partitions)[ha_partition].switches
        except TopologyError as err:
            raise config_error(source, "ha.partitions", str(err)) from None

    traffic_matrix = None
    if traffic:
        from hpcfabric.topology.traffic import load_traffic

        traffic_matrix = load_traffic(traffic, fabric)  # its errors name the matrix file, row and field

    if ha_backend == "etcd" and ha_partitions > len(fabric.switches):
        raise config_error(source, "ha.partitions", f"{ha_partitions} partitions for {len(fabric.switches)} switches "
                           f"of {fabric.name}; expected 1..{len(fabric.switches)}")

    cfg = ControllerConfig(
        path=source,
        source_text=text,
        topology=topology,
        addressing=addressing,
        widths=widths,
        routing=routing,
        link_speed_gbps=link_speed,
        pause_hold_ms=hold_ms,
        host_mac=host_mac,
        real_macs=real_macs,
        status_file=status_file,
        log_level=log_level,
        lldp_interval=interval,
        lldp_timeout=timeout,
        listen_host=listen_host,
        listen_port=listen_port,
        bundles=bundles,
        fabric=fabric,
        reload_poll=reload_poll,
        source_check=source_check,
        punt_meters=punt_meters,
        fabric_punt_pps=fabric_pps,
        host_punt_pps=host_pps,
        punt_burst=punt_burst,
        metrics_listen=metrics_listen,
        metrics_poll=metrics_poll,
        view=view_keys(source, parser, fabric, (listen_host, listen_port), metrics_listen),
        ha_role=ha_role,
        ha_lease_file=ha_lease_file,
        ha_lease_timeout=ha_lease_timeout,
        ha_instance=ha_instance,
        ha_switches=ha_switches,
        ha_partition=ha_partition,
        compiled_dir=compiled_dir,
        ha_backend=ha_backend,
        ha_endpoints=ha_endpoints,
        ha_ttl=ha_ttl,
        ha_partitions=ha_partitions,
        ha_prefix=ha_prefix,
        ha_etcd=ha_etcd,
        tls=tls,
        echo_timeout=echo_timeout,
        fast_failover=fast_failover,
        recompute=recompute,
        settle_ms=settle_ms,
        failures_dir=failures_dir,
        planner=planner,
        pause_reaction=pause_reaction,
        switch_hold_s=switch_hold_s,
        cnm=cnm_on,
        cnm_max_hold_ms=cnm_max_hold_ms,
        cos=cos,
        cos_levels=cos_levels,
        flow_control=flow_control,
        deadlock_check=deadlock_check,
        traffic=traffic,
        traffic_matrix=traffic_matrix,
    )
    cfg = replace(cfg, plan=address_plan(cfg))
    if not compile:
        return cfg
    if compiled_dir:  # compiled and proven once by `hpcfabric compile`: this instance's partition only
        from hpcfabric.config.artifact import load_artifact

        return load_artifact(cfg, compiled_dir)
    cfg = build_tables(cfg)
    return replace(cfg, deadlock=deadlock_verdict(cfg)) if deadlock else cfg


def _hosts_section(
    source: str, parser: configparser.ConfigParser, fabric: Fabric, host_mac: str
) -> tuple[tuple[str, int], ...]:
    section = parser["hosts"] if "hosts" in parser else None
    if host_mac != "rewrite":
        if section is not None and len(section):
            raise config_error(source, "hosts", "a [hosts] section is only used with host_mac = rewrite (this config uses dmp)")
        return ()
    if section is None:
        raise config_error(
            source,
            "hpcfabric.host_mac",
            "host_mac = rewrite needs a [hosts] section with the real MAC of every host (hostname = aa:bb:cc:dd:ee:ff)",
        )
    names = [h.name for h in fabric.hosts]
    known = set(names)
    macs: dict[str, int] = {}
    seen: dict[int, str] = {}
    for name, value in section.items():
        key = f"hosts.{name}"
        if name not in known:
            raise config_error(source, key, f"no host {name!r} in {fabric.name}{closest(name, names)}")
        try:
            mac = parse_mac(value.strip())
        except HpcfabricError as err:
            raise config_error(source, key, str(err)) from None
        if mac >> 40 & 1:
            raise config_error(source, key, f"{format_mac(mac)} is a multicast address; a host needs a unicast MAC")
        if mac == 0:
            raise config_error(source, key, "00:00:00:00:00:00 is not a usable host MAC")
        if mac in seen:
            raise config_error(source, key, f"{format_mac(mac)} is also the MAC of {seen[mac]!r}")
        seen[mac] = name
        macs[name] = mac
    missing = [n for n in names if n not in macs]
    if missing:
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        raise config_error(source, "hosts", f"host_mac = rewrite: no real MAC for {', '.join(missing[:3])}{more}")
    return tuple((n, macs[n]) for n in names)


def validate_config(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Load and compile ``path`` completely; return its summary (raises ConfigError), with what is proven
    about the repairs after failures."""
    cfg = load_config(path)
    return {**cfg.summary(), "failures": failures_promise(cfg)}


#: a Unix socket's path must fit ``sun_path`` (108 bytes with its NUL; a little kept spare)
SOCKET_PATH_MAX = 100


def _planner_key(source: str, text: str, failures_dir: str | None, *, partitioned: bool, file_mode: bool) -> str:
    """``[failover] planner`` resolved to ``own`` or ``shared`` (auto: shared when partitioned on one host in file
    mode, where the partitions share ``failures_dir``; the planner's socket is ``failures_dir/planner.sock``)."""
    wanted = choice(source, "failover.planner", text or "auto", PLANNERS)
    sock = os.path.join(failures_dir, "planner.sock") if failures_dir else ""
    if wanted == "shared":
        if not failures_dir:
            raise config_error(source, "failover.planner", "shared needs a directory the controllers of the host share: "
                               "[failover] failures_dir (or [ha] lease_file, whose <lease_file>.failures is the default)")
        if len(sock.encode()) > SOCKET_PATH_MAX:
            raise config_error(source, "failover.failures_dir", f"{failures_dir} is too long for the shared planner's "
                               f"socket {sock} ({len(sock.encode())} bytes; at most {SOCKET_PATH_MAX})")
        return "shared"
    if wanted == "auto" and partitioned and file_mode and failures_dir and len(sock.encode()) <= SOCKET_PATH_MAX:
        return "shared"
    return "own"


def _etcd_keys(source: str, parser: Any, backend: str, role: str) -> tuple[tuple[str, ...], int, int, str]:
    """``[ha] endpoints, ttl, partitions, prefix`` (checked; used with ``backend = etcd``, docs/ha.md)."""
    endpoints = tuple(e for e in (x.strip() for x in get_value(parser, "ha", "endpoints").split(",")) if e)
    ttl = integer(source, "ha.ttl", get_value(parser, "ha", "ttl"), low=1, high=600)
    partitions = integer(source, "ha.partitions", get_value(parser, "ha", "partitions"), low=1, high=100000)
    prefix = get_value(parser, "ha", "prefix")
    if backend != "etcd":
        if endpoints:
            raise config_error(source, "ha.endpoints", "is only used with backend = etcd (this config has backend = file)")
        return endpoints, ttl, partitions, prefix
    if role in ("master", "slave"):
        raise config_error(source, "ha.role", f"{role} cannot be combined with backend = etcd (etcd elects the "
                           "master of each partition); expected auto")
    if not endpoints:
        raise config_error(source, "ha.endpoints", "backend = etcd needs the etcd client URLs, e.g. "
                           "http://10.0.0.1:2379,http://10.0.0.2:2379,http://10.0.0.3:2379")
    for ep in endpoints:
        scheme, sep, rest = ep.partition("://")
        host, colon, port = rest.rstrip("/").rpartition(":")
        if scheme not in ("http", "https") or not sep or not colon or not host or not port.isdigit() \
                or not 0 < int(port) < 65536:
            raise config_error(source, "ha.endpoints", f"{ep!r}: expected http://HOST:PORT (or https://HOST:PORT)")
    if not prefix.startswith("/") or any(c.isspace() for c in prefix):
        raise config_error(source, "ha.prefix", f"{prefix!r}: expected a key prefix starting with '/', no spaces")
    import importlib.util

    if importlib.util.find_spec("etcd3gw") is None:
        raise config_error(source, "ha.backend", "etcd needs the Python package etcd3gw (pip install etcd3gw; "
                           "scripts/bootstrap.sh --etcd installs it)")
    return endpoints, ttl, partitions, prefix


def _partition_key(source: str, parser: Any, backend: str, partitions: int, switches: tuple[str, ...]) -> int | None:
    """``[ha] partition`` (0-based index among ``[ha] partitions`` derived partitions, file backend), checked."""
    text = get_value(parser, "ha", "partition").strip()
    if not text:
        if backend == "file" and partitions > 1 and not switches:
            raise config_error(source, "ha.partition", f"missing: [ha] partitions = {partitions} with backend = file "
                               f"needs this instance's partition, 0..{partitions - 1}")
        return None
    if backend == "etcd":
        raise config_error(source, "ha.partition", "is only used with backend = file (etcd assigns the partitions "
                           "to the live instances)")
    if switches:
        raise config_error(source, "ha.partition", "give either [ha] partition (with partitions) or [ha] switches, "
                           "not both")
    if partitions < 2:
        raise config_error(source, "ha.partition", f"{text!r} needs [ha] partitions >= 2 (the number of "
                           "partitions the fabric is split into)")
    return integer(source, "ha.partition", text.removeprefix("p"), low=0, high=partitions - 1)
