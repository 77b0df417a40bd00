"""Analyses: rule-count rows vs closed forms (Eq. 1, Table I), power model calibration and
sanity, the Andújar on/off-link model, CLI error paths."""

from __future__ import annotations

import csv
import json

import pytest

from hpcfabric.analysis import power, rules
from hpcfabric.analysis.onoff import OnOffModel, onoff_fabric
from hpcfabric.analysis.power import PowerParams, calibrate, closed_form_builds, savings
from hpcfabric.cli import main
from hpcfabric.errors import ConfigError
from hpcfabric.topology import dragonfly_fabric, fat_tree_fabric
from hpcfabric.topology.clos import folded_clos_fabric


# ---------------------------------------------------------------------------
# Table I configurations


@pytest.mark.parametrize("P", rules.DEFAULT_PORTS)
def test_table1_configurations(P):
    clos = rules.config("folded-clos", P)
    assert clos.hosts == P**3 // 4 == clos.table1_hosts and clos.T == P // 2 and clos.G == P
    for n in (2, 3, 4):
        c = rules.config(f"fb-{n}d", P)
        k = c.params["dims"][0]
        assert c.T == P // (n + 1) and c.lower_bound == c.T + n * (k - 1) <= P
        assert c.T + n * k > P  # k is the largest that fits
        assert c.hosts == k**n * c.T and c.G == k ** (n - 1) and c.S == k
        assert 0.5 < c.hosts / c.table1_hosts < 4  # ~(P/(n+1))^(n+1)
    df = rules.config("dragonfly", P)
    a, p, h, g = (df.params[x] for x in "aphg")
    assert (a, p, h, g) == (P // 2, P // 4, P // 4, P * P // 8 + 1)
    assert p + h + a - 1 == P - 1 == df.lower_bound
    assert 1 <= df.hosts / df.table1_hosts < 1.2  # 4 (P/4)^4
    assert df.band == (p + (a - 1) + h + (a - 1), p + (a - 1) + (g - 1))


def test_closed_forms():
    c = rules.config("dragonfly", 8)
    assert c.closed_form("flat") == (72, 72)
    assert c.closed_form("per-switch") == (2 + 35, 2 + 35)
    assert c.closed_form("per-group") == (13, 13)  # Eq. 1: 8 + 3 + 2
    assert c.closed_form("compact") == (10, 13)


@pytest.mark.parametrize("bad", [[10], [4], [7], [512], [], [True]])
def test_check_ports_rejects(bad):
    with pytest.raises(ConfigError) as err:
        rules.check_ports(bad)
    assert err.value.field == "--ports"


# ---------------------------------------------------------------------------
# measured rows


@pytest.fixture(scope="module")
def rows_small():
    return rules.analyze_rules([8, 16], max_entries=100_000)  # large flat/per-switch tables: per-class samples


def test_rows_match_closed_forms(rows_small):
    assert len(rows_small) == 2 * len(rules.TOPOLOGIES) * len(rules.MODES)
    for r in rows_small:
        assert r["matches_closed_form"] is True, r
        assert r["measured"] == "all" or (r["measured"].startswith("sample") and r["mode"] in ("flat", "per-switch"))
    assert all(r["measured"] == "all" for r in rows_small if r["mode"] in ("per-group", "compact"))


def test_eq1_equality_on_every_fully_compiled_size(rows_small):
    for r in rows_small:
        if r["mode"] == "per-group" and r["measured"] == "all":
            eq1 = (r["G"] - 1) + (r["S"] - 1) + r["T"]
            assert r["rules_min"] == r["rules_max"] == eq1 == r["closed_form"]


def test_dragonfly_compact_is_a_band_below_its_top(rows_small):
    df = [r for r in rows_small if r["topology"] == "dragonfly" and r["mode"] == "compact"]
    assert [(r["rules_min"], r["rules_max"]) for r in df] == [(9, 10), (21, 22)]  # docs/rules.md
    assert all(r["rules_max"] <= r["closed_form_max"] for r in df)


def test_sampled_and_unbuilt_rows():
    rows = rules.analyze_rules([24], ["folded-clos"], ["flat", "per-group", "compact"], max_entries=20_000) + \
        rules.analyze_rules([24], ["dragonfly"], ["compact"], max_entries=20_000)  # DF flat / per-group: a minute, unasserted
    flat = next(r for r in rows if r["topology"] == "folded-clos" and r["mode"] == "flat")
    assert flat["measured"].startswith("sample") and "3 symmetry class" in flat["measured"]
    assert flat["rules_min"] == flat["rules_max"] == 24**3 // 4 and flat["matches_closed_form"]
    band = next(r for r in rows if r["topology"] == "dragonfly" and r["mode"] == "compact")
    assert band["measured"] == "all"  # every Dragonfly switch differs: compiled in full
    none = rules.analyze_rules([96], ["fb-4d"], ["per-group"])
    assert none[0]["measured"].startswith("none") and none[0]["compiled"] == 0
    assert none[0]["closed_form"] == (20**3 - 1) + (20 - 1) + 19


def test_outputs_deterministic(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    rows, files = rules.run(a, [8], topologies=["fb-2d", "dragonfly"])
    rules.run(b, [8], topologies=["fb-2d", "dragonfly"])
    for f in files:
        assert f.stat().st_size > 0
        assert f.read_bytes() == (b / f.name).read_bytes(), f.name
    with open(files[0]) as fh:
        got = list(csv.DictReader(fh))
    assert [r["mode"] for r in got[:4]] == list(rules.MODES) and tuple(got[0]) == rules.CSV_FIELDS


def test_under_4k_claim_closed_forms():
    rows = rules.analyze_rules([48, 96], ["fb-3d", "dragonfly"], ["per-group"], max_elements=0)
    hits = {(r["topology"], r["ports"]) for r in rules.under_4k(rows)}
    assert ("fb-3d", 96) in hits and ("dragonfly", 96) in hits  # >300k hosts, <4K entries (Sec. III-A)


# ---------------------------------------------------------------------------
# power


@pytest.fixture(scope="module")
def cal():
    return calibrate()


def test_calibration_anchors(cal):
    assert cal.tcam_w(300_024) == pytest.approx(900.0)
    assert 0.3e-15 < cal.tcam_j_per_bit < 3e-15  # ~fJ per bit per search (Agrawal-Sherwood range)
    assert 0 < cal.cam_j_per_bit < cal.tcam_j_per_bit
    assert cal.buffers_w(1) == pytest.approx(40e9 / (84 * 8) * 9.0041e-9)
    assert cal.ports_w(1, 0) == pytest.approx(0.48) and cal.ports_w(0, 1) == pytest.approx(0.6)


def test_tcam_monotonic(cal):
    prev = -1.0
    for n in (0, 1, 72, 515, 16_685, 300_024):
        w = cal.tcam_w(n)
        assert w > prev
        prev = w
    assert cal.tcam_w(1000, width=512) < cal.tcam_w(1000, width=1024)
    assert cal.tcam_w(1000, ports=36) < cal.tcam_w(1000, ports=72)
    with pytest.raises(ValueError):
        PowerParams().tcam_w(1)


def test_paper_headline_numbers(cal):
    results = closed_form_builds(cal)
    split = savings(results)
    assert split["compaction_saving_pct"] == pytest.approx(17.0, abs=0.01)  # calibrated
    # predictions (tolerance 1.5 percentage points): topology 37.1%, total 54.1%
    assert split["dragonfly"]["topology_saving_pct"] == pytest.approx(37.1, abs=1.5)
    assert split["dragonfly"]["total_saving_pct"] == pytest.approx(54.1, abs=1.5)
    flat = [b for b in results if b.organisation == "tcam-flat"]
    assert all(b.watts["table"] / b.switches >= 900.0 - 1e-6 for b in flat)  # > 900 W per switch
    assert min(b.watts["table"] for b in flat) >= 15e6 - 1e3  # >= 15 MW overall
    per_switch = [b for b in results if b.organisation == "tcam-per-switch"]
    assert all(0.5e6 < b.watts["table"] < 1.5e6 for b in per_switch)  # "around a MW"
    for kind in ("folded_clos", "flattened_butterfly", "dragonfly"):
        by = {b.organisation: b.total_w for b in results if b.kind == kind}
        assert by["tcam-flat"] > by["tcam-per-switch"] > by["tcam-per-group"] > by["tcam-compact"]
        assert by["tcam-per-group"] - by["tcam-compact"] < 0.05 * by["tcam-compact"]  # "very close"


def test_fabric_power_from_compiler_matches_closed_form_shape(cal):
    f = folded_clos_fabric(8, 4, pods=10)
    res = {b.organisation: b for b in power.fabric_power(f, PowerParams(radix=8, tcam_j_per_bit=1e-15, cam_j_per_bit=5e-16))}
    assert res["tcam-compact"].entries_max == 8 and res["tcam-compact"].entries_mean == 8
    assert res["tcam-flat"].entries_mean == len(f.hosts)
    assert res["cam-flat"].watts["ports"] == res["tcam-compact"].watts["ports"]
    d = dragonfly_fabric(4, 2, 2)
    entries, how = power.switch_entries(d, "compact")
    assert "all 36" in how and min(entries) == 9 and max(entries) == 10


def test_power_run_writes_outputs(tmp_path):
    results, split, paths = power.run(tmp_path, ["topologies/clos-4stage-small.yaml", "topologies/dragonfly-a4-p2-h2.yaml"])
    assert [p.name for p in paths] == ["power.csv", "power-savings.json", "fig11-power.png"]
    data = json.loads(paths[1].read_text())
    assert "compaction_saving_pct" in data and "dragonfly" in data
    with open(paths[0]) as fh:
        assert len(list(csv.DictReader(fh))) == 2 * len(power.ORGANISATIONS)


# ---------------------------------------------------------------------------
# Andújar et al. on/off links


def test_onoff_table2_constants():
    m = OnOffModel()
    on = m.switch_power([1.0] * 36)
    assert on == pytest.approx(180.0)  # 36-port switch, all ports on: 180 W
    assert m.switch_power([], 36) == pytest.approx(36 * 5 * (0.184 + 0.816 * 0.1))
    assert 36 * 5 * (1 - m.w_ports) == pytest.approx(33.1, abs=0.1)  # "33 W without connected ports"
    assert m.ports_fraction([0.0, 1.0]) == pytest.approx(0.1 + 0.9 * 0.5)
    assert m.nodes_power([0.0, 0.0]) == pytest.approx(2 * 150.0)
    assert m.nodes_power([1.0]) == pytest.approx(300.0)
    r = m.evaluate([[1.0] * 4, [0.5] * 4], [1.0] * 3, t_exec=10.0)
    assert r["W_cluster"] == pytest.approx(r["W_net"] + r["W_nodes"])
    assert r["E_net"] == pytest.approx(10 * r["W_net"]) and r["E_cluster"] == pytest.approx(10 * r["W_cluster"])


def test_onoff_monotonic_and_validated():
    m = OnOffModel()
    values = [m.switch_power([u] * 8) for u in (0.0, 0.25, 0.5, 1.0)]
    assert values == sorted(values) and values[0] < values[-1]
    for bad in ([1.5], [-0.1]):
        with pytest.raises(ConfigError):
            m.switch_power(bad)
    with pytest.raises(ConfigError):
        OnOffModel(w_sport=2.0)
    with pytest.raises(ConfigError):
        m.evaluate([], [], t_exec=-1)
    f = fat_tree_fabric(4)
    half = onoff_fabric(f, utilisation=0.5)
    full = onoff_fabric(f, utilisation=1.0)
    assert half["W_net"] < full["W_net"] == pytest.approx(20 * 4 * 5.0)
    per_port = onoff_fabric(f, utilisation={("p0e0", 1): 1.0})
    assert per_port["W_net"] < half["W_net"]


# ---------------------------------------------------------------------------
# CLI


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["analyze", "rules", "--ports", "8,x"], "--ports"),
        (["analyze", "rules", "--ports", "10"], "multiples of 4"),
        (["analyze", "rules", "--ports", ","], "--ports"),
        (["analyze", "rules", "--ports", "8", "--jobs", "0"], "--jobs"),
        (["analyze", "rules", "--ports", "8", "--topologies", "torus"], "--topologies"),
        (["analyze", "onoff", "topologies/fat-tree-k4.yaml", "--utilisation", "2"], "--utilisation"),
        (["analyze", "onoff", "topologies/nope.yaml"], "no such file"),
        (["analyze", "scale", "topologies/fat-tree-k4.yaml", "--sample", "0"], "--sample"),
        (["analyze", "power", "topologies/missing.yaml", "--no-plots"], "no such file"),
    ],
)
def test_cli_errors_exit_2(argv, needle, capsys, tmp_path):
    assert main(argv + (["--out", str(tmp_path)] if argv[1] in ("rules", "power") else [])) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err and err.count("\n") == 1


def test_cli_rules_and_onoff(tmp_path, capsys):
    assert main(["analyze", "rules", "--ports", "8", "--topologies", "dragonfly,fb-3d", "--out", str(tmp_path), "--no-plots", "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    assert "dragonfly" in out and "9-10" in out and (tmp_path / "rules.csv").exists()
    assert not (tmp_path / "fig4-rules.png").exists()
    assert main(["analyze", "onoff", "topologies/fat-tree-k4.yaml", "--utilisation", "0.5", "--exec-time", "2"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["E_net"] == pytest.approx(2 * res["W_net"], abs=0.01)
    assert main(["analyze", "scale", "topologies/clos-4stage-small.yaml", "--sample", "5", "--jobs", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"]
