"""The kinds holdout10 missed, each on a variant of its own (the corpus cases are in
``tests/data/diagnose/corpus/holdout10``): a tool's message inside a shell trace's
assignment, an agent's SIGHUP given as a number, a CUDA failure NCCL reports while it tears a
communicator down after its network transport failed."""

from __future__ import annotations

from console.diagnosis.engine import diagnose

NCCL_24_IB = (
    "gpu-node-01:1201:1280 [0] transport/net_ib.cu:788 NCCL WARN NET/IB : Got completion with "
    "error 12, opcode 1, len 0, vendor err 129\n"
    "gpu-node-01:1201:1280 [0] NCCL INFO include/net.h:34 -> 2\n"
    "gpu-node-01:1201:1280 [0] NCCL INFO transport/net.cu:537 -> 2\n"
)


def test_a_tools_message_in_a_shell_trace_assignment() -> None:
    """``set -x`` prints ``+ VAR='<captured output>'`` (one ``+`` per nesting level, bash
    quoting ``'\\''`` for a quote), here under a CI runner's timestamp."""
    text = (
        "2025-09-22T10:01:02.1234567Z + nvidia-smi --query-gpu=driver_version --format=csv\n"
        "2025-09-22T10:01:02.2234567Z ++ export DRIVER_STATE='NVIDIA-SMI has failed because it "
        "couldn'\\''t communicate with the NVIDIA driver. Make sure that the latest NVIDIA "
        "driver is installed and running.'\n"
        "2025-09-22T10:01:02.3234567Z + STATUS=9\n"
    )
    d = diagnose(text)
    assert d is not None and d.kind == "driver_unreachable"
    assert any("couldn't communicate with the NVIDIA driver" in e for e in d.evidence)
    # the same words in an unquoted assignment of one word, or a "+ " list item: left alone
    assert diagnose("+ RESULT=ok\n+ added a line about drivers\n") is None


def test_an_agents_sighup_given_as_a_number_shows_the_workers_signal() -> None:
    text = (
        "INFO:torch.distributed.elastic.agent.server.api:[default] Starting worker group\n"
        "WARNING:torch.distributed.elastic.agent.server.api:Received 1 death signal, "
        "shutting down workers\n"
        "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 51 closing "
        "signal SIGHUP\n"
        "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 52 closing "
        "signal SIGHUP\n"
    )
    d = diagnose(text)
    assert d is not None and d.kind == "hangup"
    assert d.facts["worker_pids"] == (51, 52)
    assert [e for e in d.evidence if "closing signal" in e] == [
        "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 51 closing "
        "signal SIGHUP"
    ]


def test_nccls_cuda_failure_at_teardown_after_its_network_failed() -> None:
    """NCCL 2.4 (its IB wording names no peer): the proxy's IB completions fail, then the
    teardown's CUDA call reports an illegal address (init.cc), and nccl-tests reports the
    return: the network failure is the root, the CUDA failure follows it."""
    text = (
        NCCL_24_IB + "gpu-node-01:1201:1201 [0] NCCL INFO Destroyed comm 0x7f00 rank 0\n"
        "gpu-node-01:1201:1201 [1] init.cc:204 NCCL WARN Cuda failure 'an illegal memory "
        "access was encountered'\n"
        "gpu-node-01:1201:1201 [1] NCCL INFO init.cc:990 -> 1\n"
        "gpu-node-01: Test NCCL failure common.cu:497 'unhandled cuda error'\n"
    )
    d = diagnose(text)
    assert d is not None and d.kind == "nccl_system_error"
    assert "IB completion status 12, IBV_WC_RETRY_EXC_ERR" in d.summary
    assert {"cuda_illegal_memory_access", "nccl_unhandled_cuda"} <= {c.kind for c in d.consequences}


def test_the_applications_own_cuda_error_after_a_network_failure_stays_the_root() -> None:
    """PyTorch's own ``CUDA error`` (the application's kernel) printed after NCCL's network
    failure is not NCCL's teardown: the CUDA fault keeps its precedence; and a CUDA failure
    NCCL printed BEFORE its network failed stays the root as well."""
    app = (
        NCCL_24_IB + "RuntimeError: CUDA error: an illegal memory access was encountered\n"
        "CUDA kernel errors might be asynchronously reported at some other API call\n"
    )
    d = diagnose(app)
    assert d is not None and d.kind == "cuda_illegal_memory_access"
    first = (
        "gpu-node-01:1201:1201 [1] enqueue.cc:100 NCCL WARN Cuda failure 'an illegal memory "
        "access was encountered'\n"
        "gpu-node-01:1201:1201 [1] NCCL INFO enqueue.cc:101 -> 1\n" + NCCL_24_IB
    )
    d = diagnose(first)
    assert d is not None and d.kind == "cuda_illegal_memory_access"


def test_the_launchers_own_exit_line_over_its_words_in_a_title() -> None:
    """hold10-016's shape: an issue title quoting DeepSpeed's words, then the launcher's
    ``sigkill_handler`` line with the worker's argv: that line is the evidence, its
    ``--local_rank`` the local rank."""
    text = (
        "Training dies: exits with return code = 1 after the first epoch\n"
        "[2024-05-01 10:00:00,000] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 71\n"
        "[2024-05-01 10:00:00,100] [ERROR] [launch.py:321:sigkill_handler] ['/usr/bin/python', "
        "'-u', 'train.py', '--local_rank=6', '--deepspeed', 'ds.json'] exits with return code "
        "= -9\n"
    )
    d = diagnose(text)
    assert d is not None and d.kind == "sigkill"
    assert d.facts["local_rank"] == 6 and d.facts["exitcode"] == -9
