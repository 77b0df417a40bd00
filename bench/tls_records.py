#!/usr/bin/env python3
"""What a TLS record costs the controller's receive side: small OpenFlow messages, each written on its
own (a switch's packet-ins), read by a green socket under eventlet as the controller reads them, over
plain TCP and over TLS; one JSON line.

Over TCP one ``recv`` takes a burst of messages from the kernel's buffer; over eventlet's green TLS socket
(``tls_green_socket``) each message is its own record and one ``recv`` returns one record; the controller's
own TLS connection (``tls``: :class:`hpcfabric.controller.tls.TlsSocket`, memory buffers over the green TCP
socket) returns every complete record of a read. Both ends run in this process (socketpair, green threads;
the writer is a green TLS socket in both TLS runs), so the CPU per message is the reader's and the writer's
together.

    .venv/bin/python bench/tls_records.py [--messages 20000] [--size 110]
"""

from __future__ import annotations

import warnings

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # eventlet's deprecation notice: the controller's framework runs on it
    import eventlet

eventlet.monkey_patch()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import socket  # noqa: E402
import ssl  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from hpcfabric.controller.tls import TlsSocket  # noqa: E402
from hpcfabric.emu.pki import Authority  # noqa: E402

#: messages a writer sends before giving the hub back (a burst)
BURST = 50


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run(n: int, size: int, contexts: tuple | None, gate: bool = False) -> dict:
    """Messages of ``size`` bytes, ``n`` of them, over a socketpair (TLS with ``contexts``: server, client;
    ``gate``: the reader is the controller's :class:`TlsSocket`)."""
    a, b = socket.socketpair()
    if contexts:
        client = eventlet.spawn(contexts[1].wrap_socket, b)
        if gate:
            a = TlsSocket(a, contexts[0])
            a.handshake(10.0)
        else:
            a = contexts[0].wrap_socket(a, server_side=True)
        b = client.wait()
    msg = b"\x04\x0a" + size.to_bytes(2, "big") + bytes(size - 4)

    def writer() -> None:
        for i in range(n):
            b.sendall(msg)
            if i % BURST == BURST - 1:
                eventlet.sleep(0)

    c0 = cpu()
    w = eventlet.spawn(writer)
    got = calls = 0
    while got < n * size:
        data = a.recv(1 << 16)
        if not data:
            break
        got += len(data)
        calls += 1
    w.wait()
    used = cpu() - c0
    a.close()
    b.close()
    return {"recv_calls": calls, "us_per_message": round(used / n * 1e6, 2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=20000)
    ap.add_argument("--size", type=int, default=110, help="bytes per message (an LLDP packet-in: ~110)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        ca = Authority(d)
        cert, key = ca.issue("controller")
        srv = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        srv.load_cert_chain(cert, key)
        cli = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        cli.check_hostname = False
        cli.load_verify_locations(ca.ca)
        res = {"bench": "tls_records", "openssl": ssl.OPENSSL_VERSION, "messages": args.messages,
               "size": args.size, "tcp": run(args.messages, args.size, None),
               "tls_green_socket": run(args.messages, args.size, (srv, cli)),
               "tls": run(args.messages, args.size, (srv, cli), gate=True), "load_avg_1m": round(os.getloadavg()[0], 2)}
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
