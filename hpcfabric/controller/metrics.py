"""Prometheus metrics of the controller (``[metrics] listen = HOST:PORT``), see docs/operations.md.

:class:`FabricCollector` reads the controller's state at scrape time (no
bookkeeping on the hot paths); the PAUSE reaction times feed a real
histogram (:class:`ReactionHistogram`) as flips complete. Every metric is
named ``hpcfabric_*``; :data:`METRICS` lists them with their help text
(the docs table is checked against it).

The collector renders the same snapshot the status file is written from
(:func:`hpcfabric.controller.snapshot.snapshot`: the state, the counters and
each collaborator's ``as_dict()``), so it is unit-tested with the real app and
fake switches. The app serves :func:`make_registry` over HTTP (``framework.HttpServer``, ``/metrics``).
"""

from __future__ import annotations

import time
from typing import Any, Iterator

from hpcfabric.controller.snapshot import Sources, snapshot
from hpcfabric.controller.linkmetrics import LINK_METRICS

#: name -> (type, help). Counter names are given without the ``_total`` suffix prometheus_client adds.
METRICS: dict[str, tuple[str, str]] = {
    "hpcfabric_up": ("gauge", "1 while the controller runs"),
    "hpcfabric_switches_expected": ("gauge", "Switches of the topology this instance manages"),
    "hpcfabric_switches_connected": ("gauge", "Managed switches with an OpenFlow connection"),
    "hpcfabric_switches_confirmed": ("gauge", "Managed switches whose table was reconciled and confirmed by a barrier"),
    "hpcfabric_switch_connected": ("gauge", "1 if the switch is connected (label switch)"),
    "hpcfabric_switch_rules_expected": ("gauge", "Flow entries the switch should hold"),
    "hpcfabric_switch_rules_installed": ("gauge", "Flow entries confirmed on the switch (0 until confirmed)"),
    "hpcfabric_switch_syncs": ("counter", "Completed reconciliations of the switch"),
    "hpcfabric_unknown_switches": ("gauge", "Connected or LLDP-seen dpids the topology does not know"),
    "hpcfabric_discovery_scope_switches": ("gauge", "Switches whose links discovery expects (this instance's partition, "
                                           "or the whole fabric)"),
    "hpcfabric_links_expected": ("gauge", "Switch-to-switch links with an end in the discovery scope"),
    "hpcfabric_links_discovered": ("gauge", "Expected links confirmed by LLDP"),
    "hpcfabric_links_missing": ("gauge", "Expected links not seen by LLDP"),
    "hpcfabric_miswired_ports": ("gauge", "Ports whose LLDP neighbour is not the expected one"),
    "hpcfabric_quarantined_ports": ("gauge", "Ports held at OFPPC_NO_FWD"),
    "hpcfabric_ports_down": ("gauge", "Fabric ports reported down by port status"),
    "hpcfabric_port_paused": ("gauge", "1 while the port is paused (ports that ever flipped)"),
    "hpcfabric_port_pause_flips": ("counter", "PAUSE flips (paused or resumed) of the port"),
    "hpcfabric_pause_reaction_seconds": ("histogram", "PAUSE frame handling start to barrier reply of its flip"),
    "hpcfabric_dmp_requests_served": ("counter", "DMP requests answered by the switch's echo entry (polled flow stats)"),
    "hpcfabric_spoofed_frames_dropped": ("counter", "Frames from a host port with a foreign source MAC (guard drops)"),
    "hpcfabric_host_punts": ("counter", "Control frames from host ports sent towards the controller (before the meter)"),
    "hpcfabric_meter_dropped_packets": ("counter", "Punted frames dropped by the punt meter (label meter=fabric|host)"),
    "hpcfabric_packet_ins": ("counter", "Packet-ins by kind (pause, lldp, cnm, dmp, other, short)"),
    "hpcfabric_malformed_frames": ("counter", "Packet-ins dropped as malformed, by kind"),
    "hpcfabric_ignored_frames": ("counter", "Well-formed packet-ins dropped on purpose, by reason"),
    "hpcfabric_reloads": ("counter", "Configuration reloads by result (ok, failed)"),
    "hpcfabric_config_valid": ("gauge", "0 while the last reload attempt failed (the previous config keeps running)"),
    "hpcfabric_reload_table_diff": ("gauge", "Entries that differed between the old and new tables at the last reload"),
    "hpcfabric_reload_flow_mods": ("gauge", "Flow-mods reconciliation sent since the last reload"),
    "hpcfabric_deadlock_proven": ("gauge", "1 if the running tables are proven deadlock-free under the declared flow "
                                  "control (labels flow_control, scheme, levels, verdict)"),
    "hpcfabric_flow_mods_sent": ("counter", "Flow-mods sent by reconciliation (adds, modifies, deletes)"),
    "hpcfabric_flip_flow_mods": ("counter", "Flow-mods sent for PAUSE flips"),
    "hpcfabric_cnm_frames": ("counter", "802.1Qau CNMs copied to the controller, by result (used, flips)"),
    "hpcfabric_pause_switch_local_frames": ("counter", "PAUSE frames the switches reacted to themselves (pause_reaction = switch)"),
    "hpcfabric_switch_errors": ("counter", "OpenFlow error messages received"),
    "hpcfabric_sync_failures": ("counter", "Failed reconciliation attempts"),
    "hpcfabric_refused_sessions": ("counter", "OpenFlow sessions refused, by reason (not_tls, no_certificate, "
                                   "untrusted_certificate, tls_timeout, tls_handshake, certificate_mismatch, "
                                   "duplicate_session)"),
    "hpcfabric_replaced_sessions": ("counter", "Sessions closed because they did not answer an echo while a new "
                                    "session claimed their dpid (a switch that restarted)"),
    "hpcfabric_tls_handshakes": ("counter", "OpenFlow connections that completed the TLS handshake with a trusted "
                                 "client certificate"),
    "hpcfabric_ha_master": ("gauge", "1 if this instance may write to the switches (master or equal)"),
    "hpcfabric_ha_partition_master": ("gauge", "1 if this instance masters the partition (label partition; etcd: every "
                                      "partition of the fabric, else this instance's own)"),
    "hpcfabric_ha_generation": ("gauge", "OpenFlow role generation id of this instance"),
    "hpcfabric_ha_takeovers": ("counter", "Times this instance took the master lease over"),
    "hpcfabric_link_failures": ("counter", "Fabric port down events handled"),
    "hpcfabric_repairs": ("counter", "Proven repairs installed after link or switch failures (and recoveries)"),
    "hpcfabric_repairs_refused": ("counter", "Repairs not installed: no proven tables (flow_control = pfc)"),
    "hpcfabric_repair_unproven": ("gauge", "1 while the failures in force have no proven repair (last proven tables stay)"),
    "hpcfabric_repair_seconds": ("gauge", "Duration of the last repair (port status to the last wave confirmed)"),
    "hpcfabric_repair_proof_seconds": ("gauge", "Proof time of the last repair plan"),
    "hpcfabric_repair_flow_mods": ("counter", "Flow-mods sent by repairs (only the entries that differ)"),
    "hpcfabric_ports_damped": ("gauge", "Fabric ports up but held down because they flap"),
    **LINK_METRICS,  # per-link congestion (controller.linkmetrics)
}

#: histogram buckets of the PAUSE reaction time, seconds
REACTION_BUCKETS = (0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1.0)

_PACKET_IN_KINDS = ("pause", "lldp", "cnm", "dmp", "other", "short")
_MALFORMED = {"pause": "pause_malformed", "lldp": "lldp_malformed", "cnm": "cnm_malformed", "short": "short_frames",
              "no_in_port": "no_in_port"}
_IGNORED = {
    "pause_host_port": "pause_host_port",
    "pause_unknown_port": "pause_unknown_port",
    "pause_unknown_switch": "pause_unknown_switch",
    "pause_minimal_routing": "pause_minimal",
    "lldp_foreign": "lldp_foreign",
    "lldp_host_port_untrusted": "lldp_host_untrusted",
    "cnm_host_port": "cnm_host_port",
    "cnm_unknown_port": "cnm_unknown_port",
    "cnm_no_feedback": "cnm_no_feedback",
    "cnm_minimal_routing": "cnm_minimal",
    "dmp": "dmp_packet_ins",
    "other": "other_packet_ins",
    "not_master": "not_master_packet_ins",
    "unadmitted_session": "unadmitted_messages",
}


class ReactionHistogram:
    """Cumulative histogram of reaction times (seconds), fed by the controller as flips complete."""

    def __init__(self, buckets: tuple[float, ...] = REACTION_BUCKETS) -> None:
        self.buckets = tuple(buckets)
        self.counts = [0] * (len(self.buckets) + 1)
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        self.sum += seconds
        for i, b in enumerate(self.buckets):
            if seconds <= b:
                self.counts[i] += 1
                return
        self.counts[-1] += 1

    def cumulative(self) -> list[tuple[str, int]]:
        out, total = [], 0
        for b, c in zip(self.buckets, self.counts):
            total += c
            out.append((repr(b), total))
        total += self.counts[-1]
        out.append(("+Inf", total))
        return out


class FabricCollector:
    """prometheus_client collector: renders one :func:`~hpcfabric.controller.snapshot.snapshot` of ``sources``
    at each scrape (the same snapshots the status file is written from)."""

    def __init__(self, sources: Sources) -> None:
        self.sources = sources

    def describe(self) -> list:
        return []  # collect() builds everything at scrape time (unchecked collector)

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        src = self.sources
        fab = src.state
        snap = snapshot(src)
        c = src.counters
        h = METRICS

        def gauge(name: str, value: float | None = None, labels: list[str] | None = None) -> Any:
            return GaugeMetricFamily(name, h[name][1], value=value, labels=labels)

        def counter(name: str, value: float | None = None, labels: list[str] | None = None) -> Any:
            return CounterMetricFamily(name, h[name][1], value=value, labels=labels)

        def labelled(make: Any, name: str, labels: list[str], rows: Any) -> Any:
            """A family of ``labels`` with one sample per (label values, value) of ``rows``."""
            family = make(name, labels=labels)
            for values, value in rows:
                family.add_metric(list(values), value)
            return family

        sws = list(fab.switches.values())
        yield gauge("hpcfabric_up", 1)
        yield gauge("hpcfabric_switches_expected", len(sws))
        yield gauge("hpcfabric_switches_connected", sum(1 for s in sws if s.connected))
        yield gauge("hpcfabric_switches_confirmed", sum(1 for s in sws if s.confirmed))
        yield labelled(gauge, "hpcfabric_switch_connected", ["switch"],
                       (([s.name], 1 if s.connected else 0) for s in sws))
        yield labelled(gauge, "hpcfabric_switch_rules_expected", ["switch"],
                       (([s.name], s.rules_expected) for s in sws))
        yield labelled(gauge, "hpcfabric_switch_rules_installed", ["switch"],
                       (([s.name], s.rules_installed if s.confirmed else 0) for s in sws))
        yield labelled(counter, "hpcfabric_switch_syncs", ["switch"], (([s.name], s.syncs) for s in sws))
        rep = snap["wiring"]["report"]
        yield gauge("hpcfabric_unknown_switches", len(snap["wiring"]["unknown_dpids"]))
        yield gauge("hpcfabric_discovery_scope_switches", rep.get("scope_switches", len(fab.fabric.switches)))
        yield gauge("hpcfabric_links_expected", rep.get("links_expected", len(fab.fabric.links)))
        yield gauge("hpcfabric_links_discovered", rep.get("links_discovered", 0))
        yield gauge("hpcfabric_links_missing", len(rep.get("missing_links", ())))
        yield gauge("hpcfabric_miswired_ports", len(rep.get("miswired", ())))
        yield gauge("hpcfabric_quarantined_ports", len(rep.get("quarantined", ())))
        fo = snap["failover"]
        yield gauge("hpcfabric_ports_down", len(fo["ports_down"]))

        now = time.monotonic()
        pausing = snap["pausing"]
        pause, port_flips = fab.pause, pausing["port_flips"]
        ports = sorted(set(port_flips) | set(pause.until))
        yield labelled(gauge, "hpcfabric_port_paused", ["switch", "port"],
                       (([sw, str(port)], 1 if pause.is_paused(sw, port, now) else 0) for sw, port in ports))
        yield labelled(counter, "hpcfabric_port_pause_flips", ["switch", "port"],
                       (([sw, str(port)], port_flips.get((sw, port), 0)) for sw, port in ports))
        yield HistogramMetricFamily(
            "hpcfabric_pause_reaction_seconds", h["hpcfabric_pause_reaction_seconds"][1],
            buckets=pausing["hist_buckets"], sum_value=pausing["hist_sum"],
        )
        poller = snap["poller"]
        for name, kind in (("hpcfabric_dmp_requests_served", "dmp"), ("hpcfabric_spoofed_frames_dropped", "spoofed"),
                           ("hpcfabric_host_punts", "host_punts")):
            yield labelled(counter, name, ["switch", "port"], (([sw, str(port)], n)
                                                               for sw, kinds in sorted(poller["served"].items())
                                                               for port, n in sorted(kinds.get(kind, {}).items())))
        names = {mt.meter_id: mt.name for mt in fab.config.meters}
        yield labelled(counter, "hpcfabric_meter_dropped_packets", ["switch", "meter"],
                       (([sw, names.get(mid, str(mid))], n) for sw, drops in sorted(poller["meter_drops"].items())
                        for mid, n in sorted(drops.items())))
        yield labelled(counter, "hpcfabric_packet_ins", ["kind"],
                       (([k], c[f"packet_in_{k}"]) for k in _PACKET_IN_KINDS))
        yield labelled(counter, "hpcfabric_malformed_frames", ["kind"],
                       (([k], c[key]) for k, key in _MALFORMED.items()))
        yield labelled(counter, "hpcfabric_ignored_frames", ["reason"], (([r], c[key]) for r, key in _IGNORED.items()))
        reloads = snap["reload"]
        yield labelled(counter, "hpcfabric_reloads", ["result"],
                       ((["ok"], reloads["ok"]), (["failed"], reloads["failed"])))
        live = reloads.get("last") or {}
        yield gauge("hpcfabric_config_valid", 0 if live and not live.get("ok") else 1)
        yield gauge("hpcfabric_reload_table_diff", live.get("table_diff") or 0)
        yield gauge("hpcfabric_reload_flow_mods", live.get("flow_mods_sent") or 0)
        dl = fab.config.deadlock or {}
        yield labelled(gauge, "hpcfabric_deadlock_proven", ["flow_control", "scheme", "levels", "verdict"],
                       [([str(dl.get("flow_control", fab.config.flow_control)), str(dl.get("scheme", "")),
                          str(dl.get("levels", "")), str(dl.get("verdict", "not checked"))],
                         1 if dl.get("proven") else 0)])
        yield counter("hpcfabric_flow_mods_sent", c["rules_sent"])
        yield counter("hpcfabric_flip_flow_mods", c["flip_flow_mods"])
        yield labelled(counter, "hpcfabric_cnm_frames", ["result"],
                       (([result], c[key]) for result, key in (("received", "cnm_frames"), ("used", "cnm_used"),
                                                               ("flips", "cnm_flips"))))
        yield counter("hpcfabric_pause_switch_local_frames", c["pause_switch_local"])
        yield counter("hpcfabric_switch_errors", c["switch_errors"])
        yield counter("hpcfabric_sync_failures", c["sync_failures"])
        admission = snap["admission"]
        yield labelled(counter, "hpcfabric_refused_sessions", ["reason"],
                       (([reason], n) for reason, n in admission["refused_by_reason"].items()))
        yield counter("hpcfabric_replaced_sessions", admission["replaced_dead_sessions"])
        yield counter("hpcfabric_tls_handshakes", admission["tls_handshakes"])
        yield gauge("hpcfabric_ha_master", 1 if snap["ha_master"] else 0)
        yield labelled(gauge, "hpcfabric_ha_partition_master", ["partition"],
                       (([part], 1 if mine else 0) for part, mine in snap["ha_partitions"]))
        yield gauge("hpcfabric_ha_generation", snap["ha"]["generation"])
        yield counter("hpcfabric_ha_takeovers", snap["ha"]["takeovers"])
        yield counter("hpcfabric_link_failures", fo["events"])
        yield counter("hpcfabric_repairs", fo["repairs"])
        yield counter("hpcfabric_repairs_refused", fo["refused"])
        yield gauge("hpcfabric_repair_unproven", 1 if fo["unproven"] else 0)
        yield gauge("hpcfabric_repair_seconds", (fo["last_ms"] or 0.0) / 1000.0)
        yield gauge("hpcfabric_repair_proof_seconds", ((fo["last"] or {}).get("timings") or {}).get("prove", 0.0))
        yield counter("hpcfabric_repair_flow_mods", fo["flow_mods"])
        yield gauge("hpcfabric_ports_damped", len(fo["damped"]))
        if self.sources.links is not None:
            yield from self.sources.links.families(gauge, counter, labelled)


def make_registry(sources: Sources) -> Any:
    """A fresh prometheus_client registry holding only the fabric collector (no process/GC metrics)."""
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    registry.register(FabricCollector(sources))
    return registry


def metrics_app(sources: Sources) -> Any:
    """The WSGI app a scrape of ``/metrics`` reaches (served by ``framework.HttpServer``)."""
    from prometheus_client import make_wsgi_app

    return make_wsgi_app(make_registry(sources))


def render(sources: Sources) -> bytes:
    """The text exposition of the metrics of ``sources`` (what a scrape returns)."""
    from prometheus_client import generate_latest

    return generate_latest(make_registry(sources))
