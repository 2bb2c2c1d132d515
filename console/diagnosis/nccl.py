"""Rules for NCCL failures: NCCL's result codes as PyTorch and NCCL report them, NCCL's own
``NCCL_DEBUG`` WARN lines, and PyTorch's ``ProcessGroupNCCL`` watchdog.

Sources, by rule:

- Result codes: ``ncclResult_t`` in NCCL's ``src/nccl.h.in`` (1 ncclUnhandledCudaError,
  2 ncclSystemError, 3 ncclInternalError, 4 ncclInvalidArgument, 5 ncclInvalidUsage,
  6 ncclRemoteError (NCCL >= 2.12), 7 ncclInProgress, 8 ncclTimeout (NCCL 2.30)) and their
  strings from ``ncclGetErrorString`` (``src/init.cc``: "unhandled cuda error", "unhandled
  system error", "internal error - please report this issue to the NCCL developers", "invalid
  argument", "invalid usage", "remote process exited or there was a network error", "NCCL
  operation in progress"). PyTorch prints them as ``NCCL error in: <file>:<line>, <string>,
  NCCL version <v>`` (``C10D_NCCL_CHECK`` in ``torch/csrc/distributed/c10d/NCCLUtils.hpp``),
  newer as ``NCCL error: <string>, NCCL version <v>`` inside "Collective WorkNCCL(...) raised
  the following async exception" / "Process group watchdog thread terminated with exception",
  followed by ``getNcclErrorDetailStr``'s line (``ncclSystemError: System call (e.g. socket,
  malloc) or external library call failed or device error.``, older "System call (socket,
  malloc, munmap, etc) failed.") and ``Last error:`` with ``ncclGetLastError``'s text; older
  ``torch.cuda.nccl`` / NCCL tests print ``NCCL Error <n>: <string>`` / ``NCCL failure
  <file>:<line> '<string>'``. ncclInvalidArgument (4) is reported as ``nccl_invalid_usage``:
  both mean the caller handed NCCL something wrong and have the same fix (fix the call).
- ``NCCL_DEBUG`` lines: ``host:pid:tid [cudaDev] file.cc:line NCCL WARN <msg>`` (``WARN`` in
  ``src/include/debug.h``; before 2.3 without the ``NCCL`` token: ``host:pid:tid [cudaDev]
  file:line WARN <msg>``, NCCL 2.0 also ``host [cudaDev] file:line WARN <msg>``) and the
  return traces ``... NCCL INFO file.cc:line -> <result>`` (``NCCLCHECK``); a ``Connection
  reset by peer`` traced back through ``bootstrap.cc`` / ``init.cc`` before the process's
  ``Init COMPLETE`` is the communicator's set-up failing (``nccl_system_error``), not a victim.
  WARN messages read here, by their format strings in NCCL's source:
  ``Cuda failure '%s'`` / ``Cuda failure %d '%s'`` (``src/include/checks.h``, ``cudawrap.h``),
  ``Failed to CUDA calloc %ld bytes`` (``alloc.h``), ``Duplicate GPU detected : rank %d and
  rank %d both on CUDA device %lx`` (``init.cc``, ncclInvalidUsage; NCCL 2.30 lets ranks share
  a GPU instead), ``Invalid rank requested : %d/%d`` (``init.cc``, ncclInvalidArgument),
  ``%s : %s %p is not a valid pointer`` (``argcheck.cc``), ``Error while creating shared memory
  segment %s (size %ld)`` (``shmutils.cc``; newer with ``, error: %s (%d)``), ``Call to
  posix_fallocate failed``, ``failed to extend ... to %d bytes``, ``Call to ibv_%s failed``
  (``ibvwrap.cc``), ``NET/IB : Got completion from peer %s with error %d`` / ``with
  status=%d`` (``net_ib.cc``), ``socketStartConnect: Connect to %s failed : %s``,
  ``socketProgress: Connection closed by remote peer %s`` (``misc/socket.cc``), ``Net : Call
  to recv from %s failed : %s``, ``Message truncated : received %d bytes instead of %d``
  (``bootstrap.cc``, ncclInternalError).
- ``ProcessGroupNCCL`` (``torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp``): "Watchdog caught
  collective operation timeout: WorkNCCL(SeqNum=, OpType=, NumelIn=, Timeout(ms)=) ran for N
  milliseconds before timing out" (1.8: "Caught collective operation timeout"), "Exception
  (either an error or timeout) detected by watchdog at work: N, last enqueued NCCL work: N,
  last completed NCCL work: N" / "Timeout at NCCL work: N", "NCCL communicator was aborted on
  rank N. Original reason for failure was: ..." (1.x), the heartbeat monitor
  "ProcessGroupNCCL's watchdog got stuck for N seconds" (2.3+; 2.2: "Heartbeat monitor timed
  out!"), the flight recorder's "Received a dump signal due to a collective timeout from rank
  N". A timeout names the ranks that reported it as victims; the cause is a rank that did not.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from console.diagnosis.common import (
    CHATTER_WORDS,
    FAILURE_WORDS,
    GLOG_TIME,
    NCCL_LINE,
    NCCL_RESULTS,
    NCCL_RETURN,
    PG_ID,
    PG_RANK,
    WORLD_SIZE,
    human_bytes,
    join_ranks,
    own_words,
    rank_of,
    world_size,
)
from console.diagnosis.cuda import SIGNATURES as CUDA_SIGNATURES
from console.diagnosis.lines import Line
from console.diagnosis.model import CauseKind, Context, Diagnosis, FactValue, Needs
from console.diagnosis.model import make_diagnosis as _diag

__all__ = ["RULES"]

_NAMES = {
    1: "ncclUnhandledCudaError",
    2: "ncclSystemError",
    3: "ncclInternalError",
    4: "ncclInvalidArgument",
    5: "ncclInvalidUsage",
    6: "ncclRemoteError",
    7: "ncclInProgress",
    8: "ncclTimeout",
}
_CODES = {name: code for code, name in _NAMES.items()}
#: The cause id each result code is reported as when nothing more specific is known.
_KIND_OF_CODE: dict[int, CauseKind] = {
    1: "nccl_unhandled_cuda",
    2: "nccl_system_error",
    3: "nccl_internal_error",
    4: "nccl_invalid_usage",
    5: "nccl_invalid_usage",
    6: "nccl_remote_error",
    7: "nccl_internal_error",
    8: "nccl_timeout",
}
_STRING_CODES = {
    "unhandled cuda error": 1,
    "unhandled system error": 2,
    "internal error": 3,
    "invalid argument": 4,
    "invalid usage": 5,
    "remote process exited or there was a network error": 6,
    "NCCL operation in progress": 7,
}
_VERSION = re.compile(r"\bNCCL (?:version:? )?v?(?P<v>\d+\.\d+\.\d+)")


def _nccl_version(lines: Sequence[Line]) -> str | None:
    return next((m["v"] for ln in lines if (m := _VERSION.search(ln.text))), None)


# ---------------------------------------------------------------------------------------------
# NCCL ran out of GPU memory


_NCCL_OOM = re.compile(r"Cuda failure (?:2 )?'out of memory'", re.I)
_NCCL_ALLOC = re.compile(
    r"Failed to CUDA (?:calloc|malloc|host alloc)\w* (?P<bytes>\d+) bytes", re.I
)


# proxy.cc: "[Proxy Service %d] Failed to execute operation %s from rank %d, retcode %d", the
# first number the proxy's own (its process's) communicator rank, the second the requester's
_PROXY_FAILED = re.compile(r"\[Proxy Service (?P<rank>\d+)\] Failed to execute operation \w+")


def _nccl_cuda_oom(ctx: Context) -> Diagnosis | None:
    """NCCL could not allocate GPU memory (its buffers at communicator init or a launch)."""
    hit = next((ln for ln in ctx.lines if _NCCL_OOM.search(ln.text)), None)
    if hit is None:
        return None
    head = _WARN.search(hit.text)
    pid_of = head["pid"] if head else None
    same = [
        ln
        for ln in ctx.lines[hit.index :]
        if pid_of is None or ((m := _WARN_OR_INFO.search(ln.text)) and m["pid"] == pid_of)
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
    if not stage and head and head["src"] and head["src"].startswith("enqueue"):
        stage.append("launching a collective")
    device = int(head["dev"]) if head and head["dev"] else None
    pid = int(head["pid"]) if head and head["pid"] else None
    host = head["host"] if head else None
    rank = rank_of(hit)
    if rank is None:
        # the proxy thread's report of the failed setup names its process's communicator rank:
        # "[Proxy Service 2] Failed to execute operation Setup from rank 2, retcode 1"
        rank = next((int(m["rank"]) for ln in same if (m := _PROXY_FAILED.search(ln.text))), None)
    # Other processes' NCCL warnings (closed connections, failed receives) are consequences.
    others = {
        int(m["pid"])
        for ln in ctx.lines
        if (m := NCCL_LINE.match(ln.text)) and m["level"] == "WARN" and m["pid"] != str(pid)
    }
    # every process whose own NCCL allocation failed: several GPUs full at once are the job's
    # own memory, not one GPU's neighbour
    all_oom = {
        (int(m["pid"]), int(m["dev"]) if m["dev"] else None)
        for ln in ctx.lines
        if _NCCL_OOM.search(ln.text) and (m := _WARN.search(ln.text)) and m["pid"]
    }
    devices = sorted({d for _, d in all_oom if d is not None})
    who = f"CUDA device {device}" if device is not None else "a GPU"
    if pid is not None:
        who += f" (pid {pid}" + (f" on {host})" if host else ")")
    if rank is not None:
        who = f"rank {rank}, {who}"
    what = f"a {size}-byte ({human_bytes(size)}) allocation failed" if size else "cudaMalloc failed"
    res = f", result {result} ({NCCL_RESULTS.get(result, 'error')})" if result else ""
    if len(all_oom) > 1:
        others -= {p for p, _ in all_oom}
        on = f"CUDA devices {join_ranks(devices)}" if devices else f"{len(all_oom)} processes"
        summary = (
            f"{len(all_oom)} processes ({on}"
            + (f" on {host}" if host else "")
            + f") ran out of GPU memory inside NCCL at once: {what}"
            + (f" while {' '.join(stage)}" if stage else "")
            + res
            + "; every GPU was full of the job's own memory when NCCL needed its buffers, not "
            "one GPU taken by another process"
        )
        evidence += [
            ln.raw for ln in ctx.lines if _NCCL_OOM.search(ln.text) and ln.raw not in evidence
        ][:3]
        fix = (
            "Leave GPU memory for NCCL's buffers: lower the batch size or the model state the "
            "job holds before its first collective (or NCCL_BUFFSIZE), and check with "
            "nvidia-smi that no other process uses these GPUs"
        )
    else:
        summary = (
            f"{who} ran out of GPU memory inside NCCL: {what}"
            + (f" while {' '.join(stage)}" if stage else "")
            + res
            + (f"; the errors of pid {join_ranks(sorted(others))} follow from it" if others else "")
        )
        gpu = f"GPU {device}" if device is not None else "the GPU"
        fix = (
            f"Free {gpu} before NCCL init: stop the other process using it, or have the job "
            "use less memory before init_process_group / its first collective"
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
            "rank": rank,
            "bytes": size,
            "nccl_result": result,
            "nccl_version": _nccl_version(ctx.lines),
            "other_pids": tuple(sorted(others)),
        },
        ctx.failure,
    )


# ---------------------------------------------------------------------------------------------
# What one NCCL message means


# NCCL_DEBUG's prefix, also without host:pid:tid (some collectors keep only "[cudaDev]").
# A log viewer may have taken "[cudaDev] " for a line number and dropped it (nccl-013).
_PREFIX = (
    r"(?:^|(?<=\s))(?:(?:(?P<host>[^\s:\[\]]+):(?P<pid>\d+):(?P<tid>\d+) )?"
    r"\[(?P<dev>\d+)\] )?"
)
_WARN = re.compile(_PREFIX + r"(?:(?P<src>\S+:\d+) )?NCCL WARN (?P<msg>.*)$")
# Early NCCL 2.x (``src/include/debug.h`` before 2.3) printed no "NCCL" token:
# "\n%s:%d:%d [%d] %s:%d WARN " (host:pid:tid [cudaDev] file:line), 2.0 also "host [dev]
# file:line WARN": read only with the source file and line NCCL puts before the level.
_OLD_WARN = re.compile(
    r"(?:^|(?<=\s))(?:(?P<host>[^\s:\[\]]+)(?::(?P<pid>\d+):(?P<tid>\d+))? )?\[(?P<dev>\d+)\] "
    r"(?P<src>[\w./-]+\.(?:h|cc|cu|cpp|c):\d+) WARN (?P<msg>.*)$"
)
# A failed IB completion quoted without NCCL's "NCCL WARN" (an issue title, a paste of the message)
_BARE_IB = re.compile(
    _PREFIX + r"(?:(?P<src>\S+:\d+) )?"
    r"(?P<msg>NET/IB\w*(?:/\w+)?\s*:\s*Got completion (?:from peer \S+ )?with .*)$"
)
# A message of NCCL's socket layer quoted without "NCCL WARN" (prose, a title, back-quotes, after
# any punctuation, CJK's included): its
# WARNs start with the reporting function (misc/socket.cc, 2.12+: "socketStartConnect: Connect
# to %s failed : %s", "socketProgress: Connection closed by remote peer %s",
# "socketProgressOpt: Call to recv from %s failed : %s", "socketPollConnect: ...",
# "ncclSocketInit: ...").
_BARE_SOCKET = re.compile(
    _PREFIX.replace(r"(?:^|(?<=\s))", r"(?<![\w.\-/])")
    + r"(?P<msg>(?:ncclS|s)ocket[A-Z]\w*\s*:\s*\S[^`'\"]*)"
)
_WARN_OR_INFO = re.compile(_PREFIX + r"(?:\S+:\d+ )?NCCL (?:WARN|INFO) ")
_TRACE = re.compile(_PREFIX + r"NCCL INFO (?P<src>\S+:\d+) -> (?P<code>\d+)")
# NCCL's bootstrap / socket set-up finding no interface to use (bootstrap.cc, misc/socket.cc:
# "Bootstrap : no socket interface found", "NET/Socket : no interface found", "No usable
# listening interface found").
_NO_INTERFACE = re.compile(
    r"no socket interface found|NET/Socket\s*:\s*no interface found"
    r"|No usable listening interface found",
    re.I,
)
# A WARN after which NCCL went on (a fallback it took): no failure of its own.
_WENT_ON = re.compile(r"falling back|fall back|\bretrying\b", re.I)
# A WARN that only passes on an earlier failure's code.
_FOLLOW_ON = re.compile(r"Failed to execute operation \w+ from rank \d+, retcode (?P<code>\d+)")

_CUDA_FAILURE = re.compile(r"Cuda failure (?:(?P<code>\d+) )?'(?P<err>[^']*)'")
_SHM = re.compile(r"shared memory segment|/dev/shm|posix_fallocate|\bshm\w*\.(?:h|cc)\b")
_SHM_FULL = re.compile(
    r"No space left on device|\(28\)|Error while creating shared memory segment|failed to extend"
)
_USAGE = re.compile(
    r"Duplicate GPU detected|Invalid rank requested|is not a valid pointer"
    r"|Invalid config \w+ attribute|\binvalid (?:root|type|redop|reduction op|peer)\b",
    re.I,
)
_IB = re.compile(r"NET/IB|\bibv_\w+|\bmlx5_\d|\bRoCE\b|\bGID\b")
_REMOTE = re.compile(
    r"Connection closed by (?:remote peer|localRank)|Connection reset by peer|Broken pipe"
    r"|remote process exited|Call to recv from \S+ failed"
)
# Failures to set up a socket or to connect one: a peer never reached is a network or address
# fault on the path, not a peer that went away. socket.cc's connect stage (2.19+):
# "socketStartConnect: exceeded retries (%d)" (connect refused or timed out that many times),
# "socketPollConnect: connect returned %s, exceeded timeout (%ld) ms", "socketPollConnect:
# Connect to %s returned %d(%s) errno %d(%s)"; older: "Connect to %s failed : %s".
_SOCKET = re.compile(
    r"Connect to \S+ failed|Call to (?:connect|socket|bind|listen|accept)\b|NET/Socket"
    # a WARN cut inside its address ("include/socket.h:403 NCCL WARN Connect to f")
    r"|^Connect to\b"
    r"|socket(?:Start|Poll)Connect\b"
    r"|Network is unreachable|No route to host|Connection refused|Connection timed out"
    r"|Cannot assign requested address|Software caused connection abort"
    r"|Socket creation failed|Address family not supported"
    r"|bootstrap\w*\s*:.*(?:failed|timed? ?out)",
    re.I,
)
_INTERNAL = re.compile(
    r"Message truncated|Attribute \w+ of node \w+ not found|Socket recv failed while polling"
)
# A failed InfiniBand/RoCE work completion, in NCCL's wordings: "NET/IB : Got completion with
# error %d, opcode %d, ..." (net_ib.cu, 2.4), "NET/IB : Got completion from peer
# %s with error %d, opcode %d, ..." (net_ib.cc to 2.18), "... with status=%d opcode=%d ..."
# (2.19+), "NET/IB: Got completion from peer %s with status=%s(%d) ..." (net_ib/p2p.cc, 2.28+,
# ibvWcStatusStr), also "NET/IBP:" / "NET/IB/GIN:" plugins. NCCL returns ncclSystemError for it
# up to 2.13 and ncclRemoteError from 2.14 on, whatever the status.
_IB_STATUS = re.compile(r"with (?:error (?P<a>\d+)|status=(?:(?P<b>\d+)|[^()]*\((?P<c>\d+)\)))")
_IB_COMPLETION = re.compile(r"Got completion from peer \S+ with (?:error|status=)")
# NCCL 2.4's wording names no peer ("NET/IB : Got completion with error 12, ..."); it returned
# ncclSystemError for every status, and the trace after it says so
_IB_COMPLETION_ANY = re.compile(r"Got completion (?:from peer \S+ )?with (?:error|status=)")
#: ``enum ibv_wc_status`` (rdma-core ``libibverbs/verbs.h``): statuses that name a fault of this
#: side (its own QP, memory registration / protection, e.g. ACS blocking GPUDirect RDMA for 4).
_IB_LOCAL_STATUS = {
    1: "IBV_WC_LOC_LEN_ERR",
    2: "IBV_WC_LOC_QP_OP_ERR",
    3: "IBV_WC_LOC_EEC_OP_ERR",
    4: "IBV_WC_LOC_PROT_ERR",
    6: "IBV_WC_MW_BIND_ERR",
    8: "IBV_WC_LOC_ACCESS_ERR",
    14: "IBV_WC_LOC_RDD_VIOL_ERR",
}
#: Statuses that say the other side or the fabric went away: 12 (transport retry counter
#: exceeded: no ACK from the peer), 13 (receiver-not-ready retries exceeded), 5 (work request
#: flushed: the connection was already in error), the remote-access / remote-operation errors.
_IB_REMOTE_STATUS = {
    5: "IBV_WC_WR_FLUSH_ERR",
    7: "IBV_WC_BAD_RESP_ERR",
    9: "IBV_WC_REM_INV_REQ_ERR",
    10: "IBV_WC_REM_ACCESS_ERR",
    11: "IBV_WC_REM_OP_ERR",
    12: "IBV_WC_RETRY_EXC_ERR",
    13: "IBV_WC_RNR_RETRY_EXC_ERR",
    15: "IBV_WC_REM_INV_RD_REQ_ERR",
    16: "IBV_WC_REM_ABORT_ERR",
    20: "IBV_WC_RESP_TIMEOUT_ERR",
}


def _ib_said(status: int | None) -> str:
    """`` (IB completion status 12, IBV_WC_RETRY_EXC_ERR)`` for a summary, or ""."""
    if status is None:
        return ""
    name = _IB_LOCAL_STATUS.get(status) or _IB_REMOTE_STATUS.get(status)
    return f" (IB completion status {status}" + (f", {name})" if name else ")")


def _ib_status(message: str) -> int | None:
    """The ``ibv_wc_status`` of a failed work completion NCCL reported, or None."""
    if not _IB_COMPLETION_ANY.search(message) or (m := _IB_STATUS.search(message)) is None:
        return None
    return int(m["a"] or m["b"] or m["c"])


_PEER = re.compile(r"(?:peer|from|to) (?P<peer>[^\s<]+<\d+>)")
_DUPLICATE = re.compile(
    r"Duplicate GPU detected : rank (?P<a>\d+) and rank (?P<b>\d+) both on CUDA device "
    r"(?P<bus>[0-9a-fA-F]+)"
)


def _cuda_kind(error: str) -> CauseKind:
    """The cause id of a CUDA error string NCCL reported (cuda.py's signatures)."""
    if "out of memory" in error.lower():
        return "nccl_cuda_oom"
    return next((k for k, sig in CUDA_SIGNATURES if sig.search(error)), "nccl_unhandled_cuda")


# NCCL's IB async-event thread (transport/net_ib.cc: "NET/IB : %s:%d Got async event : %s",
# ibv_event_type_str) logs every event of the device; these are the fabric's routine notices
# (rdma-core enum ibv_event_type: the subnet manager re-registering clients, a port coming up,
# LID / P_Key / SM / GID changes, path migration), not a fault. Cut words ("reregistr") count.
_IB_BENIGN_EVENT = re.compile(
    r"Got async event\s*:\s*(?:client rereg\w*|port active|LID change|P_Key change|SM change"
    r"|GID table change|path migrat\w*|communication established|SRQ limit reached"
    r"|last WQE reached)\b",
    re.I,
)


def _classify(message: str) -> tuple[CauseKind, str] | None:
    """(cause id, transport or detail) of one NCCL message, or None when it says nothing."""
    if _IB_BENIGN_EVENT.search(message):
        return None
    if m := _CUDA_FAILURE.search(message):
        return _cuda_kind(m["err"]), "cuda"
    if _NCCL_ALLOC.search(message):
        return "nccl_cuda_oom", "cuda"
    if _SHM.search(message):
        if _SHM_FULL.search(message):
            return "shm_exhausted", "shm"
        return "nccl_system_error", "shm"
    if _USAGE.search(message):
        return "nccl_invalid_usage", "usage"
    if _IB_COMPLETION.search(message):
        # NCCL itself returns ncclRemoteError for every failed completion (2.14+); a status
        # naming this side's own fault (4: local protection, ACS / GPUDirect RDMA) is a local
        # system fault, every other one says the peer or the fabric went away.
        status = _ib_status(message)
        return (
            "nccl_system_error" if status in _IB_LOCAL_STATUS else "nccl_remote_error",
            "IB/RoCE",
        )
    if _IB.search(message):
        return "nccl_system_error", "IB/RoCE"
    if _REMOTE.search(message):
        return "nccl_remote_error", "socket"
    if _SOCKET.search(message):
        return "nccl_system_error", "socket"
    if _INTERNAL.search(message):
        return "nccl_internal_error", "internal"
    return None


# ---------------------------------------------------------------------------------------------
# NCCL_DEBUG WARN lines


@dataclass
class _Finding:
    """One cause id's hits, gathered before they become a Diagnosis."""

    kind: CauseKind
    transport: str
    lines: list[Line] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    heads: list[re.Match[str]] = field(default_factory=list)
    code: int | None = None
    ranks: list[int] = field(default_factory=list)


def _thread(m: re.Match[str]) -> tuple[str | None, str | None, str | None]:
    return (m["pid"], m["tid"], m["dev"])


def _warn_findings(lines: Sequence[Line]) -> dict[CauseKind, _Finding]:
    found: dict[CauseKind, _Finding] = {}
    follow_ons: list[tuple[Line, re.Match[str], int]] = []
    for ln in lines:
        m = _WARN.search(ln.text) or _OLD_WARN.search(ln.text)
        if m is None and not _LAST_ERROR.search(ln.text):  # a Last error is _nccl_results'
            m = _BARE_IB.search(ln.text) or _BARE_SOCKET.search(ln.text)
        if m is None:
            continue
        msg = m["msg"].strip()
        if f := _FOLLOW_ON.search(msg):
            follow_ons.append((ln, m, int(f["code"])))
            continue
        code, trace = _trace_after(lines, ln.index, m)
        what = _classify(msg)
        if what is None:
            if code is None or code not in _KIND_OF_CODE:
                continue
            what = (_KIND_OF_CODE[code], "")
        kind, transport = what
        if kind == "nccl_cuda_oom":
            continue  # _nccl_cuda_oom's
        entry = found.setdefault(kind, _Finding(kind, transport))
        if len(entry.lines) < 3 and msg not in entry.messages:
            entry.lines.append(ln)
            if trace is not None and not entry.messages:
                entry.lines.append(trace)
            entry.messages.append(msg)
            entry.heads.append(m)
        entry.code = entry.code if entry.code is not None else code
        rank = rank_of(ln)
        if rank is not None and rank not in entry.ranks:
            entry.ranks.append(rank)
        # A message NCCL returns with another code (an IB completion error traced as 6):
        # that code's kind is seen too, as a consequence.
        if code in _KIND_OF_CODE and _KIND_OF_CODE[code] != kind and kind != "shm_exhausted":
            other = found.setdefault(_KIND_OF_CODE[code], _Finding(_KIND_OF_CODE[code], ""))
            if trace is not None and not other.lines:
                other.lines.append(trace)
                other.code = code
    for ln, m, code in follow_ons:
        for entry in found.values():
            if entry.code == code and any(h["pid"] == m["pid"] for h in entry.heads):
                entry.lines.append(ln)
    return found


def _trace_after(
    lines: Sequence[Line], index: int, head: re.Match[str]
) -> tuple[int | None, Line | None]:
    """The result code NCCL returned right after a WARN line (the next trace of its thread)."""
    for ln in lines[index + 1 : index + 40]:
        if (m := _TRACE.search(ln.text)) is not None and _thread(m) == _thread(head):
            return int(m["code"]), ln
        if (w := _WARN.search(ln.text)) is not None and _thread(w) == _thread(head):
            return None, None
    return None, None


_WHAT = {
    "nccl_invalid_usage": "NCCL was called wrongly",
    "nccl_system_error": "a system call or the network failed under NCCL",
    "nccl_internal_error": "NCCL hit an internal error",
    "nccl_remote_error": "a peer of NCCL went away",
    "nccl_unhandled_cuda": "a CUDA call inside NCCL failed",
    "shm_exhausted": "NCCL could not create its shared-memory segment: /dev/shm is full",
    "nccl_timeout": "an NCCL operation timed out",
}

#: What a person should read into each id (said after the message).
_MEANING = {
    "nccl_invalid_usage": "ranks sharing a GPU, a wrong rank / world size, or wrong arguments "
    "to a collective",
    "nccl_system_error": "a system call, the network (socket or IB/RoCE) or shared memory failed",
    "nccl_internal_error": "often a version mismatch between ranks or an unsupported "
    "network/topology",
    "nccl_remote_error": "a peer process exited or the network between the hosts broke; this "
    "rank is a victim",
    "nccl_unhandled_cuda": "a CUDA call NCCL made failed (driver/CUDA/NCCL mismatch, P2P or "
    "cuMem not supported, or an earlier CUDA error)",
    "shm_exhausted": "the container's /dev/shm is too small (Docker's default is 64 MB)",
}

_FIX = {
    "nccl_invalid_usage": "Give every rank its own GPU (torch.cuda.set_device(local_rank) before "
    "init_process_group, --nproc-per-node <= GPUs) and consistent RANK / WORLD_SIZE; fix the "
    "arguments of the NCCL call",
    "nccl_system_error": "Check the network between the hosts: NCCL_SOCKET_IFNAME / NCCL_IB_HCA "
    "name the right interfaces, ports are open, IB/RoCE links are up (ibstat, "
    "NCCL_IB_GID_INDEX for RoCE); rerun with NCCL_DEBUG=INFO",
    "nccl_internal_error": "Use the same NCCL/PyTorch version on every node and rerun with "
    "NCCL_DEBUG=INFO; with a network or topology message, set NCCL_SOCKET_IFNAME / "
    "NCCL_IB_DISABLE to what the hosts really have",
    "nccl_remote_error": "Find the rank or host that failed first (its own log, dmesg, the "
    "scheduler); this rank only saw its peer disappear. If none failed, check the network",
    "nccl_unhandled_cuda": "Rerun with NCCL_DEBUG=INFO to see the failing CUDA call; check that "
    "the driver, CUDA and NCCL versions match, try NCCL_P2P_DISABLE=1 / NCCL_CUMEM_ENABLE=0",
    "shm_exhausted": "Give the container a larger /dev/shm (--shm-size, --ipc=host, or a "
    "Kubernetes emptyDir with medium: Memory); NCCL_SHM_DISABLE=1 works around it, slower",
}

_CUDA_FIX = (
    "Rerun with CUDA_LAUNCH_BLOCKING=1 to find the kernel that failed before NCCL's call; "
    "check dmesg for Xid errors on that GPU"
)


def _where(heads: Sequence[re.Match[str]], ranks: Sequence[int]) -> str:
    parts: list[str] = []
    if ranks:
        parts.append(f"rank {join_ranks(ranks)}")
    head = heads[0] if heads else None
    if head is not None and head["dev"]:
        dev = f"CUDA device {head['dev']}"
        if head["pid"]:
            dev += f" (pid {head['pid']}" + (f" on {head['host']})" if head["host"] else ")")
        parts.append(dev)
    return ", ".join(parts)


_INVALID_RANK = re.compile(r"Invalid rank requested : (?P<rank>-?\d+)/(?P<n>\d+)")


_Usage = tuple[str, dict[str, FactValue | None], tuple[int, ...]]


def _usage(messages: Sequence[str]) -> _Usage | None:
    """Summary, facts and the ranks at fault for the invalid-usage messages that name them."""
    dup = [d for d in (_DUPLICATE.search(x) for x in messages) if d]
    if dup:
        sharing = tuple(sorted({int(r) for d in dup for r in (d["a"], d["b"])}))
        return (
            f"Ranks {join_ranks(sharing)} use the same GPU (bus id {dup[0]['bus']}): NCCL refuses "
            "two ranks on one device (Duplicate GPU detected, ncclInvalidUsage). Each rank must "
            "select its own GPU before NCCL init",
            {"bus_id": dup[0]["bus"], "sharing_ranks": sharing},
            sharing,
        )
    bad = next((m for m in (_INVALID_RANK.search(x) for x in messages) if m), None)
    if bad:
        n = int(bad["n"])
        return (
            f"NCCL was asked for rank {bad['rank']} in a communicator of {n} ranks (valid: "
            f"0..{n - 1}): the RANK / WORLD_SIZE the launcher gives the workers do not match",
            {"requested_rank": int(bad["rank"]), "nranks": n},
            (),
        )
    return None


def _nccl_warnings(ctx: Context) -> list[Diagnosis]:
    """What the NCCL_DEBUG WARN lines say, one diagnosis per cause id."""
    version = _nccl_version(ctx.lines)
    out: list[Diagnosis] = []
    for kind, f in _warn_findings(ctx.lines).items():
        head = f.heads[0] if f.heads else None
        message = f.messages[0] if f.messages else None
        where = _where(f.heads, f.ranks)
        code = f.code
        named = f"{_NAMES.get(code, 'result')} ({code})" if code is not None else ""
        facts: dict[str, FactValue | None] = {
            "device": int(head["dev"]) if head and head["dev"] else None,
            "pid": int(head["pid"]) if head and head["pid"] else None,
            "host": head["host"] if head else None,
            "rank": f.ranks[0] if len(f.ranks) == 1 else None,
            "nccl_result": code,
            "nccl_version": version,
            "transport": f.transport or None,
            "message": message,
        }
        ranks: tuple[int, ...] = tuple(f.ranks)
        fix = _FIX.get(kind, _CUDA_FIX)
        if (
            kind == "nccl_remote_error"
            and message
            and head is not None
            and (
                _RESET.search(message)
                or (_CLOSED.search(message) and _traced(ctx.lines, f.lines[0], _BOOTSTRAP_TRACE))
            )
            and _during_init(ctx.lines, f.lines[0], head)
        ):
            # reset while the communicator was being set up: no collective had run, so no
            # earlier failure of a peer explains it; the set-up itself failed
            facts["phase"] = "init"
            if p := _PEER.search(message):
                facts["peer"] = p["peer"]
            peer = f" by {facts['peer']}" if facts.get("peer") else ""
            out.append(
                _diag(
                    "nccl_system_error",
                    "NCCL's bootstrap connection was "
                    + ("closed" if "closed" in message else "reset")
                    + peer
                    + (f" on {where}" if where else "")
                    + " during communicator init ("
                    + message.rstrip(". ")
                    + (f" -> {named}" if named else "")
                    + "): no collective "
                    "had run, so this is the set-up failing, not a victim of an earlier failure: "
                    "the connection reached a listener that is not this job's NCCL (a wrong "
                    "interface or address such as a container bridge IP, a port another process "
                    "holds) or the peer process died during init"
                    + (f"; NCCL {version}" if version else ""),
                    ranks,
                    "Check the bootstrap address each rank uses (NCCL_SOCKET_IFNAME to an "
                    "interface "
                    "all nodes share; host networking for containers), that no other job uses the "
                    "same ports, and the peer's own log for a crash at init",
                    [ln.raw for ln in f.lines],
                    facts,
                    ctx.failure,
                )
            )
            continue
        if message is None:  # only a return trace: a consequence of another finding
            summary = f"NCCL returned {named or 'an error'}"
        elif f.transport == "cuda":
            m = _CUDA_FAILURE.search(message)
            error = m["err"] if m else message
            facts.update({"cuda_error": error, "error": error})
            facts["cuda_code"] = int(m["code"]) if m and m["code"] else None
            summary = (
                f"CUDA error '{error}' in a CUDA call of NCCL on {where or 'a GPU'}"
                + (f" ({named})" if named else "")
                + (
                    ": an earlier kernel fault; NCCL's errors follow from it"
                    if kind != "nccl_unhandled_cuda"
                    else ""
                )
            )
        else:
            what = _WHAT[kind]
            summary = f"{what[0].upper()}{what[1:]}" + (f" on {where}" if where else "")
            summary += f": {message.rstrip('. ')}" + (f" -> {named}" if named else "")
            if kind in _MEANING:
                summary += f". {_MEANING[kind][0].upper()}{_MEANING[kind][1:]}"
            if kind == "nccl_invalid_usage" and (usage := _usage(f.messages)) is not None:
                summary, more, sharing = usage
                facts.update(more)
                ranks = sharing or ranks
            if f.transport == "IB/RoCE" and (status := _ib_status(message)) is not None:
                facts["ib_status"] = status
                summary += _ib_said(status)
            if p := _PEER.search(message):
                facts["peer"] = p["peer"]
            if version:
                summary += f"; NCCL {version}"
        out.append(_diag(kind, summary, ranks, fix, [ln.raw for ln in f.lines], facts, ctx.failure))
    return out


#: A connection the other end reset during set-up (``socket.cc``: "Connection reset by peer").
_RESET = re.compile(r"Connection reset by peer")
#: A bootstrap connection the other end closed before its data came (2.19+ ``socketProgress``:
#: "Connection closed by remote peer <addr>", traced back through ``bootstrap.cc``). A
#: transport's connection closed during set-up (``proxy.cc`` Connect) is a peer gone instead.
_CLOSED = re.compile(r"Connection closed by remote peer")
_BOOTSTRAP_TRACE = re.compile(r"NCCL INFO bootstrap\.cc:\d+ -> \d+")
#: NCCL's return traces through communicator set-up (``bootstrap.cc``, ``init.cc``), and the
#: INFO line of a communicator whose init finished.
_INIT_TRACE = re.compile(r"NCCL INFO (?:bootstrap|init)\.cc:\d+ -> \d+")
_INIT_DONE = re.compile(r"Init COMPLETE")


def _traced(lines: Sequence[Line], warn: Line, trace: re.Pattern[str]) -> bool:
    """Whether the return trace right after the WARN at ``warn`` passes ``trace``."""
    return any(trace.search(ln.text) for ln in lines[warn.index + 1 : warn.index + 40])


def _during_init(lines: Sequence[Line], warn: Line, head: re.Match[str]) -> bool:
    """Whether the WARN at ``warn`` came while a communicator was set up: its process traces
    the error back through ``bootstrap.cc`` / ``init.cc`` right after it, and no
    ``Init COMPLETE`` of that process came before it."""
    pid = head["pid"]

    def ours(ln: Line) -> bool:
        m = _WARN_OR_INFO.search(ln.text)
        return pid is None or (m is not None and m["pid"] == pid)

    if any(_INIT_DONE.search(ln.text) and ours(ln) for ln in lines[: warn.index]):
        return False
    return any(
        _INIT_TRACE.search(ln.text) and ours(ln) for ln in lines[warn.index + 1 : warn.index + 40]
    )


# ---------------------------------------------------------------------------------------------
# Result codes as PyTorch / NCCL report them


_RESULT = re.compile(
    r"NCCL (?:error|Error (?P<num>\d+)|failure)(?: in)?:?\s*(?:[^\s,']+:\d+,?\s*'?)?"
    r"(?P<what>unhandled cuda error|unhandled system error|internal error|invalid argument"
    r"|invalid usage|remote process exited or there was a network error"
    r"|NCCL operation in progress)"
    r"|\b(?P<name>nccl(?:UnhandledCudaError|SystemError|InternalError|InvalidArgument"
    r"|InvalidUsage|RemoteError|InProgress|Timeout))\b"
    # an extension's own check macro printing the bare ncclResult_t: "NCCL Error at
    # file.cpp:127 value 5" (FastMoE), "NCCL error at f.cu:42 code 2", "... returned 3"
    r"|NCCL (?:[Ee]rror|failure) at \S+:\d+[ ,:]+(?:value|code|result|returned)[ =:]*"
    r"(?P<bare>[1-8])\b"
    # another framework naming the NCCL call that failed and its ncclGetErrorString (Horovod
    # under TensorFlow: "ncclCommInitRank failed: unhandled system error"; XLA: "NCCL
    # operation ncclAllReduce(...) failed: unhandled cuda error")
    r"|\bnccl[A-Z]\w*(?:\([^()]*\))? failed:?\s*(?P<what2>unhandled cuda error"
    r"|unhandled system error|internal error|invalid argument|invalid usage"
    r"|remote process exited or there was a network error)"
)
_LAST_ERROR = re.compile(r"Last error:\s*(?P<rest>.*)$")
_SEQ_OF_WORK = re.compile(r"WorkNCCL\(SeqNum=(?P<seq>\d+)(?:, OpType=(?P<op>\w+))?")


def _code(m: re.Match[str]) -> int | None:
    if m["bare"]:
        return int(m["bare"])
    if m["what"] or m["what2"]:
        return _STRING_CODES.get(m["what"] or m["what2"])
    if m["name"]:
        return _CODES.get(m["name"])
    return None


def _last_error(lines: Sequence[Line], start: int) -> tuple[str | None, Line | None]:
    """The text after ``Last error:`` in the few lines from ``start`` (same or next line), or
    the line before an empty ``Last error:`` just above ``start`` (a reversed paste)."""
    for ln in lines[start : start + 5]:
        m = _LAST_ERROR.search(ln.text)
        if m is None:
            continue
        if m["rest"].strip():
            # a paste that joined the lines keeps the C++ frames after it: not part of it
            return m["rest"].split("Exception raised from")[0].strip(), ln
        nxt = lines[ln.index + 1] if ln.index + 1 < len(lines) else None
        if nxt is None or not nxt.text.strip() or nxt.text.startswith("Exception raised"):
            return None, None
        text = nxt.text
        prefix = ln.text[: m.start()]
        if prefix.strip() and text.startswith(prefix):  # a collector's prefix on every line
            text = text[len(prefix) :]
        return text.strip(), nxt
    # a paste in reverse order, innermost line first: the detail, an empty "Last error:", then
    # the result's own lines
    if start >= 2 and (m := _LAST_ERROR.search(lines[start - 1].text)) and not m["rest"].strip():
        detail = lines[start - 2]
        if detail.text.strip() and not _RESULT.search(detail.text):
            return detail.text.strip(), detail
    return None, None


def _nccl_results(ctx: Context) -> list[Diagnosis]:
    """NCCL result codes in PyTorch's errors (``NCCL error in: ..., unhandled system error``)
    and NCCL's own (``NCCL Error 2``, ``NCCL failure ... 'internal error'``)."""
    blocks: dict[CauseKind, list[tuple[Line, int, str | None, Line | None]]] = {}
    skip_until = -1
    for ln in ctx.lines:
        if ln.index <= skip_until:
            continue
        m = _RESULT.search(ln.text)
        if m is None or _WARN.search(ln.text):
            continue
        code = _code(m)
        if code is None:
            continue
        last, last_line = _last_error(ctx.lines, ln.index)
        # The detail line and the Last error belong to this block.
        skip_until = last_line.index if last_line is not None else ln.index + 1
        kind = _KIND_OF_CODE.get(code, "nccl_internal_error")
        if last and (what := _classify(last)) is not None:
            kind = what[0]
        blocks.setdefault(kind, []).append((ln, code, last, last_line))
    version = _nccl_version(ctx.lines)
    out: list[Diagnosis] = []
    warned = _warn_findings(ctx.lines) if blocks else {}
    for kind, hits in blocks.items():
        ln, code, last, last_line = hits[0]
        evidence = [ln.raw]
        # PyTorch's error carries no "Last error" (NCCL < 2.12), but an NCCL_DEBUG WARN of the
        # same cause elsewhere in the text (another paste, a relay's log) says why: its detail.
        said = warned.get(kind)
        if last is None and said is not None and said.messages and said.lines:
            last, last_line = said.messages[0], said.lines[0]
        if last is None and code == 3:
            # ncclInternalError names no cause of its own: a WARN that no rule classifies
            # ("graph/topo.h:230 NCCL WARN Could not find NET with id 0") is what NCCL said
            # as it failed; the last one (not a fallback NCCL took and went on from)
            plain = [
                (m["msg"].strip(), w)
                for w in ctx.lines
                if (m := _WARN.search(w.text))
                and m["msg"].strip()
                and not _FOLLOW_ON.search(m["msg"])
                and not _WENT_ON.search(m["msg"])
                and _classify(m["msg"].strip()) is None
            ]
            if plain:
                last, last_line = plain[-1]
        detail = ctx.lines[ln.index + 1] if ln.index + 1 < len(ctx.lines) else None
        if detail is not None and _RESULT.search(detail.text) and detail is not last_line:
            evidence.append(detail.raw)
        if last_line is not None:
            evidence.append(last_line.raw)
        elif last:
            evidence.append(ln.raw)
        # no detail: NCCL's own return trace of that code shows where it failed
        traced, during_init = _trace_chain(ctx.lines, code) if not last else ([], False)
        evidence += [t.raw for t in traced[:4] if t.raw not in evidence]
        ranks = sorted({r for h in hits if (r := rank_of(h[0])) is not None})
        pg = None
        if (pr := PG_RANK.search(ln.text)) and (p := PG_ID.search(pr["inside"])):
            pg = int(p["pg"])
        work = _SEQ_OF_WORK.search(ln.text)
        name = _NAMES.get(code, "an NCCL error")
        facts: dict[str, FactValue | None] = {
            "rank": ranks[0] if len(ranks) == 1 else None,
            "nccl_result": code,
            "nccl_error": name,
            "nccl_version": version,
            "last_error": last,
            "process_group": pg,
            "seq": int(work["seq"]) if work else None,
            "op": work["op"] if work and work["op"] else None,
            "phase": "init" if during_init else None,
        }
        ver = f", NCCL {version}" if version else ""
        because = (
            f"; last error: {last}"
            if last
            else "; NCCL gave no detail (rerun with NCCL_DEBUG="
            + ("WARN)" if code in (4, 5) else "INFO)")
        )
        on = f"Rank {join_ranks(ranks)}: NCCL" if ranks else "NCCL"
        work_of = f" in {facts['op'] or 'collective'} SeqNum {facts['seq']}" if work else ""
        if (
            kind.startswith("cuda_")
            or kind == "nccl_cuda_oom"
            or (kind == "nccl_unhandled_cuda" and last)
        ):
            m = _CUDA_FAILURE.search(last or "")
            error = m["err"] if m else last
            facts.update({"cuda_error": error, "error": error})
            summary = (
                f"{on} failed with {name} ({code}{ver}){work_of}: CUDA error '{error}' in a CUDA "
                "call of NCCL"
            )
            fix = _FIX["nccl_unhandled_cuda"] if kind == "nccl_unhandled_cuda" else _CUDA_FIX
        else:
            summary = f"{on} failed with {name} ({code}{ver}){work_of}{because}"
            if last and (status := _ib_status(last)) is not None:
                facts["ib_status"] = status
                summary += _ib_said(status)
            no_iface = bool(last and _NO_INTERFACE.search(last))
            if no_iface:
                summary += (
                    ". NCCL found no network interface it may use: NCCL_SOCKET_IFNAME names "
                    "none the host has up (or its prefix matches none), or the host has only "
                    "loopback / docker interfaces NCCL skips"
                )
            elif kind in _MEANING:
                summary += f". {_MEANING[kind][0].upper()}{_MEANING[kind][1:]}"
            if kind == "nccl_invalid_usage" and last and (usage := _usage([last])) is not None:
                summary, more, sharing = usage
                facts.update(more)
                ranks = sorted(set(ranks) | set(sharing))
            fix = _FIX.get(kind, _CUDA_FIX)
            if no_iface:
                fix = (
                    "Set NCCL_SOCKET_IFNAME to an interface every host has up (`ip -br addr`: "
                    "e.g. NCCL_SOCKET_IFNAME=eth0, or =^docker,lo to exclude), the same on all "
                    "nodes"
                )
        out.append(_diag(kind, summary, ranks, fix, evidence, facts, ctx.failure))
    return out


# ---------------------------------------------------------------------------------------------
# ProcessGroupNCCL's watchdog


# Matched over the lines joined without separators, so that a message hard-wrapped at a fixed
# width ("...OpTy" / "pe=BROADCAST...") reads whole.
# Also the report cut after its WorkNCCL(...) ("Timeout(ms)=600000) ra", inside a C++
# ``what():``), and the blocking-wait wording (TORCH_NCCL_BLOCKING_WAIT=1: "Work WorkNCCL(...)
# timed out in blocking wait", ProcessGroupNCCL.cpp).
_WATCHDOG = re.compile(
    r"(?:Watchdog c|C)aught collective operation timeout: "
    r"WorkNCCL\((?P<args>(?:[^()]|\(ms\))*)\)(?: ran for (?P<ran>\d+) milliseconds)?"
    r"|\bWork WorkNCCL\((?P<args2>(?:[^()]|\(ms\))*)\) timed out in blocking wait"
)
_WATCHDOG_WORK = re.compile(
    r"(?:(?:detected by watchdog at work|Timeout at NCCL work): (?P<seq>\d+), )?"
    r"[Ll]ast enqueued NCCL work: (?P<enq>-?\d+), last completed NCCL work: (?P<done>-?\d+)"
)
_HEARTBEAT = re.compile(r"watchdog got stuck for (?P<s>\d+) seconds|Heartbeat monitor timed out")
_ABORTED = re.compile(r"NCCL communicator was aborted(?: on rank (?P<rank>\d+))?")
_DUMP = re.compile(
    r"Received a dump signal due to a collective timeout from (?:this local rank|rank (?P<r>\d+))"
)
# The C++ side of the same timeout when its message was cut off: c10's ``Exception raised from
# {function} at {file}:{line}`` header (c10/util/Exception.cpp) naming WorkNCCL::checkTimeout,
# the only place the watchdog raises a timeout (torch >= 2.0), or the throw site's frame
# (``frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(...)``) under a header cut away.
_CHECK_TIMEOUT = re.compile(
    r"Exception raised from checkTimeout at \S*ProcessGroupNCCL\.cpp"
    r"|^frame #[01]: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout\("
)
# The watchdog's report cut off at the end of a line ("[Rank 5] Watchdog caught collective
# operati", a paste or a terminal that stopped there), and the lines ProcessGroupNCCL prints as
# it takes a process down after a failed or timed-out collective ("Some NCCL operations have
# failed or timed out. Due to the asynchronous nature of CUDA kernels, ...").
_WATCHDOG_CUT = re.compile(r"Watchdog caught (?P<tail>co[a-z ]*)$")
_TAKEN_DOWN = re.compile(r"Some NCCL operations have failed or timed out\b")


def _cut_report(text: str) -> bool:
    """Whether ``text`` ends inside the words of the watchdog's timeout report."""
    m = _WATCHDOG_CUT.search(text.rstrip())
    return m is not None and "collective operation timeout".startswith(m["tail"])


_RANK_BEFORE = re.compile(r"\[(?:[^\[\]]*?\b)?Rank (?P<rank>\d+)\]\s*(?:[^\[\]]{0,80})$")


def _arg(pattern: str, args: str) -> str | None:
    m = re.search(pattern, args)
    return m.group(1) if m else None


class _Flat:
    """The lines' texts joined without separators, with a way back to the lines."""

    def __init__(self, lines: Sequence[Line]) -> None:
        self.lines = lines
        self.starts: list[int] = []
        parts: list[str] = []
        pos = 0
        for ln in lines:
            self.starts.append(pos)
            parts.append(ln.text)
            pos += len(ln.text)
        self.text = "".join(parts)

    def line_at(self, pos: int) -> Line:
        return self.lines[max(0, bisect.bisect_right(self.starts, pos) - 1)]

    def spanned(self, m: re.Match[str]) -> list[Line]:
        first = self.line_at(m.start()).index
        last = self.line_at(max(m.start(), m.end() - 1)).index
        return list(self.lines[first : last + 1])

    def rank_at(self, m: re.Match[str]) -> int | None:
        """``[Rank N]`` just before the match on its own line, else the line's rank prefix."""
        line = self.line_at(m.start())
        before = self.text[self.starts[line.index] : m.start()]
        if (r := _RANK_BEFORE.search(before)) is not None:
            return int(r["rank"])
        return rank_of(line)


def _nccl_timeout(ctx: Context) -> Diagnosis | None:
    """The ProcessGroupNCCL watchdog timed out a collective: some rank never joined it."""
    if not any("NCCL" in ln.text or "atchdog" in ln.text for ln in ctx.lines):
        return None
    flat = _Flat(ctx.lines)
    reports = list(_WATCHDOG.finditer(flat.text))
    works = list(_WATCHDOG_WORK.finditer(flat.text))
    beats = list(_HEARTBEAT.finditer(flat.text))
    aborted = list(_ABORTED.finditer(flat.text))
    dumps = list(_DUMP.finditer(flat.text))
    raised = next((ln for ln in ctx.lines if _CHECK_TIMEOUT.search(ln.text)), None)
    # (an NCCL error in the text says why the process was taken down: that rule's)
    cut = (
        []
        if any(_RESULT.search(ln.text) for ln in ctx.lines)
        else [ln for ln in ctx.lines if _cut_report(ln.text) or _TAKEN_DOWN.search(ln.text)]
    )
    if not reports and not works and not beats and not dumps and raised is None and not cut:
        if not aborted or any(_RESULT.search(ln.text) for ln in ctx.lines):
            return None
    evidence: list[str] = []
    waited: dict[int, int] = {}
    seq_of: dict[int, int] = {}
    op_of: dict[int, str] = {}
    seq = op = numel = numel_out = timeout_ms = None
    for m in reports:
        args = m["args"] if m["args"] is not None else m["args2"]
        seq = seq or _arg(r"SeqNum=(\d+)", args)
        op = op or _arg(r"OpType=(\w+)", args)
        numel = numel or _arg(r"NumelIn=(\d+)", args)
        numel_out = numel_out or _arg(r"NumelOut=(\d+)", args)
        timeout_ms = timeout_ms or _arg(r"Timeout\(ms\)=(\d+)", args)
        if (rank := flat.rank_at(m)) is not None:
            if m["ran"] is not None:
                waited.setdefault(rank, int(m["ran"]))
            if (own := _arg(r"SeqNum=(\d+)", args)) is not None:
                seq_of.setdefault(rank, int(own))
            if (kind := _arg(r"OpType=(\w+)", args)) is not None:
                op_of.setdefault(rank, kind)
        evidence += [ln.raw for ln in flat.spanned(m)]
    enqueued: dict[int, int] = {}
    completed: dict[int, int] = {}
    pg = None
    for m in works:
        seq = seq or m["seq"]
        line = flat.line_at(m.start())
        if (r := PG_RANK.search(line.text)) and (p := PG_ID.search(r["inside"])):
            pg = pg if pg is not None else int(p["pg"])
        rank = flat.rank_at(m)
        if rank is None and line.index > 0 and not line.raw.startswith("["):
            rank = rank_of(ctx.lines[line.index - 1])  # a message wrapped by the terminal
        if rank is not None:
            enqueued.setdefault(rank, int(m["enq"]))
            completed.setdefault(rank, int(m["done"]))
        evidence += [ln.raw for ln in flat.spanned(m)]
    stuck: dict[int, int] = {}
    heartbeat_s = None
    for m in beats:
        if m["s"]:
            heartbeat_s = heartbeat_s or int(m["s"])
        line = flat.line_at(m.start())
        rank = rank_of(line)
        if rank is None and line.index > 0:  # the message wrapped right after its "[Rank N]"
            rank = rank_of(ctx.lines[line.index - 1])
        if rank is not None:
            stuck.setdefault(rank, int(m["s"]) if m["s"] else 0)
        evidence += [ln.raw for ln in flat.spanned(m)][:1]
    aborted_ranks = [int(m["rank"]) for m in aborted if m["rank"]]
    evidence += [flat.line_at(m.start()).raw for m in aborted + dumps]
    dumped = [int(m["r"]) for m in dumps if m["r"]]
    victims = sorted(set(waited) | set(enqueued) | set(stuck) | set(aborted_ranks))
    world = world_size(ctx.lines)
    missing = tuple(r for r in range(world) if r not in victims) if world else ()
    stamped = (GLOG_TIME.search(flat.line_at(m.start()).text) for m in reports + works + beats)
    stamp = next((g for g in stamped if g), None)
    when = f"{int(stamp['mm']):02d}-{stamp['dd']} {stamp['hms']}" if stamp else None
    in_pg = f" in process group {pg}" if pg is not None else ""
    if reports or works:
        what = f"{op} " if op else ""
        size = f" of {numel} elements" if numel else ""
        limit = f", timeout {timeout_ms} ms ({int(timeout_ms) / 60000:g} min)" if timeout_ms else ""
        culprits = (
            f"rank(s) {join_ranks(missing)}, which did not report,"
            if missing
            else "a rank missing from these reports (not one of them)"
        )
        which = f"collective {what}SeqNum {seq}" if seq else f"a {what}collective"
        waiting = (
            f"{'Rank' if len(victims) == 1 else 'Ranks'} {join_ranks(victims)} waited "
            "for it (victims)"
            if victims
            else "The ranks that reported it are victims"
        )
        progress = ""
        if enqueued and not seq:
            first = min(enqueued)
            progress = (
                f" (rank {first}: last enqueued NCCL work {enqueued[first]}, last "
                f"completed {completed[first]})"
            )
        summary = (
            f"NCCL watchdog timeout{in_pg}: {which}{size}{limit}{progress}. {waiting}; the "
            f"cause is {culprits} that never entered it (hung, dead, slow, or on another code "
            "path)"
        )
        if len(set(seq_of.values())) > 1:
            # Each rank numbers its collectives in the order it calls them (ProcessGroupNCCL's
            # seq_): ranks timing out in different SeqNums are out of step, every one of them
            # waiting in a collective the others are not in (a collective under a rank-dependent
            # branch, or the same collectives in a different order), not one absent rank.
            ahead = max(seq_of, key=lambda r: seq_of[r])
            behind = min(seq_of, key=lambda r: seq_of[r])
            per_rank = "; ".join(
                f"rank {r}: {op_of.get(r, '?')} SeqNum {seq_of[r]}" for r in sorted(seq_of)
            )
            summary = (
                f"NCCL watchdog timeout{in_pg}{limit}: the ranks timed out in DIFFERENT "
                f"collectives ({per_rank}): rank {ahead} is {seq_of[ahead] - seq_of[behind]} "
                f"collective(s) ahead of rank {behind}. A collective mismatch: the ranks called "
                "different collectives or the same ones in a different order (one under a "
                "rank-dependent branch, e.g. checkpoint saving or eval on one rank), so each "
                "waits in one the others never call"
            )
        if len(set(seq_of.values())) <= 1 and len(set(op_of.values())) > 1:
            # The same SeqNum (or, before SeqNums, none) but different OpTypes: the ranks are
            # in different collectives at the same point of their sequence.
            per_rank = "; ".join(f"rank {r}: {op_of[r]}" for r in sorted(op_of))
            at = f"at the same SeqNum {seq}" if seq else "(the log has no SeqNums)"
            summary = (
                f"NCCL watchdog timeout{in_pg}{limit}: the ranks timed out in DIFFERENT "
                f"collectives {at} ({per_rank}). A collective mismatch, not a missing rank: "
                "some ranks called another collective than the others at this point (one under "
                "a rank-dependent branch, e.g. a broadcast of metrics or a checkpoint on some "
                "ranks), so each waits in one the others never call"
            )
        odd = _odd_rank(seq_of) if len(set(seq_of.values())) > 1 else _odd_rank(op_of)
        if odd is not None and (len(set(seq_of.values())) > 1 or len(set(op_of.values())) > 1):
            summary += (
                f"; rank {odd} is the odd one ({op_of.get(odd, '?')}"
                + (f" SeqNum {seq_of[odd]}" if odd in seq_of else "")
                + " while the others agree)"
            )
        if stuck:
            summary += f"; the watchdog of rank {join_ranks(sorted(stuck))} then got stuck"
    elif raised is not None and not stuck and not beats:
        evidence.append(raised.raw)
        summary = (
            "NCCL watchdog timeout: ProcessGroupNCCL's watchdog raised from checkTimeout (the "
            "timeout message itself is not in the text), so a collective ran past the process "
            "group's timeout and the process was taken down; the cause is a rank that never "
            "entered that collective (hung, dead, slow, or on another code path)"
        )
    elif cut and not stuck and not beats:
        evidence += [ln.raw for ln in cut[:3]]
        seen = sorted({n for ln in cut if (n := rank_of(ln)) is not None})
        who = f"rank {join_ranks(seen)}" if seen else "a rank"
        summary = (
            f"NCCL watchdog timeout on {who}: ProcessGroupNCCL's watchdog took the process "
            "down after a collective failed or ran past the process group's timeout (its report "
            "is cut off here, without the collective's details); the cause is a rank that never "
            "entered that collective (hung, dead, slow, or on another code path), not "
            f"{'this one' if len(seen) == 1 else 'these'}"
        )
        victims = seen
    elif stuck or beats:
        secs = f" for {heartbeat_s} s" if heartbeat_s else ""
        who = f"rank {join_ranks(sorted(stuck))}" if stuck else "a rank"
        summary = (
            f"ProcessGroupNCCL's watchdog on {who} made no progress{secs} (heartbeat monitor): "
            "an NCCL/CUDA call hung, typically a collective some rank never joined or a GIL "
            "deadlock; the process is terminated after the debug dump"
        )
    else:
        who = f"rank {join_ranks(aborted_ranks)}" if aborted_ranks else "a rank"
        summary = (
            f"The NCCL communicator of {who} was aborted by its watchdog (a collective timed out "
            "or a peer failed; the reason is not in the text). That rank is a victim"
        )
    if dumped:
        summary += f"; rank {join_ranks(sorted(set(dumped)))} detected it first (flight recorder)"
    fix = (
        "Inspect the last output and stack (py-spy dump) of the rank(s) that did not report the "
        "timeout; TORCH_NCCL_DUMP_ON_TIMEOUT=1 (flight recorder) and NCCL_DEBUG=INFO help "
        "locate it. Raise the timeout only for a known slow step (checkpoint, eval on rank 0)"
    )
    out_of_step = len(set(seq_of.values())) > 1
    other_op = not out_of_step and len(set(op_of.values())) > 1
    mismatch = out_of_step or other_op
    odd = (_odd_rank(seq_of) if out_of_step else _odd_rank(op_of)) if mismatch else None
    if mismatch:
        fix = (
            "Make every rank call the same collectives in the same order: look for a collective "
            "(barrier, all_gather, a state-dict gather) inside a branch taken by some ranks "
            "only, near the earliest SeqNum; TORCH_DISTRIBUTED_DEBUG=DETAIL checks collectives "
            "across ranks and names the mismatch"
        )
    single = victims[0] if len(victims) == 1 else None
    return _diag(
        "nccl_timeout",
        summary,
        ((odd,) if odd is not None else ()) if mismatch else missing,
        fix,
        evidence,
        {
            "process_group": pg,
            "seq": int(seq) if seq else None,
            "seqnum": int(seq) if seq else None,
            "op": op,
            "numel": int(numel) if numel else None,
            "numel_in": int(numel) if numel else None,  # WorkNCCL's own name for it
            # an all-gather's output is the group's size times its input
            "numel_out": int(numel_out) if numel_out and numel_out != numel else None,
            "timeout_ms": int(timeout_ms) if timeout_ms else None,
            "waited_ms": MappingProxyType(waited) if waited else None,
            "last_enqueued": MappingProxyType(enqueued) if enqueued else None,
            "last_completed": MappingProxyType(completed) if completed else None,
            "victims": tuple(victims),
            "seq_by_rank": MappingProxyType(seq_of) if out_of_step else None,
            "op_by_rank": MappingProxyType(dict(sorted(op_of.items())))
            if mismatch and len(set(op_of.values())) > 1
            else None,
            "mismatch": "collectives out of step across ranks"
            if out_of_step
            else ("different collectives at the same SeqNum" if seq else "different collectives")
            if other_op
            else None,
            "odd_rank": odd,
            "rank": single,
            "heartbeat_timeout_s": heartbeat_s,
            "detected_by": tuple(sorted(set(dumped))) if dumped else None,
            "time": when,
            "world_size": world,
            "nccl_version": _nccl_version(ctx.lines),
        },
        ctx.failure,
    )


def _odd_rank(value_of: dict[int, int] | dict[int, str]) -> int | None:
    """The one rank whose value (SeqNum, OpType) differs from all the others' single common
    value, with at least two others agreeing; None when the text cannot single one out."""
    values = list(value_of.values())
    if len(values) < 3:
        return None
    odd = [r for r, v in value_of.items() if values.count(v) == 1]
    common = {v for v in values if values.count(v) > 1}
    return odd[0] if len(odd) == 1 and len(common) == 1 else None


#: The rules of this module (the engine ranks what they find).
def _trace_chain(lines: Sequence[Line], code: int | None = None) -> tuple[list[Line], bool]:
    """The first ``NCCL INFO <file>:<line> -> <code>`` return trace (of ``code`` when given):
    its thread's lines of that code, and whether it runs through ``bootstrap.cc`` /
    ``init.cc`` (a failure while the communicator was being set up)."""
    first = next(
        (
            m
            for ln in lines
            if (m := _TRACE.search(ln.text)) is not None
            and int(m["code"]) in _KIND_OF_CODE
            and (code is None or int(m["code"]) == code)
        ),
        None,
    )
    if first is None:
        return [], False
    own = int(first["code"])
    mine = [
        ln
        for ln in lines
        if (m := _TRACE.search(ln.text)) is not None
        and _thread(m) == _thread(first)
        and int(m["code"]) == own
    ]
    init = any(
        (m := _TRACE.search(ln.text)) is not None
        and m["src"].rsplit("/", 1)[-1].startswith(("bootstrap.", "init."))
        for ln in mine
    )
    return mine, init


def _nccl_traces(ctx: Context) -> Diagnosis | None:
    """A failure NCCL returned without a WARN, seen only in its ``NCCL_DEBUG=INFO`` return
    trace: ``host:pid:tid [dev] NCCL INFO <file>:<line> -> <ncclResult_t>`` from where it
    failed up to the API call (some paths return without a message, e.g. ``socketPollConnect``
    in NCCL 2.18). Only a chain through ``bootstrap.cc`` / ``init.cc`` counts: the
    communicator's set-up failed (a later trace is sockets closing after another failure).
    The first traced thread's chain is the evidence."""
    if any(
        _WARN.search(ln.text) or _OLD_WARN.search(ln.text) or _RESULT.search(ln.text)
        for ln in ctx.lines
    ):
        return None  # a WARN, or the error the caller reported: the other rules'
    mine, init = _trace_chain(ctx.lines)
    if not mine or not init:
        # a trace outside the set-up (sockets closing as a communicator is aborted after a
        # timeout or a peer's failure) is what follows a failure, not one on its own
        return None
    first = _TRACE.search(mine[0].text)
    assert first is not None
    code = int(first["code"])
    sources = [m["src"] for ln in mine if (m := _TRACE.search(ln.text)) is not None]
    name = _NAMES[code]
    where = f" (pid {first['pid']}, CUDA device {first['dev']})" if first["pid"] else ""
    during = " while the communicator was being set up" if init else ""
    return _diag(
        _KIND_OF_CODE[code],
        f"NCCL returned {name} ({code}){during}{where} without a warning: its trace runs "
        f"{sources[0]} -> ... -> {sources[-1]}. {_WHY_CODE.get(code, '')}".rstrip(),
        (),
        _FIX.get(_KIND_OF_CODE[code], _CUDA_FIX),
        [ln.raw for ln in mine[:4]],
        {
            "nccl_result": code,
            "nccl_error": name,
            "nccl_version": _nccl_version(ctx.lines),
            "phase": "init" if init else None,
            "pid": int(first["pid"]) if first["pid"] else None,
            "device": int(first["dev"]) if first["dev"] else None,
        },
        ctx.failure,
    )


#: What a result code says, for a trace that has nothing else.
_WHY_CODE = {
    1: "A CUDA call NCCL made failed.",
    2: "A system call, the network (socket or IB/RoCE) or shared memory failed.",
    3: "NCCL hit an internal error.",
    6: "A remote process exited or the connection to it broke.",
}


#: NCCL's check that two ranks of a communicator are not on one GPU (init.cc: "Duplicate GPU
#: detected : rank %d and rank %d both on CUDA device %lx"), quoted on its own (in prose, a
#: title, from NCCL INFO) where no WARN or PyTorch error line carries it.
_DUPLICATE_GPU = re.compile(
    r"Duplicate GPU detected\s*:\s*rank (?P<a>\d+) and rank (?P<b>\d+) both on CUDA device "
    r"(?P<dev>[0-9a-fA-F]+)"
)


def _duplicate_gpu(ctx: Context) -> Diagnosis | None:
    """Two ranks on one GPU, said only by NCCL's own words (see :data:`_DUPLICATE_GPU`)."""
    if any(_WARN.search(ln.text) or _RESULT.search(ln.text) for ln in ctx.lines):
        return None  # _nccl_warnings' / _nccl_results' (the same words as their detail)
    hit = next(((ln, m) for ln in ctx.lines if (m := _DUPLICATE_GPU.search(ln.text))), None)
    if hit is None:
        return None
    ln, m = hit
    a, b, dev = int(m["a"]), int(m["b"]), m["dev"]
    return _diag(
        "nccl_invalid_usage",
        f"NCCL refused to build the communicator: ranks {b} and {a} are on the same GPU (CUDA "
        f"device {dev}, its PCI bus id); each rank needs a GPU of its own (ncclInvalidUsage)",
        (),
        "Give every rank its own GPU: set the device from LOCAL_RANK "
        "(`torch.cuda.set_device(int(os.environ['LOCAL_RANK']))`) before init_process_group, "
        "and launch no more processes per node than it has GPUs (--nproc-per-node, "
        "CUDA_VISIBLE_DEVICES)",
        [ln.raw],
        {"nccl_result": 5, "ranks_sharing": (min(a, b), max(a, b))},
        ctx.failure,
    )


RULES = (
    _nccl_cuda_oom,
    _nccl_warnings,
    _nccl_results,
    _nccl_timeout,
    _nccl_traces,
    _duplicate_gpu,
)

#: What lines each rule reads (the engine's pre-filter; see :class:`Needs`).
#: Its own: the failure words less the words of NCCL's INFO chatter (``cudaDev``,
#: ``cudaDriverVersion``, ``nranks``, ``NCCL_*`` settings, ``NET/Socket``, ``No device found``,
#: ``Setting affinity for GPU``) and of PyTorch's (``device``, ``process``, ``torch``,
#: ``warning``, ``c10d``): the lines these rules match hold another (``NCCL WARN``, a return
#: trace's ``init.cc:``, ``fail``, ``error``, ``watchdog``, ``ProcessGroupNCCL``...).
_NCCL_WORDS = own_words(
    dropped={
        *CHATTER_WORDS,
        "nranks",
        "nccl_",
        "socket",
        "cuda",
        "cudnn",
        "driver",
        *(w for w in FAILURE_WORDS if "gpu" in w),
    }
)
#: The lines of a WARN (``NCCL WARN``, before 2.3 ``file:line WARN``), of a failed IB
#: completion or a socket function's message quoted without it (:data:`_BARE_IB`,
#: :data:`_BARE_SOCKET`: ``socketProgress:``, ``ncclSocketInit:``): what
#: :func:`_nccl_warnings` matches.
_WARN_WORDS = (
    "nccl warn",
    " warn ",
    "got completion ",
    *(f"socket{c}" for c in "abcdefghijklmnopqrstuvwxyz"),
)
NEEDS: dict[Callable[[Context], object], Needs | tuple[Needs, ...]] = {
    _nccl_cuda_oom: Needs(_NCCL_WORDS, alone=True),
    # with a WARN: every failure line, and each communicator's Init COMPLETE (_during_init)
    _nccl_warnings: (
        Needs(_WARN_WORDS, alone=True),
        Needs((*_NCCL_WORDS, "init complete"), alone=True, also=True),
    ),
    _nccl_results: Needs((*_NCCL_WORDS, " -> "), alone=True),
    _duplicate_gpu: Needs(("duplicate gpu", "nccl warn", " warn ", *_NCCL_WORDS), alone=True),
    _nccl_traces: Needs((*_NCCL_WORDS, *_WARN_WORDS, " -> "), alone=True),
    # world_size: the first line of each of its patterns
    _nccl_timeout: Needs(
        _NCCL_WORDS,
        alone=True,
        first=tuple(("(?i)" if p.flags & re.I else "") + p.pattern for p in WORLD_SIZE),
    ),
}
