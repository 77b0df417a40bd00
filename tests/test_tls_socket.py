"""The two TLS ends over memory buffers, on real sockets and real certificates (hpcfabric.emu.pki):

* the controller's :class:`hpcfabric.controller.tls.TlsSocket` (green sockets): a burst of records comes back
  in a few reads, not one read per record; large sends arrive whole; the end of a connection (close_notify,
  EOF, a broken record) reads as b""; an idle read times out; the handshake refuses a certificate of another
  CA and a plaintext client, and its time limit is for the whole handshake, not per read (a peer trickling
  a byte at a time); its steps run in a native thread while green threads go on;
* the emulator's :class:`hpcfabric.emu.tls.TlsClient` (asyncio): the controller's certificate verified against
  the CA, the plaintext handed on in order, a refused handshake reported.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
import time

import pytest
from eventlet.green import socket as gsocket

from hpcfabric.controller import tls as T
from hpcfabric.emu.pki import Authority
from hpcfabric.emu.tls import TlsClient


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca, other = Authority(d / "ca"), Authority(d / "other", name="another CA")
    server, switch, stranger = ca.issue("controller"), ca.issue("g0s0"), other.issue("g0s0")
    srv = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    srv.minimum_version = ssl.TLSVersion.TLSv1_2
    srv.load_cert_chain(*server)
    srv.load_verify_locations(ca.ca)
    srv.verify_mode = ssl.CERT_REQUIRED

    def client(cert=switch, cafile=ca.ca):
        ctx = ssl.create_default_context(cafile=str(cafile))
        ctx.check_hostname = False
        ctx.load_cert_chain(*cert)
        return ctx

    return {"server": srv, "client": client, "stranger": stranger, "other_ca": other.ca}


def pair(pki, client_ctx=None, native=True):
    """(TlsSocket, the client's blocking TLS socket in a thread's hands), handshake done."""
    a, b = gsocket.socketpair()
    raw = socket.socket(fileno=b.detach())
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("c", (client_ctx or pki["client"]()).wrap_socket(raw)))
    t.start()
    conn = T.TlsSocket(a, pki["server"])
    conn.handshake(5.0, native=native)
    t.join()
    return conn, box["c"]


def test_the_handshakes_steps_run_in_a_native_thread_while_the_hub_runs(pki, monkeypatch):
    import eventlet

    steps, ticks = [], []
    step = T._step

    def recorded(tls):
        steps.append(threading.get_ident())
        t = time.monotonic()
        while time.monotonic() - t < 0.05:  # a slow step (as under load): the hub must not wait for it
            pass
        return step(tls)

    def ticker():
        while True:
            ticks.append(time.monotonic())
            eventlet.sleep(0.005)

    monkeypatch.setattr(T, "_step", recorded)
    g = eventlet.spawn(ticker)
    conn, client = pair(pki)
    g.kill()
    # the flights of the switch (ClientHello; certificate, verify, finished) were processed off the hub's thread
    assert len(steps) >= 2 and threading.get_ident() not in steps
    # ... and green threads ran meanwhile: ~0.1 s of steps, ticks every 5 ms
    assert len(ticks) >= 8
    assert conn.tls.getpeercert()["subject"] == ((("commonName", "g0s0"),),)
    client.sendall(b"after the handshake")
    assert conn.recv(100) == b"after the handshake"
    conn.close()
    client.close()
    # the same handshake inline (native=False) gives the same verified session
    steps.clear()
    conn, client = pair(pki, native=False)
    assert steps == [] and conn.getpeercert()["subject"] == ((("commonName", "g0s0"),),)
    conn.close()
    client.close()


def test_a_burst_of_records_is_read_in_a_few_reads_and_large_sends_arrive_whole(pki):
    conn, cli = pair(pki)
    msgs = [bytes([4, 10]) + (110).to_bytes(2, "big") + i.to_bytes(4, "big") + bytes(102) for i in range(500)]
    for m in msgs:  # one record each
        cli.sendall(m)
    got, reads = b"", 0
    while len(got) < 500 * 110:
        got += conn.recv(1 << 16)
        reads += 1
    assert got == b"".join(msgs)
    assert reads <= 10, reads  # eventlet's green TLS socket: 500
    assert conn.getpeercert()["subject"] == ((("commonName", "g0s0"),),)
    assert conn.version() in ("TLSv1.2", "TLSv1.3")
    big = bytes(range(256)) * 4096  # 1 MiB: many records
    back = bytearray()

    def read_back():
        while len(back) < len(big):
            back.extend(cli.recv(1 << 16))

    reader = threading.Thread(target=read_back)
    reader.start()
    conn.sendall(big)  # green, in this thread's hub
    reader.join(10)
    assert back == big
    closing = threading.Thread(target=unwrap, args=(cli,), daemon=True)  # close_notify
    closing.start()
    assert conn.recv(1 << 16) == b""
    conn.close()
    closing.join(10)  # unwrap reads on cli's descriptor until conn's end: closing cli under it let that read
    cli.close()       # take the next test's socket, which reused the number (a handshake that never came)


class CountingTls:
    """The TlsSocket's SSLObject, its reads and the SSLWantReadErrors they raise counted."""

    def __init__(self, tls) -> None:
        self.tls, self.reads, self.want_read = tls, 0, 0

    def read(self, n):
        self.reads += 1
        try:
            return self.tls.read(n)
        except ssl.SSLWantReadError:
            self.want_read += 1
            raise

    def __getattr__(self, name):
        return getattr(self.tls, name)


def bio_pair(pki):
    """(TlsSocket, the client's SSLObject, its output buffer, the client's raw socket): the client's records are
    written to the socket by the test, so that it can cut one anywhere."""
    a, b = gsocket.socketpair()
    raw = socket.socket(fileno=b.detach())
    raw.setblocking(True)
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    cli = pki["client"]().wrap_bio(inc, out, server_side=False)

    def handshake():
        while True:
            try:
                cli.do_handshake()
                break
            except ssl.SSLWantReadError:
                raw.sendall(out.read())
                inc.write(raw.recv(1 << 16))
        raw.sendall(out.read())

    t = threading.Thread(target=handshake)
    t.start()
    conn = T.TlsSocket(a, pki["server"])
    conn.handshake(30.0)  # the limit is not under test here: generous for a loaded CI machine
    t.join()
    return conn, cli, out, raw


def test_records_one_at_a_time_and_cut_records_are_read_without_a_want_read_each(pki):
    conn, cli, out, raw = bio_pair(pki)
    conn.tls = counting = CountingTls(conn.tls)
    for i in range(50):  # a lone record per read, as replies come: no SSLWantReadError at all
        cli.write(i.to_bytes(4, "big") * 20)
        raw.sendall(out.read())
        assert conn.recv(1 << 16) == i.to_bytes(4, "big") * 20
    assert counting.reads == 50 and counting.want_read == 0
    for cut in (3, 5, 100, 318, 330):  # cut after a header, inside a body, just before the end, in the second
        cli.write(b"a" * 300)
        cli.write(b"b" * 10)
        records = out.read()  # 322 + 32 bytes (TLS 1.3)
        raw.sendall(records[:cut])
        later = threading.Timer(0.05, raw.sendall, (records[cut:],))
        later.start()
        got = conn.recv(1 << 16)
        while len(got) < 310:
            got += conn.recv(1 << 16)
        later.join()
        assert got == b"a" * 300 + b"b" * 10
    conn.close()
    raw.close()


def test_a_record_longer_than_a_read_is_handed_out_in_parts_without_reading_the_socket_again(pki):
    conn, cli, out, raw = bio_pair(pki)
    conn.tls = counting = CountingTls(conn.tls)
    conn.settimeout(0.5)  # a read of the socket here would wait for bytes that never come and time out
    cli.write(bytes(range(250)) + bytes(range(50)))
    raw.sendall(out.read())
    got = [conn.recv(100) for _ in range(3)]
    assert b"".join(got) == bytes(range(250)) + bytes(range(50)) and [len(g) for g in got] == [100, 100, 100]
    assert counting.reads == 3 and counting.want_read == 0
    cli.write(b"next")  # the record was used up exactly: the next recv reads the socket
    raw.sendall(out.read())
    assert conn.recv(100) == b"next"
    conn.close()
    raw.close()


def test_eof_and_broken_records_end_the_connection_and_idle_reads_time_out(pki):
    conn, cli = pair(pki)
    conn.settimeout(0.2)
    t = time.monotonic()
    with pytest.raises(socket.timeout):
        conn.recv(100)
    assert 0.15 < time.monotonic() - t < 2
    cli.sendall(b"still here")
    assert conn.recv(100) == b"still here"
    conn.close()
    cli.close()
    # a forged record (valid header, garbage inside) and an EOF without close_notify
    for tail in (bytes([23, 3, 3, 0, 40]) + bytes(40), b""):
        conn, cli = pair(pki)
        raw = socket.socket(fileno=cli.detach())
        if tail:
            raw.sendall(tail)
        else:
            raw.shutdown(socket.SHUT_WR)
        conn.settimeout(2)
        assert conn.recv(100) == b""
        conn.close()
        raw.close()


def unwrap(cli):
    try:
        cli.unwrap()  # waits for the answer, which a TlsSocket does not send
    except (ssl.SSLError, OSError):
        pass


def refused_client(ctx, raw):
    try:
        ctx.wrap_socket(raw)
    except (ssl.SSLError, OSError):
        pass


def test_the_handshake_refuses_strangers_and_its_limit_is_for_the_whole_handshake(pki):
    for ctx, reason in ((pki["client"](pki["stranger"]), T.UNTRUSTED), (None, T.NOT_TLS)):
        a, b = gsocket.socketpair()
        raw = socket.socket(fileno=b.detach())
        if ctx is None:
            raw.sendall(bytes.fromhex("0400000800000001"))  # an OpenFlow HELLO
        else:
            threading.Thread(target=refused_client, args=(ctx, raw), daemon=True).start()
        conn = T.TlsSocket(a, pki["server"])
        with pytest.raises(ssl.SSLError) as err:
            conn.handshake(5.0)
        assert T.classify(err.value)[0] == reason
        a.close()
        raw.close()
    # a peer trickling a byte every 0.1 s: refused after the limit, not after a per-read timeout
    a, b = gsocket.socketpair()
    raw = socket.socket(fileno=b.detach())
    hello = pki["client"]()
    stop = threading.Event()

    def trickle():
        obj = hello.wrap_bio(ssl.MemoryBIO(), out := ssl.MemoryBIO())
        with pytest.raises(ssl.SSLWantReadError):
            obj.do_handshake()
        for byte in out.read():
            if stop.wait(0.1):
                return
            try:
                raw.send(bytes([byte]))
            except OSError:
                return

    threading.Thread(target=trickle, daemon=True).start()
    conn = T.TlsSocket(a, pki["server"])
    t = time.monotonic()
    with pytest.raises(socket.timeout) as err:
        conn.handshake(0.5)
    assert time.monotonic() - t < 1.5
    assert T.classify(err.value)[0] == T.TIMEOUT
    stop.set()
    a.close()
    raw.close()


class Inner(asyncio.Protocol):
    def __init__(self) -> None:
        self.data, self.transport, self.lost = b"", None, False

    def connection_made(self, transport) -> None:
        self.transport = transport
        transport.write(b"hello from the switch")

    def data_received(self, data: bytes) -> None:
        self.data += data

    def connection_lost(self, exc) -> None:
        self.lost = True


def test_the_emulators_client_verifies_the_controller_and_hands_on_the_plaintext(pki):
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    served = {}

    def serve(n):
        for _ in range(n):
            s, _ = listener.accept()
            try:
                c = pki["server"].wrap_socket(s, server_side=True)
            except ssl.SSLError as err:
                served.setdefault("refused", []).append(T.classify(err)[0])
                s.close()
                continue
            served["got"] = c.recv(100)
            for i in range(300):
                c.sendall(i.to_bytes(2, "big"))
            c.unwrap()
            c.close()

    threading.Thread(target=serve, args=(2,), daemon=True).start()

    async def run(ctx):
        loop = asyncio.get_running_loop()
        inner = Inner()
        _, proto = await loop.create_connection(lambda: TlsClient(ctx, inner), "127.0.0.1", port)
        await asyncio.wait_for(proto.ready, 5)
        for _ in range(100):
            if inner.lost:
                break
            await asyncio.sleep(0.02)
        return inner

    inner = asyncio.run(run(pki["client"]()))
    assert served["got"] == b"hello from the switch"
    assert inner.data == b"".join(i.to_bytes(2, "big") for i in range(300)) and inner.lost
    with pytest.raises((ssl.SSLError, ConnectionError)):  # the controller's certificate is not of its CA
        asyncio.run(run(pki["client"](cafile=pki["other_ca"])))
    listener.close()
