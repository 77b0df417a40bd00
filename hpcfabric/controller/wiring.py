"""The wiring check: LLDP rounds, LLDP packet-ins, quarantine enforcement and the discovery report.

:class:`Wiring` sends LLDP (:mod:`hpcfabric.protocols.lldp`, carrying this
session's nonce) out of every non-host port each ``lldp_interval``, feeds
what comes back to the pure :class:`hpcfabric.controller.discovery.DiscoveryState`,
and sets or clears ``OFPPC_NO_FWD`` on the ports it quarantines. Quarantined
ports drop packet-outs too, so they are probed (NO_FWD lifted for about one
round trip). The discovery report is recomputed at most every 0.5 s and its
problems are logged once, when they appear and when they resolve.
"""

from __future__ import annotations

import logging
import secrets
import struct
import time
from typing import Any, Callable

from hpcfabric.controller.channel import MAX_XID, Channel, Disconnected, SyncError
from hpcfabric.controller.discovery import quarantine_changes
from hpcfabric.controller.framework import hub
from hpcfabric.controller.state import Changes, State
from hpcfabric.controller.storm import Storm
from hpcfabric.openflow import ofwire
from hpcfabric.openflow.ofwire import OFPPC_NO_FWD
from hpcfabric.protocols.lldp import MalformedLLDP, build_lldp, parse_lldp

LOG = logging.getLogger("hpcfabric.controller")

LLDP_TTL = 120
_XID = struct.Struct("!I")
#: LLDP frames per second the controller sends at most (more ports: rotated over several rounds)
LLDP_MAX_PPS = 2000
#: rounds over more switches than PACE_ABOVE are spread over ROUND_SPREAD of the interval
PACE_ABOVE = 64
ROUND_SPREAD = 0.8
#: walks over every switch (round plan, quarantine enforcement) let other green threads run every SLICE switches
SLICE = 128
#: cables of the discovery report between two such breaks (the status loop's write)
REPORT_SLICE = 128
#: the discovery report is recomputed at most every REPORT_GAP_X x its own cost (<= ~2 % of the time)
REPORT_GAP_X = 50
#: discovery problems logged one line each per report; more at once (a bring-up at 300k: 60,000 cables) get one line
LOG_EACH = 20


def _hw(desc: Any) -> bytes:
    return bytes.fromhex(desc.hw_addr.replace(":", ""))


class Wiring:
    """LLDP rounds and quarantine over ``channel`` for ``state``'s switches and ``discovery`` state, while ``ha``
    says we master them and no bring-up ``storm`` holds side work back; ``active()``: the app still runs."""

    def __init__(self, state: State, channel: Channel, counters: Any, ha: Any, storm: Storm, changes: Changes,
                 active: Callable[[], bool]) -> None:
        self.state, self.channel, self.counters, self.ha, self.storm = state, channel, counters, ha, storm
        self.changes, self.active = changes, active
        self.nonce = secrets.token_bytes(8)  # tells our LLDP frames from forged or stale ones
        self.frames: dict[tuple[int, int, str], bytes] = {}
        self.outs: dict[tuple[int, int, str], bytes] = {}  # LLDP packet-outs, xid 0
        self.ours: dict[bytes, Any] = {}  # our frames, parsed once: a frame that comes back is looked up, not parsed
        self.last_report: dict[str, Any] = {}
        self.report_at = -1.0
        self.report_cost = 0.0
        self.logged: set[str] = set()
        self.cursor = 0  # rotation of LLDP over the ports when a round would exceed LLDP_MAX_PPS
        self.round_seconds = 0.0  # the last LLDP round's send time (status: lldp.round_s)

    # ------------------------------------------------------------ rounds
    def ports(self, sw: Any) -> list[int]:
        """Every port but host ports and reserved ones (unused ports too: extra cables show up)."""
        dp = sw.dp
        if dp is None or not dp.ports:
            return []
        hosts = set(self.state.fabric.host_ports(sw.name))
        return [p for p in sorted(dp.ports) if p < 0xFFFFFF00 and p not in hosts]

    def frame(self, dpid: int, port: int, hw_addr: str) -> bytes:
        key = (dpid, port, hw_addr)
        frame = self.frames.get(key)
        if frame is None:
            frame = build_lldp(dpid, port, bytes.fromhex(hw_addr.replace(":", "")), LLDP_TTL, self.nonce)
            self.frames[key] = frame
            self.ours[frame] = parse_lldp(frame)
        return frame

    def send_lldp(self, sw: Any, only: set[int] | None = None) -> None:
        """One LLDP round on ``sw`` (``only`` these ports): packet-outs now, probes of quarantined ports in a
        green thread."""
        dp = sw.dp
        parts = []
        probes = []
        for port in self.ports(sw):
            if only is not None and port not in only:
                continue
            desc = dp.ports.get(port)
            if desc is None:
                continue
            if port in sw.no_fwd:
                probes.append(port)
                continue
            key = (sw.dpid, port, desc.hw_addr)
            out = self.outs.get(key)
            if out is None:  # the packet-out is encoded once; only its xid changes
                out = self.outs[key] = ofwire.packet_out(0, [port], self.frame(sw.dpid, port, desc.hw_addr))
            parts.append(out[:4] + _XID.pack(self.channel.xids(dp, 1)) + out[8:])
            self.counters["lldp_sent"] += 1
        if parts:
            self.channel.send_chunks(dp, parts)
        if probes:
            hub.spawn(self.probe, sw, dp, probes)

    def probe(self, sw: Any, dp: Any, ports: list[int]) -> None:
        """LLDP out of quarantined ports, which drop packet-outs too.

        NO_FWD is lifted, a barrier round trip lets the switch apply that
        (OVS re-reads port config between message batches), then the LLDP and
        the NO_FWD again go out back to back: the port forwards for about one
        controller round trip per LLDP interval. Without the probes two
        quarantined ends of a cable could never see each other again (swapped
        cables put back).
        """
        fab = self.state
        ch = self.channel
        for port in ports:
            desc = (dp.ports or {}).get(port)
            if desc is None or sw.dp is not dp or port not in sw.no_fwd:
                continue
            hw = _hw(desc)
            x = ch.xids(dp, 2)
            sw.probing.add(port)  # port-status echoes of our own port-mods are not news
            try:
                try:
                    ch.wait(dp, (x + 1) & MAX_XID, ofwire.port_mod(x, port, hw, 0, OFPPC_NO_FWD)
                            + ofwire.barrier((x + 1) & MAX_XID), timeout=2.0)
                except Disconnected:
                    return
                except SyncError:
                    pass
                frame = self.frame(sw.dpid, port, desc.hw_addr)
                data = ofwire.packet_out(ch.xids(dp, 1), [port], frame)
                if (sw.name, port) in fab.discovery.quarantine():
                    data += ofwire.port_mod(ch.xids(dp, 1), port, hw, OFPPC_NO_FWD, OFPPC_NO_FWD)
                else:
                    sw.no_fwd.discard(port)  # healed meanwhile: leave it forwarding
                    LOG.info("discovery: %s port %d healed: NO_FWD cleared", sw.name, port)
                self.counters["lldp_sent"] += 1
                self.counters["lldp_probes"] += 1
                if not dp.send(data):
                    return
            finally:
                sw.probing.discard(port)

    def loop(self) -> None:
        fab = self.state
        while self.active():
            t = time.monotonic()
            # a bring-up storm (many switches connected, not yet confirmed) goes first while it progresses:
            # discovery's packet-ins would take the installs' CPU (controller.storm)
            if self.storm.holding(t):
                self.counters["lldp_rounds_deferred"] += 1
                hub.sleep(min(1.0, fab.config.lldp_interval))
                continue
            plan = self.round_plan() if self.ha.master else []
            pace = ROUND_SPREAD * fab.config.lldp_interval / max(1, len(plan))
            for k, (sw, only) in enumerate(plan):
                # paced over the interval: a round's packet-ins come back spread out, so a PAUSE
                # packet-in never queues behind a whole round of them
                if len(plan) > PACE_ABOVE:
                    # behind schedule: still one switch at a time (catching up in one go held the hub ~46 ms)
                    hub.sleep(max(0.0, t + k * pace - time.monotonic()))
                if sw.dp is not None and sw.connected and sw.confirmed and self.ha.master_of(sw.name):
                    try:
                        self.send_lldp(sw, only)
                    except Disconnected:
                        pass
                    except Exception:  # pragma: no cover - keep discovering
                        LOG.exception("LLDP round on %s failed", sw.name)
            self.round_seconds = time.monotonic() - t
            try:
                self.enforce(breathe=True)  # NO_FWD in line with the quarantine (e.g. ports of a reconnected switch)
            except Exception:  # pragma: no cover - keep discovering
                LOG.exception("quarantine enforcement failed")
            hub.sleep(max(0.01, fab.config.lldp_interval - (time.monotonic() - t)))

    def round_plan(self) -> list[tuple[Any, set[int] | None]]:
        """The switches (and ports) of this round: every port of every confirmed switch, or -- when that
        is more than LLDP_MAX_PPS x lldp_interval frames -- the next slice of them in rotation, with the
        discovery timeout stretched to 3.5 cycles (LLDP packet-ins cost ~0.1-0.2 ms each in the controller:
        Table III's 47,472 ports per round would take a core and delay PAUSE packet-ins behind them)."""
        fab = self.state
        confirmed = [sw for sw in fab.switches.values() if sw.dp is not None and sw.connected and sw.confirmed]
        budget = max(1, int(LLDP_MAX_PPS * fab.config.lldp_interval))
        every = []
        for k, sw in enumerate(confirmed):
            if k % SLICE == SLICE - 1:
                hub.sleep(0)  # Table III: ~40 ms of work in one go otherwise (PAUSE packet-ins wait)
            every.append(self.ports(sw))
        counts = [len(p) for p in every]
        total = sum(counts)
        if total <= budget:
            fab.discovery.timeout = fab.config.lldp_timeout
            return [(sw, None) for sw in confirmed]
        cycle = -(-total // budget)  # rounds to visit every port once
        fab.discovery.timeout = max(fab.config.lldp_timeout, 3.5 * fab.config.lldp_interval * cycle)
        start = self.cursor % total
        self.cursor = (start + budget) % total
        plan: list[tuple[Any, set[int] | None]] = []
        pos = 0
        for sw, n, ports in zip(confirmed, counts, every):
            # port indices pos..pos+n-1 of the rotation; take those inside [start, start+budget) (wrapping)
            chosen = {p for i, p in enumerate(ports) if (pos + i - start) % total < budget}
            if chosen:
                plan.append((sw, chosen))
            pos += n
        return plan

    # ------------------------------------------------------------ events
    def on_lldp(self, msg: Any, data: bytes, in_port: int, now: float) -> None:
        fab = self.state
        c = self.counters
        info = self.ours.get(data)
        if info is None:
            try:
                info = parse_lldp(data)
            except (MalformedLLDP, ValueError, IndexError, struct.error):
                c["lldp_malformed"] += 1
                return
        if info.dpid is None or info.port is None:
            c["lldp_foreign"] += 1  # somebody else's LLDP (a host, a legacy switch)
            return
        dpid = msg.datapath.id
        sw = fab.by_dpid.get(dpid)
        trusted = info.nonce == self.nonce
        if not trusted and sw is not None:
            peer = fab.fabric.peer(sw.name, in_port)
            if peer is not None and peer.is_host:
                # a host can forge any LLDP; only ours (a switch cabled to a host port) tells something there
                c["lldp_host_untrusted"] += 1
                return
        c["lldp_received"] += 1
        names = fab.config.dpid_to_switch
        keys = ((names.get(info.dpid), info.port), (names.get(dpid), in_port))  # the ends this frame judges
        before = [k in fab.discovery.quarantined for k in keys]
        fab.discovery.observed(info.dpid, info.port, dpid, in_port, now, trusted=info.nonce == self.nonce)
        # port-mods only when this frame changed the quarantine: enforcing walks every switch, which per
        # LLDP packet-in made a round cost the fabric's size squared (each LLDP round also enforces once)
        if [k in fab.discovery.quarantined for k in keys] != before:
            self.enforce()
        self.changes.mark()

    def enforce(self, breathe: bool = False, only: Any = None) -> None:
        """Port-mods that bring every switch's NO_FWD ports in line with the quarantine (master only);
        ``breathe``: let other green threads run every SLICE switches (the LLDP loop's pass); ``only``: just that
        switch (a port status of its own changes no other switch's ports)."""
        fab = self.state
        if not self.ha.master:
            return
        wanted = fab.discovery.quarantine()
        by_switch: dict[str, set[tuple[str, int]]] = {}
        for n, p in wanted:
            by_switch.setdefault(n, set()).add((n, p))
        for k, sw in enumerate([only] if only is not None else list(fab.switches.values())):
            if breathe and k % SLICE == SLICE - 1:
                hub.sleep(0)
            dp = sw.dp
            if dp is None or not self.ha.master_of(sw.name):
                continue
            mine = {(n, p) for (n, p) in by_switch.get(sw.name, ()) if p not in sw.probing}
            current = {(sw.name, p) for p in sw.no_fwd if p not in sw.probing}
            add, remove = quarantine_changes(mine, current)
            for (_, port), config in [(a, OFPPC_NO_FWD) for a in add] + [(r, 0) for r in remove]:
                desc = (dp.ports or {}).get(port)
                if desc is None:
                    continue
                if not dp.send(ofwire.port_mod(self.channel.xids(dp, 1), port, _hw(desc), config, OFPPC_NO_FWD)):
                    break  # that switch is going away; the others still get theirs
                if config:
                    sw.no_fwd.add(port)
                    LOG.warning("discovery: %s port %d is miswired: set NO_FWD (quarantined)", sw.name, port)
                else:
                    sw.no_fwd.discard(port)
                    LOG.info("discovery: %s port %d healed: NO_FWD cleared", sw.name, port)

    def port_status(self, dp: Any, desc: Any, deleted: bool) -> None:
        """A port went down or away (forget its cable) or changed its config (track NO_FWD, re-enforce)."""
        fab = self.state
        o = dp.ofproto
        if deleted or desc.state & o.OFPPS_LINK_DOWN:
            fab.discovery.port_down(dp.id, desc.port_no)
        sw = fab.by_dpid.get(dp.id)
        if sw is not None and not deleted and desc.port_no not in sw.probing:
            if desc.config & OFPPC_NO_FWD:
                sw.no_fwd.add(desc.port_no)
            else:
                sw.no_fwd.discard(desc.port_no)
            if sw.dp is dp:  # e.g. a re-created port comes back without NO_FWD; the others: the LLDP round's pass
                self.enforce(only=sw)  # not every switch per port status (at Table III ~10-30 ms each: a burst's spread)

    # ------------------------------------------------------------ report
    def stale(self) -> None:
        """The next status recomputes the discovery report."""
        self.report_at = -1.0

    def report(self, now: float, breathe: Callable[[], None] | None = None) -> dict[str, Any]:
        """The discovery report as a dict: at most every 0.5 s, and never more than ~2 % of the time on huge
        fabrics (REPORT_GAP_X); ``breathe()`` (the status loop's write) is called every REPORT_SLICE cables to let the
        other green threads run (its ``yielded`` seconds, if it keeps them, are not counted as the cost)."""
        if self.changes.discovery:  # marked with rediscover=True since the last report
            self.changes.discovery = False
            self.report_at = -1.0
        if now - self.report_at >= max(0.5, REPORT_GAP_X * self.report_cost) or not self.last_report:
            t = time.monotonic()
            y = getattr(breathe, "yielded", 0.0)
            rep = self.state.discovery.report(now, breathe=breathe, every=REPORT_SLICE)
            self.last_report = rep.as_dict()
            self.report_at = now
            self.log_problems(self.last_report)
            self.report_cost = time.monotonic() - t - (getattr(breathe, "yielded", 0.0) - y)  # own work only
        return self.last_report

    def log_problems(self, rep: dict[str, Any]) -> None:
        problems = set()
        for m in rep["missing_links"]:
            if m.get("switch_down"):
                continue  # the disconnected switch is the problem; its links would only add noise
            problems.add(f"link {m['a']}:{m['a_port']} - {m['b']}:{m['b_port']} missing")
        for m in rep["miswired"]:
            problems.add(f"{m['switch']} port {m['port']} miswired: expected {m['expected']}, sees {m['actual']}")
        for e in rep["extra_links"]:
            problems.add(f"unexpected link {e['a']} - {e['b']}")
        for d in rep["unknown_dpids"]:
            problems.add(f"unknown dpid {d}")
        new, gone = sorted(problems - self.logged), sorted(self.logged - problems)
        for p in new[:LOG_EACH]:
            LOG.warning("discovery: %s", p)
        if len(new) > LOG_EACH:
            LOG.warning("discovery: %d more new problem(s), %d in all (every one in the status file's discovery "
                        "report and the web page)", len(new) - LOG_EACH, len(problems))
        for p in gone[:LOG_EACH]:
            LOG.info("discovery: resolved: %s", p)
        if len(gone) > LOG_EACH:
            LOG.info("discovery: resolved: %d more problem(s), %d left", len(gone) - LOG_EACH, len(problems))
        self.logged = problems

    def unknown_dpids(self) -> list[str]:
        """Connected dpids the topology does not know, and those LLDP has seen (as of the last report)."""
        rep = self.last_report or {}
        return sorted({f"{d:016x}" for d, i in self.state.unknown.items() if i.get("connected")}
                      | set(rep.get("unknown_dpids", ())))

    def as_dict(self, now: float | None = None, breathe: Callable[[], None] | None = None) -> dict[str, Any]:
        """What status and metrics show: the discovery ``report`` (recomputed as :meth:`report` allows at
        ``now``; without ``now`` the last one), the last LLDP round's send time ``round_s`` and the
        ``unknown_dpids``."""
        rep = self.report(now, breathe=breathe) if now is not None else (self.last_report or {})
        return {"report": rep, "round_s": self.round_seconds, "unknown_dpids": self.unknown_dpids()}
