"""One emulator process: a slice of the fabric's switches on one asyncio loop, each on its own TCP connection.

:class:`EmuProcess` connects the switches it owns (``index`` of ``procs``
contiguous slices of the fabric) to their controller, answers the
controller through :class:`~hpcfabric.emu.switch.EmuSwitch`, and delivers
packet-outs along the fabric's cabling: to a local switch as a packet-in at
the peer port, to a switch of another emulator process as one UDP datagram
(``udp_base + process``). It reconnects a switch whose connection closes
(a controller restart finds the tables it left).

It is driven by JSON lines on stdin and answers with JSON lines on stdout:
``{"op": "stats"}``, ``{"op": "pause", "switch": S, "port": P, "quanta": Q,
"id": N}`` (a PAUSE frame punted as a packet-in; the next flow-mod the switch
receives is reported as ``{"ev": "reaction", "id": N, "us": ..., "switch_us": ...}``, ``switch_us`` the
switch's own CPU in it: building, encrypting and writing the packet-in, decrypting and parsing the flow-mod),
``{"op": "pfc", ...}``, ``{"op": "port", "switch": S, "port": P, "up": false}``
(both ends of the cable change state and send port status),
``{"op": "frame", "switch": S, "port": P, "data": HEX}`` (any frame punted as a packet-in, e.g. a
forged LLDP), ``{"op": "dump", "switch": S}`` and ``{"op": "quit"}``.

With ``--tls-ca`` it connects over TLS (:class:`~hpcfabric.emu.tls.TlsClient`; the
controller's certificate verified against that CA, no host name check, as Open vSwitch does) presenting each
switch's own certificate from ``--tls-dir`` (``NAME-cert.pem`` /
``NAME-privkey.pem``, ovs-pki's names) or one certificate for all
(``--tls-cert`` / ``--tls-key``: an impostor's, in the tests).
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import resource
import ssl
import struct
import sys
import time
from pathlib import Path
from typing import Any

from hpcfabric.emu import wire as W
from hpcfabric.emu.switch import EmuSwitch, Port
from hpcfabric.emu.tls import TlsClient
from hpcfabric.protocols.pause import build_pause, build_pfc

#: connects (TCP connect, TLS handshake, the controller's HELLO) in flight per emulator process, by default
CONNECTS = 32

def hw_addr(dpid: int, port: int) -> bytes:
    return bytes([0x02, dpid >> 16 & 0xFF, dpid >> 8 & 0xFF, dpid & 0xFF, port >> 8 & 0xFF, port & 0xFF])


def owner(i: int, total: int, procs: int) -> int:
    """Process that owns switch number ``i`` of ``total`` (contiguous slices)."""
    return i * procs // total


class Conn(asyncio.Protocol):
    """One OpenFlow connection of one switch (to its controller, or a management client such as ovs-ofctl)."""

    def __init__(self, proc: "EmuProcess", sw: EmuSwitch, managed: bool = True) -> None:
        self.proc, self.sw, self.managed = proc, sw, managed
        self.buf = bytearray()
        self.transport: Any = None
        self.greeted = False  # the controller's HELLO arrived
        #: the thread's CPU clock when this data_received's bytes left the socket (set by a TLS client before it
        #: decrypts them)
        self.received_cpu = 0.0

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        if self.managed:
            self.proc.conns[self.sw.name] = self
        transport.write(W.hello())

    def connection_lost(self, exc: Any) -> None:
        if self.managed and self.proc.conns.get(self.sw.name) is self:
            del self.proc.conns[self.sw.name]
            self.sw.role, self.sw.generation = 1, None
            if self.proc.running:
                asyncio.get_event_loop().call_later(0.5, self.proc.connect, self.sw)

    def data_received(self, data: bytes) -> None:
        at = self.received_cpu or time.thread_time()
        self.received_cpu = 0.0
        buf = self.buf
        buf += data
        out: list[bytes] = []
        pos = 0
        n = len(buf)
        sw = self.sw
        proc = self.proc
        while n - pos >= 8:
            length = buf[pos + 2] << 8 | buf[pos + 3]
            if length < 8:
                self.transport.close()
                return
            if n - pos < length:
                break
            mtype = buf[pos + 1]
            if not self.greeted:
                self.greeted = True
                if self.managed:
                    proc.handshake_done()
            xid = struct.unpack_from("!I", buf, pos + 4)[0]
            msg = bytes(buf[pos:pos + length])
            pos += length
            out.extend(sw.handle(mtype, xid, msg))
            if mtype == W.FLOW_MOD and self.managed:
                proc.flow_mod_seen(sw, at)
            elif mtype == W.EXPERIMENTER and self.managed:
                proc.last_write = time.monotonic()
        del buf[:pos]
        if out:
            self.transport.write(b"".join(out))

    def send(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)


class Datagrams(asyncio.DatagramProtocol):
    def __init__(self, proc: "EmuProcess") -> None:
        self.proc = proc

    def datagram_received(self, data: bytes, addr: Any) -> None:
        dpid, port = struct.unpack_from("!QI", data, 0)
        self.proc.deliver(dpid, port, data[12:])


class EmuProcess:
    """Switches ``index`` of ``procs`` of ``fabric``; ``targets``: switch name -> (host, port) of its controller."""

    def __init__(self, fabric: Any, index: int, procs: int, targets: dict[str, tuple[str, int]],
                 default: tuple[str, int], udp_base: int, mgmt_base: int = 0,
                 tls: dict[str, str] | None = None, connects: int = CONNECTS) -> None:
        self.fabric = fabric
        self.index, self.procs = index, procs
        self.targets, self.default = targets, default
        self.udp_base, self.mgmt_base = udp_base, mgmt_base
        names = [s.name for s in fabric.switches]
        self.owner = {name: owner(i, len(names), procs) for i, name in enumerate(names)}
        self.dpid_of = {s.name: s.dpid for s in fabric.switches}
        self.switches: dict[str, EmuSwitch] = {}
        self.by_dpid: dict[int, EmuSwitch] = {}
        for s in fabric.switches:
            if self.owner[s.name] != index:
                continue
            ports = {p: Port(p, hw_addr(s.dpid, p), f"{s.name[:10]}-p{p}") for p in fabric.ports(s.name)}
            sw = EmuSwitch(s.name, s.dpid, ports, self.output)
            self.switches[s.name] = sw
            self.by_dpid[s.dpid] = sw
        self.conns: dict[str, Conn] = {}
        self.running = True
        self.udp: Any = None
        self.pending: dict[str, tuple[int, float]] = {}  # switch -> (id, injected at)
        self.counts = {"packet_ins": 0, "delivered_remote": 0, "host_frames": 0, "dropped_unconnected": 0,
                       "port_status": 0}
        self.last_write = 0.0
        self.mgmt_servers: list[Any] = []
        self.stdin_buf = b""
        self.waiting: collections.deque[EmuSwitch] = collections.deque()
        self.in_flight = 0
        self.max_in_flight = max(1, connects)
        self.tls = tls  # {"ca": ..., "dir": ...} or {"ca": ..., "cert": ..., "key": ...}
        self.contexts: dict[str, ssl.SSLContext] = {}

    # ----------------------------------------------------------- wiring
    def output(self, sw: EmuSwitch, port: int, data: bytes) -> None:
        peer = self.fabric.peer(sw.name, port)
        if peer is None or peer.is_host or peer.port is None:
            self.counts["host_frames"] += 1
            return
        dpid = self.dpid_of[peer.node]
        if self.owner[peer.node] == self.index:
            self.deliver(dpid, peer.port, data)
        else:
            self.counts["delivered_remote"] += 1
            self.udp.sendto(struct.pack("!QI", dpid, peer.port) + data,
                            ("127.0.0.1", self.udp_base + self.owner[peer.node]))

    def deliver(self, dpid: int, port: int, data: bytes) -> None:
        sw = self.by_dpid.get(dpid)
        if sw is None:
            return
        p = sw.ports.get(port)
        if p is None or p.state & W.OFPPS_LINK_DOWN:
            return
        self.packet_in(sw, port, data)

    def packet_in(self, sw: EmuSwitch, port: int, data: bytes) -> None:
        conn = self.conns.get(sw.name)
        if conn is None:
            self.counts["dropped_unconnected"] += 1
            return
        self.counts["packet_ins"] += 1
        conn.send(W.packet_in(port, data))

    def flow_mod_seen(self, sw: EmuSwitch, cpu_at: float) -> None:
        """A flow-mod parsed now, its bytes read when the thread's CPU clock read ``cpu_at``: a pending PAUSE's
        reaction, reported with ``switch_us``, the switch's own CPU in it (packet-in built, encrypted and
        written; the flow-mod's bytes decrypted and parsed), not the time it waited for a CPU."""
        now = time.monotonic()
        self.last_write = now
        got = self.pending.pop(sw.name, None)
        if got is not None:
            self.emit({"ev": "reaction", "id": got[0], "switch": sw.name, "us": round((now - got[1]) * 1e6, 1),
                       "switch_us": round((got[2] + time.thread_time() - cpu_at) * 1e6, 1), "wall": time.time()})

    # ---------------------------------------------------------- connecting
    def connect(self, sw: EmuSwitch) -> None:
        """Connect ``sw`` once a handshake slot is free (a burst of thousands of connects overflows the
        controller's listen backlog); a connection that is not greeted within 10 s is retried."""
        if not self.running:
            return
        self.waiting.append(sw)
        self.next_connect()

    def handshake_done(self) -> None:
        self.in_flight = max(0, self.in_flight - 1)
        self.next_connect()

    def next_connect(self) -> None:
        loop = asyncio.get_event_loop()
        while self.waiting and self.in_flight < self.max_in_flight:
            sw = self.waiting.popleft()
            self.in_flight += 1
            loop.create_task(self.open(sw))

    async def open(self, sw: EmuSwitch) -> None:
        loop = asyncio.get_event_loop()
        host, port = self.targets.get(sw.name, self.default)
        ctx = self.contexts.get(sw.name)
        conn = Conn(self, sw)
        try:
            if ctx is None:
                await asyncio.wait_for(loop.create_connection(lambda: conn, host, port), 10)
            else:  # the handshake within the same 10 s
                async def handshake() -> None:
                    _, tls = await loop.create_connection(lambda: TlsClient(ctx, conn), host, port)
                    try:
                        await tls.ready
                    except BaseException:
                        tls.transport.close()
                        raise
                await asyncio.wait_for(handshake(), 10)
        except (OSError, asyncio.TimeoutError):
            self.handshake_done()
            loop.call_later(0.5, self.connect, sw)
            return
        await asyncio.sleep(10)
        if not conn.greeted and conn.transport is not None:
            self.handshake_done()
            conn.transport.close()  # connection_lost reconnects

    def tls_contexts(self) -> None:
        """One client context per switch (its certificate; the controller's verified against the CA)."""
        tls = self.tls
        if not tls or self.contexts:
            return
        shared = None
        for name in self.switches:
            if shared is None or "cert" not in tls:
                ctx = ssl.create_default_context(cafile=tls["ca"])
                ctx.check_hostname = False  # like Open vSwitch: the CA decides, not the address
                if "cert" in tls:
                    ctx.load_cert_chain(tls["cert"], tls["key"])
                    shared = ctx
                else:
                    d = Path(tls["dir"])
                    ctx.load_cert_chain(d / f"{name}-cert.pem", d / f"{name}-privkey.pem")
            self.contexts[name] = shared or ctx

    async def start(self) -> None:
        loop = asyncio.get_event_loop()
        self.tls_contexts()
        self.udp, _ = await loop.create_datagram_endpoint(lambda: Datagrams(self),
                                                          local_addr=("127.0.0.1", self.udp_base + self.index))
        if self.mgmt_base:
            for i, s in enumerate(self.fabric.switches):
                sw = self.switches.get(s.name)
                if sw is not None:
                    server = await loop.create_server(lambda sw=sw: Conn(self, sw, managed=False), "127.0.0.1",
                                                      self.mgmt_base + i)
                    self.mgmt_servers.append(server)
        # interleave the partitions' controllers: connecting in fabric order would queue every other
        # partition behind the first one's handshakes
        by_target: dict[tuple[str, int], list[EmuSwitch]] = {}
        for sw in self.switches.values():
            by_target.setdefault(self.targets.get(sw.name, self.default), []).append(sw)
        lists = list(by_target.values())
        for k in range(max(map(len, lists), default=0)):
            for lst in lists:
                if k < len(lst):
                    self.connect(lst[k])
        loop.add_reader(sys.stdin.fileno(), self.command_ready)
        ru = resource.getrusage(resource.RUSAGE_SELF)  # TLS: the switches' contexts loaded, before any connect
        self.emit({"ev": "started", "index": self.index, "switches": len(self.switches),
                   "cpu_s": round(ru.ru_utime + ru.ru_stime, 3)})

    # ------------------------------------------------------------ commands
    def emit(self, obj: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    def command_ready(self) -> None:
        # raw reads: a buffered readline would leave further lines in its buffer with the fd no longer readable
        chunk = os.read(sys.stdin.fileno(), 1 << 16)
        if not chunk:
            self.stop()
            return
        self.stdin_buf += chunk
        *lines, rest = self.stdin_buf.split(b"\n")
        self.stdin_buf = rest
        for raw in lines:
            line = raw.decode("utf-8", "replace")
            if not line.strip():
                continue
            try:
                self.command(json.loads(line))
            except Exception as err:  # noqa: BLE001 - the driver gets the error, the switches keep running
                self.emit({"ev": "error", "error": repr(err), "line": line.strip()})

    def command(self, cmd: dict[str, Any]) -> None:
        op = cmd.get("op")
        if op == "stats":
            self.emit(self.stats())
        elif op in ("pause", "pfc"):
            sw = self.switches[cmd["switch"]]
            port = int(cmd["port"])
            src = sw.ports[port].hw
            q = int(cmd.get("quanta", 0xFFFF))
            frame = build_pause(src, q) if op == "pause" else build_pfc(src, {int(cmd.get("prio", 0)): q})
            t0, cpu0 = time.monotonic(), time.thread_time()
            self.packet_in(sw, port, frame)
            if "id" in cmd:  # (id, injected at, CPU seconds to build, encrypt and write the packet-in)
                self.pending[sw.name] = (int(cmd["id"]), t0, time.thread_time() - cpu0)
        elif op == "frame":
            sw = self.switches[cmd["switch"]]
            self.packet_in(sw, int(cmd["port"]), bytes.fromhex(cmd["data"]))
        elif op == "port":
            self.port_state(cmd["switch"], int(cmd["port"]), bool(cmd.get("up")), cmd.get("peer", True))
        elif op == "dump":
            sw = self.switches[cmd["switch"]]
            self.emit({"ev": "dump", "switch": sw.name,
                       "flows": [[t, p, m.hex(), f.cookie, f.instructions.hex()] for (t, p, m), f in sw.flows.items()]})
        elif op == "quit":
            self.stop()
        else:
            raise ValueError(f"unknown op {op!r}")

    def port_state(self, name: str, port: int, up: bool, peer: bool = True) -> None:
        sw = self.switches.get(name)
        if sw is not None:
            p = sw.ports[port]
            p.state = 0 if up else W.OFPPS_LINK_DOWN
            conn = self.conns.get(name)
            if conn is not None:
                self.counts["port_status"] += 1
                conn.send(W.port_status(W.OFPPR_MODIFY, p.encode()))
        if peer:
            other = self.fabric.peer(name, port)
            if other is not None and not other.is_host and other.port is not None:
                if self.owner[other.node] == self.index:
                    self.port_state(other.node, other.port, up, peer=False)
                # a peer in another process is told by the driver (it sends the op to every process)

    def stats(self) -> dict[str, Any]:
        c: dict[str, int] = {}
        flows = 0
        for sw in self.switches.values():
            flows += len(sw.flows)
            for k, v in sw.counts.items():
                c[k] = c.get(k, 0) + v
        ru = resource.getrusage(resource.RUSAGE_SELF)
        return {"ev": "stats", "index": self.index, "switches": len(self.switches), "connected": len(self.conns),
                "flows": flows, **c, **self.counts, "cpu_s": round(ru.ru_utime + ru.ru_stime, 3),
                "rss_mb": round(ru.ru_maxrss / 1024, 1), "last_write": self.last_write, "now": time.monotonic()}

    def stop(self) -> None:
        self.running = False
        for conn in list(self.conns.values()):
            if conn.transport is not None:
                conn.transport.close()
        asyncio.get_event_loop().stop()


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m hpcfabric.emu", description="Emulated OpenFlow 1.3 switches of a fabric")
    ap.add_argument("--topology", required=True)
    ap.add_argument("--index", type=int, default=0)
    ap.add_argument("--procs", type=int, default=1)
    ap.add_argument("--connect", default="127.0.0.1:6653", help="controller HOST:PORT")
    ap.add_argument("--connect-map", default="", help="JSON file {switch: port} (partitioned controllers)")
    ap.add_argument("--udp-base", type=int, default=47000)
    ap.add_argument("--mgmt-base", type=int, default=0, help="switch i also listens at this port + i (ovs-ofctl)")
    ap.add_argument("--tls-ca", default="", help="connect over TLS; the CA of the controller's certificate")
    ap.add_argument("--tls-dir", default="", help="TLS: each switch's NAME-cert.pem / NAME-privkey.pem")
    ap.add_argument("--tls-cert", default="", help="TLS: one certificate for every switch (with --tls-key)")
    ap.add_argument("--tls-key", default="")
    ap.add_argument("--connects", type=int, default=CONNECTS, help="connects in flight (to HELLO) in this process")
    a = ap.parse_args(argv)
    from hpcfabric.errors import HpcfabricError
    from hpcfabric.topology.loader import load_topology

    try:
        fabric = load_topology(a.topology)
    except HpcfabricError as err:
        print(f"hpcfabric.emu: error: {err}", file=sys.stderr)
        return 2
    host, _, port = a.connect.rpartition(":")
    targets: dict[str, tuple[str, int]] = {}
    if a.connect_map:
        with open(a.connect_map, encoding="utf-8") as fh:
            targets = {k: (host, int(v)) for k, v in json.load(fh).items()}
    tls = None
    if a.tls_ca:
        tls = {"ca": a.tls_ca, "cert": a.tls_cert, "key": a.tls_key} if a.tls_cert else {"ca": a.tls_ca, "dir": a.tls_dir}
    proc = EmuProcess(fabric, a.index, a.procs, targets, (host, int(port)), a.udp_base, a.mgmt_base, tls, a.connects)
    try:
        proc.tls_contexts()
    except (OSError, ssl.SSLError) as err:
        print(f"hpcfabric.emu: error: TLS: {err}", file=sys.stderr)
        return 2
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    loop.run_until_complete(proc.start())
    try:
        loop.run_forever()
    finally:
        os._exit(0)  # noqa: SLF001 - sockets are closed by the kernel; no slow interpreter teardown
    return 0
