"""The walks behind fast-failover groups, kept between analyses so that a repair redoes only what can differ.

:class:`DetourAnalysis` decides, for the tables of every switch, which fabric ports carry data frames and
which other ports are proven detours for each (the rules: :mod:`hpcfabric.failover.groups`). Everything it
walks is a pure function of the tables, so it keeps what it walked and, given new tables (a repair changes
a few switches), walks again only what can differ:

* **steps** -- what one switch does with one frame (:meth:`~hpcfabric.verify.reference.pipeline.Pipeline.process`:
  one output and the frame as sent, dropped, or anything else), memoised per (switch, frame). A step is
  fixed by the winners of the table lookups it made; each step keeps its lookups (table, the values of the
  fields that table matches on), so when a switch's tables change, only steps whose lookups now find
  another entry are processed again, and only those whose result differs count as *changed*;
* **traffic** -- every host to every host and to every probe address, walked switch by switch; a walk is
  redone only if one of its steps changed. Each port's frames are counted (walks share frames), so a port's
  traffic changes only when a frame appears, disappears or is for another destination;
* **detour checks** -- a frame sent out of p walked out of q instead: each keeps its verdict and its steps.
  A port's detours are decided again only when its traffic changed or a check it relied on has a changed step.

The result equals a walk from scratch (``tests/test_failover_incremental.py`` compares them after random
repairs); on any error the kept state is dropped, and the next analysis starts from scratch.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from hpcfabric.rules.flows import FlowSpec
from hpcfabric.verify.reference.pipeline import Frame, Pipeline, PipelineError

#: a step that ends every walk: a pipeline error, a punt or more than one output
BAD = "bad"
#: a step without any output
DROP = "drop"

State = tuple[str, Frame]  # (switch, frame arriving there)
CheckKey = tuple[str, int, int, Frame, Any]  # (switch S, protected port p, detour q, frame (in_port 0), host or None)


class _Step:
    """A memoised step and what depends on it: the walks and checks through it."""

    __slots__ = ("out", "keys", "walks", "checks")

    def __init__(self, out: Any, keys: tuple[tuple[int, Any], ...]) -> None:
        self.out = out  # BAD, DROP or (port, frame as sent)
        self.keys = keys  # its lookups: (table, key of the frame looked up)
        self.walks: set[int] = set()
        self.checks: set[CheckKey] = set()


class DetourAnalysis:
    """Protected ports and their detours for a fabric's tables (module docstring); :meth:`update` per table set.

    ``dests``: (MAC, host it is for, None for a probe) to walk every source to; ``sources``: (host, the MAC it
    sends with); ``max_alternatives``: detours per port at most; ``keep=False``: every update from scratch, without
    the records (steps' lookups, walks, checks) a later update needs -- faster for one analysis."""

    def __init__(self, fabric: Any, dests: Iterable[tuple[int, str | None]], sources: Iterable[tuple[Any, int]],
                 max_alternatives: int, keep: bool = True) -> None:
        self.fabric = fabric
        self.dests = list(dests)
        self.sources = list(sources)
        self.max_alternatives = max_alternatives
        self.keep = keep  # False: one analysis only, without what a later update needs (faster)
        self.bound = len(fabric.switches) + 1
        self._ports = {s.name: fabric.fabric_ports(s.name) for s in fabric.switches}
        self._order: dict[tuple[str, int], tuple[int, ...]] = {}
        self.stats: dict[str, int] = {}
        self._clear()

    def _clear(self) -> None:
        self.flows: dict[str, tuple[FlowSpec, ...]] = {}
        self.pipes: dict[str, Pipeline] = {}
        self.fabric_src: dict[str, bool] = {}
        self.steps: dict[str, dict[Frame, _Step]] = {}
        self.index: dict[str, dict[tuple[int, Any], list[Any]]] = {}  # switch -> lookup -> [a frame, steps' frames]
        self.walks: dict[int, tuple[Any, tuple[State, ...], tuple[tuple[str, int, Frame], ...]]] = {}
        self.sent: dict[str, dict[int, dict[Frame, dict[Any, int]]]] = {}  # switch -> port -> frame -> {host: walks}
        self.checks: dict[CheckKey, tuple[bool, tuple[State, ...]]] = {}
        self.decided: dict[tuple[str, int], tuple[tuple[int, ...], tuple[CheckKey, ...]]] = {}
        self.ambiguous: set[tuple[str, int]] = set()  # ports where one frame stands for several hosts (_frames)
        self.changed: set[str] = set()

    # -- the analysis -------------------------------------------------------------------------------

    def update(self, flows: Mapping[str, tuple[FlowSpec, ...]]) -> dict[str, tuple[tuple[int, tuple[int, ...]], ...]]:
        """Analyse ``flows`` (switch -> its tables); per fabric switch, its ports that carry traffic (sorted), each
        with its detours (none: unprotected). :attr:`changed`: the switches whose tables differ from the last."""
        try:
            return self._update(flows)
        except BaseException:
            self._clear()  # half-updated: start from scratch next time
            raise

    def _update(self, flows: Mapping[str, tuple[FlowSpec, ...]]) -> dict[str, tuple[tuple[int, tuple[int, ...]], ...]]:
        old = self.flows
        changed = [n for n, f in flows.items() if n not in old or (old[n] is not f and old[n] != f)]
        pipes = {n: Pipeline(flows[n]) for n in changed}  # a table OpenFlow rejects raises before anything changes
        fsrc = {n: self.fabric_src[n] if n not in pipes else _fabric_src(self.fabric, n, flows[n]) for n in flows}
        fresh = not self.keep or not old or set(old) != set(flows) or any(fsrc.values()) != any(self.fabric_src.values())
        self.stats = {"switches_changed": len(changed), "steps_redone": 0, "steps_changed": 0, "walks_redone": 0,
                      "ports_decided": 0, "checks_walked": 0}
        if fresh:
            self._clear()
            pipes = {n: Pipeline(f) if n not in pipes else pipes[n] for n, f in flows.items()}
        self.changed = set(flows) if fresh else set(changed)
        self.flows, self.fabric_src = dict(flows), fsrc
        self._any_src = any(fsrc.values())
        moved: list[_Step] = []
        for n, pipe in pipes.items():
            prev = self.pipes.get(n)
            self.pipes[n] = pipe
            if prev is not None:
                moved += self._restep(n, prev, pipe)
        self.stats["steps_changed"] = len(moved)
        spare: set[State] = set()
        if fresh:
            touched = self._walk_all()
            redecide = {(s, p) for s, ports in self.sent.items() for p in ports}
        else:
            touched = self._rewalk(sorted(set().union(*(m.walks for m in moved))), spare)
            stale = set().union(*(m.checks for m in moved))
            for key in stale:
                self._drop_check(key, spare)
            redecide = touched | {key[:2] for key in stale}
        for s, p in sorted(redecide):
            self._decide(s, p, spare)
        self.stats["ports_decided"] = len(redecide)
        for sw, frame in spare:  # steps nothing depends on any more
            step = self.steps.get(sw, {}).get(frame)
            if step is not None and not step.walks and not step.checks:
                self._forget(sw, frame, step)
        out = {}
        for sw in self.fabric.switches:
            ports = sorted(self.sent.get(sw.name, {}))
            out[sw.name] = tuple((p, self.decided[(sw.name, p)][0]) for p in ports)
        return out

    # -- steps ---------------------------------------------------------------------------------------

    def _step(self, sw: str, frame: Frame) -> _Step:
        steps = self.steps.get(sw)
        if steps is None:
            steps = self.steps[sw] = {}
        step = steps.get(frame)
        if step is None:
            step = steps[frame] = self._process(sw, frame)
        return step

    def _process(self, sw: str, frame: Frame) -> _Step:
        pipe = self.pipes[sw]
        trace: list[tuple[int, Frame]] | None = [] if self.keep else None
        try:
            res = pipe.process(frame, trace)
        except PipelineError:
            res = None
        if res is None or res.punted or len(res.outputs) > 1:
            out: Any = BAD
        else:
            out = res.outputs[0] if res.outputs else DROP
        index = self.index.get(sw)
        if index is None:
            index = self.index[sw] = {}
        keys = []
        for table, looked in trace or ():
            ft = pipe.tables.get(table)
            key = (table, ft.key(looked) if ft is not None else None)
            entry = index.get(key)
            if entry is None:
                index[key] = [looked, {frame}]
            else:
                entry[1].add(frame)
            keys.append(key)
        return _Step(out, tuple(keys))

    def _unindex(self, sw: str, frame: Frame, step: _Step) -> None:
        index = self.index[sw]
        for key in step.keys:
            entry = index.get(key)
            if entry is not None:
                entry[1].discard(frame)
                if not entry[1]:
                    del index[key]

    def _forget(self, sw: str, frame: Frame, step: _Step) -> None:
        self._unindex(sw, frame, step)
        del self.steps[sw][frame]

    def _restep(self, sw: str, prev: Pipeline, pipe: Pipeline) -> list[_Step]:
        """Steps of ``sw`` whose result differs with its new tables ``pipe`` (their records updated)."""
        verdicts: dict[int, str] = {}
        dirty: set[Frame] = set()
        for (table, _), (looked, frames) in self.index.get(sw, {}).items():
            verdict = verdicts.get(table)
            if verdict is None:
                verdict = verdicts[table] = _table_change(prev.tables.get(table), pipe.tables.get(table))
            if verdict == "same":
                continue
            if verdict == "all":
                dirty |= frames
                continue
            a, b = prev.tables[table].lookup(looked), pipe.tables[table].lookup(looked)
            if a is not b and a != b:
                dirty |= frames
        moved = []
        steps = self.steps.get(sw, {})
        for frame in dirty:
            step = steps[frame]
            self._unindex(sw, frame, step)
            new = self._process(sw, frame)
            self.stats["steps_redone"] += 1
            if new.out is not step.out and new.out != step.out:
                moved.append(step)
            step.out, step.keys = new.out, new.keys
        return moved

    # -- traffic -------------------------------------------------------------------------------------

    def _walk_all(self) -> set[tuple[str, int]]:
        delta: dict[tuple[str, int, Frame, Any], int] = {}
        n = len(self.dests)
        for i, (host, src) in enumerate(self.sources):
            for j, (mac, expect) in enumerate(self.dests):
                if expect != host.name:
                    self._walk(i * n + j, host, src, mac, expect, delta)
        return self._count(delta)

    def _rewalk(self, walks: list[int], spare: set[State]) -> set[tuple[str, int]]:
        delta: dict[tuple[str, int, Frame, Any], int] = {}
        n = len(self.dests)
        for w in walks:
            expect, states, contribs = self.walks.pop(w)
            for sw, frame in states:
                self.steps[sw][frame].walks.discard(w)
                spare.add((sw, frame))
            for sw, port, kf in contribs:
                k = (sw, port, kf, expect)
                delta[k] = delta.get(k, 0) - 1
            host, src = self.sources[w // n]
            self._walk(w, host, src, self.dests[w % n][0], expect, delta)
        self.stats["walks_redone"] = len(walks)
        return self._count(delta)

    def _walk(self, w: int, host: Any, src: int, mac: int, expect: Any,
              delta: dict[tuple[str, int, Frame, Any], int]) -> None:
        """Walk ``w``: host -> ``mac`` switch by switch; the frames it sends out of fabric ports, in ``delta``."""
        fabric, any_src, keep = self.fabric, self._any_src, self.keep
        sw, frame = host.switch, Frame(host.port, src, mac)
        states, contribs = [], []
        for _ in range(self.bound):
            step = self._step(sw, frame)
            if keep:
                step.walks.add(w)
                states.append((sw, frame))
            out = step.out
            if out is BAD or out is DROP:
                break
            port, sent = out
            peer = fabric.peer(sw, port)
            if peer is None or peer.is_host:
                break
            if not any_src and sent.eth_src:
                sent = sent.with_field("eth_src", 0)  # one frame stands for every source
            kf = sent.with_in_port(frame.in_port)
            contribs.append((sw, port, kf))
            k = (sw, port, kf, expect)
            delta[k] = delta.get(k, 0) + 1
            sw, frame = peer.node, sent.arriving(peer.port)
        self.walks[w] = (expect, tuple(states), tuple(contribs))

    def _count(self, delta: dict[tuple[str, int, Frame, Any], int]) -> set[tuple[str, int]]:
        """Apply the frame counts in ``delta``; the ports whose frames (or their hosts) changed."""
        touched = set()
        for (sw, port, kf, expect), d in delta.items():
            if (sw, port) in self.ambiguous:  # which walk comes last may have changed
                touched.add((sw, port))
            if not d:
                continue
            by_port = self.sent.setdefault(sw, {})
            frames = by_port.setdefault(port, {})
            hosts = frames.setdefault(kf, {})
            before = hosts.get(expect, 0)
            hosts[expect] = before + d
            if not before or not hosts[expect]:
                touched.add((sw, port))
            if not hosts[expect]:
                del hosts[expect]
                if not hosts:
                    del frames[kf]
                    if not frames:
                        del by_port[port]
        return touched

    # -- detours -------------------------------------------------------------------------------------

    def _decide(self, sw: str, p: int, spare: set[State]) -> None:
        """The detours of ``sw``'s port ``p`` (kept in :attr:`decided`), from the frames it sends."""
        old = self.decided.pop((sw, p), None)
        self.ambiguous.discard((sw, p))
        sent = self.sent.get(sw, {}).get(p)
        keys: list[CheckKey] = []
        alts: list[int] = []
        if sent is not None:
            frames = self._frames(sw, p, sent)
            arrivals = {kf.in_port for kf in sent}
            for q in self._rotated(sw, p):
                if q in arrivals:
                    continue
                for frame, expect in frames.items():
                    key = (sw, p, q, frame, expect)
                    keys.append(key)
                    if not self._check(key):
                        break
                else:
                    alts.append(q)
                    if len(alts) >= self.max_alternatives:
                        break
            self.decided[(sw, p)] = (tuple(alts), tuple(keys))
        if old is not None:
            for key in set(old[1]).difference(keys):
                self._drop_check(key, spare)

    def _frames(self, sw: str, p: int, sent: dict[Frame, dict[Any, int]]) -> dict[Frame, Any]:
        """The frames ``p`` sends, with in_port 0 (checks walk them from another port), and their hosts."""
        frames: dict[Frame, Any] = {}
        for kf, hosts in sent.items():
            (expect, *more) = hosts
            f0 = kf.with_in_port(0)
            if more or frames.get(f0, expect) != expect:
                self.ambiguous.add((sw, p))
                return self._frames_in_order(sw, p)
            frames[f0] = expect
        return frames

    def _frames_in_order(self, sw: str, p: int) -> dict[Frame, Any]:
        """As :meth:`_frames` where one frame stands for several hosts: the last walk's host wins, in the order
        a walk from scratch meets them (sources, then destinations), as a one-pass analysis would."""
        seen: dict[Frame, Any] = {}
        for w in sorted(self.walks):
            expect, _, contribs = self.walks[w]
            for s, port, kf in contribs:
                if s == sw and port == p:
                    seen[kf] = expect
        return {kf.with_in_port(0): expect for kf, expect in seen.items()}

    def _rotated(self, sw: str, p: int) -> tuple[int, ...]:
        """The other fabric ports of ``sw`` in the order they are tried: after p, then around; same link kind
        first (so detours spread)."""
        got = self._order.get((sw, p))
        if got is None:
            fports = self._ports[sw]
            others = sorted(fports)
            k = others.index(p)
            rotated = others[k + 1:] + others[:k]
            rotated.sort(key=lambda q: fports[q].kind != fports[p].kind)  # stable
            got = self._order[(sw, p)] = tuple(rotated)
        return got

    def _check(self, key: CheckKey) -> bool:
        """Does the frame, sent out of q instead of p with the link behind p down, reach its host (a probe: get
        dropped) without coming back to S, using the dead link, looping, punting or flooding?"""
        got = self.checks.get(key)
        if got is not None:
            return got[0]
        fabric, keep = self.fabric, self.keep
        avoid, p, q, frame, expect = key
        peer_p, peer_q = self._ports[avoid][p], self._ports[avoid][q]
        dead = {(avoid, p), (peer_p.node, peer_p.port)}
        sw, fr = peer_q.node, frame.arriving(peer_q.port)
        states = []
        ok = False
        for _ in range(self.bound):
            if sw == avoid:
                break
            step = self._step(sw, fr)
            if keep:
                step.checks.add(key)
                states.append((sw, fr))
            out = step.out
            if out is BAD:
                break
            if out is DROP:
                ok = expect is None
                break
            port, sent = out
            if (sw, port) in dead:
                break
            peer = fabric.peer(sw, port)
            if peer is None:
                ok = expect is None
                break
            if peer.is_host:
                ok = peer.node == expect and sent.vlan_pcp is None
                break
            sw, fr = peer.node, sent.arriving(peer.port)
        self.checks[key] = (ok, tuple(states))
        self.stats["checks_walked"] = self.stats.get("checks_walked", 0) + 1
        return ok

    def _drop_check(self, key: CheckKey, spare: set[State]) -> None:
        got = self.checks.pop(key, None)
        if got is None:
            return
        for sw, frame in got[1]:
            step = self.steps.get(sw, {}).get(frame)
            if step is not None:
                step.checks.discard(key)
                spare.add((sw, frame))


def _table_change(a: Any, b: Any) -> str:
    """How a table's lookups may differ: "same" (same entries), "all" (other fields matched: every lookup may
    differ), "some" (compare each lookup's winner)."""
    if a is None and b is None:
        return "same"
    if a is not None and b is not None and a.entries == b.entries:
        return "same"
    fields_a = a.key_fields if a is not None else ()
    fields_b = b.key_fields if b is not None else ()
    return "some" if fields_a == fields_b and a is not None and b is not None else "all"


def _fabric_src(fabric: Any, sw: str, flows: tuple[FlowSpec, ...]) -> bool:
    """Does an entry of ``sw`` match ``eth_src`` on frames from the fabric (not only from a host port)? Then
    frames are told apart by source; otherwise one frame stands for every source."""
    for f in flows:
        if f.match.eth_src is not None:
            port = f.match.in_port
            peer = fabric.peer(sw, port) if port is not None else None
            if peer is None or not peer.is_host:
                return True
    return False
