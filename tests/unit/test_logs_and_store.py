"""Log cursors, timestamps and the archive: resumed streams never lose or repeat a line; the
store's schema migrations."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from console.jobs.logs import JobLogLine, tag_line
from console.jobs.store import SCHEMA_VERSION, JobRecord, NodeRecord, Store
from remote.docker import LogLine, format_ns, parse_rfc3339_ns, split_log_line
from remote.errors import GpuConsoleError
from remote.logs import LogCursor


def test_parse_docker_timestamps() -> None:
    assert parse_rfc3339_ns("2026-11-29T17:00:00.123456789Z") == 1795971600123456789
    # Docker trims trailing zeros of the fraction
    assert parse_rfc3339_ns("2026-11-29T17:00:00.1Z") == 1795971600100000000
    assert parse_rfc3339_ns("2026-11-29T17:00:00Z") == 1795971600000000000
    assert format_ns(1795971600100000000) == "2026-11-29T17:00:00.100000000Z"
    line = split_log_line("2026-11-29T17:00:00.5Z [rank1]:step 3/10 loss 1.0")
    assert line == LogLine(1795971600500000000, "[rank1]:step 3/10 loss 1.0")
    assert split_log_line("no timestamp here") is None


def test_cursor_resume_skips_exactly_what_was_delivered() -> None:
    c = LogCursor()
    first = [LogLine(1, "a"), LogLine(2, "b"), LogLine(3, "x"), LogLine(3, "x")]
    assert [ln for ln in first if c.accept(ln)] == first
    # a resume repeats lines before and at the cursor; a third "x" at ts 3 is new
    c.rewind()
    again = [LogLine(2, "b"), LogLine(3, "x"), LogLine(3, "x"), LogLine(3, "x"), LogLine(4, "c")]
    assert [ln for ln in again if c.accept(ln)] == [LogLine(3, "x"), LogLine(4, "c")]
    assert c.since_ns == 4


def test_archive_dedupes_across_appends(tmp_path: Path) -> None:
    store = Store(tmp_path)
    rec = JobRecord("j-1", "j", "p", None, {}, "h", 0.0, 1, nodes=[NodeRecord("j-1", 0, "a", "c0")])
    store.add_job(rec)
    assert store.archive("j-1", 0, [LogLine(1, "a"), LogLine(2, "b"), LogLine(2, "b2")]) == 3
    assert store.archive("j-1", 0, [LogLine(2, "b"), LogLine(2, "b2"), LogLine(3, "c")]) == 1
    assert [ln.text for ln in store.read_archive("j-1", 0)] == ["a", "b", "b2", "c"]
    assert store.read_archive_tail("j-1", 0, 1)[0].ts_ns == 3
    store.close()


def test_store_round_trip_and_find(tmp_path: Path) -> None:
    store = Store(tmp_path)
    rec = JobRecord(
        "train-abc123",
        "train",
        "local",
        None,
        {"name": "train"},
        "h",
        5.0,
        2,
        nodes=[NodeRecord("train-abc123", 0, "a", "c0"), NodeRecord("train-abc123", 1, "b", "c1")],
    )
    store.add_job(rec)
    store.update_job(
        "train-abc123",
        state="failed",
        exit_code=1,
        failure={"node": 1, "rank": 3, "reason": "boom"},
    )
    got = store.get("train-abc123")
    assert got is not None
    assert (got.state, got.exit_code, got.failure) == (
        "failed",
        1,
        {"node": 1, "rank": 3, "reason": "boom"},
    )
    assert [n.host for n in got.nodes] == ["a", "b"]
    assert [j.id for j in store.find("train")] == ["train-abc123"]
    assert [j.id for j in store.find("train-ab")] == ["train-abc123"]
    assert store.find("nope") == []
    store.close()


def test_adopting_a_job_twice_is_a_no_op(tmp_path: Path) -> None:
    """Two processes (the app's alert rules and a `ps`) may adopt the same job: the second
    insert leaves the first as it is instead of failing."""
    first, second = Store(tmp_path), Store(tmp_path)
    rec = JobRecord(
        "train-abc123",
        "train",
        "local",
        None,
        {},
        "h",
        5.0,
        1,
        nodes=[NodeRecord("train-abc123", 0, "a", "c0", state="running")],
    )
    assert first.add_job(rec, if_absent=True) is True
    other = JobRecord(
        "train-abc123",
        "other",
        "local",
        None,
        {},
        "h",
        6.0,
        1,
        nodes=[NodeRecord("train-abc123", 0, "b", "c9", state="failed")],
    )
    assert second.add_job(other, if_absent=True) is False
    got = second.get("train-abc123")
    assert got is not None and got.name == "train"
    assert [(n.host, n.state) for n in got.nodes] == [("a", "running")]
    with pytest.raises(sqlite3.IntegrityError):
        second.add_job(other)
    first.close()
    second.close()


def test_rank_tags() -> None:
    node = NodeRecord("j", 1, "b", "c")
    assert tag_line(node, LogLine(5, "[rank3]:step 1/2 loss 0.5")) == JobLogLine(
        1, "b", 3, 5, "step 1/2 loss 0.5"
    )
    untagged = tag_line(node, LogLine(6, "W1129 torch/distributed/run.py:874]"))
    assert untagged.rank is None and untagged.tag() == "[n1]"
    assert tag_line(node, LogLine(7, "[rank12]:x")).tag() == "[n1 r12]"


# The schema as gpuconsole wrote it before the store was versioned (user_version 0).
_SCHEMA_UNVERSIONED = """
CREATE TABLE jobs (
    id TEXT PRIMARY KEY, name TEXT NOT NULL, profile TEXT NOT NULL, profile_source TEXT,
    spec_json TEXT NOT NULL, spec_hash TEXT NOT NULL, created_at REAL NOT NULL,
    node_count INTEGER NOT NULL, state TEXT NOT NULL DEFAULT 'pending', exit_code INTEGER,
    failure_json TEXT, stop_requested_at REAL, removed_at REAL, updated_at REAL NOT NULL
);
CREATE TABLE nodes (
    job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE, node_rank INTEGER NOT NULL,
    host TEXT NOT NULL, container_id TEXT, container_name TEXT NOT NULL,
    state TEXT NOT NULL DEFAULT 'pending', exit_code INTEGER, started_at TEXT,
    finished_at TEXT, stop_requested INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (job_id, node_rank)
);
INSERT INTO jobs VALUES ('old-abc123', 'old', 'lab', NULL, '{"name": "old"}', 'h', 7.0, 1,
                         'failed', 1, '{"node": 0, "reason": "boom"}', NULL, NULL, 8.0);
INSERT INTO nodes VALUES ('old-abc123', 0, 'a', 'cid', 'gpuconsole-old-abc123-n0', 'failed',
                          1, NULL, NULL, 0);
"""


def _user_version(path: Path) -> int:
    con = sqlite3.connect(path)
    try:
        return int(con.execute("PRAGMA user_version").fetchone()[0])
    finally:
        con.close()


def test_store_migrates_an_unversioned_store(tmp_path: Path) -> None:
    db = tmp_path / "jobs.sqlite3"
    con = sqlite3.connect(db)
    con.executescript(_SCHEMA_UNVERSIONED)
    con.close()
    assert _user_version(db) == 0
    store = Store(tmp_path)
    assert store.schema_version == SCHEMA_VERSION == 2
    old = store.get("old-abc123")
    assert old is not None
    assert (old.state, old.exit_code, old.failure, old.launcher) == (
        "failed",
        1,
        {"node": 0, "reason": "boom"},
        None,
    )
    assert [(n.host, n.container_id, n.state) for n in old.nodes] == [("a", "cid", "failed")]
    # the column added by schema 2 is written and read back
    rec = JobRecord(
        "new-def456",
        "new",
        "lab",
        None,
        {},
        "h",
        9.0,
        1,
        nodes=[NodeRecord("new-def456", 0, "a", "c")],
        launcher="box 42 1234",
    )
    store.add_job(rec)
    got = store.get("new-def456")
    assert got is not None and got.launcher == "box 42 1234"
    store.update_job("new-def456", launcher=None)
    assert store.get("new-def456").launcher is None  # type: ignore[union-attr]
    store.close()
    assert _user_version(db) == 2
    # opening it again migrates nothing and keeps everything
    again = Store(tmp_path)
    assert [j.id for j in again.jobs()] == ["new-def456", "old-abc123"]
    again.close()


def test_store_migrates_schema_1_and_a_fresh_file(tmp_path: Path) -> None:
    v1 = tmp_path / "v1"
    v1.mkdir()
    con = sqlite3.connect(v1 / "jobs.sqlite3")
    con.executescript(_SCHEMA_UNVERSIONED + "PRAGMA user_version = 1;")
    con.close()
    store = Store(v1)
    assert store.get("old-abc123") is not None
    store.close()
    assert _user_version(v1 / "jobs.sqlite3") == 2
    fresh = Store(tmp_path / "fresh")
    assert fresh.jobs() == []
    fresh.close()
    assert _user_version(tmp_path / "fresh" / "jobs.sqlite3") == 2


def test_store_refuses_a_newer_schema(tmp_path: Path) -> None:
    con = sqlite3.connect(tmp_path / "jobs.sqlite3")
    con.executescript(_SCHEMA_UNVERSIONED + "PRAGMA user_version = 99;")
    con.close()
    with pytest.raises(GpuConsoleError) as e:
        Store(tmp_path)
    assert e.value.message == (
        f"{tmp_path / 'jobs.sqlite3'}: written by a newer gpuconsole "
        "(job store schema 99; this one reads up to 2)"
    )
    assert e.value.hint is not None and "GPUCONSOLE_STATE_DIR" in e.value.hint
    assert _user_version(tmp_path / "jobs.sqlite3") == 99  # left as it was
