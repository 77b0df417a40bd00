"""Lossless-link emulation for Mininet fabrics: shaped fabric links and a PAUSE emulator.

Userspace Open vSwitch on veth pairs neither limits a link's rate nor honours
802.3x PAUSE. This module makes fabric links behave enough like lossless HPC
links for conditional rules to matter:

* :func:`shape_links` puts an htb shaper (``rate``) with a byte-limited FIFO
  (``bfifo limit``) on the egress of every fabric-link interface, so a link
  has a capacity and a queue. Host links stay unshaped.
* :class:`PauseEmulator` (run as its own process: ``python lossless.py``)
  polls every shaped queue's backlog over rtnetlink (one dump for all of
  them) and plays the lossless receiver of that link: when the backlog of
  ``s:x -> t:y`` reaches ``xoff_bytes`` it writes an 802.3x PAUSE (XOFF,
  ``quanta``) -- or, with ``pfc_classes`` (``--pfc-classes``), a PFC frame
  (802.1Qbb, opcode 0x0101) pausing the classes of service in use -- into ``t-ethy``, so switch ``s`` receives it on port ``x``;
  it repeats the XOFF every ``refresh_s`` while the backlog stays above
  ``xon_bytes`` and sends XON (quanta 0) once it drains below. Frames are
  written with ``PACKET_QDISC_BYPASS`` so a PAUSE never waits behind data
  in the reverse direction's shaper (MAC control frames bypass queues in a
  real NIC too).

What it does not emulate: the paused switch does not actually stop sending
(OVS cannot); the queue keeps absorbing until ``limit_bytes`` and then drops,
where a real lossless fabric would hold the frames further upstream. Such
drops are reported as loss. See docs/experiments.md.

The emulator's time scale follows the link rate: at 1 Mbit/s one 1,000-byte
frame takes 8 ms on the wire, so a 2–5 ms poll is well inside one frame
time -- which is why the experiments shape links to a few Mbit/s.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

from hpcfabric.protocols.pause import build_pause, build_pfc

#: htb/bfifo handles used by :func:`shape_links` (the leaf FIFO is what the emulator watches)
ROOT_HANDLE = "1:"
LEAF_HANDLE = "10:"
LEAF_HANDLE_ID = 0x00100000  # tc reads "10:" as hex
SOL_PACKET = 263
PACKET_QDISC_BYPASS = 20


class LosslessError(RuntimeError):
    """A shaping or emulator setup step failed (message says which interface and command)."""


@dataclass(frozen=True)
class ShapedLink:
    """One direction of a fabric link: the queue on ``iface`` (switch ``switch`` port ``port``)
    feeds neighbour ``peer`` port ``peer_port`` through interface ``peer_iface``."""

    switch: str
    port: int
    iface: str
    peer: str
    peer_port: int
    peer_iface: str


@dataclass(frozen=True)
class LinkShape:
    """Rate and queue of every shaped fabric link."""

    rate_mbit: float
    limit_bytes: int
    burst_bytes: int = 1600


def fabric_directions(fabric: Any, prefix: str = "") -> list[ShapedLink]:
    """Both directions of every switch-switch link of ``fabric`` (interface names as Mininet makes them)."""
    out = []
    for link in fabric.links:
        a = f"{prefix}{link.a}-eth{link.a_port}"
        b = f"{prefix}{link.b}-eth{link.b_port}"
        out.append(ShapedLink(link.a, link.a_port, a, link.b, link.b_port, b))
        out.append(ShapedLink(link.b, link.b_port, b, link.a, link.a_port, a))
    return out


def shape_links(links: Iterable[ShapedLink], shape: LinkShape) -> int:
    """Install ``htb rate`` + ``bfifo limit`` on the egress of every link direction (idempotent: replaces).

    Uses one ``tc -batch`` for speed. Returns the number of interfaces shaped.
    """
    lines = []
    n = 0
    rate = f"{shape.rate_mbit * 1000:.0f}kbit"
    for link in links:
        dev = link.iface
        lines += [
            f"qdisc replace dev {dev} root handle {ROOT_HANDLE} htb default 1",
            f"class replace dev {dev} parent {ROOT_HANDLE} classid 1:1 htb rate {rate} ceil {rate} "
            f"burst {shape.burst_bytes} cburst {shape.burst_bytes}",
            f"qdisc replace dev {dev} parent 1:1 handle {LEAF_HANDLE} bfifo limit {shape.limit_bytes}",
        ]
        n += 1
    if not lines:
        return 0
    res = subprocess.run(["tc", "-force", "-batch", "-"], input="\n".join(lines) + "\n", capture_output=True, text=True)
    if res.returncode:
        raise LosslessError(f"tc -batch (shaping {n} interfaces) failed: {res.stderr.strip()[-400:]}")
    return n


# ---------------------------------------------------------------------------
# rtnetlink qdisc statistics


NETLINK_ROUTE = 0
RTM_NEWQDISC = 36
RTM_GETQDISC = 38
NLM_F_REQUEST = 0x1
NLM_F_DUMP = 0x300
NLMSG_DONE = 3
NLMSG_ERROR = 2
TCA_STATS = 3
_NLMSG = struct.Struct("=IHHII")
_TCMSG = struct.Struct("=BxxxiIII")
_NLA = struct.Struct("=HH")
_HANDLE = struct.Struct("=iI")  # tcmsg ifindex, handle: 4 bytes into the tcmsg
_TC_STATS = struct.Struct("=12xI12xII")  # struct tc_stats: drops, qlen, backlog


@dataclass(frozen=True)
class QueueStats:
    """One qdisc's queue counters."""

    qlen: int
    backlog: int
    drops: int


def parse_qdisc_dump(chunks: Iterable[bytes], handle: int) -> tuple[dict[int, QueueStats], bool]:
    """(ifindex -> queue stats of the qdiscs with ``handle``, dump finished?) from RTM_NEWQDISC messages.

    Reads the top-level ``TCA_STATS`` (struct tc_stats: drops at byte 12,
    qlen at 28, backlog at 32), which every qdisc dump carries, so no nested
    attribute walk is needed: one pass over a few hundred qdiscs in ~1 ms.
    """
    out: dict[int, QueueStats] = {}
    done = False
    nlmsg = _NLMSG.unpack_from
    handle_at = _HANDLE.unpack_from
    nla = _NLA.unpack_from
    stats = _TC_STATS.unpack_from
    for buf in chunks:
        pos, end = 0, len(buf)
        while pos + 16 <= end:
            length, kind = nlmsg(buf, pos)[:2]
            if length < 16:
                done = True
                break
            if kind == RTM_NEWQDISC:
                ifindex, qhandle = handle_at(buf, pos + 20)
                if qhandle == handle:
                    a, stop = pos + 16 + _TCMSG.size, pos + length
                    while a + 4 <= stop:
                        alen, atype = nla(buf, a)
                        if alen < 4:
                            break
                        if atype & 0x3FFF == TCA_STATS and alen >= 4 + _TC_STATS.size:
                            drops, qlen, backlog = stats(buf, a + 4)
                            out[ifindex] = QueueStats(qlen, backlog, drops)
                            break
                        a += (alen + 3) & ~3
            elif kind in (NLMSG_DONE, NLMSG_ERROR):
                done = True
                break
            pos += (length + 3) & ~3
    return out, done


class QdiscReader:
    """Dumps every qdisc's stats with one rtnetlink request (much faster than ``tc -s``)."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
        self.sock.bind((0, 0))
        self.seq = 0

    def read(self, handle: int = LEAF_HANDLE_ID) -> dict[int, QueueStats]:
        self.seq += 1
        req = _NLMSG.pack(_NLMSG.size + _TCMSG.size, RTM_GETQDISC, NLM_F_REQUEST | NLM_F_DUMP, self.seq, 0)
        req += _TCMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0)
        self.sock.send(req)
        out: dict[int, QueueStats] = {}
        while True:
            part, done = parse_qdisc_dump((self.sock.recv(1 << 20),), handle)
            out.update(part)
            if done:
                return out

    def close(self) -> None:
        self.sock.close()


def ifindex(iface: str) -> int:
    try:
        with open(f"/sys/class/net/{iface}/ifindex") as f:
            return int(f.read())
    except OSError as err:
        raise LosslessError(f"interface {iface} does not exist ({err.strerror})") from None


# ---------------------------------------------------------------------------
# the emulator


@dataclass(frozen=True)
class PauseSettings:
    """Thresholds of the emulated lossless receivers (bytes of backlog in the link's queue)."""

    xoff_bytes: int = 6000
    xon_bytes: int = 1500
    quanta: int = 0xFFFF
    refresh_s: float = 0.02
    poll_s: float = 0.002
    #: congestion spreading: a congested queue of switch s also pauses the fabric links *into* s
    spread: bool = False
    #: PFC (802.1Qbb) priorities paused per XOFF (the classes of service in use); () = 802.3x PAUSE
    pfc_classes: tuple[int, ...] = ()


def pause_frame(src: bytes, quanta: int, pfc_classes: Iterable[int] = ()) -> bytes:
    """The XOFF (``quanta`` > 0) or XON (0) frame from ``src``: an 802.3x PAUSE without ``pfc_classes``, else
    a PFC frame (802.1Qbb) pausing those priorities, each with ``quanta`` (:mod:`hpcfabric.protocols.pause`)."""
    classes = set(pfc_classes)
    try:
        return build_pfc(src, {c: quanta for c in classes}) if classes else build_pause(src, quanta)
    except ValueError:
        raise LosslessError(f"PFC priorities must be 0..7, got {sorted(classes)}") from None


@dataclass
class LinkState:
    link: ShapedLink
    ifindex: int
    sock: socket.socket
    xoff: bytes
    xon: bytes
    paused: bool = False
    congested: bool = False
    last_sent: float = 0.0
    xoff_frames: int = 0
    xon_frames: int = 0
    episodes: int = 0
    paused_s: float = 0.0
    since: float = 0.0
    max_backlog: int = 0
    drops0: int | None = None
    drops: int = 0


@dataclass
class EmulatorReport:
    """What the emulator did: totals and the per-link counters of links that paused or dropped."""

    polls: int = 0
    seconds: float = 0.0
    poll_ms_avg: float = 0.0
    xoff_frames: int = 0
    xon_frames: int = 0
    episodes: int = 0
    queue_drops: int = 0
    links: dict[str, dict[str, Any]] = field(default_factory=dict)


class PauseEmulator:
    """Plays the lossless receiver of every shaped link direction (see the module docstring)."""

    def __init__(self, links: Iterable[ShapedLink], settings: PauseSettings):
        self.settings = settings
        self.reader = QdiscReader()
        self.states: dict[int, LinkState] = {}
        for link in links:
            sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
            try:
                sock.setsockopt(SOL_PACKET, PACKET_QDISC_BYPASS, 1)
            except OSError:
                pass
            sock.bind((link.peer_iface, 0))
            with open(f"/sys/class/net/{link.peer_iface}/address") as f:
                src = bytes.fromhex(f.read().strip().replace(":", ""))
            idx = ifindex(link.iface)
            self.states[idx] = LinkState(link, idx, sock, pause_frame(src, settings.quanta, settings.pfc_classes),
                                         pause_frame(src, 0, settings.pfc_classes))

    def step(self, now: float) -> None:
        """One poll: read every backlog, send the XOFF/XON frames due.

        A link is congested from ``xoff_bytes`` until it drains to
        ``xon_bytes``. It is paused while congested -- and, with ``spread``,
        also while any other output queue of its receiving switch is
        congested (that switch's input buffers fill behind the congested
        output, so a lossless switch pauses its upstream neighbours:
        congestion spreads back hop by hop, as in a real PAUSE fabric).
        """
        st = self.settings
        stats = self.reader.read()
        for idx, q in stats.items():
            ls = self.states.get(idx)
            if ls is None:
                continue
            if ls.drops0 is None:
                ls.drops0 = q.drops
            ls.drops = q.drops - ls.drops0
            if q.backlog > ls.max_backlog:
                ls.max_backlog = q.backlog
            ls.congested = q.backlog >= st.xoff_bytes or (ls.congested and q.backlog > st.xon_bytes)
        if st.spread:
            hot: dict[str, set[int]] = {}
            for ls in self.states.values():
                if ls.congested:
                    hot.setdefault(ls.link.switch, set()).add(ls.link.port)
        for ls in self.states.values():
            want = ls.congested
            if st.spread and not want:
                ports = hot.get(ls.link.peer)
                want = bool(ports) and bool(ports - {ls.link.peer_port})
            if want:
                if not ls.paused:
                    ls.paused = True
                    ls.since = now
                    ls.episodes += 1
                    ls.last_sent = 0.0
                if now - ls.last_sent >= st.refresh_s:
                    ls.sock.send(ls.xoff)
                    ls.last_sent = now
                    ls.xoff_frames += 1
            elif ls.paused:
                ls.sock.send(ls.xon)
                ls.xon_frames += 1
                ls.paused = False
                ls.paused_s += now - ls.since

    def release(self, now: float) -> None:
        """XON every link still paused (the emulator is stopping)."""
        for ls in self.states.values():
            if ls.paused:
                try:
                    ls.sock.send(ls.xon)
                except OSError:
                    pass
                ls.xon_frames += 1
                ls.paused = False
                ls.paused_s += now - ls.since

    def report(self, polls: int, seconds: float, poll_time: float) -> EmulatorReport:
        rep = EmulatorReport(polls=polls, seconds=round(seconds, 3), poll_ms_avg=round(1000 * poll_time / max(polls, 1), 3))
        for ls in self.states.values():
            rep.xoff_frames += ls.xoff_frames
            rep.xon_frames += ls.xon_frames
            rep.episodes += ls.episodes
            rep.queue_drops += ls.drops
            if ls.episodes or ls.drops:
                rep.links[f"{ls.link.switch}:{ls.link.port}"] = {
                    "episodes": ls.episodes,
                    "xoff_frames": ls.xoff_frames,
                    "paused_s": round(ls.paused_s, 3),
                    "max_backlog": ls.max_backlog,
                    "drops": ls.drops,
                }
        return rep

    def run(self, stop: list[int], deadline: float | None = None) -> EmulatorReport:
        """Poll until ``stop`` is non-empty (a signal handler appends) or ``deadline`` (monotonic)."""
        polls, busy = 0, 0.0
        t0 = time.monotonic()
        while not stop:
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                break
            self.step(now)
            polls += 1
            spent = time.monotonic() - now
            busy += spent
            if spent < self.settings.poll_s:
                time.sleep(self.settings.poll_s - spent)
        end = time.monotonic()
        self.release(end)
        return self.report(polls, end - t0, busy)


def main(argv: list[str] | None = None) -> int:
    """``lossless.py LINKS_JSON [--xoff B --xon B --quanta Q --refresh-ms MS --poll-ms MS]``.

    LINKS_JSON holds a list of :class:`ShapedLink` dicts. Prints ``ready`` once
    set up, runs until SIGTERM/SIGINT, then prints one JSON report line.
    """
    ap = argparse.ArgumentParser(prog="lossless.py", description="PAUSE emulator for shaped Mininet fabric links")
    ap.add_argument("links", help="JSON file: list of shaped link directions")
    ap.add_argument("--xoff", type=int, default=PauseSettings.xoff_bytes, help="backlog (bytes) that sends XOFF")
    ap.add_argument("--xon", type=int, default=PauseSettings.xon_bytes, help="backlog (bytes) below which XON is sent")
    ap.add_argument("--quanta", type=int, default=PauseSettings.quanta, help="XOFF pause time, 512-bit-time quanta")
    ap.add_argument("--refresh-ms", type=float, default=PauseSettings.refresh_s * 1000, help="XOFF repeat interval")
    ap.add_argument("--poll-ms", type=float, default=PauseSettings.poll_s * 1000, help="backlog poll interval")
    ap.add_argument("--spread", action="store_true",
                    help="congestion spreading: a switch with a congested output also pauses its upstream fabric links")
    ap.add_argument("--realtime", action="store_true", help="run SCHED_FIFO (steadier polling on a busy machine)")
    ap.add_argument("--pfc-classes", default="", metavar="P,P,...",
                    help="send PFC (802.1Qbb) frames pausing these priorities (the classes of service in use) "
                         "instead of 802.3x PAUSE")
    args = ap.parse_args(argv)
    try:
        pfc = tuple(sorted({int(x) for x in args.pfc_classes.split(",") if x.strip()}))
    except ValueError:
        pfc = (-1,)
    if not all(0 <= c <= 7 for c in pfc):
        print(f"lossless.py: --pfc-classes must be priorities 0..7, got {args.pfc_classes!r}", file=sys.stderr)
        return 2
    if not 0 <= args.xon < args.xoff:
        print(f"lossless.py: need 0 <= --xon ({args.xon}) < --xoff ({args.xoff})", file=sys.stderr)
        return 2
    if not 0 < args.quanta <= 0xFFFF:
        print(f"lossless.py: --quanta must be 1..65535, got {args.quanta}", file=sys.stderr)
        return 2
    with open(args.links) as f:
        links = [ShapedLink(**d) for d in json.load(f)]
    settings = PauseSettings(args.xoff, args.xon, args.quanta, args.refresh_ms / 1000, args.poll_ms / 1000, args.spread,
                             pfc)
    stop: list[int] = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    try:
        emu = PauseEmulator(links, settings)
    except (OSError, LosslessError) as err:
        print(f"lossless.py: {err}", file=sys.stderr)
        return 1
    if args.realtime:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(5))
        except (AttributeError, OSError):
            pass
    print("ready", flush=True)
    rep = emu.run(stop)
    out = asdict(rep)
    out["settings"] = asdict(settings)
    print(json.dumps(out, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
