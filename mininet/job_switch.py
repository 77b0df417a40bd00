"""Job-switch steps: a running controller gets a new traffic matrix (``[hpcfabric] traffic``) under live traffic.

* :func:`write_matrices`: the jobs' matrices as files (``hpcfabric.topology.traffic.pattern_traffic``);
  :func:`job_settings`: what the config copy (``fabric_setup.write_conf``) sets: the routing, the job's
  matrix, SIGHUP-only reloads (``reload_poll = 0``, so one job switch is one reload).
* :func:`expected_diff`: the entries that differ between the two jobs' tables, computed here from the
  configs exactly as the controller compiles them (``load_config``), per switch.
* :class:`Generators`: ``traffic.py`` on every host (UDP with sequence numbers, Poisson, to every
  other host), the totals sent and received once they end.
* :func:`switch_job`: overwrite the matrix file with the next job's, SIGHUP the controller, wait
  until every switch the reload resynced is confirmed again (:func:`reload_and_wait`); the reload's
  counts from the status file. :func:`set_traffic_key`: the config's ``traffic`` key set or emptied
  (back to the static intermediates) for the next reload.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from controller_proc import Controller  # mininet/controller_proc.py
from fabric_setup import write_conf
from fabric_topo import node
from runkit import CheckFailed

HERE = Path(__file__).resolve().parent
TRAFFIC = HERE / "traffic.py"


def write_matrices(fabric: Any, jobs: list[str], tmp: Path) -> list[Path]:
    """One CSV per job (pattern name, ``stencil:width=N`` for a parameter, or an existing matrix file)."""
    from hpcfabric.topology.traffic import load_traffic, pattern_traffic, write_traffic

    out = []
    for i, job in enumerate(jobs):
        if Path(job).is_file():
            load_traffic(job, fabric)  # its errors name the file and row
            path = tmp / f"job{i}-{Path(job).name}"
            shutil.copyfile(job, path)
        else:
            name, _, params = job.partition(":")
            kw = dict(p.split("=", 1) for p in params.split(",") if "=" in p)
            path = tmp / f"job{i}-{name}.csv"
            write_traffic(pattern_traffic(fabric, name, **kw), str(path))
        out.append(path)
    return out


def job_settings(routing: str, traffic: Path) -> dict[str, dict[str, str]]:
    """What a job-switch run sets in the shipped config: ``routing``, ``traffic`` = the job file the runner
    rewrites, SIGHUP-only reloads (one job switch = one reload), no metrics listener."""
    return {"hpcfabric": {"routing": routing, "traffic": str(traffic), "reload_poll": "0", "log_level": "INFO"},
            "metrics": {"listen": ""}}


def expected_diff(conf_a: Path, conf_b: Path) -> tuple[dict[str, int], int]:
    """Per switch, the flow-mods between the tables of ``conf_a`` and ``conf_b`` (only those that differ), and
    the size of ``conf_b``'s tables."""
    from hpcfabric.config import load_config
    from hpcfabric.openflow.reconcile import diff

    a, b = load_config(conf_a).desired, load_config(conf_b).desired
    per = {n: diff(b.get(n, ()), a.get(n, ())).changes for n in b}
    return {n: c for n, c in per.items() if c}, sum(len(f) for f in b.values())


class Generators:
    """``traffic.py`` on every host: Poisson UDP at ``pps`` to every other host, ``seconds`` long from a common
    start; :meth:`totals` waits for them and adds up sent and received frames (whole run)."""

    def __init__(self, net: Any, fabric: Any, pps: float, seconds: float, work: Path, seed: int = 1,
                 size: int = 200) -> None:
        ips = net.hf_ips
        hosts = sorted(h.name for h in fabric.hosts)
        self.work = work
        work.mkdir(parents=True, exist_ok=True)
        self.start = time.monotonic() + 1.0 + 0.03 * len(hosts)
        self.end = self.start + seconds
        self.procs = []
        for i, h in enumerate(hosts):
            dests = ",".join(ips[d] for d in hosts if d != h)
            cmd = [sys.executable, str(TRAFFIC), "--id", str(i), "--dests", dests, "--pps", f"{pps:g}",
                   "--size", str(size), "--start", f"{self.start:.6f}", "--warmup", "0", "--measure", f"{seconds:g}",
                   "--drain", "0", "--linger", "1.0", "--seed", str(seed * 1000 + i), "--out", str(work / f"{h}.json")]
            self.procs.append((h, node(net, h).popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)))

    def wait_started(self) -> None:
        time.sleep(max(0.0, self.start - time.monotonic()))

    def totals(self) -> dict[str, Any]:
        import json

        errors = []
        for h, p in self.procs:
            try:
                p.wait(max(5.0, self.end + 20 - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                errors.append(f"{h}: generator timed out")
            if p.returncode:
                errors.append(f"{h}: exit {p.returncode} {(p.stderr.read() if p.stderr else b'').decode()[-200:]}")
        if errors:
            raise CheckFailed("traffic generators failed: " + "; ".join(errors[:5]))
        res = [json.loads((self.work / f"{h}.json").read_text()) for h, _ in self.procs]
        sent = sum(r["sent"] for r in res)
        received = sum(r["rx_total"] for r in res)
        return {"hosts": len(res), "sent": sent, "received": received, "lost": sent - received,
                "send_errors": sum(r["send_errors"] for r in res),
                "latency_ms_max": round(max((r["latency_ms_max"] for r in res), default=0.0), 3)}


def switch_job(controller: Controller, traffic_file: Path, new_matrix: Path, timeout: float = 60.0) -> dict[str, Any]:
    """Job switch: ``new_matrix`` replaces ``traffic_file`` (atomic rename), then :func:`reload_and_wait`."""
    tmp = traffic_file.with_suffix(".new")
    shutil.copyfile(new_matrix, tmp)
    os.replace(tmp, traffic_file)
    return reload_and_wait(controller, timeout)


def set_traffic_key(conf: Path, traffic: Path | None) -> None:
    """Rewrite ``[hpcfabric] traffic`` of the config copy ``conf`` (None: no matrix, the static intermediates)."""
    write_conf(conf, {"hpcfabric": {"traffic": str(traffic) if traffic is not None else ""}}, conf)


def reload_and_wait(controller: Controller, timeout: float = 60.0) -> dict[str, Any]:
    """SIGHUP, then wait until the reload is applied and every switch it resynced is confirmed. Returns
    ``reload.last`` (table_diff, rules_total, flow_mods_sent, group_mods_sent, resynced, ...) with ``apply_s``:
    SIGHUP to the last switch confirmed."""
    before = (controller.status() or {}).get("reload", {}).get("ok", 0)
    t0 = time.monotonic()
    os.kill(controller.pid, signal.SIGHUP)
    last: dict[str, Any] = {}
    while time.monotonic() - t0 < timeout:
        st = controller.status() or {}
        rl = st.get("reload") or {}
        last = rl.get("last") or {}
        if rl.get("failed", 0) and last.get("ok") is False:
            raise CheckFailed(f"reload rejected: {last.get('error')}")
        if rl.get("ok", 0) > before and last.get("switches_synced") == len(last.get("resynced") or ()) \
                and st.get("switches_confirmed") == st.get("switches_expected") \
                and st.get("rules_installed") == st.get("rules_expected"):
            return {**last, "apply_s": round(time.monotonic() - t0, 3)}
        time.sleep(0.05)
    raise CheckFailed(f"reload not applied within {timeout:g} s: {last}")
