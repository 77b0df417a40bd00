"""Run the test suite as two pytest processes side by side, for ``make test`` on a 2-core machine.

The modules that drive shared machinery (Open vSwitch, Mininet, etcd, Prometheus, a browser, the switch
emulator's sockets, wall-clock bounds) run one after another in the first process, at normal priority: two
Mininet fabrics at once clash (Mininet's cleanup removes every emulated net). The pure modules (compile,
prove, simulate) run in the second at nice 10, so they take the other core and yield to the first.

    python scripts/pytest_pair.py [PYTEST_ARG ...] [TEST_DIR]     (TEST_DIR: tests)

The first process reports live; the second's report follows it. The exit code is the first non-zero one,
or 5 when both collected nothing.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

#: a test module whose source matches runs in the serial (first) process
SHARED = re.compile(r"mininet|Mininet|ovs|openvswitch|etcd|prometheus|chromium|selenium|run_fabric|hpcfabric\.emu"
                    r"|ryu-manager|osken-manager|time\.monotonic")
#: ... and these, whose assertions bound wall-clock time
TIMED = {"test_dmp.py", "test_status_milestone.py"}
PURE_NICE = 10


def split(test_dir: Path) -> tuple[list[str], list[str]]:
    """(shared modules, pure modules) of ``test_dir``, each sorted."""
    shared, pure = [], []
    for path in sorted(test_dir.glob("test_*.py")):
        is_shared = path.name in TIMED or SHARED.search(path.read_text(errors="replace"))
        (shared if is_shared else pure).append(str(path))
    return shared, pure


def main(argv: list[str]) -> int:
    args = list(argv)
    test_dir = Path(args.pop()) if args and Path(args[-1]).is_dir() else Path("tests")
    shared, pure = split(test_dir)
    pytest = [sys.executable, "-m", "pytest"]
    with tempfile.TemporaryDirectory(prefix="hpcfabric-pytest-") as tmp:
        log = Path(tmp, "pure.log")
        with open(log, "wb") as out:
            second = subprocess.Popen(
                [*pytest, *args, "-p", "no:cacheprovider", f"--basetemp={tmp}/pure", *pure],
                stdout=out, stderr=subprocess.STDOUT, preexec_fn=lambda: os.nice(PURE_NICE))
            try:
                print(f"[test] {len(shared)} modules that drive OVS/Mininet/etcd/the emulator, one after another; "
                      f"{len(pure)} pure modules beside them at nice {PURE_NICE} (report below)", flush=True)
                first = subprocess.call([*pytest, *args, f"--basetemp={tmp}/shared", *shared])
            except BaseException:
                second.terminate()
                raise
            finally:
                rc2 = second.wait()
        print(f"\n[test] the {len(pure)} pure modules:", flush=True)
        sys.stdout.write(log.read_text(errors="replace"))
    if first == rc2 == 5:
        return 5
    return next((rc for rc in (first, rc2) if rc not in (0, 5)), 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
