"""The etcd HA phase of ``run_reliability.py`` (``--phases etcd``): controllers on a real 3-member etcd cluster.

Own fabric (prefix ``<prefix>e``), own etcd cluster (:mod:`hpcfabric.emu.etcd_cluster`: TLS with client
certificates, etcd auth on; the controllers log in as the ``hpcfabric`` user, docs/operations.md "Securing the
control plane"), two controllers with ``[ha] backend = etcd``, ``partitions = 2``: each masters one partition
(balanced), every switch is
connected to both. Under a steady ping at 10 ms across the two partitions (summary keys ``etcd_*``):

1. ``kill -9`` of the master of the pinging host's partition: the other instance takes both partitions
   (``etcd_kill_lost``, ``etcd_kill_takeover_s``: kill -> the switches report the survivor MASTER);
2. the etcd raft leader is killed (``etcd_leader_lost``, ``etcd_leader_role_changes``);
3. all etcd members are stopped for ~6 s, then restarted (``etcd_down_lost``; the survivor stops
   writing: ``etcd_down_stopped_s`` after the stop; ``etcd_down_resumed_s`` after the restart). A PAUSE
   injected while etcd is down must not be written as a PORT_STATE flip (``etcd_down_flip_written``
   False), the same PAUSE once the survivor is master again must (``etcd_back_flip_written`` True).

Throughout, a sampler reads every switch's controller roles from Open vSwitch (``ovs-vsctl list
controller``) and counts samples where one partition has masters from two instances
(``etcd_double_master_samples``, must be 0).
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Any, Callable

from controller_proc import Controller, free_port, status_changes  # mininet/controller_proc.py
from fabric_setup import write_conf
from fabric_topo import run_cmd, set_controllers
from fabric_up import Up, fabric_up
from ovs_flows import wait_port_state
from pause_inject import inject_pause
from reachability import all_pairs_ping, steady_across
from reliability_phases import ha_settings
from runkit import Report, wait_until

from hpcfabric.config import load_config
from hpcfabric.emu.etcd_cluster import EtcdCluster
from hpcfabric.topology.partition import partition_fabric

Log = Callable[[str], None]


def write_etcd_conf(tmp: Path, topology: Path, endpoints: tuple[str, ...], partitions: int, ttl: int,
                    security: str = "") -> Path:
    """``security``: the ``[ha] etcd_*`` lines (CA, client certificate, user, password file)."""
    ha = {"backend": "etcd", "endpoints": ",".join(endpoints), "partitions": partitions, "ttl": ttl,
          "prefix": f"/hpcfabric/rel{int(time.time())}"}
    ha.update(line.split(" = ", 1) for line in security.splitlines() if " = " in line)
    return write_conf(tmp / "etcd.conf", ha_settings(topology, ha, link_speed_gbps=0.01))


def switch_roles(bridges: list[str]) -> dict[str, dict[int, str]]:
    """bridge -> {controller port: role} as Open vSwitch reports it (two ovs-vsctl calls for all bridges)."""
    out = run_cmd(["ovs-vsctl", "--format=csv", "--data=bare", "--no-headings", "--columns=_uuid,target,role",
                   "list", "controller"])
    ctl = {}
    for line in out.splitlines():
        uuid, target, role = (line.split(",") + ["", ""])[:3]
        if target.startswith("tcp:127.0.0.1:"):
            ctl[uuid] = (int(target.rsplit(":", 1)[1]), role)
    out = run_cmd(["ovs-vsctl", "--format=csv", "--data=bare", "--no-headings", "--columns=name,controller",
                   "list", "bridge"] + bridges)
    roles = {}
    for line in out.splitlines():
        name, _, uuids = line.partition(",")
        roles[name] = {ctl[u][0]: ctl[u][1] for u in uuids.split() if u in ctl}
    return roles


class RoleSampler(threading.Thread):
    """Reads the switches' roles every ``period`` s; counts samples where a partition has two master ports."""

    def __init__(self, bridges_of: dict[str, list[str]], period: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.bridges_of = bridges_of
        self.all = [b for bs in bridges_of.values() for b in bs]
        self.period = period
        self.halt = threading.Event()
        self.samples = 0
        self.double = 0
        self.last: dict[str, set[int]] = {}

    def masters(self) -> dict[str, set[int]]:
        roles = switch_roles(self.all)
        return {p: {port for b in bs for port, r in roles.get(b, {}).items() if r == "master"}
                for p, bs in self.bridges_of.items()}

    def run(self) -> None:
        while not self.halt.is_set():
            try:
                m = self.masters()
            except Exception:  # noqa: BLE001 - a failed read is not a sample
                self.halt.wait(self.period)
                continue
            self.samples += 1
            self.double += any(len(v) > 1 for v in m.values())
            self.last = m
            self.halt.wait(self.period)

    def stop(self) -> None:
        self.halt.set()
        self.join(15)


def ha_of(ctl: Controller) -> dict[str, Any]:
    st = ctl.status() or {}
    return st.get("ha") or {} if st.get("pid") == ctl.pid else {}


def mastered(ctl: Controller) -> list[str]:
    """The partitions ``ctl`` acts as master for (its status file)."""
    return list(ha_of(ctl).get("active", []))


def logged_at(ctl: Controller, text: str, after: float) -> float | None:
    """Wall time of the first line of ``ctl``'s log containing ``text`` logged at or after ``after``."""
    from datetime import datetime

    try:
        lines = ctl.log_path.read_text(errors="replace").splitlines()
    except OSError:
        return None
    for line in lines:
        if text in line:
            try:
                t = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
            except ValueError:
                continue
            if t >= after - 0.002:
                return t
    return None


def pause_written(fabric: Any, prefix: str, switch: str, port: int, wait: float) -> bool:
    """Inject a PAUSE at ``switch:port``; True if a controller flipped its PORT_STATE entry within ``wait`` s."""
    inject_pause(fabric, switch, port, 0xFFFF, prefix=prefix)
    return wait_port_state(prefix + switch, port, True, wait) is not None


def etcd_phase(topology: Path, prefix: str, pings: int, report: Report, log: Log, tmp: Path) -> None:
    cluster = EtcdCluster(3, tls=True, auth=True)
    try:
        t = time.monotonic()
        cluster.start()
        log(f"etcd: 3 members up in {time.monotonic() - t:.1f} s ({', '.join(cluster.endpoints)}; TLS, "
            "client certificates, auth)")
        report.summary["etcd_tls_auth"] = True
        conf = write_etcd_conf(tmp, topology, cluster.endpoints, partitions=2, ttl=2, security=cluster.ha_keys())
        cfg = load_config(conf)
        fabric, n = cfg.fabric, len(cfg.fabric.switches)
        ports = [free_port(), free_port()]
        a = Controller(conf, tmp / "ea.json", ports[0], tmp / "ea.log")
        b = Controller(conf, tmp / "eb.json", ports[1], tmp / "eb.log")

        def both_ready(up: Up) -> None:  # every switch connected to both; each instance masters one partition
            set_controllers(fabric, ports, prefix)
            wait_until(lambda: (len(mastered(a)) == 1 and len(mastered(b)) == 1
                                and sum((c.status() or {}).get("switches_confirmed", 0) for c in (a, b)) == n) or None,
                       120, "each controller master of one partition, every switch confirmed")

        with fabric_up(fabric, cfg.plan, [a, b], prefix=prefix, seed=11, ready=both_ready, report=report,
                       progress=log) as up:
            etcd_scenarios(up, cluster, prefix, pings, report, log)
    finally:
        cluster.close()


def etcd_scenarios(up: Up, cluster: EtcdCluster, prefix: str, pings: int, report: Report, log: Log) -> None:
    """The three scenarios of the module docstring under a steady ping, the role sampler running throughout."""
    f = report.summary
    a, b = up.controllers
    ports = [a.port, b.port]
    net, fabric = up.net, up.net.hf_fabric
    parts = partition_fabric(fabric, 2)
    part_of = {sw: p.name for p in parts for sw in p.switches}
    log(f"fabric up: {len(fabric.switches)} switches in 2 partitions ({parts[0].label}; {parts[1].label}); "
        f"A masters {mastered(a)}, B masters {mastered(b)}")
    base = all_pairs_ping(net, fabric)
    f["etcd_baseline_lost"] = base["lost"]
    src = fabric.hosts_on(parts[0].switches[0])[0].name
    dst = fabric.hosts_on(parts[1].switches[-1])[0].name
    sampler = RoleSampler({p.name: [prefix + s for s in p.switches] for p in parts})
    sampler.start()
    try:
        port_of = {id(a): ports[0], id(b): ports[1]}

        # 1. kill -9 of the master of src's partition
        victim = a if part_of[parts[0].switches[0]] in mastered(a) else b
        survivor = b if victim is a else a
        info: dict[str, Any] = {}

        lost_part = part_of[parts[0].switches[0]]

        def kill_master():
            t0, w0 = time.monotonic(), time.time()
            victim.stop(signal.SIGKILL)
            wait_until(lambda: len(mastered(survivor)) == 2 or None, 30, "the survivor master of both partitions")
            t_claim = logged_at(survivor, f"is now MASTER of partition {lost_part}", w0)
            info["takeover_s"] = round(t_claim - w0, 3) if t_claim else None
            wait_until(lambda: all(v == {port_of[id(survivor)]} for v in sampler.masters().values()) or None, 30,
                       "the switches report the survivor MASTER of both partitions")
            info["roles_s"] = round(time.monotonic() - t0, 2)
            time.sleep(2)  # the reconcile of the taken partition
            st = survivor.status() or {}
            per = st.get("per_switch") or {}
            info["flow_mods"] = status_changes({"per_switch": {k: v for k, v in per.items() if part_of.get(k) == lost_part}})
            return info

        res = steady_across(net, src, dst, pings, kill_master)
        f.update(etcd_kill_pings=res["sent"], etcd_kill_lost=res["lost"], etcd_kill_takeover_s=info.get("takeover_s"),
                 etcd_kill_roles_seen_s=info.get("roles_s"), etcd_kill_flow_mods=info.get("flow_mods"))
        log(f"etcd kill -9 master: {res['sent']} pings, {res['lost']} lost, takeover {info.get('takeover_s')} s "
            f"(kill -> MASTER claim logged), switch roles read as such after {info.get('roles_s')} s, "
            f"{info.get('flow_mods')} flow-mods on the taken partition")

        # 2. the etcd leader is killed
        changes0 = ha_of(survivor).get("takeovers", 0)

        def kill_leader():
            leader = cluster.leader()
            cluster.kill_member(leader)
            t0 = time.monotonic()
            wait_until(lambda: cluster.leader() not in (None, leader) or None, 30, "a new etcd leader")
            info["election_s"] = round(time.monotonic() - t0, 2)
            time.sleep(6)
            cluster.start_member(leader)
            return info

        res = steady_across(net, src, dst, pings, kill_leader)
        f.update(etcd_leader_pings=res["sent"], etcd_leader_lost=res["lost"], etcd_leader_election_s=info.get("election_s"),
                 etcd_leader_role_changes=ha_of(survivor).get("takeovers", 0) - changes0,
                 etcd_leader_masters=sorted(mastered(survivor)))
        log(f"etcd leader killed: {res['sent']} pings, {res['lost']} lost, new leader after {info.get('election_s')} s, "
            f"survivor masters {mastered(survivor)}")

        # 3. all etcd stopped, then back
        def all_down():
            w0 = time.time()
            cluster.kill_all()
            wait_until(lambda: not mastered(survivor) or None, 30, "the survivor stops acting as master")
            t_stop = logged_at(survivor, "is now SLAVE of partition", w0)
            info["stopped_s"] = round(t_stop - w0, 3) if t_stop else None
            # a PAUSE now would make a master flip PORT_STATE: an instance without a live lease must not
            info["flip_written_while_down"] = pause_written(fabric, prefix, probe[0], probe[1], 1.5)
            time.sleep(2.5)
            w1 = time.time()
            for i in range(cluster.size):
                cluster.start_member(i)
            wait_until(lambda: len(mastered(survivor)) == 2 or None, 60, "the survivor master again")
            t_back = logged_at(survivor, "is now MASTER of partition", w1)
            info["resumed_s"] = round(t_back - w1, 3) if t_back else None
            info["generation"] = ha_of(survivor).get("generation")
            time.sleep(1.5)  # the resumed sessions: role claim, reconcile
            # the control: the same PAUSE once master again is written
            info["flip_written_after"] = pause_written(fabric, prefix, probe[0], probe[1], 3.0)
            return info

        probe_link = next(l for l in fabric.links if part_of.get(l.a) == parts[0].name and part_of.get(l.b)
                          and l.a != parts[0].switches[0])  # a fabric port off the pinging host's switch
        probe = (probe_link.a, probe_link.a_port)
        res = steady_across(net, src, dst, pings, all_down)
        f.update(etcd_down_pings=res["sent"], etcd_down_lost=res["lost"], etcd_down_stopped_s=info.get("stopped_s"),
                 etcd_down_resumed_s=info.get("resumed_s"), etcd_down_generation_after=info.get("generation"),
                 etcd_down_flip_written=info.get("flip_written_while_down"),
                 etcd_back_flip_written=info.get("flip_written_after"))
        if info.get("flip_written_while_down") or not info.get("flip_written_after"):
            report.fail(f"etcd: PAUSE flip written while etcd was down {info.get('flip_written_while_down')}, "
                        f"after it returned {info.get('flip_written_after')} (expected False, True)")
        log(f"all etcd down: {res['sent']} pings, {res['lost']} lost; survivor stopped being master "
            f"{info.get('stopped_s')} s after the stop, master again {info.get('resumed_s')} s after the restart")
        sampler.stop()
        f.update(etcd_role_samples=sampler.samples, etcd_double_master_samples=sampler.double)
        if sampler.double:
            report.fail(f"etcd: {sampler.double} samples with two masters in one partition")
        for key in ("etcd_kill_lost", "etcd_leader_lost", "etcd_down_lost", "etcd_baseline_lost"):
            if f.get(key):
                report.fail(f"etcd: {key} = {f[key]}")
    finally:
        sampler.stop()
