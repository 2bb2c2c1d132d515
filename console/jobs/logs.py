"""A job's logs: every node's container merged in time order, rank-tagged, archived locally.

Each node's stream is a :func:`remote.logs.follow_container` (resumes after a dropped SSH
connection, nothing lost or repeated). Lines are archived in the store as they arrive, so a
job's logs outlive its containers; a node whose container is gone is read from the archive.

Rank tags come from torchrun's per-worker prefix (``TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE``,
set by gpuconsole to ``[rank${rank}]:``, the global rank); lines torchrun itself prints carry
no rank.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import re
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Literal

from console.errors import StateError
from console.jobs.store import JobRecord, NodeRecord, Store
from console.session import Session
from remote.docker import LogLine
from remote.errors import GpuConsoleError
from remote.logs import LogCursor, follow_container, follow_container_batches

log = logging.getLogger("gpuconsole.logs")

_RANK_RE = re.compile(r"^\[rank(\d+)\]:")


@dataclass(frozen=True, slots=True)
class JobLogLine:
    """One line of a job's log.

    Attributes:
        node_rank: the node (container) it came from.
        host: that node's host.
        rank: torchrun's global rank of the worker that wrote it, or ``None`` (torchrun itself).
        ts_ns: Docker's timestamp, ns since the epoch.
        text: the line, without the rank prefix.
    """

    node_rank: int
    host: str
    rank: int | None
    ts_ns: int
    text: str

    def tag(self) -> str:
        """``[n0 r1]`` or ``[n0]`` (:func:`line_tag`)."""
        return line_tag(self.node_rank, self.rank)


def line_tag(node_rank: int, rank: int | None) -> str:
    """How a line is tagged, in ``logs`` and the console's log panes alike: ``[n0 r1]`` (node
    0, torchrun's global rank 1) or ``[n0]`` for a line of the node itself (torchrun, the gang
    watcher)."""
    if rank is None:
        return f"[n{node_rank}]"
    return f"[n{node_rank} r{rank}]"


def tag_line(node: NodeRecord, line: LogLine) -> JobLogLine:
    """Split torchrun's rank prefix off a raw container line."""
    m = _RANK_RE.match(line.text)
    if m:
        body = line.text[m.end() :]
        prefix = m.group(0)
        if body.startswith(prefix):
            # PyTorch 2.x prefixes a rank's own error output with the same "[rankN]: "
            # (torch.distributed's rank-prefixed logging): one tag is enough
            body = body[len(prefix) :].removeprefix(" ")
        if prefix in body:
            # torchrun's tee splits a worker's "\r" redraws into lines and glues the prefix of
            # the next (empty) segment onto a bar: "<bar>[rank0]:". Each inner prefix of the
            # same rank is where a carriage return was.
            body = body.replace(prefix, "\r")
        return JobLogLine(node.node_rank, node.host, int(m.group(1)), line.ts_ns, body)
    return JobLogLine(node.node_rank, node.host, None, line.ts_ns, line.text)


async def _node_lines(
    session: Session,
    store: Store,
    job: JobRecord,
    node: NodeRecord,
    since_ns: int | None,
    tail: int | None = None,
    *,
    archive_only: bool = False,
) -> list[LogLine]:
    """The lines of one node (all, or its last ``tail``): from its container when it exists
    (archiving them), then read back from the archive (only its end when ``tail`` is given;
    with ``archive_only`` the archive alone). A container that is gone is added to
    ``job.gone``.

    An archive that cannot be written (no space left) or read (a directory, damaged) is said
    in ``job.log_problems`` and the container's lines are shown without it; a node with no
    archive and no container to read is said there too."""
    fresh: list[LogLine] | None = None  # the container's lines, when it could be read
    # the container is read from where the archive ends (all that archiving would keep),
    # so reading a long-running job's log again costs what it wrote since, not all of it
    try:
        cursor = await store.call(store.archive_cursor, job.id, node.node_rank)
    except StateError:
        cursor = None  # an unreadable archive: read the container whole
    if node.container_id and job.removed_at is None and not archive_only:
        try:
            await session.connected(node.host)
            engine = session.engine(node.host)
            if await engine.inspect(node.container_id) is not None:
                job.gone.discard(node.node_rank)
                fresh = [
                    ln
                    async for ln in follow_container(
                        engine, node.container_id, cursor, follow=False
                    )
                ]
            else:
                job.gone.add(node.node_rank)
        except GpuConsoleError as e:
            job.unreachable[node.host] = e.message  # the archive will do
    lines: list[LogLine]
    try:
        if fresh is not None:
            try:
                await store.call(store.archive, job.id, node.node_rank, fresh)
            except StateError as err:
                if cursor is not None:  # shown without the archive: its older lines too
                    with contextlib.suppress(StateError):
                        fresh = (
                            await store.call(store.read_archive_tail, job.id, node.node_rank, tail)
                            if tail is not None
                            else await store.call(
                                lambda: list(store.read_archive(job.id, node.node_rank))
                            )
                        ) + fresh
                raise err
        if tail is not None:
            # the archive is in time order, so the last `tail` lines at or after `since_ns`
            # are the last `tail` lines, filtered
            lines = await store.call(store.read_archive_tail, job.id, node.node_rank, tail)
        else:
            lines = await store.call(lambda: list(store.read_archive(job.id, node.node_rank)))
    except StateError as e:
        job.log_problems[node.node_rank] = _archive_problem(e, fresh is not None)
        lines = fresh[-tail:] if fresh is not None and tail is not None else (fresh or [])
        if tail is not None and tail <= 0:
            lines = []
    else:
        if (
            fresh is None
            and not lines
            and not archive_only
            and not await store.call(store.log_path(job.id, node.node_rank).exists)
        ):
            job.log_problems[node.node_rank] = (
                f"no log archive ({store.log_path(job.id, node.node_rank)} is missing) and "
                "its container could not be read: no lines to show"
            )
    if since_ns is not None:
        lines = [ln for ln in lines if ln.ts_ns >= since_ns]
    return lines


def _archive_problem(e: StateError, from_container: bool) -> str:
    """One line for ``job.log_problems``: the archive's error and what was shown instead."""
    shown = (
        "its container's lines are shown"
        if from_container
        else "its container could not be read: no lines to show"
    )
    fix = f" (fix: {e.hint})" if e.hint else ""
    return f"{e.message}{fix}; {shown}"


async def read_job_logs(
    session: Session,
    store: Store,
    job: JobRecord,
    *,
    node: int | None = None,
    since_ns: int | None = None,
    tail: int | None = None,
    archive_only: bool = False,
) -> list[JobLogLine]:
    """A job's logs so far, merged in time order (stable per node).

    A host whose containers cannot be read contributes its archived lines; why is recorded in
    ``job.unreachable``; a node whose container is gone is added to ``job.gone``. With
    ``archive_only`` only the local archive is read (no host is asked: fast, and what a
    finished job's log shows first).
    """
    nodes = [n for n in job.nodes if node is None or n.node_rank == node]
    per_node = await asyncio.gather(
        *(
            _node_lines(session, store, job, n, since_ns, tail, archive_only=archive_only)
            for n in nodes
        )
    )
    tagged = [[tag_line(n, ln) for ln in lines] for n, lines in zip(nodes, per_node)]
    merged = list(heapq.merge(*tagged, key=lambda ln: (ln.ts_ns, ln.node_rank)))
    if tail is not None:
        merged = merged[-tail:] if tail > 0 else []
    return merged


NoLinesKind = Literal["removed", "never_created", "unreachable", "gone", "archive", "silent"]
"""Why a node has no line: the job was removed, its container never created, its host did not
answer, its container is gone, its archive cannot be read (``job.log_problems``), or it wrote
nothing."""


def no_lines_reason(job: JobRecord, node: NodeRecord) -> tuple[NoLinesKind, str] | None:
    """Why a node shows no line at all, once its container (if any) and the archive were
    read: ``None`` when it may yet write (pending, running), else the kind and one clause
    (``node 1 (b): its container is gone ... and nothing was archived from it``)."""
    where = f"node {node.node_rank} ({node.host})"
    if job.removed_at is not None:
        return "removed", f"{where}: the job was removed and nothing had been archived from it"
    if not node.container_id:
        return "never_created", f"{where}: its container was never created"
    if node.host in job.unreachable:
        return (
            "unreachable",
            f"{where}: {job.unreachable[node.host]}; nothing was archived from it",
        )
    if node.node_rank in job.gone or node.state == "lost":
        return "gone", (
            f"{where}: its container is gone (removed outside gpuconsole) and "
            "nothing was archived from it"
        )
    if node.node_rank in job.log_problems:
        return "archive", f"{where}: {job.log_problems[node.node_rank]}"
    if node.state in ("pending", "running"):
        return None
    return "silent", f"{where}: its container wrote nothing"


async def follow_job_log_batches(
    session: Session,
    store: Store,
    job: JobRecord,
    *,
    node: int | None = None,
    since_ns: int | None = None,
    tail: int | None = None,
    on_node_exit: Callable[[NodeRecord], None] | None = None,
    on_state: Callable[[NodeRecord, str, str | None], None] | None = None,
    on_archive: Callable[[NodeRecord, StateError | None], None] | None = None,
) -> AsyncIterator[list[JobLogLine]]:
    """Follow a job's logs until every followed node's container has exited, in batches.

    Each batch holds the lines of one node in time order, as they arrived (never empty); the
    batches of different nodes interleave as they arrive. Lines are archived (in a worker
    thread) every :data:`ARCHIVE_EVERY_S` s while new ones come, and at once when
    :data:`ARCHIVE_BATCH` lines wait or a node's stream ends: one write per node per interval
    however many batches arrived (a stream of 2,000 lines/s comes in ~100 batches a second);
    what is left is archived when the follow ends.

    A node whose container no longer exists (removed, or gone with a reboot) gives the lines
    its archive kept (as :func:`read_job_logs` does), then ends.

    ``on_node_exit`` is called when a node's stream has ended (its container exited or
    vanished), after its lines were archived, e.g. to trigger gang teardown; ``on_state(node,
    state, why)`` when a node's stream drops (``reconnecting``) and resumes (``following``).

    An archive write that fails (no space left in the state dir) does not end the follow:
    ``on_archive(node, error)`` is called once, the node's lines keep coming and are kept
    (up to :data:`ARCHIVE_BACKLOG` lines) to be archived when a write succeeds again
    (``on_archive(node, None)``); past that, archiving that node stops for this follow and
    its archive ends at its last whole line (``gpuconsole logs`` fills it in from the
    container later). See :class:`_Archiver`.
    """
    nodes = [n for n in job.nodes if node is None or n.node_rank == node]
    # (node, lines, read back from its archive), a node whose stream ended, or None (archive)
    queue: asyncio.Queue[tuple[NodeRecord, list[LogLine], bool] | NodeRecord | None] = (
        asyncio.Queue()
    )

    async def pump(n: NodeRecord) -> None:
        try:
            if not n.container_id:
                return
            await session.connected(n.host)
            engine = session.engine(n.host)
            if await engine.inspect(n.container_id) is None:
                # removed (``docker rm``, a reboot): its archive is all there is, as for logs
                kept = await _node_lines(session, store, job, n, since_ns, tail, archive_only=True)
                if kept:
                    queue.put_nowait((n, kept, True))
                return
            cursor = LogCursor()
            if since_ns is not None:
                cursor.ts_ns = since_ns - 1

            def state(s: str, why: str | None) -> None:
                if on_state is not None:
                    on_state(n, s, why)

            async for batch in follow_container_batches(
                engine, n.container_id, cursor, tail=tail, on_state=state, pace_s=FOLLOW_PACE_S
            ):
                if since_ns is not None and batch[0].ts_ns < since_ns:
                    # the cursor starts 1 ns before `since` and takes lines at its own time
                    batch = [ln for ln in batch if ln.ts_ns >= since_ns]
                    if not batch:
                        continue
                queue.put_nowait((n, batch, False))
        except GpuConsoleError:
            pass
        finally:
            queue.put_nowait(n)

    async def tick() -> None:
        while True:  # None in the queue: time to archive what waits
            await asyncio.sleep(ARCHIVE_EVERY_S)
            queue.put_nowait(None)

    tasks = [asyncio.create_task(pump(n)) for n in nodes]
    pending = len(tasks)
    archiver = _Archiver(store, job, on_archive)
    ticker = asyncio.create_task(tick())
    waiting = 0
    try:
        while pending:
            item = await queue.get()
            if item is None:
                waiting = 0
                await archiver.flush_async()  # nothing when nothing waits
                continue
            if isinstance(item, NodeRecord):
                pending -= 1
                waiting = 0
                await archiver.flush_async(force=True)
                if on_node_exit is not None:
                    on_node_exit(item)
                continue
            n, lines, archived = item
            if not archived:
                archiver.add(n, lines)
                waiting += len(lines)
            if waiting >= ARCHIVE_BATCH:
                waiting = 0
                await archiver.flush_async()
            yield [tag_line(n, ln) for ln in lines]
    finally:
        archiver.flush(force=True)  # what is left (no await: this may run at generator close)
        for t in (*tasks, ticker):
            t.cancel()
        await asyncio.gather(*tasks, ticker, return_exceptions=True)


FOLLOW_PACE_S = 0.04
"""A followed stream that is not bursting is read at most this often (s): its lines arrive
in batches of what it wrote meanwhile, not one wake-up per write of the job."""

ARCHIVE_EVERY_S = 0.5
"""Seconds between two archive writes of a follow while lines keep coming."""

ARCHIVE_BATCH = 16_384
"""Lines waiting (all nodes) that are archived at once, before the interval is up."""


#: Lines of one node kept while its archive cannot be written, to be archived once it can.
ARCHIVE_BACKLOG = 200_000

#: Seconds between two tries to write an archive that failed (a full disk is not polled on
#: every burst).
ARCHIVE_RETRY_S = 2.0


class _Archiver:
    """The archive writes of one follow, per node: the lines not archived yet, written
    whole or not at all (:meth:`Store.archive`), and what to do when a write fails.

    A failed write keeps the node's lines (the archive is left as it was before the write)
    and says it once through ``on_archive(node, error)``; writes are tried again every
    :data:`ARCHIVE_RETRY_S` s with everything kept, and ``on_archive(node, None)`` says when
    one succeeded. A node with more than :data:`ARCHIVE_BACKLOG` lines kept drops them and is
    not archived for the rest of the follow: its archive ends at a whole line, so no line is
    repeated and a later ``logs`` (which archives the container's lines newer than the
    archive's end) fills the gap in from the container.
    """

    def __init__(
        self,
        store: Store,
        job: JobRecord,
        on_archive: Callable[[NodeRecord, StateError | None], None] | None,
    ) -> None:
        self.store = store
        self.job = job
        self.on_archive = on_archive
        self.unsaved: dict[int, list[LogLine]] = {}
        self.nodes: dict[int, NodeRecord] = {}
        self.failing: set[int] = set()
        self.given_up: set[int] = set()
        self.retry_at = 0.0  # monotonic s: no write before this while a node is failing

    def add(self, n: NodeRecord, lines: list[LogLine]) -> None:
        """Keep a node's new lines for the next write."""
        if n.node_rank in self.given_up:
            return
        self.nodes[n.node_rank] = n
        kept = self.unsaved.setdefault(n.node_rank, [])
        kept.extend(lines)
        if n.node_rank in self.failing and len(kept) > ARCHIVE_BACKLOG:
            self.given_up.add(n.node_rank)
            self.failing.discard(n.node_rank)  # the other nodes' writes are not held back
            del self.unsaved[n.node_rank]
            log.info(
                "archive of %s node %d: %d lines kept while it could not be written; "
                "not archived for the rest of this follow",
                self.job.id,
                n.node_rank,
                len(kept),
            )

    def _due(self, force: bool) -> bool:
        return force or not self.failing or time.monotonic() >= self.retry_at

    async def flush_async(self, *, force: bool = False) -> None:
        """:meth:`flush` in a worker thread (the loop never waits on the disk)."""
        if any(self.unsaved.values()) and self._due(force):
            changes = await self.store.call(self._write)
            self._say(changes)

    def flush(self, *, force: bool = False) -> None:
        """Write what is kept, on this thread (the follow's end)."""
        if any(self.unsaved.values()) and self._due(force):
            self._say(self._write())

    def _write(self) -> list[tuple[int, StateError | None]]:
        """Archive each node's kept lines; returns the nodes whose state changed (failing:
        the error; writing again: ``None``)."""
        changes: list[tuple[int, StateError | None]] = []
        for rank, lines in list(self.unsaved.items()):
            if not lines:
                continue
            try:
                self.store.archive(self.job.id, rank, lines)
            except StateError as e:
                if rank not in self.failing:
                    self.failing.add(rank)
                    changes.append((rank, e))
                continue
            self.unsaved[rank] = []
            if rank in self.failing:
                self.failing.discard(rank)
                changes.append((rank, None))
        if self.failing:
            self.retry_at = time.monotonic() + ARCHIVE_RETRY_S
        return changes

    def _say(self, changes: list[tuple[int, StateError | None]]) -> None:
        for rank, error in changes:
            if error is not None:
                log.info("archive of %s node %d: %s", self.job.id, rank, error.message)
            if self.on_archive is not None:
                self.on_archive(self.nodes[rank], error)
