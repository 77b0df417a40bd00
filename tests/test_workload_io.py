"""Traffic matrices, the user side (issue 20): ``hpcfabric traffic generate|check``, ``--traffic`` on the
compiling commands, ``[hpcfabric] traffic`` in the controller config, and the diff-only reload of a new
matrix (fake switches here; emulated switches and Mininet in tests/test_workload_reload.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hpcfabric.cli import main
from hpcfabric.config import load_config
from hpcfabric.errors import ConfigError, HpcfabricError
from hpcfabric.openflow.reconcile import diff

ROOT = Path(__file__).resolve().parent.parent
TOPO = ROOT / "topologies"
DF = str(TOPO / "dragonfly-a4-p2-h2.yaml")
FB = str(TOPO / "fb-2d-4x4.yaml")
TINY = str(TOPO / "dragonfly-a2-p1-h1.yaml")


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def generate(capsys, fabric: str, pattern: str, path: Path, *extra: str) -> Path:
    code, out, err = run(capsys, "traffic", "generate", "--fabric", fabric, "--pattern", pattern, "-o", path, *extra)
    assert code == 0, err
    return path


# ---------------------------------------------------------------------------
# hpcfabric traffic generate | check


@pytest.mark.parametrize("fabric", [DF, FB])
@pytest.mark.parametrize("pattern", ["uniform", "adv", "stencil", "transpose", "bitrev"])
def test_generate_writes_a_matrix_check_reads_back(capsys, tmp_path, fabric, pattern):
    from hpcfabric.topology.loader import load_topology
    from hpcfabric.topology.traffic import load_traffic, pattern_traffic

    path = generate(capsys, fabric, pattern, tmp_path / f"{pattern}.csv")
    fab = load_topology(fabric)
    assert load_traffic(str(path), fab).same(pattern_traffic(fab, pattern))
    code, out, err = run(capsys, "traffic", "check", path, "--fabric", fabric, "--json")
    assert code == 0 and err == ""
    data = json.loads(out)
    assert data["fabric"] == fab.name and data["entries"] == len(pattern_traffic(fab, pattern)) > 0


def test_generate_yaml_and_a_parameter(capsys, tmp_path):
    path = generate(capsys, DF, "stencil", tmp_path / "s.yaml", "--param", "width=4")
    code, out, _ = run(capsys, "traffic", "check", path, "--fabric", DF)
    assert code == 0 and "level host, entries 288" in out  # 72 hosts x 4 neighbours
    assert "format: hpcfabric-traffic/1" in path.read_text()


@pytest.mark.parametrize("text, where", [
    ("src,dst,weight\ng0s0h0,g1s0h0,1\ng0s0h0,nohost,2\n", "row 3, dst"),
    ("src,dst,weight\ng0s0h0,g1s0h0,-1\n", "row 2, weight"),
    ("src,dst,weight\ng0s0h0,g1s0h0\n", "row 2"),
    ("g0s0h0,g1s0,1\n", "row 1, dst"),  # a host and a switch in one file
])
def test_bad_matrix_names_file_row_and_field_exit_2(capsys, tmp_path, text, where):
    bad = tmp_path / "bad.csv"
    bad.write_text(text)
    for argv in (("traffic", "check", bad, "--fabric", DF),
                 ("rules", DF, "--routing", "conditional", "--traffic", bad),
                 ("verify", DF, "--routing", "valiant", "--traffic", bad),
                 ("sweep", DF, "--routing", "conditional", "--traffic", bad)):
        code, out, err = run(capsys, *argv)
        assert code == 2 and out == "", argv
        assert f"{bad}: {where}" in err and "Traceback" not in err, err


def test_cli_errors_exit_2_without_traceback(tmp_path):
    good = tmp_path / "adv.csv"
    cmds = [
        (["traffic", "generate", "--fabric", DF, "--pattern", "zipf", "-o", str(good)], "unknown traffic pattern 'zipf'"),
        (["traffic", "generate", "--fabric", DF, "--pattern", "stencil", "--param", "width=5", "-o", str(good)],
         "stencil width 5"),
        (["traffic", "generate", "--fabric", DF, "--pattern", "adv", "-o", str(tmp_path / "no" / "x.csv")],
         "cannot write"),
        (["traffic", "check", str(tmp_path / "missing.csv"), "--fabric", DF], "no such traffic matrix file"),
        (["rules", DF, "--traffic", str(ROOT / "README.md")], "--traffic: a traffic matrix chooses Valiant"),
    ]
    for argv, msg in cmds:
        res = subprocess.run([sys.executable, "-m", "hpcfabric.cli", *argv], capture_output=True, text=True, timeout=120)
        assert res.returncode == 2 and msg in res.stderr and "Traceback" not in res.stderr, (argv, res.stderr)


# ---------------------------------------------------------------------------
# [hpcfabric] traffic


def conf(tmp_path: Path, traffic: str, routing: str = "conditional", topo: str = DF, name: str = "c.conf") -> Path:
    path = tmp_path / name
    path.write_text(f"[hpcfabric]\ntopology = {topo}\nrouting = {routing}\ntraffic = {traffic}\nreload_poll = 0\n")
    return path


def test_config_traffic_is_relative_to_the_config_file(capsys, tmp_path):
    sub = tmp_path / "etc"
    sub.mkdir()
    generate(capsys, DF, "stencil", sub / "job.csv")
    cfg = load_config(conf(sub, "job.csv"), compile=False)
    assert cfg.traffic == str(sub / "job.csv") and cfg.traffic_matrix is not None and len(cfg.traffic_matrix) == 288
    assert load_config(conf(sub, "", name="d.conf"), compile=False).traffic is None


@pytest.mark.parametrize("value, routing, field, message", [
    ("missing.csv", "conditional", "hpcfabric.traffic", "does not exist"),
    (".", "conditional", "hpcfabric.traffic", "is a directory"),
    ("job.csv", "minimal", "hpcfabric.traffic", "needs routing = valiant or conditional"),
])
def test_config_traffic_errors(capsys, tmp_path, value, routing, field, message):
    generate(capsys, DF, "adv", tmp_path / "job.csv")
    with pytest.raises(ConfigError) as err:
        load_config(conf(tmp_path, value, routing), compile=False)
    assert err.value.field == field and message in str(err.value) and str(tmp_path / "c.conf") in str(err.value)


def test_config_bad_matrix_is_refused_at_start_naming_the_matrix_row(tmp_path):
    bad = tmp_path / "job.csv"
    bad.write_text("src,dst,weight\ng0s0h0,g9s9h9,1\n")
    path = conf(tmp_path, "job.csv")
    with pytest.raises(HpcfabricError, match=r"job\.csv: row 2, dst: 'g9s9h9'"):
        load_config(path)
    for argv in (["check", str(path)], ["controller", "--config", str(path)]):
        res = subprocess.run([sys.executable, "-m", "hpcfabric.cli", *argv], capture_output=True, text=True, timeout=120)
        assert res.returncode == 2 and "row 2, dst" in res.stderr and "Traceback" not in res.stderr, res.stderr


@pytest.mark.parametrize("routing", ["conditional", "valiant"])
def test_rules_verify_sweep_prove_the_traffic_chosen_tables(capsys, tmp_path, routing):
    """--traffic compiles other intermediates (same entry counts), and verify / sweep / prove pass on them."""
    from hpcfabric.config import load_config

    matrix = generate(capsys, DF, "transpose", tmp_path / "t.csv")
    code, out, _ = run(capsys, "rules", DF, "--routing", routing, "--traffic", matrix, "--format", "json")
    wl = json.loads(out)
    code0, out0, _ = run(capsys, "rules", DF, "--routing", routing, "--format", "json")
    static = json.loads(out0)
    assert code == code0 == 0 and wl["total_flows"] == static["total_flows"]
    assert wl["workload"]["moved"] > 0 and wl["workload"]["chosen_max_load"] < wl["workload"]["static_max_load"]
    # the CLI's tables are the controller's: a config with the same matrix installs the same flows
    path = conf(tmp_path, "t.csv", routing)
    code, out, _ = run(capsys, "rules", DF, "--routing", routing, "--traffic", matrix, "--format", "ofctl",
                       "--switch", "g0s0")
    from hpcfabric.openflow.ofctl import flows_text

    cfg = load_config(path)
    assert out.split("\n", 1)[1] == flows_text(cfg.compiled.flows("g0s0"))
    static_cfg = load_config(conf(tmp_path, "", routing, name="s.conf"))
    changed = sum(diff(cfg.desired[n], static_cfg.desired[n]).changes for n in cfg.desired)
    assert 0 < changed < cfg.rules_expected  # other intermediates, same everything else
    for argv in (("verify", DF, "--routing", routing, "--traffic", matrix),
                 ("sweep", DF, "--routing", routing, "--cos", "on", "--traffic", matrix),
                 ("prove", DF, "--routing", routing, "--cos", "on", "--traffic", matrix, "--json")):
        code, out, err = run(capsys, *argv)
        assert code == 0 and json.loads(out)["ok"], (argv, out[:500], err)


# ---------------------------------------------------------------------------
# diff-only reload of a new matrix (the real app, fake switches: tests/test_ops_fakes.py)


def test_job_switch_reload_sends_only_the_table_difference(capsys, tmp_path):
    from test_ops_fakes import FakeSwitch, make_app, ours, settle

    from hpcfabric.openflow.reconcile import canonical

    job = tmp_path / "job.csv"
    generate(capsys, DF, "adv", job)
    path = conf(tmp_path, "job.csv", "valiant")
    app = make_app(path, tmp_path / "status.json")
    sws = {}
    for st in app.switches.values():
        sws[st.name] = FakeSwitch(app, st.dpid, list(range(1, 9)))
        sws[st.name].connect()
    settle()
    assert all(s.confirmed for s in app.switches.values())
    total = app.config.rules_expected
    for pattern in ("transpose", "stencil", "transpose"):  # each differs from the previous (adv, stencil: static)
        old = {n: app.desired(n) for n in sws}
        base = {n: sw.flow_mods() for n, sw in sws.items()}
        generate(capsys, DF, pattern, job)  # the job's matrix file edited in place
        assert app.reload("test") is True and app.config.traffic_matrix.source == str(job)
        settle()
        want = {n: diff(app.desired(n), old[n]).changes for n in sws}
        sent = {n: sw.flow_mods() - base[n] for n, sw in sws.items()}
        assert sent == want, pattern
        last = app.reloader.as_dict()["last"]
        assert last["table_diff"] == sum(want.values()) == last["flow_mods_sent"], (pattern, last)
        assert 0 < last["table_diff"] < total == last["rules_total"]
        assert sorted(last["resynced"]) == sorted(n for n, c in want.items() if c)
        assert last["switches_synced"] == len(last["resynced"]) and last["traffic"] == str(job)
        for n, sw in sws.items():
            assert ours(sw.table()) == {canonical(f) for f in app.desired(n)}, n
    # the key removed: back to the static intermediates, again only the difference
    path.write_text(path.read_text().replace("traffic = job.csv", "traffic ="))
    base = sum(sw.flow_mods() for sw in sws.values())
    assert app.reload("test") is True and app.config.traffic is None
    settle()
    last = app.reloader.as_dict()["last"]
    assert sum(sw.flow_mods() for sw in sws.values()) - base == last["table_diff"] == last["flow_mods_sent"] > 0
    # a broken matrix is refused: nothing sent, the running tables stay
    path.write_text(path.read_text().replace("traffic =", "traffic = job.csv"))
    job.write_text("src,dst,weight\ng0s0h0,g1s0h0,zero\n")
    base = sum(sw.flow_mods() for sw in sws.values())
    assert app.reload("test") is False
    settle()
    assert sum(sw.flow_mods() for sw in sws.values()) == base
    assert "row 2, weight" in app.reloader.reloads["last"]["error"]
    app.reporter.write()
    st = json.loads((tmp_path / "status.json").read_text())
    assert st["reload"]["ok"] == 4 and st["reload"]["failed"] == 1


def test_job_switch_on_emulated_switches_counts_the_flow_mods_they_receive(capsys, tmp_path):
    """The real controller process and the switch emulator (hpcfabric.emu) on the demo Dragonfly: SIGHUP after the
    matrix file changes -> the switches receive exactly the table difference (counted on the switch side)."""
    import os
    import signal
    import time

    from hpcfabric.emu.driver import Cluster

    job = tmp_path / "job.csv"
    generate(capsys, DF, "adversarial", job)
    c = Cluster(DF, tmp_path, extra=f"traffic = {job}\nreload_poll = 0", lldp_interval=1.0)
    try:
        c.start_controllers()
        c.start_emulators()
        c.wait("confirmed", 120)
        for pattern in ("transpose", "stencil"):
            before = sum(st["flow_mods"] for st in c.emu_stats())
            ok0 = c.status(0)["reload"]["ok"]
            old = load_config(c.workdir / "ctl0.conf").desired
            generate(capsys, DF, pattern, job)
            want = sum(diff(d, old[n]).changes for n, d in load_config(c.workdir / "ctl0.conf").desired.items())
            os.kill(c.ctl[0].pid, signal.SIGHUP)
            end = time.monotonic() + 60
            while time.monotonic() < end:
                st = c.status(0)
                last = st.get("reload", {}).get("last") or {}
                if st["reload"]["ok"] > ok0 and last.get("switches_synced") == len(last.get("resynced", [1])) \
                        and st["switches_confirmed"] == st["switches_expected"]:
                    break
                time.sleep(0.1)
            time.sleep(0.3)
            received = sum(st["flow_mods"] for st in c.emu_stats()) - before
            assert received == last["flow_mods_sent"] == last["table_diff"] == want, (pattern, received, last)
            assert 0 < want < last["rules_total"] == c.status(0)["rules_expected"]
            assert sum(st["flows"] for st in c.emu_stats()) == c.status(0)["rules_expected"]
    finally:
        c.stop()


def test_experiment_patterns_and_bring_ups():
    """run_experiment's application-like destinations come from the matrices; static and -wl share a bring-up."""
    sys.path.insert(0, str(ROOT / "mininet"))
    from exp_workload import bring_ups, pattern_dests

    from hpcfabric.topology.loader import load_topology
    from hpcfabric.topology.traffic import pattern_traffic

    fab = load_topology(DF)
    for name in ("stencil", "transpose", "bitrev"):
        dests = pattern_dests(fab, name)
        want = {(a, b) for a, b, _ in pattern_traffic(fab, name).entries()}
        assert {(h, d) for h, ds in dests.items() for d in ds} == want and set(dests) == {h.name for h in fab.hosts}
    assert sum(1 for ds in pattern_dests(fab, "transpose").values() if not ds) == 72 - 56  # silent hosts receive only
    assert bring_ups(("minimal", "valiant", "valiant-wl", "conditional-wl")) == [
        ("minimal", ("minimal",)), ("valiant", ("valiant", "valiant-wl")), ("conditional-wl", ("conditional-wl",))]
