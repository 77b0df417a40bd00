"""DMP (paper Sec. IV, Fig. 7): frame format (pure) and the host client on a real veth pair.

The real test creates a network namespace ``hfdmp<pid>`` holding one end of
a veth pair; the other end stays in the root namespace where a thread with
a raw socket plays the access switch (echo out of the same port with the
source MAC overwritten). Skipped when not root; everything is removed
afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import threading

import pytest

from hpcfabric.protocols import dmp
from hpcfabric.rules.addressing import plan_addresses
from hpcfabric.rules.compiler import compile_fabric
from hpcfabric.protocols.dmp import (
    ETH_TYPE_DMP,
    FRAME_LEN,
    InvalidAssignment,
    assignment_problem,
    build_request,
    format_mac,
    parse_frame,
    parse_reply,
)
from hpcfabric.verify.reference.pipeline import Frame, Pipeline
from hpcfabric.topology.loader import load_topology

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Fig. 7: host A (vendor MAC) on port 1 of the switch with prefix 02:00:00:01:00
HOST_A = 0x00201277144E
HOST_B = 0x00220477144E
ASSIGNED_A = 0x020000010001
ASSIGNED_B = 0x020000010002


def echo(frame: bytes, new_src: int) -> bytes:
    """What the access switch's DMP rule does: overwrite eth_src, send back."""
    return frame[:6] + new_src.to_bytes(6, "big") + frame[12:]


# ---------------------------------------------------------------------------
# frame format


def test_request_layout():
    frame = build_request(HOST_A.to_bytes(6, "big"), 0xDEADBEEF)
    assert len(frame) == FRAME_LEN == 60
    assert frame[0:6] == frame[6:12] == bytes.fromhex("00201277144e")
    assert struct.unpack("!H", frame[12:14])[0] == ETH_TYPE_DMP == 0x88B5
    assert frame[14:19] == b"HFDMP"
    assert frame[19] == 1 and frame[20] == 1  # version, type request
    assert frame[21:25] == bytes.fromhex("deadbeef")
    assert frame[25:] == bytes(35)
    assert parse_frame(frame) == (HOST_A, HOST_A, 0xDEADBEEF)


def test_request_accepts_int_text_and_bytes_nonce():
    a = build_request(HOST_A, 7)
    assert a == build_request("00:20:12:77:14:4e", (7).to_bytes(4, "big"))
    assert a == build_request(bytes.fromhex("00201277144e"), 7)


@pytest.mark.parametrize(
    "mac, nonce",
    [
        (b"\x01\x00\x5e\x00\x00\x01", 1),  # multicast source
        (b"\x00" * 5, 1),  # 5 bytes
        (1 << 48, 1),
        (HOST_A, -1),
        (HOST_A, 1 << 32),
        (HOST_A, b"abc"),
        ("02:00:00:01:00", 1),
    ],
)
def test_request_rejects_bad_arguments(mac, nonce):
    with pytest.raises(dmp.DmpError):
        build_request(mac, nonce)


def test_fig7_exchange():
    """Both hosts of Fig. 7 get the switch prefix 02:00:00:01:00 + their port number."""
    for vendor, assigned in ((HOST_A, ASSIGNED_A), (HOST_B, ASSIGNED_B)):
        req = build_request(vendor, 42)
        reply = echo(req, assigned)
        assert reply[0:6] == vendor.to_bytes(6, "big")  # dst stays the old MAC
        assert parse_reply(reply, 42, vendor) == assigned
        assert format_mac(assigned).startswith("02:00:00:01:00:")


def test_reply_must_match_nonce_and_destination():
    reply = echo(build_request(HOST_A, 42), ASSIGNED_A)
    assert parse_reply(reply, 43, HOST_A) is None
    assert parse_reply(reply, {41, 42}, HOST_A) == ASSIGNED_A  # late answer to an earlier attempt
    assert parse_reply(reply, frozenset({1}), HOST_A) is None
    assert parse_reply(reply, 42, HOST_B) is None  # someone else's answer
    assert parse_reply(reply, 42, HOST_A.to_bytes(6, "big")) == ASSIGNED_A


def test_idempotent_reply_equals_request():
    req = build_request(ASSIGNED_A, 5)
    assert parse_reply(echo(req, ASSIGNED_A), 5, ASSIGNED_A) == ASSIGNED_A


@pytest.mark.parametrize(
    "mangle",
    [
        lambda f: f[:12] + b"\x08\x00" + f[14:],  # IPv4
        lambda f: f[:14] + b"XFDMP" + f[19:],  # magic
        lambda f: f[:19] + b"\x02" + f[20:],  # version
        lambda f: f[:20] + b"\x02" + f[21:],  # type
        lambda f: f[:24],  # truncated nonce
        lambda f: b"",
    ],
)
def test_foreign_frames_are_ignored(mangle):
    reply = echo(build_request(HOST_A, 42), ASSIGNED_A)
    assert parse_reply(mangle(reply), 42, HOST_A) is None


def test_longer_frames_are_fine():
    reply = echo(build_request(HOST_A, 42), ASSIGNED_A) + b"\xaa\xbb\xcc\xdd"  # e.g. FCS
    assert parse_reply(reply, 42, HOST_A) == ASSIGNED_A


@pytest.mark.parametrize(
    "bad, why",
    [
        (0x00201277144F, "not locally administered"),
        (0x030000010001, "multicast"),
        (0xFFFFFFFFFFFF, "multicast"),
    ],
)
def test_invalid_assignment_raises(bad, why):
    reply = echo(build_request(HOST_A, 42), bad)
    with pytest.raises(InvalidAssignment) as err:
        parse_reply(reply, 42, HOST_A)
    assert err.value.mac == bad and why in err.value.reason
    assert assignment_problem(bad) is not None


def test_assignment_problem_accepts_hierarchical_macs():
    assert assignment_problem(ASSIGNED_A) is None
    assert assignment_problem(0x020000000000) is None  # host 0 of group 0, switch 0 (compact plan)
    assert assignment_problem(0xFEFFFFFFFFFF) is None


@pytest.mark.parametrize("topology", ["dragonfly-a2-p1-h1", "fb-2d-3x3", "dragonfly-a4-p2-h2"])
def test_compiled_dmp_rule_answers_with_planned_mac(topology):
    """Our request through the compiled table 0 of every access switch (fake pipeline)."""
    fabric = load_topology(os.path.join(ROOT, "topologies", f"{topology}.yaml"))
    plan = plan_addresses(fabric, "compact")
    compiled = compile_fabric(fabric, plan, routing="conditional")
    for i, host in enumerate(fabric.hosts):
        vendor = 0x0A0000000000 | i  # random-ish, locally administered, not the plan
        req = build_request(vendor, i)
        pipe = Pipeline(compiled.flows(host.switch))
        result = pipe.process(Frame(in_port=host.port, eth_src=vendor, eth_dst=vendor, eth_type=ETH_TYPE_DMP))
        assert len(result.outputs) == 1
        port, out = result.outputs[0]
        assert port == host.port and out.eth_dst == vendor
        reply = echo(req, out.eth_src)
        assert parse_reply(reply, i, vendor) == plan.host_mac[host.name]


# ---------------------------------------------------------------------------
# the client against a veth pair with an emulated switch


def _have_tools() -> bool:
    return shutil.which("ip") is not None


needs_root = pytest.mark.skipif(
    not (hasattr(os, "geteuid") and os.geteuid() == 0 and _have_tools()),
    reason="needs root (network namespaces, raw sockets) and iproute2",
)


class EchoSwitch(threading.Thread):
    """The switch side of a host port: echo DMP frames with eth_src := ``assign``."""

    def __init__(self, iface: str, assign: int):
        super().__init__(daemon=True)
        self.assign = assign
        self.requests = 0
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_TYPE_DMP))
        self.sock.bind((iface, ETH_TYPE_DMP))
        self.sock.settimeout(0.05)
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                data, addr = self.sock.recvfrom(2048)
            except socket.timeout:
                continue
            except OSError:
                return
            if addr[2] == socket.PACKET_OUTGOING or parse_frame(data) is None:
                continue
            self.requests += 1
            if self.assign is not None:
                self.sock.send(echo(data, self.assign))

    def close(self) -> None:
        self.stop.set()
        self.join(2)
        self.sock.close()


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), capture_output=True, text=True, check=check, timeout=30)


@pytest.fixture
def veth_ns():
    """(namespace, host interface in it, switch-side interface in the root namespace)."""
    tag = f"{os.getpid() % 100000}"
    ns, host_if, sw_if = f"hfdmp{tag}", f"hfdh{tag}", f"hfds{tag}"
    _run("ip", "netns", "add", ns)
    try:
        _run("ip", "link", "add", sw_if, "type", "veth", "peer", "name", host_if)
        _run("ip", "link", "set", host_if, "netns", ns)
        _run("ip", "link", "set", sw_if, "up")
        _run("ip", "-n", ns, "link", "set", host_if, "address", "5e:11:22:33:44:55")
        _run("ip", "-n", ns, "link", "set", host_if, "up")
        _run("ip", "-n", ns, "link", "set", "lo", "up")
        yield ns, host_if, sw_if
    finally:
        _run("ip", "link", "del", sw_if, check=False)  # also removes the peer
        _run("ip", "netns", "del", ns, check=False)


def client(ns: str, *args: str) -> subprocess.CompletedProcess:
    return _run("ip", "netns", "exec", ns, sys.executable, "-m", "hpcfabric.protocols.dmp_client", *args, check=False)


def ns_mac(ns: str, iface: str) -> str:
    out = _run("ip", "-n", ns, "-o", "link", "show", iface).stdout
    return out.split("link/ether ")[1].split()[0]


def ns_up(ns: str, iface: str) -> bool:
    out = _run("ip", "-n", ns, "-o", "link", "show", iface).stdout
    return ",UP" in out or "<UP" in out


@needs_root
def test_client_assigns_then_is_idempotent(veth_ns):
    ns, host_if, sw_if = veth_ns
    switch = EchoSwitch(sw_if, ASSIGNED_A)
    switch.start()
    try:
        dry = client(ns, host_if, "--json", "--dry-run", "--timeout", "0.5")
        assert dry.returncode == 0, dry.stderr
        assert json.loads(dry.stdout)["status"] == "dry-run"
        assert ns_mac(ns, host_if) == "5e:11:22:33:44:55"

        first = client(ns, host_if, "--json", "--timeout", "0.5")
        assert first.returncode == 0, first.stderr
        r = json.loads(first.stdout)
        assert r["status"] == "assigned" and r["changed"] is True
        assert r["old_mac"] == "5e:11:22:33:44:55" and r["mac"] == "02:00:00:01:00:01"
        assert r["attempts"] == 1 and r["link_cycled"] is False
        assert ns_mac(ns, host_if) == "02:00:00:01:00:01"
        assert ns_up(ns, host_if)

        second = client(ns, host_if, "--timeout", "0.5")  # human output
        assert second.returncode == 0, second.stderr
        assert "already assigned 02:00:00:01:00:01" in second.stdout
        assert ns_mac(ns, host_if) == "02:00:00:01:00:01"
        assert switch.requests == 3
    finally:
        switch.close()


@needs_root
def test_client_retries_then_reports_no_answer(veth_ns):
    ns, host_if, sw_if = veth_ns
    switch = EchoSwitch(sw_if, None)  # a port without the DMP rule: frames vanish
    switch.start()
    try:
        res = client(ns, host_if, "--json", "--timeout", "0.2", "--retries", "2")
        assert res.returncode == 1
        r = json.loads(res.stdout)
        assert r["status"] == "no-answer" and "3 request(s)" in r["error"]
        assert "no DMP answer" in res.stderr
        assert switch.requests == 3
        assert ns_mac(ns, host_if) == "5e:11:22:33:44:55"
    finally:
        switch.close()


@needs_root
def test_client_refuses_invalid_assignment(veth_ns):
    ns, host_if, sw_if = veth_ns
    switch = EchoSwitch(sw_if, 0x00AABBCCDDEE)  # globally administered: misconfigured rule
    switch.start()
    try:
        res = client(ns, host_if, "--timeout", "0.2", "--retries", "0")
        assert res.returncode == 1
        assert "invalid assignment" in res.stderr and "00:aa:bb:cc:dd:ee" in res.stderr
        assert ns_mac(ns, host_if) == "5e:11:22:33:44:55"
    finally:
        switch.close()


@needs_root
def test_client_brings_a_down_link_up(veth_ns):
    ns, host_if, sw_if = veth_ns
    _run("ip", "-n", ns, "link", "set", host_if, "down")
    switch = EchoSwitch(sw_if, ASSIGNED_B)
    switch.start()
    try:
        res = client(ns, host_if, "--json", "--timeout", "0.5", "--retries", "5")
        assert res.returncode == 0, res.stderr
        assert json.loads(res.stdout)["brought_up"] is True
        assert ns_mac(ns, host_if) == "02:00:00:01:00:02" and ns_up(ns, host_if)
    finally:
        switch.close()


@needs_root
def test_client_usage_errors(veth_ns):
    ns, _, _ = veth_ns
    res = client(ns, "nosuch0", "--json")
    assert res.returncode == 2 and "no such interface" in json.loads(res.stdout)["error"]
    assert client(ns, "lo").returncode == 2  # not Ethernet
    assert client(ns, "x", "--timeout", "-1").returncode == 2  # argparse
    assert client(ns).returncode == 2


def _sysfs(iface: str, attr: str) -> str:
    try:
        with open(f"/sys/class/net/{iface}/{attr}") as f:
            return f.read().strip()
    except OSError:
        return ""


def test_client_not_root():
    """As an unprivileged user the client exits 2 and says so (skipped if no such user)."""
    if os.geteuid() != 0:
        res = subprocess.run([sys.executable, "-m", "hpcfabric.protocols.dmp_client", "lo"], capture_output=True, text=True)
        assert res.returncode == 2
        return
    try:
        import pwd

        nobody = pwd.getpwnam("nobody")
    except (KeyError, ImportError):
        pytest.skip("no 'nobody' user")
    iface = sorted(n for n in os.listdir("/sys/class/net") if _sysfs(n, "type") == "1")
    if not iface:
        pytest.skip("no Ethernet interface")
    res = subprocess.run(
        [sys.executable, "-m", "hpcfabric.protocols.dmp_client", iface[0], "--retries", "0", "--timeout", "0.1"],
        capture_output=True,
        text=True,
        user=nobody.pw_uid,
        group=nobody.pw_gid,
        cwd="/",
        env={**os.environ, "PYTHONPATH": ROOT},
        timeout=30,
    )
    assert res.returncode == 2, res.stderr
    assert "not permitted" in res.stderr
