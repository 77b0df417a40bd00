"""The time-stepped frame-level simulator (numpy, vectorised over ports and frames).

Model (docs/simulation.md): every tick, (1) frames that finished crossing a link enter the
input buffer of their (port, class of service) at the next switch and are looked up in its
tables right away (the router: :class:`TableRouter` for compiled tables, or the PB reference
router); they may leave ``switch_ns`` later; (2) every input buffer computes XOFF/XON from its
occupancy (hysteresis) and the upstream port sees that PAUSE/PFC state one link latency later;
(3) PORT_STATE flips follow the pause state seen on each port after the reaction delay and stay
flipped ``pause_hold_ns`` after it ends (``pause_from="egress"``: a port whose own backlog -- frames
of this switch waiting for it -- reaches XOFF counts as paused too, as the Mininet experiment's
PAUSE emulator does); (4) every output port that is free (one frame time per
frame) takes the head frame of one input buffer waiting for it (random arbitration) unless the
next buffer of that class is paused; (5) hosts generate frames (Bernoulli per frame time) into a
source queue and send the head one when their access port is not paused.

Lossless: a buffer never overflows when the headroom covers a PAUSE round trip
(:attr:`SimParams.headroom`); ``overflow`` counts violations. Deadlock: a queue whose head has
not moved for ``stall_slots`` is followed through the buffers its head waits for; a cycle is
reported with its channels and ends the run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from hpcfabric.sim.params import SimParams
from hpcfabric.sim.tables import Forwarding, SimError
from hpcfabric.sim.traffic import Traffic

__all__ = ["Simulator", "TableRouter", "RunResult"]


class TableRouter:
    """Forwarding straight from compiled tables (:class:`hpcfabric.sim.tables.Forwarding`)."""

    name = "tables"

    def __init__(self, fw: Forwarding) -> None:
        self.fw = fw
        self.pm = fw.pm
        self.n_classes = fw.n_classes
        self.flippable = fw.flippable

    def inject(self, sim: "Simulator", f: np.ndarray, hosts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        st = self.fw.host_state(hosts)
        return st, self.fw.state_class(st)

    def route(self, sim: "Simulator", f: np.ndarray, t: int, flipped: np.ndarray | None
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(output pid, next state, class at the next buffer, bad) of frames ``f`` just arrived."""
        out, nxt, bad = self.fw.decide(sim.state[f], sim.dst[f], flipped)
        ncls = np.where(nxt >= 0, self.fw.state_class(np.maximum(nxt, 0)), 0)
        return out, nxt, ncls, bad

    def in_pid(self, state: np.ndarray) -> np.ndarray:
        return self.fw.state_pid(state)

    def channel(self, pid: int, cls: int) -> str:
        pm = self.pm
        return f"{pm.names[int(pm.sw[pid])]}:{int(pm.port[pid])}@class{cls}"


@dataclass
class RunResult:
    load: float
    hosts: int
    latency_ns: float  # mean over frames generated in the window and delivered
    latency_ci: float = 0.0  # filled by the sweep (over seeds)
    p99_ns: float = 0.0
    accepted: float = 0.0  # frames delivered in the window per host per frame time (fraction of link rate)
    measured: int = 0
    unfinished: int = 0  # measured frames not delivered when the drain ended
    generated: int = 0
    refused: int = 0  # generated while the source queue was full
    injected: int = 0
    delivered: int = 0
    in_network: int = 0
    bad: int = 0  # frames the tables dropped/punted/flooded/misdelivered
    overflow: int = 0  # frames that arrived at a full buffer (lossless violated)
    deadlock: list[str] | None = None
    ticks: int = 0
    wall_s: float = 0.0
    hops: int = 0  # frame-hops moved (speed figure)
    flips: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def conserved(self) -> bool:
        """Every injected frame delivered, lost (``bad``/``overflow``) or counted in a buffer or on a
        link, and every generated one injected, refused or still at its host."""
        return self.injected == self.delivered + self.in_network + self.bad + self.overflow and \
            self.generated == self.injected + self.refused + self.extra.get("queued_at_hosts", 0)


class Simulator:
    """One run of one router on one fabric (module docstring)."""

    def __init__(self, router: Any, traffic: Traffic, params: SimParams, seed: int = 0, *, trace: bool = False) -> None:
        self.r = router
        self.trace: list[np.ndarray] | None = [] if trace else None  # (src, dst, latency ticks) of measured frames
        self.pm = pm = router.pm
        self.tr = traffic
        self.p = params
        self.rng = np.random.default_rng(seed)
        k = self.k = params.ticks_per_frame
        self.C = C = router.n_classes
        P = pm.n
        self.Q = P * C
        self.cap = params.buffer_frames
        self.H = len(pm.host_pid)
        # per pid latency of the link behind it (ticks)
        t = params.ticks
        self.delay = np.select([pm.kind == 1, pm.kind == 3], [t(params.host_ns), t(params.global_ns)], t(params.local_ns))
        self.delay = self.delay.astype(np.int64)
        self.d_switch = t(params.switch_ns)
        self.D = int(self.delay.max(initial=0)) + 1  # pause history depth
        self.L = int(self.delay.max(initial=0)) + k + 1  # calendar length
        # frames
        self._grow(max(1024, self.H * 4))
        # queues
        self.qbuf = np.zeros((self.Q, self.cap), dtype=np.int32)
        self.qhead = np.zeros(self.Q, dtype=np.int64)
        self.qlen = np.zeros(self.Q, dtype=np.int64)
        self.last_move = np.zeros(self.Q, dtype=np.int64)
        self.xoff = np.zeros(self.Q, dtype=bool)
        self.hist = np.zeros((self.D, self.Q), dtype=bool)
        self.hist_any = np.zeros((self.D, P), dtype=bool)  # per input pid: some class paused
        self.busy = np.zeros(P, dtype=np.int64)  # output port free from this tick
        self.winner = np.zeros(P, dtype=np.int64)
        self.demand = np.zeros(P, dtype=np.int64)  # frames in this switch's buffers decided for the port
        # host source queues
        SQ = params.source_queue
        self.sqbuf = np.zeros((self.H, SQ), dtype=np.int32)
        self.sqhead = np.zeros(self.H, dtype=np.int64)
        self.sqlen = np.zeros(self.H, dtype=np.int64)
        self.hbusy = np.zeros(self.H, dtype=np.int64)
        # flips
        self.flip_on = np.full(P, np.iinfo(np.int64).max, dtype=np.int64)
        self.flip_off = np.zeros(P, dtype=np.int64)
        self.was_paused = np.zeros(P, dtype=bool)
        self.R = t(params.reaction_ns)
        self.hold = t(params.pause_hold_ns)
        self.fabric_pids = np.flatnonzero(pm.peer >= 0)
        self.cal: list[list[np.ndarray]] = [[] for _ in range(self.L)]
        self.stats = dict(generated=0, refused=0, injected=0, delivered=0, bad=0, overflow=0, hops=0, flips=0)
        self.lat: list[np.ndarray] = []
        self.accepted_window = 0
        self.deadlock: list[str] | None = None

    # -- frame pool --------------------------------------------------------
    def _grow(self, n: int) -> None:
        old = getattr(self, "nf", 0)
        names = {"dst": np.int64, "src": np.int64, "tgen": np.int64, "state": np.int64, "out": np.int64,
                 "nstate": np.int64, "ncls": np.int64, "ready": np.int64, "aux": np.int64, "aux2": np.int64, "q": np.int64}
        for name, dt in names.items():
            a = np.zeros(n, dtype=dt)
            if old:
                a[:old] = getattr(self, name)
            setattr(self, name, a)
        free = np.arange(n - 1, old - 1, -1, dtype=np.int64)
        self.free = free if not old else np.concatenate([free, self.free[: self.nfree]])
        self.nfree = len(self.free)
        self.nf = n

    def _alloc(self, m: int) -> np.ndarray:
        if m > self.nfree:
            self._grow(max(self.nf * 2, self.nf + m))
        self.nfree -= m
        return self.free[self.nfree : self.nfree + m][::-1].copy()

    def _release(self, f: np.ndarray) -> None:
        m = len(f)
        if self.nfree + m > len(self.free):
            self.free = np.concatenate([self.free, np.zeros(m, dtype=np.int64)])
        self.free[self.nfree : self.nfree + m] = f
        self.nfree += m

    # -- one tick ----------------------------------------------------------
    def _arrivals(self, t: int, measure: tuple[int, int]) -> None:
        slot = self.cal[t % self.L]
        if not slot:
            return
        f = np.concatenate(slot) if len(slot) > 1 else slot[0]
        self.cal[t % self.L] = []
        home = self.nstate[f] < 0
        if home.any():
            g = f[home]
            self.stats["delivered"] += len(g)
            tg = self.tgen[g]
            m = (tg >= measure[0]) & (tg < measure[1])
            self.lat.append((t - tg[m]).astype(np.int64))
            if self.trace is not None:
                self.trace.append(np.stack([self.src[g[m]], self.dst[g[m]], t - tg[m]], axis=1))
            self.outstanding -= int(m.sum())
            if measure[0] <= t < measure[1]:
                self.accepted_window += len(g)
            self._release(g)
            f = f[~home]
        if not len(f):
            return
        self.state[f] = self.nstate[f]
        q = self.r.in_pid(self.state[f]) * self.C + self.ncls[f]
        self.q[f] = q
        flipped = self.flipped if self.r.flippable else None
        out, nxt, ncls, bad = self.r.route(self, f, t, flipped)
        if bad.any():
            self.stats["bad"] += int(bad.sum())
            self.bad_example = (int(f[bad][0]), self.r.channel(int(q[bad][0] // self.C), int(q[bad][0] % self.C)))
            self._lose(f[bad])
            f, q, out, nxt, ncls = f[~bad], q[~bad], out[~bad], nxt[~bad], ncls[~bad]
        self.out[f], self.nstate[f], self.ncls[f] = out, nxt, ncls
        self.ready[f] = t + self.d_switch
        full = self.qlen[q] >= self.cap
        if full.any():  # lossless violated: counted, the frame is lost
            self.stats["overflow"] += int(full.sum())
            self._lose(f[full])
            f, q = f[~full], q[~full]
        self.qbuf[q, (self.qhead[q] + self.qlen[q]) % self.cap] = f
        self.qlen[q] += 1
        self.demand += np.bincount(self.out[f], minlength=len(self.demand))

    def _lose(self, f: np.ndarray) -> None:
        tg = self.tgen[f]
        self.outstanding -= int(((tg >= self.window[0]) & (tg < self.window[1])).sum())
        self._release(f)

    def _pause(self, t: int) -> None:
        occ = self.qlen
        self.xoff = np.where(occ >= self.p.xoff, True, np.where(occ <= self.p.xon, False, self.xoff))
        self.hist[t % self.D] = self.xoff
        if self.r.flippable:
            self.hist_any[t % self.D] = self.xoff.reshape(-1, self.C).any(axis=1)

    def _seen_paused(self, t: int, pid: np.ndarray, cls: np.ndarray) -> np.ndarray:
        """Is the buffer (peer of ``pid``, ``cls``) paused as the sender on ``pid`` sees it now?"""
        return self.hist[(t - self.delay[pid]) % self.D, self.pm.peer[pid] * self.C + cls]

    def _flips(self, t: int) -> None:
        pids = self.fabric_pids
        seen = self.hist_any[(t - self.delay[pids]) % self.D, self.pm.peer[pids]]
        if self.p.pause_from == "egress":  # the Mininet experiment's PAUSE emulator: the sender's own backlog
            seen |= self.demand[pids] >= self.p.xoff
        if self.R == 0 and self.hold == 0:
            now = seen
        else:
            start = seen & ~self.was_paused[pids] & (self.flip_off[pids] <= t)
            self.flip_on[pids[start]] = t + self.R
            self.flip_off[pids[seen]] = t + self.R + max(self.hold, 1)
            now = (self.flip_on[pids] <= t) & (t < self.flip_off[pids])
        self.was_paused[pids] = seen
        prev = self.flipped[pids]
        self.stats["flips"] += int((now & ~prev).sum())
        self.flipped[pids] = now

    def _switching(self, t: int) -> None:
        q = np.flatnonzero(self.qlen)
        if not len(q):
            return
        f = self.qbuf[q, self.qhead[q]]
        o = self.out[f]
        ok = (self.ready[f] <= t) & (self.busy[o] <= t)
        q, f, o = q[ok], f[ok], o[ok]
        fab = self.pm.peer[o] >= 0
        if fab.any():
            blocked = np.zeros(len(o), dtype=bool)
            blocked[fab] = self._seen_paused(t, o[fab], self.ncls[f[fab]])
            q, f, o = q[~blocked], f[~blocked], o[~blocked]
        if not len(q):
            return
        # random arbitration per output: candidates written in random order, the last write wins
        perm = self.rng.permutation(len(o))
        self.winner[o[perm]] = perm
        w = np.flatnonzero(self.winner[o] == np.arange(len(o)))
        q, f, o = q[w], f[w], o[w]
        self.qhead[q] = (self.qhead[q] + 1) % self.cap
        self.qlen[q] -= 1
        self.last_move[q] = t
        self.busy[o] = t + self.k
        self.demand[o] -= 1
        self.stats["hops"] += len(f)
        self._schedule(f, t + self.k + self.delay[o])

    def _schedule(self, f: np.ndarray, at: np.ndarray) -> None:
        for a in np.unique(at):
            self.cal[int(a) % self.L].append(f[at == a])

    def _hosts(self, t: int, generate: bool, load: float, measure: tuple[int, int]) -> None:
        H = self.H
        if generate and t % self.k == 0:
            gen = np.flatnonzero(self.rng.random(H) < load * self.tr.rate)
            if len(gen):
                self.stats["generated"] += len(gen)
                room = self.sqlen[gen] < self.sqbuf.shape[1]
                self.stats["refused"] += int((~room).sum())
                gen = gen[room]
                f = self._alloc(len(gen))
                self.src[f] = gen
                self.dst[f] = self.tr.sample(gen, self.rng)
                self.tgen[f] = t
                if measure[0] <= t < measure[1]:
                    self.outstanding += len(f)
                self.aux[f] = -1
                self.aux2[f] = 0
                self.sqbuf[gen, (self.sqhead[gen] + self.sqlen[gen]) % self.sqbuf.shape[1]] = f
                self.sqlen[gen] += 1
        h = np.flatnonzero((self.sqlen > 0) & (self.hbusy <= t))
        if not len(h):
            return
        f = self.sqbuf[h, self.sqhead[h]]
        st, cls = self.r.inject(self, f, h)
        pid = self.pm.host_pid[h]
        paused = self.hist[(t - self.delay[pid]) % self.D, self.r.in_pid(st) * self.C + cls]
        h, f, st, cls, pid = h[~paused], f[~paused], st[~paused], cls[~paused], pid[~paused]
        self.sqhead[h] = (self.sqhead[h] + 1) % self.sqbuf.shape[1]
        self.sqlen[h] -= 1
        self.hbusy[h] = t + self.k
        self.nstate[f], self.ncls[f] = st, cls
        self.stats["injected"] += len(f)
        self._schedule(f, t + self.k + self.delay[pid])

    # -- deadlock ----------------------------------------------------------
    def _deadlock_cycle(self, t: int) -> list[str] | None:
        import networkx as nx

        stall = self.p.stall_slots * self.k
        stuck = np.flatnonzero((self.qlen > 0) & (t - self.last_move > stall))
        if not len(stuck):
            return None
        f = self.qbuf[stuck, self.qhead[stuck]]
        o = self.out[f]
        fab = self.pm.peer[o] >= 0
        waits = np.where(fab, self.pm.peer[np.maximum(o, 0)] * self.C + self.ncls[f], -1)
        g = nx.DiGraph()
        g.add_edges_from((int(a), int(b)) for a, b in zip(stuck[fab], waits[fab]))
        try:
            cyc = nx.find_cycle(g)
        except nx.NetworkXNoCycle:
            return None
        return [self.r.channel(int(a) // self.C, int(a) % self.C) for a, _ in cyc]

    # -- run ---------------------------------------------------------------
    def run(self, load: float, progress: Callable[[int, int], None] | None = None) -> RunResult:
        p, k = self.p, self.k
        if not 0.0 <= load <= 1.0:
            raise SimError(f"load must be a fraction of the link rate in [0, 1], got {load}")
        w0 = p.warmup_slots * k
        w1 = w0 + p.window_slots * k
        end = w1 + p.drain_slots * k
        self.flipped = np.zeros(self.pm.n, dtype=bool)
        self.window = (w0, w1)
        self.outstanding = 0
        t0 = time.perf_counter()
        check = max(1, p.stall_slots * k // 2)
        t = 0
        while t < end:
            self._arrivals(t, (w0, w1))
            self._pause(t)
            if self.r.flippable:
                self._flips(t)
            self._switching(t)
            self._hosts(t, True, load, (w0, w1))
            t += 1
            if t >= w1 and self.outstanding == 0:
                break
            if t % check == 0:
                cyc = self._deadlock_cycle(t)
                if cyc:
                    self.deadlock = cyc
                    break
            if progress is not None and t % 256 == 0:
                progress(t, end)
        return self._result(load, t, time.perf_counter() - t0, (w0, w1))

    def in_network(self) -> int:
        """Frames in switch buffers or on links, counted where they are."""
        return int(self.qlen.sum()) + sum(len(a) for slot in self.cal for a in slot)

    def _result(self, load: float, t: int, wall: float, window: tuple[int, int]) -> RunResult:
        lat = np.concatenate(self.lat) if self.lat else np.zeros(0, dtype=np.int64)
        tick = self.p.tick_ns
        s = self.stats
        res = RunResult(
            load=load, hosts=self.H,
            latency_ns=float(lat.mean() * tick) if len(lat) else float("nan"),
            p99_ns=float(np.percentile(lat, 99) * tick) if len(lat) else float("nan"),
            accepted=self.accepted_window / (self.H * self.p.window_slots),
            measured=len(lat), unfinished=self.outstanding,
            generated=s["generated"], refused=s["refused"], injected=s["injected"], delivered=s["delivered"],
            in_network=self.in_network(), bad=s["bad"], overflow=s["overflow"], deadlock=self.deadlock, ticks=t,
            wall_s=wall, hops=s["hops"], flips=s["flips"],
        )
        res.extra["queued_at_hosts"] = int(self.sqlen.sum())
        res.extra["lost"] = s["bad"] + s["overflow"]
        res.extra["simulated_ns"] = t * tick
        return res
