"""BookSim2 as a peer: its ``dragonflynew`` fabric, its units, and a runner for its binary.

**The fabric.** BookSim2's ``dragonflynew`` with ``k`` is a Dragonfly with p = h = k hosts and
global links per router, a = 2k routers per group (all-to-all), g = a*h + 1 groups and one global
link between every two groups. Node ``n`` sits on router ``n // p``, router ``r`` in group
``r // a`` at index ``r % a`` (our host and switch order). Its global links are wired *absolutely*
(``networks/dragonfly.cpp``, ``dragonfly_port``): global slot ``c = index * h + port`` of group
``i`` leads to group ``c`` if ``c < i``, else ``c + 1`` -- neither our ``palmtree`` (slot ``c`` to
``i + c + 1``) nor ``xor``. :func:`booksim_dragonfly` builds exactly that wiring with our port
numbering (hosts 1..p, global p+1..p+h, local p+h+1..: the compiler reads the links, not the
arrangement name).

**The units.** One BookSim cycle is one flit time; with 1-flit packets and a link rate of one
flit per cycle, a cycle is one of our frame times (:func:`booksim_params`: 1,000-byte frames at
40 Gb/s, so 1 cycle = 200 ns). Accepted rates are flits per cycle per node = our fraction of the
link rate per host. Channel latencies are BookSim's hard-coded ones (local 10 cycles, global 100,
terminal 1; a flit's crossing included, so our links, which add one frame time of
serialisation, get one cycle less); a router adds 2 cycles per hop (our ``switch_ns``, calibrated
on BookSim's low-load latency); buffers are its 256 flits per VC and input port, per class here.

**The runner** (:class:`BookSim`) builds upstream BookSim2 with ``../shared/booksim/build.sh``
into a directory outside the repository (``HPCFABRIC_BOOKSIM_BUILD``, default
``~/.cache/hpcfabric/booksim``; the sources and the build script stay in ``../shared/booksim``)
and runs one point per process, parsing the accepted flit rate, the packet latency and the
cycles simulated.

**Deadlock-free Valiant and UGAL** (``booksim_stages.patch``, applied by the runner on top of the
build; routing functions ``val4`` and ``ugal4``, ``num_vcs=4``). Upstream ``ugal_dragonflynew``
(and ``val_dragonflynew`` of ``../shared/booksim``, its copy without the adaptive choice) keeps a
packet on VC 0 for its whole non-minimal phase: local hops of the source group, the first global
hop and the local hop to the intermediate *router* in the intermediate group. VC 0 of a local
channel thus carries both its group's own packets towards their global link and transit packets
arriving from another group's global link, so the channel dependency graph of VC 0 has cycles
local -> global -> local -> global ... and the network deadlocks under ADV (BookSim warns "Possible
network deadlock" at ADV 0.6 on k=2). ``val4``/``ugal4`` make the same choices (random
intermediate node, UGAL-L at the source router) with the VC = the stage of the path: 0 in the
source group, 1 in the intermediate group before the intermediate router, 2 after it, 3 in the
destination group. Three VCs do not suffice with an intermediate *router*: its group may take two
local hops (to the intermediate router, then to the global link), which need two VCs of their own.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpcfabric.sim.params import SimParams
from hpcfabric.sim.tables import SimError
from hpcfabric.topology.generators import dragonfly_fabric, dragonfly_ports
from hpcfabric.topology.model import Fabric, Link

__all__ = ["booksim_dragonfly", "booksim_params", "BookSim", "BookSimPoint", "ROUTING", "TRAFFIC", "CYCLE_NS",
           "shared_dir", "STAGES_PATCH"]

#: our router name -> BookSim's routing_function (``val4``/``ugal4``: the runner's deadlock-free
#: Valiant and UGAL-L, module docstring); our pattern -> BookSim's traffic
ROUTING = {"MIN": "min", "VAL-R": "val4", "UGAL-L": "ugal4", "PB": "ugal4", "VAL": "val4"}
#: routing functions that need 4 VCs (the config's num_vcs is 3)
FOUR_VCS = ("val4", "ugal4")
#: the runner's addition to BookSim (applied after ../shared/booksim/build.sh's own patch)
STAGES_PATCH = Path(__file__).with_name("booksim_stages.patch")
TRAFFIC = {"uniform": "uniform", "adversarial": "bad_dragon"}
#: one BookSim cycle = one frame time of 1,000 bytes at 40 Gb/s
CYCLE_NS = 200.0
#: BookSim's hard-coded channel latencies (cycles; a 1-flit packet's crossing included) and the
#: cycles a router adds per hop on an idle network (calibrated: BookSim's mean latency at UN 0.1 on
#: k=2, 113 cycles over 3.3 routers and 4.3 channels, is channel latencies + 2 cycles per router)
LOCAL_CYCLES, GLOBAL_CYCLES, TERMINAL_CYCLES, ROUTER_CYCLES = 10, 100, 1, 2
VC_BUF = 256


def booksim_dragonfly(k: int) -> Fabric:
    """BookSim2's ``dragonflynew`` for ``k`` (module docstring): our switch, host and local-port
    layout, BookSim's global wiring."""
    if not isinstance(k, int) or k < 1:
        raise SimError(f"BookSim's dragonflynew needs k >= 1, got {k!r}")
    a, p, h = 2 * k, k, k
    g = a * h + 1
    base = dragonfly_fabric(a, p, h, g, arrangement="palmtree", name=f"booksim-dragonfly-k{k}")
    gport = dragonfly_ports(p, h)["global"]
    links = [ln for ln in base.links if ln.kind != "global"]
    for i in range(g):
        for c in range(a * h):
            j = c if c < i else c + 1
            if i < j:
                back = i if i < j else i - 1  # slot of group j leading to group i
                links.append(Link(f"g{i}s{c // h}", gport + c % h, f"g{j}s{back // h}", gport + back % h, "global"))
    params = {**base.params, "arrangement": "booksim", "booksim_k": k}
    return Fabric("dragonfly", base.name, base.switches, base.hosts, tuple(links), params)


def booksim_params(**overrides: Any) -> SimParams:
    """Our parameters in BookSim's units (module docstring): frame time = 1 cycle = 200 ns."""
    # our links cost one frame time of serialisation plus their latency: BookSim's latency minus that cycle
    kw: dict[str, Any] = dict(link_gbps=40.0, frame_bytes=1000, switch_ns=ROUTER_CYCLES * CYCLE_NS,
                              local_ns=(LOCAL_CYCLES - 1) * CYCLE_NS, global_ns=(GLOBAL_CYCLES - 1) * CYCLE_NS,
                              host_ns=(TERMINAL_CYCLES - 1) * CYCLE_NS, buffer_frames=VC_BUF)
    kw.update(overrides)
    return SimParams(**kw)


def shared_dir() -> Path:
    """``../shared/booksim`` beside the repository (``HPCFABRIC_BOOKSIM_DIR`` overrides)."""
    env = os.environ.get("HPCFABRIC_BOOKSIM_DIR")
    if env:
        return Path(env)
    root = Path(__file__).resolve().parents[2]
    for cand in (root.parent / "shared" / "booksim", Path("/work/shared/booksim")):
        if cand.is_dir():
            return cand
    return root.parent / "shared" / "booksim"


@dataclass
class BookSimPoint:
    """One BookSim run: its accepted rate (flits/cycle/node), packet latency (cycles), cycles
    simulated and wall time."""

    accepted: float
    latency_cycles: float
    cycles: int
    wall_s: float
    cpu_s: float
    args: list[str] = field(default_factory=list)
    complete: bool = True  # False: stopped at the timeout (figures of its last sample period)
    deadlock: bool = False  # BookSim warned of a possible network deadlock
    periods: int = 0  # sample periods printed when stopped early

    @property
    def latency_ns(self) -> float:
        return self.latency_cycles * CYCLE_NS


_NUM = r"([-+0-9.eE]+|nan|-?inf)"


class BookSim:
    """Build (once) and run BookSim2 (module docstring)."""

    def __init__(self, build_dir: str | os.PathLike[str] | None = None, shared: Path | None = None) -> None:
        self.shared = shared or shared_dir()
        self.build_dir = Path(build_dir or os.environ.get("HPCFABRIC_BOOKSIM_BUILD")
                              or Path.home() / ".cache" / "hpcfabric" / "booksim-stages")
        self.binary = self.build_dir / "booksim2" / "src" / "booksim"
        self.config = self.shared / "dragonfly_base.cfg"

    def available(self) -> bool:
        return (self.shared / "build.sh").is_file()

    def build(self) -> Path:
        """The binary, built with ``build.sh`` and :data:`STAGES_PATCH` if missing (needs g++ make
        flex bison patch)."""
        stamp = self.build_dir / "booksim2" / ".hpcfabric-stages"
        if self.binary.is_file() and stamp.is_file():
            return self.binary
        if not self.available():
            raise SimError(f"BookSim2 peer: {self.shared}/build.sh not found (set HPCFABRIC_BOOKSIM_DIR)")
        proc = subprocess.run(["bash", str(self.shared / "build.sh"), str(self.build_dir)], capture_output=True, text=True)
        if proc.returncode != 0 or not self.binary.is_file():
            raise SimError(f"BookSim2 build failed ({self.shared}/build.sh {self.build_dir}): {proc.stderr.strip()[-300:]}")
        src = self.build_dir / "booksim2"
        for cmd in (["patch", "-p1", "-s", "-i", str(STAGES_PATCH)], ["make", "-C", "src", "-j2"]):
            proc = subprocess.run(cmd, cwd=src, capture_output=True, text=True)
            if proc.returncode != 0:
                raise SimError(f"BookSim2 build failed ({' '.join(cmd)} in {src}): {(proc.stderr or proc.stdout).strip()[-300:]}")
        stamp.write_text(STAGES_PATCH.read_text())
        return self.binary

    def run(self, k: int, routing: str, pattern: str, load: float, seed: int = 1, timeout: float | None = None,
            **options: Any) -> BookSimPoint:
        """One point: ``routing`` one of min/val/ugal (or our names in :data:`ROUTING`), ``pattern``
        uniform/adversarial (or BookSim's names), ``options`` more ``key=value`` overrides. A run past
        ``timeout`` seconds is stopped and reported from its last sample period (``complete`` False);
        ``deadlock`` is True when BookSim warned of a possible network deadlock."""
        fn = ROUTING.get(routing, routing)
        traffic = TRAFFIC.get(pattern, pattern)
        args = [f"k={k}", f"routing_function={fn}", f"traffic={traffic}", f"injection_rate={load}", f"seed={seed}"]
        if fn in FOUR_VCS and "num_vcs" not in options:
            args.append("num_vcs=4")
        args += [f"{key}={val}" for key, val in options.items()]
        binary = self.build()
        t0 = time.perf_counter()
        r0 = os.times()
        with tempfile.TemporaryFile("w+") as out:
            proc = subprocess.Popen([str(binary), str(self.config), *args], stdout=out, stderr=subprocess.STDOUT, text=True)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            out.seek(0)
            text = out.read()
        r1 = os.times()
        wall = time.perf_counter() - t0
        cpu = (r1.children_user - r0.children_user) + (r1.children_system - r0.children_system)
        return parse_output(text, args, wall, cpu)


def parse_output(text: str, args: list[str], wall: float = 0.0, cpu: float = 0.0) -> BookSimPoint:
    """The overall accepted flit rate, packet latency and cycles of a BookSim run's output (of its last
    sample period if it did not finish)."""
    acc = re.findall(r"Accepted flit rate average = " + _NUM, text)
    lat = re.findall(r"Packet latency average = " + _NUM, text)
    cyc = re.findall(r"Time taken is (\d+) cycles", text)
    deadlock = "Possible network deadlock" in text
    if acc and lat and cyc:
        return BookSimPoint(float(acc[-1]), float(lat[-1]), int(cyc[-1]), wall, cpu, args, True, deadlock)
    acc = re.findall(r"Accepted flit rate average= " + _NUM, text)  # per sample period
    lat = re.findall(r"Packet latency average = " + _NUM, text)
    if not acc:
        tail = " | ".join(text.strip().splitlines()[-3:])
        raise SimError(f"BookSim2 ({' '.join(args)}) printed no statistics: {tail[-300:]}")
    periods = len(re.findall(r"Accepted flit rate average= ", text))
    return BookSimPoint(float(acc[-1]), float(lat[-1]) if lat else float("nan"), -1, wall, cpu, args, False, deadlock,
                        periods)
