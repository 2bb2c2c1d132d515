"""The kinds of failure the held-out corpus showed the rules missing (hold-005/006/007/008/012/
018/029), checked on those cases and on the real variants added for each kind (trc-039..045,
nccl-028/029, slm-010/011): exact ids, facts and orderings, so a regression names its rule."""

from __future__ import annotations

from pathlib import Path

from console.diagnosis import Diagnosis, diagnose

CORPUS = Path(__file__).resolve().parents[1] / "data" / "diagnose" / "corpus"


def _case(area: str, case: str) -> str:
    return (CORPUS / area / f"{case}.txt").read_text(encoding="utf-8")


def _diagnosed(area: str, case: str) -> Diagnosis:
    d = diagnose(_case(area, case))
    assert d is not None, case
    return d


def _consequences(d: Diagnosis) -> list[str]:
    return [c.kind for c in d.consequences]


# --- a bare exception line explains the agent's exit code --------------------------------------


def test_bare_exception_above_the_agents_exit_line_is_the_root() -> None:
    d = _diagnosed("holdout", "hold-005")
    assert (d.kind, d.facts["exception"], d.facts["exitcode"], d.facts["pid"]) == (
        "exception",
        "RuntimeError",
        1,
        820989,
    )
    assert _consequences(d) == ["exit_code"]


def test_bare_exception_after_an_undecoded_prefix() -> None:
    d = _diagnosed("torch", "trc-039")
    assert (d.kind, d.facts["exception"]) == ("exception", "FileNotFoundError")
    tagged = "\n".join(f"gpu-node-07: {ln}" for ln in _case("torch", "trc-039").splitlines())
    t = diagnose(tagged)
    assert t is not None and t.kind == "exception"


def test_bare_exception_without_an_exit_report_is_not_taken() -> None:
    first = _case("holdout", "hold-005").splitlines()[0]
    d = diagnose(first)
    assert d is None or d.kind != "exception"


# --- torch 1.9's no-error-file box and torch.distributed.launch's CalledProcessError -----------


def test_child_process_failed_box_reads_rank_pid_and_exit_code() -> None:
    for case, pid in (("hold-006", 17057), ("trc-040", 32378)):
        area = "holdout" if case.startswith("hold") else "torch"
        d = _diagnosed(area, case)
        assert (d.kind, d.facts["exitcode"], d.facts["pid"], d.ranks) == (
            "exit_code",
            1,
            pid,
            (0,),
        ), case


def test_called_process_error_of_the_launcher_is_the_workers_exit() -> None:
    d = _diagnosed("torch", "trc-041")
    assert (d.kind, d.facts["exitcode"], d.facts["local_rank"]) == ("exit_code", 1, 0)
    assert "pid" not in d.facts


# --- c10d connect retries logged as warnings ---------------------------------------------------


def test_retry_warnings_followed_by_the_run_are_no_failure() -> None:
    assert diagnose(_case("holdout", "hold-008")) is None
    assert diagnose(_case("torch", "trc-042")) is None


def test_retry_warnings_ending_in_the_fatal_error_are_a_connection_failure() -> None:
    d = _diagnosed("torch", "trc-043")
    assert (d.kind, d.facts["host"], d.facts["port"]) == (
        "rendezvous_connection",
        "192.0.2.219",
        23456,
    )


def test_retry_warnings_alone_are_still_a_connection_failure() -> None:
    # trc-043's warnings without the lines after them: nothing shows the run going on.
    warnings = [ln for ln in _case("torch", "trc-043").splitlines() if "[W socket" in ln]
    d = diagnose("\n".join(warnings))
    assert d is not None and d.kind == "rendezvous_connection"


def test_host_from_a_python_argument_list_stops_at_the_quote() -> None:
    d = _diagnosed("holdout", "hold-007")
    assert d.facts["host"] == "192.0.2.16"


# --- IB completion status decides remote vs local ----------------------------------------------


def test_ib_completion_status_names_remote_or_local_fault() -> None:
    expected = {
        ("holdout", "hold-012"): ("nccl_remote_error", 5),  # WR flushed: connection broke
        ("nccl", "nccl-007"): ("nccl_remote_error", 12),  # transport retries exceeded
        ("nccl", "nccl-028"): ("nccl_remote_error", 12),
        ("nccl", "nccl-029"): ("nccl_remote_error", 12),  # NET/IBP title, no WARN prefix
        ("nccl", "nccl-017"): ("nccl_system_error", 4),  # local protection error (ACS)
    }
    for (area, case), (kind, status) in expected.items():
        d = _diagnosed(area, case)
        assert (d.kind, d.facts["ib_status"]) == (kind, status), case


def test_last_error_drops_the_cpp_frames_of_a_joined_paste() -> None:
    d = _diagnosed("holdout", "hold-012")
    assert str(d.facts["last_error"]).endswith("vendor err 249")


# --- PyTorch's CUDA-initialisation warning -----------------------------------------------------


def test_cuda_initialization_warning_is_no_device() -> None:
    for area, case in (("holdout", "hold-018"), ("torch", "trc-044"), ("torch", "trc-045")):
        d = _diagnosed(area, case)
        assert d.kind == "cuda_no_device", case
        assert "cudaErrorUnknown" in d.summary, case


# --- a Slurm cancellation outranks what follows it, not what precedes it -----------------------


def test_requeue_cancellation_outranks_the_task_exits_after_it() -> None:
    d = _diagnosed("holdout", "hold-029")
    assert (d.kind, d.facts["reason"], d.facts["job"]) == ("slurm_cancelled", "JOB REQUEUE", "608")
    assert _consequences(d) == ["exit_code"]


def test_error_above_srun_exits_stays_the_root() -> None:
    assert _diagnosed("slurm", "slm-008").kind == "nccl_invalid_usage"
    assert _diagnosed("slurm", "slm-009").kind == "sigabrt"
