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
from typing import Any, Iterable, Mapping, Sequence

from hpcfabric.config import ControllerConfig, load_config
from hpcfabric.controller.framework import hub, run_native
from hpcfabric.controller.ha import scoped_discovery
from hpcfabric.controller.switches import build_switches
from hpcfabric.controller.tables import Tables, group_buckets
from hpcfabric.errors import HpcfabricError
from hpcfabric.openflow.reconcile import diff
from hpcfabric.protocols.pause import PauseState

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
    """Reloads of the app ``app``: its ``config`` and everything derived from it."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.requested = False
        self.reloads: dict[str, Any] = {"ok": 0, "failed": 0, "last": None, "pending_restart": []}
        self.group_diff = 0  # fast-failover groups that differed at the last reload

    def request(self) -> None:
        """Reload soon (from a signal handler: the loop picks it up, never work inside a handler)."""
        self.requested = True

    def stamps(self) -> tuple:
        cfg = self.app.config
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
            last["flow_mods_sent"] = self.app.counters["rules_sent"] - self.reloads["last"]["sent_mark"]
            last["group_mods_sent"] = self.app.counters["group_mods"] - self.reloads["last"]["group_mark"]
            marks = self.reloads["last"]["sync_marks"]
            last["switches_synced"] = sum(1 for name, n in marks.items()
                                          if (st := self.app.switches.get(name)) is not None and st.syncs > n)
            out["last"] = last
        return out

    def loop(self) -> None:
        app = self.app
        stamps = self.stamps()
        last_poll = time.monotonic()
        while app.is_active:
            hub.sleep(0.1)
            reason = None
            if self.requested:
                self.requested = False
                reason = "SIGHUP"
            elif app.config.reload_poll > 0 and time.monotonic() - last_poll >= app.config.reload_poll:
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
        app = self.app
        t0 = time.monotonic()
        path = app.config.path
        LOG.info("reload (%s): loading %s", reason, path)
        old_desired = app.config.desired
        try:
            new = run_native(load_config, path)
            changed = run_native(table_diff, old_desired, new.desired,  # + switches gone from the topology
                                 [n for n in new.desired if new.manages(n)]
                                 + [n for n in old_desired if n not in new.desired and app.config.manages(n)])
        except HpcfabricError as err:
            return self.failed(reason, str(err), t0)
        except Exception as err:  # noqa: BLE001 - reported, never fatal
            return self.failed(reason, f"internal error: {type(err).__name__}: {err}", t0)
        kept = [k for k in RESTART_KEYS if getattr(new, k) != getattr(app.config, k)]
        if kept:
            new = replace(new, **{k: getattr(app.config, k) for k in kept})
            LOG.warning("reload: %s changed but needs a restart; the running value is kept", ", ".join(kept))
        sent_mark, group_mark = app.counters["rules_sent"], app.counters["group_mods"]
        resynced, retired, added = self.apply(new)
        self.reloads["ok"] += 1
        self.reloads["pending_restart"] = kept
        self.reloads["last"] = {
            "time": time.time(), "ok": True, "reason": reason, "error": None, "seconds": round(time.monotonic() - t0, 4),
            "resynced": resynced, "retired": retired, "added": added, "pending_restart": kept,
            "traffic": new.traffic, "table_diff": sum(changed.values()),
            "rules_total": sum(len(f) for n, f in new.desired.items() if new.manages(n)),
            "group_diff": self.group_diff, "sent_mark": sent_mark, "group_mark": group_mark,
            "sync_marks": {n: app.switches[n].syncs for n in resynced if n in app.switches},
        }
        LOG.info("reload (%s) ok in %.3f s: %d switch(es) to reconcile (%d entries differ of %d), %d retired, %d new",
                 reason, time.monotonic() - t0, len(resynced), self.reloads["last"]["table_diff"],
                 self.reloads["last"]["rules_total"], len(retired), len(added))
        app.mark(rediscover=True)
        return True

    def failed(self, reason: str, error: str, t0: float) -> bool:
        self.reloads["failed"] += 1
        self.reloads["last"] = {"time": time.time(), "ok": False, "reason": reason, "error": error,
                                "seconds": round(time.monotonic() - t0, 4)}
        LOG.error("reload (%s) rejected, the running configuration is unchanged: %s", reason, error)
        self.app.mark()
        return False

    def apply(self, new: ControllerConfig) -> tuple[list[str], list[str], list[str]]:
        """Make ``new`` the running config; returns the switches (re)synced, retired and added."""
        app = self.app
        old_cfg = app.config
        old = dict(app.by_dpid)
        old_desired = {s.dpid: old_cfg.desired.get(s.name, ()) for s in old.values()}
        old_meters = old_cfg.meters
        app.config = new
        app.fabric = new.fabric
        app.reporter.configure(new)
        logging.getLogger("hpcfabric").setLevel(new.log_level)
        app.switches, app.by_dpid, carried = build_switches(new, old)
        old_groups = app.tables.groups
        app.tables = Tables(new, group_buckets(new) if new.fast_failover else {})
        self.group_diff = sum(1 for name, groups in app.tables.groups.items() for gid, buckets in groups.items()
                              if (old_groups.get(name) or {}).get(gid) != buckets)
        # pause state: keep the ports that still exist as fabric ports
        conditional = new.routing == "conditional"
        until = {k: v for k, v in app.pause.until.items()
                 if conditional and k[0] in app.switches and k[1] in app.fabric.fabric_ports(k[0])}
        app.pause = PauseState(new.link_speed_bps, hold=new.pause_hold_ms / 1000.0, until=until)
        # discovery starts over on the new fabric (LLDP refreshes it within one interval)
        now = time.monotonic()
        app.discovery = scoped_discovery(new, app.fabric, app.ha)
        for st in app.switches.values():
            if st.connected:
                app.discovery.switch_up(st.dpid, now)
                for port in st.no_fwd:
                    app.discovery.adopt_quarantine(st.name, port)
        app.failover.reconfigure(new)
        app.cache.clear()
        resynced, retired, added = [], [], []
        meters_changed = new.meters != old_meters
        for st in carried:
            if not (st.connected and st.dp is not None):
                continue
            if meters_changed:
                st.installed_meters = None
            groups_changed = old_groups.get(st.name) != app.tables.groups.get(st.name)
            if old_desired.get(st.dpid) != new.desired.get(st.name, ()) or meters_changed or groups_changed:
                app.sessions.resync(st)
                resynced.append(st.name)
        # switches new to the topology that are connected already (as unknown dpids)
        for dpid, info in list(app.unknown.items()):
            st = app.by_dpid.get(dpid)
            if st is not None:
                dp = info.get("dp")
                del app.unknown[dpid]
                if dp is not None and info.get("connected"):
                    added.append(st.name)
                    app.sessions.connected(dp)
        for dpid, prev in old.items():
            if dpid in app.by_dpid or not (prev.connected and prev.dp is not None):
                continue
            prev.gen += 1
            if dpid in new.dpid_to_switch:  # now managed by another instance: leave its table alone
                app.unmanaged[dpid] = prev.dp
                continue
            prev.retired = True
            prev.confirmed = False
            app.retired[dpid] = prev
            app.unknown[dpid] = {"first_seen": time.time(), "connected": True, "dp": prev.dp, "address": None}
            retired.append(prev.name)
            hub.spawn(app.sessions.sync_loop, prev, prev.dp, prev.gen)
        return resynced, retired, added
