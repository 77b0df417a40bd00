"""Fabrics described switch by switch, host by host and link by link.

The YAML loader turns ``kind: explicit`` files into plain Python data and
calls :func:`explicit_fabric`; it can also be called directly. Every semantic
error raises :class:`~hpcfabric.errors.TopologyError` whose ``field`` is the
key path of the offending item (``switches[2].dpid``, ``links[3].b``...), the
same path the YAML file uses.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import networkx as nx

from hpcfabric.errors import TopologyError
from hpcfabric.topology.model import Fabric, Host, Link, Switch

#: Roles a switch of an explicit fabric may declare.
EXPLICIT_ROLES = ("access", "transit")

#: Keys of each item; ``name``/``switch``/``port`` and the four link keys are required.
SWITCH_KEYS = ("name", "dpid", "group", "index", "role")
HOST_KEYS = ("name", "switch", "port")
LINK_KEYS = ("a", "a_port", "b", "b_port")

#: Highest usable OpenFlow port number (OFPP_MAX).
MAX_PORT = 0xFFFFFF00
#: dpids are 64-bit and 0 is not a valid datapath id.
MAX_DPID = 2**64 - 1

#: Unreachable switches named in a "not connected" error before "... and N more".
_SHOW_UNREACHABLE = 5


def _item(seq_name: str, i: int, item: object, keys: tuple[str, ...], required: tuple[str, ...]) -> Mapping[str, Any]:
    if not isinstance(item, Mapping):
        raise TopologyError(f"must be a mapping with keys {', '.join(keys)}, got {item!r}", field=f"{seq_name}[{i}]")
    for key in item:
        if key not in keys:
            raise TopologyError(f"unknown key {key!r}; expected {', '.join(keys)}", field=f"{seq_name}[{i}].{key}")
    for key in required:
        if key not in item:
            raise TopologyError(f"missing required key {key!r}", field=f"{seq_name}[{i}].{key}")
    return item


def _name(value: object, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise TopologyError(f"must be a non-empty string, got {value!r}", field=where)
    if any(ch.isspace() or not ch.isprintable() for ch in value):
        raise TopologyError(f"name {value!r} must not contain whitespace or control characters", field=where)
    return value


def _int(value: object, where: str, minimum: int, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TopologyError(f"must be an integer, got {value!r}", field=where)
    if value < minimum or (maximum is not None and value > maximum):
        if maximum is None:
            bound = f">= {minimum}"
        else:
            bound = f"in {minimum}..{maximum:#x}" if maximum > 1 << 20 else f"in {minimum}..{maximum}"
        raise TopologyError(f"must be {bound}, got {value}", field=where)
    return value


def _seq(value: object, where: str) -> Sequence[Any]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise TopologyError(f"must be a list, got {value!r}", field=where)
    return value


def explicit_fabric(
    switches: Sequence[Mapping[str, Any]],
    hosts: Sequence[Mapping[str, Any]],
    links: Sequence[Mapping[str, Any]],
    *,
    name: str | None = None,
) -> Fabric:
    """Return a fabric built from explicit lists of switches, hosts and links.

    Parameters
    ----------
    switches : sequence of mapping
        One mapping per switch with keys ``name`` (required, unique),
        ``dpid`` (int in 1..2^64-1, unique; default: position in the list + 1),
        ``group`` (int >= 0, default 0), ``index`` (int >= 0; default: order
        of appearance within its group) and ``role`` (``'access'`` or
        ``'transit'``; default ``'access'`` if the switch has hosts, else
        ``'transit'``). ``(group, index)`` places the switch in the
        addressing hierarchy and must be unique.
    hosts : sequence of mapping
        One mapping per host: ``name`` (unique among hosts and switches),
        ``switch`` and ``port`` (int >= 1). A host's ``index`` is its rank
        by port number on its switch (0 for the lowest port).
    links : sequence of mapping
        One mapping per switch-to-switch link: ``a``, ``a_port``, ``b``,
        ``b_port``. Parallel links between two switches are allowed (on
        distinct ports); a switch may not be linked to itself.
    name : str, optional
        Fabric name; defaults to ``explicit-{n}sw`` with ``n`` switches.

    Returns
    -------
    Fabric
        ``kind == "explicit"``; switch ``coords`` are ``(group, index)``,
        link kind ``'fabric'``. Port numbers are exactly those given.

    Raises
    ------
    TopologyError
        With ``field`` naming the item, e.g. ``links[3].b``: malformed item,
        unknown switch, port used twice, self-link, duplicate names, dpids or
        ``(group, index)`` pairs, hosts on a ``'transit'`` switch, no switch
        or no host at all, or a fabric that is not connected (the error names
        up to five switches unreachable from the first one).

    Examples
    --------
    >>> f = explicit_fabric(
    ...     [{"name": "s1"}, {"name": "s2"}],
    ...     [{"name": "h1", "switch": "s1", "port": 1}, {"name": "h2", "switch": "s2", "port": 1}],
    ...     [{"a": "s1", "a_port": 2, "b": "s2", "b_port": 2}],
    ... )
    >>> len(f.switches), len(f.hosts), len(f.links), f.switch("s2").dpid
    (2, 2, 1, 2)
    """
    switches = _seq(switches, "switches")
    hosts = _seq(hosts, "hosts")
    links = _seq(links, "links")
    if not switches:
        raise TopologyError("an explicit fabric needs at least one switch", field="switches")
    if not hosts:
        raise TopologyError("an explicit fabric needs at least one host", field="hosts")

    # -- switches: names, dpids, (group, index) ---------------------------
    sw_pos: dict[str, int] = {}
    dpid_owner: dict[int, tuple[str, bool]] = {}
    slot_owner: dict[tuple[int, int], tuple[str, bool]] = {}
    seen_in_group: dict[int, int] = {}
    placed: list[tuple[str, int, int, int, str | None]] = []  # name, dpid, group, index, role
    for i, raw in enumerate(switches):
        item = _item("switches", i, raw, SWITCH_KEYS, ("name",))
        sname = _name(item["name"], f"switches[{i}].name")
        if sname in sw_pos:
            raise TopologyError(
                f"duplicate switch name {sname!r} (also switches[{sw_pos[sname]}])", field=f"switches[{i}].name"
            )
        sw_pos[sname] = i

        explicit_dpid = "dpid" in item
        dpid = _int(item["dpid"], f"switches[{i}].dpid", 1, MAX_DPID) if explicit_dpid else i + 1
        if dpid in dpid_owner:
            other, other_explicit = dpid_owner[dpid]
            how = "" if explicit_dpid else f" (default dpid = position + 1 = {dpid})"
            how_other = "" if other_explicit else " by default"
            raise TopologyError(
                f"dpid {dpid}{how} of {sname!r} is already used{how_other} by {other!r}",
                field=f"switches[{i}].dpid",
            )
        dpid_owner[dpid] = (sname, explicit_dpid)

        group = _int(item["group"], f"switches[{i}].group", 0) if "group" in item else 0
        order = seen_in_group.get(group, 0)
        seen_in_group[group] = order + 1
        explicit_index = "index" in item
        index = _int(item["index"], f"switches[{i}].index", 0) if explicit_index else order
        if (group, index) in slot_owner:
            other, other_explicit = slot_owner[(group, index)]
            hint = ""
            if not (explicit_index and other_explicit):
                hint = (
                    " (a missing index defaults to the order of appearance within the group;"
                    " give every switch of the group an index, or none)"
                )
            raise TopologyError(
                f"group {group} index {index} of {sname!r} is already taken by {other!r}{hint}",
                field=f"switches[{i}].index" if explicit_index else f"switches[{i}]",
            )
        slot_owner[(group, index)] = (sname, explicit_index)

        role = None
        if "role" in item:
            role = item["role"]
            if role not in EXPLICIT_ROLES:
                raise TopologyError(
                    f"role must be one of {', '.join(EXPLICIT_ROLES)}, got {role!r}", field=f"switches[{i}].role"
                )
        placed.append((sname, dpid, group, index, role))

    # -- ports: hosts, then links -------------------------------------------
    port_owner: dict[tuple[str, int], str] = {}

    def claim(switch: str, port: int, what: str, where: str) -> None:
        if (switch, port) in port_owner:
            raise TopologyError(
                f"port {port} of {switch!r} is used twice (already taken by {port_owner[(switch, port)]})",
                field=where,
            )
        port_owner[(switch, port)] = what

    host_names: dict[str, int] = {}
    host_rows: list[tuple[str, str, int]] = []
    for i, raw in enumerate(hosts):
        item = _item("hosts", i, raw, HOST_KEYS, HOST_KEYS)
        hname = _name(item["name"], f"hosts[{i}].name")
        if hname in sw_pos:
            raise TopologyError(
                f"host name {hname!r} is already the name of switches[{sw_pos[hname]}]", field=f"hosts[{i}].name"
            )
        if hname in host_names:
            raise TopologyError(
                f"duplicate host name {hname!r} (also hosts[{host_names[hname]}])", field=f"hosts[{i}].name"
            )
        host_names[hname] = i
        switch = _name(item["switch"], f"hosts[{i}].switch")
        if switch not in sw_pos:
            raise TopologyError(f"unknown switch {switch!r}", field=f"hosts[{i}].switch")
        port = _int(item["port"], f"hosts[{i}].port", 1, MAX_PORT)
        claim(switch, port, f"host {hname!r}", f"hosts[{i}].port")
        host_rows.append((hname, switch, port))

    has_hosts = {switch for _, switch, _ in host_rows}
    for i, (hname, switch, _) in enumerate(host_rows):
        role = placed[sw_pos[switch]][4]
        if role == "transit":
            raise TopologyError(
                f"host {hname!r} is attached to {switch!r}, which is declared role 'transit'"
                f" (transit switches carry no hosts; use role 'access' or drop the role)",
                field=f"hosts[{i}].switch",
            )

    graph = nx.Graph()
    graph.add_nodes_from(sw_pos)
    link_objs: list[Link] = []
    for i, raw in enumerate(links):
        item = _item("links", i, raw, LINK_KEYS, LINK_KEYS)
        a = _name(item["a"], f"links[{i}].a")
        b = _name(item["b"], f"links[{i}].b")
        for end, sw in (("a", a), ("b", b)):
            if sw not in sw_pos:
                hint = " (links join switches; hosts are attached through 'hosts')" if sw in host_names else ""
                raise TopologyError(f"unknown switch {sw!r}{hint}", field=f"links[{i}].{end}")
        if a == b:
            raise TopologyError(f"link connects {a!r} to itself", field=f"links[{i}].b")
        a_port = _int(item["a_port"], f"links[{i}].a_port", 1, MAX_PORT)
        b_port = _int(item["b_port"], f"links[{i}].b_port", 1, MAX_PORT)
        claim(a, a_port, f"links[{i}] to {b!r}", f"links[{i}].a_port")
        claim(b, b_port, f"links[{i}] to {a!r}", f"links[{i}].b_port")
        graph.add_edge(a, b)
        link_objs.append(Link(a, a_port, b, b_port, "fabric"))

    # -- connectivity -------------------------------------------------------
    first = placed[0][0]
    reached = nx.node_connected_component(graph, first)
    if len(reached) != len(placed):
        missing = [s for s, *_ in placed if s not in reached]
        shown = ", ".join(repr(s) for s in missing[:_SHOW_UNREACHABLE])
        more = f" and {len(missing) - _SHOW_UNREACHABLE} more" if len(missing) > _SHOW_UNREACHABLE else ""
        raise TopologyError(
            f"fabric is not connected: {len(missing)} switch(es) unreachable from {first!r}: {shown}{more}",
            field="links",
        )

    # -- build ----------------------------------------------------------------
    switch_objs = tuple(
        Switch(sname, dpid, group, index, (group, index), role or ("access" if sname in has_hosts else "transit"))
        for sname, dpid, group, index, role in placed
    )
    ranks: dict[str, list[int]] = {}
    for _, switch, port in host_rows:
        ranks.setdefault(switch, []).append(port)
    rank_of = {sw: {port: r for r, port in enumerate(sorted(ports))} for sw, ports in ranks.items()}
    host_objs = tuple(Host(hname, switch, port, rank_of[switch][port]) for hname, switch, port in host_rows)
    params = {"groups": len(seen_in_group)}
    return Fabric("explicit", name or f"explicit-{len(switch_objs)}sw", switch_objs, host_objs, tuple(link_objs), params)
