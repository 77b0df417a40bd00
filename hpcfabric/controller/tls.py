"""The OpenFlow listener's TLS handshake: every accepted connection, before the framework reads a byte.

:class:`TlsGate` is the accept hook the app installs in the framework's listener
(:func:`hpcfabric.controller.framework.set_accept_hook`, the same under
``hpcfabric controller``, ``osken-manager`` and ``ryu-manager``). With the TLS
arguments the framework built from ``--ctl-privkey`` / ``--ctl-cert`` /
``--ca-certs`` (which ``[openflow] tls*`` sets, :mod:`hpcfabric.controller.launch`)
it does the handshake itself: TLS 1.2 or later, a client certificate required
and verified against the CA, ``HANDSHAKE_S`` seconds at most. A peer that
fails -- plaintext, no certificate, a certificate of another CA -- is closed
and reported (``on_refused(address, reason, detail)``) before any OpenFlow
message exists; only a verified connection reaches the framework's datapath, the names its
certificate gives kept on the socket (``hpcfabric_names``) for the identity check.
Plain TCP (no TLS arguments) is handed over untouched.
"""

from __future__ import annotations

import logging
import socket
import ssl
from typing import Any, Callable

from hpcfabric.config.security import cert_names

LOG = logging.getLogger("hpcfabric.controller")

#: seconds a connecting peer has to complete the TLS handshake
HANDSHAKE_S = 10.0
#: refusal reasons of the handshake (status ``admission.refused_by_reason``, metric label ``reason``)
NOT_TLS, NO_CERT, UNTRUSTED, TIMEOUT, FAILED = "not_tls", "no_certificate", "untrusted_certificate", "tls_timeout", \
    "tls_handshake"
_NOT_TLS = {"WRONG_VERSION_NUMBER", "HTTP_REQUEST", "UNKNOWN_PROTOCOL", "UNSUPPORTED_PROTOCOL", "VERSION_TOO_LOW",
            "NO_PROTOCOLS_AVAILABLE", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG"}
_UNTRUSTED = {"CERTIFICATE_VERIFY_FAILED", "TLSV1_ALERT_UNKNOWN_CA", "SSLV3_ALERT_BAD_CERTIFICATE"}


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
        try:
            ctx = self.context(tls_args)
            sock.settimeout(HANDSHAKE_S)
            conn = ctx.wrap_socket(sock, server_side=True)
        except (ssl.SSLError, OSError, ValueError) as err:
            err.__traceback__ = None
            reason, detail = classify(err)
            try:
                sock.close()
            except OSError:  # pragma: no cover
                pass
            self.on_refused(addr, reason, detail)
            return
        try:
            conn.hpcfabric_names = cert_names(conn.getpeercert())  # read now: the socket may be gone at MAIN
        except (ValueError, OSError, AttributeError):  # pragma: no cover - closed during the handshake's end
            conn.hpcfabric_names = ()
        self.on_accepted(addr)
        serve(conn, addr)
