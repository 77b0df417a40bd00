"""Multi-stage folded Clos fabrics (the paper's 4-stage, ~300,000-host build).

A folded Clos of radix ``k`` (``half = k/2``) and ``n`` stages is built from
*pods* and *blocks*:

* level 1 (``edge``): ``half`` hosts on ports ``1..half``, ``half`` uplinks on
  ``half+1..k``;
* a **pod** (2-block): ``half`` edge switches and ``half`` level-2
  (``aggregation``) switches, every edge switch linked once to every level-2
  switch: ``half**2`` hosts;
* an **l-block** (3 <= l <= n-1): up to ``half`` (l-1)-blocks plus one level-l
  (``aggregation``) switch per edge switch below, organised in *planes*: the
  level-(l-1) switch at position ``r`` of each (l-1)-block connects only to
  plane ``r``;
* level ``n`` (``core``): switches with all ``k`` ports down, joining the
  (n-1)-blocks.

Every non-top switch has ``half`` ports down (``1..half``) and ``half`` up
(``half+1..k``): full bisection bandwidth at every level.

Truncated builds and the paper's "6.5 stage-3 groups"
------------------------------------------------------
``pods`` (or ``hosts``) may be smaller than the maximum ``k * half**(n-3)``.
Pods fill blocks in order, so only the *last* block of each level is partial.
A partial l-block with ``c`` (l-1)-blocks still has one level-l switch per
edge switch below (``c`` switches per plane), and the ``half`` uplinks of a
level-(l-1) switch are dealt round-robin over its plane: uplink ``u`` of the
``q``-th lower block goes to plane member ``(q*half + u) mod c`` on down port
``(q*half + u) // c + 1``. In a full block that is the classic wiring (one
link between every lower block and every plane member); in the paper's half
stage-3 group (18 pods) every level-3 switch gets **two parallel links to
each of its 18 pods**, so it keeps 36 ports down and 36 up.

The top level deals all uplinks of the level-(n-1) switches (block-major,
then position, then uplink) round-robin over ``ceil(U / k)`` core switches:
uplink slot ``i`` goes to core ``i mod N`` on port ``i // N + 1``. Each block
is a contiguous run of at least ``N`` slots, so **every core switch reaches
every (n-1)-block** (checked; a too-small last block is rejected) and up-down
routing may go up any uplink. With ``k`` full blocks this is the classic
top level (one link per core per block); for the paper's build each core
switch gets 11 or 12 links into each full stage-3 group and 5 or 6 into the
half group (72 in all).

Paper check (k=72, n=4, pods=234 = 6.5 x 36): 8,424 edge + 8,424 level-2 +
8,424 level-3 (6 x 1,296 + 648) + 4,212 core = 29,484 switches, 303,264 hosts.

Addressing hooks
----------------
``group`` of edge and level-2 switches is the pod's *aligned* id: the pod's
position digits (pod within 3-block, 3-block within 4-block, ...) each get
``w = bits_for(half)`` bits, so every l-block is one prefix of the group
field (``group >> w*(l-2)``). With ``n = 3`` this is just the pod number;
for the paper's build pod ``q`` of stage-3 group ``b`` is ``64*b + q``.
Eq. 1 counts pods that exist, so the gaps do not change it. Level >= 3
switches have ``group = -1`` (like fat-tree cores). ``coords`` are
``(level, prefix, position)``: ``prefix`` is the block's group prefix (edge
and level-2: the pod id; core: 0).

Routing is up-down (:class:`hpcfabric.rules.routing.FoldedClosRouter`): go up
until the destination pod is below, then down; the compact tables
(:func:`hpcfabric.rules.fabrics.updown.folded_clos_compact_flows`) send frames
down by destination prefix and up by ``in_port`` (a static hash of the
source), one entry per port in use on every switch.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil
from typing import Any

from hpcfabric.errors import TopologyError
from hpcfabric.topology.model import Fabric, Host, Link, Switch, gc_paused
from hpcfabric.topology.params import bits_for, need_int

KIND = "folded_clos"
MAX_STAGES = 6


@dataclass(frozen=True)
class ClosShape:
    """Switch and host counts of a folded Clos, without building it."""

    radix: int
    stages: int
    pods: int
    hosts: int
    per_level: tuple[int, ...]  # switches at level 1..n
    max_pods: int

    @property
    def switches(self) -> int:
        return sum(self.per_level)

    @property
    def links(self) -> int:
        half = self.radix // 2
        return sum(self.per_level[:-1]) * half


def folded_clos_shape(radix: int, stages: int = 3, *, hosts: int | None = None, pods: int | None = None) -> ClosShape:
    """Validate parameters and return the counts (see :func:`folded_clos_fabric`)."""
    k = need_int("radix", radix, 4)
    if k % 2:
        raise TopologyError(f"must be even, got {k}", field="radix")
    n = need_int("stages", stages, 3)
    if n > MAX_STAGES:
        raise TopologyError(f"at most {MAX_STAGES} stages are supported, got {n}", field="stages")
    half = k // 2
    per_pod = half * half
    max_pods = k * half ** (n - 3)
    if hosts is not None and pods is not None:
        raise TopologyError("give either hosts or pods, not both", field="hosts")
    if hosts is not None:
        hosts = need_int("hosts", hosts, 1)
        if hosts % per_pod:
            lo, hi = hosts // per_pod * per_pod, (hosts // per_pod + 1) * per_pod
            raise TopologyError(
                f"{hosts:,} hosts is not a whole number of pods ({per_pod:,} hosts each with radix {k}); "
                f"use {lo:,} or {hi:,}" if lo else f"{hosts:,} hosts is less than one pod ({per_pod:,} hosts)",
                field="hosts",
            )
        pods = hosts // per_pod
    if pods is None:
        pods = max_pods
    pods = need_int("pods", pods, 1)
    if pods > max_pods:
        raise TopologyError(
            f"{pods:,} pods exceed the {n}-stage maximum of {max_pods:,} for radix {k} "
            f"({max_pods * per_pod:,} hosts); add a stage",
            field="hosts" if hosts is not None else "pods",
        )
    edges = pods * half
    top_block = half ** (n - 3)  # pods per (n-1)-block
    if n > 4 and pods % half ** (n - 4):
        raise TopologyError(
            f"with {n} stages only the stage-{n - 1} groups may be partial: pods must be a multiple of "
            f"{half ** (n - 4)} (pods per stage-{n - 2} group)",
            field="hosts" if hosts is not None else "pods",
        )
    if n > 3 and pods % top_block:
        last = pods % top_block
        slots_last = last * per_pod
        n_top = ceil(edges * half / k)
        if slots_last < n_top:
            raise TopologyError(
                f"the last stage-{n - 1} group would hold only {last} pod(s): its {slots_last:,} uplinks cannot "
                f"reach all {n_top:,} core switches (up-down routing needs every core to reach every group); "
                f"use at least {ceil(n_top / per_pod)} pods there",
                field="hosts" if hosts is not None else "pods",
            )
    per_level = tuple([edges] * (n - 1) + [ceil(edges * half / k)])
    return ClosShape(k, n, pods, edges * half, per_level, max_pods)


@gc_paused()
def folded_clos_fabric(
    radix: int,
    stages: int = 3,
    *,
    hosts: int | None = None,
    pods: int | None = None,
    name: str | None = None,
) -> Fabric:
    """Return an ``stages``-stage folded Clos of ``radix``-port switches.

    Parameters
    ----------
    radix : int
        Even switch port count ``k`` >= 4; every non-top switch uses ``k/2``
        ports down and ``k/2`` up, top (core) switches use up to ``k`` down.
    stages : int
        Switch levels, 3..6 (3 = the classic fat-tree of :func:`fat_tree_fabric`
        wired identically when full; the paper's 300k build uses 4).
    hosts : int, optional
        Total hosts: a multiple of the pod size ``(k/2)**2``. Mutually
        exclusive with ``pods``.
    pods : int, optional
        Number of pods (default: the maximum, ``k * (k/2)**(stages-3)``).
    name : str, optional
        Defaults to ``folded-clos-k{k}-n{stages}-p{pods}``.

    Returns
    -------
    Fabric
        Kind ``folded_clos``. Edge ``p{pod}e{i}``: hosts ``p{pod}e{i}h{t}`` on
        ports ``1..k/2``, uplink ``u`` on ``k/2+1+u`` to level-2 switch
        ``p{pod}a{u}`` (which has edge ``i`` on port ``1+i``). Level
        ``3..n-1`` switch ``l{l}b{block}s{pos}``, core ``c{t}``. See the module
        docstring for the wiring of truncated builds, ``group`` and ``coords``.

    Raises
    ------
    TopologyError
        Odd or too-small radix, stages outside 3..6, hosts not a whole number
        of pods, more pods than the stages allow, or a last block too small
        for every core switch to reach it.

    Examples
    --------
    >>> f = folded_clos_fabric(4, 3)
    >>> len(f.switches), len(f.hosts), f.max_radix
    (20, 16, 4)
    >>> s = folded_clos_shape(72, 4, hosts=303_264)
    >>> s.switches, s.hosts, s.per_level
    (29484, 303264, (8424, 8424, 8424, 4212))

    Notes
    -----
    Switch diameter ``2(n-1)`` (up to the lowest common level and down).
    Switches: ``(n-1) * E + ceil(E*k/2 / k)`` with ``E = pods * k/2`` edge
    switches; hosts ``E * k/2``; links ``(n-1) * E * k/2``.
    """
    shape = folded_clos_shape(radix, stages, hosts=hosts, pods=pods)
    k, n, n_pods = shape.radix, shape.stages, shape.pods
    half = k // 2
    w = bits_for(half)

    def pod_group(p: int) -> int:
        g, shift = 0, 0
        while True:
            digit = p % half if shift < w * (n - 3) else p
            g |= digit << shift
            if shift >= w * (n - 3):
                return g
            p //= half
            shift += w

    groups = [pod_group(p) for p in range(n_pods)]
    switches: list[Switch] = []
    hosts_l: list[Host] = []
    links: list[Link] = []
    dpid = 1
    # level 1 and 2: pods
    for p in range(n_pods):
        for i in range(half):
            nm = f"p{p}e{i}"
            switches.append(Switch(nm, dpid, groups[p], i, (1, groups[p], i), "edge"))
            dpid += 1
            for t in range(half):
                hosts_l.append(Host(f"{nm}h{t}", nm, 1 + t, t))
    for p in range(n_pods):
        for j in range(half):
            switches.append(Switch(f"p{p}a{j}", dpid, groups[p], j, (2, groups[p], j), "aggregation"))
            dpid += 1
    for p in range(n_pods):
        for i in range(half):
            for u in range(half):
                links.append(Link(f"p{p}e{i}", half + 1 + u, f"p{p}a{u}", 1 + i, "level1-2"))

    # below[l] = list of l-blocks, each a list of switch names by position, and its group prefix
    blocks: list[tuple[int, list[str]]] = [
        (groups[p], [f"p{p}a{j}" for j in range(half)]) for p in range(n_pods)
    ]  # 2-blocks (pods): level-2 switches by position
    for level in range(3, n):
        merged: list[tuple[int, list[str]]] = []
        for start in range(0, len(blocks), half):
            members = blocks[start : start + half]
            prefix = members[0][0] >> w  # one more digit of the pod id
            bi = len(merged)
            n_pos = len(members[0][1])
            names: list[str] = []
            for r in range(n_pos):
                holders = [mem for mem in members if r < len(mem[1])]
                c = len(holders)
                base = len(names)
                for m in range(c):
                    nm = f"l{level}b{bi}s{base + m}"
                    switches.append(Switch(nm, dpid, -1, base + m, (level, prefix, base + m), "aggregation"))
                    dpid += 1
                    names.append(nm)
                for q, mem in enumerate(holders):
                    for u in range(half):
                        s = q * half + u
                        links.append(Link(mem[1][r], half + 1 + u, names[base + s % c], s // c + 1, f"level{level - 1}-{level}"))
            merged.append((prefix, names))
        blocks = merged
    # top level: deal every uplink slot of the level-(n-1) switches over the cores
    n_top = shape.per_level[-1]
    cores = [f"c{t}" for t in range(n_top)]
    for t, nm in enumerate(cores):
        switches.append(Switch(nm, dpid, -1, t, (n, 0, t), "core"))
        dpid += 1
    i = 0
    for _, names in blocks:
        for nm in names:
            for u in range(half):
                links.append(Link(nm, half + 1 + u, cores[i % n_top], i // n_top + 1, f"level{n - 1}-{n}"))
                i += 1
    params: dict[str, Any] = {
        "radix": k,
        "stages": n,
        "pods": n_pods,
        "hosts_per_pod": half * half,
        "group_bits": w,
    }
    fname = name or f"folded-clos-k{k}-n{n}-p{n_pods}"
    return Fabric(KIND, fname, tuple(switches), tuple(hosts_l), tuple(links), params)
