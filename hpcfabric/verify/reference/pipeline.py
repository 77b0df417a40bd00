"""A fake OpenFlow 1.3 switch: the scalar reference for what compiled flows do.

Semantics (OpenFlow 1.3.5, Sec. 5.1-5.12), restricted to what hpcfabric emits:

* processing starts in table 0; in each table the highest-priority entry
  whose match covers the frame wins. Equal-priority entries that overlap
  make the winner undefined in OpenFlow; here the earlier one (in the
  order the flows were given) wins, and :func:`check_overlaps` reports
  such pairs as the compile bugs they are;
* the winner's actions are applied in order (apply-actions): ``Output``
  records an egress port and the frame *as it is at that moment*
  (``OFPP_IN_PORT`` means the frame's ``in_port``, ``OFPP_CONTROLLER``
  records a punt), ``SetField`` rewrites ``eth_src``/``eth_dst``/``vlan_pcp``
  for later actions and tables, ``PushVlan`` tags an untagged frame with
  PCP 0 (a tagged frame keeps its PCP: the new tag copies the outer one),
  ``PopVlan`` untags it;
* then ``write_metadata`` (value, mask), then ``goto`` (must name a later
  table, checked when the pipeline is built); no ``goto`` ends processing;
* no matching entry in a table is a table miss: processing ends (the frame
  is dropped unless an earlier table already output it);
* Open vSwitch extensions (switch-local PAUSE reaction): ``Resubmit(T)``
  looks table T up with the frame as it is, applies the winner (actions,
  write_metadata, goto -- the pipeline continues from there), then returns
  to the next action; a miss there does nothing. ``Learn`` records the entry
  it would add (:attr:`Result.learned`; the tables are not changed --
  callers add them to model the switch's state), and ``LearnLoad`` (the
  action of learned entries) loads bits of ``reg0``/``metadata``. ``reg0``
  starts at 0 and, like ``metadata``, never leaves the switch.
* ``Group`` runs a fast-failover group (``groups``, :class:`~hpcfabric.rules.flows.GroupSpec`):
  the actions of its first bucket whose watch port is not in ``down``; no live
  bucket drops the frame;
* ``Output`` to a port in ``down`` (link down) loses the frame; ``Output`` (in
  an entry or a bucket) to the frame's own ingress port by number is dropped,
  as OpenFlow switches do (Open vSwitch: "skipping output to input port";
  sending back needs ``OFPP_IN_PORT``), and noted in :attr:`Result.to_ingress`.

Matching: ``in_port``, ``eth_type`` and ``vlan_pcp`` are exact (``vlan_pcp``
never matches an untagged frame); ``eth_src``, ``eth_dst``, ``metadata``,
``reg0`` and ``vlan_vid`` are ``(value, mask)`` and match when ``field & mask
== value`` (a frame's ``vlan_vid`` is 0 untagged, ``OFPVID_PRESENT`` | VID 0
tagged: :func:`hpcfabric.rules.flows.frame_vlan_vid`).

This module is deliberately simple: it is the reference the fast verifier
(:mod:`hpcfabric.verify.oracle.allpairs`) is cross-checked against. Resubmit chains become
plain entries for the vectorised engine in :mod:`hpcfabric.verify.reference.flatten`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from operator import attrgetter
from typing import Any, Callable, Iterable

from hpcfabric.errors import HpcfabricError
from hpcfabric.rules.flows import (
    ETH_TYPE_IPV4,
    OFPP_CONTROLLER,
    OFPP_IN_PORT,
    LEARN_FIELDS,
    FlowSpec,
    Group,
    GroupSpec,
    Learn,
    LearnLoad,
    Match,
    Output,
    PopVlan,
    PushVlan,
    Resubmit,
    SetField,
    vlan_vid_matches,
)

#: Frame fields a ``SetField`` action may rewrite.
SETTABLE_FIELDS = ("eth_src", "eth_dst", "vlan_pcp", "reg0")
#: Open vSwitch's limit on nested resubmits.
MAX_RESUBMIT_DEPTH = 64


class PipelineError(HpcfabricError):
    """A flow table OpenFlow would reject, or an action impossible on this frame."""


@dataclass(frozen=True, slots=True)
class Frame:
    """A frame at a switch. ``vlan_pcp`` None = untagged; ``metadata`` is
    pipeline-internal (it is reset to 0 in frames as sent)."""

    in_port: int
    eth_src: int
    eth_dst: int
    eth_type: int = ETH_TYPE_IPV4
    vlan_pcp: int | None = None
    metadata: int = 0
    reg0: int = 0

    # Explicit copies: ``dataclasses.replace`` costs several times a plain constructor call, and the
    # pipeline and the walks over it (fast-failover analysis) copy frames millions of times.
    def as_sent(self) -> "Frame":
        """The frame as it leaves the switch: ``metadata`` and ``reg0`` reset (itself if they are 0)."""
        if not self.metadata and not self.reg0:
            return self
        return Frame(self.in_port, self.eth_src, self.eth_dst, self.eth_type, self.vlan_pcp, 0, 0)

    def arriving(self, in_port: int) -> "Frame":
        """This frame received on ``in_port`` with ``metadata`` 0 (the next switch's input)."""
        return Frame(in_port, self.eth_src, self.eth_dst, self.eth_type, self.vlan_pcp, 0, self.reg0)

    def with_in_port(self, in_port: int) -> "Frame":
        return Frame(in_port, self.eth_src, self.eth_dst, self.eth_type, self.vlan_pcp, self.metadata, self.reg0)

    def with_field(self, name: str, value: Any) -> "Frame":
        """A copy with field ``name`` set to ``value`` (``replace(frame, name=value)``)."""
        try:
            return _SETTERS[name](self, value)
        except KeyError:
            raise TypeError(f"Frame has no field {name!r}") from None


_SETTERS: dict[str, Callable[[Frame, Any], Frame]] = {
    "in_port": lambda f, v: Frame(v, f.eth_src, f.eth_dst, f.eth_type, f.vlan_pcp, f.metadata, f.reg0),
    "eth_src": lambda f, v: Frame(f.in_port, v, f.eth_dst, f.eth_type, f.vlan_pcp, f.metadata, f.reg0),
    "eth_dst": lambda f, v: Frame(f.in_port, f.eth_src, v, f.eth_type, f.vlan_pcp, f.metadata, f.reg0),
    "eth_type": lambda f, v: Frame(f.in_port, f.eth_src, f.eth_dst, v, f.vlan_pcp, f.metadata, f.reg0),
    "vlan_pcp": lambda f, v: Frame(f.in_port, f.eth_src, f.eth_dst, f.eth_type, v, f.metadata, f.reg0),
    "metadata": lambda f, v: Frame(f.in_port, f.eth_src, f.eth_dst, f.eth_type, f.vlan_pcp, v, f.reg0),
    "reg0": lambda f, v: Frame(f.in_port, f.eth_src, f.eth_dst, f.eth_type, f.vlan_pcp, f.metadata, v),
}
#: the frame fields a match can look at (``Match.vlan_vid`` looks at ``vlan_pcp``: tagged or not)
_MATCHED = ("in_port", "eth_type", "vlan_pcp", "eth_src", "eth_dst", "metadata", "reg0")


@dataclass(frozen=True, slots=True)
class Result:
    """What one switch did with one frame.

    ``outputs``: (egress port, frame as sent) in action order (``OFPP_IN_PORT``
    already resolved to the ingress port); ``punted``: sent to the controller;
    ``hits``: the entries that matched, table by table; ``miss_table``: the
    table where a table miss ended processing (None if none did);
    ``to_ingress``: outputs to the frame's own ingress port (by number, not
    ``OFPP_IN_PORT``), dropped as a switch does; ``dropped``: neither output
    nor punted.
    """

    outputs: tuple[tuple[int, Frame], ...]
    punted: bool
    hits: tuple[FlowSpec, ...]
    miss_table: int | None = None
    punts: tuple[Frame, ...] = field(default=())
    learned: tuple[FlowSpec, ...] = field(default=())
    to_ingress: tuple[int, ...] = field(default=())

    @property
    def dropped(self) -> bool:
        return not self.outputs and not self.punted

    @property
    def ports(self) -> tuple[int, ...]:
        return tuple(p for p, _ in self.outputs)


def match_frame(match: Match, frame: Frame) -> bool:
    """True when ``match`` covers ``frame`` (OpenFlow 1.3 field semantics)."""
    if match.in_port is not None and match.in_port != frame.in_port:
        return False
    if match.eth_type is not None and match.eth_type != frame.eth_type:
        return False
    if match.vlan_pcp is not None and (frame.vlan_pcp is None or match.vlan_pcp != frame.vlan_pcp):
        return False
    if not vlan_vid_matches(match.vlan_vid, frame.vlan_pcp):
        return False
    if match.eth_dst is not None and frame.eth_dst & match.eth_dst[1] != match.eth_dst[0]:
        return False
    if match.eth_src is not None and frame.eth_src & match.eth_src[1] != match.eth_src[0]:
        return False
    if match.metadata is not None and frame.metadata & match.metadata[1] != match.metadata[0]:
        return False
    if match.reg0 is not None and frame.reg0 & match.reg0[1] != match.reg0[0]:
        return False
    return True


def _no_key(frame: Frame) -> None:
    return None


class FlowTable:
    """One table: entries by priority, highest first; ties keep the given order.

    Lookups are memoised on the frame fields the table's entries match at all (its *key fields*): the
    winner depends on nothing else, so frames that differ elsewhere share one scan."""

    def __init__(self, table_id: int, flows: Iterable[FlowSpec]) -> None:
        self.table_id = table_id
        self.entries: tuple[FlowSpec, ...] = tuple(sorted(flows, key=lambda f: -f.priority))
        used = set()
        for f in self.entries:
            m = f.match
            used.update(n for n in _MATCHED if getattr(m, n) is not None)
            if m.vlan_vid is not None:
                used.add("vlan_pcp")
        #: the frame fields some entry matches (the winner depends on these only)
        self.key_fields: tuple[str, ...] = tuple(n for n in _MATCHED if n in used)
        self.key: Callable[[Frame], Any] = attrgetter(*self.key_fields) if self.key_fields else _no_key
        self._memo: dict[Any, FlowSpec | None] = {}
        for f in self.entries:
            if f.table != table_id:
                raise PipelineError(f"entry of table {f.table} placed in table {table_id}")
            if f.goto is not None and f.goto <= table_id:
                raise PipelineError(
                    f"entry {_describe(f)} in table {table_id} goes to table {f.goto}; "
                    "goto must name a later table"
                )

    def lookup(self, frame: Frame) -> FlowSpec | None:
        """The winning entry for ``frame``, None on a table miss."""
        key = self.key(frame)
        try:
            return self._memo[key]
        except KeyError:
            pass
        found = None
        for f in self.entries:
            if match_frame(f.match, frame):
                found = f
                break
        self._memo[key] = found
        return found

    def __len__(self) -> int:
        return len(self.entries)


@dataclass
class _Run:
    outputs: list[tuple[int, Frame]]
    punts: list[Frame]
    hits: list[FlowSpec]
    learned: list[FlowSpec]
    miss: int | None
    to_ingress: list[int] = field(default_factory=list)
    trace: list[tuple[int, Frame]] | None = None


def _bits(value: int, ofs: int, n_bits: int) -> int:
    return value >> ofs & ((1 << n_bits) - 1)


def learned_entry(learn: Learn, frame: Frame) -> FlowSpec:
    """The entry ``learn`` adds for ``frame`` (timeouts aside): its matches filled from the frame."""
    kw: dict[str, tuple[int, int] | int] = {}
    for m in learn.matches:
        value = _bits(getattr(frame, m.src), m.src_ofs, m.n_bits) << m.dst_ofs
        mask = ((1 << m.n_bits) - 1) << m.dst_ofs
        if m.dst == "in_port":
            if mask != (1 << LEARN_FIELDS["in_port"]) - 1:
                raise PipelineError("a learned in_port match must cover all 32 bits")
            kw["in_port"] = value
            continue
        old = kw.get(m.dst, (0, 0))
        assert isinstance(old, tuple)
        kw[m.dst] = (old[0] & ~mask | value, old[1] | mask)
    return FlowSpec(learn.table, learn.priority, Match(**kw), tuple(learn.loads), learn.cookie)  # type: ignore[arg-type]


class Pipeline:
    """The flow tables of one switch. ``process`` is pure: it never changes the tables.

    ``groups``: the switch's fast-failover groups; ``down``: its ports whose link is down.
    """

    def __init__(self, flows: Iterable[FlowSpec], groups: Iterable[GroupSpec] = (), down: Iterable[int] = ()) -> None:
        by_table: dict[int, list[FlowSpec]] = {}
        self.flows: tuple[FlowSpec, ...] = tuple(flows)
        self.groups: dict[int, GroupSpec] = {g.group_id: g for g in groups}
        self.down: frozenset[int] = frozenset(down)
        for f in self.flows:
            by_table.setdefault(f.table, []).append(f)
        self.tables: dict[int, FlowTable] = {t: FlowTable(t, fl) for t, fl in sorted(by_table.items())}

    def process(self, frame: Frame, trace: list[tuple[int, Frame]] | None = None) -> Result:
        """What this switch does with ``frame``. ``trace``: a list that gets every table lookup made, as (table,
        frame looked up), resubmits and misses included: the result is fixed by those lookups' winners."""
        st = _Run([], [], [], [], None, trace=trace)
        self._run_from(0, frame, st, 0)
        return Result(tuple(st.outputs), bool(st.punts), tuple(st.hits), st.miss, tuple(st.punts), tuple(st.learned),
                      tuple(st.to_ingress))

    def _run_from(self, table: int | None, frame: Frame, st: "_Run", depth: int) -> Frame:
        """Process ``frame`` from ``table`` on (following ``goto``); the frame as it ends."""
        while table is not None:
            ft = self.tables.get(table)
            if st.trace is not None:
                st.trace.append((table, frame))
            entry = ft.lookup(frame) if ft is not None else None
            if entry is None:
                if depth == 0:
                    st.miss = table
                break
            st.hits.append(entry)
            for action in entry.actions:
                if type(action) is Output:  # the common case first
                    if action.port not in self.down:  # else the link is down: this copy is lost
                        _output(action.port, frame, st)
                elif isinstance(action, Resubmit):
                    if depth >= MAX_RESUBMIT_DEPTH:
                        raise PipelineError(f"more than {MAX_RESUBMIT_DEPTH} nested resubmits")
                    frame = self._run_from(action.table, frame, st, depth + 1)
                elif isinstance(action, Learn):
                    st.learned.append(learned_entry(action, frame))
                elif isinstance(action, Group):
                    frame = self._group(action.group_id, frame, st)
                elif isinstance(action, Output) and action.port in self.down:
                    continue  # the link is down: this copy is lost
                else:
                    frame = _apply(action, frame, st)
            if entry.write_metadata is not None:
                value, mask = entry.write_metadata
                frame = frame.with_field("metadata", (frame.metadata & ~mask) | (value & mask))
            if entry.goto is not None and entry.goto <= table:  # pragma: no cover - checked at build
                raise PipelineError(f"goto {entry.goto} from table {table} does not go forward")
            table = entry.goto
        return frame

    def _group(self, group_id: int, frame: Frame, st: "_Run") -> Frame:
        group = self.groups.get(group_id)
        if group is None:
            raise PipelineError(f"group {group_id:#x} is not installed on this switch")
        bucket = group.live_bucket(self.down)
        for action in bucket.actions if bucket is not None else ():  # none live: dropped
            if isinstance(action, Group):
                raise PipelineError(f"group {group_id:#x} chains group {action.group_id:#x} (not supported)")
            frame = _apply(action, frame, st)
        return frame

    def check_overlaps(self) -> list[tuple[FlowSpec, FlowSpec]]:
        return check_overlaps(self.flows)


def _output(port: int, frame: Frame, st: "_Run") -> None:
    sent = frame.as_sent()
    if port == OFPP_CONTROLLER:
        st.punts.append(sent)
    elif port == OFPP_IN_PORT:
        st.outputs.append((frame.in_port, sent))
    elif port == frame.in_port:
        st.to_ingress.append(port)  # OpenFlow: never back out of the ingress port by number
    else:
        st.outputs.append((port, sent))


def _apply(action: object, frame: Frame, st: "_Run") -> Frame:
    if isinstance(action, Output):
        _output(action.port, frame, st)
        return frame
    if isinstance(action, SetField):
        if action.field not in SETTABLE_FIELDS:
            raise PipelineError(f"set_field on unsupported field {action.field!r} (supported: {SETTABLE_FIELDS})")
        if action.field == "vlan_pcp" and frame.vlan_pcp is None:
            raise PipelineError("set_field vlan_pcp on an untagged frame (push a VLAN tag first)")
        return frame.with_field(action.field, action.value)
    if isinstance(action, PushVlan):
        return frame if frame.vlan_pcp is not None else frame.with_field("vlan_pcp", 0)
    if isinstance(action, PopVlan):
        if frame.vlan_pcp is None:
            raise PipelineError("pop_vlan on an untagged frame")
        return frame.with_field("vlan_pcp", None)
    if isinstance(action, LearnLoad):
        if action.dst not in ("reg0", "metadata"):
            raise PipelineError(f"load into {action.dst!r} (supported: reg0, metadata)")
        mask = ((1 << action.n_bits) - 1) << action.dst_ofs
        old = getattr(frame, action.dst)
        return frame.with_field(action.dst, old & ~mask | (action.value << action.dst_ofs) & mask)
    raise PipelineError(f"unsupported action {action!r}")


# ---------------------------------------------------------------------------
# overlap check


def matches_overlap(a: Match, b: Match) -> bool:
    """True when some frame matches both ``a`` and ``b``."""
    for name in ("in_port", "eth_type", "vlan_pcp"):
        x, y = getattr(a, name), getattr(b, name)
        if x is not None and y is not None and x != y:
            return False
    for name in ("eth_src", "eth_dst", "metadata", "reg0", "vlan_vid"):
        x, y = getattr(a, name), getattr(b, name)
        if x is not None and y is not None and (x[0] ^ y[0]) & x[1] & y[1]:
            return False
    return True


def check_overlaps(flows: Iterable[FlowSpec]) -> list[tuple[FlowSpec, FlowSpec]]:
    """Pairs of entries in the same table with the same priority whose matches
    overlap (OpenFlow leaves the winner undefined: a compile bug), in flow order.

    Entries are bucketed by the exactly-matched fields first, so the usual
    tables (hundreds of disjoint exact or prefix entries) are checked quickly.
    """
    groups: dict[tuple[int, int], list[FlowSpec]] = {}
    for f in flows:
        groups.setdefault((f.table, f.priority), []).append(f)
    out: list[tuple[FlowSpec, FlowSpec]] = []
    for entries in groups.values():
        if len(entries) < 2:
            continue
        # Fast path: every entry has the same masks on the same fields; then
        # two entries overlap iff their (in_port, eth_type, vlan_pcp, values) agree.
        if len({_shape(f.match) for f in entries}) == 1:
            seen: dict[tuple, FlowSpec] = {}
            for f in entries:
                k = _values(f.match)
                if k in seen:
                    out.append((seen[k], f))
                else:
                    seen[k] = f
            continue
        for i, a in enumerate(entries):
            for b in entries[i + 1 :]:
                if matches_overlap(a.match, b.match):
                    out.append((a, b))
    return out


def overlap_summary(compiled: Any, examples: int = 5) -> tuple[int, list[str]]:
    """(overlapping entry pairs over every switch of ``compiled``, the first ``examples`` described)."""
    count, out = 0, []
    for sw in compiled.fabric.switches:
        for a, b in check_overlaps(compiled.tables[sw.name].flows):
            count += 1
            if len(out) < examples:
                out.append(f"{sw.name}: {describe_flow(a)} | {describe_flow(b)}")
    return count, out


def _shape(m: Match) -> tuple:
    """Which fields an entry matches and with which masks."""
    return (
        m.in_port is not None,
        m.eth_type is not None,
        m.vlan_pcp is not None,
        m.eth_src[1] if m.eth_src else None,
        m.eth_dst[1] if m.eth_dst else None,
        m.metadata[1] if m.metadata else None,
        m.reg0[1] if m.reg0 else None,
        m.vlan_vid[1] if m.vlan_vid else None,
    )


def _values(m: Match) -> tuple:
    return (
        m.in_port,
        m.eth_type,
        m.vlan_pcp,
        m.eth_src[0] if m.eth_src else 0,
        m.eth_dst[0] if m.eth_dst else 0,
        m.metadata[0] if m.metadata else 0,
        m.reg0[0] if m.reg0 else 0,
        m.vlan_vid[0] if m.vlan_vid else 0,
    )


def _describe(f: FlowSpec) -> str:
    m = f.match
    parts = [f"table={f.table}", f"priority={f.priority}"]
    for name in ("in_port", "eth_type", "vlan_pcp"):
        v = getattr(m, name)
        if v is not None:
            parts.append(f"{name}={v:#x}" if name == "eth_type" else f"{name}={v}")
    for name in ("eth_src", "eth_dst", "metadata", "reg0", "vlan_vid"):
        v = getattr(m, name)
        if v is not None:
            parts.append(f"{name}={v[0]:#x}/{v[1]:#x}")
    return ",".join(parts)


def describe_flow(f: FlowSpec) -> str:
    """Short ``ovs-ofctl``-like text for one entry (for error messages and reports)."""
    acts = []
    for a in f.actions:
        if isinstance(a, Output):
            acts.append(
                "output:IN_PORT" if a.port == OFPP_IN_PORT else "CONTROLLER" if a.port == OFPP_CONTROLLER else f"output:{a.port}"
            )
        elif isinstance(a, SetField):
            acts.append(f"set_field:{a.value:#x}->{a.field}")
        elif isinstance(a, PushVlan):
            acts.append(f"push_vlan:{a.ethertype:#x}")
        elif isinstance(a, Resubmit):
            acts.append(f"resubmit(,{a.table})")
        elif isinstance(a, Learn):
            acts.append(f"learn(table={a.table},hard_timeout={a.hard_timeout},...)")
        elif isinstance(a, LearnLoad):
            acts.append(f"load:{a.value:#x}->{a.dst}[{a.dst_ofs}..{a.dst_ofs + a.n_bits - 1}]")
        elif isinstance(a, Group):
            acts.append(f"group:{a.group_id:#x}")
        elif isinstance(a, PopVlan):
            acts.append("pop_vlan")
        else:
            acts.append(repr(a))
    if f.write_metadata is not None:
        acts.append(f"write_metadata:{f.write_metadata[0]:#x}/{f.write_metadata[1]:#x}")
    if f.goto is not None:
        acts.append(f"goto_table:{f.goto}")
    return _describe(f) + " actions=" + (",".join(acts) or "drop")


# ---------------------------------------------------------------------------
# fast-failover groups as plain entries (for the vectorised verifier)


def resolve_groups(flows: Iterable[FlowSpec], groups: Iterable[GroupSpec], down: Iterable[int]) -> tuple[FlowSpec, ...]:
    """``flows`` as one switch executes them while its ports ``down`` are down: every ``Group`` replaced by
    its first live bucket's actions (nothing if none is live), outputs to down ports removed. Used by the
    vectorised verifier (:func:`hpcfabric.verify.oracle.allpairs.verify` with ``groups``/``down``), which needs plain tables;
    :class:`Pipeline` executes groups directly. (A bucket output to the frame's ingress
    port, dropped by a real switch, is kept here: :func:`fast_failover_groups` never builds such detours.)"""
    table = {g.group_id: g for g in groups}
    down = frozenset(down)
    out = []
    for f in flows:
        if not any(isinstance(a, Group) or (isinstance(a, Output) and a.port in down) for a in f.actions):
            out.append(f)
            continue
        acts: list[Any] = []
        for a in f.actions:
            if isinstance(a, Group):
                g = table.get(a.group_id)
                if g is None:
                    raise PipelineError(f"flow uses group {a.group_id:#x}, which is not installed")
                bucket = g.live_bucket(down)
                acts.extend(bucket.actions if bucket is not None else ())
            elif not (isinstance(a, Output) and a.port in down):
                acts.append(a)
        out.append(replace(f, actions=tuple(acts)))
    return tuple(out)
