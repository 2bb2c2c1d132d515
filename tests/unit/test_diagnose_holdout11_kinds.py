"""The kinds holdout11 missed, each on a variant of its own (the corpus cases are in
``tests/data/diagnose/corpus/holdout11``): a watchdog report cut mid-word, an all-gather's
output count, NCCL's return trace with no WARN, the proxy's rank, the host's driver version,
TCPStore's retry wording."""

from __future__ import annotations

from console.diagnosis.engine import diagnose


def test_a_watchdog_report_cut_mid_word_is_a_timeout() -> None:
    for cut in ("Watchdog caught coll", "Watchdog caught collective operation tim"):
        text = (
            "  3%|▎         | 52/1752 [02:30<1:20:00,  2.80s/it]"
            f"[rank3]:[E602 11:17:52.185053341 ProcessGroupNCCL.cpp:632] [Rank 3] {cut}\n"
        )
        d = diagnose(text)
        assert d is not None and d.kind == "nccl_timeout", cut
        assert "rank 3" in d.summary and "not this one" in d.summary
    # the words ending a line elsewhere ("Watchdog caught an exception") are no timeout
    assert diagnose("[Rank 3] Watchdog caught exception\n") is None


def test_taken_down_after_a_timeout_without_its_report() -> None:
    text = (
        "[rank2]:[E624 04:14:29.224103812 ProcessGroupNCCL.cpp:684] [Rank 2] Some NCCL "
        "operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, "
        "subsequent GPU operations might run on corrupted/incomplete data.\n"
        "[rank2]:[E624 04:14:29.224139849 ProcessGroupNCCL.cpp:698] [Rank 2] To avoid data "
        "inconsistency, we are taking the entire process down.\n"
    )
    d = diagnose(text)
    assert d is not None and d.kind == "nccl_timeout"
    # with the NCCL error that took it down in the text, that error is the cause
    err = text + (
        "RuntimeError: NCCL error: remote process exited or there was a network error, NCCL "
        "version 2.21.5\n"
    )
    d = diagnose(err)
    assert d is not None and d.kind == "nccl_remote_error"


def test_an_all_gathers_output_count_is_read() -> None:
    text = (
        "[rank0]:[E ProcessGroupNCCL.cpp:1414] [PG 0 Rank 0] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=88, OpType=ALLGATHER, NumelIn=1024, "
        "NumelOut=8192, Timeout(ms)=600000) ran for 600123 milliseconds before timing out.\n"
    )
    d = diagnose(text)
    assert d is not None and d.kind == "nccl_timeout"
    assert (d.facts["numel"], d.facts["numel_in"], d.facts["numel_out"]) == (1024, 1024, 8192)


def test_an_init_failure_seen_only_in_ncclS_return_trace() -> None:
    text = (
        "NCCL version 2.19.3+cuda12.3\n"
        "gpu-node-02:4410:4470 [1] NCCL INFO misc/socket.cc:484 -> 2\n"
        "gpu-node-02:4410:4470 [1] NCCL INFO bootstrap.cc:74 -> 2\n"
        "gpu-node-02:4410:4470 [1] NCCL INFO init.cc:1410 -> 2\n"
        "gpu-node-02:4410:4470 [1] NCCL INFO group.cc:64 -> 2 [Async thread]\n"
    )
    d = diagnose(text)
    assert d is not None and d.kind == "nccl_system_error"
    assert d.facts["phase"] == "init" and d.facts["nccl_version"] == "2.19.3"
    assert d.facts["pid"] == 4410 and d.facts["device"] == 1
    assert any("bootstrap.cc:74 -> 2" in e for e in d.evidence)
    # the same trace of sockets closing outside the set-up is no failure of its own
    later = "gpu-node-02:4410:4470 [1] NCCL INFO misc/socket.cc:484 -> 3\n" * 2
    assert diagnose(later) is None


def test_the_proxy_names_the_rank_whose_allocation_failed() -> None:
    text = (
        "node7:900:950 [5] include/alloc.h:178 NCCL WARN Cuda failure 'out of memory'\n"
        "node7:900:950 [5] include/alloc.h:185 NCCL WARN Failed to CUDA calloc 4194304 bytes\n"
        "node7:900:950 [5] NCCL INFO transport/p2p.cc:204 -> 1\n"
        "node7:900:950 [5] proxy.cc:1519 NCCL WARN [Proxy Service 13] Failed to execute "
        "operation Setup from rank 12, retcode 1\n"
    )
    d = diagnose(text)
    assert d is not None and d.kind == "nccl_cuda_oom"
    assert d.facts["rank"] == 13 and d.facts["device"] == 5 and d.facts["bytes"] == 4194304


def test_the_hosts_driver_version_is_a_fact_of_driver_and_toolkit_causes() -> None:
    smi = (
        "$ nvidia-smi\n"
        "| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4  |\n"
        "$ docker run --rm --gpus all nvidia/cuda:12.4.1-base-ubuntu22.04 nvidia-smi\n"
        'docker: Error response from daemon: could not select device driver "" with '
        "capabilities: [[gpu]].\n"
    )
    d = diagnose(smi)
    assert d is not None and d.kind == "docker_no_gpu_driver"
    assert d.facts["driver_version"] == "550.54.15"
    q = "Driver Version                            : 535.161.08\n" + smi.splitlines()[-1] + "\n"
    d = diagnose(q)
    assert d is not None and d.facts["driver_version"] == "535.161.08"


def test_tcpstores_retry_wording_is_a_store_connection_failure() -> None:
    line = (
        "[W1203 09:00:01.000000000 TCPStore.cpp:347] [c10d] TCP client failed to "
        "connect/validate to host 10.8.0.4:29500 - retrying (try=2, timeout=1800000ms, "
        "delay=1490ms): Connection refused\n"
    )
    d = diagnose(line * 3)
    assert d is not None and d.kind == "rendezvous_connection"
    assert (d.facts["host"], d.facts["port"]) == ("10.8.0.4", 29500)
    # retries followed by the run going on: reached in the end, no failure
    assert diagnose(line + "step 1/1000 loss 2.31\nstep 2/1000 loss 2.28\n") is None


SUMMARY_HEAD = (
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
    "============================================================\n"
    "train.py FAILED\n"
    "------------------------------------------------------------\n"
    "Failures:\n"
    "[1]:\n"
    "  time      : 2024-02-01_10:00:00\n"
    "  host      : gpu-node-02\n"
    "  rank      : 5 (local_rank: 1)\n"
    "  exitcode  : 1 (pid: 4242)\n"
    "  error_file: <N/A>\n"
    "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n"
)


def test_a_summary_cut_before_its_root_cause_blames_no_rank() -> None:
    """torchelastic lists the OTHER failed ranks under "Failures:" and the first one under
    "Root Cause (first observed failure)" (ChildFailedError.format_msg): cut before that entry,
    the rank read is one that also failed, not the root."""
    d = diagnose(SUMMARY_HEAD)
    assert d is not None and d.kind == "exit_code"
    assert d.ranks == () and d.facts["exitcode"] == 1 and d.facts["host"] == "gpu-node-02"
    assert "cut off before its Root Cause entry" in d.summary
    whole = SUMMARY_HEAD + (
        "------------------------------------------------------------\n"
        "Root Cause (first observed failure):\n"
        "[0]:\n"
        "  time      : 2024-02-01_09:59:58\n"
        "  host      : gpu-node-01\n"
        "  rank      : 2 (local_rank: 2)\n"
        "  exitcode  : -9 (pid: 3131)\n"
        "  error_file: <N/A>\n"
        "  traceback : Signal 9 (SIGKILL) received by PID 3131\n"
        "============================================================\n"
    )
    d = diagnose(whole)
    assert d is not None and d.kind == "sigkill" and d.ranks == (2,)


def test_the_image_of_a_docker_run_continued_over_lines() -> None:
    text = (
        "$ sudo docker run \\\n"
        "    --rm --gpus all \\\n"
        "    -e NVIDIA_DRIVER_CAPABILITIES=all \\\n"
        "    nvcr.io/nvidia/pytorch:24.05-py3 nvidia-smi\n"
        'docker: Error response from daemon: could not select device driver "" with '
        "capabilities: [[gpu]].\n"
    )
    d = diagnose(text)
    assert d is not None and d.kind == "docker_no_gpu_driver"
    assert d.facts["image"] == "nvcr.io/nvidia/pytorch:24.05-py3"


def test_nvml_refused_at_its_start_is_every_reading() -> None:
    text = (
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3/dist-packages/pynvml.py", line 1450, in nvmlInit\n'
        "    nvmlInitWithFlags(0)\n"
        '  File "/usr/lib/python3/dist-packages/pynvml.py", line 1440, in nvmlInitWithFlags\n'
        "    _nvmlCheckReturn(ret)\n"
        '  File "/usr/lib/python3/dist-packages/pynvml.py", line 765, in _nvmlCheckReturn\n'
        "    raise NVMLError(ret)\n"
        "pynvml.NVMLError_NoPermission: Insufficient Permissions\n"
    )
    d = diagnose(text)
    assert d is not None and d.kind == "nvml_permission"
    assert d.facts["nvml_function"] == "nvmlInitWithFlags"
    assert "every reading fails" in d.summary and "one reading" not in d.summary
