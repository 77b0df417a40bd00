"""The status of a running controller: one JSON dict, written atomically to the status file.

:class:`StatusReporter` builds the dict from one snapshot of the state and the
collaborators (:func:`hpcfabric.controller.snapshot.snapshot`, each one's ``as_dict()``;
:meth:`StatusReporter.status`) and rewrites the file when something changed
(``Changes.mark`` sets :attr:`StatusReporter.dirty`; at most 10 writes per
second, and never more than ~10% of the time on huge fabrics) and every
second anyway. See docs/controller.md for the keys.
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any, Callable

from hpcfabric.controller.framework import NAME, VERSION, hub
from hpcfabric.controller.snapshot import Sources, snapshot
from hpcfabric.controller.state import Changes

LOG = logging.getLogger("hpcfabric.controller")

STATUS_MIN_GAP = 0.1  # at most 10 status writes per second
#: a write waits at least STATUS_GAP_X x the last one's own cost (<= ~2 % of the time: at Table III a write
#: is ~30 ms of CPU in slices, and a PAUSE arriving during a slice waits for it)
STATUS_GAP_X = 50
STATUS_LIST_CAP = 1000  # longer link lists are cut (their *_count keys hold the totals)
MILESTONE_S = 0.02  # how soon a milestone (every switch confirmed, a repair) reaches the status file, whatever the gap:
# it wakes the loop (Changes.reached), so this is the bound tests and docs quote, not a poll
SLICE = 128  # switches per slice of the status loop's write (other green threads run between slices)


class Breather:
    """``breather()`` gives the hub back (other green threads run) and keeps the time that took apart
    (``yielded``), so the work's own cost can be told from everybody else's."""

    def __init__(self) -> None:
        self.yielded = 0.0

    def __call__(self) -> None:
        t = time.monotonic()
        hub.sleep(0)
        self.yielded += time.monotonic() - t


class StatusReporter:
    """The status dict and file, built from one :func:`~hpcfabric.controller.snapshot.snapshot` of ``sources``;
    written when ``changes`` says so; ``path_override`` (``--status-file``) beats the config's;
    ``active()``: the app still runs."""

    def __init__(self, sources: Sources, changes: Changes, active: Callable[[], bool],
                 path_override: str | None = None) -> None:
        self.sources, self.changes, self.active = sources, changes, active
        self.path_override = path_override
        self.cost = 0.0
        self.breather = Breather()

    @property
    def path(self) -> str | None:
        """The status file (the running config's, unless overridden)."""
        return self.path_override if self.path_override is not None else self.sources.state.config.status_file

    @property
    def dirty(self) -> bool:
        """Something the status shows changed (polled by the loop: marking never wakes a green thread)."""
        return self.changes.status

    @property
    def milestone(self) -> bool:
        """E.g. the last switch confirmed: written within MILESTONE_S, not after the full gap."""
        return self.changes.milestone

    def status(self, running: bool = True, breathe: bool = False, fresh: bool = True) -> dict[str, Any]:
        """The status dict; ``breathe``: other green threads run between slices of the work (the loop's
        writes: at Table III building this took ~100-350 ms of CPU in one go, and PAUSEs waited); ``fresh=False``:
        the last discovery report as it is (a milestone's write: recomputing it after a failure's burst of port
        events took ~0.25 s at Table III; the next regular write, within about a second, recomputes it)."""
        src = self.sources
        fab = src.state
        config = fab.config
        now = time.monotonic()
        pause = self.breather if breathe else None
        snap = snapshot(src, now if fresh or not src.wiring.last_report else None, breathe=pause)
        wiring, pausing, poller, admission = snap["wiring"], snap["pausing"], snap["poller"], snap["admission"]
        rep = wiring["report"]
        impostors = admission.pop("impostors")
        sws = list(fab.switches.values())
        per_switch = {}
        served = {"dmp": 0, "spoofed": 0, "host_punts": 0}
        meter_drops = {}
        polled, drops = poller["served"], poller["meter_drops"]
        for k, s in enumerate(sws):  # everything per switch in this one sliced pass
            if pause is not None and k % SLICE == SLICE - 1:
                pause()
            per_switch[s.name] = s.as_dict()
            kinds = polled.get(s.name)
            if kinds:
                for key in served:
                    served[key] += sum(kinds.get(key, {}).values())
            d = drops.get(s.name)
            if d is not None:
                meter_drops[s.name] = {str(m): v for m, v in d.items()}
        samples = pausing["reaction_ms"]
        c = src.counters
        unknown = wiring["unknown_dpids"]
        return {
            "time": time.time(),
            "running": running,
            "pid": os.getpid(),
            "framework": f"{NAME} {VERSION}",
            "started": src.started,
            "config": config.path,
            "fabric": fab.fabric.name,
            "routing": config.routing,
            "addressing": config.addressing,
            "deadlock": deadlock_object(config.deadlock or {"flow_control": config.flow_control, "verdict": "not checked"},
                                        snap["failover"]["unproven"]),
            "switches_expected": len(fab.switches),
            "switches_connected": sum(1 for s in sws if s.connected),
            "switches_confirmed": sum(1 for s in sws if s.confirmed),
            "unknown_dpids": unknown,
            "refused_sessions": c["refused_sessions"],
            "impostors": impostors,
            "admission": admission,
            "rules_expected": sum(s.rules_expected for s in sws),
            "rules_installed": sum(s.rules_installed for s in sws if s.confirmed),
            "per_switch": per_switch,
            "discovery_scope": rep.get("scope", "fabric"),
            "links_expected": rep["links_expected"],
            "links_discovered": rep["links_discovered"],
            "missing_links": rep["missing_links"][:STATUS_LIST_CAP],
            "missing_links_count": len(rep["missing_links"]),
            "extra_links": rep["extra_links"][:STATUS_LIST_CAP],
            "extra_links_count": len(rep["extra_links"]),
            "miswired": rep["miswired"][:STATUS_LIST_CAP],
            "miswired_count": len(rep["miswired"]),
            "quarantined": rep["quarantined"],
            "lldp": {
                "sent": c["lldp_sent"],
                "received": c["lldp_received"],
                "malformed": c["lldp_malformed"],
                "foreign": c["lldp_foreign"],
                "probes": c["lldp_probes"],
                "round_s": round(wiring["round_s"], 4),
            },
            "pause": {
                "enabled": config.routing == "conditional",
                "reaction": config.pause_reaction,
                "switch_local_frames": c["pause_switch_local"],
                "switch_local_ports": {f"{s}:{p}": n for (s, p), n in sorted(pausing["port_pauses"].items())},
                "flips": c["flips"],
                "expiries": c["expiries"],
                "flow_mods": c["flip_flow_mods"],
                "paused_ports": [f"{s}:{p}" for s, p in fab.pause.paused_ports()],
                "reaction_ms": [round(x, 4) for x in samples],
                "frames": c["pause_frames"],
                "malformed": c["pause_malformed"],
                "host_port_frames": c["pause_host_port"],
                "unknown_port_frames": c["pause_unknown_port"],
                "errors": c["flip_errors"],
            },
            "cnm": {
                "enabled": config.cnm,
                "frames": c["cnm_frames"],
                "used": c["cnm_used"],
                "flips": c["cnm_flips"],
                "malformed": c["cnm_malformed"],
                "host_port_frames": c["cnm_host_port"],
                "unknown_port_frames": c["cnm_unknown_port"],
                "no_feedback": c["cnm_no_feedback"],
                "minimal": c["cnm_minimal"],
            },
            "errors": {"switch_errors": c["switch_errors"], "sync_failures": c["sync_failures"],
                       "packet_in_errors": c["packet_in_errors"], "role_failures": c["role_failures"]},
            "flowmod_cache": snap["flowmod_cache"],
            "packet_ins": {k: c[f"packet_in_{k}"] for k in ("pause", "lldp", "cnm", "dmp", "other", "short")},
            "dropped": {
                "short": c["short_frames"], "no_in_port": c["no_in_port"], "pause_malformed": c["pause_malformed"],
                "pause_host_port": c["pause_host_port"], "pause_unknown_port": c["pause_unknown_port"],
                "pause_unknown_switch": c["pause_unknown_switch"], "pause_minimal": c["pause_minimal"],
                "lldp_malformed": c["lldp_malformed"], "lldp_foreign": c["lldp_foreign"],
                "lldp_host_untrusted": c["lldp_host_untrusted"], "cnm_malformed": c["cnm_malformed"],
                "cnm_host_port": c["cnm_host_port"], "cnm_unknown_port": c["cnm_unknown_port"],
                "cnm_no_feedback": c["cnm_no_feedback"], "cnm_minimal": c["cnm_minimal"], "dmp": c["dmp_packet_ins"],
                "other": c["other_packet_ins"], "not_master": c["not_master_packet_ins"],
                "unadmitted_session": c["unadmitted_messages"],
            },
            "guards": {
                "source_check": config.source_check,
                "punt_meters": config.punt_meters,
                "dmp_served": served["dmp"],
                "spoofed_dropped": served["spoofed"],
                "host_punts": served["host_punts"],
                "meter_drops": dict(sorted(meter_drops.items())),
            },
            "reload": snap["reload"],
            "ha": snap["ha"],
            "heap": snap["heap"],
            "failover": snap["failover"],
            "metrics": f"{config.metrics_listen[0]}:{config.metrics_listen[1]}" if config.metrics_listen else None,
        }

    def write(self, running: bool = True, breathe: bool = False, fresh: bool = True) -> None:
        """Rewrite the status file atomically (without one: keep the discovery report and its log going);
        ``breathe``: built and serialised in slices with other green threads running between them; ``fresh``: as
        :meth:`status`."""
        if not self.path:
            if running:
                self.sources.wiring.report(time.monotonic(), breathe=self.breather if breathe else None)  # logging
            return
        st = self.status(running, breathe=breathe, fresh=fresh)
        per = list(st.pop("per_switch").items())
        parts = []
        for i in range(0, len(per), SLICE):
            if breathe and i:
                self.breather()
            parts.append(json.dumps(dict(per[i:i + SLICE]), separators=(",", ":"))[1:-1])
        head = json.dumps(st, separators=(",", ":"))
        data = head[:-1] + ',"per_switch":{' + ",".join(parts) + "}}"
        tmp = f"{self.path}.tmp.{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(data)
        os.replace(tmp, self.path)

    def loop(self) -> None:
        last = 0.0
        while self.active():
            min_gap = max(STATUS_MIN_GAP, STATUS_GAP_X * self.cost)  # big fabrics: <= ~2 % of the time
            until = time.monotonic() + min_gap
            if (left := until - time.monotonic()) > 0:  # a 300k partition's gap is a minute or more in a bring-up
                self.changes.reached.wait(left)  # a milestone ends the gap
            milestone, self.changes.milestone = self.changes.milestone, False
            if not self.dirty and time.monotonic() - last < 1.0:
                continue
            # green threads are cooperative: never serialise the status while a flip is in flight
            for _ in range(50):
                if not self.sources.pausing.in_flight():
                    break
                hub.sleep(0.001)
            self.changes.status = False
            t = time.monotonic()
            y = self.breather.yielded
            try:
                self.write(breathe=True, fresh=not milestone)  # a milestone is shown at once, its report later
                self.cost = time.monotonic() - t - (self.breather.yielded - y)  # our own work, not the others'
            except Exception as err:  # pragma: no cover - disk full etc.
                LOG.error("cannot write status file %s: %s", self.path, err)
                hub.sleep(1.0)
            last = time.monotonic()


def deadlock_object(loaded: dict[str, Any], unproven: dict[str, Any] | None) -> dict[str, Any]:
    """The status file's ``deadlock`` object: ``loaded`` (the proof of the tables as loaded) and
    ``refused_repair``: None, or (``unproven``, the failover snapshot's entry) the failures in force whose
    repair was refused as unproven, the verdict and the cycle (channels) -- the last proven tables stay in
    force for them."""
    return {**loaded, "refused_repair": None if unproven is None else {
        **unproven, "in_force": "the last proven tables (the destinations behind the failures stay unreachable)"}}
