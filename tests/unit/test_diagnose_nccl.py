"""Tests of the NCCL rules (console/diagnosis/nccl.py): the handed cases trun-06, trun-08 and
trun-12 (exact values from shared/cases/README.md) and wordings of other NCCL / PyTorch
versions. Every text is a real report's line (source named), with the corpus placeholders."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.diagnosis import Diagnosis, diagnose

CASES = Path(__file__).resolve().parents[1] / "data" / "cases" / "torchrun"
CORPUS = Path(__file__).resolve().parents[1] / "data" / "diagnose" / "corpus" / "nccl"


def diagnosed(text: str) -> Diagnosis:
    found = diagnose(text)
    assert found is not None
    return found


# ---------------------------------------------------------------------------------------------
# Handed cases


def test_trun06_timeout_blames_no_reporting_rank() -> None:
    d = diagnosed((CASES / "trun-06.txt").read_text())
    assert d.kind == "nccl_timeout"
    assert (d.facts["process_group"], d.facts["seq"], d.facts["op"]) == (1, 1580, "ALLREDUCE")
    assert (d.facts["numel"], d.facts["timeout_ms"]) == (466119168, 600000)
    assert d.facts["waited_ms"] == {0: 600060, 4: 600067}
    assert d.facts["last_enqueued"] == {0: 1582, 3: 1582}
    assert d.facts["last_completed"] == {0: 1579, 3: 1579}
    assert d.facts["victims"] == (0, 3, 4)
    assert d.facts["time"] == "03-21 02:07:08"
    assert d.ranks == ()
    assert "10 min" in d.summary and "victims" in d.summary
    assert len(d.evidence) == 4 and all(e.startswith("[rank") for e in d.evidence)


def test_trun08_oom_on_device3_not_the_closed_connection() -> None:
    d = diagnosed((CASES / "trun-08.txt").read_text())
    assert d.kind == "nccl_cuda_oom"
    assert (d.facts["device"], d.facts["pid"], d.facts["host"]) == (3, 3063028, "gpu-node-01")
    assert (d.facts["bytes"], d.facts["nccl_result"]) == (6291456, 1)
    assert d.facts["other_pids"] == (3063025,)
    assert d.ranks == ()
    assert "6 MiB" in d.summary and "P2P" in d.summary and "communicator init" in d.summary
    assert "GPU 3" in d.fix
    assert not any("Connection closed" in e for e in d.evidence)
    assert {c.kind for c in d.consequences} >= {"nccl_remote_error", "nccl_internal_error"}


def test_trun12_watchdog_cuda_error_is_the_cuda_id_on_rank2() -> None:
    d = diagnosed((CASES / "trun-12.txt").read_text())
    assert d.kind == "cuda_illegal_memory_access"
    assert d.ranks == (2,)
    assert (d.facts["process_group"], d.facts["pg_name"]) == (0, "default_pg")
    assert d.facts["error"] == "an illegal memory access was encountered"
    assert "SIGABRT" in d.summary


# ---------------------------------------------------------------------------------------------
# Result codes in other wordings


def test_nccl_error_n_older_wording() -> None:
    # NVIDIA/nccl#1283 (title): torch.cuda.nccl's wording.
    d = diagnosed(
        "RuntimeError: NCCL Error 1: unhandled cuda error (run with NCCL_DEBUG=INFO for details)"
    )
    assert (d.kind, d.facts["nccl_result"]) == ("nccl_unhandled_cuda", 1)


def test_nccl_tests_failure_wording() -> None:
    # NVIDIA/nccl-tests#166 (title).
    d = diagnosed(
        "Test NCCL failure common.cu:958 'internal error - please report this issue "
        "to the NCCL developers / '"
    )
    assert (d.kind, d.facts["nccl_result"]) == ("nccl_internal_error", 3)


def test_last_error_on_the_same_line_decides_the_kind() -> None:
    # deepseek-ai/DeepEP#106: the paste collapsed the lines; the remote error's Last error is an
    # IB completion error with status 5 (IBV_WC_WR_FLUSH_ERR): the connection to the peer broke,
    # which NCCL itself reports as ncclRemoteError (net_ib.cc; corrected from
    # nccl_system_error, see hold-012 / nccl-007).
    d = diagnosed(
        "ith exception: NCCL error: remote process exited or there was a network error, NCCL "
        "version 2.20.5  ncclRemoteError: A call failed possibly due to a network error or a "
        "remote process exiting prematurely.                   Last error:      NET/IB : Got "
        "completion from peer 192.0.2.89<38536> with error 5, opcode 48, len 32710, vendor err 249"
    )
    assert d.kind == "nccl_remote_error"
    assert d.facts["nccl_version"] == "2.20.5"
    assert str(d.facts["last_error"]).startswith("NET/IB : Got completion from peer")


def test_result_line_does_not_lose_to_its_own_traceback() -> None:
    # nccl-016's PyTorch part alone, with the traceback header: the NCCL id, not "exception".
    lines = (CORPUS / "nccl-016.txt").read_text().splitlines()
    text = "Traceback (most recent call last):\n" + "\n".join(lines[:9])
    d = diagnosed(text)
    assert (d.kind, d.facts["nccl_result"], d.facts["nccl_version"]) == (
        "nccl_internal_error",
        3,
        "2.18.1",
    )


def test_old_socket_warn_without_nccl_word() -> None:
    # NVIDIA/nccl#111 (NCCL 2.0): no "NCCL WARN" yet, the result string decides.
    d = diagnosed(
        "gpu-node-01 [0] include/socket.h:185 WARN Call to connect failed : Connection refused\n"
        "NCCL failure MyProgram.cu:110 'unhandled system error'\n"
    )
    assert d.kind == "nccl_system_error"


# ---------------------------------------------------------------------------------------------
# The watchdog


def test_heartbeat_next_to_a_collective_timeout() -> None:
    # snowflakedb/ArcticTraining#219: the collective timeout stays the cause, the stuck
    # watchdogs of ranks 7 and 5 are named.
    text = (
        "[rank7]:[E626 05:14:36.393067540 ProcessGroupNCCL.cpp:1743] [PG ID 0 PG GUID "
        "0(default_pg) Rank 7] ProcessGroupNCCL's watchdog got stuck for 480 seconds without "
        "making progress in monitoring enqueued collectives.\n"
        "[rank2]:[E626 05:06:30.929096625 ProcessGroupNCCL.cpp:632] [Rank 2] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=120049, OpType=_ALLGATHER_BASE, "
        "NumelIn=16384000, NumelOut=131072000, Timeout(ms)=1800000) ran for 1800065 milliseconds "
        "before timing out.\n"
        "[rank5]:[E626 05:14:36.393819762 ProcessGroupNCCL.cpp:1743] [PG ID 0 PG GUID "
        "0(default_pg) Rank 5] ProcessGroupNCCL's watchdog got stuck for 480 seconds without "
        "making progress in monitoring enqueued collectives.\n"
    )
    d = diagnosed(text)
    assert d.kind == "nccl_timeout"
    assert (d.facts["seq"], d.facts["op"], d.facts["timeout_ms"]) == (
        120049,
        "_ALLGATHER_BASE",
        1800000,
    )
    assert d.facts["heartbeat_timeout_s"] == 480
    assert d.facts["victims"] == (2, 5, 7)
    assert "rank 5, 7" in d.summary


def test_communicator_aborted_without_reason() -> None:
    # mlfoundations/open_clip#1087 (title).
    d = diagnosed("RuntimeError: : NCCL communicator was aborted on rank 3")
    assert d.kind == "nccl_timeout"
    assert d.facts["victims"] == (3,)
    assert d.ranks == ()


def test_async_error_is_not_a_timeout() -> None:
    d = diagnosed((CORPUS / "nccl-026.txt").read_text())
    assert d.kind == "nccl_system_error"
    assert (d.facts["seq"], d.facts["op"]) == (2, "ALLREDUCE")


@pytest.mark.parametrize(
    "text",
    [
        "gpu-node-01:9621:9688 [3] misc/shmutils.cc:112 NCCL WARN Error while creating shared "
        "memory segment /dev/shm/nccl-KWfVyt (size 5967872)",  # NVIDIA/nccl-tests#166, older
        "[3] include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No space left on device",
    ],
)
def test_shm_segment_failures(text: str) -> None:
    assert diagnosed(text).kind == "shm_exhausted"


def test_info_lines_alone_are_no_failure() -> None:
    assert diagnose((CORPUS / "nccl-014.txt").read_text()) is None
