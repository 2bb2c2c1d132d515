"""The intake child's pipe form of lines (console/intake.py): lines and their display rows as
plain tuples, read back as JobLogLines only on demand, and left alone by the cyclic GC."""

from __future__ import annotations

import gc
import pickle

from console.intake import HEADER, PackedLines, as_tuple
from console.jobs.logbuffer import display_lines
from console.jobs.logs import JobLogLine


def test_packed_lines_read_back_and_leave_the_gc_alone() -> None:
    lines = [
        JobLogLine(0, "a", 1, 1_000 + i, f"step {i} \x1b[31mloss\x1b[0m 2.5") for i in range(50)
    ]
    lines.append(JobLogLine(1, "b", None, 2_000, "train:  40%|####      | 4/10 [00:01<00:01]"))
    data = pickle.dumps(
        ("lines", [as_tuple(ln) for ln in lines], [tuple(display_lines(ln)) for ln in lines]),
        protocol=pickle.HIGHEST_PROTOCOL,
    )
    framed = HEADER.pack(len(data)) + data
    (size,) = HEADER.unpack(framed[: HEADER.size])
    kind, packed_lines, shown = pickle.loads(framed[HEADER.size : HEADER.size + size])
    assert kind == "lines"
    packed = PackedLines(packed_lines)
    assert len(packed) == 51
    assert list(packed) == lines
    assert packed[-1] == lines[-1] and packed[2:4] == lines[2:4]
    assert [r[5] for r in shown[0]] == ["step 0 loss 2.5"]  # the child's shaping
    assert shown[-1][0][7] == ("train", False)  # a bar's key
    for _ in range(3):  # a collection lets go of one level of nesting
        gc.collect()
    # nothing per line left for the collector's passes
    assert not any(gc.is_tracked(t) for t in packed_lines)
    assert not any(gc.is_tracked(rows) for rows in shown)


def test_a_child_numbers_its_rows_from_its_own_block() -> None:
    """Rows shaped in the intake child keep their sequence numbers in the console (the panes
    key cached rows by them): each child numbers from a block the console reserved, so no
    row of any child or of the console itself shares one."""
    import subprocess
    import sys

    from console.jobs.logbuffer import SEQ_BLOCK, reserve_seq_block

    first, second = reserve_seq_block(), reserve_seq_block()
    assert first >= SEQ_BLOCK and second == first + SEQ_BLOCK
    code = (
        "import sys\n"
        "from console.jobs.logbuffer import number_from, display_lines\n"
        "from console.jobs.logs import JobLogLine\n"
        "number_from(int(sys.argv[1]))\n"
        "print(*[r[0] for i in range(3) for r in display_lines("
        "JobLogLine(0, 'a', 0, i, f'line {i}\\rbar'))])\n"
    )
    got = [
        [
            int(x)
            for x in subprocess.run(
                [sys.executable, "-c", code, str(b)], capture_output=True, text=True, check=True
            ).stdout.split()
        ]
        for b in (first, second)
    ]
    assert got == [[first, first + 1, first + 2], [second, second + 1, second + 2]]
    mine = [r[0] for r in display_lines(JobLogLine(0, "a", 0, 0, "here"))]
    assert mine[0] < SEQ_BLOCK
