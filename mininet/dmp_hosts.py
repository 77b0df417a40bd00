"""DMP step: every host asks for its hierarchical MAC, then gets static neighbour entries for every other host.

* :func:`run_dmp`: ``hpcfabric-dmp <intf> --json`` in every host, all in parallel;
  :func:`host_macs`: the MAC every host holds now; :func:`assign_planned_macs`: both, checked
  against the plan (a :class:`DmpOutcome`).
* :func:`set_static_neighbours`: the fabric never floods, so ARP reaches nobody; both the IPv4 plan
  and the MAC plan are known up front, so every host gets ``ip neigh ... nud permanent`` entries
  (like ``/etc/ethers`` on a cluster).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from fabric_topo import ROOT, FabricNetError, host_intf, node  # mininet/fabric_topo.py

from hpcfabric.rules.addressing import AddressPlan, format_mac


def dmp_command() -> list[str]:
    """How to start the DMP client: the venv's ``hpcfabric-dmp`` if installed, else ``python -m``."""
    exe = Path(sys.executable).with_name("hpcfabric-dmp")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("hpcfabric-dmp")
    if found:
        return [found]
    return [sys.executable, "-m", "hpcfabric.protocols.dmp_client"]


def run_dmp(net: Any, timeout: float = 1.0, retries: int = 3, hosts: Iterable[str] | None = None) -> dict[str, dict]:
    """Run ``hpcfabric-dmp <intf> --json`` on every host in parallel.

    Returns host -> the client's JSON result plus ``returncode`` (and
    ``stderr`` when it failed). A host whose assigned ``mac`` is present got
    an answer; ``status`` tells whether it changed the address.
    """
    cmd = dmp_command()
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    names = list(hosts) if hosts is not None else [h.name for h in net.hf_fabric.hosts]
    procs = {}
    for name in names:
        args = [*cmd, host_intf(net, name), "--json", "--timeout", str(timeout), "--retries", str(retries)]
        procs[name] = node(net, name).popen(args, env=env, text=True)
    results: dict[str, dict] = {}
    limit = time.monotonic() + (retries + 1) * timeout + 30
    for name, proc in procs.items():
        try:
            out, err = proc.communicate(timeout=max(1.0, limit - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            err = (err or "") + " (killed: timeout)"
        try:
            res = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
        except json.JSONDecodeError:
            res = {"status": "error", "error": f"unparsable output {out[-200:]!r}"}
        res["returncode"] = proc.returncode
        if proc.returncode != 0:
            res["stderr"] = (err or "").strip()[-500:]
        results[name] = res
    return results


def host_macs(net: Any) -> dict[str, int]:
    """Current MAC of every host's interface (read in its namespace)."""
    out = {}
    for h in net.hf_fabric.hosts:
        text = node(net, h.name).cmd(f"cat /sys/class/net/{host_intf(net, h.name)}/address").strip()
        out[h.name] = int(text.replace(":", ""), 16) if re.fullmatch(r"[0-9a-f:]{17}", text) else -1
    return out


@dataclass(frozen=True)
class DmpOutcome:
    """DMP on every host, checked against the plan."""

    results: dict[str, dict]  # host -> the client's JSON (+ returncode)
    macs: dict[str, int]  # host -> the MAC it holds afterwards
    planned: Mapping[str, int]  # host -> the plan's MAC
    seconds: float
    rounds: int = 1  # DMP rounds run (hosts without their MAC ask again)

    @property
    def assigned(self) -> list[str]:
        """Hosts whose client succeeded and that hold their planned MAC."""
        return [h for h, r in self.results.items() if r.get("returncode") == 0 and self.macs.get(h) == self.planned[h]]

    @property
    def wrong(self) -> list[str]:
        """Hosts (in plan order) that do not hold their planned MAC."""
        return [h for h in self.planned if self.macs.get(h) != self.planned[h]]

    def fields(self) -> dict[str, Any]:
        """``dmp_assigned``, ``dmp_s``, ``dmp_rtt_ms_max`` of the JSON summary."""
        rtts = [r["rtt_ms"] for r in self.results.values() if "rtt_ms" in r]
        return {"dmp_assigned": len(self.assigned), "dmp_s": round(self.seconds, 2),
                "dmp_rtt_ms_max": max(rtts) if rtts else None, "dmp_rounds": self.rounds}

    def problem(self) -> str | None:
        """One line on the hosts without their planned MAC (None: every host has it)."""
        wrong = self.wrong
        if not wrong:
            return None
        h = wrong[0]
        res = self.results.get(h, {})
        return (f"{len(wrong)} host(s) without their planned MAC, e.g. {h}: has {format_mac(max(self.macs.get(h, 0), 0))}, "
                f"plan {format_mac(self.planned[h])} ({res.get('error') or res.get('stderr') or 'no error'})")


def assign_planned_macs(net: Any, plan: AddressPlan, rounds: int = 3) -> DmpOutcome:
    """Run DMP on every host and read back the MAC each holds; the hosts still without their planned MAC
    run it again, up to ``rounds`` rounds with a doubled timeout each (hundreds of hosts asking at once
    through a busy userspace OVS lose the odd request). ``rounds`` used is in the outcome's fields."""
    t = time.monotonic()
    planned = {h.name: plan.host_mac[h.name] for h in net.hf_fabric.hosts}
    results = run_dmp(net)
    macs = host_macs(net)
    used = 1
    timeout = 1.0
    while used < rounds:
        wrong = [h for h in planned if macs.get(h) != planned[h]]
        if not wrong:
            break
        used += 1
        timeout *= 2
        results.update(run_dmp(net, timeout=timeout, hosts=wrong))
        macs = host_macs(net)
    return DmpOutcome(results, macs, planned, time.monotonic() - t, used)


def set_static_neighbours(net: Any, plan: AddressPlan | Mapping[str, int]) -> int:
    """Give every host a permanent neighbour entry (IPv4 -> hierarchical MAC) for every other host.

    The fabric has no flooding: a frame to ff:ff:ff:ff:ff:ff matches no
    routing rule and is dropped, so ARP requests reach nobody. The IPv4 plan
    (``host_ip``) and the MAC plan are both known up front, so the
    neighbour tables are too (like ``/etc/ethers`` on a cluster). ``plan``
    is an AddressPlan or host -> MAC. Returns the number of entries written.
    """
    macs = plan.host_mac if isinstance(plan, AddressPlan) else plan
    ips = net.hf_ips
    total = 0
    with tempfile.TemporaryDirectory(prefix="hfneigh") as tmp:
        for h in net.hf_fabric.hosts:
            intf = host_intf(net, h.name)
            lines = [
                f"neigh replace {ips[o.name]} lladdr {format_mac(macs[o.name])} dev {intf} nud permanent"
                for o in net.hf_fabric.hosts
                if o.name != h.name
            ]
            path = os.path.join(tmp, f"{h.name}.batch")
            with open(path, "w") as f:
                f.write("\n".join(lines) + "\n")
            out = node(net, h.name).cmd(f"ip -batch {path} && echo __ok__")
            if "__ok__" not in out:
                raise FabricNetError(f"ip -batch on {h.name} failed: {out.strip()[-300:]}")
            total += len(lines)
    return total
