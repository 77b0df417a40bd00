"""The validated controller configuration (:class:`ControllerConfig`): what the controller runs on."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Mapping

from hpcfabric.config.view import ViewSettings
from hpcfabric.rules.addressing import AddressPlan
from hpcfabric.rules.flows import FlowSpec
from hpcfabric.topology.model import Fabric


@dataclass(frozen=True, eq=False)
class ControllerConfig:
    """A validated controller configuration, with the fabric it compiles to.

    ``desired`` holds, per switch name, the flows the controller installs
    (the compiled table, adapted to ``host_mac``), PORT_STATE entries unpaused.
    """

    path: str
    topology: str
    addressing: str
    widths: tuple[tuple[str, int], ...] | None
    routing: str
    link_speed_gbps: float
    pause_hold_ms: float
    host_mac: str
    real_macs: tuple[tuple[str, int], ...]
    status_file: str | None
    log_level: str
    lldp_interval: float
    lldp_timeout: float
    listen_host: str
    listen_port: int
    bundles: str
    fabric: Fabric = field(repr=False)
    plan: AddressPlan | None = field(default=None, repr=False)
    compiled: Any = field(default=None, repr=False)  # hpcfabric.rules.tables.CompiledFabric
    desired: Mapping[str, tuple[FlowSpec, ...]] = field(default_factory=dict, repr=False)
    reload_poll: float = 1.0
    source_check: bool = False
    punt_meters: bool = False
    fabric_punt_pps: int = 1000
    host_punt_pps: int = 20
    punt_burst: int | None = None
    metrics_listen: tuple[str, int] | None = None
    metrics_poll: float = 10.0
    #: ``[web] listen``, ``[metrics] links``/``top_links``: :class:`hpcfabric.config.view.ViewSettings`
    view: Any = field(default_factory=ViewSettings, repr=False)
    ha_role: str = "equal"
    ha_lease_file: str | None = None
    ha_lease_timeout: float = 2.0
    ha_instance: str = ""
    ha_switches: tuple[str, ...] = ()
    #: ``[ha] partition``: this instance's index among ``ha_partitions`` derived partitions (file backend)
    ha_partition: int | None = None
    #: ``[hpcfabric] compiled``: directory of a compiled artifact (hpcfabric.config.artifact), None: compile here
    compiled_dir: str | None = None
    #: ``[ha] backend = etcd``: endpoints, lease TTL (s), partition count, key prefix (docs/ha.md)
    ha_backend: str = "file"
    ha_endpoints: tuple[str, ...] = ()
    ha_ttl: int = 2
    ha_partitions: int = 1
    ha_prefix: str = "/hpcfabric"
    #: ``[ha] etcd_*``: the etcd client's TLS files and user (:class:`hpcfabric.config.security.EtcdSecurity`)
    ha_etcd: Any = field(default=None, repr=False)
    fast_failover: bool = False
    recompute: bool = True
    #: ``[failover] settle_ms``: port events are gathered until none came for this long (one repair for a burst)
    settle_ms: float = 50.0
    #: ``[failover] failures_dir``: where a partition's controller (file backend) shares the failures it sees
    failures_dir: str | None = None
    #: ``[failover] planner`` resolved: ``own`` (a planner process per controller) or ``shared`` (one per host for
    #: the partitions sharing ``failures_dir``: :mod:`hpcfabric.repair.shared`)
    planner: str = "own"
    #: ``[openflow] tls = on``: :class:`hpcfabric.config.security.TlsSettings` (None: plain TCP)
    tls: Any = None
    #: ``[openflow] echo_timeout``: a second session for a connected dpid is refused if the live one answers
    #: an echo within this many seconds (else the live one is dead: closed, the new one accepted)
    echo_timeout: float = 3.0
    pause_reaction: str = "controller"
    switch_hold_s: int = 1
    cnm: bool = False
    cnm_max_hold_ms: float = 250.0
    #: ``[hpcfabric] cos`` as given (None: the compiler's default for the policy); the result is compiled.cos
    cos: str | None = None
    cos_levels: int | None = None
    #: ``[hpcfabric] flow_control``: pfc | pause | none (hpcfabric.config.deadlock)
    flow_control: str = "pfc"
    #: ``[hpcfabric] deadlock_check``: run the proof at load (off: verdict "not checked")
    deadlock_check: bool = True
    #: what is proven about deadlock for the compiled tables (hpcfabric.config.deadlock.deadlock_verdict)
    deadlock: Mapping[str, Any] | None = field(default=None, repr=False)
    #: ``[hpcfabric] traffic``: the traffic matrix file (absolute; None: static intermediates), docs/workload.md
    traffic: str | None = None
    #: that file loaded against the fabric (:class:`hpcfabric.topology.traffic.TrafficMatrix`), None without it
    traffic_matrix: Any = field(default=None, repr=False)
    #: fast-failover groups per switch (:class:`hpcfabric.rules.flows.GroupSpec`), empty unless fast_failover
    groups: Mapping[str, tuple[Any, ...]] = field(default_factory=dict, repr=False)
    #: the INI text this config was loaded from (the repair planner process loads the same, not the file anew)
    source_text: str = field(default="", repr=False)

    @property
    def meters(self) -> tuple[Any, ...]:
        """The punt meters (:class:`hpcfabric.rules.guards.Meter`) every switch needs, () without punt_meters."""
        if not self.punt_meters:
            return ()
        from hpcfabric.rules.guards import meters

        return meters(self.fabric_punt_pps, self.host_punt_pps, self.punt_burst)

    def manages(self, switch: str) -> bool:
        """Does this instance manage ``switch`` (``[ha] switches`` partitions a fabric between instances)?"""
        return not self.ha_switches or switch in self.managed

    @cached_property
    def managed(self) -> frozenset[str]:
        """The switches ``[ha] switches`` names (every switch without it): resolved once, plain names
        by lookup and only the patterns through fnmatch (a partition may list thousands of names)."""
        names = [sw.name for sw in self.fabric.switches]
        if not self.ha_switches:
            return frozenset(names)
        import fnmatch

        literal = {p for p in self.ha_switches if not any(c in p for c in "*?[")}
        globs = [p for p in self.ha_switches if p not in literal]
        return frozenset(n for n in names if n in literal or any(fnmatch.fnmatchcase(n, g) for g in globs))

    @property
    def link_speed_bps(self) -> float:
        return self.link_speed_gbps * 1e9

    @cached_property
    def dpid_to_switch(self) -> dict[int, str]:  # cached: looked up per LLDP packet-in
        return {sw.dpid: sw.name for sw in self.fabric.switches}

    @property
    def rules_expected(self) -> int:
        return sum(len(f) for f in self.desired.values())

    def summary(self) -> dict[str, Any]:
        """What ``hpcfabric check`` prints for a config file."""
        return {
            "config": self.path,
            "topology": self.topology,
            "fabric": self.fabric.name,
            "kind": self.fabric.kind,
            "switches": len(self.fabric.switches),
            "hosts": len(self.fabric.hosts),
            "links": len(self.fabric.links),
            "addressing": self.addressing,
            "layout": self.plan.layout.describe() if self.plan else None,
            "routing": self.routing,
            "traffic": self.traffic,
            "cos": (f"{self.compiled.cos}/{self.compiled.cos_levels}" if self.compiled is not None
                    and self.compiled.cos is not None else "off"),
            "link_speed_gbps": self.link_speed_gbps,
            "pause_hold_ms": self.pause_hold_ms,
            "pause_reaction": self.pause_reaction,
            "switch_hold_s": self.switch_hold_s,
            "flow_control": self.flow_control,
            "deadlock": (self.deadlock or {}).get("verdict"),
            "deadlock_explanation": (self.deadlock or {}).get("explanation"),
            "cnm": "on" if self.cnm else "off",
            "host_mac": self.host_mac,
            "rules_expected": self.rules_expected,
            "listen": f"{self.listen_host}:{self.listen_port}",
            "tls": self.tls.describe() if self.tls else "off",
            "status_file": self.status_file,
            "guards": ",".join(n for n, on in (("source_check", self.source_check), ("punt_meters", self.punt_meters)) if on)
            or "off",
            "metrics": f"{self.metrics_listen[0]}:{self.metrics_listen[1]}" if self.metrics_listen else "off",
            "ha": self.ha_role,
            "fast_failover": "on" if self.fast_failover else "off",
            "ff_groups": sum(len(g) for g in self.groups.values()),
        }
