"""Parameter helpers shared by the fabric generators (and the address planner)."""

from __future__ import annotations

from hpcfabric.errors import TopologyError


def need_int(name: str, value: object, minimum: int) -> int:
    """``value`` as an integer >= ``minimum``, else a TopologyError naming the field ``name``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TopologyError(f"must be an integer, got {value!r}", field=name)
    if value < minimum:
        raise TopologyError(f"must be >= {minimum}, got {value}", field=name)
    return value


def bits_for(count: int) -> int:
    """Bits needed to number ``count`` items (at least 1)."""
    return max(1, (count - 1).bit_length())
