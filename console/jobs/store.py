"""Local state: job records in SQLite and archived logs, under the user state dir.

The store is a cache plus history; the containers' labels on the hosts are the truth, and
``ps`` reconciles the two (see :mod:`console.backends.containers`). Layout of the state dir
(``$GPUCONSOLE_STATE_DIR`` or platformdirs' user state dir)::

    jobs.sqlite3                  job and node records
    logs/<job id>/node<R>.log     archived log lines, "<ts ns> <text>" per line

Archive files are appended under an exclusive ``flock`` and deduplicated against their own
last timestamp, so two followers of one job never write a line twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import functools
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, ParamSpec, TypedDict, TypeVar, cast

import platformdirs

from console.dbschema import migrate_schema
from console.errors import StateError
from console.jobs.states import JobState, NodeState

if TYPE_CHECKING:  # the store is imported by every command; diagnosis only when one fails
    from console.diagnosis.model import CauseKind
from console.statefiles import LOCK_WAIT_S, db_error, file_error
from remote.docker import LogLine
from remote.errors import GpuConsoleError
from remote.logs import LogCursor

SCHEMA_V1 = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    profile TEXT NOT NULL,
    profile_source TEXT,
    spec_json TEXT NOT NULL,
    spec_hash TEXT NOT NULL,
    created_at REAL NOT NULL,
    node_count INTEGER NOT NULL,
    state TEXT NOT NULL DEFAULT 'pending',
    exit_code INTEGER,
    failure_json TEXT,
    stop_requested_at REAL,
    removed_at REAL,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS nodes (
    job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
    node_rank INTEGER NOT NULL,
    host TEXT NOT NULL,
    container_id TEXT,
    container_name TEXT NOT NULL,
    state TEXT NOT NULL DEFAULT 'pending',
    exit_code INTEGER,
    started_at TEXT,
    finished_at TEXT,
    stop_requested INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (job_id, node_rank)
);
"""

#: Schema migrations: ``MIGRATIONS[v]`` takes a database from version ``v - 1`` to ``v``
#: (``PRAGMA user_version``). Version 0 is an empty file or a store written before the
#: schema was versioned (the tables of version 1, which ``CREATE TABLE IF NOT EXISTS`` keeps).
#: Append a step for every change; never edit a released one.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: tuple(st.strip() for st in SCHEMA_V1.split(";") if st.strip()),
    # the launching process while a launch is in flight ("<hostname> <pid> <start ticks>"),
    # NULL once it finished: a job whose launcher died between create and start is known
    2: ("ALTER TABLE jobs ADD COLUMN launcher TEXT",),
}
SCHEMA_VERSION = max(MIGRATIONS)
"""The schema version this code writes."""


def state_dir() -> Path:
    """The state dir (``$GPUCONSOLE_STATE_DIR`` or platformdirs' user state dir), created."""
    base = os.environ.get("GPUCONSOLE_STATE_DIR") or platformdirs.user_state_dir("gpuconsole")
    p = Path(base)
    try:
        p.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as e:
        why = "it is a file, not a folder" if p.is_file() else e.strerror
        raise GpuConsoleError(
            f"cannot use the state dir {p}: {why}",
            "set GPUCONSOLE_STATE_DIR to a writable folder",
        ) from e
    return p


@dataclass
class NodeRecord:
    """One node of a job as last seen.

    Attributes:
        state: ``pending``, ``created`` (created, never started, its launch over),
            ``running``, ``succeeded``, ``failed``, ``stopped``, ``lost``, ``unreachable``
            (host could not be asked) or ``unknown`` (a Slurm state word gpuconsole does not
            know): :data:`~console.jobs.states.NodeState`.
        exit_code: the container's exit status once exited.
        started_at / finished_at: RFC 3339 times from Docker.
        stop_requested: gpuconsole stopped this node (``stop``, or gang teardown after another
            node failed), so a non-zero exit after it means ``stopped``, not ``failed``.
    """

    job_id: str
    node_rank: int
    host: str
    container_name: str
    container_id: str | None = None
    state: NodeState = "pending"
    exit_code: int | None = None
    started_at: str | None = None
    finished_at: str | None = None
    stop_requested: bool = False


class FailureRecord(TypedDict, total=False):
    """A job's first failure as stored (``failure_json``) and shown by ``ps``, ``describe``,
    the app and the job-failed alert.

    Keys: ``node`` (node rank), ``host``, ``exit_code`` (the node's container exit code),
    ``rank`` (global torchrun rank blamed, or None), ``reason`` (one line), ``fix`` (one line
    or None), ``kind`` (the diagnosis cause id, ``console/diagnosis``), ``evidence`` (the log
    lines it rests on), ``consequences`` (one line each: what followed from it),
    ``interrupted`` (True for a launch interrupted before every container started),
    ``failed_node`` (the first node that failed, whose exit was explained: ``node`` is
    another when that node's log holds the root cause).
    """

    node: int
    host: str
    exit_code: int | None
    rank: int | None
    reason: str
    fix: str | None
    kind: CauseKind
    evidence: list[str]
    consequences: list[str]
    interrupted: bool
    failed_node: int


@dataclass
class JobRecord:
    """A job as the store knows it.

    Attributes:
        state: ``pending``, ``running``, ``succeeded``, ``failed``, ``stopped``, ``lost`` or
            ``unknown`` (a node's host could not be asked and no other node says more, or a
            Slurm state word gpuconsole does not know): :data:`~console.jobs.states.JobState`.
            Shown as ``removed`` once ``removed_at`` is set.
        spec: the spec as submitted (secret values replaced by ``${secret}``).
        failure: the first failure, once known (:class:`FailureRecord`).
        stop_requested_at: Unix seconds when ``stop`` was asked (nodes exiting after it are
            ``stopped``, not ``failed``).
        unreachable: host -> why it could not be asked, from the last look at the hosts in
            this process (not stored).
        log_problems: node rank -> why its log could not be read whole (its archive is
            missing, a directory or cannot be written), from the last read of its log in
            this process (not stored).
        gone: node ranks whose container was not found when their logs were last read in
            this process (not stored).
        launcher: the process launching the job (``<hostname> <pid> <start ticks>``, see
            :func:`console.jobs.launch.launcher_token`) while its launch is in flight;
            ``None`` once the launch finished, and for jobs adopted from the hosts.
    """

    id: str
    name: str
    profile: str
    profile_source: str | None
    spec: dict[str, Any]
    spec_hash: str
    created_at: float
    node_count: int
    state: JobState = "pending"
    exit_code: int | None = None
    failure: FailureRecord | None = None
    stop_requested_at: float | None = None
    removed_at: float | None = None
    nodes: list[NodeRecord] = field(default_factory=list)
    unreachable: dict[str, str] = field(default_factory=dict)
    log_problems: dict[int, str] = field(default_factory=dict)
    launcher: str | None = None
    gone: set[int] = field(default_factory=set)

    @property
    def secret_env(self) -> frozenset[str]:
        """The names of the spec's ``env`` whose values are secret (stored as ``${secret}``):
        what every surface masks."""
        env = self.spec.get("env")
        if not isinstance(env, dict):
            return frozenset()
        return frozenset(k for k, v in env.items() if v == "${secret}")

    @property
    def kind(self) -> str:
        """``train`` or ``notebook`` (the spec's ``kind``; adopted jobs carry it from their
        containers' ``io.gpuconsole.kind`` label)."""
        return str(self.spec.get("kind") or "train")

    @property
    def runtime(self) -> str:
        """``docker`` or ``host``: the spec's resolved ``runtime``; for a job adopted from
        the hosts, what its nodes' ids say (:func:`remote.runtimes.is_docker_id`)."""
        rt = self.spec.get("runtime")
        if rt:
            return str(rt)
        from remote.runtimes import is_docker_id  # the Docker SDK: not at import

        ids = [n.container_id for n in self.nodes if n.container_id]
        return "host" if ids and not is_docker_id(ids[0]) else "docker"


P = ParamSpec("P")
R = TypeVar("R")


def _locked(method: Callable[P, R]) -> Callable[P, R]:
    """Serialize a Store method on the store's lock (the connection is shared by threads);
    a SQLite failure comes out as the :class:`~console.errors.StateError` that says it
    (``sqlite3.IntegrityError``, a caller's own mistake, is left as it is)."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        store = args[0]
        assert isinstance(store, Store)
        with store._lock:
            try:
                return method(*args, **kwargs)
            except sqlite3.IntegrityError:
                raise
            except sqlite3.Error as e:
                raise store._db_error(e) from e

    return wrapper


#: What moving a damaged job store aside costs (the fix of its errors).
IF_LOST = (
    "`gpuconsole ps` finds the jobs on the hosts again by their containers' labels; "
    "archived logs stay"
)
IF_ARCHIVE_LOST = "the node's lines are read again from its container while it exists"


class Store:
    """The SQLite job store and the log archive.

    Opening it migrates the database to :data:`SCHEMA_VERSION` (see :func:`migrate`).

    Thread-safe: one connection shared under a lock, so event-loop code hands its writes and
    file reads to a worker thread with :meth:`call` and the loop never waits on the disk.

    Args:
        root: the state dir (default :func:`state_dir`).

    Every method that touches a file says a failure as a
    :class:`~console.errors.StateError` (``<file>: <what is wrong>`` and the fix): a damaged
    or misplaced ``jobs.sqlite3``, one locked by another process for longer than
    :data:`~console.statefiles.LOCK_WAIT_S`, a read-only or full filesystem, an archive that
    cannot be read or written.

    Raises:
        GpuConsoleError: the database was written by a newer gpuconsole, or cannot be
            migrated.
        StateError: the state dir or ``jobs.sqlite3`` cannot be opened.
    """

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or state_dir()
        self.path = self.root / "jobs.sqlite3"
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise file_error(e, self.root, what="state dir", if_lost=IF_LOST) from e
        self._lock = threading.RLock()
        try:
            self.db = sqlite3.connect(self.path, timeout=LOCK_WAIT_S, check_same_thread=False)
        except sqlite3.Error as e:
            raise self._db_error(e) from e
        self.db.row_factory = sqlite3.Row
        try:
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA foreign_keys=ON")
            self.schema_version = migrate(self.db, self.path)
        except sqlite3.Error as e:
            self.db.close()
            raise self._db_error(e) from e
        except BaseException:
            self.db.close()
            raise

    def _db_error(self, e: sqlite3.Error) -> StateError:
        return db_error(e, self.path, what="job store", if_lost=IF_LOST)

    def _damaged(self, e: Exception) -> StateError:
        """A record that SQLite returned but that cannot be read (garbled pages)."""
        return StateError(
            str(self.path),
            "damaged",
            f"damaged, not a readable job store (a record cannot be read: {e})",
            f"move it aside (`mv {self.path} {self.path}.damaged`): {IF_LOST}",
        )

    @_locked
    def close(self) -> None:
        """Close the database."""
        self.db.close()

    async def call(self, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """Run a store method (``store.update_job``, ``store.archive``...) in a worker thread,
        so SQLite writes and archive I/O never block the event loop."""
        return await asyncio.to_thread(fn, *args, **kwargs)

    # -- jobs -------------------------------------------------------------------------------

    @_locked
    def add_job(self, job: JobRecord, *, if_absent: bool = False) -> bool:
        """Insert a job and its nodes (one transaction); returns whether it was inserted.

        With ``if_absent`` a job of that id already stored (adopted meanwhile by another
        caller or another gpuconsole process) is left as it is and False returned; without it
        that raises ``sqlite3.IntegrityError``.
        """
        verb = "INSERT OR IGNORE" if if_absent else "INSERT"
        with self.db:
            cur = self.db.execute(
                f"{verb} INTO jobs (id, name, profile, profile_source, spec_json, spec_hash, "
                "created_at, node_count, state, launcher, updated_at) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (
                    job.id,
                    job.name,
                    job.profile,
                    job.profile_source,
                    json.dumps(job.spec),
                    job.spec_hash,
                    job.created_at,
                    job.node_count,
                    job.state,
                    job.launcher,
                    time.time(),
                ),
            )
            if cur.rowcount == 0:
                return False
            for n in job.nodes:
                self._put_node(n)
        return True

    def _put_node(self, n: NodeRecord) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO nodes (job_id, node_rank, host, container_id, "
            "container_name, state, exit_code, started_at, finished_at, stop_requested) "
            "VALUES (?,?,?,?,?,?,?,?,?,?)",
            (
                n.job_id,
                n.node_rank,
                n.host,
                n.container_id,
                n.container_name,
                n.state,
                n.exit_code,
                n.started_at,
                n.finished_at,
                int(n.stop_requested),
            ),
        )

    @_locked
    def update_nodes(self, nodes: list[NodeRecord]) -> None:
        """Write back node records."""
        with self.db:
            for n in nodes:
                self._put_node(n)

    @_locked
    def update_job(self, job_id: str, **fields: Any) -> None:
        """Set job columns: ``state``, ``exit_code``, ``failure``, ``stop_requested_at``,
        ``removed_at``, ``launcher``.

        Raises:
            KeyError: another field.
        """
        allowed = {"state", "exit_code", "failure", "stop_requested_at", "removed_at", "launcher"}
        cols, vals = [], []
        for k, v in fields.items():
            if k not in allowed:
                raise KeyError(k)
            if k == "failure":
                k, v = "failure_json", json.dumps(v) if v is not None else None
            cols.append(f"{k}=?")
            vals.append(v)
        with self.db:
            self.db.execute(
                f"UPDATE jobs SET {', '.join(cols)}, updated_at=? WHERE id=?",
                (*vals, time.time(), job_id),
            )

    @_locked
    def delete_job(self, job_id: str) -> None:
        """Forget a job entirely (used when a launch is rolled back)."""
        with self.db:
            self.db.execute("DELETE FROM nodes WHERE job_id=?", (job_id,))
            self.db.execute("DELETE FROM jobs WHERE id=?", (job_id,))

    def _row_to_job(self, row: sqlite3.Row) -> JobRecord:
        try:
            return self._read_job(row)
        except (ValueError, TypeError, KeyError, IndexError) as e:
            raise self._damaged(e) from e

    def _read_job(self, row: sqlite3.Row) -> JobRecord:
        job = JobRecord(
            id=row["id"],
            name=row["name"],
            profile=row["profile"],
            profile_source=row["profile_source"],
            spec=json.loads(row["spec_json"]),
            spec_hash=row["spec_hash"],
            created_at=row["created_at"],
            node_count=row["node_count"],
            state=row["state"],
            exit_code=row["exit_code"],
            failure=cast(FailureRecord, json.loads(row["failure_json"]))
            if row["failure_json"]
            else None,
            stop_requested_at=row["stop_requested_at"],
            removed_at=row["removed_at"],
            launcher=row["launcher"],
        )
        for n in self.db.execute(
            "SELECT * FROM nodes WHERE job_id=? ORDER BY node_rank", (job.id,)
        ):
            job.nodes.append(
                NodeRecord(
                    job_id=n["job_id"],
                    node_rank=n["node_rank"],
                    host=n["host"],
                    container_name=n["container_name"],
                    container_id=n["container_id"],
                    state=n["state"],
                    exit_code=n["exit_code"],
                    started_at=n["started_at"],
                    finished_at=n["finished_at"],
                    stop_requested=bool(n["stop_requested"]),
                )
            )
        return job

    @_locked
    def get(self, job_id: str) -> JobRecord | None:
        """The job with this exact id, or ``None``."""
        row = self.db.execute("SELECT * FROM jobs WHERE id=?", (job_id,)).fetchone()
        return self._row_to_job(row) if row else None

    @_locked
    def find(self, ref: str) -> list[JobRecord]:
        """Jobs matching an id, an id prefix or a name (newest first)."""
        rows = self.db.execute(
            "SELECT * FROM jobs WHERE id=? OR id LIKE ? OR name=? ORDER BY created_at DESC",
            (ref, ref.replace("%", "") + "%", ref),
        ).fetchall()
        exact = [r for r in rows if r["id"] == ref]
        return [self._row_to_job(r) for r in (exact or rows)]

    @_locked
    def jobs(self, include_removed: bool = False) -> list[JobRecord]:
        """All jobs, newest first."""
        q = "SELECT * FROM jobs"
        if not include_removed:
            q += " WHERE removed_at IS NULL"
        return [self._row_to_job(r) for r in self.db.execute(q + " ORDER BY created_at DESC")]

    # -- log archive ------------------------------------------------------------------------

    def log_path(self, job_id: str, node_rank: int) -> Path:
        """The archive file of one node's log.

        Raises:
            ValueError: ``job_id`` is not one path component (``/``, ``.``, ``..``, NUL): the
                archive never leaves ``<state dir>/logs``.
        """
        return self.job_log_dir(job_id) / f"node{node_rank}.log"

    def job_log_dir(self, job_id: str) -> Path:
        """``<state dir>/logs/<job id>``.

        Raises:
            ValueError: ``job_id`` is not one path component (see :meth:`log_path`).
        """
        if job_id in ("", ".", "..") or "/" in job_id or "\0" in job_id:
            raise ValueError(f"job id {job_id[:80]!r} cannot name a folder")
        return self.root / "logs" / job_id

    def archive(self, job_id: str, node_rank: int, lines: list[LogLine]) -> int:
        """Append lines newer than the archive's end; returns how many were written.

        Lines at exactly the archive's last timestamp are compared by text (multiset), so a
        resumed stream that repeats the boundary never duplicates it. The batch is kept whole
        or not at all: a write that fails (no space left) is cut off again at the offset the
        file had before it, and a last line left without its ``\n`` by an earlier write cut
        short (a kill) is dropped before the archive's end is read, so the archive never
        holds a partial line and its end is always a line that was written whole.

        Raises:
            StateError: the archive cannot be written (no space left, read-only, a
                directory); the file is as it was before the call.
        """
        if not lines:
            return 0
        path = self.log_path(job_id, node_rank)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # unbuffered: nothing of a failed write stays in a buffer to be flushed at close
            with open(path, "a+b", buffering=0) as f:
                fcntl.flock(f, fcntl.LOCK_EX)
                try:
                    good = _drop_partial_line(f)
                    last_ts, at_last = _tail_cursor(f)
                    cursor = LogCursor(last_ts, at_last)
                    cursor.rewind()
                    out = [f"{ln.ts_ns} {ln.text}\n".encode() for ln in lines if cursor.accept(ln)]
                    _append_whole(f, b"".join(out), good)
                    return len(out)
                finally:
                    fcntl.flock(f, fcntl.LOCK_UN)
        except OSError as e:
            raise file_error(e, path, what="log archive", if_lost=IF_ARCHIVE_LOST) from e

    def _open_archive(self, path: Path) -> BinaryIO | None:
        """The archive file opened for reading, or ``None`` when there is none.

        Raises:
            StateError: it cannot be read (a directory, permissions, I/O).
        """
        try:
            return open(path, "rb")
        except FileNotFoundError:
            return None
        except OSError as e:
            raise file_error(e, path, what="log archive", if_lost=IF_ARCHIVE_LOST) from e

    def read_archive(self, job_id: str, node_rank: int) -> Iterator[LogLine]:
        """The archived lines of one node, oldest first.

        Lines are split on ``\n`` only, so a text holding ``\r`` (tqdm redraws) comes back
        exactly as it was archived.
        """
        path = self.log_path(job_id, node_rank)
        f = self._open_archive(path)
        if f is None:
            return
        with f:
            try:
                for raw in f:  # binary files split on b"\n" only
                    line = _parse_archive_line(raw.rstrip(b"\n"))
                    if line is not None:
                        yield line
            except OSError as e:
                raise file_error(e, path, what="log archive", if_lost=IF_ARCHIVE_LOST) from e

    def archive_cursor(self, job_id: str, node_rank: int) -> LogCursor | None:
        """Where one node's archive ends, as a cursor to read its container from: the last
        archived timestamp and the texts archived at it (what :meth:`archive` would keep
        of a container's lines is exactly what the container wrote after it). ``None``
        when the node has no archive or an empty one.

        Raises:
            StateError: the archive cannot be read.
        """
        path = self.log_path(job_id, node_rank)
        f = self._open_archive(path)
        if f is None:
            return None
        try:
            with f:
                last_ts, at_last = _tail_cursor(f)
        except OSError as e:
            raise file_error(e, path, what="log archive", if_lost=IF_ARCHIVE_LOST) from e
        return LogCursor(last_ts, at_last) if last_ts >= 0 else None

    def read_archive_tail(self, job_id: str, node_rank: int, n: int) -> list[LogLine]:
        """The last ``n`` archived lines of one node, oldest first.

        Reads backwards from the end in 64 KiB blocks and stops once ``n`` lines are found, so
        the cost follows the size of those lines, not of the file. A final line without its
        ``\n`` (an append in progress) is left out. Missing archive or ``n <= 0``: ``[]``.
        """
        path = self.log_path(job_id, node_rank)
        if n <= 0:
            return []
        f = self._open_archive(path)
        if f is None:
            return []
        try:
            with f:
                return _tail_lines(f, n)
        except OSError as e:
            raise file_error(e, path, what="log archive", if_lost=IF_ARCHIVE_LOST) from e


def migrate(db: sqlite3.Connection, path: Path) -> int:
    """Bring a job database to :data:`SCHEMA_VERSION` (see
    :func:`console.dbschema.migrate_schema`). Returns the version now.

    Raises:
        GpuConsoleError: the file's version is newer than this code knows (written by a
            newer gpuconsole), or a step failed (naming the file and the step).
    """
    return migrate_schema(
        db,
        path,
        MIGRATIONS,
        what="job store",
        if_lost="the jobs on the hosts are found again by their labels",
    )


_BLOCK = 1 << 16


def _drop_partial_line(f: Any) -> int:
    """Cut a last line that lacks its ``\n`` (a write cut short by a kill or a full disk)
    off the archive open in ``f`` (its writer's ``flock`` held); returns the archive's size
    after it: the offset of the end of its last whole line."""
    size = int(f.seek(0, os.SEEK_END))
    pos = size
    while pos > 0:
        start = max(0, pos - _BLOCK)
        f.seek(start)
        block = f.read(pos - start)
        if pos == size and block.endswith(b"\n"):
            return size
        nl = block.rfind(b"\n")
        if nl >= 0:
            good = start + int(nl) + 1
            f.truncate(good)
            return good
        pos = start
    f.truncate(0)
    return 0


def _append_whole(f: Any, data: bytes, good: int) -> None:
    """Append ``data`` to the archive open in ``f`` (``O_APPEND``, unbuffered) whole, or not
    at all: on a failed write the file is cut back to ``good``, its size before.

    Raises:
        OSError: the write failed (ENOSPC...); the file is back at ``good`` bytes.
    """
    view = memoryview(data)
    try:
        while view:
            n = f.write(view)
            if not n:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            view = view[n:]
    except OSError:
        with contextlib.suppress(OSError):
            f.truncate(good)  # frees blocks; needs no space
        raise


def _tail_lines(f: BinaryIO, n: int) -> list[LogLine]:
    """The last ``n`` whole lines of an archive file (see :meth:`Store.read_archive_tail`)."""
    out: list[LogLine] = []  # newest first
    f.seek(0, os.SEEK_END)
    pos = f.tell()
    carry = b""  # the part of a line that lies after this block
    at_end = True  # still looking for the "\n" of the last whole line
    while pos > 0 and len(out) < n:
        size = min(_BLOCK, pos)
        pos -= size
        f.seek(pos)
        block = f.read(size)
        if at_end:
            nl = block.rfind(b"\n")
            if nl < 0:
                continue  # all of it belongs to an unfinished last line
            block = block[:nl]
            at_end = False
        else:
            block += carry
        # every part but the first ends at a "\n"; the first may begin in an
        # earlier block, unless this block starts the file
        parts = block.split(b"\n")
        carry = parts[0] if pos > 0 else b""
        for raw in reversed(parts[1:] if pos > 0 else parts):
            line = _parse_archive_line(raw)
            if line is not None:
                out.append(line)
                if len(out) == n:
                    break
    out.reverse()
    return out


def _parse_archive_line(raw: bytes) -> LogLine | None:
    """``b"<ts ns> <text>"`` -> LogLine (invalid UTF-8 replaced); ``None`` if malformed."""
    ts, sep, text = raw.partition(b" ")
    if not sep:
        return None
    try:
        return LogLine(int(ts), text.decode("utf-8", errors="replace"))
    except ValueError:
        return None


def _tail_cursor(f: Any) -> tuple[int, dict[str, int]]:
    """Last timestamp of an archive file and the texts (with counts) written at it; a last
    line without its ``\n`` (a write cut short) does not count.

    Reads backwards from the end in growing windows (4 KiB first) and decodes only the lines
    at the last timestamp, so appending a batch costs the same however long the archive is.
    """
    f.seek(0, os.SEEK_END)
    size = f.tell()
    if size == 0:
        return -1, {}
    window = 1 << 12
    while True:
        chunk = min(size, window)
        f.seek(size - chunk)
        # split on "\n" only: str.splitlines would also split a text at its "\r" (tqdm)
        tail = f.read(chunk).split(b"\n")
        tail.pop()  # b"" after the last "\n", or a last line without its "\n" (cut short)
        if chunk < size:
            tail = tail[1:]  # the first piece may be cut
        last_ts = -1
        counts: dict[str, int] = {}
        closed = False  # a line before the last timestamp's group was seen
        for raw in reversed(tail):
            ts_b, _, text = raw.partition(b" ")
            try:
                ts = int(ts_b)
            except ValueError:
                continue
            if last_ts == -1:
                last_ts = ts
            if ts != last_ts:
                closed = True
                break
            key = text.decode(errors="replace")
            counts[key] = counts.get(key, 0) + 1
        if closed or chunk == size:
            return last_ts, counts
        window *= 8
