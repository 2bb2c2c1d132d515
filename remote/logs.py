"""Resumable log streams: follow a container's log across SSH disconnects, losing nothing.

The cursor is Docker's per-line receive timestamp (ns). A resumed stream asks Docker for lines
``since`` the cursor (Docker takes a float of seconds, so it may repeat a few lines before and
at the cursor); :class:`LogCursor` drops lines older than the cursor and, at exactly the
cursor's timestamp, the texts already delivered (as a multiset), so each line comes once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from remote.backoff import Backoff
from remote.docker import Engine, LogLine
from remote.errors import ConnectionLost, TransportError

log = logging.getLogger("gpuconsole.remote.logs")


@dataclass
class LogCursor:
    """Position in a log: the last timestamp delivered and the texts delivered at it.

    Attributes:
        ts_ns: last delivered timestamp (ns since the epoch), or -1 before any line.
        delivered: texts delivered at ``ts_ns``, with counts.
    """

    ts_ns: int = -1
    delivered: dict[str, int] = field(default_factory=dict)
    _skip: dict[str, int] = field(default_factory=dict, repr=False)

    def rewind(self) -> None:
        """Prepare for a resume: the lines delivered at the cursor will come again."""
        self._skip = dict(self.delivered)

    def accept(self, line: LogLine) -> bool:
        """Whether ``line`` is new; if so the cursor advances past it."""
        if line.ts_ns < self.ts_ns:
            return False
        if line.ts_ns == self.ts_ns:
            if self._skip.get(line.text, 0) > 0:
                self._skip[line.text] -= 1
                return False
            self.delivered[line.text] = self.delivered.get(line.text, 0) + 1
            return True
        self.ts_ns = line.ts_ns
        self.delivered = {line.text: 1}
        self._skip = {}
        return True

    @property
    def since_ns(self) -> int | None:
        """The ``since`` to resume from, or ``None`` before any line."""
        return self.ts_ns if self.ts_ns >= 0 else None


PACE_LINES = 512
"""A batch this large is a burst: the next is read without pacing (see ``pace_s``)."""


async def follow_container(
    engine: Engine,
    container_id: str,
    cursor: LogCursor | None = None,
    *,
    follow: bool = True,
    tail: int | None = None,
    max_outage: float = 300.0,
    on_state: Callable[[str, str | None], None] | None = None,
) -> AsyncIterator[LogLine]:
    """Yield every line of a container once, resuming after dropped connections: one line at
    a time over :func:`follow_container_batches` (same arguments, same errors)."""
    async for batch in follow_container_batches(
        engine,
        container_id,
        cursor,
        follow=follow,
        tail=tail,
        max_outage=max_outage,
        on_state=on_state,
    ):
        for line in batch:
            yield line


async def follow_container_batches(
    engine: Engine,
    container_id: str,
    cursor: LogCursor | None = None,
    *,
    follow: bool = True,
    tail: int | None = None,
    max_outage: float = 300.0,
    on_state: Callable[[str, str | None], None] | None = None,
    pace_s: float = 0.0,
) -> AsyncIterator[list[LogLine]]:
    """Yield every line of a container once, in batches as they arrive (never empty),
    resuming after dropped connections.

    Args:
        engine: the container's host engine.
        cursor: where to start (updated as lines are yielded); ``None`` = from the beginning.
        follow: keep following until the container has exited and its last line was read.
        tail: only the last N lines on the first request.
        max_outage: give up after the host stayed unreachable this many seconds.
        on_state: called with ``("reconnecting", why)`` once when the stream drops (not
            again for each failed attempt of the same outage) and with ``("following",
            None)`` once it resumed: the host's engine answered again about the container
            and the stream was asked for again from the cursor.
        pace_s: after a batch of fewer than :data:`PACE_LINES` lines, wait this long
            before reading on, so what the container writes meanwhile arrives as one batch
            (a job writing every 10 ms wakes the reader, its parser and everything after
            it 100 times a second without it); a burst is read without waiting.

    Raises:
        TransportError: the host stayed unreachable longer than ``max_outage``.
    """
    cursor = cursor or LogCursor()
    first = True
    outage_started: float | None = None
    loop = asyncio.get_running_loop()
    backoff = Backoff(0.5, 5.0)
    reconnecting = False  # an outage was announced and has not been resolved yet
    accept = cursor.accept

    def announce(why: str) -> None:
        nonlocal reconnecting
        if not reconnecting:
            reconnecting = True
            if on_state is not None:
                on_state("reconnecting", why)

    while True:
        cursor.rewind()
        try:
            if reconnecting:
                # the engine answers about the container again (raises while the host is
                # still away): the stream resumes from the cursor
                again = await engine.inspect(container_id)
                if again is None or again.status == "removing":
                    return  # removed meanwhile: nothing left to resume
                reconnecting = False
                if on_state is not None:
                    on_state("following", None)
            async for batch in engine.log_batches(
                container_id,
                since_ns=cursor.since_ns,
                tail=tail if first else None,
                follow=follow,
            ):
                fresh = [line for line in batch if accept(line)]
                if fresh:
                    yield fresh
                if pace_s and len(batch) < PACE_LINES:
                    await asyncio.sleep(pace_s)
            first = False
            outage_started = None
            if not follow:
                return
            dropped = engine.transport.drop_reason()
            if dropped is not None:
                # the connection under the stream died (the host stopped answering): say
                # why, then reconnect and resume from the cursor
                announce(dropped)
                outage_started = loop.time()
                continue
            info = await engine.inspect(container_id)
            if info is None or info.status == "removing":
                return  # removed (``docker rm -f`` ends the stream as it removes)
            if info.status in ("exited", "dead"):
                # one last read without follow: lines written between the stream's end and exit
                cursor.rewind()
                async for batch in engine.log_batches(container_id, since_ns=cursor.since_ns):
                    fresh = [line for line in batch if accept(line)]
                    if fresh:
                        yield fresh
                return
            # the stream ended while the container runs: the connection under it dropped
            # (and was re-opened by the inspect above); resume from the cursor
            announce("log stream ended while the container runs")
            backoff.reset()
        except (ConnectionLost, TransportError) as e:
            now = loop.time()
            outage_started = outage_started or now
            if now - outage_started > max_outage:
                raise
            log.info("[%s] log stream interrupted (%s); reconnecting", engine.host, e)
            announce(engine.transport.drop_reason() or e.message)
            await backoff.sleep()
            try:
                await engine.transport.connect()
            except TransportError as ce:
                log.debug("[%s] reconnect failed: %s", engine.host, ce)
