"""PCP capture step: a ping's frames caught on the wire before and after a global (top-level) hop.

With classes of service on (``top`` scheme), a frame carries a VLAN tag from its access switch on;
arriving over a global link raises its PCP by one. :func:`choose_capture` walks the installed tables
(the reference pipeline, nothing paused) for a host pair whose path crosses a top-level link and then
another fabric link, so the raised PCP is visible on a wire; :func:`capture_step` runs ``tcpdump -e``
on the sending interface of both links while the source pings the destination and reports the PCP
seen on each wire next to what the tables say (summary key ``pcp_capture``).
"""

from __future__ import annotations

import re
import subprocess
import time
from dataclasses import dataclass, replace
from typing import Any, Callable

from fabric_topo import intf_name, node  # mininet/fabric_topo.py
from runkit import StepResult

from hpcfabric.rules.cos import top_link_kind
from hpcfabric.verify.reference.pipeline import Frame, Pipeline


@dataclass(frozen=True)
class Hop:
    switch: str
    port: int
    pcp: int | None  # PCP on the wire (None: untagged)
    top: bool  # a top-level link: its arrival raises the PCP


@dataclass(frozen=True)
class CaptureTarget:
    src: str
    dst: str
    top: Hop  # the top-level hop
    after: Hop  # the fabric hop right after it


def _hops(compiled: Any, pipes: dict[str, Pipeline], src: str, dst: str) -> list[Hop] | None:
    fabric, plan = compiled.fabric, compiled.plan
    host = fabric.host(src)
    switch, frame = host.switch, Frame(in_port=host.port, eth_src=plan.host_mac[src], eth_dst=plan.host_mac[dst])
    hops: list[Hop] = []
    for _ in range(len(fabric.switches) + 1):
        pipe = pipes.get(switch) or pipes.setdefault(switch, Pipeline(compiled.tables[switch].flows))
        res = pipe.process(frame)
        if res.punted or len(res.outputs) != 1:
            return None
        port, sent = res.outputs[0]
        peer = fabric.peer(switch, port)
        if peer is None or peer.is_host:
            return hops
        hops.append(Hop(switch, port, sent.vlan_pcp, peer.kind == top_link_kind(fabric)))
        switch, frame = peer.node, replace(sent, in_port=peer.port, metadata=0)
    return None


def choose_capture(compiled: Any, max_pairs: int = 400) -> CaptureTarget | None:
    """A host pair whose unpaused path crosses a top-level link followed by another fabric link
    (None without classes, without a ``top`` scheme or without such a pair)."""
    if compiled is None or compiled.cos != "top":
        return None
    fabric = compiled.fabric
    pipes: dict[str, Pipeline] = {}
    hosts = fabric.hosts
    tried = 0
    for a in hosts:
        for b in reversed(hosts):
            if a.switch == b.switch:
                continue
            tried += 1
            if tried > max_pairs:
                return None
            hops = _hops(compiled, pipes, a.name, b.name)
            for i in range(len(hops or ()) - 1):
                if hops[i].top and not hops[i + 1].top:  # type: ignore[index]
                    return CaptureTarget(a.name, b.name, hops[i], hops[i + 1])  # type: ignore[index]
    return None


_PCP = re.compile(r"vlan \d+, p (\d)")


def _tcpdump(iface: str, src_ip: str, seconds: float) -> subprocess.Popen:
    """tcpdump of the source's echo requests on ``iface`` (the replies cross the same wire the other way)."""
    return subprocess.Popen(
        ["timeout", str(seconds), "tcpdump", "-l", "-e", "-n", "-c", "3", "-i", iface,
         f"vlan and src host {src_ip} and icmp[icmptype] == icmp-echo"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def capture_step(net: Any, fabric: Any, target: CaptureTarget | None, progress: Callable[[str], None],
                 seconds: float = 6.0) -> StepResult:
    """Ping ``target.src`` -> ``target.dst`` while tcpdump watches both wires; ``pcp_capture`` in the summary."""
    res = StepResult()
    if target is None:
        res.fields["pcp_capture"] = "skipped: no top-level hop followed by a fabric hop (classes off or not 'top')"
        return res
    prefix = getattr(net, "hf_prefix", "")
    out: dict[str, Any] = {"src": target.src, "dst": target.dst}
    procs = {}
    for key, hop in (("global", target.top), ("after_global", target.after)):
        iface = intf_name(hop.switch, hop.port, prefix)
        peer = fabric.peer(hop.switch, hop.port).node
        out[key] = {"link": f"{hop.switch}:{hop.port} -> {peer}", "iface": iface, "pcp_expected": hop.pcp}
        procs[key] = _tcpdump(iface, net.hf_ips[target.src], seconds)
    time.sleep(1.0)  # tcpdump attached
    node(net, target.src).cmd(f"ping -n -q -c 4 -i 0.2 -W 1 {net.hf_ips[target.dst]}")
    ok = True
    for key, proc in procs.items():
        text, err = proc.communicate(timeout=seconds + 5)
        pcps = [int(m.group(1)) for m in _PCP.finditer(text)]
        out[key]["pcp_seen"] = sorted(set(pcps))
        out[key]["frames"] = len(pcps)
        out[key]["sample"] = next((ln.strip()[:200] for ln in text.splitlines() if "vlan" in ln), None)
        if not pcps:
            out[key]["error"] = (err.strip().splitlines() or ["no tagged ICMP frame captured"])[-1]
        ok = ok and bool(pcps) and set(pcps) == {out[key]["pcp_expected"]}
    g, a = out["global"].get("pcp_seen") or [None], out["after_global"].get("pcp_seen") or [None]
    out["raised"] = ok and a[0] is not None and g[0] is not None and a[0] == g[0] + 1
    res.fields["pcp_capture"] = out
    progress(f"PCP capture {target.src} -> {target.dst}: PCP {g} on global {out['global']['link']}, {a} on "
             f"{out['after_global']['link']} after it (raised: {out['raised']})")
    if not out["raised"]:
        res.failures.append(f"PCP capture: expected PCP {target.top.pcp} on the global hop and {target.after.pcp} "
                            f"after it, saw {out['global'].get('pcp_seen')} / {out['after_global'].get('pcp_seen')}")
    return res
