"""Rules for NCCL failures: NCCL's own ``NCCL_DEBUG`` WARN lines and result codes
(``ncclResult_t`` in NCCL's ``src/nccl.h.in``), and PyTorch's ``ProcessGroupNCCL`` watchdog
(``torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp``)."""

from __future__ import annotations

import re
from types import MappingProxyType

from console.diagnosis.common import (
    GLOG_TIME,
    NCCL_LINE,
    NCCL_RESULTS,
    NCCL_RETURN,
    PG_ID,
    PG_RANK,
    human_bytes,
    join_ranks,
    rank_of,
    world_size,
)
from console.diagnosis.model import Context, Diagnosis
from console.diagnosis.model import make_diagnosis as _diag

__all__ = ["RULES"]


_NCCL_OOM = re.compile(r"Cuda failure '?out of memory'?", re.I)
_NCCL_ALLOC = re.compile(
    r"Failed to CUDA (?:calloc|malloc|host alloc)\w* (?P<bytes>\d+) bytes", re.I
)


_NCCL_OOM = re.compile(r"Cuda failure '?out of memory'?", re.I)
_NCCL_ALLOC = re.compile(
    r"Failed to CUDA (?:calloc|malloc|host alloc)\w* (?P<bytes>\d+) bytes", re.I
)


def _nccl_cuda_oom(ctx: Context) -> Diagnosis | None:
    """NCCL could not allocate GPU memory (typically its buffers during communicator init)."""
    hit = next((ln for ln in ctx.lines if _NCCL_OOM.search(ln.text)), None)
    if hit is None:
        return None
    head = NCCL_LINE.match(hit.text)
    same = [
        ln
        for ln in ctx.lines[hit.index :]
        if head is None or ((m := NCCL_LINE.match(ln.text)) and m["pid"] == head["pid"])
    ]
    evidence = [hit.raw]
    size = result = None
    for ln in same[1:]:
        if size is None and (m := _NCCL_ALLOC.search(ln.text)):
            size = int(m["bytes"])
            evidence.append(ln.raw)
        if result is None and (m := NCCL_RETURN.search(ln.text)) and "NCCL INFO" in ln.text:
            result = int(m["code"])
    # NCCL's return traces ("NCCL INFO init.cc:1358 -> 3") tell which stage failed.
    traced = {m["src"].split(":")[0] for ln in ctx.lines for m in NCCL_RETURN.finditer(ln.text)}
    stage = []
    if any("p2p" in m["src"] for ln in same for m in NCCL_RETURN.finditer(ln.text)):
        stage.append("setting up its P2P buffers")
    if "init.cc" in traced:
        stage.append("during communicator init")
    device = int(head["dev"]) if head else None
    pid = int(head["pid"]) if head else None
    host = head["host"] if head else None
    rank = hit.rank
    # Other processes' NCCL warnings (closed connections, failed receives) are consequences.
    others = {
        int(m["pid"])
        for ln in ctx.lines
        if (m := NCCL_LINE.match(ln.text)) and m["level"] == "WARN" and m["pid"] != str(pid)
    }
    who = f"CUDA device {device}" if device is not None else "a GPU"
    if pid is not None:
        who += f" (pid {pid}" + (f" on {host})" if host else ")")
    what = (
        f"a {size}-byte ({human_bytes(size)}) allocation failed" if size else "cudaMalloc failed"
    )
    res = f", result {result} ({NCCL_RESULTS.get(result, 'error')})" if result else ""
    summary = (
        f"{who} ran out of GPU memory inside NCCL: {what}"
        + (f" while {' '.join(stage)}" if stage else "")
        + res
        + (f"; the errors of pid {join_ranks(sorted(others))} follow from it" if others else "")
    )
    gpu = f"GPU {device}" if device is not None else "the GPU"
    fix = (
        f"Free {gpu} before NCCL init: stop the other process using it, or have the job use "
        "less memory before init_process_group / its first collective"
    )
    return _diag(
        "nccl_cuda_oom",
        summary,
        (rank,) if rank is not None else (),
        fix,
        evidence,
        {
            "device": device,
            "pid": pid,
            "host": host,
            "bytes": size,
            "nccl_result": result,
            "other_pids": tuple(sorted(others)),
        },
        ctx.failure,
    )


_WATCHDOG = re.compile(
    r"Watchdog caught collective operation timeout: WorkNCCL\((?P<args>.*?)\) "
    r"ran for (?P<ran>\d+) milliseconds"
)
_WATCHDOG_WORK = re.compile(
    r"(?:detected by watchdog at work|Timeout at NCCL work): (?P<seq>\d+), "
    r"last enqueued NCCL work: (?P<enq>-?\d+), last completed NCCL work: (?P<done>-?\d+)"
)
def _arg(pattern: str, args: str) -> str | None:
    m = re.search(pattern, args)
    return m.group(1) if m else None


def _nccl_timeout(ctx: Context) -> Diagnosis | None:
    """The ProcessGroupNCCL watchdog timed out a collective: some rank never joined it."""
    reports = [ln for ln in ctx.lines if _WATCHDOG.search(ln.text)]
    works = [ln for ln in ctx.lines if _WATCHDOG_WORK.search(ln.text)]
    if not reports and not works:
        return None
    waited: dict[int, int] = {}
    seq = op = numel = timeout_ms = None
    for ln in reports:
        m = _WATCHDOG.search(ln.text)
        assert m is not None
        args = m["args"]
        seq = seq or _arg(r"SeqNum=(\d+)", args)
        op = op or _arg(r"OpType=(\w+)", args)
        numel = numel or _arg(r"NumelIn=(\d+)", args)
        timeout_ms = timeout_ms or _arg(r"Timeout\(ms\)=(\d+)", args)
        if (rank := rank_of(ln)) is not None:
            waited.setdefault(rank, int(m["ran"]))
    enqueued: dict[int, int] = {}
    completed: dict[int, int] = {}
    pg = None
    for ln in works:
        m = _WATCHDOG_WORK.search(ln.text)
        assert m is not None
        seq = seq or m["seq"]
        if (r := PG_RANK.search(ln.text)) and (p := PG_ID.search(r["inside"])):
            pg = pg if pg is not None else int(p["pg"])
        if (rank := rank_of(ln)) is not None:
            enqueued.setdefault(rank, int(m["enq"]))
            completed.setdefault(rank, int(m["done"]))
    victims = sorted(set(waited) | set(enqueued))
    world = world_size(ctx.lines)
    missing = tuple(r for r in range(world) if r not in victims) if world else ()
    stamp = next((m for ln in reports + works if (m := GLOG_TIME.search(ln.text))), None)
    when = f"{int(stamp['mm']):02d}-{stamp['dd']} {stamp['hms']}" if stamp else None
    what = f"{op} " if op else ""
    size = f" of {numel} elements" if numel else ""
    limit = f", timeout {timeout_ms} ms ({int(timeout_ms) / 60000:g} min)" if timeout_ms else ""
    in_pg = f" in process group {pg}" if pg is not None else ""
    culprits = (
        f"rank(s) {join_ranks(missing)}, which did not report,"
        if missing
        else "a rank missing from these reports (not one of them)"
    )
    summary = (
        f"NCCL watchdog timeout{in_pg}: collective {what}SeqNum {seq}{size}{limit}. "
        f"Ranks {join_ranks(victims)} waited for it (victims); the cause is {culprits} that never "
        "entered it (hung, dead, slow, or on another code path)"
    )
    fix = (
        "Inspect the last output and stack (py-spy dump) of the rank(s) that did not report the "
        "timeout; TORCH_NCCL_DUMP_ON_TIMEOUT=1 and NCCL_DEBUG=INFO help locate it"
    )
    return _diag(
        "nccl_timeout",
        summary,
        missing,
        fix,
        [ln.raw for ln in reports + works],
        {
            "process_group": pg,
            "seqnum": int(seq) if seq else None,
            "op": op,
            "numel": int(numel) if numel else None,
            "timeout_ms": int(timeout_ms) if timeout_ms else None,
            "waited_ms": MappingProxyType(waited) if waited else None,
            "last_enqueued": MappingProxyType(enqueued) if enqueued else None,
            "last_completed": MappingProxyType(completed) if completed else None,
            "victims": tuple(victims),
            "time": when,
            "world_size": world,
        },
        ctx.failure,
    )




#: The rules of this module (the engine ranks what they find).
RULES = (_nccl_cuda_oom, _nccl_timeout)
