"""Mininet's own way in: the fabrics as ``mn --custom`` topologies, a ``dmp`` CLI command and ``--test dmp``.

Loaded by the ``--custom`` file ``mininet/hpcfabric_mn.py`` (docs/mininet.md, "Plain mn")::

    sudo mn --custom mininet/hpcfabric_mn.py --topo dragonfly,a=4,p=2,h=2 \\
        --switch ovs,datapath=user,protocols=OpenFlow13 --controller remote,port=6653

:data:`topos` (``--topo NAME,key=value,...``): ``dragonfly`` (a, p, h[, g, arrangement]), ``fb``
(dims=3x3[x...], hosts), ``fattree`` (k), ``clos`` (radix[, stages, hosts, pods]) and ``fabric``
(file=topologies/X.yaml); every one also takes ``prefix=`` (prepended to node names, to run next to
another net of the same fabric). Each builds the :class:`~fabric_topo.FabricTopo` that
``fabric_topo.build_net`` builds for the same model: the model's dpids, port numbers, node names and
classes (userspace OVS, OpenFlow 1.3, ``fail_mode=secure``; the switch class comes from the topo, so
``--switch`` only matters for what the topo does not set). The parameters go through the YAML loader,
so a bad one is the loader's error (field, expected) and exit 2 before anything is built.

:class:`FabricCLI` (installed as mn's CLI by the ``--custom`` file) adds ``dmp [HOST ...]``: the
hosts run the DMP client (``hpcfabric-dmp``) and then get permanent neighbour entries for every
other host that holds a hierarchical MAC (the fabric never floods, so ARP reaches nobody). The same
as a test: ``--test dmp`` (``--test dmp+pingall`` pings all pairs afterwards; ``--test dmp+cli`` opens
the CLI afterwards). Not as a ``--pre`` script: mn 2.3 runs that before the switches start.

mn itself runs Python 3 from Debian, which lacks PyYAML/numpy/networkx: :func:`use_venv` appends the
project venv's site-packages (``HPCFABRIC_VENV``, default ``<repo>/.venv``; same Debian Python).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def use_venv() -> None:
    """Make the package's dependencies importable under Debian's python3 (mn's) from the project venv."""
    venv = Path(os.environ.get("HPCFABRIC_VENV") or ROOT / ".venv")
    site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    if site.is_dir() and str(site) not in sys.path:
        sys.path.append(str(site))  # after Debian's own packages: mininet stays Debian's
    for p in (str(HERE), str(ROOT)):
        if p not in sys.path:
            sys.path.insert(0, p)


use_venv()

from mininet.cli import CLI  # noqa: E402  (Debian's Mininet)
from mininet.log import error, info, output  # noqa: E402

from dmp_hosts import host_macs, run_dmp, set_static_neighbours  # noqa: E402  (mininet/)
from fabric_topo import FabricTopo  # noqa: E402

from hpcfabric.errors import HpcfabricError  # noqa: E402
from hpcfabric.rules.addressing import format_mac  # noqa: E402
from hpcfabric.topology import Fabric, load_topology, parse_topology  # noqa: E402


def _fail(err: Exception) -> SystemExit:
    """Bad parameters: one line and exit 2. A SystemExit, not an Exception: mn runs ``mn -c`` (which
    deletes every bridge on the machine) on an Exception, and nothing has been built yet."""
    print(f"hpcfabric: error: {err}", file=sys.stderr)
    return SystemExit(2)


def _from_yaml(source: str, data: dict[str, Any]) -> Fabric:
    import yaml

    try:
        return parse_topology(yaml.safe_dump(data), source)
    except HpcfabricError as err:
        raise _fail(err) from None


def _source(name: str, **kw: Any) -> str:
    return f"--topo {name}," + ",".join(f"{k}={v}" for k, v in kw.items() if v is not None)


def _optional(**kw: Any) -> dict[str, Any]:
    return {k: v for k, v in kw.items() if v is not None}


def dragonfly(a: int, p: int, h: int, g: int | None = None, arrangement: str | None = None, prefix: str = "") -> FabricTopo:
    name = f"dragonfly-a{a}-p{p}-h{h}" + (f"-g{g}" if g is not None else "")
    data = {"kind": "dragonfly", "name": name, "a": a, "p": p, "h": h, **_optional(g=g, arrangement=arrangement)}
    return FabricTopo(_from_yaml(_source("dragonfly", a=a, p=p, h=h, g=g, arrangement=arrangement), data), prefix=prefix)


def fb(dims: Any, hosts: int, prefix: str = "") -> FabricTopo:
    """``dims``: ``3x3`` (mn splits on commas, so dimensions are joined by ``x``); one number for 1-D."""
    source = _source("fb", dims=dims, hosts=hosts)
    try:
        sizes = [int(d) for d in str(dims).lower().split("x")]
    except ValueError:
        raise _fail(HpcfabricError(f"{source}: dims: expected switches per dimension joined by x, e.g. 3x3")) from None
    name = f"fb-{len(sizes)}d-" + "x".join(map(str, sizes))
    return FabricTopo(_from_yaml(source, {"kind": "flattened_butterfly", "name": name, "dims": sizes,
                                          "hosts_per_switch": hosts}), prefix=prefix)


def fattree(k: int, prefix: str = "") -> FabricTopo:
    data = {"kind": "fat_tree", "name": f"fat-tree-k{k}", "k": k}
    return FabricTopo(_from_yaml(_source("fattree", k=k), data), prefix=prefix)


def clos(radix: int, stages: int | None = None, hosts: int | None = None, pods: int | None = None,
         prefix: str = "") -> FabricTopo:
    data = {"kind": "folded_clos", "name": f"clos-r{radix}", "radix": radix,
            **_optional(stages=stages, hosts=hosts, pods=pods)}
    return FabricTopo(_from_yaml(_source("clos", radix=radix, stages=stages, hosts=hosts, pods=pods), data), prefix=prefix)


def fabric(file: str, prefix: str = "") -> FabricTopo:
    """A topology YAML file (relative to the current directory, else to the repository)."""
    path = Path(file)
    if not path.exists() and (ROOT / file).exists():
        path = ROOT / file
    try:
        return FabricTopo(load_topology(path), prefix=prefix)
    except HpcfabricError as err:
        raise _fail(err) from None


#: ``--topo`` names (mn's ``topos`` of a ``--custom`` file)
topos: dict[str, Callable[..., FabricTopo]] = {
    "dragonfly": dragonfly, "fb": fb, "fattree": fattree, "clos": clos, "fabric": fabric,
}


# ---------------------------------------------------------------------------
# DMP on the hosts of a net mn built


def adopt(net: Any) -> None:
    """Give mn's net the attributes the step modules read (``hf_fabric``, ``hf_prefix``, ``hf_ips``)."""
    topo = getattr(net, "topo", None)
    if not isinstance(topo, FabricTopo):
        raise HpcfabricError("this net was not built from an hpcfabric topology (--custom mininet/hpcfabric_mn.py --topo ...)")
    net.hf_fabric, net.hf_prefix, net.hf_ips = topo.fabric, topo.prefix, topo.ips


def dmp(net: Any, hosts: list[str] | None = None, timeout: float = 30.0) -> dict[str, int]:
    """DMP on ``hosts`` (default all) until each holds a hierarchical MAC or ``timeout`` s passed (the
    controller may still be installing); then neighbour entries on every host. Returns host -> MAC."""
    adopt(net)
    names = hosts or [h.name for h in net.hf_fabric.hosts]
    unknown = sorted(set(names) - {h.name for h in net.hf_fabric.hosts})
    if unknown:
        raise HpcfabricError(f"dmp: unknown host(s) {', '.join(unknown)}")
    deadline = time.monotonic() + timeout
    todo = list(names)
    while todo:
        results = run_dmp(net, hosts=todo)
        todo = [h for h in todo if results[h].get("returncode") != 0 or "mac" not in results[h]]
        if not todo or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    macs = host_macs(net)
    hierarchical = {h: m for h, m in macs.items() if m >= 0 and m & (1 << 41)}  # locally administered = DMP's
    if todo:
        error(f"dmp: no answer for {len(todo)} host(s) after {timeout:g} s, e.g. {todo[0]} "
              f"({results[todo[0]].get('error') or results[todo[0]].get('stderr') or 'no error'})\n")
    set_static_neighbours(net, hierarchical)
    return {h: macs[h] for h in names}


def dmp_test(net: Any, timeout: float = 30.0) -> None:
    """``mn --test dmp``: DMP on every host and one result line (like mn's own tests, it reports and
    returns: an exception would make mn run ``mn -c``, and SystemExit would skip ``net.stop()``)."""
    macs = dmp(net, timeout=timeout)
    bad = [h for h, m in macs.items() if m < 0 or not m & (1 << 41)]
    output(f"*** DMP: {len(macs) - len(bad)}/{len(macs)} hosts hold a hierarchical MAC"
           + (f" (not: {' '.join(bad[:5])})" if bad else "") + "\n")


def cli_test(net: Any) -> None:
    """``mn --test dmp+cli``: the CLI after the tests (mn opens it only without ``--test``)."""
    FabricCLI(net)


#: mn's ``tests`` of a ``--custom`` file: ``--test dmp`` (``dmp+pingall``, ``dmp+cli``)
tests = {"dmp": dmp_test, "cli": cli_test}


class FabricCLI(CLI):
    """mn's CLI plus ``dmp [HOST ...]``."""

    def do_dmp(self, line: str) -> None:
        """dmp [HOST ...]: run the DMP client on the hosts (default all), then set neighbour entries.
        Needs the controller (it installs the switches' DMP answers)."""
        try:
            macs = dmp(self.mn, line.split() or None)
        except HpcfabricError as err:
            error(f"{err}\n")
            return
        for h, m in macs.items():
            output(f"{h} {format_mac(m) if m >= 0 else '?'}\n")
        info(f"*** neighbour entries set for {len(macs)} host(s)\n")
