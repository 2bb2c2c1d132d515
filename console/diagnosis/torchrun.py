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
from collections.abc import Callable, Sequence

from console.diagnosis.common import join_ranks, place_of, rank_and_place
from console.diagnosis.elastic import EXCEPTION_LINE
from console.diagnosis.lines import Line
from console.diagnosis.model import Context, Diagnosis, FactValue
from console.diagnosis.model import make_diagnosis as _diag

__all__ = ["RULES"]


_SHM = re.compile(
    r"DataLoader worker \(pids?\)?\s*\(?(?P<pids>\d+(?:,\s*\d+)*)\) is killed by signal: Bus error"
    r"|Unexpected bus error encountered in worker"
    # PyTorch >= 2.x allocates a worker's shared-memory file up front (ENOSPC, not SIGBUS):
    # "unable to allocate shared memory(shm) for file </torch_9_38_0>: No space left on device"
    # (torch/csrc/.../MapAllocator.cpp); older wording "unable to write to file </torch_...>"
    r"|unable to (?:allocate shared memory\(shm\) for|write to) file </torch_[^>]*>",
)


def _shm_exhausted(ctx: Context) -> Diagnosis | None:
    """A DataLoader worker died of SIGBUS or could not allocate its shared-memory file:
    the container's /dev/shm is too small."""
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
    pid_list = join_ranks(dict.fromkeys(pids))
    who = f"DataLoader worker (pid {pid_list})" if pids else "A DataLoader worker"
    on = f" of rank {rank}" if rank is not None else ""
    bus = any("Bus error" in ln.text or "bus error" in ln.text for ln in hits)
    how = ("was killed by SIGBUS (Bus error)" if bus
           else "could not allocate shared memory (No space left on device)")
    return _diag(
        "shm_exhausted",
        f"{who}{on} {how}: shared memory (/dev/shm) ran out. The container's /dev/shm is too "
        "small (Docker's default is 64 MB); not a GPU or NCCL fault",
        (rank,) if rank is not None else (),
        "Restart the container with a larger --shm-size (e.g. 16g, or the job's shm_size) or "
        "with --ipc=host (compose: shm_size / ipc: host); or use fewer DataLoader workers",
        [ln.raw for ln in hits],
        {"pids": tuple(dict.fromkeys(pids)), "signal": "SIGBUS" if bus else None, "rank": rank},
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
    where = f" ({place_of(entry)})" if entry and entry.rank == rank and place_of(entry) else ""
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
        also = f"; also failed: ranks {join_ranks(e.rank for e in others if e.rank is not None)}"
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
            f"{rank_and_place(root)} exited with code {root.exitcode}{at}, without a Python "
            f"traceback in the summary{also}",
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
        f"{rank_and_place(root)} was killed by {root.signal} (exit code {root.exitcode}){at}: "
        f"{meaning}{also}",
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


#: The rules of this module (the engine ranks what they find).
RULES: tuple[Callable[[Context], Diagnosis | None], ...] = (
    _shm_exhausted,
    _rendezvous,
    _exception,
    _signal,
    _stopped,
)
