"""``hpcfabric analyze ...``: the analysis subcommands (registered by :mod:`hpcfabric.cli`).

``analyze rules``  Eq. 1 / Table I closed forms vs compiled counts, Fig. 4 and Fig. 6;
``analyze power``  Sec. VI-A power model, Fig. 11 and the savings split;
``analyze onoff``  Andújar et al. on/off-link power and energy of one fabric;
``analyze scale``  structural checks on every switch + sampled forwarding check;
``analyze fig12``  Fig. 12 from the frame-level simulator driven by the compiled tables.

Bad input raises :class:`~hpcfabric.errors.ConfigError` (exit 2, one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable

from hpcfabric.errors import ConfigError

DEFAULT_OUT = "analysis-out"


def _progress() -> bool:
    return sys.stderr.isatty()


def _log(message: str) -> None:
    if sys.stderr.isatty():
        print(f"[analyze] {message}", file=sys.stderr)


def _jobs(args: argparse.Namespace) -> int:
    jobs = args.jobs
    if jobs is None:
        from hpcfabric.analysis.scale import default_jobs

        return default_jobs()
    if jobs < 1:
        raise ConfigError(f"must be a positive integer, got {jobs}", field="--jobs")
    return jobs


def _split(text: str) -> list[str]:
    return [p.strip() for p in text.split(",") if p.strip()]


def _names(text: str, what: str, known: Any, noun: str) -> list[str]:
    """The comma list ``text``, each one of ``known`` (ConfigError naming ``what`` otherwise)."""
    names = _split(text)
    for name in names:
        if name not in known:
            raise ConfigError(f"unknown {noun} {name!r}; expected some of {', '.join(known)}", field=what)
    return names


def _numbers(text: str, what: str, parse: Callable[[str], Any], noun: str, like: str) -> list[Any]:
    """The comma list ``text`` through ``parse`` (ValueError: not a number), at least one."""
    out = []
    for part in _split(text):
        try:
            out.append(parse(part))
        except ValueError:
            raise ConfigError(f"expected comma-separated {noun} like {like}, got {part!r}", field=what) from None
    if not out:
        raise ConfigError(f"expected at least one {noun.rstrip('s')}, e.g. {like}", field=what)
    return out


def _loads(text: str, what: str) -> list[float]:
    def load(part: str) -> float:
        v = float(part)
        if not 0.0 < v <= 1.0:
            raise ConfigError(f"a load is a fraction of the link rate in (0, 1], got {v}", field=what)
        return v

    return _numbers(text, what, load, "loads", "0.1,0.4,0.7")


def _at_least_one(value: int | None, what: str) -> None:
    if value is not None and value < 1:
        raise ConfigError(f"must be >= 1, got {value}", field=what)


def cmd_rules(args: argparse.Namespace) -> int:
    from hpcfabric.analysis import rules

    ports = rules.check_ports(_numbers(args.ports, "--ports", lambda p: int(p, 10), "integers", "8,16,24,48,96"))
    topologies = _names(args.topologies, "--topologies", rules.TOPOLOGIES, "topology")
    if args.max_elements < 1:
        raise ConfigError(f"must be positive, got {args.max_elements}", field="--max-elements")
    rows, files = rules.run(
        args.out, ports, topologies=topologies, jobs=_jobs(args), plots=not args.no_plots,
        progress=_progress(), max_elements=args.max_elements, log=_log,
    )  # fmt: skip
    print(f"{'topology':<12} {'P':>3} {'hosts':>10}  {'flat':>10} {'per-switch':>10} {'per-group':>10}  compact (min-max)")
    for t in topologies:
        for p in ports:
            by = {r["mode"]: r for r in rows if r["topology"] == t and r["ports"] == p}
            if not by:
                continue
            hosts = next(iter(by.values()))["hosts"]

            def val(mode: str) -> str:
                r = by.get(mode)
                if r is None:
                    return "-"
                if not r["compiled"]:
                    lo, hi = r["closed_form"], r["closed_form_max"]
                    return f"({lo})" if lo == hi else f"({lo}-{hi})"
                text = str(r["rules_max"]) if r["rules_min"] == r["rules_max"] else f"{r['rules_min']}-{r['rules_max']}"
                return text + ("*" if r["measured"] != "all" else "")

            print(f"{t:<12} {p:>3} {hosts:>10,}  {val('flat'):>10} {val('per-switch'):>10} {val('per-group'):>10}  {val('compact')}")
    print("* compiled on a per-symmetry-class sample of switches; (..) closed form only, fabric not built")
    bad = [r for r in rows if r["compiled"] and r["matches_closed_form"] is False]
    print(f"rows matching the closed forms: {sum(1 for r in rows if r['matches_closed_form'] is True)}/{sum(1 for r in rows if r['compiled'])} measured")
    big = rules.under_4k(rows)
    if big:
        print("under 4K entries with >= 300,000 hosts: " + ", ".join(sorted({f"{r['topology']} P={r['ports']} {r['mode']}" for r in big})))
    print("wrote " + ", ".join(str(f) for f in files))
    return 1 if bad else 0


def cmd_power(args: argparse.Namespace) -> int:
    from hpcfabric.analysis import power

    files = args.files or list(power.BUILDS)
    results, split, paths = power.run(args.out, files, jobs=_jobs(args), plots=not args.no_plots, progress=_progress(), log=_log)
    print(f"{'fabric':<16} {'organisation':<16} {'switches':>8} {'entries':>10} {'table W/sw':>10} {'total MW':>9}")
    for b in results:
        print(f"{b.fabric:<16} {b.organisation:<16} {b.switches:>8} {b.entries_mean:>10.1f} {b.watts['table'] / b.switches:>10.2f} {b.total_w / 1e6:>9.3f}")
    print(json.dumps(split))
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0


def cmd_onoff(args: argparse.Namespace) -> int:
    from hpcfabric.analysis.onoff import OnOffModel, onoff_fabric
    from hpcfabric.topology.loader import load_topology

    for name in ("utilisation", "cpu"):
        v = getattr(args, name)
        if not 0.0 <= v <= 1.0:
            raise ConfigError(f"must be a fraction in [0, 1], got {v}", field=f"--{name}")
    if args.exec_time < 0:
        raise ConfigError(f"must be >= 0 seconds, got {args.exec_time}", field="--exec-time")
    fabric = load_topology(args.file)
    if args.ports is not None and args.ports < fabric.max_radix:
        raise ConfigError(f"switches use up to {fabric.max_radix} ports; --ports {args.ports} is too small", field="--ports")
    res = onoff_fabric(fabric, OnOffModel(), utilisation=args.utilisation, cpu=args.cpu, t_exec=args.exec_time, n_ports=args.ports)
    print(json.dumps(res))
    return 0


def cmd_scale(args: argparse.Namespace) -> int:
    from hpcfabric.analysis.scale import verify_at_scale
    from hpcfabric.topology.loader import load_topology

    _at_least_one(args.sample, "--sample")
    fabric = load_topology(args.file)
    mode = args.addressing or (fabric.params.get("addressing") or {}).get("mode") or "compact"
    res = verify_at_scale(fabric, mode, sample=args.sample, seed=args.seed, jobs=_jobs(args), progress=_progress())
    print(json.dumps(res))
    return 0 if res["ok"] else 1


def _report_points(res: dict[str, Any], paths: list[Path], keys: tuple[str, ...]) -> int:
    """Print a sweep's points table, ``res[k]`` for ``keys`` as one JSON line and the files written.

    Exit code 1 if a point lost frames, broke conservation or deadlocked, else 0.
    """
    print(f"{'router':<16} {'pattern':<12} {'load':>5} {'latency us':>11} {'accepted':>9}  notes")
    for r in res["points"]:
        note = "DEADLOCK" if r["deadlock"] else ("saturated" if r["unfinished"] or r["accepted"] < 0.9 * r["load"] else "")
        print(f"{r['router']:<16} {r['pattern']:<12} {r['load']:>5.2f} {r['latency_ns'] / 1000:>11.2f} {r['accepted']:>9.3f}  {note}")
    print(json.dumps({k: res[k] for k in keys}))
    print("wrote " + ", ".join(str(p) for p in paths))
    return 1 if any(r["lost"] or not r["conserved"] or r["deadlock"] for r in res["points"]) else 0


def cmd_fig12(args: argparse.Namespace) -> int:
    from hpcfabric.analysis import fig12
    from hpcfabric.analysis.progress import bar
    from hpcfabric.sim.params import SimParams
    from hpcfabric.sim.sweep import ROUTERS
    from hpcfabric.topology.loader import load_topology

    routers = _names(args.routers, "--routers", ROUTERS, "router")
    patterns = _names(args.patterns, "--patterns", fig12.PATTERNS, "pattern")
    _at_least_one(args.seeds, "--seeds")
    base = fig12.QUICK_LOADS if args.quick else fig12.LOADS
    loads = {"uniform": _loads(args.loads_un, "--loads-un") if args.loads_un else list(base["uniform"]),
             "adversarial": _loads(args.loads_adv, "--loads-adv") if args.loads_adv else list(base["adversarial"])}
    fabric = load_topology(args.file)
    kw = {k: v for k, v in (("buffer_frames", args.buffer), ("xoff_frames", args.xoff), ("ticks_per_frame", args.ticks_per_frame),
                             ("warmup_slots", args.warmup), ("window_slots", args.window), ("drain_slots", args.drain))
          if v is not None}
    if args.pause_hold_ms is not None:
        kw["pause_hold_ns"] = args.pause_hold_ms * 1e6
    if args.pause_from != "receiver":
        kw["pause_from"] = args.pause_from
    q = dict(fig12.QUICK_PARAMS if args.quick else fig12.PARAMS)
    q.update(kw, switch=args.switch)
    params = SimParams(**q)
    pb: Any = None

    def progress(done: int, total: int) -> None:
        nonlocal pb
        if pb is None:
            pb = bar(total, "fig12 curves (router x pattern)", _progress())
        pb.update(1)

    if args.dask is not None and args.dask != "local" and "://" not in args.dask and ":" not in args.dask:
        raise ConfigError(f"expected 'local' or a scheduler address like tcp://host:8786, got {args.dask!r}", field="--dask")
    res, paths = fig12.run(fabric, args.out, quick=args.quick, routers=routers, patterns=patterns, loads=loads,
                           seeds=args.seeds, params=params, jobs=_jobs(args), plots=not args.no_plots,
                           progress=progress, log=_log, dask=args.dask, warmup=args.seed_warmup)  # fmt: skip
    if pb is not None:
        pb.close()
    return _report_points(res, paths, ("bounds", "timing"))


def cmd_workload(args: argparse.Namespace) -> int:
    from hpcfabric.analysis import workload
    from hpcfabric.sim.sweep import WA
    from hpcfabric.topology.loader import load_topology
    from hpcfabric.topology.traffic import TRAFFIC_PATTERNS

    known = set(workload.ROUTERS) | {"COND-switch", "COND-controller", "COND-switch" + WA, "COND-controller" + WA}
    routers = _names(args.routers, "--routers", sorted(known), "router")
    patterns = _split(args.patterns)
    for p in patterns:
        name, _, placement = p.partition(":")
        if name not in TRAFFIC_PATTERNS or placement not in ("", "packed", "spread") or \
                (placement and name in ("uniform", "adversarial")):
            raise ConfigError(f"unknown pattern {p!r}; expected some of {', '.join(TRAFFIC_PATTERNS)} "
                              f"(stencil, transpose, bitrev also as NAME:spread)", field="--patterns")
    _at_least_one(args.seeds, "--seeds")
    base = workload.QUICK_LOADS if args.quick else workload.LOADS
    loads = {p: _loads(args.loads, "--loads") if args.loads else list(base[p.partition(":")[0]]) for p in patterns}
    fabric = load_topology(args.file)
    res, paths = workload.run(fabric, args.out, quick=args.quick, routers=routers, patterns=patterns, loads=loads,
                              seeds=args.seeds, jobs=_jobs(args), plots=not args.no_plots, log=_log)
    return _report_points(res, paths, ("model", "bounds"))


def add_analyze_parser(sub: Any) -> None:
    """Register ``analyze`` and its subcommands on the main parser's subparsers."""
    from hpcfabric.rules.addressing import MODES

    top = sub.add_parser("analyze", help="paper analyses: rule counts (Fig. 4/6), power (Fig. 11), on/off links, scale checks",
                         description="paper analyses; see docs/analysis.md")  # fmt: skip
    an = top.add_subparsers(dest="analysis", metavar="ANALYSIS")
    an.required = True

    def jobs(p: argparse.ArgumentParser) -> None:
        p.add_argument("--jobs", type=int, default=None, metavar="N", help="worker processes (default: CPUs, at most 2)")

    def outputs(p: argparse.ArgumentParser, out: str = DEFAULT_OUT, files: str = "CSV and JSON") -> None:
        """``--out DIR``, ``--no-plots`` and ``--jobs`` of an analysis that writes files."""
        p.add_argument("--out", default=out, metavar="DIR", help=f"output directory (default {out})")
        p.add_argument("--no-plots", action="store_true", help=f"{files} only")
        jobs(p)

    p = an.add_parser("rules", help="closed forms vs compiled rule counts, Fig. 4 and Fig. 6",
                      description="Eq. 1 / Table I closed forms next to compiled counts for 8..96-port switches")  # fmt: skip
    p.set_defaults(func=cmd_rules)
    p.add_argument("--ports", default="8,16,24,48,96", metavar="P,...", help="switch sizes (multiples of 4, 8..256)")
    p.add_argument("--topologies", default="folded-clos,fb-2d,fb-3d,fb-4d,dragonfly", metavar="T,...")
    p.add_argument("--max-elements", type=int, default=2_000_000, metavar="N",
                   help="build fabrics up to N switches+hosts+links; larger ones get closed forms only")  # fmt: skip
    outputs(p, files="CSV")

    p = an.add_parser("power", help="Sec. VI-A power model: Fig. 11 and the savings split",
                      description="network power per topology and table organisation for the ~300k-host builds")  # fmt: skip
    p.set_defaults(func=cmd_power)
    p.add_argument("files", nargs="*", metavar="FILE", help="topology files (default: the three 300k builds)")
    outputs(p)

    p = an.add_parser("onoff", help="Andújar et al. on/off-link power and energy of a fabric",
                      description="Andújar et al. (2022) Eqs. 1-7, Table 2 constants")  # fmt: skip
    p.set_defaults(func=cmd_onoff)
    p.add_argument("file", metavar="FILE", help="topology YAML file")
    p.add_argument("--utilisation", type=float, default=1.0, metavar="U", help="fraction of time every port in use is on")
    p.add_argument("--cpu", type=float, default=1.0, metavar="U", help="fraction of time every node is busy")
    p.add_argument("--exec-time", type=float, default=1.0, metavar="S", help="execution time in seconds (energies)")
    p.add_argument("--ports", type=int, default=None, metavar="N", help="ports per switch (default: ports in use)")

    p = an.add_parser("scale", help="structural checks on every switch + sampled forwarding verification",
                      description="compile every switch (counts and structural checks) and verify N random destinations per source")  # fmt: skip
    p.set_defaults(func=cmd_scale)
    p.add_argument("file", metavar="FILE", help="topology YAML file")
    p.add_argument("--addressing", choices=MODES, default=None)
    p.add_argument("--sample", type=int, default=64, metavar="N", help="random destinations (default 64)")
    p.add_argument("--seed", type=int, default=0)
    jobs(p)

    p = an.add_parser("fig12", help="Fig. 12: latency and accepted load vs offered load, frame-level simulator",
                      description="simulate MIN, VAL, PB and conditional rules (ideal/switch/controller reaction) "
                                  "under UN and ADV on the compiled tables; docs/simulation.md")  # fmt: skip
    p.set_defaults(func=cmd_fig12)
    p.add_argument("file", nargs="?", default="topologies/dragonfly-table3.yaml", metavar="TOPOLOGY",
                   help="topology YAML file (default topologies/dragonfly-table3.yaml)")
    p.add_argument("--quick", action="store_true", help="3 loads per pattern, 1 seed, short windows (CI)")
    p.add_argument("--routers", default="MIN,VAL,PB,COND-ideal,COND-switch,COND-controller", metavar="R,...")
    p.add_argument("--patterns", default="uniform,adversarial", metavar="P,...")
    p.add_argument("--loads-un", default=None, metavar="L,...", help="offered loads for uniform traffic")
    p.add_argument("--loads-adv", default=None, metavar="L,...", help="offered loads for adversarial traffic")
    p.add_argument("--seeds", type=int, default=None, metavar="N", help="runs per point (default 2, quick 1)")
    p.add_argument("--buffer", type=int, default=None, metavar="FRAMES", help="input buffer per port and class (32)")
    p.add_argument("--xoff", type=int, default=None, metavar="FRAMES", help="XOFF threshold (buffer - headroom)")
    p.add_argument("--pause-hold-ms", type=float, default=None, metavar="MS", help="PORT_STATE flip hold after the last PAUSE")
    p.add_argument("--pause-from", choices=("receiver", "egress"), default="receiver",
                   help="what pauses a port for the PORT_STATE flips: its receiver's buffer (802.3x), or also "
                        "its own backlog (egress, the Mininet experiment's PAUSE emulator)")
    p.add_argument("--switch", choices=("fifo", "voq", "shared", "iq", "iqvc"), default="shared",
                   help="switch model: shared-buffer output queues with PFC thresholds (commodity Ethernet, "
                        "default), virtual output queues, input FIFOs (head-of-line blocking), or BookSim2's "
                        "input-queued router with credits (iq; iqvc: with its VC allocation per output VC)")
    p.add_argument("--dask", default=None, metavar="ADDRESS",
                   help="run the sweep's points on a Dask cluster: a scheduler address (tcp://host:8786) or "
                        "'local' (a local cluster of --jobs worker processes)")
    p.add_argument("--ticks-per-frame", type=int, default=None, metavar="K", help="clock ticks per frame time (1; 5 = 40 ns)")
    p.add_argument("--warmup", type=int, default=None, metavar="SLOTS")
    p.add_argument("--window", type=int, default=None, metavar="SLOTS")
    p.add_argument("--drain", type=int, default=None, metavar="SLOTS")
    p.add_argument("--seed-warmup", choices=("auto", "shared", "own"), default="auto",
                   help="seeds branch from one shared warm-up per point (shared), each warm up on its own (own), or "
                        "shared for the routers that flip on PAUSE, warmed up until steady (auto: COND-*)")
    outputs(p)

    p = an.add_parser("workload", help="workload-aware vs static Valiant intermediates in the simulator (docs/workload.md)",
                      description="per traffic pattern: the intermediates chosen for its matrix, the tables' saturation "
                                  "bounds, and MIN, VAL, VAL+WA, COND-ideal, COND-ideal+WA simulated")  # fmt: skip
    p.set_defaults(func=cmd_workload)
    p.add_argument("file", nargs="?", default="topologies/dragonfly-a4-p2-h2.yaml", metavar="TOPOLOGY",
                   help="topology YAML file (default topologies/dragonfly-a4-p2-h2.yaml)")
    p.add_argument("--quick", action="store_true", help="2 loads per pattern, 1 seed, short windows (CI)")
    p.add_argument("--routers", default="MIN,VAL,VAL+WA,COND-ideal,COND-ideal+WA", metavar="R,...")
    p.add_argument("--patterns", default="uniform,adversarial,stencil,transpose", metavar="P,...",
                   help="uniform, adversarial, stencil, transpose, bitrev; NAME:spread = one rank per switch")
    p.add_argument("--loads", default=None, metavar="L,...", help="offered loads (default per pattern)")
    p.add_argument("--seeds", type=int, default=None, metavar="N", help="runs per point (default 2, quick 1)")
    outputs(p, out="workload-out")
