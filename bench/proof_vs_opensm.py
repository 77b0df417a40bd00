"""Benchmark: hpcfabric compile + deadlock proof vs OpenSM's dfsssp on the same fabric, in one run.

Per fabric, one JSON line: OpenSM's routing time (``routing_s`` of ``../shared/opensm/run_osm.sh``:
SSSP paths + virtual lanes + deadlock removal, through ibsim) and, per routing policy, hpcfabric's
time to load, address and compile the fabric and to prove it (:func:`hpcfabric.verify.union.proof.prove`:
delivery of every host pair and probe and an acyclic channel dependency graph under any set of
paused ports; for minimal routing, which has nothing to pause, that is all-pairs verify + CDG),
with the ratio ``opensm_seconds / hpcfabric_seconds``. Each hpcfabric measurement runs in a fresh
process (peak RSS is its own); OpenSM runs after it, one tool at a time (both single-threaded).

Fabrics (``--fabrics``, comma-separated): ``a12p6h6`` (Dragonfly a=12 p=6 h=6, 73 groups, 876
switches, 5,256 hosts; palmtree global links = ibsim's consecutive wiring), ``table3``
(topologies/dragonfly-table3.yaml as shipped: xor global links), ``table3-palmtree`` (the same
with palmtree links: OpenSM's exact wiring; OpenSM's time is shared with ``table3``), or a path to
a Dragonfly YAML. CoS: the compiler's default scheme (``cos=True``): minimal Dragonfly routing
without classes has a dependency cycle, as dfsssp would without virtual lanes.

Usage: .venv/bin/python bench/proof_vs_opensm.py [--fabrics a12p6h6,table3] [--routings minimal,conditional]
       [--no-opensm] [--engine dfsssp] [--osm-timeout S] [--osm-out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: OpenSM's scripts: ../shared/opensm beside the repository (HPCFABRIC_OPENSM_DIR overrides)
OPENSM = Path(os.environ.get("HPCFABRIC_OPENSM_DIR") or ROOT.parent / "shared" / "opensm")
sys.path.insert(0, str(ROOT))

A12 = "kind: dragonfly\nname: dragonfly-a12-p6-h6\na: 12\np: 6\nh: 6\narrangement: palmtree\n"


def fabric_file(spec: str, tmp: Path) -> Path:
    """The YAML of a ``--fabrics`` entry."""
    if spec == "a12p6h6":
        path = tmp / "dragonfly-a12-p6-h6.yaml"
        path.write_text(A12)
        return path
    if spec == "table3":
        return ROOT / "topologies" / "dragonfly-table3.yaml"
    if spec == "table3-palmtree":
        path = tmp / "dragonfly-table3-palmtree.yaml"
        text = (ROOT / "topologies" / "dragonfly-table3.yaml").read_text()
        path.write_text(text.replace("name: dragonfly-table3", "name: dragonfly-table3-palmtree") + "arrangement: palmtree\n")
        return path
    return Path(spec)


def run_one(path: str, routing: str) -> dict:
    """hpcfabric in this process: load, address, compile, prove."""
    from hpcfabric.rules.addressing import plan_addresses
    from hpcfabric.rules.compiler import compile_fabric
    from hpcfabric.topology.loader import load_topology
    from hpcfabric.verify.union.proof import prove

    t0 = time.perf_counter()
    fabric = load_topology(path)
    section = fabric.params.get("addressing") or {}
    plan = plan_addresses(fabric, section.get("mode", "compact"), section.get("widths"))
    compiled = compile_fabric(fabric, plan, routing=routing, cos=True)
    t1 = time.perf_counter()
    rep = prove(compiled)
    t2 = time.perf_counter()
    return {
        "routing": routing, "cos": compiled.cos, "cos_levels": compiled.cos_levels, "ok": rep.ok,
        "delivered": rep.delivered, "acyclic": rep.acyclic, "pausable_ports": rep.pausable_ports,
        "switches": rep.switches, "hosts": rep.hosts, "columns": rep.columns, "lines": rep.lines,
        "nodes": rep.nodes, "dependencies": rep.dependencies, "compile_seconds": round(t1 - t0, 3),
        "proof_seconds": round(t2 - t1, 3), "seconds": round(t2 - t0, 3),
        "timings": {k: round(v, 3) for k, v in rep.timings.items()},
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def hpcfabric_child(path: Path, routing: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--one", str(path), routing], capture_output=True, text=True)
    if out.returncode != 0:
        return {"routing": routing, "error": out.stderr.strip().splitlines()[-1:] or ["failed"]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def opensm(fabric: dict, engine: str, timeout: int, out_root: Path) -> dict:
    """OpenSM ``engine`` on ibsim for the Dragonfly ``fabric`` (its a, p, h)."""
    out = out_root / f"{fabric['name']}-{engine}"
    out.mkdir(parents=True, exist_ok=True)
    net = out / "fabric.net"
    a, p, h = (str(fabric["params"][k]) for k in ("a", "p", "h"))
    subprocess.run([sys.executable, str(OPENSM / "gen_ibsim.py"), "-o", str(net), "dragonfly", a, p, h],
                   check=True, capture_output=True)
    env = {**os.environ, "OSM_TIMEOUT": str(timeout)}
    run_dir = out / "run"
    proc = subprocess.Popen(["bash", str(OPENSM / "run_osm.sh"), str(net), engine, str(run_dir)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        log, _ = proc.communicate(timeout=timeout + 600)
    except BaseException:
        os.killpg(proc.pid, signal.SIGTERM)  # its own session: run_osm.sh, ibsim, opensm
        proc.wait()
        raise
    (out / "run_osm.log").write_text(log)
    try:
        result = json.loads((run_dir / "result.json").read_text())
    except (OSError, ValueError):
        return {"engine": engine, "error": f"no result.json (see {out / 'run_osm.log'})"}
    return {"engine": engine, "seconds": result.get("routing_s"), "result": result, "dir": str(run_dir)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fabrics", default="a12p6h6,table3")
    ap.add_argument("--routings", default="minimal,conditional")
    ap.add_argument("--no-opensm", action="store_true", help="hpcfabric only")
    ap.add_argument("--engine", default="dfsssp", help="OpenSM routing engine (default dfsssp)")
    ap.add_argument("--osm-timeout", type=int, default=3600, metavar="S")
    ap.add_argument("--osm-out", default=None, metavar="DIR", help="keep OpenSM's logs here (default: a temp dir, removed)")
    ap.add_argument("--one", nargs=2, metavar=("YAML", "ROUTING"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(run_one(*args.one)))
        return 0
    missing = [f for f in ("gen_ibsim.py", "run_osm.sh") if not (OPENSM / f).is_file()]
    if missing and not args.no_opensm:  # before any measurement, not after the hpcfabric runs
        print(f"proof_vs_opensm: error: {OPENSM}: no {' or '.join(missing)} (OpenSM's scripts live in ../shared/opensm "
              "beside the repository; set HPCFABRIC_OPENSM_DIR, or give --no-opensm)", file=sys.stderr)
        return 2
    from hpcfabric.topology.loader import load_topology

    with tempfile.TemporaryDirectory(prefix="proof-bench-") as tmp:
        run_all(args, Path(tmp), load_topology)
    return 0


def run_all(args: argparse.Namespace, tmp: Path, load_topology) -> None:
    """Every fabric: hpcfabric per routing, then OpenSM; one JSON line each (OpenSM logs under --osm-out)."""
    osm_root = Path(args.osm_out) if args.osm_out else tmp
    osm_cache: dict[tuple, dict] = {}
    for spec in filter(None, args.fabrics.split(",")):
        path = fabric_file(spec, tmp)
        fabric = load_topology(path)
        line = {"fabric": fabric.name, "arrangement": fabric.params.get("arrangement"),
                "switches": len(fabric.switches), "hosts": len(fabric.hosts)}
        for routing in filter(None, args.routings.split(",")):
            line[routing] = hpcfabric_child(path, routing)
        if not args.no_opensm:
            if fabric.kind != "dragonfly":
                line["opensm"] = {"error": "the bench's ibsim nets cover Dragonflies only"}
            else:
                key = tuple(fabric.params[k] for k in ("a", "p", "h", "g"))
                if key not in osm_cache:
                    osm_cache[key] = opensm({"name": fabric.name, "params": fabric.params}, args.engine,
                                            args.osm_timeout, osm_root)
                line["opensm"] = {k: v for k, v in osm_cache[key].items() if k != "result"}
                if not args.osm_out:
                    line["opensm"].pop("dir", None)  # removed with the temp dir
                line["opensm"]["peak_rss_mb"] = (osm_cache[key].get("result") or {}).get("opensm_maxrss_mb")
                osm_s = osm_cache[key].get("seconds")
                for routing in filter(None, args.routings.split(",")):
                    ours = line[routing].get("seconds")
                    if osm_s and ours:
                        line[routing]["ratio"] = round(osm_s / ours, 1)
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    sys.exit(main())
