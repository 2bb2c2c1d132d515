"""The kinds holdout14 missed, on variants of their own (the corpus cases are in
``tests/data/diagnose/corpus/holdout14``): a launcher traceback cut inside a dotted name, the
rendezvous endpoint of the launcher's config block, the watchdog report cut after its
WorkNCCL(...), a reversed traceback's NCCL detail, NCCL's socket connect WARN cut inside its
address, PyTorch's OOM sizes without their head, a generic CUDA failure on a GPU newer than
the build's CUDA, Docker's device-driver error without the driver's name."""

from __future__ import annotations

import pytest

from console.diagnosis.engine import diagnose
from console.diagnosis.model import Diagnosis


def _d(text: str) -> Diagnosis:
    d = diagnose(text)
    assert d is not None, text
    return d


_LAUNCHER = """\
[E 2024-05-01 10:00:00,000] torch/distributed/elastic/multiprocessing/api.py:826] failed \
(exitcode: -9) local_rank: 1 (pid: 4242) of binary: /usr/bin/python
Traceback (most recent call last):
  File "/usr/local/bin/torchrun", line 8, in <module>
    sys.exit(main())
  File "/usr/lib/python3/dist-packages/torch/distributed/launcher/api.py", line 263, in launch_agent
    raise ChildFailedError(
{cut}
"""


@pytest.mark.parametrize("cut", ["torch.distr", "torch.distributed.elastic.multipro", "torch"])
def test_a_launcher_traceback_cut_inside_a_dotted_name_is_no_exception(cut: str) -> None:
    d = _d(_LAUNCHER.format(cut=cut))
    assert d.kind == "sigkill" and d.facts["pid"] == 4242
    # a worker's own exception line, dotted or not, still is one
    for line in ("ValueError", "socket.timeout: timed out", "torch.OutOfMemoryError"):
        worker = (
            f'Traceback (most recent call last):\n  File "train.py", line 3, in <module>\n{line}\n'
        )
        got = _d(worker)
        assert got.kind in ("exception", "cuda_oom") and got.evidence == (line,), line


def test_the_endpoint_comes_from_the_launch_config_block() -> None:
    text = """\
[INFO] api: Starting elastic_operator with launch configs:
  entrypoint       : train.py
  rdzv_backend     : c10d
  rdzv_endpoint    : trainer-worker-0:29400
  max_restarts     : 3

[ERROR] error_handler: {
  "message": "RendezvousConnectionError: The connection to the C10d store has failed.",
}
"""
    d = _d(text)
    assert d.kind == "rendezvous_connection"
    assert (d.facts["host"], d.facts["port"]) == ("trainer-worker-0", 29400)
    assert "trainer-worker-0:29400" in d.summary
    # an empty endpoint (a static rendezvous) names none
    blank = _d(text.replace("trainer-worker-0:29400", ""))
    assert blank.facts.get("host") is None


@pytest.mark.parametrize("tail", [") ra", ")", ") ran for 600004 milliseconds before timing out."])
def test_the_watchdog_report_cut_after_its_work_is_read(tail: str) -> None:
    line = (
        "  what():  [PG 1 Rank 3] Process group watchdog thread terminated with exception: "
        "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=77, "
        "OpType=ALLREDUCE, NumelIn=1024, NumelOut=1024, Timeout(ms)=600000" + tail
    )
    d = _d("terminate called after throwing an instance of 'c10::DistBackendError'\n" + line)
    assert d.kind == "nccl_timeout"
    assert (d.facts["seq"], d.facts["op"], d.facts["timeout_ms"]) == (77, "ALLREDUCE", 600000)
    assert any("WorkNCCL(SeqNum=77" in e for e in d.evidence)


def test_a_blocking_wait_timeout_is_the_watchdog_s_timeout() -> None:
    text = (
        "[rank0]:[E616 13:41:10.043 ProcessGroupNCCL.cpp:628] [Rank 0] Work WorkNCCL(SeqNum=9, "
        "OpType=BROADCAST, NumelIn=10, NumelOut=10, Timeout(ms)=1800000) timed out in blocking "
        "wait (TORCH_NCCL_BLOCKING_WAIT=1).\n"
    )
    d = _d(text)
    assert d.kind == "nccl_timeout" and d.facts["op"] == "BROADCAST" and d.facts["seq"] == 9
    # the same words about a work that finished are no timeout
    assert diagnose(text.replace("timed out in blocking wait", "completed")) is None


def test_a_reversed_traceback_keeps_nccl_s_detail() -> None:
    text = """\
Duplicate GPU detected : rank 3 and rank 0 both on CUDA device 1a000
 Last error:
ncclInvalidUsage: This usually reflects invalid usage of NCCL library.
torch.distributed.DistBackendError: NCCL error in: NCCLUtils.hpp:268, invalid usage (run \
with NCCL_DEBUG=WARN for details), NCCL version 2.21.5
"""
    d = _d(text)
    assert d.kind == "nccl_invalid_usage"
    assert (
        d.facts["last_error"]
        == "Duplicate GPU detected : rank 3 and rank 0 both on CUDA device 1a000"
    )
    assert any(e.startswith("Duplicate GPU detected") for e in d.evidence)


@pytest.mark.parametrize(
    "warn",
    [
        "include/socket.h:403 NCCL WARN Connect to f",
        "include/socket.h:403 NCCL WARN Connect to 10.0.0.2<35467> failed : Connection timed out",
    ],
)
def test_nccl_s_socket_connect_warn_is_a_system_error_even_cut(warn: str) -> None:
    text = (
        "worker:101:934 [0] NCCL INFO Call to connect returned Connection timed out, retrying\n"
        f"worker:101:934 [0] {warn}\n"
    )
    d = _d(text)
    assert d.kind == "nccl_system_error"
    assert any("NCCL WARN Connect to" in e for e in d.evidence)


@pytest.mark.parametrize(
    ("line", "gpu", "size"),
    [
        (
            "Tried to allocate 20.00 MiB (GPU 0; 1.96 GiB total capacity; 1.24 GiB already "
            "allocated; 2.88 MiB free; 1.25 GiB reserved in total by PyTorch)",
            0,
            "20.00 MiB",
        ),
        (
            "Tried to allocate 2.00 GiB. GPU 3 has a total capacity of 79.11 GiB of which "
            "1.02 GiB is free.",
            3,
            "2.00 GiB",
        ),
    ],
)
def test_pytorch_s_oom_sizes_without_their_head(line: str, gpu: int, size: str) -> None:
    d = _d("The error:\n" + line + "\n")
    assert d.kind == "cuda_oom" and (d.facts["gpu"], d.facts["size"]) == (gpu, size)
    assert diagnose("We tried to allocate more memory than before.\n") is None


_CUBLAS = (
    "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm( "
    "handle, opa, opb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc)`\n"
)


@pytest.mark.parametrize(
    ("env", "model", "arch", "cuda"),
    [
        (
            "My environment: Geforce RTX 3080, cudatoolkit 10.0, pytorch 1.3.1",
            "RTX 3080",
            "sm_86",
            "10.0",
        ),
        ("GPU: A100-SXM4-40GB\nCUDA used to build PyTorch: 10.2", "A100", "sm_80", "10.2"),
        ("torch==1.7.1+cu101 on an RTX 4090", "RTX 4090", "sm_89", "10.1"),
        ("H100 80GB HBM3, torch 1.13.1+cu117", "H100", "sm_90", "11.7"),
    ],
)
def test_a_generic_cuda_failure_on_a_gpu_newer_than_the_build(
    env: str, model: str, arch: str, cuda: str
) -> None:
    d = _d(_CUBLAS + env + "\n")
    assert d.kind == "cuda_unsupported_arch"
    assert (d.facts["gpu_model"], d.facts["arch"], d.facts["build_cuda"]) == (model, arch, cuda)


@pytest.mark.parametrize(
    "env",
    [
        "My environment: RTX 3080, cudatoolkit 11.3",  # the build can target it
        "GPU: V100, cudatoolkit 10.0",  # an older GPU
        "RTX 3080 and A100 nodes, cudatoolkit 10.2",  # two archs: which one failed?
        "| NVIDIA-SMI 450.80   Driver Version: 450.80   CUDA Version: 11.0 |  RTX 3080",
        "RTX 3080",  # no build version said
    ],
)
def test_no_arch_gap_without_one_newer_gpu_and_an_older_build(env: str) -> None:
    assert _d(_CUBLAS + env + "\n").kind == "cuda_error"


@pytest.mark.parametrize(
    "line",
    [
        "docker: Error response from daemon: could not select device driver with capabilities: "
        "[[gpu]].",
        'docker: Error response from daemon: could not select device driver "" with '
        "capabilities: [[gpu]].",
    ],
)
def test_docker_s_no_gpu_driver_with_or_without_the_driver_s_name(line: str) -> None:
    d = _d("$ docker run --rm --gpus all nvidia/cuda:12.2.0-base-ubuntu22.04 nvidia-smi\n" + line)
    assert d.kind == "docker_no_gpu_driver"
    assert any("could not select device driver" in e for e in d.evidence)
