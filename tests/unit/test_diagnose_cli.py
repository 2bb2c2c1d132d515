"""``gpuconsole diagnose``'s inputs and exit codes: files, several files, stdin, a pipe (FIFO),
a directory, a device, a binary file, a long line; 0 found, 1 none, 2 unreadable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

from click.testing import CliRunner

from console.cli import main

CASES = Path(__file__).resolve().parents[1] / "data" / "cases"
TRUN12 = CASES / "torchrun" / "trun-12.txt"


def test_file_found_and_json() -> None:
    res = CliRunner().invoke(main, ["diagnose", "--json", str(TRUN12)])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert (data["found"], data["kind"], data["ranks"]) == (True, "cuda_illegal_memory_access", [2])
    assert data["files"] == [str(TRUN12)] and "torchrun log" in data["inputs"]


def test_nothing_found_exits_1_and_names_stdin() -> None:
    res = CliRunner().invoke(main, ["diagnose", "-"], input="epoch 1 loss 0.5\n")
    assert res.exit_code == 1
    assert res.output.strip() == "no known failure found in standard input"


def test_a_pipe_is_read_to_its_end(tmp_path: Path) -> None:
    fifo = tmp_path / "logs.fifo"
    os.mkfifo(fifo)

    def feed() -> None:
        with fifo.open("wb") as f:
            f.write(TRUN12.read_bytes())

    writer = threading.Thread(target=feed)
    writer.start()
    res = subprocess.run(
        [sys.executable, "-m", "console.cli", "diagnose", str(fifo)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    writer.join()
    assert res.returncode == 0, res.stderr
    assert "cuda_illegal_memory_access" in res.stdout


def test_unreadable_inputs_exit_2_naming_the_file(tmp_path: Path) -> None:
    binary = tmp_path / "core"
    binary.write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(5000))
    for arg, says in [
        (str(tmp_path), "is a directory"),
        ("/dev/zero", "is not a file or a pipe"),
        (str(binary), "is binary, not text"),
        (str(tmp_path / "missing.log"), "cannot read"),
    ]:
        res = CliRunner().invoke(main, ["diagnose", arg])
        assert res.exit_code == 2, (arg, res.output)
        assert "error: FILE: " in res.output and says in res.output and "fix:" in res.output


def test_a_long_evidence_line_is_shortened(tmp_path: Path) -> None:
    log = tmp_path / "long.log"
    log.write_text(
        "x" * 1_000_000 + " RuntimeError: CUDA error: an illegal memory access was encountered\n"
    )
    res = CliRunner().invoke(main, ["diagnose", str(log)])
    assert res.exit_code == 0
    assert max(len(line) for line in res.output.splitlines()) < 400
    assert " characters)" in res.output and "1,000,0" in res.output


def test_ctrl_c_while_stdin_is_still_open_ends_at_once() -> None:
    """``diagnose -`` reading a terminal or a pipe still open: the first Ctrl-C ends it
    (``interrupted``, 130), without waiting for the input's end or a second Ctrl-C."""
    import signal
    import time

    proc = subprocess.Popen(
        [sys.executable, "-m", "console.cli", "diagnose", "-"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None
    proc.stdin.write("epoch 1 loss 0.5\n")  # some input, and the pipe stays open
    proc.stdin.flush()
    time.sleep(3)  # started and reading
    proc.send_signal(signal.SIGINT)
    rc = proc.wait(timeout=10)  # stdin still open: not ended by its end
    out, err = proc.communicate()
    assert (rc, out, err) == (130, "", "interrupted\n")
