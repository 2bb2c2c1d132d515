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
import heapq
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Literal

from console.jobs.store import JobRecord, NodeRecord, Store
from console.session import Session
from remote.docker import LogLine
from remote.errors import GpuConsoleError
from remote.logs import LogCursor, follow_container, follow_container_batches

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
        body = line.text[m.end():]
        prefix = m.group(0)
        if body.startswith(prefix):
            # PyTorch 2.x prefixes a rank's own error output with the same "[rankN]: "
            # (torch.distributed's rank-prefixed logging): one tag is enough
            body = body[len(prefix):].removeprefix(" ")
        if prefix in body:
            # torchrun's tee splits a worker's "\r" redraws into lines and glues the prefix of
            # the next (empty) segment onto a bar: "<bar>[rank0]:". Each inner prefix of the
            # same rank is where a carriage return was.
            body = body.replace(prefix, "\r")
        return JobLogLine(node.node_rank, node.host, int(m.group(1)), line.ts_ns, body)
    return JobLogLine(node.node_rank, node.host, None, line.ts_ns, line.text)


async def _node_lines(
    session: Session, store: Store, job: JobRecord, node: NodeRecord, since_ns: int | None,
    tail: int | None = None, *, archive_only: bool = False,
) -> list[LogLine]:
    """The lines of one node (all, or its last ``tail``): from its container when it exists
    (archiving them), then read back from the archive (only its end when ``tail`` is given)."""
    if node.container_id and job.removed_at is None and not archive_only:
        try:
            await session.connected(node.host)
            engine = session.engine(node.host)
            if await engine.inspect(node.container_id) is not None:
                job.gone.discard(node.node_rank)
                lines = [ln async for ln in follow_container(engine, node.container_id,
                                                             follow=False)]
                await store.call(store.archive, job.id, node.node_rank, lines)
            else:
                job.gone.add(node.node_rank)
        except GpuConsoleError as e:
            job.unreachable[node.host] = e.message  # the archive will do
    if tail is not None:
        # the archive is in time order, so the last `tail` lines at or after `since_ns` are
        # the last `tail` lines, filtered
        lines = await store.call(store.read_archive_tail, job.id, node.node_rank, tail)
    else:
        lines = await store.call(lambda: list(store.read_archive(job.id, node.node_rank)))
    if since_ns is not None:
        lines = [ln for ln in lines if ln.ts_ns >= since_ns]
    return lines


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
        *(_node_lines(session, store, job, n, since_ns, tail, archive_only=archive_only)
          for n in nodes)
    )
    tagged = [[tag_line(n, ln) for ln in lines] for n, lines in zip(nodes, per_node)]
    merged = list(heapq.merge(*tagged, key=lambda ln: (ln.ts_ns, ln.node_rank)))
    if tail is not None:
        merged = merged[-tail:] if tail > 0 else []
    return merged


NoLinesKind = Literal["removed", "never_created", "unreachable", "gone", "silent"]
"""Why a node has no line: the job was removed, its container never created, its host did not
answer, its container is gone, or it wrote nothing."""


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
        return ("unreachable",
                f"{where}: {job.unreachable[node.host]}; nothing was archived from it")
    if node.node_rank in job.gone or node.state == "lost":
        return "gone", (f"{where}: its container is gone (removed outside gpuconsole) and "
                        "nothing was archived from it")
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
) -> AsyncIterator[list[JobLogLine]]:
    """Follow a job's logs until every followed node's container has exited, in batches.

    Each batch holds the lines of one node in time order, as they arrived (never empty); the
    batches of different nodes interleave as they arrive. Lines are archived (in a worker
    thread) whenever no other batch is waiting, so at most a burst is archived after it was
    yielded; what is left is archived when the follow ends.

    ``on_node_exit`` is called when a node's stream has ended (its container exited or
    vanished), after its lines were archived, e.g. to trigger gang teardown; ``on_state(node,
    state, why)`` when a node's stream drops (``reconnecting``) and resumes (``following``).
    """
    nodes = [n for n in job.nodes if node is None or n.node_rank == node]
    queue: asyncio.Queue[tuple[NodeRecord, list[LogLine]] | NodeRecord] = asyncio.Queue()

    async def pump(n: NodeRecord) -> None:
        try:
            if not n.container_id:
                return
            await session.connected(n.host)
            engine = session.engine(n.host)
            cursor = LogCursor()
            if since_ns is not None:
                cursor.ts_ns = since_ns - 1

            def state(s: str, why: str | None) -> None:
                if on_state is not None:
                    on_state(n, s, why)

            async for batch in follow_container_batches(engine, n.container_id, cursor,
                                                        tail=tail, on_state=state):
                queue.put_nowait((n, batch))
        except GpuConsoleError:
            pass
        finally:
            queue.put_nowait(n)

    tasks = [asyncio.create_task(pump(n)) for n in nodes]
    pending = len(tasks)
    unsaved: dict[int, list[LogLine]] = {}
    waiting = 0
    try:
        while pending:
            item = await queue.get()
            if isinstance(item, NodeRecord):
                pending -= 1
                waiting = 0
                await _flush_async(store, job, unsaved)
                if on_node_exit is not None:
                    on_node_exit(item)
                continue
            n, lines = item
            unsaved.setdefault(n.node_rank, []).extend(lines)
            waiting += len(lines)
            if queue.empty() or waiting >= 4096:  # one archive write per burst
                waiting = 0
                await _flush_async(store, job, unsaved)
            yield [tag_line(n, ln) for ln in lines]
    finally:
        _flush(store, job, unsaved)  # what is left (no await: this may run at generator close)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _flush_async(store: Store, job: JobRecord, batch: dict[int, list[LogLine]]) -> None:
    """Archive the batch in a worker thread (the loop never waits on the disk)."""
    todo = {rank: lines for rank, lines in batch.items() if lines}
    batch.clear()
    if todo:
        await store.call(_flush, store, job, todo)


def _flush(store: Store, job: JobRecord, batch: dict[int, list[LogLine]]) -> None:
    for rank, lines in batch.items():
        if lines:
            store.archive(job.id, rank, lines)
    batch.clear()
