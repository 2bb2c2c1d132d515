"""A followed log says once when its stream drops and once when it resumes (remote/logs.py),
and the CLI prints those two moments on stderr with the node's host (console/cli/base.py).

The engine here is a fake (``FakeLogEngine``): an outage of several failed attempts must be
scripted exactly; ``tests/integration/test_streams.py`` cuts a real SSH connection.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, cast

import pytest

from console.cli.base import FollowStateLines
from console.events import FollowStateChanged
from console.jobs.store import JobRecord, NodeRecord
from remote.docker import Engine, LogLine
from remote.errors import ConnectionLost
from remote.logs import follow_container_batches


@dataclass
class FakeInfo:
    status: str


class FakeLogEngine:
    """Scripted answers: ``streams`` (one per log request: lines, then ``"drop"`` to raise
    ConnectionLost or ``"end"``) and ``inspects`` (a status, ``None`` or ``"drop"``)."""

    host = "a"

    def __init__(self, streams: list[tuple[list[LogLine], str]], inspects: list[Any]) -> None:
        self.streams = streams
        self.inspects = inspects
        self.transport = self
        self.since: list[int | None] = []
        self.dropped: list[str] = []

    async def connect(self) -> None:
        return None

    def drop_reason(self) -> str | None:
        """What the SSH transport says while its connection is down (scripted, once)."""
        return self.dropped.pop(0) if self.dropped else None

    async def log_batches(
        self,
        container_id: str,
        *,
        since_ns: int | None = None,
        tail: int | None = None,
        follow: bool = False,
    ) -> AsyncIterator[list[LogLine]]:
        self.since.append(since_ns)
        lines, how = self.streams.pop(0)
        if lines:
            yield lines
        if how == "drop":
            raise ConnectionLost("a", "connection lost during the log stream")

    async def inspect(self, container_id: str) -> FakeInfo | None:
        answer = self.inspects.pop(0)
        if answer == "drop":
            raise ConnectionLost("a", "cannot connect to 127.0.0.11:22: connection refused")
        return None if answer is None else FakeInfo(answer)


L1, L2, L3 = LogLine(1, "one"), LogLine(2, "two"), LogLine(3, "three")


async def follow(engine: FakeLogEngine) -> tuple[list[str], list[tuple[str, str | None]]]:
    states: list[tuple[str, str | None]] = []
    texts = []
    async for batch in follow_container_batches(
        cast(Engine, engine), "c0ffee", on_state=lambda s, why: states.append((s, why))
    ):
        texts += [ln.text for ln in batch]
    return texts, states


async def test_one_reconnecting_and_one_following_per_outage(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("remote.backoff.random.random", lambda: 0.0)  # shortest backoff
    engine = FakeLogEngine(
        streams=[([L1], "drop"), ([L1, L2], "end"), ([L3], "end")],
        # the stream drops, two more attempts fail, then the engine answers; the container
        # exits at the end
        inspects=["drop", "drop", "running", "exited"],
    )
    texts, states = await follow(engine)
    assert texts == ["one", "two", "three"]  # nothing lost, nothing repeated
    assert states == [
        ("reconnecting", "host a: connection lost during the log stream"),
        ("following", None),
    ]
    assert engine.since == [None, 1, 2]  # resumed from the cursor


async def test_a_stream_that_ends_while_the_container_runs_reconnects_once() -> None:
    engine = FakeLogEngine(
        streams=[([L1], "end"), ([L2], "end"), ([], "end")],
        inspects=["running", "running", "exited"],
    )
    texts, states = await follow(engine)
    assert texts == ["one", "two"]
    assert states == [
        ("reconnecting", "log stream ended while the container runs"),
        ("following", None),
    ]


def job() -> JobRecord:
    nodes = [
        NodeRecord("x-123456", r, h, f"gpuconsole-x-123456-n{r}") for r, h in ((0, "a"), (1, "b"))
    ]
    return cast(JobRecord, type("J", (), {"id": "x-123456", "nodes": nodes})())


def test_cli_prints_each_outage_once_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    lines = FollowStateLines(job())
    for ev in [
        FollowStateChanged("x-123456", 1, "reconnecting", "host b: connection lost"),
        FollowStateChanged("x-123456", 1, "reconnecting", "host b: connection refused"),
        FollowStateChanged("other-000000", 0, "reconnecting", "not this job"),
        FollowStateChanged("x-123456", 0, "following"),  # no outage on n0: nothing to say
        FollowStateChanged("x-123456", 1, "following"),
        FollowStateChanged("x-123456", 1, "following"),
    ]:
        lines(ev)
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == [
        "n1 on b: log stream lost (host b: connection lost); reconnecting",
        "n1 on b: log stream resumed",
    ]


async def test_a_host_that_stopped_answering_is_said_so_and_the_stream_resumes() -> None:
    """The keepalives gave up on the connection under the stream (a black-holed host): the
    stream ended, and the follow says the host stopped answering, not that the stream ended
    while the container runs; it resumes from the cursor once the engine answers again."""
    engine = FakeLogEngine([([L1], "end"), ([L2], "end"), ([], "end")], ["running", "exited"])
    engine.dropped = ["the host stopped answering, last data 20 s ago"]
    texts, states = await follow(engine)
    assert texts == ["one", "two"]
    assert states == [
        ("reconnecting", "the host stopped answering, last data 20 s ago"),
        ("following", None),
    ]
    assert engine.since == [None, 1, 2]
