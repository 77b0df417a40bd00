"""Controller configuration: an INI file -> a validated, compiled :class:`ControllerConfig` (pure).

Example (``configs/dragonfly-a4-p2-h2.conf``)::

    [hpcfabric]
    topology = ../topologies/dragonfly-a4-p2-h2.yaml   ; relative to this file
    addressing = compact        ; flat | per-switch | per-group | compact
    widths =                    ; optional "group=8,switch=4,host=3"
    routing = conditional       ; minimal | valiant | conditional
    cos =                       ; on | off | none | top | hop (default: the proven deadlock-free scheme of
                                ;   rules.cos.default_cos: DF top/2 minimal, top/3 otherwise; FB conditional
                                ;   hop/N, valiant top/2; untagged for FB minimal and fat-tree/Clos)
    cos_levels =                ; optional 1..8 VLAN PCP values (default: the scheme's)
    flow_control = pfc          ; the links' flow control: pfc (802.1Qbb, one PAUSE per class: tables whose
                                ;   channel dependency graph the union proof does not show acyclic are
                                ;   refused, the cycle printed) | pause (802.3x: all classes stop together,
                                ;   classes give no protection; the class-merged graph is reported) | none
                                ;   (lossy: deadlock does not apply; cos = off is fine). config.deadlock
    deadlock_check = on         ; off: skip the proof at load (huge flat-addressed fabrics; verdict "not checked")
    link_speed_gbps = 10        ; converts PAUSE quanta to seconds
    pause_hold_ms = 50          ; a paused port stays paused at least this long (damps PAUSE trains)
    pause_reaction = controller ; controller | switch (OVS learn: the switch reacts to PAUSE itself)
    switch_hold_s = 1           ; switch mode: whole seconds an override lasts after the last PAUSE
    cnm = off                   ; on: 802.1Qau CNMs from fabric ports flip ports too (copied to the controller)
    cnm_max_hold_ms = 250       ; hold of a CNM with the most severe feedback (qFb 63); milder: proportionally less
    host_mac = dmp              ; dmp | rewrite (rewrite needs a [hosts] section)
    status_file =               ; optional JSON status path (relative to this file)
    log_level = INFO
    lldp_interval = 1.0
    lldp_timeout =              ; optional, default 3.5 x lldp_interval

    [openflow]
    listen_host = 127.0.0.1
    listen_port = 6653
    bundles = auto              ; auto | on | off  (OF1.3 ONF bundles for installs)

    [hosts]                     ; only with host_mac = rewrite: real MAC per host
    g0s0h0 = aa:bb:cc:dd:ee:01

    ; operations (docs/operations.md): reload_poll in [hpcfabric], and
    [guards]                    ; source_check, punt_meters (on|off), fabric_punt_pps, host_punt_pps, punt_burst
    [metrics]                   ; listen = HOST:PORT (empty = off), poll_interval, links = all|SW:PORT,..., top_links
    [web]                       ; listen = HOST:PORT: the live fabric page (empty = off)
    [ha]                        ; role = equal|auto|master|slave, lease_file, lease_timeout, instance, switches
    [failover]                  ; recompute = on|off, fast_failover = on|off (groups: hpcfabric.failover.groups),
                                ; settle_ms (a burst of port events gathered into one repair),
                                ; failures_dir (partitions on one host share the failures they see),
                                ; planner = auto|own|shared (one repair planner for a host's partitions)

``[DEFAULT]`` belongs to os-ken/oslo (``osken-manager --config-file``) and is
ignored here. Everything is checked at load time -- the topology is loaded,
addresses planned and the rules compiled -- so a controller never starts with
a configuration it cannot apply. Every problem raises
:class:`~hpcfabric.errors.ConfigError` with ``source`` = the file and ``field``
= ``section.key`` (topology-file problems keep their own source and field).

Modules: :mod:`~hpcfabric.config.ini` (schema, reading, typed values),
:mod:`~hpcfabric.config.load` (checks, topology, :func:`load_config`),
:mod:`~hpcfabric.config.build` (address plan, compile, rewrite, guards,
fast-failover groups), :mod:`~hpcfabric.config.deadlock` (what is proven under
``flow_control``), :mod:`~hpcfabric.config.model` (:class:`ControllerConfig`).
This package exports what callers use.
"""

from hpcfabric.config.build import address_plan, build_tables
from hpcfabric.config.deadlock import FLOW_CONTROLS, deadlock_verdict
from hpcfabric.config.ini import (
    BUNDLE_MODES,
    COS_CHOICES,
    FREE_SECTIONS,
    HA_ROLES,
    HOST_MAC_MODES,
    IGNORED_SECTIONS,
    LOG_LEVELS,
    ON_OFF,
    ROUTINGS,
    SCHEMA,
    parse_widths,
)
from hpcfabric.config.load import load_config, validate_config
from hpcfabric.config.model import ControllerConfig
from hpcfabric.rules.mac_rewrite import rewrite_flows

__all__ = [
    "BUNDLE_MODES",
    "COS_CHOICES",
    "FLOW_CONTROLS",
    "FREE_SECTIONS",
    "HA_ROLES",
    "HOST_MAC_MODES",
    "IGNORED_SECTIONS",
    "LOG_LEVELS",
    "ON_OFF",
    "ROUTINGS",
    "SCHEMA",
    "ControllerConfig",
    "address_plan",
    "build_tables",
    "deadlock_verdict",
    "load_config",
    "parse_widths",
    "rewrite_flows",
    "validate_config",
]
