"""Failures under traffic, the pure part of ``run_failures.py``: what to fail, and how to judge the pings.

No Mininet, no processes, no clock (times are passed in):

* :func:`choose_streams`: host pairs for the steady ping streams, whose paths (the reference pipeline
  through the compiled tables, nothing paused) together cross as many links as possible;
* :func:`choose_link` / :func:`choose_switch`: the next failure, among the links (switches) that carry a
  stream now -- measured frames per second, not predicted -- whose loss leaves the fabric connected;
* :func:`judge`: every lost echo request must have been sent inside an event's window (from just before
  the failure to the moment its repair was confirmed: the fast-failover window); per window the loss
  burst, and every loss outside all windows.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from hpcfabric.topology.model import Fabric, Link
from hpcfabric.verify.reference.walk import Pipelines, walk_pair

#: (seq, sent at (wall clock, s), answered): :func:`reachability.ping_timeline`
Timeline = Sequence[tuple[int, float, bool]]


@dataclass(frozen=True)
class Stream:
    """A steady ping ``src`` -> ``dst``; ``path``: the switches of its default route at the start."""

    src: str
    dst: str
    path: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.src}->{self.dst}"


def links_between(fabric: Fabric, a: str, b: str) -> list[Link]:
    return [l for l in fabric.links if {l.a, l.b} == {a, b}]


def path_links(fabric: Fabric, path: Sequence[str]) -> set[Link]:
    """The links between consecutive switches of ``path`` (all of them where two switches have several)."""
    return {l for x, y in zip(path, path[1:]) for l in links_between(fabric, x, y)}


def choose_streams(compiled: Any, n: int, seed: int = 1, candidates: int = 300) -> list[Stream]:
    """``n`` host pairs on different switches (each host in one stream at most) whose default routes,
    walked through ``compiled``'s tables, cross the most links together (greedy over ``candidates``
    seeded random pairs); routes through a transit switch (three switches or more) first."""
    fabric, plan = compiled.fabric, compiled.plan
    hosts = [h for h in fabric.hosts]
    rng = random.Random(seed)
    pipes = Pipelines(compiled)
    walked: list[Stream] = []
    tries = 0
    while len(walked) < candidates and tries < candidates * 4:
        tries += 1
        a, b = rng.sample(hosts, 2)
        if a.switch == b.switch:
            continue
        w = walk_pair(compiled, a.name, plan.host_mac[b.name], pipelines=pipes)
        if w.host == b.name:
            walked.append(Stream(a.name, b.name, w.path))
    chosen: list[Stream] = []
    covered: set[Link] = set()
    used: set[str] = set()
    while len(chosen) < n:
        best, gain = None, -1
        for s in walked:
            if s.src in used or s.dst in used:
                continue
            g = len(path_links(fabric, s.path) - covered) + (100 if not chosen and len(s.path) >= 3 else 0)
            if g > gain:
                best, gain = s, g
        if best is None:
            break
        chosen.append(best)
        covered |= path_links(fabric, best.path)
        used |= {best.src, best.dst}
    return chosen


def connected(fabric: Fabric, links: Iterable[Link] = (), switches: Iterable[str] = ()) -> bool:
    """Are the switches that are up still connected with ``links`` and ``switches`` out?"""
    dead_links, dead = set(links), set(switches)
    alive = [s.name for s in fabric.switches if s.name not in dead]
    adj: dict[str, list[str]] = {s: [] for s in alive}
    for l in fabric.links:
        if l not in dead_links and l.a in adj and l.b in adj:
            adj[l.a].append(l.b)
            adj[l.b].append(l.a)
    seen, todo = {alive[0]}, [alive[0]]
    while todo:
        for nxt in adj[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return len(seen) == len(alive)


def link_rate(rates: Mapping[tuple[str, int], float], link: Link) -> float:
    """Frames per second the link carried (the busier direction)."""
    return max(rates.get((link.a, link.a_port), 0.0), rates.get((link.b, link.b_port), 0.0))


def choose_link(fabric: Fabric, rates: Mapping[tuple[str, int], float], failed: Iterable[Link], kind: str | None,
                min_pps: float) -> tuple[Link, float] | None:
    """The busiest link of ``kind`` (any kind if none of it carries a stream) that carries at least ``min_pps``
    frames/s, is up, and whose loss (with ``failed``) leaves the switches connected; None if there is none."""
    out = set(failed)
    busy = sorted(((link_rate(rates, l), l) for l in fabric.links if l not in out),
                  key=lambda rl: (-rl[0], rl[1].a, rl[1].a_port))
    busy = [(r, l) for r, l in busy if r >= min_pps and connected(fabric, out | {l})]
    pick = [(r, l) for r, l in busy if kind is None or l.kind == kind] or busy
    return (pick[0][1], pick[0][0]) if pick else None


def choose_switch(fabric: Fabric, rates: Mapping[tuple[str, int], float], failed: Iterable[Link],
                  endpoints: Iterable[str], min_pps: float) -> tuple[str, float] | None:
    """The switch carrying the most stream traffic (frames/s sent out of its fabric ports) that hosts no
    stream endpoint and whose loss (with ``failed``) leaves the other switches connected."""
    ends = {fabric.host(h).switch for h in endpoints}
    out = set(failed)
    best: tuple[str, float] | None = None
    for sw in fabric.switches:
        if sw.name in ends:
            continue
        pps = sum(rates.get((sw.name, p), 0.0) for p in fabric.fabric_ports(sw.name))
        if pps >= min_pps and (best is None or pps > best[1]) and connected(fabric, out, [sw.name]):
            best = (sw.name, pps)
    return best


# ---------------------------------------------------------------------------
# judging the pings


@dataclass(frozen=True)
class Window:
    """An event's window (wall clock, s): losses of requests sent in ``[start, end]`` are the event's."""

    name: str
    start: float
    end: float


def _runs(seqs: list[int]) -> int:
    """The longest run of consecutive sequence numbers."""
    best = run = 0
    prev = None
    for s in seqs:
        run = run + 1 if prev is not None and s == prev + 1 else 1
        best, prev = max(best, run), s
    return best


def judge(timelines: Mapping[str, Timeline], windows: Sequence[Window], interval: float) -> dict[str, Any]:
    """Losses per window and outside every window (module docstring).

    Returns ``windows`` (name -> lost, streams hit, ``first_ms``/``last_ms``: the first and last lost request
    after the window's start, ``burst_ms``: the longest span of one stream's losses, ``longest_gap_ms``: the
    longest run of consecutive lost requests of one stream) and ``outside`` (every loss outside: stream, seq,
    seconds after the last window that started before it, or before the first)."""
    per: dict[str, dict[str, Any]] = {w.name: {"lost": 0, "streams": [], "first_ms": None, "last_ms": None,
                                               "burst_ms": 0.0, "longest_gap_ms": 0.0} for w in windows}
    outside: list[dict[str, Any]] = []
    for stream, tl in timelines.items():
        inside: dict[str, list[tuple[int, float]]] = {}
        for seq, t, answered in tl:
            if answered:
                continue
            w = next((w for w in windows if w.start <= t <= w.end), None)
            if w is None:
                before = [x for x in windows if x.start <= t]
                ref = before[-1] if before else (windows[0] if windows else None)
                outside.append({"stream": stream, "seq": seq, "at": round(t, 3), "after": ref.name if ref else None,
                                "s_after_end": round(t - ref.end, 3) if ref else None})
                continue
            inside.setdefault(w.name, []).append((seq, t))
        for name, lost in inside.items():
            w = next(x for x in windows if x.name == name)
            e = per[name]
            e["lost"] += len(lost)
            e["streams"].append(stream)
            first, last = (lost[0][1] - w.start) * 1000, (lost[-1][1] - w.start) * 1000
            e["first_ms"] = round(first if e["first_ms"] is None else min(e["first_ms"], first), 1)
            e["last_ms"] = round(last if e["last_ms"] is None else max(e["last_ms"], last), 1)
            e["burst_ms"] = round(max(e["burst_ms"], last - first + interval * 1000), 1)
            e["longest_gap_ms"] = round(max(e["longest_gap_ms"], _runs([s for s, _ in lost]) * interval * 1000), 1)
    return {"windows": per, "outside": outside}
