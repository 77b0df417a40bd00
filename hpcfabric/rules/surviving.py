"""Routing on the surviving fabric: what the routers of :mod:`hpcfabric.rules.routing` do around failed links
and switches (mixins: they read the router's ``fabric``, ``failures``, ``dead`` and :meth:`live`).

* :class:`DragonflyBypasses`: inside a group, a failed link is bypassed through the group's *hub* (the
  lowest-numbered switch whose local links are all up: every bypass runs into the hub and out of it, so
  bypasses cannot wait on each other in a circle); a group without a live global link to another group
  reaches it through an intermediate group that has one -- over an own global port, else through a group
  member with one (two global hops, as a Valiant path). With ``redirect`` the Valiant and conditional
  detours that lead into such a group are sent elsewhere at the source
  (:func:`hpcfabric.rules.policies.valiant.redirected_detours`), so no path has a third global hop.
* :class:`RowBypasses`: a Flattened Butterfly dimension ``d`` link is bypassed through the row's hub, for the
  destinations that differ only there (the switch at its far end). A destination that also differs in a lower
  dimension ``e`` fixes ``e`` first (:meth:`RowBypasses.pair_route`, still minimal); one whose both minimal
  first hops are out goes through the hub, which sends what arrives from that neighbour straight on
  (:meth:`RowBypasses.relay_overrides`). With the classes of service ``hop`` (the first hop class 0, every later
  one the highest), a frame past its first hop then differs from its destination in one dimension only, or is
  on such an override: the class it saturates in sees no lower-dimension alternative taken before a higher
  dimension is fixed, and a bypass only into a hub and out of it.
"""

from __future__ import annotations

from typing import Any

from hpcfabric.topology.model import Switch

__all__ = ["DragonflyBypasses", "RowBypasses"]


class DragonflyBypasses:
    """Dragonfly routes on the surviving fabric (module docstring); the router gives ``live`` and ``local_port``."""

    fabric: Any
    failures: Any
    a: int
    at: dict[tuple[int, int], Switch]
    globals: dict[int, dict[int, list[tuple[int, int]]]]
    touched: frozenset[int]
    _missing: dict[int, frozenset[int]]

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
        live = [(s, port) for s, port in links if self.live(self.at[(src.group, s)].name, port)]
        mine = [port for s, port in live if s == src.index]
        if mine:
            return mine[0]
        if live:
            compiled = links[group % len(links)]
            order = ([compiled] if compiled in live else []) + live[group % len(live):] + live[:group % len(live)]
            for holder, _ in order:
                port = self.within(src, holder)
                if port is not None:
                    return port
        return self.bypass(src, group)

    def qualifying(self, sw: Switch, group: int) -> list[int]:
        """``sw``'s live global ports to groups (other than ``group``) with a live link to ``group``."""
        out = []
        for port, peer in sorted(self.fabric.fabric_ports(sw.name).items()):
            if peer.kind == "global" and self.live(sw.name, port):
                k = self.fabric.switch(peer.node).group
                if k != group and self.group_reaches(k, group):
                    out.append(port)
        return out

    def bypass(self, src: Switch, group: int) -> int | None:
        """``src``'s route to ``group`` through an intermediate group with a live link to it: an own global port
        (chosen by the group number), else a local port towards a group member with one; None: no way out.
        Valiant and conditional detours never lead to an intermediate group without a live link to their
        destination group (:meth:`missing_from`, the policies' overrides), so no frame that already crossed a
        global link arrives here for ``group``: every path keeps at most two global hops."""
        own = self.qualifying(src, group)
        if own:
            return own[group % len(own)]
        members = [self.at[(src.group, c)] for c in range(self.a) if c != src.index and (src.group, c) in self.at]
        if members:
            members = members[group % len(members):] + members[:group % len(members)]
        for sw in members:
            if sw.name not in self.failures.switches and self.qualifying(sw, group):
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
            others = [p for p in self.qualifying(src, g) if p != port]
            alt = others[g % len(others)] if others else None
            if alt is None:
                for c in range(self.a):
                    sw = self.at.get((src.group, c))
                    if sw is not None and c != src.index and sw.name not in self.failures.switches \
                            and self.qualifying(sw, g):
                        alt = self.within(src, c)
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
        return any(self.live(self.at[(k, s)].name, port) for s, port in self.globals.get(k, {}).get(group, ()))


class RowBypasses:
    """Flattened Butterfly routes on the surviving fabric (module docstring); the router gives ``live`` and
    ``dim_port``."""

    fabric: Any
    failures: Any
    dims: list[int]
    at: dict[tuple[int, ...], Switch]
    dead: dict[str, frozenset[int]]
    _pairs: dict[tuple[str, int, int, int, int], tuple[int | None, int] | None]

    def dim_out(self, src: Switch, d: int, value: int) -> int | None:
        """The port ``src`` uses to fix dimension ``d`` to ``value``: the direct link, else (link out) through the
        row's hub, else (the row's switch at ``value`` failed) None."""
        port = self.dim_port(src, d, value)
        if not self.failures or self.live(src.name, port):
            return port
        target = self.at[self.row(src.coords, d, value)]
        if target.name in self.failures.switches:
            return None
        hub = self.hub(src, d, value)
        return None if hub is None else self.dim_port(src, d, hub)

    def row(self, coords: tuple[int, ...], d: int, value: int) -> tuple[int, ...]:
        c = list(coords)
        c[d] = value
        return tuple(c)

    def hub(self, src: Switch, d: int, value: int) -> int | None:
        """The coordinate (in dimension ``d``) of the hub of ``src``'s row that bypasses the failed link to
        ``value``: lowest with all its row links up, else lowest with both links needed up."""
        clean, usable = None, None
        for c in range(self.dims[d]):
            if c in (src.coords[d], value):
                continue
            sw = self.at[self.row(src.coords, d, c)]
            if sw.name in self.failures.switches:
                continue
            if not (self.live(src.name, self.dim_port(src, d, c)) and self.live(sw.name, self.dim_port(sw, d, value))):
                continue
            if usable is None:
                usable = c
            if all(self.live(sw.name, self.dim_port(sw, d, u)) for u in range(self.dims[d]) if u != c):
                clean = c
                break
        return clean if clean is not None else usable

    def link_up(self, src: Switch, d: int, value: int) -> bool:
        """Is ``src``'s direct link to coordinate ``value`` of dimension ``d`` in service, its far switch too?"""
        far = self.at[self.row(src.coords, d, value)]
        return far.name not in self.failures.switches and self.live(src.name, self.dim_port(src, d, value))

    def pair_route(self, src: Switch, d: int, v: int, e: int, x: int) -> tuple[int | None, int] | None:
        """Surviving fabric, destinations at ``src`` whose highest differing dimension is ``d`` (coordinate ``v``)
        and whose coordinate in the lower dimension ``e`` is ``x``: ``(port, dims)`` -- the port, and the lower
        dimensions a paused frame may still turn to -- where the compact entries' choice (``d`` first, ``e`` as
        the alternative) would cross a failed link; None where it does not.

        A first hop *lands* well when the switch it reaches gets to the destination along the one dimension
        left (:meth:`row_reach`). ``x`` other than ``src``'s own: ``d`` first without ``e`` as an alternative,
        else ``e`` first (minimal either way), else through the hub of ``d``'s row, else through a *relay*
        (:meth:`relay`). ``x`` its own (the destination differs in ``d`` only) and ``d``'s row cannot reach
        ``v``: through a relay. Hubs and relays send what arrives from ``src`` for it straight on
        (:meth:`relay_overrides`). ``dims`` never includes ``e`` nor, in two dimensions, anything (no Valiant
        detour either)."""
        key = (src.name, d, v, e, x)
        if key not in self._pairs:
            self._pairs[key] = self._pair_route(src, d, v, e, x)
        return self._pairs[key]

    def _pair_route(self, src: Switch, d: int, v: int, e: int, x: int) -> tuple[int | None, int] | None:
        near = self.at[self.row(src.coords, d, v)]
        if x == src.coords[e]:
            if self.row_reach(src, d, v):
                return None
            y = self.relay(src, d, v, e, x)
            return None if y is None else (self.dim_port(src, e, y), 0)
        first = self.link_up(src, d, v)
        good = first and self.row_reach(near, e, x)
        other = self.link_up(src, e, x) and self.row_reach(self.at[self.row(src.coords, e, x)], d, v)
        if good and other:
            return None
        if good:
            return self.dim_port(src, d, v), ((1 << d) - 1) & ~(1 << e)
        if other:
            return self.dim_port(src, e, x), (1 << e) - 1
        hub = None if first else self.hub_to(src, d, v)
        if hub is not None and self.row_reach(near, e, x):
            return self.dim_port(src, d, hub), 0
        y = self.relay(src, d, v, e, x)
        if y is not None:
            return self.dim_port(src, e, y), 0
        return (self.dim_port(src, d, v) if first else None), 0

    def row_reach(self, sw: Switch, d: int, v: int) -> bool:
        """Does ``sw`` reach coordinate ``v`` of dimension ``d`` inside its row: the link, or a hub?"""
        return self.link_up(sw, d, v) or self.hub_to(sw, d, v) is not None

    def hub_to(self, src: Switch, d: int, v: int) -> int | None:
        """:meth:`hub`, None when the switch at ``v`` failed."""
        if self.at[self.row(src.coords, d, v)].name in self.failures.switches:
            return None
        return self.hub(src, d, v)

    def relay(self, src: Switch, d: int, v: int, e: int, x: int) -> int | None:
        """The coordinate ``y`` (dimension ``e``) of the row-mate that takes a frame from ``src`` on along ``d`` to
        ``v`` (:meth:`row_out`), from where the row of ``e`` reaches ``x``: the lowest, direct links there
        preferred; None if there is none."""
        best, score = None, 4
        for y in range(self.dims[e]):
            if y in (src.coords[e], x) or not self.link_up(src, e, y):
                continue
            mid = self.at[self.row(src.coords, e, y)]
            if not self.row_reach(mid, d, v):
                continue
            last = self.at[self.row(mid.coords, d, v)]
            if not self.row_reach(last, e, x):
                continue
            rank = (not self.link_up(mid, d, v)) * 2 + (not self.link_up(last, e, x))
            if rank < score:
                best, score = y, rank
        return best

    def cross_route(self, src: Switch, e: int, x: int) -> tuple[int, int] | None:
        """A destination that differs from ``src`` only in dimension ``e`` (coordinate ``x``) that ``e``'s row
        cannot reach: ``(f, c)`` -- across a higher dimension ``f`` to the row-mate at ``c``, along ``e`` there,
        and back along ``f`` (the highest ``f``, the lowest ``c``, direct links preferred); None if none."""
        if self.row_reach(src, e, x):
            return None
        for f in range(len(self.dims) - 1, e, -1):
            best, score = None, 4
            for c in range(self.dims[f]):
                if c == src.coords[f] or not self.link_up(src, f, c):
                    continue
                mid = self.at[self.row(src.coords, f, c)]
                if not self.row_reach(mid, e, x):
                    continue
                last = self.at[self.row(mid.coords, e, x)]
                if not self.row_reach(last, f, src.coords[f]):
                    continue
                rank = (not self.link_up(mid, e, x)) * 2 + (not self.link_up(last, f, src.coords[f]))
                if rank < score:
                    best, score = c, rank
            if best is not None:
                return f, best
        return None

    def row_out(self, sw: Switch, d: int, v: int) -> int | None:
        """``sw``'s port towards coordinate ``v`` of dimension ``d`` inside its row: the link, else its hub's."""
        if self.link_up(sw, d, v):
            return self.dim_port(sw, d, v)
        hub = self.hub_to(sw, d, v)
        return None if hub is None else self.dim_port(sw, d, hub)

    def relay_overrides(self, sw: Switch) -> list[tuple[dict[int, int], int, int]]:
        """``(coordinates, in_port, out_port)``: what arrives from a row neighbour (behind ``in_port``) that
        reaches those destination coordinates through ``sw`` -- as the hub of its failed link, or as the relay of
        a pair route with both minimal first hops out -- goes straight on along the live link ``out_port``,
        whatever else the destination still differs in."""
        out: list[tuple[dict[int, int], int, int]] = []
        if not self.failures or sw.name in self.failures.switches:
            return out
        for f, k in enumerate(self.dims):
            own = sw.coords[f]
            for c in range(k):
                src = self.at[self.row(sw.coords, f, c)]
                dead = self.dead.get(src.name)
                if c == own or not dead:
                    continue
                lost: dict[int, list[int]] = {}  # dimension -> coordinates src's links there lead to, out
                for g, value, port in self.dim_values(src):
                    if port in dead:
                        lost.setdefault(g, []).append(value)
                back, to_me = self.dim_port(sw, f, c), self.dim_port(src, f, own)
                for v in lost.get(f, ()):
                    if v != own and self.hub_to(src, f, v) == own:
                        out.append(({f: v}, back, self.dim_port(sw, f, v)))
                for e in range(f):  # src crosses through sw to a destination along e it cannot reach in its row
                    for x in range(self.dims[e]):
                        if x != src.coords[e] and self.cross_route(src, e, x) == (f, own):
                            out.append(({**dict(enumerate(src.coords)), e: x}, back, self.row_out(sw, e, x)))
                for d in range(f + 1, len(self.dims)):
                    for v in range(self.dims[d]):
                        for x in range(k) if v != src.coords[d] else ():
                            got = self.pair_route(src, d, v, f, x)
                            if got is not None and got[0] == to_me and x != own:
                                out.append(({d: v, f: x}, back, self.row_out(sw, d, v)))
        return out

    def dim_values(self, sw: Switch) -> list[tuple[int, int, int]]:
        """(dimension, coordinate, port) of every fabric port of ``sw``."""
        return [(d, v, self.dim_port(sw, d, v)) for d, k in enumerate(self.dims) for v in range(k) if v != sw.coords[d]]
