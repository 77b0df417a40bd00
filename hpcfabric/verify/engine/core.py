"""The vectorised engine: decision rows of a whole fabric, decision matrices and walks.

:class:`Engine` splits every switch's ports into ingress classes (ports no data-relevant entry
tells apart; one class per port with ``per_port``), creates decision rows (switch, ingress
class, arrival PCP) as frames first reach them, decides a row for a destination set
(:meth:`Engine.decide`: the next row or a final code per destination, see
:mod:`hpcfabric.verify.codes`), stacks decisions into a matrix (:meth:`Engine.matrix`), groups
sources that decide alike (:meth:`Engine.source_classes`) and walks (source class, destination)
elements hop by hop through a matrix (:meth:`Engine.walk`), dropping a step back out of the
fabric port a frame came in on (:meth:`Engine.ingress_ids`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any, Callable, Iterable, Iterator, Sequence

import networkx as nx
import numpy as np

from hpcfabric.rules.flows import OFPP_IN_PORT, FlowSpec, Output, PopVlan, PushVlan, SetField
from hpcfabric.verify.codes import DEAD, DELIVER, DROP, FLOOD, LOOP, NEW_ROW, PCP_SLOTS, PUNT, SCALAR, SINK, TAGGED, UNTAGGED
from hpcfabric.verify.engine.flat import Unsupported
from hpcfabric.verify.engine.rows import (Destinations, Row, data_flows, data_relevant, entry_key, evaluate, evaluate_rows,
                                          rewrites_pcp)
from hpcfabric.verify.reference.pipeline import Frame, PipelineError, describe_flow
from hpcfabric.verify.reference.walk import Pipelines, host_ids

__all__ = ["Engine", "BATCH_ELEMENTS"]

BATCH_ELEMENTS = 1 << 20  # (source, destination) elements walked at once


class Engine:
    """Decision rows (switch, ingress class, arrival PCP) for a compiled fabric.

    ``extra_macs``: destinations besides the hosts (the verifier's probes) that
    ingress classes must hold for. ``per_port``: one ingress class per port (rows
    then name the channel a frame arrived on, as the channel dependency graph
    needs). Every untagged row exists from the start; rows of tagged arrivals are created when a
    decision first reaches them. ``relevant`` (switch -> data-relevant entries) may be swapped for
    a scenario's entries before rows are built (:mod:`hpcfabric.verify.oracle.lines`).
    """

    def __init__(self, compiled: Any, extra_macs: Iterable[int] = (), *, per_port: bool = False) -> None:
        self.compiled = compiled
        fabric = self.fabric = compiled.fabric
        self.plan = compiled.plan
        self.hosts = fabric.hosts
        self.hid = host_ids(compiled)
        self.host_macs = np.array([self.plan.host_mac[h.name] for h in self.hosts], dtype=np.uint64)
        self.bound = len(fabric.switches) + 1
        self.pipes = Pipelines(compiled)
        self.per_port = per_port
        self.rows: list[Row] = []
        self.row_of: dict[tuple[str, int, int], int] = {}  # (switch, class, pcp) -> row
        self.class_of: dict[tuple[str, int], int] = {}  # (switch, port) -> class
        self.classes: dict[str, list[tuple[int, ...]]] = {}
        self.relevant: dict[str, list[FlowSpec]] = {}
        self.own_port_drops: set[str] = set()  # switches whose rows drop outputs to their port (evaluate)
        self._ingress: tuple[np.ndarray, np.ndarray] | None = None  # see ingress_ids
        self._port_ids: dict[tuple[str, int], int] = {}
        self.attrs: dict = {}  # the rows' flat tables (Row.flat)
        self._switch_info: dict[str, tuple] = {}  # switch -> (flows, eth_src entries, in_port entries, built)
        extra = np.array(sorted(set(extra_macs)), dtype=np.uint64)
        self._every_dst = Destinations(np.concatenate([self.host_macs, extra]))
        self.tagging = False
        rewrites = []
        for sw in fabric.switches:
            flows = data_flows(compiled.tables[sw.name].flows)
            for f in flows:
                if f.goto is not None and f.goto <= f.table:
                    raise PipelineError(
                        f"{sw.name}: entry {describe_flow(f)} goes to table {f.goto}; goto must name a later table"
                    )
            relevant = [f for f in flows if data_relevant(f)]
            for f in relevant:
                for a in f.actions:
                    if isinstance(a, SetField) and a.field != "vlan_pcp":
                        rewrites.append(f"{sw.name}: {describe_flow(f)}")
                    elif not isinstance(a, (Output, SetField, PushVlan, PopVlan)):
                        raise Unsupported(f"{sw.name}: action {a!r} in {describe_flow(f)}")
                self.tagging = self.tagging or rewrites_pcp(f)
            self.relevant[sw.name] = relevant
            self._classes(sw.name, relevant)
        if rewrites:
            raise Unsupported(f"{len(rewrites)} entries rewrite data frames (first: {rewrites[0]})")
        for sw in fabric.switches:
            for ci in range(len(self.classes[sw.name])):
                self.row(sw.name, ci, UNTAGGED)
        self.scalar_rows = sum(r.scalar for r in self.rows)
        if self.scalar_rows and self.tagging:
            raise Unsupported("source-dependent rules (eth_src) together with VLAN PCP rewrites")
        # egress (port, PCP) -> next state; NEW_ROW until the row exists
        self.port_next: dict[str, np.ndarray] = {}
        for sw in fabric.switches:
            ports = fabric.ports(sw.name)
            top = max(ports, default=0)
            pn = np.full((top + 2, PCP_SLOTS), DEAD, dtype=np.int32)
            for p, peer in ports.items():
                if peer.is_host:
                    pn[p, :] = TAGGED
                    pn[p, 0] = DELIVER - self.hid[peer.node]
                else:
                    pn[p, :] = NEW_ROW
                    pn[p, 0] = self.row_of[(peer.node, self.class_of[(peer.node, peer.port)], UNTAGGED)]
            self.port_next[sw.name] = pn

    # -- rows ---------------------------------------------------------------
    def _classes(self, switch: str, relevant: list[FlowSpec]) -> None:
        """Split the ports of ``switch`` into ingress classes."""
        ports = self.fabric.ports(switch)
        by_src = [f for f in relevant if f.match.eth_src is not None]
        in_port_out = any(isinstance(a, Output) and a.port == OFPP_IN_PORT for f in relevant for a in f.actions)
        if in_port_out:
            self.own_port_drops.add(switch)
        split = bool(by_src) or in_port_out or self.per_port
        named: dict[int, set[int]] = {}  # in_port -> tables of the entries naming it
        for f in relevant:
            if f.match.in_port is not None and f.match.in_port in ports:
                named.setdefault(f.match.in_port, set()).add(f.table)
        reached: set[int] = set()
        if named and not split:
            # A port whose own entries sit only in tables that frames from the other
            # ports never reach behaves like the other ports: e.g. the per-host-port
            # Valiant entries in ALTERNATIVE while no port is paused. Cheap static
            # check first (no goto leads there), then, if needed, an evaluation over
            # every destination and probe.
            base = Row(switch, (), None, False).build(relevant, self.attrs)
            gotos = nx.DiGraph((t, f.goto) for t, fl in base.entries.items() for f in fl if f.goto is not None)
            reached = {0} | (nx.descendants(gotos, 0) if 0 in gotos else set())
            if any(tables & reached for tables in named.values()) and not self.tagging_possible(relevant):
                reached = evaluate(base, self._every_dst).reached
            for p in [p for p, tables in named.items() if not tables & reached]:
                del named[p]
        classes: list[tuple[int, ...]] = []
        other: list[int] = []
        alike: dict[tuple, list[int]] = {}
        for p in ports:
            if split:
                classes.append((p,))
            elif p in named:
                sig = self._signature(relevant, p, reached)
                if sig is None:
                    classes.append((p,))
                else:
                    alike.setdefault(sig, []).append(p)
            else:
                other.append(p)
        for members in alike.values():
            classes.append(tuple(members))
        if other:
            classes.append(tuple(other))
        self.classes[switch] = classes
        for ci, cls in enumerate(classes):
            for p in cls:
                self.class_of[(switch, p)] = ci

    @staticmethod
    def tagging_possible(relevant: list[FlowSpec]) -> bool:
        """Entries matching or rewriting the VLAN PCP: reachability then depends on
        the PCP, so every table is treated as reachable (the static check)."""
        return any(f.match.vlan_pcp is not None or f.match.vlan_vid is not None or rewrites_pcp(f) for f in relevant)

    @staticmethod
    def _signature(relevant: list[FlowSpec], port: int, reached: set[int]) -> tuple | None:
        """What the entries naming ``port`` (in reached tables) do, without the port:
        ports with equal signatures behave alike and share a class. None when an
        entry outputs to IN_PORT or ties with an entry of the same priority."""
        sig = []
        wild = {(f.table, f.priority) for f in relevant if f.match.in_port is None}
        for f in relevant:
            if f.match.in_port != port or f.table not in reached:
                continue
            if (f.table, f.priority) in wild:
                return None
            if any(isinstance(a, Output) and a.port == OFPP_IN_PORT for a in f.actions):
                return None
            sig.append(entry_key(f, {}))
        return tuple(sig)

    def row(self, switch: str, ci: int, pcp: int, flows: Sequence[FlowSpec] | None = None) -> int:
        """The row id of (switch, class, PCP), created (and built) on first use."""
        key = (switch, ci, pcp)
        r = self.row_of.get(key)
        if r is not None:
            return r
        cls = self.classes[switch][ci]
        peer = self.fabric.ports(switch)[cls[0]]
        src_mac = self.plan.host_mac[peer.node] if len(cls) == 1 and peer.is_host else None
        relevant = self.relevant[switch]
        info = self._switch_info.get(switch)
        if info is None or info[0] is not relevant:  # per flow list: scenarios swap it in and out
            named: dict[int, list[FlowSpec]] = {}
            for f in relevant:
                if f.match.in_port is not None:
                    named.setdefault(f.match.in_port, []).append(f)
            info = self._switch_info[switch] = (relevant, [f for f in relevant if f.match.eth_src is not None], named, {})
        _, by_src, named, built = info
        scalar = src_mac is None and any(f.match.in_port is None or f.match.in_port in cls for f in by_src)
        row = Row(switch, cls, src_mac, scalar, pcp)
        row.own_port_drops = switch in self.own_port_drops and len(cls) == 1 and not peer.is_host
        if not scalar:
            if by_src:
                row.build(relevant, self.attrs)
            else:  # rows whose port no entry names share one entries table (memory on big fabrics)
                k = tuple(map(id, named.get(cls[0], ())))
                entries = built.get(k)
                if entries is None:
                    built[k] = row.build(relevant, self.attrs).entries
                else:
                    row.entries, row.attrs = entries, self.attrs
        r = self.row_of[key] = len(self.rows)
        self.rows.append(row)
        return r

    def first_row(self, host: Any) -> int:
        return self.row_of[(host.switch, self.class_of[(host.switch, host.port)], UNTAGGED)]

    def ingress_ids(self) -> tuple[np.ndarray, np.ndarray]:
        """Per row, plus one trailing entry for the walk's sink: ``(arrived, sent)``.

        ``arrived[r]``: an id of the fabric port a frame in row ``r`` came in on (rows of one fabric
        port only, -1 otherwise); ``sent[r]``: the id of the port the previous switch sent it out of
        to land in row ``r`` (the peer of that port; -2 for host rows). A step from row ``a`` to row
        ``b`` leaves through the ingress port exactly when ``arrived[a] == sent[b]``: OpenFlow
        switches drop such a frame (sending back needs ``OFPP_IN_PORT``), and so do the walks
        (:meth:`drop_back_to_ingress`). Rows that merge several ingress ports (the default engine on big
        fabrics) cannot tell and get -1. A host's frame sent back to that host is not a step between
        rows: it counts as misdelivered (to its source), as in :func:`walk_pair`.
        """
        cached = self._ingress
        if cached is not None and len(cached[0]) == len(self.rows) + 1:
            return cached
        ids = self._port_ids
        start = 0 if cached is None else len(cached[0]) - 1
        arrived = np.full(len(self.rows) + 1, -1, dtype=np.int64)
        sent = np.full(len(self.rows) + 1, -2, dtype=np.int64)
        if cached is not None:
            arrived[:start], sent[:start] = cached[0][:start], cached[1][:start]
        for r in range(start, len(self.rows)):
            row = self.rows[r]
            if len(row.ports) != 1:
                continue
            peer = self.fabric.ports(row.switch)[row.ports[0]]
            if peer.is_host:
                continue
            if not row.own_port_drops:  # own_port_drops: decided in evaluate
                arrived[r] = ids.setdefault((row.switch, row.ports[0]), len(ids))
            sent[r] = ids.setdefault((peer.node, peer.port), len(ids))
        self._ingress = (arrived, sent)
        return self._ingress

    @staticmethod
    def drop_back_to_ingress(ids: tuple[np.ndarray, np.ndarray], cur: np.ndarray, code: np.ndarray) -> None:
        """Steps (rows ``cur`` deciding ``code``) that leave through their fabric ingress port become
        ``DROP`` in ``code``, in place."""
        arrived, sent = ids
        back = arrived[cur] == sent[np.where(code >= 0, code, len(sent) - 1)]
        if back.any():
            code[back] = DROP

    def channel(self, r: int) -> tuple[str, int, int] | None:
        """The channel (switch, egress port, PCP) a frame in row ``r`` arrived on
        (per-port rows of fabric ports only; None for host ports)."""
        row = self.rows[r]
        peer = self.fabric.ports(row.switch)[row.ports[0]]
        if peer.is_host or len(row.ports) != 1:
            return None
        return peer.node, peer.port, row.pcp

    # -- decisions ----------------------------------------------------------
    def decide(self, row: Row, dst: Destinations, ps: list | None = None) -> np.ndarray:
        """Next-state code (int32) of ``row`` for every destination of ``dst`` (:meth:`decide_rows`)."""
        return self.decide_rows([row], dst, ps)[0]

    def decide_rows(self, rows: Sequence[Row], dst: Destinations, ps: list | None = None) -> list[np.ndarray]:
        """Next-state codes (int32) of each of ``rows`` for every destination of ``dst``, evaluated together
        (rows for new (port, PCP) states are created on the way, in the order of ``rows``). With ``ps``
        (a list), the PORT_STATE port each destination meets is appended to it per row not scalar."""
        live = [row for row in rows if not row.scalar]
        outcomes = iter(evaluate_rows(live, dst, ps is not None) if live else [])
        codes = []
        for row in rows:
            if row.scalar:
                codes.append(np.full(dst.n, SCALAR, dtype=np.int32))
                continue
            res = next(outcomes)
            if ps is not None:
                ps.append(res.ps_port)
            pn = self.port_next[row.switch]
            port = np.clip(res.out_port, 0, len(pn) - 1)
            slot = res.out_pcp.astype(np.int64) + 1
            nxt = pn[port, slot]
            single = res.out_n == 1
            new = single & (nxt == NEW_ROW)
            if new.any():
                for p, s in {(int(a), int(b)) for a, b in zip(port[new], slot[new])}:
                    peer = self.fabric.ports(row.switch)[p]
                    pn[p, s] = self.row(peer.node, self.class_of[(peer.node, peer.port)], s - 1)
                nxt = pn[port, slot]
            code = np.where(single, nxt, np.where(res.out_n > 1, FLOOD, DROP))
            code = np.where(res.punt, PUNT, code)
            codes.append(np.where(res.err, DROP, code).astype(np.int32))
        return codes

    def decide_scalar(self, row: Row, src: int, dst_mac: int) -> int:
        """Next-state code of one frame at a source-dependent row."""
        frame = Frame(in_port=row.rep, eth_src=src, eth_dst=dst_mac, vlan_pcp=None if row.pcp == UNTAGGED else row.pcp)
        try:
            res = self.pipes[row.switch].process(frame)
        except PipelineError:
            return DROP
        if res.punted:
            return PUNT
        if len(res.outputs) + len(res.to_ingress) > 1:
            return FLOOD
        if not res.outputs:
            peer = self.fabric.ports(row.switch).get(row.rep)
            if res.to_ingress and peer is not None and peer.is_host:  # back to the source: as walk_pair
                return DELIVER - self.hid[peer.node]
            return DROP
        port, sent = res.outputs[0]
        if replace(sent, in_port=frame.in_port) != frame:  # pragma: no cover - rewrites are rejected earlier
            raise Unsupported(f"{row.switch} rewrites a data frame")
        pn = self.port_next[row.switch]
        return int(pn[min(port, len(pn) - 1), 0 if row.pcp == UNTAGGED else row.pcp + 1])

    def matrix(self, dst: Destinations) -> np.ndarray:
        """Decision matrix: one row per decision row, one column per destination,
        plus a last all-``SINK`` row (see :meth:`walk`). Rows created while
        deciding are decided too."""
        lines: list[np.ndarray] = []
        while len(lines) < len(self.rows):  # the rows created while deciding a wave make the next
            lines.extend(self.decide_rows(self.rows[len(lines):], dst))
        m = np.empty((len(lines) + 1, dst.n), dtype=np.int32)
        for i, line in enumerate(lines):
            m[i] = line
        m[-1] = SINK
        return m

    # -- sources and walks --------------------------------------------------
    def source_classes(self, m: np.ndarray, hosts: Sequence[int]) -> list[tuple[int, np.ndarray]]:
        """(first row, host ids) per class of sources that behave identically."""
        if self.scalar_rows:
            return [(self.first_row(self.hosts[h]), np.array([h])) for h in hosts]
        by_row: dict[int, list[int]] = {}
        for h in hosts:
            by_row.setdefault(self.first_row(self.hosts[h]), []).append(h)
        merged: dict[tuple[str, bytes], tuple[int, list[int]]] = {}
        per_switch = Counter(self.rows[r].switch for r in by_row)
        out: list[tuple[int, list[int]]] = []
        for r, members in by_row.items():
            sw = self.rows[r].switch
            if per_switch[sw] > 1:
                k = (sw, m[r].tobytes())
                if k in merged:
                    merged[k][1].extend(members)
                    continue
                merged[k] = (r, members)
            out.append((r, members))
        return [(r, np.array(sorted(mem))) for r, mem in out]

    def walk(
        self,
        m: np.ndarray,
        dst: Destinations,
        classes: list[tuple[int, np.ndarray]],
        on_step: Callable[[np.ndarray, np.ndarray, np.ndarray], None] | None = None,
        line_of: np.ndarray | None = None,
    ) -> Iterator[tuple[int, int, np.ndarray, np.ndarray]]:
        """Yield (first class, class count, codes, hops) per batch; element e of a
        batch is class ``first + e // n`` sending to destination ``e % n``.

        ``m`` comes from :meth:`matrix`: its last row is the sink (every cell
        ``SINK``) where finished elements park, so arrays never shrink.
        ``on_step(rows, codes, columns)`` sees, at every hop, each live
        element's row, what that row decided and the element's destination
        column (the channel dependency graph uses it). ``line_of`` maps rows
        to lines of ``m`` (rows sharing a line); its last entry is the sink.
        """
        n = dst.n
        if n == 0:
            return
        flat = m.reshape(-1)
        sink = m.shape[0] - 1 if line_of is None else len(line_of) - 1
        ingress = self.ingress_ids()
        if len(ingress[0]) != sink + 1:  # pragma: no cover - the matrix is built over every row
            raise ValueError("decision matrix and engine rows differ")
        per_port_rows = bool((ingress[0] >= 0).any())  # merged classes only: nothing to check per step
        cols = np.arange(n, dtype=np.int64)
        per = max(1, BATCH_ELEMENTS // n)
        for c0 in range(0, len(classes), per):
            batch = classes[c0 : c0 + per]
            nb = len(batch)
            cur = np.repeat(np.array([r for r, _ in batch], dtype=np.int64), n).reshape(nb, n)
            codes = np.zeros((nb, n), dtype=np.int32)
            hops = np.zeros((nb, n), dtype=np.int32)
            hop = 1
            snap: np.ndarray | None = None
            next_snap = 2
            while True:
                code = flat[(cur if line_of is None else line_of[cur]) * n + cols]
                if self.scalar_rows:
                    for b, j in zip(*np.nonzero(code == SCALAR)):
                        src = int(batch[b][1][0])
                        row = self.rows[int(cur[b, j])]
                        code[b, j] = self.decide_scalar(row, int(self.host_macs[src]), int(dst.macs[j]))
                if per_port_rows:
                    self.drop_back_to_ingress(ingress, cur, code)
                if on_step is not None:
                    live = cur != sink
                    on_step(cur[live], code[live], np.broadcast_to(cols, cur.shape)[live])
                done = code < 0
                term = done & (code != SINK)
                if term.any():
                    codes[term] = code[term]
                    hops[term] = hop
                cur = code.astype(np.int64)
                cur[done] = sink
                alive = ~done
                if not alive.any():
                    break
                hop += 1
                if hop > self.bound:
                    codes[alive] = LOOP
                    hops[alive] = 0
                    break
                if snap is not None:
                    cyc = alive & (cur == snap)
                    if cyc.any():
                        codes[cyc] = LOOP
                        hops[cyc] = 0
                        cur[cyc] = sink
                if hop == next_snap:
                    snap = cur.copy()
                    next_snap *= 2
            yield c0, nb, codes.reshape(-1), hops.reshape(-1)

