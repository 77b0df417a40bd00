"""The surviving fabric as the incremental proof (:mod:`hpcfabric.verify.incremental.delta`) walks it: where each
output leads with failures out, and which switches still reach each other."""

from __future__ import annotations

from typing import Any

import numpy as np

from hpcfabric.verify.codes import DEAD, PCP_SLOTS

__all__ = ["surviving", "link_ends", "components"]


def surviving(ch: Any, failures: Any) -> tuple[np.ndarray, np.ndarray]:
    """(next state or final code per (switch, port, PCP slot), connected component per switch) of the
    fabric with ``failures`` out (None: none)."""
    fabric = ch.fabric
    egress = ch.egress_codes.copy()
    dead = failures.dead_ports(fabric) if failures else {}
    failed = failures.switches if failures else frozenset()
    for s in ch.names:
        first = int(ch.state_base[ch.sw_index[s]])
        ports = fabric.ports(s) if s in failed else dead.get(s, ())
        for p in ports:
            egress[first + p * PCP_SLOTS: first + (p + 1) * PCP_SLOTS] = DEAD
    for s in failed:  # nothing arrives from a failed switch either
        for p, peer in fabric.fabric_ports(s).items():
            first = int(ch.state_base[ch.sw_index[peer.node]])
            egress[first + peer.port * PCP_SLOTS: first + (peer.port + 1) * PCP_SLOTS] = DEAD  # type: ignore[operator]
    a, b = link_ends(ch)
    live = np.array([link.a_port not in dead.get(link.a, ()) and link.a not in failed and link.b not in failed
                     for link in fabric.links], dtype=bool)
    return egress, components(len(ch.names), a[live], b[live])


def link_ends(ch: Any) -> tuple[np.ndarray, np.ndarray]:
    """Switch indices of both ends of every fabric link, in ``fabric.links`` order (kept on ``ch``)."""
    got = getattr(ch, "_link_ends", None)
    if got is None:
        links = ch.fabric.links
        got = (np.array([ch.sw_index[link.a] for link in links], dtype=np.int64),
               np.array([ch.sw_index[link.b] for link in links], dtype=np.int64))
        ch._link_ends = got
    return got


def components(n: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Connected component label (its lowest member) of each of ``n`` nodes joined by the edges ``a``-``b``:
    labels lowered along the edges and by pointer jumping until they hold still (a few rounds for a
    low-diameter fabric)."""
    label = np.arange(n, dtype=np.int64)
    while True:
        low = np.minimum(label[a], label[b])
        new = label.copy()
        np.minimum.at(new, a, low)
        np.minimum.at(new, b, low)
        new = new[new]
        if np.array_equal(new, label):
            return label
        label = new
