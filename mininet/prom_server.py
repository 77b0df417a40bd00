"""A real Prometheus (Debian ``prometheus`` 2.42, ``scripts/bootstrap.sh --prometheus``) for the tests and by hand.

:class:`Prometheus` starts ``prometheus`` with a given config and data directory on a free 127.0.0.1 port
in its own session, waits until ``/-/ready`` answers, queries its HTTP API (``query``, ``rules``,
``alerts``, ``targets``) and stops it by PID (SIGTERM, then SIGKILL). The Debian service is never used.
:func:`config_copy` writes a config for a test: the shipped ``configs/prometheus/prometheus.yml`` with
other targets, intervals and the alert rules' ``for:`` shortened (same expressions);
:func:`dashboard_queries` lists the queries of configs/grafana's dashboards, variables substituted.

By hand (stopped by the PID it prints; docs/operations.md, "Monitoring")::

    python3 mininet/prom_server.py start --config configs/prometheus/prometheus.yml --data /tmp/prom [--port 9090]
    python3 mininet/prom_server.py stop PID
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from hpcfabric.emu.driver import free_port, stop_process

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "configs" / "prometheus"


class PrometheusError(RuntimeError):
    """Prometheus missing, not starting, or an API call that failed."""


def executable(name: str = "prometheus") -> str:
    path = shutil.which(name) or (f"/usr/bin/{name}" if os.path.exists(f"/usr/bin/{name}") else None)
    if path is None:
        raise PrometheusError(f"{name} is not installed: run scripts/bootstrap.sh --prometheus")
    return path


class Prometheus:
    """One Prometheus process on ``127.0.0.1:port`` (free port by default) with ``config`` and ``data``."""

    def __init__(self, config: Path, data: Path, port: int | None = None, log_path: Path | None = None) -> None:
        self.config = Path(config)
        self.data = Path(data)
        self.port = port or free_port()
        self.log_path = log_path or self.data.with_name(self.data.name + ".log")
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def start(self, timeout: float = 30.0) -> float:
        """Start and wait until ready; returns seconds taken (PrometheusError with the log's tail if not)."""
        self.data.mkdir(parents=True, exist_ok=True)
        cmd = [executable(), f"--config.file={self.config}", f"--storage.tsdb.path={self.data}",
               f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"]
        t0 = time.monotonic()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        while time.monotonic() - t0 < timeout:
            if self.proc.poll() is not None:
                raise PrometheusError(f"prometheus exited with status {self.proc.returncode}: {self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as r:
                    if r.status == 200:
                        return time.monotonic() - t0
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.2)
        self.stop()
        raise PrometheusError(f"prometheus not ready on port {self.port} after {timeout:g} s: {self.log_tail()}")

    def stop(self, grace: float = 10.0) -> int | None:
        """SIGTERM our PID, SIGKILL after ``grace`` s; returns its exit status."""
        proc, self.proc = self.proc, None
        return None if proc is None else stop_process(proc, grace)

    def log_tail(self, lines: int = 10) -> str:
        try:
            return " | ".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def api(self, path: str, **params: str) -> Any:
        """``GET /api/v1/PATH?params``: the ``data`` of a success answer (PrometheusError otherwise)."""
        url = f"{self.url}/api/v1/{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                body = json.load(r)
        except urllib.error.HTTPError as err:
            body = json.loads(err.read() or b"{}")
        except (OSError, ValueError) as err:
            raise PrometheusError(f"{url}: {err}") from err
        if body.get("status") != "success":
            raise PrometheusError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result (vector or scalar as a one-element list)."""
        data = self.api("query", query=expr)
        return data["result"] if data["resultType"] in ("vector", "matrix") else [{"value": data["result"]}]

    def rules(self) -> list[dict[str, Any]]:
        return [r for g in self.api("rules")["groups"] for r in g["rules"]]

    def alerts(self) -> list[dict[str, Any]]:
        return self.api("alerts")["alerts"]

    def targets(self) -> list[dict[str, Any]]:
        return self.api("targets")["activeTargets"]


def stop_pid(pid: int, grace: float = 10.0) -> None:
    """SIGTERM ``pid`` (a Prometheus this process did not start), wait up to ``grace`` s, then SIGKILL."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    end = time.monotonic() + grace
    while time.monotonic() < end:
        if not _alive(pid):
            return
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def config_copy(out: Path, targets: list[str], *, interval: str = "1s", hold: str = "1s",
              labels: dict[str, str] | None = None) -> Path:
    """``out``/prometheus.yml + alerts.yml: the shipped config scraping ``targets`` every ``interval`` and
    evaluating every ``interval``; every rule's ``for:`` set to ``hold`` (expressions unchanged)."""
    import yaml

    out.mkdir(parents=True, exist_ok=True)
    conf = yaml.safe_load((SHIPPED / "prometheus.yml").read_text())
    conf["global"].update(scrape_interval=interval, evaluation_interval=interval, scrape_timeout=interval)
    job = conf["scrape_configs"][0]
    job["static_configs"] = [{"targets": list(targets), "labels": dict(labels or {})}]
    job.pop("scrape_interval", None)
    conf["rule_files"] = ["alerts.yml"]
    (out / "prometheus.yml").write_text(yaml.safe_dump(conf, sort_keys=False))
    rules = (SHIPPED / "alerts.yml").read_text()
    (out / "alerts.yml").write_text(re.sub(r"(?m)^(\s+for:\s*)\S+", rf"\g<1>{hold}", rules))
    return out / "prometheus.yml"


#: what the dashboards' variables become when a test evaluates their queries (all controllers, a 2-min rate window)
VARIABLES = {"$__rate_interval": "2m", "${instance}": ".*", "$instance": ".*"}


def dashboard_queries(folder: Path = ROOT / "configs" / "grafana") -> list[tuple[str, str, str]]:
    """(dashboard file, panel title, query with the variables substituted) for every target of every panel."""
    out = []
    for path in sorted(Path(folder).glob("*.json")):
        for panel in json.loads(path.read_text())["panels"]:
            for target in panel.get("targets", ()):
                expr = target["expr"]
                for var, value in VARIABLES.items():
                    expr = expr.replace(var, value)
                out.append((path.name, panel["title"], expr))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="prom_server.py", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    st = sub.add_parser("start", help="start Prometheus in the background; prints its URL and PID")
    st.add_argument("--config", type=Path, default=SHIPPED / "prometheus.yml")
    st.add_argument("--data", type=Path, required=True, help="TSDB directory (created)")
    st.add_argument("--port", type=int, default=None, help="default: a free port")
    sp = sub.add_parser("stop", help="stop the Prometheus started with PID")
    sp.add_argument("pid", type=int)
    args = ap.parse_args(argv)
    try:
        if args.cmd == "start":
            if not args.config.is_file():
                raise PrometheusError(f"{args.config}: no such config file")
            prom = Prometheus(args.config, args.data, args.port)
            took = prom.start()
            print(json.dumps({"url": prom.url, "pid": prom.pid, "log": str(prom.log_path), "start_s": round(took, 2)}))
            prom.proc = None  # leave it running
        else:
            try:
                comm = Path(f"/proc/{args.pid}/comm").read_text().strip()
            except OSError:
                raise PrometheusError(f"no process {args.pid}") from None
            if comm != "prometheus":
                raise PrometheusError(f"process {args.pid} is {comm!r}, not prometheus: not stopped")
            stop_pid(args.pid)
    except PrometheusError as err:
        print(f"prom_server.py: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
