"""The kinds holdout17 missed or worded wrongly, on variants of their own (the corpus cases are
in ``tests/data/diagnose/corpus/holdout17``)."""

from __future__ import annotations

import pytest

from console.diagnosis.engine import diagnose
from console.diagnosis.model import Diagnosis


def _d(text: str) -> Diagnosis:
    d = diagnose(text)
    assert d is not None, text
    return d


def _summary(root: str) -> str:
    entries = "".join(
        f"[{i}]:\n  time      : 2024-05-29_07:54:06\n  host      : node-a\n"
        f"  rank      : {r} (local_rank: {r})\n  exitcode  : 1 (pid: {1172 + r})\n"
        "  error_file: <N/A>\n"
        for i, r in ((1, 1), (2, 2), (3, 3))
    )
    return (
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
        "============================================================\n"
        "train.py FAILED\n"
        "------------------------------------------------------------\n"
        f"Failures:\n{entries}"
        "------------------------------------------------------------\n"
        f"Root Cause (first observed failure):\n{root}"
    )


def test_a_root_cause_entry_cut_off_is_not_the_first_other_failure() -> None:
    d = _d(_summary("[0]:\n  time\n"))
    assert d.kind == "exit_code" and d.ranks == (0,)
    assert "cut off" in d.summary and "it is the only rank missing" in d.summary
    # the others leave no single rank out: none is blamed
    gap = _d(
        _summary("[0]:\n  time\n").replace(
            "rank      : 2 (local_rank: 2)", "rank      : 5 (local_rank: 5)"
        )
    )
    assert gap.ranks == ()
    # the entry printed whole is read as itself
    whole = _d(
        _summary(
            "[0]:\n  time      : 2024-05-29_07:54:05\n  host      : node-a\n"
            "  rank      : 0 (local_rank: 0)\n  exitcode  : 2 (pid: 1171)\n"
        )
    )
    assert whole.ranks == (0,) and whole.facts["exitcode"] == 2 and "cut off" not in whole.summary


def test_a_cuda_error_the_line_break_cut_inside_a_word() -> None:
    text = (
        '  File "train.py", line 9, in step loss.backward() RuntimeError: CUDA error: an illeg\n'
        "al memory access was encountered Compile with TORCH_USE_CUDA_DSA to enable device-side "
        "assertions.\n"
    )
    d = _d(text)
    assert d.kind == "cuda_illegal_memory_access"
    assert d.facts["cuda_error"] == "an illegal memory access was encountered"
    # a line that ends a word is left alone
    assert (
        _d("RuntimeError: CUDA error: unspecified launch failure\nal fine\n").kind == "cuda_error"
    )


@pytest.mark.parametrize(
    "line",
    [
        "F0421 09:02:45.161278  7233 math_functions.cu:52] Check failed: status == "
        "CUBLAS_STATUS_SUCCESS (13 vs. 0)  CUBLAS_STATUS_EXECUTION_FAILED",
        "cublas returned CUBLAS_STATUS_INTERNAL_ERROR in gemm",
    ],
)
def test_a_cublas_status_on_its_own_is_a_cuda_error(line: str) -> None:
    d = _d(line + "\n*** Check failure stack trace: ***\nAborted (core dumped)\n")
    assert d.kind == "cuda_error" and d.facts["cuda_error"].startswith("CUBLAS_STATUS_")
    assert "sigabrt" in {c.kind for c in d.consequences}
    assert diagnose("status == CUBLAS_STATUS_SUCCESS\n") is None


def test_no_socket_interface_is_said_as_such() -> None:
    text = (
        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1207, internal "
        "error, NCCL version 2.14.3\nncclInternalError: Internal check failed.\n"
        "Last error:\nBootstrap : no socket interface found\n"
    )
    d = _d(text)
    assert d.kind == "nccl_internal_error" and "no network interface" in d.summary
    assert "NCCL_SOCKET_IFNAME" in d.fix and "version" not in d.summary.split("found.")[-1]
