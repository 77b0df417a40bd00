"""One repair planner for both partitions of a host, with real controller processes on the switch emulator
(``[failover] planner = auto``: partitioned, file mode): ONE planner process serves both controllers, a failure
heard by one partition is planned once, every switch then holds what a single controller installs for it (the
emulator's own entries compared), every repair is proven; if the planner dies, nothing is installed until another
one (started by a controller) is ready, and the repair then happens; the planner ends with its last controller."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from test_failures_partitions import DEMO, _failover, _until

from hpcfabric.config import load_config
from hpcfabric.emu.driver import Cluster
from hpcfabric.openflow.ofwire import encode_instructions, encode_match
from hpcfabric.repair.plan import Repairer
from hpcfabric.topology.failures import Failures


def _planners(sock: str) -> list[int]:
    """Pids of shared planner processes serving ``sock``."""
    out = []
    for pid in os.listdir("/proc"):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"hpcfabric.repair.shared" in cmd and sock.encode() in cmd:
            out.append(int(pid))
    return out


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def _held(c: Cluster, switch: str) -> set:
    """The entries the emulated switch holds: (table, priority, match, instructions) as bytes."""
    dump = c.emulator_of(switch).ask(op="dump", switch=switch)
    return {(t, p, bytes.fromhex(m), bytes.fromhex(i)) for t, p, m, _cookie, i in dump["flows"]}


def _encoded(flows) -> set:
    return {(f.table, f.priority, encode_match(f.match), encode_instructions(f)) for f in flows}


def test_one_planner_serves_both_partitions_plans_once_and_is_restarted(tmp_path: Path) -> None:
    c = Cluster(str(DEMO), tmp_path, controllers=2, emulators=1, lldp_interval=0.5)
    sock = str(tmp_path / "failures" / "planner.sock")
    try:
        c.start_controllers()
        c.start_emulators()
        c.wait("confirmed", 90)
        _until(lambda: all((_failover(c, i).get("planner") or {}).get("ready") for i in range(2)), 90,
               "both controllers connected to a ready planner")
        planners = [_failover(c, i)["planner"] for i in range(2)]
        assert [p["mode"] for p in planners] == ["shared", "shared"] and planners[0]["socket"] == sock
        pid = planners[0]["pid"]
        assert planners[1]["pid"] == pid and _planners(sock) == [pid]  # ONE planner process for both
        assert sum(p["started_here"] for p in planners) == 1

        # a global link between the partitions, reported down at partition 0's end only
        link = next(x for x in c.fabric.links if x.kind == "global" and c.owner[x.a] != c.owner[x.b])
        near, near_port = (link.a, link.a_port) if c.owner[link.a] == 0 else (link.b, link.b_port)
        name = "%s:%d-%s:%d" % (min((link.a, link.a_port), (link.b, link.b_port))
                                + max((link.a, link.a_port), (link.b, link.b_port)))

        def repaired_for(links: list[str]):
            return all(((_failover(c, i).get("last") or {}).get("failures") or {}).get("links") == links
                       and (_failover(c, i).get("last") or {}).get("installed") for i in range(2))

        c.emulator_of(near).send(op="port", switch=near, port=near_port, up=False, peer=False)
        _until(lambda: repaired_for([name]), 60, f"both partitions repaired for {name}")
        st = [_failover(c, i) for i in range(2)]
        assert all(s["last"]["verdict"]["proven"] for s in st), st  # every repair proven
        assert [s["planner"]["planner_plans"] for s in st] == [1, 1]  # planned once for both
        assert all(s["plans"] == 1 and s["repairs"] == 1 for s in st)
        assert st[1]["remote"] == [f"{near}:{near_port}"] and st[1]["last"]["flow_mods"] > 0

        # what a single controller installs for the whole fabric, switch by switch, against the emulator's entries
        text = (tmp_path / "ctl0.conf").read_text().split("[failover]")[0]  # the same config, not partitioned
        (tmp_path / "whole.conf").write_text(text)
        whole = load_config(str(tmp_path / "whole.conf"), deadlock=False)
        plan = Repairer(whole, prove=True).plan(Failures.of(whole.fabric, [(near, near_port)]))
        assert plan.proven and {c.owner[s] for s in plan.desired} == {0, 1}
        for s in plan.desired:
            assert _held(c, s) == _encoded(plan.desired[s]), s
        untouched = next(s for s in c.names if s not in plan.desired)
        assert _held(c, untouched) == _encoded(whole.desired[untouched])

        # the planner dies: the recovery is not installed until a new one is ready, then it is
        os.kill(pid, signal.SIGKILL)
        _until(lambda: not _alive(pid), 10, "the planner gone")
        c.emulator_of(near).send(op="port", switch=near, port=near_port, up=True, peer=False)
        _until(lambda: repaired_for([]), 120, "both partitions back to the compiled tables")
        st = [_failover(c, i) for i in range(2)]
        new = st[0]["planner"]["pid"]
        assert new != pid and st[1]["planner"]["pid"] == new and _planners(sock) == [new]
        assert sum(s["planner"]["lost"] for s in st) >= 1 and sum(s["planner"]["started_here"] for s in st) == 2
        assert all(s["last"]["verdict"]["proven"] and not s["repaired"] for s in st), st
        for s in plan.desired:  # the compiled tables again
            assert _held(c, s) == _encoded(whole.desired[s]), s
    finally:
        c.stop()
    _until(lambda: not _planners(sock), 15, "the planner ends with its last controller")
