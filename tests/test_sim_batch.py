"""The batched lookups of the tick loop (hpcfabric.sim.kernel_batch) give the results of the
one-frame-at-a-time path bit for bit: same seed -> same counters, latency histogram, per-frame
trace and final buffer state, on the 72-host Dragonfly (a second or two per case)."""

from __future__ import annotations

import numpy as np
import pytest

from hpcfabric.sim.engine import Simulator
from hpcfabric.sim.params import SimParams
from hpcfabric.sim.sweep import Routers
from hpcfabric.sim.traffic import Traffic
from hpcfabric.topology.loader import load_topology

DF = "topologies/dragonfly-a4-p2-h2.yaml"


@pytest.fixture(scope="module")
def df() -> Routers:
    return Routers(load_topology(DF))


def _run(df: Routers, name: str, pattern: str, load: float, p: SimParams, seed: int, batch: bool) -> Simulator:
    sim = Simulator(df.router(name), Traffic(df.fabric, pattern), Routers.params_for(name, p), seed=seed, trace=True,
                    batch=batch)
    sim.res = sim.run(load)
    return sim


CASES = [("MIN", "uniform", 0.4, "shared"), ("MIN", "uniform", 1.0, "shared"), ("VAL", "uniform", 0.9, "shared"),
         ("MIN", "adv", 0.5, "shared"), ("VAL", "adv", 0.6, "shared"), ("COND-ideal", "adv", 0.3, "shared"),
         ("COND-switch", "adv", 0.4, "shared"), ("MIN", "uniform", 0.9, "fifo"), ("VAL", "adv", 0.6, "voq"),
         ("MIN", "uniform", 0.9, "iq"), ("PB", "adv", 0.5, "shared"), ("PB", "uniform", 0.8, "shared"),
         ("VAL-R", "adv", 0.6, "shared"), ("UGAL-L", "adv", 0.6, "iq"), ("VAL-R", "uniform", 0.9, "iqvc")]


@pytest.mark.parametrize("name,pattern,load,switch", CASES)
def test_batched_lookups_equal_the_per_frame_path(df: Routers, name: str, pattern: str, load: float, switch: str) -> None:
    p = SimParams(warmup_slots=300, window_slots=600, drain_slots=600, switch=switch)
    for seed in (1, 2, 3):
        ref = _run(df, name, pattern, load, p, seed, batch=False)
        new = _run(df, name, pattern, load, p, seed, batch=True)
        assert ref.res.hops > 10_000 and ref.res.delivered > 1_000  # the case moves frames
        assert np.array_equal(ref.c, new.c)  # every counter: generated .. delivered, hops, flips, pool peaks
        assert np.array_equal(ref.s.lat, new.s.lat)  # latency histogram
        assert all(np.array_equal(a, b) for a, b in zip(ref.trace, new.trace))  # (src, dst, ticks) per frame
        for f in ("occ", "hr", "qlen", "demand", "busy", "sqlen", "flipped"):
            assert np.array_equal(getattr(ref.s, f), getattr(new.s, f)), f
        a, b = vars(ref.res).copy(), vars(new.res).copy()
        a.pop("wall_s"), b.pop("wall_s")
        assert repr(a) == repr(b)  # repr: nan latencies compare equal
