"""The hpcfabric command line: outputs and error paths (exit codes, no tracebacks)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hpcfabric.cli import main

ROOT = Path(__file__).resolve().parent.parent
TOPO = ROOT / "topologies"
DEFAULT = str(TOPO / "dragonfly-a4-p2-h2.yaml")


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_check_one_line_summary(capsys):
    code, out, err = run(capsys, "check", DEFAULT)
    assert code == 0 and err == ""
    assert out.count("\n") == 1
    assert "dragonfly, 36 switches, 72 hosts" in out and "radix 7" in out


def test_check_json(capsys):
    code, out, _ = run(capsys, "check", str(TOPO / "fb-3d-4x4x4.yaml"), "--json")
    data = json.loads(out)
    assert (code, data["kind"], data["switches"], data["hosts"], data["radix"]) == (0, "flattened_butterfly", 64, 256, 13)


def test_plan_json_has_every_host_once(capsys):
    code, out, _ = run(capsys, "plan", DEFAULT, "--addressing", "per-group", "--format", "json")
    data = json.loads(out)
    assert code == 0 and len(data["hosts"]) == 72
    assert len({h["mac"] for h in data["hosts"]}) == 72
    assert data["layout"] == "group(18) | switch(20) | host(8)"
    assert all(h["mac"].startswith("02:") for h in data["hosts"])


def test_plan_table_and_csv(capsys):
    code, out, _ = run(capsys, "plan", str(TOPO / "dragonfly-a2-p1-h1.yaml"))
    assert code == 0 and "g2s1h0" in out and "02:00:00:00:00:0a" in out
    code, out, _ = run(capsys, "plan", str(TOPO / "dragonfly-a2-p1-h1.yaml"), "--format", "csv")
    lines = out.strip().splitlines()
    assert lines[0] == "host,switch,port,mac,group,switch,host" and len(lines) == 7


@pytest.mark.parametrize(
    "name, mode",
    [("fb-2d-4x4.yaml", "compact"), ("fb-3d-4x4x4.yaml", "compact"), ("fat-tree-k4.yaml", "compact")],
)
def test_rules_json_lower_bound(capsys, name, mode):
    code, out, _ = run(capsys, "rules", str(TOPO / name), "--addressing", mode, "--format", "json")
    data = json.loads(out)
    assert code == 0 and data["lower_bound_met"] is True
    assert all(r["rules"] == r["ports"] for r in data["per_switch"])
    for key in ("switches", "hosts", "rules_min", "rules_max", "rules_mean"):
        assert key in data


def test_rules_json_per_group_equals_eq1_and_dragonfly_band(capsys):
    code, out, _ = run(capsys, "rules", DEFAULT, "--addressing", "per-group", "--format", "json")
    data = json.loads(out)
    assert all(r["rules"] == r["eq1"] for r in data["per_switch"])
    code, out, _ = run(capsys, "rules", DEFAULT, "--format", "json")
    data = json.loads(out)
    low, high = data["paper_band"]
    assert data["addressing"] == "compact" and data["rules_max"] <= high and data["rules_min"] <= low


def test_rules_ofctl_is_add_flows_syntax(capsys):
    code, out, _ = run(capsys, "rules", str(TOPO / "fb-2d-3x3.yaml"), "--format", "ofctl", "--switch", "s1_1")
    lines = [l for l in out.splitlines() if not l.startswith("#")]
    assert code == 0 and lines
    assert all(l.startswith("table=") and ",actions=" in l for l in lines)
    assert any("dl_type=0x88b5" in l and "set_field:" in l and "actions=set_field" in l for l in lines)


def test_rules_ofctl_with_cos_states_the_tag_prerequisite(capsys):
    """vlan_tci carries OFPVID_PRESENT (CFI) and the PCP in one field: ovs-ofctl would let a later
    dl_vlan_pcp overwrite an earlier vlan_tci (or the reverse), so the two conditions are never split."""
    code, out, _ = run(capsys, "rules", str(TOPO / "fb-2d-3x3.yaml"), "--routing", "conditional", "--cos", "on",
                       "--format", "ofctl", "--switch", "s1_1")
    lines = [l for l in out.splitlines() if not l.startswith("#")]
    assert code == 0
    steps = [l for l in lines if "set_field:1->vlan_pcp" in l and "push_vlan" not in l]
    pops = [l for l in lines if "pop_vlan" in l]
    assert steps and all("vlan_tci=0x1000/0xf000" in l and "dl_vlan_pcp" not in l for l in steps)
    assert pops and all("vlan_tci=0x1000/0x1000" in l for l in pops)
    assert not any("vlan_tci" in l for l in lines if "push_vlan" in l)


def test_rules_summary(capsys):
    code, out, _ = run(capsys, "rules", str(TOPO / "fat-tree-k4.yaml"))
    assert code == 0 and "met on every switch: yes" in out


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["check", "topologies/missing.yaml"], "missing.yaml"),
        (["rules", DEFAULT, "--switch", "nope"], "nope"),
        (["plan", DEFAULT, "--addressing", "per-group", "--widths", "group=2"], "addressing.widths.group"),
        (["plan", DEFAULT, "--addressing", "per-switch", "--widths", "dim0=3"], "do not exist"),
    ],
)
def test_errors_exit_2_with_one_line(capsys, argv, needle):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert needle in err and err.startswith("hpcfabric: error:") and err.count("\n") == 1
    assert "Traceback" not in err


def test_bad_yaml_names_file_and_field(capsys, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: dragonfly\na: 4\np: 2\nh: 2\ng: 12\n")
    code, _, err = run(capsys, "check", str(bad))
    assert code == 2 and str(bad) in err and "g:" in err


@pytest.mark.parametrize("argv", [["rules", DEFAULT, "--addressing", "hierarchical"], ["plan", DEFAULT, "--widths", "x"], []])
def test_usage_errors_exit_2(argv):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2


def test_console_script_runs_without_traceback(tmp_path):
    bad = tmp_path / "t.yaml"
    bad.write_text("kind: [\n")
    exe = Path(sys.executable).parent / "hpcfabric"
    proc = subprocess.run([str(exe), "check", str(bad)], capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and str(bad) in proc.stderr
    proc = subprocess.run([str(exe), "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and "verify" in proc.stdout


#: the paper's large builds are verified by bench/verify_table3.py and bench/compile_scale.py, not here
LARGE = ("table3", "300k")


@pytest.mark.parametrize("name", sorted(p.name for p in TOPO.glob("*.yaml") if not any(k in p.name for k in LARGE)))
@pytest.mark.parametrize("mode", ["flat", "per-switch", "per-group", "compact"])
def test_verify_every_shipped_topology_and_mode(capsys, name, mode):
    code, out, _ = run(capsys, "verify", str(TOPO / name), "--addressing", mode)
    data = json.loads(out)
    assert code == 0
    assert data["pairs"] == data["delivered"] > 0
    assert data["loops"] == 0 and data["invalid_probe_failures"] == 0
    assert data["max_hops"] >= 1


@pytest.mark.parametrize("ingress,exact", [("auto", True), ("per-port", True), ("merged", False)])
def test_verify_ingress_rows(capsys, ingress, exact):
    code, out, _ = run(capsys, "verify", DEFAULT, "--ingress", ingress)
    data = json.loads(out)
    assert code == 0 and data["ingress_exact"] is exact and data["pairs"] == data["delivered"]


def test_verify_exits_1_when_frames_are_not_delivered(capsys, monkeypatch):
    import dataclasses

    import hpcfabric.rules.compiler as compiler
    from hpcfabric.rules.flows import RuleClass

    real = compiler.compile_fabric

    def broken(fabric, plan, **kw):
        compiled = real(fabric, plan, **kw)
        name = fabric.switches[0].name
        table = compiled.tables[name]
        flows = tuple(f for f in table.flows if f.rule_class != RuleClass.ROUTE)
        tables = dict(compiled.tables)
        tables[name] = dataclasses.replace(table, flows=flows)
        return dataclasses.replace(compiled, tables=tables)

    monkeypatch.setattr(compiler, "compile_fabric", broken)
    code, out, _ = run(capsys, "verify", DEFAULT)
    data = json.loads(out)
    assert code == 1 and data["delivered"] < data["pairs"] and data["failures"]


def test_sweep_is_a_deprecated_alias_of_prove(capsys):
    fb = str(TOPO / "fb-2d-3x3.yaml")
    code, out, err = run(capsys, "sweep", fb, "--routing", "conditional", "--cos", "on", "--symmetric", "--progress")
    data = json.loads(out)
    assert code == 0 and data["ok"] and data["symmetry"]["kept"] == ["shift-dim0", "shift-dim1"]
    assert err.startswith("hpcfabric: warning: 'sweep' is deprecated") and "# " in err  # then prove's progress
    assert data["method"].startswith("union") and data["pausable_ports"] == 36 and data["hosts"] == 18
    code, out, _ = run(capsys, "prove", fb, "--routing", "conditional", "--cos", "on", "--json")
    same = ("ok", "delivered", "acyclic", "nodes", "channels", "dependencies", "columns", "lines", "failures")
    assert code == 0 and {k: json.loads(out)[k] for k in same} == {k: data[k] for k in same}
    code, out, _ = run(capsys, "sweep", fb, "--routing", "conditional", "--cos", "off", "--symmetric")
    data = json.loads(out)
    assert code == 1 and not data["ok"] and data["cycle"]  # no CoS: the union has a cycle
    assert data["fallback"]["method"] == "cdg" and data["fallback"]["verdict"].startswith("fails also")
    code, out, err = run(capsys, "sweep", str(TOPO / "fat-tree-k4.yaml"), "--routing", "valiant")
    assert code == 2 and out == "" and "valiant routing does not apply" in err
