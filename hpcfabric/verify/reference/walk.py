"""The scalar reference walk: one frame, switch by switch, through the reference pipeline.

:func:`walk_pair` sends a data frame from a host to a destination MAC through
:class:`hpcfabric.verify.reference.pipeline.Pipeline` of every switch it reaches (``Fabric.peer`` gives the
next switch and its ingress port, or a host) and reports the outcome as a code of
:mod:`hpcfabric.verify.codes`, the switches visited and why it stopped. It is slow and
literal; the vectorised engine (:mod:`hpcfabric.verify.engine`) is cross-checked against it,
and the verifier uses it to explain every failure it reports.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping

from hpcfabric.rules.flows import Match
from hpcfabric.verify.codes import DEAD, DELIVER, DROP, FLOOD, LOOP, PUNT, TAGGED
from hpcfabric.verify.reference.pipeline import Frame, Pipeline, PipelineError, describe_flow

__all__ = ["Walk", "Pipelines", "walk_pair", "host_ids"]


@dataclass(frozen=True)
class Walk:
    """One frame's journey: ``code`` (see module constants), switches visited, why it stopped."""

    code: int
    host: str | None
    path: tuple[str, ...]
    reason: str

    @property
    def hops(self) -> int:
        return len(self.path)


class Pipelines(dict):
    """switch name -> Pipeline, built on first use."""

    def __init__(self, compiled: Any) -> None:
        super().__init__()
        self.compiled = compiled

    def __missing__(self, switch: str) -> Pipeline:
        pipe = Pipeline(self.compiled.tables[switch].flows)
        self[switch] = pipe
        return pipe


def walk_pair(
    compiled: Any,
    src: str,
    dst_mac: int,
    *,
    pipelines: Mapping[str, Pipeline] | None = None,
    bound: int | None = None,
) -> Walk:
    """Walk one data frame from host ``src`` to ``dst_mac`` with the scalar pipeline."""
    fabric = compiled.fabric
    pipes = pipelines if pipelines is not None else Pipelines(compiled)
    bound = bound if bound is not None else len(fabric.switches) + 1
    host = fabric.host(src)
    switch = host.switch
    frame = Frame(in_port=host.port, eth_src=compiled.plan.host_mac[src], eth_dst=dst_mac)
    path: list[str] = []
    seen: set[tuple[str, Frame]] = set()
    while True:
        if len(path) >= bound:
            return Walk(LOOP, None, tuple(path), f"loop: exceeded the hop bound of {bound} switches")
        state = (switch, frame)
        if state in seen:
            return Walk(LOOP, None, tuple(path + [switch]), f"loop: {switch} revisited on port {frame.in_port}")
        seen.add(state)
        path.append(switch)
        try:
            res = pipes[switch].process(frame)
        except PipelineError as err:
            return Walk(DROP, None, tuple(path), f"dropped at {switch}: pipeline error: {err}")
        if res.punted:
            return Walk(PUNT, None, tuple(path), f"punted to the controller by {switch} ({_hit(res)})")
        if len(res.outputs) + len(res.to_ingress) > 1:  # several outputs: a flood, whatever reaches the wire
            ports = sorted(res.ports + res.to_ingress)
            return Walk(FLOOD, None, tuple(path), f"flooded by {switch} to ports {ports} ({_hit(res)})")
        if not res.outputs:
            if res.to_ingress and len(path) == 1:  # back to the source host: misdelivered, as the fast engine says
                hid = host_ids(compiled)[src]
                return Walk(DELIVER - hid, src, tuple(path), f"sent back to its source {src} by {switch} port "
                            f"{res.to_ingress[0]} ({_hit(res)}; a switch drops it: sending back needs OFPP_IN_PORT)")
            if res.to_ingress:
                why = (f"output to its ingress port {res.to_ingress[0]} ({_hit(res)}), which a switch drops "
                       "(sending back needs OFPP_IN_PORT)")
            elif res.miss_table is not None:
                why = f"table miss in table {res.miss_table}"
            elif res.hits[-1].priority == 0 and res.hits[-1].match == Match():
                why = f"table-miss entry of table {res.hits[-1].table} (no route for this address)"
            else:
                why = f"drop entry {_hit(res)}"
            return Walk(DROP, None, tuple(path), f"dropped at {switch}: {why}")
        port, sent = res.outputs[0]
        peer = fabric.peer(switch, port)
        if peer is None:
            return Walk(DEAD, None, tuple(path), f"dropped at {switch}: output to port {port}, which leads nowhere")
        if peer.is_host:
            if sent.vlan_pcp is not None:
                return Walk(
                    TAGGED, peer.node, tuple(path),
                    f"reached {peer.node} by {switch} port {port} still VLAN-tagged (PCP {sent.vlan_pcp})",
                )
            hid = host_ids(compiled)[peer.node]
            return Walk(DELIVER - hid, peer.node, tuple(path), f"delivered to {peer.node} by {switch} port {port}")
        switch = peer.node
        frame = replace(sent, in_port=peer.port, metadata=0)


def _hit(res: Any) -> str:
    return describe_flow(res.hits[-1]) if res.hits else "no entry"


HOST_IDS_CACHE: dict[int, tuple[Any, dict[str, int]]] = {}


def host_ids(compiled: Any) -> dict[str, int]:
    """Host name -> host id (position in ``fabric.hosts``), cached for the last fabric."""
    fabric = compiled.fabric
    cached = HOST_IDS_CACHE.get(id(fabric))
    if cached is None or cached[0] is not fabric:
        cached = (fabric, {h.name: i for i, h in enumerate(fabric.hosts)})
        HOST_IDS_CACHE.clear()
        HOST_IDS_CACHE[id(fabric)] = cached
    return cached[1]

