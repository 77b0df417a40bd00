"""Deadlock freedom declared, checked and explained: ``[hpcfabric] flow_control`` (issue 15).

* pfc (default): untagged Dragonfly tables are refused by ``hpcfabric check`` and by the controller at
  load (exit 2, one line, the cycle as channels, the fix named); the default tables are proven.
* pause: classes give no protection; the class-merged CDG is reported (cyclic on a Dragonfly, even with
  classes), delivery under any set of paused ports is what stays proven.
* none: deadlock does not apply; untagged tables accepted, no proof run.
* Table III's shipped config: its default tables proven by the union proof.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_ops_fakes import make_app

from hpcfabric.config import load_config
from hpcfabric.controller.metrics import render
from hpcfabric.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
TOPO = ROOT / "topologies"
HPCFABRIC = ROOT / ".venv" / "bin" / "hpcfabric"
CHANNEL = r"g\ds\d:\d+@untagged"


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    cmd = [str(HPCFABRIC)] if HPCFABRIC.exists() else [sys.executable, "-m", "hpcfabric.cli"]
    return subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=timeout)


def write(tmp_path: Path, extra: str, topo: str = "dragonfly-a4-p2-h2.yaml", name: str = "c.conf",
          tail: str = "") -> Path:
    p = tmp_path / name
    p.write_text(f"[hpcfabric]\ntopology = {TOPO / topo}\n{extra}\n{tail}")
    return p


def test_pfc_refuses_untagged_dragonfly_tables_with_the_cycle_and_the_fix(tmp_path):
    path = write(tmp_path, "routing = conditional\ncos = off\n")  # flow_control defaults to pfc
    proc = cli("check", str(path))
    assert proc.returncode == 2 and proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert "Traceback" not in proc.stderr
    assert line.startswith(f"hpcfabric: error: {path}: hpcfabric.cos: flow_control = pfc: ")
    assert "not deadlock-free; dependency cycle: " in line and "fix: set cos = on" in line and "top/3" in line
    cycle = line.split("dependency cycle: ")[1].split("; fix:")[0].split(" -> ")
    assert len(cycle) >= 3 and cycle[0] == cycle[-1] and all(re.fullmatch(CHANNEL, c) for c in cycle), cycle
    # minimal routing too (l-g-l paths close a cycle over global links without classes)
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, "routing = minimal\ncos = off\nflow_control = pfc\n", name="m.conf"))
    assert info.value.field == "hpcfabric.cos" and "dependency cycle" in str(info.value)
    # one class less than the proven default is refused as well (Valiant needs 3 on a Dragonfly)
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, "routing = valiant\ncos = top\ncos_levels = 2\n", name="v.conf"))
    assert "dependency cycle" in str(info.value) and "leave cos_levels empty" in str(info.value)


def test_the_controller_refuses_them_at_load(tmp_path):
    path = write(tmp_path, "routing = conditional\ncos = off\n", tail="[openflow]\nlisten_port = 1\n")
    proc = cli("controller", "--config", str(path), timeout=60)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr and "dependency cycle: " in proc.stderr and "set cos = on" in proc.stderr


def test_pfc_default_tables_are_proven_and_reported(tmp_path):
    cfg = load_config(write(tmp_path, "routing = conditional\n"))
    d = cfg.deadlock
    assert (cfg.compiled.cos, cfg.compiled.cos_levels) == ("top", 3)
    assert d["flow_control"] == "pfc" and d["verdict"] == "proven" and d["proven"] and d["cycle"] is None
    assert d["scheme"] == "top" and d["levels"] == 3 and d["delivered"] and d["classes_used"] == ["0", "1", "2"]
    proc = cli("check", str(tmp_path / "c.conf"))
    assert proc.returncode == 0, proc.stderr
    assert "classes of service top/3, flow_control = pfc: deadlock proven: " in proc.stdout


def test_pause_explains_that_classes_do_not_protect(tmp_path):
    untagged = write(tmp_path, "routing = conditional\ncos = off\nflow_control = pause\n")
    proc = cli("check", str(untagged))
    assert proc.returncode == 0, proc.stderr
    assert "flow_control = pause: deadlock cycle: pause (802.3x) stops every class at once" in proc.stdout
    assert "classes of service give no protection" in proc.stdout and "delivery of every host pair" in proc.stdout
    tagged = load_config(write(tmp_path, "routing = conditional\nflow_control = pause\n", name="t.conf"))
    d = tagged.deadlock
    # per class the graph is acyclic (what pfc relies on), but one PAUSE stops all classes: merged, it has a cycle
    assert tagged.compiled.cos == "top" and d["verdict"] == "cycle" and not d["proven"]
    assert "acyclic per class" in d["explanation"] and d["delivered"] is True
    assert d["cycle"][0] == d["cycle"][-1] and all(re.fullmatch(r"g\ds\d:\d+", c) for c in d["cycle"])
    # an up*/down* fat-tree needs no class: the merged graph is acyclic, deadlock-free even under 802.3x
    ft = load_config(write(tmp_path, "routing = conditional\nflow_control = pause\n", topo="fat-tree-k4.yaml",
                           name="ft.conf"))
    assert ft.deadlock["verdict"] == "proven" and "even without classes" in ft.deadlock["explanation"]


def test_none_explains_that_deadlock_does_not_apply(tmp_path):
    path = write(tmp_path, "routing = conditional\ncos = off\nflow_control = none\n")
    proc = cli("check", str(path))
    assert proc.returncode == 0, proc.stderr
    assert "flow_control = none: deadlock not applicable: " in proc.stdout
    assert "deadlock does not apply" in proc.stdout and "cos = off" in proc.stdout
    cfg = load_config(path)
    assert cfg.compiled.cos is None and cfg.deadlock["method"] is None and not cfg.deadlock["proven"]


def test_status_and_metrics_show_scheme_levels_flow_control_and_verdict(tmp_path):
    path = write(tmp_path, "routing = conditional\nreload_poll = 0\n", topo="dragonfly-a2-p1-h1.yaml")
    app = make_app(path)
    st = app.status()
    text = render(app.sources).decode()
    line = next(l for l in text.splitlines() if l.startswith("hpcfabric_deadlock_proven{"))
    for part in ('flow_control="pfc"', 'scheme="top"', 'levels="3"', 'verdict="proven"'):
        assert part in line, line
    assert line.endswith(" 1.0")
    dl = st["deadlock"]
    assert (dl["flow_control"], dl["scheme"], dl["levels"], dl["verdict"]) == ("pfc", "top", 3, "proven")


def test_table3_shipped_config_is_proven_by_the_union_proof():
    """The paper's Table III (2,064 switches, 16,512 hosts), conditional routing, default classes top/3:
    every host pair delivered and the CDG acyclic under any set of paused ports (~20 s)."""
    cfg = load_config(ROOT / "configs" / "dragonfly-table3.conf")
    d = cfg.deadlock
    assert (d["scheme"], d["levels"], d["flow_control"]) == ("top", 3, "pfc")
    assert d["verdict"] == "proven" and d["delivered"] and d["channels"] > 0 and d["dependencies"] > 0


# ---------------------------------------------------------------------------
# the emulation sends PFC (802.1Qbb) for the classes in use


def _mininet_modules():
    sys.path.insert(0, str(ROOT / "mininet"))
    import lossless  # noqa: PLC0415  (mininet/lossless.py)
    import pause_inject  # noqa: PLC0415  (mininet/pause_inject.py)

    return lossless, pause_inject


def test_emulator_pfc_frames_are_what_the_controller_parses():
    from hpcfabric.protocols.pause import OPCODE_PFC, build_pfc, parse_mac_control

    lossless, pause_inject = _mininet_modules()
    src = bytes.fromhex("020000000042")
    xoff = lossless.pause_frame(src, 400, (0, 1, 2))
    assert xoff == build_pfc(src, {0: 400, 1: 400, 2: 400})  # byte for byte the protocol module's frame
    f = parse_mac_control(xoff)
    assert f.opcode == OPCODE_PFC and f.quanta == 400 and f.priorities == (400, 400, 400, 0, 0, 0, 0, 0)
    assert parse_mac_control(lossless.pause_frame(src, 0, (0, 1, 2))).is_xon
    assert parse_mac_control(lossless.pause_frame(src, 400)).priorities is None  # no classes: 802.3x
    assert pause_inject.pfc_vector((0, 1, 2)) == 0b111 and pause_inject.pfc_vector(()) == 0


@pytest.mark.skipif(__import__("os").geteuid() != 0, reason="needs root (veth pair, raw sockets)")
def test_pause_train_script_sends_pfc_frames_on_a_veth(tmp_path):
    """The stand-alone train sender (the demo's PAUSE check) with a class-enable vector: what arrives at
    the other end of a real veth pair parses as PFC for exactly those priorities."""
    import os
    import socket

    from hpcfabric.protocols.pause import OPCODE_PFC, parse_mac_control

    _, pause_inject = _mininet_modules()
    a, b = f"hfp{os.getpid() % 10000}a", f"hfp{os.getpid() % 10000}b"
    subprocess.run(["ip", "link", "add", a, "type", "veth", "peer", "name", b], check=True)
    try:
        for dev in (a, b):
            subprocess.run(["ip", "link", "set", dev, "up"], check=True)
        rx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x8808))
        rx.bind((b, 0))
        rx.settimeout(5)
        proc = subprocess.run([sys.executable, "-c", pause_inject.PAUSE_TRAIN_SCRIPT, a, "1234", "0", "0",
                               str(pause_inject.pfc_vector((0, 1)))], capture_output=True, text=True, timeout=20)
        assert proc.returncode == 0 and "first " in proc.stdout, proc.stderr
        f = parse_mac_control(rx.recv(2048))
        rx.close()
        assert f.opcode == OPCODE_PFC and f.priorities == (1234, 1234, 0, 0, 0, 0, 0, 0)
    finally:
        subprocess.run(["ip", "link", "del", a], check=False)


def test_deadlock_check_off_skips_the_proof_and_says_so(tmp_path):
    cfg = load_config(write(tmp_path, "routing = conditional\ncos = off\ndeadlock_check = off\n"))
    assert cfg.compiled.cos is None and cfg.deadlock["verdict"] == "not checked" and not cfg.deadlock["proven"]
    assert "nothing is proven" in cfg.deadlock["explanation"]
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, "deadlock_check = maybe\n", name="bad.conf"))
    assert info.value.field == "hpcfabric.deadlock_check"


def test_a_partition_controller_proves_the_whole_fabric_it_is_part_of(tmp_path):
    """A controller of one partition compiles its own switches only, yet the proof covers the fabric:
    the default tables are proven, untagged ones refused with a cycle that may run outside the partition."""
    half = ",".join(f"g{g}s{s}" for g in range(4) for s in range(4))  # groups 0..3 of 9
    cfg = load_config(write(tmp_path, "routing = conditional\n", tail=f"[ha]\nswitches = {half}\n"))
    assert len(cfg.compiled.tables) == 16 < len(cfg.fabric.switches)
    assert cfg.deadlock["verdict"] == "proven" and cfg.deadlock["channels"] > 0
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, "routing = conditional\ncos = off\n", name="u.conf",
                          tail=f"[ha]\nswitches = {half}\n"))
    assert info.value.field == "hpcfabric.cos" and "dependency cycle" in str(info.value)
