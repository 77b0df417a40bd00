"""The ``iqvc`` switch model's switching step (:mod:`hpcfabric.sim.kernel`, model 4): BookSim2's
``iq_router`` pipeline with its VC allocation per output VC.

Queues are ``iq``'s: one FIFO per ingress account (input port, class) = BookSim's input VC. A
frame's output VC is (its output port, its class on the next link). Per frame time the router runs
``iterations`` internal steps (BookSim's ``internal_speedup``, default 2); each step

1. **VC allocation**: the head frame of every input VC that holds no output VC requests its
   output VC if no packet holds it; each requested output VC goes to one requester (round robin).
   The winner holds the output VC and may bid for the switch from the next step on;
2. **switch allocation**, separable input first, one iteration: every input port picks one of its
   input VCs that hold an output VC with a credit downstream (and room in the output queue), then
   every output port one of the input ports that picked it (round robin, iSLIP-like: a pointer
   moves past the winner only on a grant). The winner's frame crosses into the output queue
   (``outq`` frame times of it; by default C buffers, so only the credits per VC bind it on a link, as
   BookSim's unbounded output buffer: SimParams.output_queue), releases its output VC (a
   1-frame packet's tail) and returns a credit upstream; it reaches the wire ``dsw`` ticks later
   (``switch_ns``: BookSim's crossbar and output stages come after the allocations, and a frame
   is allocated from the tick it arrives);

The output VC of an ejection port (a host's) is BookSim's: one for the frames that crossed a
global link (F_AUX2 > 0: ``min``'s ``ph`` 1, ``val4``/``ugal4``'s stage 3), another for the group's
own frames (0): our classes on that link (MIN's 0 for all) would put both on one VC.

so an input VC moves at most one frame per two steps, an output VC takes one packet at a time, and
a frame that loses either allocation blocks its input VC (head of line). Credit and queue
bookkeeping of a sent frame are ``iq``'s; the injection VC is drawn at random (the tick loop).
"""

from __future__ import annotations

from numba import njit

from hpcfabric.sim.kernel_ops import ahead, cal, pop

__all__ = ["vc_switch", "C_NACT", "C_HOPS", "C_INNET"]

F_OUT, F_NCLS, F_AUX2, F_ACCT = 4, 6, 9, 10
C_HOPS, C_NACT, C_INNET = 6, 11, 16
RR_WRAP = 1 << 40


@njit(cache=True, error_model="numpy")
def rr_key(x, ptr):
    """Round-robin order of requester ``x`` for a pointer ``ptr`` (BookSim's ``RoundRobinArbiter``):
    the smallest key wins, ``ptr`` first, then upwards, then the ones below it (all of one switch)."""
    return x - ptr if x >= ptr else x - ptr + RR_WRAP


@njit(cache=True, error_model="numpy")
def vc_switch(t, slot, steps, step0, K, C, L, cap, outq, dsw, c, act, inact, qhead, qlen, last_move, F, busy, peer, delay,
              demand, occ, cred, cr_buf, cr_n, cal_buf, cal_n, ovc, vhold, vsince, rr, v_cnt, v_grant, v_touched, cnt,
              grant, in_used, in_pick, in_list, touched):
    """One tick of switching: internal steps ``step0 .. step0 + steps - 1`` (module docstring).
    ``ovc[o * C + cls]``: the input VC holding that output VC (-1 free); ``vhold[q]``: the output VC
    input VC ``q`` holds (-1 none), granted in internal step ``vsince[q]``; ``rr``: the round-robin
    pointers (rows: per output VC over input VCs, per input port over output ports, per output port
    over input ports, per input port over its VCs); the rest are scratch (``v_*`` per output VC, the
    others per port)."""
    keep = 0
    for i in range(c[C_NACT]):  # active queues: the non-empty ones stay
        q = act[i]
        inact[q] = qlen[q] > 0
        act[keep] = q
        keep += inact[q]
    c[C_NACT] = keep
    vptr, inptr, outptr, vcptr = rr[0], rr[1], rr[2], rr[3]
    for step in range(step0, step0 + steps):
        # 1. VC allocation: one request per input VC, each output VC's arbiter picks one
        nv = 0
        for i in range(keep):
            q = act[i]
            if vhold[q] >= 0 or qlen[q] == 0:
                continue
            f = qhead[q]
            ov = F[f, F_OUT] * C + F[f, F_NCLS]
            if peer[F[f, F_OUT]] < 0 and C > 1:  # ejection: BookSim's VC, 1 past a global link, else 0
                ov = F[f, F_OUT] * C + min(F[f, F_AUX2], 1)
            if ovc[ov] >= 0:
                continue
            if v_cnt[ov] == 0:
                v_cnt[ov] = 1
                v_grant[ov] = q
                v_touched[nv] = ov
                nv += 1
            elif rr_key(q, vptr[ov]) < rr_key(v_grant[ov], vptr[ov]):
                v_grant[ov] = q
        for j in range(nv):
            ov = v_touched[j]
            v_cnt[ov] = 0
            q = v_grant[ov]
            vptr[ov] = q + 1
            ovc[ov] = q
            vhold[q] = ov
            vsince[q] = step
        # 2. switch allocation, separable input first: each input port one (output, VC), each output one input
        ni = 0
        for i in range(keep):
            q = act[i]
            if vhold[q] < 0 or vsince[q] >= step:
                continue
            f = qhead[q]
            o = F[f, F_OUT]
            if busy[o] > t + outq or peer[o] >= 0 and cred[peer[o] * C + F[f, F_NCLS]] >= cap:
                continue
            ip = q // C
            if in_used[ip] == 0:
                in_used[ip] = 1
                in_pick[ip] = q
                in_list[ni] = ip
                ni += 1
                continue
            b = in_pick[ip]
            ob = F[qhead[b], F_OUT]
            ko, kb = rr_key(o, inptr[ip]), rr_key(ob, inptr[ip])
            if ko < kb or ko == kb and rr_key(q % C, vcptr[ip]) < rr_key(b % C, vcptr[ip]):
                in_pick[ip] = q
        nt = 0
        for j in range(ni):
            ip = in_list[j]
            in_used[ip] = 0
            q = in_pick[ip]
            o = F[qhead[q], F_OUT]
            if cnt[o] == 0:
                cnt[o] = 1
                grant[o] = q
                touched[nt] = o
                nt += 1
            elif rr_key(ip, outptr[o]) < rr_key(grant[o] // C, outptr[o]):
                grant[o] = q
        for j in range(nt):
            o = touched[j]
            cnt[o] = 0
            q = grant[o]
            ip = q // C
            outptr[o] = ip + 1
            inptr[ip] = o + 1
            vcptr[ip] = (q % C + 1) % C
            ovc[vhold[q]] = -1
            vhold[q] = -1
            f = pop(qhead, qlen, last_move, F, q, t)
            a = F[f, F_ACCT]
            if peer[o] >= 0:
                cred[peer[o] * C + F[f, F_NCLS]] += 1
            sl = ahead(slot, delay[a // C] + 1, L)
            cr_buf[sl, cr_n[sl]] = a
            cr_n[sl] += 1
            occ[a] -= 1
            start = max(busy[o], t + dsw)
            busy[o] = start + K
            demand[o] -= 1
            c[C_HOPS] += 1
            c[C_INNET] += 1
            cal(cal_buf, cal_n, ahead(slot, start - t + K + delay[o], L), f)
