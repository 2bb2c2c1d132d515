"""The kinds holdout15 missed, on variants of their own (the corpus cases are in
``tests/data/diagnose/corpus/holdout15``): a traceback under Ray's actor prefix, Open MPI's
signal report, a GPU-sharing resource in FailedScheduling, each rank's collective when the
ranks are out of step, a hardware Xid stated in a report's words."""

from __future__ import annotations

import pytest

from console.diagnosis.engine import diagnose
from console.diagnosis.model import Diagnosis


def _d(text: str) -> Diagnosis:
    d = diagnose(text)
    assert d is not None, text
    return d


@pytest.mark.parametrize(
    "prefix", ["(EmbodiedFSDPActor pid=9671) ", "(RayTrainWorker pid=77, ip=10.0.0.3) ", "(pid=5) "]
)
def test_a_traceback_under_ray_s_actor_prefix_keeps_its_indent(prefix: str) -> None:
    body = [
        '  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/checkpoint/planner.py",'
        " line 364, in create_default_local_load_plan",
        "    raise ValueError(",
        "ValueError: Size mismatch between saved torch.Size([8, 2]) and current: torch.Size([16])",
    ]
    d = _d("\n".join(prefix + ln for ln in body) + "\n")
    assert d.kind == "exception" and d.facts["exception"] == "ValueError"
    assert d.evidence == (body[-1],)


def test_open_mpi_s_signal_report_under_its_tag() -> None:
    text = """\
[1,3]<stderr>:[gpu-node-07:4242] *** Process received signal ***
[1,3]<stderr>:[gpu-node-07:4242] Signal: Bus error (7)
[1,3]<stderr>:[gpu-node-07:4242] Signal code: Non-existant physical address (2)
[1,3]<stderr>:[gpu-node-07:4242] [ 0] /lib/x86_64-linux-gnu/libc.so.6(+0x43090)[0x7f71421a3090]
"""
    d = _d(text)
    assert d.kind == "signal" and d.facts["signal"] == "SIGBUS" and d.ranks == (3,)
    assert (d.facts["pid"], d.facts["host"]) == (4242, "gpu-node-07")
    untagged = _d("[node2:17] *** Process received signal ***\n[node2:17] Signal: Aborted (6)\n")
    assert untagged.kind == "sigabrt" and untagged.facts["pid"] == 17
    # the words in prose are no report
    assert diagnose("Is Signal: Segmentation fault expected here?\n") is None


@pytest.mark.parametrize(
    ("res", "shared"),
    [
        ("nvidia.com/gpu.memory", True),
        ("nvidia.com/gpumem", True),
        ("nvidia.com/gpu.shared", True),
        ("nvidia.com/gpu", False),
        ("nvidia.com/mig-1g.10gb", False),
    ],
)
def test_failed_scheduling_names_the_whole_resource(res: str, shared: bool) -> None:
    text = (
        'I0522 14:03:41.7 1 scheduler.go:352] "Unable to schedule pod; no fit; waiting" '
        f'err="0/4 nodes are available: 4 Insufficient {res}. preemption: 0/4 nodes are '
        'available: 4 No preemption victims found for incoming pod."\n'
    )
    d = _d(text)
    assert d.kind == "gpu_unschedulable" and d.facts["resource"] == res
    assert ("GPU-sharing device plugin" in d.summary) is shared


def test_each_rank_s_collective_when_the_ranks_are_out_of_step() -> None:
    text = """\
[rank0]:[E ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=122, OpType=_REDUCE_SCATTER_BASE, NumelIn=8, NumelOut=4, Timeout(ms)=600000) ran for 600000 milliseconds before timing out.
[rank1]:[E ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=126, OpType=_ALLGATHER_BASE, NumelIn=4, NumelOut=8, Timeout(ms)=600000) ran for 600001 milliseconds before timing out.
"""  # noqa: E501
    d = _d(text)
    assert d.kind == "nccl_timeout"
    assert dict(d.facts["seq_by_rank"]) == {0: 122, 1: 126}  # type: ignore[arg-type]
    assert dict(d.facts["op_by_rank"]) == {0: "_REDUCE_SCATTER_BASE", 1: "_ALLGATHER_BASE"}  # type: ignore[arg-type]
    same = _d(text.replace("SeqNum=126", "SeqNum=122"))
    assert same.facts["mismatch"] == "different collectives at the same SeqNum"
    assert dict(same.facts["op_by_rank"])[1] == "_ALLGATHER_BASE"  # type: ignore[arg-type]
    agreed = _d(
        text.replace(
            "SeqNum=126, OpType=_ALLGATHER_BASE", "SeqNum=122, OpType=_REDUCE_SCATTER_BASE"
        )
    )
    assert agreed.facts.get("op_by_rank") is None


@pytest.mark.parametrize(
    ("line", "xid"),
    [
        ("- `Xid 48 / 171`: uncorrectable double-bit ECC (DBE) in HBM framebuffer", 48),
        ("* Xid 95: uncontained ECC memory error on the same GPU", 95),
        ("* Xid 119 (GSP RPC timeout) every few hours", 119),
    ],
)
def test_a_hardware_xid_stated_in_a_report_s_words(line: str, xid: int) -> None:
    text = f"dmesg shows repeated events, all on PCI `0000:9c:00`:\n{line}\n"
    d = _d(text)
    assert d.kind == "xid" and d.facts["xid"] == xid and d.facts["pci"] == "0000:9c:00"
    assert d.evidence == (line,)


@pytest.mark.parametrize(
    "text",
    [
        "Is this Xid 48? Please check dmesg.\n",  # no fault words beside it
        "- Xid 13: graphics engine exception (ECC?) in dmesg\n",  # an application's Xid
        "- Xid 48: double-bit ECC error\n",  # neither the kernel's log nor a GPU named
        "NVRM: Xid (PCI:0000:9c:00): 48, pid=1, DBE (0x1) detected\n- Xid 95: uncontained ECC\n",
    ],
)
def test_no_stated_xid_without_its_words_its_source_or_beside_kernel_lines(text: str) -> None:
    d = diagnose(text)
    assert d is None or d.evidence != (text.splitlines()[-1],) or d.facts.get("xid") != 95
    if "NVRM" in text:
        assert d is not None and d.facts["xid"] == 48  # the kernel's line, not the words
    else:
        assert d is None


def test_an_internal_error_takes_nccl_s_last_unclassified_warn_as_its_detail() -> None:
    """hold15-003: NCCL's ncclInternalError carries no cause; the WARN it printed as it failed
    says it (not the fallback WARN before it, after which NCCL went on)."""
    text = """\
host:1:2 [0] graph/search.cc:1135 NCCL WARN Could not find a path for pattern 1, falling back to simple order
host:1:2 [0] graph/topo.h:230 NCCL WARN Could not find NET with id 0
torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3376, internal error - please report this issue to the NCCL developers, NCCL version 2.25.1
"""  # noqa: E501
    d = _d(text)
    assert d.kind == "nccl_internal_error"
    assert d.facts["last_error"] == "Could not find NET with id 0"
    assert "host:1:2 [0] graph/topo.h:230 NCCL WARN Could not find NET with id 0" in d.evidence
    only_fallback = _d("\n".join(text.splitlines()[::2]) + "\n")
    assert only_fallback.facts.get("last_error") is None
    assert "NCCL gave no detail" in only_fallback.summary
