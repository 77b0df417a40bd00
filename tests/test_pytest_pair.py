"""scripts/pytest_pair.py (``make test``): the suite as two pytest processes, shared machinery in one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAIR = ROOT / "scripts" / "pytest_pair.py"


def run(tests: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(PAIR), "-q", "-p", "no:cacheprovider", str(tests)], cwd=tests.parent,
                          capture_output=True, text=True, timeout=120)


def write(tests: Path, name: str, body: str) -> None:
    tests.mkdir(exist_ok=True)
    (tests / name).write_text(body)


def test_the_suite_splits_mininet_modules_from_pure_ones():
    sys.path.insert(0, str(PAIR.parent))
    try:
        from pytest_pair import split
    finally:
        sys.path.remove(str(PAIR.parent))
    shared, pure = split(ROOT / "tests")
    names = {Path(p).name for p in shared}
    assert {"test_mininet.py", "test_failures_mininet.py", "test_ha_etcd.py", "test_controller_ovs.py"} <= names
    assert "test_compiler.py" in {Path(p).name for p in pure} and not set(shared) & set(pure)


@pytest.mark.parametrize("pure_body, rc", [("def test_ok():\n    pass\n", 0), ("def test_bad():\n    assert 0\n", 1)])
def test_both_halves_run_and_a_failure_in_either_fails(tmp_path, pure_body, rc):
    tests, base = tmp_path / "tests", os.nice(0)
    write(tests, "test_net.py", f"import os\n# mininet\ndef test_shared():\n    assert os.nice(0) == {base}\n")
    write(tests, "test_calc.py", pure_body + f"def test_niced():\n    import os\n    assert os.nice(0) == {min(base + 10, 19)}\n")
    done = run(tests)
    assert done.returncode == rc, done.stdout
    assert "1 passed" in done.stdout and ("2 passed" if rc == 0 else "1 failed, 1 passed") in done.stdout


def test_nothing_collected_on_both_sides_is_exit_5(tmp_path):
    tests = tmp_path / "tests"
    write(tests, "test_net.py", "# mininet\n")
    write(tests, "test_calc.py", "X = 1\n")
    assert run(tests).returncode == 5
