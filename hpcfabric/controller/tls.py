"""The OpenFlow listener's TLS handshake: every accepted connection, before the framework reads a byte.

:class:`TlsGate` is the accept hook the app installs in the framework's listener
(:func:`hpcfabric.controller.framework.set_accept_hook`, the same under
``hpcfabric controller``, ``osken-manager`` and ``ryu-manager``). With the TLS
arguments the framework built from ``--ctl-privkey`` / ``--ctl-cert`` /
``--ca-certs`` (which ``[openflow] tls*`` sets, :mod:`hpcfabric.controller.launch`)
it does the handshake itself: TLS 1.2 or later, a client certificate required
and verified against the CA, ``HANDSHAKE_S`` seconds at most, its CPU-heavy steps in native
threads beside the hub (:meth:`TlsSocket.handshake`). A peer that
fails -- plaintext, no certificate, a certificate of another CA -- is closed
and reported (``on_refused(address, reason, detail)``) before any OpenFlow
message exists; only a verified connection reaches the framework's datapath, the names its
certificate gives kept on the socket (``hpcfabric_names``) for the identity check.
Plain TCP (no TLS arguments) is handed over untouched.

The verified connection is a :class:`TlsSocket`: OpenSSL over memory buffers (``ssl.SSLObject``) on the
green TCP socket, not eventlet's green TLS socket. One ``recv`` of the TCP socket takes up to ``READ`` bytes
(a burst of records) and one ``TlsSocket.recv`` returns the plaintext of every complete record read so far,
so a burst of packet-ins costs one system call and one wakeup as over TCP (eventlet's socket: one record,
two system calls, per read; docs/scale.md "TLS on the OpenFlow channel").
"""

from __future__ import annotations

import logging
import socket
import ssl
import time
from typing import Any, Callable

from hpcfabric.config.security import cert_names
from hpcfabric.controller.framework import hub, run_native

LOG = logging.getLogger("hpcfabric.controller")

#: seconds a connecting peer has to complete the TLS handshake
HANDSHAKE_S = 10.0
#: refusal reasons of the handshake (status ``admission.refused_by_reason``, metric label ``reason``)
NOT_TLS, NO_CERT, UNTRUSTED, TIMEOUT, FAILED = "not_tls", "no_certificate", "untrusted_certificate", "tls_timeout", \
    "tls_handshake"
_NOT_TLS = {"WRONG_VERSION_NUMBER", "HTTP_REQUEST", "UNKNOWN_PROTOCOL", "UNSUPPORTED_PROTOCOL", "VERSION_TOO_LOW",
            "NO_PROTOCOLS_AVAILABLE", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG"}
_UNTRUSTED = {"CERTIFICATE_VERIFY_FAILED", "TLSV1_ALERT_UNKNOWN_CA", "SSLV3_ALERT_BAD_CERTIFICATE"}
#: bytes asked of the TCP socket per read: a burst of small records (~120 packet-ins) or one full record.
#: OpenSSL's memory buffers keep the largest size they ever held, per connection: this bounds the input's,
#: ``SLICE`` (plaintext encrypted at a time) the output's -- ~2 x 16 KiB a switch instead of its largest send
READ = 1 << 14
SLICE = 1 << 14


def classify(err: BaseException) -> tuple[str, str]:
    """(reason, detail) of a failed server-side handshake."""
    if isinstance(err, socket.timeout):
        return TIMEOUT, f"no TLS handshake within {HANDSHAKE_S:g} s"
    reason = getattr(err, "reason", None) or ""
    detail = getattr(err, "verify_message", None) or str(err)
    if isinstance(err, ssl.SSLCertVerificationError) or reason in _UNTRUSTED:
        return UNTRUSTED, f"certificate not signed by the configured CA ({detail})"
    if reason == "PEER_DID_NOT_RETURN_A_CERTIFICATE":
        return NO_CERT, "the peer sent no certificate"
    if reason in _NOT_TLS:
        return NOT_TLS, f"not a TLS client ({reason})"
    return FAILED, (reason or detail)[:200] or type(err).__name__


class TlsGate:
    """The accept hook: TLS handshake (or plain hand-over), refusals reported to ``on_refused``, verified
    connections counted with ``on_accepted`` (both take the peer address first)."""

    def __init__(self, on_refused: Callable[[Any, str, str], None], on_accepted: Callable[[Any], None]) -> None:
        self.on_refused = on_refused
        self.on_accepted = on_accepted
        self.contexts: dict[tuple, Any] = {}

    def context(self, tls_args: dict[str, Any]) -> Any:
        """The server context for the framework's TLS arguments (built once; the greened ``ssl`` at call time)."""
        key = (tls_args.get("certfile"), tls_args.get("keyfile"), tls_args.get("ca_certs"), tls_args.get("ciphers"))
        ctx = self.contexts.get(key)
        if ctx is None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.minimum_version = ssl.TLSVersion.TLSv1_2
            # no session tickets: a switch keeps its connection for months, and making the tickets cost
            # ~20 % of a handshake (OpenSSL 3.0, measured: 2.4 -> 2.0 ms of server CPU per handshake)
            ctx.options |= ssl.OP_NO_TICKET
            ctx.num_tickets = 0
            ctx.load_cert_chain(key[0], key[1])
            if key[2]:
                ctx.load_verify_locations(key[2])
                ctx.verify_mode = ssl.CERT_REQUIRED
            if key[3]:
                ctx.set_ciphers(key[3])
            self.contexts[key] = ctx
        return ctx

    def __call__(self, sock: Any, addr: Any, tls_args: dict[str, Any], serve: Callable[[Any, Any], None]) -> None:
        if not tls_args.get("certfile"):
            serve(sock, addr)
            return
        conn = None
        try:
            conn = TlsSocket(sock, self.context(tls_args))
            conn.handshake(HANDSHAKE_S)
        except (ssl.SSLError, OSError, ValueError) as err:
            err.__traceback__ = None
            reason, detail = classify(err)
            if conn is not None:
                conn.flush_quietly()  # the alert (unknown CA, no certificate) tells the switch why
            try:
                sock.close()
            except OSError:  # pragma: no cover
                pass
            self.on_refused(addr, reason, detail)
            return
        conn.hpcfabric_names = cert_names(conn.getpeercert())
        self.on_accepted(addr)
        serve(conn, addr)


def _step(tls: ssl.SSLObject) -> BaseException | None:
    """One handshake step in a native thread: the exception it ended with (raised by the caller), or None."""
    try:
        tls.do_handshake()
    except (ssl.SSLError, OSError, ValueError) as err:
        return err
    return None


class TlsSocket:
    """A server-side TLS connection over a green TCP socket, with the socket methods the framework's datapath
    uses (``recv``, ``sendall``, ``settimeout``, ``setsockopt``, ``shutdown``, ``close``, ...).

    ``recv(n)`` decrypts what is buffered, reading the TCP socket (up to ``READ`` bytes) only when no complete
    record is; ``sendall`` encrypts and writes under a lock, so that records the reading side makes (a TLS 1.3
    key update's answer) never cut into a send's bytes.
    """

    def __init__(self, sock: Any, ctx: ssl.SSLContext) -> None:
        self.sock = sock
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = ctx.wrap_bio(self.incoming, self.outgoing, server_side=True)
        self.writing = hub.Semaphore(1)
        self.more = False  # the last recv stopped at n bytes: OpenSSL may hold more of that record
        self.hpcfabric_names: tuple[str, ...] = ()

    def handshake(self, limit: float, native: bool = True) -> None:
        """The server handshake within ``limit`` seconds in all (``socket.timeout`` after); raises ``SSLError``.

        With ``native`` each step that has a flight of the peer's to process runs in a native thread
        (``run_native``: OpenSSL releases the GIL), so that the ~2 ms of key exchange, signature and
        certificate verification a switch costs runs beside the hub instead of stalling every other switch's
        green thread; the socket reads between the steps stay green."""
        deadline = time.monotonic() + limit
        while True:
            try:
                if native and self.incoming.pending:
                    err = run_native(_step, self.tls)
                    if err is not None:
                        raise err
                else:
                    self.tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                self.flush()
                left = deadline - time.monotonic()
                if left <= 0:
                    raise socket.timeout("TLS handshake timed out") from None
                self.sock.settimeout(left)
                self.fill()
        self.flush()

    def fill(self) -> None:
        """Read the TCP socket once into the TLS input (its end marked at EOF)."""
        data = self.sock.recv(READ)
        if data:
            self.incoming.write(data)
        else:
            self.incoming.write_eof()

    def flush(self) -> None:
        """Write what TLS has made (records, alerts) to the TCP socket, in order."""
        if self.outgoing.pending:
            writing = self.writing
            writing.acquire()  # not ``with``: two calls fewer on every lone record's path
            try:
                data = self.outgoing.read()
                if data:
                    self.sock.sendall(data)
            finally:
                writing.release()

    def flush_quietly(self) -> None:
        try:
            self.sock.settimeout(1.0)
            self.flush()
        except OSError:
            pass

    def recv(self, n: int) -> bytes:
        """The plaintext of the complete records buffered (at most ``n`` bytes), reading the TCP socket if there
        are none; b"" at the end of the connection (close_notify, EOF, a broken record).

        It reads the TCP socket before asking OpenSSL when nothing is buffered, and stops once OpenSSL has
        taken every buffered byte: no ``SSLWantReadError``, which had cost two per lone record (a lone record:
        43-45 instead of 51-68 us of hub CPU, 38 us over TCP; docs/scale.md "Fourth pass"). OpenSSL is asked
        whether it holds plaintext (``pending()``) only when a read filled what was asked: a shorter read ended
        its record (docs/scale.md "Fifth pass")."""
        tls, incoming = self.tls, self.incoming
        if not incoming.pending and not incoming.eof and not (self.more and tls.pending()):
            data = self.sock.recv(READ)  # fill(), inline: socket.timeout to the caller (an idle switch)
            if data:
                incoming.write(data)
            else:
                incoming.write_eof()
        self.more = False
        parts: list[bytes] = []
        size = 0
        while True:
            try:
                while size < n:
                    want = n - size
                    data = tls.read(want)
                    if not data:  # close_notify
                        break
                    parts.append(data)
                    size += len(data)
                    if len(data) == want:
                        self.more = True  # the record may go on; the next call asks OpenSSL
                    elif not incoming.pending:
                        break
                break
            except ssl.SSLWantReadError:  # a record's remainder still on its way
                if parts:
                    break
                self.fill()
            except ssl.SSLError as err:  # EOF without close_notify, a forged or broken record
                err.__traceback__ = None
                break
        if self.outgoing.pending:  # e.g. the answer to a key update
            self.flush()
        return b"".join(parts) if len(parts) != 1 else parts[0]

    def sendall(self, data: Any) -> None:
        """Encrypt ``data`` a slice at a time (the output buffer stays small) and write it in one call."""
        if len(data) <= SLICE:
            done = self.tls.write(data)  # all of it: memory buffers never take part of a write
            if done < len(data):  # pragma: no cover - kept for safety
                view = memoryview(data)[done:]
                while view:
                    view = view[self.tls.write(view):]
            self.flush()
            return
        view = memoryview(data)
        records = []
        while view:
            view = view[self.tls.write(view[:SLICE]):]
            records.append(self.outgoing.read())
        with self.writing:
            self.sock.sendall(b"".join(records))

    def getpeercert(self, binary_form: bool = False) -> Any:
        return self.tls.getpeercert(binary_form)

    def version(self) -> str | None:
        return self.tls.version()

    def cipher(self) -> Any:
        return self.tls.cipher()

    def settimeout(self, value: float | None) -> None:
        self.sock.settimeout(value)

    def gettimeout(self) -> float | None:
        return self.sock.gettimeout()

    def setsockopt(self, *args: Any) -> None:
        self.sock.setsockopt(*args)

    def getpeername(self) -> Any:
        return self.sock.getpeername()

    def fileno(self) -> int:
        return self.sock.fileno()

    def shutdown(self, how: int) -> None:
        self.sock.shutdown(how)

    def close(self) -> None:
        self.sock.close()
