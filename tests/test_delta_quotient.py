"""The incremental proof base from the symmetry quotient equals the dense one (issue 27 at 300k hosts).

* built: every column's reach, the dependency graph with its counts and the verdict of the base walked one column
  per orbit (:mod:`hpcfabric.verify.incremental.quotient`) equal the base walked column by column, on the shipped
  Dragonfly (xor groups) and Flattened Butterfly (shifts) configs and a palmtree Dragonfly (rotate-groups, as at
  300k: 19 groups, a power of the generator needs five lifted maps);
* through random failure sequences: the planner on the quotient base makes the plans the dense base makes
  (verdicts, changed switches, waves), and after every applied plan both bases hold the same reach and graph;
* the mutations: the mapping off by one rotation (columns' elements, or the edges' canonicalising element), or
  a generator kept that does not commute with the decisions, make the comparison fail.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from hpcfabric.config import load_config
from hpcfabric.repair.plan import Repairer
from hpcfabric.topology.failures import Failures
from hpcfabric.verify.incremental import delta, quotient
from hpcfabric.verify.incremental.delta import ProofState
from hpcfabric.verify.incremental.deltawalk import NodeSet
from hpcfabric.verify.incremental.quotient import DenseReach, QuotientReach

from test_ops_fakes import ROOT

SHIPPED = ["dragonfly-a4-p2-h2.conf", "dragonfly-a2-p1-h1.conf", "fb-2d-4x4.conf", "fb-2d-3x3.conf"]


def config(name: str, tmp_path):
    """A shipped config, or ``palmtree``: the a4 config's settings on the a6-p3-h3 Dragonfly (palmtree)."""
    if name != "palmtree":
        return load_config(ROOT / "configs" / name)
    text = (ROOT / "configs" / "dragonfly-a4-p2-h2.conf").read_text()
    text = text.replace("../topologies/dragonfly-a4-p2-h2.yaml", str(ROOT / "topologies" / "dragonfly-a6-p3-h3.yaml"))
    path = tmp_path / "palmtree.conf"
    path.write_text(text)
    return load_config(path)


def rows(st) -> list[np.ndarray]:
    return [st.reached.row(c) for c in range(len(st.cols.want))]


def assert_same_base(dense, quot) -> None:
    assert np.array_equal(dense.graph.edges, quot.graph.edges)
    assert np.array_equal(dense.graph.count, quot.graph.count)
    assert np.array_equal(dense.extra, quot.extra)
    for c, (a, b) in enumerate(zip(rows(dense), rows(quot))):
        assert np.array_equal(a, b), dense.cols.names[c]


@pytest.fixture
def mapped(monkeypatch):
    """The quotient's reach mapped at each lookup (as at 300k), not materialised as every column's bit rows."""
    monkeypatch.setattr(quotient, "DENSE_REACH_BYTES", 0)


@pytest.mark.parametrize("name,rows", [(n, False) for n in SHIPPED + ["palmtree"]] + [("palmtree", True)])
def test_quotient_base_equals_the_dense_base(name, rows, tmp_path, monkeypatch):
    """``rows``: the small fabric's reach materialised from the representatives' rows (the default below 256 MB),
    else mapped at each lookup."""
    if not rows:
        monkeypatch.setattr(quotient, "DENSE_REACH_BYTES", 0)
    cfg = config(name, tmp_path)
    compiled = Repairer(cfg, prove=True).compiled
    dense = ProofState.build(compiled, symmetry=False)
    quot = ProofState.build(compiled)
    sym = quot.report["symmetry"]
    assert sym["used"] and not dense.report["symmetry"]["used"], sym
    assert isinstance(quot.reached, DenseReach if rows else QuotientReach)
    assert sym["columns_walked"] < len(quot.cols.want)
    if name == "palmtree":
        assert sym["kept"] == ["rotate-groups"] and sym["group"] == 19
    assert_same_base(dense, quot)
    for k in ("ok", "undelivered", "probe_failures", "acyclic", "cycle", "channels", "dependencies"):
        assert dense.report[k] == quot.report[k], k
    e = quot.graph.edges
    assert (quot.graph.rank[e >> 32] < quot.graph.rank[e & 0xFFFFFFFF]).all()  # the quotient's ranks hold


def random_failures(fabric, rng: random.Random) -> Failures:
    links = rng.sample(fabric.links, rng.randint(1, min(6, len(fabric.links) // 4)))
    switches = rng.sample([s.name for s in fabric.switches], rng.randint(0, 1))
    return Failures.of(fabric, [(link.a, link.a_port) for link in links], switches)


def summary(plan) -> tuple:
    v = plan.verdict
    return (plan.proven, v.get("verdict"), tuple(plan.changed), tuple(v.get("waves") or ()),
            tuple(sorted((v.get("undelivered") or {}).items())), v.get("acyclic"), tuple(v.get("cycle") or ()),
            v.get("columns"), v.get("new_edges"))


@pytest.mark.parametrize("name,seed,one_row", [("dragonfly-a4-p2-h2.conf", 27, False), ("fb-2d-4x4.conf", 5, True),
                                               ("palmtree", 3, False), ("palmtree", 4, True)])
def test_plans_equal_on_dense_and_quotient_bases(name, seed, one_row, tmp_path, monkeypatch, mapped):
    """Same failure sequence (each plan applied when proven, else discarded; sometimes back to no failures)
    through a planner on each base: same plans, and the same base after each step. ``rows``: the quotient's node
    sets hold one column as bit rows, the rest in sorted arrays (as at 300k)."""
    if one_row:  # both bases' node sets: one bit row, the other columns in sorted arrays
        monkeypatch.setattr(delta, "NODESET_BYTES", 1)
    cfg = config(name, tmp_path)
    fabric = cfg.fabric
    dense, quot = Repairer(cfg, prove=True), Repairer(cfg, prove=True)
    dense.state = ProofState.build(dense.compiled, symmetry=False)
    assert quot.base().report["symmetry"]["used"]
    rng = random.Random(seed)
    verdicts = set()
    for step in range(8):
        failures = random_failures(fabric, rng) if step % 3 != 2 else Failures.of(fabric, [], [])
        a, b = dense.plan(failures), quot.plan(failures)
        assert summary(a) == summary(b), (step, failures.describe())
        verdicts.add(a.verdict.get("verdict"))
        for rep, plan in ((dense, a), (quot, b)):
            (rep.apply if plan.proven else rep.discard)(plan)
        assert_same_base(dense.state, quot.state)
    assert verdicts & {"proven", "proven, pairs lost"}, verdicts


def test_off_by_one_rotation_is_caught(tmp_path, mapped):
    """The mutation: each column's element one rotation off, or each edge canonicalised one rotation off -- the
    base differs from the dense one (the equality tests above fail on it)."""
    cfg = config("palmtree", tmp_path)
    compiled = Repairer(cfg, prove=True).compiled
    dense = ProofState.build(compiled, symmetry=False)
    quot = ProofState.build(compiled)
    sym = quot.reached.sym
    nh = quot.cols.n_host_columns
    sym.col_exp[:nh, 0] += 1
    assert any(not np.array_equal(a, b) for a, b in zip(rows(dense), rows(quot)))
    sym.col_exp[:nh, 0] -= 1
    assert_same_base(dense, quot)  # undone: equal again

    def expanded():  # the dense graph canonicalised and expanded again: itself, if the mapping is right
        canon, counts = sym.canon_edges(dense.graph.edges, dense.graph.count)
        counts = counts // sym.size  # every edge of an orbit, each counted: one orbit's worth per edge
        return sym.expand(canon, counts)

    edges, count = expanded()
    assert np.array_equal(edges, dense.graph.edges) and np.array_equal(count, dense.graph.count)
    sym.canon_exp[:len(sym.canon_exp) // 2, 0] += 1  # half the switches: canonicalising element one rotation off
    edges, count = expanded()
    assert not (np.array_equal(edges, dense.graph.edges) and np.array_equal(count, dense.graph.count))


def test_not_commuting_generator_falls_back(tmp_path, monkeypatch):
    """A generator that does not commute with the decisions is not kept (the orbit check): the base is then the
    dense one, with the same verdict; a base built with failures in force is dense too."""
    from hpcfabric.verify.union import orbits

    cfg = config("dragonfly-a4-p2-h2.conf", tmp_path)
    compiled = Repairer(cfg, prove=True).compiled
    monkeypatch.setattr(orbits, "candidate_generators", lambda fabric: [])
    st = ProofState.build(compiled)
    assert not st.report["symmetry"]["used"] and st.report["ok"]
    monkeypatch.undo()
    failures = Failures.of(cfg.fabric, [(cfg.fabric.links[0].a, cfg.fabric.links[0].a_port)], [])
    plan = Repairer(cfg, prove=True).plan(failures)
    st = ProofState.build(plan.compiled)
    assert st.report["symmetry"] == {"used": False, "why": "failures in force"}


def test_node_set_rows_and_sorted_keys_agree():
    """A node set with every column a bit row and one with two rows (the rest sorted arrays): same answers."""
    rng = np.random.default_rng(27)
    n_cols, n = 40, 500
    wide, narrow = NodeSet(n_cols, n), NodeSet(n_cols, n, max_rows=2)
    for _ in range(30):
        keys = rng.integers(0, n_cols * n, rng.integers(0, 400))
        assert np.array_equal(wide.add(keys), narrow.add(keys))
        probe = rng.integers(0, n_cols * n, 300)
        assert np.array_equal(wide.has(probe), narrow.has(probe))
    assert len(narrow.more.runs) and narrow.used == 2
    for s in (wide, narrow):
        s.clear()
        assert not s.has(np.arange(n_cols * n)).any() and not s.bits.any()
