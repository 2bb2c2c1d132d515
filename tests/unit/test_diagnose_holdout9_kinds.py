"""The kinds holdout9 missed, each on a variant of its own (the corpus cases are in
``tests/data/diagnose/corpus/holdout9``): a terminal wrap at a width no list names, the
DataLoader's other signals, compose's exit report, a supervisor's ``exit code: -N``."""

from __future__ import annotations

from console.diagnosis.engine import _context, diagnose

RDZV = (
    "[E socket.cpp:922] [c10d] The client socket has timed out after 600s while trying to "
    "connect to (10.1.2.3, 29500)."
)


def wrapped(text: str, width: int) -> str:
    """``text`` as a terminal of ``width`` columns shows it: every line cut into rows of
    ``width`` characters, mid-word."""
    return "\n".join(
        line[i : i + width]
        for line in text.splitlines()
        for i in range(0, max(len(line), 1), width)
    )


def test_a_wrap_at_any_width_is_undone() -> None:
    text = "\n".join(
        [
            "(RayWorker pid=1234, ip=10.0.0.2) " + RDZV,
            "(RayWorker pid=1235, ip=10.0.0.2) "
            + "Loading checkpoint shards, this takes a while " * 3,
            "(RayWorker pid=1236, ip=10.0.0.2) "
            + "Some weights were not initialized from the model " * 3,
        ]
    )
    # 117 columns: no common terminal width; the address's port lands on the next row
    shown = wrapped(text, 117)
    assert "29500" not in shown.splitlines()[0]
    ctx = _context(shown)
    assert ctx.wrap_width == 117
    d = diagnose(shown)
    assert d is not None and d.kind == "rendezvous_connection", d
    assert (d.facts["host"], d.facts["port"]) == ("10.1.2.3", 29500)


def test_no_wrap_width_without_two_rows_of_one_length() -> None:
    ctx = _context("short line\n" + "x" * 90 + "\n" + "y" * 70)
    assert ctx.wrap_width is None


def test_dataloader_worker_killed_by_other_signals() -> None:
    seg = diagnose(
        "RuntimeError: DataLoader worker (pid 4242) is killed by signal: Segmentation fault."
    )
    assert seg is not None and (seg.kind, seg.facts["pid"]) == ("sigsegv", 4242)
    assert seg.summary.startswith("DataLoader worker process 4242 was killed by SIGSEGV")
    bus = diagnose("RuntimeError: DataLoader worker (pid 77) is killed by signal: Bus error.")
    assert bus is not None and bus.kind == "shm_exhausted"


def test_compose_exit_report() -> None:
    d = diagnose("Attaching to trainer-1\ntrainer-1 exited with code 2")
    assert d is not None and d.kind == "exit_code", d
    assert d.summary.startswith("compose: container trainer-1 exited with code 2")
    assert "docker compose logs" in d.fix


def test_a_supervisors_negative_exit_code_is_the_signal() -> None:
    d = diagnose(
        "ERROR 07-15 21:01:01 [multiproc_executor.py:284] Worker proc VllmWorker-1 died "
        "unexpectedly (exit code: -9), shutting down executor."
    )
    assert d is not None and (d.kind, d.facts["signal"]) == ("sigkill", "SIGKILL"), d
