"""Request/reply plumbing over the switches' OpenFlow connections: xids, sends, waiters, collected errors.

A caller takes xids (:meth:`Channel.xids`), sends, and waits for the reply or
error of one xid (:meth:`Channel.wait`); the app's reply handlers wake the
waiter (:meth:`Channel.wake`, :meth:`Channel.multipart_reply`). Errors are
kept per switch and xid (:meth:`Channel.record_error`) until an install
collects those of its xid ranges (:meth:`Channel.take_errors`). A lost
connection fails its waiters with :class:`Disconnected` (:meth:`Channel.fail`).
"""

from __future__ import annotations

import collections
import logging
from typing import Any, Callable, Iterable

from hpcfabric.controller.framework import error_text, hub

LOG = logging.getLogger("hpcfabric.controller")

MAX_XID = 0xFFFFFFFF
SEND_CHUNK = 256 * 1024  # bytes per Datapath.send (its queue holds 16 entries)
REPLY_TIMEOUT = 60.0


class SyncError(Exception):
    """A switch rejected or did not answer what an install or a role claim sent."""


class Disconnected(SyncError):
    """The connection went away (or was replaced) while we waited on it."""


def err_text(err: tuple[int, ...]) -> str:
    """'(xid,) type, code' -> 'OFPET_... / code' text."""
    return error_text(err[-2], err[-1])


def install_timeout(changes: int) -> float:
    """Reply timeout for an install of ``changes`` flow-mods: hardware switches may take ~1 ms per entry."""
    return REPLY_TIMEOUT + changes / 500.0


class Waiter:
    """The reply (or error, or multipart bodies) one xid is waited for with."""

    __slots__ = ("event", "reply", "error", "parts")

    def __init__(self) -> None:
        self.event = hub.Event()
        self.reply: Any = None
        self.error: Any = None
        self.parts: list[Any] = []


class Channel:
    """Waiters and collected errors of every connection.

    ``counters`` is the app's counter set; ``switch_of(dpid)`` names a managed
    switch (its ``SwitchState``, or None) for the log of an error nobody waits for.
    """

    def __init__(self, counters: collections.Counter, switch_of: Callable[[int], Any]) -> None:
        self.counters = counters
        self.switch_of = switch_of
        self.waiters: dict[tuple[int, int], Waiter] = {}
        self.errors: dict[int, dict[int, tuple[int, int]]] = collections.defaultdict(dict)

    @staticmethod
    def xids(dp: Any, n: int) -> int:
        """Reserve ``n`` consecutive xids on ``dp``; returns the first."""
        start = (dp.xid + 1) & MAX_XID
        dp.xid = (dp.xid + n) & MAX_XID
        return start

    @staticmethod
    def send(dp: Any, data: bytes) -> None:
        if not dp.send(data):
            raise Disconnected("connection closing")

    def send_chunks(self, dp: Any, parts: Iterable[bytes]) -> None:
        buf = bytearray()
        for p in parts:
            buf += p
            if len(buf) >= SEND_CHUNK:
                self.send(dp, bytes(buf))
                buf = bytearray()
        if buf:
            self.send(dp, bytes(buf))

    def wait(self, dp: Any, xid: int, data: bytes | None = None, timeout: float = REPLY_TIMEOUT) -> Waiter:
        """Register a waiter for ``xid``, send ``data``, wait for the reply or error."""
        w = Waiter()
        key = (dp.id, xid)
        self.waiters[key] = w
        try:
            if data is not None:
                self.send(dp, data)
            if not w.event.wait(timeout=timeout):
                raise SyncError(f"no reply to xid {xid:#x} within {timeout:g} s")
        finally:
            self.waiters.pop(key, None)
        if w.reply is Disconnected:
            raise Disconnected("switch disconnected")
        return w

    def wake(self, dpid: int, xid: int, reply: Any = None, error: Any = None, done: bool = True) -> bool:
        """Hand a reply or error to the waiter of ``xid``; False if nobody waits for it."""
        w = self.waiters.get((dpid, xid))
        if w is None:
            return False
        if error is not None:
            w.error = error
        if reply is not None:
            w.reply = reply
        if done:
            w.event.set()
        return True

    def fail(self, dpid: int) -> None:
        """The connection of ``dpid`` is gone: every waiter on it raises :class:`Disconnected`."""
        for (d, _xid), w in list(self.waiters.items()):
            if d == dpid:
                w.reply = Disconnected
                w.event.set()

    def multipart(self, dp: Any, req: Any, timeout: float = REPLY_TIMEOUT) -> list[Any]:
        """Send a framework multipart request and collect every part's body."""
        dp.set_xid(req)
        req.serialize()
        w = self.wait(dp, req.xid, bytes(req.buf), timeout=timeout)
        self.pop_error(dp.id, req.xid)
        if w.error is not None:
            raise SyncError(f"{type(req).__name__} rejected: {err_text(w.error)}")
        return w.parts

    def multipart_reply(self, msg: Any) -> None:
        """One part of a multipart reply (flow stats, meters, groups) for the waiter of its xid."""
        w = self.waiters.get((msg.datapath.id, msg.xid))
        if w is None:
            return
        w.parts.extend(msg.body)
        if not msg.flags & msg.datapath.ofproto.OFPMPF_REPLY_MORE:
            w.reply = msg
            w.event.set()

    def record_error(self, msg: Any) -> None:
        """An OpenFlow error message: to its waiter, else kept for the install that sent its xid, else logged."""
        dpid = msg.datapath.id
        err = (msg.type, msg.code)
        self.counters["switch_errors"] += 1
        self.errors[dpid][msg.xid] = err
        if self.wake(dpid, msg.xid, error=err):
            return
        if len(self.errors[dpid]) > 10000:  # nobody collects: keep the newest
            for k in list(self.errors[dpid])[:5000]:
                del self.errors[dpid][k]
        sw = self.switch_of(dpid)
        if sw is not None and sw.syncing:
            return  # the sync collects and reports its errors
        LOG.warning(
            "switch %s: OpenFlow error xid=%#x %s", sw.name if sw else f"{dpid:016x}", msg.xid, err_text((msg.xid, *err))
        )

    def pop_error(self, dpid: int, xid: int) -> tuple[int, int] | None:
        """The error recorded for ``xid`` (None if there was none), forgotten."""
        return self.errors.get(dpid, {}).pop(xid, None)

    def take_errors(self, dpid: int, ranges: list[tuple[int, int]] | None = None) -> list[tuple[int, int, int]]:
        """Collected errors (xid, type, code) whose xid lies in ``ranges`` ((start, count), ...; None: all)."""
        errs = self.errors.get(dpid, {})
        out = []
        for x in list(errs):
            if ranges is None or any(((x - start) & MAX_XID) < n for start, n in ranges):
                out.append((x, *errs.pop(x)))
        return sorted(out)
