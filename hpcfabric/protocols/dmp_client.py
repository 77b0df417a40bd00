"""``hpcfabric-dmp``: the host side of the Dynamic MAC Protocol (stdlib only).

::

    hpcfabric-dmp IFACE [--timeout 1.0] [--retries 3] [--dry-run] [--json]

Sends a DMP request (:mod:`hpcfabric.protocols.dmp`) out of IFACE through an
AF_PACKET socket bound to EtherType 0x88b5, waits ``--timeout`` seconds for
the access switch's echo, resends up to ``--retries`` more times, then sets
the interface's MAC to the one the switch wrote into the reply's source
address (``ip link set dev IFACE address MAC``; Linux changes the address of
an up veth/most NICs live, the client only falls back to down/set/up if the
driver refuses). The link is up when the client exits.

Idempotent: if the switch assigns the MAC the interface already has, the
client reports "already assigned" and changes nothing.

Exit codes: 0 assigned / already assigned / dry run answered; 1 no (valid)
answer after all attempts, or the address could not be applied; 2 usage
errors (bad arguments, no such interface, not an Ethernet interface, not
permitted -- run as root).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import select
import socket
import subprocess
import sys
import time
from typing import Any, Sequence

from hpcfabric.protocols.dmp import (
    ETH_TYPE_DMP,
    InvalidAssignment,
    build_request,
    format_mac,
    mac_bytes,
    parse_mac,
    parse_reply,
)

PROG = "hpcfabric-dmp"
EXIT_OK = 0
EXIT_NO_ANSWER = 1
EXIT_USAGE = 2
ARPHRD_ETHER = 1
IFF_UP = 0x1
PACKET_OUTGOING = getattr(socket, "PACKET_OUTGOING", 4)
SYS_NET = "/sys/class/net"


class UsageError(Exception):
    """Exit 2: the command cannot run as asked."""


class Failure(Exception):
    """Exit 1: ran, but did not get (``no-answer``) or could not apply (``failed``) an address."""

    def __init__(self, message: str, status: str = "failed"):
        super().__init__(message)
        self.status = status


# -- interface helpers -------------------------------------------------------


def _sys(iface: str, attr: str) -> str:
    with open(os.path.join(SYS_NET, iface, attr), encoding="ascii") as f:
        return f.read().strip()


def current_mac(iface: str) -> int:
    return parse_mac(_sys(iface, "address"))


def is_up(iface: str) -> bool:
    return bool(int(_sys(iface, "flags"), 16) & IFF_UP)


def check_interface(iface: str) -> None:
    if not iface or "/" in iface or iface in (".", "..") or len(iface) > 15:
        raise UsageError(f"invalid interface name {iface!r}")
    if not os.path.isdir(os.path.join(SYS_NET, iface)):
        raise UsageError(f"no such interface {iface!r} (in this network namespace)")
    try:
        kind = int(_sys(iface, "type"))
    except (OSError, ValueError):
        kind = ARPHRD_ETHER
    if kind != ARPHRD_ETHER:
        raise UsageError(f"{iface} is not an Ethernet interface (ARPHRD type {kind})")


def _ip(*args: str) -> None:
    """Run ``ip ARGS``; raise Failure (or UsageError when not permitted) on error."""
    try:
        proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10)
    except FileNotFoundError:
        raise Failure("the 'ip' command (iproute2) is not installed") from None
    except subprocess.TimeoutExpired:
        raise Failure(f"'ip {' '.join(args)}' timed out") from None
    if proc.returncode != 0:
        msg = (proc.stderr or proc.stdout).strip() or f"exit status {proc.returncode}"
        if "not permitted" in msg.lower():
            raise UsageError(f"'ip {' '.join(args)}': {msg} (run as root)")
        raise Failure(f"'ip {' '.join(args)}' failed: {msg}")


def apply_mac(iface: str, mac: int) -> bool:
    """Set ``iface``'s MAC to ``mac``; leave it up. Returns True if a down/up cycle was needed."""
    text = format_mac(mac)
    cycled = False
    try:
        _ip("link", "set", "dev", iface, "address", text)
    except Failure as err:
        if "busy" not in str(err).lower():
            raise
        # drivers without live address change refuse while up (EBUSY)
        cycled = True
        _ip("link", "set", "dev", iface, "down")
        try:
            _ip("link", "set", "dev", iface, "address", text)
        finally:
            _ip("link", "set", "dev", iface, "up")
    if not is_up(iface):
        _ip("link", "set", "dev", iface, "up")
    now = current_mac(iface)
    if now != mac:
        raise Failure(f"{iface} has {format_mac(now)} after setting {text}")
    return cycled


# -- protocol ------------------------------------------------------------------


def open_socket(iface: str) -> socket.socket:
    try:
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_TYPE_DMP))
    except PermissionError:
        raise UsageError("opening a raw AF_PACKET socket is not permitted (run as root / CAP_NET_RAW)") from None
    try:
        sock.bind((iface, ETH_TYPE_DMP))
    except OSError as err:
        sock.close()
        raise UsageError(f"cannot bind a raw socket to {iface}: {err.strerror or err}") from None
    return sock


def request(iface: str, my_mac: int, timeout: float, retries: int) -> dict[str, Any]:
    """Send requests until a valid reply arrives; returns attempts, rtt and the assigned MAC.

    Raises Failure when every attempt timed out (or only produced invalid
    assignments, which are reported).
    """
    sock = open_socket(iface)
    nonces: set[int] = set()
    invalid: list[str] = []
    try:
        for attempt in range(1, retries + 2):
            nonce = secrets.randbits(32)
            nonces.add(nonce)
            frame = build_request(mac_bytes(my_mac), nonce)
            sent = time.monotonic()
            try:
                sock.send(frame)
            except OSError as err:
                raise Failure(f"sending on {iface} failed: {err.strerror or err}") from None
            deadline = sent + timeout
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                ready, _, _ = select.select([sock], [], [], left)
                if not ready:
                    break
                data, addr = sock.recvfrom(2048)
                if len(addr) > 2 and addr[2] == PACKET_OUTGOING:
                    continue  # our own request, seen by the packet socket on the way out
                try:
                    mac = parse_reply(data, nonces, my_mac)
                except InvalidAssignment as err:
                    invalid.append(format_mac(err.mac) + ": " + err.reason)
                    continue
                if mac is None:
                    continue
                return {"mac": mac, "attempts": attempt, "rtt_ms": round((time.monotonic() - sent) * 1000, 3)}
    finally:
        sock.close()
    detail = f"; ignored invalid assignment(s): {'; '.join(sorted(set(invalid)))}" if invalid else ""
    raise Failure(
        f"no DMP answer on {iface} after {retries + 1} request(s), {timeout:g} s each "
        f"(is the access switch's DMP rule installed?){detail}",
        status="no-answer",
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    iface = args.interface
    check_interface(iface)
    old = current_mac(iface)
    result: dict[str, Any] = {"interface": iface, "old_mac": format_mac(old)}
    if not is_up(iface):
        if args.dry_run:
            raise Failure(f"{iface} is down (a dry run changes nothing, so it cannot bring it up)")
        _ip("link", "set", "dev", iface, "up")
        result["brought_up"] = True
    answer = request(iface, old, args.timeout, args.retries)
    mac = answer["mac"]
    result.update(mac=format_mac(mac), attempts=answer["attempts"], rtt_ms=answer["rtt_ms"])
    if mac == old:
        result.update(status="already-assigned", changed=False)
    elif args.dry_run:
        result.update(status="dry-run", changed=False)
    else:
        result["link_cycled"] = apply_mac(iface, mac)
        result.update(status="assigned", changed=True)
    return result


def _message(r: dict[str, Any]) -> str:
    how = f"{r['attempts']} request(s), reply after {r['rtt_ms']:g} ms"
    if r["status"] == "already-assigned":
        return f"{r['interface']}: already assigned {r['mac']} (nothing changed; {how})"
    if r["status"] == "dry-run":
        return f"{r['interface']}: switch assigns {r['mac']} (currently {r['old_mac']}; dry run, not applied; {how})"
    return f"{r['interface']}: assigned {r['mac']} (was {r['old_mac']}; {how})"


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError(f"must be in (0, 3600] seconds, got {text}")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if not 0 <= value <= 1000:
        raise argparse.ArgumentTypeError(f"must be 0..1000, got {value}")
    return value


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Ask the access switch for this interface's hierarchical MAC (DMP, EtherType 0x88b5) and adopt it.",
        epilog="exit status: 0 assigned or already assigned, 1 no valid answer / could not apply, 2 usage error",
    )
    p.add_argument("interface", metavar="IFACE", help="Ethernet interface connected to the access switch")
    p.add_argument("--timeout", type=_positive, default=1.0, help="seconds to wait for each answer (default 1.0)")
    p.add_argument("--retries", type=_count, default=3, help="requests to resend after the first (default 3)")
    p.add_argument("--dry-run", action="store_true", help="ask and report, but do not change the address")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)  # exits 2 on bad arguments
    try:
        result = run(args)
        code = EXIT_OK
    except UsageError as err:
        result, code = {"interface": args.interface, "status": "error", "error": str(err)}, EXIT_USAGE
    except Failure as err:
        result, code = {"interface": args.interface, "status": err.status, "error": str(err)}, EXIT_NO_ANSWER
    if args.json:
        print(json.dumps(result, sort_keys=True))
    elif code == EXIT_OK:
        print(_message(result))
    if code != EXIT_OK:
        print(f"{PROG}: error: {result['error']}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
