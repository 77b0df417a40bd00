"""Failure scenarios of bench/control_scale.py: links and switches out on the emulated fabric, and back.

Per scenario (one JSON object each): the failures injected; ``confirmed_s`` (injection -> every partition's
controller reports the repair installed and confirmed, from the status files: each controller writes at once
after a repair), ``controller_ms`` (its own clock: port status -> last wave confirmed), ``last_flow_mod_s``
(injection -> the last flow-mod a switch received, once quiet), ``flow_mods`` (received by the switches),
``flow_mods_share`` (of the installed entries), ``verdict``, ``proof_s``, ``changed`` switches, ``waves``,
``repairs`` and ``plans`` per controller (a burst settled into one plan: 1 and 1), ``phases_ms`` (the controller's
own split: settle, the planner's round trip -- request, plan, patches, reply --, install per wave),
``status_written_s`` / ``status_seen_s`` (after the controller's confirmation: its status file written, seen here);
then ``adaptive``: a PAUSE on a port of a repaired switch flips it with one flow-mod; then the recovery (the
same figures) and whether every switch holds its compiled table again.
"""

from __future__ import annotations

import random
import time
from typing import Any, Callable

Link = tuple[str, int, str, int]


def repairs(c: Any) -> list[int]:
    return [(c.status(i).get("failover") or {}).get("repairs", 0) + (c.status(i).get("failover") or {}).get("refused", 0)
            for i in range(len(c.parts))]


def plans(c: Any) -> list[int]:
    """Plans each controller asked of its repair planner so far (0 where the status has no such count)."""
    return [(c.status(i).get("failover") or {}).get("plans", 0) for i in range(len(c.parts))]


def set_links(c: Any, links: list[Link], up: bool) -> None:
    for a, ap, b, bp in links:  # both ends: each emulator process tells its own switch
        c.emulator_of(a).send(op="port", switch=a, port=ap, up=up, peer=False)
        c.emulator_of(b).send(op="port", switch=b, port=bp, up=up, peer=False)


def link_names(links: list[Link]) -> list[str]:
    """The links as the controllers' status names them (``a:pa-b:pb``, the smaller end first), sorted."""
    return sorted("%s:%d-%s:%d" % (min((a, ap), (b, bp)) + max((a, ap), (b, bp))) for a, ap, b, bp in links)


def wait_repaired(c: Any, before: list[int], t0: float, timeout: float, expect: list[str] | None = None) -> float | None:
    """Seconds from ``t0`` until every controller's last repair (installed or refused) is for exactly the links
    ``expect`` out (None: counts one more repair), or None. Port events of a burst may reach a controller in
    several steps: the figure is the last one's."""
    while time.monotonic() - t0 < timeout:
        now = repairs(c)
        if all(n > b for n, b in zip(now, before)) and (expect is None or all(
                ((c.status(i).get("failover") or {}).get("last") or {}).get("failures", {}).get("links") == expect
                for i in range(len(c.parts)))):
            return time.monotonic() - t0
        time.sleep(0.02)
    return None


def lags(c: Any) -> dict[str, Any]:
    """Right after :func:`wait_repaired`: how long after the controller's own confirmation (``last.confirmed_at``)
    the status file showing it was begun (``status_written_s``: its ``time``; the status loop's milestone) and then
    seen here (``status_seen_s``: the write, the harness's poll and parse), per controller (wall clocks of one host)."""
    now = time.time()
    out: dict[str, list] = {"status_written_s": [], "status_seen_s": []}
    for i in range(len(c.parts)):
        st = c.status(i)
        at = ((st.get("failover") or {}).get("last") or {}).get("confirmed_at")
        out["status_written_s"].append(None if at is None else round(st.get("time", 0.0) - at, 3))
        out["status_seen_s"].append(None if at is None else round(now - st.get("time", 0.0), 3))
    return out


def wait_planners(c: Any, timeout: float) -> float | None:
    """Seconds until every controller's repair planner is ready (its proof base built), or None."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if all((((c.status(i).get("failover") or {}).get("planner") or {}).get("ready")) for i in range(len(c.parts))):
            return round(time.monotonic() - t0, 3)
        time.sleep(0.2)
    return None


def one(c: Any, links: list[Link], *, installed: int, quiet_since: Callable, emu_sum: Callable,
        timeout: float = 300.0) -> dict[str, Any]:
    """Take ``links`` down (or, with ``up`` after, back); the figures of the repair that follows."""
    before, p0 = repairs(c), plans(c)
    fm0 = emu_sum(c.emu_stats(), "flow_mods")
    t0 = time.monotonic()
    set_links(c, links, up=False)
    confirmed = wait_repaired(c, before, t0, timeout, link_names(links))
    lag = lags(c)
    last = quiet_since(c, t0, quiet=1.5)
    fms = emu_sum(c.emu_stats(), "flow_mods") - fm0
    return {**report(c, confirmed, last, fms, installed), "repairs": [a - b for a, b in zip(repairs(c), before)],
            "plans": [a - b for a, b in zip(plans(c), p0)], **lag}


def report(c: Any, confirmed: float | None, last: float, fms: float, installed: int) -> dict[str, Any]:
    lasts = [(c.status(i).get("failover") or {}).get("last") or {} for i in range(len(c.parts))]
    main = max(lasts, key=lambda x: x.get("changed", 0))
    verdict = main.get("verdict") or {}
    return {"confirmed_s": None if confirmed is None else round(confirmed, 3),
            "controller_ms": [x.get("ms") for x in lasts], "last_flow_mod_s": round(last, 3),
            "flow_mods": int(fms), "flow_mods_share": round(fms / installed, 6) if installed else None,
            "installed": main.get("installed"), "verdict": verdict.get("verdict"),
            "redirect_detours": verdict.get("redirect_detours"),
            "proof_s": (main.get("timings") or {}).get("prove"), "plan_s": main.get("seconds"),
            "changed": main.get("changed"), "entries": main.get("entries"), "waves": main.get("waves"),
            "phases_ms": main.get("phases_ms")}


def adaptive(c: Any, switch: str, emu_sum: Callable) -> dict[str, Any]:
    """A PAUSE on a fabric port of ``switch`` (repaired): flipped, and flow-mods per flip (the flip and its
    expiry are one each)."""
    port = max(c.fabric.fabric_ports(switch))
    fm0 = emu_sum(c.emu_stats(), "flow_mods")
    e = c.emulator_of(switch)
    e.send(op="pause", switch=switch, port=port, quanta=0xFFFF, id=990000)
    t0 = time.monotonic()
    got = None
    while time.monotonic() - t0 < 5.0 and got is None:
        while not e.events.empty():
            ev = e.events.get()
            if ev.get("ev") == "reaction" and ev.get("id") == 990000:
                got = ev["us"] / 1000.0
        time.sleep(0.01)
    time.sleep(0.5)  # its expiry
    fms = int(emu_sum(c.emu_stats(), "flow_mods") - fm0)  # the switches' own count (the status file lags)
    return {"switch": switch, "port": port, "reaction_ms": got, "flipped": got is not None, "flow_mods": fms,
            "flow_mods_per_flip": round(fms / 2, 3) if got is not None else None}  # the flip, then its expiry


def memory(c: Any) -> dict[str, Any]:
    """Peak RSS (MiB, from /proc: VmHWM) of the repair planner process(es) the controllers report (one shared planner:
    one pid for all) and of the controllers, and their sum."""
    from hpcfabric.emu.driver import proc_stats

    pids = sorted({p for p in (((c.status(i).get("failover") or {}).get("planner") or {}).get("pid")
                               for i in range(len(c.parts))) if p})
    planners = [proc_stats(p).get("peak_rss_mb") for p in pids]
    ctl = [s.get("peak_rss_mb") for s in c.controller_stats()]
    return {"planner_pids": pids, "planner_peak_rss_mb": planners, "controllers_peak_rss_mb": ctl,
            "total_peak_rss_mb": round(sum(x or 0.0 for x in planners + ctl), 1)}


def scenarios(c: Any, *, quiet_since: Callable, emu_sum: Callable, installed: int, seed: int = 27,
              flap: bool = True, many: bool = True, timeout: float = 300.0) -> dict[str, Any]:
    """One global link, one local link, (``many``) a switch's links and ten links across groups at once, and
    (``flap``) a link flapping ten times in a second; each followed by its recovery. First waits until every
    controller's repair planner has its proof base (``planners_ready_s``: after the tables were confirmed)."""
    fabric = c.fabric
    rng = random.Random(seed)
    by_kind: dict[str, list[Link]] = {}
    for link in fabric.links:
        by_kind.setdefault(link.kind, []).append((link.a, link.a_port, link.b, link.b_port))
    out: dict[str, Any] = {}
    cases: list[tuple[str, list[Link]]] = []
    for kind in ("global", "local"):
        if by_kind.get(kind):
            cases.append((f"{kind}_link", [rng.choice(by_kind[kind])]))
    if many:
        victim = rng.choice(fabric.switches).name
        own = [(victim, p, peer.node, int(peer.port)) for p, peer in sorted(fabric.fabric_ports(victim).items())]
        groups = {fabric.switch(victim).group}
        ten: list[Link] = []
        for link in rng.sample(list(fabric.links), len(fabric.links)):
            g = fabric.switch(link.a).group
            if g not in groups and len(ten) < 10:
                groups.add(g)
                ten.append((link.a, link.a_port, link.b, link.b_port))
        cases.append(("switch_and_ten_links", own + ten))
    kw = {"quiet_since": quiet_since, "emu_sum": emu_sum, "installed": installed, "timeout": timeout}
    out["planners_ready_s"] = wait_planners(c, 900.0)
    out["memory_ready"] = memory(c)
    for name, links in cases:
        res = one(c, links, **kw)
        res["adaptive"] = adaptive(c, links[0][0], emu_sum)
        before, p0 = repairs(c), plans(c)
        fm0 = emu_sum(c.emu_stats(), "flow_mods")
        t0 = time.monotonic()
        set_links(c, links, up=True)
        confirmed = wait_repaired(c, before, t0, timeout, [])
        lag = lags(c)
        last = quiet_since(c, t0, quiet=1.5)
        res["recovery"] = {**report(c, confirmed, last, emu_sum(c.emu_stats(), "flow_mods") - fm0, installed),
                           "repairs": [a - b for a, b in zip(repairs(c), before)],
                           "plans": [a - b for a, b in zip(plans(c), p0)], **lag}
        res["failures"] = [f"{a}:{ap}-{b}:{bp}" for a, ap, b, bp in links]
        out[name] = res
    if flap and by_kind.get("local"):
        link = rng.choice(by_kind["local"])
        before = repairs(c)
        fm0 = emu_sum(c.emu_stats(), "flow_mods")
        t0 = time.monotonic()
        for k in range(10):
            set_links(c, [link], up=k % 2 == 1)
            time.sleep(0.1)
        held, t1 = False, time.monotonic()  # up again now, but held down while the hold lasts (2 s)
        while not held and time.monotonic() - t1 < 1.5:
            held = any((c.status(i).get("failover") or {}).get("damped") for i in range(len(c.parts)))
            time.sleep(0.05)
        quiet_since(c, t0, quiet=1.5)
        mid = repairs(c)
        time.sleep(4.0)  # the hold runs out: the link is up and stable
        quiet_since(c, t0, quiet=1.5)
        after = repairs(c)
        refused = sum(s.get("refused", 0) for s in (c.status(i).get("failover") or {} for i in range(len(c.parts))))
        out["flapping_link"] = {"link": "%s:%d-%s:%d" % link, "changes": 10,
                                "repairs_while_flapping": [m - b for m, b in zip(mid, before)],
                                "repairs_in_all": [a - b for a, b in zip(after, before)], "held_down": held,
                                "refused_total": refused,
                                "flow_mods": int(emu_sum(c.emu_stats(), "flow_mods") - fm0)}
    out["memory"] = memory(c)
    return out
