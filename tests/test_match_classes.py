"""Destination classes of the batch engine (hpcfabric/verify/engine/batch.py MatchClasses, writer rule in
engine/writer.py) against the reference pipeline.

Per switch, every host MAC's *behaviour* -- what both variants (as installed, every PORT_STATE entry paused)
do with it on every line (ingress port x arrival PCP, untagged included) through
:class:`~hpcfabric.verify.reference.pipeline.Pipeline` -- must be one per class (sound: no class merges
destinations some switch treats differently). On conditional Flattened Butterflies the writer rule reaches the
fewest classes any sound rule can give: one per behaviour (bench/match_classes_rules.py). A writer rule that
lets ``eth_dst`` + ``metadata`` entries capture whatever arrives merges unlike destinations, and is caught.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_policies import compiled

from hpcfabric.errors import VerificationError
from hpcfabric.verify.engine import forward_data_flows
from hpcfabric.verify.engine import writer
from hpcfabric.verify.reference.pipeline import Frame, Pipeline, PipelineError
from hpcfabric.verify.scenarios import flip_port_states
from hpcfabric.verify.union.choices import Choices


def _behaviour(pipes, ports, mac):
    out = []
    for pipe in pipes:
        for port in ports:
            for pcp in (None, 0, 1, 2):
                try:
                    r = pipe.process(Frame(in_port=port, eth_src=0x1, eth_dst=mac, vlan_pcp=pcp))
                    out.append((tuple((p, f.vlan_pcp) for p, f in r.outputs), tuple(r.to_ingress), r.punted))
                except PipelineError as err:
                    out.append(("error", type(err).__name__))
    return tuple(out)


def _classes_vs_behaviours(name, routing, switches):
    """Per switch checked: (classes of the host MACs, behaviours, classes whose MACs behave unlike)."""
    comp = compiled(name, routing)
    relevant = forward_data_flows(comp, "test", VerificationError, actions=True)
    macs = np.array([comp.plan.host_mac[h.name] for h in comp.fabric.hosts], dtype=np.uint64)
    ch = Choices(comp, relevant, macs)
    rows = []
    for i, sw in enumerate(ch.names[:switches]):
        flows = comp.flows(sw)
        pipes = (Pipeline(flows), Pipeline(flip_port_states(flows)))
        ports = range(1, max(comp.fabric.ports(sw), default=0) + 1)
        seen: dict[int, set] = {}
        for t, mac in enumerate(macs.tolist()):
            seen.setdefault(int(ch.cls[i, t]), set()).add(_behaviour(pipes, ports, mac))
        every = set().union(*seen.values())
        rows.append((len(seen), len(every), sum(len(b) > 1 for b in seen.values())))
    return rows


@pytest.mark.parametrize("name,routing,switches", [
    ("fb-2d-4x4", "conditional", 4), ("fb-3d-4x4x4", "conditional", 3), ("fb-3d-4x4x4", "valiant", 2),
    ("dragonfly-a4-p2-h2", "conditional", 4),
])
def test_classes_decide_alike_and_reach_the_behaviours(name, routing, switches):
    rows = _classes_vs_behaviours(name, routing, switches)
    assert all(unlike == 0 for _, _, unlike in rows), rows
    if name.startswith("fb-"):  # the writer rule: one class per behaviour
        assert all(c == b for c, b, _ in rows), rows
    if (name, routing) == ("fb-3d-4x4x4", "conditional"):  # 67 under the capture rule (docs/routing.md)
        assert all(c == 40 for c, _, _ in rows), rows


def test_a_writer_rule_that_ignores_metadata_merges_unlike_destinations(monkeypatch):
    """Mutation: every metadata condition deemed satisfied by every arriving value."""
    build = writer.WriterRule.__init__

    def every_value_satisfies(self, *args):
        build(self, *args)
        self.sat[:] = np.uint64(0xFFFFFFFFFFFFFFFF)

    monkeypatch.setattr(writer.WriterRule, "__init__", every_value_satisfies)
    rows = _classes_vs_behaviours("fb-3d-4x4x4", "conditional", 2)
    assert any(unlike > 0 for _, _, unlike in rows), rows


def test_more_values_than_bits_keeps_the_capture_rule(monkeypatch):
    """Past 64 reachable metadata values the writer rule is off: the capture rule's 68 classes, still sound."""
    monkeypatch.setattr(writer, "MAX_VALUES", 2)
    rows = _classes_vs_behaviours("fb-3d-4x4x4", "conditional", 2)
    assert all(unlike == 0 for _, _, unlike in rows), rows
    assert all(c == 67 for c, _, _ in rows), rows
