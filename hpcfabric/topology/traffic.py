"""Traffic matrices: who sends how much to whom, as one frozen value (pure).

A :class:`TrafficMatrix` holds relative rates between *endpoints* of one fabric: hosts (``level
= "host"``: host -> host) or access switches (``level = "switch"``: switch -> switch, each
source switch's share spread evenly over its hosts and each destination switch's over its hosts).
Entries are aggregated (duplicates summed), sorted by (source, destination), with positive finite
weights; only their ratios matter. The workload-aware routing policy
(:mod:`hpcfabric.rules.policies.workload`) chooses Valiant intermediates from it and the simulator
(:mod:`hpcfabric.sim.traffic`) draws destinations from it.

Files (docs/workload.md):

* CSV ``src,dst,weight`` -- one entry a line; ``#`` comment lines and one header line
  ``src,dst,weight`` are allowed; src/dst are host names or access-switch names (one level per
  file); weight a positive number.
* YAML ``{format: hpcfabric-traffic/1, fabric: NAME (optional, checked), entries: [...]}`` with
  entries ``{src: A, dst: B, weight: W}`` (weight default 1) or ``[A, B, W]``.

Errors are :class:`~hpcfabric.errors.TopologyError` naming the file, the row (CSV, 1-based line)
or entry, the field and what is expected.

:func:`pattern_traffic` generates matrices: ``uniform`` and ``adversarial`` of
:mod:`hpcfabric.topology.patterns`, and application-like ``stencil`` (2-D nearest neighbour with
one grid row per group, so the row neighbours sit in the adjacent groups), ``transpose``
(ranks on an n x n grid, (x, y) -> (y, x)) and ``bitrev`` (bit-reversal permutation).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
import yaml

from hpcfabric.errors import ConfigError, TopologyError, read_user_file
from hpcfabric.topology.model import Fabric
from hpcfabric.topology.patterns import ALIASES, PatternError, pattern

FORMAT = "hpcfabric-traffic/1"
LEVELS = ("host", "switch")
#: generated patterns (see the module docstring)
TRAFFIC_PATTERNS = ("uniform", "adversarial", "stencil", "transpose", "bitrev")
#: where the ranks of stencil/transpose/bitrev sit: every host (packed) or one per access switch (spread)
PLACEMENTS = ("packed", "spread")
#: entries a generated or loaded matrix may hold (UN on a ~300k-host fabric would be billions)
MAX_ENTRIES = 50_000_000

__all__ = ["FORMAT", "TRAFFIC_PATTERNS", "TrafficMatrix", "load_traffic", "pattern_traffic", "write_traffic"]


def _frozen(a: Any, dtype: Any) -> np.ndarray:
    arr = np.ascontiguousarray(a, dtype=dtype)
    arr.setflags(write=False)
    return arr


@dataclass(frozen=True, eq=False)
class TrafficMatrix:
    """Relative rates between the endpoints of one fabric (module docstring).

    ``names[i]`` is endpoint ``i`` (hosts or access switches per ``level``); ``src``, ``dst`` and
    ``weight`` are the entries, read-only numpy arrays sorted by (src, dst)."""

    fabric: str
    level: str
    names: tuple[str, ...]
    src: np.ndarray
    dst: np.ndarray
    weight: np.ndarray
    source: str = ""

    def __len__(self) -> int:
        return len(self.weight)

    def entries(self) -> Iterator[tuple[str, str, float]]:
        """(source name, destination name, weight) in order."""
        names = self.names
        for s, d, w in zip(self.src.tolist(), self.dst.tolist(), self.weight.tolist()):
            yield names[s], names[d], w

    def same(self, other: "TrafficMatrix") -> bool:
        """Same level, endpoints and entries (weights compared exactly)."""
        return (self.level == other.level and self.names == other.names and np.array_equal(self.src, other.src)
                and np.array_equal(self.dst, other.dst) and np.array_equal(self.weight, other.weight))

    def host_rows(self, fabric: Fabric) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per host of ``fabric.hosts`` (by position): its destinations and probabilities, flat.

        Returns ``(rate, off, dsts, prob)``: host ``i`` sends at relative rate ``rate[i]`` (the
        busiest host 1, silent hosts 0) to hosts ``dsts[off[i]:off[i+1]]`` with probabilities
        ``prob[...]`` (summing to 1 per sending host). A switch-level entry is spread evenly over
        the source switch's hosts and the destination switch's hosts (a host never sends to itself).
        """
        self.check(fabric)
        hid = {h.name: i for i, h in enumerate(fabric.hosts)}
        H = len(fabric.hosts)
        if self.level == "host":
            s = np.array([hid[n] for n in self.names], dtype=np.int64)[self.src]
            d = np.array([hid[n] for n in self.names], dtype=np.int64)[self.dst]
            w = np.asarray(self.weight, dtype=np.float64)
        else:
            on = [[hid[h.name] for h in fabric.hosts_on(n)] for n in self.names]
            ss, dd, ww = [], [], []
            for a, b, wt in zip(self.src.tolist(), self.dst.tolist(), self.weight.tolist()):
                srcs, dsts = on[a], on[b]
                for h in srcs:
                    targets = [x for x in dsts if x != h]
                    if targets:
                        ss.extend([h] * len(targets))
                        dd.extend(targets)
                        ww.extend([wt / len(srcs) / len(targets)] * len(targets))
            s, d, w = (np.array(ss, dtype=np.int64), np.array(dd, dtype=np.int64), np.array(ww, dtype=np.float64))
        order = np.lexsort((d, s))
        s, d, w = s[order], d[order], w[order]
        total = np.bincount(s, weights=w, minlength=H)
        cnt = np.bincount(s, minlength=H)
        off = np.concatenate([[0], np.cumsum(cnt)]).astype(np.int64)
        rate = total / total.max() if len(w) else total
        prob = w / np.where(total[s] > 0, total[s], 1.0)
        return rate, off, d, prob

    def check(self, fabric: Fabric) -> None:
        """Raise TopologyError if this matrix names endpoints ``fabric`` does not have."""
        for n in self.names:
            ok = _is_host(fabric, n) if self.level == "host" else _is_access(fabric, n)
            if not ok:
                raise TopologyError(f"traffic matrix for {self.fabric!r} names {n!r}, which is not a{' host' if self.level == 'host' else 'n access switch'} "
                                    f"of fabric {fabric.name!r}", source=self.source or None)


def _is_host(fabric: Fabric, name: str) -> bool:
    try:
        fabric.host(name)
    except KeyError:
        return False
    return True


def _is_access(fabric: Fabric, name: str) -> bool:
    return fabric.has_switch(name) and bool(fabric.hosts_on(name))


def make_matrix(fabric: Fabric, level: str, names: tuple[str, ...], src: Any, dst: Any, weight: Any,
                source: str = "") -> TrafficMatrix:
    """A :class:`TrafficMatrix` from index arrays into ``names``: duplicates summed, sorted, zero
    weights and (host level) self entries dropped; names not sending or receiving are kept."""
    if level not in LEVELS:
        raise TopologyError(f"unknown traffic level {level!r}; expected one of {', '.join(LEVELS)}")
    s = np.asarray(src, dtype=np.int64)
    d = np.asarray(dst, dtype=np.int64)
    w = np.asarray(weight, dtype=np.float64)
    keep = w > 0
    if level == "host":
        keep &= s != d
    s, d, w = s[keep], d[keep], w[keep]
    n = max(len(names), 1)
    key = s * n + d
    uniq, inv = np.unique(key, return_inverse=True)
    agg = np.bincount(inv, weights=w, minlength=len(uniq)) if len(uniq) else np.zeros(0)
    return TrafficMatrix(fabric.name, level, tuple(names), _frozen(uniq // n, np.int32), _frozen(uniq % n, np.int32),
                         _frozen(agg, np.float64), source)


# -- files --------------------------------------------------------------------------------------

def load_traffic(path: str, fabric: Fabric) -> TrafficMatrix:
    """Read a traffic matrix file (CSV, or YAML for ``.yaml``/``.yml``) for ``fabric``.

    Raises
    ------
    TopologyError
        The file cannot be read, or a row/entry is malformed: names the file, row or entry, field
        and what is expected (an unknown host, a weight that is not a positive number, hosts and
        switches mixed, a matrix made for another fabric, no entry at all).
    """
    try:
        text = read_user_file(str(path), "a traffic matrix file (CSV src,dst,weight or YAML)", "no such traffic matrix file")
    except TopologyError:
        raise
    except ConfigError as err:
        raise TopologyError(err.detail, source=err.source, field=err.field) from None
    if str(path).endswith((".yaml", ".yml")):
        rows = _yaml_rows(str(path), text, fabric)
    else:
        rows = _csv_rows(str(path), text)
    return _from_rows(str(path), rows, fabric)


def _csv_rows(path: str, text: str) -> list[tuple[str, str, str, Any]]:
    rows = []
    for lineno, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        fields = [f.strip() for f in stripped.split(",")]
        if not rows and [f.lower() for f in fields] == ["src", "dst", "weight"]:
            continue  # header
        if len(fields) != 3:
            raise TopologyError(f"expected 3 comma-separated fields src,dst,weight, got {len(fields)}: {stripped!r}",
                                source=path, field=f"row {lineno}")
        rows.append((f"row {lineno}", fields[0], fields[1], fields[2]))
    return rows


def _yaml_rows(path: str, text: str, fabric: Fabric) -> list[tuple[str, str, str, Any]]:
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else None
        raise TopologyError(f"not valid YAML: {getattr(err, 'problem', None) or err}", source=path, field=where) from None
    if not isinstance(doc, dict):
        raise TopologyError(f"expected a mapping with format: {FORMAT} and entries: [...]", source=path)
    unknown = sorted(set(doc) - {"format", "fabric", "entries", "description"})
    if unknown:
        raise TopologyError(f"unknown key {unknown[0]!r}; expected format, fabric, entries, description", source=path,
                            field=str(unknown[0]))
    if doc.get("format") != FORMAT:
        raise TopologyError(f"expected {FORMAT!r}, got {doc.get('format')!r}", source=path, field="format")
    if "fabric" in doc and doc["fabric"] != fabric.name:
        raise TopologyError(f"matrix is for fabric {doc['fabric']!r}, the topology is {fabric.name!r}", source=path,
                            field="fabric")
    entries = doc.get("entries")
    if not isinstance(entries, list):
        raise TopologyError("expected a list of {src, dst, weight} entries", source=path, field="entries")
    rows = []
    for i, e in enumerate(entries):
        where = f"entries[{i}]"
        if isinstance(e, dict):
            extra = sorted(set(e) - {"src", "dst", "weight"})
            if extra:
                raise TopologyError(f"unknown key {extra[0]!r}; expected src, dst, weight", source=path, field=where)
            for key in ("src", "dst"):
                if key not in e:
                    raise TopologyError(f"missing {key}: a host or access switch name", source=path, field=where)
            rows.append((where, str(e["src"]), str(e["dst"]), e.get("weight", 1)))
        elif isinstance(e, list) and len(e) == 3:
            rows.append((where, str(e[0]), str(e[1]), e[2]))
        else:
            raise TopologyError("expected {src: A, dst: B, weight: W} or [A, B, W]", source=path, field=where)
    return rows


def _from_rows(path: str, rows: list[tuple[str, str, str, Any]], fabric: Fabric) -> TrafficMatrix:
    if not rows:
        raise TopologyError("no traffic entry: expected src,dst,weight rows", source=path)
    hosts = {h.name: i for i, h in enumerate(fabric.hosts)}
    access = {sw.name: i for i, sw in enumerate(fabric.access_switches)}
    level = None
    first_where = ""
    src, dst, wts = [], [], []
    for where, a, b, w in rows:
        ids = []
        for fld, name in (("src", a), ("dst", b)):
            if name in hosts:
                lv, idx = "host", hosts[name]
            elif name in access:
                lv, idx = "switch", access[name]
            else:
                what = "a switch without hosts" if fabric.has_switch(name) else "not in the fabric"
                raise TopologyError(f"{name!r} is {what}; expected a host or access switch of {fabric.name!r}",
                                    source=path, field=f"{where}, {fld}")
            if level is None:
                level, first_where = lv, where
            elif lv != level:
                raise TopologyError(f"{name!r} is a {lv} but {first_where} names {level}s; use one level per file",
                                    source=path, field=f"{where}, {fld}")
            ids.append(idx)
        weight = _weight(path, where, w)
        if level == "host" and ids[0] == ids[1]:
            raise TopologyError(f"host {a!r} sends to itself; expected two different hosts", source=path,
                                field=f"{where}, dst")
        src.append(ids[0])
        dst.append(ids[1])
        wts.append(weight)
    names = tuple(hosts) if level == "host" else tuple(access)
    return make_matrix(fabric, level or "host", names, src, dst, wts, path)


def _weight(path: str, where: str, value: Any) -> float:
    try:
        w = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        w = math.nan
    if not (math.isfinite(w) and w > 0):
        raise TopologyError(f"weight {value!r} is not a positive number", source=path, field=f"{where}, weight")
    return w


def write_traffic(matrix: TrafficMatrix, path: str) -> None:
    """Write ``matrix`` as CSV (YAML for ``.yaml``/``.yml``); :func:`load_traffic` reads it back."""
    if str(path).endswith((".yaml", ".yml")):
        doc = {"format": FORMAT, "fabric": matrix.fabric,
               "entries": [[a, b, float(f"{w:.12g}")] for a, b, w in matrix.entries()]}
        with open(path, "w", encoding="utf-8") as fh:
            yaml.safe_dump(doc, fh, default_flow_style=None, sort_keys=False, width=200)
        return
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(f"# {FORMAT} fabric={matrix.fabric} level={matrix.level} source={matrix.source}\n")
        fh.write("src,dst,weight\n")
        fh.writelines(f"{a},{b},{w:.12g}\n" for a, b, w in matrix.entries())


# -- generated patterns -------------------------------------------------------------------------

def pattern_traffic(fabric: Fabric, name: str, **kw: Any) -> TrafficMatrix:
    """The matrix of pattern ``name`` on ``fabric`` (:data:`TRAFFIC_PATTERNS`, or the aliases
    ``un``/``adv``). Options: ``stencil``: ``width`` (grid row length, default the ranks of one
    group, so the x neighbours sit in the adjacent groups); ``placement`` of the ranks of
    stencil/transpose/bitrev: ``packed`` (default: rank ``r`` on host ``fabric.hosts[r]``, fabric
    order, group-major) or ``spread`` (one rank per access switch, on its first host, in fabric
    order: a job spread over the machine).
    """
    key = ALIASES.get(name.lower(), name.lower())
    placement = kw.get("placement", "packed")
    if placement not in PLACEMENTS:
        raise PatternError(f"unknown placement {placement!r}: expected one of {', '.join(PLACEMENTS)}")
    names = tuple(h.name for h in fabric.hosts)
    if placement == "spread" and key in ("stencil", "transpose", "bitrev"):
        # one rank per access switch (its first host): a job spread over the machine
        ranked = [fabric.hosts_on(sw.name)[0].name for sw in fabric.access_switches]
        inner = _ranked(fabric, key, len(ranked), kw)
        idx = {n: i for i, n in enumerate(names)}
        pos = np.array([idx[n] for n in ranked], dtype=np.int64)
        return make_matrix(fabric, "host", names, pos[inner[0]], pos[inner[1]], inner[2], f"pattern:{key}:spread")
    src_name = f"pattern:{key}"
    if key == "uniform":
        access = fabric.access_switches
        n = len(access)
        if n * n > MAX_ENTRIES:
            raise PatternError(f"uniform matrix of {fabric.name!r} would hold {n * n:,} switch pairs (limit {MAX_ENTRIES:,})")
        cnt = np.array([len(fabric.hosts_on(s.name)) for s in access], dtype=np.float64)
        a, b = np.divmod(np.arange(n * n, dtype=np.int64), n)
        w = cnt[a] * cnt[b] - np.where(a == b, cnt[a], 0.0)
        return make_matrix(fabric, "switch", tuple(s.name for s in access), a, b, w, src_name)
    if key == "adversarial":
        lists = pattern(fabric, "adversarial")
        access = fabric.access_switches
        sidx = {s.name: i for i, s in enumerate(access)}
        s, d, w = [], [], []
        for h in fabric.hosts:
            per: dict[int, float] = {}
            dl = lists[h.name]
            for x in dl:
                j = sidx[fabric.host(x).switch]
                per[j] = per.get(j, 0.0) + 1.0 / len(dl)
            for j, wt in per.items():
                s.append(sidx[h.switch])
                d.append(j)
                w.append(wt)
        return make_matrix(fabric, "switch", tuple(s_.name for s_ in access), s, d, w, src_name)
    if key in ("stencil", "transpose", "bitrev"):
        src, dst, w = _ranked(fabric, key, len(names), kw)
        extra = f":width={int(kw.get('width') or _group_hosts(fabric))}" if key == "stencil" else ""
        return make_matrix(fabric, "host", names, src, dst, w, f"pattern:{key}{extra}")
    raise PatternError(f"unknown traffic pattern {name!r}: expected one of {', '.join(TRAFFIC_PATTERNS)} (or un, adv)")


def _ranked(fabric: Fabric, key: str, H: int, kw: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(source rank, destination rank, weight) of the application-like patterns over ``H`` ranks."""
    if key == "stencil":
        width = int(kw.get("width") or (_group_hosts(fabric) if H == len(fabric.hosts) else _group_switches(fabric)))
        if width < 1 or H % width:
            raise PatternError(f"stencil width {width} does not divide the {H} hosts of {fabric.name!r}")
        rows = H // width
        r = np.arange(H, dtype=np.int64)
        x, y = np.divmod(r, width)
        nbrs = [((x + 1) % rows) * width + y, ((x - 1) % rows) * width + y,
                x * width + (y + 1) % width, x * width + (y - 1) % width]
        return np.concatenate([r] * 4), np.concatenate(nbrs), np.ones(4 * H)
    if key == "transpose":
        n = math.isqrt(H)
        if n < 2:
            raise PatternError(f"transpose needs at least 4 hosts; {fabric.name!r} has {H}")
        r = np.arange(n * n, dtype=np.int64)
        x, y = np.divmod(r, n)
        return r, y * n + x, np.ones(len(r))
    if key == "bitrev":
        bits = H.bit_length() - 1
        if bits < 1:
            raise PatternError(f"bitrev needs at least 2 hosts; {fabric.name!r} has {H}")
        r = np.arange(1 << bits, dtype=np.int64)
        rev = np.zeros_like(r)
        for b in range(bits):
            rev |= ((r >> b) & 1) << (bits - 1 - b)
        return r, rev, np.ones(len(r))
    raise PatternError(f"unknown traffic pattern {key!r}")


def _group_switches(fabric: Fabric) -> int:
    """Access switches of the first group (the stencil row length of a spread job)."""
    access = fabric.access_switches
    return sum(1 for s in access if s.group == access[0].group)


def _group_hosts(fabric: Fabric) -> int:
    """Hosts of the first group (Dragonfly group, FB top-dimension row, Clos pod), or of one switch."""
    access = fabric.access_switches
    first = access[0].group
    n = sum(len(fabric.hosts_on(s.name)) for s in access if s.group == first)
    return n if n < len(fabric.hosts) else len(fabric.hosts_on(access[0].name))
