"""Mininet adapter for hpcfabric: a :class:`~hpcfabric.topology.model.Fabric` as a Mininet network.

This file lives in ``mininet/`` *without* an ``__init__.py`` on purpose
(``import mininet`` must keep resolving to Debian's Mininet). Import it by
path, e.g. from ``mininet/run_fabric.py`` or a test::

    sys.path.insert(0, "<repo>/mininet"); import fabric_net

What it builds (see ``docs/mininet.md``):

* one ``OVSSwitch`` per model switch: userspace datapath (the kernel has no
  OVS module), OpenFlow 1.3 only, ``fail_mode=secure`` (a looped fabric must
  never fall back to a learning switch), the model's dpid, the model's port
  numbers (``ofport_request``), never Mininet's numbering;
* one host per model host, named as in the model, interface ``<host>-eth0``,
  IPv4 ``10.0.0.0/8`` from the host's rank (:func:`host_ip`), a random
  *globally administered* MAC (so it can never be mistaken for a
  hierarchical one: DMP replaces it), IPv6 off, TX checksum offload off
  (TCP/UDP through userspace OVS over veth needs it);
* a remote controller at ``127.0.0.1:controller_port`` (None: no controller,
  the flows are installed with ``ovs-ofctl``).

Helpers: :func:`intf_name`, :func:`run_dmp`, :func:`host_macs`,
:func:`set_static_neighbours`, :func:`inject_pause` (and
:data:`PAUSE_TRAIN_SCRIPT` for trains), :func:`dump_flows`, :func:`flow_counts`,
:func:`port_stats`, :func:`sync_stats`, :func:`install_static_flows`.
"""

from __future__ import annotations

import ipaddress
import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run from a checkout without an installed package
    sys.path.insert(0, str(ROOT))

from mininet.link import Link, TCLink  # noqa: E402  (Debian's Mininet, not this folder)
from mininet.log import warn  # noqa: E402
from mininet.net import Mininet  # noqa: E402
from mininet.node import Host, OVSSwitch, RemoteController  # noqa: E402

from hpcfabric.rules.addressing import AddressPlan, format_mac  # noqa: E402
from hpcfabric.protocols.pause import build_pause  # noqa: E402
from hpcfabric.topology.model import Fabric  # noqa: E402

OFCTL = ("ovs-ofctl", "-O", "OpenFlow13")
IFNAMSIZ = 15  # Linux interface names: at most 15 characters
HOST_PORT = 0  # Mininet port number of a host's only interface (<host>-eth0)
IP_BASE = int(ipaddress.IPv4Address("10.0.0.0"))
IP_PREFIX = 8


class QuietRemoteController(RemoteController):
    """``RemoteController`` whose reachability check opens a TCP connection itself.

    Mininet's check pipes ``telnet`` into its shell; the controller answers with a binary OpenFlow
    HELLO, and Mininet's strict UTF-8 read of that output fails now and then (UnicodeDecodeError in
    ``Node.read``, seen in the reliability and experiment runs). Same warning, no shell.
    """

    def isListening(self, ip: str, port: int) -> bool:  # noqa: N802 (Mininet's name)
        try:
            with socket.create_connection((ip, port), timeout=2):
                return True
        except OSError:
            warn(f"Unable to contact the remote controller at {ip}:{port}\n")
            return False


class FabricNetError(RuntimeError):
    """A fabric Mininet cannot build or a helper cannot do what it was asked."""


# ---------------------------------------------------------------------------
# names and addresses


def intf_name(node: str, port: int, prefix: str = "") -> str:
    """Root-namespace name of ``node``'s port ``port`` (``g0s0-eth3``; hosts use port 0)."""
    return f"{prefix}{node}-eth{port}"


def host_ip(rank: int) -> str:
    """IPv4 address of the host of rank ``rank`` (its position in ``fabric.hosts``): 10.0.0.1, 10.0.0.2, ..."""
    if not 0 <= rank < (1 << (32 - IP_PREFIX)) - 2:
        raise FabricNetError(f"host rank {rank} does not fit 10.0.0.0/8")
    return str(ipaddress.IPv4Address(IP_BASE + rank + 1))


def host_ips(fabric: Fabric) -> dict[str, str]:
    return {h.name: host_ip(i) for i, h in enumerate(fabric.hosts)}


def random_vendor_mac(rng: random.Random) -> str:
    """A random globally administered unicast MAC (U/L and I/G bits clear)."""
    while True:
        value = ((rng.randrange(256) & 0xFC) << 40) | rng.getrandbits(40)
        if value:  # 00:00:00:00:00:00 is not a usable address
            return format_mac(value)


def check_names(fabric: Fabric, prefix: str = "") -> None:
    """Raise FabricNetError if an interface name would exceed Linux's 15 characters."""
    too_long = []
    for sw in fabric.switches:
        for port in fabric.ports(sw.name):
            name = intf_name(sw.name, port, prefix)
            if len(name) > IFNAMSIZ:
                too_long.append(name)
    for h in fabric.hosts:
        name = intf_name(h.name, HOST_PORT, prefix)
        if len(name) > IFNAMSIZ:
            too_long.append(name)
    if too_long:
        raise FabricNetError(
            f"{len(too_long)} interface name(s) exceed {IFNAMSIZ} characters, e.g. {too_long[0]!r}: "
            "use shorter switch/host names in the topology"
        )


def _run(cmd: list[str], timeout: float = 30, check: bool = True, input: str | None = None) -> str:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, input=input)
    except FileNotFoundError:
        raise FabricNetError(f"{cmd[0]} is not installed") from None
    except subprocess.TimeoutExpired:
        raise FabricNetError(f"{' '.join(cmd[:4])} ... timed out after {timeout} s") from None
    if check and proc.returncode != 0:
        raise FabricNetError(f"{' '.join(cmd[:5])} failed: {(proc.stderr or proc.stdout).strip()}")
    return proc.stdout


def ovs_running() -> bool:
    """True if ``ovs-vsctl show`` answers (Open vSwitch is up)."""
    try:
        return subprocess.run(["ovs-vsctl", "--timeout=5", "show"], capture_output=True, timeout=10).returncode == 0
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return False


def conflicts(fabric: Fabric, prefix: str = "") -> list[str]:
    """Bridges or interfaces that already exist with the names this net would use.

    Mininet silently deletes them, which would wreck another Mininet (another
    test, a demo) running on the machine: :func:`build_net` refuses instead.
    """
    wanted = {prefix + sw.name for sw in fabric.switches}
    found = sorted(wanted & set(_run(["ovs-vsctl", "--timeout=10", "list-br"]).split()))
    names = {intf_name(sw.name, p, prefix) for sw in fabric.switches for p in fabric.ports(sw.name)}
    found += sorted(names & set(os.listdir("/sys/class/net")))
    return found


# ---------------------------------------------------------------------------
# building


def build_net(
    fabric: Fabric,
    plan: AddressPlan | None = None,
    controller_port: int | None = 6653,
    link_bw: float | None = None,
    *,
    controller_ip: str = "127.0.0.1",
    prefix: str = "",
    seed: int | None = None,
    start: bool = True,
) -> Mininet:
    """Build (and by default start) the Mininet network of ``fabric``.

    Parameters
    ----------
    plan
        Only used to check that no random initial MAC equals a planned one
        (they cannot: planned MACs are locally administered, random ones not).
    controller_port
        TCP port of the remote controller on ``controller_ip``; None for no
        controller (``install_static_flows``).
    link_bw
        Mbit/s of every link (TCLink with an htb shaper); None: plain veths.
    prefix
        Prepended to every Mininet node name (and so to bridge and interface
        names) to run next to another net with the same topology.
    seed
        Seed of the random initial MACs (None: random).

    The returned net carries ``hf_fabric``, ``hf_prefix`` and ``hf_ips``
    (host -> IPv4) for the helpers. On any failure the partial net is
    stopped before the exception propagates.
    """
    check_names(fabric, prefix)
    clash = conflicts(fabric, prefix)
    if clash:
        raise FabricNetError(
            f"{', '.join(clash[:5])}{' ...' if len(clash) > 5 else ''} already exist(s): another Mininet with the "
            "same names is running (use another prefix, or stop it; 'run_fabric.py --cleanup' runs 'mn -c')"
        )
    rng = random.Random(seed)
    link_cls = TCLink if link_bw else Link
    link_opts: dict[str, Any] = {"bw": link_bw} if link_bw else {}
    net = Mininet(
        controller=None, switch=OVSSwitch, host=Host, link=link_cls, autoSetMacs=False, build=False, listenPort=None
    )
    try:
        if controller_port is not None:
            net.addController(QuietRemoteController(f"{prefix}hfctl", ip=controller_ip, port=controller_port))
        nodes: dict[str, Any] = {}
        for sw in fabric.switches:
            nodes[sw.name] = net.addSwitch(
                prefix + sw.name, dpid="%016x" % sw.dpid, datapath="user", protocols="OpenFlow13", failMode="secure"
            )
        planned = {format_mac(m) for m in plan.host_mac.values()} if plan is not None else set()
        ips = host_ips(fabric)
        for h in fabric.hosts:
            mac = random_vendor_mac(rng)
            while mac in planned:  # pragma: no cover - impossible for hierarchical plans
                mac = random_vendor_mac(rng)
            node = net.addHost(prefix + h.name, ip=f"{ips[h.name]}/{IP_PREFIX}", mac=mac)
            # before its interface exists, so it never sends IPv6 ND/MLD into the fabric
            node.cmd("sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1")
            nodes[h.name] = node
            net.addLink(node, nodes[h.switch], port1=HOST_PORT, port2=h.port, **link_opts)
        for link in fabric.links:
            net.addLink(nodes[link.a], nodes[link.b], port1=link.a_port, port2=link.b_port, **link_opts)
        net.hf_fabric = fabric
        net.hf_prefix = prefix
        net.hf_ips = ips
        if start:
            net.build()
            net.start()
            prepare_hosts(net)
    except BaseException:
        net.stop()
        raise
    return net


def node(net: Mininet, name: str) -> Any:
    """The Mininet node of model node ``name``."""
    return net.get(getattr(net, "hf_prefix", "") + name)


def host_intf(net: Mininet, host: str) -> str:
    return intf_name(host, HOST_PORT, getattr(net, "hf_prefix", ""))


def prepare_hosts(net: Mininet) -> None:
    """IPv6 off (again: the interface exists now) and TX checksum offload off, on every host."""
    for h in net.hf_fabric.hosts:
        n = node(net, h.name)
        intf = host_intf(net, h.name)
        n.cmd(
            "sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1; "
            f"ethtool -K {intf} tx off >/dev/null 2>&1"
        )


# ---------------------------------------------------------------------------
# flows


@dataclass(frozen=True)
class FlowStat:
    """One row of ``ovs-ofctl dump-flows``."""

    table: int
    priority: int
    match: str
    n_packets: int
    actions: str
    cookie: int = 0
    n_bytes: int = 0
    duration: float = 0.0  # seconds since the entry was added (a modify keeps it)

    def as_tuple(self) -> tuple[int, int, str, int, str]:
        return (self.table, self.priority, self.match, self.n_packets, self.actions)


_STAT_KEYS = frozenset(
    {"cookie", "duration", "table", "n_packets", "n_bytes", "idle_timeout", "hard_timeout", "idle_age",
     "hard_age", "importance"}
)  # fmt: skip


def parse_dump_flows(text: str) -> list[FlowStat]:
    """Parse ``ovs-ofctl -O OpenFlow13 --no-names dump-flows`` output (header lines are skipped)."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if " actions=" not in line and not line.startswith("actions="):
            continue
        head, _, actions = line.partition("actions=")
        stats: dict[str, str] = {}
        match_parts: list[str] = []
        for part in head.strip().rstrip(",").split(", "):
            key, eq, value = part.partition("=")
            if eq and key in _STAT_KEYS:
                stats[key] = value
            elif part:
                match_parts.extend(p for p in part.split(",") if p)
        priority = 32768
        match = []
        for p in match_parts:
            if p.startswith("priority="):
                priority = int(p.split("=", 1)[1])
            else:
                match.append(p)
        out.append(
            FlowStat(
                table=int(stats.get("table", 0)),
                priority=priority,
                match=",".join(match),
                n_packets=int(stats.get("n_packets", 0)),
                actions=actions.strip(),
                cookie=int(stats.get("cookie", "0"), 16),
                n_bytes=int(stats.get("n_bytes", 0)),
                duration=float(stats.get("duration", "0").rstrip("s") or 0),
            )
        )
    return out


def dump_flows(
    switch: str, table: int | None = None, match: str | None = None, sync: bool = False
) -> list[FlowStat]:
    """Flows of bridge ``switch`` (the Mininet/bridge name), optionally one table / a match filter.

    ``sync``: first wait for the revalidators (:func:`sync_stats`) so the counters are current.
    """
    if sync:
        sync_stats()
    spec = ",".join(x for x in (f"table={table}" if table is not None else "", match or "") if x)
    cmd = [*OFCTL, "--no-names", "dump-flows", switch] + ([spec] if spec else [])
    return parse_dump_flows(_run(cmd))


def port_stats(switch: str, port: int) -> dict[str, int]:
    """rx/tx packet counters of one port of bridge ``switch`` (read from the netdev, not lagged)."""
    text = _run([*OFCTL, "--no-names", "dump-ports", switch, str(port)])
    rx = re.search(r"rx pkts=(\d+)", text)
    tx = re.search(r"tx pkts=(\d+)", text)
    if not rx or not tx:
        raise FabricNetError(f"cannot parse dump-ports {switch} {port}: {text.strip()[:200]}")
    return {"rx": int(rx.group(1)), "tx": int(tx.group(1))}


def sync_stats(timeout: float = 10) -> bool:
    """Wait for one full revalidator cycle, so flow counters include every packet forwarded so far.

    The userspace datapath forwards through cached megaflows and pushes their
    counters to the OpenFlow rules only when the revalidators run (about every
    500 ms): without this, ``n_packets`` lags by up to half a second.
    ``ovs-appctl revalidator/wait`` returns when a cycle has completed (one
    datapath: all userspace bridges share ``netdev@ovs-netdev``).
    """
    try:
        return subprocess.run(["ovs-appctl", "revalidator/wait"], capture_output=True, timeout=timeout).returncode == 0
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return False


def install_static_flows(net: Mininet, compiled: Any) -> dict[str, int]:
    """Install the compiled flows with ``ovs-ofctl --bundle add-flows`` (no controller).

    ``compiled`` is a CompiledFabric (or anything with ``.tables[name].flows``);
    one atomic bundle per bridge. Returns the number of flows sent per switch.
    """
    from hpcfabric.openflow.ofctl import flows_text

    counts = {}
    prefix = getattr(net, "hf_prefix", "")
    for sw in net.hf_fabric.switches:
        table = compiled.tables[sw.name]
        _run([*OFCTL, "--bundle", "add-flows", prefix + sw.name, "-"], input=flows_text(table.flows), timeout=60)
        counts[sw.name] = len(table.flows)
    return counts


def flow_counts(net: Mininet) -> dict[str, int]:
    """Installed flows per model switch (from dump-flows)."""
    prefix = getattr(net, "hf_prefix", "")
    return {sw.name: len(dump_flows(prefix + sw.name)) for sw in net.hf_fabric.switches}


# ---------------------------------------------------------------------------
# DMP and neighbours


def dmp_command() -> list[str]:
    """How to start the DMP client: the venv's ``hpcfabric-dmp`` if installed, else ``python -m``."""
    exe = Path(sys.executable).with_name("hpcfabric-dmp")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("hpcfabric-dmp")
    if found:
        return [found]
    return [sys.executable, "-m", "hpcfabric.protocols.dmp_client"]


def run_dmp(net: Mininet, timeout: float = 1.0, retries: int = 3, hosts: Iterable[str] | None = None) -> dict[str, dict]:
    """Run ``hpcfabric-dmp <intf> --json`` on every host in parallel.

    Returns host -> the client's JSON result plus ``returncode`` (and
    ``stderr`` when it failed). A host whose assigned ``mac`` is present got
    an answer; ``status`` tells whether it changed the address.
    """
    cmd = dmp_command()
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    names = list(hosts) if hosts is not None else [h.name for h in net.hf_fabric.hosts]
    procs = {}
    for name in names:
        args = [*cmd, host_intf(net, name), "--json", "--timeout", str(timeout), "--retries", str(retries)]
        procs[name] = node(net, name).popen(args, env=env, text=True)
    results: dict[str, dict] = {}
    limit = time.monotonic() + (retries + 1) * timeout + 30
    for name, proc in procs.items():
        try:
            out, err = proc.communicate(timeout=max(1.0, limit - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            err = (err or "") + " (killed: timeout)"
        try:
            res = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
        except json.JSONDecodeError:
            res = {"status": "error", "error": f"unparsable output {out[-200:]!r}"}
        res["returncode"] = proc.returncode
        if proc.returncode != 0:
            res["stderr"] = (err or "").strip()[-500:]
        results[name] = res
    return results


def host_macs(net: Mininet) -> dict[str, int]:
    """Current MAC of every host's interface (read in its namespace)."""
    out = {}
    for h in net.hf_fabric.hosts:
        text = node(net, h.name).cmd(f"cat /sys/class/net/{host_intf(net, h.name)}/address").strip()
        out[h.name] = int(text.replace(":", ""), 16) if re.fullmatch(r"[0-9a-f:]{17}", text) else -1
    return out


def set_static_neighbours(net: Mininet, plan: AddressPlan | Mapping[str, int]) -> int:
    """Give every host a permanent neighbour entry (IPv4 -> hierarchical MAC) for every other host.

    The fabric has no flooding: a frame to ff:ff:ff:ff:ff:ff matches no
    routing rule and is dropped, so ARP requests reach nobody. The IPv4 plan
    (:func:`host_ip`) and the MAC plan are both known up front, so the
    neighbour tables are too (like ``/etc/ethers`` on a cluster). ``plan``
    is an AddressPlan or host -> MAC. Returns the number of entries written.
    """
    macs = plan.host_mac if isinstance(plan, AddressPlan) else plan
    ips = net.hf_ips
    total = 0
    with tempfile.TemporaryDirectory(prefix="hfneigh") as tmp:
        for h in net.hf_fabric.hosts:
            intf = host_intf(net, h.name)
            lines = [
                f"neigh replace {ips[o.name]} lladdr {format_mac(macs[o.name])} dev {intf} nud permanent"
                for o in net.hf_fabric.hosts
                if o.name != h.name
            ]
            path = os.path.join(tmp, f"{h.name}.batch")
            with open(path, "w") as f:
                f.write("\n".join(lines) + "\n")
            out = node(net, h.name).cmd(f"ip -batch {path} && echo __ok__")
            if "__ok__" not in out:
                raise FabricNetError(f"ip -batch on {h.name} failed: {out.strip()[-300:]}")
            total += len(lines)
    return total


# ---------------------------------------------------------------------------
# PAUSE injection


def inject_pause(
    fabric: Fabric, switch: str, port: int, quanta: int, *, prefix: str = "", src: bytes | None = None
) -> bytes:
    """Make an 802.3x PAUSE frame arrive at ``switch`` on ``port`` (a fabric port).

    The frame is written, from the root namespace, into the interface at the
    other end of the link (``peer-ethQ``): the veth carries it to
    ``switch-ethPORT``, where the switch receives it as if the neighbour had
    sent it. ``src`` defaults to the peer interface's MAC. Returns the frame.
    """
    peer = fabric.peer(switch, port)
    if peer is None:
        raise FabricNetError(f"port {port} of {switch} is not connected")
    if peer.is_host or peer.port is None:
        raise FabricNetError(f"port {port} of {switch} leads to host {peer.node}: inject PAUSE on fabric ports only")
    iface = intf_name(peer.node, peer.port, prefix)
    if src is None:
        with open(f"/sys/class/net/{iface}/address") as f:
            src = bytes.fromhex(f.read().strip().replace(":", ""))
    frame = build_pause(src, quanta)
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as sock:
        sock.bind((iface, 0))
        sock.send(frame)
    return frame


# ---------------------------------------------------------------------------
# PAUSE trains in a separate process

#: Stand-alone (stdlib only, starts in ~20 ms) PAUSE sender, run as
#: ``python -c PAUSE_TRAIN_SCRIPT IFACE QUANTA INTERVAL_S HOLD_S``: sends one
#: 802.3x PAUSE frame into IFACE, prints ``first T``, then one every INTERVAL_S
#: until HOLD_S has passed (none if INTERVAL_S <= 0) and prints
#: ``last T count N``; T on CLOCK_MONOTONIC (= time.monotonic() in any
#: process). SIGTERM stops it early. A separate process, because a thread
#: shares the GIL with the caller and could be held back for the 5 ms switch
#: interval, longer than one frame's pause at 10 Gb/s (3.4 ms). While sending
#: it runs SCHED_FIFO (best effort) so the spacing stays tight on a busy box.
PAUSE_TRAIN_SCRIPT = r"""
import os, signal, socket, struct, sys, time
iface, quanta, interval, hold = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
with open("/sys/class/net/%s/address" % iface) as f:
    src = bytes.fromhex(f.read().strip().replace(":", ""))
frame = (bytes.fromhex("0180c2000001") + src + struct.pack("!HHH", 0x8808, 1, quanta)).ljust(60, b"\0")
try:
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
except (AttributeError, OSError):
    pass
sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
sock.bind((iface, 0))
sock.send(frame)
first = last = time.monotonic()
count = 1
print("first %.9f" % first, flush=True)
if interval > 0:
    end, nxt = first + hold, first + interval
    while not stop:
        now = time.monotonic()
        if now >= end:
            break
        if nxt > now:
            time.sleep(nxt - now)
            continue
        sock.send(frame)
        last = time.monotonic()
        count += 1
        nxt += interval
        if nxt < last:
            nxt = last + interval
try:
    os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
except (AttributeError, OSError):
    pass
print("last %.9f count %d" % (last, count), flush=True)
"""
