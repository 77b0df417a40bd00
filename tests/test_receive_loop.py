"""The datapath receive loop (hpcfabric.controller.receive) against the framework's own, on real green sockets:
the same events and handler calls in the same order whatever the read boundaries, no reference-cycle garbage
from idle read timeouts (the framework's loop makes some: the control), the hub given back during a burst, and
the loop ending on DEAD or when the switch closes."""

from __future__ import annotations

import gc
import random
import struct
import time

import eventlet
import pytest
from eventlet.green import socket as gsocket

from hpcfabric.controller import framework, receive
from hpcfabric.controller.framework import DEAD_DISPATCHER, MAIN_DISPATCHER, hub, ofp_event, ofproto as O
from hpcfabric.controller.framework import ofproto_parser as P, set_ev_handler
from hpcfabric.protocols.lldp import build_lldp
from hpcfabric.protocols.pause import build_pause

CONFIG_DISPATCHER = "config"


def wire(msg_type: int, xid: int, body: bytes = b"") -> bytes:
    return struct.pack("!BBHI", 4, msg_type, 8 + len(body), xid) + body


def packet_in(xid: int, frame: bytes, port: int = 3) -> bytes:
    mbuf = bytearray()
    P.OFPMatch(in_port=port).serialize(mbuf, 0)
    body = struct.pack("!IHBBQ", 0xFFFFFFFF, len(frame), 1, 0, 0) + bytes(mbuf) + b"\0\0" + frame
    return wire(O.OFPT_PACKET_IN, xid, body)


class Brick:
    """The ``ofp_event`` service as the loop sees it: observers' queue and handlers with dispatcher filters."""

    def __init__(self) -> None:
        self.observed: list[tuple[str, int, str]] = []
        self.handled: list[tuple[str, int]] = []
        self.work_s = 0.0  # busy time per handled message (a burst that costs something)

        @set_ev_handler([ofp_event.EventOFPPacketIn, ofp_event.EventOFPBarrierReply], MAIN_DISPATCHER)
        def main(ev):
            self.handled.append((type(ev.msg).__name__, ev.msg.xid))
            t = time.perf_counter()
            while time.perf_counter() - t < self.work_s:
                pass

        @set_ev_handler(ofp_event.EventOFPPacketIn, CONFIG_DISPATCHER)
        def config(ev):  # not for a datapath in MAIN
            self.handled.append(("config", ev.msg.xid))

        self.handlers = [main, config]

    def send_event_to_observers(self, ev, state) -> None:
        self.observed.append((type(ev).__name__, ev.msg.xid, state))

    def get_handlers(self, ev):
        return [h for h in self.handlers if type(ev) in h.callers]


class Dp:
    def __init__(self, sock) -> None:
        self.socket = sock
        self.state = MAIN_DISPATCHER
        self.ofp_brick = Brick()
        self.ofproto, self.ofproto_parser, self.id = O, P, 1


def framework_loop():
    """The framework's own receive loop (unbound), the control."""
    return framework._mod("controller.controller").Datapath._recv_loop  # noqa: SLF001 - the control under test


def run(loop, stream: bytes, chunks: list[int], timeout: float = 0.5) -> Dp:
    """Feed ``stream`` in ``chunks`` to ``loop`` over a green socket pair, then close: the dp it saw."""
    ours, peer = gsocket.socketpair()
    ours.settimeout(timeout)
    dp = Dp(ours)
    th = hub.spawn(loop, dp)
    pos = 0
    for n in chunks:
        peer.sendall(stream[pos:pos + n])
        pos += n
        eventlet.sleep(0.001)
    peer.sendall(stream[pos:])
    eventlet.sleep(0.01)
    peer.close()
    th.wait()
    ours.close()
    return dp


def mixed(n: int) -> bytes:
    lldp = build_lldp(0x12, 7, bytes.fromhex("020000aabbcc"), nonce=b"12345678")
    pause = build_pause(bytes.fromhex("020000aabbcd"), 0xFFFF)
    out = b""
    for i in range(n):
        out += packet_in(3 * i, lldp if i % 2 else pause, port=1 + i % 40)
        out += wire(O.OFPT_BARRIER_REPLY, 3 * i + 1)
        out += wire(O.OFPT_ECHO_REPLY, 3 * i + 2, b"x" * (i % 5))
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_same_events_and_handlers_as_the_framework_whatever_the_read_boundaries(seed):
    stream = mixed(60)
    rnd = random.Random(seed)
    chunks = [rnd.randint(1, 90) for _ in range(120)]  # headers and bodies cut anywhere
    ref = run(framework_loop(), stream, [len(stream)])
    got = run(receive.receive_loop, stream, chunks)
    assert len(ref.ofp_brick.observed) == 180
    assert got.ofp_brick.observed == ref.ofp_brick.observed
    assert got.ofp_brick.handled == ref.ofp_brick.handled
    assert len(got.ofp_brick.handled) == 120 and not any(k == "config" for k, _ in got.ofp_brick.handled)


def unreachable_after_idle(loop, idle_s: float = 0.3, timeout: float = 0.01) -> tuple[int, int]:
    """Cyclic garbage (objects a collection finds unreachable) left by ``loop`` idling on a socket that times
    out every ``timeout``, and how many reads it made; the loop then ends on DEAD without the peer closing."""
    ours, peer = gsocket.socketpair()
    ours.settimeout(timeout)
    dp = Dp(ours)
    reads = {"n": 0}
    real = ours.recv

    def counting(n):
        reads["n"] += 1
        return real(n)

    ours.recv = counting
    gc.collect()
    gc.disable()
    try:
        th = hub.spawn(loop, dp)
        eventlet.sleep(idle_s)
        dp.state = DEAD_DISPATCHER  # as Datapath.close() does: the loop notices at its next timeout
        th.wait()
        found = gc.collect()
    finally:
        gc.enable()
        peer.close()
        ours.close()
    return found, reads["n"]


def test_idle_read_timeouts_leave_no_cyclic_garbage():
    ref, ref_reads = unreachable_after_idle(framework_loop())
    got, reads = unreachable_after_idle(receive.receive_loop)
    assert ref_reads >= 10 and reads >= 10  # both timed out many times, and both ended on DEAD
    assert ref >= 5 * ref_reads  # the control: each timeout leaves a cycle the collector must find
    assert got < ref_reads  # none per timeout here


def ticks_during_burst(loop, messages: int, work_s: float) -> tuple[int, Dp]:
    """How often another green thread ran while ``loop`` handled ``messages`` buffered barrier replies."""
    stream = b"".join(wire(O.OFPT_BARRIER_REPLY, i) for i in range(messages))
    ours, peer = gsocket.socketpair()
    ours.settimeout(1.0)
    dp = Dp(ours)
    dp.ofp_brick.work_s = work_s
    peer.sendall(stream)  # all of it buffered before the loop starts
    ticks = {"n": 0, "stop": False}

    def ticker():
        while not ticks["stop"]:
            ticks["n"] += 1
            eventlet.sleep(0)

    t = hub.spawn(ticker)
    th = hub.spawn(loop, dp)
    eventlet.sleep(0)
    while len(dp.ofp_brick.handled) < messages:
        eventlet.sleep(0.001)
    during = ticks["n"]
    ticks["stop"] = True
    peer.close()
    th.wait()
    t.wait()
    ours.close()
    return during, dp


def test_a_burst_gives_the_hub_back_within_the_budget():
    work = 0.0002  # 100 messages x 0.2 ms = 20 ms of handling, 10 x YIELD_S
    ref_ticks, ref = ticks_during_burst(framework_loop(), 100, work)
    got_ticks, got = ticks_during_burst(receive.receive_loop, 100, work)
    assert [x for _, x in got.ofp_brick.handled] == list(range(100)) == [x for _, x in ref.ofp_brick.handled]
    assert ref_ticks <= 2  # the control: the framework holds the hub for the whole burst
    assert got_ticks >= 100 * work / receive.YIELD_S / 2


def test_installed_for_every_datapath_and_restored():
    cls = framework._mod("controller.controller").Datapath  # noqa: SLF001
    before = cls._recv_loop
    old = receive.install()
    try:
        assert old is before and cls._recv_loop is not before
    finally:
        framework.restore_receive_loop(old)
    assert cls._recv_loop is before
