"""Bring-up storm (controller.storm): LLDP and polling wait while many switches install and progress."""

from __future__ import annotations

from types import SimpleNamespace

from hpcfabric.controller import storm
from hpcfabric.controller.storm import Storm


def fabric(n: int):
    sws = {i: SimpleNamespace(connected=False, confirmed=False) for i in range(n)}
    return SimpleNamespace(switches=sws), sws


def test_a_progressing_storm_holds_side_work_and_a_stalled_one_does_not():
    app, sws = fabric(40)
    st = Storm(app)
    assert not st.holding(0.0)  # nothing connected
    for i in range(storm.SYNCS):
        sws[i].connected = True
    assert not st.holding(1.0)  # a few switches installing is no storm
    for sw in sws.values():
        sw.connected = True
    assert st.holding(2.0)
    assert st.holding(2.0 + storm.STALL_S - 0.1)
    assert not st.holding(2.0 + storm.STALL_S + 0.1)  # no switch confirmed for STALL_S: stalled
    sws[0].confirmed = True
    assert st.holding(13.0)  # progress again: holds again
    for i in range(1, 40 - storm.SYNCS):
        sws[i].confirmed = True
    assert not st.holding(14.0)  # SYNCS left installing: over
    assert st.since is None


def test_a_storm_holds_at_most_max_s_however_it_progresses():
    app, sws = fabric(1000)
    st = Storm(app)
    for sw in sws.values():
        sw.connected = True
    t, k = 0.0, 0
    while t < storm.MAX_S - 1:
        sws[k].confirmed = True  # one confirmation per second: always progressing
        k += 1
        assert st.holding(t)
        t += 1.0
    sws[k].confirmed = True
    assert not st.holding(storm.MAX_S + 0.5)
