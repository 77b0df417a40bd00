"""The fabric page's views, pure: the fabric laid out by its structure, and loads per drawn edge.

A view is a dict the page draws as it is (coordinates 0..1): ``nodes`` (``id``, ``x``, ``y``,
``label``, ``kind`` = switch | group | stub, ``group``) and ``edges`` (``id``, ``a``, ``b`` node ids,
``cls``, ``ends``: the fabric ports "switch:port" the edge stands for -- the page marks an edge paused
or failed when one of its ends is in the live state's lists; a group edge carries no ends, its state
comes from :func:`group_state`).

* :func:`switch_view`: every switch -- Dragonfly groups on a circle, each group's switches on a small
  circle; Flattened Butterfly as a grid (dim0 across, dim1 down, further dimensions tiled); fat-tree /
  Clos as rows of pods (edge, aggregation) under the core;
* :func:`group_view`: large fabrics open at group level (:data:`SWITCH_VIEW_MAX`): one node per group
  (Dragonfly group, FB row, fat-tree pod; core switches in group -1), one edge per connected pair of
  groups standing for all its links (``count``);
* :func:`drill_view`: one group's switches on a circle, its links inside, and its links to other
  groups as stubs to those groups' nodes on an outer ring.

:func:`edge_loads` folds per-direction figures (:mod:`hpcfabric.controller.linkload`) onto a view's
edges through :func:`edge_buckets` (direction -> edge, built once per view): the highest utilisation of
the directions an edge stands for.
"""

from __future__ import annotations

import math
from typing import Any, Iterable

import numpy as np

from hpcfabric.topology.model import Fabric

#: fabrics with more switches open at group level
SWITCH_VIEW_MAX = 400


def _circle(n: int, k: int, cx: float = 0.5, cy: float = 0.5, r: float = 0.42) -> tuple[float, float]:
    a = 2 * math.pi * k / max(1, n) - math.pi / 2
    return round(cx + r * math.cos(a), 5), round(cy + r * math.sin(a), 5)


def link_id(link: Any) -> str:
    return f"{link.a}:{link.a_port}-{link.b}:{link.b_port}"


def _groups(fabric: Fabric) -> list[int]:
    return sorted({sw.group for sw in fabric.switches})


def _positions(fabric: Fabric) -> dict[str, tuple[float, float]]:
    sws = fabric.switches
    if fabric.kind == "dragonfly":
        groups = _groups(fabric)
        per = {g: [s for s in sws if s.group == g] for g in groups}
        r_small = min(0.1, 0.42 * math.pi / max(1, len(groups)) * 0.8) if len(groups) > 1 else 0.35
        out = {}
        for gi, g in enumerate(groups):
            cx, cy = _circle(len(groups), gi, r=0.44 - r_small) if len(groups) > 1 else (0.5, 0.5)
            members = sorted(per[g], key=lambda s: s.index)
            for k, s in enumerate(members):
                out[s.name] = _circle(len(members), k, cx, cy, r_small)
        return out
    if fabric.kind == "flattened_butterfly":
        dims = [max(s.coords[d] for s in sws) + 1 for d in range(len(sws[0].coords))] if sws else []
        w = dims[0] if dims else 1
        h = dims[1] if len(dims) > 1 else 1
        tiles_x = dims[2] if len(dims) > 2 else 1
        tiles_y = math.prod(dims[3:]) if len(dims) > 3 else 1
        cols, rows = tiles_x * (w + 1) - 1, tiles_y * (h + 1) - 1
        out = {}
        for s in sws:
            c = s.coords
            tx = c[2] if len(c) > 2 else 0
            ty = 0
            for d in range(3, len(c)):
                ty = ty * dims[d] + c[d]
            x = tx * (w + 1) + c[0]
            y = ty * (h + 1) + (c[1] if len(c) > 1 else 0)
            out[s.name] = (round(0.08 + 0.84 * x / max(1, cols), 5), round(0.08 + 0.84 * y / max(1, rows), 5))
        return out
    if fabric.kind in ("fat_tree", "clos"):
        level = {"core": 0, "aggregation": 1, "edge": 2}
        rows: dict[int, list[Any]] = {}
        for s in sws:
            rows.setdefault(level.get(s.role, 1), []).append(s)
        out = {}
        for lv, members in rows.items():
            members.sort(key=lambda s: (s.group, s.index))
            for k, s in enumerate(members):
                out[s.name] = (round(0.05 + 0.9 * (k + 0.5) / len(members), 5), round(0.12 + 0.76 * lv / 2, 5))
        return out
    return {s.name: _circle(len(sws), k) for k, s in enumerate(sws)}


def _group_label(fabric: Fabric, g: int) -> str:
    if g < 0:
        return "core"
    return {"dragonfly": f"group {g}", "flattened_butterfly": f"row {g}", "fat_tree": f"pod {g}"}.get(fabric.kind, f"group {g}")


def switch_view(fabric: Fabric) -> dict[str, Any]:
    """Every switch and link (small fabrics)."""
    pos = _positions(fabric)
    nodes = [{"id": s.name, "x": pos[s.name][0], "y": pos[s.name][1], "label": s.name, "kind": "switch",
              "group": s.group} for s in fabric.switches]
    edges = [{"id": link_id(lk), "a": lk.a, "b": lk.b, "cls": lk.kind,
              "ends": [f"{lk.a}:{lk.a_port}", f"{lk.b}:{lk.b_port}"]} for lk in fabric.links]
    return {"level": "switch", "kind": fabric.kind, "name": fabric.name, "nodes": nodes, "edges": edges,
            "switches": len(fabric.switches), "links": len(fabric.links), "group": None}


def group_pairs(fabric: Fabric) -> dict[tuple[int, int], list[Any]]:
    """(lower group, higher group) -> the links between them."""
    grp = {s.name: s.group for s in fabric.switches}
    pairs: dict[tuple[int, int], list[Any]] = {}
    for lk in fabric.links:
        ga, gb = grp[lk.a], grp[lk.b]
        if ga != gb:
            pairs.setdefault((min(ga, gb), max(ga, gb)), []).append(lk)
    return pairs


def group_view(fabric: Fabric) -> dict[str, Any]:
    """One node per group, one edge per connected pair of groups (large fabrics)."""
    groups = _groups(fabric)
    size = {g: 0 for g in groups}
    for s in fabric.switches:
        size[s.group] += 1
    nodes = []
    for k, g in enumerate(groups):
        x, y = _circle(len(groups), k)
        nodes.append({"id": f"G{g}", "x": x, "y": y, "label": _group_label(fabric, g), "kind": "group", "group": g,
                      "switches": size[g]})
    edges = [{"id": f"G{ga}-G{gb}", "a": f"G{ga}", "b": f"G{gb}", "cls": links[0].kind, "count": len(links), "ends": []}
             for (ga, gb), links in sorted(group_pairs(fabric).items())]
    return {"level": "group", "kind": fabric.kind, "name": fabric.name, "nodes": nodes, "edges": edges,
            "switches": len(fabric.switches), "links": len(fabric.links), "group": None}


def drill_view(fabric: Fabric, group: int) -> dict[str, Any]:
    """Group ``group``'s switches and links, its links to other groups as stubs (KeyError: no such group)."""
    members = sorted((s for s in fabric.switches if s.group == group), key=lambda s: s.index)
    if not members:
        raise KeyError(group)
    inside = {s.name for s in members}
    grp = {s.name: s.group for s in fabric.switches}
    nodes = []
    for k, s in enumerate(members):
        x, y = _circle(len(members), k, r=0.28)
        nodes.append({"id": s.name, "x": x, "y": y, "label": s.name, "kind": "switch", "group": group})
    edges, far_groups = [], []
    for lk in fabric.links:
        a_in, b_in = lk.a in inside, lk.b in inside
        if not (a_in or b_in):
            continue
        ends = [f"{lk.a}:{lk.a_port}", f"{lk.b}:{lk.b_port}"]
        if a_in and b_in:
            edges.append({"id": link_id(lk), "a": lk.a, "b": lk.b, "cls": lk.kind, "ends": ends})
            continue
        mine, other = (lk.a, lk.b) if a_in else (lk.b, lk.a)
        far = grp[other]
        if far not in far_groups:
            far_groups.append(far)
        edges.append({"id": link_id(lk), "a": mine, "b": f"G{far}", "cls": lk.kind, "ends": ends, "far": other})
    far_groups.sort()
    for k, g in enumerate(far_groups):
        x, y = _circle(len(far_groups), k, r=0.46)
        nodes.append({"id": f"G{g}", "x": x, "y": y, "label": _group_label(fabric, g), "kind": "stub", "group": g})
    return {"level": "drill", "kind": fabric.kind, "name": fabric.name, "nodes": nodes, "edges": edges,
            "switches": len(fabric.switches), "links": len(fabric.links), "group": group,
            "label": _group_label(fabric, group)}


def view_for(fabric: Fabric, group: int | None = None) -> dict[str, Any]:
    """The view the page asks for: ``group`` drilled, else the whole fabric at the level its size allows."""
    if group is not None:
        return drill_view(fabric, group)
    return switch_view(fabric) if len(fabric.switches) <= SWITCH_VIEW_MAX else group_view(fabric)


class GroupIndex:
    """Fabric port "switch:port" -> the group edge ("Ga-Gb") its link is drawn as at group level."""

    def __init__(self, fabric: Fabric) -> None:
        self.fabric = fabric
        self.edge_of: dict[str, str] = {}
        for (ga, gb), links in group_pairs(fabric).items():
            for lk in links:
                self.edge_of[f"{lk.a}:{lk.a_port}"] = self.edge_of[f"{lk.b}:{lk.b_port}"] = f"G{ga}-G{gb}"
        grp = {s.name: s.group for s in fabric.switches}
        self.group_of_port = {}
        for lk in fabric.links:
            self.group_of_port[f"{lk.a}:{lk.a_port}"] = grp[lk.a]
            self.group_of_port[f"{lk.b}:{lk.b_port}"] = grp[lk.b]

    def state(self, ports: Iterable[str]) -> dict[str, list[Any]]:
        """Group edges and groups holding any of ``ports`` (``edges``: inter-group links, ``groups``: any)."""
        edges, groups = set(), set()
        for p in ports:
            e = self.edge_of.get(p)
            if e is not None:
                edges.add(e)
            g = self.group_of_port.get(p)
            if g is not None:
                groups.add(g)
        return {"edges": sorted(edges), "groups": sorted(groups)}


def group_state(index: GroupIndex, live: dict[str, Any]) -> dict[str, Any]:
    """The live state folded onto the group view: paused / failed / quarantined group edges and groups."""
    return {key: index.state(live.get(key, ())) for key in ("paused", "down", "quarantined")}


def edge_buckets(view: dict[str, Any], table: Any) -> tuple[np.ndarray, list[str]]:
    """Per link direction of ``table`` (:class:`~hpcfabric.controller.linkload.LinkTable`) the number of
    the ``view`` edge it is drawn as (-1: none), and the edge ids (built once per view)."""
    ids = [e["id"] for e in view["edges"]]
    bucket = np.full(len(table), -1, np.int64)
    if view["level"] == "group":
        grp = {s.name: s.group for s in table.fabric.switches}
        num = {eid: k for k, eid in enumerate(ids)}
        for i, (sw, _port, peer, _cls) in enumerate(table.dirs):
            ga, gb = grp[sw], grp[peer.rpartition(":")[0]]
            if ga != gb:
                bucket[i] = num.get(f"G{min(ga, gb)}-G{max(ga, gb)}", -1)
        return bucket, ids
    for k, e in enumerate(view["edges"]):
        for end in e["ends"]:
            sw, _, port = end.rpartition(":")
            i = table.index.get((sw, int(port)))
            if i is not None:
                bucket[i] = k
    return bucket, ids


def edge_loads(buckets: tuple[np.ndarray, list[str]], figures: Any) -> dict[str, float]:
    """Edge id -> highest utilisation of the link directions it stands for (edges without a rate absent);
    ``buckets`` from :func:`edge_buckets`, ``figures`` a :class:`~hpcfabric.controller.linkload.LinkFigures`."""
    bucket, ids = buckets
    top = figures.max_by(bucket, len(ids))
    have = np.flatnonzero(~np.isnan(top))
    return dict(zip([ids[k] for k in have.tolist()], top[have].tolist()))
