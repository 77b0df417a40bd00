"""PAUSE check step: a PAUSE on a port that carries traffic flips it to table 3, diverts, and expiry restores.

* :func:`find_pause_targets` / :func:`choose_pause_target`: a fabric port whose PORT_STATE entry
  carries a host's default route and that, once paused, sends the same frame out of another port
  (checked on the switch's desired tables with the reference pipeline, flipped and unflipped).
* :func:`pause_test`: steady ping across it, counters before, a PAUSE (train) from
  :mod:`pause_inject`, the flip seen in ``dump-flows``, counters while paused (diverted?), expiry,
  counters after (restored?), and the controller's flips and reaction times.
* :func:`pause_skip_reason` and :func:`pause_step`: the runner's view (summary keys and failures);
  :func:`pause_run`: the whole check for a runner (train planned at the config's link speed, PFC for the
  classes in use, the test, its summary keys).
"""

from __future__ import annotations

import re
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

from ovs_flows import dump_flows, is_port_state, port_stats, set_port_state, sync_stats, wait_port_state
from pause_inject import PauseTrain, pause_plan
from reachability import SteadyPing
from runkit import StepResult, UsageError, summary_stats

from hpcfabric.rules.addressing import AddressPlan
from hpcfabric.rules.port_state import port_state_flow
from hpcfabric.rules.flows import TABLE_ALTERNATIVE, TABLE_PORT_STATE
from hpcfabric.topology.model import Fabric
from hpcfabric.verify.reference.pipeline import Frame, Pipeline


@dataclass(frozen=True)
class PauseTarget:
    """Port ``port`` of ``switch`` carries ``src``'s traffic to ``dst`` by default; paused, it leaves by ``alt_port``."""

    switch: str
    port: int
    src: str
    dst: str
    alt_port: int


def find_pause_targets(
    fabric: Fabric, plan: AddressPlan, desired: dict[str, tuple], spec: tuple[str, int] | None = None,
    avoid: frozenset[str] = frozenset(),
) -> list[PauseTarget]:
    """Candidate (switch, port, src host, dst host) for the PAUSE test, best first.

    A candidate port is a fabric port whose PORT_STATE entry carries a host's
    default route to a destination (checked on the switch's desired tables
    with the reference pipeline), and that, once paused, sends the frame out
    of another port (Valiant / alternative entry). Without ``spec``: the
    first switch (in fabric order) with such a port, global (Dragonfly) or
    top-dimension (FB) ports first. Switches in ``avoid`` (e.g. one cut off) are neither the target nor
    where its source or destination host sits.
    """
    top_kind = "global" if fabric.kind != "flattened_butterfly" else f"dim{len(fabric.params['dims']) - 1}"
    fallback: list[PauseTarget] = []
    for sw in fabric.switches:
        if spec and sw.name != spec[0] or sw.name in avoid:
            continue
        flows = desired.get(sw.name, ())
        if not any(f.table == TABLE_PORT_STATE for f in flows):
            continue
        pipe = Pipeline(flows)
        paused_pipes: dict[int, Pipeline] = {}
        found: dict[int, PauseTarget] = {}
        for h in fabric.hosts_on(sw.name):
            for d in fabric.hosts:
                if d.switch == sw.name or d.switch in avoid:
                    continue
                frame = Frame(in_port=h.port, eth_src=plan.host_mac[h.name], eth_dst=plan.host_mac[d.name])
                res = pipe.process(frame)
                if not res.hits or res.hits[-1].table != TABLE_PORT_STATE or len(res.ports) != 1:
                    continue
                port = res.ports[0]
                if port in found or (spec and port != spec[1]):
                    continue
                if port not in paused_pipes:
                    key = port_state_flow(port, False).key()
                    paused_pipes[port] = Pipeline(port_state_flow(port, True) if f.key() == key else f for f in flows)
                res2 = paused_pipes[port].process(frame)
                if len(res2.ports) == 1 and res2.ports[0] != port and res2.hits[-1].table == TABLE_ALTERNATIVE:
                    found[port] = PauseTarget(sw.name, port, h.name, d.name, res2.ports[0])
        top = [t for p, t in sorted(found.items()) if fabric.peer(sw.name, p).kind == top_kind]  # type: ignore[union-attr]
        rest = [t for p, t in sorted(found.items()) if fabric.peer(sw.name, p).kind != top_kind]  # type: ignore[union-attr]
        if top or (spec and rest):
            return top + rest
        fallback.extend(rest)
    return fallback


def choose_pause_target(fabric: Fabric, plan: AddressPlan, desired: dict[str, tuple], pause_port: str | None) -> PauseTarget:
    """The PAUSE test's target: ``--pause-port SWITCH:PORT`` or the default choice (UsageError if impossible)."""
    spec = None
    if pause_port:
        sw, _, p = pause_port.rpartition(":")
        if not fabric.has_switch(sw):
            raise UsageError(f"--pause-port: no switch {sw!r} in {fabric.name}")
        if int(p) not in fabric.fabric_ports(sw):
            raise UsageError(f"--pause-port: port {p} of {sw} is not a fabric port (fabric ports: {sorted(fabric.fabric_ports(sw))})")
        spec = (sw, int(p))
    targets = find_pause_targets(fabric, plan, desired, spec)
    if not targets:
        raise UsageError(
            f"--pause-port {pause_port}: no host of {spec[0]} sends over port {spec[1]} by default, "
            "or pausing it leaves no other port"
            if spec
            else "no fabric port carries a host's default route with an alternative"
        )
    return targets[0]


def pause_skip_reason(routing: str, no_pause: bool) -> str | None:
    """Why the PAUSE test does not run (None: it runs): asked to skip, or a routing that does not divert."""
    if no_pause:
        return "skipped (--no-pause)"
    if routing == "minimal":
        return f"skipped ({routing} routing has no PORT_STATE table)"
    if routing != "conditional":
        return f"skipped ({routing} routing does not divert on PAUSE)"
    return None


# ---------------------------------------------------------------------------
# counters


def _counters(bridge: str, target: PauseTarget, src_port: int) -> dict[str, Any]:
    """Counters of the PAUSE test on ``bridge`` (flow counters synced first).

    ``state``: the PORT_STATE entry of the paused port (it counts every frame
    routed to that port, paused or not: paused, it sends them on to table 3);
    ``valiant``: the table-3 entries of the source's port that leave by
    another port; ``fallback``: table-3 entries that still output to the
    paused port; ``tx``/``alt_tx``: transmit counters of the default and
    alternative ports.
    """
    sync_stats()
    port = target.port
    flows = dump_flows(bridge)  # one dump: table 2 and table 3 counters from the same moment
    ps = next((f for f in flows if f.table == TABLE_PORT_STATE and is_port_state(f, port)), None)
    valiant = fallback = 0
    for f in flows:
        if f.table != TABLE_ALTERNATIVE:
            continue
        outs = [int(x) for x in re.findall(r"output:(\d+)", f.actions)]
        outs += [int(g) & 0xFFFF for g in re.findall(r"group:(\d+)", f.actions) if int(g) >> 16 == 0x4846]
        if port in outs:
            if is_port_state(f, port):
                fallback += f.n_packets
        elif re.search(rf"(^|,)in_port={src_port}(,|$)", f.match):
            valiant += f.n_packets
    return {
        "state": ps.n_packets if ps else -1,
        "paused": bool(ps and "goto_table:3" in ps.actions),
        "actions": ps.actions if ps else None,
        "valiant": valiant,
        "fallback": fallback,
        "tx": port_stats(bridge, port)["tx"],
        "alt_tx": port_stats(bridge, target.alt_port)["tx"],
        "t": time.monotonic(),
    }


def _delta(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    d = {k: b[k] - a[k] for k in ("state", "valiant", "fallback", "tx", "alt_tx")}
    d["seconds"] = round(b["t"] - a["t"], 3)
    return d


# ---------------------------------------------------------------------------
# the test


def pause_test(
    net: Any,
    fabric: Fabric,
    target: PauseTarget,
    plan_: dict[str, float],
    controller: Any,
    progress: Callable[[str], None],
    window: float = 0.4,
    pfc_classes: tuple[int, ...] = (),
) -> dict[str, Any]:
    """Steady ping src->dst, PAUSE the port, check the flip, the diversion and the restoration.

    ``plan_``: from :func:`pause_inject.pause_plan`; ``controller``: a :class:`controller_proc.Controller`,
    or None in static mode (then this plays the controller's flips).
    """
    prefix = getattr(net, "hf_prefix", "")
    bridge = prefix + target.switch
    src_port = fabric.host(target.src).port
    res: dict[str, Any] = {
        "switch": target.switch,
        "port": target.port,
        "src": target.src,
        "dst": target.dst,
        "alt_port": target.alt_port,
        "quanta": plan_["quanta"],
        "frame_ms": round(plan_["frame_s"] * 1000, 3),
        "hold_s": round(plan_["hold_s"], 3),
        "diverted": False,
        "restored": False,
        "flipped": False,
    }
    pause0 = ((controller.status() or {}).get("pause") or {}) if controller else {}
    flips0, samples0 = pause0.get("flips", 0), len(pause0.get("reaction_ms") or [])
    ping = SteadyPing(net, target.src, target.dst)
    train: PauseTrain | None = None
    try:
        time.sleep(0.3)
        c0 = _counters(bridge, target, src_port)
        time.sleep(window)
        c1 = _counters(bridge, target, src_port)
        res["before"] = d = _delta(c0, c1)
        if c1["paused"] or d["state"] <= 0 or d["valiant"] != 0:
            res["error"] = f"default path not in use before the PAUSE (PORT_STATE {c1['actions']}, counters {d})"
            return res
        train = PauseTrain(
            fabric, target.switch, target.port, int(plan_["quanta"]), plan_["interval_s"], plan_["hold_s"], prefix,
            pfc_classes,
        )
        res["frame_kind"] = f"pfc vector {train.vector:#04x}" if train.vector else "802.3x pause"
        t_inject = train.start()
        if controller is None:  # static mode: we are the controller
            set_port_state(bridge, target.port, True)
        seen = wait_port_state(bridge, target.port, True, timeout=max(2.0, plan_["hold_s"]))
        if seen is None:
            res["error"] = "PORT_STATE entry never switched to goto_table:3"
            return res
        res["flipped"] = True
        res["observed_ms"] = round((seen - t_inject) * 1000, 2)
        progress(f"  {target.switch}:{target.port} flipped to table 3 {res['observed_ms']} ms after the PAUSE")
        remaining = t_inject + plan_["hold_s"] - time.monotonic()
        w = max(0.05, min(window, (remaining - 0.05) / 2))
        c2 = _counters(bridge, target, src_port)
        time.sleep(w)
        c3 = _counters(bridge, target, src_port)
        res["during"] = d = _delta(c2, c3)
        res["during"]["paused_at_start"], res["during"]["paused_at_end"] = c2["paused"], c3["paused"]
        # Frames routed to the paused port went on to a Valiant entry, not out of the port. A small
        # share may still leave by it when the controller lets the pause lapse between two frames of
        # a train (one frame covers only 3.4 ms at 10 Gb/s): at least 90 % must be diverted.
        frac = d["valiant"] / d["state"] if d["state"] > 0 else 0.0
        res["diverted_fraction"] = round(frac, 3)
        res["diverted"] = d["valiant"] > 0 and d["fallback"] == 0 and frac >= 0.9 and d["tx"] <= d["state"] // 4
        train.join(plan_["hold_s"] + 10)
        t_end = train.last + plan_["frame_s"]
        res["frames"] = train.sent
        if controller is None:
            time.sleep(max(0.0, t_end - time.monotonic()))
            set_port_state(bridge, target.port, False)
        back = wait_port_state(bridge, target.port, False, timeout=max(0.0, t_end - time.monotonic()) + 3.0)
        if back is None:
            res["error"] = "PORT_STATE entry not restored after the pause expired"
            return res
        res["restore_ms_after_expiry"] = round((back - t_end) * 1000, 2)
        c4 = _counters(bridge, target, src_port)
        time.sleep(window)
        c5 = _counters(bridge, target, src_port)
        res["after"] = d = _delta(c4, c5)
        res["restored"] = not c4["paused"] and not c5["paused"] and d["state"] > 0 and d["valiant"] == 0
    finally:
        if train is not None:
            train.stop()
        traffic = ping.stop()
        res["ping_sent"], res["ping_received"], res["ping_lost"] = traffic["sent"], traffic["received"], traffic["lost"]
        res["ping_rtt_avg_ms"] = traffic["rtt_avg_ms"]
    if controller is not None:
        time.sleep(0.3)  # let the status file catch up
        pause = (controller.status() or {}).get("pause") or {}
        res["flips"] = pause.get("flips", 0) - flips0
        res["reaction_ms"] = (pause.get("reaction_ms") or [])[samples0:]  # this test's PAUSE flips (not expiries)
        res["reaction_stats"] = summary_stats(res["reaction_ms"])
        # a clean pause is 2 flips (paused, resumed); every extra pair is a lapse inside the train
        res["lapses"] = max(0, (res["flips"] - 2) // 2)
    else:
        res["flips"] = 2 if res["restored"] else 1
        res["reaction_ms"] = []
    return res


def pause_step(res: dict[str, Any], target: PauseTarget, link_speed_gbps: float,
               progress: Callable[[str], None]) -> StepResult:
    """A :func:`pause_test` result as summary keys (``pause``, ``pause_port``, ``pause_flips``, ``diverted``, ...)
    and failures: an error, no flip, not diverted, not restored."""
    reaction = res.get("reaction_ms") or []
    step = StepResult({
        "pause": {k: v for k, v in res.items() if k != "reaction_ms"},  # (stats kept; the list can be long)
        "pause_port": f"{target.switch}:{target.port}",
        "pause_flips": res.get("flips", 0),
        "pause_reaction_ms": round(statistics.median(reaction), 3) if reaction else None,
        "pause_first_reaction_ms": round(reaction[0], 3) if reaction else None,
        "pause_observed_ms": res.get("observed_ms"),
        "pause_ping_lost": res.get("ping_lost"),  # reported, not judged: see docs/mininet.md
        "pause_lapses": res.get("lapses"),
        "pause_frames": res.get("frames"),
        "pause_reaction_p90_ms": (res.get("reaction_stats") or {}).get("p90"),
        "pause_reaction_max_ms": (res.get("reaction_stats") or {}).get("max"),
        "diverted": bool(res.get("diverted")),
        "restored": bool(res.get("restored")),
    })
    f = step.fields
    progress(
        f"PAUSE: flips={f['pause_flips']} reaction(median)={f['pause_reaction_ms']} ms "
        f"diverted={f['diverted']} restored={f['restored']} "
        f"steady ping {res.get('ping_received')}/{res.get('ping_sent')} ({res.get('ping_lost')} lost)"
    )
    if res.get("lapses"):
        progress(
            f"  note: the pause lapsed {res['lapses']} time(s) between frames of the train "
            f"(one frame = {res['frame_ms']} ms at {link_speed_gbps:g} Gb/s; the controller expired it "
            f"before handling the next frame); {res.get('diverted_fraction')} of the traffic was diverted"
        )
    if res.get("lapses"):  # the port went back to its default path inside the train: not one held pause
        step.failures.append(
            f"PAUSE test: the pause lapsed {res['lapses']} time(s) between the frames of the train (one frame "
            f"{res['frame_ms']} ms at {link_speed_gbps:g} Gb/s, controller reaction p90 "
            f"{(res.get('reaction_stats') or {}).get('p90')} ms); give longer frames (--link-speed-gbps lower)"
        )
    if res.get("error"):
        step.failures.append("PAUSE test: " + res["error"])
    if f["pause_flips"] < 1:
        step.failures.append("PAUSE test: no flip")
    if not f["diverted"]:
        step.failures.append(f"PAUSE test: traffic not diverted to table 3 ({res.get('during')})")
    if not f["restored"]:
        step.failures.append(f"PAUSE test: default path not restored ({res.get('after')})")
    return step


def pause_run(net: Any, setup: Any, target: PauseTarget, controller: Any, progress: Callable[[str], None],
              hold_s: float = 2.0, quanta: int | None = None, interval_s: float | None = None) -> StepResult:
    """The PAUSE check of a runner: a pause of ``hold_s`` (:func:`pause_inject.pause_plan` at ``setup``'s link
    speed; PFC for the classes the tables use, 802.3x when untagged) on ``target``, then :func:`pause_step`.
    ``setup``: a :class:`fabric_setup.Setup`; ``controller`` None in static mode."""
    pplan = pause_plan(setup.link_speed_gbps, hold_s, quanta, interval_s)
    progress(
        f"PAUSE test: {target.src} -> {target.dst} leaves {target.switch} by port {target.port}; "
        f"{pplan['frames']} frame(s) of {pplan['quanta']} quanta ({pplan['frame_s'] * 1000:.3g} ms each at "
        f"{setup.link_speed_gbps:g} Gb/s) for {pplan['hold_s']:.3g} s"
    )
    compiled = setup.compiled
    # PFC (802.1Qbb) for the classes in use (PCP 0..levels-1), 802.3x PAUSE on untagged tables
    pfc = tuple(range(compiled.cos_levels)) if compiled is not None and compiled.cos else ()
    res = pause_test(net, setup.fabric, target, pplan, controller, progress, pfc_classes=pfc)
    return pause_step(res, target, setup.link_speed_gbps, progress)
