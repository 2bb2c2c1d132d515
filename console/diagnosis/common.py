"""Helpers the rule modules share: naming ranks and processes, reading PyTorch's process-group
prefixes (``[PG ID 0 PG GUID 0(default_pg) Rank 2]``, ``ProcessGroupNCCL.cpp``)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from console.diagnosis.elastic import ProcessFailure
from console.diagnosis.lines import Line
from console.diagnosis.model import MIN_WRAPPED_ROW
from remote.telemetry.faults import classify_nvml_traceback

if TYPE_CHECKING:
    from console.diagnosis.model import Context

__all__ = [
    "CHATTER_WORDS",
    "FAILURE_WORDS",
    "GLOG_TIME",
    "NCCL_INFO",
    "NCCL_LINE",
    "NCCL_RESULTS",
    "NCCL_RETURN",
    "PG_ID",
    "PG_NAME",
    "PG_RANK",
    "TERMINATE",
    "WORLD_SIZE",
    "WRAPS",
    "human_bytes",
    "join_ranks",
    "not_a_failure",
    "own_words",
    "place_of",
    "rank_and_place",
    "rank_of",
    "unwrapped",
    "world_size",
]


#: Exception lines that only wrap an error another rule names (CUDA, NCCL, the store), report a
#: peer's death, or the agent's own stop: never the root cause themselves, whichever rule
#: reads them (a rank's traceback, srun's task output).
WRAPS = re.compile(
    r"Connection (?:closed|reset) by (?:remote )?peer|ChildFailedError|Broken pipe"
    r"|Socket Timeout|NCCL communicator was aborted|Watchdog caught collective"
    r"|SignalException|KeyboardInterrupt|ProcessExitedException|ProcessRaisedException"
    r"|process \d+ terminated with"
    r"|CUDA (?:driver )?error|CUDA out of memory|OutOfMemoryError|cuDNN error"
    r"|no kernel image|NVIDIA driver|CUDA-capable|No CUDA GPUs|invalid device ordinal"
    r"|CUDA driver initialization|system not yet initialized|CUDA unknown error"
    r"|ncclUnhandledCudaError|ncclSystemError|ncclInternalError|ncclInvalidUsage|ncclRemoteError"
    r"|unhandled (?:cuda|system) error|internal error|invalid usage|remote process exited"
    r"|Rendezvous\w*Error|Address already in use|EADDRINUSE|errno: 98\b"
    # a store wait that another rule names: the rendezvous' own keys (_elastic_store_wait), the
    # clients that never joined (_rendezvous); a DistStoreError on other keys (the application's
    # barrier with a vLLM server, the process group's store-based barrier) is the exception
    r"|waiting for (?:clients|workers)"
    r"|keys: \S*torchelastic/"
    r"|host not found|Name or service not known|client socket has"
    r"|DataLoader worker \(pid|Caught \w+ in DataLoader worker process"
    r"|unable to (?:allocate shared memory|write to file </torch_)"
    # a launcher's CalledProcessError for a child a signal ended: the signal rule's
    r"|died with <Signals\.",
    re.I,
)


#: "gpu" as a word of its own, never inside a host name ("gpu-node-01:14750:15000 [0] NCCL
#: INFO"): lower-cased, each with what may stand beside it.
GPU_WORDS: tuple[str, ...] = (
    " gpu",
    "gpu ",
    "gpus",
    "gpu:",
    "gpu=",
    "gpu)",
    "gpu]",
    "gpu.",
    "gpu,",
    "gpu_",
    "_gpu",
    "[gpu",
    "(gpu",
    "/gpu",
    '"gpu',
    'gpu"',
    "'gpu",
    "gpu'",
    "-gpu",
    "gpu%",
    "gpu#",
)

#: Words every failure line the rules read holds one of, lower-case (the pre-filter's
#: :class:`~console.diagnosis.model.Needs`, case-insensitive, anywhere in a physical line):
#: how a process or a run ends, Python's tracebacks and exception names, the words of the
#: launchers, schedulers, container engines and drivers whose messages the rules name.
FAILURE_WORDS: tuple[str, ...] = (
    # Python: tracebacks, their frames, exception names, warnings
    "traceback",
    'file "',
    "error",
    "exception",
    "warning",
    "interrupt",
    "exit",
    "raise",
    "above exception",
    "during handling",
    # how a process ends
    "fail",
    "fatal",
    "abort",
    "kill",
    "signal",
    "sig",
    "terminat",
    "core dumped",
    "segmentation",
    "bus error",
    "stopped",
    "hangup",
    "cancel",
    "preempt",
    "crash",
    "died",
    "dead",
    "panic",
    "assert",
    "timeout",
    "timed out",
    "time limit",
    "deadline",
    # what went wrong
    "denied",
    "not found",
    "no such",
    "cannot",
    "can't",
    "could not",
    "couldn't",
    "unable",
    "invalid",
    "illegal",
    "not yet initiali",
    "refused",
    "unreachable",
    "unsupported",
    "not supported",
    "missing",
    "mismatch",
    "permission",
    "no space",
    "out of memory",
    "oom",
    "memory",
    "unknown",
    "unexpected",
    "corrupt",
    "lost",
    "reset",
    # the stack the rules know
    # NCCL: its warnings, errors and result names, its return traces ("NCCL INFO init.cc:903
    # -> 5": a source file and line), its version and communicator lines; never its INFO
    # chatter alone (rings, channels, trees: thousands of lines in an NCCL_DEBUG=INFO run)
    "nccl warn",
    "nccl error",
    "nccl abort",
    "nccl version",
    "nccl_",
    "nccl communicator",
    "processgroupnccl",
    "ncclunhandled",
    "ncclsystem",
    "ncclinternal",
    "ncclinvalid",
    "ncclremote",
    "nccl timeout",
    "nccl work",
    "worknccl",
    "watchdog",
    "nranks",
    ".cc:",
    ".c:",
    ".h:",
    # a GPU named as a word, not inside a host name ("gpu-node-01:14750:15000 [0] NCCL INFO")
    *GPU_WORDS,
    "cuda",
    "cudnn",
    "nvidia",
    "nvml",
    "nvrm",
    "xid",
    "driver",
    "device",
    "docker",
    "container",
    "runtime",
    "image",
    "registry",
    "manifest",
    "pull",
    "daemon",
    "slurm",
    "srun",
    "sbatch",
    "salloc",
    "scancel",
    "task",
    "jupyter",
    "notebook",
    "kernel",
    "torch",
    "c10d",
    "elastic",
    "rendezvous",
    "rdzv",
    "store",
    "socket",
    "connect",
    "address",
    "port",
    "host",
    "launch",
    "deepspeed",
    "accelerate",
    "spawn",
    "child",
    "process",
    "pid",
    "worker",
    "shm",
    "shared",
    "fabric",
    "nvswitch",
    "ecc",
    "mib /",
    "smi",
    "oci",
    "cgroup",
    "pod",
    "exitcode",
    "exit code",
    "return code",
    "status",
    # Jupyter's server log ("[C 2026-12-01 13:07:51.867 ServerApp] Running as root ...")
    "serverapp",
    "notebookapp",
    "labapp",
    "allow-root",
    "as root",
    # a package manager's log of a driver change (apt's history.log)
    "start-date",
    "end-date",
    "commandline",
    "upgrade",
)


#: What NCCL's INFO logging prints on every line (``host:pid:tid [dev] NCCL INFO ...``):
#: thousands of lines in an ``NCCL_DEBUG=INFO`` run, holding failure words (``cudaDev``,
#: ``nranks``, ``NCCL_*``, ``NET/Socket``, ``GPU``, ``No device found``). A rule outside
#: :mod:`console.diagnosis.nccl` matches none of them (``Needs.unless``).
NCCL_INFO = "nccl info"

#: Failure words of a training run's own chatter besides NCCL's: PyTorch's ``UserWarning``s
#: (``.../torch/distributed/c10d_logger.py:83: UserWarning: barrier(): using the device under
#: current context ... init_process_group``). A module whose every line holds another word
#: leaves them out of its own (:func:`own_words`).
CHATTER_WORDS: frozenset[str] = frozenset({"warning", "torch", "c10d", "process", "device"})


def own_words(dropped: Iterable[str] = CHATTER_WORDS, added: Iterable[str] = ()) -> tuple[str, ...]:
    """:data:`FAILURE_WORDS` less ``dropped``, with ``added``: a module's own words."""
    out = frozenset(dropped)
    return (*(w for w in FAILURE_WORDS if w not in out), *added)


def human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:g} {unit}" if unit == "B" or size != int(size) else f"{int(size)} {unit}"
        size /= 1024
    return f"{n} B"


def join_ranks(ranks: Iterable[int]) -> str:
    return ", ".join(str(r) for r in ranks)


def place_of(entry: ProcessFailure) -> str:
    """``"local_rank 0, pid 14750 on host"`` for an entry, from the parts it has."""
    parts = [f"local_rank {entry.local_rank}"] if entry.local_rank is not None else []
    if entry.pid is not None:
        parts.append(f"pid {entry.pid}")
    if entry.host:
        parts.append(f"on {entry.host}")
    return ", ".join(parts)


def not_a_failure(exception_line: str) -> bool:
    """The exception line says a reading is absent, not that anything failed: pynvml's
    ``NVMLError_NotSupported`` (``NVML_ERROR_NOT_SUPPORTED``, NVML API reference
    ``nvmlReturn_t``: "the requested operation is not available on the target device", e.g.
    the fan speed of a board without fans). A tool catching it shows that reading as unknown
    (``faults.classify_nvml_traceback`` kind ``not_supported``); it is never a root cause."""
    return classify_nvml_traceback(exception_line.strip()).kind == "not_supported"


def rank_and_place(entry: ProcessFailure) -> str:
    place = place_of(entry)
    return f"rank {entry.rank} ({place})" if place else f"rank {entry.rank}"


PG_RANK = re.compile(r"\[(?P<inside>[^\[\]]*?)\bRank (?P<rank>\d+)\]")
PG_ID = re.compile(r"\bPG (?:ID )?(?P<pg>\d+)")
PG_NAME = re.compile(r"\((?P<name>[A-Za-z_]\w*)\)")
TERMINATE = re.compile(r"terminate called after throwing an instance of '(?P<type>[^']+)'")


def rank_of(line: Line) -> int | None:
    if (m := PG_RANK.search(line.text)) is not None:
        return int(m["rank"])
    return line.rank


# NCCL_DEBUG lines: "host:pid:tid [cudaDev] file:line NCCL WARN msg",
# and return traces: "host:pid:tid [cudaDev] NCCL INFO file:line -> 3"
NCCL_LINE = re.compile(
    r"^(?P<host>[^\s:]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] "
    r"(?:(?P<src>\S+:\d+) )?NCCL (?P<level>WARN|INFO|ERROR|TRACE|ABORT) (?P<msg>.*)$"
)
NCCL_RETURN = re.compile(r"(?P<src>\S+:\d+) -> (?P<code>\d+)")
NCCL_RESULTS = {
    1: "unhandled CUDA error",
    2: "system error",
    3: "internal error",
    4: "invalid argument",
    5: "invalid usage",
    6: "remote error",
}


GLOG_TIME = re.compile(r"\[[IWEF](?P<mm>\d{1,2}?)(?P<dd>\d\d) (?P<hms>\d\d:\d\d:\d\d)")
#: How a log names its world size, most specific first (:func:`world_size` takes the first
#: line of the first pattern any line matches).
WORLD_SIZE = (
    re.compile(r"\brank \d+/(?P<n>\d+) local_rank\b"),
    re.compile(r"\bworld_size[ =:]+(?P<n>\d+)\b", re.I),
    re.compile(r"\bnranks (?P<n>\d+)\b"),
)


def world_size(lines: Sequence[Line]) -> int | None:
    for pattern in WORLD_SIZE:
        for ln in lines:
            if m := pattern.search(ln.text):
                return int(m["n"])
    return None


# A terminal copy of a line longer than the terminal: the emulator wraps it at its width, in the
# middle of a word, and a copy keeps the rows either as separate lines (the first one exactly
# as long as the terminal is wide) or in one line with the first row padded with blanks up to
# the width ("CUDA driver initializati<90 blanks>on failed").
TERMINAL_WIDTHS = frozenset({80, 100, 120, 132, 140, 150, 160, 180, 200, 210, 220, 240, 250, 256})
_PADDED_WRAP = re.compile(r"(?<=[A-Za-z]) {8,}(?=[a-z])")


def unwrapped(lines: Sequence[Line], index: int, ctx: Context | None = None) -> tuple[str, ...]:
    """``lines[index].text`` with a terminal's wrap undone (see :data:`TERMINAL_WIDTHS`), for a
    rule to match a known message that a fixed-width wrap split: the padded blanks inside the
    line removed (when they start at least :data:`MIN_WRAPPED_ROW` columns in), or the next
    line appended when this one is exactly a common terminal width long, or (given the
    ``ctx`` of ``lines``) as long as the width the text shows it was wrapped at
    (:attr:`Context.wrap_width`: any window's width). Each join is given with and without a
    blank (the wrap may have fallen on the blank between two words). Empty when the line
    shows no wrap."""
    ln = lines[index]
    wide = len(ln.raw) in TERMINAL_WIDTHS
    rows: list[str] = []  # the next physical row less this row's decoration, when wrapped
    if ctx is not None:
        row = ctx.physical[ln.source_line] if ln.source_line < len(ctx.physical) else ""
        width = ctx.wrap_width
        wide = wide or (
            width is not None and width <= len(row) <= width + 2 and row.endswith(ln.raw)
        )
        if wide and row.endswith(ln.raw) and ln.source_line + 1 < len(ctx.physical):
            # a collector's prefix on every row (a timestamp) may be stripped from the next
            # row with what the wrap left at its start (", 44737)."): cut the same width
            rows.append(ctx.physical[ln.source_line + 1][len(row) - len(ln.raw) :])
    out: list[str] = []
    m = _PADDED_WRAP.search(ln.text)
    if m is not None and m.start() >= MIN_WRAPPED_ROW:
        out += [
            ln.text[: m.start()] + ln.text[m.end() :],
            ln.text[: m.start()] + " " + ln.text[m.end() :],
        ]
    if wide and index + 1 < len(lines):
        for nxt in dict.fromkeys([lines[index + 1].text, *rows]):
            if nxt[:1].strip() and ln.text[-1:].strip():
                out += [ln.text + nxt, ln.text + " " + nxt]
    return tuple(out)
