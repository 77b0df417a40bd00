"""Deadlock freedom of a config's tables under its declared link-level flow control.

``[hpcfabric] flow_control`` says what the fabric's links do when a queue fills:

* ``pfc`` (802.1Qbb, the default): lossless, one PAUSE per priority. The classes of service
  (VLAN PCP) are separate lossless queues, so the tables are deadlock-free iff the channel
  dependency graph over (switch, port, class) is acyclic. :func:`deadlock_verdict` runs the union
  proof (:func:`hpcfabric.verify.union.proof.prove`: delivery and an acyclic CDG under any set of paused
  ports, which contains every single-paused-port scenario) and refuses tables it does not prove:
  :class:`~hpcfabric.errors.ConfigError` naming the cycle as channels and the fix.
* ``pause`` (802.3x): lossless, but one PAUSE stops every class at once, so classes give no
  protection: the relevant graph is the class-merged CDG (channels = switch:port). It is checked
  and reported (cyclic on every Dragonfly and non-minimal FB: deadlock is possible), never refused.
* ``none`` (lossy): frames are dropped instead of paused; no dependency can wait forever, deadlock
  does not apply, and the classes may be dropped (``cos = off``). No proof runs.

``deadlock_check = off`` skips the proof at load (verdict ``not checked``): for fabrics where it is too
slow to run at every start (flat addressing on hundreds of switches: minutes), checked offline instead.
"""

from __future__ import annotations

import time
from typing import Any

import networkx as nx

from hpcfabric.config.ini import config_error
from hpcfabric.errors import VerificationError
from hpcfabric.verify.graphs import find_cycle

__all__ = ["FLOW_CONTROLS", "MERGED_CHECK_MAX_SWITCHES", "deadlock_verdict", "merged_cycle", "failures_promise"]


def failures_promise(cfg: Any) -> str:
    """What is proven about the tables the controller installs after a failure (``hpcfabric check``)."""
    if not cfg.recompute:
        return ("failures: not repaired ([failover] recompute = off): frames over a failed link are dropped "
                "until it is back")
    ahead = "`hpcfabric prove --config FILE --fail SWITCH:PORT ...` proves a failure set ahead"
    ff = ("; fast-failover detours act before the repair (proven for a failure set by prove --fail)"
          if cfg.fast_failover else "")
    if not cfg.deadlock_check or cfg.flow_control == "none":
        why = "deadlock_check = off" if not cfg.deadlock_check else "flow_control = none (lossy)"
        return (f"failures: repaired (the surviving fabric compiled, the affected switches only); not proven "
                f"({why}){ff}")
    if cfg.flow_control == "pause":
        return (f"failures: repaired; each repair proven per class and reported, installed either way "
                f"(802.3x stops every class at once){ff}; {ahead}")
    return (f"failures: every repair (the surviving fabric compiled for the affected switches, only the differing "
            f"entries sent) is proven deadlock- and loop-free under any set of paused ports, with every mix of its "
            f"update, before a flow-mod goes out; none proven: the last proven tables stay{ff}; {ahead}")

FLOW_CONTROLS = ("pfc", "pause", "none")
#: ``pause``: the class-merged check keeps every dependency edge (no symmetry reduction): up to this size
MERGED_CHECK_MAX_SWITCHES = 500


def deadlock_verdict(cfg: Any, *, refuse: bool = True) -> dict[str, Any]:
    """What is proven about deadlock for ``cfg``'s compiled tables under ``cfg.flow_control``.

    Returns a JSON-ready dict: ``flow_control``, ``scheme``, ``levels``, ``verdict`` (``proven``,
    ``cycle``, ``not applicable``, ``not modelled``), ``proven`` (bool), ``cycle`` (channel names or
    None), ``explanation`` and ``fix`` (or None). With ``pfc`` and ``refuse``, tables that are not
    proven deadlock-free raise :class:`~hpcfabric.errors.ConfigError` (field ``hpcfabric.cos``).
    """
    compiled, fc = cfg.compiled, cfg.flow_control
    scheme, levels = compiled.cos, compiled.cos_levels
    out: dict[str, Any] = {"flow_control": fc, "scheme": scheme or "off", "levels": levels if scheme else 1,
                           "method": None, "verdict": None, "proven": False, "cycle": None, "delivered": None,
                           "explanation": "", "fix": None, "seconds": 0.0}
    if not getattr(cfg, "deadlock_check", True):
        out.update(verdict="not checked", explanation=(
            f"deadlock_check = off: the proof was skipped at load; nothing is proven about deadlock for these "
            f"tables under flow_control = {fc} (hpcfabric prove FILE checks them offline)"))
        return out
    if fc == "none":
        out.update(verdict="not applicable", explanation=(
            "flow_control = none (lossy links): a full queue drops frames instead of pausing the sender, so no "
            "channel waits on another forever and deadlock does not apply; classes of service are not needed "
            "(cos = off saves the VLAN push/step/pop entries)" + (f"; these tables still use {scheme}/{levels}"
                                                                    if scheme else "")))
        return out
    t0 = time.perf_counter()
    from hpcfabric.config.build import whole_fabric_rules
    from hpcfabric.verify.union.proof import prove

    compiled = whole_fabric_rules(cfg)  # a partition's controller proves the whole fabric it is part of

    try:
        rep = prove(compiled, keep=fc == "pause" and len(cfg.fabric.switches) <= MERGED_CHECK_MAX_SWITCHES,
                    overlaps=False)  # overlaps are the offline prove's business, not deadlock's (quadratic on flat tables)
    except VerificationError as err:
        out.update(verdict="not modelled", seconds=round(time.perf_counter() - t0, 3),
                   explanation=f"the proof does not model these tables ({err})")
        if fc == "pfc" and refuse:
            raise config_error(cfg.path, "hpcfabric.flow_control", f"pfc: deadlock freedom of these tables cannot be "
                               f"proven: {err}; use a policy the proof models or flow_control = pause | none") from None
        return out
    out.update(method="union proof: any set of paused ports (contains every single-paused-port scenario)",
               delivered=rep.delivered, classes_used=list(rep.classes_used), channels=rep.channels,
               dependencies=rep.dependencies)
    if fc == "pfc":
        out.update(proven=rep.acyclic, verdict="proven" if rep.acyclic else "cycle",
                   cycle=list(rep.cycle) if rep.cycle else None, seconds=round(time.perf_counter() - t0, 3))
        if rep.acyclic:
            reduced = bool((rep.symmetry or {}).get("used"))
            out["symmetry_reduced"] = reduced
            per = "every class's queues pause separately" if scheme else "one untagged class"
            out["explanation"] = (f"pfc ({per}): the channel dependency graph ({rep.channels} "
                                  f"{'channel orbits' if reduced else 'channels'}, {rep.dependencies} dependencies"
                                  f"{' of the symmetry quotient' if reduced else ''}, classes "
                                  f"{', '.join(rep.classes_used)}) is acyclic under any set of paused ports: "
                                  f"deadlock-free")
            return out
        fix = _fix(cfg)
        out.update(fix=fix, explanation="pfc: the channel dependency graph has a cycle: paused queues can deadlock")
        if refuse:
            raise config_error(cfg.path, "hpcfabric.cos", f"flow_control = pfc: {cfg.fabric.name} with {cfg.routing} "
                               f"routing and classes {scheme or 'off'}" + (f"/{levels}" if scheme else "")
                               + " is not deadlock-free; dependency cycle: " + " -> ".join(rep.cycle or ())
                               + f"; fix: {fix}")
        return out
    # pause: every class stops together -> the class-merged graph
    merged = merged_cycle(rep.edges) if rep.edges is not None else None
    checked = rep.edges is not None
    out.update(proven=checked and merged is None, cycle=merged, seconds=round(time.perf_counter() - t0, 3),
               verdict=("proven" if merged is None else "cycle") if checked else "not checked")
    what = (f"{'acyclic' if rep.acyclic else 'cyclic'} per class" if scheme else "")
    if not checked:
        out["explanation"] = (f"pause (802.3x) stops every class at once, so classes of service give no protection; "
                              f"the class-merged dependency check keeps every edge and runs only up to "
                              f"{MERGED_CHECK_MAX_SWITCHES} switches (this fabric has {len(cfg.fabric.switches)}); "
                              f"proven: delivery under any set of paused ports ({'yes' if rep.delivered else 'NO'})")
    elif merged is None:
        out["explanation"] = ("pause (802.3x) stops every class at once; the class-merged channel dependency graph "
                              "is acyclic under any set of paused ports: deadlock-free even without classes")
    else:
        out["explanation"] = (f"pause (802.3x) stops every class at once, so classes of service give no protection"
                              f"{' (the graph is ' + what + ', which would only hold under pfc)' if what else ''}; "
                              f"the class-merged channel dependency graph has a cycle: deadlock is possible. Proven "
                              f"instead: delivery of every host pair under any set of paused ports "
                              f"({'yes' if rep.delivered else 'NO'}); use pfc for deadlock freedom")
    return out


def merged_cycle(edges: frozenset[tuple[str, str]]) -> list[str] | None:
    """A cycle of the dependency graph with classes merged (``sw:port@pcp`` -> ``sw:port``), or None."""
    g = nx.DiGraph()
    g.add_edges_from((a.rpartition("@")[0], b.rpartition("@")[0]) for a, b in edges)
    cycle = find_cycle(g, str)
    return None if cycle is None else list(cycle)


def _fix(cfg: Any) -> str:
    from hpcfabric.rules.cos import default_cos

    scheme, levels = default_cos(cfg.fabric, cfg.routing)
    if cfg.compiled.cos is None:
        return (f"set cos = on (the proven default for {cfg.fabric.kind} {cfg.routing}: {scheme}/{levels}), or "
                f"flow_control = none on lossy links")
    return (f"set cos = on and leave cos_levels empty (the proven default for {cfg.fabric.kind} {cfg.routing}: "
            f"{scheme}/{levels}), or flow_control = none on lossy links")
