"""What is out of service in a fabric: failed links and switches (:class:`Failures`), a frozen value.

A link fails as a whole (both ends), whichever end reported it; a failed switch takes all its links
and its hosts with it. The compiler routes the *surviving fabric* -- the same switches, ports and
addresses with these links and switches taken out (:func:`hpcfabric.rules.compiler.compile_fabric`
``failures=``) -- so a repair after a failure is a compile, not a second router.

:func:`parse_failures` reads the ``SWITCH:PORT`` / ``SWITCH`` strings of ``hpcfabric prove --fail``
(a link by either end) with errors that name what is wrong.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from hpcfabric.errors import TopologyError
from hpcfabric.topology.model import Fabric

__all__ = ["Failures", "NO_FAILURES", "parse_failures"]


@dataclass(frozen=True)
class Failures:
    """Failed links (each as ``(a, a_port, b, b_port)`` with ``a < b``) and failed switches."""

    links: frozenset[tuple[str, int, str, int]] = frozenset()
    switches: frozenset[str] = frozenset()

    @staticmethod
    def of(fabric: Fabric, ports: Iterable[tuple[str, int]] = (), switches: Iterable[str] = ()) -> "Failures":
        """The failures of ``fabric`` given down ports (a link by either end) and dead switches.
        Ports that are not fabric ports (host ports, unused numbers) are ignored."""
        links = set()
        for sw, port in ports:
            peer = fabric.peer(sw, port) if fabric.has_switch(sw) else None
            if peer is not None and not peer.is_host:
                links.add(link_key(sw, port, peer.node, int(peer.port)))  # type: ignore[arg-type]
        dead = frozenset(s for s in switches if fabric.has_switch(s))
        return Failures(frozenset(links), dead)

    def __bool__(self) -> bool:
        return bool(self.links or self.switches)

    def dead_ports(self, fabric: Fabric) -> dict[str, frozenset[int]]:
        """switch -> its fabric ports whose link is out (live switches only; failed switches are out whole)."""
        out: dict[str, set[int]] = {}
        for a, pa, b, pb in self.links:
            out.setdefault(a, set()).add(pa)
            out.setdefault(b, set()).add(pb)
        for s in self.switches:
            for p, peer in fabric.fabric_ports(s).items():
                out.setdefault(peer.node, set()).add(int(peer.port))  # type: ignore[arg-type]
        return {s: frozenset(p) for s, p in out.items() if s not in self.switches}

    def touched(self, fabric: Fabric) -> frozenset[str]:
        """Live switches with at least one port whose link is out."""
        return frozenset(self.dead_ports(fabric))

    def union(self, other: "Failures") -> "Failures":
        return Failures(self.links | other.links, self.switches | other.switches)

    def describe(self) -> list[str]:
        """Sorted human-readable items: ``a:pa-b:pb`` per link, the switch name per switch."""
        return sorted(f"{a}:{pa}-{b}:{pb}" for a, pa, b, pb in self.links) + sorted(self.switches)

    def as_dict(self) -> dict[str, list[str]]:
        return {"links": sorted(f"{a}:{pa}-{b}:{pb}" for a, pa, b, pb in self.links),
                "switches": sorted(self.switches)}


NO_FAILURES = Failures()


def link_key(a: str, pa: int, b: str, pb: int) -> tuple[str, int, str, int]:
    """A link's key whichever end names it: the end with the smaller (switch, port) first."""
    return (a, pa, b, pb) if (a, pa) <= (b, pb) else (b, pb, a, pa)


def parse_failures(fabric: Fabric, items: Iterable[str], source: str = "--fail") -> Failures:
    """``SWITCH:PORT`` (the link behind that fabric port, named by either end) or ``SWITCH`` (the switch
    and all its links) per item. Raises :class:`TopologyError` naming the item and what is expected."""
    ports: list[tuple[str, int]] = []
    switches: list[str] = []
    for item in items:
        text = item.strip()
        name, sep, port_text = text.rpartition(":")
        if not sep:
            name, port_text = text, ""
        if not fabric.has_switch(name):
            raise TopologyError(f"{text!r}: no switch {name!r} in {fabric.name}; expected SWITCH or SWITCH:PORT "
                                f"(e.g. {fabric.switches[0].name}:{min(fabric.fabric_ports(fabric.switches[0].name), default=1)})",
                                source=source)
        if not sep:
            switches.append(name)
            continue
        try:
            port = int(port_text)
        except ValueError:
            raise TopologyError(f"{text!r}: port {port_text!r} is not a number; expected SWITCH:PORT",
                                source=source) from None
        peer = fabric.peer(name, port)
        if peer is None or peer.is_host:
            fabric_ports = sorted(fabric.fabric_ports(name))
            what = "a host port" if peer is not None else "not in use"
            raise TopologyError(f"{text!r}: port {port} of {name} is {what}; expected a fabric port of {name} "
                                f"({_ranges(fabric_ports)})", source=source)
        ports.append((name, port))
    return Failures.of(fabric, ports, switches)


def _ranges(ports: list[int]) -> str:
    """``3-7, 9`` for ``[3, 4, 5, 6, 7, 9]``."""
    out: list[tuple[int, int]] = []
    for p in ports:
        if out and out[-1][1] == p - 1:
            out[-1] = (out[-1][0], p)
        else:
            out.append((p, p))
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in out)
