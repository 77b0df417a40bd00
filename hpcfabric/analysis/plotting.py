"""Matplotlib for the analysis figures: headless, byte-stable PNGs."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend (imported on first use: plots are optional)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: Path) -> None:
    """Write ``fig`` as PNG without version/date metadata (byte-stable output)."""
    fig.savefig(path, dpi=110, metadata={"Software": None})
