"""A job's log follow in a child process: the console's log intake with a core of its own.

The Textual app follows a job's logs here (:meth:`console.service.Service.start_follow` with
``where="process"``): SSH decryption, the Docker log stream's parsing, rank tagging and the
archive appends of thousands of lines a second run in another interpreter, so they neither
queue behind nor hold the GIL against the app's keys and repaints. The child has its own SSH
connections (the same profile, the same host-key checks) and the same store (archive appends
are ``flock``-ed; SQLite is opened in WAL mode).

The child is ``python -m console.intake``, started by the console with pipes: its stdin
carries one pickled :class:`IntakeRequest`, then stays open (its end, EOF, tells the child to
stop); its stdout carries the messages, each a 4-byte big-endian length and a pickle (both
ends are the same installed code). Messages (child -> parent):

- ``("lines", [(node_rank, host, rank, ts_ns, text), ...], [rows, ...])``: a batch, at most
  one per ``batch_s`` while lines keep coming: the lines (the fields of
  :class:`~console.jobs.logs.JobLogLine`) and, in the same order, each line's display rows
  shaped here (:func:`~console.jobs.logbuffer.display_lines`, numbered from the request's
  ``seq_first``);
- ``("state", node_rank, state, why)``: a node's stream dropped (``reconnecting``) or
  resumed (``following``);
- ``("exit", node_rank, host)``: a node's stream ended (its container exited);
- ``("archive", node_rank, error, hint)``: a node's archive could not be written (the
  follow goes on; ``error`` and its fix, see
  :class:`~console.events.ArchiveStateChanged`), or can be again (``error`` is ``None``);
- ``("done", error)``: the follow ended (``error`` is ``None`` or a message).

The child never writes to the terminal: its stderr is ``/dev/null``, anything printed goes
to ``/dev/null`` too (the protocol has its own descriptor), its log goes to the console's log
file.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import pickle
import struct
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, overload

from console.errors import StateError
from console.jobs.logbuffer import Row, display_lines, number_from
from console.jobs.logs import JobLogLine, follow_job_log_batches
from console.jobs.store import JobRecord, NodeRecord, Store
from console.profiles import Profile
from console.session import Session
from remote.errors import GpuConsoleError

log = logging.getLogger("gpuconsole.intake")

LineTuple = tuple[int, str, int | None, int, str]
"""A :class:`~console.jobs.logs.JobLogLine` as sent over the pipe (its fields, in order)."""


def as_tuple(line: JobLogLine) -> LineTuple:
    """The pipe form of a line."""
    return (line.node_rank, line.host, line.rank, line.ts_ns, line.text)


class PackedLines(Sequence[JobLogLine]):
    """The lines of one batch from the child, kept in their pipe form (plain tuples, which
    the cyclic GC stops tracking) and made :class:`~console.jobs.logs.JobLogLine` only when
    read: the app shows the child's display rows and never reads most of them.

    Args:
        packed: the lines as the child sent them.
    """

    def __init__(self, packed: Sequence[LineTuple]) -> None:
        self._packed = packed

    def __len__(self) -> int:
        return len(self._packed)

    @overload
    def __getitem__(self, i: int) -> JobLogLine: ...

    @overload
    def __getitem__(self, i: slice) -> list[JobLogLine]: ...

    def __getitem__(self, i: int | slice) -> JobLogLine | list[JobLogLine]:
        if isinstance(i, slice):
            return [JobLogLine(*t) for t in self._packed[i]]
        return JobLogLine(*self._packed[i])


@dataclass(frozen=True)
class IntakeRequest:
    """What the child follows.

    Attributes:
        profile: the job's profile (hosts and how to reach them).
        store_root: the store's folder (archive appends).
        job: the job to follow.
        tail: start each node with its last ``tail`` lines (``None``: all).
        batch_s: seconds between two line batches while lines keep coming.
        log_file: append this process's log here (``None``: no log).
        seq_first: the first display-line sequence number of this child's rows (a block
            the console reserved: :func:`console.jobs.logbuffer.reserve_seq_block`; the
            console keeps the rows as they come).
    """

    profile: Profile
    store_root: Path
    job: JobRecord
    tail: int | None
    batch_s: float
    log_file: Path | None
    seq_first: int


HEADER = struct.Struct(">I")
"""Each message's length prefix."""


def main() -> None:
    """``python -m console.intake``: read the request from stdin, follow, write messages."""
    out = os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 1)  # stray prints cannot corrupt the protocol
    request: IntakeRequest = pickle.load(sys.stdin.buffer)
    number_from(request.seq_first)
    if request.log_file is not None:
        logging.basicConfig(
            level=logging.INFO,
            filename=str(request.log_file),
            format="%(asctime)s %(levelname)s %(name)s[intake]: %(message)s",
        )
        logging.getLogger("asyncssh").setLevel(logging.WARNING)
    try:
        asyncio.run(_run(out, request))
    except Exception:
        log.exception("log intake of %s failed", request.job.id)
    finally:
        with contextlib.suppress(OSError):
            out.close()


async def _run(out: BinaryIO, req: IntakeRequest) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_reader(0, stop.set)  # stdin readable = its EOF: the console wants us gone
    batch: list[LineTuple] = []
    shown: list[tuple[Row, ...]] = []
    last = 0.0
    timer: asyncio.TimerHandle | None = None

    def send(msg: tuple[Any, ...]) -> None:
        data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            out.write(HEADER.pack(len(data)) + data)
            out.flush()
        except OSError:  # the console is gone
            stop.set()

    def publish() -> None:
        nonlocal batch, shown, last, timer
        if timer is not None:
            timer.cancel()
            timer = None
        if batch:
            send(("lines", batch, shown))
            batch, shown = [], []
        last = time.monotonic()

    def on_exit(n: NodeRecord) -> None:
        publish()
        send(("exit", n.node_rank, n.host))

    def on_state(n: NodeRecord, state: str, why: str | None) -> None:
        send(("state", n.node_rank, state, why))

    def on_archive(n: NodeRecord, error: StateError | None) -> None:
        send(
            (
                "archive",
                n.node_rank,
                error.message if error else None,
                error.hint if error else None,
            )
        )

    try:
        store = Store(req.store_root)
    except GpuConsoleError as e:  # a damaged, locked or full state dir: said, not a crash
        loop.remove_reader(0)
        send(("done", e.message))
        return
    session = Session(req.profile)

    async def pump() -> None:
        nonlocal timer
        async for lines in follow_job_log_batches(
            session,
            store,
            req.job,
            tail=req.tail,
            on_node_exit=on_exit,
            on_state=on_state,
            on_archive=on_archive,
        ):
            batch.extend(as_tuple(ln) for ln in lines)
            shown.extend(tuple(display_lines(ln)) for ln in lines)
            wait = last + req.batch_s - time.monotonic()
            if wait <= 0:
                publish()
            elif timer is None:
                timer = loop.call_later(wait, publish)
        publish()

    error: str | None = None
    task = asyncio.create_task(pump())
    stopper = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if task.done() and not task.cancelled() and (exc := task.exception()) is not None:
            error = f"{type(exc).__name__}: {exc}"
    finally:
        for t in (task, stopper):
            t.cancel()
        await asyncio.gather(task, stopper, return_exceptions=True)
        loop.remove_reader(0)
        if not stop.is_set():
            publish()
            send(("done", error))
        await session.close()
        store.close()


if __name__ == "__main__":
    main()
