"""Addresses nobody owns: the verifier's invalid probes.

For each address field, a real address with that field set to a value no host uses under the
same higher fields (smallest and largest such value, from two base addresses), a bit just
above the used address bits, and the multicast and globally-administered flag bits. Every
probe must be dropped, never delivered, looped, punted or flooded
(:func:`hpcfabric.verify.oracle.allpairs.verify`, :func:`hpcfabric.verify.updown.check_up_down`).
"""

from __future__ import annotations

from typing import Any

from hpcfabric.rules.addressing import MAC_BITS, USABLE_BITS, from_mac, to_mac

__all__ = ["probe_addresses"]


def probe_addresses(plan: Any) -> list[tuple[int, str]]:
    """Addresses nobody owns, as (MAC, why): see the module docstring."""
    layout = plan.layout
    hosts = [h.name for h in plan.fabric.hosts]
    if not hosts:
        return []
    bases = list(dict.fromkeys([hosts[0], hosts[-1]]))
    fields = plan.host_fields
    owned = plan.host_mac
    out: dict[int, str] = {}
    names = layout.names
    for i, f in enumerate(layout.fields):
        used: dict[tuple[int, ...], set[int]] = {}
        for h in hosts:
            used.setdefault(tuple(fields[h][n] for n in names[:i]), set()).add(fields[h][f.name])
        top = (1 << f.width) - 1
        for base in bases:
            pre = tuple(fields[base][n] for n in names[:i])
            taken = used.get(pre, set())
            free = [v for v in (_first_free(taken, 0, 1, top), _first_free(taken, top, -1, top)) if v is not None]
            for v in dict.fromkeys(free):
                mac = layout.encode({**fields[base], f.name: v})
                where = ", ".join(f"{n}={x}" for n, x in zip(names[:i], pre)) or "any"
                out.setdefault(mac, f"{f.name}={v} (unused under {where})")
    base_mac = owned[hosts[0]]
    used_bits = layout.used_bits
    if used_bits < USABLE_BITS:
        out.setdefault(to_mac(from_mac(base_mac) | (1 << used_bits)), f"bit {used_bits} set above the {used_bits} address bits")
    out.setdefault(base_mac | (1 << (MAC_BITS - 8)), "multicast (I/G) bit set")
    out.setdefault(base_mac & ~(1 << (MAC_BITS - 7)), "globally administered (U/L bit clear)")
    by_mac = set(owned.values())
    return [(mac, why) for mac, why in out.items() if mac not in by_mac]


def _first_free(taken: set[int], start: int, step: int, top: int) -> int | None:
    v = start
    while 0 <= v <= top:
        if v not in taken:
            return v
        v += step
    return None

