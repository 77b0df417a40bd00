"""PORT_STATE: how a paused port switches its default rules off.

Default rules (conditional and valiant policies) write their output port into
the metadata and go to PORT_STATE, which holds one entry per fabric port
(:func:`port_state_flow`): output the port, or -- while it is paused -- go to
ALTERNATIVE, where every port has a fallback that keeps the minimal path
(:func:`default_rule_flows`). A flip is one OFPFC_MODIFY_STRICT however many


default rules use the port.

Who flips: the controller on a punted PAUSE (``pause_reaction="controller"``),
or the switch itself (``"switch"``, Open vSwitch ``learn``/``resubmit``): a
PAUSE learns a timed override in PAUSE_LEARN and PAUSE_SELECT picks output or
ALTERNATIVE (:func:`switch_pause_flows`; docs/controller.md).
"""

from __future__ import annotations

from hpcfabric.rules.flows import (
    ETH_TYPE_PAUSE,
    OFPP_CONTROLLER,
    TABLE_ALTERNATIVE,
    TABLE_INGRESS,
    TABLE_PAUSE_LEARN,
    TABLE_PAUSE_SELECT,
    TABLE_PORT_STATE,
    FlowSpec,
    Group,
    Learn,
    LearnLoad,
    LearnMatch,
    Match,
    Output,
    Resubmit,
    RuleClass,
    make_cookie,
)
from hpcfabric.rules.tables import (
    COOKIE_LEARN_NOOP,
    COOKIE_SELECT_PAUSED,
    METADATA_PORT_MASK,
    PRIO_FALLBACK,
    PRIO_LEARNED,
    PRIO_MISS,
    PRIO_PAUSE_LEARN,
    PRIO_PORT_STATE,
    PRIO_SELECT_PAUSED,
    PRIO_SELECT_PORT,
    REG_PAUSED,
)
from hpcfabric.topology.model import Fabric, Switch


def port_state_flow(port: int, paused: bool, group: int | None = None, *, reaction: str = "controller") -> FlowSpec:
    """The PORT_STATE entry of one fabric port: output it, or (paused) go to ALTERNATIVE.

    Both states share table, priority and match, so a flip is one
    OFPFC_MODIFY_STRICT flow-mod however many default rules use the port.
    ``group``: the port is protected by that fast-failover group
    (:mod:`hpcfabric.failover.groups`); the unpaused entry outputs through it
    (controller reaction only: fast failover and the switch-local reaction
    are not combined, the config refuses it).
    With ``reaction="switch"`` the unpaused entry asks the switch-local state
    instead of outputting (:func:`switch_pause_flows`): ``resubmit`` to
    PAUSE_LEARN (a learned override sets reg0 bit 0), then to PAUSE_SELECT
    (output the port, or ALTERNATIVE); the paused entry is the same in both
    modes (the controller can still force a port, e.g. on a CNM).
    """
    match = Match(metadata=(port, METADATA_PORT_MASK))
    cookie = make_cookie(RuleClass.PORT_STATE, port)
    if paused:
        return FlowSpec(TABLE_PORT_STATE, PRIO_PORT_STATE, match, (), cookie, goto=TABLE_ALTERNATIVE)
    if reaction == "switch":
        return FlowSpec(TABLE_PORT_STATE, PRIO_PORT_STATE, match,
                        (Resubmit(TABLE_PAUSE_LEARN), Resubmit(TABLE_PAUSE_SELECT)), cookie)
    action = Output(port) if group is None else Group(group)
    return FlowSpec(TABLE_PORT_STATE, PRIO_PORT_STATE, match, (action,), cookie)


def pause_learn_action(hold_s: int) -> Learn:
    """The ``learn`` a PAUSE frame runs in switch mode: an entry in PAUSE_LEARN matching
    ``metadata[0..15] == in_port`` (the port it arrived on) that sets reg0 bit 0, for
    ``hold_s`` seconds after the last such frame."""
    return Learn(
        table=TABLE_PAUSE_LEARN,
        priority=PRIO_LEARNED,
        hard_timeout=hold_s,
        cookie=make_cookie(RuleClass.LEARNED, 0),
        matches=(LearnMatch("metadata", "in_port", 16),),
        loads=(LearnLoad("reg0", 1, 1),),
    )


def learned_override_flow(port: int) -> FlowSpec:
    """What the switch holds while ``port`` is paused in switch mode: the entry
    :func:`pause_learn_action` learns from a PAUSE received on ``port`` (its timeout aside)."""
    return FlowSpec(
        TABLE_PAUSE_LEARN,
        PRIO_LEARNED,
        Match(metadata=(port, METADATA_PORT_MASK)),
        (LearnLoad("reg0", 1, 1),),
        make_cookie(RuleClass.LEARNED, 0),
    )


def switch_pause_flows(fabric: Fabric, sw: Switch, hold_s: int, punts: bool) -> list[FlowSpec]:
    """Switch-local PAUSE reaction (OVS ``learn`` + ``resubmit``; docs/controller.md).

    INGRESS, per fabric port: a MAC-control frame (PAUSE, PFC, XON alike --
    OpenFlow cannot read the pause time) learns the port's override and is
    copied to the controller (counted there; ``punts=False``: not copied).
    PAUSE_LEARN: the learned overrides and a no-op miss entry. PAUSE_SELECT:
    reg0 bit 0 set -> resubmit to ALTERNATIVE, else output the port in the metadata.
    """
    learn = pause_learn_action(hold_s)
    flows = []
    ports = sorted(fabric.fabric_ports(sw.name))
    for port in ports:
        actions: tuple = (learn, Output(OFPP_CONTROLLER)) if punts else (learn,)
        flows.append(FlowSpec(TABLE_INGRESS, PRIO_PAUSE_LEARN, Match(in_port=port, eth_type=ETH_TYPE_PAUSE), actions,
                              make_cookie(RuleClass.PUNT, ETH_TYPE_PAUSE | port << 16)))
        flows.append(FlowSpec(TABLE_PAUSE_SELECT, PRIO_SELECT_PORT, Match(metadata=(port, METADATA_PORT_MASK)),
                              (Output(port),), make_cookie(RuleClass.PORT_STATE, port)))
    flows.append(FlowSpec(TABLE_PAUSE_LEARN, PRIO_MISS, Match(), (), make_cookie(RuleClass.INFRA, COOKIE_LEARN_NOOP)))
    flows.append(FlowSpec(TABLE_PAUSE_SELECT, PRIO_SELECT_PAUSED, Match(reg0=REG_PAUSED), (Resubmit(TABLE_ALTERNATIVE),),
                          make_cookie(RuleClass.PORT_STATE, COOKIE_SELECT_PAUSED)))
    return flows


def default_rule_flows(fabric: Fabric, sw: Switch, reaction: str = "controller") -> list[FlowSpec]:
    """Per fabric port of ``sw``: its PORT_STATE entry (unpaused) and its ALTERNATIVE fallback.

    The fallback keeps a transit frame whose default port is paused on its
    minimal path: it waits there (lossless) and can never loop.
    """
    flows = []
    for port in sorted(fabric.fabric_ports(sw.name)):
        flows.append(port_state_flow(port, False, reaction=reaction))
        flows.append(
            FlowSpec(
                TABLE_ALTERNATIVE,
                PRIO_FALLBACK,
                Match(metadata=(port, METADATA_PORT_MASK)),
                (Output(port),),
                make_cookie(RuleClass.PORT_STATE, port),
            )
        )
    return flows
