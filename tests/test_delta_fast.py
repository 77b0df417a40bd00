"""The incremental proof's shortcuts give exactly what the plain searches give (fast27).

* the entries of a change (``deltawalk.entries``: candidates per upstream switch, class and egress, tried in
  batches) equal the plain search -- every below node against every reached state of its upstream switch,
  column by column -- on every check of a seeded sequence of repairs (Dragonfly and Flattened Butterfly);
* switches decided in batches (``redecide.BATCH``) decide exactly as one at a time;
* ``depgraph.unique`` / ``union`` equal ``np.unique`` / ``np.union1d``;
* ``ProofState.restore`` puts back the reach bit sets its journal recorded (fast27b);
* a changed switch's classes kept from before the change (``redecide.Prior``) decide exactly as deciding every
  class again (plan27).
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from hpcfabric.config import load_config
from hpcfabric.repair.plan import Repairer
from hpcfabric.topology.failures import NO_FAILURES, Failures
from hpcfabric.verify.incremental import delta, redecide
from hpcfabric.verify.union.choices import SLOT_BITS
from hpcfabric.verify.codes import PCP_SLOTS
from hpcfabric.verify.incremental.depgraph import topo_rank, union, unique

from test_ops_fakes import ROOT


def plain_entries(st, old, below_set, failed):
    """The reference: injections below the change, and every fabric arrival below it that some reached state of
    its upstream switch outside ``below`` sends into over a live link (not back out of its own ingress port)."""
    ch = st.ch
    n = ch.n_states
    below = below_set.keys()
    out = set()
    for key in below.tolist():
        c, z = divmod(key, n)
        zsw = int(np.searchsorted(ch.state_base, z, side="right") - 1)
        if st.host_state[z]:
            if ch.names[zsw] not in failed:
                out.add(key)
            continue
        up_sw, up_at = st.upstream(np.array([z]))
        si, at = int(up_sw[0]), int(up_at[0])
        if si < 0 or old.egress[at] != z:
            continue
        lo = int(ch.state_base[si])
        q = (at - lo) // PCP_SLOTS
        code = q << SLOT_BITS | (at - lo) % PCP_SLOTS
        for u in st.states_in_reach(si).tolist():
            uu = np.array([u])
            cc = np.array([c])
            if not st.in_reach(cc, uu)[0] or below_set.has(cc * n + uu)[0]:
                continue
            if old.back_ok[si] and not st.host_state[u] and (u - lo) // PCP_SLOTS == q:
                continue
            b, a = old.choices(cc, uu, np.array([si]))
            if b[0] == code or a[0] == code:
                out.add(key)
                break
    keys = np.array(sorted(out), dtype=np.int64)
    return keys // n, keys % n


@pytest.mark.parametrize("name", ["dragonfly-a4-p2-h2.conf", "fb-2d-3x3.conf"])
def test_entries_equal_the_plain_search(name, monkeypatch):
    cfg = load_config(ROOT / "configs" / name)
    fabric = cfg.fabric
    fast = delta.entries
    checked = []

    def both(st, old, below_set, failed):
        got = fast(st, old, below_set, failed)
        want = plain_entries(st, old, below_set, failed)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
        checked.append(len(got[0]))
        return got

    monkeypatch.setattr(delta, "entries", both)
    rep = Repairer(cfg, prove=True)
    rng = random.Random(4)
    for i in range(6):
        links = rng.sample(fabric.links, rng.randint(1, 4))
        switches = rng.sample([s.name for s in fabric.switches], rng.randint(0, 1))
        failures = NO_FAILURES if i == 3 else Failures.of(fabric, [(link.a, link.a_port) for link in links], switches)
        plan = rep.plan(failures)
        (rep.apply if plan.proven else rep.discard)(plan)
    assert len(checked) >= 6 and sum(checked) > 0


def test_batched_decisions_equal_one_at_a_time(monkeypatch):
    cfg = load_config(ROOT / "configs" / "dragonfly-a4-p2-h2.conf")
    fabric = cfg.fabric
    rep = Repairer(cfg, prove=True)
    st = rep.base()
    link = next(link for link in fabric.links if link.kind == "global")
    plan = rep.plan(Failures.of(fabric, [(link.a, link.a_port)], []))
    names = sorted(plan.changed)
    assert len(names) > 3
    relevant = {s: st.relevant[s] for s in names}  # the base committed the plan: its entries
    got = {}
    for batch in (1, 3, 1000):
        monkeypatch.setattr(redecide, "BATCH", batch)
        got[batch] = st.decide(plan.compiled, names, relevant)
    for s in names:
        for batch in (3, 1000):
            for f in ("col_cls", "states", "base", "alt"):
                assert np.array_equal(getattr(got[1][s], f), getattr(got[batch][s], f)), (s, batch, f)


def test_unique_and_union_as_numpy():
    rng = np.random.default_rng(27)
    for n in (0, 1, 2, 5, 1000):
        a = rng.integers(0, 50, n).astype(np.int64)
        b = rng.integers(0, 1 << 40, n).astype(np.int64)
        assert np.array_equal(unique(a), np.unique(a)) and np.array_equal(unique(b), np.unique(b))
        assert np.array_equal(union(a, b), np.union1d(a, b))


def plain_topo_rank(edges, n):
    """The reference: edges whose source has no incoming edge left removed level by level."""
    rank = np.zeros(n, dtype=np.int64)
    src, dst = edges >> 32, edges & 0xFFFFFFFF
    alive = np.ones(len(edges), dtype=bool)
    level = 0
    while alive.any():
        s, d = src[alive], dst[alive]
        free = ~np.isin(s, d)
        if not free.any():
            return None
        level += 1
        rank[d[free]] = np.maximum(rank[d[free]], level)
        alive[np.flatnonzero(alive)[free]] = False
    return rank


def test_topo_rank_as_the_level_by_level_removal():
    rng = np.random.default_rng(5)
    cyclic = 0
    for trial in range(60):
        n = int(rng.integers(2, 40))
        m = int(rng.integers(0, 3 * n))
        a, b = rng.integers(0, n, m), rng.integers(0, n, m)
        if trial % 2:  # a DAG: edges from lower to higher numbers
            a, b = np.minimum(a, b), np.maximum(a, b)
            a, b = a[a != b], b[a != b]
        edges = unique(a.astype(np.int64) << 32 | b.astype(np.int64))
        want, got = plain_topo_rank(edges, n), topo_rank(edges, n)
        cyclic += want is None
        assert (want is None and got is None) or np.array_equal(want, got), trial
    assert 5 < cyclic < 30


def reach_rows(st) -> np.ndarray:
    """Every column's reach bit set (dense or quotient base alike)."""
    return np.array([st.reached.row(c) for c in range(len(st.cols.want))])


@pytest.mark.parametrize("symmetry", [False, True])
def test_restore_puts_the_reach_back_from_the_journal(symmetry):
    """``snapshot`` keeps a journal mark instead of a copy of the reach bit sets (the quotient base: its flips):
    after commits (one plan's, then a nested snapshot's too), ``restore`` gives the bit sets, ``extra`` and the
    graph back exactly; a discarded plan leaves the base as it was and the next plan equal to a fresh one's
    (fast27b)."""
    cfg = load_config(ROOT / "configs" / "dragonfly-a4-p2-h2.conf")
    fabric = cfg.fabric
    rep = Repairer(cfg, prove=True)
    rep.state = st = delta.ProofState.build(rep.compiled, symmetry=symmetry)
    assert st.report["symmetry"]["used"] == symmetry
    before = (reach_rows(st), st.extra.copy(), st.graph.edges.copy())
    rng = random.Random(5)
    changed_any = False
    for _ in range(4):
        links = rng.sample(fabric.links, 3)
        plan = rep.plan(Failures.of(fabric, [(link.a, link.a_port) for link in links], []))
        if plan.proven:
            changed_any |= not np.array_equal(reach_rows(st), before[0])
            outer = st.snapshot()  # nested: a second change on top of the first, then back to the first
            mid = reach_rows(st)
            again = st.check(initial_tables(rep), plan.changed, mix=True)
            if again.acyclic:
                st.commit()
            st.restore(outer)
            assert np.array_equal(reach_rows(st), mid)
        rep.discard(plan)
        assert np.array_equal(reach_rows(st), before[0]) and np.array_equal(st.extra, before[1])
        assert np.array_equal(st.graph.edges, before[2])
    assert changed_any  # the plans did change the reach: the restores had something to undo


def initial_tables(rep):
    """The tables compiled without failures (a recovery), as a change on top of a plan's."""
    from dataclasses import replace

    return replace(rep.initial, tables=dict(rep.initial.tables), failures=NO_FAILURES)


@pytest.mark.parametrize("name", ["dragonfly-a4-p2-h2.conf", "fb-2d-4x4.conf"])
def test_kept_classes_equal_deciding_every_class(name, monkeypatch):
    cfg = load_config(ROOT / "configs" / name)
    fabric = cfg.fabric
    plain = delta.ProofState.decide
    kept = redecide._Reuse.take
    seen = {"switches": 0, "classes": 0, "kept": 0}

    def take(self, s, si, in_port_out, col_cls, n_cls, *rest):
        got = kept(self, s, si, in_port_out, col_cls, n_cls, *rest)
        seen["classes"] += n_cls
        seen["kept"] += 0 if got is None else n_cls - len(got)
        return got

    def both(self, compiled, names, relevant, extra=None, prior=None):
        got = plain(self, compiled, names, relevant, extra, prior)
        if prior:
            want = plain(self, compiled, names, relevant, extra, None)
            for s in names:
                for f in ("col_cls", "states", "base", "alt", "back_ok"):
                    assert np.array_equal(getattr(got[s], f), getattr(want[s], f)), (s, f)
            seen["switches"] += len(names)
        return got

    monkeypatch.setattr(redecide._Reuse, "take", take)
    monkeypatch.setattr(delta.ProofState, "decide", both)
    rep = Repairer(cfg, prove=True)
    rng = random.Random(4)
    for i in range(10):
        links = rng.sample(fabric.links, rng.randint(1, 6))
        switches = rng.sample([s.name for s in fabric.switches], rng.randint(0, 2))
        failures = NO_FAILURES if i % 4 == 3 else Failures.of(fabric, [(link.a, link.a_port) for link in links], switches)
        plan = rep.plan(failures)
        (rep.apply if plan.proven and rng.random() < 0.7 else rep.discard)(plan)
    assert seen["switches"] > 20 and 0 < seen["kept"] < seen["classes"], seen
