"""Reliability phases of ``run_reliability.py``: controller restart, HA failover, link failure.

Each phase is a function of the :class:`Testbed` (net, config, the two controllers, the traffic pair
and the link to cut) that writes its summary keys and failures into the runner's :class:`runkit.Report`
as it measures them (a phase cut short by a timeout still reports what it measured):

* :func:`restart_phase`: steady ping at 10 ms across ``kill -9`` + restart of the master;
* :func:`failover_phase`: the second controller joins as slave, the master is killed, it takes over;
* :func:`link_phase`: ``ip link set ... down`` on a fabric link carrying a ping -> reroute, all-pairs
  ping with the link down, link up, all-pairs ping again.

The spoofing and fuzzing phase is :mod:`spoof_fuzz`'s. :func:`ha_settings` / :func:`lease_settings`: what
the controllers' config holds (the etcd phase's too).
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from controller_proc import Controller, ready, status_changes  # mininet/controller_proc.py
from fabric_topo import intf_name, run_cmd, set_controllers
from reachability import all_pairs_ping, steady_across
from runkit import Report, wait_until

Log = Callable[[str], None]


def ha_settings(topology: Path, ha: dict[str, Any], **hpcfabric: Any) -> dict[str, dict[str, Any]]:
    """The reliability runs' controller config (``fabric_setup.write_conf`` writes it): conditional routing,
    fast LLDP, SIGHUP-only reloads, INFO logs, metrics polled every second, ``[ha]`` = ``ha``."""
    return {"hpcfabric": {"topology": topology, "routing": "conditional", "lldp_interval": 0.5, "reload_poll": 0,
                          "log_level": "INFO", **hpcfabric},
            "metrics": {"poll_interval": 1}, "ha": ha}


def lease_settings(topology: Path, lease: Path, fast_failover: bool = False) -> dict[str, dict[str, Any]]:
    """The lease-file phases' config: :func:`ha_settings` with HA by lease file, guards on."""
    return {**ha_settings(topology, {"role": "auto", "lease_file": lease, "lease_timeout": 1.0}),
            "guards": {"source_check": "on", "punt_meters": "on"},
            "failover": {"fast_failover": "on" if fast_failover else "off"}}


def pick_link(cfg: Any) -> Any:
    """The link to cut: between two access switches; with fast-failover groups, one protected at both
    ends (so the groups can bridge both directions of a ping); else a global link where there is one."""
    fabric = cfg.fabric
    links = [l for l in fabric.links if fabric.hosts_on(l.a) and fabric.hosts_on(l.b)]
    if cfg.groups:
        from hpcfabric.failover.groups import group_id

        def protected(sw: str, port: int) -> bool:
            return any(g.group_id == group_id(port) for g in cfg.groups.get(sw, ()))

        links = [l for l in links if protected(l.a, l.a_port) and protected(l.b, l.b_port)] or links
    glob = [l for l in links if fabric.peer(l.a, l.a_port).kind == "global"]
    return (glob or links)[0]


def status_of(ctl: Controller) -> dict[str, Any]:
    return ctl.status() or {}


def is_master_ready(ctl: Controller, n: int) -> dict[str, Any] | None:
    """``ctl``'s status if it is this process's, HA master and ready (every switch, every rule), else None."""
    st = status_of(ctl)
    if st.get("pid") == ctl.pid and (st.get("ha") or {}).get("role") == "master" and ready(st, n):
        return st
    return None


@dataclass
class Testbed:
    """What the phases act on. ``master`` and ``st0`` (its status after the last phase) move on at failover."""

    net: Any
    cfg: Any  # the loaded config (fabric, plan, groups)
    prefix: str
    a: Controller
    b: Controller
    ports: list[int]
    src: str
    dst: str
    link: Any  # the fabric link to cut (pick_link)
    master: Controller
    st0: dict[str, Any]

    @property
    def fabric(self) -> Any:
        return self.cfg.fabric

    @property
    def n(self) -> int:
        return len(self.cfg.fabric.switches)


def restart_phase(bed: Testbed, pings: int, report: Report, log: Log) -> None:
    """kill -9 + restart of controller A under a steady ping: no loss, no flow-mod from the restarted one."""
    a, n = bed.a, bed.n
    info: dict[str, Any] = {}

    def restart() -> dict[str, Any]:
        t = time.monotonic()
        a.stop(signal.SIGKILL)
        time.sleep(0.3)
        a.start()
        st = wait_until(lambda: is_master_ready(a, n), 60, "restarted controller master and confirmed")
        info["flow_mods"] = status_changes(st)
        info["seconds"] = round(time.monotonic() - t, 2)
        return info

    res = steady_across(bed.net, bed.src, bed.dst, pings, restart)
    report.update(restart_pings=res["sent"], restart_lost=res["lost"], restart_flow_mods=info.get("flow_mods"),
                  restart_s=info.get("seconds"))
    log(f"restart: {res['sent']} pings, {res['lost']} lost, {info.get('flow_mods')} flow-mods")
    if res["lost"] or info.get("flow_mods") or res["sent"] < pings:
        report.fail(f"restart: {res}")


def failover_phase(bed: Testbed, pings: int, report: Report, log: Log) -> None:
    """Controller B joins as slave on every switch; kill -9 of master A under a steady ping: B takes over with
    no loss and no flow-mod. B is the testbed's master afterwards."""
    a, b, n = bed.a, bed.b, bed.n
    b.start()
    set_controllers(bed.fabric, bed.ports, bed.prefix)
    wait_until(lambda: (lambda st: st.get("pid") == b.pid and (st.get("ha") or {}).get("role") == "slave"
                        and st.get("switches_connected") == n)(status_of(b)), 60, "controller B slave on every switch")
    log(f"controller B (pid {b.pid}) is slave on every switch")
    finfo: dict[str, Any] = {}

    def kill_master() -> dict[str, Any]:
        t = time.monotonic()
        a.stop(signal.SIGKILL)
        st = wait_until(lambda: is_master_ready(b, n), 30, "controller B master")
        finfo["takeover_s"] = round(time.monotonic() - t, 2)
        finfo["flow_mods"] = status_changes(st)
        finfo["generation"] = st["ha"]["generation"]
        return finfo

    res = steady_across(bed.net, bed.src, bed.dst, pings, kill_master)
    report.update(failover_pings=res["sent"], failover_lost=res["lost"], failover_flow_mods=finfo.get("flow_mods"),
                  failover_takeover_s=finfo.get("takeover_s"))
    log(f"failover: {res['sent']} pings, {res['lost']} lost, takeover {finfo.get('takeover_s')} s, "
        f"{finfo.get('flow_mods')} flow-mods")
    if res["lost"] or finfo.get("flow_mods") or res["sent"] < pings:
        report.fail(f"failover: {res} {finfo}")
    bed.master = b
    bed.st0 = status_of(b)


def link_phase(bed: Testbed, pings: int, interval: float, fast_failover: bool, report: Report, log: Log) -> None:
    """Cut the testbed's link under a ping every ``interval`` s: the master reroutes (``link_recovery_ms``), the
    traffic gap is measured (``ff_link_recovery_ms`` with fast-failover groups), every pair is reachable with
    the link down and after it is back up."""
    net, fabric, link, master, n = bed.net, bed.fabric, bed.link, bed.master, bed.n
    ifname = intf_name(link.a, link.a_port, bed.prefix)
    linfo: dict[str, Any] = {}
    before = (status_of(master).get("failover") or {}).get("repairs", 0)

    def cut() -> dict[str, Any]:
        run_cmd(["ip", "link", "set", ifname, "down"])
        t = time.monotonic()
        st = wait_until(lambda: (lambda s: s if (s.get("failover") or {}).get("repairs", 0) > before
                                 and (s.get("failover") or {}).get("last_ms") is not None
                                 and s.get("switches_confirmed") == n else None)(status_of(master)), 60, "repair")
        linfo["ms"] = st["failover"]["last_ms"]
        linfo["seen_s"] = round(time.monotonic() - t, 3)
        return linfo

    res = steady_across(net, bed.src, bed.dst, int(max(300, pings // 3) * 0.01 / interval), cut, interval=interval)
    f = report.summary
    f.update({
        "link": f"{link.a}:{link.a_port}-{link.b}:{link.b_port}",
        "link_ping_interval_ms": interval * 1000,
        "link_recovery_ms": linfo.get("ms"),
        "link_traffic_gap_ms": round(res["longest_gap"] * interval * 1000, 3),
        "link_pings_lost": res["lost"],
    })
    if fast_failover:  # the groups moved the traffic; the gap is the data plane's recovery
        f["ff_groups"] = sum(len(g) for g in bed.cfg.groups.values())
        f["ff_link_recovery_ms"] = f["link_traffic_gap_ms"]
    after = all_pairs_ping(net, fabric)
    f["link_after_pairs_lost"] = after["lost"]
    run_cmd(["ip", "link", "set", ifname, "up"])
    wait_until(lambda: (lambda s: s if not (s.get("failover") or {}).get("repaired") and s.get("switches_confirmed") == n
                        else None)(status_of(master)), 60, "restoration")
    time.sleep(0.5)
    again = all_pairs_ping(net, fabric)
    f["link_restored_lost"] = again["lost"]
    log(f"link {f['link']}: reroute confirmed {linfo.get('ms')} ms after the event, traffic gap "
        f"{f['link_traffic_gap_ms']} ms ({res['lost']} pings lost); all pairs with the link down lost "
        f"{after['lost']}, after restoration {again['lost']}")
    if after["lost"] or again["lost"] or linfo.get("ms") is None:
        report.fail(f"link failure: after {after['lost_pairs']} restored {again['lost_pairs']}")
