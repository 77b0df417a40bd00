"""Reference routers that are not OpenFlow policies: PB (the paper's), VAL-R and UGAL-L (BookSim2's).

PB: the paper's adaptive *piggyback* reference router (Jiang, Kim, Dally, ISCA 2009).

**Not an OpenFlow policy.** Nothing here is installed on a switch: it is the reference the
paper compares its conditional rules with, implemented inside the simulator. Forwarding
itself still comes from the compiled *minimal* tables (:class:`hpcfabric.sim.tables.Forwarding`);
PB only decides, per frame at its source switch, whether to go minimally or through a random
intermediate group (Valiant), and steers the frame by looking the tables up for an
intermediate target until it reaches that group:

* state: every switch knows the congestion of the global channels its frames may take (the
  piggybacked state; here exact and current, an idealisation: PB's broadcast delay is a few
  cycles inside one group). A channel's congestion is the number of frames in its switch's
  input buffers waiting for it (:attr:`Simulator.demand`);
* decision (UGAL-style, PB's rule): non-minimal when ``q_min > 2 * q_nonmin + threshold``
  (a Valiant path uses two global channels), with ``q_min`` the minimal global channel towards
  the destination group and ``q_nonmin`` the channel towards a random intermediate group (on
  a Flattened Butterfly: groups are rows, global channels the top-dimension links, the first one
  on the minimal path from the source switch);
* classes of service: the number of global hops taken (0, 1, 2), the usual Dragonfly
  virtual-channel order, so the reference is deadlock-free.

The per-frame decisions run in the compiled kernel (:func:`hpcfabric.sim.kernel._route`); these
classes hold what it looks up.
"""

from __future__ import annotations

import numpy as np

from hpcfabric.sim.tables import Forwarding, SimError

__all__ = ["PBRouter", "VALRRouter", "UGALRouter"]


class PBRouter:
    name = "pb"
    code = 1

    def __init__(self, fw_min: Forwarding, threshold: int = 2) -> None:
        pm = self.pm = fw_min.pm
        self.fw = fw_min
        if fw_min.fabric.kind not in ("dragonfly", "flattened_butterfly"):
            raise SimError(f"the PB reference router is defined for Dragonfly and Flattened Butterfly fabrics, "
                           f"not {fw_min.fabric.kind}")
        self.n_classes = 3
        self.flippable = False
        self.threshold = threshold
        groups = np.unique(pm.group)
        self.group_ids = groups
        gidx = np.searchsorted(groups, pm.group)
        host_sw = fw_min.host_sw
        self.gidx = gidx
        self.host_group = gidx[host_sw]
        self.gl, self.land = self._global_channels(gidx, host_sw)

    def _global_channels(self, gidx: np.ndarray, host_sw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per (switch, group): the first global (Dragonfly) / top-dimension (FB) channel of the minimal
        path from the switch to the group (-1: none), and a host on the switch it lands at."""
        pm, fw = self.pm, self.fw
        S, G = len(pm.names), len(self.group_ids)
        first_host = np.full(S, -1, dtype=np.int64)
        first_host[host_sw[::-1]] = np.arange(len(host_sw))[::-1]
        group_host = np.full(G, -1, dtype=np.int64)
        group_host[self.host_group[::-1]] = np.arange(len(host_sw))[::-1]
        gl = np.full((S, G), -1, dtype=np.int64)
        land = np.full((S, G), -1, dtype=np.int64)
        src = np.repeat(np.arange(S), G)
        dgrp = np.tile(np.arange(G), S)
        ok = (first_host[src] >= 0) & (gidx[src] != dgrp)
        src, dgrp = src[ok], dgrp[ok]
        state = fw.host_state(first_host[src])
        dst = group_host[dgrp]
        for _ in range(4 * S + 4):  # walk the minimal tables to the first global hop
            if not len(state):
                break
            out, nxt, bad = fw.decide(state, dst, None)
            hit = (pm.kind[out] == 3) & ~bad
            gl[src[hit], dgrp[hit]] = out[hit]
            land[src[hit], dgrp[hit]] = first_host[pm.sw[pm.peer[out[hit]]]]
            go = ~hit & (nxt >= 0)
            src, dgrp, state, dst = src[go], dgrp[go], nxt[go], dst[go]
        return gl, land

    def groups(self) -> tuple[np.ndarray, ...]:
        """(group index per switch, global channel pid per group pair, landing host per group pair,
        group of every host): the arrays the compiled kernel decides with."""
        return self.gidx, self.gl, self.land, self.host_group

    def channel(self, pid: int, cls: int) -> str:
        return f"{self.pm.names[int(self.pm.sw[pid])]}:{int(self.pm.port[pid])}@gh{cls}"


class VALRRouter(PBRouter):
    """VAL-R: BookSim2's Valiant routing for its Dragonfly (``val_dragonflynew``), the peer's own
    algorithm rather than the compiled one. **Not an OpenFlow policy.** At the source switch a
    frame for another group picks a random intermediate *host* anywhere (uniformly, the source
    group included: then it goes minimally), travels minimally to that host's switch, then
    minimally to its destination; frames inside their group go minimally. Classes are the path's
    stage, as the runner's ``val4``/``ugal4`` VCs (:mod:`hpcfabric.sim.booksim`): 0 in the source
    group (its global hop included), 1 in the intermediate group before the intermediate switch, 2
    after it (its global hop included), 3 in the destination group after a global hop. Every path
    climbs 0 local < 0 global < 1 local < 2 local < 2 global < 3 local, so no channel cycle; BookSim's
    own phases (0 all the way to the intermediate) have one on class 0 and deadlock."""

    name = "val-r"
    code = 2

    def __init__(self, fw_min: Forwarding, threshold: int = 2) -> None:
        super().__init__(fw_min, threshold)
        self.n_classes = 4


class UGALRouter(VALRRouter):
    """UGAL-L: BookSim2's adaptive routing for its Dragonfly (``ugal_dragonflynew``). **Not an
    OpenFlow policy.** As VAL-R, except that at the source switch the frame goes minimally unless
    the minimal output's queue exceeds twice the non-minimal output's plus ``threshold`` (30, as
    in BookSim); a queue is what waits for the port here plus the buffers behind it (BookSim's
    used credits)."""

    name = "ugal-l"
    code = 3

    def __init__(self, fw_min: Forwarding, threshold: int = 30) -> None:
        super().__init__(fw_min, threshold)
