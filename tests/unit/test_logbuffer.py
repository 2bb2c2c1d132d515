"""LogBuffer: bounded ring, per-stream bar replacement, filters, search, errors."""

from __future__ import annotations

import gc

import pytest

from console.jobs.logbuffer import DisplayLine, LogBuffer, display_lines, redraws
from console.jobs.logs import JobLogLine
from console.jobs.logtext import supersedes


def ln(text: str, node: int = 0, rank: int | None = None, ts: int = 0) -> JobLogLine:
    return JobLogLine(node, "h", rank, ts, text)


def bar(desc: str, n: int, total: int = 10) -> str:
    return (
        f"{desc}: {n * 100 // total:3d}%|{'#' * n}{' ' * (total - n)}| {n}/{total} "
        "[00:01<00:01, 1.00it/s]"
    )


def plains(buf: LogBuffer) -> list[str]:
    return [d.plain for d in buf.slice(0, len(buf))]


def test_tag() -> None:
    assert DisplayLine(1, 0, 1, 0, "x", "x").tag() == "[n0 r1]"  # as `logs` tags them
    assert DisplayLine(1, 2, None, 0, "x", "x").tag() == "[n2]"


def test_append_counts_and_fields() -> None:
    buf = LogBuffer()
    assert buf.append(ln("\x1b[31mred\x1b[0m", node=1, rank=3, ts=42)) == 1
    d = buf[0]
    assert (d.node_rank, d.rank, d.ts_ns, d.text, d.plain) == (
        1,
        3,
        42,
        "\x1b[31mred\x1b[0m",
        "red",
    )
    assert buf.total == 1 and len(buf) == 1 and buf.version >= 1
    # a glued bar + text line gives two display lines
    assert buf.append(ln(bar("A", 10) + "{'loss': 1}")) == 2
    assert plains(buf)[1:] == [bar("A", 10), "{'loss': 1}"]


def test_bar_replaced_in_place_per_stream() -> None:
    buf = LogBuffer()
    buf.append(ln(bar("A", 1), rank=0))
    buf.append(ln(bar("A", 1), rank=1))
    seq0 = buf[0].seq
    v = buf.version
    assert buf.append(ln(bar("A", 2), rank=0)) == 0  # replaces rank 0's bar, not rank 1's
    assert buf.version > v
    assert plains(buf) == [bar("A", 2), bar("A", 1)]
    assert buf[0].rank == 0 and buf[0].seq > seq0 and buf[0].seq > buf[1].seq
    assert buf.append(ln(bar("A", 10), rank=0)) == 0
    # finished: the next bar of the same description is a new line
    assert buf.append(ln(bar("A", 1), rank=0)) == 1
    assert plains(buf) == [bar("A", 10), bar("A", 1), bar("A", 1)]
    assert buf.total == 3


def test_bar_not_replaced_after_other_text_of_the_stream() -> None:
    buf = LogBuffer()
    buf.append(ln(bar("A", 1)))
    buf.append(ln("a log line"))
    assert buf.append(ln(bar("A", 2))) == 1
    assert plains(buf) == [bar("A", 1), "a log line", bar("A", 2)]


def test_eviction_and_replacement_of_evicted_line() -> None:
    buf = LogBuffer(maxlen=3)
    buf.append(ln(bar("A", 1), rank=0))
    for i in range(3):
        buf.append(ln(f"line {i}", rank=1))
    assert plains(buf) == ["line 0", "line 1", "line 2"]
    assert buf.dropped == 1 and buf.total == 4
    # rank 0's bar was evicted: its update is a new line
    assert buf.append(ln(bar("A", 2), rank=0)) == 1
    assert plains(buf) == ["line 1", "line 2", bar("A", 2)]
    assert buf.dropped == 2
    assert buf[-1].plain == bar("A", 2)
    for i in range(20):  # compaction keeps indices right
        buf.append(ln(f"more {i}"))
    assert plains(buf) == ["more 17", "more 18", "more 19"]
    assert buf.dropped == 22 and buf.total == 25


def test_filters() -> None:
    only = LogBuffer(node=1, rank=2)
    assert not only.accepts(ln("x", node=0, rank=2))
    assert not only.accepts(ln("x", node=1, rank=None))
    assert only.accepts(ln("x", node=1, rank=2))
    assert only.append(ln("x", node=0, rank=2)) == 0
    assert len(only) == 0
    node_only = LogBuffer(node=1)
    node_only.extend([ln("a", node=1), ln("b", node=0), ln("c", node=1, rank=4)])
    assert plains(node_only) == ["a", "c"]


def test_search_matching_errors() -> None:
    buf = LogBuffer()
    n = buf.extend(
        [
            ln("Epoch 1 loss 0.3"),
            ln("\x1b[31mRuntimeError: boom\x1b[0m"),
            ln("epoch 2 LOSS 0.2"),
            ln("Traceback (most recent call last):"),
        ]
    )
    assert n == 4
    assert buf.search("loss") == [0, 2]
    assert buf.search("loss", ignore_case=False) == [0]
    assert buf.search(r"epoch \d", regex=True) == [0, 2]
    assert buf.search("[unclosed", regex=True) == []  # taken literally, no exception
    assert buf.search("31m") == []  # escapes are not searched
    assert buf.matching("loss") == [0, 2]
    assert buf.matching("loss", invert=True) == [1, 3]
    assert buf.matching("") == [0, 1, 2, 3]
    assert buf.errors() == [1, 3]


def test_errors_follow_eviction_replacement_and_clear() -> None:
    buf = LogBuffer(maxlen=2)
    buf.append(ln("ERROR one"))
    buf.append(ln("ok"))
    buf.append(ln("FATAL two"))
    assert plains(buf) == ["ok", "FATAL two"]
    assert buf.errors() == [1]
    v = buf.version
    buf.clear()
    assert len(buf) == 0 and buf.errors() == [] and buf.version == v + 1
    assert buf.total == 3
    buf.append(ln("Killed"))
    assert buf.errors() == [0] and buf[0].plain == "Killed"


SAMPLES = [
    "",
    "   ",
    "step 10 loss 2.5",
    "[2026-12-01 03:05:01] INFO started",
    "train:  42%|####2     | 42/100 [00:01<00:02, 31.0it/s]",
    "train:  57%|#####7    | 57/100 [00:02<00:01, 31.0it/s]",
    "train: 100%|##########| 100/100 [00:03<00:00, 31.0it/s]",
    "eval:  10%|#         | 1/10 [00:00<00:05, 1.8it/s]",
    "42it [00:01, 31.0it/s]",
    "Epoch 1: 50%|#####     | 5/10 [00:05<00:05, 1.00s/it, loss=0.3]",
]


@pytest.mark.parametrize("prev", SAMPLES)
def test_redraws_agrees_with_supersedes(prev: str) -> None:
    for new in SAMPLES:
        a = display_lines(JobLogLine(0, "h", 0, 0, prev))[0]
        b = display_lines(JobLogLine(0, "h", 0, 0, new))[0]
        assert redraws(a, b) == supersedes(prev.rstrip(), new.rstrip()), (prev, new)


def test_one_raw_line_is_shared_by_every_buffer_that_shows_it() -> None:
    node, merged = LogBuffer(node=0), LogBuffer()
    line = JobLogLine(0, "h", 1, 5, "\x1b[31mERROR\x1b[0m: boom")
    shown = display_lines(line)
    assert node.append_display(line, shown) == merged.append_display(line, shown) == 1
    assert node._items[0] is merged._items[0]  # one stored row, not a copy per buffer
    assert node[0] == merged[0]
    assert (node[0].plain, node[0].error, node[0].bar) == ("ERROR: boom", True, None)
    assert node.errors() == merged.errors() == [0]


def test_stored_rows_leave_the_cyclic_gc_alone() -> None:
    """Buffered lines must not be tracked by the cyclic GC: a million of them made every
    full collection pause the console for about 0.4 s."""
    buf = LogBuffer()
    for i in range(1000):
        buf.append(ln(f"step {i}", rank=i % 2))
    buf.append(ln(bar("train", 3), rank=0))
    gc.collect()
    gc.collect()  # a row holding a tuple (a bar's key) is let go one pass after that tuple
    rows = buf._items
    assert rows[-1][7] == ("train", False)  # a bar row (its key is a nested tuple)
    assert not any(gc.is_tracked(r) for r in rows)
