"""PB: the paper's adaptive *piggyback* reference router (Jiang, Kim, Dally, ISCA 2009).

**Not an OpenFlow policy.** Nothing here is installed on a switch: it is the reference the
paper compares its conditional rules with, implemented inside the simulator. Forwarding
itself still comes from the compiled *minimal* tables (:class:`hpcfabric.sim.tables.Forwarding`);
PB only decides, per frame at its source switch, whether to go minimally or through a random
intermediate group (Valiant), and steers the frame by looking the tables up for an
intermediate target until it reaches that group:

* state: every switch knows the congestion of every global channel of its group (the
  piggybacked state; here exact and current, an idealisation: PB's broadcast delay is a few
  cycles inside one group). A channel's congestion is the number of frames in its switch's
  input buffers waiting for it (:attr:`Simulator.demand`);
* decision (UGAL-style, PB's rule): non-minimal when ``q_min > 2 * q_nonmin + threshold``
  (a Valiant path uses two global channels), with ``q_min`` the minimal global channel towards
  the destination group and ``q_nonmin`` the channel towards a random intermediate group;
* classes of service: the number of global hops taken (0, 1, 2), the usual Dragonfly
  virtual-channel order, so the reference is deadlock-free.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hpcfabric.sim.tables import Forwarding, SimError

__all__ = ["PBRouter"]


class PBRouter:
    name = "pb"

    def __init__(self, fw_min: Forwarding, threshold: int = 2) -> None:
        pm = self.pm = fw_min.pm
        self.fw = fw_min
        if fw_min.fabric.kind != "dragonfly":
            raise SimError(f"the PB reference router is defined for Dragonfly fabrics, not {fw_min.fabric.kind}")
        self.n_classes = 3
        self.flippable = False
        self.threshold = threshold
        groups = np.unique(pm.group)
        self.groups = groups
        G = len(groups)
        gl = np.full((G, G), -1, dtype=np.int64)  # global channel pid from group a to group b
        land = np.full((G, G), -1, dtype=np.int64)  # a host on the switch it lands at
        host_sw = fw_min.host_sw
        first_host = np.full(len(pm.names), -1, dtype=np.int64)
        first_host[host_sw[::-1]] = np.arange(len(host_sw))[::-1]
        gidx = np.searchsorted(groups, pm.group)
        for pid in np.flatnonzero(pm.kind == 3):
            a, b = gidx[pm.sw[pid]], gidx[pm.sw[pm.peer[pid]]]
            if gl[a, b] < 0:
                gl[a, b] = pid
                land[a, b] = first_host[pm.sw[pm.peer[pid]]]
        self.gl, self.land, self.gidx = gl, land, gidx
        self.host_group = gidx[host_sw]

    def inject(self, sim: Any, f: np.ndarray, hosts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.fw.host_state(hosts), np.zeros(len(f), dtype=np.int64)

    def in_pid(self, state: np.ndarray) -> np.ndarray:
        return self.fw.state_pid(state)

    def channel(self, pid: int, cls: int) -> str:
        return f"{self.pm.names[int(self.pm.sw[pid])]}:{int(self.pm.port[pid])}@gh{cls}"

    def route(self, sim: Any, f: np.ndarray, t: int, flipped: Any) -> tuple[np.ndarray, ...]:
        pm = self.pm
        state = sim.state[f]
        in_pid = self.fw.state_pid(state)
        grp = self.gidx[pm.sw[in_pid]]
        dst = sim.dst[f]
        target = sim.aux[f]
        # phase 1 over: the frame reached its intermediate group
        reached = (target >= 0) & (self.host_group[np.maximum(target, 0)] == grp)
        target = np.where(reached, -2, target)
        fresh = (pm.kind[in_pid] == 1) & (target == -1)
        if fresh.any():
            i = np.flatnonzero(fresh)
            g, d = grp[i], self.host_group[dst[i]]
            remote = g != d
            G = len(self.groups)
            inter = sim.rng.integers(0, G - 2, len(i))  # a group other than g and d
            lo, hi = np.minimum(g, d), np.maximum(g, d)
            inter = inter + (inter >= lo)
            inter = inter + (inter >= hi)
            q_min = sim.demand[np.maximum(self.gl[g, d], 0)]
            q_non = sim.demand[np.maximum(self.gl[g, inter], 0)]
            non = remote & (G > 2) & (q_min > 2 * q_non + self.threshold)
            target[i] = np.where(non, self.land[g, np.minimum(inter, G - 1)], -2)
        sim.aux[f] = target
        eff = np.where(target >= 0, target, dst)
        out, nxt, bad = self.fw.decide(state, eff, None)
        gh = sim.aux2[f] + (pm.kind[out] == 3)
        sim.aux2[f] = gh
        return out, nxt, np.minimum(gh, self.n_classes - 1), bad
