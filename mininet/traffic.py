"""Purpose-built UDP traffic generator and receiver for one emulated host (stdlib only).

Run inside a Mininet host (``host.popen``), one process per host::

    python traffic.py --id 3 --dests 10.0.0.5,10.0.0.9 --pps 50 --size 1000 \\
        --start T0 --warmup 2 --measure 10 --drain 2 --seed 7 --out /tmp/x/h3.json

From ``T0`` (CLOCK_MONOTONIC seconds, shared by every network namespace of the
machine) the process sends UDP datagrams of ``--size`` bytes (UDP payload)
with exponential inter-departure times (a Poisson source of ``--pps`` frames
per second, like the Bernoulli injection of the paper's simulations), each to
a destination drawn uniformly from ``--dests``. Sending stops at
``T0 + warmup + measure + drain`` (the load stays on while the measured
frames drain); receiving stops ``--linger`` seconds later.

Frames *sent* in the window ``[T0 + warmup, T0 + warmup + measure)`` are
"measured": the receiver counts them per source and records their one-way
latency (receive time minus the send time carried in the frame -- exact,
because every namespace reads the same monotonic clock). The output JSON
has the sender's and the receiver's counts; the experiment runner
(``run_experiment.py``) adds them up across hosts.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import select
import socket
import struct
import sys
import time

MAGIC = 0x48465447  # "HFTG"
HEADER = struct.Struct("!IHIdB")  # magic, source id, sequence, send time, measured flag
PORT = 5999
#: latency samples kept per receiver (uniform reservoir sample)
RESERVOIR = 4000


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="traffic.py", description=__doc__.splitlines()[0])
    ap.add_argument("--id", type=int, required=True, help="this host's numeric id (carried in every frame)")
    ap.add_argument("--dests", default="", help="comma-separated IPv4 destinations (none: receive only)")
    ap.add_argument("--pps", type=float, default=0.0, help="mean frames per second sent")
    ap.add_argument("--size", type=int, default=1000, help="UDP payload bytes (>= %d)" % HEADER.size)
    ap.add_argument("--start", type=float, required=True, help="CLOCK_MONOTONIC time to start sending")
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--measure", type=float, default=10.0)
    ap.add_argument("--drain", type=float, default=2.0, help="seconds of load after the window")
    ap.add_argument("--linger", type=float, default=0.5, help="seconds of receiving after the last send")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--port", type=int, default=PORT)
    ap.add_argument("--out", required=True, help="JSON result file")
    args = ap.parse_args(argv)
    if args.size < HEADER.size or args.size > 8972:
        ap.error(f"--size must be {HEADER.size}..8972 bytes, got {args.size}")
    if args.pps < 0:
        ap.error("--pps must be >= 0")
    return args


def run(args: argparse.Namespace) -> dict:
    rng = random.Random(args.seed)
    dests = [d for d in args.dests.split(",") if d]
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 21)
    rx.bind(("0.0.0.0", args.port))
    rx.setblocking(False)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
    tx.setblocking(False)
    t_win = args.start + args.warmup
    t_win_end = t_win + args.measure
    t_stop = t_win_end + args.drain
    t_end = t_stop + args.linger
    pad = b"\0" * (args.size - HEADER.size)
    sent = sent_measured = send_errors = 0
    seq = 0
    rx_measured: dict[int, int] = {}
    rx_total = rx_late = 0
    lat: list[float] = []
    lat_seen = 0
    lat_sum = 0.0
    lat_max = 0.0
    next_send = args.start + (rng.expovariate(args.pps) if args.pps > 0 and dests else float("inf"))
    while True:
        now = time.monotonic()
        if now >= t_end:
            break
        # send everything due (catch up after a late wake-up, as a NIC queue would)
        while dests and next_send <= now and next_send < t_stop:
            measured = t_win <= next_send < t_win_end
            frame = HEADER.pack(MAGIC, args.id, seq, next_send, measured) + pad
            try:
                tx.sendto(frame, (dests[rng.randrange(len(dests))], args.port))
                sent += 1
                if measured:
                    sent_measured += 1
            except OSError:
                send_errors += 1
                if measured:
                    sent_measured += 1  # offered and lost at the source: counts as loss
            seq += 1
            next_send += rng.expovariate(args.pps)
        wake = min(next_send if next_send < t_stop else t_end, t_end)
        timeout = max(0.0, wake - time.monotonic())
        ready, _, _ = select.select([rx], [], [], timeout)
        if not ready:
            continue
        while True:
            try:
                data = rx.recv(65535)
            except BlockingIOError:
                break
            now = time.monotonic()
            if len(data) < HEADER.size:
                continue
            magic, src, _seq, ts, measured = HEADER.unpack_from(data)
            if magic != MAGIC:
                continue
            rx_total += 1
            if not measured:
                continue
            rx_measured[src] = rx_measured.get(src, 0) + 1
            d = (now - ts) * 1000.0
            lat_seen += 1
            lat_sum += d
            lat_max = max(lat_max, d)
            if now > t_stop:
                rx_late += 1
            if len(lat) < RESERVOIR:
                lat.append(d)
            else:
                j = rng.randrange(lat_seen)
                if j < RESERVOIR:
                    lat[j] = d
    return {
        "id": args.id,
        "pps": args.pps,
        "size": args.size,
        "dests": len(dests),
        "sent": sent,
        "sent_measured": sent_measured,
        "send_errors": send_errors,
        "rx_total": rx_total,
        "rx_measured_by_src": {str(k): v for k, v in sorted(rx_measured.items())},
        "rx_measured": sum(rx_measured.values()),
        "rx_after_stop": rx_late,
        "latency_ms_sum": lat_sum,
        "latency_ms_max": lat_max,
        "latency_ms_sample": [round(x, 3) for x in lat],
        "window_s": args.measure,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    result = run(args)
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
