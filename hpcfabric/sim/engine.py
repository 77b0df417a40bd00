"""The time-stepped frame-level simulator: state, runs and results around the compiled tick loop.

Model (docs/simulation.md): every tick, (1) frames that finished crossing a link enter their
switch, are looked up in its tables at once (the router: :class:`TableRouter` for compiled
tables, or a reference router of :mod:`hpcfabric.sim.pb`) and are counted in the ingress account
of their (input port, class of service); they may leave ``switch_ns`` later; (2) every ingress
account computes XOFF/XON (PFC, hysteresis) and the upstream port sees that state one link
latency later; (3) PORT_STATE flips follow the pause state seen on each port after the reaction
delay and stay flipped ``pause_hold_ns`` after it ends (``pause_from="egress"``: a port whose own
backlog reaches XOFF counts as paused too, as the Mininet experiment's PAUSE emulator does);
(4) every free output port takes one waiting frame whose next buffer is not paused, where frames
wait as the switch model says (``fifo``, ``voq``, ``shared``: :mod:`hpcfabric.sim.kernel`); (5)
hosts generate frames (Bernoulli per frame time) into a source queue and send the head one when
their access port is not paused.

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
from numba import njit

from hpcfabric.sim import kernel as K
from hpcfabric.sim.params import SimParams
from hpcfabric.sim.tables import Forwarding, SimError
from hpcfabric.sim.traffic import Traffic

__all__ = ["Simulator", "TableRouter", "RunResult", "branch_seed"]


class TableRouter:
    """Forwarding straight from compiled tables (:class:`hpcfabric.sim.tables.Forwarding`)."""

    name = "tables"
    code = 0

    def __init__(self, fw: Forwarding) -> None:
        self.fw = fw
        self.pm = fw.pm
        self.n_classes = fw.n_classes
        self.flippable = fw.flippable

    def groups(self) -> tuple[np.ndarray, ...]:
        z = np.zeros(1, dtype=np.int64)
        return z, np.zeros((1, 1), dtype=np.int64), np.zeros((1, 1), dtype=np.int64), np.zeros(len(self.pm.host_pid), dtype=np.int64)

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


class _FrameView:
    """Frame fields by name (``sim.fr.out[f]``): columns of the kernel's frame rows."""

    def __init__(self, F: np.ndarray) -> None:
        for i, name in enumerate(K.FRAME_FIELDS):
            setattr(self, name, F[:, i])


def _i64(a: Any) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.int64)


def _i32(a: Any) -> np.ndarray:
    """Table lookups as int32 (half the cache footprint; every value fits)."""
    return np.ascontiguousarray(a, dtype=np.int32)


def _aligned_rows(n: int, cols: int, dtype: Any) -> np.ndarray:
    """A zeroed C-contiguous ``(n, cols)`` array starting on a 64-byte boundary: the frame pool, whose
    16 int32 fields then fill exactly one cache line per frame (one miss per frame, not two)."""
    item = np.dtype(dtype).itemsize
    buf = np.zeros(n * cols + 64 // item, dtype=dtype)
    off = (-buf.ctypes.data % 64) // item
    return buf[off: off + n * cols].reshape(n, cols)


def _small(a: Any) -> np.ndarray:
    """Class columns (switch x destination column, the biggest table: 17 MB as int32 at Table III) in
    the smallest integer type that holds them: int8 there (a quarter of the cache misses' footprint)."""
    a = np.asarray(a)
    hi = int(a.max(initial=0))
    lo = int(a.min(initial=0))
    t = np.int8 if -128 <= lo and hi < 128 else np.int16 if -32768 <= lo and hi < 32768 else np.int32
    return np.ascontiguousarray(a, dtype=t)


class Simulator:
    """One run of one router on one fabric (module docstring)."""

    def __init__(self, router: Any, traffic: Traffic, params: SimParams, seed: int = 0, *, trace: bool = False,
                 batch: bool = True) -> None:
        self.r = router
        self.batch = batch  # batched lookups (hpcfabric.sim.kernel_batch); False: one frame at a time, same results
        self.pm = pm = router.pm
        self.tr = traffic
        self.p = params
        self.seed = seed
        self.trace_on = trace
        self.trace: list[np.ndarray] | None = [] if trace else None  # (src, dst, latency ticks) of measured frames
        k = self.k = params.ticks_per_frame
        self.C = C = router.n_classes
        P = pm.n
        self.NA = P * C  # ingress accounts (input port, class)
        self.H = H = len(pm.host_pid)
        t = params.ticks
        delay = np.select([pm.kind == 1, pm.kind == 3], [t(params.host_ns), t(params.global_ns)], t(params.local_ns))
        self.delay = _i64(delay)
        self.D = int(self.delay.max(initial=0)) + 1  # pause history depth
        self.outq = params.output_queue(C)  # frames per output port (iq/iqvc)
        outq = self.outq * k
        if params.switch == "iqvc":  # a frame reaches the wire switch_ns after its grant (hpcfabric.sim.kernel_vc)
            outq += params.ticks(params.switch_ns)
        self.L = int(self.delay.max(initial=0)) + k + 1 + outq  # calendar length
        self.W = int(pm.width.max())
        self.model = K.MODELS[params.switch]
        self.NQ = self.NA * self.W if self.model == 1 else self.NA
        self.net = self._net(traffic)
        self.fab = _i64(np.flatnonzero(pm.peer >= 0))
        self.nf = 0
        self._alloc_frames(max(4096, H * 8))

    # -- setup -------------------------------------------------------------
    def _net(self, tr: Traffic) -> Any:
        fw: Forwarding = self.r.fw
        ch, pm, p = fw.ch, self.pm, self.p
        gidx, gl, land, hg = self.r.groups()
        H = self.H
        if tr.kind == "uniform":
            off = cnt = flat = np.zeros(1, dtype=np.int64)
        else:
            off, cnt, flat = tr.off, tr.cnt, tr.flat
        cum = np.ascontiguousarray(tr.cum if tr.kind == "weighted" else np.zeros(1), dtype=np.float64)
        rate = np.ascontiguousarray(np.broadcast_to(np.asarray(tr.rate, dtype=np.float64), (H,)))
        ports = np.bincount(pm.sw[pm.kind > 0], minlength=len(pm.names))
        pool = _i64(p.shared_frames if p.shared_frames is not None else ports * p.buffer_frames)
        pool = np.broadcast_to(pool, (len(pm.names),)).copy()
        return K.Net(
            _i64(pm.sw), _i64(pm.kind), _i64(pm.peer), self.delay, _i64(pm.pid_base), _i64(pm.width),
            _i32(fw.st_sw), _i32(fw.st_pid), _i32(np.maximum(fw.st_cls, 0)), _i32(ch.state_line), _i64(ch.line_off),
            _i32(fw.host_sw), _i32(ch.host_cls), _small(np.atleast_2d(ch.cls)), _i32(fw.col), _i32(ch.base), _i32(ch.alt),
            _i32(ch.egress_codes), _i64(ch.state_base), _i64(pm.host_pid),
            _i64(gidx), _i64(gl), _i64(land), _i64(hg),
            _i64(off), _i64(cnt), _i64(flat), cum, rate, pool,
        )

    def _alloc_frames(self, n: int) -> None:
        """A pool of ``n`` frames, keeping the first ``self.nf`` (and the free list) of the current one."""
        old = self.nf
        F = _aligned_rows(n, K.NF_COLS, np.int32)
        free = np.zeros(n, dtype=np.int64)
        if old:
            F[:old] = self.frames.F
            nfree = int(self.c[K.C_NFREE])
            free[:nfree] = self.frames.free[:nfree]
            free[nfree: nfree + n - old] = np.arange(n - 1, old - 1, -1)
            self.c[K.C_NFREE] = nfree + n - old
        else:
            free[:] = np.arange(n - 1, -1, -1)
        self.frames, self.nf = K.Frames(F, free), n
        self.fr = _FrameView(F)

    def _state(self, ticks_total: int) -> Any:
        """Queues, accounts, ports and hosts; int32 where it holds (frame indices, counts, ticks): half the
        cache footprint of int64 in the per-frame misses and the per-tick PFC scan, same values."""
        p, P, NA, NQ, H, D, L = self.p, self.pm.n, self.NA, self.NQ, self.H, self.D, self.L
        i32, i64 = np.int32, np.int64
        big = np.iinfo(np.int64).max
        return K.Sw(
            np.full(NQ, -1, dtype=i32), np.full(NQ, -1, dtype=i32), np.zeros(NQ, dtype=i32),
            np.zeros(NQ, dtype=i32), np.zeros(NQ, dtype=i32), np.zeros(NQ, dtype=np.int8),
            np.zeros(NA, dtype=i32), np.zeros(NA, dtype=i32), np.zeros(NA, dtype=np.bool_),
            np.zeros((D, NA), dtype=np.bool_), np.zeros((D, P), dtype=np.bool_), np.zeros(len(self.pm.names), dtype=i64),
            np.zeros(P, dtype=i32), np.zeros(P, dtype=i32), np.zeros(P, dtype=i64), np.zeros(P, dtype=i64),
            np.zeros(P, dtype=i64), np.zeros(P, dtype=i64),
            np.zeros(NQ, dtype=i32), np.zeros(NQ, dtype=i32), np.zeros(NQ, dtype=i32),
            np.zeros(P, dtype=i64), np.zeros(P, dtype=i64),
            np.full(P, big, dtype=i64), np.zeros(P, dtype=i64), np.zeros(P, dtype=np.bool_), np.zeros(P, dtype=np.bool_),
            np.zeros((H, p.source_queue), dtype=i32), np.zeros(H, dtype=i64), np.zeros(H, dtype=i64),
            np.zeros(H, dtype=i64),
            np.zeros((L, P + H), dtype=i32), np.zeros(L, dtype=i64),
            np.zeros(NA, dtype=i64), np.zeros((L, p.rounds * P) if self.model >= 3 else (1, 1), dtype=i64),
            np.zeros(L, dtype=i64),
            *(np.full(NA if self.model == 4 else 1, -1, dtype=i32) for _ in range(2)), np.zeros(NA, dtype=i64),
            np.zeros((4, NA) if self.model == 4 else (4, 1), dtype=i64),
            np.zeros(ticks_total + 2, dtype=i64), np.zeros((1 << 20 if self.trace_on else 1, 3), dtype=i64),
            np.zeros((K.NBT, K.CHUNK), dtype=np.int64),
        )

    def _scalars(self, w0: int, w1: int) -> np.ndarray:
        p = self.p
        g = np.zeros(K.NPARAM, dtype=np.int64)
        router = self.r.code
        flip = bool(getattr(self.r, "flippable", False))
        speedup = p.speedup if p.speedup is not None else (1 if p.switch == "voq" else 0)
        vals = {K.G_MODEL: self.model, K.G_K: self.k, K.G_C: self.C, K.G_W: self.W, K.G_D: self.D, K.G_L: self.L,
                K.G_CAP: p.buffer_frames, K.G_XOFF: p.xoff, K.G_XON: p.xon, K.G_HEADROOM: p.headroom,
                K.G_DSWITCH: p.ticks(p.switch_ns), K.G_SPEEDUP: speedup, K.G_ITERS: p.rounds, K.G_ROUTER: router,
                K.G_FLIP: int(flip), K.G_R: p.ticks(p.reaction_ns), K.G_HOLD: p.ticks(p.pause_hold_ns),
                K.G_EGRESS: int(p.pause_from == "egress"), K.G_W0: w0, K.G_W1: w1,
                K.G_TRAFFIC: {"uniform": 0, "lists": 1, "weighted": 2}[self.tr.kind],
                K.G_THRESH: getattr(self.r, "threshold", 0), K.G_NH: self.H, K.G_TRACE: int(self.trace_on),
                K.G_ALPHA16: int(round(16 * p.shared_alpha)), K.G_OUTQ: self.outq,
                K.G_BATCH: int(self.batch)}
        for i, v in vals.items():
            g[i] = v
        return g

    # -- run ---------------------------------------------------------------
    def run(self, load: float, progress: Callable[[int, int], None] | None = None) -> RunResult:
        w0, w1, end = self._begin(load)
        t0 = time.perf_counter()
        t = self._advance(load, 0, end, w1, end, progress)
        if self.trace is not None:
            self.trace.append(self.s.trace[: int(self.c[K.C_NTRACE])].copy())
        return self._result(load, t, time.perf_counter() - t0, (w0, w1))

    def run_branches(self, load: float, seeds: list[int], progress: Callable[[int, int], None] | None = None) -> list[RunResult]:
        """Replications from one shared warm-up: warm up once with ``self.seed``'s stream, then per seed
        restore that state, reseed the kernel's generator with :func:`branch_seed` and run window and
        drain. A warm-up lengthened by the flip reaction (``Routers.params_for``) goes on from the base
        warm-up in window-long blocks until two agree (:meth:`_settle`) as long as no port has been paused
        (nothing is pending: the state is that of any reaction); once one is, or the blocks do not agree
        within the lengthening, it runs its full length and then until the blocks agree. A network still
        filling towards its first PAUSE (adversarial traffic at a low load) is not steady: ending there
        measured MIN's plateau instead of the reaction. The window starts after the last (agreeing) block.
        Without such a lengthening (COND-ideal, COND-switch; any router with ``--seed-warmup shared``) the
        base warm-up is followed by the same blocks, at most :data:`SETTLE_BLOCKS` of them.
        ``extra``: ``warmup`` = ``"shared"``, ``warmup_ticks``, ``tail_accepted`` = frames delivered per host
        per frame time in the last window-long block of the warm-up (against ``accepted``: steady state)."""
        w0, w1, end = self._begin(load)
        t0 = time.perf_counter()
        p, k = self.p, self.k
        self.settled: bool | None = None  # set by _settle when the warm-up goes on past its base length
        extra = -(-int(p.reaction_ns) // int(p.frame_ns)) * k  # the warm-up's lengthening for the reaction
        B = p.window_slots * k

        def upto(a: int, b: int) -> int:  # nothing more once a deadlock is found
            return a if self.deadlock else self._advance(load, a, b, w1, end, progress)

        if extra >= B:
            full = w0 - B  # the full warm-up's last block starts here
            t = upto(0, max(0, w0 - extra - B))  # the base warm-up's last block is the first compared
            w0, w1, end = self._shift(4 * extra + B, w0, w1, end)  # out of reach while settling: nothing measured
            if not self.s.flip_off.any():
                t = self._settle(load, t, full - t, w1, end, progress, paused=True)
            if not self.settled:  # flips pending (or the network not steady): the full warm-up, then until it settles
                t = self._settle(load, upto(t, full), 3 * extra, w1, end, progress)
        else:  # the base warm-up (its last block the first compared), then until two blocks agree
            t = upto(0, max(0, w0 - B))
            w0, w1, end = self._shift(SETTLE_BLOCKS * B + B, w0, w1, end)  # out of reach while settling
            t = self._settle(load, t, SETTLE_BLOCKS * B, w1, end, progress)
        tail0, d0 = self._block
        w0, w1, end = self._shift(t - w0, w0, w1, end)  # the window starts after the last block
        tail = (int(self.c[K.C_DELIVERED]) - d0) / (self.H * max(1, (t - tail0) / k))
        warm_wall = time.perf_counter() - t0
        snap, stuck = self._snapshot(), self.deadlock
        out = []
        for sd in seeds:
            self._restore(snap)
            self.deadlock = stuck
            _seed(branch_seed(sd))
            t1 = time.perf_counter()
            tb = self._advance(load, t, end, w1, end, progress) if not self.deadlock else t
            if self.trace is not None:
                self.trace.append(self.s.trace[: int(self.c[K.C_NTRACE])].copy())
            res = self._result(load, tb, time.perf_counter() - t1 + warm_wall / len(seeds), (w0, w1))
            res.extra.update(warmup="shared", tail_accepted=tail, branch_seed=sd, warmup_wall_s=warm_wall, warmup_ticks=t,
                             settled=self.settled,
                             simulated_ns=(tb - t + t / len(seeds)) * self.p.tick_ns)
            out.append(res)
        return out

    def _shift(self, d: int, w0: int, w1: int, end: int) -> tuple[int, int, int]:
        """Move the window (and the end) by ``d`` ticks; the kernel's window parameters with it."""
        w0, w1, end = w0 + d, w1 + d, end + d
        self.window = (w0, w1)
        self.g[K.G_W0], self.g[K.G_W1] = w0, w1
        if len(self.s.lat) < end + 2:
            self.s = self.s._replace(lat=np.zeros(end + 2, dtype=np.int64))
        return w0, w1, end

    def _settle(self, load: float, t: int, most: int, w1: int, end: int,
                progress: Callable[[int, int], None] | None, paused: bool = False) -> int:
        """Warm up in window-long blocks from ``t`` until two consecutive blocks agree (delivered per host
        within 2 % and the frames in the network and the hosts' source queues changing by < 1 % of a
        block's deliveries in both), at most ``most`` ticks more, or (``paused``) until a port has been
        paused; returns the tick reached (``self.settled``: whether they agreed; ``self._block``: the last
        block's first tick and the frames delivered before it)."""
        B, t_max = self.p.window_slots * self.k, t + most
        prev: tuple[int, int] | None = None
        self.settled = False
        self._block = (t, int(self.c[K.C_DELIVERED]))
        while t + B <= t_max and not self.deadlock:
            d0, n0 = int(self.c[K.C_DELIVERED]), self._backlog()
            self._block = (t, d0)
            t = self._advance(load, t, t + B, w1, end, progress)
            d, dn = int(self.c[K.C_DELIVERED]) - d0, abs(self._backlog() - n0)
            if paused and self.s.flip_off.any():
                break
            if prev is not None and abs(d - prev[0]) <= 0.02 * max(d, prev[0]) + 1 and max(dn, prev[1]) <= 0.01 * d + 1:
                self.settled = True
                break
            prev = (d, dn)
        return t

    def _begin(self, load: float) -> tuple[int, int, int]:
        """Fresh state for a run at ``load``, the kernel's generator seeded; the window and the end tick."""
        p, k = self.p, self.k
        if not 0.0 <= load <= 1.0:
            raise SimError(f"load must be a fraction of the link rate in [0, 1], got {load}")
        w0 = p.warmup_slots * k
        w1 = w0 + p.window_slots * k
        end = w1 + p.drain_slots * k
        self.window = (w0, w1)
        self.s = self._state(end)
        n, self.nf = self.nf, 0
        self._alloc_frames(n)  # a fresh pool (a Simulator may run more than once)
        self.c = np.zeros(K.NCOUNT, dtype=np.int64)
        self.c[K.C_NFREE] = self.nf
        self.g = self._scalars(w0, w1)
        self.deadlock: list[str] | None = None
        _seed(self.seed)
        return w0, w1, end

    def _snapshot(self) -> tuple[Any, ...]:
        return (self.s._replace(**{f: a.copy() for f, a in self.s._asdict().items()}), self.c.copy(),
                self.frames.F.copy(), self.frames.free.copy(), self.nf)

    def _restore(self, snap: tuple[Any, ...]) -> None:
        s, c, F, free, nf = snap
        self.s = s._replace(**{f: a.copy() for f, a in s._asdict().items()})
        self.c = c.copy()
        F2 = _aligned_rows(nf, K.NF_COLS, np.int32)
        F2[:] = F
        self.frames, self.nf = K.Frames(F2, free.copy()), nf
        self.fr = _FrameView(F2)
        self.deadlock = None

    def _advance(self, load: float, t: int, limit: int, w1: int, end: int,
                 progress: Callable[[int, int], None] | None) -> int:
        """Tick from ``t`` to ``limit`` (or until the measured frames are delivered after the window, or a
        deadlock: ``self.deadlock``); returns the tick reached."""
        p, k = self.p, self.k
        check = max(1, p.stall_slots * k // 2)
        step = min(check, 256) if progress is not None else check
        while t < limit:
            stop = min(limit, (t // step + 1) * step)
            t = int(K.run_ticks(self.net, self.frames, self.s, self.c, self.g, self.fab, t, stop, float(load), self.H + 1))
            if self.c[K.C_NOLINE]:
                self._no_line(int(self.c[K.C_BAD_STATE]))
            if self.c[K.C_NFREE] < self.H + 1:
                self._alloc_frames(self.nf * 2)
                continue
            if t >= w1 and self.c[K.C_OUTSTANDING] == 0:
                break
            if t < stop:
                continue
            if t % check == 0:
                cyc = self._deadlock_cycle(t)
                if cyc:
                    self.deadlock = cyc
                    break
            if progress is not None:
                progress(t, end)
        return t

    def _no_line(self, state: int) -> None:
        ch = self.r.fw.ch
        s, port, slot = ch.decode(np.array([state]))
        raise SimError(f"{ch.names[int(s[0])]}: port {int(port[0])} PCP slot {int(slot[0])} has no decision line "
                       "(a frame reached a state the tables never lead to)")

    # -- views -------------------------------------------------------------
    @property
    def qlen(self) -> np.ndarray:
        """Frames per ingress account (input port x class), whatever the switch model."""
        return self.s.occ + self.s.hr

    def head_of(self, account: int) -> int:
        """The oldest frame waiting in ingress account ``account`` (-1 if none)."""
        fr = self.fr
        qs = np.flatnonzero(self.s.qlen > 0)
        heads = self.s.qhead[qs]
        mine = heads[fr.acct[heads] == account]
        return int(mine[np.argmin(fr.ready[mine])]) if len(mine) else -1

    def _backlog(self) -> int:
        """Frames in the network and in the hosts' source queues."""
        return self.in_network() + int(self.s.sqlen.sum())

    def in_network(self) -> int:
        """Frames in switch buffers or on links, counted where they are."""
        return int(self.s.qlen.sum()) + int(self.c[K.C_INNET])

    # -- deadlock ----------------------------------------------------------
    def _deadlock_cycle(self, t: int) -> list[str] | None:
        import networkx as nx

        s, fr = self.s, self.fr
        stall = self.p.stall_slots * self.k
        act = s.act[: int(self.c[K.C_NACT])]
        stuck = act[(s.qlen[act] > 0) & (t - s.last_move[act] > stall)]
        if not len(stuck):
            return None
        f = s.qhead[stuck]
        o = fr.out[f]
        fab = self.pm.peer[o] >= 0
        waits = np.where(fab, self.pm.peer[np.maximum(o, 0)] * self.C + fr.ncls[f], -1)
        g = nx.DiGraph()
        g.add_edges_from((int(a), int(b)) for a, b in zip(fr.acct[f][fab], waits[fab]))
        try:
            cyc = nx.find_cycle(g)
        except nx.NetworkXNoCycle:
            return None
        return [self.r.channel(int(a) // self.C, int(a) % self.C) for a, _ in cyc]

    def _result(self, load: float, t: int, wall: float, window: tuple[int, int]) -> RunResult:
        hist = self.s.lat
        n = int(hist.sum())
        tick = self.p.tick_ns
        c = self.c
        if n:
            ticks = np.arange(len(hist))
            mean = float((hist * ticks).sum() / n * tick)
            p99 = float(np.searchsorted(np.cumsum(hist), 0.99 * n) * tick)
        else:
            mean = p99 = float("nan")
        res = RunResult(
            load=load, hosts=self.H, latency_ns=mean, p99_ns=p99,
            accepted=int(c[K.C_ACCEPTED]) / (self.H * self.p.window_slots),
            measured=n, unfinished=int(c[K.C_OUTSTANDING]),
            generated=int(c[K.C_GEN]), refused=int(c[K.C_REFUSED]), injected=int(c[K.C_INJECTED]),
            delivered=int(c[K.C_DELIVERED]), in_network=self.in_network(), bad=int(c[K.C_BAD]),
            overflow=int(c[K.C_OVERFLOW]), deadlock=self.deadlock, ticks=t, wall_s=wall, hops=int(c[K.C_HOPS]),
            flips=int(c[K.C_FLIPS]),
        )
        res.extra["queued_at_hosts"] = int(self.s.sqlen.sum())
        res.extra["lost"] = res.bad + res.overflow
        res.extra["simulated_ns"] = t * tick
        res.extra["warmup_ticks"] = window[0]
        res.extra["switch"] = self.p.switch
        res.extra["max_pool_used"] = int(c[K.C_MAXPOOL])
        res.extra["max_headroom_used"] = int(c[K.C_MAXHR])
        if res.bad:
            a = int(c[K.C_BAD_ACCT])
            res.extra["bad_example"] = self.r.channel(a // self.C, a % self.C)
        return res


#: the most window-long blocks a shared warm-up without a reaction lengthening runs past its base length
#: (a saturated point never settles: its backlog grows; 40 blocks = 20,000 frame times with the defaults)
SETTLE_BLOCKS = 40


def branch_seed(seed: int) -> int:
    """The kernel's seed for replication ``seed`` after a shared warm-up (a stream apart from the
    warm-up's, which uses the small seeds themselves)."""
    return (0x9E3779B1 * (int(seed) + 1)) & 0xFFFFFFFF


def _seed(seed: int) -> None:
    """Seed numpy's generator inside compiled code (the kernel's draws)."""
    _seed_kernel(int(seed))


@njit(cache=True)
def _seed_kernel(seed: int) -> None:
    np.random.seed(seed)
