"""Forwarding lookups for the simulator, precomputed from the compiled tables.

:class:`Forwarding` runs the verifier's batch engine (:class:`hpcfabric.verify.union.choices.Choices`)
over the FlowSpecs the controller installs and keeps, for every *line* (switch, ingress port
class, arrival PCP) and every destination class of that switch, two decisions: the one the
rules take with their PORT_STATE entries as installed (``base``) and the one they take while
the port of the default rule is paused (``alt``: the conditional rules' ALTERNATIVE entries).
A frame meets at most one PORT_STATE entry per switch, the one of its default rule's output
port, so a frame's decision at a switch is ``alt`` exactly when the base decision's output port
is flipped to paused. Nothing of the routing policy is re-implemented here.

Ports of the fabric are numbered ``pid`` (every (switch, port), host ports included); a
frame's class of service is a dense index over the PCP slots the tables use (untagged first).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from hpcfabric.errors import HpcfabricError
from hpcfabric.rules.addressing import plan_addresses
from hpcfabric.rules.compiler import compile_fabric
from hpcfabric.topology.model import Fabric
from hpcfabric.verify.union.choices import SLOT_BITS, Choices
from hpcfabric.verify.codes import DELIVER, PCP_SLOTS
from hpcfabric.verify.union.pairs import groups_of_hosts, structural_splits_of
from hpcfabric.verify.engine import forward_data_flows

__all__ = ["SimError", "Forwarding", "PortMap", "port_map", "compile_policy", "POLICIES"]

#: compiled policies the simulator can run (the PB reference router is in :mod:`hpcfabric.sim.pb`)
POLICIES = ("minimal", "valiant", "conditional")


class SimError(HpcfabricError):
    """Bad simulator input, or tables the simulator cannot run (message says which)."""

    exit_code = 2


@dataclass(frozen=True)
class PortMap:
    """Every (switch, port) of a fabric as a port id ``pid``, with what sits behind it."""

    names: list[str]  # switch names, index = switch id
    pid_base: np.ndarray  # per switch: first pid (pid = pid_base[s] + port)
    width: np.ndarray  # per switch: max port + 1
    sw: np.ndarray  # per pid: switch id
    port: np.ndarray  # per pid: port number
    kind: np.ndarray  # per pid: 0 none, 1 host, 2 local/fabric, 3 global (Dragonfly) / top dimension (FB)
    peer: np.ndarray  # per pid: peer pid (switch ports) or -1
    host: np.ndarray  # per pid: host id behind a host port, else -1
    host_pid: np.ndarray  # per host: the pid of its access port
    group: np.ndarray  # per switch: its group (Dragonfly group, FB row...)

    @property
    def n(self) -> int:
        return len(self.sw)


def port_map(fabric: Fabric) -> PortMap:
    names = [s.name for s in fabric.switches]
    index = {n: i for i, n in enumerate(names)}
    width = np.array([max(fabric.ports(s), default=0) + 1 for s in names], dtype=np.int64)
    base = np.concatenate([[0], np.cumsum(width)[:-1]]).astype(np.int64)
    n = int(width.sum())
    sw = np.repeat(np.arange(len(names)), width)
    port = np.arange(n) - base[sw]
    kind = np.zeros(n, dtype=np.int8)
    peer = np.full(n, -1, dtype=np.int64)
    host = np.full(n, -1, dtype=np.int64)
    hid = {h.name: i for i, h in enumerate(fabric.hosts)}
    host_pid = np.zeros(len(fabric.hosts), dtype=np.int64)
    top = None
    if fabric.kind == "flattened_butterfly":
        top = f"dim{len(fabric.params['dims']) - 1}"
    for i, s in enumerate(names):
        for p, pe in fabric.ports(s).items():
            pid = base[i] + p
            if pe.is_host:
                kind[pid] = 1
                host[pid] = hid[pe.node]
                host_pid[hid[pe.node]] = pid
            else:
                kind[pid] = 3 if pe.kind in ("global", top) else 2
                peer[pid] = base[index[pe.node]] + pe.port
    group = np.array([s.group for s in fabric.switches], dtype=np.int64)
    return PortMap(names, base, width, sw, port, kind, peer, host, host_pid, group)


def compile_policy(fabric: Fabric, policy: str, mode: str = "compact", traffic: Any = None) -> Any:
    """The tables the controller would install for ``policy``, with classes of service on
    (the paper's 2 CoS levels for Dragonfly: lossless links need them to stay deadlock-free);
    ``traffic``: a TrafficMatrix choosing the Valiant intermediates (workload-aware), None: static."""
    if policy not in POLICIES:
        raise SimError(f"unknown policy {policy!r}: expected one of {', '.join(POLICIES)}")
    plan = plan_addresses(fabric, mode)
    return compile_fabric(fabric, plan, routing=policy, cos=True, traffic=traffic)


class Forwarding:
    """Next-hop lookups of one compiled fabric (module docstring).

    :meth:`decide` gives, for frames arriving at states ``state`` (the engine's arrival
    states: switch, port, PCP slot) for destinations ``dst`` (host ids), the output pid, the
    arrival state at the next switch (or -1 at a host) and the output port whose flip selects
    the alternative decision."""

    def __init__(self, compiled: Any, pm: PortMap | None = None) -> None:
        fabric = compiled.fabric
        self.fabric = fabric
        self.pm = pm if pm is not None else port_map(fabric)
        relevant = forward_data_flows(compiled, "the simulator", SimError, actions=True)
        hosts = fabric.hosts
        macs = np.array([compiled.plan.host_mac[h.name] for h in hosts], dtype=np.uint64)
        groups = groups_of_hosts(hosts)
        split = structural_splits_of(relevant, macs, groups)
        col = np.zeros(len(hosts), dtype=np.int64)
        reps: list[int] = []
        for t, ids in groups.items():
            if t in split:
                col[ids] = np.arange(len(reps), len(reps) + len(ids))
                reps.extend(ids.tolist())
            else:
                col[ids] = len(reps)
                reps.append(int(ids[0]))
        self.col = col
        ch = self.ch = Choices(compiled, relevant, macs[np.array(reps, dtype=np.int64)])
        self.host_sw = np.array([ch.sw_index[h.switch] for h in hosts], dtype=np.int64)
        # PCP slots in use -> dense class index (untagged first)
        live = np.flatnonzero(ch.state_line >= 0)
        live_sw = np.searchsorted(ch.state_base, live, side="right") - 1
        slots = np.unique((live - ch.state_base[live_sw]) % PCP_SLOTS)
        self.class_of_slot = np.full(PCP_SLOTS, -1, dtype=np.int64)
        self.class_of_slot[slots] = np.arange(len(slots))
        self.n_classes = len(slots)
        self.slots = slots
        self.flippable = bool((ch.alt != ch.base).any())
        # per state: switch, input pid, class (direct lookups instead of searches per frame)
        st = np.arange(ch.n_states)
        self.st_sw = (np.searchsorted(ch.state_base, st, side="right") - 1).astype(np.int64)
        off = st - ch.state_base[self.st_sw]
        self.st_pid = self.pm.pid_base[self.st_sw] + off // PCP_SLOTS
        self.st_cls = self.class_of_slot[off % PCP_SLOTS]

    # -- states ------------------------------------------------------------
    def host_state(self, h: np.ndarray) -> np.ndarray:
        """Arrival state of a frame injected by hosts ``h`` (untagged, at their access port)."""
        pid = self.pm.host_pid[h]
        return self.ch.state_base[self.pm.sw[pid]] + self.pm.port[pid] * PCP_SLOTS

    # -- decisions ---------------------------------------------------------
    def cells(self, state: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(switch id, cell of the choice arrays) of frames in ``state`` for host ids ``dst``."""
        ch = self.ch
        sw = self.st_sw[state]
        line = ch.state_line[state]
        if (line < 0).any():
            bad = state[line < 0][0]
            s, p, c = ch.decode(np.array([bad]))
            raise SimError(f"{ch.names[int(s[0])]}: port {int(p[0])} PCP slot {int(c[0])} has no decision line "
                           "(a frame reached a state the tables never lead to)")
        own = self.host_sw[dst] == sw
        cls = np.where(own, ch.host_cls[dst], ch.cls[sw, self.col[dst]])
        return sw, ch.line_off[line] + cls

    def decide(self, state: np.ndarray, dst: np.ndarray, flipped: np.ndarray | None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(output pid, next arrival state or -1 when the output is a host port, bad) per frame.

        ``flipped``: per pid, True while that port's PORT_STATE entry says paused (None: never).
        ``bad``: frames the tables drop, punt, flood or misdeliver (a lossless run must have none)."""
        ch, pm = self.ch, self.pm
        sw, cell = self.cells(state, dst)
        choice = ch.base[cell]
        if flipped is not None and self.flippable:
            port0 = np.where(choice >= 0, choice >> SLOT_BITS, 0)
            use_alt = (choice >= 0) & flipped[pm.pid_base[sw] + np.minimum(port0, pm.width[sw] - 1)]
            choice = np.where(use_alt, ch.alt[cell], choice)
        ok = choice >= 0
        c = np.where(ok, choice, 0)
        port = c >> SLOT_BITS
        slot = c & ((1 << SLOT_BITS) - 1)
        out = pm.pid_base[sw] + np.minimum(port, pm.width[sw] - 1)
        nxt = ch.egress_codes[ch.state_base[sw] + np.minimum(port, pm.width[sw] - 1) * PCP_SLOTS + slot]
        to_host = nxt <= DELIVER
        bad = ~ok | ((nxt < 0) & ~to_host) | (to_host & (DELIVER - nxt != dst))
        return out, np.where(to_host | bad, -1, nxt), bad
