"""Build step: a :class:`~hpcfabric.topology.model.Fabric` as a Mininet network (the adapter's core).

* :class:`FabricTopo` is the fabric as a Mininet ``Topo``: one ``OVSSwitch`` per model switch
  (userspace datapath -- the kernel has no OVS module --, OpenFlow 1.3 only, ``fail_mode=secure`` so
  a looped fabric never falls back to a learning switch, the model's dpid), the model's port numbers
  on every link (``ofport_request``, never Mininet's numbering), one :class:`FabricHost` per model
  host, named as in the model, interface ``<host>-eth0``, IPv4 ``10.0.0.0/8`` from the host's rank
  (:func:`host_ip`) and a random *globally administered* MAC (DMP replaces it; it can never be
  mistaken for a hierarchical one). Every node and link names its class, so the topo alone describes
  the net (the seam for a ``mn --custom`` topology file: only the controller is missing).
* :func:`build_net` checks the names (Linux's 15 characters; no bridge or interface of another net
  with the same names), builds and starts the net with a remote controller at
  ``127.0.0.1:controller_port`` (None: no controller, flows installed with ``ovs-ofctl``).
* :func:`stop_net`, :func:`cleanup_all_mininet` (``mn -c``: only on purpose, it removes *every* net).

Import it with ``mininet/`` on ``sys.path`` (this folder has no ``__init__.py``: ``import mininet``
must keep finding Debian's Mininet). :mod:`fabric_net` re-exports the adapter's public API.
"""

from __future__ import annotations

import ipaddress
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run from a checkout without an installed package
    sys.path.insert(0, str(ROOT))

from mininet.link import Link, TCLink  # noqa: E402  (Debian's Mininet, not this folder)
from mininet.log import warn  # noqa: E402
from mininet.net import Mininet  # noqa: E402
from mininet.node import Host, OVSSwitch, RemoteController  # noqa: E402
from mininet.topo import Topo  # noqa: E402

from hpcfabric.rules.addressing import AddressPlan, format_mac  # noqa: E402
from hpcfabric.topology.model import Fabric  # noqa: E402

IFNAMSIZ = 15  # Linux interface names: at most 15 characters
HOST_PORT = 0  # Mininet port number of a host's only interface (<host>-eth0)
IP_BASE = int(ipaddress.IPv4Address("10.0.0.0"))
IP_PREFIX = 8
IPV6_OFF = "sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1"


class FabricNetError(RuntimeError):
    """A fabric Mininet cannot build or a helper cannot do what it was asked."""


def run_cmd(cmd: list[str], timeout: float = 30, check: bool = True, input: str | None = None) -> str:
    """Run ``cmd`` and return its stdout; FabricNetError if it is missing, times out or (``check``) fails."""
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
    names = [intf_name(sw.name, port, prefix) for sw in fabric.switches for port in fabric.ports(sw.name)]
    names += [intf_name(h.name, HOST_PORT, prefix) for h in fabric.hosts]
    too_long = [name for name in names if len(name) > IFNAMSIZ]
    if too_long:
        raise FabricNetError(
            f"{len(too_long)} interface name(s) exceed {IFNAMSIZ} characters, e.g. {too_long[0]!r}: "
            "use shorter switch/host names in the topology"
        )


def conflicts(fabric: Fabric, prefix: str = "") -> list[str]:
    """Bridges or interfaces that already exist with the names this net would use.

    Mininet silently deletes them, which would wreck another Mininet (another
    test, a demo) running on the machine: :func:`build_net` refuses instead.
    """
    wanted = {prefix + sw.name for sw in fabric.switches}
    found = sorted(wanted & set(run_cmd(["ovs-vsctl", "--timeout=10", "list-br"]).split()))
    names = {intf_name(sw.name, p, prefix) for sw in fabric.switches for p in fabric.ports(sw.name)}
    found += sorted(names & set(os.listdir("/sys/class/net")))
    return found


# ---------------------------------------------------------------------------
# nodes and topo


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


class FabricHost(Host):
    """A fabric host: IPv6 off before its interface exists (no ND/MLD/RS into the fabric), and once
    configured IPv6 off again and TX checksum offload off (TCP/UDP through userspace OVS over veth
    gets 0 Mbit/s otherwise; ping works either way)."""

    def __init__(self, name: str, **params: Any):
        super().__init__(name, **params)
        self.cmd(IPV6_OFF)

    def config(self, **params: Any) -> Any:
        result = super().config(**params)
        self.cmd(f"{IPV6_OFF}; ethtool -K {self.defaultIntf()} tx off >/dev/null 2>&1")
        return result


class FabricTopo(Topo):
    """``fabric`` as a Mininet Topo: ``FabricTopo(fabric, plan=None, link_bw=None, prefix="", seed=None)``.

    ``plan``: only to check that no random initial MAC equals a planned one (they cannot: planned MACs
    are locally administered). ``link_bw``: Mbit/s of every link (TCLink, htb); None: plain veths.
    ``prefix`` is prepended to every node name (and so to bridge and interface names) to run next to
    another net of the same topology; ``seed`` seeds the random initial MACs. ``ips``: host -> IPv4.
    """

    def build(self, fabric: Fabric, plan: AddressPlan | None = None, link_bw: float | None = None,  # type: ignore[override]
              prefix: str = "", seed: int | None = None) -> None:
        self.fabric, self.prefix = fabric, prefix
        self.ips = host_ips(fabric)
        rng = random.Random(seed)
        link_opts: dict[str, Any] = {"cls": TCLink, "bw": link_bw} if link_bw else {"cls": Link}
        for sw in fabric.switches:
            # batch=True: all bridges are created in one ovs-vsctl call (OVSSwitch.batchStartup), not one
            # ~0.35 s transaction per bridge (114 bridges: 40 s)
            self.addSwitch(prefix + sw.name, cls=OVSSwitch, dpid="%016x" % sw.dpid, datapath="user",
                           protocols="OpenFlow13", failMode="secure", batch=True)
        planned = {format_mac(m) for m in plan.host_mac.values()} if plan is not None else set()
        for h in fabric.hosts:
            mac = random_vendor_mac(rng)
            while mac in planned:  # pragma: no cover - impossible for hierarchical plans
                mac = random_vendor_mac(rng)
            self.addHost(prefix + h.name, cls=FabricHost, ip=f"{self.ips[h.name]}/{IP_PREFIX}", mac=mac)
            self.addLink(prefix + h.name, prefix + h.switch, port1=HOST_PORT, port2=h.port, **link_opts)
        for link in fabric.links:
            self.addLink(prefix + link.a, prefix + link.b, port1=link.a_port, port2=link.b_port, **link_opts)


# ---------------------------------------------------------------------------
# the net


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
    """Build and (``start``, the default) start the Mininet network of ``fabric`` (:class:`FabricTopo`).

    ``controller_port``: TCP port of the remote controller on ``controller_ip``; None for no controller
    (``install_static_flows``). ``start=False`` returns the net before ``net.build()``.

    The returned net carries ``hf_fabric``, ``hf_prefix`` and ``hf_ips`` (host -> IPv4) for the other
    steps. On any failure the partial net is stopped before the exception propagates.
    """
    check_names(fabric, prefix)
    clash = conflicts(fabric, prefix)
    if clash:
        raise FabricNetError(
            f"{', '.join(clash[:5])}{' ...' if len(clash) > 5 else ''} already exist(s): another Mininet with the "
            "same names is running (use another prefix, or stop it; 'run_fabric.py --cleanup' runs 'mn -c')"
        )
    topo = FabricTopo(fabric, plan, link_bw, prefix, seed)
    net = Mininet(topo=topo, controller=None, switch=OVSSwitch, host=FabricHost, link=TCLink if link_bw else Link,
                  autoSetMacs=False, build=False, listenPort=None)
    net.hf_fabric = fabric
    net.hf_prefix = prefix
    net.hf_ips = topo.ips
    try:
        if controller_port is not None:
            net.addController(QuietRemoteController(f"{prefix}hfctl", ip=controller_ip, port=controller_port))
        if start:
            net.build()
            net.start()
    except BaseException:
        net.stop()
        raise
    return net


def set_controllers(fabric: Fabric, ports: Sequence[int], prefix: str = "", host: str = "127.0.0.1") -> None:
    """Connect every bridge of ``fabric`` to the controllers at ``ports`` (one ovsdb transaction)."""
    cmd = ["ovs-vsctl"]
    for sw in fabric.switches:
        cmd += ["--", "set-controller", prefix + sw.name, *(f"tcp:{host}:{p}" for p in ports)]
    run_cmd(cmd, timeout=60)


def node(net: Mininet, name: str) -> Any:
    """The Mininet node of model node ``name``."""
    return net.get(getattr(net, "hf_prefix", "") + name)


def host_intf(net: Mininet, host: str) -> str:
    return intf_name(host, HOST_PORT, getattr(net, "hf_prefix", ""))


def stop_net(net: Mininet | None, fast: bool = True) -> str | None:
    """Stop the net; returns the error's text instead of raising (a teardown goes on), None if it worked.

    ``fast`` (default): :func:`fast_stop`; else Mininet's ``net.stop()`` (one ``ip link del`` per
    interface through the nodes' shells: 50 s for 114 switches and 342 hosts).
    """
    if net is None:
        return None
    try:
        if fast:
            net.hf_teardown = fast_stop(net)
        else:
            net.stop()
    except Exception as err:  # noqa: BLE001 - keep tearing down
        return str(err)
    return None


def fast_stop(net: Mininet) -> dict[str, float]:
    """What ``net.stop()`` does, batched; returns the seconds of each part.

    Every link goes first, by its root-namespace end, all in one kernel call (``ip link set ... group G``
    for each, then ``ip link del group G``: one unregister batch instead of one RCU grace period per
    veth, ~20 ms each on this machine); then every bridge in one ovsdb transaction (their ports already
    gone); then the node shells are killed (the hosts' namespaces die with them). Only this net's
    bridges and links.
    """
    times: dict[str, float] = {}
    for c in net.controllers:
        c.stop()
    t = time.monotonic()
    root_intfs: dict[str, None] = {}
    for link in net.links:
        for intf in (link.intf1, link.intf2):
            if intf is not None and not getattr(intf.node, "inNamespace", True):
                root_intfs[intf.name] = None
                break
    if root_intfs:
        group = 0x48460000 | (os.getpid() & 0xFFFF)  # ours alone: "HF" + our pid
        script = "".join(f"link set dev {name} group {group}\n" for name in root_intfs)
        subprocess.run(["ip", "-force", "-batch", "-"], input=script, text=True, capture_output=True, timeout=180)
        subprocess.run(["ip", "link", "del", "group", str(group)], capture_output=True, timeout=180)
    for link in net.links:  # gone with the batch: make Mininet forget them
        for intf in (link.intf1, link.intf2):
            if intf is not None:
                intf.node.delIntf(intf)
        link.intf1 = link.intf2 = None
    net.links = []
    times["links_s"] = time.monotonic() - t
    t = time.monotonic()
    bridges = [s.name for s in net.switches if isinstance(s, OVSSwitch)]
    if bridges:
        cmd = ["ovs-vsctl", "--timeout=120"]
        for b in bridges:
            cmd += ["--", "--if-exists", "del-br", b]
        subprocess.run(cmd, capture_output=True, timeout=180)
    times["bridges_s"] = time.monotonic() - t
    t = time.monotonic()
    nodes = list(net.hosts) + list(net.switches)
    for n in nodes:  # SIGHUP every shell first, then reap them
        if n.shell is not None and n.shell.poll() is None:
            try:
                os.killpg(n.shell.pid, signal.SIGHUP)
            except ProcessLookupError:
                pass
    for n in nodes:
        n.terminate()
    times["shells_s"] = time.monotonic() - t
    return {k: round(v, 2) for k, v in times.items()}


def cleanup_all_mininet() -> int:
    """``mn -c``: removes *every* Mininet, OVS bridge and ``/tmp/*.log`` on the machine. Only on purpose
    (``run_fabric.py --cleanup`` after a crash); nothing else calls it. Returns its exit status."""
    return subprocess.run(["mn", "-c"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
