#!/usr/bin/env python3
"""A PAUSE's two channel crossings, over plain TCP and over TLS, without a fabric: one JSON line.

The client is the emulated switch's side (asyncio; over TLS :class:`hpcfabric.emu.tls.TlsClient`), the
server the controller's (eventlet, in its own process; over TLS :class:`hpcfabric.controller.tls.TlsSocket`
after the same handshake, a client certificate required). The client writes a 110-byte message (a PAUSE
packet-in's size) every ``--gap-ms``; the server reads it as the controller's receive loop does (one ``recv``
of up to 64 KiB), hands a 96-byte answer (flip flow-mod + barrier) to a sender green thread through a queue
(the framework's send loop) which writes it; the client takes the time from its write to the answer's
arrival. So the figure is the end-to-end PAUSE reaction without the controller's handler and the fabric:
what the channel itself adds. ``--tls both`` runs TCP, then TLS, then TCP and TLS again (interleaved, so a
change in the machine's load shows as a difference between the rounds), each with a fresh connection.
``server_cpu_us`` / ``client_cpu_us``: each side's CPU per message (its process's CPU time over the run).

``records`` (also alone with ``--records-only``): what one record costs OpenSSL (``SSLObject.write`` on one end,
``SSLObject.read`` on the other, memory buffers, no sockets, one 110-byte message), back to back ("warm") and
with 4 MiB of other memory copied before each operation ("cold": caches and TLB filled with other work, as
they are when the controller's hub or an emulator gets to a PAUSE between its other work), and round-robin over
500 connections ("round_robin": OpenSSL's code warm, each connection's state not, as with thousands of switches).

    .venv/bin/python bench/tls_rtt.py [--messages 2000] [--gap-ms 2] [--tls both] [--records-only]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MSG, ANSWER = 110, 96


def serve(port_file: str, pki: str, tls: bool) -> None:
    """The controller's side: one connection, answered until it closes (eventlet, as the controller runs)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import eventlet
    eventlet.monkey_patch()
    import eventlet.queue

    from hpcfabric.controller.tls import TlsGate, TlsSocket

    lsock = eventlet.listen(("127.0.0.1", 0))
    Path(port_file).write_text(str(lsock.getsockname()[1]))
    sock, _ = lsock.accept()
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conn = sock
    if tls:
        args = {"certfile": f"{pki}/controller-cert.pem", "keyfile": f"{pki}/controller-privkey.pem",
                "ca_certs": f"{pki}/cacert.pem"}
        conn = TlsSocket(sock, TlsGate(lambda *a: None, lambda *a: None).context(args))
        conn.handshake(10.0, native=False)
    conn.settimeout(30)
    cpu0, count = time.process_time(), 0
    q: eventlet.queue.LightQueue = eventlet.queue.LightQueue()

    def sender() -> None:
        while True:
            data = q.get()
            if data is None:
                return
            conn.sendall(data)

    t = eventlet.spawn(sender)
    buf = bytearray()
    answer = bytes(ANSWER)
    while True:
        try:
            data = conn.recv(1 << 16)
        except OSError:
            break
        if not data:
            break
        buf += data
        while len(buf) >= MSG:
            del buf[:MSG]
            q.put(answer)
            count += 1
    q.put(None)
    t.wait()
    Path(port_file + ".cpu").write_text(str((time.process_time() - cpu0) / max(count, 1) * 1e6))


class Client(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport = None
        self.got = 0
        self.arrived: asyncio.Event = asyncio.Event()
        self.connected: asyncio.Future = asyncio.get_event_loop().create_future()

    def connection_made(self, transport) -> None:  # type: ignore[no-untyped-def]
        self.transport = transport
        if not self.connected.done():
            self.connected.set_result(True)

    def data_received(self, data: bytes) -> None:
        self.got += len(data)
        if self.got >= ANSWER:
            self.got -= ANSWER
            self.arrived.set()

    def connection_lost(self, exc) -> None:  # type: ignore[no-untyped-def]
        self.arrived.set()


async def measure(port: int, pki: str, tls: bool, n: int, gap: float) -> list[float]:
    from hpcfabric.emu.tls import TlsClient

    loop = asyncio.get_event_loop()
    client = Client()
    if tls:
        ctx = ssl.create_default_context(cafile=f"{pki}/cacert.pem")
        ctx.check_hostname = False
        ctx.load_cert_chain(f"{pki}/sw-cert.pem", f"{pki}/sw-privkey.pem")
        _, proto = await loop.create_connection(lambda: TlsClient(ctx, client), "127.0.0.1", port)
        await proto.ready
        transport = proto
    else:
        transport, _ = await loop.create_connection(lambda: client, "127.0.0.1", port)
    await client.connected
    msg = bytes(MSG)
    rtts = []
    for _ in range(n):
        client.arrived.clear()
        t0 = time.monotonic()
        transport.write(msg)
        await client.arrived.wait()
        rtts.append((time.monotonic() - t0) * 1e6)
        await asyncio.sleep(gap)
    transport.close()
    return rtts


def one(pki: str, tls: bool, n: int, gap: float) -> dict:
    with tempfile.TemporaryDirectory() as d:
        port_file = os.path.join(d, "port")
        srv = subprocess.Popen([sys.executable, __file__, "--serve", port_file, "--pki", pki] + (["--tls-on"] if tls else []))
        try:
            for _ in range(200):
                if os.path.exists(port_file) and Path(port_file).read_text():
                    break
                time.sleep(0.05)
            port = int(Path(port_file).read_text())
            cpu0 = time.process_time()
            rtts = asyncio.run(measure(port, pki, tls, n, gap))
            client_cpu = (time.process_time() - cpu0) / n * 1e6
            srv.wait(10)
            server_cpu = float(Path(port_file + ".cpu").read_text())
        finally:
            if srv.poll() is None:
                srv.kill()
    rtts.sort()
    q = lambda p: round(rtts[min(len(rtts) - 1, int(p * len(rtts)))], 1)  # noqa: E731
    return {"tls": tls, "messages": n, "p10_us": q(0.1), "p50_us": q(0.5), "p90_us": q(0.9), "p99_us": q(0.99),
            "server_cpu_us": round(server_cpu, 1), "client_cpu_us": round(client_cpu, 1)}


def _pair(server: ssl.SSLContext, client: ssl.SSLContext) -> tuple:
    """A connected (client, its output, server, its input) over memory buffers, handshake done."""
    s_in, s_out, c_in, c_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    srv = server.wrap_bio(s_in, s_out, server_side=True)
    cli = client.wrap_bio(c_in, c_out, server_side=False)
    for _ in range(10):
        for end in (cli, srv):
            try:
                end.do_handshake()
            except ssl.SSLWantReadError:
                pass
        if c_out.pending:
            s_in.write(c_out.read())
        if s_out.pending:
            c_in.write(s_out.read())
    return cli, c_out, srv, s_in


def records(pki: str, n: int, conns: int = 500) -> dict:
    """Per-record OpenSSL time (µs) of one 110-byte message: warm, cold, and round-robin over ``conns``
    connections (the code warm, each connection's state cold, as at Table III); see the module's docstring."""
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(f"{pki}/controller-cert.pem", f"{pki}/controller-privkey.pem")
    server.load_verify_locations(f"{pki}/cacert.pem")
    server.verify_mode = ssl.CERT_REQUIRED
    server.num_tickets = 0
    client = ssl.create_default_context(cafile=f"{pki}/cacert.pem")
    client.check_hostname = False
    client.load_cert_chain(f"{pki}/sw-cert.pem", f"{pki}/sw-privkey.pem")
    pairs = [_pair(server, client) for _ in range(conns)]
    msg = bytes(MSG)
    other = bytearray(8 << 20)
    cli = pairs[0][0]
    out: dict = {"version": cli.version(), "cipher": cli.cipher()[0], "connections": conns}
    for label, evict, spread in (("warm", False, 1), ("cold", True, 1), ("round_robin", False, conns),
                                 ("warm", False, 1)):
        w = r = 0.0
        for i in range(n):
            cli, c_out, srv, s_in = pairs[i % spread]
            if evict:
                bytes(other[(i * 7919) % (4 << 20):][:4 << 20])
            t0 = time.perf_counter()
            cli.write(msg)
            data = c_out.read()
            t1 = time.perf_counter()
            if evict:
                bytes(other[(i * 7919) % (4 << 20):][:4 << 20])
            t2 = time.perf_counter()
            s_in.write(data)
            srv.read(1 << 16)
            t3 = time.perf_counter()
            w += t1 - t0
            r += t3 - t2
        out[label] = {"encrypt_us": round(w / n * 1e6, 1), "decrypt_us": round(r / n * 1e6, 1)}  # warm: the 2nd
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=2000)
    ap.add_argument("--gap-ms", type=float, default=2.0)
    ap.add_argument("--tls", choices=("off", "on", "both"), default="both")
    ap.add_argument("--records-only", action="store_true", help="only the per-record OpenSSL figures")
    ap.add_argument("--serve", default="", help=argparse.SUPPRESS)
    ap.add_argument("--pki", default="", help=argparse.SUPPRESS)
    ap.add_argument("--tls-on", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.serve:
        serve(a.serve, a.pki, a.tls_on)
        return 0
    from hpcfabric.emu.pki import Authority

    with tempfile.TemporaryDirectory() as pki:
        ca = Authority(pki)
        ca.issue("controller", ips=("127.0.0.1",))
        ca.issue("sw")
        modes = {"off": [False], "on": [True], "both": [False, True, False, True]}[a.tls]
        runs = [] if a.records_only else [one(pki, t, a.messages, a.gap_ms / 1000.0) for t in modes]
        recs = records(pki, 2000)
    out: dict = {"bench": "tls_rtt", "gap_ms": a.gap_ms, "runs": runs, "records": recs,
                 "load_avg_1m": round(os.getloadavg()[0], 2)}
    tcp = [r["p50_us"] for r in runs if not r["tls"]]
    tls = [r["p50_us"] for r in runs if r["tls"]]
    if tcp and tls:
        out["p50_us"] = {"tcp": min(tcp), "tls": min(tls), "tls_minus_tcp": round(min(tls) - min(tcp), 1)}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
