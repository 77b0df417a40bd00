"""Which OpenFlow session speaks for a datapath id: identity checks, one live session per dpid, refusals.

:class:`Admission` decides, when a session reaches MAIN_DISPATCHER (its dpid
known), whether the app takes it (:meth:`Admission.claim`):

* **TLS** (``[openflow] tls = on``): the TLS gate (:mod:`hpcfabric.controller.tls`)
  already refused every peer without a certificate of the configured CA; here
  the certificate's names (:func:`hpcfabric.config.security.cert_names`) must
  cover the dpid the session claims (:func:`~hpcfabric.config.security.may_claim`:
  the switch's name, its dpid, or a ``tls_names`` entry), else it is refused.
* **One live session per dpid** (with or without TLS): a session claiming a dpid
  whose admitted session is still connected is held (nothing it sends has any
  effect) while the live one is sent an echo. Answered within ``[openflow]
  echo_timeout``: the newcomer is refused and the live session untouched. Not
  answered: the live one is dead (a switch that restarted without closing its
  connection); it is closed and the newcomer takes its place.

A refusal is a WARNING (one per dpid, address and reason a minute, the rest
counted), an entry in the status file (``refused_sessions``, ``impostors``), a
metric (``hpcfabric_refused_sessions_total{reason}``) and an OpenFlow error
(HELLO_FAILED / EPERM, with the reason as text) before the connection is
closed. :meth:`Admission.admitted` is the check every message handler makes:
only the admitted session of a dpid changes anything.
"""

from __future__ import annotations

import collections
import logging
import time
from typing import Any, Callable

from hpcfabric.config.security import may_claim
from hpcfabric.controller.channel import Channel, SyncError
from hpcfabric.controller.framework import DEAD_DISPATCHER, hub, set_accept_hook
from hpcfabric.controller.state import Changes, State
from hpcfabric.controller.tls import TlsGate
from hpcfabric.openflow import ofwire

LOG = logging.getLogger("hpcfabric.controller")

#: refusals kept for the status file (``impostors``)
RECENT = 50
#: a refusal of the same dpid, address and reason is logged at most once per this many seconds
LOG_EVERY_S = 60.0
#: (dpid, host, reason) keys remembered for that (cleared beyond this many)
LOG_KEYS = 10000
#: seconds a refused session has to read our error before its connection is closed
CLOSE_AFTER_S = 0.2
MISMATCH, DUPLICATE = "certificate_mismatch", "duplicate_session"


def close(dp: Any) -> None:
    """End session ``dp``: its socket closed (the receive loop then reads EOF and the framework retires the
    datapath). Not ``Datapath.close()``: its half-close unwraps a TLS socket, and the framework's receive loop
    then fails on a ValueError."""
    sock = getattr(dp, "socket", None)
    if sock is None:
        getattr(dp, "close", lambda: None)()  # a test's fake
        return
    try:
        sock.close()
    except OSError:  # pragma: no cover
        pass


def _unbound(*_args: Any) -> None:
    raise RuntimeError("no sessions bound to take the session")


def address(dp: Any) -> str:
    addr = getattr(dp, "address", None)
    return "%s:%s" % tuple(addr[:2]) if addr else "?"


class Admission:
    """Identity and liveness checks of sessions against ``state`` (its switch maps, ``config``), echo probes
    over ``channel``; ``admit(dp)``: take a session a probe cleared (the sessions' admit, which asks this
    admission first: the app binds it once the sessions exist)."""

    def __init__(self, state: State, channel: Channel, counters: Any, changes: Changes,
                 admit: Callable[[Any], None] | None = None) -> None:
        self.state, self.channel, self.counters, self.changes = state, channel, counters, changes
        self.admit: Callable[[Any], None] = admit or _unbound
        self.recent: collections.deque[dict[str, Any]] = collections.deque(maxlen=RECENT)
        self.by_reason: collections.Counter = collections.Counter()
        self.pending: dict[int, Any] = {}  # id(dp) -> a session held while the live one is probed
        self.logged: dict[tuple, list[float]] = {}  # (dpid, host, reason) -> [last logged, suppressed since]
        self.handshakes = 0
        self.replaced = 0
        self.gate = TlsGate(self.handshake_refused, self.handshake_ok)

    def install(self) -> Any:
        """Route the framework's accepted connections through the TLS gate; returns the restore function."""
        return set_accept_hook(self.gate)

    # ------------------------------------------------------------ queries
    def live(self, dpid: int) -> Any:
        """The admitted session of ``dpid`` (managed, retired, unknown or another instance's switch), or None."""
        fab = self.state
        sw = fab.by_dpid.get(dpid)
        if sw is not None and sw.dp is not None:
            return sw.dp
        old = fab.retired.get(dpid)
        if old is not None and old.dp is not None:
            return old.dp
        dp = fab.unmanaged.get(dpid)
        if dp is not None:
            return dp
        return (fab.unknown.get(dpid) or {}).get("dp")

    def admitted(self, dp: Any) -> bool:
        """Is ``dp`` the session the app listens to for its dpid? Every handler asks before acting."""
        sw = self.state.by_dpid.get(dp.id)
        if sw is not None and sw.dp is dp:
            return True
        return self.live(dp.id) is dp

    # ------------------------------------------------------------ claims
    def claim(self, dp: Any) -> bool:
        """A session reached MAIN_DISPATCHER: True if the app takes it now; False if it is refused or held
        while the dpid's live session is probed (:meth:`probe` then admits or refuses it)."""
        fab = self.state
        switch = fab.config.dpid_to_switch.get(dp.id)
        if fab.config.tls is not None:
            names = getattr(getattr(dp, "socket", None), "hpcfabric_names", ())  # read by the TLS gate
            if not may_claim(names, dp.id, switch, fab.config.tls.names):
                self.refuse(dp, MISMATCH, f"certificate names {', '.join(names) or 'nothing'}, the session claims "
                            f"dpid {dp.id:016x}" + (f" ({switch})" if switch else ""), names)
                return False
        live = self.live(dp.id)
        if live is None or live is dp or getattr(live, "state", None) == DEAD_DISPATCHER:
            return True
        self.pending[id(dp)] = dp
        self.counters["sessions_probed"] += 1
        hub.spawn(self.probe, dp, live)
        return False

    def probe(self, dp: Any, live: Any) -> None:
        """Echo the dpid's live session: answered -> refuse ``dp``; silent -> close it and admit ``dp``."""
        fab = self.state
        t0 = time.monotonic()
        answered = self.echo(live, fab.config.echo_timeout)
        ms = (time.monotonic() - t0) * 1000
        if self.pending.pop(id(dp), None) is None or getattr(dp, "state", None) == DEAD_DISPATCHER:
            return  # the newcomer left meanwhile
        if self.live(dp.id) is not live:  # the live one disconnected (or was replaced) meanwhile: judge again
            if self.claim(dp):
                self.admit(dp)
            return
        if answered:
            self.refuse(dp, DUPLICATE, f"dpid {dp.id:016x} is connected from {address(live)}, which answered an "
                        f"echo in {ms:.1f} ms")
            return
        name = fab.config.dpid_to_switch.get(dp.id, "unknown switch")
        LOG.warning("%s (dpid %016x): the session from %s did not answer an echo within %g s: closed; the new session "
                    "from %s takes its place", name, dp.id, address(live), fab.config.echo_timeout, address(dp))
        self.replaced += 1
        self.counters["sessions_replaced"] += 1
        close(live)
        self.admit(dp)

    def echo(self, dp: Any, timeout: float) -> bool:
        """Does ``dp`` answer an echo request within ``timeout`` seconds?"""
        ch = self.channel
        xid = ch.xids(dp, 1)
        hub.spawn(dp.send, ofwire.echo_request(xid))  # a stuck send queue must not hold the probe past its timeout
        try:
            ch.wait(dp, xid, None, timeout=timeout)
        except SyncError:  # no reply in time, or disconnected
            return False
        return True

    def forget(self, dp: Any) -> None:
        """A session that was never admitted disconnected."""
        self.pending.pop(id(dp), None)

    # ------------------------------------------------------------ refusals
    def refuse(self, dp: Any, reason: str, detail: str, names: tuple[str, ...] = ()) -> None:
        """Refuse session ``dp``: recorded, logged, told why (OpenFlow error), closed."""
        self.record(getattr(dp, "address", None), reason, detail, dp.id, names)
        text = f"hpcfabric: session refused: {reason}: {detail}".encode()[:1000]
        hub.spawn(self.close_refused, dp, ofwire.error(0, ofwire.OFPET_HELLO_FAILED, ofwire.OFPHFC_EPERM, text))

    @staticmethod
    def close_refused(dp: Any, data: bytes) -> None:
        dp.send(data)
        hub.sleep(CLOSE_AFTER_S)
        if getattr(dp, "state", None) != DEAD_DISPATCHER:
            close(dp)

    def handshake_refused(self, addr: Any, reason: str, detail: str) -> None:
        self.record(addr, reason, detail, None)

    def handshake_ok(self, _addr: Any) -> None:
        self.handshakes += 1

    def record(self, addr: Any, reason: str, detail: str, dpid: int | None, names: tuple[str, ...] = ()) -> None:
        fab = self.state
        where = "%s:%s" % tuple(addr[:2]) if addr else "?"
        switch = fab.config.dpid_to_switch.get(dpid) if dpid is not None else None
        self.by_reason[reason] += 1
        self.counters["refused_sessions"] += 1
        self.recent.append({"time": time.time(), "dpid": None if dpid is None else f"{dpid:016x}", "switch": switch,
                            "address": where, "reason": reason, "detail": detail, "certificate": list(names)})
        key = (dpid, where.rsplit(":", 1)[0], reason)
        now = time.monotonic()
        if len(self.logged) > LOG_KEYS:  # many sources: forget the old ones rather than grow without bound
            self.logged.clear()
        seen = self.logged.get(key)
        if seen is not None and now - seen[0] < LOG_EVERY_S:
            seen[1] += 1
        else:
            more = f" ({seen[1]} more like it since the last report)" if seen and seen[1] else ""
            who = f"session for {switch or 'an unknown switch'} (dpid {dpid:016x})" if dpid is not None else "connection"
            LOG.warning("OpenFlow %s from %s refused: %s: %s%s", who, where, reason, detail, more)
            self.logged[key] = [now, 0]
        self.changes.mark()

    def as_dict(self) -> dict[str, Any]:
        """The status file's ``admission`` entry, and the last refusals as ``impostors`` (the status shows them
        at its top level)."""
        return {"impostors": list(self.recent), "tls": self.state.config.tls is not None, "tls_handshakes": self.handshakes,
                "refused_by_reason": dict(sorted(self.by_reason.items())), "pending": len(self.pending),
                "replaced_dead_sessions": self.replaced,
                "unadmitted_messages": self.counters["unadmitted_messages"]}
