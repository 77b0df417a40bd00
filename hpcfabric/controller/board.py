"""The failures board: what each controller of a partitioned fabric sees out, for all the others to repair around.

A partition's controller hears port status only from its own switches, but paths through a failed link
start in every partition. Each controller publishes the ports of its switches that count as down and the
switches it saw go (:meth:`publish`); each watches what the others publish and repairs its own switches
around all of it (:meth:`hpcfabric.controller.failover.Failover.remote`).

* :class:`EtcdBoard` (``[ha] backend = etcd``): one key per instance under ``<prefix>/<fabric>/failures/``,
  attached to the instance's lease (it goes with the instance), watched with etcd's watch on that prefix;
* :class:`FileBoard` (one host): one JSON file per instance in ``[failover] failures_dir``, replaced
  atomically, the directory looked at every :data:`POLL_S` seconds.
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any, Callable

from hpcfabric.controller.framework import hub

LOG = logging.getLogger("hpcfabric.controller")

__all__ = ["EtcdBoard", "FileBoard", "make_board", "POLL_S"]

POLL_S = 0.05
Ports = set[tuple[str, int]]
Report = Callable[[Ports, set[str]], None]


def encode(ports: Ports, switches: set[str]) -> str:
    return json.dumps({"ports": sorted([s, p] for s, p in ports), "switches": sorted(switches), "at": time.time()})


def merge(texts: list[str]) -> tuple[Ports, set[str]]:
    ports: Ports = set()
    switches: set[str] = set()
    for text in texts:
        try:
            got = json.loads(text)
            ports |= {(str(s), int(p)) for s, p in got.get("ports", ())}
            switches |= {str(s) for s in got.get("switches", ())}
        except (ValueError, TypeError):
            continue
    return ports, switches


class FileBoard:
    """Failures shared through a directory (module docstring)."""

    def __init__(self, directory: str, instance: str) -> None:
        self.dir, self.instance = directory, instance
        os.makedirs(directory, exist_ok=True)
        self.mine = os.path.join(directory, f"{instance.replace('/', '_')}.json")

    def publish(self, ports: Ports, switches: set[str]) -> None:
        tmp = self.mine + ".tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(encode(ports, switches))
        os.replace(tmp, self.mine)

    def read(self) -> tuple[Ports, set[str]]:
        texts = []
        for entry in os.scandir(self.dir):
            if entry.name.endswith(".json") and entry.path != self.mine:
                try:
                    with open(entry.path, encoding="utf-8") as fh:
                        texts.append(fh.read())
                except OSError:
                    continue
        return merge(texts)

    def watch(self, report: Report, active: Callable[[], bool]) -> None:
        seen: dict[str, float] = {}
        while active():
            try:
                now = {e.path: e.stat().st_mtime for e in os.scandir(self.dir)
                       if e.name.endswith(".json") and e.path != self.mine}
                if now != seen:
                    seen = now
                    report(*self.read())
            except OSError as err:  # pragma: no cover - the next look reads it again
                LOG.warning("failures board %s: %s", self.dir, err)
            hub.sleep(POLL_S)

    def close(self) -> None:
        try:
            os.unlink(self.mine)
        except OSError:
            pass


class EtcdBoard:
    """Failures shared through etcd (module docstring)."""

    def __init__(self, ha: Any) -> None:
        self.ha = ha
        self.prefix = f"{ha.prefix}failures/"
        self.key = self.prefix + ha.instance

    def publish(self, ports: Ports, switches: set[str]) -> None:
        store = self.ha.store
        if ports or switches:
            store.put(self.key, encode(ports, switches), lease=self.ha.lease or 0)
        else:
            store.delete(self.key)

    def read(self) -> tuple[Ports, set[str]]:
        kvs, _ = self.ha.store.range_prefix(self.prefix)
        return merge([kv["value"] for key, kv in kvs.items() if key != self.key])

    def watch(self, report: Report, active: Callable[[], bool]) -> None:
        """etcd's watch on the prefix; every event reads the board whole (small) and reports it."""
        while active():
            cancel = None
            try:
                report(*self.read())
                events, cancel = self.ha.store.watch_prefix(self.prefix)
                for _ in events:
                    if not active():
                        break
                    report(*self.read())
            except Exception as err:  # etcd away: keep the last view, look again soon
                LOG.warning("failures board (etcd): %s", err)
                hub.sleep(1.0)
            finally:
                if cancel is not None:
                    try:
                        cancel()
                    except Exception:  # pragma: no cover
                        pass

    def close(self) -> None:
        try:
            self.ha.store.delete(self.key)
        except Exception:  # pragma: no cover - the lease takes it anyway
            pass


def make_board(config: Any, ha: Any) -> Any:
    """The board of ``config`` (etcd backend; ``[failover] failures_dir``), or None (one controller alone)."""
    if config.ha_backend == "etcd":
        return EtcdBoard(ha)
    if config.failures_dir:
        instance = f"p{config.ha_partition}" if config.ha_partition is not None else ha.instance
        return FileBoard(config.failures_dir, instance)
    return None
