#!/usr/bin/env python3
"""What one OpenFlow TLS handshake costs: CPU per handshake on each side, one JSON line.

The controller's server context as the TLS gate builds it (hpcfabric.controller.tls: TLS 1.2+, client
certificate required, no session tickets) against a switch's client context as the emulator's (CA-verified
server certificate, its own certificate); EC P-256 certificates from hpcfabric.emu.pki. Each side runs in
its own thread over socketpairs; CPU is per thread (``RUSAGE_THREAD``). Variants show where the time goes:
``tickets`` (session tickets on), ``no_client_verify`` (the server asks for no certificate). With pyOpenSSL
importable, ``pyopenssl`` is the same pair of contexts over the OpenSSL that its ``cryptography`` wheel carries
(another OpenSSL than the standard library's: the version is in the line), to tell OpenSSL 3.0's cost from a
newer one's:

    .venv/bin/python bench/tls_handshake.py [--handshakes 400]
    python3 -m venv /tmp/v && /tmp/v/bin/pip install cryptography pyOpenSSL   # a newer OpenSSL, for comparison
    PYTHONPATH=. /tmp/v/bin/python bench/tls_handshake.py
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import ssl
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from hpcfabric.emu.pki import Authority  # noqa: E402


def thread_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_THREAD)
    return r.ru_utime + r.ru_stime


def run(files: dict, n: int, *, verify: bool = True, tickets: bool = False) -> dict:
    srv = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    srv.minimum_version = ssl.TLSVersion.TLSv1_2
    srv.load_cert_chain(files["cert"], files["key"])
    if verify:
        srv.load_verify_locations(files["ca"])
        srv.verify_mode = ssl.CERT_REQUIRED
    if not tickets:
        srv.options |= ssl.OP_NO_TICKET
        srv.num_tickets = 0
    cli = ssl.create_default_context(cafile=files["ca"])
    cli.check_hostname = False
    cli.load_cert_chain(files["switch_cert"], files["switch_key"])
    return both(n, lambda sock: srv.wrap_socket(sock, server_side=True), cli.wrap_socket, {})


def both(n: int, server: Any, client: Any, out: dict) -> dict:
    """``n`` handshakes over socketpairs, ``server(sock)`` and ``client(sock)`` each in its own thread: each
    side's CPU per handshake (ms) into ``out``."""
    pairs = [socket.socketpair() for _ in range(n)]

    def side(index: int, handshake: Any, key: str) -> None:
        c0 = thread_cpu()
        for pair in pairs:
            handshake(pair[index])
        out[key] = round((thread_cpu() - c0) / n * 1000, 3)

    threads = [threading.Thread(target=side, args=(0, server, "server_ms")),
               threading.Thread(target=side, args=(1, client, "client_ms"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for a, b in pairs:
        a.close()
        b.close()
    return out


def run_pyopenssl(files: dict, n: int) -> dict:
    """The controller's and a switch's contexts over pyOpenSSL (its OpenSSL): CPU per handshake on each side."""
    from OpenSSL import SSL

    srv = SSL.Context(SSL.TLS_SERVER_METHOD)
    srv.set_min_proto_version(SSL.TLS1_2_VERSION)
    srv.set_options(SSL.OP_NO_TICKET)
    srv.use_certificate_file(files["cert"])
    srv.use_privatekey_file(files["key"])
    srv.load_verify_locations(files["ca"])
    srv.set_verify(SSL.VERIFY_PEER | SSL.VERIFY_FAIL_IF_NO_PEER_CERT)
    cli = SSL.Context(SSL.TLS_CLIENT_METHOD)
    cli.load_verify_locations(files["ca"])
    cli.set_verify(SSL.VERIFY_PEER)
    cli.use_certificate_file(files["switch_cert"])
    cli.use_privatekey_file(files["switch_key"])

    def handshake(ctx: Any, sock: Any, server: bool) -> None:
        conn = SSL.Connection(ctx, sock)
        conn.set_accept_state() if server else conn.set_connect_state()
        conn.do_handshake()
        if server and conn.get_peer_certificate() is None:
            raise SystemExit("pyOpenSSL: no client certificate")

    return both(n, lambda sock: handshake(srv, sock, True), lambda sock: handshake(cli, sock, False),
                {"openssl": SSL.OpenSSL_version(SSL.OPENSSL_VERSION).decode()})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--handshakes", type=int, default=400)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        ca = Authority(d)
        cert, key = ca.issue("controller")
        scert, skey = ca.issue("g0s0")
        files = {"ca": str(ca.ca), "cert": str(cert), "key": str(key), "switch_cert": str(scert), "switch_key": str(skey)}
        res = {"bench": "tls_handshake", "openssl": ssl.OPENSSL_VERSION, "handshakes": args.handshakes,
               "as_the_controller": run(files, args.handshakes),
               "tickets": run(files, args.handshakes, tickets=True),
               "no_client_verify": run(files, args.handshakes, verify=False),
               "load_avg_1m": round(os.getloadavg()[0], 2)}
        try:
            import OpenSSL  # noqa: F401
        except ImportError:
            pass
        else:
            res["pyopenssl"] = run_pyopenssl(files, args.handshakes)
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
