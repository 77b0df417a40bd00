"""Per-link congestion as Prometheus metrics, with bounded label cardinality (docs/operations.md).

By default only per-class aggregates (a handful of series whatever the fabric: ``cls`` is a link
kind -- ``global``/``local``, ``dim0``.., ``edge-agg``/``agg-core`` or ``levelN-M``) and the top N
(``[metrics] top_links``, default 10). Per-link series only for the sending ends the operator names
(``[metrics] links = SW:PORT,...``) or for every direction (``links = all``: 47,472 per series at
Table III). :class:`LinkView` turns the controller's per-port figures into columns
(:mod:`hpcfabric.controller.linkload`), at most once per :data:`FIGURES_TTL` seconds; it is given
callables, never the app: the fabric, the inputs (:func:`hpcfabric.controller.webfeed.link_inputs`)
and the view settings.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Iterator

from hpcfabric.controller.linkload import LinkFigures, LinkInputs, LinkTable

#: name -> (type, help); counter names without ``_total`` (prometheus_client adds it)
LINK_METRICS: dict[str, tuple[str, str]] = {
    "hpcfabric_link_class_utilisation": ("gauge", "tx utilisation 0..1 over the fabric links of one class "
                                         "(labels cls, stat = max|mean; polled port statistics)"),
    "hpcfabric_link_class_pause_frames": ("counter", "PAUSE/PFC frames received on the fabric ports of one link class"),
    "hpcfabric_link_class_paused_seconds": ("counter", "Seconds the fabric ports of one link class spent paused (summed)"),
    "hpcfabric_link_class_flips": ("counter", "PAUSE flips of the fabric ports of one link class"),
    "hpcfabric_link_utilisation": ("gauge", "tx utilisation 0..1 of one link direction (labels switch, port of the "
                                   "sending end, peer; only [metrics] links)"),
    "hpcfabric_link_pause_frames": ("counter", "PAUSE/PFC frames received on the sending end of one link direction "
                                    "(only [metrics] links)"),
    "hpcfabric_link_paused_seconds": ("counter", "Seconds one link direction was paused (only [metrics] links)"),
    "hpcfabric_link_flips": ("counter", "PAUSE flips of one link direction (only [metrics] links)"),
    "hpcfabric_link_top_utilisation": ("gauge", "The [metrics] top_links most utilised link directions "
                                       "(labels rank 1..N, switch, port, peer)"),
}

#: rows are rebuilt at most this often (a scrape and the page share them)
FIGURES_TTL = 0.5


class LinkView:
    """Rows, class figures and top N of the current fabric: ``fabric()``, ``inputs(now)`` and ``settings()``
    (:class:`hpcfabric.config.view.ViewSettings`) are called when needed."""

    def __init__(self, fabric: Callable[[], Any], inputs: Callable[[float], LinkInputs],
                 settings: Callable[[], Any], offload: Callable[..., Any] | None = None) -> None:
        self.fabric, self.inputs, self.settings = fabric, inputs, settings
        self.offload = offload or (lambda fn, *args: fn(*args))
        self._table: LinkTable | None = None
        self._figures: tuple[float, LinkFigures] | None = None

    @property
    def table(self) -> LinkTable:
        fabric = self.fabric()
        if self._table is None or self._table.fabric is not fabric:  # built once per fabric (a reload may swap it)
            self._table = self.offload(LinkTable, fabric)
            self._figures = None
        return self._table

    def figures(self, now: float | None = None) -> LinkFigures:
        """Every direction's figures (computed again at most once per :data:`FIGURES_TTL`)."""
        now = time.monotonic() if now is None else now
        table = self.table
        if self._figures is None or now - self._figures[0] > FIGURES_TTL or now < self._figures[0]:
            self._figures = (now, self.offload(table.figures, self.inputs(now)))
        return self._figures[1]

    def families(self, gauge: Callable[..., Any], counter: Callable[..., Any],
                 labelled: Callable[..., Any]) -> Iterator[Any]:
        """The metric families (``gauge``/``counter``/``labelled``: the collector's family makers, metrics.py)."""
        figs = self.figures()
        settings = self.settings()
        figures, top_n = self.offload(summary, figs, settings.top_links)
        yield labelled(gauge, "hpcfabric_link_class_utilisation", ["cls", "stat"],
                       (([cls, stat], f[stat]) for cls, f in figures.items() for stat in ("max", "mean")))
        for name, key in (("hpcfabric_link_class_pause_frames", "pause_frames"),
                          ("hpcfabric_link_class_paused_seconds", "paused_seconds"),
                          ("hpcfabric_link_class_flips", "flips")):
            yield labelled(counter, name, ["cls"], (([cls], f[key]) for cls, f in figures.items()))
        chosen = settings.links
        per = self.offload(figs.rows, None if chosen == "all" else chosen) if chosen else []
        ends = ["switch", "port", "peer"]
        yield labelled(gauge, "hpcfabric_link_utilisation", ends,
                       (([r.switch, str(r.port), r.peer], r.util) for r in per if r.util is not None))
        for name, key in (("hpcfabric_link_pause_frames", "pause_frames"),
                          ("hpcfabric_link_paused_seconds", "paused_s"), ("hpcfabric_link_flips", "flips")):
            yield labelled(counter, name, ends, (([r.switch, str(r.port), r.peer], getattr(r, key)) for r in per))
        yield labelled(gauge, "hpcfabric_link_top_utilisation", ["rank", *ends],
                       (([str(rank), r.switch, str(r.port), r.peer], r.util) for rank, r in enumerate(top_n, 1)))


def summary(figs: LinkFigures, n: int) -> tuple[dict[str, dict[str, float]], list[Any]]:
    """Class figures and the top ``n`` (one call: offloaded together)."""
    return figs.class_figures(), figs.top(n)
