"""A log archive on a full disk: a write that fails (ENOSPC in the middle of a batch) is not
half-kept, the follow's archiver keeps the lines and writes them once space is back, and the
archive ends with no line repeated and no partial line (issue 20, 1.3)."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

import console.jobs.logs as logs_mod
import console.jobs.store as store_mod
from console.errors import StateError
from console.jobs.logs import _Archiver
from console.jobs.store import JobRecord, NodeRecord, Store
from remote.docker import LogLine

T0 = 1_700_000_000_000_000_000


def lines(first: int, count: int) -> list[LogLine]:
    """Lines ``first..first+count-1``, one ns apart (texts say their number)."""
    return [LogLine(T0 + i, f"line {i} " + "x" * 40) for i in range(first, first + count)]


class Disk:
    """The archive's filesystem: ``free`` bytes left (``None``: plenty). A write that does not
    fit writes what fits, then fails with ENOSPC, as write(2) on a full filesystem does."""

    def __init__(self) -> None:
        self.free: int | None = None
        self.failed_writes = 0


class FullDiskFile:
    """The archive's file object (unbuffered, like the real one) on :class:`Disk`."""

    def __init__(self, raw: Any, disk: Disk) -> None:
        self._raw = raw
        self._disk = disk

    def write(self, data: bytes | memoryview) -> int:
        free = self._disk.free
        if free is None or len(data) <= free:
            n = int(self._raw.write(data))
            if free is not None:
                self._disk.free = free - n
            return n
        if free > 0:  # a part fits: it is written, then the next write fails
            n = int(self._raw.write(bytes(data[:free])))
            self._disk.free = 0
            return n
        self._disk.failed_writes += 1
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)

    def __enter__(self) -> FullDiskFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self._raw.close()


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> Disk:
    d = Disk()
    real_open = open

    def fake_open(path: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        f = real_open(path, mode, *args, **kwargs)
        return FullDiskFile(f, d) if "a" in mode else f

    monkeypatch.setattr(store_mod, "open", fake_open, raising=False)
    return d


def archived(store: Store) -> list[bytes]:
    return store.log_path("j1", 0).read_bytes().split(b"\n")


def expected(first: int, count: int) -> list[bytes]:
    return [f"{ln.ts_ns} {ln.text}".encode() for ln in lines(first, count)] + [b""]


def test_a_write_that_fails_midway_leaves_the_archive_as_it_was(tmp_path: Path, disk: Disk) -> None:
    store = Store(tmp_path)
    assert store.archive("j1", 0, lines(0, 100)) == 100
    before = store.log_path("j1", 0).read_bytes()
    disk.free = 1000  # a few lines of the next batch fit, then the disk is full
    with pytest.raises(StateError) as raised:
        store.archive("j1", 0, lines(100, 100))
    assert raised.value.kind == "full"
    assert raised.value.message.startswith(str(store.log_path("j1", 0)))
    assert "no space left" in raised.value.message
    assert raised.value.hint is not None and "free space" in raised.value.hint
    assert store.log_path("j1", 0).read_bytes() == before  # nothing of the batch kept
    disk.free = None  # space is back: the same batch comes again (a resumed follow)
    assert store.archive("j1", 0, lines(50, 150)) == 100
    assert archived(store) == expected(0, 200)
    store.close()


def test_a_line_cut_short_by_an_earlier_write_is_dropped_not_repeated(tmp_path: Path) -> None:
    """A kill in the middle of a write left half a line (here: half of its timestamp, which
    read as an old time would make every line look new and be archived again)."""
    store = Store(tmp_path)
    store.archive("j1", 0, lines(0, 706))
    with open(store.log_path("j1", 0), "ab") as f:
        f.write(str(T0 + 706)[:5].encode())
    assert store.read_archive_tail("j1", 0, 1)[0].ts_ns == T0 + 705
    assert store.archive("j1", 0, lines(0, 1411)) == 1411 - 706
    assert archived(store) == expected(0, 1411)
    store.close()


def test_the_follow_keeps_lines_while_the_disk_is_full_and_archives_them_after(
    tmp_path: Path, disk: Disk, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(logs_mod, "ARCHIVE_RETRY_S", 0.0)
    store = Store(tmp_path)
    node = NodeRecord("j1", 0, "a", "c0")
    job = JobRecord(
        id="j1",
        name="n",
        profile="p",
        profile_source=None,
        spec={},
        spec_hash="h",
        created_at=0.0,
        node_count=1,
        nodes=[node],
    )
    said: list[tuple[int, StateError | None]] = []
    archiver = _Archiver(store, job, lambda n, e: said.append((n.node_rank, e)))
    archiver.add(node, lines(0, 300))
    archiver.flush()
    disk.free = 2000
    for first in (300, 400, 500):  # three bursts while the disk is full
        archiver.add(node, lines(first, 100))
        archiver.flush()
    assert disk.failed_writes >= 2
    assert [(r, e.kind if e else None) for r, e in said] == [(0, "full")]  # said once
    assert archived(store) == expected(0, 300)  # whole lines only, none of the failed ones
    disk.free = None
    archiver.add(node, lines(600, 100))
    archiver.flush()
    assert [(r, e is None) for r, e in said] == [(0, False), (0, True)]
    assert archived(store) == expected(0, 700)
    store.close()


def test_a_backlog_too_long_stops_archiving_that_node_without_a_gap_or_repeat(
    tmp_path: Path, disk: Disk, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(logs_mod, "ARCHIVE_RETRY_S", 0.0)
    monkeypatch.setattr(logs_mod, "ARCHIVE_BACKLOG", 250)
    store = Store(tmp_path)
    node = NodeRecord("j1", 0, "a", "c0")
    job = JobRecord(
        id="j1",
        name="n",
        profile="p",
        profile_source=None,
        spec={},
        spec_hash="h",
        created_at=0.0,
        node_count=1,
        nodes=[node],
    )
    archiver = _Archiver(store, job, None)
    archiver.add(node, lines(0, 100))
    archiver.flush()
    disk.free = 0
    for first in range(100, 500, 100):
        archiver.add(node, lines(first, 100))
        archiver.flush()
    disk.free = None
    archiver.add(node, lines(500, 100))
    archiver.flush(force=True)
    assert archived(store) == expected(0, 100)  # stopped at a whole line: no gap inside
    # a later `logs` archives the container's lines newer than the archive's end
    assert store.archive("j1", 0, lines(0, 600)) == 500
    assert archived(store) == expected(0, 600)
    store.close()
