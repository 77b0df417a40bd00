#!/usr/bin/env python3
"""Reliability run in Mininet (``make reliability``): restart, HA failover, link failure, fuzzing, spoofing.

    .venv/bin/python mininet/run_reliability.py [--topology T] [--prefix rl] [--pings 1000]
        [--phases restart,failover,fuzz,link] [--fast-failover] [--link-interval 0.002]

On a small Dragonfly (default ``topologies/dragonfly-a2-p1-h1.yaml``, bridge
names prefixed so it can run next to another Mininet) with guards on:

1. two controllers (``[ha] role = auto``, one lease file) -- in phase 1 only
   the first runs: ping at 10 ms across ``kill -9`` + restart of it
   (``restart_lost``; ``restart_flow_mods`` sent by the restarted one);
2. the second starts as slave; ping at 10 ms across ``kill -9`` of the master
   (``failover_lost``, ``failover_flow_mods``, ``failover_takeover_s``);
3. spoofing and fuzzing: one host sends frames with foreign source MACs
   (``spoof_delivered`` must be 0; its own-MAC control frames must arrive)
   and garbage (PAUSE, PFC, CNM, LLDP, DMP, random bytes); garbage is also
   written into fabric links; the controller must survive (``fuzz_crashes``)
   and the other hosts' pings lose nothing (``others_lost``);
4. link failure: ``ip link set … down`` on a fabric link carrying a ping ->
   the controller reroutes (``link_recovery_ms``, ``link_traffic_gap_ms``),
   all-pairs ping with the link down, link up, all-pairs ping again. With
   ``--fast-failover`` the config turns the groups on (the cut link is one
   protected at both ends) and ``ff_link_recovery_ms`` is the traffic gap.

The last stdout line is one JSON object; exit 0 if every check passed.
Only processes this script started are stopped (by PID); never ``mn -c``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for _p in (str(HERE), str(ROOT)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import fabric_net as fn  # noqa: E402
import run_fabric as rf  # noqa: E402

from hpcfabric.config import load_config  # noqa: E402

PROG = "run_reliability"
PHASES = ("restart", "failover", "fuzz", "link")
MARK = b"HFSPOOF!"
ETH_TEST = 0x88B6  # IEEE local experimental EtherType: the spoof/control frames

#: stdlib-only frame injector: python -c FUZZ IFACE MODE COUNT SEED [SRC_HEX DSTS_HEX...]
#: MODE host: garbage from a host; fabric: garbage for a fabric link (no well-formed foreign LLDP);
#: spoof: COUNT frames with foreign sources + COUNT/10 own-source control frames to DSTS.
FUZZ_SCRIPT = r"""
import os, random, socket, struct, sys, time
iface, mode, count, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
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
if mode == "spoof":
    src_hex, dsts = sys.argv[5], [bytes.fromhex(d) for d in sys.argv[6:]]
    me = bytes.fromhex(src_hex)
    for i in range(count):
        src = rng.choice([mac(), rng.choice(dsts), bytes(6), b"\xff" * 6, rng.randbytes(6)])
        if src == me:
            src = mac()
        s.send((rng.choice(dsts) + src + b"\x88\xb6" + b"HFSPOOF!" + struct.pack("!I", i)).ljust(60, b"\0"))
        sent += 1
        if i % 10 == 0:
            s.send((rng.choice(dsts) + me + b"\x88\xb6" + b"HFCTRL!!" + struct.pack("!I", i)).ljust(60, b"\0"))
        if i % 50 == 0:
            time.sleep(0.002)
else:
    for i in range(count):
        s.send(garbage())
        sent += 1
        if i % 50 == 0:
            time.sleep(0.002)
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


def log(msg: str) -> None:
    print(f"[{PROG} {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_conf(tmp: Path, topology: Path, lease: Path, extra: str = "", fast_failover: bool = False) -> Path:
    path = tmp / "reliability.conf"
    path.write_text(
        f"[hpcfabric]\ntopology = {topology}\nrouting = conditional\nlldp_interval = 0.5\nreload_poll = 0\n"
        f"log_level = INFO\n{extra}\n"
        "[guards]\nsource_check = on\npunt_meters = on\n"
        "[metrics]\npoll_interval = 1\n"
        f"[ha]\nrole = auto\nlease_file = {lease}\nlease_timeout = 1.0\n"
        f"[failover]\nfast_failover = {'on' if fast_failover else 'off'}\n"
    )
    return path


def pick_link(cfg: Any) -> Any:
    """The link to cut: between two access switches; with fast-failover groups, one protected at both
    ends (so the groups can bridge both directions of a ping); else a global link where there is one."""
    fabric = cfg.fabric
    links = [l for l in fabric.links if fabric.hosts_on(l.a) and fabric.hosts_on(l.b)]
    if cfg.groups:
        from hpcfabric.failover.groups import group_id

        def protected(sw: str, port: int) -> bool:
            return any(g.group_id == group_id(port) for g in cfg.groups.get(sw, ()))

        links = [l for l in links if protected(l.a, l.a_port) and protected(l.b, l.b_port)] or links
    glob = [l for l in links if fabric.peer(l.a, l.a_port).kind == "global"]
    return (glob or links)[0]


def status_of(ctl: rf.Controller) -> dict[str, Any]:
    return ctl.status() or {}


def wait(pred, timeout: float, what: str, step: float = 0.05) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = pred()
        if got:
            return got
        time.sleep(step)
    raise rf.CheckFailed(f"timeout ({timeout:g} s) waiting for {what}")


def sync_changes(st: dict[str, Any]) -> int:
    return sum((s.get("added") or 0) + (s.get("modified") or 0) + (s.get("deleted") or 0)
               for s in (st.get("per_switch") or {}).values())


def is_master_ready(ctl: rf.Controller, n: int) -> dict[str, Any] | None:
    st = status_of(ctl)
    if st.get("pid") == ctl.pid and (st.get("ha") or {}).get("role") == "master" and rf.ready(st, n):
        return st
    return None


class CountedPing(rf.SteadyPing):
    """``ping -c COUNT -i INTERVAL``: exactly ``count`` echo requests, however slow the machine is."""

    def __init__(self, net: Any, src: str, dst: str, count: int, interval: float = 0.01):
        self.src, self.dst = src, dst
        self.proc = fn.node(net, src).popen(
            ["ping", "-n", "-i", f"{interval:g}", "-c", str(count), "-W", "2", net.hf_ips[dst]], text=True
        )
        self.result = None

    def wait(self, timeout: float) -> None:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass


def steady(net: Any, src: str, dst: str, pings: int, action, interval: float = 0.01) -> dict[str, Any]:
    """``pings`` pings src->dst every ``interval``; ``action()`` runs ~2 s in."""
    p = CountedPing(net, src, dst, pings + 20, interval)  # +20: the last replies in flight are not judged
    try:
        time.sleep(2.0)
        extra = action()
        p.wait(pings * interval * 10 + 60)
    finally:
        res = p.stop()
    res["action"] = extra
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="run_reliability.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--topology", default=str(ROOT / "topologies" / "dragonfly-a2-p1-h1.yaml"))
    ap.add_argument("--prefix", default="rl", help="prefix of Mininet node names (default rl)")
    ap.add_argument("--pings", type=int, default=1000, help="pings per steady-traffic phase (10 ms apart)")
    ap.add_argument("--fuzz", type=int, default=3000, help="garbage frames from the host and into fabric links, each")
    ap.add_argument("--spoof", type=int, default=1000, help="spoofed frames")
    ap.add_argument("--phases", default=",".join(PHASES),
                    help=f"comma-separated subset of {','.join(PHASES)} (default: all)")
    ap.add_argument("--fast-failover", action="store_true",
                    help="[failover] fast_failover = on (needs a topology with protected ports, e.g. fb-2d-3x3); "
                         "adds ff_link_recovery_ms (the traffic gap across the cut, bridged by the groups)")
    ap.add_argument("--link-interval", type=float, default=0.002,
                    help="ping interval (s) across the link cut (default 0.002: 2 ms resolution)")
    args = ap.parse_args(argv)
    phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    if not phases or set(phases) - set(PHASES):
        ap.error(f"--phases: expected a comma-separated subset of {','.join(PHASES)}")
    if os.geteuid() != 0:
        print("run_reliability: must run as root", file=sys.stderr)
        return 2
    if not fn.ovs_running():
        print("run_reliability: Open vSwitch is not running (scripts/bootstrap.sh --ovs-only)", file=sys.stderr)
        return 2
    from mininet.log import setLogLevel

    setLogLevel("error")
    tmp = Path(tempfile.mkdtemp(prefix="hfrel"))
    out: dict[str, Any] = {"topology": Path(args.topology).stem, "passed": False}
    failures: list[str] = []
    ctls: list[rf.Controller] = []
    net = None
    try:
        lease = tmp / "ha.lease"
        conf = write_conf(tmp, Path(args.topology).resolve(), lease, fast_failover=args.fast_failover)
        cfg = load_config(conf)
        fabric, plan = cfg.fabric, cfg.plan
        n = len(fabric.switches)
        ports = [free_port(), free_port()]
        a = rf.Controller(conf, tmp / "a.json", ports[0], tmp / "a.log")
        b = rf.Controller(conf, tmp / "b.json", ports[1], tmp / "b.log")
        ctls += [a, b]
        a.start()
        net = fn.build_net(fabric, plan, controller_port=ports[0], prefix=args.prefix, seed=11)
        prefix = args.prefix
        wait(lambda: is_master_ready(a, n), 90, "controller A master with every switch confirmed")
        log(f"fabric up: {n} switches, controller A master (pid {a.pid})")
        fn.run_dmp(net)
        fn.set_static_neighbours(net, plan)
        base = rf.all_pairs_ping(net, fabric)
        out["baseline_lost"] = base["lost"]
        if base["lost"]:
            failures.append(f"baseline all-pairs ping lost {base['lost']}")
        hosts = [h.name for h in fabric.hosts]
        link = pick_link(cfg)
        src, dst = fabric.hosts_on(link.a)[0].name, fabric.hosts_on(link.b)[0].name
        master = a
        st0 = status_of(master)

        # -- 1. kill -9 + restart ---------------------------------------------------------------
        if "restart" in phases:
            info: dict[str, Any] = {}

            def restart() -> dict[str, Any]:
                t = time.monotonic()
                a.stop(signal.SIGKILL)
                time.sleep(0.3)
                a.start()
                st = wait(lambda: is_master_ready(a, n), 60, "restarted controller master and confirmed")
                info["flow_mods"] = sync_changes(st)
                info["seconds"] = round(time.monotonic() - t, 2)
                return info

            res = steady(net, src, dst, args.pings, restart)
            out.update(restart_pings=res["sent"], restart_lost=res["lost"], restart_flow_mods=info.get("flow_mods"),
                       restart_s=info.get("seconds"))
            log(f"restart: {res['sent']} pings, {res['lost']} lost, {info.get('flow_mods')} flow-mods")
            if res["lost"] or info.get("flow_mods") or res["sent"] < args.pings:
                failures.append(f"restart: {res}")

        # -- 2. HA failover ----------------------------------------------------------------------
        if "failover" in phases:
            b.start()
            for sw in fabric.switches:
                fn._run(["ovs-vsctl", "set-controller", prefix + sw.name, f"tcp:127.0.0.1:{ports[0]}",
                         f"tcp:127.0.0.1:{ports[1]}"])
            wait(lambda: (lambda st: st.get("pid") == b.pid and (st.get("ha") or {}).get("role") == "slave"
                          and st.get("switches_connected") == n)(status_of(b)), 60, "controller B slave on every switch")
            log(f"controller B (pid {b.pid}) is slave on every switch")
            finfo: dict[str, Any] = {}

            def kill_master() -> dict[str, Any]:
                t = time.monotonic()
                a.stop(signal.SIGKILL)
                st = wait(lambda: is_master_ready(b, n), 30, "controller B master")
                finfo["takeover_s"] = round(time.monotonic() - t, 2)
                finfo["flow_mods"] = sync_changes(st)
                finfo["generation"] = st["ha"]["generation"]
                return finfo

            res = steady(net, src, dst, args.pings, kill_master)
            out.update(failover_pings=res["sent"], failover_lost=res["lost"], failover_flow_mods=finfo.get("flow_mods"),
                       failover_takeover_s=finfo.get("takeover_s"))
            log(f"failover: {res['sent']} pings, {res['lost']} lost, takeover {finfo.get('takeover_s')} s, "
                f"{finfo.get('flow_mods')} flow-mods")
            if res["lost"] or finfo.get("flow_mods") or res["sent"] < args.pings:
                failures.append(f"failover: {res} {finfo}")
            master = b
            st0 = status_of(master)

        # -- 3. spoofing and fuzzing ---------------------------------------------------------------
        if "fuzz" in phases:
            spoofer = hosts[0]
            others = [h for h in hosts if h != spoofer]
            watch = rf.SteadyPing(net, others[0], others[-1], interval=0.01)
            sniffers = {}
            for h in others:
                sniffers[h] = fn.node(net, h).popen([sys.executable, "-c", SNIFF_SCRIPT, fn.host_intf(net, h), "8"],
                                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for p in sniffers.values():
                p.stdout.readline()  # "ready"
            me = f"{plan.host_mac[spoofer]:012x}"
            dsts = [f"{plan.host_mac[h]:012x}" for h in others]
            spoof = fn.node(net, spoofer).popen([sys.executable, "-c", FUZZ_SCRIPT, fn.host_intf(net, spoofer), "spoof",
                                                 str(args.spoof), "7", me, *dsts], stdout=subprocess.PIPE, text=True)
            spoof.communicate(timeout=60)
            fuzz_host = fn.node(net, spoofer).popen([sys.executable, "-c", FUZZ_SCRIPT, fn.host_intf(net, spoofer), "host",
                                                     str(args.fuzz), "8"], stdout=subprocess.PIPE, text=True)
            fuzz_host.communicate(timeout=120)
            fabric_ifs = [fn.intf_name(l.b, l.b_port, prefix) for l in fabric.links] + \
                         [fn.intf_name(l.a, l.a_port, prefix) for l in fabric.links]
            per = max(1, args.fuzz // len(fabric_ifs))
            procs = [subprocess.Popen([sys.executable, "-c", FUZZ_SCRIPT, i, "fabric", str(per), str(k)],
                                      stdout=subprocess.PIPE, text=True) for k, i in enumerate(fabric_ifs)]
            for p in procs:
                p.communicate(timeout=120)
            spoofed = ctrl = 0
            for p in sniffers.values():
                text, _ = p.communicate(timeout=30)
                words = text.split()
                spoofed += int(words[words.index("spoof") + 1])
                ctrl += int(words[words.index("ctrl") + 1])
            time.sleep(2.5)  # one metrics poll
            w = watch.stop()
            st = status_of(master)
            crashes = sum(1 for c in (master,) if not c.alive()) + (st.get("errors") or {}).get("packet_in_errors", 0)
            out.update(
                spoof_sent=args.spoof, spoof_delivered=spoofed, spoof_control_delivered=ctrl,
                spoof_dropped=(st.get("guards") or {}).get("spoofed_dropped"),
                fuzz_frames=args.fuzz + per * len(fabric_ifs), fuzz_crashes=crashes,
                fuzz_packet_ins=sum((st.get("packet_ins") or {}).values()) - sum((st0.get("packet_ins") or {}).values()),
                meter_drops=(st.get("guards") or {}).get("meter_drops"),
                others_pings=w["sent"], others_lost=w["lost"],
            )
            log(f"spoof: {spoofed} of {args.spoof} delivered, {ctrl} own-source control frames delivered; fuzz: "
                f"{out['fuzz_frames']} frames, {crashes} crashes, {out['fuzz_packet_ins']} packet-ins; others lost {w['lost']}")
            if spoofed or not ctrl or crashes or w["lost"]:
                failures.append(f"spoof/fuzz: delivered {spoofed}, control {ctrl}, crashes {crashes}, others {w}")

        # -- 4. link failure ------------------------------------------------------------------------
        if "link" in phases:
            ifname = fn.intf_name(link.a, link.a_port, prefix)
            linfo: dict[str, Any] = {}
            before = (status_of(master).get("failover") or {}).get("recomputes", 0)

            def cut() -> dict[str, Any]:
                fn._run(["ip", "link", "set", ifname, "down"])
                t = time.monotonic()
                st = wait(lambda: (lambda s: s if (s.get("failover") or {}).get("recomputes", 0) > before
                                   and (s.get("failover") or {}).get("last_ms") is not None
                                   and s.get("switches_confirmed") == n else None)(status_of(master)), 30, "reroute")
                linfo["ms"] = st["failover"]["last_ms"]
                linfo["seen_s"] = round(time.monotonic() - t, 3)
                return linfo

            iv = args.link_interval
            res = steady(net, src, dst, int(max(300, args.pings // 3) * 0.01 / iv), cut, interval=iv)
            out["link"] = f"{link.a}:{link.a_port}-{link.b}:{link.b_port}"
            out["link_ping_interval_ms"] = iv * 1000
            out["link_recovery_ms"] = linfo.get("ms")
            out["link_traffic_gap_ms"] = round(res["longest_gap"] * iv * 1000, 3)
            out["link_pings_lost"] = res["lost"]
            if args.fast_failover:  # the groups moved the traffic; the gap is the data plane's recovery
                out["ff_groups"] = sum(len(g) for g in cfg.groups.values())
                out["ff_link_recovery_ms"] = out["link_traffic_gap_ms"]
            after = rf.all_pairs_ping(net, fabric)
            out["link_after_pairs_lost"] = after["lost"]
            fn._run(["ip", "link", "set", ifname, "up"])
            wait(lambda: (lambda s: s if not (s.get("failover") or {}).get("rerouted") and s.get("switches_confirmed") == n
                          else None)(status_of(master)), 30, "restoration")
            time.sleep(0.5)
            again = rf.all_pairs_ping(net, fabric)
            out["link_restored_lost"] = again["lost"]
            log(f"link {out['link']}: reroute confirmed {linfo.get('ms')} ms after the event, traffic gap "
                f"{out['link_traffic_gap_ms']} ms ({res['lost']} pings lost); all pairs with the link down lost "
                f"{after['lost']}, after restoration {again['lost']}")
            if after["lost"] or again["lost"] or linfo.get("ms") is None:
                failures.append(f"link failure: after {after['lost_pairs']} restored {again['lost_pairs']}")
    except (rf.CheckFailed, fn.FabricNetError) as err:
        failures.append(str(err))
    except KeyboardInterrupt:
        failures.append("interrupted")
    except Exception as err:  # noqa: BLE001
        import traceback

        traceback.print_exc()
        failures.append(f"internal error: {type(err).__name__}: {err}")
    finally:
        if net is not None:
            try:
                net.stop()
            except Exception as err:  # noqa: BLE001
                failures.append(f"net.stop: {err}")
        for c in ctls:
            if failures:
                out.setdefault("controller_logs", {})[c.log_path.name] = c.log_tail(8)
            c.stop()
        if failures:
            out["logs"] = str(tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    out["failures"] = failures
    out["passed"] = not failures
    print(json.dumps(out, sort_keys=True, default=str), flush=True)
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
