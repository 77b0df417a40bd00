"""Flapping links (pure, time passed in as ``now``): which ports count as down.

A port reported down counts as down at once. A port that changes state ``limit`` times within ``window``
seconds is *damped*: it counts as down until it has stayed up ``hold`` seconds after its last change, and
each further episode doubles the hold (up to ``max_hold``); a port up and quiet for ``max_hold`` starts
afresh. So a
link flapping ten times a second costs one repair when it first goes down and one when it has been stable
again -- not twenty, and never a table set that was not proven (every repair is proven).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Hashable

__all__ = ["FlapDamper"]


@dataclass
class _Port:
    down: bool = False
    changes: list[float] = field(default_factory=list)  # times of recent state changes
    held_until: float = 0.0  # damped: counts as down until then (if it is up and stays up)
    hold: float = 0.0  # the current hold (doubles per episode)
    episodes: int = 0


class FlapDamper:
    """Reported port states and the damping of flapping ones (module docstring)."""

    def __init__(self, window: float = 2.0, limit: int = 3, hold: float = 2.0, max_hold: float = 30.0) -> None:
        self.window, self.limit, self.hold, self.max_hold = window, limit, hold, max_hold
        self.ports: dict[Hashable, _Port] = {}
        self.damped_total = 0  # episodes in which a port was damped

    def report(self, key: Hashable, down: bool, now: float) -> bool:
        """A port's reported state; True if that changed it."""
        p = self.ports.setdefault(key, _Port())
        if p.down == down:
            return False
        if p.changes and now - p.changes[-1] > self.max_hold and not down:
            p.hold, p.episodes = 0.0, 0
        p.down = down
        p.changes = [t for t in p.changes if now - t <= self.window] + [now]
        if p.held_until > now:  # still damped: the hold runs from the last change
            p.held_until = now + p.hold
        elif len(p.changes) >= self.limit:  # a new episode of flapping: held down until it stays up long enough
            p.hold = min(self.max_hold, p.hold * 2 if p.hold else self.hold)
            p.held_until = now + p.hold
            p.episodes += 1
            self.damped_total += 1
        return True

    def is_down(self, key: Hashable, now: float) -> bool:
        p = self.ports.get(key)
        return p is not None and (p.down or now < p.held_until)

    def down(self, now: float) -> set[Any]:
        """The ports that count as down now."""
        return {k for k, p in self.ports.items() if p.down or now < p.held_until}

    def damped(self, now: float) -> set[Any]:
        """Ports up but held down (flapping)."""
        return {k for k, p in self.ports.items() if not p.down and now < p.held_until}

    def next_change(self, now: float) -> float | None:
        """When a hold runs out (the set :meth:`down` gives may change without a report), or None."""
        ends = [p.held_until for p in self.ports.values() if not p.down and p.held_until > now]
        return min(ends) if ends else None

    def forget(self, keep: Any) -> None:
        """Forget ports for which ``keep(key)`` is false (switches no longer managed)."""
        self.ports = {k: p for k, p in self.ports.items() if keep(k)}
