"""Fig. 12 sweeps past one machine: the same points on a Dask cluster of two workers as in one process."""

from __future__ import annotations

import pytest

from hpcfabric.analysis import fig12
from hpcfabric.topology.loader import load_topology

pytest.importorskip("dask.distributed")

DF = "topologies/dragonfly-a4-p2-h2.yaml"


def test_dask_local_cluster_gives_the_same_csv_and_plot(tmp_path) -> None:
    fabric = load_topology(DF)
    kw = dict(quick=True, routers=["MIN", "PB", "COND-switch"], loads={"uniform": [0.2, 0.9], "adversarial": [0.1, 0.3]},
              seeds=2)
    here, files_here = fig12.run(fabric, tmp_path / "here", jobs=1, **kw)
    there, files_there = fig12.run(fabric, tmp_path / "dask", jobs=2, dask="local", **kw)
    assert there["timing"]["dask"] == "local"

    def strip(rows):  # everything but the wall time of each point
        return [{k: v for k, v in r.items() if k != "wall_s"} for r in rows]

    assert len(here["points"]) == 3 * 2 * 2  # routers x patterns x loads
    assert strip(there["points"]) == strip(here["points"])
    assert all(r["seeds"] == 2 for r in there["points"])
    head = lambda p: p.read_text().splitlines()[0]  # noqa: E731
    assert head(files_there[0]) == head(files_here[0]) and files_there[2].stat().st_size > 1000


def test_dask_address_is_checked(capsys) -> None:
    from hpcfabric.cli import main

    assert main(["analyze", "fig12", DF, "--quick", "--dask", "nowhere", "--out", "/tmp/unused"]) == 2
    assert "--dask" in capsys.readouterr().err
