"""``hpcfabric check FILE`` through the real CLI in subprocesses: topology files and controller configs.

Every malformed case must exit 2 with exactly one line on stderr that names
the file, the field (where there is one) and what was expected -- never a
traceback, nothing on stdout. The subprocesses run concurrently (one batch
per module) to keep the suite fast.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOPO = ROOT / "topologies"
CONFIGS = ROOT / "configs"
HPCFABRIC = ROOT / ".venv" / "bin" / "hpcfabric"
A2 = TOPO / "dragonfly-a2-p1-h1.yaml"


def cli() -> list[str]:
    return [str(HPCFABRIC)] if HPCFABRIC.exists() else [sys.executable, "-m", "hpcfabric.cli"]


def conf(extra: str = "", topo: Path = A2, head: str = "") -> str:
    return f"{head}[hpcfabric]\ntopology = {topo}\n{extra}"


DF = "kind: dragonfly\na: 4\np: 2\nh: 2\n"
RING = (TOPO / "explicit-ring4.yaml").read_text()

# (id, file name, text (str) or bytes, field or None, fragment of the expectation)
CASES: list[tuple[str, str, object, str | None, str]] = [
    # -- topology files --------------------------------------------------
    ("topo-yaml-syntax", "t.yaml", "kind: dragonfly\na: [4, 2\np: 2\n", None, "line 3, column"),
    ("topo-empty", "t.yaml", "", None, "empty"),
    ("topo-not-utf8", "t.yaml", b"kind: dragonfly\n\xff\xfe\n", None, "not UTF-8"),
    ("topo-missing-kind", "t.yaml", "a: 4\np: 2\nh: 2\n", "kind", "missing required key 'kind'"),
    ("topo-kind-typo", "t.yaml", "kind: fat-tree\nk: 4\n", "kind", "did you mean 'fat_tree'?"),
    ("topo-unknown-key", "t.yaml", DF + "colour: blue\n", "colour", "valid keys"),
    ("topo-bool-int", "t.yaml", "kind: dragonfly\na: true\np: 2\nh: 2\n", "a", "expected an integer"),
    ("topo-odd-k", "t.yaml", "kind: fat_tree\nk: 5\n", "k", "even"),
    ("topo-g-too-big", "t.yaml", DF + "g: 10\n", "g", "at most a*h+1 = 9"),
    ("topo-fb-dim-1", "t.yaml", "kind: flattened_butterfly\ndims: [4, 1]\nhosts_per_switch: 4\n", "dims[1]", ">= 2"),
    ("topo-widths-sum", "t.yaml", DF + "addressing:\n  widths: {group: 20, switch: 20, host: 8}\n", "addressing.widths",
     "48 bits"),
    ("topo-link-unknown-switch", "t.yaml", RING.replace("b: s1, b_port: 3}", "b: s9, b_port: 3}", 1), "links[3].b",
     "unknown switch 's9'"),
    ("topo-port-twice", "t.yaml", RING.replace("{name: h2, switch: s2, port: 1}", "{name: h2, switch: s1, port: 1}", 1),
     "hosts[1].port", "used twice"),
    ("topo-duplicate-dpid", "t.yaml", RING.replace("dpid: 4,", "dpid: 2,", 1), "switches[3].dpid", "already used"),
    ("topo-missing-file", "missing.yaml", None, None, "no such file"),
    # -- controller configs -----------------------------------------------
    ("conf-not-ini", "c.conf", "topology = x.yaml\n", None, "expected a [section] header"),
    ("conf-missing-file", "nothere.conf", None, None, "no such config file"),
    ("conf-missing-section", "c.conf", "[openflow]\nlisten_port = 6653\n", "hpcfabric", "missing section [hpcfabric]"),
    ("conf-unknown-section", "c.conf", conf("[metric]\nlisten = 127.0.0.1:9302\n"), "metric", "did you mean 'metrics'"),
    ("conf-unknown-key", "c.conf", conf("[guards]\nsource_chek = on\n"), "guards.source_chek",
     "did you mean 'source_check'"),
    ("conf-duplicate-key", "c.conf", conf("routing = minimal\nrouting = minimal\n"), "hpcfabric.routing", "appears twice"),
    ("conf-routing", "c.conf", conf("routing = adaptive\n"), "hpcfabric.routing", "not one of minimal, valiant, conditional"),
    ("conf-topology-missing", "c.conf", "[hpcfabric]\ntopology = nowhere.yaml\n", "hpcfabric.topology", "does not exist"),
    ("conf-topology-broken", "c.conf", None, "h", "expected an integer"),  # the topology's own error (see below)
    ("conf-widths-too-narrow", "c.conf", conf("widths = group=1,switch=1,host=1\n"), "hpcfabric.widths", "needs"),
    ("conf-widths", "c.conf", conf("widths = group:8\n"), "hpcfabric.widths", "FIELD=BITS"),
    ("conf-link-speed", "c.conf", conf("link_speed_gbps = fast\n"), "hpcfabric.link_speed_gbps", "not a number"),
    ("conf-lldp-timeout", "c.conf", conf("lldp_interval = 2\nlldp_timeout = 1\n"), "hpcfabric.lldp_timeout", "longer"),
    ("conf-reload-poll", "c.conf", conf("reload_poll = -1\n"), "hpcfabric.reload_poll", "out of range"),
    ("conf-listen-port", "c.conf", conf("[openflow]\nlisten_port = 70000\n"), "openflow.listen_port", "out of range"),
    ("conf-bundles", "c.conf", conf("[openflow]\nbundles = maybe\n"), "openflow.bundles", "not one of auto, on, off"),
    ("conf-rewrite-no-hosts", "c.conf", conf("host_mac = rewrite\n"), "hpcfabric.host_mac", "[hosts]"),
    ("conf-host-multicast", "c.conf", conf("host_mac = rewrite\n[hosts]\ng0s0h0 = 01:00:5e:00:00:01\n"), "hosts.g0s0h0",
     "multicast"),
    ("conf-guards-on-off", "c.conf", conf("[guards]\nsource_check = yes\n"), "guards.source_check", "not one of on, off"),
    ("conf-guards-pps", "c.conf", conf("[guards]\nhost_punt_pps = 0\n"), "guards.host_punt_pps", "out of range 1.."),
    ("conf-guards-burst", "c.conf", conf("[guards]\npunt_burst = lots\n"), "guards.punt_burst", "not an integer"),
    ("conf-metrics-listen", "c.conf", conf("[metrics]\nlisten = 9302\n"), "metrics.listen", "HOST:PORT"),
    ("conf-metrics-port", "c.conf", conf("[metrics]\nlisten = 127.0.0.1:99999\n"), "metrics.listen", "out of range"),
    ("conf-metrics-clash", "c.conf", conf("[metrics]\nlisten = 127.0.0.1:6653\n"), "metrics.listen",
     "OpenFlow listen port"),
    ("conf-metrics-poll", "c.conf", conf("[metrics]\npoll_interval = 0\n"), "metrics.poll_interval", "out of range"),
    ("conf-ha-role", "c.conf", conf("[ha]\nrole = leader\n"), "ha.role", "not one of equal, auto, master, slave"),
    ("conf-ha-auto-no-lease", "c.conf", conf("[ha]\nrole = auto\n"), "ha.lease_file", "needs a lease file"),
    ("conf-ha-lease-dir", "c.conf", conf("[ha]\nrole = auto\nlease_file = nodir/x.lease\n"), "ha.lease_file",
     "does not exist"),
    ("conf-ha-switches", "c.conf", conf("[ha]\nswitches = g9*\n"), "ha.switches", "matches no switch"),
    ("conf-ha-lease-timeout", "c.conf", conf("[ha]\nlease_timeout = 0\n"), "ha.lease_timeout", "out of range"),
    ("conf-failover", "c.conf", conf("[failover]\nfast_failover = sometimes\n"), "failover.fast_failover",
     "not one of on, off"),
    ("conf-failover-switch-local", "c.conf",
     conf("routing = conditional\npause_reaction = switch\n[failover]\nfast_failover = on\n"),
     "failover.fast_failover", "cannot be combined with [hpcfabric] pause_reaction = switch"),
]


def _materialise(tmp: Path, case: tuple) -> tuple[Path, Path]:
    """Write the case's file(s); returns (path to check, path the error must name)."""
    cid, name, text, _, _ = case
    d = tmp / cid
    d.mkdir()
    path = d / name
    named = path
    if cid == "conf-topology-broken":
        topo = d / "broken.yaml"
        topo.write_text("kind: dragonfly\na: 2\np: 1\nh: x\n")
        path.write_text(conf(topo=topo))
        named = topo  # a topology error names the topology file, not the config
    elif isinstance(text, bytes):
        path.write_bytes(text)
    elif text is not None:
        path.write_text(text)
    return path, named


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple]:
    from concurrent.futures import ThreadPoolExecutor

    tmp = tmp_path_factory.mktemp("check")

    def run(case: tuple) -> tuple:
        path, named = _materialise(tmp, case)
        p = subprocess.run(cli() + ["check", str(path)], capture_output=True, text=True, cwd=str(tmp), timeout=120)
        return case[0], (p.returncode, p.stdout, p.stderr, path, named)

    with ThreadPoolExecutor(max_workers=3) as pool:  # 2 cores: more only thrashes
        return dict(pool.map(run, CASES))


def test_at_least_30_malformed_cases_of_each_kind_together():
    assert len(CASES) >= 30
    assert sum(c[0].startswith("topo-") for c in CASES) >= 10 and sum(c[0].startswith("conf-") for c in CASES) >= 20


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_malformed_exits_2_with_one_clear_line(results, case):
    cid, _, _, field, fragment = case
    rc, stdout, stderr, path, named = results[cid]
    assert rc == 2, (rc, stdout, stderr)
    assert stdout == ""
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    line = lines[0]
    assert "Traceback" not in stderr and "internal error" not in line
    assert line.startswith(f"hpcfabric: error: {named}: "), line
    if field is not None:
        assert f"{named}: {field}: " in line, line
    assert fragment in line, line


@pytest.mark.parametrize("name", sorted(p.name for p in CONFIGS.glob("*.conf") if "table3" not in p.name))
def test_shipped_configs_check_ok(name):
    proc = subprocess.run(cli() + ["check", str(CONFIGS / name)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    line, proof, failures = proc.stdout.splitlines()
    assert line.startswith(f"{CONFIGS / name}: ok: controller config for ") and " rules, " in line
    # every shipped config runs under PFC with tables the union proof shows deadlock-free
    assert "flow_control = pfc: deadlock proven: " in proof and "acyclic under any set of paused ports" in proof
    # and says what is proven after a failure: every repair, before a flow-mod goes out
    assert failures.strip().startswith("failures: every repair") and "prove --config" in failures
    assert proc.stderr == ""


def test_config_check_json_and_guarded_summary(tmp_path):
    import json

    path = tmp_path / "g.conf"
    path.write_text(conf("routing = conditional\n[guards]\nsource_check = on\npunt_meters = on\n"
                         "[metrics]\nlisten = 127.0.0.1:9399\n[ha]\nrole = auto\nlease_file = ha.lease\n"))
    proc = subprocess.run(cli() + ["check", "--json", str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["guards"] == "source_check,punt_meters" and data["metrics"] == "127.0.0.1:9399" and data["ha"] == "auto"
    assert data["rules_expected"] > 84  # the guard entries come on top of the compiled 84


def test_ini_without_suffix_is_recognised(tmp_path):
    path = tmp_path / "controller"
    path.write_text("; comment\n" + conf("routing = bogus\n"))
    proc = subprocess.run(cli() + ["check", str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "hpcfabric.routing" in proc.stderr
