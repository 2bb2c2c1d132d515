"""The event bus: several subscribers, isolation of a failing one, coalescing; the observed
fleet state publishes samples and host state transitions."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import pytest

from console.events import (
    EventBus,
    HostStateChanged,
    LogLinesReceived,
    SampleReceived,
)
from console.fleet.observed import ObservedFleetState
from console.jobs.logs import JobLogLine

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"


def _samples() -> list[dict[str, object]]:
    with open(TRACES / "h200-load.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()][:5]


def test_failing_subscriber_is_isolated(caplog: pytest.LogCaptureFixture) -> None:
    bus = EventBus()
    got: list[str] = []

    def broken(ev: object) -> None:
        raise RuntimeError("view bug")

    bad = bus.subscribe(broken)
    bus.subscribe(lambda ev: got.append(type(ev).__name__))
    state = ObservedFleetState(bus, ["a"], 1.0)
    with caplog.at_level(logging.ERROR, logger="gpuconsole.events"):
        for s in _samples():
            state.on_sample("a", s)  # must not raise
    # the host is up: a subscriber's exception never reaches the fleet state
    assert state.hosts["a"].status == "ok"
    assert state.hosts["a"].samples == 5
    assert got == ["HostStateChanged"] + ["SampleReceived"] * 5
    assert bad.errors == 6
    assert "view bug" in caplog.text


def test_host_transitions_published_once() -> None:
    bus = EventBus()
    changes: list[tuple[str, str, str | None]] = []
    bus.subscribe(
        lambda ev: changes.append((ev.status, ev.previous, ev.reason)),  # type: ignore[union-attr]
        kinds=(HostStateChanged,),
    )
    state = ObservedFleetState(bus, ["a"], 1.0)
    s = _samples()
    state.on_sample("a", s[0], rx=100.0)
    state.on_sample("a", s[1], rx=101.0)
    assert changes == [("ok", "connecting", None)]
    state.tick(now=105.0)  # 4 s > 3 intervals of 1 s
    assert changes[-1] == ("stale", "ok", "no sample for 3 intervals")
    state.on_down("a", "connection refused")
    state.on_down("a", "connection refused")  # same reason: no second event
    assert changes[-1] == ("down", "stale", "connection refused")
    assert len(changes) == 3
    state.on_sample("a", s[2], rx=110.0)
    assert changes[-1] == ("ok", "down", None)


async def test_coalescing_subscriber_gets_latest_per_key_and_every_log_batch() -> None:
    bus = EventBus()
    slow: list[object] = []
    fast: list[object] = []
    bus.subscribe(slow.append, coalesce=True)
    bus.subscribe(fast.append)
    samples = _samples()
    for s in samples:
        bus.publish(SampleReceived("a", s))
        bus.publish(SampleReceived("b", s))
    line = JobLogLine(0, "a", 1, 10, "step 1")
    bus.publish(LogLinesReceived("j", (line,)))
    bus.publish(LogLinesReceived("j", (line, line)))
    assert len(fast) == 12 and slow == []
    await asyncio.sleep(0)  # the coalesced burst is delivered on the next loop turn
    kinds = [(type(e).__name__, getattr(e, "host", None)) for e in slow]
    assert kinds == [
        ("LogLinesReceived", None),
        ("LogLinesReceived", None),
        ("SampleReceived", "a"),
        ("SampleReceived", "b"),
    ]
    last_a = slow[2]
    assert isinstance(last_a, SampleReceived) and last_a.sample is samples[-1]


def test_unsubscribe() -> None:
    bus = EventBus()
    got: list[object] = []
    sub = bus.subscribe(got.append)
    bus.publish(LogLinesReceived("j", ()))
    sub.close()
    bus.publish(LogLinesReceived("j", ()))
    assert len(got) == 1
