"""Archive reads that do not read whole files: the tail, exact round trip of "\\r" lines."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import pytest

from console.jobs.logs import read_job_logs
from console.jobs.store import JobRecord, NodeRecord, Store
from console.session import Session
from remote.docker import LogLine


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(tmp_path)
    s.add_job(
        JobRecord(
            "j-1",
            "j",
            "p",
            None,
            {},
            "h",
            0.0,
            2,
            nodes=[NodeRecord("j-1", 0, "a", "c0"), NodeRecord("j-1", 1, "b", "c1")],
        )
    )
    return s


def test_carriage_return_lines_round_trip(store: Store) -> None:
    bar = "\rA:  50%|#####     | 5/10 [00:01<00:01]\rA: 100%|##########| 10/10 [00:02<00:00]"
    lines = [
        LogLine(1, "before"),
        LogLine(2, bar),
        LogLine(3, "x\x0by\x1cz\u2028w"),
        LogLine(4, ""),
        LogLine(5, "after"),
    ]
    assert store.archive("j-1", 0, lines) == 5
    assert list(store.read_archive("j-1", 0)) == lines
    assert store.read_archive_tail("j-1", 0, 10) == lines
    # the dedupe cursor reads the file's end the same way: nothing is written twice
    assert store.archive("j-1", 0, lines[3:]) == 0
    assert store.archive("j-1", 0, [LogLine(5, "after"), LogLine(6, bar)]) == 1
    assert store.archive("j-1", 0, [LogLine(6, bar)]) == 0
    assert store.read_archive_tail("j-1", 0, 1) == [LogLine(6, bar)]


def test_invalid_utf8_is_replaced(store: Store) -> None:
    path = store.log_path("j-1", 0)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"1 ok\n2 torn \xe2\x96 glyph\nnot-a-line\n3 end\n")
    want = [LogLine(1, "ok"), LogLine(2, "torn \ufffd glyph"), LogLine(3, "end")]
    assert list(store.read_archive("j-1", 0)) == want
    assert store.read_archive_tail("j-1", 0, 3) == want
    assert store.read_archive_tail("j-1", 0, 2) == want[1:]


def test_tail_edges(store: Store) -> None:
    assert store.read_archive_tail("j-1", 0, 5) == []
    path = store.log_path("j-1", 0)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"1 a\n2 b\n3 unfinish")  # an append in progress
    assert store.read_archive_tail("j-1", 0, 5) == [LogLine(1, "a"), LogLine(2, "b")]
    assert store.read_archive_tail("j-1", 0, 0) == []
    with open(path, "ab") as f:
        f.write(b"ed\n")
    assert store.read_archive_tail("j-1", 0, 1) == [LogLine(3, "unfinished")]
    path.write_bytes(b"1 only-unfinished")
    assert store.read_archive_tail("j-1", 0, 5) == []


def test_lines_longer_than_a_block(store: Store) -> None:
    long_a, long_b = "a" * 200_000, "\r".join(["b" * 50_000] * 3)
    lines = [LogLine(1, "x"), LogLine(2, long_a), LogLine(3, "y"), LogLine(4, long_b)]
    store.archive("j-1", 0, lines)
    assert store.read_archive_tail("j-1", 0, 1) == [lines[3]]
    assert store.read_archive_tail("j-1", 0, 3) == lines[1:]
    assert store.read_archive_tail("j-1", 0, 9) == lines
    assert list(store.read_archive("j-1", 0)) == lines


def test_tail_of_a_50_mb_archive(store: Store) -> None:
    path = store.log_path("j-1", 1)
    path.parent.mkdir(parents=True)
    n = 500_000
    pad = "p" * 90
    with open(path, "wb") as f:
        for start in range(0, n, 50_000):
            f.write(
                "".join(f"{i} line {i:07d} {pad}\n" for i in range(start, start + 50_000)).encode()
            )
    assert path.stat().st_size > 50_000_000
    tail = store.read_archive_tail("j-1", 1, 100)
    assert [ln.ts_ns for ln in tail] == list(range(n - 100, n))
    assert tail[0].text == f"line {n - 100:07d} {pad}"
    assert tail[-1].text == f"line {n - 1:07d} {pad}"


async def test_read_job_logs_tail_reads_each_node_tail(store: Store) -> None:
    store.archive("j-1", 0, [LogLine(t, f"n0 {t}") for t in range(0, 100, 2)])
    store.archive("j-1", 1, [LogLine(t, f"[rank3]:n1 {t}") for t in range(1, 100, 2)])
    job = store.get("j-1")
    assert job is not None
    for n in job.nodes:  # no containers: the archive alone answers
        n.container_id = None
    session = cast(Session, None)
    got = await read_job_logs(session, store, job, tail=5)
    assert [(ln.node_rank, ln.rank, ln.ts_ns, ln.text) for ln in got] == [
        (1, 3, 95, "n1 95"),
        (0, None, 96, "n0 96"),
        (1, 3, 97, "n1 97"),
        (0, None, 98, "n0 98"),
        (1, 3, 99, "n1 99"),
    ]
    got = await read_job_logs(session, store, job, tail=3, since_ns=97, node=0)
    assert [ln.text for ln in got] == ["n0 98"]
    assert await read_job_logs(session, store, job, tail=0) == []
    everything = await read_job_logs(session, store, job)
    assert len(everything) == 100


def test_resumed_batch_is_not_archived_twice_when_its_last_time_spans_many_blocks(
    store: Store,
) -> None:
    """3,000 lines at one timestamp (about 60 KiB, beyond the first 4 KiB window read back
    from the end): a resumed stream repeating all of them adds only what is new."""
    same = [LogLine(2_000, f"line {i:05d} " + "x" * 8) for i in range(3_000)]
    first = [LogLine(1_000, "before"), *same[:2_000]]
    assert store.archive("j-1", 0, first) == 2_001
    assert store.archive("j-1", 0, [*same, LogLine(3_000, "after")]) == 1_001
    assert store.archive("j-1", 0, [*same, LogLine(3_000, "after")]) == 0
    back = list(store.read_archive("j-1", 0))
    assert [ln.text for ln in back] == ["before", *(ln.text for ln in same), "after"]


def test_archive_cursor_is_where_the_archive_ends(store: Store) -> None:
    assert store.archive_cursor("j-1", 0) is None  # no archive yet
    store.archive("j-1", 0, [LogLine(1, "a"), LogLine(2, "b"), LogLine(2, "b"), LogLine(2, "c")])
    cursor = store.archive_cursor("j-1", 0)
    assert cursor is not None
    assert (cursor.ts_ns, cursor.delivered) == (2, {"b": 2, "c": 1})
    # read from it, a container's log keeps exactly what archiving would keep
    cursor.rewind()
    again = [LogLine(2, "b"), LogLine(2, "b"), LogLine(2, "c"), LogLine(2, "d"), LogLine(3, "e")]
    assert [ln for ln in again if cursor.accept(ln)] == again[3:]
    store.log_path("j-1", 1).parent.mkdir(parents=True, exist_ok=True)
    store.log_path("j-1", 1).write_bytes(b"7 unfinished")  # an append cut short
    assert store.archive_cursor("j-1", 1) is None
