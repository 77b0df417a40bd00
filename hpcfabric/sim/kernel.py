"""The simulator's compiled tick loop (numba): arrivals, PFC, flips, switching, hosts.

:func:`run_ticks` advances one run from tick ``t`` to ``t_end`` (or until the frame pool runs
low, a frame met a state without a decision line, or every measured frame is delivered) over the
arrays of :class:`hpcfabric.sim.engine.Simulator`, grouped in namedtuples: :data:`Net` (the fabric
and the router's lookups, read-only), :data:`Frames` (the frame pool), :data:`Sw` (queues, ingress
accounts, ports, hosts), ``c`` (int64 counters, ``C_*``) and ``g`` (int64 parameters, ``G_*``).
The tuples are unpacked once per call: the per-frame helpers take plain arrays (a tuple of arrays
passed per frame costs a reference count per member). The model is docs/simulation.md's; the
switch models differ in where a frame waits and which frames may leave:

* ``fifo`` (0): a FIFO per (input port, class); its head frame requests its output;
* ``voq`` (1): a queue per (input port, class, output port): every queue's head requests;
* ``shared`` (2): a queue per (output port, class) in a switch-wide shared buffer: output-queued;
* ``iq`` (3): BookSim2's ``iq_router``: fifo's queues, ``iterations`` rounds per frame time of a
  separable input-first allocation (each input port one of its requests, each output one of those),
  into an output queue of ``G_OUTQ`` frame times per port (frames granted ahead of the wire).

fifo and voq frames compete for outputs in rounds of grants (each free output one requester at
random) and accepts (each input port at most ``speedup`` frames per frame time, 0 = no limit).
Ingress accounting (PFC) is per (input port, class) in every model. With ``G_BATCH`` the lookups of
the arrivals and the reads of the switching scan and the grants run over chunks of frames first
(:mod:`hpcfabric.sim.kernel_batch`: overlapped cache misses); without it one frame at a time (the
reference path): the same results bit for bit.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
from numba import njit

from hpcfabric.sim import kernel_ops as ops
from hpcfabric.sim.kernel_batch import CHUNK, decide_chunk, touch_accounts, touch_grants, touch_scan
from hpcfabric.sim.kernel_ops import ahead, back, cal, decide, draw, pfc, pop, push, sample, ugal_minimal
from hpcfabric.sim import kernel_vc as vc

__all__ = ["Net", "Frames", "Sw", "FRAME_FIELDS", "NF_COLS", "run_ticks", "MODELS", "NCOUNT", "NPARAM", "NBT", "CHUNK"]

MODELS = {"fifo": 0, "voq": 1, "shared": 2, "iq": 3, "iqvc": 4}

Net = namedtuple("Net", [
    "sw", "kind", "peer", "delay", "pid_base", "width",  # per pid
    "st_sw", "st_pid", "st_cls", "state_line", "line_off", "host_sw", "host_cls", "tcls", "col", "base", "alt",
    "egress", "state_base", "host_pid",  # table lookups (hpcfabric.sim.tables.Forwarding)
    "gidx", "gl", "land", "host_group",  # PB / VAL-R (hpcfabric.sim.pb): per switch x group
    "t_off", "t_cnt", "t_flat", "t_cum", "t_rate",  # destinations and per-host rate (hpcfabric.sim.traffic)
    "pool",  # shared buffer per switch
])
#: a frame is one row of ``Frames.F``, int32 (its 16 fields one 64-byte cache line: the pool is aligned)
FRAME_FIELDS = ("dst", "src", "tgen", "state", "out", "nstate", "ncls", "ready", "aux", "aux2", "acct", "nxt", "inhr")
(F_DST, F_SRC, F_TGEN, F_STATE, F_OUT, F_NSTATE, F_NCLS, F_READY, F_AUX, F_AUX2, F_ACCT, F_NXT, F_INHR) = range(13)
assert F_NXT == ops.F_NXT
NF_COLS = 16
Frames = namedtuple("Frames", ["F", "free"])
Sw = namedtuple("Sw", [
    "qhead", "qtail", "qlen", "last_move", "act", "inact",  # queues (linked lists through Frames.nxt)
    "occ", "hr", "xoff", "hist", "hist_any", "pool_used",  # ingress accounts, PFC, shared pool per switch
    "busy", "demand", "cnt", "grant", "in_used", "touched",  # ports
    "req_q", "req_o", "req_in", "in_pick", "in_list",  # requests of one tick, iq's input-first picks
    "flip_on", "flip_off", "was_paused", "flipped",  # PORT_STATE flips
    "sqbuf", "sqhead", "sqlen", "hbusy",  # host source queues
    "cal_buf", "cal_n",  # calendar of link arrivals: per slot the frames arriving then (at most one per port and host)
    "cred", "cr_buf", "cr_n",  # iq/iqvc: credits in use per ingress account (sender's view), credit returns per slot
    "ovc", "vhold", "vsince", "rr",  # iqvc: input VC holding each output VC, output VC each input VC holds, since (kernel_vc)
    "lat", "trace",  # measured latencies (histogram in ticks), (src, dst, ticks) of measured frames
    "bt",  # scratch of the batched lookups (hpcfabric.sim.kernel_batch): NBT rows of CHUNK
])
NBT = 13

(C_GEN, C_REFUSED, C_INJECTED, C_DELIVERED, C_BAD, C_OVERFLOW, C_HOPS, C_FLIPS, C_ACCEPTED, C_OUTSTANDING, C_NFREE,
 C_NACT, C_NTRACE, C_BAD_STATE, C_BAD_ACCT, C_NOLINE, C_INNET, C_MAXPOOL, C_MAXHR) = range(19)
NCOUNT = 19
(G_MODEL, G_K, G_C, G_W, G_D, G_L, G_CAP, G_XOFF, G_XON, G_HEADROOM, G_DSWITCH, G_SPEEDUP, G_ITERS, G_ROUTER,
 G_FLIP, G_R, G_HOLD, G_EGRESS, G_W0, G_W1, G_TRAFFIC, G_THRESH, G_NH, G_TRACE, G_ALPHA16, G_OUTQ, G_BATCH) = range(27)
NPARAM = 27
SLOT_BITS, DELIVER, PCP_SLOTS = ops.SLOT_BITS, ops.DELIVER, ops.PCP_SLOTS
assert (F_OUT, F_NCLS, F_AUX2, F_ACCT) == (vc.F_OUT, vc.F_NCLS, vc.F_AUX2, vc.F_ACCT)
assert (C_HOPS, C_NACT, C_INNET) == (vc.C_HOPS, vc.C_NACT, vc.C_INNET)


@njit(cache=True, error_model="numpy")
def run_ticks(n, fr, s, c, g, fab, t, t_end, load, min_free):
    """Advance from tick ``t`` to at most ``t_end``; returns the next tick (module docstring)."""
    # -- unpack ------------------------------------------------------------
    sw_of, kind, peer, delay, pid_base, width = n.sw, n.kind, n.peer, n.delay, n.pid_base, n.width
    st_sw, st_pid, st_cls, state_line, line_off = n.st_sw, n.st_pid, n.st_cls, n.state_line, n.line_off
    host_sw, host_cls, tcls, col, base, alt = n.host_sw, n.host_cls, n.tcls, n.col, n.base, n.alt
    egress, state_base, host_pid = n.egress, n.state_base, n.host_pid
    gidx, gl, land, host_group = n.gidx, n.gl, n.land, n.host_group
    t_off, t_cnt, t_flat, t_cum, t_rate, pool = n.t_off, n.t_cnt, n.t_flat, n.t_cum, n.t_rate, n.pool
    F, free = fr.F, fr.free
    qhead, qtail, qlen, last_move, act, inact = s.qhead, s.qtail, s.qlen, s.last_move, s.act, s.inact
    occ, hr, xoff, hist, hist_any, pool_used = s.occ, s.hr, s.xoff, s.hist, s.hist_any, s.pool_used
    busy, demand, cnt, grant, in_used, touched = s.busy, s.demand, s.cnt, s.grant, s.in_used, s.touched
    req_q, req_o, req_in, in_pick, in_list = s.req_q, s.req_o, s.req_in, s.in_pick, s.in_list
    flip_on, flip_off, was_paused, flipped = s.flip_on, s.flip_off, s.was_paused, s.flipped
    sqbuf, sqhead, sqlen, hbusy, cal_buf, cal_n, lat, trace = (s.sqbuf, s.sqhead, s.sqlen, s.hbusy, s.cal_buf,
                                                               s.cal_n, s.lat, s.trace)
    cred, cr_buf, cr_n, ovc, vhold, vsince, rr = s.cred, s.cr_buf, s.cr_n, s.ovc, s.vhold, s.vsince, s.rr
    model, K, C, W, D, L = g[G_MODEL], g[G_K], g[G_C], g[G_W], g[G_D], g[G_L]
    cap, XOFF, XON, headroom, dswitch = g[G_CAP], g[G_XOFF], g[G_XON], g[G_HEADROOM], g[G_DSWITCH]
    router, use_flips, R, hold, egress_pause = g[G_ROUTER], g[G_FLIP] != 0, g[G_R], g[G_HOLD], g[G_EGRESS] != 0
    w0, w1, traffic, thresh, H, tracing, alpha16 = g[G_W0], g[G_W1], g[G_TRAFFIC], g[G_THRESH], g[G_NH], g[G_TRACE], g[G_ALPHA16]
    S = g[G_SPEEDUP] if model < 2 else 0
    rounds = g[G_ITERS] if S > 0 or model >= 3 else 1
    outq = g[G_OUTQ] * K if model >= 3 else 0  # iq/iqvc: an output takes frames while its queue is shorter
    NP = hist_any.shape[1]
    NG = gl.shape[1]
    SQ = sqbuf.shape[1]
    LATN = lat.shape[0]
    batch = g[G_BATCH] != 0  # the batched lookups (kernel_batch); else one frame at a time (the reference)
    bt = s.bt
    b_f, b_st, b_dst, b_sw, b_line, b_cls, b_o, b_nx, b_code, b_pid, b_ncls, b_own = (
        bt[0], bt[1], bt[2], bt[3], bt[4], bt[5], bt[6], bt[7], bt[8], bt[9], bt[10], bt[11])
    flips_in_tables = use_flips and router == 0
    hs = np.empty((H, 4), dtype=np.int64)  # per host, fixed: access state, ingress account, class, link delay
    for h in range(H):
        pid = host_pid[h]
        swi = sw_of[pid]
        st = state_base[swi] + (pid - pid_base[swi]) * PCP_SLOTS
        cls = st_cls[st] if router == 0 else 0
        hs[h, 0], hs[h, 1], hs[h, 2], hs[h, 3] = st, st_pid[st] * C + cls, cls, delay[pid]
    sink = 0
    while t < t_end:
        if c[C_NFREE] < min_free:
            return t
        # -- 1. arrivals: delivered at a host, or looked up and queued at a switch; iq: credits returned
        slot = t % L
        if model >= 3:
            for i in range(cr_n[slot]):
                cred[cr_buf[slot, i]] -= 1
            cr_n[slot] = 0
        n_arr = cal_n[slot]
        cal_n[slot] = 0
        cal_row = cal_buf[slot]
        for ci in range(n_arr):
            i = ci % CHUNK
            if batch and i == 0:
                c1 = min(n_arr, ci + CHUNK)
                decide_chunk(cal_row, ci, c1, F, st_sw, st_pid, state_line, line_off, host_sw, host_cls, tcls, col, base,
                             alt, width, pid_base, egress, state_base, flipped, flips_in_tables, b_f, b_st, b_dst, b_sw,
                             b_line, b_cls, b_o, b_nx, b_code, b_pid, b_own, router, sw_of, kind, gidx, host_group)
                sink += touch_accounts(c1 - ci, b_f, b_st, b_pid, b_o, b_nx, b_code, F, st_cls, C, W, model, sw_of,
                                       pid_base, occ, hr, pool_used, demand, qlen, qhead, qtail, inact, b_ncls, b_dst, router)
            f = cal_row[ci]
            c[C_INNET] -= 1
            if F[f, F_NSTATE] < 0:
                c[C_DELIVERED] += 1
                tg = F[f, F_TGEN]
                if w0 <= tg < w1:
                    lt = t - tg
                    lat[min(lt, LATN - 1)] += 1
                    c[C_OUTSTANDING] -= 1
                    if tracing and c[C_NTRACE] < trace.shape[0]:
                        i = c[C_NTRACE]
                        trace[i, 0] = F[f, F_SRC]
                        trace[i, 1] = F[f, F_DST]
                        trace[i, 2] = lt
                        c[C_NTRACE] += 1
                if w0 <= t < w1:
                    c[C_ACCEPTED] += 1
                free[c[C_NFREE]] = f
                c[C_NFREE] += 1
                continue
            st = F[f, F_NSTATE]
            F[f, F_STATE] = st
            a = st_pid[st] * C + F[f, F_NCLS]
            F[f, F_ACCT] = a
            # route
            eff = F[f, F_DST]
            if router != 0:
                in_pid = st_pid[st]
                swi = sw_of[in_pid]
                grp = gidx[swi]
                target = F[f, F_AUX]
                if router == 1:  # PB (hpcfabric.sim.pb)
                    if target >= 0 and host_group[target] == grp:
                        target = -2
                    if kind[in_pid] == 1 and target == -1:
                        d = host_group[eff]
                        target = -2
                        if grp != d and NG > 2:
                            inter = np.random.randint(0, NG - 2)
                            if inter >= min(grp, d):
                                inter += 1
                            if inter >= max(grp, d):
                                inter += 1
                            gm, gn = gl[swi, d], gl[swi, inter]
                            q_min = demand[gm] if gm >= 0 else 0
                            q_non = demand[gn] if gn >= 0 else 0
                            if q_min > 2 * q_non + thresh and land[swi, inter] >= 0:
                                target = land[swi, inter]
                else:  # VAL-R / UGAL-L: BookSim2's val_dragonflynew / ugal_dragonflynew
                    if kind[in_pid] == 1 and target == -1:
                        if host_group[eff] == grp:
                            target = -3
                        else:
                            target = np.random.randint(0, host_sw.shape[0])
                            if host_group[target] == grp:
                                target = -2
                            elif router == 3 and ugal_minimal(st_sw, state_line, line_off, host_sw, host_cls, tcls,
                                                               col, base, alt, width, pid_base, egress, state_base,
                                                               flipped, st, eff, target, demand, peer, occ, hr, C,
                                                               thresh, cred, model >= 3):
                                target = -2
                    if target >= 0 and host_sw[target] == swi:
                        target = -2
                F[f, F_AUX] = target
                if target >= 0:
                    eff = target
            if batch and b_code[i] != 4 and (b_own[i] == 0 or F[f, F_AUX] < 0):  # decided with the chunk (decide_chunk)
                o, nx, code = b_o[i], b_nx[i], b_code[i]
                bad, miss = code == 1, code == 2
            else:
                code = 0
                o, nx, bad, miss = decide(st_sw, state_line, line_off, host_sw, host_cls, tcls, col, base, alt, width,
                                           pid_base, egress, state_base, flipped, flips_in_tables, st, eff)
            F[f, F_OUT] = o
            F[f, F_NSTATE] = nx
            if router == 0:
                F[f, F_NCLS] = (b_ncls[i] if code == 0 else 0) if batch else (st_cls[nx] if nx >= 0 else 0)
                if model == 4 and kind[st_pid[st]] == 3:  # iqvc: it crossed a global link (its ejection VC)
                    F[f, F_AUX2] = 1
            elif router == 1:
                gh = F[f, F_AUX2] + (1 if kind[o] == 3 else 0)
                F[f, F_AUX2] = gh
                F[f, F_NCLS] = min(gh, 2)
            else:  # VAL-R / UGAL-L: the path's stage (hpcfabric.sim.pb.VALRRouter)
                gh = F[f, F_AUX2]
                F[f, F_AUX2] = gh + (1 if kind[o] == 3 else 0)
                if gh == 0:
                    F[f, F_NCLS] = 0
                elif F[f, F_AUX] >= 0:
                    F[f, F_NCLS] = 1
                else:
                    F[f, F_NCLS] = 3 if gidx[sw_of[o]] == host_group[F[f, F_DST]] else 2
            if miss:
                c[C_NOLINE] = 1
                c[C_BAD_STATE] = st
                return t
            if bad:
                c[C_BAD] += 1
                c[C_BAD_ACCT] = a
                if w0 <= F[f, F_TGEN] < w1:
                    c[C_OUTSTANDING] -= 1
                free[c[C_NFREE]] = f
                c[C_NFREE] += 1
                continue
            F[f, F_READY] = t + dswitch
            # ingress accounting (PFC): room in the account, or in the shared pool / its headroom
            ok = True
            if model != 2:
                if occ[a] >= cap:
                    ok = False
                else:
                    occ[a] += 1
                    F[f, F_INHR] = 0
            else:
                swi = sw_of[st_pid[st]]
                room = pool[swi] - pool_used[swi]
                if room > 0 and occ[a] * 16 < alpha16 * room:
                    occ[a] += 1
                    pool_used[swi] += 1
                    c[C_MAXPOOL] = max(c[C_MAXPOOL], pool_used[swi])
                    F[f, F_INHR] = 0
                elif hr[a] < headroom:
                    hr[a] += 1
                    c[C_MAXHR] = max(c[C_MAXHR], hr[a])
                    F[f, F_INHR] = 1
                else:
                    ok = False
            if not ok:
                c[C_OVERFLOW] += 1
                if w0 <= F[f, F_TGEN] < w1:
                    c[C_OUTSTANDING] -= 1
                free[c[C_NFREE]] = f
                c[C_NFREE] += 1
                continue
            demand[o] += 1
            if model == 0:
                q = a
            elif model == 1:
                q = a * W + (o - pid_base[sw_of[o]])
            elif model == 2:
                q = o * C + F[f, F_NCLS]
            else:
                q = a
            qlen[q] += 1
            if push(qhead, qtail, F, q, f) and inact[q] == 0:
                inact[q] = 1
                act[c[C_NACT]] = q
                c[C_NACT] += 1
        # -- 2. PFC: XOFF/XON per ingress account, recorded for the senders' delayed view
        row = t % D
        hrow = hist[row]
        if model == 2:  # per switch (its ports' accounts are contiguous): the dynamic threshold, alpha x its free pool
            for swi in range(pool.shape[0]):
                thr = (alpha16 * (pool[swi] - pool_used[swi])) >> 4
                pfc(occ, hr, xoff, hrow, pid_base[swi] * C, (pid_base[swi] + width[swi]) * C, max(thr, 1), thr >> 1)
        elif model < 3 or use_flips:  # hysteresis between XON and XOFF; iq: credits, no PAUSE (but for the flips)
            pfc(occ, hr, xoff, hrow, 0, NP * C, XOFF, XON)
        # -- 3. PORT_STATE flips
        if use_flips:
            for pid in range(hist_any.shape[1]):
                anyp = False
                for cl in range(C):
                    anyp |= xoff[pid * C + cl]
                hist_any[row, pid] = anyp
            for pid in fab:
                seen = hist_any[back(row, delay[pid], D), peer[pid]]
                if egress_pause and demand[pid] >= XOFF:
                    seen = True
                if R == 0 and hold == 0:
                    now = seen
                else:
                    if seen and not was_paused[pid] and flip_off[pid] <= t:
                        flip_on[pid] = t + R
                    if seen:
                        flip_off[pid] = t + R + max(hold, 1)
                    now = flip_on[pid] <= t < flip_off[pid]
                was_paused[pid] = seen
                if now and not flipped[pid]:
                    c[C_FLIPS] += 1
                flipped[pid] = now
        # -- 4. switching: requests of the active queues, grants and accepts
        if model == 4:  # iqvc: BookSim's VC and switch allocation per internal step (kernel_vc)
            vc.vc_switch(t, slot, (t + 1) * rounds // K - t * rounds // K, t * rounds // K, K, C, L, cap, outq, dswitch, c,
                         act, inact, qhead, qlen, last_move, F, busy, peer, delay, demand, occ, cred, cr_buf, cr_n, cal_buf,
                         cal_n, ovc, vhold, vsince, rr, req_q, req_o, req_in, cnt, grant, in_used, in_pick, in_list, touched)
        else:
            nreq = 0
            keep = 0
            nact = c[C_NACT]
            for i in range(nact):
                if batch and i % CHUNK == 0:
                    sink += touch_scan(act, i, min(nact, i + CHUNK), qlen, qhead, F, busy, peer, delay, st_pid, hist, row, D,
                                       C, b_f, b_o, b_nx, C if model == 2 else 0, t + outq)
                q = act[i]
                if qlen[q] == 0:
                    inact[q] = 0
                    continue
                act[keep] = q
                keep += 1
                if batch and model == 2 and busy[q // C] > t + outq:  # shared: a queue per output, busy: no request
                    continue
                f = qhead[q]
                o = F[f, F_OUT]
                if F[f, F_READY] > t or busy[o] > t + outq:
                    continue
                p = peer[o]
                if p >= 0 and (cred[p * C + F[f, F_NCLS]] >= cap if model == 3 else
                               hist[back(row, delay[o], D), p * C + F[f, F_NCLS]]):
                    continue
                req_q[nreq] = q
                req_o[nreq] = o
                req_in[nreq] = st_pid[F[f, F_STATE]]
                nreq += 1
            c[C_NACT] = keep
            for _ in range(rounds if nreq else 0):
                nt = 0
                ni = 0
                for r in range(nreq if model == 3 else 0):  # iq: each input port picks one of its requests
                    o = req_o[r]
                    if req_q[r] < 0 or busy[o] > t + outq or peer[o] >= 0 and cred[peer[o] * C + F[qhead[req_q[r]], F_NCLS]] >= cap:
                        continue
                    if draw(in_used, in_pick, req_in[r], r):
                        in_list[ni] = req_in[r]
                        ni += 1
                for j in range(ni):  # iq: the picked requests compete (in_list now holds them)
                    in_used[in_list[j]] = 0
                    in_list[j] = in_pick[in_list[j]]
                for x in range(ni if model == 3 else nreq):
                    r = in_list[x] if model == 3 else x
                    q = req_q[r]
                    if q < 0:
                        continue
                    o = req_o[r]
                    if busy[o] > t + outq or (S > 0 and in_used[req_in[r]] >= S):
                        continue
                    if draw(cnt, grant, o, r):
                        touched[nt] = o
                        nt += 1
                if nt == 0:
                    break
                if S > 0:
                    for i in range(nt - 1, 0, -1):  # accepts in random order (inputs are limited)
                        j = np.random.randint(0, i + 1)
                        touched[i], touched[j] = touched[j], touched[i]
                for i in range(nt):
                    if batch and i % CHUNK == 0:
                        sink += touch_grants(min(nt, i + CHUNK) - i, touched[i:], grant, req_q, qhead, qlen, last_move, F,
                                             occ, hr, demand, cnt, b_f)
                    o = touched[i]
                    cnt[o] = 0
                    r = grant[o]
                    if S > 0:
                        if in_used[req_in[r]] >= S:
                            continue
                        in_used[req_in[r]] += 1
                    q = req_q[r]
                    req_q[r] = -1
                    f = pop(qhead, qlen, last_move, F, q, t)
                    a = F[f, F_ACCT]
                    if model == 3:  # credit-based flow control (BookSim): a credit downstream, ours back upstream
                        if peer[o] >= 0:
                            cred[peer[o] * C + F[f, F_NCLS]] += 1
                        sl = ahead(slot, delay[a // C] + 1, L)
                        cr_buf[sl, cr_n[sl]] = a
                        cr_n[sl] += 1
                    if F[f, F_INHR]:
                        hr[a] -= 1
                    else:
                        occ[a] -= 1
                        if model == 2:
                            pool_used[sw_of[o]] -= 1
                    start = busy[o] if busy[o] > t else t  # iq: behind the frames queued for the wire
                    busy[o] = start + K
                    demand[o] -= 1
                    c[C_HOPS] += 1
                    c[C_INNET] += 1
                    cal(cal_buf, cal_n, ahead(slot, start - t + K + delay[o], L), f)
            if S > 0:
                for r in range(nreq):
                    in_used[req_in[r]] = 0
        # -- 5. hosts: Bernoulli generation into the source queues, injection of the head frames
        if t % K == 0:
            for h in range(H):
                if np.random.random() >= load * t_rate[h]:
                    continue
                c[C_GEN] += 1
                if sqlen[h] >= SQ:
                    c[C_REFUSED] += 1
                    continue
                c[C_NFREE] -= 1
                f = free[c[C_NFREE]]
                F[f, F_SRC] = h
                F[f, F_DST] = sample(traffic, H, t_off, t_cnt, t_flat, t_cum, h)
                F[f, F_TGEN] = t
                F[f, F_AUX] = -1
                F[f, F_AUX2] = 0
                if w0 <= t < w1:
                    c[C_OUTSTANDING] += 1
                sqbuf[h, ahead(sqhead[h], sqlen[h], SQ)] = f
                sqlen[h] += 1
        for h in range(H):
            if sqlen[h] == 0 or hbusy[h] > t:
                continue
            st, a, cls, dh = hs[h, 0], hs[h, 1], hs[h, 2], hs[h, 3]
            if model == 4:  # iqvc: BookSim's injection VC, one of the C at random
                cls = np.random.randint(0, C)
                a += cls - hs[h, 2]
            if cred[a] >= cap if model >= 3 else hist[back(row, dh, D), a]:
                continue
            f = sqbuf[h, sqhead[h]]
            if model >= 3:
                cred[a] += 1
            sqhead[h] = ahead(sqhead[h], 1, SQ)
            sqlen[h] -= 1
            hbusy[h] = t + K
            F[f, F_NSTATE] = st
            F[f, F_NCLS] = cls
            c[C_INJECTED] += 1
            c[C_INNET] += 1
            cal(cal_buf, cal_n, ahead(slot, K + dh, L), f)
        bt[NBT - 1, 0] = sink
        t += 1
        if t >= w1 and c[C_OUTSTANDING] == 0:
            return t
    return t
