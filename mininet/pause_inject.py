"""802.3x PAUSE and 802.1Qbb PFC frames that arrive at a switch port as if its neighbour had sent them.

A frame for ``switch:port`` is written (AF_PACKET, root namespace) into the interface at the *other*
end of the link; the veth carries it to ``switch-ethPORT``. :func:`inject_pause` sends one frame from
this process; :class:`PauseTrain` sends a train from a separate process (:data:`PAUSE_TRAIN_SCRIPT`),
as a congested receiver refreshes its PAUSE before it expires; :func:`pause_plan` sizes that train.
(Emulated congestion -- PAUSE from queue backlogs -- is ``lossless.py``'s; other MAC control frames
such as PFC belong there.)
"""

from __future__ import annotations

import math
import re
import select
import signal
import socket
import subprocess
import sys
import time

from fabric_topo import FabricNetError, intf_name  # mininet/fabric_topo.py
from runkit import CheckFailed

from hpcfabric.protocols.pause import QUANTUM_BITS, build_pause, build_pfc
from hpcfabric.topology.model import Fabric

MAX_QUANTA = 0xFFFF


def peer_intf(fabric: Fabric, switch: str, port: int, prefix: str = "") -> str:
    """Root-namespace interface at the other end of fabric port ``switch:port`` (FabricNetError otherwise)."""
    peer = fabric.peer(switch, port)
    if peer is None:
        raise FabricNetError(f"port {port} of {switch} is not connected")
    if peer.is_host or peer.port is None:
        raise FabricNetError(f"port {port} of {switch} leads to host {peer.node}: inject PAUSE on fabric ports only")
    return intf_name(peer.node, peer.port, prefix)


def pfc_vector(classes: tuple[int, ...] | list[int]) -> int:
    """The PFC class-enable vector of ``classes`` (priorities 0..7)."""
    if not all(0 <= c <= 7 for c in classes):
        raise FabricNetError(f"PFC priorities must be 0..7, got {list(classes)}")
    return sum(1 << c for c in set(classes))


def inject_pause(
    fabric: Fabric, switch: str, port: int, quanta: int, *, prefix: str = "", src: bytes | None = None,
    pfc_classes: tuple[int, ...] = (),
) -> bytes:
    """Make an 802.3x PAUSE frame (with ``pfc_classes``: a PFC frame pausing those priorities) arrive at
    ``switch`` on ``port`` (a fabric port).

    ``src`` defaults to the peer interface's MAC. Returns the frame.
    """
    iface = peer_intf(fabric, switch, port, prefix)
    if src is None:
        with open(f"/sys/class/net/{iface}/address") as f:
            src = bytes.fromhex(f.read().strip().replace(":", ""))
    frame = build_pfc(src, {c: quanta for c in pfc_classes}) if pfc_classes else build_pause(src, quanta)
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as sock:
        sock.bind((iface, 0))
        sock.send(frame)
    return frame


def pause_plan(link_speed_gbps: float, hold_s: float, quanta: int | None, interval_s: float | None = None) -> dict[str, float]:
    """Quanta per frame, one frame's pause time, refresh interval and frame count for a ``hold_s`` pause.

    One 802.3x frame pauses at most 65535 quanta (3.4 ms at 10 Gb/s): a longer
    pause is a train of frames, each sent before the previous one expires,
    as a congested receiver does.
    """
    bps = link_speed_gbps * 1e9
    if quanta is None:
        quanta = min(MAX_QUANTA, max(1, math.ceil(hold_s * bps / QUANTUM_BITS)))
    one = quanta * QUANTUM_BITS / bps
    if one >= hold_s:
        return {"quanta": quanta, "frame_s": one, "interval_s": 0.0, "frames": 1, "hold_s": one}
    interval = interval_s if interval_s else max(0.0005, one / 3)
    return {"quanta": quanta, "frame_s": one, "interval_s": interval, "frames": math.ceil(hold_s / interval), "hold_s": hold_s}


#: Stand-alone (stdlib only, starts in ~20 ms) PAUSE sender, run as
#: ``python -c PAUSE_TRAIN_SCRIPT IFACE QUANTA INTERVAL_S HOLD_S [VECTOR]``: sends one
#: 802.3x PAUSE frame (with a non-zero VECTOR: a PFC frame pausing those priorities) into IFACE, prints ``first T``, then one every INTERVAL_S
#: until HOLD_S has passed (none if INTERVAL_S <= 0) and prints
#: ``last T count N``; T on CLOCK_MONOTONIC (= time.monotonic() in any
#: process). SIGTERM stops it early. A separate process, because a thread
#: shares the GIL with the caller and could be held back for the 5 ms switch
#: interval, longer than one frame's pause at 10 Gb/s (3.4 ms). While sending
#: it runs SCHED_FIFO (best effort) so the spacing stays tight on a busy box.
PAUSE_TRAIN_SCRIPT = r"""
import os, signal, socket, struct, sys, time
iface, quanta, interval, hold = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
with open("/sys/class/net/%s/address" % iface) as f:
    src = bytes.fromhex(f.read().strip().replace(":", ""))
vector = int(sys.argv[5]) if len(sys.argv) > 5 else 0
if vector:  # PFC (802.1Qbb): opcode 0x0101, class-enable vector, eight per-priority times
    times = [quanta if vector >> i & 1 else 0 for i in range(8)]
    frame = (bytes.fromhex("0180c2000001") + src + struct.pack("!HHH8H", 0x8808, 0x0101, vector, *times)).ljust(60, b"\0")
else:  # 802.3x PAUSE: opcode 0x0001, one time
    frame = (bytes.fromhex("0180c2000001") + src + struct.pack("!HHH", 0x8808, 1, quanta)).ljust(60, b"\0")
try:
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
except (AttributeError, OSError):
    pass
sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
sock.bind((iface, 0))
sock.send(frame)
first = last = time.monotonic()
count = 1
print("first %.9f" % first, flush=True)
if interval > 0:
    end, nxt = first + hold, first + interval
    while not stop:
        now = time.monotonic()
        if now >= end:
            break
        if nxt > now:
            time.sleep(nxt - now)
            continue
        sock.send(frame)
        last = time.monotonic()
        count += 1
        nxt += interval
        if nxt < last:
            nxt = last + interval
try:
    os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
except (AttributeError, OSError):
    pass
print("last %.9f count %d" % (last, count), flush=True)
"""


class PauseTrain:
    """A PAUSE train sent by a separate process (:data:`PAUSE_TRAIN_SCRIPT`) into ``switch:port``."""

    def __init__(self, fabric: Fabric, switch: str, port: int, quanta: int, interval: float, hold: float, prefix: str = "",
                 pfc_classes: tuple[int, ...] = ()):
        self.iface = peer_intf(fabric, switch, port, prefix)
        #: PFC class-enable vector (0: 802.3x PAUSE frames)
        self.vector = pfc_vector(pfc_classes)
        self.args = [sys.executable, "-c", PAUSE_TRAIN_SCRIPT, self.iface, str(quanta), repr(interval), repr(hold),
                     str(self.vector)]
        self.proc: subprocess.Popen | None = None
        self.first = self.last = 0.0
        self.sent = 0

    def start(self, timeout: float = 10.0) -> float:
        """Start the sender; returns the monotonic time of the first frame."""
        self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = ""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            ready_, _, _ = select.select([self.proc.stdout], [], [], max(0.0, end - time.monotonic()))
            if ready_:
                line = self.proc.stdout.readline()  # type: ignore[union-attr]
                break
        if not line.startswith("first "):
            err = self.proc.stderr.read() if self.proc.poll() is not None else ""  # type: ignore[union-attr]
            self.stop()
            raise CheckFailed(f"PAUSE sender did not start: {line.strip()} {err.strip()[-300:]}")
        self.first = self.last = float(line.split()[1])
        return self.first

    def join(self, timeout: float | None = None) -> None:
        if self.proc is None:
            return
        try:
            out, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            return
        m = re.search(r"last ([\d.]+) count (\d+)", out or "")
        if m:
            self.last, self.sent = float(m.group(1)), int(m.group(2))

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.join(5)
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(5)
