"""The compiled artifact shared by partitioned controllers (hpcfabric.config.artifact) and derived partitions.

Round trip: ``hpcfabric compile`` writes the tables once; a controller config with
``[ha] partitions = K`` / ``partition = i`` and ``[hpcfabric] compiled = DIR``
loads exactly the tables a fresh compile of that partition gives (compiled,
to-install and groups), with the proof's verdict. A stale artifact (topology,
settings or a partition file changed), a missing one or one cut into other
partitions is refused with a ConfigError naming the key (CLI: exit 2, no
traceback). Derived partitions cover every switch exactly once.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hpcfabric.config import build_tables, load_config
from hpcfabric.config.artifact import write_artifact
from hpcfabric.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "topologies" / "dragonfly-a4-p2-h2.yaml"


def conf(tmp: Path, name: str = "c.conf", *, topology: Path = DEMO, ha: str = "", extra: str = "",
         compiled: str = "art") -> Path:
    path = tmp / name
    path.write_text(f"[hpcfabric]\ntopology = {topology}\nrouting = conditional\n"
                    f"{'compiled = ' + compiled if compiled else ''}\n{extra}\n"
                    f"[guards]\nsource_check = on\npunt_meters = on\n[ha]\n{ha}\n")
    return path


def fresh(path: Path):
    """The tables a controller compiles itself for ``path`` (the artifact key removed)."""
    text = "\n".join(ln for ln in path.read_text().splitlines() if not ln.startswith("compiled ="))
    plain = path.with_name("fresh-" + path.name)
    plain.write_text(text)
    return build_tables(load_config(plain, compile=False))


def same_tables(a, b) -> None:
    """``a`` (from the artifact) holds the tables of exactly the switches it manages, as in ``b`` (a fresh
    compile: with fast_failover that one holds the whole fabric)."""
    assert set(a.desired) == set(a.compiled.tables) == a.managed
    for n in a.managed:
        assert a.desired[n] == b.desired[n], n
        assert a.compiled.tables[n].flows == b.compiled.tables[n].flows, n
    assert {n: g for n, g in a.groups.items() if g} == {n: g for n, g in b.groups.items() if g and n in a.managed}
    assert a.compiled.cos == b.compiled.cos and a.compiled.cos_levels == b.compiled.cos_levels


def test_each_partition_loads_what_a_fresh_compile_of_it_gives(tmp_path: Path) -> None:
    base = conf(tmp_path, "compile.conf", ha="partitions = 3\npartition = 0")
    m = write_artifact(load_config(base, compile=False), tmp_path / "art", 3)
    assert [p["switches"] for p in m["partitions"]] == [12, 12, 12]
    assert m["deadlock"]["verdict"] == "proven"
    for i in range(3):
        path = conf(tmp_path, f"p{i}.conf", ha=f"partitions = 3\npartition = {i}")
        cfg = load_config(path)
        assert cfg.deadlock["verdict"] == "proven" and cfg.deadlock["artifact"] == str(tmp_path / "art")
        assert len(cfg.desired) == 12
        same_tables(cfg, fresh(path))
    # an instance managing the whole fabric takes every partition file
    whole = load_config(conf(tmp_path, "all.conf"))
    assert len(whole.desired) == 36
    same_tables(whole, fresh(tmp_path / "all.conf"))


def test_fast_failover_groups_come_from_the_whole_fabric(tmp_path: Path) -> None:
    extra = "[failover]\nfast_failover = on"
    path = conf(tmp_path, ha="partitions = 2\npartition = 1", extra="")
    path.write_text(path.read_text() + extra + "\n")
    write_artifact(load_config(path, compile=False), tmp_path / "art", 2)
    cfg = load_config(path)
    assert sum(len(g) for g in cfg.groups.values()) > 0
    same_tables(cfg, fresh(path))


def test_stale_missing_or_mismatched_artifacts_are_refused(tmp_path: Path) -> None:
    topo = tmp_path / "fabric.yaml"
    shutil.copy(DEMO, topo)
    path = conf(tmp_path, topology=topo, ha="partitions = 3\npartition = 2")
    write_artifact(load_config(path, compile=False), tmp_path / "art", 3)
    assert len(load_config(path).desired) == 12
    # another routing policy: the settings changed
    other = conf(tmp_path, "minimal.conf", topology=topo, ha="partitions = 3\npartition = 2")
    other.write_text(other.read_text().replace("routing = conditional", "routing = minimal"))
    with pytest.raises(ConfigError, match=r"stale: the table settings \(routing\) changed") as err:
        load_config(other)
    assert err.value.field == "hpcfabric.compiled" and "hpcfabric compile --config" in str(err.value)
    # another partition count
    with pytest.raises(ConfigError, match="only partly managed") as err:
        load_config(conf(tmp_path, "two.conf", topology=topo, ha="partitions = 2\npartition = 0"))
    assert err.value.field == "ha.partition"
    # a partition file changed after compiling
    part = tmp_path / "art" / "p2-of-3.pickle"
    blob = part.read_bytes()
    part.write_bytes(blob[:-1] + bytes([blob[-1] ^ 1]))
    with pytest.raises(ConfigError, match="does not match its manifest"):
        load_config(path)
    part.write_bytes(blob)
    # the topology file changed (one more comment line is enough: the bytes are hashed)
    topo.write_text(topo.read_text() + "# edited\n")
    with pytest.raises(ConfigError, match="stale: the topology file changed"):
        load_config(path)
    # the CLI: exit 2, one line, no traceback
    run = subprocess.run([sys.executable, "-m", "hpcfabric.cli", "check", str(path)], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert run.returncode == 2 and "Traceback" not in run.stderr and "hpcfabric.compiled" in run.stderr
    # recompiled: accepted again
    run = subprocess.run([sys.executable, "-m", "hpcfabric.cli", "compile", "--config", str(path)], capture_output=True,
                         text=True, cwd=ROOT, timeout=120)
    assert run.returncode == 0, run.stderr
    assert len(load_config(path).desired) == 12
    shutil.rmtree(tmp_path / "art")
    with pytest.raises(ConfigError, match="no compiled artifact at"):
        load_config(path)


def test_an_artifact_holds_the_traffic_chosen_tables_and_a_new_matrix_makes_it_stale(tmp_path: Path) -> None:
    from hpcfabric.topology import load_topology
    from hpcfabric.topology.traffic import pattern_traffic, write_traffic

    fabric = load_topology(DEMO)
    job = tmp_path / "job.csv"
    write_traffic(pattern_traffic(fabric, "transpose"), job)
    path = conf(tmp_path, ha="partitions = 2\npartition = 1", extra=f"traffic = {job}")
    m = write_artifact(load_config(path, compile=False), tmp_path / "art", 2)
    assert m["deadlock"]["verdict"] == "proven"
    cfg = load_config(path)
    same_tables(cfg, fresh(path))
    static = fresh(conf(tmp_path, "static.conf", ha="partitions = 2\npartition = 1"))
    assert any(cfg.desired[n] != static.desired[n] for n in cfg.managed)  # the matrix moved some detours
    # the next job: the artifact was made for another matrix
    write_traffic(pattern_traffic(fabric, "bitrev"), job)
    with pytest.raises(ConfigError, match=r"stale: the table settings \(traffic\) changed"):
        load_config(path)


@pytest.mark.parametrize("count", [2, 3, 4, 7, 12])
def test_derived_partitions_cover_every_switch_exactly_once(tmp_path: Path, count: int) -> None:
    seen: list[str] = []
    for i in range(count):
        cfg = load_config(conf(tmp_path, f"p{i}.conf", compiled="", ha=f"partitions = {count}\npartition = {i}"),
                          compile=False)
        assert cfg.managed and cfg.ha_partition == i
        seen += sorted(cfg.managed)
    names = [sw.name for sw in cfg.fabric.switches]
    assert sorted(seen) == sorted(names) and len(seen) == len(set(seen))


@pytest.mark.parametrize("ha, field, message", [
    ("partitions = 3\npartition = 3", "ha.partition", "out of range 0..2"),
    ("partition = 1", "ha.partition", "needs [ha] partitions >= 2"),
    ("partitions = 3", "ha.partition", "missing"),
    ("partitions = 3\npartition = x", "ha.partition", "not an integer"),
    ("partitions = 2\npartition = 0\nswitches = g0s0", "ha.partition", "either"),
    ("partitions = 37\npartition = 0", "ha.partitions", "expected 1..36"),
])
def test_bad_partition_settings_are_refused(tmp_path: Path, ha: str, field: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(conf(tmp_path, compiled="", ha=ha), compile=False)
    assert err.value.field == field and message in str(err.value)
