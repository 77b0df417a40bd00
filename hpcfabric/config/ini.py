"""The INI side of the controller configuration: the schema (sections, keys, defaults,
choices), reading the file and typed, checked values with errors that name
the file and the ``section.key`` (:class:`~hpcfabric.errors.ConfigError`)."""

from __future__ import annotations

import configparser
import difflib
import math
import os
from pathlib import Path
from typing import Callable, Iterable

from hpcfabric.errors import ConfigError, read_user_file

ROUTINGS = ("minimal", "valiant", "conditional")
#: ``[hpcfabric] cos``: on/off or a scheme name (:data:`hpcfabric.rules.cos.COS_SCHEMES`)
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
        "flow_control": "pfc",
        "deadlock_check": "on",
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
        "compiled": "",
        "traffic": "",
    },
    "openflow": {
        "listen_host": "127.0.0.1",
        "listen_port": "6653",
        "bundles": "auto",
        "tls": "off",
        "tls_key": "",
        "tls_cert": "",
        "tls_ca": "",
        "tls_names": "",
        "echo_timeout": "3",
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
        "links": "",
        "top_links": "10",
    },
    "web": {
        "listen": "",
    },
    "ha": {
        "role": "equal",
        "lease_file": "",
        "lease_timeout": "2.0",
        "instance": "",
        "switches": "",
        "partition": "",
        "backend": "file",
        "endpoints": "",
        "ttl": "2",
        "partitions": "1",
        "prefix": "/hpcfabric",
        "etcd_ca": "",
        "etcd_cert": "",
        "etcd_key": "",
        "etcd_user": "",
        "etcd_password_file": "",
    },
    "failover": {
        "fast_failover": "off",
        "recompute": "on",
        "settle_ms": "50",
        "failures_dir": "",
        "planner": "auto",
    },
}
HA_ROLES = ("equal", "auto", "master", "slave")
HA_BACKENDS = ("file", "etcd")
PLANNERS = ("auto", "own", "shared")
ON_OFF = ("on", "off")
#: sections that hold free-form keys
FREE_SECTIONS = ("hosts",)
#: sections owned by somebody else (oslo.config reads [DEFAULT] for osken-manager)
IGNORED_SECTIONS = ("DEFAULT",)


def config_error(path: str, key: str, message: str) -> ConfigError:
    return ConfigError(message, source=path, field=key)


def closest(word: str, choices: Iterable[str]) -> str:
    choices = list(choices)
    match = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    if not match:
        match = difflib.get_close_matches(word.lower(), [c.lower() for c in choices], n=1, cutoff=0.6)
        match = [c for c in choices if c.lower() in match]
    if match:
        return f"; did you mean {match[0]!r}?"
    return f"; expected one of: {', '.join(choices)}" if len(choices) <= 12 else ""


def choice(path: str, key: str, value: str, choices: Iterable[str], fold: Callable[[str], str] = str.lower) -> str:
    choices = tuple(choices)
    folded = fold(value)
    if folded in choices:
        return folded
    hint = difflib.get_close_matches(folded, choices, n=1, cutoff=0.6)
    suggestion = f"; did you mean {hint[0]!r}?" if hint else ""
    raise config_error(path, key, f"{value!r} is not one of {', '.join(choices)}{suggestion}")


def number(path: str, key: str, value: str, *, low: float, high: float = math.inf, low_open: bool = True) -> float:
    try:
        number = float(value)
    except ValueError:
        raise config_error(path, key, f"{value!r} is not a number") from None
    if not math.isfinite(number):
        raise config_error(path, key, f"{value!r} must be a finite number")
    if (number <= low if low_open else number < low) or number > high:
        bound = f"> {low:g}" if low_open else f">= {low:g}"
        top = "" if high == math.inf else f" and <= {high:g}"
        raise config_error(path, key, f"{value} out of range: must be {bound}{top}")
    return number


def integer(path: str, key: str, value: str, *, low: int, high: int) -> int:
    try:
        number = int(value, 10)
    except ValueError:
        raise config_error(path, key, f"{value!r} is not an integer") from None
    if not low <= number <= high:
        raise config_error(path, key, f"{number} out of range {low}..{high}")
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
            raise config_error(path, key, f"expected FIELD=BITS[,FIELD=BITS...] like group=8,switch=4,host=3, got {part!r}")
        if name in out:
            raise config_error(path, key, f"field {name!r} given twice")
        bits = int(value)
        if not 1 <= bits <= 46:
            raise config_error(path, key, f"width of {name!r} must be 1..46 bits, got {bits}")
        out[name] = bits
    return tuple(out.items())


def parse_listen(path: str, key: str, text: str) -> tuple[str, int] | None:
    """``host:port`` (``[v6]:port``) -> (host, port); empty -> None."""
    text = text.strip()
    if not text:
        return None
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or any(c.isspace() for c in host):
        raise config_error(path, key, f"expected HOST:PORT like 127.0.0.1:9302 (empty = off), got {text!r}")
    return host, integer(path, key, port, low=1, high=65535)


def read_ini(path: str, text: str | None = None) -> configparser.ConfigParser:
    """The INI file at ``path`` (``text``: its contents as read before, not read again)."""
    parser = configparser.ConfigParser(
        interpolation=None,
        inline_comment_prefixes=(";", "#"),
        comment_prefixes=(";", "#"),
        strict=True,
        empty_lines_in_values=False,
        default_section="\0no-default-section",  # [DEFAULT] is a plain (ignored) section here
    )
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # host names are case-sensitive
    if text is None:
        text = read_user_file(path, "an INI config file", "no such config file")
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


def check_names(path: str, parser: configparser.ConfigParser) -> None:
    known = list(SCHEMA) + list(FREE_SECTIONS)
    for section in parser.sections():
        if section in IGNORED_SECTIONS:
            continue
        if section not in known:
            raise config_error(path, section, f"unknown section [{section}]{closest(section, known)}")
        if section in FREE_SECTIONS:
            continue
        for key in parser[section]:
            if key not in SCHEMA[section]:
                raise config_error(path, f"{section}.{key}", f"unknown key {key!r} in [{section}]{closest(key, SCHEMA[section])}")
    if "hpcfabric" not in parser:
        raise ConfigError("missing section [hpcfabric] (it needs at least 'topology = FILE')", source=path, field="hpcfabric")


def get_value(parser: configparser.ConfigParser, section: str, key: str) -> str:
    default = SCHEMA[section][key]
    if section in parser and key in parser[section]:
        value = parser[section][key].strip()
        if value or default is None:
            return value
    return default or ""


def resolve_path(base: Path, value: str) -> str:
    p = Path(os.path.expanduser(value))
    return os.path.normpath(p if p.is_absolute() else base / p)
