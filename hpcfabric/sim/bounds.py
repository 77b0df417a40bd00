"""Closed forms the simulator is validated against (docs/simulation.md derives them).

* :func:`zero_load_path`: switches, local and global links on the tables' path of one pair,
  whose modelled latency (:meth:`SimParams.zero_load_ns`) a run at a tiny load must reproduce;
* :func:`channel_loads`: the load every fabric link carries per unit of injection rate when
  every host sends its pattern along the tables' unpaused paths (exact expectation over the
  pattern; destinations of one column walked once); ``1 / max load`` is the saturation
  throughput of an oblivious policy (MIN, VAL) per host, as a fraction of the link rate;
* :func:`dragonfly_adv_closed_forms`: the same bound by hand for ADV on a Dragonfly with one
  global link between every two groups: MIN ``1/(a*p)`` (the single global link i -> i+1 carries
  all ``a*p`` hosts of group i), VAL ``1/(2*ceil(p/h))`` on global links (a host's Valiant port
  is global port ``index mod h`` of its switch: each global link carries ``ceil(p/h)`` hosts'
  first halves and, unless it enters the destination group from the source group, as many
  hosts' second halves).
"""

from __future__ import annotations

import math

import numpy as np

from hpcfabric.sim.tables import Forwarding, SimError
from hpcfabric.sim.traffic import Traffic
from hpcfabric.topology.model import Fabric

__all__ = ["zero_load_path", "channel_loads", "saturation_bound", "dragonfly_adv_closed_forms"]

CHUNK = 1 << 21


def zero_load_path(fw: Forwarding, src: int, dst: int) -> tuple[int, int, int]:
    """(switches, local links, global links) of the unpaused path from host ``src`` to ``dst``."""
    pm = fw.pm
    state = fw.host_state(np.array([src]))
    d = np.array([dst])
    switches = local = glob = 0
    for _ in range(4 * len(pm.names) + 4):
        out, nxt, bad = fw.decide(state, d, None)
        if bad[0]:
            raise SimError(f"the tables do not deliver host {src} -> {dst}")
        switches += 1
        kind = int(pm.kind[out[0]])
        if kind == 1:
            return switches, local, glob
        local += kind == 2
        glob += kind == 3
        state = nxt
    raise SimError(f"host {src} -> {dst}: no delivery within the hop bound")


def channel_loads(fw: Forwarding, traffic: Traffic) -> np.ndarray:
    """Expected frames per frame time on every pid, per unit injection rate of every host."""
    pm = fw.pm
    H = len(pm.host_pid)
    load = np.zeros(pm.n)
    col = fw.col
    ncol = int(col.max()) + 1
    rep = np.zeros(ncol, dtype=np.int64)
    rep[col[::-1]] = np.arange(H)[::-1]
    srcs: list[np.ndarray] = []
    dsts: list[np.ndarray] = []
    wts: list[np.ndarray] = []
    for s in range(H):
        d, w = traffic.matrix_row_weights(s)
        c = col[d]
        wc = np.bincount(c, weights=w, minlength=ncol)
        # a destination in the source's own column (own switch) is walked as itself
        own = c == col[s]
        keep = np.flatnonzero(wc > 0)
        keep = keep[keep != col[s]]
        srcs.append(np.full(len(keep) + int(own.sum()), s, dtype=np.int64))
        dsts.append(np.concatenate([rep[keep], d[own]]))
        wts.append(np.concatenate([wc[keep], w[own]]))
        if sum(len(x) for x in srcs) >= CHUNK or s == H - 1:
            _walk(fw, np.concatenate(srcs), np.concatenate(dsts), np.concatenate(wts), load)
            srcs, dsts, wts = [], [], []
    return load


def _walk(fw: Forwarding, src: np.ndarray, dst: np.ndarray, w: np.ndarray, load: np.ndarray) -> None:
    state = fw.host_state(src)
    for _ in range(4 * len(fw.pm.names) + 4):
        if not len(state):
            return
        out, nxt, bad = fw.decide(state, dst, None)
        if bad.any():
            raise SimError(f"the tables do not deliver {int(bad.sum())} of the walked pairs")
        load += np.bincount(out, weights=w, minlength=len(load))
        go = nxt >= 0
        state, dst, w = nxt[go], dst[go], w[go]
    raise SimError("a walk did not end within the hop bound (loop in the tables)")


def saturation_bound(fw: Forwarding, traffic: Traffic) -> tuple[float, int]:
    """(1 / max fabric-link load, the pid of that link): per-host saturation throughput."""
    load = channel_loads(fw, traffic)
    fab = np.flatnonzero(fw.pm.kind >= 2)
    i = fab[int(np.argmax(load[fab]))]
    return (1.0 / load[i] if load[i] > 0 else math.inf), int(i)


def dragonfly_adv_closed_forms(fabric: Fabric) -> dict[str, float]:
    """MIN and VAL saturation under ADV by hand (module docstring); needs one global link per group pair."""
    if fabric.kind != "dragonfly":
        raise SimError("closed forms are derived for Dragonfly fabrics")
    a, p, h = (int(fabric.params[k]) for k in ("a", "p", "h"))
    g = int(fabric.params.get("g") or a * h + 1)
    if g != a * h + 1:
        raise SimError(f"closed forms assume one global link per group pair (g = a*h+1 = {a * h + 1}), got g = {g}")
    return {"minimal": 1.0 / (a * p), "valiant": 1.0 / (2 * math.ceil(p / h))}
