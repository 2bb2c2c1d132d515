"""Kinds behind the fifth held-out set's misses (tests/data/diagnose/corpus/holdout5), each
checked on a variant of its real text beside the case itself."""

from __future__ import annotations

from pathlib import Path

from console.diagnosis import diagnose

HOLD5 = Path(__file__).resolve().parents[1] / "data" / "diagnose" / "corpus" / "holdout5"


def _text(case: str) -> str:
    return (HOLD5 / f"{case}.txt").read_text()


def test_a_root_cause_entry_cut_before_its_exit_code_takes_the_printed_one_s_code() -> None:
    """The Root Cause entry (rank 0) is cut before its exit code: it stays the first failure,
    as torchelastic names it, with the code the other rank printed, said as such (a worker's
    SIGBUS in a container is read as /dev/shm: see hold7-014)."""
    d = diagnose(_text("hold5-001"))
    assert d is not None and d.kind == "shm_exhausted" and d.facts["signal"] == "SIGBUS"
    assert d.ranks == (0,) and "also failed: ranks 1 (SIGBUS)" in d.summary
    assert "Root Cause entry is cut off" in d.summary
    assert any("Signal 7 (SIGBUS)" in e for e in d.evidence)


def test_dump_signal_watchdog_wording_without_seqnum_reads_progress() -> None:
    d = diagnose(_text("hold5-002"))
    assert d is not None and d.kind == "nccl_timeout"
    assert "SeqNum None" not in d.summary and "Ranks  " not in d.summary
    assert "last enqueued NCCL work 855, last completed 12" in d.summary


def test_an_extensions_bare_nccl_result_number_is_decoded() -> None:
    for code, kind in (
        (5, "nccl_invalid_usage"),
        (2, "nccl_system_error"),
        (3, "nccl_internal_error"),
    ):
        text = _text("hold5-008").replace("value 5", f"value {code}")
        d = diagnose(text)
        assert d is not None and d.kind == kind, (code, d)


def test_the_same_program_faulting_on_every_retry_within_minutes_is_an_app_fault() -> None:
    d = diagnose(_text("hold5-013"))
    assert d is not None and d.kind == "xid" and d.facts["xid_class"] == "app"
    # the handed xid-01: the same GPUs faulting for many processes over hours -> hardware
    xid01 = (HOLD5.parents[2] / "cases" / "dmesg-xid" / "xid-01.txt").read_text()
    d1 = diagnose(xid01)
    assert d1 is not None and d1.facts["xid_class"] == "hw"


def test_kubernetes_failed_scheduling_for_gpus() -> None:
    d = diagnose(_text("hold5-020"))
    assert d is not None and d.kind == "gpu_unschedulable"
    assert (d.facts["resource"], d.facts["nodes"], d.facts["nodes_short"]) == (
        "nvidia.com/gpu",
        2,
        2,
    )
    mig = "0/3 nodes are available: 1 node(s) had taint, 2 Insufficient nvidia.com/mig-1g.10gb."
    d2 = diagnose(f"Warning  FailedScheduling  default-scheduler  {mig}\n")
    assert d2 is not None and d2.facts["resource"] == "nvidia.com/mig-1g.10gb"
