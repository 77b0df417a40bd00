"""Batched per-frame lookups of the compiled tick loop (:mod:`hpcfabric.sim.kernel`).

At Table III size every lookup of a frame's hop is a cache miss, and done one frame at a time they
form one long dependent chain per frame. These helpers take a chunk of frames (``CHUNK``) and do
each step of the chain for all of them before the next step (state -> line and destination class
-> decision cell -> egress code), so the misses of different frames overlap; the ``touch_*``
helpers read the lines the sequential part of the tick will update next, for the same reason.
They read only state that does not change while the chunk is handled, so the tick loop's results
are those of the one-frame-at-a-time path (``decide``) bit for bit; ``tests/test_sim_batch.py``
compares the two.
"""

from __future__ import annotations

from numba import njit

from hpcfabric.sim.kernel_ops import PCP_SLOTS, landing, pick

__all__ = ["CHUNK", "decide_chunk", "touch_accounts", "touch_scan", "touch_grants"]

CHUNK = 128
F_DST, F_STATE, F_OUT, F_NSTATE, F_NCLS, F_READY, F_AUX, F_ACCT, F_NXT = 0, 3, 4, 5, 6, 7, 8, 10, 11


@njit(cache=True, error_model="numpy")
def decide_chunk(cal_row, c0, c1, F, st_sw, st_pid, state_line, line_off, host_sw, host_cls, tcls, col, base, alt,
                 width, pid_base, egress, state_base, flipped, use_flips, b_f, b_st, b_dst, b_sw, b_line, b_cls, b_o,
                 b_nx, b_code, b_pid, b_own, router, sw_of, kind, gidx, host_group):
    """``decide`` for the frames ``cal_row[c0:c1]``, step by step over the chunk. Per frame ``i``:
    ``b_f`` the frame, ``b_st`` its next state (-1: it is being delivered), ``b_pid`` the state's
    input port, ``b_o``/``b_nx`` ``decide``'s output and next state, ``b_code`` 0 ok, 1 bad, 2 no
    line, 4 not decided here. Reference routers (``router`` > 0): the destination looked up is the
    frame's intermediate target as the tick loop sets it; a frame entering from a host whose target
    is still open (-1) draws it at random from the backlog the frames before it change. VAL-R and
    UGAL-L: code 4, the tick loop decides it alone. PB: decided here for its own destination with
    ``b_own`` = 1, which the tick loop uses when PB keeps it minimal (an intermediate: decided alone)."""
    n = c1 - c0
    for i in range(n):
        f = cal_row[c0 + i]
        b_f[i] = f
        b_st[i] = F[f, F_NSTATE]
        b_dst[i] = F[f, F_DST]
        b_code[i] = 0
        b_own[i] = 0
        if router != 0 and b_st[i] >= 0:
            b_o[i] = F[f, F_AUX]  # the target so far
    for i in range(n):
        st = b_st[i]
        if st < 0:
            continue
        b_sw[i] = st_sw[st]
        b_line[i] = state_line[st]
        b_pid[i] = st_pid[st]
    for i in range(n):
        if router == 0 or b_st[i] < 0:
            continue
        in_pid = b_pid[i]
        swi = sw_of[in_pid]
        target = b_o[i]
        if router == 1:  # PB
            if target >= 0 and host_group[target] == gidx[swi]:
                target = -2
            if kind[in_pid] == 1 and target == -1:  # the minimal decision; the tick loop may draw an intermediate
                b_own[i] = 1
        else:  # VAL-R / UGAL-L
            if kind[in_pid] == 1 and target == -1:
                b_code[i] = 4
                continue
            if target >= 0 and host_sw[target] == swi:
                target = -2
        if target >= 0:
            b_dst[i] = target
    for i in range(n):
        if b_st[i] < 0 or b_code[i] == 4:
            continue
        dst = b_dst[i]
        sw = b_sw[i]
        b_cls[i] = host_cls[dst] if host_sw[dst] == sw else tcls[sw, col[dst]]
    for i in range(n):
        if b_st[i] < 0 or b_code[i] == 4:
            continue
        line = b_line[i]
        sw = b_sw[i]
        choice = -1
        port = 0
        if line >= 0:
            choice, port = pick(line_off, base, alt, width, pid_base, flipped, use_flips, sw, line, b_cls[i])
        if choice < 0:  # no line (2) or no output (1)
            b_code[i] = 2 if line < 0 else 1
            b_o[i] = 0
            b_nx[i] = -1
            continue
        b_o[i] = pid_base[sw] + port
        b_line[i] = state_base[sw] + port * PCP_SLOTS + (choice & 15)  # now the egress index
        b_code[i] = 3
    for i in range(n):
        if b_st[i] < 0 or b_code[i] != 3:
            continue
        nx, bad = landing(egress[b_line[i]], b_dst[i])
        b_nx[i] = nx
        b_code[i] = 1 if bad else 0


@njit(cache=True, error_model="numpy")
def touch_accounts(n, b_f, b_st, b_pid, b_o, b_nx, b_code, F, st_cls, C, W, model, sw_of, pid_base, occ, hr, pool_used,
                   demand, qlen, qhead, qtail, inact, b_ncls, b_q, router):
    """Read (into the cache) what the arrivals of the chunk update next: ingress accounts, the
    switch's pool, the output's demand, the queue joined and its tail frame; ``b_ncls`` becomes the
    next class (``st_cls`` of the next state, 0 at the last hop: the compiled tables' rule).
    Returns a value that depends on every read (so none is dropped)."""
    acc = 0
    for i in range(n):
        b_q[i] = -1
        if b_st[i] < 0 or b_code[i] != 0:
            continue
        nx = b_nx[i]
        b_ncls[i] = st_cls[nx] if nx >= 0 else 0
        pid = b_pid[i]
        o = b_o[i]
        a = pid * C + F[b_f[i], F_NCLS]
        if model == 1:
            q = a * W + (o - pid_base[sw_of[o]])
        elif model == 2:
            q = o * C + b_ncls[i]
        else:
            q = a
        acc += occ[a] + hr[a] + pool_used[sw_of[pid]] + demand[o]
        if router == 0:  # the queue joined (a reference router's class is set in the tick loop)
            b_q[i] = qtail[q]
            acc += qlen[q] + qhead[q] + inact[q]
    for i in range(n):
        if b_q[i] >= 0:
            acc += F[b_q[i], F_NXT]
    return acc


@njit(cache=True, error_model="numpy")
def touch_scan(act, i0, i1, qlen, qhead, F, busy, peer, delay, st_pid, hist, row, D, C, b_f, b_o, b_x, per_out, limit):
    """Read what the switching scan of the active queues ``act[i0:i1]`` reads, step by step: the
    queue, its head frame, the head's output port, the pause state seen there (the scan's misses,
    overlapped); ``per_out`` > 0: queue ``q`` is output ``q // per_out``'s (shared), skipped while
    its ``busy`` exceeds ``limit`` as the scan does. Returns a dummy sum."""
    acc = 0
    n = i1 - i0
    for i in range(n):
        q = act[i0 + i]
        acc += qlen[q]
        b_f[i] = -1 if per_out > 0 and busy[q // per_out] > limit else qhead[q]
    for i in range(n):
        f = b_f[i]
        b_o[i] = -1
        if f >= 0:
            b_o[i] = F[f, F_OUT]
            b_x[i] = F[f, F_NCLS]
            acc += F[f, F_READY]
            b_f[i] = F[f, F_STATE]
    for i in range(n):
        o = b_o[i]
        if o < 0:
            continue
        acc += busy[o] + st_pid[b_f[i]]
        p = peer[o]
        d = delay[o]
        r = row - d if row >= d else row - d + D
        b_x[i] = r * hist.shape[1] + p * C + b_x[i] if p >= 0 else -1
    for i in range(n):
        x = b_x[i]
        if b_o[i] >= 0 and x >= 0:
            acc += hist[x // hist.shape[1], x % hist.shape[1]]
    return acc


@njit(cache=True, error_model="numpy")
def touch_grants(nt, touched, grant, req_q, qhead, qlen, last_move, F, occ, hr, demand, cnt, b_f):
    """Read what the frames granted ``touched[:nt]`` update next: their queues, frames, ingress
    accounts, output counters (overlapped misses). Returns a dummy sum."""
    acc = 0
    for i in range(nt):
        o = touched[i]
        acc += demand[o] + cnt[o]
        q = req_q[grant[o]]
        b_f[i] = -1
        if q >= 0:
            acc += qlen[q] + last_move[q]
            b_f[i] = qhead[q]
    for i in range(nt):
        f = b_f[i]
        if f >= 0:
            a = F[f, F_ACCT]
            acc += occ[a] + hr[a]
    return acc
