"""The switch itself fences a deposed master: Open vSwitch and OpenFlow 1.3 role requests with generation ids.

One real OVS bridge with two controller connections (plain sockets here, speaking raw OpenFlow 1.3 with
hpcfabric.openflow.ofwire): the generation ids that the HA backends hand out (the etcd generation counter,
docs/ha.md) make the switch refuse a stale MASTER claim (OFPRRFC_STALE) and the old master's flow-mods
(OFPBRC_IS_SLAVE) -- whatever the old master believes.
"""

from __future__ import annotations

import os
import shutil
import socket
import struct
import subprocess
import time

import pytest

from hpcfabric.openflow import ofwire
from hpcfabric.rules.flows import FlowSpec, Match

pytestmark = pytest.mark.ovs

OFPT_HELLO, OFPT_ERROR, OFPT_ECHO_REQUEST, OFPT_ROLE_REPLY = 0, 1, 2, 25
OFPET_BAD_REQUEST, OFPBRC_IS_SLAVE = 1, 10
OFPET_ROLE_REQUEST_FAILED, OFPRRFC_STALE = 11, 0
BR = f"hfgen{os.getpid() % 10000}"


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), check=check, capture_output=True, text=True, timeout=30)


class Conn:
    """One OpenFlow connection accepted from the bridge."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.sock.settimeout(5.0)
        self.buf = b""
        self.sock.sendall(ofwire.header(OFPT_HELLO, 8, 1))

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv(self, xid: int, timeout: float = 5.0, also: int = -1) -> tuple[int, bytes]:
        """The next message with ``xid`` (or ``also``), answering echo requests meanwhile: (type, body)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            while len(self.buf) >= 8:
                _v, mtype, length, mxid = struct.unpack("!BBHI", self.buf[:8])
                if len(self.buf) < length:
                    break
                msg, self.buf = self.buf[:length], self.buf[length:]
                if mtype == OFPT_ECHO_REQUEST:
                    self.send(struct.pack("!BBHI", 4, 3, length, mxid) + msg[8:])
                elif mxid in (xid, also):
                    return mtype, msg[8:]
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("switch closed the connection")
            self.buf += chunk
        raise TimeoutError(f"no reply to xid {xid}")

    def role(self, xid: int, role: int, generation: int) -> tuple[str, int, int]:
        """Send a role request: ('reply', role, generation) or ('error', type, code)."""
        self.send(ofwire.role_request(xid, role, generation))
        mtype, body = self.recv(xid)
        if mtype == OFPT_ROLE_REPLY:
            r, g = struct.unpack("!I4xQ", body[:16])
            return "reply", r, g
        assert mtype == OFPT_ERROR, mtype
        etype, code = struct.unpack("!HH", body[:4])
        return "error", etype, code

    def write(self, xid: int) -> tuple[str, int, int] | None:
        """A flow-mod then a barrier: None if accepted, ('error', type, code) if refused."""
        flow = FlowSpec(table=0, priority=7, match=Match(eth_type=0x88B6), actions=())
        body = ofwire.flow_mod_body(flow)
        self.send(ofwire.header(ofwire.OFPT_FLOW_MOD, 8 + len(body), xid) + body)
        self.send(ofwire.barrier(xid + 1))
        mtype, body = self.recv(xid, also=xid + 1)  # an error comes before the barrier's reply
        if mtype == OFPT_ERROR:
            etype, code = struct.unpack("!HH", body[:4])
            return "error", etype, code
        return None


@pytest.fixture
def bridge():
    if os.geteuid() != 0 or shutil.which("ovs-vsctl") is None:
        pytest.skip("needs root and Open vSwitch")
    if sh("ovs-vsctl", "--timeout=5", "show", check=False).returncode != 0:
        pytest.skip("Open vSwitch is not running (make setup)")
    listeners = []
    for _ in range(2):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", 0))
        s.listen(4)
        s.settimeout(20)
        listeners.append(s)
    ports = [s.getsockname()[1] for s in listeners]
    sh("ovs-vsctl", "--timeout=10", "--may-exist", "add-br", BR, "--", "set", "bridge", BR, "datapath_type=netdev",
       "protocols=OpenFlow13", "fail_mode=secure", "--", "set-controller", BR,
       *(f"tcp:127.0.0.1:{p}" for p in ports))
    try:
        conns = [Conn(s.accept()[0]) for s in listeners]
        yield conns
    finally:
        sh("ovs-vsctl", "--timeout=10", "--if-exists", "del-br", BR, check=False)
        for s in listeners:
            s.close()


def test_switch_refuses_stale_generation_and_a_deposed_masters_writes(bridge):
    a, b = bridge
    M, S = ofwire.OFPCR_ROLE_MASTER, ofwire.OFPCR_ROLE_SLAVE
    assert a.role(100, M, 5) == ("reply", M, 5)  # a: master of generation 5
    assert a.write(110) is None  # ... and may write
    assert b.role(200, S, 5) == ("reply", S, 5)
    assert b.write(210) == ("error", OFPET_BAD_REQUEST, OFPBRC_IS_SLAVE)  # a slave's write is refused
    # a claim with an older generation is stale: refused, a stays master
    assert b.role(220, M, 4) == ("error", OFPET_ROLE_REQUEST_FAILED, OFPRRFC_STALE)
    assert a.write(120) is None
    # the takeover: b claims generation 6 -> the switch demotes a by itself
    assert b.role(230, M, 6) == ("reply", M, 6)
    assert b.write(240) is None
    assert a.write(130) == ("error", OFPET_BAD_REQUEST, OFPBRC_IS_SLAVE)  # the deposed master's late write
    # the deposed master wakes up believing it still holds generation 5: refused
    assert a.role(140, M, 5) == ("error", OFPET_ROLE_REQUEST_FAILED, OFPRRFC_STALE)
    assert a.write(150) == ("error", OFPET_BAD_REQUEST, OFPBRC_IS_SLAVE)
    # the same generation again (a master re-claiming after etcd came back) is not stale
    assert b.role(250, M, 6) == ("reply", M, 6)
