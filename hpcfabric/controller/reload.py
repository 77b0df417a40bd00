"""Configuration reload: on SIGHUP or a changed file, validate again and apply only the differences.

:class:`Reloader` loads the config in a native thread (flips keep flowing);
an invalid file changes nothing (the running config stays, the error is in
the status file). A valid one is applied in one step without a yield
(:meth:`Reloader.apply`): new switch states with their connections carried
over, new tables, pause and discovery state kept where their ports still
exist, reconciliation of only the switches whose table, meters or groups
changed, retirement of switches no longer in the topology. Settings a
running controller cannot change (:data:`RESTART_KEYS`) keep their running value.

Every reload is counted in flow-mods: ``table_diff`` (computed with the new config,
before anything is sent: the entries that differ between the old and the new desired
tables, :func:`table_diff`) next to ``rules_total`` (the new tables' size), and
``flow_mods_sent`` (what reconciliation has sent since, read live by :meth:`Reloader.as_dict`)
-- so switching jobs (``[hpcfabric] traffic``, docs/workload.md) shows it moved only the
entries that change.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import replace
from typing import Any, Callable, Iterable, Mapping, Sequence

from hpcfabric.config import ControllerConfig, load_config
from hpcfabric.controller.framework import hub, run_native
from hpcfabric.controller.sessions import Sessions
from hpcfabric.controller.state import Changes, State, build_state
from hpcfabric.errors import HpcfabricError
from hpcfabric.openflow.reconcile import diff

LOG = logging.getLogger("hpcfabric.controller")

#: settings a running controller cannot change (a reload keeps the running value and says so)
RESTART_KEYS = ("listen_host", "listen_port", "metrics_listen", "ha_role", "ha_lease_file", "ha_instance", "ha_backend",
                "ha_endpoints", "ha_ttl", "ha_partitions", "ha_partition", "ha_prefix", "ha_etcd", "tls")


def file_stamps(paths: Iterable[str]) -> tuple:
    """(path, mtime_ns, size, inode) per file, (path, None) where it cannot be read: what a change shows in."""
    out = []
    for path in paths:
        try:
            st = os.stat(path)
            out.append((path, st.st_mtime_ns, st.st_size, st.st_ino))
        except OSError:
            out.append((path, None))
    return tuple(out)


def table_diff(old: Mapping[str, Sequence[Any]], new: Mapping[str, Sequence[Any]],
               switches: Iterable[str] | None = None) -> dict[str, int]:
    """Per switch (of ``switches``, default every switch of ``new``), the flow-mods that turn table ``old`` into
    table ``new`` (adds, modifies, deletes: :func:`hpcfabric.openflow.reconcile.diff`); only switches that differ."""
    out = {}
    for name in (new if switches is None else switches):
        n = diff(new.get(name, ()), old.get(name, ())).changes
        if n:
            out[name] = n
    return out


class Reloader:
    """Reloads of ``state`` (its ``config`` and everything derived from it, :func:`build_state`; ``ha``: the
    lease, for the discovery scope). ``sessions`` (connected, resync, sync_loop) reconcile what changed,
    ``reconfigure(config)`` tells the failover, ``cache`` (encoded flow-mods) is cleared; ``active()``: the app
    still runs."""

    def __init__(self, state: State, ha: Any, cache: Any, counters: Any, changes: Changes, active: Callable[[], bool],
                 sessions: Sessions, reconfigure: Callable[[ControllerConfig], None]) -> None:
        self.state, self.ha, self.cache, self.counters, self.changes = state, ha, cache, counters, changes
        self.active, self.sessions, self.reconfigure = active, sessions, reconfigure
        self.requested = False
        self.reloads: dict[str, Any] = {"ok": 0, "failed": 0, "last": None, "pending_restart": []}
        self.group_diff = 0  # fast-failover groups that differed at the last reload

    def request(self) -> None:
        """Reload soon (from a signal handler: the loop picks it up, never work inside a handler)."""
        self.requested = True

    def stamps(self) -> tuple:
        cfg = self.state.config
        manifest = (os.path.join(cfg.compiled_dir, "manifest.json"),) if cfg.compiled_dir else ()
        traffic = (cfg.traffic,) if cfg.traffic else ()
        return file_stamps((cfg.path, cfg.topology, *manifest, *traffic))  # a recompiled artifact is a reload too

    def as_dict(self) -> dict[str, Any]:
        """The status file's ``reload``: counts, and the last reload with ``flow_mods_sent`` (reconciliation's
        flow-mods since it was applied) and ``switches_synced`` (of ``resynced``, those reconciled since)."""
        out = dict(self.reloads)
        last = out.get("last")
        if last and last.get("ok") and "sent_mark" in last:
            last = {k: v for k, v in last.items() if k not in ("sent_mark", "group_mark", "sync_marks")}
            last["flow_mods_sent"] = self.counters["rules_sent"] - self.reloads["last"]["sent_mark"]
            last["group_mods_sent"] = self.counters["group_mods"] - self.reloads["last"]["group_mark"]
            marks = self.reloads["last"]["sync_marks"]
            last["switches_synced"] = sum(1 for name, n in marks.items()
                                          if (st := self.state.switches.get(name)) is not None and st.syncs > n)
            out["last"] = last
        return out

    def loop(self) -> None:
        fab = self.state
        stamps = self.stamps()
        last_poll = time.monotonic()
        while self.active():
            hub.sleep(0.1)
            reason = None
            if self.requested:
                self.requested = False
                reason = "SIGHUP"
            elif fab.config.reload_poll > 0 and time.monotonic() - last_poll >= fab.config.reload_poll:
                last_poll = time.monotonic()
                now = self.stamps()
                if now != stamps:
                    hub.sleep(0.1)  # let a writer finish (editors write in steps)
                    reason = "file change"
            if reason is None:
                continue
            try:
                self.reload(reason)
            except Exception:  # pragma: no cover - a reload must never kill the loop
                LOG.exception("reload failed unexpectedly")
            stamps = self.stamps()

    def reload(self, reason: str = "request") -> bool:
        """Validate the config file (and topology) again and apply the differences; False if it is invalid."""
        fab = self.state
        t0 = time.monotonic()
        path = fab.config.path
        LOG.info("reload (%s): loading %s", reason, path)
        old_desired = fab.config.desired
        try:
            new = run_native(load_config, path)
            changed = run_native(table_diff, old_desired, new.desired,  # + switches gone from the topology
                                 [n for n in new.desired if new.manages(n)]
                                 + [n for n in old_desired if n not in new.desired and fab.config.manages(n)])
        except HpcfabricError as err:
            return self.failed(reason, str(err), t0)
        except Exception as err:  # noqa: BLE001 - reported, never fatal
            return self.failed(reason, f"internal error: {type(err).__name__}: {err}", t0)
        kept = [k for k in RESTART_KEYS if getattr(new, k) != getattr(fab.config, k)]
        if kept:
            new = replace(new, **{k: getattr(fab.config, k) for k in kept})
            LOG.warning("reload: %s changed but needs a restart; the running value is kept", ", ".join(kept))
        sent_mark, group_mark = self.counters["rules_sent"], self.counters["group_mods"]
        resynced, retired, added = self.apply(new)
        self.reloads["ok"] += 1
        self.reloads["pending_restart"] = kept
        self.reloads["last"] = {
            "time": time.time(), "ok": True, "reason": reason, "error": None, "seconds": round(time.monotonic() - t0, 4),
            "resynced": resynced, "retired": retired, "added": added, "pending_restart": kept,
            "traffic": new.traffic, "table_diff": sum(changed.values()),
            "rules_total": sum(len(f) for n, f in new.desired.items() if new.manages(n)),
            "group_diff": self.group_diff, "sent_mark": sent_mark, "group_mark": group_mark,
            "sync_marks": {n: fab.switches[n].syncs for n in resynced if n in fab.switches},
        }
        LOG.info("reload (%s) ok in %.3f s: %d switch(es) to reconcile (%d entries differ of %d), %d retired, %d new",
                 reason, time.monotonic() - t0, len(resynced), self.reloads["last"]["table_diff"],
                 self.reloads["last"]["rules_total"], len(retired), len(added))
        self.changes.mark(rediscover=True)
        return True

    def failed(self, reason: str, error: str, t0: float) -> bool:
        self.reloads["failed"] += 1
        self.reloads["last"] = {"time": time.time(), "ok": False, "reason": reason, "error": error,
                                "seconds": round(time.monotonic() - t0, 4)}
        LOG.error("reload (%s) rejected, the running configuration is unchanged: %s", reason, error)
        self.changes.mark()
        return False

    def apply(self, new: ControllerConfig) -> tuple[list[str], list[str], list[str]]:
        """Make ``new`` the running config (:func:`~hpcfabric.controller.state.build_state`, then one swap);
        returns the switches (re)synced, retired and added."""
        fab = self.state
        old_cfg = fab.config
        old = dict(fab.by_dpid)
        old_desired = {s.dpid: old_cfg.desired.get(s.name, ()) for s in old.values()}
        old_groups = fab.tables.groups
        built = build_state(new, self.ha, old=fab)
        self.group_diff = sum(1 for name, groups in built.tables.groups.items() for gid, buckets in groups.items()
                              if (old_groups.get(name) or {}).get(gid) != buckets)
        fab.swap(built)
        logging.getLogger("hpcfabric").setLevel(new.log_level)
        self.reconfigure(new)
        self.cache.clear()
        resynced, retired, added = [], [], []
        meters_changed = new.meters != old_cfg.meters
        sessions = self.sessions
        for st in fab.carried:
            if not (st.connected and st.dp is not None):
                continue
            if meters_changed:
                st.installed_meters = None
            groups_changed = old_groups.get(st.name) != fab.tables.groups.get(st.name)
            if old_desired.get(st.dpid) != new.desired.get(st.name, ()) or meters_changed or groups_changed:
                sessions.resync(st)
                resynced.append(st.name)
        # switches new to the topology that are connected already (as unknown dpids)
        for dpid, info in list(fab.unknown.items()):
            st = fab.by_dpid.get(dpid)
            if st is not None:
                dp = info.get("dp")
                del fab.unknown[dpid]
                if dp is not None and info.get("connected"):
                    added.append(st.name)
                    sessions.connected(dp)
        for dpid, prev in old.items():
            if dpid in fab.by_dpid or not (prev.connected and prev.dp is not None):
                continue
            prev.gen += 1
            if dpid in new.dpid_to_switch:  # now managed by another instance: leave its table alone
                fab.unmanaged[dpid] = prev.dp
                continue
            prev.retired = True
            prev.confirmed = False
            fab.retired[dpid] = prev
            fab.unknown[dpid] = {"first_seen": time.time(), "connected": True, "dp": prev.dp, "address": None}
            retired.append(prev.name)
            hub.spawn(sessions.sync_loop, prev, prev.dp, prev.gen)
        return resynced, retired, added
