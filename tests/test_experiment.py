"""Experiment building blocks: traffic patterns (pure), the link shaper and PAUSE emulator on real
veth pairs (root + tc), the UDP generator over loopback, and the experiment runner end to end on a
small Dragonfly in Mininet (root + Open vSwitch)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpcfabric.topology.patterns import PatternError, adversarial, pattern, uniform
from hpcfabric.topology import dragonfly_fabric, fat_tree_fabric, flattened_butterfly_fabric

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "mininet"))
import lossless  # noqa: E402

root_only = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("tc") is None, reason="needs root and tc")


# ---------------------------------------------------------------------------
# patterns


def test_uniform_draws_from_every_other_host():
    f = dragonfly_fabric(2, 1, 1)
    un = uniform(f)
    names = {h.name for h in f.hosts}
    assert set(un) == names
    for h, ds in un.items():
        assert h not in ds and set(ds) == names - {h}


def test_adversarial_dragonfly_sends_group_i_to_group_i_plus_1():
    f = dragonfly_fabric(4, 2, 2)
    adv = adversarial(f)
    group = {s.name: s.group for s in f.switches}
    host_group = {h.name: group[h.switch] for h in f.hosts}
    g = max(group.values()) + 1
    for h, ds in adv.items():
        want = (host_group[h] + 1) % g
        assert ds and {host_group[d] for d in ds} == {want}
        assert len(ds) == sum(1 for x in host_group.values() if x == want)  # every host of the next group


def test_adversarial_flattened_butterfly_targets_the_next_switch_in_the_highest_dimension():
    f = flattened_butterfly_fabric([4, 3], 2)
    adv = pattern(f, "adv")
    coords = {s.name: s.coords for s in f.switches}
    on = {h.name: h.switch for h in f.hosts}
    for h, ds in adv.items():
        c = coords[on[h]]
        dest_switches = {on[d] for d in ds}
        assert len(dest_switches) == 1
        assert coords[dest_switches.pop()] == (c[0], (c[1] + 1) % 3)


def test_adversarial_fat_tree_goes_pod_to_next_pod():
    f = fat_tree_fabric(4)
    adv = adversarial(f)
    pod = {s.name: s.group for s in f.switches}
    on = {h.name: h.switch for h in f.hosts}
    for h, ds in adv.items():
        assert {pod[on[d]] for d in ds} == {(pod[on[h]] + 1) % 4}


def test_pattern_errors_are_usage_errors():
    f = dragonfly_fabric(2, 1, 1)
    with pytest.raises(PatternError, match="unknown traffic pattern 'zipf'") as err:
        pattern(f, "zipf")
    assert err.value.exit_code == 2
    single = dragonfly_fabric(2, 1, 1, g=1)
    with pytest.raises(PatternError, match="single block"):
        adversarial(single)


# ---------------------------------------------------------------------------
# netlink parsing (synthetic messages: no root needed)


def _qdisc_msg(ifindex: int, handle: int, drops: int, qlen: int, backlog: int, seq: int = 1) -> bytes:
    tcmsg = struct.pack("=BxxxiIII", 0, ifindex, handle, 0xFFFFFFFF, 1)
    kind = b"bfifo\0"
    attrs = struct.pack("=HH", 4 + len(kind), 1) + kind + b"\0" * (-len(kind) % 4)
    stats = struct.pack("=QIIIIIII", 1000, 10, drops, 0, 0, 0, qlen, backlog)
    attrs += struct.pack("=HH", 4 + len(stats), 3) + stats
    body = tcmsg + attrs
    return struct.pack("=IHHII", 16 + len(body), 36, 2, seq, 0) + body


def test_parse_qdisc_dump_picks_the_leaf_handle_and_reads_tc_stats():
    done = struct.pack("=IHHII", 20, 3, 2, 1, 0) + b"\0\0\0\0"
    buf = (_qdisc_msg(7, lossless.LEAF_HANDLE_ID, 3, 5, 5210) + _qdisc_msg(7, 0x10000, 9, 9, 9)
           + _qdisc_msg(8, lossless.LEAF_HANDLE_ID, 0, 0, 0))
    got, finished = lossless.parse_qdisc_dump([buf], lossless.LEAF_HANDLE_ID)
    assert not finished
    assert got == {7: lossless.QueueStats(5, 5210, 3), 8: lossless.QueueStats(0, 0, 0)}
    got, finished = lossless.parse_qdisc_dump([buf + done], lossless.LEAF_HANDLE_ID)
    assert finished and len(got) == 2


def test_pause_frame_layout():
    src = bytes.fromhex("020000000042")
    f = lossless.pause_frame(src, 400)
    assert len(f) == 60 and f[:6] == bytes.fromhex("0180c2000001") and f[6:12] == src
    assert struct.unpack("!HHH", f[12:18]) == (0x8808, 1, 400)
    pfc = lossless.pause_frame(src, 400, (1, 0))  # PFC: opcode 0x0101, vector 0b11, times of priorities 0 and 1
    assert len(pfc) == 60 and struct.unpack("!HHH8H", pfc[12:34]) == (0x8808, 0x0101, 3, 400, 400, 0, 0, 0, 0, 0, 0)


# ---------------------------------------------------------------------------
# real veth pairs


@pytest.fixture
def veth():
    name = f"hfx{os.getpid() % 10000}"
    a, b = f"{name}a", f"{name}b"
    subprocess.run(["ip", "link", "add", a, "type", "veth", "peer", "name", b], check=True)
    for dev in (a, b):
        subprocess.run(["ip", "link", "set", dev, "up"], check=True)
    try:
        yield lossless.ShapedLink("s1", 3, a, "s2", 4, b)
    finally:
        subprocess.run(["ip", "link", "del", a], check=False)


def _fill(iface: str, frames: int, size: int = 1000) -> None:
    frame = bytes.fromhex("020000000001020000000002") + b"\x88\xb5" + b"x" * (size - 14)
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as s:
        s.bind((iface, 0))
        for _ in range(frames):
            try:
                s.send(frame)
            except OSError:  # ENOBUFS once the FIFO is full: that is the point
                pass


@root_only
def test_shaper_holds_a_backlog_and_drops_beyond_the_fifo_limit(veth):
    assert lossless.shape_links([veth], lossless.LinkShape(0.1, 8000)) == 1
    reader = lossless.QdiscReader()
    try:
        _fill(veth.iface, 20)
        q = reader.read()[lossless.ifindex(veth.iface)]
        # 0.1 Mbit/s: 80 ms per frame, so most are still queued even if this process waited ~200 ms for a core
        assert 5000 <= q.backlog <= 8000, q
        assert q.drops >= 10, q  # 20 x 1 KB into an 8 KB FIFO
        time.sleep(0.25)
        assert reader.read()[lossless.ifindex(veth.iface)].backlog < q.backlog  # it drains at the shaped rate
    finally:
        reader.close()


@root_only
def test_pause_emulator_sends_xoff_into_the_peer_then_xon_when_drained(veth):
    lossless.shape_links([veth], lossless.LinkShape(0.2, 20000))  # 0.2 Mbit/s: 40 ms per frame
    settings = lossless.PauseSettings(xoff_bytes=4000, xon_bytes=1500, quanta=300, refresh_s=10.0, poll_s=0.005)
    emu = lossless.PauseEmulator([veth], settings)
    cap = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x8808))
    cap.bind((veth.iface, 0))  # the PAUSE must arrive at s1's side of the link (s1 port 3)
    cap.settimeout(2.0)
    try:
        _fill(veth.iface, 8)
        emu.step(time.monotonic())
        frame = cap.recv(100)
        assert frame[:6] == bytes.fromhex("0180c2000001")
        assert struct.unpack("!HHH", frame[12:18]) == (0x8808, 1, 300)
        emu.step(time.monotonic())  # still congested, refresh not due: no second XOFF
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            emu.step(time.monotonic())
            if not emu.states[lossless.ifindex(veth.iface)].paused:
                break
            time.sleep(0.01)
        xon = cap.recv(100)
        assert struct.unpack("!HHH", xon[12:18]) == (0x8808, 1, 0)
        rep = emu.report(3, 1.0, 0.01)
        assert rep.xoff_frames == 1 and rep.xon_frames == 1 and rep.episodes == 1
        assert rep.links["s1:3"]["max_backlog"] >= 4000
    finally:
        cap.close()


@root_only
def test_pause_emulator_sends_pfc_for_the_classes_in_use(veth):
    """With pfc_classes (the running tables' PCP values) XOFF and XON are 802.1Qbb frames whose
    class-enable vector names exactly those classes; the controller's parser reads them as PFC."""
    from hpcfabric.protocols.pause import OPCODE_PFC, parse_mac_control

    lossless.shape_links([veth], lossless.LinkShape(0.2, 20000))
    settings = lossless.PauseSettings(xoff_bytes=4000, xon_bytes=1500, quanta=300, refresh_s=10.0, poll_s=0.005,
                                      pfc_classes=(0, 1, 2))
    emu = lossless.PauseEmulator([veth], settings)
    cap = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x8808))
    cap.bind((veth.iface, 0))
    cap.settimeout(2.0)
    try:
        _fill(veth.iface, 8)
        emu.step(time.monotonic())
        xoff = parse_mac_control(cap.recv(100))
        assert xoff.opcode == OPCODE_PFC and xoff.priorities == (300, 300, 300, 0, 0, 0, 0, 0)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and emu.states[lossless.ifindex(veth.iface)].paused:
            emu.step(time.monotonic())
            time.sleep(0.01)
        xon = parse_mac_control(cap.recv(100))
        assert xon.opcode == OPCODE_PFC and xon.is_xon
    finally:
        cap.close()


@root_only
@pytest.mark.parametrize("spread", [False, True])
def test_congestion_spreading_pauses_the_links_into_a_switch_with_a_congested_output(spread):
    """s1 -> s2 -> s3: s2's output to s3 is congested. Without spreading only s2:5 is paused; with it,
    s2 also pauses s1 (the link into s2), as a lossless switch whose input buffers fill would."""
    tag = f"hfs{os.getpid() % 1000}{int(spread)}"
    pairs = [(f"{tag}a1", f"{tag}a2"), (f"{tag}b1", f"{tag}b2")]
    for x, y in pairs:
        subprocess.run(["ip", "link", "add", x, "type", "veth", "peer", "name", y], check=True)
        for dev in (x, y):
            subprocess.run(["ip", "link", "set", dev, "up"], check=True)
    try:
        a = lossless.ShapedLink("s1", 3, pairs[0][0], "s2", 4, pairs[0][1])
        b = lossless.ShapedLink("s2", 5, pairs[1][0], "s3", 6, pairs[1][1])
        lossless.shape_links([a, b], lossless.LinkShape(0.2, 20000))
        emu = lossless.PauseEmulator([a, b], lossless.PauseSettings(4000, 1500, 300, 10.0, 0.005, spread))
        _fill(b.iface, 8)
        emu.step(time.monotonic())
        states = {ls.link.switch: ls for ls in emu.states.values()}
        assert states["s2"].paused and states["s2"].congested
        assert not states["s1"].congested
        assert states["s1"].paused is spread
    finally:
        for x, _ in pairs:
            subprocess.run(["ip", "link", "del", x], check=False)


# ---------------------------------------------------------------------------
# generator


def test_generator_over_loopback_counts_and_times_what_it_sends(tmp_path):
    out = tmp_path / "g.json"
    start = time.monotonic() + 0.3
    cmd = [sys.executable, str(ROOT / "mininet" / "traffic.py"), "--id", "4", "--dests", "127.0.0.1", "--pps", "200",
           "--size", "200", "--start", f"{start:.6f}", "--warmup", "0.3", "--measure", "1.0", "--drain", "0.2",
           "--port", str(20000 + os.getpid() % 20000), "--out", str(out)]
    subprocess.run(cmd, check=True, timeout=30)
    r = json.loads(out.read_text())
    assert 120 <= r["sent_measured"] <= 300  # Poisson, mean 200 in the 1 s window
    assert r["rx_measured"] == r["sent_measured"] and r["rx_measured_by_src"] == {"4": r["sent_measured"]}
    assert r["sent"] > r["sent_measured"]  # warm-up and drain frames are sent but not measured
    assert 0 <= min(r["latency_ms_sample"]) and r["latency_ms_max"] < 500


def test_generator_rejects_bad_sizes(tmp_path):
    res = subprocess.run([sys.executable, str(ROOT / "mininet" / "traffic.py"), "--id", "1", "--start", "0",
                          "--size", "5", "--out", str(tmp_path / "x")], capture_output=True, text=True)
    assert res.returncode == 2 and "--size must be" in res.stderr and "Traceback" not in res.stderr


# ---------------------------------------------------------------------------
# the runner end to end (Mininet + the controller)


def _ovs_ok() -> bool:
    """Root, and an Open vSwitch that answers within seconds (asked when the test runs, not at import)."""
    if os.geteuid() != 0:
        return False
    try:
        return subprocess.run(["ovs-vsctl", "--timeout=5", "show"], capture_output=True, timeout=10).returncode == 0
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return False


def test_runner_end_to_end_on_a_small_dragonfly(tmp_path):
    """ADV overloads the one global link per group pair: the emulator pauses it, the conditional controller
    flips and diverts (table ALTERNATIVE counts frames), minimal does neither; results and plots are written."""
    if not _ovs_ok():
        pytest.skip("needs root and a running Open vSwitch")
    out = tmp_path / "res"
    cmd = [sys.executable, str(ROOT / "mininet" / "run_experiment.py"), "--fabrics",
           str(ROOT / "configs" / "dragonfly-a2-p1-h1.conf"), "--policies", "minimal,conditional", "--patterns", "adv",
           "--repeats", "1", "--warmup", "1", "--measure", "3", "--drain", "0.5", "--load-adv", "1.0",
           "--prefix", "xp", "--out", str(out)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=400)
    assert res.returncode == 0, res.stderr[-2000:]
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert summary["passed"] and "dragonfly-a2-p1-h1_adv_ratio" in summary, summary
    data = json.loads((out / "results.json").read_text())
    runs = {r["policy"]: r for r in data["runs"]}
    mini, cond = runs["minimal"], runs["conditional"]
    for r in (mini, cond):
        assert 0 < r["throughput_mbps"] <= r["offered_mbps"] * 1.05
        assert r["pause_xoff_frames"] > 0  # the global links were congested in both
    assert mini["controller_flips"] == 0 and mini["alternative_frames"] == 0
    assert cond["controller_flips"] > 0 and cond["alternative_frames"] > 0
    assert summary["dragonfly-a2-p1-h1_adv_ratio"] == round(cond["throughput_mbps"] / mini["throughput_mbps"], 3)
    assert (out / "report.md").read_text().count("| dragonfly-a2-p1-h1 | adversarial |") == 2
    assert {"throughput.png", "latency_cdf.png", "per_source.png"} <= {p.name for p in out.iterdir()}


def test_runner_rejects_bad_arguments_with_exit_2():
    res = subprocess.run([sys.executable, str(ROOT / "mininet" / "run_experiment.py"), "--patterns", "zipf"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "--patterns: unknown zipf" in res.stderr and "Traceback" not in res.stderr
