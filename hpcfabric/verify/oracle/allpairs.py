"""All-pairs forwarding verifier for compiled fabrics (fast, vectorised).

What is checked
---------------
Every host ``s`` sends a data frame (``eth_type`` 0x0800, untagged, ``eth_src``
= its planned MAC, ``in_port`` = its switch port) to every other host ``d``
(``eth_dst`` = the planned MAC of ``d``); self-pairs are excluded, so an
all-pairs run checks ``H*(H-1)`` pairs. The frame walks switch to switch
through ``compiled.tables`` exactly as :mod:`hpcfabric.verify.reference.pipeline` (the scalar
OpenFlow reference) would forward it; an egress port leads, via
``Fabric.peer``, to the next switch (and its ingress port) or to a host.
Outcomes per pair:

``delivered``     reaches ``d``. ``hops`` = switches traversed, the source's
                  and the destination's switch included (two hosts on one
                  switch: 1; ``hops - 1`` links between switches). Minimal
                  routing: Dragonfly <= 4 (local-global-local), a
                  k-dimensional Flattened Butterfly <= k+1, a 3-level
                  fat-tree <= 5 (edge-agg-core-agg-edge)
``misdelivered``  reaches another host
``dropped``       a switch outputs nothing (table miss or drop entry), or
                  outputs to a port with nothing behind it
``loops``         traverses more than ``hop_bound`` = switches + 1 switches
                  (a revisited switch with an identical frame is a cycle and
                  counts as a loop at once)
``punted``        a switch sends it to the controller
``floods``        a switch outputs it more than once

Invalid probes: the first host of every access switch also sends frames to
addresses nobody owns -- for each address field, a real address with that
field set to a value no host uses under the same higher fields (smallest and
largest such value, from two base addresses), a bit just above the used
address bits, and the multicast and globally-administered flag bits. Each
must be dropped (outputs to nowhere count as drops), never delivered,
looped, punted or flooded.

How it is fast
--------------
Forwarding of a data frame at a switch depends only on the ingress port, the
VLAN PCP it arrives with (classes of service, :mod:`hpcfabric.rules.cos`) and
the destination address (rules matching ``eth_src`` are resolved statically
on host ports, where the source is known). So:

1. per switch, ingress ports that no data-relevant rule tells apart form one
   ingress class; a *row* is an ingress class and an arrival PCP (or
   untagged). Rows for tagged arrivals are created when some row first
   outputs a frame with that PCP towards that port. Rules with an
   ``eth_type`` other than IPv4 never match a data frame and are ignored;
   rules matching ``vlan_pcp`` apply to frames carrying that PCP. A port
   named by ``in_port`` rules only in tables that no frame reaches from the
   other ports (checked over every destination and probe, e.g. per-host
   Valiant rules in ALTERNATIVE while no port is paused) joins the others;
   ports whose ``in_port`` entries are equal but for the port (the CoS push
   on host ports, the PCP steps on fabric ports) share a class;
2. for every row, the decision over all destinations is computed with numpy:
   per table and PCP, entries are bucketed by ``eth_dst`` mask (and by
   ``metadata`` mask), the masked destinations are looked up in each bucket
   (``searchsorted`` against the unique masked destinations, shared by all
   switches) and the highest-priority hit wins (ties: the earlier entry, as
   in the pipeline); ``goto``/``write_metadata``/outputs are followed
   vectorised, and so are PCP rewrites (``push_vlan``, ``set_field``
   vlan_pcp, ``pop_vlan``: each entry's effect is a function of the PCP it
   sees, so elements are regrouped by PCP at every table). The decision is
   stored as the *next state*: the next row (the peer switch's row for the
   egress port and the PCP as sent), a delivered host, or
   drop/punt/flood/tagged -- an ``int32`` matrix ``rows x destinations``
   (136 MB for the paper's Table III Dragonfly untagged; destinations are
   processed in chunks when it would exceed ~256 MB);
3. sources whose first-hop rows are identical form one class; each class
   walks all destinations at once by fancy indexing into the matrix, and its
   counts are multiplied by the class size (self-pairs subtracted).

A frame that reaches a host still VLAN-tagged counts as ``tagged`` (not
delivered): hosts send and receive untagged frames.

Fallbacks: rules matching ``eth_src`` that can see frames from other
switches make the decision source-dependent; those rows are evaluated per
frame by the scalar pipeline during the walk (sources are then not grouped;
not combined with PCP rewrites). Rules that rewrite MAC addresses
(``set_field`` on eth_src/eth_dst) break the "frame unchanged along the
path" premise: the whole run then uses the scalar reference walk.
``coverage`` and ``engine`` in the report say what was done.

Paused ports: ``verify(compiled, paused=[(switch, port), ...])`` flips those
PORT_STATE entries first (:func:`apply_paused`), as the controller does on a
PAUSE; with switch-local PAUSE reaction (``compiled.pause_reaction ==
"switch"``) a port is paused by adding the override its PAUSE makes the
switch learn (:func:`hpcfabric.rules.port_state.learned_override_flow`). The
vectorised engine models ``resubmit`` chains by inlining them per entry
(:func:`hpcfabric.verify.reference.flatten.inline_resubmits`; the scalar reference runs them
literally). The channel dependency graph over every single paused port is
:mod:`hpcfabric.verify.oracle.cdg`.

Where things live: the engine is :mod:`hpcfabric.verify.engine`, the scalar walk
:mod:`hpcfabric.verify.reference.walk`, the probes :mod:`hpcfabric.verify.probes`, pause and link-down
states :mod:`hpcfabric.verify.scenarios`; this module re-exports their public entry points
(``walk_pair``, ``Walk``, ``probe_addresses``, ``apply_paused``, ``apply_down``).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping

import numpy as np

from hpcfabric.rules.addressing import format_mac
from hpcfabric.verify.codes import DEAD, DELIVER, DROP, FLOOD, KINDS, LOOP, PUNT, TAGGED, outcome_kind
from hpcfabric.verify.engine import Destinations, Engine, Unsupported
from hpcfabric.verify.reference.pipeline import PipelineError, overlap_summary
from hpcfabric.verify.probes import probe_addresses
from hpcfabric.verify.scenarios import apply_down, apply_paused
from hpcfabric.verify.reference.walk import Pipelines, Walk, host_ids, walk_pair

__all__ = ["Report", "Walk", "verify", "walk_pair", "probe_addresses", "apply_paused", "apply_down"]

MAX_FAILURES = 20
MATRIX_BYTES = 256 << 20  # decision-matrix budget per destination chunk
PER_PORT_AUTO_PORTS = 4096  # verify(): one row per fabric ingress port up to this many fabric ports


# ---------------------------------------------------------------------------
# report


@dataclass(frozen=True)
class Report:
    """Outcome of one verification run (``as_dict`` is JSON-ready)."""

    fabric: str
    mode: str
    switches: int
    hosts: int
    pairs: int
    delivered: int
    misdelivered: int
    dropped: int
    loops: int
    punted: int
    floods: int
    max_hops: int
    mean_hops: float
    hop_histogram: Mapping[int, int]
    invalid_probes: int
    invalid_probe_failures: int
    failures: tuple[dict[str, Any], ...]
    seconds: float
    coverage: str
    engine: str
    hop_bound: int
    overlaps: int = 0
    overlap_examples: tuple[str, ...] = ()
    probe_addresses: tuple[str, ...] = field(default=())
    tagged: int = 0
    paused: tuple[str, ...] = ()
    ingress_exact: bool = True  # a frame sent back out of its ingress port counts as dropped (as on a switch)

    @property
    def ok(self) -> bool:
        """Every pair delivered, every invalid probe dropped, no equal-priority overlap."""
        return self.delivered == self.pairs and self.invalid_probe_failures == 0 and self.overlaps == 0

    def as_dict(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in (
            "fabric", "mode", "ok", "switches", "hosts", "pairs", "delivered", "misdelivered", "dropped", "loops",
            "punted", "floods", "tagged", "max_hops", "mean_hops", "hop_histogram", "hop_bound", "invalid_probes",
            "invalid_probe_failures", "probe_addresses", "overlaps", "overlap_examples", "failures", "seconds",
            "coverage", "engine", "ingress_exact", "paused",
        )}
        out.update(hop_histogram={str(k): v for k, v in sorted(self.hop_histogram.items())},
                   probe_addresses=list(self.probe_addresses), overlap_examples=list(self.overlap_examples),
                   failures=[dict(f) for f in self.failures], seconds=round(self.seconds, 3), paused=list(self.paused))
        return out

# ---------------------------------------------------------------------------
# tallies


class Tally:
    def __init__(self, compiled: Any, max_failures: int) -> None:
        self.compiled = compiled
        self.counts = Counter({k: 0 for k in KINDS})
        self.hist: Counter[int] = Counter()
        self.pair_failures: list[dict[str, Any]] = []
        self.probe_failures: list[dict[str, Any]] = []
        self.probes = 0
        self.probe_fail = 0
        self.max_failures = max_failures
        self.pipes = Pipelines(compiled)

    def failure(self, src: str, dst_mac: int, kind: str, probe: str | None = None) -> dict[str, Any]:
        w = walk_pair(self.compiled, src, dst_mac, pipelines=self.pipes)
        dst = self.compiled.plan.host_by_mac(dst_mac)
        path = list(w.path)
        if len(path) > 16:
            path = path[:15] + [f"... ({len(path) - 15} more)"]
        out: dict[str, Any] = {
            "kind": kind,
            "src": src,
            "dst": dst,
            "dst_mac": format_mac(dst_mac),
            "reached": w.host,
            "path": path,
            "hops": None if w.code == LOOP else w.hops,
            "reason": w.reason,
        }
        if probe is not None:
            out["probe"] = probe
        got = outcome_kind(w.code, self.compiled_hid(dst))
        if got != kind:  # the fast engine and the reference disagree: say so loudly
            out["note"] = f"scalar reference walk says {got!r}"
        return out

    def compiled_hid(self, name: str | None) -> int | None:
        return None if name is None else host_ids(self.compiled)[name]

    def want_pair_failures(self) -> int:
        return self.max_failures - len(self.pair_failures)



def verify(
    compiled: Any,
    paused: Iterable[tuple[str, int]] = (),
    *,
    sample: int | None = None,
    seed: int = 0,
    engine: str = "auto",
    max_failures: int = MAX_FAILURES,
    groups: Mapping[str, Iterable[Any]] | None = None,
    down: Iterable[tuple[str, int]] = (),
    per_port: bool | None = None,
) -> Report:
    """Verify forwarding of ``compiled`` (a :class:`~hpcfabric.rules.tables.CompiledFabric`).

    Parameters
    ----------
    paused : iterable of (switch, port)
        Ports whose PORT_STATE entry is flipped to paused first (as the
        controller does on a PAUSE; see :func:`apply_paused`).
    sample : int, optional
        Check every source against ``sample`` random destinations (seeded by
        ``seed``) instead of all of them.
    engine : {'auto', 'fast', 'scalar'}
        'auto' uses the vectorised engine and falls back to the scalar
        reference walk when the rules rewrite frames; 'fast' raises instead
        of falling back (:class:`~hpcfabric.verify.reference.pipeline.PipelineError`);
        'scalar' always uses the reference walk (slow: small fabrics only).
    groups, down : optional
        Fast-failover groups per switch (:mod:`hpcfabric.failover.groups`) and ports whose link is down
        (switch, port): resolved (:func:`apply_down`) after ``paused`` is applied.
    per_port : bool, optional
        Vectorised engine with one decision row per fabric ingress port, so that a frame a switch
        would send back out of the port it came in on is dropped, as on a switch (the scalar walk
        always does this). Default: on up to ``PER_PORT_AUTO_PORTS`` fabric ports; above that,
        ports no rule tells apart share a row (far faster on big fabrics) and the report says
        ``ingress_exact: false`` (the union proof and the CDG oracle walk per port).
    """
    if engine not in ("auto", "fast", "scalar"):
        raise ValueError(f"engine must be 'auto', 'fast' or 'scalar', not {engine!r}")
    t0 = time.perf_counter()
    compiled, applied = apply_paused(compiled, paused)
    compiled = apply_down(compiled, groups, down)
    fabric = compiled.fabric
    n_hosts = len(fabric.hosts)
    if sample is not None and sample < n_hosts:
        if sample < 1:
            raise ValueError("sample must be >= 1")
        dst_ids = np.sort(np.random.default_rng(seed).choice(n_hosts, size=sample, replace=False))
        coverage = f"{n_hosts} sources x {sample} random destinations (seed {seed}) of {n_hosts}"
    else:
        dst_ids = np.arange(n_hosts)
        coverage = f"all {n_hosts}x{n_hosts} host pairs (self-pairs excluded)"
    probes = probe_addresses(compiled.plan)
    probe_src = [fabric.hosts_on(sw.name)[0].name for sw in fabric.access_switches]
    tally = Tally(compiled, max_failures)
    engine_used = "vectorised"
    fast: Engine | None = None
    if engine != "scalar":
        try:
            if per_port is None:
                per_port = sum(len(fabric.fabric_ports(sw.name)) for sw in fabric.switches) <= PER_PORT_AUTO_PORTS
            fast = Engine(compiled, (mac for mac, _ in probes), per_port=per_port)
        except Unsupported as why:
            if engine == "fast":
                raise PipelineError(f"the vectorised verifier cannot model these rules: {why}") from None
            engine_used = f"scalar (fallback: {why})"
    else:
        engine_used = "scalar"
    if fast is not None:
        if fast.scalar_rows:
            engine_used = f"vectorised + scalar pipeline for {fast.scalar_rows} source-dependent ingress classes"
        _run_fast(fast, tally, dst_ids, probes, probe_src)
    else:
        _run_scalar(compiled, tally, dst_ids, probes, probe_src)
    pairs = n_hosts * len(dst_ids) - len(dst_ids)
    coverage = f"{coverage}: {pairs} pairs"
    overlaps, examples = overlap_summary(compiled)
    c = tally.counts
    assert sum(c.values()) == pairs, (dict(c), pairs)
    delivered = c["delivered"]
    total_hops = sum(h * k for h, k in tally.hist.items())
    n_probe_fail = len(tally.probe_failures)
    keep_pairs = max_failures - min(n_probe_fail, 5) if tally.probe_failures else max_failures
    failures = tally.pair_failures[:keep_pairs]
    failures += tally.probe_failures[: max_failures - len(failures)]
    return Report(
        fabric=fabric.name,
        mode=compiled.plan.mode,
        switches=len(fabric.switches),
        hosts=n_hosts,
        pairs=pairs,
        delivered=delivered,
        misdelivered=c["misdelivered"],
        dropped=c["dropped"],
        loops=c["loop"],
        punted=c["punted"],
        floods=c["flood"],
        tagged=c["tagged"],
        paused=tuple(f"{s}:{p}" for s, p in applied),
        max_hops=max((h for h, k in tally.hist.items() if k), default=0),
        mean_hops=round(total_hops / delivered, 4) if delivered else 0.0,
        hop_histogram=dict(sorted((h, k) for h, k in tally.hist.items() if k)),
        invalid_probes=tally.probes,
        invalid_probe_failures=tally.probe_fail,
        failures=tuple(failures),
        seconds=time.perf_counter() - t0,
        coverage=coverage,
        engine=engine_used,
        hop_bound=len(fabric.switches) + 1,
        overlaps=overlaps,
        overlap_examples=tuple(examples),
        probe_addresses=tuple(f"{format_mac(mac)} {why}" for mac, why in probes),
        ingress_exact=fast is None or fast.per_port or not any(len(c) > 1 for c in _fabric_classes(fast)),
    )


def _fabric_classes(eng: Engine) -> Iterator[tuple[int, ...]]:
    """Ingress classes holding a fabric port (merged classes make the ingress check inexact)."""
    for sw, classes in eng.classes.items():
        ports = eng.fabric.ports(sw)
        for cls in classes:
            if any(not ports[p].is_host for p in cls):
                yield cls


def _chunks(engine: Engine, dst_ids: np.ndarray) -> Iterator[np.ndarray]:
    rows = len(engine.rows) + 1
    size = max(1, MATRIX_BYTES // (4 * rows))
    for i in range(0, len(dst_ids), size):
        yield dst_ids[i : i + size]


def _run_fast(
    eng: Engine, tally: Tally, dst_ids: np.ndarray, probes: list[tuple[int, str]], probe_src: list[str]
) -> None:
    n_hosts = len(eng.hosts)
    all_src = range(n_hosts)
    for chunk in _chunks(eng, dst_ids):
        dst = Destinations(eng.host_macs[chunk])
        m = eng.matrix(dst)
        classes = eng.source_classes(m, all_src)
        col_of = np.full(n_hosts, -1, dtype=np.int64)
        col_of[chunk] = np.arange(len(chunk))
        want = DELIVER - chunk.astype(np.int64)  # the correct code per column
        n = dst.n
        for c0, nb, codes, hops in eng.walk(m, dst, classes):
            batch = classes[c0 : c0 + nb]
            weight = np.repeat(np.array([len(mem) for _, mem in batch], dtype=np.int64), n)
            for j, (_, mem) in enumerate(batch):
                cols = col_of[mem]
                cols = cols[cols >= 0]
                np.subtract.at(weight, j * n + cols, 1)
            codes64 = codes.astype(np.int64)
            colv = np.tile(np.arange(n), nb)
            ok = codes64 == want[colv]
            _count(tally, codes64, ok, hops, weight)
            bad = np.flatnonzero(~ok & (weight > 0))
            for e in bad[: tally.want_pair_failures()]:
                _, mem = batch[int(e) // n]
                dst_h = int(chunk[int(e) % n])
                src_h = int(mem[0]) if mem[0] != dst_h else int(mem[1])
                tally.pair_failures.append(
                    tally.failure(eng.hosts[src_h].name, int(eng.host_macs[dst_h]), outcome_kind(int(codes64[e]), dst_h))
                )
    if probes and probe_src:
        dst = Destinations(np.array([mac for mac, _ in probes], dtype=np.uint64))
        m = eng.matrix(dst)
        ids = [eng.hid[name] for name in probe_src]
        classes = [(eng.first_row(eng.hosts[h]), np.array([h])) for h in ids]
        for c0, nb, codes, _hops in eng.walk(m, dst, classes):
            tally.probes += len(codes)
            bad = np.flatnonzero((codes != DROP) & (codes != DEAD))
            tally.probe_fail += len(bad)
            for e in bad[: max(0, tally.max_failures - len(tally.probe_failures))]:
                src_h = int(classes[c0 + int(e) // dst.n][1][0])
                mac, why = probes[int(e) % dst.n]
                tally.probe_failures.append(
                    tally.failure(eng.hosts[src_h].name, mac, outcome_kind(int(codes[e]), None), probe=why)
                )


def _count(tally: Tally, codes: np.ndarray, ok: np.ndarray, hops: np.ndarray, weight: np.ndarray) -> None:
    c = tally.counts
    c["delivered"] += int(weight[ok].sum())
    c["misdelivered"] += int(weight[(codes <= DELIVER) & ~ok].sum())
    c["dropped"] += int(weight[(codes == DROP) | (codes == DEAD)].sum())
    c["loop"] += int(weight[codes == LOOP].sum())
    c["punted"] += int(weight[codes == PUNT].sum())
    c["flood"] += int(weight[codes == FLOOD].sum())
    c["tagged"] += int(weight[codes == TAGGED].sum())
    if ok.any():
        hist = np.bincount(hops[ok], weights=weight[ok])
        for h in np.flatnonzero(hist):
            tally.hist[int(h)] += int(round(hist[h]))


def _run_scalar(
    compiled: Any, tally: Tally, dst_ids: np.ndarray, probes: list[tuple[int, str]], probe_src: list[str]
) -> None:
    hosts = compiled.fabric.hosts
    macs = [compiled.plan.host_mac[h.name] for h in hosts]
    pipes = tally.pipes
    for s, src in enumerate(hosts):
        for d in dst_ids:
            d = int(d)
            if d == s:
                continue
            w = walk_pair(compiled, src.name, macs[d], pipelines=pipes)
            kind = outcome_kind(w.code, d)
            tally.counts[kind] += 1
            if kind == "delivered":
                tally.hist[w.hops] += 1
            elif tally.want_pair_failures() > 0:
                tally.pair_failures.append(tally.failure(src.name, macs[d], kind))
    for name in probe_src:
        for mac, why in probes:
            tally.probes += 1
            w = walk_pair(compiled, name, mac, pipelines=pipes)
            if w.code not in (DROP, DEAD):
                tally.probe_fail += 1
                if len(tally.probe_failures) < tally.max_failures:
                    tally.probe_failures.append(tally.failure(name, mac, outcome_kind(w.code, None), probe=why))

