"""LogBuffer: bounded ring, per-stream bar replacement, filters, search, errors."""

from __future__ import annotations

from console.jobs.logbuffer import DisplayLine, LogBuffer
from console.jobs.logs import JobLogLine


def ln(text: str, node: int = 0, rank: int | None = None, ts: int = 0) -> JobLogLine:
    return JobLogLine(node, "h", rank, ts, text)


def bar(desc: str, n: int, total: int = 10) -> str:
    return f"{desc}: {n * 100 // total:3d}%|{'#' * n}{' ' * (total - n)}| {n}/{total} " \
           "[00:01<00:01, 1.00it/s]"


def plains(buf: LogBuffer) -> list[str]:
    return [d.plain for d in buf.slice(0, len(buf))]


def test_tag() -> None:
    assert DisplayLine(1, 0, 1, 0, "x", "x").tag() == "[0:1]"
    assert DisplayLine(1, 2, None, 0, "x", "x").tag() == "[2]"


def test_append_counts_and_fields() -> None:
    buf = LogBuffer()
    assert buf.append(ln("\x1b[31mred\x1b[0m", node=1, rank=3, ts=42)) == 1
    d = buf[0]
    assert (d.node_rank, d.rank, d.ts_ns, d.text, d.plain) == (1, 3, 42, "\x1b[31mred\x1b[0m",
                                                                 "red")
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
    n = buf.extend([ln("Epoch 1 loss 0.3"), ln("\x1b[31mRuntimeError: boom\x1b[0m"),
                    ln("epoch 2 LOSS 0.2"), ln("Traceback (most recent call last):")])
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
