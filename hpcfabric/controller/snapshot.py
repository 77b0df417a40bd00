"""One snapshot of the running controller: what the status file and the Prometheus metrics both render.

:class:`Sources` names what they read -- the :class:`~hpcfabric.controller.state.State`,
the counters, the flow-mod cache, the HA lease, the heap, and the collaborators
whose own ``as_dict()`` is their snapshot (wiring, pausing, poller, admission,
reloader, failover). :func:`snapshot` takes them all at once; neither the
status nor the metrics read a collaborator's fields.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Sources:
    """What status and metrics read (every collaborator by its ``as_dict()``)."""

    state: Any
    counters: Any
    cache: Any  # the encoded flow-mod cache: entries, hits, misses
    ha: Any
    heap: Any
    started: float
    wiring: Any
    pausing: Any
    poller: Any
    admission: Any
    reloader: Any
    failover: Any
    links: Any = None  # controller.linkmetrics.LinkView: the per-link congestion families (metrics only)


def snapshot(src: Sources, now: float | None = None, breathe: Any = None) -> dict[str, Any]:
    """Every collaborator's ``as_dict()``; ``now``: the discovery report recomputed as the wiring allows (the
    status file's writes; ``breathe`` lets other green threads run meanwhile), else its last one (a scrape)."""
    cache = src.cache
    return {
        "wiring": src.wiring.as_dict(now, breathe),
        "pausing": src.pausing.as_dict(),
        "poller": src.poller.as_dict(),
        "admission": src.admission.as_dict(),
        "reload": src.reloader.as_dict(),
        "ha": src.ha.as_dict(),
        "ha_master": src.ha.master,
        "ha_partitions": ha_partitions(src.ha, src.state.config),
        "heap": src.heap.as_dict(),
        "failover": src.failover.as_dict(),
        "flowmod_cache": {"entries": len(cache), "hits": cache.hits, "misses": cache.misses},
    }


def ha_partitions(ha: Any, config: Any) -> list[tuple[str, bool]]:
    """(partition, mastered by this instance): under etcd every partition of the fabric (so a partition
    nobody masters shows as 0 everywhere), else this instance's own (``p<i>``, its switch globs, or ``all``)."""
    if getattr(ha, "parts", None) is not None:
        return [(p.name, p.name in ha.active) for p in ha.parts]
    name = f"p{config.ha_partition}" if config.ha_partition is not None else ",".join(config.ha_switches) or "all"
    return [(name, bool(ha.master))]
