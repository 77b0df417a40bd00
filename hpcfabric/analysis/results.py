"""Result files of a simulator sweep (``analyze fig12``, ``analyze workload``): CSV, JSON, PNG.

A sweep named ``stem`` writes ``<stem>.partial.csv`` while its curves finish
(:func:`partial_path`, :func:`write_csv`), then ``<stem>.csv``, ``<stem>.json`` and, with a
plot function, ``<stem>.png``, removing the partial file (:func:`write_results`); :func:`plot_curves` is
the plot both sweeps draw.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any, Callable, Sequence

__all__ = ["partial_path", "plot_curves", "write_csv", "write_results"]


def partial_path(outdir: Path, stem: str) -> Path:
    """Where the points of a running sweep go (read while it runs; removed by :func:`write_results`)."""
    return outdir / f"{stem}.partial.csv"


def write_csv(path: Path, rows: Sequence[dict[str, Any]], fields: Sequence[str]) -> None:
    """One row per point, columns ``fields`` (others ignored); a deadlock cycle as ``a -> b -> ...``."""
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({**r, "deadlock": " -> ".join(r["deadlock"]) if r["deadlock"] else ""})


def write_results(outdir: Path, stem: str, rows: Sequence[dict[str, Any]], result: dict[str, Any],
                  fields: Sequence[str], plot: Callable[[dict[str, Any], Path], None] | None) -> list[Path]:
    """Write ``<stem>.csv`` (``rows``), ``<stem>.json`` (``result``) and, if ``plot``, ``<stem>.png``.

    Removes the partial CSV; returns the paths written, in that order.
    """
    paths = [outdir / f"{stem}.csv", outdir / f"{stem}.json"]
    write_csv(paths[0], rows, fields)
    partial_path(outdir, stem).unlink(missing_ok=True)
    paths[1].write_text(json.dumps(result, indent=2, default=float) + "\n", encoding="utf-8")
    if plot is not None:
        paths.append(outdir / f"{stem}.png")
        plot(result, paths[2])
    return paths


def plot_curves(result: dict[str, Any], path: Path, patterns: Sequence[str], *, width: float = 6,
                accepted: str = "accepted load", style: Callable[[str], str] = lambda router: "-") -> None:
    """Latency (top) and accepted load (bottom, y label ``accepted``) vs offered load, one column of ``width``
    inches per pattern, one curve per router of ``result`` (line style ``style(router)``)."""
    from hpcfabric.analysis.plotting import pyplot, save_figure

    plt = pyplot()
    fig, axes = plt.subplots(2, max(1, len(patterns)), figsize=(width * max(1, len(patterns)), 8), squeeze=False)
    for j, pat in enumerate(patterns):
        for name in result["routers"]:
            pts = [r for r in result["points"] if r["pattern"] == pat and r["router"] == name]
            if not pts:
                continue
            x = [r["load"] for r in pts]
            axes[0][j].errorbar(x, [r["latency_ns"] / 1000 for r in pts], yerr=[r["latency_ci_ns"] / 1000 for r in pts],
                                marker="o", ms=3, ls=style(name), label=name, capsize=2)
            axes[1][j].errorbar(x, [r["accepted"] for r in pts], yerr=[r["accepted_ci"] for r in pts], marker="o", ms=3,
                                ls=style(name), label=name, capsize=2)
        axes[0][j].set(title=f"{result['fabric']}: {pat}", xlabel="offered load (fraction of link rate)",
                       ylabel="average latency (us)", yscale="log")
        axes[1][j].plot([0, 1], [0, 1], color="grey", lw=0.5)
        axes[1][j].set(xlabel="offered load", ylabel=accepted, xlim=(0, 1), ylim=(0, 1))
        axes[0][j].legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)
