"""The paced, adaptive reachability sweep (mininet/paced_ping.py).

Pure part (no Mininet): :class:`AdaptivePacer` driven by :func:`sweep` with probes whose answers are
given per pass -- a pair lost once and answered in a retry pass counts as reached (and retried), a pair
never answering counts as lost; the width and interval back off on loss and widen again when clean;
no more than ``width`` probes run at once. The same sweep against real Mininet hosts is in
tests/test_mininet_reach.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "mininet"))

from paced_ping import AdaptivePacer, Pacing, fping_cmd, parse_alive, sweep  # noqa: E402  (mininet/paced_ping.py)

HOSTS = [f"h{i}" for i in range(10)]


def all_pairs() -> dict[str, list[str]]:
    return {s: [d for d in HOSTS if d != s] for s in HOSTS}


class Probes:
    """Probes that finish on the next poll; ``answers(pass_no, src, dst)`` decides who answers."""

    def __init__(self, pacer: AdaptivePacer, answers) -> None:  # noqa: ANN001
        self.pacer, self.answers = pacer, answers
        self.running = self.max_running = 0
        self.intervals: list[tuple[int, float]] = []

    def start(self, src: str, dsts: list[str], interval: float):  # noqa: ANN201
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        self.intervals.append((self.pacer.pass_no, interval))
        return (self.pacer.pass_no, src, dsts)

    def poll(self, handle) -> list[str]:  # noqa: ANN001
        self.running -= 1
        pass_no, src, dsts = handle
        return [d for d in dsts if self.answers(pass_no, src, d)]


def run(answers, pacing: Pacing | None = None) -> tuple[dict, Probes]:  # noqa: ANN001
    pacer = AdaptivePacer(all_pairs(), pacing or Pacing(width=3, rate_pps=750, settle_s=0))
    probes = Probes(pacer, answers)
    return sweep(pacer, probes.start, probes.poll, tick=0), probes


def test_all_answer_in_one_pass() -> None:
    res, probes = run(lambda p, s, d: True)
    assert res["pairs"] == 90 and res["reached"] == 90 and res["lost"] == 0
    assert res["retried"] == 0 and res["passes"] == 1 and res["probes"] == 90
    assert probes.max_running <= 32


def test_pair_lost_once_then_answered_counts_as_reached() -> None:
    res, probes = run(lambda p, s, d: not (d == "h3" and p == 0))
    assert res["lost"] == 0 and res["reached"] == 90
    assert res["retried"] == 9 and res["retried_reached"] == 9 and res["passes"] == 2
    assert res["probes"] == 90 + 9  # only the lost pairs are probed again
    assert probes.intervals[0] == (0, 4.0)  # 3 probes at once, 750/s together: one request every 4 ms each
    assert all(i > 4.0 for p, i in probes.intervals if p == 1)  # the retry pass runs slower


def test_pair_never_answering_is_lost_after_every_pass() -> None:
    res, _ = run(lambda p, s, d: d != "h3", Pacing(width=3, rate_pps=750, settle_s=0, passes=3))
    assert res["lost"] == 9 and res["reached"] == 81 and res["passes"] == 3
    assert sorted(res["lost_pairs"]) == sorted(f"{s}->h3" for s in HOSTS if s != "h3")
    assert res["probes"] == 90 + 9 + 9


def test_loss_cuts_the_rate_and_clean_probes_raise_it() -> None:
    pacer = AdaptivePacer(all_pairs(), Pacing(width=8, rate_pps=1000, max_rate_pps=1050, increase_pps=50))
    src, dsts, interval = pacer.take()
    assert interval == 8.0
    pacer.done(src, dsts, dsts[: len(dsts) // 2])  # half lost
    assert pacer.rate == pytest.approx(700) and pacer.backoffs == 1
    src, dsts, _ = pacer.take()
    pacer.done(src, dsts, dsts)
    assert pacer.rate == pytest.approx(750)
    for _ in range(8):
        src, dsts, _ = pacer.take()
        pacer.done(src, dsts, dsts)
    assert pacer.rate == 1050  # max_rate_pps
    assert pacer.interval_ms == pytest.approx(8000 / 1050)


def test_probes_are_chunks_of_interleaved_rotated_targets() -> None:
    pacer = AdaptivePacer(all_pairs(), Pacing(width=32, chunk=4))
    units = [pacer.take()[:2] for _ in range(len(pacer.queue))]
    assert all(len(d) <= 4 for _, d in units) and len(units) == 10 * 3  # 9 targets: chunks of 4, 4, 1
    assert [s for s, _ in units[:10]] == HOSTS  # the first chunk of every source first
    assert len({d[0] for _, d in units[:10]}) >= 9  # rotated: they start at different hosts
    assert sorted((s, x) for s, d in units for x in d) == sorted((s, d) for s, ds in all_pairs().items() for d in ds)


def test_width_bounds_concurrent_probes() -> None:
    pacer = AdaptivePacer(all_pairs(), Pacing(width=2))
    taken = [pacer.take(), pacer.take()]
    assert not pacer.can_start()
    pacer.done(taken[0][0], taken[0][1], taken[0][1])
    assert pacer.can_start()


def test_fping_command_and_output() -> None:
    cmd = fping_cmd(["10.0.0.2", "10.0.0.3"], 4.4, Pacing(retries=2, timeout_ms=300))
    assert cmd[:3] == ["fping", "-4", "-e"] and "-r" in cmd and cmd[cmd.index("-r") + 1] == "2"
    assert cmd[cmd.index("-i") + 1] == "4" and cmd[cmd.index("-t") + 1] == "300" and cmd[-2:] == ["10.0.0.2", "10.0.0.3"]
    out = "10.0.0.2 is alive (0.31 ms)\n10.0.0.3 is unreachable\n10.0.0.4 is alive\n"
    assert parse_alive(out) == {"10.0.0.2": 0.31, "10.0.0.4": None}


def test_bad_pacing_is_refused() -> None:
    with pytest.raises(ValueError, match="width"):
        Pacing(width=0)
    with pytest.raises(ValueError, match="rate_pps"):
        Pacing(rate_pps=0)
