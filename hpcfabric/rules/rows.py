"""Flattened Butterfly routes on the surviving fabric (:class:`RowBypasses`, a mixin of
:class:`hpcfabric.rules.routing.FlattenedButterflyRouter`: it reads the router's ``fabric``, ``failures``,
``dead``, ``dims``, ``at``, :meth:`live` and :meth:`dim_port`).

The compact tables fix the highest differing dimension first; a paused default port may turn to a lower
one (the conditional alternatives) and, for a frame its own hosts inject, to a Valiant detour through a
top-dimension neighbour. With the default classes of service (``hop``, as many levels as dimensions: on a
2-D FB the first hop class 0, every later one class 1) nothing in the saturated class waits on a lower
dimension before a higher one, so its dependencies cannot close a circle. A repair keeps that:

* a failed link to coordinate ``v`` of dimension ``d`` is bypassed through the row's *hub* (:meth:`hub`: the
  lowest-numbered switch with all its row links up, else the lowest with the two links needed), for the
  destinations that differ from the switch in ``d`` only -- what arrives at a hub goes out towards ``v``;
* a destination that differs in a lower dimension ``e`` too fixes ``e`` first (:meth:`pair_route`: still
  minimal, the conditional alternatives already allow it), and a frame is never sent first where the one
  dimension left cannot be fixed inside that row (:meth:`row_reach`); where both minimal first hops are out,
  through the hub or through a *relay* of ``e``'s row (:meth:`relay`); an alternative over a failed link is
  left out (the frame waits on its default port), so no Valiant detour starts for such destinations either;
* a destination that ``e``'s row cannot reach at all goes across a higher dimension and back
  (:meth:`cross_route`, the only case a lower dimension is fixed before a higher one in the saturated class);
* hubs and relays send what arrives from the neighbour they serve straight on, whatever else the destination
  differs in (:meth:`relay_overrides`, ROUTE entries ``in_port + coordinates``);
* Valiant detours whose intermediate lost its link towards the destination's top coordinate are redirected at
  the source (:func:`hpcfabric.rules.policies.valiant.fb_redirected_detours`), so a detour never comes back
  to bypass through its source (which would leave by the port it came in on).

So a frame past its first hop differs from its destination in one dimension, or is on an override. None of
this is assumed by the repair: the union proof checks the tables (:mod:`hpcfabric.verify.incremental.delta`); what it
cannot reach is said (a destination no in-order route reaches is dropped, "proven, pairs lost").
"""

from __future__ import annotations

from typing import Any

import networkx as nx

from hpcfabric.topology.model import Switch

__all__ = ["RowBypasses"]


class RowBypasses:
    """Flattened Butterfly routes on the surviving fabric (module docstring)."""

    fabric: Any
    failures: Any
    dims: list[int]
    at: dict[tuple[int, ...], Switch]
    dead: dict[str, frozenset[int]]
    _pairs: dict[tuple[str, int, int, int, int], tuple[int | None, int] | None]
    _hubs: dict[tuple[int, tuple[int, ...]], dict[tuple[int, int], int]]
    _near: frozenset[str] | None

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
        """The coordinate (in dimension ``d``) of the hub through which ``src`` bypasses its failed link to
        ``value`` in their row (None: no hub; the switch at ``value`` failed) -- :meth:`row_hubs`."""
        key = (d, self.row(src.coords, d, 0))
        table = self._hubs.get(key)
        if table is None:
            table = self._hubs[key] = self.row_hubs(src, d)
        return table.get((src.coords[d], value))

    def row_hubs(self, sw: Switch, d: int) -> dict[tuple[int, int], int]:
        """``(u, v) -> hub`` for every failed link ``u -> v`` of ``sw``'s row in dimension ``d`` between live
        switches: the lowest-numbered switch with all its row links up (a *clean* hub: it has no bypass of its
        own, so nothing waits behind what it forwards), else the lowest with both links needed up whose
        dependency ``(u -> hub) -> (hub -> v)`` closes no circle with the ones chosen before (pairs in order):
        bypasses in a row never wait on each other in a circle, whatever failed (rows of five and more have
        dead-link sets where "the lowest usable" would)."""
        k = self.dims[d]
        members = [self.at[self.row(sw.coords, d, c)] for c in range(k)]
        alive = [m.name not in self.failures.switches for m in members]

        def up(a: int, b: int) -> bool:
            return alive[a] and alive[b] and self.live(members[a].name, self.dim_port(members[a], d, b))

        clean = [c for c in range(k) if alive[c] and all(up(c, w) for w in range(k) if w != c)]
        after = nx.DiGraph()  # channel -> channels that wait on it

        def reaches(a: tuple[int, int], b: tuple[int, int]) -> bool:
            return a in after and b in after and nx.has_path(after, a, b)

        out: dict[tuple[int, int], int] = {}
        for u in range(k):
            for v in range(k):
                if u == v or not alive[u] or not alive[v] or up(u, v):
                    continue
                hub = next((c for c in clean if c not in (u, v)), None)
                if hub is None:
                    hub = next((c for c in range(k) if c not in (u, v) and up(u, c) and up(c, v)
                                and not reaches((c, v), (u, c))), None)
                if hub is not None:
                    out[(u, v)] = hub
                    after.add_edge((u, hub), (hub, v))
        return out

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
        if src.name not in self.near():
            return None
        key = (src.name, d, v, e, x)
        if key not in self._pairs:
            self._pairs[key] = self._pair_route(src, d, v, e, x)
        return self._pairs[key]

    def near(self) -> frozenset[str]:
        """Live switches with a failed link or a row neighbour that has one: only their routes can change."""
        if self._near is None:
            out = set(self.dead)
            for name in self.dead:
                sw = self.fabric.switch(name)
                out.update(self.at[self.row(sw.coords, d, v)].name for d, v, _ in self.dim_values(sw))
            self._near = frozenset(out - set(self.failures.switches))
        return self._near

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
        hub = None if first else self.hub(src, d, v)
        if hub is not None and self.row_reach(near, e, x):
            return self.dim_port(src, d, hub), 0
        y = self.relay(src, d, v, e, x)
        if y is not None:
            return self.dim_port(src, e, y), 0
        return (self.dim_port(src, d, v) if first else None), 0

    def row_reach(self, sw: Switch, d: int, v: int) -> bool:
        """Does ``sw`` reach coordinate ``v`` of dimension ``d`` inside its row: the link, or a hub?"""
        return self.link_up(sw, d, v) or self.hub(sw, d, v) is not None

    def relay(self, src: Switch, d: int, v: int, e: int, x: int) -> int | None:
        """The coordinate ``y`` (dimension ``e``) of the row-mate that takes a frame from ``src`` on along ``d`` to
        ``v`` (:meth:`row_out`), from where the row of ``e`` reaches ``x``: the lowest, direct links there
        preferred; None if there is none."""
        return self._via(src, e, [y for y in range(self.dims[e]) if y not in (src.coords[e], x)], d, v, x)

    def cross_route(self, src: Switch, e: int, x: int) -> tuple[int, int] | None:
        """A destination that differs from ``src`` only in dimension ``e`` (coordinate ``x``) that ``e``'s row
        cannot reach: ``(f, c)`` -- across a higher dimension ``f`` to the row-mate at ``c``, along ``e`` there,
        and back along ``f`` (the highest ``f``, the lowest ``c``, direct links preferred); None if none."""
        if src.name not in self.dead or self.row_reach(src, e, x):
            return None
        for f in range(len(self.dims) - 1, e, -1):
            best = self._via(src, f, range(src.coords[f]), e, x, src.coords[f])  # rows below only: rising in f
            if best is not None:
                return f, best
        return None

    def _via(self, src: Switch, a: int, coords: Any, b: int, w: int, back: int) -> int | None:
        """The coordinate ``c`` (dimension ``a``, from ``coords``, over a live link from ``src``) of the row-mate that
        reaches ``w`` along ``b`` in its row, from where ``a``'s row reaches ``back``: the first of the lowest
        rank (direct links preferred, the first hop's most); None if there is none."""
        best, score = None, 4
        for c in coords:
            if not self.link_up(src, a, c):
                continue
            mid = self.at[self.row(src.coords, a, c)]
            if not self.row_reach(mid, b, w):
                continue
            last = self.at[self.row(mid.coords, b, w)]
            if not self.row_reach(last, a, back):
                continue
            rank = (not self.link_up(mid, b, w)) * 2 + (not self.link_up(last, a, back))
            if rank < score:
                best, score = c, rank
        return best

    def row_out(self, sw: Switch, d: int, v: int) -> int | None:
        """``sw``'s port towards coordinate ``v`` of dimension ``d`` inside its row: the link, else its hub's."""
        if self.link_up(sw, d, v):
            return self.dim_port(sw, d, v)
        hub = self.hub(sw, d, v)
        return None if hub is None else self.dim_port(sw, d, hub)

    def relay_overrides(self, sw: Switch) -> list[tuple[dict[int, int], int, int]]:
        """``(coordinates, in_port, out_port)``: what arrives from a row neighbour (behind ``in_port``) that
        reaches those destination coordinates through ``sw`` -- as the hub of its failed link, or as the relay of
        a pair route with both minimal first hops out -- goes straight on along the live link ``out_port``,
        whatever else the destination still differs in."""
        out: list[tuple[dict[int, int], int, int]] = []
        if not self.failures or sw.name in self.failures.switches:
            return out
        near = self.near()
        for f, k in enumerate(self.dims):
            own = sw.coords[f]
            for c in range(k):
                src = self.at[self.row(sw.coords, f, c)]
                if c == own or src.name not in near:
                    continue
                dead = self.dead.get(src.name, frozenset())
                lost: dict[int, list[int]] = {}  # dimension -> coordinates src's links there lead to, out
                for g, value, port in self.dim_values(src):
                    if port in dead:
                        lost.setdefault(g, []).append(value)
                back, to_me = self.dim_port(sw, f, c), self.dim_port(src, f, own)
                for v in lost.get(f, ()):
                    if v != own and self.hub(src, f, v) == own:
                        out.append(({f: v}, back, self.dim_port(sw, f, v)))
                for e in range(f) if dead else ():  # src crosses through sw to a destination along e its row misses
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
