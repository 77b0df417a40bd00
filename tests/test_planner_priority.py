"""The repair planner's priority: niced while its proof base is built (for a bounded time), ahead of the host's
controllers once it plans (docs/ha.md "The planner's priority")."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ENV = dict(os.environ, PYTHONPATH=str(ROOT))


def run(code: str) -> list[str]:
    got = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60,
                         env=ENV)
    assert got.returncode == 0, got.stderr[-2000:]
    return got.stdout.split()


@pytest.mark.skipif(os.getpriority(os.PRIO_PROCESS, 0) > 7 and os.geteuid() != 0, reason="already nicer than 7")
def test_set_nice_reaches_every_thread_and_threads_started_after_inherit_it():
    """Linux keeps a niceness per thread: ``os.nice`` in the main thread leaves the others (a planner's accept loop,
    its connections) where they were -- ``set_nice`` moves them all."""
    out = run("""
        import os, threading
        from hpcfabric.repair.service import set_nice
        stop = threading.Event()
        t = threading.Thread(target=stop.wait); t.start()
        os.nice(2)  # the main thread only
        print(os.getpriority(os.PRIO_PROCESS, t.native_id))
        assert set_nice(7)
        print(*[os.getpriority(os.PRIO_PROCESS, int(x)) for x in os.listdir('/proc/self/task')])
        seen = []
        u = threading.Thread(target=lambda: seen.append(os.getpriority(os.PRIO_PROCESS, 0))); u.start(); u.join()
        print(seen[0])
        stop.set(); t.join()
    """)
    assert int(out[0]) == os.getpriority(os.PRIO_PROCESS, 0)  # os.nice did not move the other thread
    assert [int(x) for x in out[1:-1]] == [7] * (len(out) - 2) and len(out) - 2 >= 2
    assert int(out[-1]) == 7


@pytest.mark.skipif(os.geteuid() != 0, reason="raising a priority needs root (CAP_SYS_NICE)")
def test_priority_builds_niced_for_a_bounded_time_then_plans_ahead():
    out = run("""
        import os, time
        from hpcfabric.repair import service
        service.BUILD_GRACE_S = 0.3
        p = service.Priority()
        print(os.getpriority(os.PRIO_PROCESS, 0))       # building
        t = time.monotonic()
        while os.getpriority(os.PRIO_PROCESS, 0) == 10 and time.monotonic() - t < 20:
            time.sleep(0.05)
        print(os.getpriority(os.PRIO_PROCESS, 0))       # the grace is over: ahead of the controllers
        print(p.planning(), os.getpriority(os.PRIO_PROCESS, 0))
        service.BUILD_GRACE_S = 30.0
        q = service.Priority()                          # built before the grace ends: the timer never fires
        print(os.getpriority(os.PRIO_PROCESS, 0), q.planning())
        q.timer.join(5)
        print(int(q.timer.is_alive()), int(q.timer.finished.is_set()))
    """)
    assert [int(x) for x in out] == [10, -5, -5, -5, 10, -5, 0, 1]


def test_without_permission_plans_stay_niced_and_say_so():
    """As a user who may not raise a priority again (here: RLIMIT_NICE at 0, root's CAP_SYS_NICE dropped by
    running as nobody where we are root), the planner plans at +10 and reports it."""
    code = textwrap.dedent("""
        import os, logging, sys
        logging.basicConfig(level=logging.INFO, stream=sys.stderr)
        from hpcfabric.repair import service
        p = service.Priority()
        print(p.planning(), os.getpriority(os.PRIO_PROCESS, 0))
    """)
    cmd = [sys.executable, "-c", code]
    if os.geteuid() == 0:
        cmd = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--inh-caps=-all",
               "--bounding-set=-all", *cmd]
    got = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=ENV, cwd="/")
    assert got.returncode == 0, got.stderr[-2000:]
    at = str(max(10, os.getpriority(os.PRIO_PROCESS, 0)))  # a niced test run: it cannot go below where it started
    assert got.stdout.split() == [at, at]
    assert "no permission to raise the priority again" in got.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="raising a priority needs root (CAP_SYS_NICE)")
def test_the_planner_process_says_it_plans_ahead_and_every_thread_does():
    from hpcfabric.repair.service import read_message, write_message

    conf = ROOT / "configs" / "dragonfly-a2-p1-h1.conf"
    p = subprocess.Popen([sys.executable, "-m", "hpcfabric.repair.service", str(conf)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)
    try:
        write_message(p.stdin, ("config", conf.read_text().replace("../topologies/", f"{ROOT / 'topologies'}/")))
        ready = read_message(p.stdout)
        assert ready and ready["ready"] and ready["nice"] == -5, p.stderr.read().decode()[-2000:]
        tasks = os.listdir(f"/proc/{p.pid}/task")
        assert {os.getpriority(os.PRIO_PROCESS, int(t)) for t in tasks} == {-5}
        write_message(p.stdin, ("stop",))
        p.stdin.close()
        assert p.wait(30) == 0
    finally:
        if p.poll() is None:
            p.kill()
