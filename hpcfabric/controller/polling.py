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
from typing import Any

from hpcfabric.controller.channel import Disconnected
from hpcfabric.controller.framework import hub
from hpcfabric.controller.linkload import PortRates
from hpcfabric.openflow import ofwire
from hpcfabric.rules.flows import COOKIE_APP_MASK, COOKIE_CLASS_SHIFT, ETH_TYPE_DMP, RuleClass, make_cookie
from hpcfabric.rules.guards import GUARD_DROP, GUARD_HOST_PUNT, guard_kind

LOG = logging.getLogger("hpcfabric.controller")

_CLASS_MASK = COOKIE_APP_MASK | (0xFF << COOKIE_CLASS_SHIFT)


class StatsPoller:
    """Polls the confirmed switches of the app ``app`` (master only)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.served: dict[str, dict[str, dict[int, int]]] = {}  # switch -> kind -> port -> packets
        self.meter_drops: dict[str, dict[int, int]] = {}  # switch -> meter -> packets dropped by its band
        self.rates = PortRates()  # tx rates and port speeds (port stats, port descriptions)

    def loop(self) -> None:
        """Flow stats of the DMP and guard entries, meter stats: for the metrics and the status file."""
        app = self.app
        while app.is_active:
            hub.sleep(app.config.metrics_poll)
            if not app.ha.master:
                continue
            if app.storm.holding(time.monotonic()):  # a bring-up in progress: counters are 0 anyway
                app.counters["polls_deferred"] += 1
                continue
            for sw in list(app.switches.values()):
                dp = sw.dp
                if dp is None or not sw.confirmed or not app.ha.master_of(sw.name):
                    continue
                try:
                    self.poll(sw.name, dp)
                    self.poll_ports(sw.name, dp)
                except Disconnected:
                    continue
                except Exception as err:  # noqa: BLE001 - polling is best effort
                    app.counters["poll_failures"] += 1
                    LOG.debug("poll of %s failed: %s", sw.name, err)
            self.rates.finish_round()
            app.mark()

    def poll(self, name: str, dp: Any) -> None:
        """One switch's counters."""
        multipart = self.app.channel.multipart
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
        if self.app.config.meters:
            drops = {}
            for st in multipart(dp, p.OFPMeterStatsRequest(dp, 0, o.OFPM_ALL), timeout=10.0):
                if st.band_stats:
                    drops[st.meter_id] = sum(b.packet_band_count for b in st.band_stats)
            self.meter_drops[name] = drops

    def poll_ports(self, name: str, dp: Any) -> None:
        """One switch's port counters (tx_bytes at now); speeds from the port descriptions the framework keeps
        (``dp.ports``, ``curr_speed`` kb/s -> b/s)."""
        p, o = dp.ofproto_parser, dp.ofproto
        stats = self.app.channel.multipart(dp, p.OFPPortStatsRequest(dp, 0, o.OFPP_ANY), timeout=10.0)
        speeds = {n: getattr(d, "curr_speed", 0) * 1000.0 for n, d in (dp.ports or {}).items()}
        self.rates.record(name, [(st.port_no, st.tx_bytes) for st in stats if st.port_no < o.OFPP_MAX],
                          time.monotonic(), speeds)
