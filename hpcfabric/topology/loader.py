"""Load a fabric from a YAML topology file.

The schema is documented in ``docs/topology-yaml.md``. In short::

    kind: dragonfly        # dragonfly | flattened_butterfly | fat_tree | folded_clos | explicit
    name: paper-fig9       # optional
    description: ...       # optional
    a: 4                   # kind-specific keys (see KIND_KEYS)
    p: 2
    h: 2
    addressing:            # optional defaults for the tools
      mode: compact        # flat | per-switch | per-group | compact
      widths: {group: 18, switch: 20, host: 8}

Every problem with the input raises :class:`~hpcfabric.errors.ConfigError`
(or its subclass :class:`~hpcfabric.errors.TopologyError` for impossible
fabrics) with ``source`` = the file and ``field`` = the key path, e.g.
``dims[1]``, ``switches[2].dpid`` or ``addressing.widths.host``. Nothing the
user writes produces a traceback.

The loaded fabric carries ``params["source"]`` (the file), ``params["addressing"]``
(the validated ``addressing`` mapping, ``{}`` when absent) and
``params["description"]`` when given.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from math import prod
from pathlib import Path
from typing import Any, Callable

import yaml

from hpcfabric.errors import ConfigError, TopologyError, read_user_file
from hpcfabric.topology.explicit import HOST_KEYS, LINK_KEYS, SWITCH_KEYS, explicit_fabric
from hpcfabric.topology.generators import dragonfly_fabric, fat_tree_fabric, flattened_butterfly_fabric
from hpcfabric.topology.model import Fabric

#: Valid values of ``kind``.
KINDS = ("dragonfly", "flattened_butterfly", "fat_tree", "folded_clos", "explicit")

#: Keys every kind accepts.
COMMON_KEYS = ("kind", "name", "description", "addressing")

#: Kind-specific keys: (required, optional).
KIND_KEYS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "dragonfly": (("a", "p", "h"), ("g", "arrangement")),
    "flattened_butterfly": (("dims", "hosts_per_switch"), ()),
    "fat_tree": (("k",), ()),
    "folded_clos": (("radix",), ("stages", "hosts", "pods")),
    "explicit": (("switches", "hosts", "links"), ()),
}

#: ``addressing.mode`` values.
ADDRESSING_MODES = ("flat", "per-switch", "per-group", "compact")
ADDRESSING_KEYS = ("mode", "widths")
#: ``addressing.widths`` keys: hierarchy levels, and Flattened Butterfly coordinates.
WIDTH_KEYS = ("group", "switch", "host") + tuple(f"dim{i}" for i in range(8))
#: Usable MAC bits (48 minus the multicast and locally-administered bits).
ADDRESS_BITS = 46

#: Largest fabric the loader builds (switches + hosts + links), a guard against
#: typos such as ``a: 160`` that would otherwise run out of memory. The
#: paper's ~300,000-host networks have under 800,000 elements.
MAX_FABRIC_ELEMENTS = 2_000_000


# ---------------------------------------------------------------------------
# YAML parsing
# ---------------------------------------------------------------------------
class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys in a mapping (PyYAML keeps the last silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:  # type: ignore[override]
        seen: dict[Any, yaml.Mark] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=False)
            try:
                duplicate = key in seen
            except TypeError:  # unhashable key: construct_mapping reports it
                continue
            if duplicate:
                first = seen[key]
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"duplicate key {key!r} (first at line {first.line + 1}, column {first.column + 1})",
                    key_node.start_mark,
                )
            seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


def _parse_yaml(text: str, source: str) -> Any:
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        problem = err.problem or err.context or "invalid YAML"
        if "\t" in problem or "'\\t'" in problem:
            problem += " (indent with spaces; YAML does not allow tabs)"
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        context = ""
        if err.context and err.problem and err.context_mark is not None:
            context = f" ({err.context} started at line {err.context_mark.line + 1}, column {err.context_mark.column + 1})"
        raise ConfigError(f"YAML syntax error{where}: {problem}{context}", source=source) from None
    except yaml.YAMLError as err:  # ReaderError (e.g. control characters) and friends
        raise ConfigError(f"YAML error: {err}", source=source) from None


# ---------------------------------------------------------------------------
# type checks
# ---------------------------------------------------------------------------
def _describe(value: Any) -> str:
    """How a value reads in an error message: its YAML type and, if short, the value."""
    if value is None:
        return "null (empty value)"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, int):
        return f"integer {value}"
    if isinstance(value, float):
        return f"float {value!r}"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:37] + "..."
        return f"string {shown!r}"
    if isinstance(value, list):
        return f"a list of {len(value)} item(s)"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


class _Checker:
    """Type checks that raise ConfigError with this file's name and the key path."""

    def __init__(self, source: str):
        self.source = source

    def fail(self, message: str, field: str | None = None, cls: type[ConfigError] = ConfigError) -> ConfigError:
        return cls(message, source=self.source, field=field)

    def integer(self, value: Any, field: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            hint = ""
            if isinstance(value, str) and value.strip().lstrip("+-").isdigit():
                hint = " (remove the quotes)"
            elif isinstance(value, float) and value.is_integer():
                hint = " (write it without a decimal point)"
            elif isinstance(value, bool):
                hint = " (booleans are not numbers)"
            raise self.fail(f"expected an integer, got {_describe(value)}{hint}", field)
        return value

    def string(self, value: Any, field: str) -> str:
        if not isinstance(value, str):
            hint = f" (quote it: '{value}')" if isinstance(value, (int, float)) and not isinstance(value, bool) else ""
            raise self.fail(f"expected a string, got {_describe(value)}{hint}", field)
        return value

    def sequence(self, value: Any, field: str, of: str) -> list[Any]:
        if not isinstance(value, list):
            raise self.fail(f"expected a list of {of}, got {_describe(value)}", field)
        return value

    def mapping(self, value: Any, field: str | None, what: str = "a mapping") -> dict[Any, Any]:
        if not isinstance(value, dict):
            raise self.fail(f"expected {what}, got {_describe(value)}", field)
        return value

    def keys(
        self,
        data: dict[Any, Any],
        allowed: tuple[str, ...],
        prefix: str,
        elsewhere: Callable[[str], str] | None = None,
    ) -> None:
        """Reject keys not in ``allowed``, suggesting the closest valid one."""
        for key in data:
            field = f"{prefix}{key}"
            if not isinstance(key, str):
                raise self.fail(f"keys must be strings, got {_describe(key)}", field)
            if key in allowed:
                continue
            note = elsewhere(key) if elsewhere else ""
            close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
            if note:
                message = f"unknown key {key!r}{note}"
            elif close:
                message = f"unknown key {key!r}; did you mean {close[0]!r}?"
            else:
                message = f"unknown key {key!r}; valid keys: {', '.join(allowed)}"
            raise self.fail(message, field)

    def required(self, data: dict[Any, Any], required: tuple[str, ...], prefix: str, what: str) -> None:
        for key in required:
            if key not in data:
                raise self.fail(f"missing required key {key!r} {what} (required: {', '.join(required)})", f"{prefix}{key}")

    def choice(self, value: str, choices: tuple[str, ...], field: str, what: str) -> str:
        if value not in choices:
            close = difflib.get_close_matches(value, choices, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise self.fail(f"unknown {what} {value!r}; expected one of {', '.join(choices)}{hint}", field)
        return value


# ---------------------------------------------------------------------------
# per-section validation
# ---------------------------------------------------------------------------
def _addressing(ck: _Checker, value: Any, kind: str, n_dims: int | None) -> dict[str, Any]:
    data = ck.mapping(value, "addressing", "a mapping with keys mode and/or widths")
    ck.keys(data, ADDRESSING_KEYS, "addressing.")
    result: dict[str, Any] = {}
    if "mode" in data:
        mode = ck.string(data["mode"], "addressing.mode")
        result["mode"] = ck.choice(mode, ADDRESSING_MODES, "addressing.mode", "addressing mode")
    if "widths" in data:
        widths = ck.mapping(data["widths"], "addressing.widths", f"a mapping of field widths ({', '.join(WIDTH_KEYS[:4])}...)")
        ck.keys(widths, WIDTH_KEYS, "addressing.widths.")
        clean: dict[str, int] = {}
        for key, width in widths.items():
            field = f"addressing.widths.{key}"
            width = ck.integer(width, field)
            if not 1 <= width <= ADDRESS_BITS:
                raise ck.fail(f"must be in 1..{ADDRESS_BITS} bits, got {width}", field)
            if key.startswith("dim"):
                d = int(key[3:])
                if kind != "flattened_butterfly":
                    raise ck.fail(f"dimension widths apply only to kind flattened_butterfly, not {kind}", field)
                if n_dims is not None and d >= n_dims:
                    raise ck.fail(f"the fabric has {n_dims} dimensions (dim0..dim{n_dims - 1})", field)
            clean[key] = width
        levels = sum(clean.get(k, 0) for k in ("group", "switch", "host"))
        if levels > ADDRESS_BITS:
            raise ck.fail(f"group + switch + host widths are {levels} bits; an address has {ADDRESS_BITS}", "addressing.widths")
        coords = sum(w for k, w in clean.items() if k.startswith("dim")) + clean.get("host", 0)
        if coords > ADDRESS_BITS:
            raise ck.fail(f"dim* + host widths are {coords} bits; an address has {ADDRESS_BITS}", "addressing.widths")
        result["widths"] = clean
    return result


def _explicit_items(ck: _Checker, data: dict[str, Any]) -> tuple[list[dict], list[dict], list[dict]]:
    """Check structure and types of the explicit lists (semantics: :func:`explicit_fabric`)."""
    specs = (
        ("switches", SWITCH_KEYS, ("name",), {"name": "s", "role": "s"}),
        ("hosts", HOST_KEYS, HOST_KEYS, {"name": "s", "switch": "s"}),
        ("links", LINK_KEYS, LINK_KEYS, {"a": "s", "b": "s"}),
    )
    out = []
    for section, keys, required, strings in specs:
        items = ck.sequence(data[section], section, "mappings")
        for i, item in enumerate(items):
            where = f"{section}[{i}]"
            ck.mapping(item, where, f"a mapping with keys {', '.join(keys)}")
            ck.keys(item, keys, f"{where}.")
            ck.required(item, required, f"{where}.", f"for a {section[:-2] if section == 'switches' else section[:-1]}")
            for key, value in item.items():
                if strings.get(key) == "s":
                    ck.string(value, f"{where}.{key}")
                else:
                    ck.integer(value, f"{where}.{key}")
        out.append(items)
    return out[0], out[1], out[2]


def _size_guard(ck: _Checker, kind: str, data: dict[str, Any]) -> None:
    """Refuse, before building, fabrics far beyond anything useful (see MAX_FABRIC_ELEMENTS)."""
    # Out-of-range parameters are left to the generators, which name them.
    if kind == "dragonfly":
        a, p, h = data["a"], data["p"], data["h"]
        g = data.get("g", a * h + 1)
        if a < 1 or p < 1 or h < 0 or not 1 <= g <= a * h + 1:
            return
        switches, hosts, links = a * g, a * g * p, g * a * (a - 1) // 2 + g * a * h // 2
        label = f"dragonfly a={a}, p={p}, h={h}, g={g}"
    elif kind == "flattened_butterfly":
        dims = data["dims"]
        if not dims or len(dims) > 8 or min(dims) < 2 or data["hosts_per_switch"] < 1:
            return
        switches = prod(dims)
        hosts = switches * data["hosts_per_switch"]
        links = switches * sum(k - 1 for k in dims) // 2
        label = f"flattened butterfly {'x'.join(map(str, dims))} with {data['hosts_per_switch']} hosts per switch"
    elif kind == "fat_tree":
        k = data["k"]
        if k < 2 or k % 2:
            return
        switches, hosts, links = 5 * k * k // 4, k**3 // 4, k**3 // 2
        label = f"fat-tree k={k}"
    elif kind == "folded_clos":
        from hpcfabric.topology.clos import folded_clos_shape

        try:
            shape = folded_clos_shape(
                data["radix"], data.get("stages", 3), hosts=data.get("hosts"), pods=data.get("pods")
            )
        except TopologyError:
            return  # the generator reports it
        switches, hosts, links = shape.switches, shape.hosts, shape.links
        label = f"folded Clos radix={shape.radix}, {shape.stages} stages, {shape.pods} pods"
    else:
        return
    total = switches + hosts + links
    if total > MAX_FABRIC_ELEMENTS:
        raise ck.fail(
            f"{label} would have {switches:,} switches, {hosts:,} hosts and {links:,} links"
            f" ({total:,} elements; the loader's limit is {MAX_FABRIC_ELEMENTS:,})",
            None,
            TopologyError,
        )


def _belongs_elsewhere(kind: str) -> Callable[[str], str]:
    def note(key: str) -> str:
        owners = [k for k, (req, opt) in KIND_KEYS.items() if k != kind and key in req + opt]
        if not owners:
            return ""
        allowed = COMMON_KEYS + KIND_KEYS[kind][0] + KIND_KEYS[kind][1]
        return f": it belongs to kind {owners[0]}, not {kind} (valid keys: {', '.join(allowed)})"

    return note


# ---------------------------------------------------------------------------
# public API
# ---------------------------------------------------------------------------
def parse_topology(text: str, source: str) -> Fabric:
    """Build a :class:`Fabric` from YAML ``text``; ``source`` names it in errors.

    Raises
    ------
    ConfigError
        Malformed YAML, unknown or missing keys, wrong types (``field`` is the
        key path, ``source`` the file).
    TopologyError
        Impossible parameters or an inconsistent explicit fabric.
    """
    ck = _Checker(source)
    data = _parse_yaml(text, source)
    if data is None:
        raise ck.fail("the file is empty; expected a mapping with at least a 'kind' key")
    ck.mapping(data, None, "a mapping at the top level (kind: ..., ...)")
    for key in data:
        if not isinstance(key, str):
            raise ck.fail(f"keys must be strings, got {_describe(key)}", str(key))
    if "kind" not in data:
        typo = difflib.get_close_matches("kind", [k for k in data if k not in COMMON_KEYS], n=1, cutoff=0.5)
        hint = f" (is {typo[0]!r} a misspelling of 'kind'?)" if typo else ""
        raise ck.fail(f"missing required key 'kind'{hint}; expected one of {', '.join(KINDS)}", "kind")
    kind = ck.choice(ck.string(data["kind"], "kind"), KINDS, "kind", "kind")

    required, optional = KIND_KEYS[kind]
    ck.keys(data, COMMON_KEYS + required + optional, "", _belongs_elsewhere(kind))
    ck.required(data, required, "", f"for kind {kind}")
    name = ck.string(data["name"], "name") if "name" in data else None
    if name is not None and not name.strip():
        raise ck.fail("must not be empty", "name")
    description = ck.string(data["description"], "description") if "description" in data else None

    n_dims = None
    if kind == "dragonfly":
        for key in ("a", "p", "h", "g"):
            if key in data:
                ck.integer(data[key], key)
        if "arrangement" in data:
            ck.string(data["arrangement"], "arrangement")
    elif kind == "flattened_butterfly":
        dims = ck.sequence(data["dims"], "dims", "integers (switches per dimension, e.g. [4, 4])")
        for i, k in enumerate(dims):
            ck.integer(k, f"dims[{i}]")
        ck.integer(data["hosts_per_switch"], "hosts_per_switch")
        n_dims = len(dims)
    elif kind == "fat_tree":
        ck.integer(data["k"], "k")
    elif kind == "folded_clos":
        for key in ("radix", "stages", "hosts", "pods"):
            if key in data:
                ck.integer(data[key], key)
    else:
        switches, hosts, links = _explicit_items(ck, data)
    addressing = _addressing(ck, data["addressing"], kind, n_dims) if "addressing" in data else {}

    try:
        _size_guard(ck, kind, data)
        if kind == "dragonfly":
            fabric = dragonfly_fabric(
                data["a"], data["p"], data["h"], data.get("g"), arrangement=data.get("arrangement", "auto"), name=name
            )
        elif kind == "flattened_butterfly":
            fabric = flattened_butterfly_fabric(data["dims"], data["hosts_per_switch"], name=name)
        elif kind == "fat_tree":
            fabric = fat_tree_fabric(data["k"], name=name)
        elif kind == "folded_clos":
            from hpcfabric.topology.clos import folded_clos_fabric

            fabric = folded_clos_fabric(
                data["radix"], data.get("stages", 3), hosts=data.get("hosts"), pods=data.get("pods"), name=name
            )
        else:
            fabric = explicit_fabric(switches, hosts, links, name=name)
        extra: dict[str, Any] = {"source": source, "addressing": addressing}
        if description is not None:
            extra["description"] = description
        return dataclasses.replace(fabric, params={**fabric.params, **extra})
    except TopologyError as err:
        if err.source is not None:
            raise
        raise TopologyError(err.detail, source=source, field=err.field) from None


def load_topology(path: str | os.PathLike[str]) -> Fabric:
    """Read and validate the YAML topology file at ``path`` (see :func:`parse_topology`).

    Examples
    --------
    >>> f = load_topology("topologies/dragonfly-a4-p2-h2.yaml")  # doctest: +SKIP
    >>> len(f.switches), len(f.hosts), f.params["source"]  # doctest: +SKIP
    (36, 72, 'topologies/dragonfly-a4-p2-h2.yaml')
    """
    source = os.fspath(path)
    text = read_user_file(source, "a YAML topology file", lambda: f"no such file{_suggest_file(Path(source))}")
    return parse_topology(text, source)


def _suggest_file(file: Path) -> str:
    """'; did you mean X?' for the closest YAML file next to a missing one."""
    try:
        parent = file.parent if str(file.parent) else Path(".")
        names = sorted(p.name for p in parent.iterdir() if p.suffix in (".yaml", ".yml"))
    except OSError:
        return ""
    wanted = file.name if file.suffix else file.name + ".yaml"
    close = difflib.get_close_matches(wanted, names, n=1, cutoff=0.6)
    return f"; did you mean {str(parent / close[0])!r}?" if close else ""
