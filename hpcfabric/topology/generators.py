"""Generators for the fabrics of the paper: Dragonfly, Flattened Butterfly, fat-tree.

Each generator returns a :class:`~hpcfabric.topology.model.Fabric` with
explicit, documented port numbers, so Mininet, the controller and real
cabling plans all agree on them. Parameters are checked first; impossible
ones raise :class:`~hpcfabric.errors.TopologyError` naming the parameter.
"""

from __future__ import annotations

from itertools import product

from hpcfabric.errors import TopologyError
from hpcfabric.topology.model import Fabric, Host, Link, Switch, gc_paused
from hpcfabric.topology.params import need_int

DRAGONFLY_ARRANGEMENTS = ("auto", "palmtree", "xor")


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def xor_arrangement_applies(a: int, h: int, g: int) -> bool:
    """True when the XOR global-link arrangement exists for (a, h, g).

    It needs ``h`` a power of two and either ``g`` a power of two with
    ``g <= a*h`` or ``g == a*h + 1`` with ``a*h`` a power of two.
    """
    if g < 2 or not _is_pow2(h):
        return False
    return (_is_pow2(g) and g <= a * h) or (g == a * h + 1 and _is_pow2(a * h))


def dragonfly_global_slots(a: int, h: int, g: int, arrangement: str) -> list[tuple[int, int, int, int]]:
    """Global links as (group_i, slot_i, group_j, slot_j), each listed once (i < j).

    Group ``i`` has ``a*h`` global slots; slot ``k`` sits on switch ``k // h``,
    global port ``k % h``. Arrangements:

    ``palmtree``
        Slot ``k`` of group ``i`` reaches group ``(i + k % (g-1) + 1) mod g``;
        when ``a*h >= 2(g-1)`` every pair gets ``a*h // (g-1)`` parallel links
        and the remaining slots stay unused. Works for every ``g <= a*h+1``.
    ``xor``
        Slot ``k`` of group ``i`` reaches group ``i XOR k``; with
        ``g == a*h + 1`` the extra group ``a*h`` takes slot 0 of every other
        group. The groups behind one switch then form an aligned block of
        group numbers, which is what rule compaction feeds on.
    """
    if arrangement == "xor" and not xor_arrangement_applies(a, h, g):
        raise TopologyError(
            f"the xor arrangement needs h a power of two and g a power of two <= a*h "
            f"or g == a*h+1 with a*h a power of two (a={a}, h={h}, g={g}); use 'palmtree'",
            field="arrangement",
        )
    if g < 2:
        return []
    links: list[tuple[int, int, int, int]] = []
    if arrangement == "palmtree":
        r = (a * h) // (g - 1)
        for i in range(g):
            for k in range(r * (g - 1)):
                d = k % (g - 1) + 1
                j = (i + d) % g
                kj = (k // (g - 1)) * (g - 1) + (g - d - 1)
                if i < j:
                    links.append((i, k, j, kj))
        return links
    if arrangement == "xor":
        base = g if _is_pow2(g) and g <= a * h else a * h
        for i in range(base):
            for k in range(1, base):
                j = i ^ k
                if i < j:
                    links.append((i, k, j, k))
        if base != g:  # the extra group, numbered a*h, on slot 0 of every other group
            extra = base
            for i in range(base):
                links.append((i, 0, extra, i))
        return links
    raise TopologyError(f"unknown arrangement {arrangement!r}; expected one of {DRAGONFLY_ARRANGEMENTS}", field="arrangement")


def dragonfly_ports(p: int, h: int) -> dict[str, int]:
    """First port of each block on a Dragonfly switch: hosts, global, local (as in the paper's Fig. 9)."""
    return {"host": 1, "global": p + 1, "local": p + h + 1}


@gc_paused()
def dragonfly_fabric(
    a: int,
    p: int,
    h: int,
    g: int | None = None,
    *,
    arrangement: str = "auto",
    name: str | None = None,
) -> Fabric:
    """Return a Dragonfly fabric of ``g`` groups of ``a`` switches.

    Parameters
    ----------
    a : int
        Switches per group (all-to-all connected by local links).
    p : int
        Hosts per switch.
    h : int
        Global links per switch.
    g : int, optional
        Number of groups, at most ``a*h + 1`` (the default, the maximum size).
    arrangement : {'auto', 'palmtree', 'xor'}
        How global links are laid out (see :func:`dragonfly_global_slots`);
        ``auto`` takes ``xor`` where it exists, else ``palmtree``.
    name : str, optional
        Fabric name; defaults to ``dragonfly-a{a}-p{p}-h{h}-g{g}``.

    Returns
    -------
    Fabric
        Switch ``g{i}s{s}`` (dpid ``i*a + s + 1``) has host ports ``1..p``,
        global ports ``p+1..p+h`` and local ports ``p+h+1..p+h+a-1`` (to the
        group's other switches in increasing index order); host ``g{i}s{s}h{t}``
        sits on port ``t+1``.

    Raises
    ------
    TopologyError
        On non-integer or out-of-range parameters, e.g. ``g > a*h + 1``.

    Examples
    --------
    >>> f = dragonfly_fabric(4, 2, 2)
    >>> len(f.switches), len(f.hosts), f.max_radix
    (36, 72, 7)

    Notes
    -----
    Every pair of groups is joined by at least one global link, so the switch
    diameter is at most 3 (local, global, local) when ``g > 1`` and ``a > 1``;
    it is 2 when ``palmtree`` lays ``a*h // (g-1) >= a`` parallel links
    between each pair (then every switch has its own link to every group).
    The paper's Fig. 3c/Fig. 9 fabric is ``a=4, p=2, h=2`` (9 groups).
    """
    a = need_int("a", a, 1)
    p = need_int("p", p, 1)
    h = need_int("h", h, 0)
    if g is None:
        g = a * h + 1
    g = need_int("g", g, 1)
    if g > a * h + 1:
        raise TopologyError(
            f"{g} groups need {g - 1} global links per group but a*h = {a * h} (at most a*h+1 = {a * h + 1} groups)",
            field="g",
        )
    if arrangement not in DRAGONFLY_ARRANGEMENTS:
        raise TopologyError(f"must be one of {list(DRAGONFLY_ARRANGEMENTS)}, got {arrangement!r}", field="arrangement")
    chosen = arrangement
    if arrangement == "auto":
        chosen = "xor" if xor_arrangement_applies(a, h, g) else "palmtree"
    elif arrangement == "xor" and not xor_arrangement_applies(a, h, g):
        dragonfly_global_slots(a, h, g, "xor")  # raises the explanatory error

    def sname(i: int, s: int) -> str:
        return f"g{i}s{s}"

    base = dragonfly_ports(p, h)
    switches = tuple(
        Switch(sname(i, s), i * a + s + 1, i, s, (i, s), "access") for i in range(g) for s in range(a)
    )
    hosts = tuple(
        Host(f"{sname(i, s)}h{t}", sname(i, s), base["host"] + t, t)
        for i in range(g)
        for s in range(a)
        for t in range(p)
    )
    links: list[Link] = []
    for i in range(g):
        for s in range(a):
            for t in range(s + 1, a):
                links.append(
                    Link(sname(i, s), base["local"] + t - 1, sname(i, t), base["local"] + s, "local")
                )
    for i, ki, j, kj in dragonfly_global_slots(a, h, g, chosen):
        links.append(
            Link(sname(i, ki // h), base["global"] + ki % h, sname(j, kj // h), base["global"] + kj % h, "global")
        )
    params = {"a": a, "p": p, "h": h, "g": g, "arrangement": chosen}
    return Fabric("dragonfly", name or f"dragonfly-a{a}-p{p}-h{h}-g{g}", switches, hosts, tuple(links), params)


@gc_paused()
def flattened_butterfly_fabric(dims: list[int] | tuple[int, ...], hosts_per_switch: int, *, name: str | None = None) -> Fabric:
    """Return an n-dimensional Flattened Butterfly.

    Parameters
    ----------
    dims : sequence of int
        Switches along each dimension, lowest first (``[k0, k1, ...]``); the
        switches of each dimension line are connected all-to-all.
    hosts_per_switch : int
        Hosts on every switch (T).
    name : str, optional
        Defaults to ``fb-{k0}x{k1}...-t{T}``.

    Returns
    -------
    Fabric
        Switch ``s{c0}_{c1}_...`` has host ports ``1..T``, then for each
        dimension ``d`` in order ``k_d - 1`` ports to the other coordinates of
        that dimension in increasing order. ``group`` is the linear index of
        the coordinates of dimensions >= 1 (a "row"), ``index`` is ``c0``.

    Raises
    ------
    TopologyError
        If ``dims`` is empty, longer than 8, or has a size below 2.

    Examples
    --------
    >>> f = flattened_butterfly_fabric([4, 4], 4)
    >>> len(f.switches), len(f.hosts), f.max_radix
    (16, 64, 10)

    Notes
    -----
    Switch diameter equals the number of dimensions; radix is
    ``T + sum(k_d - 1)``.
    """
    if not isinstance(dims, (list, tuple)) or not dims:
        raise TopologyError(f"must be a non-empty list of integers, got {dims!r}", field="dims")
    if len(dims) > 8:
        raise TopologyError(f"at most 8 dimensions are supported, got {len(dims)}", field="dims")
    dims = tuple(need_int(f"dims[{i}]", k, 2) for i, k in enumerate(dims))
    t_hosts = need_int("hosts_per_switch", hosts_per_switch, 1)
    n = len(dims)
    bases = []
    port = t_hosts + 1
    for k in dims:
        bases.append(port)
        port += k - 1

    def sname(c: tuple[int, ...]) -> str:
        return "s" + "_".join(str(x) for x in c)

    def dim_port(own: int, other: int, d: int) -> int:
        return bases[d] + (other if other < own else other - 1)

    coords_list = [tuple(reversed(c)) for c in product(*(range(k) for k in reversed(dims)))]
    switches = []
    for idx, c in enumerate(coords_list):
        group = 0
        for d in range(n - 1, 0, -1):
            group = group * dims[d] + c[d]
        switches.append(Switch(sname(c), idx + 1, group, c[0], c, "access"))
    hosts = tuple(Host(f"{sw.name}h{t}", sw.name, 1 + t, t) for sw in switches for t in range(t_hosts))
    links = []
    for c in coords_list:
        for d in range(n):
            for v in range(c[d] + 1, dims[d]):
                o = c[:d] + (v,) + c[d + 1 :]
                links.append(Link(sname(c), dim_port(c[d], v, d), sname(o), dim_port(v, c[d], d), f"dim{d}"))
    label = "x".join(str(k) for k in dims)
    params = {"dims": list(dims), "hosts_per_switch": t_hosts}
    return Fabric("flattened_butterfly", name or f"fb-{label}-t{t_hosts}", tuple(switches), hosts, tuple(links), params)


@gc_paused()
def fat_tree_fabric(k: int, *, name: str | None = None) -> Fabric:
    """Return a k-ary 3-level fat-tree (folded Clos) as in Al-Fares et al.

    Parameters
    ----------
    k : int
        Even switch radix: ``k`` pods of ``k/2`` edge and ``k/2`` aggregation
        switches, ``(k/2)**2`` core switches, ``k/2`` hosts per edge switch.
    name : str, optional
        Defaults to ``fat-tree-k{k}``.

    Returns
    -------
    Fabric
        Edge ``p{pod}e{i}``: hosts on ``1..k/2``, uplink to aggregation ``j`` on
        ``k/2+1+j``. Aggregation ``p{pod}a{j}``: edge ``i`` on ``1+i``, core
        ``c{j}_{m}`` on ``k/2+1+m``. Core ``c{j}_{m}``: pod ``q`` on ``1+q``.
        Edge and aggregation switches have ``group`` = pod; core switches
        group -1.

    Raises
    ------
    TopologyError
        If ``k`` is not an even integer >= 2.

    Examples
    --------
    >>> f = fat_tree_fabric(4)
    >>> len(f.switches), len(f.hosts), len(f.links)
    (20, 16, 32)

    Notes
    -----
    ``5k²/4`` switches, ``k³/4`` hosts, ``k³/2`` switch links, every switch
    of radix ``k``; switch diameter 4 (edge-aggregation-core-aggregation-edge).
    """
    k = need_int("k", k, 2)
    if k % 2:
        raise TopologyError(f"must be even, got {k}", field="k")
    half = k // 2
    switches: list[Switch] = []
    dpid = 1
    for pod in range(k):
        for i in range(half):
            switches.append(Switch(f"p{pod}e{i}", dpid, pod, i, (pod, i), "edge"))
            dpid += 1
    for pod in range(k):
        for j in range(half):
            switches.append(Switch(f"p{pod}a{j}", dpid, pod, j, (pod, j), "aggregation"))
            dpid += 1
    for j in range(half):
        for m in range(half):
            switches.append(Switch(f"c{j}_{m}", dpid, -1, j * half + m, (j, m), "core"))
            dpid += 1
    hosts = tuple(
        Host(f"p{pod}e{i}h{t}", f"p{pod}e{i}", 1 + t, t) for pod in range(k) for i in range(half) for t in range(half)
    )
    links: list[Link] = []
    for pod in range(k):
        for i in range(half):
            for j in range(half):
                links.append(Link(f"p{pod}e{i}", half + 1 + j, f"p{pod}a{j}", 1 + i, "edge-agg"))
    for pod in range(k):
        for j in range(half):
            for m in range(half):
                links.append(Link(f"p{pod}a{j}", half + 1 + m, f"c{j}_{m}", 1 + pod, "agg-core"))
    return Fabric("fat_tree", name or f"fat-tree-k{k}", tuple(switches), hosts, tuple(links), {"k": k})

