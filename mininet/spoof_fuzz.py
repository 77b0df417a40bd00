"""Reliability phase: spoofed and garbage frames must reach nobody, crash nothing and cost other hosts no ping.

One host sends frames with foreign source MACs (``spoof_delivered`` must be 0; its own-MAC control
frames must arrive) and garbage (PAUSE, PFC, CNM, LLDP, DMP, random bytes); garbage is also written
into every fabric link. :data:`FUZZ_SCRIPT` and :data:`SNIFF_SCRIPT` run as their own processes.

The injection is paced (``rate`` frames/s in all, bursts of at most 10 frames): Open vSwitch's
userspace datapath receives every port on one thread, and an unpaced flood overflows its sockets'
receive queues, so a ping of an uninvolved host was sometimes dropped by the emulator itself (1 in
15 runs on an idle machine; seen in CI). What the emulator dropped on receive during the phase is
reported (``fuzz_switch_rx_dropped``), so such a loss is told apart from one of our tables.
"""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Callable

from fabric_topo import host_intf, intf_name, node  # mininet/fabric_topo.py
from ovs_flows import socket_drops
from reachability import SteadyPing
from reliability_phases import Testbed, status_of
from runkit import Report

MARK = b"HFSPOOF!"
ETH_TEST = 0x88B6  # IEEE local experimental EtherType: the spoof/control frames

#: stdlib-only frame injector: python -c FUZZ IFACE MODE COUNT SEED RATE [SRC_HEX DSTS_HEX...]
#: RATE: frames per second of this injector (bursts of at most 10, then it sleeps to its schedule).
#: MODE host: garbage from a host; fabric: garbage for a fabric link (no well-formed foreign LLDP);
#: spoof: COUNT frames with foreign sources + COUNT/10 own-source control frames to DSTS.
FUZZ_SCRIPT = r"""
import os, random, socket, struct, sys, time
iface, mode, count, seed, rate = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
rng = random.Random(seed)
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((iface, 0))
mine = bytes.fromhex(open("/sys/class/net/%s/address" % iface).read().strip().replace(":", ""))
def mac():
    return bytes([0x02 | (rng.randrange(256) & 0xfc)]) + rng.randbytes(5)
def lldp():
    tlv = lambda t, v: struct.pack("!H", t << 9 | len(v)) + v
    f = bytes.fromhex("0180c200000e") + mac() + b"\x88\xcc" + tlv(1, b"\x07dpid:%016x" % rng.randrange(1 << 20)) \
        + tlv(2, b"\x07port:%d" % rng.randrange(64)) + tlv(3, b"\x00\x78") + tlv(0, b"")
    if mode == "fabric":  # malformed for sure: the first TLV claims more bytes than the frame has
        f = f[:14] + struct.pack("!H", 1 << 9 | 511) + f[16:]
    return f
def garbage():
    r = rng.random()
    pdst = bytes.fromhex("0180c2000001")
    if r < 0.2:
        f = pdst + mine + struct.pack("!HHH", 0x8808, rng.choice([1, 1, 2, 0x101, rng.randrange(65536)]), rng.randrange(65536))
    elif r < 0.3:
        f = pdst + mine + struct.pack("!HHH", 0x8808, 0x101, rng.randrange(65536)) + rng.randbytes(16)
    elif r < 0.4:
        f = mac() + mac() + b"\x22\xe9" + rng.randbytes(rng.randint(0, 64))
    elif r < 0.55:
        f = lldp()
    elif r < 0.65:
        m = mac() if mode == "host" else mine
        f = m + m + b"\x88\xb5" + rng.randbytes(rng.randint(0, 40))
    elif r < 0.75:
        f = mac() + mac() + b"\x81\x00" + rng.randbytes(rng.randint(2, 60))
    else:
        f = rng.randbytes(rng.randint(14, 1400))
        if mode == "fabric" and f[12:14] == b"\x88\xcc":
            f = f[:12] + b"\x00\x00" + f[14:]
    return f.ljust(60, b"\0")
sent = 0
t0 = time.monotonic()
def pace(i):
    if i % 10 == 9:
        ahead = t0 + (i + 1) / rate - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)
if mode == "spoof":
    src_hex, dsts = sys.argv[6], [bytes.fromhex(d) for d in sys.argv[7:]]
    me = bytes.fromhex(src_hex)
    for i in range(count):
        src = rng.choice([mac(), rng.choice(dsts), bytes(6), b"\xff" * 6, rng.randbytes(6)])
        if src == me:
            src = mac()
        s.send((rng.choice(dsts) + src + b"\x88\xb6" + b"HFSPOOF!" + struct.pack("!I", i)).ljust(60, b"\0"))
        sent += 1
        if i % 10 == 0:
            s.send((rng.choice(dsts) + me + b"\x88\xb6" + b"HFCTRL!!" + struct.pack("!I", i)).ljust(60, b"\0"))
        pace(i)
else:
    for i in range(count):
        s.send(garbage())
        sent += 1
        pace(i)
print("sent %d" % sent, flush=True)
"""

#: counts frames of EtherType 0x88b6 by marker for DURATION seconds: python -c SNIFF IFACE DURATION
SNIFF_SCRIPT = r"""
import select, socket, sys, time
iface, dur = sys.argv[1], float(sys.argv[2])
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x88b6))
s.bind((iface, 0))
end = time.monotonic() + dur
n = {b"HFSPOOF!": 0, b"HFCTRL!!": 0}
print("ready", flush=True)
while time.monotonic() < end:
    r, _, _ = select.select([s], [], [], 0.05)
    if r:
        f = s.recv(2048)
        if f[12:14] == b"\x88\xb6" and f[14:22] in n:
            n[f[14:22]] += 1
print("spoof %d ctrl %d" % (n[b"HFSPOOF!"], n[b"HFCTRL!!"]), flush=True)
"""



def fuzz_phase(bed: Testbed, spoof: int, fuzz: int, report: Report, log: Callable[[str], None],
               rate: float = 2500) -> None:
    """``spoof`` spoofed frames, then at least ``fuzz`` garbage frames in all: half from the first host, the
    rest spread over both ends of every fabric link (rounded up per link end), while the other hosts'
    sniffers count what arrives and a steady ping runs between two of them. Spoofing, then the garbage
    injectors together, send ``rate`` frames/s in all. ``fuzz_frames`` is what the injectors report as
    sent; ``fuzz_s`` how long the injection took; ``fuzz_switch_rx_dropped`` what Open vSwitch's receive
    queues dropped meanwhile (0 when the pacing leaves the emulator room)."""
    net, fabric, plan, master = bed.net, bed.fabric, bed.cfg.plan, bed.master
    hosts = [h.name for h in fabric.hosts]
    spoofer = hosts[0]
    others = [h for h in hosts if h != spoofer]
    dropped0 = socket_drops()
    watch = SteadyPing(net, others[0], others[-1], interval=0.01)
    sniffers = {}
    for h in others:
        sniffers[h] = node(net, h).popen([sys.executable, "-c", SNIFF_SCRIPT, host_intf(net, h), "8"],
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for p in sniffers.values():
        p.stdout.readline()  # "ready"
    me = f"{plan.host_mac[spoofer]:012x}"
    dsts = [f"{plan.host_mac[h]:012x}" for h in others]
    spoofing = node(net, spoofer).popen([sys.executable, "-c", FUZZ_SCRIPT, host_intf(net, spoofer), "spoof",
                                         str(spoof), "7", str(rate), me, *dsts], stdout=subprocess.PIPE, text=True)
    spoofing.communicate(timeout=60)
    t_fuzz = time.monotonic()
    from_host = fuzz // 2
    fabric_ifs = [intf_name(l.b, l.b_port, bed.prefix) for l in fabric.links] + \
                 [intf_name(l.a, l.a_port, bed.prefix) for l in fabric.links]
    per = max(1, -(-(fuzz - from_host) // len(fabric_ifs)))  # rounded up: the total is at least ``fuzz``
    host_rate = rate * from_host / max(1, fuzz)  # every injector ends about when the others do
    fabric_rate = (rate - host_rate) / len(fabric_ifs)
    procs = [node(net, spoofer).popen([sys.executable, "-c", FUZZ_SCRIPT, host_intf(net, spoofer), "host",
                                       str(from_host), "8", str(host_rate)], stdout=subprocess.PIPE, text=True)]
    procs += [subprocess.Popen([sys.executable, "-c", FUZZ_SCRIPT, i, "fabric", str(per), str(k), str(fabric_rate)],
                               stdout=subprocess.PIPE, text=True) for k, i in enumerate(fabric_ifs)]
    sent = []  # host and fabric injectors at once: the same frames in less time
    for p in procs:
        out, _ = p.communicate(timeout=180)
        words = (out or "").split()
        sent.append(int(words[words.index("sent") + 1]) if "sent" in words else 0)
    fuzz_s = time.monotonic() - t_fuzz
    spoofed = ctrl = 0
    for p in sniffers.values():
        text, _ = p.communicate(timeout=30)
        words = text.split()
        spoofed += int(words[words.index("spoof") + 1])
        ctrl += int(words[words.index("ctrl") + 1])
    time.sleep(2.5)  # one metrics poll
    w = watch.stop()
    switch_dropped = socket_drops() - dropped0
    st = status_of(master)
    st0 = bed.st0
    crashes = sum(1 for c in (master,) if not c.alive()) + (st.get("errors") or {}).get("packet_in_errors", 0)
    report.update(
        spoof_sent=spoof, spoof_delivered=spoofed, spoof_control_delivered=ctrl,
        spoof_dropped=(st.get("guards") or {}).get("spoofed_dropped"),
        fuzz_frames=sum(sent), fuzz_host_frames=sent[0], fuzz_fabric_frames=sum(sent[1:]), fuzz_s=round(fuzz_s, 2),
        fuzz_crashes=crashes,
        fuzz_packet_ins=sum((st.get("packet_ins") or {}).values()) - sum((st0.get("packet_ins") or {}).values()),
        meter_drops=(st.get("guards") or {}).get("meter_drops"),
        others_pings=w["sent"], others_lost=w["lost"], fuzz_switch_rx_dropped=switch_dropped,
    )
    log(f"spoof: {spoofed} of {spoof} delivered, {ctrl} own-source control frames delivered; fuzz: "
        f"{report.summary['fuzz_frames']} frames in {fuzz_s:.1f} s, {crashes} crashes, {report.summary['fuzz_packet_ins']} packet-ins; "
        f"others lost {w['lost']}; Open vSwitch's receive queues dropped {switch_dropped}")
    if sum(sent) < fuzz:
        report.fail(f"fuzz: only {sum(sent)} of {fuzz} frames sent")
    if spoofed or not ctrl or crashes or w["lost"]:
        report.fail(f"spoof/fuzz: delivered {spoofed}, control {ctrl}, crashes {crashes}, others {w}, "
                    f"receive-queue drops in Open vSwitch {switch_dropped}")
