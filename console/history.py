"""The fleet's history: one row per GPU per minute, and per running job per minute its
throughput, in ``history.sqlite3`` in the state dir; what ``gpuconsole report`` reads.

Fed by whatever sees telemetry or progress: ``watch``, the app and ``top`` (the fleet's
samples, :meth:`HistoryRecorder.on_sample`), ``ps``, ``watch`` and the app (jobs' progress,
:meth:`HistoryRecorder.on_progress`). Rolled up in memory per minute (of the host's clock) and
written by one writer thread, so the event loop never waits on the disk: a full queue drops
the minute (counted and logged once) rather than block.

A row (``gpu_minute``): the minute (Unix s / 60), host, GPU index, the gpuconsole job holding
it (or none), the user owning its processes (as ``nvidia-smi``/nvitop show them; ``root``
for containers run as root), the seconds covered by samples, of those the seconds it was held
(a process on it) and busy (utilization.gpu at or above ``idle_pct``), its mean
utilization.gpu (%), most memory used (MiB) and mean power (W). Names are stored once
(``names``) and rows hold their ids: ~45 bytes per GPU-minute on disk
(docs/benchmarks.md). ``job_minute`` keeps a job's steps/s and rate as last read in that
minute.

Bounded: minute rows older than :data:`MINUTE_DAYS` are rolled up into hour rows
(``gpu_hour``: per GPU, job and user; ~0.6 KB per GPU-day), rows older than
``retention_days`` are deleted, and the oldest go first while the file is over ``max_bytes``
(checked every :data:`PRUNE_EVERY_S`). Two processes
recording the same minute of the same GPU (``watch`` and the app) keep the row that covers
more seconds.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from console.dbschema import migrate_schema
from console.statefiles import db_error

if TYPE_CHECKING:
    from console.fleet.state import FleetState
    from console.throughput import JobProgress
    from remote.telemetry.schema import Sample

log = logging.getLogger("gpuconsole.history")

FILE = "history.sqlite3"
IF_LOST = "the GPU-hours history that `report` reads"
#: How long rows are kept (days).
RETENTION_DAYS = 90
#: Minute rows older than this (days) are rolled up into one row per GPU, job and user per
#: hour (``gpu_hour``): a 60th of the bytes.
MINUTE_DAYS = 3
#: Largest file size before the oldest rows go (bytes).
MAX_BYTES = 1 << 30
#: Seconds between checks of age and size.
PRUNE_EVERY_S = 600.0
#: Batches the writer may hold before new ones are dropped.
QUEUE_MAX = 1000
#: Utilization (%) under which a held GPU is idle (the ``gpus_idle`` rule's default).
IDLE_PCT = 5.0

MIGRATIONS: dict[int, list[str]] = {
    1: [
        "CREATE TABLE names (id INTEGER PRIMARY KEY, kind TEXT NOT NULL, text TEXT NOT NULL, "
        "UNIQUE (kind, text))",
        # values scaled to integers: util and power x10, seconds whole
        "CREATE TABLE gpu_minute (minute INTEGER NOT NULL, host INTEGER NOT NULL, "
        "gpu INTEGER NOT NULL, job INTEGER, user INTEGER, seconds INTEGER NOT NULL, "
        "held INTEGER NOT NULL, busy INTEGER NOT NULL, util10 INTEGER, mem INTEGER, "
        "power10 INTEGER, PRIMARY KEY (minute, host, gpu)) WITHOUT ROWID",
        "CREATE TABLE job_minute (minute INTEGER NOT NULL, job INTEGER NOT NULL, "
        "steps_per_s REAL, rate REAL, rate_unit TEXT, tflops REAL, mfu_pct REAL, "
        "PRIMARY KEY (minute, job)) WITHOUT ROWID",
        "CREATE TABLE jobs (job INTEGER PRIMARY KEY, name TEXT, profile TEXT)",
        # the same columns per hour (job and user 0: none); util10/power10 means over seconds
        "CREATE TABLE gpu_hour (hour INTEGER NOT NULL, host INTEGER NOT NULL, "
        "gpu INTEGER NOT NULL, job INTEGER NOT NULL, user INTEGER NOT NULL, "
        "seconds INTEGER NOT NULL, held INTEGER NOT NULL, busy INTEGER NOT NULL, "
        "util10 INTEGER, mem INTEGER, power10 INTEGER, "
        "PRIMARY KEY (hour, host, gpu, job, user)) WITHOUT ROWID",
    ],
}


@dataclass(frozen=True)
class GpuMinute:
    """One GPU over one minute (or, for rows older than :data:`MINUTE_DAYS`, one hour of one
    job and user on it: ``minute`` its first minute, ``seconds`` up to 3600).

    Attributes:
        minute: Unix s // 60.
        host / gpu: which GPU.
        job: the gpuconsole job holding it (id), or ``None``.
        user: its processes' owner, or ``None`` (free, or unknown).
        seconds: seconds covered by samples (at most 60; 3600 for an hour row).
        held_s: of those, seconds with a process on it.
        busy_s: of those, seconds at or above the idle threshold.
        util_pct: mean utilization.gpu (%), ``None`` when unknown.
        mem_mib: most memory used (MiB), ``None`` when unknown.
        power_w: mean power draw (W), ``None`` when unknown.
    """

    minute: int
    host: str
    gpu: int
    job: str | None
    user: str | None
    seconds: int
    held_s: int
    busy_s: int
    util_pct: float | None
    mem_mib: int | None
    power_w: float | None


@dataclass(frozen=True)
class JobMinute:
    """A running job's progress as last read in one minute."""

    minute: int
    job: str
    steps_per_s: float | None
    rate: float | None
    rate_unit: str | None
    tflops: float | None
    mfu_pct: float | None


@dataclass(frozen=True)
class JobInfo:
    """A job's name and profile, as recorded (the report names jobs by them)."""

    job: str
    name: str | None
    profile: str | None


class HistoryStore:
    """``history.sqlite3``: rows go in through :meth:`write` (a writer thread), come out
    through :meth:`read` (the caller's thread).

    Args:
        root: the state dir.
        retention_days / max_bytes: the bounds (module docstring).

    Raises:
        StateError: the file cannot be opened or migrated (it names the file and the fix).
    """

    def __init__(
        self,
        root: Path,
        *,
        retention_days: float = RETENTION_DAYS,
        max_bytes: int = MAX_BYTES,
    ) -> None:
        self.path = root / FILE
        self.retention_days = retention_days
        self.max_bytes = max_bytes
        self.dropped = 0
        self._queue: queue.Queue[tuple[list[GpuMinute], list[JobMinute], list[JobInfo]] | None]
        self._queue = queue.Queue(QUEUE_MAX)
        self._thread: threading.Thread | None = None
        self._last_prune = 0.0
        root.mkdir(parents=True, exist_ok=True)
        db = self._connect()
        db.close()

    def _connect(self) -> sqlite3.Connection:
        try:
            db = sqlite3.connect(self.path, timeout=30)
            db.execute("PRAGMA journal_mode=WAL")
            migrate_schema(db, self.path, MIGRATIONS, what="history", if_lost=IF_LOST)
        except sqlite3.Error as e:
            raise db_error(e, self.path, what="history", if_lost=IF_LOST) from e
        return db

    # -- writing --------------------------------------------------------------------------------

    def write(
        self,
        gpus: list[GpuMinute] = [],  # noqa: B006 (read only)
        jobs: list[JobMinute] = [],  # noqa: B006 (read only)
        info: list[JobInfo] = [],  # noqa: B006 (read only)
    ) -> None:
        """Hand rows to the writer thread (started on first use); never blocks: a full
        queue drops them (:attr:`dropped` counts the batches)."""
        if not (gpus or jobs or info):
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="history-writer", daemon=True)
            self._thread.start()
        try:
            self._queue.put_nowait((list(gpus), list(jobs), list(info)))
        except queue.Full:
            self.dropped += 1
            if self.dropped == 1:
                log.warning("history: the writer is behind; minutes are being dropped")

    def close(self, timeout: float = 10.0) -> None:
        """Write what is queued and stop the writer (waits at most ``timeout`` s)."""
        if self._thread is None:
            return
        with contextlib.suppress(queue.Full):
            self._queue.put(None, timeout=timeout)
        self._thread.join(timeout)
        self._thread = None

    def _run(self) -> None:
        try:
            db = self._connect()
        except Exception:
            log.exception("history: cannot open %s; nothing is recorded", self.path)
            return
        ids: dict[tuple[str, str], int] = {}
        try:
            while True:
                item = self._queue.get()
                if item is None:
                    return
                gpus, jobs, info = item
                end = False
                for _ in range(QUEUE_MAX):  # what queued meanwhile: one transaction
                    try:
                        more = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if more is None:
                        end = True
                        break
                    gpus, jobs, info = gpus + more[0], jobs + more[1], info + more[2]
                try:
                    self._insert(db, ids, gpus, jobs, info)
                    if time.monotonic() - self._last_prune >= PRUNE_EVERY_S:
                        self._last_prune = time.monotonic()
                        self.prune(db)
                except sqlite3.Error:
                    log.exception("history: cannot write %s (rows dropped)", self.path)
                    ids.clear()
                if end:
                    return
        finally:
            db.close()

    @staticmethod
    def _id(db: sqlite3.Connection, ids: dict[tuple[str, str], int], kind: str, text: str) -> int:
        key = (kind, text)
        got = ids.get(key)
        if got is None:
            db.execute("INSERT OR IGNORE INTO names (kind, text) VALUES (?, ?)", key)
            got = int(
                db.execute("SELECT id FROM names WHERE kind = ? AND text = ?", key).fetchone()[0]
            )
            ids[key] = got
        return got

    def _insert(
        self,
        db: sqlite3.Connection,
        ids: dict[tuple[str, str], int],
        gpus: list[GpuMinute],
        jobs: list[JobMinute],
        info: list[JobInfo],
    ) -> None:
        def opt(kind: str, text: str | None) -> int | None:
            return None if text is None else self._id(db, ids, kind, text)

        def x10(v: float | None) -> int | None:
            return None if v is None else round(v * 10)

        with db:
            db.executemany(
                "INSERT INTO gpu_minute VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (minute, host, gpu) DO UPDATE SET job = excluded.job, "
                "user = excluded.user, seconds = excluded.seconds, held = excluded.held, "
                "busy = excluded.busy, util10 = excluded.util10, mem = excluded.mem, "
                "power10 = excluded.power10 WHERE excluded.seconds > gpu_minute.seconds",
                [
                    (
                        r.minute,
                        self._id(db, ids, "host", r.host),
                        r.gpu,
                        opt("job", r.job),
                        opt("user", r.user),
                        r.seconds,
                        r.held_s,
                        r.busy_s,
                        x10(r.util_pct),
                        r.mem_mib,
                        x10(r.power_w),
                    )
                    for r in gpus
                ],
            )
            db.executemany(
                "INSERT OR REPLACE INTO job_minute VALUES (?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        r.minute,
                        self._id(db, ids, "job", r.job),
                        r.steps_per_s,
                        r.rate,
                        r.rate_unit,
                        r.tflops,
                        r.mfu_pct,
                    )
                    for r in jobs
                ],
            )
            db.executemany(
                "INSERT OR REPLACE INTO jobs VALUES (?, ?, ?)",
                [(self._id(db, ids, "job", r.job), r.name, r.profile) for r in info],
            )

    def prune(self, db: sqlite3.Connection | None = None, now: float | None = None) -> None:
        """Roll minute rows older than :data:`MINUTE_DAYS` (whole hours) up into hour rows,
        delete rows older than the retention, then the oldest while the file is over
        ``max_bytes`` (a tenth of the span at a time; the newest minute always stays)."""
        own = db is None
        conn = db if db is not None else self._connect()
        t = time.time() if now is None else now
        try:
            horizon = int((t - self.retention_days * 86400) // 60)
            rollup = int((t - MINUTE_DAYS * 86400) // 3600) * 60  # an hour's first minute
            with conn:
                conn.execute(
                    "INSERT INTO gpu_hour SELECT minute / 60, host, gpu, IFNULL(job, 0), "
                    "IFNULL(user, 0), SUM(seconds), SUM(held), SUM(busy), "
                    "CAST(ROUND(SUM(util10 * seconds) * 1.0 / NULLIF(SUM("
                    "CASE WHEN util10 IS NULL THEN 0 ELSE seconds END), 0)) AS INTEGER), "
                    "MAX(mem), CAST(ROUND(SUM(power10 * seconds) * 1.0 / NULLIF(SUM("
                    "CASE WHEN power10 IS NULL THEN 0 ELSE seconds END), 0)) AS INTEGER) "
                    "FROM gpu_minute WHERE minute < ? "
                    "GROUP BY minute / 60, host, gpu, IFNULL(job, 0), IFNULL(user, 0) "
                    "ON CONFLICT (hour, host, gpu, job, user) DO UPDATE SET "
                    "seconds = seconds + excluded.seconds, held = held + excluded.held, "
                    "busy = busy + excluded.busy, mem = MAX(IFNULL(mem, 0), excluded.mem)",
                    (rollup,),
                )
                conn.execute("DELETE FROM gpu_minute WHERE minute < ?", (rollup,))
                conn.execute("DELETE FROM gpu_minute WHERE minute < ?", (horizon,))
                conn.execute("DELETE FROM gpu_hour WHERE hour < ?", (horizon // 60,))
                conn.execute("DELETE FROM job_minute WHERE minute < ?", (horizon,))
            for _ in range(10):
                pages = conn.execute("PRAGMA page_count").fetchone()[0]
                free = conn.execute("PRAGMA freelist_count").fetchone()[0]
                size = conn.execute("PRAGMA page_size").fetchone()[0]
                if (pages - free) * size <= self.max_bytes:
                    break
                lo_h, hi_h = conn.execute("SELECT MIN(hour), MAX(hour) FROM gpu_hour").fetchone()
                if lo_h is not None:  # the oldest hours go first
                    cut_h = lo_h + max(1, (hi_h - lo_h) // 10)
                    with conn:
                        conn.execute("DELETE FROM gpu_hour WHERE hour < ?", (cut_h,))
                        conn.execute("DELETE FROM job_minute WHERE minute < ?", (cut_h * 60,))
                    continue
                lo, hi = conn.execute("SELECT MIN(minute), MAX(minute) FROM gpu_minute").fetchone()
                if lo is None:
                    break
                cut = min(hi, lo + max(1, (hi - lo) // 10))  # the newest minute stays
                if cut <= lo:
                    break
                with conn:
                    conn.execute("DELETE FROM gpu_minute WHERE minute < ?", (cut,))
                    conn.execute("DELETE FROM job_minute WHERE minute < ?", (cut,))
        finally:
            if own:
                conn.close()

    # -- reading ------------------------------------------------------------------------------

    def read(self, since: float) -> tuple[list[GpuMinute], list[JobMinute], dict[str, JobInfo]]:
        """Every row from ``since`` (Unix s) on, oldest first, and the jobs' names.

        Raises:
            StateError: the file cannot be read.
        """
        db = self._connect()
        try:
            names = {
                (k, i): t for i, k, t in db.execute("SELECT id, kind, text FROM names").fetchall()
            }
            start = int(since // 60)
            hours = [
                GpuMinute(
                    h * 60,
                    names.get(("host", host), "?"),
                    g,
                    names.get(("job", j)) if j else None,
                    names.get(("user", u)) if u else None,
                    s,
                    held,
                    busy,
                    None if u10 is None else u10 / 10,
                    mem,
                    None if p10 is None else p10 / 10,
                )
                for h, host, g, j, u, s, held, busy, u10, mem, p10 in db.execute(
                    "SELECT * FROM gpu_hour WHERE hour >= ? ORDER BY hour, host, gpu",
                    (start // 60,),
                )
            ]
            gpus = hours + [
                GpuMinute(
                    m,
                    names.get(("host", h), "?"),
                    g,
                    names.get(("job", j)) if j is not None else None,
                    names.get(("user", u)) if u is not None else None,
                    s,
                    held,
                    busy,
                    None if u10 is None else u10 / 10,
                    mem,
                    None if p10 is None else p10 / 10,
                )
                for m, h, g, j, u, s, held, busy, u10, mem, p10 in db.execute(
                    "SELECT * FROM gpu_minute WHERE minute >= ? ORDER BY minute, host, gpu",
                    (start,),
                )
            ]
            jobs = [
                JobMinute(m, names.get(("job", j), "?"), sps, rate, unit, tf, mfu)
                for m, j, sps, rate, unit, tf, mfu in db.execute(
                    "SELECT * FROM job_minute WHERE minute >= ? ORDER BY minute", (start,)
                )
            ]
            info = {
                names.get(("job", j), "?"): JobInfo(names.get(("job", j), "?"), n, p)
                for j, n, p in db.execute("SELECT * FROM jobs")
            }
        except sqlite3.Error as e:
            raise db_error(e, self.path, what="history", if_lost=IF_LOST) from e
        finally:
            db.close()
        return gpus, jobs, info


@dataclass
class _Acc:
    """One GPU's minute so far."""

    minute: int
    job: str | None = None
    user: str | None = None
    seconds: float = 0.0
    held_s: float = 0.0
    busy_s: float = 0.0
    util_sum: float = 0.0
    util_s: float = 0.0
    power_sum: float = 0.0
    power_s: float = 0.0
    mem_max: int | None = None


class HistoryRecorder:
    """Rolls samples and progress up per minute and hands finished minutes to a
    :class:`HistoryStore` (never blocking the caller).

    Args:
        store: where minutes go.
        idle_pct: utilization (%) under which a GPU counts as idle.
        names: job id -> (name, profile), for the report (updated by :meth:`on_progress`
            and :meth:`note_jobs`).
    """

    def __init__(self, store: HistoryStore, *, idle_pct: float = IDLE_PCT) -> None:
        self.store = store
        self.idle_pct = idle_pct
        self._acc: dict[tuple[str, int], _Acc] = {}
        self._known_jobs: set[str] = set()

    def on_sample(self, host: str, sample: Sample, state: FleetState | None = None) -> None:
        """Add one host sample (each GPU counts ``interval_s`` seconds in the minute of the
        sample's ``host_time``); minutes that ended are handed to the store. ``state`` maps
        container ids to jobs."""
        t = sample["host_time"]
        if t is None or sample["state"] not in ("ok", "gpu_lost"):
            return
        minute = int(t // 60)
        dt = min(float(sample["interval_s"] or 1.0), 60.0)
        holders: dict[int, tuple[str | None, str | None]] = {}
        for p in sample["processes"] or ():
            idx = p["gpu_index"]
            if idx is None:
                continue
            job = state.job_of(p["container_id"]) if state is not None else None
            had = holders.get(idx)
            if had is None or (had[0] is None and job is not None):
                holders[idx] = (job.job_id if job is not None else None, p["user"])
        done: list[GpuMinute] = []
        for g in sample["gpus"]:
            idx = g["index"]
            if idx is None or g["lost"]:
                continue
            key = (host, idx)
            acc = self._acc.get(key)
            if acc is None or acc.minute != minute:
                if acc is not None and acc.seconds > 0:
                    done.append(self._row(host, idx, acc))
                acc = self._acc[key] = _Acc(minute)
            held = idx in holders
            if held:
                acc.job, acc.user = holders[idx]
            acc.seconds += dt
            util = g["util_gpu_pct"]
            if held:
                acc.held_s += dt
            if util is not None:
                acc.util_sum += util * dt
                acc.util_s += dt
                if util >= self.idle_pct:
                    acc.busy_s += dt
            if g["power_w"] is not None:
                acc.power_sum += g["power_w"] * dt
                acc.power_s += dt
            mem = g["mem_used_mib"]
            if mem is not None:
                acc.mem_max = mem if acc.mem_max is None else max(acc.mem_max, mem)
        if done:
            self.store.write(gpus=done)

    @staticmethod
    def _row(host: str, gpu: int, a: _Acc) -> GpuMinute:
        return GpuMinute(
            a.minute,
            host,
            gpu,
            a.job,
            a.user,
            round(min(a.seconds, 60.0)),
            round(min(a.held_s, 60.0)),
            round(min(a.busy_s, 60.0)),
            a.util_sum / a.util_s if a.util_s else None,
            a.mem_max,
            a.power_sum / a.power_s if a.power_s else None,
        )

    def on_progress(self, progress: Iterable[JobProgress], names: Mapping[str, JobInfo]) -> None:
        """Record each job's throughput in the minute it was read; ``names`` gives the jobs'
        names and profiles (written once per job)."""
        rows = []
        info = []
        for p in progress:
            tp = p.throughput
            if tp is None:
                continue
            rows.append(
                JobMinute(
                    int(p.read_at // 60),
                    p.job_id,
                    tp.steps_per_s,
                    tp.rate,
                    tp.rate_unit,
                    tp.tflops,
                    tp.mfu_pct,
                )
            )
        for job_id, ji in names.items():
            if job_id not in self._known_jobs:
                self._known_jobs.add(job_id)
                info.append(ji)
        self.store.write(jobs=rows, info=info)

    def note_jobs(self, names: Mapping[str, JobInfo]) -> None:
        """Record jobs' names and profiles (once per job)."""
        new = [ji for job_id, ji in names.items() if job_id not in self._known_jobs]
        self._known_jobs.update(ji.job for ji in new)
        self.store.write(info=new)

    def flush(self) -> None:
        """Hand the minutes in progress to the store (at exit: a partial minute is written
        with the seconds it covers)."""
        rows = [self._row(h, g, a) for (h, g), a in self._acc.items() if a.seconds > 0]
        self._acc.clear()
        self.store.write(gpus=rows)
