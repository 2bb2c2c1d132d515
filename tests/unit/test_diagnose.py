"""Tests of console.diagnosis against real torchrun/NCCL/PyTorch failure logs.

The case files under tests/data/cases/torchrun/ are copies of shared/cases/torchrun/ (expected
values from its README table, rows trun-01 … trun-12) plus the output of ``torchrun
--standalone --nproc-per-node 2 scripts/examples/train_ddp.py --steps 5 --fail-rank 1
--fail-step 2``: example-injected-failure.txt under torch 2.13.0 on CPU (gloo; NumPy warnings
removed), example-injected-failure-nccl.txt under torch 2.11.0 on 2 H200 GPUs (NCCL).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from console.diagnosis import (
    Diagnosis,
    TorchelasticFailure,
    diagnose,
    parse_torchelastic_failure,
    parse_torchelastic_failures,
    signal_name,
)

CASES = Path(__file__).resolve().parents[1] / "data" / "cases" / "torchrun"


def case(name: str) -> str:
    return (CASES / name).read_text(encoding="utf-8")


def diagnosed(text: str) -> Diagnosis:
    found = diagnose(text)
    assert found is not None
    return found


def parsed(text: str) -> TorchelasticFailure:
    found = parse_torchelastic_failure(text)
    assert found is not None
    return found


# ---------------------------------------------------------------------------------------------
# README rows


def test_trun01_sigkill_root_cause_is_likely_oom_killer() -> None:
    text = case("trun-01.txt")
    failure = parsed(text)
    assert failure.script == "src/open_r1/grpo_gsm.py"
    assert failure.others == ()
    root = failure.root_cause
    assert root is not None
    assert (root.rank, root.local_rank, root.host, root.pid) == (0, 0, "gpu-node-01-worker", 14750)
    assert (root.exitcode, root.signal, root.time) == (-9, "SIGKILL", "2025-05-21_15:43:03")
    assert root.error_file is None
    assert root.exception is None
    assert root.traceback == "Signal 9 (SIGKILL) received by PID 14750"

    d = diagnosed(text)
    assert d.kind == "sigkill"
    assert d.ranks == (0,)
    assert d.facts["pid"] == 14750
    assert d.facts["exitcode"] == -9
    assert d.facts["signal"] == "SIGKILL"
    assert d.facts["host"] == "gpu-node-01-worker"
    assert d.facts["time"] == "2025-05-21_15:43:03"
    assert d.facts["other_ranks"] == ()
    assert "OOM killer" in d.summary
    assert "14750" in d.fix and "OOMKilled" in d.fix
    assert "traceback : Signal 9 (SIGKILL) received by PID 14750" in d.evidence
    # The launcher's own traceback (ChildFailedError) is not the cause.
    assert not any("ChildFailedError" in e for e in d.evidence)


def test_trun02_root_cause_block_not_first_block_and_truncated() -> None:
    text = case("trun-02.txt")
    failure = parsed(text)
    assert failure.script == "tools/train.py"
    root = failure.root_cause
    assert root is not None
    assert (root.index, root.rank, root.local_rank, root.pid) == (0, 0, 0, 2385922)
    assert (root.exitcode, root.signal) == (-6, "SIGABRT")
    assert root.host == "gpu-node-01.example.org"
    assert root.time == "2023-06-14_22:36:10"
    assert root.traceback is None  # the file stops before the root cause's traceback line
    assert [(e.rank, e.pid, e.signal) for e in failure.others] == [
        (1, 2385923, "SIGABRT"),
        (2, 2385924, "SIGABRT"),
    ]
    assert {e.time for e in failure.others} == {"2023-06-14_22:36:10"}
    assert {e.host for e in failure.others} == {"gpu-node-01.example.org"}
    assert [e.rank for e in (root, *failure.others)] == [0, 1, 2]

    d = diagnosed(text)
    assert d.kind == "sigabrt"
    assert d.ranks == (0,)
    assert d.facts["pid"] == 2385922
    assert d.facts["other_ranks"] == (1, 2)
    assert "native abort" in d.summary
    assert "rank 0" in d.fix


def test_trun04_rendezvous_connection_failure() -> None:
    text = case("trun-04.txt")
    assert parse_torchelastic_failure(text) is None
    d = diagnosed(text)
    assert d.kind == "rendezvous_connection"
    assert d.ranks == ()
    assert d.facts["endpoint"] == "192.0.2.10:1234"
    assert d.facts["host"] == "192.0.2.10"
    assert d.facts["port"] == 1234
    assert d.facts["timeout_s"] == 60
    assert d.facts["error_type"] == "RendezvousConnectionError"
    assert "no worker started" in d.summary
    assert "192.0.2.10" in d.fix and "1234" in d.fix and "firewall" in d.fix
    assert any("timed out after 60s" in e for e in d.evidence)


def test_trun06_nccl_watchdog_timeout_blames_missing_ranks_not_rank0() -> None:
    d = diagnosed(case("trun-06.txt"))
    assert d.kind == "nccl_timeout"
    assert d.facts["process_group"] == 1
    assert d.facts["seqnum"] == 1580
    assert d.facts["op"] == "ALLREDUCE"
    assert d.facts["numel"] == 466119168
    assert d.facts["timeout_ms"] == 600000
    assert d.facts["waited_ms"] == {0: 600060, 4: 600067}
    assert d.facts["last_enqueued"] == {0: 1582, 3: 1582}
    assert d.facts["last_completed"] == {0: 1579, 3: 1579}
    assert d.facts["victims"] == (0, 3, 4)
    assert d.facts["time"] == "03-21 02:07:08"
    # The world size is not in these lines: no rank can be named, and never rank 0.
    assert d.ranks == ()
    assert "10 min" in d.summary
    # The viewer's line-number prefix is gone from the evidence.
    assert len(d.evidence) == 4
    assert all(e.startswith("[rank") for e in d.evidence)


def test_trun08_nccl_cuda_oom_preferred_over_connection_closed() -> None:
    d = diagnosed(case("trun-08.txt"))
    assert d.kind == "nccl_cuda_oom"
    assert d.facts["device"] == 3
    assert d.facts["pid"] == 3063028
    assert d.facts["host"] == "gpu-node-01"
    assert d.facts["bytes"] == 6291456
    assert d.facts["nccl_result"] == 1
    assert d.facts["other_pids"] == (3063025,)  # device 0's closed connection: a consequence
    assert d.ranks == ()
    assert "6 MiB" in d.summary
    assert "communicator init" in d.summary and "P2P" in d.summary
    assert "GPU 3" in d.fix
    assert not any("Connection closed" in e for e in d.evidence)
    assert any("Failed to CUDA calloc 6291456 bytes" in e for e in d.evidence)


def test_trun10_dataloader_bus_error_means_shm_too_small() -> None:
    d = diagnosed(case("trun-10.txt"))
    assert d.kind == "shm_exhausted"
    assert d.facts["pids"] == (56811,)
    assert d.facts["signal"] == "SIGBUS"
    assert d.ranks == ()
    assert "/dev/shm" in d.summary
    assert "--shm-size" in d.fix and "ipc" in d.fix
    assert len(d.evidence) == 1
    assert "DataLoader worker (pid 56811) is killed by signal: Bus error" in d.evidence[0]


def test_trun12_cuda_illegal_memory_access_on_rank2() -> None:
    d = diagnosed(case("trun-12.txt"))
    assert d.kind == "cuda_illegal_memory_access"
    assert d.ranks == (2,)
    assert d.facts["rank"] == 2
    assert d.facts["process_group"] == 0
    assert d.facts["pg_name"] == "default_pg"
    assert d.facts["error"] == "an illegal memory access was encountered"
    assert d.facts["exception_type"] == "c10::DistBackendError"
    assert "Xid" in d.fix and "CUDA_LAUNCH_BLOCKING=1" in d.fix
    assert "SIGABRT" in d.summary


def test_example_job_injected_exception() -> None:
    text = case("example-injected-failure.txt")
    failure = parsed(text)
    assert failure.script == "scripts/examples/train_ddp.py"
    root = failure.root_cause
    assert root is not None
    assert (root.rank, root.local_rank, root.pid, root.exitcode) == (1, 1, 4762, 1)
    assert root.signal is None
    assert root.exception == "RuntimeError: injected failure on rank 1 at step 2"
    assert root.error_file is not None and root.error_file.endswith("attempt_0/1/error.json")
    # Newer torch appends the signal name: "exitcode  : -15 (pid: 4761)  (SIGTERM)".
    assert [(e.rank, e.exitcode, e.signal, e.pid) for e in failure.others] == [
        (0, -15, "SIGTERM", 4761)
    ]

    d = diagnosed(text)
    assert d.kind == "exception"
    assert d.ranks == (1,)
    assert d.evidence == ("RuntimeError: injected failure on rank 1 at step 2",)
    assert d.facts["exception_type"] == "RuntimeError"
    assert d.facts["message"] == "injected failure on rank 1 at step 2"
    assert d.facts["pid"] == 4762
    assert d.failure == failure


def test_example_job_injected_exception_nccl() -> None:
    # The same job on 2 GPUs (torch 2.11, NCCL): rank 0 is stopped with SIGTERM 11 s later.
    text = case("example-injected-failure-nccl.txt")
    failure = parsed(text)
    assert [(e.rank, e.signal, e.pid) for e in failure.others] == [(0, "SIGTERM", 829)]
    d = diagnosed(text)
    assert (d.kind, d.ranks) == ("exception", (1,))
    assert d.facts["pid"] == 830
    assert d.facts["message"] == "injected failure on rank 1 at step 2"


# ---------------------------------------------------------------------------------------------
# Variants: prefixes, older formats, truncation, several summaries.


def test_signal_name() -> None:
    assert signal_name(-9) == "SIGKILL"
    assert signal_name(-6) == "SIGABRT"
    assert signal_name(-15) == "SIGTERM"
    assert signal_name(1) is None
    assert signal_name(None) is None
    assert signal_name(-999) is None


def test_nothing_to_diagnose() -> None:
    ok = "rank 0/2 local_rank 0 node_rank 0 backend gloo device cpu\nstep 1/5 loss 1.3 ...\n"
    assert diagnose(ok) is None
    assert parse_torchelastic_failure(ok) is None
    assert diagnose("") is None


def test_default_prefix_and_line_numbers_are_stripped() -> None:
    lines = case("trun-10.txt").splitlines()
    text = "\n".join(f"[{100 + i}] [default1]:{line}" for i, line in enumerate(lines))
    d = diagnosed(text)
    assert d.kind == "shm_exhausted"
    assert d.facts["pids"] == (56811,)


def test_rank_prefix_blames_rank_for_shm() -> None:
    text = "[rank5]:RuntimeError: DataLoader worker (pid 77) is killed by signal: Bus error.\n"
    d = diagnosed(text)
    assert (d.kind, d.ranks, d.facts["pids"]) == ("shm_exhausted", (5,), (77,))


def test_watchdog_blames_ranks_missing_when_world_size_known() -> None:
    startup = "".join(
        f"[rank{r}]:rank {r}/8 local_rank {r} node_rank 0 backend nccl device cuda:{r}\n"
        for r in range(8)
    )
    d = diagnosed(startup + case("trun-06.txt"))
    assert d.kind == "nccl_timeout"
    assert d.ranks == (1, 2, 5, 6, 7)
    assert 0 not in d.ranks


def test_older_watchdog_format() -> None:
    text = (
        "[E ProcessGroupNCCL.cpp:475] [Rank 1] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=7, OpType=BROADCAST, Timeout(ms)=1800000) ran for 1800593 milliseconds "
        "before timing out.\n"
    )
    d = diagnosed(text)
    assert d.kind == "nccl_timeout"
    assert (d.facts["seqnum"], d.facts["op"], d.facts["timeout_ms"]) == (7, "BROADCAST", 1800000)
    assert d.facts["waited_ms"] == {1: 1800593}
    assert d.ranks == ()


def test_older_rendezvous_format() -> None:
    text = (
        "[E socket.cpp:793] [c10d] The client socket has timed out after 900s while trying to "
        "connect to (192.0.2.7, 29400).\n"
    )
    d = diagnosed(text)
    assert d.kind == "rendezvous_connection"
    assert (d.facts["host"], d.facts["port"], d.facts["timeout_s"]) == ("192.0.2.7", 29400, 900)


def test_rendezvous_error_after_workers_ran_is_a_consequence() -> None:
    text = case("example-injected-failure.txt") + (
        "torch.distributed.elastic.rendezvous.api.RendezvousClosedError\n"
    )
    assert diagnosed(text).kind == "exception"
    assert diagnosed("raise RendezvousClosedError\n").kind == "rendezvous_failed"


OLD_SUMMARY = """\
***************************************
        train.py FAILED
=======================================
Root Cause:
[0]:
  time: 2021-09-14_11:29:53
  rank: 3 (local_rank: 1)
  exitcode: -11 (pid: 3358)
  error_file: <N/A>
  msg: "Signal 11 (SIGSEGV) received by PID 3358"
=======================================
Other Failures:
  <NO_OTHER_FAILURES>
***************************************
"""


def test_older_summary_format() -> None:
    failure = parsed(OLD_SUMMARY)
    assert failure.script == "train.py"
    root = failure.root_cause
    assert root is not None
    assert (root.rank, root.local_rank, root.pid, root.signal) == (3, 1, 3358, "SIGSEGV")
    assert root.host is None
    assert failure.others == ()
    d = diagnosed(OLD_SUMMARY)
    assert (d.kind, d.ranks) == ("sigsegv", (3,))


def test_summary_cut_inside_traceback_still_parses() -> None:
    text = case("example-injected-failure.txt")
    cut = text[: text.index('    File "/work/main/scripts/examples/train_ddp.py", line 147')]
    root = parsed(cut).root_cause
    assert root is not None
    assert (root.rank, root.pid) == (1, 4762)
    assert root.exception is None
    d = diagnosed(cut)
    # The root cause's exception is cut off; rank 1 printed its own traceback earlier.
    assert (d.kind, d.ranks) == ("exception", (1,))
    assert d.facts["message"] == "injected failure on rank 1 at step 2"


def test_several_summaries_pick_earliest_root_cause() -> None:
    later = case("trun-01.txt").replace("2025-05-21_15:43:03", "2025-05-21_15:50:00")
    earlier = case("trun-01.txt").replace(
        "rank      : 0 (local_rank: 0)", "rank      : 4 (local_rank: 0)"
    )
    both = later + "\n" + earlier
    assert len(parse_torchelastic_failures(both)) == 2
    root = parsed(both).root_cause
    assert root is not None and root.rank == 4
    assert diagnosed(both).ranks == (4,)


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        (
            "[rank2]:torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
            "GPU 2 has a total capacity of 79.10 GiB of which 1.20 GiB is free.",
            "cuda_oom",
        ),
        # corrected: the cause-id table names device-side asserts cuda_device_assert
        ("[rank1]:RuntimeError: CUDA error: device-side assert triggered", "cuda_device_assert"),
    ],
)
def test_other_cuda_errors(text: str, kind: str) -> None:
    d = diagnosed(text)
    assert d.kind == kind
    assert len(d.ranks) == 1


def test_same_second_summaries_prefer_the_failure_over_the_peer_that_saw_it() -> None:
    """Two nodes' summaries stamped in the same second (rec-003, node 0's printed first here):
    the root cause is the one whose exception is not a peer's death."""
    corpus = Path(__file__).resolve().parents[1] / "data/diagnose/corpus/recorded"
    lines = (corpus / "rec-003.txt").read_text().splitlines(keepends=True)
    node0_first = "".join(
        [ln for ln in lines if ln.startswith("[n0")] + [ln for ln in lines if ln.startswith("[n1")]
    )
    failure = parse_torchelastic_failure(node0_first)
    assert failure is not None and failure.root_cause is not None
    assert failure.root_cause.rank == 1
    assert failure.root_cause.exception == "RuntimeError: injected failure on rank 1 at step 3"
    d = diagnose(node0_first)
    assert d is not None and (d.kind, d.ranks) == ("exception", (1,))
