"""logtext: shaping raw log lines, on real cases (tests/data/cases/tail-logs/README.md)."""

from __future__ import annotations

from pathlib import Path

from console.jobs.logbuffer import LogBuffer
from console.jobs.logs import JobLogLine
from console.jobs.logtext import (
    MAX_LINE_CHARS,
    is_error_like,
    progress_key,
    shape,
    strip_ansi,
    supersedes,
)

CASES = Path(__file__).resolve().parents[1] / "data" / "cases" / "tail-logs"
B = "\u2588"  # tqdm's full block


def feed(raw: bytes) -> LogBuffer:
    """Feed bytes as Engine.logs would: split on \\n, trailing \\r stripped, UTF-8 replace."""
    buf = LogBuffer()
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    for i, ln in enumerate(lines):
        buf.append(JobLogLine(0, "h", None, i, ln.decode(errors="replace").rstrip("\r")))
    return buf


def view(buf: LogBuffer) -> list[str]:
    return [buf[i].plain for i in range(len(buf))]


def case(name: str) -> list[str]:
    return view(feed((CASES / name).read_bytes()))


# -- the cases -----------------------------------------------------------------------------------


def test_tail_01_bar_glued_to_eval_dict() -> None:
    buf = feed((CASES / "tail-01.txt").read_bytes())
    v = view(buf)
    assert v[0] == f"100%|{B * 10}| 850/850 [1:41:01<00:00,  4.69s/it]"
    assert progress_key(v[0]) == ("", True)
    assert v[1].startswith("{'eval_loss': 0.6620487570762634,")
    assert v[1].endswith("'epoch': 49.41}")
    assert v[2].startswith("{'eval_loss': 0.6605485081672668,")
    assert v[2].endswith("'epoch': 50.0}")
    assert len(v) == 3
    assert buf.search("eval_loss") == [1, 2]


TAIL03_A = f"Loading pt checkpoint shards: 100%|{B * 89}| 1/1 [00:00<00:00,  6.22it/s]"
TAIL03_B = f"Loading pt checkpoint shards: 100%|{B * 10}| 1/1 [00:00<00:00,  5.96it/s]"


def test_tail_03_two_workers_bars_cr_lost() -> None:
    v = case("tail-03.txt")
    assert v == [TAIL03_A, TAIL03_B]


def test_tail_03_with_carriage_returns() -> None:
    lines = (CASES / "tail-03.txt").read_text(encoding="utf-8").splitlines()
    a0 = lines[0][: lines[0].index("]") + 1]
    b0 = lines[0][lines[0].index("]") + 1 :]
    assert progress_key(a0) == ("Loading pt checkpoint shards", False)
    assert progress_key(b0) == ("Loading pt checkpoint shards", False)
    # as tqdm writes it from two processes: "\r" + bar per redraw, "\n" when a bar closes
    interleaved = f"\r{a0}\r{b0}\r{TAIL03_A}\n\r{TAIL03_B}\n".encode()
    assert view(feed(interleaved)) == [TAIL03_A, TAIL03_B]
    # the file's three lines, each redraw with its "\r"
    per_line = f"\r{a0}\r{b0}\n\r{TAIL03_A}\n\r{TAIL03_B}\n".encode()
    assert view(feed(per_line)) == [TAIL03_A, TAIL03_B]


def test_tail_04_lightning_updates_one_per_line() -> None:
    assert case("tail-04.txt") == [
        "Training:   0%|          | 0/18 [00:00<?, ?it/s]",
        f"Epoch 0:  28%|{B * 2}\u258a       | 5/18 [00:20<00:53,  4.14s/it, loss=9.847, "
        "v_num=193315]",
    ]


def test_tail_05_padding_and_hms_remaining() -> None:
    v = case("tail-05.txt")
    assert len(v) == 4
    assert v[2] == "job with `--detach` option."
    assert v[3] == "  2%|\u258f         | 17660/1000000 [02:58<2:45:37, 98.85it/s]"
    assert progress_key(v[3]) == ("", False)


def test_tail_06_cursor_column_and_erase_line() -> None:
    assert case("tail-06.txt") == ["testte:", "test"]


def test_tail_07_loguru_colours_kept() -> None:
    raw = (CASES / "tail-07.txt").read_text(encoding="utf-8").rstrip("\n")
    buf = feed((CASES / "tail-07.txt").read_bytes())
    assert buf[0].plain == "2018-12-27 14:04:17.103 | INFO     | __main__:<module>:9 - b'in8'"
    assert buf[0].text == raw
    assert buf.errors() == []


def test_tail_08_coloured_error_line() -> None:
    buf = feed((CASES / "tail-08.txt").read_bytes())
    assert buf[0].plain == "[2018-11-12T14:49:56.008Z] - ERROR: ESOCKETTIMEDOUT"
    assert "\x1b[31m" in buf[0].text
    assert buf.errors() == [0]


def test_tail_09_bar_remnant_does_not_swallow_log_lines() -> None:
    raw = (CASES / "tail-09.txt").read_text(encoding="utf-8").splitlines()
    assert case("tail-09.txt") == raw


def test_tail_10_torn_utf8_between_workers() -> None:
    assert case("tail-10.bin") == [
        "Map (num_proc=64):  70%|" + "\ufffd" * 7 + "   | 7/10 [00:02<00:01,  4.00ex/s]"
    ]


def test_tail_11_fixed_width_padding_trimmed() -> None:
    raw = (CASES / "tail-11.txt").read_text(encoding="utf-8").splitlines()
    v = case("tail-11.txt")
    assert v == [ln.rstrip() for ln in raw]
    assert len(v) == 10
    assert v[4].endswith("/lab?token=000000000000000000000000000000000000000000000002")


def _bar(n: int, total: int) -> str:
    pct = n * 100 // total
    fill = n * 10 // total
    return (
        f"Map (num_proc=64): {pct:3d}%|{B * fill}{' ' * (10 - fill)}| {n}/{total} "
        f"[00:{n % 60:02d}<00:00, 1234.56ex/s]"
    )


def test_tail_12_six_megabytes_of_redraws() -> None:
    total = 40_000
    final = _bar(total, total)
    with_cr = "".join("\r" + _bar(n, total) for n in range(1, total + 1))
    assert len(with_cr) > 2_000_000
    assert shape(with_cr) == [final]
    glued = "".join(_bar(n, total) for n in range(1, total + 1))
    assert shape(glued) == [final]


def test_tail_13_erase_whole_line_then_cr() -> None:
    assert case("tail-13.txt") == [" Done"]


# -- unit behaviour ------------------------------------------------------------------------------


def test_shorter_segment_overwrites_only_its_columns() -> None:
    assert shape("abcdef\rXY") == ["XYcdef"]
    assert shape("abc\r") == ["abc"]
    assert shape("\rabc") == ["abc"]
    assert shape("abcd\x08\x08X") == ["abXd"]


def test_sgr_kept_without_overlay_other_escapes_removed() -> None:
    assert shape("\x1b[1;31mred\x1b[0m \x1b]0;title\x07x\x07y") == ["\x1b[1;31mred\x1b[0m xy"]
    # erase-to-end of a forward writer erases nothing: colours stay
    assert shape("\x1b[32mok\x1b[0m\x1b[K") == ["\x1b[32mok\x1b[0m"]
    # an overlay computes plain text, unless the last segment alone is visible
    assert shape("\x1b[31mlong text\x1b[0m\rab") == ["abng text"]
    assert shape("old\r\x1b[K\x1b[1mnew!\x1b[0m") == ["\x1b[1mnew!\x1b[0m"]


def test_tabs_expand_to_eight_columns() -> None:
    assert shape("a\tb") == ["a       b"]
    assert shape("\x1b[1mab\x1b[0m\tc") == ["\x1b[1mab\x1b[0m      c"]
    assert shape("abc\rx\ty") == ["xbc     y"]


def test_cap_long_lines() -> None:
    out = shape("y" * 1_000_000)
    assert out == ["y" * MAX_LINE_CHARS + f" …[+{1_000_000 - MAX_LINE_CHARS} chars]"]
    coloured = shape("\x1b[32m" + "g" * (MAX_LINE_CHARS + 5) + "\x1b[0m")
    assert coloured == ["\x1b[32m" + "g" * MAX_LINE_CHARS + "\x1b[0m …[+5 chars]"]
    assert strip_ansi(coloured[0]) == "g" * MAX_LINE_CHARS + " …[+5 chars]"


def test_empty_line() -> None:
    assert shape("") == [""]
    assert shape("   ") == [""]


def test_progress_key_variants() -> None:
    assert progress_key("Epoch 3:  45%|####5     | 45/100 [00:01<00:02, 30.1it/s, loss=0.1]") == (
        "Epoch 3",
        False,
    )
    assert progress_key("100%|##########| 10/10 [00:01<00:00,  9.9it/s]") == ("", True)
    assert progress_key("Downloading: 42it [00:01, 31.00it/s]") == ("Downloading", False)
    assert progress_key("model.bin: 12.3MB [00:01, 10.2MB/s]") == ("model.bin", False)
    assert progress_key("dl: 1.00k/1.00k [00:01<00:00, 1.00kB/s]") == ("dl", True)
    assert progress_key("x: 3/7 [00:01<00:02,  2.00s/it]") == ("x", False)
    assert progress_key("Eval:  42% 42/100 [00:01<00:02, 3.1it/s]") == ("Eval", False)
    assert progress_key("step 42/100 loss 0.3") is None
    assert progress_key("{'eval_loss': 0.66, 'epoch': 50.0}") is None


def test_supersedes_only_unfinished_same_description() -> None:
    a = "A:  10%|#         | 1/10 [00:01<00:09, 1.00it/s]"
    a2 = "A:  20%|##        | 2/10 [00:02<00:08, 1.00it/s]"
    done = "A: 100%|##########| 10/10 [00:10<00:00, 1.00it/s]"
    b = "B:  20%|##        | 2/10 [00:02<00:08, 1.00it/s]"
    assert supersedes(a, a2)
    assert supersedes(a, done)
    assert not supersedes(done, a)
    assert not supersedes(a, b)
    assert not supersedes(a, "plain text")


def test_error_like() -> None:
    for s in [
        "Traceback (most recent call last):",
        "RuntimeError: CUDA error: out of memory",
        "2024 | ERROR | x",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
        "node1:12:12 [0] NCCL WARN Cuda failure",
        "Killed",
        "  exitcode  : -9 (pid: 14750)",
        "FATAL: bad",
        "error: unknown flag",
    ]:
        assert is_error_like(s), s
    for s in ["{'eval_loss': 0.66}", "INFO loading errors.json handler", "100%|##| 2/2"]:
        assert not is_error_like(s), s
