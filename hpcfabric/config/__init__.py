"""Controller configuration: an INI file -> a validated, compiled :class:`ControllerConfig` (pure).

Example (``configs/dragonfly-a4-p2-h2.conf``)::

    [hpcfabric]
    topology = ../topologies/dragonfly-a4-p2-h2.yaml   ; relative to this file
    addressing = compact        ; flat | per-switch | per-group | compact
    widths =                    ; optional "group=8,switch=4,host=3"
    routing = conditional       ; minimal | valiant | conditional
    cos =                       ; on | off | none | top | hop (default: the compiler's: on for valiant, else off)
    cos_levels =                ; optional 1..8 VLAN PCP values (default: the scheme's)
    link_speed_gbps = 10        ; converts PAUSE quanta to seconds
    pause_hold_ms = 50          ; a paused port stays paused at least this long (damps PAUSE trains)
    pause_reaction = controller ; controller | switch (OVS learn: the switch reacts to PAUSE itself)
    switch_hold_s = 1           ; switch mode: whole seconds an override lasts after the last PAUSE
    cnm = off                   ; on: 802.1Qau CNMs from fabric ports flip ports too (copied to the controller)
    cnm_max_hold_ms = 250       ; hold of a CNM with the most severe feedback (qFb 63); milder: proportionally less
    host_mac = dmp              ; dmp | rewrite (rewrite needs a [hosts] section)
    status_file =               ; optional JSON status path (relative to this file)
    log_level = INFO
    lldp_interval = 1.0
    lldp_timeout =              ; optional, default 3.5 x lldp_interval

    [openflow]
    listen_host = 127.0.0.1
    listen_port = 6653
    bundles = auto              ; auto | on | off  (OF1.3 ONF bundles for installs)

    [hosts]                     ; only with host_mac = rewrite: real MAC per host
    g0s0h0 = aa:bb:cc:dd:ee:01

    ; operations (docs/operations.md): reload_poll in [hpcfabric], and
    [guards]                    ; source_check, punt_meters (on|off), fabric_punt_pps, host_punt_pps, punt_burst
    [metrics]                   ; listen = HOST:PORT (empty = off), poll_interval
    [ha]                        ; role = equal|auto|master|slave, lease_file, lease_timeout, instance, switches
    [failover]                  ; recompute = on|off, fast_failover = on|off (groups: hpcfabric.failover.groups)

``[DEFAULT]`` belongs to os-ken/oslo (``osken-manager --config-file``) and is
ignored here. Everything is checked at load time -- the topology is loaded,
addresses planned and the rules compiled -- so a controller never starts with
a configuration it cannot apply. Every problem raises
:class:`~hpcfabric.errors.ConfigError` with ``source`` = the file and ``field``
= ``section.key`` (topology-file problems keep their own source and field).
"""

from __future__ import annotations

import configparser
import difflib
import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from hpcfabric.rules.addressing import MODES, AddressPlan, format_mac, parse_mac, plan_addresses
from hpcfabric.errors import AddressingError, CompileError, ConfigError, HpcfabricError
from hpcfabric.rules.flows import PAUSE_REACTIONS, FlowSpec
from hpcfabric.rules.mac_rewrite import rewrite_flows
from hpcfabric.topology.model import Fabric

ROUTINGS = ("minimal", "valiant", "conditional")
#: ``[hpcfabric] cos``: on/off or a scheme name (:data:`hpcfabric.rules.compiler.COS_SCHEMES`)
COS_CHOICES = ("on", "off", "none", "top", "hop")
HOST_MAC_MODES = ("dmp", "rewrite")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
BUNDLE_MODES = ("auto", "on", "off")

#: section -> key -> default ("" = unset/optional, None = required)
SCHEMA: dict[str, dict[str, str | None]] = {
    "hpcfabric": {
        "topology": None,
        "addressing": "",
        "widths": "",
        "routing": "minimal",
        "cos": "",
        "cos_levels": "",
        "link_speed_gbps": "10",
        "pause_hold_ms": "50",
        "pause_reaction": "controller",
        "switch_hold_s": "1",
        "cnm": "off",
        "cnm_max_hold_ms": "250",
        "host_mac": "dmp",
        "status_file": "",
        "log_level": "INFO",
        "lldp_interval": "1.0",
        "lldp_timeout": "",
        "reload_poll": "1.0",
    },
    "openflow": {
        "listen_host": "127.0.0.1",
        "listen_port": "6653",
        "bundles": "auto",
    },
    "guards": {
        "source_check": "off",
        "punt_meters": "off",
        "fabric_punt_pps": "1000",
        "host_punt_pps": "20",
        "punt_burst": "",
    },
    "metrics": {
        "listen": "",
        "poll_interval": "10",
    },
    "ha": {
        "role": "equal",
        "lease_file": "",
        "lease_timeout": "2.0",
        "instance": "",
        "switches": "",
    },
    "failover": {
        "fast_failover": "off",
        "recompute": "on",
    },
}
HA_ROLES = ("equal", "auto", "master", "slave")
ON_OFF = ("on", "off")
#: sections that hold free-form keys
FREE_SECTIONS = ("hosts",)
#: sections owned by somebody else (oslo.config reads [DEFAULT] for osken-manager)
IGNORED_SECTIONS = ("DEFAULT",)


@dataclass(frozen=True, eq=False)
class ControllerConfig:
    """A validated controller configuration, with the fabric it compiles to.

    ``desired`` holds, per switch name, the flows the controller installs
    (the compiled table, adapted to ``host_mac``), PORT_STATE entries unpaused.
    """

    path: str
    topology: str
    addressing: str
    widths: tuple[tuple[str, int], ...] | None
    routing: str
    link_speed_gbps: float
    pause_hold_ms: float
    host_mac: str
    real_macs: tuple[tuple[str, int], ...]
    status_file: str | None
    log_level: str
    lldp_interval: float
    lldp_timeout: float
    listen_host: str
    listen_port: int
    bundles: str
    fabric: Fabric = field(repr=False)
    plan: AddressPlan | None = field(default=None, repr=False)
    compiled: Any = field(default=None, repr=False)  # hpcfabric.rules.compiler.CompiledFabric
    desired: Mapping[str, tuple[FlowSpec, ...]] = field(default_factory=dict, repr=False)
    reload_poll: float = 1.0
    source_check: bool = False
    punt_meters: bool = False
    fabric_punt_pps: int = 1000
    host_punt_pps: int = 20
    punt_burst: int | None = None
    metrics_listen: tuple[str, int] | None = None
    metrics_poll: float = 10.0
    ha_role: str = "equal"
    ha_lease_file: str | None = None
    ha_lease_timeout: float = 2.0
    ha_instance: str = ""
    ha_switches: tuple[str, ...] = ()
    fast_failover: bool = False
    recompute: bool = True
    pause_reaction: str = "controller"
    switch_hold_s: int = 1
    cnm: bool = False
    cnm_max_hold_ms: float = 250.0
    #: ``[hpcfabric] cos`` as given (None: the compiler's default for the policy); the result is compiled.cos
    cos: str | None = None
    cos_levels: int | None = None
    #: fast-failover groups per switch (:class:`hpcfabric.rules.flows.GroupSpec`), empty unless fast_failover
    groups: Mapping[str, tuple[Any, ...]] = field(default_factory=dict, repr=False)

    @property
    def meters(self) -> tuple[Any, ...]:
        """The punt meters (:class:`hpcfabric.rules.guards.Meter`) every switch needs, () without punt_meters."""
        if not self.punt_meters:
            return ()
        from hpcfabric.rules.guards import meters

        return meters(self.fabric_punt_pps, self.host_punt_pps, self.punt_burst)

    def manages(self, switch: str) -> bool:
        """Does this instance manage ``switch`` (``[ha] switches`` partitions a fabric between instances)?"""
        if not self.ha_switches:
            return True
        import fnmatch

        return any(fnmatch.fnmatchcase(switch, pat) for pat in self.ha_switches)

    @property
    def link_speed_bps(self) -> float:
        return self.link_speed_gbps * 1e9

    @property
    def dpid_to_switch(self) -> dict[int, str]:
        return {sw.dpid: sw.name for sw in self.fabric.switches}

    @property
    def rules_expected(self) -> int:
        return sum(len(f) for f in self.desired.values())

    def summary(self) -> dict[str, Any]:
        """What ``hpcfabric check`` prints for a config file."""
        return {
            "config": self.path,
            "topology": self.topology,
            "fabric": self.fabric.name,
            "kind": self.fabric.kind,
            "switches": len(self.fabric.switches),
            "hosts": len(self.fabric.hosts),
            "links": len(self.fabric.links),
            "addressing": self.addressing,
            "layout": self.plan.layout.describe() if self.plan else None,
            "routing": self.routing,
            "cos": (f"{self.compiled.cos}/{self.compiled.cos_levels}" if self.compiled is not None
                    and self.compiled.cos is not None else "off"),
            "link_speed_gbps": self.link_speed_gbps,
            "pause_hold_ms": self.pause_hold_ms,
            "pause_reaction": self.pause_reaction,
            "switch_hold_s": self.switch_hold_s,
            "cnm": "on" if self.cnm else "off",
            "host_mac": self.host_mac,
            "rules_expected": self.rules_expected,
            "listen": f"{self.listen_host}:{self.listen_port}",
            "status_file": self.status_file,
            "guards": ",".join(n for n, on in (("source_check", self.source_check), ("punt_meters", self.punt_meters)) if on)
            or "off",
            "metrics": f"{self.metrics_listen[0]}:{self.metrics_listen[1]}" if self.metrics_listen else "off",
            "ha": self.ha_role,
            "fast_failover": "on" if self.fast_failover else "off",
            "ff_groups": sum(len(g) for g in self.groups.values()),
        }


# ---------------------------------------------------------------------------
# parsing helpers


def _err(path: str, key: str, message: str) -> ConfigError:
    return ConfigError(message, source=path, field=key)


def _closest(word: str, choices: Iterable[str]) -> str:
    choices = list(choices)
    match = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    if not match:
        match = difflib.get_close_matches(word.lower(), [c.lower() for c in choices], n=1, cutoff=0.6)
        match = [c for c in choices if c.lower() in match]
    if match:
        return f"; did you mean {match[0]!r}?"
    return f"; expected one of: {', '.join(choices)}" if len(choices) <= 12 else ""


def _choice(path: str, key: str, value: str, choices: Iterable[str], fold: Callable[[str], str] = str.lower) -> str:
    choices = tuple(choices)
    folded = fold(value)
    if folded in choices:
        return folded
    hint = difflib.get_close_matches(folded, choices, n=1, cutoff=0.6)
    suggestion = f"; did you mean {hint[0]!r}?" if hint else ""
    raise _err(path, key, f"{value!r} is not one of {', '.join(choices)}{suggestion}")


def _number(path: str, key: str, value: str, *, low: float, high: float = math.inf, low_open: bool = True) -> float:
    try:
        number = float(value)
    except ValueError:
        raise _err(path, key, f"{value!r} is not a number") from None
    if not math.isfinite(number):
        raise _err(path, key, f"{value!r} must be a finite number")
    if (number <= low if low_open else number < low) or number > high:
        bound = f"> {low:g}" if low_open else f">= {low:g}"
        top = "" if high == math.inf else f" and <= {high:g}"
        raise _err(path, key, f"{value} out of range: must be {bound}{top}")
    return number


def _integer(path: str, key: str, value: str, *, low: int, high: int) -> int:
    try:
        number = int(value, 10)
    except ValueError:
        raise _err(path, key, f"{value!r} is not an integer") from None
    if not low <= number <= high:
        raise _err(path, key, f"{number} out of range {low}..{high}")
    return number


def parse_widths(path: str, key: str, text: str) -> tuple[tuple[str, int], ...] | None:
    """``group=8,switch=4,host=3`` -> (("group", 8), ...); empty -> None."""
    text = text.strip()
    if not text:
        return None
    out: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name or not value.isdigit():
            raise _err(path, key, f"expected FIELD=BITS[,FIELD=BITS...] like group=8,switch=4,host=3, got {part!r}")
        if name in out:
            raise _err(path, key, f"field {name!r} given twice")
        bits = int(value)
        if not 1 <= bits <= 46:
            raise _err(path, key, f"width of {name!r} must be 1..46 bits, got {bits}")
        out[name] = bits
    return tuple(out.items())


def _read_ini(path: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(
        interpolation=None,
        inline_comment_prefixes=(";", "#"),
        comment_prefixes=(";", "#"),
        strict=True,
        empty_lines_in_values=False,
        default_section="\0no-default-section",  # [DEFAULT] is a plain (ignored) section here
    )
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # host names are case-sensitive
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("no such config file", source=path) from None
    except IsADirectoryError:
        raise ConfigError("is a directory, expected an INI config file", source=path) from None
    except PermissionError:
        raise ConfigError("permission denied", source=path) from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"not UTF-8 text (invalid byte at offset {err.start})", source=path) from None
    except OSError as err:
        raise ConfigError(f"cannot read the file: {err.strerror or err}", source=path) from None
    try:
        parser.read_string(text, source=path)
    except configparser.MissingSectionHeaderError as err:
        raise ConfigError(
            f"line {err.lineno}: expected a [section] header before {err.line.strip()!r}", source=path
        ) from None
    except configparser.DuplicateSectionError as err:
        raise ConfigError(f"line {err.lineno}: section [{err.section}] appears twice", source=path, field=err.section) from None
    except configparser.DuplicateOptionError as err:
        raise ConfigError(
            f"line {err.lineno}: key {err.option!r} appears twice", source=path, field=f"{err.section}.{err.option}"
        ) from None
    except configparser.ParsingError as err:
        lineno, line = err.errors[0] if err.errors else (0, "")
        raise ConfigError(f"line {lineno}: cannot parse {line.strip()!r} (expected key = value)", source=path) from None
    except configparser.Error as err:
        raise ConfigError(f"malformed INI: {err}", source=path) from None
    return parser


def _check_names(path: str, parser: configparser.ConfigParser) -> None:
    known = list(SCHEMA) + list(FREE_SECTIONS)
    for section in parser.sections():
        if section in IGNORED_SECTIONS:
            continue
        if section not in known:
            raise _err(path, section, f"unknown section [{section}]{_closest(section, known)}")
        if section in FREE_SECTIONS:
            continue
        for key in parser[section]:
            if key not in SCHEMA[section]:
                raise _err(path, f"{section}.{key}", f"unknown key {key!r} in [{section}]{_closest(key, SCHEMA[section])}")
    if "hpcfabric" not in parser:
        raise ConfigError("missing section [hpcfabric] (it needs at least 'topology = FILE')", source=path, field="hpcfabric")


def _get(parser: configparser.ConfigParser, section: str, key: str) -> str:
    default = SCHEMA[section][key]
    if section in parser and key in parser[section]:
        value = parser[section][key].strip()
        if value or default is None:
            return value
    return default or ""


# ---------------------------------------------------------------------------
# loading


def _resolve(base: Path, value: str) -> str:
    p = Path(os.path.expanduser(value))
    return os.path.normpath(p if p.is_absolute() else base / p)


def load_config(path: str | os.PathLike[str], *, compile: bool = True) -> ControllerConfig:
    """Read, validate and (with ``compile``) compile the controller config at ``path``.

    Raises
    ------
    ConfigError
        Anything wrong with the file, the topology it names, the address plan
        or the rules (``source`` = file, ``field`` = ``section.key``).
    """
    source = os.fspath(path)
    parser = _read_ini(source)
    _check_names(source, parser)
    base = Path(source).resolve().parent

    topo_value = _get(parser, "hpcfabric", "topology")
    if not topo_value:
        raise _err(source, "hpcfabric.topology", "missing: the topology YAML file this controller runs")
    topology = _resolve(base, topo_value)
    if not os.path.exists(topology):
        raise _err(
            source,
            "hpcfabric.topology",
            f"topology file {topology} does not exist (relative paths are resolved against the config file's directory)",
        )

    routing = _choice(source, "hpcfabric.routing", _get(parser, "hpcfabric", "routing"), ROUTINGS)
    cos_text = _get(parser, "hpcfabric", "cos")
    cos = _choice(source, "hpcfabric.cos", cos_text, COS_CHOICES) if cos_text else None
    levels_text = _get(parser, "hpcfabric", "cos_levels")
    cos_levels = _integer(source, "hpcfabric.cos_levels", levels_text, low=1, high=8) if levels_text else None
    if cos_levels is not None and (cos == "off" or (cos is None and routing != "valiant")):
        raise _err(source, "hpcfabric.cos_levels",
                   f"{cos_levels} needs classes of service: set cos = on|none|top|hop "
                   f"(cos is {'off' if cos == 'off' else 'off by default with routing = ' + routing})")
    link_speed = _number(source, "hpcfabric.link_speed_gbps", _get(parser, "hpcfabric", "link_speed_gbps"), low=0, high=1e4)
    hold_ms = _number(source, "hpcfabric.pause_hold_ms", _get(parser, "hpcfabric", "pause_hold_ms"), low=0, high=60000,
                      low_open=False)
    pause_reaction = _choice(source, "hpcfabric.pause_reaction", _get(parser, "hpcfabric", "pause_reaction"),
                             PAUSE_REACTIONS)
    if pause_reaction == "switch" and routing != "conditional":
        raise _err(source, "hpcfabric.pause_reaction",
                   f"switch needs routing = conditional (routing = {routing} has no conditional rules to switch)")
    switch_hold_s = _integer(source, "hpcfabric.switch_hold_s", _get(parser, "hpcfabric", "switch_hold_s"), low=1,
                             high=65535)
    cnm_on = _choice(source, "hpcfabric.cnm", _get(parser, "hpcfabric", "cnm"), ON_OFF) == "on"
    cnm_max_hold_ms = _number(source, "hpcfabric.cnm_max_hold_ms", _get(parser, "hpcfabric", "cnm_max_hold_ms"),
                              low=0, high=60000)
    host_mac = _choice(source, "hpcfabric.host_mac", _get(parser, "hpcfabric", "host_mac"), HOST_MAC_MODES)
    status = _get(parser, "hpcfabric", "status_file")
    status_file = _resolve(base, status) if status else None
    if status_file and os.path.isdir(status_file):
        raise _err(source, "hpcfabric.status_file", f"{status_file} is a directory; expected a file path")
    if status_file and not os.path.isdir(os.path.dirname(status_file) or "."):
        raise _err(source, "hpcfabric.status_file", f"directory {os.path.dirname(status_file)} does not exist")
    log_level = _choice(source, "hpcfabric.log_level", _get(parser, "hpcfabric", "log_level"), LOG_LEVELS, str.upper)
    interval = _number(source, "hpcfabric.lldp_interval", _get(parser, "hpcfabric", "lldp_interval"), low=0.01, high=3600, low_open=False)
    timeout_text = _get(parser, "hpcfabric", "lldp_timeout")
    timeout = (
        _number(source, "hpcfabric.lldp_timeout", timeout_text, low=0, high=36000) if timeout_text else 3.5 * interval
    )
    if timeout <= interval:
        raise _err(source, "hpcfabric.lldp_timeout", f"{timeout:g} must be longer than lldp_interval ({interval:g})")
    widths = parse_widths(source, "hpcfabric.widths", _get(parser, "hpcfabric", "widths"))
    addressing_text = _get(parser, "hpcfabric", "addressing")

    listen_host = _get(parser, "openflow", "listen_host")
    if any(c.isspace() for c in listen_host) or not listen_host:
        raise _err(source, "openflow.listen_host", f"{listen_host!r} is not a host name or address")
    listen_port = _integer(source, "openflow.listen_port", _get(parser, "openflow", "listen_port"), low=1, high=65535)
    bundles = _choice(source, "openflow.bundles", _get(parser, "openflow", "bundles"), BUNDLE_MODES)
    reload_poll = _number(source, "hpcfabric.reload_poll", _get(parser, "hpcfabric", "reload_poll"), low=0, high=3600,
                          low_open=False)

    def on_off(section: str, key: str) -> bool:
        return _choice(source, f"{section}.{key}", _get(parser, section, key), ON_OFF) == "on"

    source_check = on_off("guards", "source_check")
    punt_meters = on_off("guards", "punt_meters")
    fabric_pps = _integer(source, "guards.fabric_punt_pps", _get(parser, "guards", "fabric_punt_pps"), low=1, high=10**7)
    host_pps = _integer(source, "guards.host_punt_pps", _get(parser, "guards", "host_punt_pps"), low=1, high=10**7)
    burst_text = _get(parser, "guards", "punt_burst")
    punt_burst = _integer(source, "guards.punt_burst", burst_text, low=1, high=10**7) if burst_text else None
    metrics_listen = _listen(source, "metrics.listen", _get(parser, "metrics", "listen"))
    metrics_poll = _number(source, "metrics.poll_interval", _get(parser, "metrics", "poll_interval"), low=0.1,
                           high=3600, low_open=False)
    if metrics_listen is not None:
        import importlib.util

        if importlib.util.find_spec("prometheus_client") is None:
            raise _err(source, "metrics.listen", "needs the Python package prometheus_client (pip install prometheus_client)")
        if metrics_listen[1] == listen_port and metrics_listen[0] in (listen_host, "0.0.0.0", "::"):
            raise _err(source, "metrics.listen", f"port {metrics_listen[1]} is the OpenFlow listen port; pick another")
    ha_role = _choice(source, "ha.role", _get(parser, "ha", "role"), HA_ROLES)
    lease_text = _get(parser, "ha", "lease_file")
    ha_lease_file = _resolve(base, lease_text) if lease_text else None
    if ha_role in ("auto", "slave") and not ha_lease_file:
        raise _err(source, "ha.lease_file",
                   f"role = {ha_role} needs a lease file shared by the instances (e.g. /run/hpcfabric.lease)")
    if ha_lease_file and not os.path.isdir(os.path.dirname(ha_lease_file) or "."):
        raise _err(source, "ha.lease_file", f"directory {os.path.dirname(ha_lease_file)} does not exist")
    if ha_lease_file and os.path.isdir(ha_lease_file):
        raise _err(source, "ha.lease_file", f"{ha_lease_file} is a directory; expected a file path")
    ha_lease_timeout = _number(source, "ha.lease_timeout", _get(parser, "ha", "lease_timeout"), low=0.2, high=600,
                               low_open=False)
    ha_instance = _get(parser, "ha", "instance")
    if any(c.isspace() for c in ha_instance):
        raise _err(source, "ha.instance", f"{ha_instance!r} must not contain spaces")
    ha_switches = tuple(p for p in (x.strip() for x in _get(parser, "ha", "switches").split(",")) if p)
    fast_failover = on_off("failover", "fast_failover")
    recompute = on_off("failover", "recompute")
    if fast_failover and not recompute:
        raise _err(source, "failover.fast_failover", "on needs recompute = on: the groups only bridge the time "
                   "until recomputation replaces the tables (they are proved for one failed link at a time)")
    if fast_failover and pause_reaction == "switch":
        raise _err(source, "failover.fast_failover", "on cannot be combined with [hpcfabric] pause_reaction = switch "
                   "(the switch-local PORT_STATE entries resubmit instead of outputting through a group); "
                   "set fast_failover = off or pause_reaction = controller")

    # -- the fabric (topology errors carry their own source and field) ----
    from hpcfabric.topology.loader import load_topology

    fabric = load_topology(topology)
    file_addr = fabric.params.get("addressing") or {}
    if addressing_text:
        addressing = _choice(source, "hpcfabric.addressing", addressing_text, MODES)
    else:
        addressing = file_addr.get("mode") or "compact"

    real_macs = _hosts_section(source, parser, fabric, host_mac)
    if ha_switches:
        import fnmatch

        names = [sw.name for sw in fabric.switches]
        for pat in ha_switches:
            if not any(fnmatch.fnmatchcase(n, pat) for n in names):
                raise _err(source, "ha.switches", f"pattern {pat!r} matches no switch of {fabric.name}{_closest(pat, names)}")

    cfg = ControllerConfig(
        path=source,
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
        ha_role=ha_role,
        ha_lease_file=ha_lease_file,
        ha_lease_timeout=ha_lease_timeout,
        ha_instance=ha_instance,
        ha_switches=ha_switches,
        fast_failover=fast_failover,
        recompute=recompute,
        pause_reaction=pause_reaction,
        switch_hold_s=switch_hold_s,
        cnm=cnm_on,
        cnm_max_hold_ms=cnm_max_hold_ms,
        cos=cos,
        cos_levels=cos_levels,
    )
    # -- address plan --------------------------------------------------
    if widths is not None:
        plan_widths, widths_field = dict(widths), "hpcfabric.widths"
    elif file_addr.get("widths") and file_addr.get("mode", addressing) == addressing:
        plan_widths, widths_field = dict(file_addr["widths"]), None
    else:
        plan_widths, widths_field = None, "hpcfabric.addressing"
    try:
        plan = plan_addresses(fabric, addressing, plan_widths)
    except AddressingError as err:
        if err.source:  # already names its file
            raise
        if widths_field is None:  # widths from the topology file
            raise AddressingError(err.detail, source=topology, field=err.field) from None
        raise AddressingError(err.detail, source=source, field=widths_field) from None
    cfg = replace(cfg, plan=plan)
    if not compile:
        return cfg
    # -- rules ------------------------------------------------------------
    from hpcfabric.rules.compiler import compile_fabric

    cos_arg: bool | str | None = {"on": True, "off": False, None: None}.get(cos, cos)
    try:
        compiled = compile_fabric(fabric, plan, routing=routing, pause_reaction=pause_reaction,
                                  switch_hold_s=switch_hold_s, cnm_snoop=cnm_on, cos=cos_arg, cos_levels=cos_levels)
    except CompileError as err:
        raise _err(source, _compile_error_key(str(err), routing, cos_levels),
                   f"cannot compile rules for {fabric.name}: {err}") from None
    tagged = compiled.cos is not None
    tables = {name: t.flows for name, t in compiled.tables.items()}
    if host_mac == "rewrite":
        tables = rewrite_flows(fabric, plan, tables, dict(real_macs), cos=tagged)
    if source_check or punt_meters:
        from hpcfabric.rules.guards import guard_flows

        tables = guard_flows(fabric, plan, tables, source_check=source_check, punt_meters=punt_meters, cos=tagged)
    groups: dict[str, tuple[Any, ...]] = {}
    if fast_failover:
        from hpcfabric.failover.groups import fast_failover_groups

        try:
            ff = fast_failover_groups(compiled, tables, source_macs=dict(real_macs))
        except CompileError as err:
            raise _err(source, "failover.fast_failover", str(err)) from None
        if not ff.stats()["groups"]:
            raise _err(source, "failover.fast_failover", f"no fabric port of {fabric.name} has a loop-free detour "
                       "(docs/operations.md); use off (failures are routed around by recomputation)")
        tables, groups = dict(ff.flows), {k: v for k, v in ff.groups.items() if v}
    return replace(cfg, compiled=compiled, desired=tables, groups=groups)


def _compile_error_key(message: str, routing: str, cos_levels: int | None) -> str:
    """The config key a :class:`CompileError` from :func:`compile_fabric` is about."""
    if "cos_levels" in message and cos_levels is not None:
        return "hpcfabric.cos_levels"
    if "CoS" in message or "cos" in message.split():
        return "hpcfabric.cos"
    if routing != "minimal" and routing in message:
        return "hpcfabric.routing"
    return "hpcfabric.addressing"


def _listen(path: str, key: str, text: str) -> tuple[str, int] | None:
    """``host:port`` (``[v6]:port``) -> (host, port); empty -> None."""
    text = text.strip()
    if not text:
        return None
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or any(c.isspace() for c in host):
        raise _err(path, key, f"expected HOST:PORT like 127.0.0.1:9302 (empty = off), got {text!r}")
    return host, _integer(path, key, port, low=1, high=65535)


def _hosts_section(
    source: str, parser: configparser.ConfigParser, fabric: Fabric, host_mac: str
) -> tuple[tuple[str, int], ...]:
    section = parser["hosts"] if "hosts" in parser else None
    if host_mac != "rewrite":
        if section is not None and len(section):
            raise _err(source, "hosts", "a [hosts] section is only used with host_mac = rewrite (this config uses dmp)")
        return ()
    if section is None:
        raise _err(
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
            raise _err(source, key, f"no host {name!r} in {fabric.name}{_closest(name, names)}")
        try:
            mac = parse_mac(value.strip())
        except HpcfabricError as err:
            raise _err(source, key, str(err)) from None
        if mac >> 40 & 1:
            raise _err(source, key, f"{format_mac(mac)} is a multicast address; a host needs a unicast MAC")
        if mac == 0:
            raise _err(source, key, "00:00:00:00:00:00 is not a usable host MAC")
        if mac in seen:
            raise _err(source, key, f"{format_mac(mac)} is also the MAC of {seen[mac]!r}")
        seen[mac] = name
        macs[name] = mac
    missing = [n for n in names if n not in macs]
    if missing:
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        raise _err(source, "hosts", f"host_mac = rewrite: no real MAC for {', '.join(missing[:3])}{more}")
    return tuple((n, macs[n]) for n in names)


def validate_config(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Load and compile ``path`` completely; return its summary (raises ConfigError)."""
    return load_config(path).summary()
