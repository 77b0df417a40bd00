"""Per ordered host pair, what the fast engine and the scalar reference walk do: the tests' cross-check."""

from __future__ import annotations

from typing import Any, Sequence

from hpcfabric.verify.codes import DELIVER, LOOP, outcome_kind
from hpcfabric.verify.engine import Destinations, Engine
from hpcfabric.verify.reference.walk import Pipelines, walk_pair


def pair_outcomes(compiled: Any, *, engine: str = "fast") -> dict[tuple[str, str], tuple[str, str | None, int | None]]:
    """Per ordered host pair: (kind, host reached or None, hops or None for loops).

    For cross-checking the engines on small fabrics (H*(H-1) entries, every destination in one matrix); the
    fast engine runs with one row per ingress port, so frames sent back out of their ingress port are dropped
    as in the scalar walk.
    """
    hosts = compiled.fabric.hosts
    out: dict[tuple[str, str], tuple[str, str | None, int | None]] = {}
    if engine == "scalar":
        pipes = Pipelines(compiled)
        for s, src in enumerate(hosts):
            for d, dst in enumerate(hosts):
                if s != d:
                    w = walk_pair(compiled, src.name, compiled.plan.host_mac[dst.name], pipelines=pipes)
                    out[(src.name, dst.name)] = _outcome(w.code, d, w.hops, hosts)
        return out
    eng = Engine(compiled, per_port=True)
    dst = Destinations(eng.host_macs)
    m = eng.matrix(dst)
    classes = eng.source_classes(m, range(len(hosts)))
    for c0, nb, codes, hops in eng.walk(m, dst, classes):
        for e in range(nb * dst.n):
            d = e % dst.n
            for s in classes[c0 + e // dst.n][1]:
                if int(s) != d:
                    out[(hosts[int(s)].name, hosts[d].name)] = _outcome(int(codes[e]), d, int(hops[e]), hosts)
    return out


def _outcome(code: int, d: int, hops: int, hosts: Sequence[Any]) -> tuple[str, str | None, int | None]:
    kind = outcome_kind(code, d)
    host = hosts[DELIVER - code].name if code <= DELIVER else None
    return kind, host, None if code == LOOP else hops
