"""Reference routers that are not OpenFlow policies: PB (the paper's) and VAL-R (BookSim2's Valiant).

PB: the paper's adaptive *piggyback* reference router (Jiang, Kim, Dally, ISCA 2009).

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

The per-frame decisions run in the compiled kernel (:func:`hpcfabric.sim.kernel._route`); these
classes hold what it looks up.
"""

from __future__ import annotations

import numpy as np

from hpcfabric.sim.tables import Forwarding, SimError

__all__ = ["PBRouter", "VALRRouter"]


class PBRouter:
    name = "pb"
    code = 1

    def __init__(self, fw_min: Forwarding, threshold: int = 2) -> None:
        pm = self.pm = fw_min.pm
        self.fw = fw_min
        if fw_min.fabric.kind != "dragonfly":
            raise SimError(f"the PB reference router is defined for Dragonfly fabrics, not {fw_min.fabric.kind}")
        self.n_classes = 3
        self.flippable = False
        self.threshold = threshold
        groups = np.unique(pm.group)
        self.group_ids = groups
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
    minimally to its destination; frames inside their group go minimally. Classes are BookSim's
    phases: 0 towards the intermediate, 1 minimal before the global hop, 2 after it."""

    name = "val-r"
    code = 2
