"""The log panes' frame clock (console/app/widgets/frameclock.py): frames at most every
100 ms, fewer under a flood so their cost stays within budget, none just after a key."""

from __future__ import annotations

import pytest

from console.app.widgets.frameclock import FrameClock


def test_first_frame_is_at_once_then_at_the_fastest_rate() -> None:
    c = FrameClock(min_s=0.1, max_s=0.5, budget=0.1, quiet_s=0.06)
    assert c.delay(100.0, 100.0) == 0.0
    c.started(100.0)
    c.painted(0.004)  # 4 ms a frame: 4 % of a core at 10 frames/s, under budget
    assert c.interval == pytest.approx(0.1)
    assert c.delay(100.03, 100.03) == pytest.approx(0.07)
    assert c.delay(100.2, 100.15) == 0.0  # overdue: now


def test_a_flood_lengthens_the_interval_to_keep_the_budget_and_no_further_than_max() -> None:
    c = FrameClock(min_s=0.1, max_s=0.5, budget=0.1, quiet_s=0.06)
    c.started(0.0)
    c.painted(0.03)  # 30 ms a frame -> one frame per 300 ms keeps 10 %
    assert c.interval == pytest.approx(0.3)
    c.started(0.3)
    c.painted(0.05)  # smoothed: half the new cost, half the estimate
    assert c.cost == pytest.approx(0.04)
    assert c.interval == pytest.approx(0.4)
    for t in range(2, 12):
        c.started(float(t))
        c.painted(0.2)
    assert c.interval == pytest.approx(0.5)  # frames are skipped, the newest still shows
    for t in range(12, 30):
        c.started(float(t))
        c.painted(0.001)
    assert c.interval == pytest.approx(0.1)  # back to full rate once the flood is over


def test_a_key_holds_the_next_frame_but_never_past_max() -> None:
    c = FrameClock(min_s=0.1, max_s=0.5, budget=0.1, quiet_s=0.06)
    c.started(10.0)
    c.painted(0.001)
    c.key(10.08)
    # due at 10.1, but the key asked for quiet until 10.14
    assert c.delay(10.09, 10.05) == pytest.approx(0.05)
    # a frame wanted since long ago is not held (a held key never freezes the panes)
    assert c.delay(10.09, 9.5) == pytest.approx(0.01)
    # the running frame's next pane waits out the quiet, unless the frame is max_s old
    c.started(20.0)
    c.key(20.01)
    assert c.hold(20.02) == pytest.approx(0.05)
    assert c.hold(20.08) == 0.0
    c.key(20.6)
    assert c.hold(20.61) == 0.0
