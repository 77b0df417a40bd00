"""Bring-up storm: many switches connected and not yet confirmed, their installs making progress.

While one is on, the controller's periodic side work -- LLDP rounds and statistics polling -- waits, so
the installs get the CPU (at dragonfly-300k, 8 partitions on 2 cores, LLDP and polling during the
bring-up took ~20 % of a controller's CPU and the emulated switches' forwarding of LLDP more). A storm
that stops progressing (no switch confirmed for :data:`STALL_S`, e.g. a switch that never accepts its
tables) no longer holds anything back, nor does one older than :data:`MAX_S`.
"""

from __future__ import annotations

from typing import Any

#: more switches than this connected and unconfirmed at once is a storm
SYNCS = 8
#: a storm with no switch confirmed for this long (s) is stalled: side work resumes
STALL_S = 10.0
#: side work waits for one storm at most this long (s)
MAX_S = 300.0


class Storm:
    """Judges the bring-up of ``state``'s ``switches`` (``connected``, ``confirmed``) at ``now``."""

    def __init__(self, state: Any) -> None:
        self.state = state
        self.since: float | None = None  # when the current storm began
        self.progress_at = 0.0  # last time the number of confirmed switches changed
        self.confirmed = -1

    def holding(self, now: float) -> bool:
        """Should periodic side work wait now? (Counts the switches: one pass, at most once per caller round.)"""
        installing = confirmed = 0
        for sw in self.state.switches.values():
            if sw.confirmed:
                confirmed += 1
            elif sw.connected:
                installing += 1
        if installing <= SYNCS:
            self.since = None
            return False
        if self.since is None:
            self.since = self.progress_at = now
        if confirmed != self.confirmed:
            self.confirmed, self.progress_at = confirmed, now
        return now - self.progress_at < STALL_S and now - self.since < MAX_S
