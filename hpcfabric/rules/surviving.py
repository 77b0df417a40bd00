"""Routing on the surviving fabric: what the routers of :mod:`hpcfabric.rules.routing` do around failed links
and switches (mixins: they read the router's ``fabric``, ``failures``, ``dead`` and :meth:`live`).

* :class:`DragonflyBypasses`: inside a group, a failed link is bypassed through the group's *hub* (the
  lowest-numbered switch whose local links are all up: every bypass runs into the hub and out of it, so
  bypasses cannot wait on each other in a circle); a group without a live global link to another group
  reaches it through an intermediate group (a relay) that has one -- over an own global port, else through a
  group member with one (two global hops, as a Valiant path); relays that miss no link themselves first, so
  relayed hops in the saturated class never chain. With ``redirect`` the Valiant and conditional
  detours that lead into such a group are sent elsewhere at the source
  (:func:`hpcfabric.rules.policies.valiant.redirected_detours`), so no path has a third global hop.
* Flattened Butterfly rows: :class:`hpcfabric.rules.rows.RowBypasses`.
"""

from __future__ import annotations

from typing import Any

from hpcfabric.topology.model import Switch

__all__ = ["DragonflyBypasses"]


class DragonflyBypasses:
    """Dragonfly routes on the surviving fabric (module docstring); the router gives ``live`` and ``local_port``."""

    fabric: Any
    failures: Any
    a: int
    at: dict[tuple[int, int], Switch]
    globals: dict[int, dict[int, list[tuple[int, int]]]]
    touched: frozenset[int]
    gports: dict[tuple[int, int], list[tuple[int, int]]]  # (group, index) -> its (global port, far group), by port
    _missing: dict[int, frozenset[int]]
    _memo: dict[tuple, Any]  # answers that depend on the failures only (one router, one failure set)

    def within(self, src: Switch, t: int) -> int | None:
        """The port from ``src`` towards switch ``t`` of its group: direct, else through the group's hub."""
        if src.index == t:
            return None
        port = self.local_port(src.index, t)
        if self.live(src.name, port):
            return port
        dst = self.at.get((src.group, t))
        if dst is None or dst.name in self.failures.switches:
            return None
        hub = self.hub(src, t)
        return None if hub is None else self.local_port(src.index, hub)

    def hub(self, src: Switch, t: int) -> int | None:
        """The switch (index) a bypass from ``src`` to ``t`` inside their group goes through: the lowest-numbered
        switch whose local links are all up (else the lowest with both links needed up); None if there is none."""
        key = ("hub", src.group, src.index, t)
        if key not in self._memo:
            self._memo[key] = self._hub(src, t)
        return self._memo[key]

    def _hub(self, src: Switch, t: int) -> int | None:
        clean, usable = None, None
        for c in range(self.a):
            if c in (src.index, t):
                continue
            sw = self.at.get((src.group, c))
            if sw is None or sw.name in self.failures.switches:
                continue
            if not (self.live(src.name, self.local_port(src.index, c)) and self.live(sw.name, self.local_port(c, t))):
                continue
            if usable is None:
                usable = c
            if all(self.live(sw.name, self.local_port(c, u)) for u in range(self.a) if u != c):
                clean = c
                break
        return clean if clean is not None else usable

    def repaired_to_group(self, src: Switch, group: int, links: list[tuple[int, int]]) -> int | None:
        """:meth:`to_group` on the surviving fabric: an own live global link, else the holder the compiled
        tables use (or another live one) reached inside the group, else an intermediate group (:meth:`bypass`)."""
        key = ("holders", src.group, group)  # the live links and the order of their holders: the group's, not src's
        got = self._memo.get(key)
        if got is None:
            live = [(s, port) for s, port in links if self.live(self.at[(src.group, s)].name, port)]
            order: list[tuple[int, int]] = []
            if live:
                compiled = links[group % len(links)]
                order = ([compiled] if compiled in live else []) + live[group % len(live):] + live[:group % len(live)]
            got = self._memo[key] = (live, order)
        live, order = got
        mine = [port for s, port in live if s == src.index]
        if mine:
            return mine[0]
        for holder, _ in order:
            port = self.within(src, holder)
            if port is not None:
                return port
        return self.bypass(src, group)

    def qualifying(self, sw: Switch, group: int, clean: bool = False) -> list[int]:
        """``sw``'s live global ports to groups (other than ``group``) with a live link to ``group``; ``clean``:
        only into groups that miss no link themselves (such a relay is never a bypass's source: what it relays
        goes on into ``group`` and no further, so relayed hops in the saturated class never chain into a
        circle)."""
        key = ("qualifying", sw.name, group, clean)
        got = self._memo.get(key)
        if got is None:
            got = self._memo[key] = [port for port, k in self.gports.get((sw.group, sw.index), ())
                                     if k != group and self.live(sw.name, port) and self.group_reaches(k, group)
                                     and not (clean and self.missing_from(k))]
        return got

    def bypass(self, src: Switch, group: int) -> int | None:
        """``src``'s route to ``group`` through an intermediate group with a live link to it: an own global port
        (chosen by the group number), else a local port towards a group member with one; None: no way out.
        Relays that miss no link themselves first (:meth:`qualifying`), wherever they are in the group."""
        members = [self.at[(src.group, c)] for c in range(self.a) if c != src.index and (src.group, c) in self.at]
        if members:
            members = members[group % len(members):] + members[:group % len(members)]
        for clean in (True, False):
            own = self.qualifying(src, group, clean)
            if own:
                return own[group % len(own)]
            for sw in members:
                if sw.name not in self.failures.switches and self.qualifying(sw, group, clean):
                    port = self.within(src, sw.index)
                    if port is not None:
                        return port
        return None

    def bypass_overrides(self, src: Switch) -> list[tuple[int, int, int]]:
        """``(group, in_port, out_port)`` where ``src`` reaches ``group`` through an intermediate group over an
        own global port: a frame for ``group`` that *arrived* on that port leaves by ``out_port`` instead (another
        own port into a group with a live link, else a local port to a member with one). No frame should
        arrive there (detours are redirected at the source), but a switch never sends a frame back out of its
        ingress port: these keep every arrival state delivering, whatever the walk that reaches it."""
        out: list[tuple[int, int, int]] = []
        if not self.failures:
            return out
        for g in sorted(self.missing_from(src.group)):
            port = self.bypass(src, g)
            peer = self.fabric.peer(src.name, port) if port is not None else None
            if peer is None or peer.kind != "global":
                continue
            alt = None
            for clean in (True, False):
                others = [p for p in self.qualifying(src, g, clean) if p != port]
                alt = others[g % len(others)] if others else None
                for c in range(self.a) if alt is None else ():
                    sw = self.at.get((src.group, c))
                    if sw is not None and c != src.index and sw.name not in self.failures.switches \
                            and self.qualifying(sw, g, clean):
                        alt = self.within(src, c)
                        if alt is not None:
                            break
                if alt is not None:
                    break
            if alt is not None:
                out.append((g, port, alt))
        return out

    def missing_from(self, k: int) -> frozenset[int]:
        """Groups that group ``k`` has no live global link to (only groups touched by failures have any)."""
        if k not in self.touched:
            return frozenset()
        got = self._missing.get(k)
        if got is None:
            got = self._missing[k] = frozenset(g for g in self.globals.get(k, {}) if not self.group_reaches(k, g))
        return got

    def port_group(self, sw: Switch, port: int) -> int:
        """The group at the far end of ``sw``'s port."""
        return self.fabric.switch(self.fabric.peer(sw.name, port).node).group  # type: ignore[union-attr]

    def group_reaches(self, k: int, group: int) -> bool:
        """Does group ``k`` have a live global link to ``group``?"""
        key = ("reaches", k, group)
        got = self._memo.get(key)
        if got is None:
            got = self._memo[key] = any(self.live(self.at[(k, s)].name, port)
                                        for s, port in self.globals.get(k, {}).get(group, ()))
        return got

