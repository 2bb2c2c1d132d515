"""Rules for torchrun / PyTorch / NCCL failures in a job's log.

Each rule reads the normalised lines (:mod:`console.diagnosis.lines`) and torchelastic's
failure summary (:mod:`console.diagnosis.elastic`) and returns a :class:`Diagnosis` or None;
:mod:`console.diagnosis.engine` runs every rule and picks the root cause. Sources: PyTorch's
``ProcessGroupNCCL`` watchdog and c10d store messages (``torch/csrc/distributed/c10d``),
torchelastic's rendezvous errors (``torch/distributed/elastic/rendezvous/api.py``), NCCL's
``NCCL_DEBUG`` line format and result codes (``src/include/nccl.h``: ``ncclResult_t``),
DataLoader's worker-signal messages (``torch/utils/data/_utils/signal_handling.py``).
"""

from __future__ import annotations

import re
import signal
from collections.abc import Callable, Iterable, Sequence
from types import MappingProxyType

from console.diagnosis.elastic import EXCEPTION_LINE, ProcessFailure
from console.diagnosis.lines import Line
from console.diagnosis.model import Context, Diagnosis, FactValue
from console.diagnosis.model import make_diagnosis as _diag

__all__ = ["RULES"]


def _human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:g} {unit}" if unit == "B" or size != int(size) else f"{int(size)} {unit}"
        size /= 1024
    return f"{n} B"


def _join(ranks: Iterable[int]) -> str:
    return ", ".join(str(r) for r in ranks)


def _where(entry: ProcessFailure) -> str:
    """``"local_rank 0, pid 14750 on host"`` for an entry, from the parts it has."""
    parts = [f"local_rank {entry.local_rank}"] if entry.local_rank is not None else []
    if entry.pid is not None:
        parts.append(f"pid {entry.pid}")
    if entry.host:
        parts.append(f"on {entry.host}")
    return ", ".join(parts)


def _who(entry: ProcessFailure) -> str:
    where = _where(entry)
    return f"rank {entry.rank} ({where})" if where else f"rank {entry.rank}"



# NCCL_DEBUG lines: "host:pid:tid [cudaDev] file:line NCCL WARN msg",
# and return traces: "host:pid:tid [cudaDev] NCCL INFO file:line -> 3"
_NCCL_LINE = re.compile(
    r"^(?P<host>[^\s:]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] "
    r"(?:(?P<src>\S+:\d+) )?NCCL (?P<level>WARN|INFO|ERROR|TRACE|ABORT) (?P<msg>.*)$"
)
_NCCL_RETURN = re.compile(r"(?P<src>\S+:\d+) -> (?P<code>\d+)")
_NCCL_OOM = re.compile(r"Cuda failure '?out of memory'?", re.I)
_NCCL_ALLOC = re.compile(
    r"Failed to CUDA (?:calloc|malloc|host alloc)\w* (?P<bytes>\d+) bytes", re.I
)
_NCCL_RESULTS = {
    1: "unhandled CUDA error",
    2: "system error",
    3: "internal error",
    4: "invalid argument",
    5: "invalid usage",
    6: "remote error",
}


def _nccl_cuda_oom(ctx: Context) -> Diagnosis | None:
    """NCCL could not allocate GPU memory (typically its buffers during communicator init)."""
    hit = next((ln for ln in ctx.lines if _NCCL_OOM.search(ln.text)), None)
    if hit is None:
        return None
    head = _NCCL_LINE.match(hit.text)
    same = [
        ln
        for ln in ctx.lines[hit.index :]
        if head is None or ((m := _NCCL_LINE.match(ln.text)) and m["pid"] == head["pid"])
    ]
    evidence = [hit.raw]
    size = result = None
    for ln in same[1:]:
        if size is None and (m := _NCCL_ALLOC.search(ln.text)):
            size = int(m["bytes"])
            evidence.append(ln.raw)
        if result is None and (m := _NCCL_RETURN.search(ln.text)) and "NCCL INFO" in ln.text:
            result = int(m["code"])
    # NCCL's return traces ("NCCL INFO init.cc:1358 -> 3") tell which stage failed.
    traced = {m["src"].split(":")[0] for ln in ctx.lines for m in _NCCL_RETURN.finditer(ln.text)}
    stage = []
    if any("p2p" in m["src"] for ln in same for m in _NCCL_RETURN.finditer(ln.text)):
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
        if (m := _NCCL_LINE.match(ln.text)) and m["level"] == "WARN" and m["pid"] != str(pid)
    }
    who = f"CUDA device {device}" if device is not None else "a GPU"
    if pid is not None:
        who += f" (pid {pid}" + (f" on {host})" if host else ")")
    what = (
        f"a {size}-byte ({_human_bytes(size)}) allocation failed" if size else "cudaMalloc failed"
    )
    res = f", result {result} ({_NCCL_RESULTS.get(result, 'error')})" if result else ""
    summary = (
        f"{who} ran out of GPU memory inside NCCL: {what}"
        + (f" while {' '.join(stage)}" if stage else "")
        + res
        + (f"; the errors of pid {_join(sorted(others))} follow from it" if others else "")
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


_CUDA_ERROR = re.compile(r"CUDA error: (?P<msg>[^.(\n]+)")
_PG_RANK = re.compile(r"\[(?P<inside>[^\[\]]*?)\bRank (?P<rank>\d+)\]")
_PG_ID = re.compile(r"\bPG (?:ID )?(?P<pg>\d+)")
_PG_NAME = re.compile(r"\((?P<name>[A-Za-z_]\w*)\)")
_TERMINATE = re.compile(r"terminate called after throwing an instance of '(?P<type>[^']+)'")


def _rank_of(line: Line) -> int | None:
    if (m := _PG_RANK.search(line.text)) is not None:
        return int(m["rank"])
    return line.rank


def _cuda_error(ctx: Context) -> Diagnosis | None:
    """A ``CUDA error: ...`` (illegal memory access, device-side assert, out of memory...)."""
    hit = next((ln for ln in ctx.lines if _CUDA_ERROR.search(ln.text)), None)
    if hit is None:
        return None
    message = _CUDA_ERROR.search(hit.text)
    assert message is not None
    error = message["msg"].strip()
    rank = _rank_of(hit)
    if rank is None and ctx.failure and ctx.failure.root_cause:
        rank = ctx.failure.root_cause.rank
    pg = pg_name = None
    if m := _PG_RANK.search(hit.text):
        if p := _PG_ID.search(m["inside"]):
            pg = int(p["pg"])
        if n := _PG_NAME.search(m["inside"]):
            pg_name = n["name"]
    thrown = next((m["type"] for ln in ctx.lines if (m := _TERMINATE.search(ln.text))), None)
    evidence = [ln.raw for ln in ctx.lines if _TERMINATE.search(ln.text)] + [hit.raw]
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


_SHM = re.compile(
    r"DataLoader worker \(pids?\)?\s*\(?(?P<pids>\d+(?:,\s*\d+)*)\) is killed by signal: Bus error"
    r"|Unexpected bus error encountered in worker",
)


def _shm_exhausted(ctx: Context) -> Diagnosis | None:
    """A DataLoader worker died of SIGBUS: the container's /dev/shm is too small."""
    hits = [ln for ln in ctx.lines if _SHM.search(ln.text)]
    if not hits:
        return None
    pids: list[int] = []
    for ln in hits:
        m = _SHM.search(ln.text)
        if m and m["pids"]:
            pids += [int(p) for p in re.findall(r"\d+", m["pids"])]
    rank = next((ln.rank for ln in hits if ln.rank is not None), None)
    if rank is None and ctx.failure and ctx.failure.root_cause:
        rank = ctx.failure.root_cause.rank
    who = f"DataLoader worker (pid {_join(dict.fromkeys(pids))})" if pids else "A DataLoader worker"
    on = f" of rank {rank}" if rank is not None else ""
    return _diag(
        "shm_exhausted",
        f"{who}{on} was killed by SIGBUS (Bus error): shared memory (/dev/shm) ran out. The "
        "container's /dev/shm is too small (Docker's default is 64 MB); not a GPU or NCCL fault",
        (rank,) if rank is not None else (),
        "Restart the container with a larger --shm-size (e.g. 16g, or the job's shm_size) or "
        "with --ipc=host (compose: shm_size / ipc: host); or use fewer DataLoader workers",
        [ln.raw for ln in hits],
        {"pids": tuple(dict.fromkeys(pids)), "signal": "SIGBUS", "rank": rank},
        ctx.failure,
    )


# "host:port", "[host]:port" (IPv6 or newer PyTorch) or "(host, port)" (older PyTorch).
_HOST_PORT = r"\(?(?:\[(?P<host6>[^\]]+)\]|(?P<host>[^\s,()\[\]:]+))(?::|,\s*)(?P<port>\d+)"
_RDZV_TIMEOUT = re.compile(
    r"client socket has timed out after (?P<n>\d+(?:\.\d+)?)(?P<unit>ms|s|m)\b"
    r".*?connect to " + _HOST_PORT
)
_RDZV_CONNECT = re.compile(
    r"client socket has failed to connect to "
    + _HOST_PORT
    + r"(?:\s*\(errno: (?P<errno>\d+) - (?P<why>[^)]*)\))?"
)
_RDZV_ERROR = re.compile(r"(?P<type>Rendezvous\w*Error)\b(?::\s*(?P<msg>.*))?")
_RDZV_ENDPOINT = re.compile(r"--(?:rdzv[_-]endpoint|master[_-]addr)[= ]\"?(?P<ep>[^\s\"]+)\"?")


def _rendezvous(ctx: Context) -> Diagnosis | None:
    """The torchrun agent could not reach the c10d rendezvous store: no worker started.

    A log with a failure summary had workers running: a rendezvous error there (e.g. the
    RendezvousClosedError of other nodes once the job stops) is a consequence, not the cause.
    """
    if ctx.failure is not None and ctx.failure.root_cause is not None:
        return None
    timeout = next((ln for ln in ctx.lines if _RDZV_TIMEOUT.search(ln.text)), None)
    refused = next((ln for ln in ctx.lines if _RDZV_CONNECT.search(ln.text)), None)
    error = next((ln for ln in ctx.lines if _RDZV_ERROR.search(ln.text)), None)
    if timeout is None and refused is None and error is None:
        return None
    host = port = seconds = why = None
    if timeout and (m := _RDZV_TIMEOUT.search(timeout.text)):
        host, port = m["host"] or m["host6"], int(m["port"])
        n = float(m["n"])
        seconds = n / 1000 if m["unit"] == "ms" else n * 60 if m["unit"] == "m" else n
    elif refused and (m := _RDZV_CONNECT.search(refused.text)):
        host, port, why = m["host"] or m["host6"], int(m["port"]), m["why"]
    elif ep := next((m["ep"] for ln in ctx.lines if (m := _RDZV_ENDPOINT.search(ln.text))), None):
        host, _, p = ep.rpartition(":") if ":" in ep else (ep, "", "")
        port = int(p) if p.isdigit() else None
    etype = m["type"] if error and (m := _RDZV_ERROR.search(error.text)) else None
    if etype and etype != "RendezvousConnectionError" and timeout is None and refused is None:
        return _diag(
            "rendezvous_failed",
            f"Rendezvous failed ({etype}) before any worker started",
            (),
            "Check that every node was started with the same --rdzv-id/--rdzv-endpoint and "
            "--nnodes, and that enough nodes joined within the rendezvous timeout",
            [error.raw] if error else [],
            {"error_type": etype},
            ctx.failure,
        )
    endpoint = f"{host}:{port}" if host and port else host or "the rendezvous endpoint"
    after = f" after {seconds:g} s" if seconds is not None else ""
    how = f"timed out{after}" if timeout else f"was refused ({why})" if why else "failed"
    rest = f" → {etype}" if etype else ""
    facts: dict[str, FactValue | None] = {
        "host": host,
        "port": port,
        "endpoint": endpoint if host and port else None,
        "timeout_s": seconds,
        "errno_reason": why,
        "error_type": etype,
    }
    fix = (
        f"Make sure the store host {host or '(rdzv endpoint)'} is up with its torchrun agent "
        f"started, the address and port are right, and TCP {port or 'port'} is reachable "
        "(firewall)"
    )
    return _diag(
        "rendezvous_connection",
        f"Connecting to the c10d rendezvous store at {endpoint} {how}{rest}; no worker started",
        (),
        fix,
        [ln.raw for ln in (timeout, refused, error) if ln is not None],
        facts,
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
_GLOG_TIME = re.compile(r"\[[IWEF](?P<mm>\d{1,2}?)(?P<dd>\d\d) (?P<hms>\d\d:\d\d:\d\d)")
_WORLD_SIZE = (
    re.compile(r"\brank \d+/(?P<n>\d+) local_rank\b"),
    re.compile(r"\bworld_size[ =:]+(?P<n>\d+)\b", re.I),
    re.compile(r"\bnranks (?P<n>\d+)\b"),
)


def _world_size(lines: Sequence[Line]) -> int | None:
    for pattern in _WORLD_SIZE:
        for ln in lines:
            if m := pattern.search(ln.text):
                return int(m["n"])
    return None


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
        if (rank := _rank_of(ln)) is not None:
            waited.setdefault(rank, int(m["ran"]))
    enqueued: dict[int, int] = {}
    completed: dict[int, int] = {}
    pg = None
    for ln in works:
        m = _WATCHDOG_WORK.search(ln.text)
        assert m is not None
        seq = seq or m["seq"]
        if (r := _PG_RANK.search(ln.text)) and (p := _PG_ID.search(r["inside"])):
            pg = pg if pg is not None else int(p["pg"])
        if (rank := _rank_of(ln)) is not None:
            enqueued.setdefault(rank, int(m["enq"]))
            completed.setdefault(rank, int(m["done"]))
    victims = sorted(set(waited) | set(enqueued))
    world = _world_size(ctx.lines)
    missing = tuple(r for r in range(world) if r not in victims) if world else ()
    stamp = next((m for ln in reports + works if (m := _GLOG_TIME.search(ln.text))), None)
    when = f"{int(stamp['mm']):02d}-{stamp['dd']} {stamp['hms']}" if stamp else None
    what = f"{op} " if op else ""
    size = f" of {numel} elements" if numel else ""
    limit = f", timeout {timeout_ms} ms ({int(timeout_ms) / 60000:g} min)" if timeout_ms else ""
    in_pg = f" in process group {pg}" if pg is not None else ""
    culprits = (
        f"rank(s) {_join(missing)}, which did not report,"
        if missing
        else "a rank missing from these reports (not one of them)"
    )
    summary = (
        f"NCCL watchdog timeout{in_pg}: collective {what}SeqNum {seq}{size}{limit}. "
        f"Ranks {_join(victims)} waited for it (victims); the cause is {culprits} that never "
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


# Exceptions that only report another rank's failure (its peer vanished or timed out).
_CONSEQUENCE = re.compile(
    r"Connection (?:closed|reset) by (?:remote )?peer|ChildFailedError|Broken pipe"
    r"|Socket Timeout|NCCL communicator was aborted|Watchdog caught collective"
    r"|SignalException: Process \d+ got signal",
    re.I,
)

# torchrun's agent turning a signal it got into an exception (its traceback is the last thing
# a stopped job prints): what stopped the job, never a bug in the training script
_AGENT_SIGNAL = re.compile(r"SignalException: Process (?P<pid>\d+) got signal: (?P<sig>\d+)")


def _rank_exceptions(lines: Sequence[Line]) -> list[tuple[int | None, Line]]:
    """Final exception lines of the Python tracebacks printed by ranks (with a rank prefix)."""
    found: list[tuple[int | None, Line]] = []
    in_tb: dict[tuple[int | None, int | None], bool] = {}
    for ln in lines:
        who = (ln.rank, ln.local_rank)
        if ln.text.startswith("Traceback (most recent call last)"):
            in_tb[who] = True
        elif in_tb.get(who) and ln.text and not ln.text[0].isspace():
            if EXCEPTION_LINE.match(ln.text):
                found.append((ln.rank, ln))
            in_tb[who] = False
    return found


def _exception(ctx: Context) -> Diagnosis | None:
    """A Python exception raised by the training script of one rank.

    Taken from the torchelastic summary (the root cause's traceback, or when that is only a
    consequence such as a closed connection, another failed rank's), else from a traceback
    that a rank printed itself. A root cause that died of a signal is left to ``_signal``.
    """
    failure = ctx.failure
    root = failure.root_cause if failure else None
    entries = ([root] if root else []) + sorted(
        failure.others if failure else (), key=lambda e: e.time or "~"
    )
    entry = next((e for e in entries if e.exception and not _CONSEQUENCE.search(e.exception)), None)
    if entry is not None and entry.exception:
        rank, line, evidence = entry.rank, entry.exception, entry.exception
    elif root is not None and root.signal is not None:
        return None
    else:
        printed = [
            (r, ln) for r, ln in _rank_exceptions(ctx.lines) if not _CONSEQUENCE.search(ln.text)
        ]
        if root is not None:  # exit code without a traceback: look for that rank's own
            printed = [(r, ln) for r, ln in printed if r in (None, root.rank)]
        if not printed:
            return None
        rank, found = printed[0]
        entry = root
        rank = root.rank if rank is None and root is not None else rank
        line, evidence = found.text.strip(), found.raw
    m = EXCEPTION_LINE.match(line)
    etype = m["type"] if m else None
    on = f"rank {rank}" if rank is not None else "a rank"
    where = f" ({_where(entry)})" if entry and entry.rank == rank and _where(entry) else ""
    return _diag(
        "exception",
        f"{on}{where} raised {line}",
        (rank,) if rank is not None else (),
        f"Fix the {etype or 'error'} in the training script: see {on}'s traceback",
        [evidence],
        {
            "rank": rank,
            "exception_type": etype,
            "message": (m["msg"] or "") if m else line,
            "pid": entry.pid if entry else None,
            "exitcode": entry.exitcode if entry else None,
            "host": entry.host if entry else None,
        },
        failure,
    )


_SIGNAL_HINTS = {
    "SIGKILL": (
        "killed from outside, most likely by the kernel OOM killer (host RAM or a container / "
        "cgroup memory limit)",
        "Look for pid {pid} in the host's kernel log (dmesg | grep -i oom) and for OOMKilled on "
        "the container; lower host memory use (fewer DataLoader workers, smaller batches) or "
        "raise the memory limit",
    ),
    "SIGABRT": (
        "a native abort: an uncaught C++ exception or a failed assertion, often from CUDA/NCCL; "
        "the reason is in the rank's own output, not in this summary",
        "Read rank {rank}'s own output before the summary ('terminate called ...', 'what():', "
        "NCCL/CUDA errors); rerun with NCCL_DEBUG=INFO if it names NCCL",
    ),
    "SIGSEGV": (
        "a segmentation fault in native code (an extension, a driver, or a version mismatch)",
        "Run with PYTHONFAULTHANDLER=1 to get the crashing stack; check library versions",
    ),
    "SIGBUS": (
        "a bus error, usually shared memory (/dev/shm) exhausted",
        "Give the container a larger --shm-size or --ipc=host",
    ),
    "SIGTERM": (
        "terminated from outside (docker stop, a scheduler, or the agent stopping its workers)",
        "Find who stopped the job: the agent's log, the container's events",
    ),
}


def _signal(ctx: Context) -> Diagnosis | None:
    """The root-cause worker of the torchelastic summary died of a signal or an exit code."""
    failure = ctx.failure
    root = failure.root_cause if failure else None
    if failure is None or root is None:
        return None
    others = [e for e in failure.others if e.rank is not None]
    also = ""
    if others:
        how = sorted({e.signal or f"exit {e.exitcode}" for e in others})
        also = f"; also failed: ranks {_join(e.rank for e in others if e.rank is not None)}"
        also += f" ({', '.join(how)})"
    at = f" at {root.time}" if root.time else ""
    evidence = [ln for ln in root.lines if ln.startswith(("rank", "exitcode", "traceback"))]
    facts: dict[str, FactValue | None] = {
        "rank": root.rank,
        "local_rank": root.local_rank,
        "pid": root.pid,
        "host": root.host,
        "exitcode": root.exitcode,
        "signal": root.signal,
        "time": root.time,
        "script": failure.script,
        "other_ranks": tuple(e.rank for e in others if e.rank is not None),
    }
    if root.signal is None:
        return _diag(
            "exit_code",
            f"{_who(root)} exited with code {root.exitcode}{at}, without a Python traceback in "
            f"the summary{also}",
            (root.rank,) if root.rank is not None else (),
            f"Read rank {root.rank}'s own output; decorate the entrypoint with "
            "torch.distributed.elastic.multiprocessing.errors.record to get its traceback",
            evidence,
            facts,
            failure,
        )
    meaning, fix = _SIGNAL_HINTS.get(
        root.signal, ("a signal from outside or from native code", "Read the rank's own output")
    )
    kind = {"SIGKILL": "sigkill", "SIGABRT": "sigabrt", "SIGSEGV": "sigsegv"}.get(
        root.signal, "signal"
    )
    return _diag(
        kind,
        f"{_who(root)} was killed by {root.signal} (exit code {root.exitcode}){at}: {meaning}"
        f"{also}",
        (root.rank,) if root.rank is not None else (),
        fix.format(pid=root.pid, rank=root.rank),
        evidence,
        facts,
        failure,
    )


def _stopped(ctx: Context) -> Diagnosis | None:
    """torchrun itself got a signal (``SignalException: Process 1 got signal: 15``) and
    nothing else explains the end: the container was stopped from outside (``gpuconsole
    stop`` records that as ``stopped``, so this is seen for a ``docker stop``, a host shutdown
    or a scheduler's kill)."""
    for ln in reversed(ctx.lines):
        m = _AGENT_SIGNAL.search(ln.text)
        if m is None:
            continue
        try:
            name = signal.Signals(int(m["sig"])).name
        except ValueError:
            name = f"signal {m['sig']}"
        return _diag(
            "stopped",
            f"torchrun was stopped by {name} (process {m['pid']} in the container got it): "
            "the job was stopped from outside (docker stop, a host shutdown, a scheduler), "
            "not by a failure of the training script",
            (),
            "Nothing to fix if it was stopped on purpose; else find who stopped the container "
            "(`docker events` on the host)",
            [ln.raw],
            {"signal": name, "pid": int(m["pid"])},
            ctx.failure,
        )
    return None


#: The rules of this module (order does not matter: the engine ranks what they find).
RULES: tuple[Callable[[Context], Diagnosis | None], ...] = (
    _nccl_cuda_oom,
    _cuda_oom,
    _cuda_error,
    _shm_exhausted,
    _rendezvous,
    _exception,
    _nccl_timeout,
    _signal,
    _stopped,
)
