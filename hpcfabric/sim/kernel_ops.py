"""Per-frame helpers of the compiled tick loop (:mod:`hpcfabric.sim.kernel`): table lookups, queue
and calendar appends, ring indices, destination sampling, UGAL-L's choice.

Frame fields and the table encoding are :mod:`hpcfabric.sim.kernel`'s (``F_NXT``, ``SLOT_BITS``,
``DELIVER``, ``PCP_SLOTS`` are repeated here, which imports nothing of it).
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["draw", "decide", "pick", "landing", "push", "pop", "cal", "pfc", "ugal_minimal", "back", "ahead", "sample", "F_NXT", "SLOT_BITS", "DELIVER", "PCP_SLOTS"]

F_NXT = 11
SLOT_BITS, DELIVER, PCP_SLOTS = 4, -16, 9


@njit(cache=True, error_model="numpy")
def decide(st_sw, state_line, line_off, host_sw, host_cls, tcls, col, base, alt, width, pid_base, egress, state_base,
            flipped, use_flips, state, dst):
    """(output pid, next state or -1, bad, missing line) of a frame in ``state`` for host ``dst``."""
    sw = st_sw[state]
    line = state_line[state]
    if line < 0:
        return 0, -1, True, True
    cls = host_cls[dst] if host_sw[dst] == sw else tcls[sw, col[dst]]
    choice, port = pick(line_off, base, alt, width, pid_base, flipped, use_flips, sw, line, cls)
    if choice < 0:
        return 0, -1, True, False
    nx, bad = landing(egress[state_base[sw] + port * PCP_SLOTS + (choice & 15)], dst)
    return pid_base[sw] + port, nx, bad, False


@njit(cache=True, error_model="numpy")
def pick(line_off, base, alt, width, pid_base, flipped, use_flips, sw, line, cls):
    """(choice, port) of decision ``line`` for destination class ``cls`` at switch ``sw``: the
    alternative choice when the port of the first is flipped; choice < 0: no output."""
    cell = line_off[line] + cls
    choice = base[cell]
    w1 = width[sw] - 1
    if use_flips and choice >= 0:
        if flipped[pid_base[sw] + min(choice >> SLOT_BITS, w1)]:
            choice = alt[cell]
    return choice, min(choice >> SLOT_BITS, w1)


@njit(cache=True, error_model="numpy")
def landing(nxt, dst):
    """(next state or -1, bad) of the egress code ``nxt`` for destination ``dst``."""
    if nxt <= DELIVER:
        return -1, DELIVER - nxt != dst
    if nxt < 0:
        return -1, True
    return nxt, False


@njit(cache=True, error_model="numpy")
def push(head, tail, F, i, f):
    """Append frame ``f`` to the linked list ``i`` (queue or calendar slot); True if it was empty."""
    F[f, F_NXT] = -1
    if head[i] < 0:
        head[i] = f
        tail[i] = f
        return True
    F[tail[i], F_NXT] = f
    tail[i] = f
    return False


@njit(cache=True, error_model="numpy")
def pop(head, qlen, last_move, F, q, t):
    """Take the head frame of queue ``q`` (it moved at tick ``t``) and return it."""
    f = head[q]
    head[q] = F[f, F_NXT]
    qlen[q] -= 1
    if qlen[q] == 0:
        head[q] = -1
    last_move[q] = t
    return f


@njit(cache=True, error_model="numpy")
def cal(cal_buf, cal_n, slot, f):
    """Frame ``f`` arrives in calendar slot ``slot``."""
    cal_buf[slot, cal_n[slot]] = f
    cal_n[slot] += 1


@njit(cache=True, error_model="numpy")
def pfc(occ, hr, xoff, hrow, a0, a1, on, off):
    """XOFF/XON of the ingress accounts ``a0:a1`` (one switch's, or all): paused with headroom in use or
    at ``on`` frames, resumed at ``off`` or below, unchanged between (hysteresis); also this tick's
    row ``hrow`` of the pause history. One straight loop over contiguous accounts (vectorised)."""
    for a in range(a0, a1):
        o = occ[a]
        x = (hr[a] > 0) | (o >= on) | (xoff[a] & (o > off))
        xoff[a] = x
        hrow[a] = x


@njit(cache=True, error_model="numpy")
def ugal_minimal(st_sw, state_line, line_off, host_sw, host_cls, tcls, col, base, alt, width, pid_base, egress,
                  state_base, flipped, st, dst, inter, demand, peer, occ, hr, C, thresh, cred, credits):
    """UGAL-L's choice at the source switch (BookSim2's ugal_dragonflynew): minimal unless the minimal
    output's queue exceeds twice the non-minimal one's plus ``thresh``. A port's queue: with
    ``credits`` (the iq model) the credits in use downstream, BookSim's own measure; else the frames
    here waiting for it plus the frames in the buffers behind it."""
    o1 = decide(st_sw, state_line, line_off, host_sw, host_cls, tcls, col, base, alt, width, pid_base, egress,
                 state_base, flipped, False, st, dst)[0]
    o2 = decide(st_sw, state_line, line_off, host_sw, host_cls, tcls, col, base, alt, width, pid_base, egress,
                 state_base, flipped, False, st, inter)[0]
    q = np.zeros(2, dtype=np.int64)
    for i, o in enumerate((o1, o2)):
        q[i] = 0 if credits else demand[o]
        if peer[o] >= 0:
            for a in range(peer[o] * C, peer[o] * C + C):
                q[i] += cred[a] if credits else occ[a] + hr[a]
    return q[0] <= 2 * q[1] + thresh


@njit(cache=True, error_model="numpy")
def back(row, d, n):
    """``(row - d) mod n`` for 0 <= row < n, 0 <= d < n (ring index ``d`` ticks back)."""
    return row - d if row >= d else row - d + n


@njit(cache=True, error_model="numpy")
def ahead(row, d, n):
    """``(row + d) mod n`` for 0 <= row < n, 0 <= d < n."""
    r = row + d
    return r if r < n else r - n


@njit(cache=True, error_model="numpy")
def sample(kind, nh, t_off, t_cnt, t_flat, t_cum, src):
    if kind == 0:
        d = np.random.randint(0, nh - 1)
        return d + (1 if d >= src else 0)
    start = t_off[src]
    cnt = t_cnt[src]
    if kind == 1:
        return t_flat[start + np.random.randint(0, cnt)]
    x = (t_cum[start - 1] if start > 0 else 0.0) + np.random.random()
    lo, hi = start, start + cnt - 1
    while lo < hi:  # first index with cum > x
        mid = (lo + hi) // 2
        if t_cum[mid] > x:
            hi = mid
        else:
            lo = mid + 1
    return t_flat[lo]


@njit(cache=True, error_model="numpy")
def draw(count, chosen, key, value):
    """One reservoir draw: ``count[key]`` goes up by one and ``value`` becomes ``chosen[key]`` with
    probability 1/count (each of the values drawn for ``key`` is kept alike); True at the first."""
    count[key] += 1
    if count[key] == 1:
        chosen[key] = value
        return True
    if np.random.randint(0, count[key]) == 0:
        chosen[key] = value
    return False
