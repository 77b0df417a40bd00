"""Progress bars on stderr for long analysis runs (tqdm when installed, else a plain counter)."""

from __future__ import annotations

import sys
import time
from typing import Any


class _Plain:
    """Minimal stand-in for ``tqdm``: ``update(n)``, ``close()``, ``set_postfix_str``."""

    def __init__(self, total: int, desc: str) -> None:
        self.total, self.desc, self.n = total, desc, 0
        self.t0 = self.last = time.monotonic()
        self.note = ""

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.monotonic()
        if now - self.last >= 0.5 or self.n >= self.total:
            self.last = now
            sys.stderr.write(f"\r{self.desc}: {self.n}/{self.total} {self.note} [{now - self.t0:.1f}s]")
            sys.stderr.flush()

    def set_postfix_str(self, text: str) -> None:
        self.note = text

    def close(self) -> None:
        if self.total:
            sys.stderr.write("\n")
            sys.stderr.flush()


class _Null:
    def update(self, n: int = 1) -> None:
        pass

    def set_postfix_str(self, text: str) -> None:
        pass

    def close(self) -> None:
        pass


def bar(total: int, desc: str, enabled: bool = True) -> Any:
    """A progress bar on stderr counting to ``total`` (a no-op when not ``enabled``)."""
    if not enabled:
        return _Null()
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm is a dependency
        return _Plain(total, desc)
    return tqdm(total=total, desc=desc, file=sys.stderr, leave=False, dynamic_ncols=True, mininterval=0.5)
