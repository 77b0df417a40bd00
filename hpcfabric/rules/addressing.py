"""Hierarchical MAC addressing (paper Sec. III-A, Fig. 2 and Fig. 5).

A MAC address has 48 bits: the two low bits of the first octet are the
multicast (I/G) and locally-administered (U/L) flags, fixed here to
"locally administered unicast" (first octet ``0x02`` when the upper bits are
zero); the other 46 bits carry the address fields, host ID in the lowest bits:

=============  ===============================================  ===============
mode           fields (most significant first)                  default widths
=============  ===============================================  ===============
flat           host                                             46
per-switch     switch | host                                    38 | 8
per-group      group | switch | host                            18 | 20 | 8
compact        group | switch | host (FB: dimN-1 | … | dim0 |   just enough
               host)                                            bits each
=============  ===============================================  ===============

Bits above the used fields are zero and every rule matches them (a frame
with stray high bits matches nothing and is dropped). Values: ``host`` is the
host's rank on its switch (flat: its rank in the fabric), ``switch`` the
switch's index in its group (per-switch: its rank among access switches),
``group`` the Dragonfly group / FB row / fat-tree pod, ``dimD`` the FB
coordinate of dimension D.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from hpcfabric.errors import AddressingError
from hpcfabric.topology.model import Fabric, Switch, gc_paused
from hpcfabric.topology.params import bits_for

MODES = ("flat", "per-switch", "per-group", "compact")
USABLE_BITS = 46
MAC_BITS = 48
_LOW40 = (1 << 40) - 1
#: The two flag bits (bit 40 = I/G multicast, bit 41 = U/L local) and their value.
FLAG_MASK = 0b11 << 40
FLAG_VALUE = 0b10 << 40

PAPER_WIDTHS: dict[str, dict[str, int]] = {
    "flat": {"host": 46},
    "per-switch": {"switch": 38, "host": 8},
    "per-group": {"group": 18, "switch": 20, "host": 8},
}


def to_mac(value46: int) -> int:
    """Place 46 usable bits into a 48-bit locally administered unicast MAC."""
    return ((value46 >> 40) << 42) | FLAG_VALUE | (value46 & _LOW40)


def mask_to_mac(mask46: int) -> int:
    """Turn a mask over the 46 usable bits into a MAC mask that also pins the flag bits."""
    return ((mask46 >> 40) << 42) | FLAG_MASK | (mask46 & _LOW40)


def from_mac(mac: int) -> int:
    """Inverse of :func:`to_mac`; raises AddressingError for multicast/global MACs."""
    if mac & FLAG_MASK != FLAG_VALUE:
        raise AddressingError(f"{format_mac(mac)} is not a locally administered unicast address")
    return ((mac >> 42) << 40) | (mac & _LOW40)


def format_mac(mac: int) -> str:
    """``0x020000010001`` -> ``'02:00:00:01:00:01'``."""
    return ":".join(f"{(mac >> s) & 0xFF:02x}" for s in range(40, -1, -8))


def parse_mac(text: str) -> int:
    """``'02:00:00:01:00:01'`` (or with ``-``) -> int; AddressingError if malformed."""
    parts = text.replace("-", ":").split(":")
    if len(parts) != 6 or not all(len(p) == 2 for p in parts):
        raise AddressingError(f"malformed MAC address {text!r}; expected six hex octets like 02:00:00:01:00:01")
    try:
        return int("".join(parts), 16)
    except ValueError:
        raise AddressingError(f"malformed MAC address {text!r}; expected hex octets") from None


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    width: int
    shift: int

    @property
    def mask46(self) -> int:
        return ((1 << self.width) - 1) << self.shift


@dataclass(frozen=True)
class Layout:
    """Ordered address fields (most significant first) and their widths."""

    fields: tuple[Field, ...]

    @classmethod
    def build(cls, names_widths: list[tuple[str, int]]) -> "Layout":
        total = sum(w for _, w in names_widths)
        if total > USABLE_BITS:
            desc = " | ".join(f"{n}({w})" for n, w in names_widths)
            raise AddressingError(f"fields {desc} need {total} bits but a MAC has {USABLE_BITS} usable bits")
        fields = []
        shift = total
        for name, width in names_widths:
            if not 1 <= width <= USABLE_BITS:
                raise AddressingError(f"width of field {name!r} must be 1..{USABLE_BITS}, got {width}")
            shift -= width
            fields.append(Field(name, width, shift))
        return cls(tuple(fields))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    @property
    def used_bits(self) -> int:
        return sum(f.width for f in self.fields)

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)

    def encode(self, values: Mapping[str, int]) -> int:
        """Field values -> MAC (int). Every field must be given and fit its width."""
        v = 0
        for f in self.fields:
            x = values[f.name]
            if not 0 <= x < (1 << f.width):
                raise AddressingError(f"value {x} does not fit field {f.name!r} of {f.width} bits")
            v |= x << f.shift
        return to_mac(v)

    def decode(self, mac: int) -> dict[str, int]:
        """MAC -> field values; AddressingError if bits above the fields are set."""
        v = from_mac(mac)
        if v >> self.used_bits:
            raise AddressingError(f"{format_mac(mac)} has bits set above the {self.used_bits} address bits")
        return {f.name: (v >> f.shift) & ((1 << f.width) - 1) for f in self.fields}

    def match(self, values: Mapping[str, int]) -> tuple[int, int]:
        """(value, mask) on eth_dst matching the given fields exactly, others wildcarded.

        The flag bits and the unused high bits are always part of the mask.
        """
        mask46 = ((1 << USABLE_BITS) - 1) & ~((1 << self.used_bits) - 1)
        v = 0
        for f in self.fields:
            if f.name in values:
                mask46 |= f.mask46
                v |= values[f.name] << f.shift
        return to_mac(v), mask_to_mac(mask46)

    def prefix_match(self, bits: int, length: int) -> tuple[int, int]:
        """(value, mask) for a prefix of ``length`` bits over the used fields."""
        low = self.used_bits - length
        mask46 = ((1 << USABLE_BITS) - 1) & ~((1 << low) - 1)
        return to_mac(bits << low), mask_to_mac(mask46)

    def describe(self) -> str:
        return " | ".join(f"{f.name}({f.width})" for f in self.fields)


def _field_values(fabric: Fabric, mode: str) -> tuple[list[str], dict[str, dict[str, int]]]:
    """Field names and per-host field values for ``mode``."""
    access = [sw for sw in fabric.switches if fabric.hosts_on(sw.name)]
    values: dict[str, dict[str, int]] = {}
    if mode == "flat":
        for i, host in enumerate(fabric.hosts):
            values[host.name] = {"host": i}
        return ["host"], values
    if mode == "per-switch":
        rank = {sw.name: i for i, sw in enumerate(access)}
        for host in fabric.hosts:
            values[host.name] = {"switch": rank[host.switch], "host": host.index}
        return ["switch", "host"], values
    if mode == "compact" and fabric.kind == "flattened_butterfly":
        n = len(fabric.params["dims"])
        names = [f"dim{d}" for d in range(n - 1, -1, -1)] + ["host"]
        for host in fabric.hosts:
            sw = fabric.switch(host.switch)
            values[host.name] = {**{f"dim{d}": sw.coords[d] for d in range(n)}, "host": host.index}
        return names, values
    for host in fabric.hosts:
        sw = fabric.switch(host.switch)
        values[host.name] = {"group": sw.group, "switch": sw.index, "host": host.index}
    return ["group", "switch", "host"], values


def _field_counts(fabric: Fabric, names: list[str], values: dict[str, dict[str, int]]) -> dict[str, int]:
    """Number of values each field must hold (max value + 1)."""
    counts = {n: 1 for n in names}
    for v in values.values():
        for n in names:
            counts[n] = max(counts[n], v[n] + 1)
    if fabric.kind == "flattened_butterfly" and "dim0" in names:
        for d, k in enumerate(fabric.params["dims"]):
            counts[f"dim{d}"] = max(counts[f"dim{d}"], k)
    return counts


@dataclass(frozen=True, eq=False)
class AddressPlan:
    """Every host's hierarchical MAC for one fabric and addressing mode."""

    fabric: Fabric
    mode: str
    layout: Layout
    host_mac: Mapping[str, int]
    host_fields: Mapping[str, Mapping[str, int]]

    def __post_init__(self) -> None:
        object.__setattr__(self, "_host_by_mac", {mac: name for name, mac in self.host_mac.items()})
        per_switch = {}
        for sw in self.fabric.access_switches:
            first = self.fabric.hosts_on(sw.name)[0].name
            per_switch[sw.name] = {k: v for k, v in self.host_fields[first].items() if k != "host"}
        object.__setattr__(self, "_switch_fields", per_switch)

    def host_by_mac(self, mac: int) -> str | None:
        return self._host_by_mac.get(mac)  # type: ignore[attr-defined]

    def switch_fields(self, switch: Switch) -> dict[str, int]:
        """Field values shared by all hosts of an access switch (all but ``host``)."""
        return self._switch_fields[switch.name]  # type: ignore[attr-defined]

    def rows(self) -> list[dict[str, object]]:
        """One row per host: name, switch, port, mac and address field values (for ``hpcfabric plan``)."""
        return [
            {
                "host": h.name,
                "switch": h.switch,
                "port": h.port,
                "mac": format_mac(self.host_mac[h.name]),
                "fields": dict(self.host_fields[h.name]),
            }
            for h in self.fabric.hosts
        ]


@gc_paused()
def plan_addresses(fabric: Fabric, mode: str = "per-group", widths: Mapping[str, int] | None = None) -> AddressPlan:
    """Assign every host its hierarchical MAC.

    Parameters
    ----------
    fabric : Fabric
    mode : {'flat', 'per-switch', 'per-group', 'compact'}
    widths : mapping, optional
        Field widths overriding the defaults (the paper's Fig. 2 widths for
        flat/per-switch/per-group; just enough bits per field for compact).

    Raises
    ------
    AddressingError
        Unknown mode or field, or a fabric too large for the widths (the
        message says which field and how many bits it needs).
    """
    if mode not in MODES:
        raise AddressingError(f"unknown addressing mode {mode!r}; expected one of {', '.join(MODES)}", field="mode")
    names, values = _field_values(fabric, mode)
    counts = _field_counts(fabric, names, values)
    widths = dict(widths or {})
    unknown = sorted(set(widths) - set(names))
    if unknown:
        raise AddressingError(
            f"field(s) {', '.join(unknown)} do not exist in {mode} addressing of a {fabric.kind} "
            f"(fields: {', '.join(names)})",
            field="addressing.widths",
        )
    defaults = PAPER_WIDTHS.get(mode, {}) if mode != "compact" else {}
    chosen: list[tuple[str, int]] = []
    for n in names:
        w = widths.get(n, defaults.get(n, bits_for(counts[n])))
        if isinstance(w, bool) or not isinstance(w, int):
            raise AddressingError(f"width of {n!r} must be an integer", field=f"addressing.widths.{n}")
        if counts[n] > (1 << w):
            raise AddressingError(
                f"{fabric.name} needs {counts[n]} values in field {n!r} ({bits_for(counts[n])} bits) "
                f"but {mode} addressing gives it {w} bits; widen addressing.widths.{n}",
                field=f"addressing.widths.{n}",
            )
        chosen.append((n, w))
    layout = Layout.build(chosen)
    host_mac = {name: layout.encode(v) for name, v in values.items()}
    return AddressPlan(fabric, mode, layout, host_mac, values)
