"""Statistics polling: what the switches answer themselves (DMP, guards) and the punt meters' drops.

The switches answer DMP and drop spoofed frames without the controller, so
:class:`StatsPoller` asks them every ``[metrics] poll_interval``: the packet
counts of the DMP echo and guard entries (flow stats filtered by cookie
class) and the meter band drops, for the metrics and the status file.
Port statistics too: every port's ``tx_bytes`` (speeds from the port descriptions) into
:class:`~hpcfabric.controller.linkload.PortRates`, the per-link utilisation (docs/operations.md).
A round waits while a bring-up storm progresses (controller.storm).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

from hpcfabric.controller.channel import Channel, Disconnected
from hpcfabric.controller.framework import hub
from hpcfabric.controller.linkload import PortRates
from hpcfabric.controller.state import Changes, State
from hpcfabric.controller.storm import Storm
from hpcfabric.openflow import ofwire
from hpcfabric.rules.flows import COOKIE_APP_MASK, COOKIE_CLASS_SHIFT, ETH_TYPE_DMP, RuleClass, make_cookie
from hpcfabric.rules.guards import GUARD_DROP, GUARD_HOST_PUNT, guard_kind

LOG = logging.getLogger("hpcfabric.controller")

_CLASS_MASK = COOKIE_APP_MASK | (0xFF << COOKIE_CLASS_SHIFT)


class StatsPoller:
    """Polls ``state``'s confirmed switches over ``channel`` while this instance is master (``ha``) and no
    bring-up ``storm`` holds side work back; ``active()``: the app still runs."""

    def __init__(self, state: State, channel: Channel, ha: Any, counters: Any, changes: Changes, storm: Storm,
                 active: Callable[[], bool]) -> None:
        self.state, self.channel, self.ha, self.counters = state, channel, ha, counters
        self.changes, self.storm, self.active = changes, storm, active
        self.served: dict[str, dict[str, dict[int, int]]] = {}  # switch -> kind -> port -> packets
        self.meter_drops: dict[str, dict[int, int]] = {}  # switch -> meter -> packets dropped by its band
        self.rates = PortRates()  # tx rates and port speeds (port stats, port descriptions)

    def loop(self) -> None:
        """Flow stats of the DMP and guard entries, meter stats: for the metrics and the status file."""
        ha, counters = self.ha, self.counters
        while self.active():
            hub.sleep(self.state.config.metrics_poll)
            if not ha.master:
                continue
            if self.storm.holding(time.monotonic()):  # a bring-up in progress: counters are 0 anyway
                counters["polls_deferred"] += 1
                continue
            for sw in list(self.state.switches.values()):
                dp = sw.dp
                if dp is None or not sw.confirmed or not ha.master_of(sw.name):
                    continue
                try:
                    self.poll(sw.name, dp)
                    self.poll_ports(sw.name, dp)
                except Disconnected:
                    continue
                except Exception as err:  # noqa: BLE001 - polling is best effort
                    counters["poll_failures"] += 1
                    LOG.debug("poll of %s failed: %s", sw.name, err)
            self.rates.finish_round()
            self.changes.mark()

    def poll(self, name: str, dp: Any) -> None:
        """One switch's counters."""
        multipart = self.channel.multipart
        p, o = dp.ofproto_parser, dp.ofproto
        kinds: dict[str, dict[int, int]] = {"dmp": {}, "spoofed": {}, "host_punts": {}}
        for rc in (RuleClass.DMP, RuleClass.GUARD):
            req = p.OFPFlowStatsRequest(dp, 0, o.OFPTT_ALL, o.OFPP_ANY, o.OFPG_ANY, make_cookie(rc), _CLASS_MASK,
                                        p.OFPMatch())
            for st in multipart(dp, req, timeout=10.0):
                spec = st.spec if isinstance(st, ofwire.FlowStatsEntry) else None
                cookie, count = st.cookie, st.packet_count
                if rc == RuleClass.DMP:
                    eth_type = spec.match.eth_type if spec is not None else st.match.get("eth_type")
                    if eth_type == ETH_TYPE_DMP:
                        port = cookie & 0xFFFFFFFF
                        kinds["dmp"][port] = kinds["dmp"].get(port, 0) + count
                else:
                    kind, port = guard_kind(cookie)
                    key = {GUARD_DROP: "spoofed", GUARD_HOST_PUNT: "host_punts"}.get(kind)
                    if key:
                        kinds[key][port] = kinds[key].get(port, 0) + count
        self.served[name] = kinds
        if self.state.config.meters:
            drops = {}
            for st in multipart(dp, p.OFPMeterStatsRequest(dp, 0, o.OFPM_ALL), timeout=10.0):
                if st.band_stats:
                    drops[st.meter_id] = sum(b.packet_band_count for b in st.band_stats)
            self.meter_drops[name] = drops

    @property
    def load_round(self) -> int:
        """How many port-rate rounds have been recorded (the page refetches its loads when it changes)."""
        return self.rates.rounds

    def as_dict(self) -> dict[str, Any]:
        """The last polled counters: ``served`` (switch -> dmp/spoofed/host_punts -> port -> packets),
        ``meter_drops`` (switch -> meter id -> packets), and the port rates: ``tx_bps`` and ``speed_bps``
        ((switch, port) -> bits/s; the poller's own maps, read them, never write) and ``load_round``."""
        rates = self.rates
        return {"served": dict(self.served), "meter_drops": dict(self.meter_drops), "tx_bps": rates.bps,
                "speed_bps": rates.speed, "load_round": rates.rounds}

    def poll_ports(self, name: str, dp: Any) -> None:
        """One switch's port counters (tx_bytes at now); speeds from the port descriptions the framework keeps
        (``dp.ports``, ``curr_speed`` kb/s -> b/s)."""
        p, o = dp.ofproto_parser, dp.ofproto
        stats = self.channel.multipart(dp, p.OFPPortStatsRequest(dp, 0, o.OFPP_ANY), timeout=10.0)
        speeds = {n: getattr(d, "curr_speed", 0) * 1000.0 for n, d in (dp.ports or {}).items()}
        self.rates.record(name, [(st.port_no, st.tx_bytes) for st in stats if st.port_no < o.OFPP_MAX],
                          time.monotonic(), speeds)
