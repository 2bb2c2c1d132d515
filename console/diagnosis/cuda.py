"""Rules for CUDA errors a rank raised: CUDA runtime error strings (``cudaGetErrorString``,
CUDA Runtime API "Error Handling" / ``cudaError_t``) and PyTorch's caching allocator's
``torch.OutOfMemoryError`` (``c10/cuda/CUDACachingAllocator.cpp``)."""

from __future__ import annotations

import re

from console.diagnosis.common import PG_ID, PG_NAME, PG_RANK, TERMINATE, rank_of
from console.diagnosis.model import Context, Diagnosis
from console.diagnosis.model import make_diagnosis as _diag

__all__ = ["RULES"]


_CUDA_ERROR = re.compile(r"CUDA error: (?P<msg>[^.(\n]+)")
def _cuda_error(ctx: Context) -> Diagnosis | None:
    """A ``CUDA error: ...`` (illegal memory access, device-side assert, out of memory...)."""
    hit = next((ln for ln in ctx.lines if _CUDA_ERROR.search(ln.text)), None)
    if hit is None:
        return None
    message = _CUDA_ERROR.search(hit.text)
    assert message is not None
    error = message["msg"].strip()
    rank = rank_of(hit)
    if rank is None and ctx.failure and ctx.failure.root_cause:
        rank = ctx.failure.root_cause.rank
    pg = pg_name = None
    if m := PG_RANK.search(hit.text):
        if p := PG_ID.search(m["inside"]):
            pg = int(p["pg"])
        if n := PG_NAME.search(m["inside"]):
            pg_name = n["name"]
    thrown = next((m["type"] for ln in ctx.lines if (m := TERMINATE.search(ln.text))), None)
    evidence = [ln.raw for ln in ctx.lines if TERMINATE.search(ln.text)] + [hit.raw]
    on = f"rank {rank}" if rank is not None else "a rank"
    where = ""
    if pg is not None:
        where = f" (process group {pg}, {pg_name})" if pg_name else f" (process group {pg})"
    watchdog = "watchdog" in hit.text.lower()
    by = "the NCCL watchdog hit " if watchdog else ""
    end = "; the process aborts (SIGABRT)" if thrown or watchdog else ""
    if "out of memory" in error:
        kind = "cuda_oom"
        summary = f"{on}{where} ran out of GPU memory: {by}'{error}'{end}"
        fix = "Lower the batch size, or free the GPU of other processes"
    elif "illegal memory access" in error or "illegal address" in error:
        kind = "cuda_illegal_memory_access"
        summary = (
            f"CUDA illegal memory access on {on}{where}: {by}'{error}'{end}. A kernel bug or a "
            "faulty GPU; failures of other ranks after it are consequences"
        )
        fix = (
            f"Check the kernel log (dmesg) of {on}'s host for Xid 13/31/43 on its GPU; rerun with "
            "CUDA_LAUNCH_BLOCKING=1 to find the kernel that faults"
        )
    else:
        kind = "cuda_error"
        summary = f"CUDA error on {on}{where}: {by}'{error}'{end}"
        fix = (
            "Rerun with CUDA_LAUNCH_BLOCKING=1 (and TORCH_USE_CUDA_DSA for device-side asserts) "
            "to find the failing kernel; check dmesg for Xid errors"
        )
    return _diag(
        kind,
        summary,
        (rank,) if rank is not None else (),
        fix,
        evidence,
        {
            "rank": rank,
            "error": error,
            "process_group": pg,
            "pg_name": pg_name,
            "exception_type": thrown,
        },
        ctx.failure,
    )


_TORCH_OOM = re.compile(
    r"CUDA out of memory\. Tried to allocate (?P<size>[\d.]+ [KMGT]?i?B)"
    r"(?:.*?GPU (?P<gpu>\d+))?",
)


def _cuda_oom(ctx: Context) -> Diagnosis | None:
    """PyTorch's caching allocator ran out of GPU memory (``torch.OutOfMemoryError``)."""
    hit = next((ln for ln in ctx.lines if _TORCH_OOM.search(ln.text)), None)
    if hit is None:
        return None
    m = _TORCH_OOM.search(hit.text)
    assert m is not None
    rank = hit.rank
    if rank is None and ctx.failure and ctx.failure.root_cause:
        rank = ctx.failure.root_cause.rank
    gpu = f" on GPU {m['gpu']}" if m["gpu"] else ""
    on = f"rank {rank}" if rank is not None else "a rank"
    return _diag(
        "cuda_oom",
        f"{on} ran out of GPU memory{gpu}: tried to allocate {m['size']}",
        (rank,) if rank is not None else (),
        "Lower the batch size or sequence length, or use activation checkpointing / mixed "
        "precision; check no other process holds memory on that GPU",
        [hit.raw],
        {"rank": rank, "gpu": int(m["gpu"]) if m["gpu"] else None, "size": m["size"]},
        ctx.failure,
    )




#: The rules of this module (the engine ranks what they find).
RULES = (_cuda_error, _cuda_oom)
