"""Tests of the torchrun/c10d and CUDA rules (console/diagnosis/torchrun.py, cuda.py).

The handed cases trun-13 and trun-15 (tests/data/cases/torchrun/, expected values from
shared/cases/README.md) get their exact values here; the other tests re-decorate real corpus
texts (tests/data/diagnose/corpus/torch/) the way collectors do, to check the rules match the
stable part of each message and not one report's shape.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from console.diagnosis import Diagnosis, diagnose

DATA = Path(__file__).resolve().parents[1] / "data"
CASES = DATA / "cases" / "torchrun"
CORPUS = DATA / "diagnose" / "corpus" / "torch"


def diagnosed(text: str) -> Diagnosis:
    found = diagnose(text)
    assert found is not None
    return found


def corpus(case_id: str) -> str:
    return (CORPUS / f"{case_id}.txt").read_text(encoding="utf-8")


def test_trun13_sighup_to_the_agent_is_a_hangup() -> None:
    d = diagnosed((CASES / "trun-13.txt").read_text(encoding="utf-8"))
    assert d.kind == "hangup"
    assert d.facts["pid"] == 2920830
    assert d.facts["worker_pids"] == (2920926,)
    assert d.facts["signal"] == "SIGHUP"
    assert d.ranks == ()
    assert "terminal or SSH session" in d.summary
    assert "OOM" in d.summary and "no rank at fault" in d.summary
    assert "tmux" in d.fix or "detached" in d.fix
    assert any("got signal: 1" in e for e in d.evidence)


def test_trun15_libuv_eaddrinuse_is_port_in_use() -> None:
    d = diagnosed((CASES / "trun-15.txt").read_text(encoding="utf-8"))
    assert d.kind == "port_in_use"
    assert d.facts["port"] == 29500
    assert d.ranks == ()
    assert "EADDRINUSE" in d.summary and "not a network or DNS problem" in d.summary
    assert "--master-port" in d.fix
    assert d.consequences == ()


def test_sigterm_to_the_agent_is_stopped_and_closes_the_rendezvous() -> None:
    d = diagnosed(corpus("trc-011"))
    assert (d.kind, d.facts["signal"]) == ("stopped", "SIGTERM")
    assert d.facts["pid"] == 1359  # the glog prefix's process id
    assert d.facts["worker_pids"] == (1365,)
    assert [c.kind for c in d.consequences] == ["rendezvous_failed"]


def test_rendezvous_closed_alone_is_the_root() -> None:
    text = corpus("trc-011").split("On the other node:")[0]
    assert diagnosed(text).kind == "rendezvous_failed"


@pytest.mark.parametrize(
    "decorate",
    [
        pytest.param(lambda i, s: f"2024-05-08T08:47:31.{i:09d}Z stderr F {s}", id="cri"),
        pytest.param(lambda i, s: f"trainer-1  | {s}", id="compose"),
        pytest.param(lambda i, s: f"0: {s}", id="srun-label"),
        pytest.param(
            lambda i, s: json.dumps({"log": s + "\n", "stream": "stderr"}), id="docker-json"
        ),
    ],
)
def test_summary_under_collector_prefixes(decorate: object) -> None:
    assert callable(decorate)
    lines = corpus("trc-014").splitlines()
    d = diagnosed("\n".join(decorate(i, s) for i, s in enumerate(lines)))
    assert (d.kind, d.ranks, d.facts["pid"]) == ("sigabrt", (0,), 2385922)
    assert d.facts["other_ranks"] == (1, 2)


def test_agent_failed_line_without_summary() -> None:
    d = diagnosed(corpus("trc-002"))
    assert (d.kind, d.facts["pid"], d.facts["local_rank"]) == ("sigkill", 899509, 4)
    assert "OOM killer" in d.summary
    # the huge wrapped line is shown around the match only
    assert all(len(e) < 400 for e in d.evidence)


def test_sigkill_with_kernel_oom_record_is_oom_killed() -> None:
    kernel = (
        "[ 5012.123456] Out of memory: Killed process 899509 (python) "
        "total-vm:123456kB, anon-rss:654321kB, file-rss:0kB, shmem-rss:0kB"
    )
    d = diagnosed(corpus("trc-002") + "\n" + kernel + "\n")
    assert (d.kind, d.facts["pid"], d.facts["scope"]) == ("oom_killed", 899509, "host")


def test_exception_wrapping_a_cuda_error_is_not_the_root() -> None:
    d = diagnosed(corpus("trc-016"))
    assert d.kind == "cuda_ecc"
    assert "exception" not in {c.kind for c in d.consequences}


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        # wordings of the same cudaError_t strings in other PyTorch versions
        (
            "RuntimeError: cuda runtime error (10) : invalid device ordinal at "
            "/pytorch/aten/src/THC/THCGeneral.cpp:51",
            "cuda_invalid_device",
        ),
        (
            "RuntimeError: CUDA error: no kernel image is available for execution on the device",
            "cuda_unsupported_arch",
        ),
        (
            "RuntimeError: CUDA error: CUDA driver version is insufficient for CUDA runtime "
            "version",
            "driver_too_old",
        ),
        (
            "RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda "
            "functions before calling NumCudaDevices() that might have already set an error? "
            "Error 802: system not yet initialized",
            "fabric_manager",
        ),
        ("RuntimeError: CUDA error: unspecified launch failure", "cuda_error"),
    ],
)
def test_cuda_error_strings(line: str, kind: str) -> None:
    assert diagnosed(line + "\n").kind == kind


def test_nccl_cuda_failure_is_not_a_cuda_rule_match() -> None:
    text = "gpu-node-01:1:2 [3] NCCL WARN Cuda failure 'out of memory'\n"
    found = diagnose(text)
    assert found is None or found.kind != "cuda_oom"
