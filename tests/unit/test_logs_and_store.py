"""Log cursors, timestamps and the archive: resumed streams never lose or repeat a line."""

from __future__ import annotations

from pathlib import Path

from console.jobs.logs import JobLogLine, tag_line
from console.jobs.store import JobRecord, NodeRecord, Store
from remote.docker import LogLine, format_ns, parse_rfc3339_ns, split_log_line
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
    again = [LogLine(2, "b"), LogLine(3, "x"), LogLine(3, "x"), LogLine(3, "x"),
             LogLine(4, "c")]
    assert [ln for ln in again if c.accept(ln)] == [LogLine(3, "x"), LogLine(4, "c")]
    assert c.since_ns == 4


def test_archive_dedupes_across_appends(tmp_path: Path) -> None:
    store = Store(tmp_path)
    rec = JobRecord("j-1", "j", "p", None, {}, "h", 0.0, 1,
                    nodes=[NodeRecord("j-1", 0, "a", "c0")])
    store.add_job(rec)
    assert store.archive("j-1", 0, [LogLine(1, "a"), LogLine(2, "b"), LogLine(2, "b2")]) == 3
    assert store.archive("j-1", 0, [LogLine(2, "b"), LogLine(2, "b2"), LogLine(3, "c")]) == 1
    assert [ln.text for ln in store.read_archive("j-1", 0)] == ["a", "b", "b2", "c"]
    assert store.archive_cursor("j-1", 0) == 3
    store.close()


def test_store_round_trip_and_find(tmp_path: Path) -> None:
    store = Store(tmp_path)
    rec = JobRecord("train-abc123", "train", "local", None, {"name": "train"}, "h", 5.0, 2,
                    nodes=[NodeRecord("train-abc123", 0, "a", "c0"),
                           NodeRecord("train-abc123", 1, "b", "c1")])
    store.add_job(rec)
    store.update_job("train-abc123", state="failed", exit_code=1,
                     failure={"node": 1, "rank": 3, "reason": "boom"})
    got = store.get("train-abc123")
    assert got is not None
    assert (got.state, got.exit_code, got.failure) == ("failed", 1,
                                                      {"node": 1, "rank": 3, "reason": "boom"})
    assert [n.host for n in got.nodes] == ["a", "b"]
    assert [j.id for j in store.find("train")] == ["train-abc123"]
    assert [j.id for j in store.find("train-ab")] == ["train-abc123"]
    assert store.find("nope") == []
    store.close()


def test_rank_tags() -> None:
    node = NodeRecord("j", 1, "b", "c")
    assert tag_line(node, LogLine(5, "[rank3]:step 1/2 loss 0.5")) == JobLogLine(
        1, "b", 3, 5, "step 1/2 loss 0.5")
    untagged = tag_line(node, LogLine(6, "W1129 torch/distributed/run.py:874]"))
    assert untagged.rank is None and untagged.tag() == "[n1]"
    assert tag_line(node, LogLine(7, "[rank12]:x")).tag() == "[n1 r12]"
