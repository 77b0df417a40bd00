"""What the controller knows about each managed switch: its connection, table state and counts.

:class:`SwitchState` is one switch (the status file's ``per_switch`` entry);
:func:`build_switches` makes them for a config, carrying connections over
from the previous ones (a reload).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hpcfabric.config import ControllerConfig

#: what a reload carries over from the previous SwitchState of the same dpid
CARRIED = ("dp", "connected", "confirmed", "rules_installed", "added", "modified", "deleted", "kept", "foreign",
           "conflicts", "method", "sync_seconds", "dump_seconds", "confirmed_at", "connected_at", "syncs", "error",
           "gen", "bundles", "no_fwd", "probing", "installed_meters", "installed_groups", "ready_gen")


@dataclass
class SwitchState:
    name: str
    dpid: int
    rules_expected: int
    dp: Any = None
    connected: bool = False
    confirmed: bool = False
    rules_installed: int = 0
    added: int = 0
    modified: int = 0
    deleted: int = 0
    kept: int = 0
    foreign: int = 0
    conflicts: int = 0
    method: str | None = None
    sync_seconds: float | None = None
    dump_seconds: float | None = None
    confirmed_at: float | None = None
    connected_at: float | None = None
    syncs: int = 0
    error: str | None = None
    gen: int = 0
    bundles: bool | None = None  # None: not tried yet
    syncing: bool = False
    flipped_during_sync: set[int] = field(default_factory=set)
    no_fwd: set[int] = field(default_factory=set)
    probing: set[int] = field(default_factory=set)
    installed_meters: dict[int, tuple[int, int]] | None = None  # meter -> (rate, burst) as last seen/installed
    installed_groups: dict[int, Any] | None = None  # group -> buckets as last seen/installed
    retired: bool = False  # removed from the topology by a reload: its flows are being cleared
    role_gen: int | None = None  # generation of our last accepted MASTER claim on this connection
    disconnected_at: float | None = None  # monotonic time the connection was lost (None: never connected / up)
    ready_gen: int | None = None  # connection generation whose first confirmation restarted discovery's pending clock

    def as_dict(self) -> dict[str, Any]:
        return {
            "dpid": f"{self.dpid:016x}",
            "connected": self.connected,
            "confirmed": self.confirmed,
            "rules_expected": self.rules_expected,
            "rules_installed": self.rules_installed,
            "added": self.added,
            "modified": self.modified,
            "deleted": self.deleted,
            "kept": self.kept,
            "foreign": self.foreign,
            "method": self.method,
            "sync_seconds": None if self.sync_seconds is None else round(self.sync_seconds, 6),
            "dump_seconds": None if self.dump_seconds is None else round(self.dump_seconds, 6),
            "confirmed_at": self.confirmed_at,
            "syncs": self.syncs,
            "error": self.error,
            "no_fwd_ports": sorted(self.no_fwd),
        }


def build_switches(
    config: ControllerConfig, old: dict[int, SwitchState]
) -> tuple[dict[str, SwitchState], dict[int, SwitchState], list[SwitchState]]:
    """SwitchStates for ``config`` (the switches this instance manages), by name and by dpid; connections
    carried over from ``old`` (by dpid). The third item lists the carried-over switches."""
    carried = []
    switches: dict[str, SwitchState] = {}
    for sw in config.fabric.switches:
        if not config.manages(sw.name):
            continue
        st = SwitchState(sw.name, sw.dpid, len(config.desired.get(sw.name, ())))
        prev = old.get(sw.dpid)
        if prev is not None:
            for attr in CARRIED:
                setattr(st, attr, getattr(prev, attr))
            carried.append(st)
        switches[sw.name] = st
    return switches, {s.dpid: s for s in switches.values()}, carried
