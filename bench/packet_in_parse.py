#!/usr/bin/env python3
"""Cost of one PACKET_IN: the framework's parser vs the fast one (hpcfabric.openflow.packetin), one JSON line.

Timed side by side in one process, min over ``--repeat`` runs of ``--number`` calls, in microseconds:

* ``parse_us``: the framework's ``ofproto_parser.msg`` (what its receive loop calls) on the emulator's LLDP
  packet-in (hpcfabric.emu.wire.packet_in: match = in_port only, the frame build_lldp makes with a nonce), then
  ``msg.match["in_port"]``; ``framework`` vs ``fast``;
* ``parse_metadata_us``: the same with a match of in_port + metadata + tunnel_id (what OVS sends when those
  are set);
* ``handler_us``: parse + ``ofp_event.ofp_msg_to_ev`` + the app's ``_packet_in`` for an LLDP frame of the
  app's own arriving on a cabled port (tests/test_ops_fakes: fake switches of dragonfly-a4-p2-h2, every
  switch confirmed), i.e. what a switch's receive loop spends per LLDP packet-in above its socket reads.

Usage::

    .venv/bin/python bench/packet_in_parse.py [--number 20000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import sys
import timeit
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
warnings.simplefilter("ignore")

from hpcfabric.controller import framework  # noqa: E402
from hpcfabric.controller.framework import ofp_event, ofproto as O, ofproto_parser as P  # noqa: E402
from hpcfabric.controller.launch import install_fast_packet_in  # noqa: E402
from hpcfabric.emu import wire as W  # noqa: E402
from hpcfabric.protocols.lldp import build_lldp  # noqa: E402


def per_call_us(fn, number: int, repeat: int) -> float:
    return round(min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6, 2)


def with_match(match, data: bytes) -> bytes:
    mbuf = bytearray()
    match.serialize(mbuf, 0)
    body = struct.pack("!IHBBQ", 0xFFFFFFFF, len(data), 1, 0, 0) + bytes(mbuf) + b"\0\0" + data
    return struct.pack("!BBHI", 4, O.OFPT_PACKET_IN, 8 + len(body), 0) + body


def lldp_handler(number: int):
    """(app, datapath, packet-in bytes) of an LLDP frame the app sent, arriving at its cabled peer."""
    from test_ops_fakes import FakeSwitch, make_app, settle
    import tempfile

    tmp = Path(tempfile.mkdtemp(prefix="pin-bench-"))
    conf = tmp / "b.conf"
    conf.write_text(f"[hpcfabric]\ntopology = {ROOT / 'topologies' / 'dragonfly-a4-p2-h2.yaml'}\n"
                    "routing = conditional\nreload_poll = 0\n")
    app = make_app(conf, tmp / "status.json")
    fakes = {st.name: FakeSwitch(app, st.dpid, list(range(1, 7))) for st in app.switches.values()}
    for f in fakes.values():
        f.connect()
    settle()
    a, port, peer = next((n, p, peer) for n in sorted(fakes) for p, peer in sorted(app.fabric.fabric_ports(n).items())
                         if p in fakes[n].ports and peer.port in fakes[peer.node].ports)
    frame = app.wiring.frame(fakes[a].id, port, fakes[a].ports[port].hw_addr)
    return app, fakes[peer.node], W.packet_in(peer.port, frame)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--number", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--no-handler", action="store_true", help="skip the handler timing (builds a small app)")
    args = ap.parse_args()
    if args.number < 1 or args.repeat < 1:
        print("packet_in_parse: --number and --repeat must be >= 1", file=sys.stderr)
        return 2
    msg = P.ofproto_parser.msg
    lldp = W.packet_in(7, build_lldp(0x12, 7, bytes.fromhex("020000000007"), nonce=b"12345678"))
    meta = with_match(P.OFPMatch(in_port=7, metadata=0x100000001, tunnel_id=3), lldp[32:])
    handler = None if args.no_handler else lldp_handler(args.number)

    def timings(fast: bool) -> dict[str, float]:
        old = install_fast_packet_in() if fast else None
        try:
            out = {}
            for key, buf in (("parse_us", lldp), ("parse_metadata_us", meta)):
                head = struct.unpack_from("!BBHI", buf)
                assert msg(None, *head, buf).match["in_port"] == 7
                out[key] = per_call_us(lambda: msg(None, *head, buf).match["in_port"], args.number, args.repeat)
            if handler is not None:
                app, dp, buf = handler
                head = struct.unpack_from("!BBHI", buf)
                seen = app.counters["lldp_received"]
                app._packet_in(ofp_event.ofp_msg_to_ev(msg(dp, *head, buf)))
                assert app.counters["lldp_received"] == seen + 1, "the LLDP packet-in was not handled"
                out["handler_us"] = per_call_us(lambda: app._packet_in(ofp_event.ofp_msg_to_ev(msg(dp, *head, buf))),
                                                args.number // 4 or 1, args.repeat)
            return out
        finally:
            if old is not None:
                framework.restore_packet_in_parser(old)

    ref, fast = timings(False), timings(True)
    result = {"bench": "packet_in_parse", "framework": framework.NAME, "lldp_bytes": len(lldp)}
    for key in ref:
        result[key] = {"framework": ref[key], "fast": fast[key], "saved": round(ref[key] - fast[key], 2)}
    result["load_avg_1m"] = round(os.getloadavg()[0], 2)
    print(json.dumps(result))
    if handler is not None:
        handler[0].stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
