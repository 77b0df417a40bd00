"""Failures under traffic, the acting part of ``run_failures.py``: cut and restore links, measure which
ones carry traffic, wait for the controller's repairs, compare the bridges with the compiled tables.

* :func:`link_rates`: frames per second sent out of every port of every bridge (two ``dump-ports`` of
  each bridge, ``seconds`` apart);
* :func:`set_ports`: links down or up as ``net.configLinkStatus`` does (both ends' interfaces
  administratively down, so Open vSwitch sees the carrier go and sends a port status), but every given
  link in one ``ip -batch`` (a switch's links go down together, as when it dies);
* :func:`wait_repair`: poll the controller's status file until its last repair is for the failures in
  force (installed or refused), keeping every repair it saw on the way;
* :func:`tables_step`: every bridge's flows against the config's desired tables (``ovs-ofctl
  diff-flows``: Open vSwitch's own comparison) and its groups against a snapshot;
* :func:`pause_target_in_force`: a PAUSE-check target in the tables the controller has in force after the
  failures (the surviving fabric compiled as the repair did, walked by the reference pipeline).
"""

from __future__ import annotations

import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Collection, Iterable, Mapping

from controller_proc import Controller  # mininet/controller_proc.py
from fabric_topo import FabricNetError, intf_name
from ovs_flows import diff_flows, dump_groups, tx_counters
from pause_check import PauseTarget, find_pause_targets
from runkit import CheckFailed, StepResult

from hpcfabric.topology.failures import Failures
from hpcfabric.topology.model import Fabric

#: parallel ovs-ofctl calls when reading every bridge
WORKERS = 8


def _each_bridge(net: Any, fn: Callable[[str], Any]) -> dict[str, Any]:
    names = [sw.name for sw in net.hf_fabric.switches]
    with ThreadPoolExecutor(WORKERS) as ex:
        return dict(zip(names, ex.map(lambda n: fn(net.hf_prefix + n), names)))


def link_rates(net: Any, seconds: float = 1.0) -> dict[tuple[str, int], float]:
    """(switch, port) -> frames per second sent out of that port over ``seconds`` (each bridge read twice)."""
    a = _each_bridge(net, lambda b: (time.monotonic(), tx_counters(b)))
    time.sleep(seconds)
    b = _each_bridge(net, lambda br: (time.monotonic(), tx_counters(br)))
    out: dict[tuple[str, int], float] = {}
    for sw, (t0, c0) in a.items():
        t1, c1 = b[sw]
        for port, tx in c1.items():
            out[(sw, port)] = (tx - c0.get(port, tx)) / max(1e-3, t1 - t0)
    return out


def set_ports(net: Any, fabric: Fabric, ports: Iterable[tuple[str, int]], up: bool) -> float:
    """The links behind ``ports`` (switch, port) down or up: both ends' interfaces that are in the root
    namespace (switch ports; a host's end loses its carrier with the switch's), one ``ip -batch``.
    Returns the wall-clock time just before the batch ran."""
    names: list[str] = []
    for sw, port in ports:
        peer = fabric.peer(sw, port)
        names.append(intf_name(sw, port, net.hf_prefix))
        if peer is not None and not peer.is_host:
            names.append(intf_name(peer.node, int(peer.port), net.hf_prefix))  # type: ignore[arg-type]
    script = "".join(f"link set dev {n} {'up' if up else 'down'}\n" for n in dict.fromkeys(names))
    t = time.time()
    proc = subprocess.run(["ip", "-batch", "-"], input=script, text=True, capture_output=True, timeout=60)
    if proc.returncode != 0:
        raise FabricNetError(f"ip -batch (links {'up' if up else 'down'}): {proc.stderr.strip()[:300]}")
    return t


def failover_status(controller: Controller) -> dict[str, Any]:
    return (controller.status() or {}).get("failover") or {}


def wait_repair(controller: Controller, expected: Failures, before: Mapping[str, Any], timeout: float) -> dict[str, Any]:
    """Poll until the controller's last repair is for ``expected`` (all that is out now) and a repair (or a
    refusal) happened since ``before`` (the ``failover`` status then). Returns ``failover`` (the status
    entry), ``seen_at`` (wall clock when the runner saw it) and ``repairs`` (every distinct ``last`` seen,
    oldest first). CheckFailed if the controller dies or nothing comes within ``timeout`` s."""
    want = expected.as_dict()
    t_end = time.monotonic() + timeout
    seen: dict[float, dict[str, Any]] = {}
    old_at = (before.get("last") or {}).get("at")
    fo: dict[str, Any] = {}
    while time.monotonic() < t_end:
        if not controller.alive():
            raise CheckFailed(f"the controller died waiting for the repair of {expected.describe()}: "
                              f"{controller.log_tail()}")
        fo = failover_status(controller)
        last = fo.get("last") or {}
        if last.get("at") is not None and last["at"] != old_at:
            seen[last["at"]] = last
        done = fo.get("repairs", 0) > before.get("repairs", 0) or fo.get("refused", 0) > before.get("refused", 0)
        if done and last.get("failures") == want:
            return {"failover": fo, "seen_at": time.time(), "repairs": [seen[k] for k in sorted(seen)]}
        time.sleep(0.02)
    raise CheckFailed(f"no repair for {', '.join(expected.describe()) or 'no failures'} within {timeout:g} s "
                      f"(failover status: repairs {fo.get('repairs')}, refused {fo.get('refused')}, ports_down "
                      f"{fo.get('ports_down')}, last {(fo.get('last') or {}).get('failures')})")


def snapshot_groups(net: Any) -> dict[str, list[str]]:
    return _each_bridge(net, dump_groups)


def tables_step(net: Any, cfg: Any, groups: Mapping[str, list[str]], key: str) -> StepResult:
    """Every bridge holds exactly the config's desired flows (``diff-flows``) and the groups of ``groups`` (a
    snapshot): summary keys ``<key>`` (bool), ``<key>_flows_differing``, ``<key>_groups_differing`` (switches)."""
    diffs = _each_bridge(net, lambda b: diff_flows(b, cfg.desired[b[len(net.hf_prefix):]]))
    now = snapshot_groups(net)
    bad_flows = {sw: d for sw, d in diffs.items() if d}
    bad_groups = sorted(sw for sw in now if now[sw] != groups.get(sw))
    res = StepResult({key: not bad_flows and not bad_groups,
                      f"{key}_flows_differing": sum(len(d) for d in bad_flows.values()),
                      f"{key}_groups_differing": bad_groups})
    if bad_flows:
        sw = sorted(bad_flows)[0]
        res.failures.append(f"{key}: {len(bad_flows)} bridge(s) differ from the compiled tables "
                            f"({', '.join(sorted(bad_flows)[:5])}); {sw}: {bad_flows[sw][:3]}")
    if bad_groups:
        res.failures.append(f"{key}: the groups of {', '.join(bad_groups[:5])} differ from those at the start")
    return res


def pause_target_in_force(cfg: Any, failures: Failures, redirect: bool, exclude: Iterable[str],
                          busy: Collection[tuple[str, int]] = ()) -> PauseTarget | None:
    """A PAUSE-check target (:func:`pause_check.find_pause_targets`: a global port carrying a host's default
    route, with an alternative) in the tables in force with ``failures`` out -- the surviving fabric
    compiled as the controller's repair did (``redirect``: its ``redirect_detours``); no switch of ``exclude``
    is the target or holds its hosts, and the port is not in ``busy`` ((switch, port) carrying other traffic,
    e.g. a ping stream: it would count in the check's counters)."""
    from hpcfabric.config.build import whole_fabric_rules
    from hpcfabric.repair.plan import surviving_tables

    compiled = surviving_tables(cfg, failures, whole_fabric_rules(cfg), redirect_detours=redirect)
    tables = {k: t.flows for k, t in compiled.tables.items()}
    skip = set(exclude)
    while True:
        targets = find_pause_targets(cfg.fabric, cfg.plan, tables, avoid=frozenset(skip))
        if not targets:
            return None
        free = [t for t in targets if (t.switch, t.port) not in busy]
        if free:
            return free[0]
        skip.add(targets[0].switch)
