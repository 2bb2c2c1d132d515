"""tqdm bars through torchrun's --tee (recorded: tests/data/cases/tail-logs/trun-tee-tqdm.txt):
torchrun turns each \\r into a line break and glues the next prefix onto the bar."""

from __future__ import annotations

from pathlib import Path

from console.jobs.logbuffer import LogBuffer
from console.jobs.logs import tag_line
from console.jobs.store import NodeRecord
from remote.docker import LogLine

CASE = Path(__file__).resolve().parents[1] / "data/cases/tail-logs/trun-tee-tqdm.txt"


def _tagged() -> list:  # type: ignore[type-arg]
    node = NodeRecord("j", 0, "a", "c")
    raw = CASE.read_text().splitlines()
    return [tag_line(node, LogLine(i, t)) for i, t in enumerate(raw)]


def test_pane_shows_one_finished_bar() -> None:
    buf = LogBuffer()
    for ln in _tagged():
        buf.append(ln)
    shown = [(buf[i].rank, buf[i].plain) for i in range(len(buf))]
    assert shown == [
        (
            None,
            "[W1201 02:37:44.170377487 socket.cpp:207] [c10d] The hostname of the client "
            "socket cannot be retrieved. err=-3",
        ),
        (0, "progress: 100%|##########| 100/100 [00:04<00:00, 9.9it/s]"),
    ]


def test_tagged_lines_carry_no_inner_rank_prefix() -> None:
    lines = _tagged()
    assert [ln.rank for ln in lines] == [None, 0, 0, 0, 0, 0, 0]
    assert not any("[rank0]:" in ln.text for ln in lines)
    assert lines[3].text == "progress:  25%|##        | 25/100 [00:01<00:00, 9.9it/s]\r"
    assert lines[1].text == ""


def test_empty_line_before_a_plain_line_stays() -> None:
    buf = LogBuffer()
    node = NodeRecord("j", 0, "a", "c")
    for i, t in enumerate(["[rank0]:epoch 1", "[rank0]:", "[rank0]:epoch 2"]):
        buf.append(tag_line(node, LogLine(i, t)))
    assert [buf[i].plain for i in range(len(buf))] == ["epoch 1", "", "epoch 2"]


def test_pytorch_own_rank_prefix_is_not_a_carriage_return() -> None:
    """PyTorch 2.x prints a rank's error output with its own ``[rankN]: `` under torchrun's
    tee prefix (recorded: rec-003, a real 2-node run): one tag, the line intact."""
    node = NodeRecord("j", 1, "b", "c")
    raw = [
        "[rank1]:[rank1]: Traceback (most recent call last):",
        '[rank1]:[rank1]:   File "/workspace/train_ddp.py", line 184, in <module>',
        "[rank1]:[rank1]: RuntimeError: injected failure on rank 1 at step 3",
    ]
    lines = [tag_line(node, LogLine(i, t)) for i, t in enumerate(raw)]
    assert [(ln.rank, ln.text) for ln in lines] == [
        (1, "Traceback (most recent call last):"),
        (1, '  File "/workspace/train_ddp.py", line 184, in <module>'),
        (1, "RuntimeError: injected failure on rank 1 at step 3"),
    ]
