"""Failures across partitions, on emulated switches: a port going down is heard only by its own partition's
controller, yet the other partition's controller repairs its switches around it (the failures board,
``[failover] failures_dir``, :mod:`hpcfabric.controller.board`), and both restore the compiled tables when
the port comes back. Real controller processes (``hpcfabric controller``) and the switch emulator."""

from __future__ import annotations

import time
from pathlib import Path

from hpcfabric.emu.driver import Cluster

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "topologies" / "dragonfly-a4-p2-h2.yaml"


def _failover(c: Cluster, i: int) -> dict:
    return c.status(i).get("failover") or {}


def _until(pred, timeout: float, what: str):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = pred()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout} s: {what}")


def test_a_port_down_in_one_partition_is_repaired_around_in_the_other(tmp_path: Path) -> None:
    c = Cluster(str(DEMO), tmp_path, controllers=2, emulators=1, lldp_interval=0.5)
    try:
        c.start_controllers()
        c.start_emulators()
        c.wait("confirmed", 90)
        _until(lambda: all((_failover(c, i).get("planner") or {}).get("ready") for i in range(2)), 90,
               "both repair planners ready")
        # a global link from partition 0 to partition 1, reported down at partition 0's end only
        link = next(l for l in c.fabric.links if l.kind == "global" and c.owner[l.a] != c.owner[l.b])
        near, near_port = (link.a, link.a_port) if c.owner[link.a] == 0 else (link.b, link.b_port)
        name = "%s:%d-%s:%d" % (min((link.a, link.a_port), (link.b, link.b_port))
                                + max((link.a, link.a_port), (link.b, link.b_port)))
        fm0 = c.emu_stats()[0]["flow_mods"]
        c.emulator_of(near).send(op="port", switch=near, port=near_port, up=False, peer=False)

        def repaired_for(links: list[str]):
            return all(((_failover(c, i).get("last") or {}).get("failures") or {}).get("links") == links
                       and (_failover(c, i).get("last") or {}).get("installed") for i in range(2))

        _until(lambda: repaired_for([name]), 60, f"both partitions repaired for {name}")
        mine, other = _failover(c, 0), _failover(c, 1)
        port = f"{near}:{near_port}"
        assert mine["ports_down"] == [port] and mine["remote"] == [], mine
        assert other["ports_down"] == [] and other["remote"] == [port], other  # heard from the board only
        assert mine["last"]["verdict"]["proven"] and other["last"]["verdict"]["proven"]
        # the far end's partition changed its own switches (the far switch reaches the near group another way)
        assert other["last"]["entries"] > 0 and other["last"]["flow_mods"] > 0, other["last"]
        assert c.emu_stats()[0]["flow_mods"] >= fm0 + mine["last"]["flow_mods"] + other["last"]["flow_mods"]
        # back up: both partitions go back to the compiled tables
        c.emulator_of(near).send(op="port", switch=near, port=near_port, up=True, peer=False)
        _until(lambda: repaired_for([]), 60, "both partitions back to the compiled tables")
        assert all(not _failover(c, i)["remote"] and not _failover(c, i)["repaired"] for i in range(2))
    finally:
        c.stop()
