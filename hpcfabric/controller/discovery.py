"""Link discovery (pure): the observed-vs-expected wiring report and the quarantine decisions.

The LLDP frames themselves are :mod:`hpcfabric.protocols.lldp`.

:class:`DiscoveryState` is fed with observations (an LLDP frame sent from
``src`` arrived on ``dst``) and the expected :class:`~hpcfabric.topology.model.Fabric`
and reports link status, missing, extra and miswired links and unknown
dpids. It also decides which ports must stop forwarding (``quarantine``):

Policy (see docs/controller.md): compiled rules are loop-free per destination
and never flood, so every switch gets its full table as soon as it connects;
a missing link or switch only black-holes the paths over it. A *miswired*
port (its neighbour is not the expected one) can create forwarding loops, so
it is quarantined (``OFPPC_NO_FWD``) until an LLDP observation shows the
expected neighbour again. Quarantine is sticky: stale evidence never lifts it,
only a positive observation does.

Scope (docs/controller.md#discovery-scope): an instance that manages a partition
(``[ha] switches`` / ``partition``, or the partitions it masters under etcd)
expects only the links with at least one end on its switches
(:meth:`DiscoveryState.set_scope`). A *boundary* link (one end outside) is
judged by its in-scope end alone -- the far switch sends and receives LLDP
through another controller: ``up`` when the in-scope end's last fresh view is
the expected peer, ``miswired`` when it is another, ``pending`` shortly after the
in-scope switch connected, else ``missing``. Ends on out-of-scope switches are
never reported as miswired, links between two of them never as extra;
quarantine decisions are kept for every port (enforcement writes only to
switches this instance masters), the report lists the in-scope ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import repeat
from typing import Any, Callable, Iterable

from hpcfabric.topology.model import Fabric


@dataclass(frozen=True, slots=True)
class LinkStatus:
    a: str
    a_port: int
    b: str
    b_port: int
    kind: str
    status: str  # 'up' | 'pending' | 'missing' | 'miswired'
    last_seen: float | None = None


@dataclass
class DiscoveryReport:
    links: list[LinkStatus]
    missing_links: list[dict[str, Any]]
    extra_links: list[dict[str, Any]]
    miswired: list[dict[str, Any]]
    unknown_dpids: list[str]
    quarantined: list[tuple[str, int]]
    #: "fabric", or what the scope is (e.g. "partition: 2084 switches")
    scope: str = "fabric"
    #: switches in the scope (every switch of the fabric for "fabric")
    scope_switches: int = 0

    @property
    def links_expected(self) -> int:
        return len(self.links)

    @property
    def links_discovered(self) -> int:
        return sum(1 for link in self.links if link.status == "up")

    def as_dict(self) -> dict[str, Any]:
        return {
            "scope": self.scope,
            "scope_switches": self.scope_switches,
            "links_expected": self.links_expected,
            "links_discovered": self.links_discovered,
            "missing_links": self.missing_links,
            "extra_links": self.extra_links,
            "miswired": self.miswired,
            "unknown_dpids": self.unknown_dpids,
            "quarantined": [f"{s}:{p}" for s, p in self.quarantined],
        }


End = tuple[int, int]  # (dpid, port)


@dataclass
class DiscoveryState:
    """Observed neighbours per port vs the expected fabric.

    Parameters
    ----------
    expected : Fabric
    timeout : float
        An observation older than this (seconds) no longer counts: its link is
        missing (or pending for ``timeout`` after either switch connected or
        was confirmed: :meth:`switch_ready`).
    scope : frozenset of switch names, optional
        The switches whose links are expected (None: the whole fabric); change it
        with :meth:`set_scope`.
    """

    expected: Fabric
    timeout: float = 3.5
    scope: frozenset[str] | None = None
    #: (dpid, port) -> ((peer dpid, peer port), time seen)
    neighbors: dict[End, tuple[End, float]] = field(default_factory=dict)
    connected: dict[int, float] = field(default_factory=dict)
    unknown: set[int] = field(default_factory=set)
    quarantined: set[tuple[str, int]] = field(default_factory=set)

    def __post_init__(self) -> None:
        self._name = {sw.dpid: sw.name for sw in self.expected.switches}
        self._dpid = {sw.name: sw.dpid for sw in self.expected.switches}
        # in-use port -> expected peer end (dpid, port), or None for a host port
        self._expect: dict[End, End | None] = {}
        for sw in self.expected.switches:
            for port, peer in self.expected.ports(sw.name).items():
                exp = None if peer.is_host else (self._dpid[peer.node], peer.port)
                self._expect[(sw.dpid, port)] = exp  # type: ignore[assignment]
        # per link its two ends; per switch its links (indices): a scope's links are gathered, not searched
        self._ends: list[tuple[End, End]] = []
        self._links_of: dict[str, list[int]] = {}
        for i, link in enumerate(self.expected.links):
            self._ends.append(((self._dpid[link.a], link.a_port), (self._dpid[link.b], link.b_port)))
            self._links_of.setdefault(link.a, []).append(i)
            self._links_of.setdefault(link.b, []).append(i)
        # dpid -> ends whose view involves it (its own ports, or a peer on it): a disconnect visits only those.
        # Entries may go stale (a view replaced or forgotten); users re-check against ``neighbors``.
        self._touch: dict[int, set[End]] = {}
        self.set_scope(self.scope)

    def set_scope(self, switches: Iterable[str] | None, label: str | None = None) -> None:
        """Expect only the links with an end on ``switches`` (None: every link of the fabric); ``label`` says
        what the scope is in the report (default ``"partition: N switches"``). Names not in the fabric are
        ignored. Views of ports on switches leaving the scope are forgotten (another controller owns them
        now; LLDP renews them if they come back). Costs the scope's links and the views held, not the
        fabric's links."""
        old: frozenset[int] | None = getattr(self, "_in", None)
        if switches is None:
            self.scope = None
            self._in: frozenset[int] | None = None
            self._plan: list[tuple[int, bool, bool]] | None = None
            self.scope_label = label or "fabric"
            return
        scope = frozenset(n for n in switches if n in self._dpid)
        inside = frozenset(self._dpid[n] for n in scope)
        idx = sorted({i for n in scope for i in self._links_of.get(n, ())})
        ends = self._ends
        self.scope = scope
        self._in = inside
        self._plan = [(i, ends[i][0][0] in inside, ends[i][1][0] in inside) for i in idx]
        if self.neighbors and (old is None or not old <= inside):
            for end in [e for e in self.neighbors if e[0] not in inside and e[0] in self._name]:
                del self.neighbors[end]
        self.scope_label = label or f"partition: {len(scope)} switches"

    def in_scope(self, switch: str) -> bool:
        """Are ``switch``'s links (and ports) part of this state's report?"""
        return self.scope is None or switch in self.scope

    # -- inputs --------------------------------------------------------
    def switch_up(self, dpid: int, now: float) -> None:
        if dpid in self._name:
            self.connected[dpid] = now
        else:
            self.unknown.add(dpid)

    def switch_ready(self, dpid: int, now: float) -> None:
        """The switch's tables are confirmed: its LLDP punts work from ``now``, so its links count as pending
        for another ``timeout`` (a bring-up of thousands of switches confirms them long after they connect)."""
        if dpid in self.connected:
            self.connected[dpid] = now

    def switch_down(self, dpid: int) -> None:
        """Forget a disconnected switch and every view of or through its ports (visits only the views that
        involve it: a controller losing thousands of switches at once stays linear)."""
        self.connected.pop(dpid, None)
        for end in self._touch.pop(dpid, ()):
            seen = self.neighbors.get(end)
            if seen is not None and (end[0] == dpid or seen[0][0] == dpid):
                del self.neighbors[end]

    def _see(self, end: End, peer: End, now: float) -> None:
        self.neighbors[end] = (peer, now)
        self._touch.setdefault(end[0], set()).add(end)
        self._touch.setdefault(peer[0], set()).add(end)

    def port_down(self, dpid: int, port: int) -> None:
        """A port lost its link (or was deleted): forget both views of its cable."""
        end = (dpid, port)
        seen = self.neighbors.pop(end, None)
        if seen is not None and self.neighbors.get(seen[0], (None,))[0] == end:
            del self.neighbors[seen[0]]

    def adopt_quarantine(self, switch: str, port: int) -> None:
        """A port found with NO_FWD set (e.g. by a previous controller run) stays quarantined until healed."""
        if (self._dpid.get(switch), port) in self._expect:
            self.quarantined.add((switch, port))

    def observed(
        self, src_dpid: int, src_port: int, dst_dpid: int, dst_port: int, now: float, *, trusted: bool = True
    ) -> None:
        """An LLDP frame claiming to come from ``src`` arrived on ``dst``.

        ``trusted`` (the frame carries this controller's nonce) lets it also
        update the sender's view; an untrusted claim (forged, or sent by a
        previous controller run) only tells about the receiving port. Views
        are kept only for ports in scope (and of unknown dpids); the
        quarantine is judged for every port.
        """
        src, dst = (src_dpid, src_port), (dst_dpid, dst_port)
        names, inside = self._name, self._in
        for dpid in (src_dpid, dst_dpid):
            if dpid not in names:
                self.unknown.add(dpid)
        if inside is None or dst_dpid in inside or dst_dpid not in names:
            self._see(dst, src, now)
        self._judge(dst, src)
        if trusted:
            if inside is None or src_dpid in inside or src_dpid not in names:
                self._see(src, dst, now)
            self._judge(src, dst)

    def _judge(self, end: End, peer: End) -> None:
        if end not in self._expect or end[0] not in self._name:
            return
        key = (self._name[end[0]], end[1])
        if self._expect[end] == peer:
            self.quarantined.discard(key)
        else:
            self.quarantined.add(key)

    # -- outputs -------------------------------------------------------
    def _fresh(self, end: End, now: float) -> End | None:
        seen = self.neighbors.get(end)
        if seen is None or now - seen[1] > self.timeout:
            return None
        return seen[0]

    def _label(self, end: End) -> str:
        name = self._name.get(end[0])
        return f"{name}:{end[1]}" if name else f"dpid:{end[0]:016x}:{end[1]}"

    def _expected_label(self, end: End) -> str:
        exp = self._expect[end]
        if exp is None:
            peer = self.expected.peer(self._name[end[0]], end[1])
            return f"host {peer.node}" if peer else "host"
        return self._label(exp)

    def link_status(self, a: End, b: End, now: float, a_in: bool = True, b_in: bool = True) -> tuple[str, float | None]:
        """The status of the cable ``a``-``b`` and when it was last seen, judged by the views of its in-scope
        ends (``a_in``, ``b_in``; a boundary link has one: see the module docstring)."""
        if not (a_in and b_in):  # a boundary link: its in-scope end's view alone
            end, peer = (a, b) if a_in else (b, a)
            seen = self.neighbors.get(end)
            last = seen[1] if seen is not None else None
            view = self._fresh(end, now)
            if view is not None:
                return ("up" if view == peer else "miswired"), last
            up = self.connected.get(end[0])
            return ("pending" if up is not None and now - up < self.timeout else "missing"), last
        va, vb = self._fresh(a, now), self._fresh(b, now)
        seen = [self.neighbors[e][1] for e in (a, b) if e in self.neighbors]
        last = max(seen) if seen else None
        if (va is not None and va != b) or (vb is not None and vb != a):
            return "miswired", last
        if va == b or vb == a:
            return "up", last
        ups = [self.connected.get(a[0]), self.connected.get(b[0])]
        if all(t is not None for t in ups) and now - max(ups) < self.timeout:  # type: ignore[type-var]
            return "pending", last
        return "missing", last

    def report(self, now: float, breathe: Callable[[], None] | None = None, every: int = 2048) -> DiscoveryReport:
        """The discovery report at ``now`` over the scope's links; ``breathe()`` (if given) is called every
        ``every`` links and ports, so a caller on a cooperative scheduler can let others run (Table III:
        23,736 cables)."""
        links = []
        missing = []
        all_links = self.expected.links
        plan = self._plan if self._plan is not None else zip(range(len(all_links)), repeat(True), repeat(True))
        inside = self._in
        for k, (i, a_in, b_in) in enumerate(plan):
            if breathe is not None and k % every == every - 1:
                breathe()
            link = all_links[i]
            a, b = self._ends[i]
            status, last = self.link_status(a, b, now, a_in, b_in)
            links.append(LinkStatus(link.a, link.a_port, link.b, link.b_port, link.kind, status, last))
            if status == "missing":
                row: dict[str, Any] = {"a": link.a, "a_port": link.a_port, "b": link.b, "b_port": link.b_port}
                down = [n for n, e, on in ((link.a, a, a_in), (link.b, b, b_in)) if on and e[0] not in self.connected]
                if down:
                    row["switch_down"] = down
                missing.append(row)
        miswired = []
        extra = []
        done: set[frozenset[End]] = set()
        # in port order (as sorted(self.neighbors) gave); sorting all 47,472 ends of Table III took ~40 ms in
        # one go, so the ends are visited as they are and only the (few) findings are sorted
        wrong: list[tuple[End, End]] = []  # in-use ends seeing another peer than expected
        other: list[tuple[End, End]] = []  # ends the topology does not use, seeing someone
        for k, end in enumerate(list(self.neighbors)):
            if breathe is not None and k % every == every - 1:
                breathe()
            peer = self._fresh(end, now)
            if peer is None:
                continue
            if end in self._expect:
                if self._expect[end] != peer and (inside is None or end[0] in inside):
                    wrong.append((end, peer))
            elif peer not in self._expect:  # else the in-use end reports it as miswired
                if inside is None or self._extra_in_scope(end, peer, inside):
                    other.append((end, peer))
        for end, peer in sorted(wrong):
            miswired.append({"switch": self._name[end[0]], "port": end[1],
                             "expected": self._expected_label(end), "actual": self._label(peer)})
        for end, peer in sorted(other):
            pair = frozenset((end, peer))
            if pair in done:
                continue
            done.add(pair)
            extra.append({"a": self._label(end), "b": self._label(peer)})
        return DiscoveryReport(
            links=links,
            missing_links=missing,
            extra_links=extra,
            miswired=miswired,
            unknown_dpids=[f"{d:016x}" for d in sorted(self.unknown)],
            quarantined=sorted(q for q in self.quarantined if self.in_scope(q[0])),
            scope=self.scope_label,
            scope_switches=len(self._name) if self.scope is None else len(self.scope),
        )

    def _extra_in_scope(self, end: End, peer: End, inside: frozenset[int]) -> bool:
        """An unexpected cable is ours to report if an end is on one of our switches, or neither end is on
        a switch of the fabric (one on another partition's switch is that partition's to report)."""
        if end[0] in inside or peer[0] in inside:
            return True
        return end[0] not in self._name and peer[0] not in self._name

    def quarantine(self) -> set[tuple[str, int]]:
        """Ports (switch name, port) that must not forward (OFPPC_NO_FWD)."""
        return set(self.quarantined)


def quarantine_changes(
    wanted: Iterable[tuple[str, int]], current: Iterable[tuple[str, int]]
) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """Port-mods to send: (ports to set NO_FWD on, ports to clear it on)."""
    w, c = set(wanted), set(current)
    return sorted(w - c), sorted(c - w)
