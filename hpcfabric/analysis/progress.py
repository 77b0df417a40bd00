"""Progress bars on stderr for long analysis runs (tqdm, a dependency)."""

from __future__ import annotations

import sys
from typing import Any


def bar(total: int, desc: str, enabled: bool = True) -> Any:
    """A tqdm progress bar on stderr counting to ``total`` (a no-op when not ``enabled``)."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, file=sys.stderr, leave=False, dynamic_ncols=True, mininterval=0.5,
                disable=not enabled)
