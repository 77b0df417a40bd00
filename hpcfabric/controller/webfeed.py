"""What the fabric page and the per-link metrics read from a running controller: plain snapshots.

The one place that reads the controller for them -- its :class:`~hpcfabric.controller.snapshot.Sources`: the
state, the collaborators' ``as_dict()`` snapshots (as status and metrics read them) and two public reads (the
poller's ``load_round``, the failover's ``ports_down``), never the app -- so the page
(:mod:`hpcfabric.controller.web`) and the link metrics (:mod:`hpcfabric.controller.linkmetrics`) take
callables returning plain values and know nothing of the controller:

* :func:`link_inputs`: the port rates polled, the port speeds and what the controller knows about
  PAUSE per port (frames, flips, seconds paused, paused now) and the ports down, as
  :class:`~hpcfabric.controller.linkload.LinkInputs`;
* :func:`live`: the page's changing state (paused ports, failed links, quarantined cables, flips,
  deadlock verdict, HA masters per partition, the load round).
"""

from __future__ import annotations

import time
from typing import Any

from hpcfabric.controller.linkload import LinkInputs
from hpcfabric.controller.snapshot import Sources


def link_inputs(src: Sources, now: float | None = None) -> LinkInputs:
    """The controller's per-port figures at ``now`` (monotonic; default: now): the poller's and pausing's
    snapshots and the failover's ports down (damped)."""
    now = time.monotonic() if now is None else now
    poller, pz = src.poller.as_dict(), src.pausing.as_dict(now)
    return LinkInputs(bps=poller["tx_bps"], speed=poller["speed_bps"], default_speed=src.state.config.link_speed_bps,
                      frames=pz["port_frames"], flips=pz["port_flips"], paused_s=pz["paused_s"],
                      paused=frozenset(src.state.pause.until), down=frozenset(src.failover.ports_down(now)))


def masters(ha: dict[str, Any]) -> list[dict[str, Any]]:
    """HA masters per partition from the HA state's dict (etcd: one row per partition; else one row)."""
    parts = ha.get("partitions")
    if isinstance(parts, list) and parts:
        return [{"partition": str(p.get("partition")), "master": p.get("master") or "", "switches": p.get("switches", 0)}
                for p in parts]
    holder = ha.get("lease_holder") or ha.get("instance") or ""
    return [{"partition": "all", "master": holder or ("this instance" if ha.get("role") in ("master", "equal") else ""),
             "switches": None, "role": ha.get("role")}]


def live(src: Sources) -> dict[str, Any]:
    """The page's changing state, from the state and the collaborators' snapshots (failover, wiring, HA, poller)."""
    state = src.state
    config = state.config
    failover, rep = src.failover.as_dict(), src.wiring.as_dict()["report"]
    dl = config.deadlock or {"flow_control": config.flow_control, "verdict": "not checked"}
    sws = list(state.switches.values())
    missing = rep.get("missing_links", ())
    return {
        "paused": [f"{s}:{p}" for s, p in state.pause.paused_ports()],
        "down": failover["ports_down"],
        "switches_gone": failover["switches_gone"],
        "quarantined": [f"{s}:{p}" for s, p in sorted(state.discovery.quarantined)],
        "missing": [f"{m.get('a')}:{m.get('a_port')}-{m.get('b')}:{m.get('b_port')}" for m in missing[:1000]],
        "missing_count": len(missing),
        "flips": src.counters["flips"],
        "deadlock": {"proven": bool(dl.get("proven")), "verdict": str(dl.get("verdict", "not checked")),
                     "flow_control": str(dl.get("flow_control", config.flow_control)),
                     "unproven_repair": failover["unproven"] is not None},
        "ha": masters(src.ha.as_dict()),
        "switches": {"expected": len(sws), "connected": sum(1 for s in sws if s.connected),
                     "confirmed": sum(1 for s in sws if s.confirmed)},
        "load_round": src.poller.load_round,
    }
