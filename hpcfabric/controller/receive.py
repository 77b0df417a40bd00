"""The datapath receive loop: the framework's, without the two costs it has at thousands of switches.

os-ken's (and Ryu's) ``Datapath._recv_loop`` reads each message in two
``recv`` calls (header, then body), parses it, hands it to the observers and
the ``ofp_event`` handlers, and gives the hub back only every 2,048 messages.
At Table III (2,064 switches) two things came of that, measured with
``HPCFABRIC_HUB_WATCH`` (docs/scale.md "PAUSE tail"):

* **Garbage the collector cannot free.** Every idle switch's read times out
  after ``socket_timeout`` (5 s) and the loop goes round again. The timeout
  is an exception whose traceback holds eventlet's frames, whose locals hold
  the exception: a reference cycle (~25 objects) per switch every 5 s. The
  frames had waited 5 s, so they had already been moved out of the
  collector's reach (controller.heap freezes what survives a young
  collection): the controller's memory grew by ~0.65 MB/s (2.3 GB an hour).
  Here the traceback is dropped where the timeout is caught: the cycle is
  never formed and reference counting frees it all.
* **Long holds of the hub.** A burst buffered on one connection was handled
  in one go. Here the loop gives the hub back once it has held it for
  ``YIELD_S``, so a PAUSE waiting on another connection is read soon.

It also reads up to ``READ`` bytes at a time (one system call for a burst,
not two per message). Parsing, observers, handlers and their dispatcher
filter are the framework's, in the same order. Installed by
``hpcfabric controller`` (process-wide, like the fast parsers), with
:func:`install`.
"""

from __future__ import annotations

import ssl
import struct
import time
from socket import timeout as SocketTimeout  # noqa: N812 - the name os-ken uses
from typing import Any, Callable

from hpcfabric.controller.framework import DEAD_DISPATCHER, hub, ofp_event, parse_message, set_receive_loop

#: bytes asked for per read
READ = 1 << 16
#: the longest the loop handles messages before giving the hub back (seconds)
YIELD_S = 0.002
#: a read longer than this waited for data (the hub ran others meanwhile); a buffered read takes ~10 us
WAITED_S = 0.0002
HEADER = struct.Struct("!BBHI")


def dispatch(dp: Any, msg: Any) -> None:
    """A parsed message to the observers' queues and the ``ofp_event`` handlers of the datapath's state."""
    ev = ofp_event.ofp_msg_to_ev(msg)
    brick = dp.ofp_brick
    if brick is None:
        return
    brick.send_event_to_observers(ev, dp.state)
    cls = ev.__class__
    for handler in [h for h in brick.get_handlers(ev) if dp.state in h.callers[cls].dispatchers]:
        handler(ev)


def receive_loop(dp: Any, clock: Callable[[], float] = time.perf_counter) -> None:
    """Read, parse and dispatch ``dp``'s messages until its state is DEAD or the switch closes the connection."""
    sock = dp.socket
    buf = bytearray()
    held_since = clock()
    size = HEADER.size
    while dp.state != DEAD_DISPATCHER:
        t = clock()
        try:
            data = sock.recv(READ)
        except (SocketTimeout, ssl.SSLError) as err:  # an idle switch (eventlet raises SSLError on TLS timeouts)
            err.__traceback__ = None  # the traceback and its frames hold the exception: no cycle, no garbage
            held_since = clock()
            continue
        except (EOFError, OSError, ValueError):  # ValueError: a TLS socket closed under us
            break
        if not data:
            break
        now = clock()
        if now - t > WAITED_S:  # the read found nothing buffered and gave the hub back
            held_since = now
        buf += data
        pos, end = 0, len(buf)
        while end - pos >= size:
            version, msg_type, msg_len, xid = HEADER.unpack_from(buf, pos)
            msg_len = max(msg_len, size)  # a bogus length: skip a header, as the framework does
            if end - pos < msg_len:
                break
            msg = parse_message(dp, version, msg_type, msg_len, xid, buf[pos:pos + msg_len])
            pos += msg_len
            if msg:
                dispatch(dp, msg)
            if clock() - held_since > YIELD_S:
                hub.sleep(0)
                held_since = clock()
        del buf[:pos]


def install() -> Callable[..., Any]:
    """Make every datapath of this process use :func:`receive_loop`; returns the method it replaced."""
    return set_receive_loop(receive_loop)
