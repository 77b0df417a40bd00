"""Result files of a simulator sweep (``analyze fig12``, ``analyze workload``): CSV, JSON, PNG.

A sweep named ``stem`` writes ``<stem>.partial.csv`` while its curves finish
(:func:`partial_path`, :func:`write_csv`), then ``<stem>.csv``, ``<stem>.json`` and, with a
plot function, ``<stem>.png``, removing the partial file (:func:`write_results`).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any, Callable, Sequence

__all__ = ["partial_path", "write_csv", "write_results"]


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
