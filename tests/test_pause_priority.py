"""The PAUSE path is never held behind a whole-fabric walk (issue 16, the PAUSE tail at Table III).

Green threads are cooperative: a PAUSE packet-in is only read when the
thread that runs gives the hub back. The walks over every switch -- the
status file (per-switch entries and their JSON), the discovery report over
every cable, the LLDP round plan, the quarantine enforcement -- give it back
every ``SLICE`` switches (every ``REPORT_SLICE`` cables). These tests run the
real app on the Dragonfly a6p3h3 (114 switches) with the slices made small,
start such a walk, inject a PAUSE from another green thread meanwhile, and
check by ordering, not timing: the flip's flow-mod is sent before the walk
ends, and another green thread ran at least once per slice.
"""

from __future__ import annotations

import gc
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from os_ken.lib import hub
    from os_ken.ofproto import ofproto_v1_3 as O

from test_ops_fakes import ROOT, make_app

from hpcfabric.controller import status as status_mod
from hpcfabric.controller import wiring as wiring_mod
from hpcfabric.controller.heap import YOUNG_THRESHOLD, Heap
from hpcfabric.protocols.pause import build_pause

SRC = bytes.fromhex("020000aabbcc")


class Dp:
    """A connected datapath that records what the app sends (raw OpenFlow bytes)."""

    ofproto = O

    def __init__(self, dpid: int, ports: list[int]):
        self.id = dpid
        self.xid = 100
        self.sent: list[bytes] = []
        self.ports = {p: SimpleNamespace(port_no=p, hw_addr="02:00:00:00:%02x:%02x" % (dpid & 0xFF, p), config=0)
                      for p in ports}

    def send(self, data: bytes) -> bool:
        self.sent.append(bytes(data))
        return True

    def flow_mods(self) -> int:
        n = 0
        for buf in self.sent:
            while buf:
                if buf[1] == O.OFPT_FLOW_MOD:
                    n += 1
                buf = buf[int.from_bytes(buf[2:4], "big"):]
        return n


@pytest.fixture()
def app(tmp_path: Path):
    conf = tmp_path / "a6.conf"
    conf.write_text(f"[hpcfabric]\ntopology = {ROOT / 'topologies' / 'dragonfly-a6-p3-h3.yaml'}\n"
                    "routing = conditional\nreload_poll = 0\n")
    a = make_app(conf, tmp_path / "status.json")
    for sw in a.switches.values():
        sw.dp = Dp(sw.dpid, sorted(a.fabric.ports(sw.name)))
        sw.connected = sw.confirmed = True
    return a


def race(walk, app) -> tuple[list[str], int]:
    """Run ``walk()`` in a green thread, a PAUSE on a fabric port in another one started right after it,
    and a ticker counting how often the hub came back to it meanwhile; returns (order of events, ticks)."""
    sw = next(iter(app.switches.values()))
    port = min(app.fabric.fabric_ports(sw.name))
    order: list[str] = []
    ticks = [0]
    done = [False]

    def walker() -> None:
        walk()
        done[0] = True
        order.append("walk done")

    def pauser() -> None:
        app._packet_in(SimpleNamespace(msg=SimpleNamespace(datapath=sw.dp, match={"in_port": port},
                                                           data=build_pause(SRC, 0xFFFF))))
        if sw.dp.flow_mods():
            order.append("flip sent")

    def ticker() -> None:
        while not done[0]:
            ticks[0] += 1
            hub.sleep(0)

    threads = [hub.spawn(walker), hub.spawn(pauser), hub.spawn(ticker)]
    for t in threads:
        t.wait()
    return order, ticks[0]


def test_status_write_lets_a_pause_through_every_slice(app, monkeypatch):
    monkeypatch.setattr(status_mod, "SLICE", 8)
    monkeypatch.setattr(wiring_mod, "REPORT_SLICE", 32)
    n = len(app.switches)
    order, ticks = race(lambda: app.reporter.write(breathe=True), app)
    assert order == ["flip sent", "walk done"]
    # per-switch entries and their JSON in slices of 8, the report over 456 cables in slices of 32
    assert ticks >= 2 * (n // 8) + len(app.fabric.links) // 32 - 2
    # and the file is whole: every switch's entry, valid JSON
    import json

    st = json.loads(Path(app.reporter.path).read_text())
    assert len(st["per_switch"]) == n and st["switches_expected"] == n


def test_status_write_without_slices_holds_the_pause(app):
    """The control: the same write in one go (``breathe=False``, as app.status() for tests and the final
    write) finishes before the PAUSE is even read -- what happened at Table III for ~100-350 ms."""
    order, _ = race(lambda: app.reporter.write(breathe=False), app)
    assert order == ["walk done", "flip sent"]


def test_lldp_round_plan_and_enforcement_let_a_pause_through(app, monkeypatch):
    monkeypatch.setattr(wiring_mod, "SLICE", 8)
    n = len(app.switches)
    order, ticks = race(app.wiring.round_plan, app)
    assert order == ["flip sent", "walk done"] and ticks >= n // 8 - 1
    app.pausing.pending.clear()
    for sw in app.switches.values():
        sw.dp.sent.clear()
    app.pause.until.clear()
    order, ticks = race(lambda: app.wiring.enforce(breathe=True), app)
    assert order == ["flip sent", "walk done"] and ticks >= n // 8 - 1


def test_heap_freezes_long_lived_state_and_survivors():
    default = gc.get_threshold()
    heap = Heap(enabled=True)
    try:
        assert gc.get_threshold() == default  # a bring-up keeps the default
        heap.confirmed(all_confirmed=True)  # steady state: small young collections
        assert gc.get_threshold()[0] == YOUNG_THRESHOLD < default[0]
        keep = [[i] for i in range(50_000)]
        heap.settle("test")
        assert gc.get_freeze_count() >= len(keep) and heap.freezes == 2
        young = [[i] for i in range(1000)]
        gc.collect()  # a full collection: its survivors join the frozen
        assert heap.full_collections >= 1 and gc.get_freeze_count() >= len(keep) + len(young)
        more = [[i] for i in range(1000)]
        gc.collect(1)  # a young one too
        assert heap.young_passes >= 1 and gc.get_freeze_count() >= len(keep) + len(young) + len(more)
        last = [[i] for i in range(1000)]
        passes = heap.young_passes
        gc.collect(0)  # the youngest too: its survivors are frozen, not kept for a bigger walk later
        assert heap.young_passes == passes + 1
        assert gc.get_freeze_count() >= len(keep) + len(young) + len(more) + len(last)
        assert not gc.get_objects(generation=1) and not gc.get_objects(generation=2)
        assert heap.as_dict()["enabled"] is True
    finally:
        heap.close()
        gc.unfreeze()
    assert gc.get_threshold() == default
    off = Heap(enabled=False)
    assert off.settle("nothing") == 0 and off.as_dict()["freezes"] == 0
