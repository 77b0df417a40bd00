"""The build step of a loaded config: address plan, compiled rules, then what the
config asks on top (host MAC rewrite, guards, fast-failover groups) -> the
tables the controller installs (``desired``)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hpcfabric.config.ini import config_error
from hpcfabric.config.model import ControllerConfig
from hpcfabric.errors import AddressingError, CompileError, ConfigError
from hpcfabric.rules.addressing import AddressPlan, plan_addresses
from hpcfabric.rules.mac_rewrite import rewrite_flows


def address_plan(cfg: ControllerConfig) -> AddressPlan:
    """The address plan of ``cfg``'s fabric: ``[hpcfabric] widths``, else the topology file's
    widths for the same mode, else the mode's defaults. Errors name whichever file gave the widths."""
    fabric, addressing, widths = cfg.fabric, cfg.addressing, cfg.widths
    file_addr = fabric.params.get("addressing") or {}
    if widths is not None:
        plan_widths, widths_field = dict(widths), "hpcfabric.widths"
    elif file_addr.get("widths") and file_addr.get("mode", addressing) == addressing:
        plan_widths, widths_field = dict(file_addr["widths"]), None
    else:
        plan_widths, widths_field = None, "hpcfabric.addressing"
    try:
        return plan_addresses(fabric, addressing, plan_widths)
    except AddressingError as err:
        if err.source:  # already names its file
            raise
        if widths_field is None:  # widths from the topology file
            raise AddressingError(err.detail, source=cfg.topology, field=err.field) from None
        raise AddressingError(err.detail, source=cfg.path, field=widths_field) from None


def compile_rules(cfg: ControllerConfig, only: Any = None, traffic: Any = None, failures: Any = None,
                  redirect_detours: bool = True) -> Any:
    """Compile ``cfg``'s fabric (routing, CoS, pause reaction, CNM snooping); ``only``: the switches
    to compile (a partition's), default all; ``traffic``: a
    :class:`~hpcfabric.topology.traffic.TrafficMatrix` choosing the Valiant intermediates
    (None: static); ``failures``: compile the surviving fabric (:mod:`hpcfabric.topology.failures`).
    Compile errors name the config key they are about."""
    from hpcfabric.rules.compiler import compile_fabric

    cos_arg: bool | str | None = {"on": True, "off": False, None: None}.get(cfg.cos, cfg.cos)
    if traffic is None:
        traffic = cfg.traffic_matrix  # [hpcfabric] traffic (config.load)
    try:
        return compile_fabric(cfg.fabric, cfg.plan, routing=cfg.routing, pause_reaction=cfg.pause_reaction,
                              switch_hold_s=cfg.switch_hold_s, cnm_snoop=cfg.cnm, cos=cos_arg,
                              cos_levels=cfg.cos_levels, only=only, traffic=traffic, failures=failures,
                              redirect_detours=redirect_detours)
    except CompileError as err:
        raise config_error(cfg.path, _compile_error_key(str(err), cfg.routing, cfg.cos_levels),
                           f"cannot compile rules for {cfg.fabric.name}: {err}") from None


def whole_fabric_rules(cfg: ControllerConfig, traffic: Any = None) -> Any:
    """``cfg.compiled`` if it holds every switch's table, else the whole fabric compiled: a partition's
    controller installs its own switches only, but deadlock freedom is a property of the whole fabric."""
    if len(cfg.compiled.tables) == len(cfg.fabric.switches):
        return cfg.compiled
    return compile_rules(cfg, traffic=traffic)


def build_tables(cfg: ControllerConfig, traffic: Any = None) -> ControllerConfig:
    """``cfg`` with the compiled fabric, the tables to install and the fast-failover groups.

    Compile (routing, CoS, pause reaction, CNM snooping), then adapt the tables:
    host MAC rewrite, guards (source check, punt meters), fast-failover groups.
    """
    compiled = compile_rules(cfg, only=cfg.manages if cfg.ha_switches and not cfg.fast_failover else None,
                             traffic=traffic)
    return adapt_tables(cfg, compiled)


def adapt_switches(cfg: ControllerConfig, compiled: Any, names: Any,
                   failover: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The tables the controller installs on the switches ``names`` for ``compiled`` (a repair's tables) and
    the fast-failover groups of every switch (they need the whole fabric's tables; empty without them):
    what :func:`adapt_tables` makes, for those switches only (``failover``: as there)."""
    if cfg.fast_failover:  # groups need the whole fabric's tables; a repair may leave no port a detour
        try:
            adapted = adapt_tables(cfg, compiled, failover)
        except ConfigError:
            adapted = adapt_tables(replace(cfg, fast_failover=False), compiled)
        return {n: adapted.desired[n] for n in names}, dict(adapted.groups)
    return _host_side(cfg, compiled, {n: compiled.tables[n].flows for n in names}), {}


def _host_side(cfg: ControllerConfig, compiled: Any, tables: dict[str, Any]) -> dict[str, Any]:
    """``tables`` with the host MAC rewrite and the guards (source check, punt meters) the config asks for."""
    tagged = compiled.cos is not None
    if cfg.host_mac == "rewrite":
        tables = rewrite_flows(cfg.fabric, cfg.plan, tables, dict(cfg.real_macs), cos=tagged)
    if cfg.source_check or cfg.punt_meters:
        from hpcfabric.rules.guards import guard_flows

        tables = guard_flows(cfg.fabric, cfg.plan, tables, source_check=cfg.source_check,
                             punt_meters=cfg.punt_meters, cos=tagged)
    return dict(tables)


def adapt_tables(cfg: ControllerConfig, compiled: Any, failover: Any = None) -> ControllerConfig:
    """``cfg`` with ``compiled`` (a whole fabric's or a partition's tables) adapted to what the config asks:
    host MAC rewrite, guards, fast-failover groups (these need the whole fabric's tables; ``failover``: a
    :class:`~hpcfabric.failover.groups.FailoverAnalysis` of this fabric kept between calls, else one from scratch)."""
    source, fabric, real_macs = cfg.path, cfg.fabric, cfg.real_macs
    tables = _host_side(cfg, compiled, {name: t.flows for name, t in compiled.tables.items()})
    groups: dict[str, tuple[Any, ...]] = {}
    if cfg.fast_failover:
        from hpcfabric.failover.groups import fast_failover_groups

        try:
            ff = failover.update(tables) if failover is not None else \
                fast_failover_groups(compiled, tables, source_macs=dict(real_macs))
        except CompileError as err:
            raise config_error(source, "failover.fast_failover", str(err)) from None
        if not ff.stats()["groups"]:
            raise config_error(source, "failover.fast_failover", f"no fabric port of {fabric.name} has a loop-free "
                               "detour (docs/operations.md); use off (failures are routed around by recomputation)")
        tables, groups = dict(ff.flows), {k: v for k, v in ff.groups.items() if v}
    return replace(cfg, compiled=compiled, desired=tables, groups=groups)


def _compile_error_key(message: str, routing: str, cos_levels: int | None) -> str:
    """The config key a :class:`CompileError` from :func:`compile_fabric` is about."""
    if "cos_levels" in message and cos_levels is not None:
        return "hpcfabric.cos_levels"
    if "CoS" in message or "cos" in message.split():
        return "hpcfabric.cos"
    if routing != "minimal" and routing in message:
        return "hpcfabric.routing"
    return "hpcfabric.addressing"
