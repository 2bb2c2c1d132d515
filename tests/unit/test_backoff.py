"""remote.backoff.Backoff: the delays of the retry loops (log follows, the fleet monitor,
watch's notifier), with the random factor pinned at both ends of its range."""

from __future__ import annotations

import pytest

from remote.backoff import Backoff


def delays(b: Backoff, n: int) -> list[float]:
    return [round(b.next(), 6) for _ in range(n)]


def test_doubles_up_to_the_cap_and_starts_over_after_reset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("remote.backoff.random.random", lambda: 0.5)  # factor 1
    b = Backoff(0.5, 5.0)
    assert delays(b, 6) == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
    b.reset()
    assert delays(b, 2) == [0.5, 1.0]


@pytest.mark.parametrize("rand, factor", [(0.0, 0.5), (1.0, 1.5)])
def test_jitter_spreads_each_delay(
    monkeypatch: pytest.MonkeyPatch, rand: float, factor: float
) -> None:
    monkeypatch.setattr("remote.backoff.random.random", lambda: rand)
    assert delays(Backoff(1.0, 30.0), 3) == [factor, 2 * factor, 4 * factor]
    narrow = 1 + (factor - 1) * 0.4  # jitter 0.2: 0.8 .. 1.2
    assert delays(Backoff(1.0, 30.0, jitter=0.2), 2) == [round(narrow, 6), round(2 * narrow, 6)]


def test_a_first_step_above_the_cap_is_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("remote.backoff.random.random", lambda: 0.5)
    assert delays(Backoff(10.0, 2.0), 2) == [2.0, 2.0]
    assert delays(Backoff(0.0, 2.0), 2) == [0.0, 0.0]


def test_bad_arguments_are_refused() -> None:
    for args, kw in [((1.0, 2.0), {"jitter": 1.5}), ((-1.0, 2.0), {}), ((1.0, -2.0), {})]:
        with pytest.raises(ValueError, match="Backoff"):
            Backoff(*args, **kw)
