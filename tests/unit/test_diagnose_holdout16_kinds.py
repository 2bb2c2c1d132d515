"""The kinds holdout16 missed or worded wrongly, on variants of their own (the corpus cases are
in ``tests/data/diagnose/corpus/holdout16``)."""

from __future__ import annotations

import pytest

from console.diagnosis.engine import diagnose
from console.diagnosis.model import Diagnosis


def _d(text: str) -> Diagnosis:
    d = diagnose(text)
    assert d is not None, text
    return d


@pytest.mark.parametrize(
    "line",
    [
        '"Duplicate GPU detected : rank 1 and rank 0 both on CUDA device a4000" from NCCL INFO.',
        "I get `Duplicate GPU detected : rank 3 and rank 2 both on CUDA device 1b000` on start",
    ],
)
def test_nccl_s_duplicate_gpu_words_alone(line: str) -> None:
    d = _d("Training with two processes per GPU fails:\n" + line + "\n")
    assert d.kind == "nccl_invalid_usage" and d.facts["nccl_result"] == 5
    assert d.evidence == (line,)
    assert "LOCAL_RANK" in d.fix


def test_the_agent_s_pid_from_a_prefix_glued_to_a_progress_bar() -> None:
    text = (
        " 59%|#####8    | 1663/2840 [6:59:31<4:51:53, 14.88s/it]W1229 16:43:25.650000 190834 "
        "/envs/x/lib/python3.12/site-packages/torch/distributed/elastic/agent/server/api.py:723] "
        "Received 1 death signal, shutting down workers\n"
    )
    d = _d(text)
    assert d.kind == "hangup" and d.facts["pid"] == 190834
    # a number inside the bar is never the pid
    assert _d(text.replace(" 190834 ", " ")).facts.get("pid") is None


def test_a_cuda_string_with_a_parenthesis_and_the_driver_asking_for_a_reset() -> None:
    text = (
        "torch.AcceleratorError: CUDA error: CUDA-capable device(s) is/are busy or unavailable\n"
        "[373871.354096] NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required "
        "[NV_ERR_RESET_REQUIRED] (0x00000062) returned from status @ kernel_channel.c:2827\n"
    )
    d = _d(text)
    assert d.kind == "cuda_error"
    assert d.facts["cuda_error"] == "CUDA-capable device(s) is/are busy or unavailable"
    assert "needs a reset" in d.summary and "nvidia-smi -r" in d.fix
    alone = _d(text.splitlines()[0] + "\n")
    assert "Exclusive Process" in alone.summary and "CUDA_LAUNCH_BLOCKING" in alone.fix
    # a code in parentheses still ends the string
    code = _d("CUDA Error: out of memory (2) at alloc.cu:10\n")
    assert code.facts["cuda_error"] == "out of memory"


def test_markdown_emphasis_is_not_part_of_the_error() -> None:
    d = _d(
        "**RuntimeError: CUDA error: no kernel image is available for execution on the device**\n"
    )
    assert d.kind == "cuda_unsupported_arch"
    assert "*" not in d.summary


@pytest.mark.parametrize(
    ("text", "resource"),
    [
        (
            "1.PodUnschedulable Cannot schedule pods: Insufficient nvidia \n"
            "2.PodUnschedulable Cannot schedule pods: com/gpu.\n",
            "nvidia.com/gpu",
        ),
        (
            "Warning  PodUnschedulable  Cannot schedule pods: Insufficient nvidia.com/gpu.\n",
            "nvidia.com/gpu",
        ),
    ],
)
def test_the_autoscaler_s_cannot_schedule_event(text: str, resource: str) -> None:
    d = _d(text)
    assert d.kind == "gpu_unschedulable" and d.facts["resource"] == resource
    # the first half alone names no resource
    assert diagnose("PodUnschedulable Cannot schedule pods: Insufficient nvidia\n") is None


def test_a_sigbus_in_nccl_s_frames_is_shared_memory() -> None:
    ucx = """\
[610867610e4b:2498 :0:2599] Caught signal 7 (Bus error: nonexistent physical address)
 2 0x000000000006929c ncclGroupEnd()  ???:0
 5 0x00000000000417b4 ???()  /lib/x86_64-linux-gnu/libnccl.so.2:0
"""
    d = _d(ucx)
    assert d.kind == "shm_exhausted" and d.facts["signal"] == "SIGBUS"
    exit7 = """\
 1 0x000000000008170d ncclGroupEnd()  ???:0
=================================
ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -7) local_rank: 0 (pid: 5275) of binary: /usr/bin/python
"""  # noqa: E501
    e = _d(exit7)
    assert e.kind == "shm_exhausted"
    assert (e.facts["pid"], e.facts["local_rank"], e.facts["exitcode"]) == (5275, 0, -7)
    # a SIGBUS with no shared memory near it stays a signal
    other = _d(ucx.replace("ncclGroupEnd()", "memcpy()").replace("libnccl.so.2", "libc.so.6"))
    assert other.kind != "shm_exhausted"


@pytest.mark.parametrize(("sig", "kind"), [("SIGKILL: 9", "sigkill"), ("SIGSEGV: 11", "sigsegv")])
def test_a_launcher_s_called_process_error_names_the_child_s_signal(sig: str, kind: str) -> None:
    line = (
        "subprocess.CalledProcessError: Command '['/venv/bin/python3', 'train.py']' died with "
        f"<Signals.{sig}>."
    )
    d = _d('Traceback (most recent call last):\n  File "launch.py", line 1, in <module>\n' + line)
    assert d.kind == kind and d.evidence == (line,)


def test_nccl_oom_on_every_gpu_at_once_is_the_job_s_memory() -> None:
    lines = [
        f"[2025-09-24 16:15:28] gpu-node-01:{pid}:{pid + 9} [{dev}] include/alloc.h:228 NCCL WARN "
        "Cuda failure 2 'out of memory'"
        for dev, pid in ((0, 100), (1, 200), (2, 300))
    ]
    d = _d("\n".join(lines) + "\n")
    assert d.kind == "nccl_cuda_oom"
    assert "3 processes (CUDA devices 0, 1, 2 on gpu-node-01)" in d.summary
    assert "another process" not in d.fix.split("check")[0] and len(d.evidence) == 3
    one = _d(lines[0] + "\n")
    assert "stop the other process" in one.fix


def test_a_rendezvous_on_port_0_says_so_and_that_the_workers_ran() -> None:
    text = """\
Traceback (most recent call last):
  File "/home/user1/recipes/train_sb_wav2vec2.py", line 378, in <module>
    sb.utils.distributed.ddp_init_group(run_opts)
[E socket.cpp:957] [c10d] The client socket has timed out after 7200s while trying to connect to (localhost, 0).
"""  # noqa: E501
    d = _d(text)
    assert d.kind == "rendezvous_connection" and d.facts["port"] == 0
    assert "localhost:0" in d.summary and "port 0 is no port" in d.summary
    assert "the workers had started" in d.summary and "29500" in d.fix
    agent_only = _d(text.split("\n", 3)[3])
    assert agent_only.summary.endswith("no worker started")


def test_the_toolkit_s_nvml_unknown_error_may_be_the_gpu() -> None:
    base = (
        'level=error msg="failed to create containerd task: OCI runtime create failed: '
        "error running hook #0: error running hook: exit status 1, stdout: , stderr: Auto-detected "
        "mode as 'legacy' nvidia-container-cli: detection error: nvml error: {why}\""
    )
    unknown = _d(base.format(why="unknown error") + "\n")
    assert unknown.kind == "toolkit_nvml_init" and "bad state" in unknown.summary
    perm = _d(base.format(why="insufficient permissions") + "\n")
    assert perm.kind == "toolkit_nvml_init" and "not implicated" in perm.summary
