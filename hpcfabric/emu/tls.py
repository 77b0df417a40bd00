"""An emulated switch's TLS client: OpenSSL over memory buffers on a plain asyncio TCP connection.

:class:`TlsClient` is the protocol of the TCP connection; once its handshake is done
(``ready``, a future) it gives the switch's own protocol (``inner``) itself as the transport
(``write``, ``close``, ``is_closing``) and the plaintext of every complete record a read brought
in one ``data_received``. It does what asyncio's TLS transport does for a switch, without its
per-connection 256 KiB buffer and flow-control machinery (docs/scale.md "TLS on the OpenFlow
channel"); the certificate checks are the context's (the controller's certificate verified
against the CA, no host name check, as Open vSwitch does).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from typing import Any

#: plaintext bytes taken from OpenSSL per call
READ = 1 << 16


class TlsClient(asyncio.Protocol):
    """Client-side TLS for ``inner`` (an ``asyncio.Protocol``) with the context ``ctx``."""

    def __init__(self, ctx: ssl.SSLContext, inner: asyncio.Protocol) -> None:
        self.inner = inner
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = ctx.wrap_bio(self.incoming, self.outgoing, server_side=False)
        self.transport: Any = None
        self.ready: asyncio.Future = asyncio.get_event_loop().create_future()
        self.open = False  # handshake done and ``inner`` told

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.handshake()

    def handshake(self) -> None:
        try:
            self.tls.do_handshake()
        except ssl.SSLWantReadError:
            self.flush()
            return
        except ssl.SSLError as err:
            self.flush()
            self.fail(err)
            return
        self.flush()
        self.open = True
        if not self.ready.done():
            self.ready.set_result(True)
        self.inner.connection_made(self)

    def fail(self, err: BaseException) -> None:
        if not self.ready.done():
            self.ready.set_exception(err)
        self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self.open:
            self.inner.received_cpu = time.thread_time()  # before decrypting: the switch's own TLS CPU shows
        self.incoming.write(data)
        if not self.open:
            self.handshake()
            if not self.open:
                return
        parts = []
        tls, incoming = self.tls, self.incoming
        more = False  # OpenSSL holds plaintext only after a read that filled READ (a shorter one ended its record)
        try:
            while incoming.pending or (more and tls.pending()):  # no SSLWantReadError once every byte is taken
                chunk = tls.read(READ)
                if not chunk:  # close_notify
                    self.transport.close()
                    break
                parts.append(chunk)
                more = len(chunk) == READ
        except ssl.SSLWantReadError:  # a record's remainder still on its way
            pass
        except ssl.SSLError as err:  # a broken record: the connection is over
            self.fail(err)
        if self.outgoing.pending:
            self.flush()
        if parts:
            self.inner.data_received(b"".join(parts) if len(parts) > 1 else parts[0])

    def eof_received(self) -> bool:
        return False  # close

    def connection_lost(self, exc: Any) -> None:
        if not self.ready.done():
            self.ready.set_exception(exc or ConnectionResetError("closed during the TLS handshake"))
        if self.open:
            self.open = False
            self.inner.connection_lost(exc)

    def flush(self) -> None:
        if self.outgoing.pending:
            self.transport.write(self.outgoing.read())

    # ---- the transport ``inner`` sees
    def write(self, data: bytes) -> None:
        if self.transport.is_closing():
            return
        done = self.tls.write(data)  # all of it: memory buffers never take part of a write
        if done < len(data):  # pragma: no cover - kept for safety
            view = memoryview(data)[done:]
            while view:
                view = view[self.tls.write(view):]
        self.transport.write(self.outgoing.read())

    def close(self) -> None:
        self.transport.close()

    def is_closing(self) -> bool:
        return self.transport.is_closing()
