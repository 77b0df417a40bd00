"""``mn --custom mininet/hpcfabric_mn.py``: the topologies mn builds are the ones ``fabric_net.build_net`` builds.

* Without a net: mn's own ``buildTopo`` (the code path of ``--topo NAME,k=v``) on the custom file's
  ``topos`` gives, for the generator parameters of each shipped fabric and for ``fabric,file=``, the same
  switches (dpid, datapath, protocols, fail mode), hosts (IPv4) and links (both ends' port numbers) as
  ``build_net``'s topo of the YAML file; bad parameters are the loader's one-line error, exit 2.
* With a net (root, Open vSwitch): the real ``mn`` program (its option parsing, ``--custom`` loading,
  net start, ``--test``/``--post``) on the small Dragonfly under ``hpcfabric controller``: the bridges
  carry the model's dpids and OpenFlow port numbers, ``--test dmp+pingall`` gives every host its
  hierarchical MAC and loses no ping.
"""

from __future__ import annotations

import argparse
import re
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "mininet") not in sys.path:
    sys.path.insert(0, str(ROOT / "mininet"))

pytest.importorskip("mininet.topo", reason="Debian's Mininet is not installed")

from fabric_topo import FabricTopo  # noqa: E402  (mininet/fabric_topo.py)
from mininet.util import buildTopo  # noqa: E402

from hpcfabric.topology import load_topology  # noqa: E402

CUSTOM = ROOT / "mininet" / "hpcfabric_mn.py"
TOPOS = runpy.run_path(str(CUSTOM))["topos"]

CASES = [
    ("dragonfly,a=4,p=2,h=2", "dragonfly-a4-p2-h2"),
    ("dragonfly,a=2,p=1,h=1", "dragonfly-a2-p1-h1"),
    ("fb,dims=3x3,hosts=2", "fb-2d-3x3"),
    ("fb,dims=4x4,hosts=4", "fb-2d-4x4"),
    ("fattree,k=4", "fat-tree-k4"),
    ("fabric,file=topologies/explicit-ring4.yaml", "explicit-ring4"),
    ("fabric,file=topologies/clos-4stage-small.yaml", "clos-4stage-small"),
]


def shape(topo: FabricTopo) -> dict:
    """What a net built from ``topo`` is made of (all but the random initial host MACs)."""
    switches = {}
    for s in topo.switches():
        i = topo.nodeInfo(s)
        switches[s] = (i["cls"].__name__, i["dpid"], i["datapath"], i["protocols"], i["failMode"])
    hosts = {h: (topo.nodeInfo(h)["cls"].__name__, topo.nodeInfo(h)["ip"]) for h in topo.hosts()}
    links = {frozenset({(i["node1"], i["port1"]), (i["node2"], i["port2"])}) for _, _, i in topo.links(withInfo=True)}
    return {"switches": switches, "hosts": hosts, "links": links}


@pytest.mark.parametrize("spec,name", CASES, ids=[c[1] for c in CASES])
def test_custom_topo_is_build_nets_topo(spec: str, name: str) -> None:
    mine = buildTopo(TOPOS, spec)  # what `mn --topo SPEC` calls
    fabric = load_topology(ROOT / "topologies" / f"{name}.yaml")
    ref = FabricTopo(fabric)  # what fabric_net.build_net builds for the file
    got, want = shape(mine), shape(ref)
    assert got == want
    assert len(got["switches"]) == len(fabric.switches) and len(got["hosts"]) == len(fabric.hosts)
    assert len(got["links"]) == len(fabric.links) + len(fabric.hosts)
    assert {d for _, d, *_ in got["switches"].values()} == {"%016x" % s.dpid for s in fabric.switches}


def test_custom_topo_prefix() -> None:
    topo = buildTopo(TOPOS, "dragonfly,a=2,p=1,h=1,prefix=zz")
    assert sorted(topo.switches())[0] == "zzg0s0" and all(h.startswith("zz") for h in topo.hosts())


@pytest.mark.parametrize("spec,message", [
    ("dragonfly,a=0,p=1,h=1", "a: must be >= 1, got 0"),
    ("fb,dims=3y3,hosts=2", "dims: expected switches per dimension joined by x"),
    ("fattree,k=3", "k"),
    ("fabric,file=topologies/nope.yaml", "nope.yaml"),
])
def test_bad_custom_parameters_are_one_line_and_exit_2(spec: str, message: str, capsys) -> None:
    with pytest.raises(SystemExit) as exc:  # not an Exception: mn would run `mn -c` on one
        buildTopo(TOPOS, spec)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("hpcfabric: error: ") and message in err and "Traceback" not in err


# ---------------------------------------------------------------------------
# the real mn program

#: /usr/bin/mn's MininetRunner without its __main__ block, which runs `mn -c` (every bridge on this
#: shared machine deleted, controllers killed by name) when anything raises
MN = ("import runpy, sys; sys.argv[0] = 'mn'; "
      "runpy.run_path('/usr/bin/mn', run_name='mn_under_test')['MininetRunner']()")


def test_real_mn_builds_the_fabric_and_runs_dmp_and_pingall(tmp_path: Path) -> None:
    from mininet_gate import require_mininet

    require_mininet()
    from controller_proc import Controller, free_port
    from fabric_setup import write_config

    fabric = load_topology(ROOT / "topologies" / "dragonfly-a2-p1-h1.yaml")
    port = free_port()
    args = argparse.Namespace(config=str(ROOT / "configs" / "dragonfly-a2-p1-h1.conf"), topology=None, addressing=None,
                              routing=None, link_speed_gbps=None)
    config = write_config(args, tmp_path, port, tmp_path / "status.json")
    ctl = Controller(config, tmp_path / "status.json", port, tmp_path / "controller.log")
    post = tmp_path / "dump.mn"  # --post: after the tests, before the net stops (--pre runs before it starts)
    post.write_text("sh ovs-vsctl --format=csv --no-headings --columns=name,datapath_id list Bridge\n"
                   "sh ovs-vsctl --format=csv --no-headings --columns=name,ofport list Interface\n")
    cmd = ["/usr/bin/python3", "-c", MN, "--custom", str(CUSTOM), "--topo", "dragonfly,a=2,p=1,h=1,prefix=mc",
           "--switch", "ovs,datapath=user,protocols=OpenFlow13", "--controller", f"remote,ip=127.0.0.1,port={port}",
           "--listenport", "0", "--post", str(post), "--test", "dmp+pingall"]
    ctl.start()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, cwd=str(ROOT))
    finally:
        ctl.stop()
        leftover = [f"mc{s.name}" for s in fabric.switches]  # only if mn died half-way: our names only
        subprocess.run(["ovs-vsctl", "--timeout=10"] + [a for b in leftover for a in ("--", "--if-exists", "del-br", b)],
                       capture_output=True)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    bridges = dict(re.findall(r'^(mcg\d+s\d+),"*([0-9a-f]{16})"*$', out, re.M))
    assert bridges == {f"mc{s.name}": "%016x" % s.dpid for s in fabric.switches}
    ports = {name: int(p) for name, p in re.findall(r"^(mcg\d+s\d+-eth\d+),(\d+)$", out, re.M)}
    want = {f"mc{l.a}-eth{l.a_port}": l.a_port for l in fabric.links}
    want |= {f"mc{l.b}-eth{l.b_port}": l.b_port for l in fabric.links}
    want |= {f"mc{h.switch}-eth{h.port}": h.port for h in fabric.hosts}
    assert ports == want
    assert "*** DMP: 6/6 hosts hold a hierarchical MAC" in out, out[-3000:]
    assert re.search(r"Results: 0% dropped \(30/30 received\)", out), out[-3000:]
