"""Rules for torchrun / torchelastic / c10d failures in a job's log.

Each rule reads the normalised lines (:mod:`console.diagnosis.lines`) and torchelastic's
failure summary (:mod:`console.diagnosis.elastic`) and returns what it found;
:mod:`console.diagnosis.engine` runs every rule and picks the root cause. Sources (PyTorch):

- ``torch/distributed/elastic/multiprocessing/errors/__init__.py``: ``ChildFailedError``'s
  summary and the JSON error file ``@record`` writes (``{"message": {"message": "<Type>: ...",
  "extraInfo": {"py_callstack": ...}}}``), logged by ``error_handler``.
- ``torch/distributed/elastic/multiprocessing/api.py``: ``SignalException("Process {pid} got
  signal: {signum}")`` raised in the agent by its signal handler (SIGTERM, SIGINT, SIGHUP,
  SIGQUIT), ``"Sending process %s closing signal %s"``, and ``"failed (exitcode: %s)
  local_rank: %s (pid: %s) of binary: %s"`` when a worker exits non-zero.
- ``torch/distributed/elastic/agent/server/api.py``: ``"Received %s death signal, shutting
  down workers"`` (``%s`` is ``Signals.SIGTERM`` before Python 3.11, ``15`` after).
- ``torch/distributed/elastic/rendezvous/api.py``: ``RendezvousError`` and its subclasses
  ``RendezvousClosedError``, ``RendezvousTimeoutError``, ``RendezvousConnectionError``,
  ``RendezvousStateError``.
- ``torch/csrc/distributed/c10d/socket.cpp``: ``"The server socket has failed to bind to {addr}
  (errno: 98 - Address already in use)."``, ``"The server socket has failed to listen on any
  local network address."``, ``"The {IPv4 |IPv6 }network addresses of ({host}, {port}) cannot be
  retrieved (gai error: {n} - {gai_strerror})."``, ``"The client socket has failed to connect to
  {addr} (errno: {n} - {strerror})."``, ``"... to any network address of ({host}, {port})."``,
  ``"The client socket has timed out after {t} while trying to connect to ({host}, {port})."``;
  ``TCPStoreLibUvBackend.cpp`` (2.4+): ``"The server socket has failed to listen on any local
  network address. port: {}, useIpv6: {}, code: {}, name: {}, message: {}"`` (libuv's
  ``UV_EADDRINUSE``); before 1.11 TCPStore raised a bare ``RuntimeError: Address already in
  use`` / ``ValueError: host not found: <gai_strerror>`` / ``connect() timed out``;
  ``TCPStore.cpp``: ``"Timed out after {} seconds waiting for clients. {}/{} clients joined."``.
- the Linux OOM killer (``mm/oom_kill.c``): ``"Out of memory: Killed process {pid} ({comm})"``
  (``Kill process`` before 4.19), ``"Memory cgroup out of memory: ..."``, ``"oom-kill:
  constraint=...,task=...,pid=..."``; Docker's ``"OOMKilled": true``; Slurm's ``oom-kill event``.
- DataLoader's worker-signal messages (``torch/utils/data/_utils/signal_handling.py``).
"""

from __future__ import annotations

import re
import signal
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace

from console.diagnosis.common import (
    NCCL_INFO,
    join_ranks,
    not_a_failure,
    own_words,
    place_of,
    rank_and_place,
    unwrapped,
)
from console.diagnosis.common import WRAPS as _WRAPS
from console.diagnosis.elastic import EXCEPTION_LINE, ProcessFailure, signal_name
from console.diagnosis.lines import Line
from console.diagnosis.model import CauseKind, Consequence, Context, Diagnosis, FactValue, Needs
from console.diagnosis.model import make_diagnosis as _diag

__all__ = ["RULES"]

# A line longer than this (a console paste wrapped into one physical line) is shown as the
# matched part only.
_LONG = 300


def _shown(ln: Line, m: re.Match[str] | None = None, tail: int = 120) -> str:
    """What evidence shows of ``ln``: the line, or around the match when the line is huge."""
    if m is None or len(ln.raw) <= _LONG:
        return ln.raw
    start = ln.raw.find(m.group(0))
    start = max(start, 0)
    return ln.raw[start : start + len(m.group(0)) + tail].strip()


# Any sign the text comes from PyTorch's distributed stack (guards the generic wordings).
_TORCH = re.compile(
    r"torch|c10d|TCPStore|init_process_group|MASTER_(?:ADDR|PORT)|rendezvous|rdzv|torchrun", re.I
)


# --------------------------------------------------------------------------------------------
# DataLoader shared memory.

_SHM = re.compile(
    r"DataLoader worker \(pids?\)?\s*\(?(?P<pids>\d+(?:,\s*\d+)*)\) is killed by signal: Bus error"
    r"|Unexpected bus error encountered in worker"
    # at::MapAllocator (newer PyTorch allocates the worker's shm file up front: ENOSPC)
    r"|unable to (?:allocate shared memory\(shm\) for|write to) file </torch_[^>]*>: "
    r"No space left on device",
)


_SHM_FIX = (
    "Restart the container with a larger --shm-size (e.g. 16g, or the job's shm_size) "
    "or with --ipc=host (compose: shm_size / ipc: host); or use fewer DataLoader "
    "workers"
)
# A SIGBUS reported by a debugger, faulthandler or the shell ("Thread 7 "python" received
# signal SIGBUS, Bus error." is gdb's; "Fatal Python error: Bus error"; "Bus error (core
# dumped)"), and a frame or message in shared memory near it: NCCL's shm transport
# (src/misc/shmutils.cc ncclShmOpen), shm_open, /dev/shm.
# Also UCX's signal handler ("[host:pid :0:tid] Caught signal 7 (Bus error: nonexistent physical
# address)", NGC containers), and the launcher's exit -7 of a worker (SIGBUS).
_BUS = re.compile(
    r"received signal SIGBUS|Fatal Python error: Bus error"
    r"|\bBus error \(core dumped\)|Caught signal 7 \(Bus error"
    r"|failed \(exitcode: -7\) local_rank: (?P<local>\d+) \(pid: (?P<pid>\d+)\)"
)
# Where in shared memory: NCCL's shm transport and its proxy thread (a SIGBUS in NCCL's own
# frames is its /dev/shm segment: NCCL's troubleshooting guide, Docker's 64 MB default), shm_open.
_SHM_PLACE = re.compile(
    r"\bnccl\w*Shm\w*|\bshm_open\b|/dev/shm\b|\bshmOpen\b"
    r"|\bnccl(?:GroupEnd|GetUniqueId|RedOpDestroy|CommInitRank\w*|ProxyService\w*)\(\)"
    r"|libnccl\.so"
)
# What says the process ran in a container: the words, or a torchelastic host that is a
# container id (Docker sets the hostname to the first 12 hex digits of the id).
_CONTAINER = re.compile(
    r"\bdocker\b|\bcontainer\b|\bpodman\b|\bkubectl\b|\bk8s\b"
    r"|\bkubernetes\b|\bpod\b",
    re.I,
)
_CONTAINER_HOST = re.compile(r"^[0-9a-f]{12}$")


def _in_container(ctx: Context, root: ProcessFailure) -> bool:
    """Whether the failed worker ran in a container, as far as the text says."""
    return bool(root.host and _CONTAINER_HOST.match(root.host)) or any(
        _CONTAINER.search(ln.text) for ln in ctx.lines
    )  # not a collector's own prefix


def _shm_exhausted(ctx: Context) -> Diagnosis | None:
    """A DataLoader worker died of SIGBUS: the container's /dev/shm is too small; or a
    process got SIGBUS in shared memory (NCCL's shm transport, shm_open)."""
    hits = [ln for ln in ctx.lines if _SHM.search(ln.text)]
    if not hits:
        bus = next((ln for ln in ctx.lines if _BUS.search(ln.text)), None)
        where = (
            next(
                (
                    ln
                    for ln in ctx.lines[max(0, bus.index - 12) : bus.index + 12]
                    if _SHM_PLACE.search(ln.text)
                ),
                None,
            )
            if bus is not None
            else None
        )
        if bus is None or where is None:
            return None
        place = _SHM_PLACE.search(where.text)
        assert place is not None
        b = _BUS.search(bus.text)
        assert b is not None
        facts: dict[str, FactValue | None] = {"signal": "SIGBUS", "rank": bus.rank}
        if b["pid"]:
            facts.update({"pid": int(b["pid"]), "local_rank": int(b["local"]), "exitcode": -7})
        return _diag(
            "shm_exhausted",
            f"A process got SIGBUS (Bus error) in shared memory ({place.group(0)}): /dev/shm "
            "ran out. The container's /dev/shm is too small (Docker's default is 64 MB); not "
            "a GPU fault",
            (bus.rank,) if bus.rank is not None else (),
            _SHM_FIX,
            [bus.raw, where.raw],
            facts,
            ctx.failure,
        )
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
    return _diag(
        "shm_exhausted",
        f"{who}{on} was killed by SIGBUS (Bus error): shared memory (/dev/shm) ran out. The "
        "container's /dev/shm is too small (Docker's default is 64 MB); not a GPU or NCCL fault",
        (rank,) if rank is not None else (),
        _SHM_FIX,
        [ln.raw for ln in hits],
        {"pids": tuple(dict.fromkeys(pids)), "signal": "SIGBUS", "rank": rank},
        ctx.failure,
    )


# --------------------------------------------------------------------------------------------
# The c10d store: port taken, address not resolvable, no connection, rendezvous failed.

_PORT_IN_USE = re.compile(
    # socket.cpp (1.11+): "failed to bind to [::]:29500 (errno: 98 - Address already in use)"
    r"failed to (?:bind to|listen on) (?:\[[^\]]*\]|[^\s\[\]]+?):(?P<port>\d+) "
    r"\(errno: \d+ - Address already in use\)"
    # TCPStoreLibUvBackend.cpp (2.4+): "port: 29500, useIpv6: false, code: -98, name: EADDRINUSE"
    r"|port: (?P<port2>\d+), useIpv6: \w+, code: -?\d+, name: EADDRINUSE"
    # TCPStore before 1.11, or any other wording of EADDRINUSE
    r"|Error: Address already in use\b|\bEADDRINUSE\b|\[Errno 98\] Address already in use",
    re.I,
)
_PORT_ARG = re.compile(
    r"(?:--master[_-]port[= ]|MASTER_PORT=|--main_process_port[= ]|tcp://[^\s:/]+:"
    r"|--rdzv[_-]endpoint[= ]\"?[^\s:\"]+:)(?P<port>\d{2,5})\b"
)
# A value ends at whitespace, a port colon, a path, or the quotes / commas / brackets around it
# when the launcher's arguments are printed as a Python list (``['--rdzv_endpoint=host', ...]``).
_HOST_ARG = re.compile(
    r"(?:--master[_-]addr[= ]|MASTER_ADDR=|tcp://|--rdzv[_-]endpoint[= ])[\"']?"
    r"(?P<host>[^\s:\"'/,\[\]()]+)"
)


def _port_in_use(ctx: Context) -> Diagnosis | None:
    """The c10d store could not listen: its port is taken (errno 98, ``EADDRINUSE``)."""
    hits = [(ln, m) for ln in ctx.lines if (m := _PORT_IN_USE.search(ln.text))]
    if not hits or not (
        _TORCH.search(ctx.text) or any("server socket" in ln.text for ln, _ in hits)
    ):
        return None
    port: int | None = None
    for _, m in hits:
        if p := m["port"] or m["port2"]:
            port = int(p)
            break
    if port is None:
        port = next((int(m["port"]) for ln in ctx.lines if (m := _PORT_ARG.search(ln.text))), None)
    which = f"port {port}" if port is not None else "its port"
    return _diag(
        "port_in_use",
        f"The c10d store (TCPStore) could not listen: {which} is already in use (EADDRINUSE): "
        "another job or a stale run on this host holds it; not a network or DNS problem",
        (),
        f"Stop the process that holds {which} (`ss -ltnp | grep {port or '<port>'}`) or start "
        "the job with another --master-port / --rdzv-endpoint port",
        [_shown(ln, m) for ln, m in hits[:3]],
        {"port": port},
        ctx.failure,
    )


_GAI = re.compile(
    r"network addresses of \((?P<host>[^,()\s]+), (?P<port>\d+)\) cannot be retrieved"
    r" \(gai error: (?P<code>-?\d+) - (?P<why>[^)]*)\)"
)
_UNRESOLVED = re.compile(
    r"host not found: (?P<why>.+)$"
    r"|Name or service not known|nodename nor servname provided, or not known"
    r"|Temporary failure in name resolution|No address associated with hostname"
    r"|getaddrinfo failed|\bunknown host\b",
    re.I,
)


def _store_unresolved(ctx: Context) -> Diagnosis | None:
    """The master / rendezvous host name does not resolve (getaddrinfo failed)."""
    gai = [(ln, m) for ln in ctx.lines if (m := _GAI.search(ln.text))]
    other = [
        (ln, m)
        for ln in ctx.lines
        if not _GAI.search(ln.text) and (m := _UNRESOLVED.search(ln.text))
    ]
    if not gai and not (other and _TORCH.search(ctx.text)):
        return None
    host: str | None = None
    port: int | None = None
    why: str | None = None
    if gai:
        m = gai[0][1]
        host, port, why = m["host"], int(m["port"]), m["why"].strip()
    else:
        m = other[0][1]
        why = (m["why"] or m.group(0)).strip()
        host = next((h["host"] for ln in ctx.lines if (h := _HOST_ARG.search(ln.text))), None)
        port = next((int(p["port"]) for ln in ctx.lines if (p := _PORT_ARG.search(ln.text))), None)
    name = f"'{host}'" if host else "The master address"
    return _diag(
        "store_address_unresolved",
        f"{name} does not resolve ({why}): the workers cannot find the c10d store"
        + (f" on port {port}" if port else "")
        + "; no connection to it was possible",
        (),
        f"Use a MASTER_ADDR / --rdzv-endpoint that every node can resolve (`getent hosts "
        f"{host or '<host>'}` on each node): the store host's IP or a DNS name; containers on "
        "Docker's default bridge cannot resolve each other's names",
        [_shown(ln, m) for ln, m in (gai or other)[:3]],
        {"host": host, "port": port, "reason": why},
        ctx.failure,
    )


# "host:port", "[host]:port" (IPv6 or newer PyTorch) or "(host, port)" (older PyTorch).
_HOST_PORT = r"\(?(?:\[(?P<host6>[^\]]+)\]|(?P<host>[^\s,()\[\]:]+))(?::|,\s*)(?P<port>\d+)"
_RDZV_TIMEOUT = re.compile(
    r"client socket has timed out after (?P<n>\d+(?:\.\d+)?)(?P<unit>ms|s|m)\b"
    r".*?connect to " + _HOST_PORT + r"|connect\(\) timed out\. Original timeout was (?P<ms>\d+) ms"
)
_RDZV_CONNECT = re.compile(
    # TCPStore.cpp (torch >= 2.4): "TCP client failed to connect/validate to host H:P -
    # retrying (try=N, timeout=Tms, delay=Dms): <why>"
    r"(?:client socket (?:has failed to connect to|cannot be initialized to connect to) "
    r"|TCP client failed to connect/validate to host )"
    r"(?:any network address of )?"
    + _HOST_PORT
    # "(errno: 111 - Connection refused)"; on Windows "(system error: 10049 - <localised>)"
    + r"(?:\s*\((?:errno|system error): (?P<errno>\d+) - (?P<why>[^)]*)\))?"
    + r"|^(?:\w+\.)*\w*Error: (?P<why2>Connection refused)\s*$"
)
# The severity letter of a c10 log line (``c10/util/Logging``, glog style): ``[W socket.cpp:601]``,
# ``[W ..\torch\csrc\distributed\c10d\socket.cpp:601]`` (Windows), 2.x ``[W926 21:34:49.000000000
# socket.cpp:697]``. socket.cpp logs each failed attempt on one address as a warning (W) while
# it retries until the timeout, and only the final "failed to connect to any network address"
# as an error (E) before raising DistNetworkError.
_C10_SEVERITY = re.compile(r"\[(?P<sev>[IWEF])(?:\d{4} [\d:.]+)? [^\]]*?\.(?:cpp|cc|h|hpp):\d+\]")
# Lines that never show a run going on after a retry warning: more retries, blank lines,
# Markdown fences and headings.
_NOT_PROGRESS = re.compile(r"^\s*(?:```|#+\s|$)")
_FATAL_LINE = re.compile(
    r"Traceback \(most recent call last\)|(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception)\b"
)
_RDZV_ERROR = re.compile(r"(?P<type>Rendezvous\w*Error)\b(?::\s*(?P<msg>.*))?")
_CLIENTS = re.compile(
    r"Timed out after (?P<s>\d+) seconds waiting for clients\. (?P<n>\d+)/(?P<of>\d+) clients"
)
# A flag of the command line, or the launcher's own "Starting elastic_operator with launch
# configs:" block (torch/distributed/launcher/api.py: "  rdzv_endpoint    : host:port").
_RDZV_ENDPOINT = re.compile(
    r"(?:--(?:rdzv[_-]endpoint|master[_-]addr)[= ]|^\s*rdzv_endpoint\s*:\s*)[\"']?"
    r"(?P<ep>\[[0-9A-Fa-f:.]+\](?::\d+)?|[^\s\"',\[\]()]+)"
)
_DEATH = re.compile(r"Received (?:Signals\.)?(?P<sig>SIG[A-Z]+|\d+) death signal")
# Lines that show the agent's workers were running when the store was lost
# (torch/distributed/elastic/rendezvous/dynamic_rendezvous.py: the keep-alive timer's "The node
# '%s' has failed to send a keep-alive heartbeat to the rendezvous '%s' due to an error of type
# %s." and, at the agent's exit, "... has failed to shutdown the rendezvous '%s' ..."; the
# agent stopping its workers, multiprocessing/api.py "Sending process %s closing signal %s").
_MID_RUN = re.compile(
    r"failed to (?:send a keep-alive heartbeat to|shutdown) the rendezvous '(?P<run>[^']*)'"
    r"|Sending process \d+ closing signal SIG[A-Z]+"
)


# A traceback frame's source line (indented under ``File "...", line N``, or a ``raise``/
# ``except`` statement quoted): it names an exception type without being the exception.
_SOURCE_LINE = re.compile(r"^\s+\S|^(?:raise|except|from|import|def|class|return)\b")


def _source_line(ln: Line) -> bool:
    """Whether ``ln`` is a frame's source line rather than an exception line (sort key: the
    exception line first)."""
    return _SOURCE_LINE.match(ln.text) is not None


def _unmapped(host: str | None) -> str | None:
    """``::ffff:192.0.2.1`` (an IPv4-mapped IPv6 address) as ``192.0.2.1``."""
    if host and host.lower().startswith("::ffff:") and "." in host:
        return host[7:]
    return host


def _retry_warning(ln: Line) -> bool:
    """``ln`` is c10d's warning about one failed connection attempt (it goes on retrying)."""
    m = _C10_SEVERITY.search(ln.text)
    return m is not None and m["sev"] in "IW" and _RDZV_CONNECT.search(ln.text) is not None


def _retried_on(lines: Sequence[Line], refused: Sequence[Line]) -> bool:
    """Every connect failure in the text is a retry warning and a later line shows the run
    going on (its own output after the last warning): the store was reached in the end, or
    another address worked (Windows' WSA error 10049 on the host name's first address)."""
    if not all(_retry_warning(ln) for ln in refused):
        return False
    last = max(ln.index for ln in refused)
    for ln in lines[last + 1 :]:
        if _NOT_PROGRESS.match(ln.text) or _RDZV_CONNECT.search(ln.text):
            continue
        sev = _C10_SEVERITY.search(ln.text)
        if (sev is not None and sev["sev"] in "EF") or _FATAL_LINE.match(ln.text.strip()):
            return False  # something fatal follows the retries: not a run going on
        return True
    return False


#: Slurm ending the step once a task exited (``srun: error: <node>: task N: Exited with exit
#: code``, ``srun: Terminating StepId=``, ``*** STEP <id> ON <node> CANCELLED AT ...``).
_STEP_ENDED = re.compile(
    r"srun: error: \S+: tasks? [\d,\- \[\]]+: Exited with exit code"
    r"|srun: Terminating StepId|\*\*\* STEP \S+ ON \S+ CANCELLED"
)
#: An agent stopping its workers (torchelastic ``multiprocessing/api.py``).
_WORKERS_STOPPED = re.compile(r"Sending process \d+ closing signal SIG\w+")


def _rendezvous(ctx: Context) -> Diagnosis | None:
    """The agent or a rank could not reach the c10d store / rendezvous, or the rendezvous
    timed out or was closed.

    A log with a failure summary had workers running: a rendezvous error there (e.g. the
    RendezvousClosedError of other nodes once the job stops) is a consequence, not the cause;
    so is a RendezvousClosedError after an agent was stopped by a signal (the stopping agent
    closes the rendezvous; :func:`_agent_signal` names it).
    """
    if ctx.failure is not None and ctx.failure.root_cause is not None:
        return None
    # the first text of each line that matches: the line, or the line with a terminal's wrap
    # undone (the address's port wrapped onto the next row)
    timeout_at = next(
        (
            (ln, m)
            for ln in ctx.lines
            if "timed out" in ln.text
            for text in (ln.text, *unwrapped(ctx.lines, ln.index, ctx))
            if (m := _RDZV_TIMEOUT.search(text))
        ),
        None,
    )
    timeout = timeout_at[0] if timeout_at else None
    refused = [ln for ln in ctx.lines if _RDZV_CONNECT.search(ln.text)]
    errors = [ln for ln in ctx.lines if _RDZV_ERROR.search(ln.text)]
    clients = next((ln for ln in ctx.lines if _CLIENTS.search(ln.text)), None)
    # A signal that stopped an agent closes the rendezvous for the others (pasted logs of two
    # nodes may show it below the closed error); but signals that follow the scheduler ending
    # the step after that agent exited (srun's task exit / "Terminating StepId", slurmstepd's
    # STEP CANCELLED, all after the RendezvousClosedError) are its consequences.
    closed = next((ln.index for ln in errors if "Closed" in ln.text), len(ctx.lines))
    signals = [
        ln.index for ln in ctx.lines if _DEATH.search(ln.text) or _AGENT_SIGNAL.search(ln.text)
    ]
    ended = next((ln.index for ln in ctx.lines[closed:] if _STEP_ENDED.search(ln.text)), None)
    stopped = any(i < closed or ended is None or i < ended for i in signals)
    if stopped:
        errors = [ln for ln in errors if "Closed" not in ln.text]
    # The exception line ("...RendezvousConnectionError: The connection to the C10d store has
    # failed...") before a frame's source line ("    raise RendezvousConnectionError(").
    errors.sort(key=_source_line)
    if (
        refused
        and timeout is None
        and not errors
        and clients is None
        and _retried_on(ctx.lines, refused)
    ):
        return None
    if timeout is None and not refused and not errors and clients is None:
        return None
    error = errors[0] if errors else None
    etype = m["type"] if error and (m := _RDZV_ERROR.search(error.text)) else None
    if timeout is None and not refused:
        if clients is not None and (c := _CLIENTS.search(clients.text)):
            return _diag(
                "rendezvous_failed",
                f"The c10d store waited {c['s']} s but only {c['n']} of {c['of']} processes "
                "joined: the others never started or could not reach it",
                (),
                "Start every node / rank of the job (same MASTER_ADDR/MASTER_PORT, world size), "
                "and check the missing ones' logs",
                [clients.raw] + ([error.raw] if error else []),
                {
                    "timeout_s": int(c["s"]),
                    "joined": int(c["n"]),
                    "world_size": int(c["of"]),
                    "error_type": etype,
                },
                ctx.failure,
            )
        if etype and etype != "RendezvousConnectionError":
            what = (
                "the rendezvous was closed (an agent of the job shut down)"
                if "Closed" in etype
                else "not enough nodes joined in time"
                if "Timeout" in etype
                else "the rendezvous failed"
            )
            workers_ran = "Closed" in etype and any(
                _WORKERS_STOPPED.search(ln.text) for ln in ctx.lines[closed:]
            )
            after = (
                "; the other nodes' workers were running and were stopped after it (the "
                "step ended, their agents sent SIGTERM): consequences"
                if workers_ran
                else "; this agent started no worker (the job's other nodes may have been "
                "training before it came)"
                if "Closed" in etype
                else "; no worker started"
            )
            return _diag(
                "rendezvous_failed",
                f"Rendezvous failed ({etype}): {what}{after}",
                (),
                (
                    "Find why this node's agent came to a closed rendezvous: it started or "
                    "restarted late (after the others had formed the job) or another agent ended "
                    "it; start all nodes in one srun step with the same --rdzv-id/--rdzv-endpoint "
                    "and --nnodes, and let --max-restarts cover retries"
                )
                if workers_ran
                else "Check that every node was started with the same --rdzv-id/--rdzv-endpoint "
                "and --nnodes, and that enough nodes joined within the rendezvous timeout",
                [error.raw] if error else [],
                {"error_type": etype},
                ctx.failure,
            )
        if etype is None:
            return None
    host: str | None = None
    port: int | None = None
    seconds: float | None = None
    why: str | None = None
    if timeout_at is not None:
        m = timeout_at[1]
        if m["ms"]:
            seconds = int(m["ms"]) / 1000
        else:
            host, port = _unmapped(m["host"] or m["host6"]), int(m["port"])
            n = float(m["n"])
            seconds = n / 1000 if m["unit"] == "ms" else n * 60 if m["unit"] == "m" else n
    matches = [m for ln in refused if (m := _RDZV_CONNECT.search(ln.text))]
    # Prefer an address the resolver produced (IPv4 first) to the name that was asked for.
    with_errno = [m for m in matches if m["errno"]]
    ipv4 = [m for m in with_errno if m["host"]] or with_errno
    best = ipv4[0] if ipv4 else matches[0] if matches else None
    if host is None and best is not None and best["port"]:
        host, port = _unmapped(best["host"] or best["host6"]), int(best["port"])
    if best is not None:
        why = best["why"] or best["why2"]
    if host is None and (
        ep := next((m["ep"] for ln in ctx.lines if (m := _RDZV_ENDPOINT.search(ln.text))), None)
    ):
        h, _, p = ep.rpartition(":") if ":" in ep else (ep, "", "")
        host, port = h, int(p) if p.isdigit() else None
    endpoint = f"{host}:{port}" if host and port is not None else host or "the rendezvous endpoint"
    after = f" after {seconds:g} s" if seconds is not None else ""
    how = f"timed out{after}" if timeout else f"was refused ({why})" if why else "failed"
    rest = f" → {etype}" if etype else ""
    facts: dict[str, FactValue | None] = {
        "host": host,
        "port": port,
        "endpoint": endpoint if host and port is not None else None,
        "timeout_s": seconds,
        "errno_reason": why,
        "error_type": etype,
    }
    fix = (
        f"Make sure the store host {host or '(rdzv endpoint)'} is up with its torchrun agent "
        f"(or rank 0) started, the address and port are right, and TCP "
        f"{port if port is not None else 'port'} is reachable (firewall)"
    )
    if port == 0:
        # port 0 asks the OS for any free port where the store binds; a client cannot connect
        # to it (the workers were handed "host:0", not the port the store got)
        fix = (
            "Give the rendezvous a real port: --rdzv-endpoint host:29500 (or --master-port "
            "29500, MASTER_PORT=29500), free on the store's host; port 0 cannot be connected to"
        )
    distinct = list(dict.fromkeys(ln.text for ln in refused))
    shown = [next(ln.raw for ln in refused if ln.text == t) for t in distinct[:4]]
    evidence = ([timeout.raw] if timeout else []) + shown + ([error.raw] if error else [])
    ran = [ln for ln in ctx.lines if _MID_RUN.search(ln.text)]
    if ran:
        # the agent lost the store while its workers ran: the keep-alive timer (or the shutdown)
        # of dynamic_rendezvous.py could not reach it, the workers had started
        beat = next((m for ln in ran if (m := _MID_RUN.search(ln.text)) and m["run"]), None)
        facts.update({"phase": "mid_run", "rendezvous": beat["run"] if beat else None})
        where = f"at {endpoint}" if host else "(the rendezvous endpoint)"
        cause = f"{how}{rest}" if timeout or why else etype or how
        return _diag(
            "rendezvous_connection",
            f"The c10d rendezvous store {where} was lost mid-run: the workers had started, "
            f"then the agent could no longer reach the store ({cause}); the host that "
            "held the store (the node whose agent hosts the rendezvous, usually the first one) "
            "went away, stopped, or became unreachable",
            (),
            "Find what happened to the store's host at that time (its agent's log, a crash, OOM "
            "or node failure, its job ending first); restart the job, and host the rendezvous "
            "on a node that outlives the run (or use an external etcd / c10d store)",
            [ln.raw for ln in ran[:2]] + [e for e in evidence if e not in {x.raw for x in ran}],
            facts,
            ctx.failure,
        )
    # a worker's own frames (the training script's, not torch's): the workers ran and their
    # init_process_group could not reach the store
    workers = any(
        _FRAME.match(ln.text) and "/torch/" not in ln.text and "torchrun" not in ln.text
        for ln in ctx.lines
    )
    started = (
        "; the workers had started: their init_process_group could not reach it"
        if workers
        else "; no worker started"
    )
    zero = "; port 0 is no port a client can connect to" if port == 0 else ""
    return _diag(
        "rendezvous_connection",
        f"Connecting to the c10d store at {endpoint} {how}{rest}{zero}{started}",
        (),
        fix,
        evidence,
        facts,
        ctx.failure,
    )


# The keys torchelastic's agents exchange in the rendezvous store right after the rendezvous,
# while ranks are assigned (torch/distributed/elastic/agent/server/api.py: ``_share_and_gather``
# / ``store_util.synchronize`` with ``key_prefix="torchelastic/role_info"``, 2.x
# ``_assign_worker_ranks``: ``torchelastic/role_info/<group_rank>`` and
# ``torchelastic/assigned_ranks/<group_rank>``), under the run id's PrefixStore (``/none/`` for
# the default ``--rdzv-id``). TCPStore's wait timeout (2.4+, TCPStore.cpp ``doWait``): "wait
# timeout after {ms}ms, keys: {keys}"; before it a bare "Socket Timeout" from a traceback
# through those functions.
_ELASTIC_KEYS = re.compile(r"torchelastic/(?:role_info|assigned_ranks)/\d+")
_STORE_WAIT = re.compile(r"wait timeout after (?P<ms>\d+)\s*ms,? keys:\s*(?P<keys>.*)$")
_RANK_FRAMES = re.compile(r"\bin (?:_share_and_gather|_assign_worker_ranks|_get_ranks)\b")
_SOCKET_TIMEOUT = re.compile(r"(?:DistStoreError|RuntimeError): Socket Timeout\s*$")


def _elastic_store_wait(ctx: Context) -> Diagnosis | None:
    """An agent gave up waiting in the rendezvous store for the keys every node's agent
    publishes while ranks are assigned: another node's agent never completed the rendezvous
    (not started, other --nnodes / endpoint / port, or cannot reach the store)."""
    hit: tuple[Line, re.Match[str], list[Line], list[str]] | None = None
    for ln in ctx.lines:
        if (m := _STORE_WAIT.search(ln.text)) is None:
            continue
        # a wrapped line carries the key list on the next line(s)
        rest = [
            x
            for x in ctx.lines[ln.index + 1 : ln.index + 3]
            if x.text.strip().startswith(("/", "torchelastic/"))
        ]
        if found := _ELASTIC_KEYS.findall(" ".join([m["keys"], *(x.text for x in rest)])):
            hit = (ln, m, rest, found)
            break
    seconds: float | None = None
    keys: list[str] = []
    if hit is not None:
        ln, m, rest, keys = hit
        seconds = int(m["ms"]) / 1000
        evidence = [_shown(ln, m), *(x.raw for x in rest)]
    else:
        frames = [ln for ln in ctx.lines if _RANK_FRAMES.search(ln.text)]
        tail = next(
            (
                ln
                for ln in ctx.lines
                if _SOCKET_TIMEOUT.search(ln.text) and frames and ln.index > frames[0].index
            ),
            None,
        )
        if tail is None:
            return None
        evidence = [frames[0].raw, tail.raw]
    nodes = len(dict.fromkeys(keys)) or None
    which = f" ({', '.join(dict.fromkeys(keys))})" if keys else ""
    after = f" {seconds:g} s" if seconds is not None else ""
    return _diag(
        "rendezvous_failed",
        f"The elastic agents never completed the rendezvous: this agent waited{after} in the "
        f"store for the rank-assignment keys every node's agent publishes{which}, and not all "
        "arrived: another node's agent did not start, was started with other --nnodes / "
        "--rdzv-endpoint / --master-port settings, or cannot reach the store; no worker started",
        (),
        "Start every node with the same rendezvous settings (NNODES, MASTER_ADDR/--rdzv-endpoint, "
        "port, --rdzv-id) and a distinct node rank, check that each node reaches the store host's "
        "port, and read the other nodes' agent logs",
        evidence,
        {"timeout_s": seconds, "nodes": nodes, "stage": "rank assignment"},
        ctx.failure,
    )


# --------------------------------------------------------------------------------------------
# The agent got a signal: hangup (SIGHUP) or stopped (SIGTERM / SIGINT).

_AGENT_SIGNAL = re.compile(r"SignalException: Process (?P<pid>\d+) got signal: (?P<sig>\d+)")
_CLOSING = re.compile(r"Sending process (?P<pid>\d+) closing signal (?P<sig>SIG[A-Z]+)")
# PyTorch's glog-style prefix "W0409 07:28:49.530000 1359 torch/...": 1359 is the process id
_GLOG_PID = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+(?P<pid>\d+) ")
# the same prefix glued after a progress bar the terminal was redrawing ("...14.88s/it]W1229
# 16:43:25.650000 190834 /envs/.../api.py:723] Received 1 death signal")
_GLUED_GLOG_PID = re.compile(r"(?<![\w.])[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+(?P<pid>\d+) \S+\] ")
_KEYBOARD = re.compile(r"^KeyboardInterrupt\s*$")


def _sig_name(value: str) -> str:
    if value.isdigit():
        try:
            return signal.Signals(int(value)).name
        except ValueError:
            return f"signal {value}"
    return value


def _agent_signal(ctx: Context) -> Diagnosis | None:
    """torchrun's agent got SIGHUP / SIGTERM / SIGINT and shut its workers down.

    SIGHUP means the terminal or SSH session that started the run went away (``hangup``);
    SIGTERM / SIGINT that someone or something stopped it (``stopped``: docker stop, a
    scheduler, Ctrl-C). A RendezvousClosedError printed by another node afterwards is named as
    a consequence (the stopping agent closed the rendezvous).
    """
    death = next((ln for ln in ctx.lines if _DEATH.search(ln.text)), None)
    raised = next((ln for ln in reversed(ctx.lines) if _AGENT_SIGNAL.search(ln.text)), None)
    keyboard = next((ln for ln in ctx.lines if _KEYBOARD.match(ln.text)), None)
    if death is None and raised is None:
        if keyboard is None or not _TORCH.search(ctx.text):
            return None
    pid: int | None = None
    name = "SIGINT"
    if raised is not None and (m := _AGENT_SIGNAL.search(raised.text)):
        pid, name = int(m["pid"]), _sig_name(m["sig"])
    if death is not None and (m := _DEATH.search(death.text)):
        name = _sig_name(m["sig"])
        if pid is None and (g := _GLOG_PID.match(death.raw) or _GLUED_GLOG_PID.search(death.raw)):
            pid = int(g["pid"])
    closing = [ln for ln in ctx.lines if (m := _CLOSING.search(ln.text)) and m["sig"] == name]
    workers = tuple(int(m["pid"]) for ln in closing if (m := _CLOSING.search(ln.text)))
    # the first "closing signal SIGHUP" line names the signal that older agents give only as
    # a number ("Received 1 death signal")
    evidence = [ln.raw for ln in (death, raised, *closing[:1]) if ln is not None]
    if death is None and raised is None and keyboard is not None:
        evidence = [keyboard.raw]
    agent = f"Torchrun's agent (pid {pid})" if pid is not None else "Torchrun's agent"
    to = f" and forwarded it to its workers (pid {join_ranks(workers)})" if workers else ""
    facts: dict[str, FactValue | None] = {
        "signal": name,
        "pid": pid,
        "worker_pids": workers or None,
    }
    if name == "SIGHUP":
        d = _diag(
            "hangup",
            f"{agent} received SIGHUP{to}: the terminal or SSH session that started the run "
            "went away. Not a crash, not OOM, no rank at fault",
            (),
            "Run the job detached from the terminal (tmux/screen, a container, a scheduler; "
            "nohup alone does not protect torchrun's agent)",
            evidence,
            facts,
            ctx.failure,
        )
    elif name in ("SIGTERM", "SIGINT", "SIGQUIT"):
        d = _diag(
            "stopped",
            f"{agent} was stopped by {name}{to}: the job was stopped from outside (docker "
            "stop, a host shutdown, a scheduler, Ctrl-C), not by a failure of the training "
            "script",
            (),
            "Nothing to fix if it was stopped on purpose; else find who stopped it (`docker "
            "events`, the scheduler's log, the other nodes' logs)",
            evidence,
            facts,
            ctx.failure,
        )
    else:
        d = _diag(
            "signal",
            f"{agent} received {name}{to} and shut the job down",
            (),
            f"Find who sent {name} to the agent",
            evidence,
            facts,
            ctx.failure,
        )
    closed = [ln for ln in ctx.lines if _RDZV_ERROR.search(ln.text) and "Closed" in ln.text]
    if closed:
        d = replace(
            d,
            consequences=(
                Consequence(
                    "rendezvous_failed",
                    "The rendezvous was closed (RendezvousClosedError) because this agent shut "
                    "down",
                    (closed[0].raw,),
                ),
            ),
        )
    return d


# --------------------------------------------------------------------------------------------
# How a worker ended: a signal, an exit code, the OOM killer.

# multiprocessing/api.py: "failed (exitcode: -9) local_rank: 4 (pid: 899509) of binary: ..."
_AGENT_FAILED = re.compile(
    r"failed \(exitcode: (?P<code>-?\d+)\) local_rank: (?P<local>\d+) \(pid: (?P<pid>\d+)\)"
    r"(?: of binary: (?P<binary>\S+))?"
)
# A summary entry's fields printed without its header (a paste cut above them)
_LOOSE_RANK = re.compile(r"^\s*rank\s*:\s*(?P<rank>\d+)\s*\(local_rank:\s*(?P<local>\d+)\)")
_LOOSE_EXIT = re.compile(r"^\s*exitcode\s*:\s*(?P<code>-?\d+)\s*\(pid:\s*(?P<pid>\d+)\)")
_LOOSE_TB = re.compile(
    r"^\s*(?:traceback|msg)\s*:\s*\"?(?P<tb>Signal \d+ \(SIG[A-Z]+\) received by PID \d+)"
)
_LOOSE_FIELD = re.compile(r"^\s*(?P<key>time|host)\s*:\s*(?P<value>\S+)")
# torch 1.9-1.10 ``record`` (errors/__init__.py, ``_no_error_file_warning_msg``) when the failed
# worker wrote no error file: "Child process {pid} (local_rank {rank}) FAILED (exitcode {code})"
# under a starred "CHILD PROCESS FAILED WITH NO ERROR_FILE" box. The number printed as
# local_rank is the GLOBAL rank (``ChildFailedError.get_first_failure()``'s key).
_CHILD_FAILED = re.compile(
    r"Child process (?P<pid>\d+) \(local_rank (?P<rank>\d+)\) FAILED \(exitcode (?P<code>-?\d+)\)"
)
# torch.distributed.launch before torchelastic (<= 1.8) raises Python's CalledProcessError for
# the first worker that exited non-zero: "Command '[python, -u, train.py, --local_rank=N, ...]'
# returned non-zero exit status N." (subprocess.py; "died with <Signals.SIGKILL: 9>." for a
# signal). Taken as the launcher's report only when the command names --local_rank or the
# traceback runs through torch/distributed/launch.py (a script's own subprocess, e.g. ninja
# building an extension, is a real error).
_CALLED_PROCESS = re.compile(
    r"CalledProcessError: Command '(?P<cmd>.*)' (?:returned non-zero exit status (?P<code>\d+)"
    r"|died with <Signals\.(?P<sig>SIG[A-Z]+): (?P<num>\d+)>)"
)
_LOCAL_RANK_ARG = re.compile(r"--local[_-]rank[= ']+(?P<local>\d+)")
_LAUNCH_FRAME = re.compile(r"torch[/\\]distributed[/\\]launch\.py")
# DeepSpeed's launcher (deepspeed/launcher/launch.py, ``sigkill_handler``) when a worker ends:
# ``logger.error(f"{cmd} exits with return code = {process.returncode}")`` after its
# ``[launch.py:NNN:sigkill_handler] Killing subprocess <pid>`` lines; ``cmd`` is the worker's
# argv list (with ``--local_rank=N``), the code Python's returncode (-N: killed by signal N).
# Searched anywhere in the line: stray characters glued before the log prefix do not hide it.
_DS_EXIT = re.compile(r"\bexits with return code\s*=\s*(?P<code>-?\d+)\b")
# torch.multiprocessing.spawn's join (torch/multiprocessing/spawn.py) when a child ended without
# raising: ``"process %d terminated with signal %s"`` (a negative exitcode, the name from
# ``signal.Signals``) or ``"process %d terminated with exit code %d"``, raised as
# ProcessExitedException (torch >= 1.5) or a bare Exception (older). The number is the spawn
# index, the first argument mp.spawn passes to the function: the local rank.
_SPAWN_EXIT = re.compile(
    r"\bprocess (?P<index>\d+) terminated with (?:signal (?P<sig>SIG[A-Z0-9]+)"
    r"|exit code (?P<code>-?\d+))"
)


def _launcher_report(lines: Sequence[Line], ln: Line) -> re.Match[str] | None:
    """torch.distributed.launch's CalledProcessError on ``ln`` (see :data:`_CALLED_PROCESS`)."""
    m = _CALLED_PROCESS.search(ln.text)
    if m is None:
        return None
    if _LOCAL_RANK_ARG.search(m["cmd"]) or any(
        _LAUNCH_FRAME.search(x.text) for x in lines[max(0, ln.index - 6) : ln.index]
    ):
        return m
    return None


_ROOT_HEADER = re.compile(r"^\s*Root Cause\b.*:\s*$")


def _entry(
    lines: Sequence[str],
    rank: int | None,
    local: int | None,
    code: int,
    pid: int | None,
    fields: dict[str, str] | None = None,
    traceback: str | None = None,
) -> ProcessFailure:
    fields = fields or {}
    return ProcessFailure(
        index=0,
        time=fields.get("time"),
        host=fields.get("host"),
        rank=rank,
        local_rank=local,
        exitcode=code,
        pid=pid,
        signal=signal_name(code),
        error_file=None,
        traceback=traceback,
        exception=None,
        lines=tuple(s.strip() for s in lines if s.strip()),
    )


def _loose_entry(ctx: Context) -> ProcessFailure | None:
    """A failed worker named outside a parsable summary: the agent's ``failed (exitcode: N)``
    line, or a summary entry whose header was cut off (``rank :``/``exitcode :`` lines; the
    one under "Root Cause" when that header survived). Blank lines between an entry's fields
    (a paste that doubled every line break) do not separate them."""
    filled = [ln for ln in ctx.lines if ln.text.strip()]
    exits = [i for i, ln in enumerate(filled) if _LOOSE_EXIT.match(ln.text)]
    root_at = next((i for i, ln in enumerate(filled) if _ROOT_HEADER.match(ln.text)), None)
    if root_at is not None:
        exits = [i for i in exits if i > root_at] + [i for i in exits if i < root_at]
    for i in exits[:1]:
        ln = filled[i]
        if m := _LOOSE_EXIT.match(ln.text):
            near = filled[max(0, i - 4) : i + 4]
            rank = local = None
            fields: dict[str, str] = {}
            tb = None
            shown = []
            for other in near:
                if r := _LOOSE_RANK.match(other.text):
                    rank, local = int(r["rank"]), int(r["local"])
                    shown.append(other.text)
                elif t := _LOOSE_TB.match(other.text):
                    tb = t["tb"]
                    shown.append(other.text)
                elif f := _LOOSE_FIELD.match(other.text):
                    fields[f["key"]] = f["value"]
            return _entry([*shown, ln.text], rank, local, int(m["code"]), int(m["pid"]), fields, tb)
    for ln in ctx.lines:
        if m := _AGENT_FAILED.search(ln.text):
            return _entry([_shown(ln, m)], None, int(m["local"]), int(m["code"]), int(m["pid"]))
    for ln in ctx.lines:
        if m := _CHILD_FAILED.search(ln.text):
            return _entry([_shown(ln, m)], int(m["rank"]), None, int(m["code"]), int(m["pid"]))
    for ln in ctx.lines:
        if m := _launcher_report(ctx.lines, ln):
            code = int(m["code"]) if m["code"] else -int(m["num"])
            arg = _LOCAL_RANK_ARG.search(m["cmd"])
            return _entry([_shown(ln, m)], None, int(arg["local"]) if arg else None, code, None)
    for ln in ctx.lines:
        if m := _SPAWN_EXIT.search(ln.text):
            if m["sig"]:
                try:
                    code = -int(signal.Signals[m["sig"]])
                except KeyError:
                    continue
            else:
                code = int(m["code"])
            return _entry([_shown(ln, m)], None, int(m["index"]), code, None)
    # the launcher's own line (its log prefix, the worker's argv) over the same words quoted
    # in prose (an issue's title: "Killing subprocess exits with return code = 1")
    ds = [(ln, m) for ln in ctx.lines if (m := _DS_EXIT.search(ln.text)) and int(m["code"]) != 0]
    if not ds:
        return None
    ln, m = min(ds, key=lambda c: "sigkill_handler" not in c[0].text)  # the first such
    arg = _LOCAL_RANK_ARG.search(ln.text[: m.start()])
    return _entry([_shown(ln, m)], None, int(arg["local"]) if arg else None, int(m["code"]), None)


_SIGNAL_HINTS = {
    "SIGKILL": (
        "killed from outside, most likely by the kernel OOM killer (host RAM or a container / "
        "cgroup memory limit)",
        "Look for pid {pid} in the host's kernel log (dmesg | grep -i oom) and for OOMKilled on "
        "the container; lower host memory use (fewer DataLoader workers, smaller batches, "
        "loading checkpoints with low_cpu_mem_usage) or raise the memory limit",
    ),
    "SIGABRT": (
        "a native abort: an uncaught C++ exception or a failed assertion, often from CUDA/NCCL; "
        "the reason is in the rank's own output, not in this summary",
        "Read {whose} own output before the summary ('terminate called ...', 'what():', "
        "NCCL/CUDA errors); rerun with NCCL_DEBUG=INFO if it names NCCL",
    ),
    "SIGSEGV": (
        "a segmentation fault in native code (an extension, a driver, or a version mismatch)",
        "Run with PYTHONFAULTHANDLER=1 (or a core dump) to get the crashing stack; check that "
        "compiled extensions match the installed torch/CUDA versions",
    ),
    "SIGBUS": (
        "a bus error, usually shared memory (/dev/shm) exhausted",
        "Give the container a larger --shm-size or --ipc=host",
    ),
    "SIGTERM": (
        "terminated from outside (docker stop, a scheduler, or the agent stopping its workers)",
        "Find who stopped the job: the agent's log, the container's events",
    ),
    "SIGINT": (
        "interrupted (Ctrl-C or a scheduler's SIGINT)",
        "Find who interrupted the job",
    ),
    "SIGHUP": (
        "the terminal or SSH session that started the run went away",
        "Run the job detached from the terminal (tmux/screen, a container, a scheduler)",
    ),
}


# CPython's own message when the script given on its command line cannot be opened
# (Modules/main.c pymain_run_file: "%ls: can't open file %R: [Errno %d] %s"), exit status 2.
_CANT_OPEN = re.compile(r"can't open file '(?P<path>[^']+)': \[Errno \d+\] (?P<why>[^\n]+?)\s*$")


def _no_script(ctx: Context) -> tuple[Line, re.Match[str]] | None:
    """The interpreter's "can't open file" line, when the text has one."""
    return next(((ln, m) for ln in ctx.lines if (m := _CANT_OPEN.search(ln.text))), None)


def _whose(rank: int | None, local_rank: int | None = None) -> str:
    """Possessive for a fix line: ``rank 3's``, ``local rank 1's`` or ``the process's``."""
    if rank is not None:
        return f"rank {rank}'s"
    return f"local rank {local_rank}'s" if local_rank is not None else "the process's"


_SIGNAL_KINDS: dict[str, CauseKind] = {
    "SIGKILL": "sigkill",
    "SIGABRT": "sigabrt",
    "SIGSEGV": "sigsegv",
    "SIGHUP": "hangup",
    "SIGTERM": "stopped",
    "SIGINT": "stopped",
}


# libstdc++'s verbose terminate handler ("terminate called after throwing an instance of 'X'",
# "terminate called without an active exception", "terminate called recursively") and
# CPython's faulthandler ("Fatal Python error: Aborted"): the process raised SIGABRT itself.
_ABORT = re.compile(
    r"terminate called (?:without an active exception|after throwing|recursively)"
    r"|Fatal Python error: Aborted"
)
_CRASH = re.compile(r"Fatal Python error: (?:Bus error|Segmentation fault)")


def _abort_before(ctx: Context, root: ProcessFailure) -> Line | None:
    """The failed rank's own abort line (:data:`_ABORT`) when it comes before any fatal
    SIGBUS/SIGSEGV line of that rank: a process that aborted and whose crash handling then
    died of another signal, which is what torchelastic's summary reports."""
    if root.rank is None:
        return None
    for ln in ctx.lines:
        if ln.rank != root.rank:
            continue
        if _CRASH.search(ln.text):
            return None
        if _ABORT.search(ln.text):
            return ln
    return None


# The launch command as printed or quoted (torchrun, python -m torch.distributed.run/launch).
_LAUNCH_CMD = re.compile(r"\btorchrun\b|torch\.distributed\.(?:run|launch)\b")
_NNODES = re.compile(r"--nnodes[= ]+(?P<n>\d+)(?::(?P<max>\d+))?")


def _single_node(ctx: Context) -> bool:
    """Whether the launch command in the text runs one node: ``--standalone``, ``--nnodes 1``
    (``1:1``) or no ``--nnodes`` at all (torchrun's default is 1)."""
    commands = [
        ln.text
        for ln in ctx.lines
        if _LAUNCH_CMD.search(ln.text) and "--nproc" in ln.text.replace("_", "-")
    ]
    if not commands:
        return False
    for c in commands:
        m = _NNODES.search(c)
        if m is not None and (m["n"] != "1" or (m["max"] not in (None, "1"))):
            return False
    return True


def _failed_worker(ctx: Context) -> tuple[ProcessFailure | None, bool]:
    """The worker that failed first, and whether it comes from a full summary. A root-cause
    entry cut before its exit code (a paste that stops mid-summary) gives way to the first
    other failed worker whose exit code was printed."""
    failure = ctx.failure
    if failure is not None and failure.root_cause is not None:
        root = failure.root_cause
        if root.exitcode is None:
            printed = next((e for e in failure.others if e.exitcode is not None), None)
            if printed is not None:
                # the others' exit code; the root's own rank where the entry said it, else the
                # one rank the others leave out of 0..their highest (every rank failed: the
                # summary lists all but the first)
                ranks = {e.rank for e in failure.others if e.rank is not None}
                missing = sorted(set(range(max(ranks) + 1)) - ranks) if ranks else []
                rank = (
                    root.rank
                    if root.rank is not None
                    else (missing[0] if len(missing) == 1 else None)
                )
                return (
                    replace(
                        printed,
                        index=root.index,
                        rank=rank,
                        local_rank=root.local_rank,
                        pid=root.pid,
                        time=root.time or printed.time,
                        host=root.host or printed.host,
                        error_file=root.error_file,
                        traceback=None,
                        exception=None,
                        lines=(*root.lines, *printed.lines),
                    ),
                    True,
                )
        return root, True
    loose = _loose_entry(ctx)
    if (
        loose is not None
        and loose.rank is None
        and loose.local_rank is not None
        and _single_node(ctx)
    ):
        loose = replace(loose, rank=loose.local_rank)  # one node: the local rank is global
    return loose, False


def _signal(ctx: Context) -> Diagnosis | None:
    """The first failed worker died of a signal or exited non-zero (torchelastic's summary, or
    the agent's ``failed (exitcode: N)`` line when no summary was printed).

    A summary cut before its "Root Cause" entry shows only the OTHER failures: the worker read
    from them is said as such and blamed on no rank (the one that failed first is not in the
    text)."""
    d = _signal_of(ctx)
    failure = ctx.failure
    if d is None or failure is None or failure.root_cause is not None or not failure.others:
        return d
    first = d.summary[:1].lower() + d.summary[1:]
    return replace(
        d,
        ranks=(),
        summary="The failure summary is cut off before its Root Cause entry, so the rank that "
        f"failed first is not in the text; of the other failed ranks: {first}",
    )


def _signal_of(ctx: Context) -> Diagnosis | None:
    """:func:`_signal` as if the worker read were the first to fail."""
    root, full = _failed_worker(ctx)
    if root is None or root.exitcode is None or root.exitcode == 0:
        return None
    failure = ctx.failure
    others = (
        [e for e in failure.others if e.rank is not None and e is not root]
        if failure and full
        else []
    )
    also = ""
    if others:
        how = sorted({e.signal or f"exit {e.exitcode}" for e in others})
        also = f"; also failed: ranks {join_ranks(e.rank for e in others if e.rank is not None)}"
        also += f" ({', '.join(how)})"
    at = f" at {root.time}" if root.time else ""
    evidence = [
        ln
        for ln in root.lines
        if ln.startswith(("rank", "exitcode", "traceback", "msg", "failed ("))
    ]
    evidence = evidence or list(root.lines)
    if full:
        header = next((ln.raw for ln in ctx.lines if _ROOT_HEADER.match(ln.text)), None)
        evidence = ([header] if header else []) + evidence
    facts: dict[str, FactValue | None] = {
        "rank": root.rank,
        "local_rank": root.local_rank,
        "pid": root.pid,
        "host": root.host,
        "exitcode": root.exitcode,
        "signal": root.signal,
        "time": root.time,
        "script": failure.script if failure else None,
        "other_ranks": tuple(e.rank for e in others if e.rank is not None) if full else None,
    }
    pid = f" (pid {root.pid})" if root.pid is not None else ""
    who = (
        rank_and_place(root)
        if root.rank is not None
        else (
            f"local rank {root.local_rank}{pid}"
            if root.local_rank is not None
            else f"pid {root.pid}"
            if root.pid is not None
            else "a worker"
        )
    )
    who = who[0].upper() + who[1:]
    cut = failure.root_cause if failure and failure.root_cause else None
    if full and cut is not None and cut.exitcode is None:
        # _failed_worker read the code from the other ranks: say so
        who += " (its Root Cause entry is cut off: the exit code is the other ranks'" + (
            "; it is the only rank missing from them)"
            if cut.rank is None and root.rank is not None
            else ")"
        )
    ranks = (root.rank,) if root.rank is not None else ()
    if root.signal is None:
        if root.exitcode < 0:
            return None
        if root.exitcode == 2 and (missing := _no_script(ctx)) is not None:
            ln, m = missing
            return _diag(
                "exit_code",
                f"{who} exited with code 2{at}: Python could not open the entry script "
                f"{m['path']} ({m['why']}), so training never started{also}",
                ranks,
                "Give torchrun the script's path as it is on the node that runs it: a "
                "relative path resolves in the launch's working directory, and under Slurm a "
                "batch script runs from a copy in slurmd's spool folder, so a path built from "
                "the script's own folder points there; use an absolute path or cd first",
                [ln.raw, *evidence],
                facts,
                failure,
            )
        return _diag(
            "exit_code",
            f"{who} exited with code {root.exitcode}{at}, without a Python traceback in "
            f"the {'summary' if full else 'log'}{also}",
            ranks,
            f"Read {_whose(root.rank, root.local_rank)} own output; "
            "decorate the entrypoint with "
            "torch.distributed.elastic.multiprocessing.errors.record to get its traceback",
            evidence,
            facts,
            failure,
        )
    abort = _abort_before(ctx, root) if root.signal in ("SIGBUS", "SIGSEGV") else None
    if abort is not None:
        # the summary has the last signal; the rank's own output shows it aborted first
        said = abort.text.strip()
        # a joinable std::thread's destructor calls std::terminate ([thread.thread.destr])
        why = (
            ": a C++ thread was destroyed while still running, often a library's or the "
            "process group's background thread at exit"
            if "without an active exception" in said
            else ""
        )
        not_it = (
            "it does not mean /dev/shm ran out (a larger --shm-size would not help)"
            if root.signal == "SIGBUS"
            else "it is not the cause"
        )
        facts["signal"] = "SIGABRT"
        return _diag(
            "sigabrt",
            f"{who} aborted in native code{at} ('{said[:120]}'{why}); the {root.signal} in "
            f"torchelastic's summary (exit code {root.exitcode}) came while it was already "
            f"crashing, so {not_it}{also}",
            ranks,
            # PyTorch's "Shutdown" docs: call destroy_process_group() once per process at the
            # end; without it gloo's threads abort at exit (pytorch/pytorch#190489)
            "Call torch.distributed.destroy_process_group() on every rank when training ends "
            "and stop other background threads before the script exits; read the rank's last "
            "lines to see whether training itself finished"
            if why
            else _SIGNAL_HINTS["SIGABRT"][1].format(
                pid=root.pid if root.pid is not None else "<pid>",
                whose=_whose(root.rank, root.local_rank),
            ),
            [abort.raw, *evidence],
            facts,
            failure,
        )
    if root.signal == "SIGBUS" and _in_container(ctx, root):
        return _diag(
            "shm_exhausted",
            f"{who} was killed by SIGBUS (exit code {root.exitcode}){at} in a container: a bus "
            "error on shared memory, almost always /dev/shm too small (Docker's default is 64 "
            "MiB; DataLoader workers and NCCL's shared-memory transport live there); the text "
            f"does not show /dev/shm itself{also}",
            ranks,
            _SHM_FIX,
            evidence,
            facts,
            failure,
        )
    meaning, fix = _SIGNAL_HINTS.get(
        root.signal, ("a signal from outside or from native code", "Read the rank's own output")
    )
    kind = _SIGNAL_KINDS.get(root.signal, "signal")
    return _diag(
        kind,
        f"{who} was killed by {root.signal} (exit code {root.exitcode}){at}: {meaning}{also}",
        ranks,
        fix.format(
            pid=root.pid if root.pid is not None else "<pid>",
            whose=_whose(root.rank, root.local_rank),
        ),
        evidence,
        facts,
        failure,
    )


# Python's faulthandler ("Fatal Python error: Aborted") and the shell's job report
# ("Segmentation fault (core dumped)") when no torchelastic line names the worker.
# Also Open MPI's signal handler (opal/util/stacktrace.c: "[host:pid] *** Process received
# signal ***", then "[host:pid] Signal: Segmentation fault (11)"), as mpirun / horovodrun
# workers print it.
_FATAL = re.compile(
    r"Fatal Python error: (?P<py>Segmentation fault|Aborted|Bus error)"
    r"|^(?:.*\s)?(?P<sh>Segmentation fault|Aborted|Bus error) \(core dumped\)"
    r"|(?:^|\] )Signal: (?P<mpi>Segmentation fault|Aborted|Bus error) \(\d+\)"
    # UCX's handler (ucs/debug: "[host:pid :0:tid] Caught signal 11 (Segmentation fault: ...)")
    r"|Caught signal \d+ \((?P<ucx>Segmentation fault|Aborted|Bus error)\b"
)
#: Open MPI's "[host:pid] " before its signal report (the normaliser may have taken it off
#: the text as a prefix; the raw line keeps it).
_MPI_WHO = re.compile(r"\[(?P<host>[^\]\s:]+):(?P<pid>\d+)\] Signal: ")
_MPI_TASK = re.compile(r"(?P<host>[^\]\s:]+):(?P<pid>\d+)")
_FATAL_SIGNALS = {"Segmentation fault": "SIGSEGV", "Aborted": "SIGABRT", "Bus error": "SIGBUS"}


def _fatal_signal(ctx: Context) -> Diagnosis | None:
    """A process died of SIGSEGV / SIGABRT / SIGBUS, reported by faulthandler or the shell."""
    root, _ = _failed_worker(ctx)
    if root is not None:
        return None
    hit = next(((ln, m) for ln in ctx.lines if (m := _FATAL.search(ln.text))), None)
    if hit is None:
        return None
    ln, m = hit
    name = _FATAL_SIGNALS[m["py"] or m["sh"] or m["mpi"] or m["ucx"]]
    rank = ln.rank
    meaning, fix = _SIGNAL_HINTS[name]
    on = f"rank {rank}" if rank is not None else "a process"
    who = _MPI_WHO.search(ln.raw) if m["mpi"] else None
    if m["mpi"] and who is None and ln.task and (t := _MPI_TASK.fullmatch(ln.task)):
        who = t  # taken off the text as its source
    pid, host = (int(who["pid"]), who["host"]) if who else (None, None)
    at = f" (pid {pid} on {host})" if who else ""
    return _diag(
        _SIGNAL_KINDS.get(name, "signal"),
        f"{on[0].upper()}{on[1:]}{at} died of {name}: {meaning}",
        (rank,) if rank is not None else (),
        fix.format(pid=pid or "<pid>", whose=_whose(rank)),
        [ln.raw],
        {"signal": name, "rank": rank, "pid": pid, "host": host},
        ctx.failure,
    )


# The shell's job-control report of a child killed by a signal (bash ``jobs.c``:
# ``<script>: line N: <pid> Killed <command>`` for a script, ``[1]+  Killed  <command>`` for an
# interactive job; the status words are ``strsignal``'s: Killed, Segmentation fault, Aborted,
# Bus error, optionally `` (core dumped)``), and an exit status of 128+N that a shell, a
# container runtime or a job controller reports (POSIX: a child killed by signal N exits
# 128+N to the shell; ``docker ps``/compose ``exited with code 137``, ``Exit code: 137``).
# A foreground job's report is the bare word (``Killed``, ``Aborted``, ``Segmentation fault``
# on its own line, or glued to the end of a progress bar the process was redrawing).
_SHELL_KILLED = re.compile(
    r"(?:\bline \d+:\s+(?P<pid>\d+)|^\[\d+\][+-]?)\s+(?P<how>Killed|Segmentation fault|Aborted"
    r"|Bus error)(?:\s+\(core dumped\))?\s+(?P<cmd>\S.*)$"
    r"|(?:^|(?<=[\]|]))(?P<how2>Killed|Aborted|Segmentation fault)\s*$"
    # PyTorch's DataLoader (torch/csrc/DataLoader.cpp): "DataLoader worker (pid N) is killed by
    # signal: <strsignal>." (Bus error: shared memory, the shm rule's)
    r"|DataLoader worker \(pid (?P<pid3>\d+)\) is killed by signal: "
    r"(?P<how3>Killed|Segmentation fault|Aborted)"
)
_EXIT_128 = re.compile(
    # "exit code 137", "exited with code 137", "exit_code: 137", docker inspect's State
    # "ExitCode": 137, "return code 137"
    r"\b(?:exit(?:ed)?(?: with)?(?: error)?[ _]?(?:code|status)|exit_code|return code)"
    r"\W{0,3}(?P<code>13[4579])\b",
    re.I,
)
# A supervisor's report of a child ended by signal N, in Python's returncode convention (-N):
# vLLM's executor "Worker proc VllmWorker-0 died unexpectedly (exit code: -15), shutting down
# executor" (v1/executor/multiproc_executor.py), multiprocessing's "<Process ...> exitcode=-9",
# and Python's subprocess.CalledProcessError of a child a signal ended ("Command '[...]' died
# with <Signals.SIGKILL: 9>.": a launcher such as accelerate's simple_launcher raising it).
_NEGATIVE_EXIT = re.compile(
    r"\b(?:died|exited|terminated|ended)\b[^\n]{0,40}?\(?(?:exit ?code|exitcode|returncode)"
    r"[:=]\s*-(?P<num>\d{1,2})\b"
    r"|\bdied with <Signals\.SIG[A-Z0-9]+: (?P<num2>\d{1,2})>",
    re.I,
)
_SHELL_SIGNALS = {
    "Killed": "SIGKILL",
    "Segmentation fault": "SIGSEGV",
    "Aborted": "SIGABRT",
    "Bus error": "SIGBUS",
}
_CODE_SIGNALS = {137: "SIGKILL", 139: "SIGSEGV", 134: "SIGABRT", 135: "SIGBUS"}


def _shell_signal(ctx: Context) -> Diagnosis | None:
    """A process killed by a signal outside torchrun, said by the shell (``36 Killed python3
    train.py``) or by its exit status 128+N (137 SIGKILL, 139 SIGSEGV, 134 SIGABRT, 135
    SIGBUS). SIGKILL with the OOM killer's own record is left to the OOM rules."""
    root, _ = _failed_worker(ctx)
    if root is not None:
        return None
    killed = next(((ln, m) for ln in ctx.lines if (m := _SHELL_KILLED.search(ln.text))), None)
    code = next(((ln, m) for ln in ctx.lines if (m := _EXIT_128.search(ln.text))), None)
    if killed is None and code is None:
        return _negative_exit(ctx)
    if killed is not None:
        name = _SHELL_SIGNALS[killed[1]["how"] or killed[1]["how2"] or killed[1]["how3"]]
    else:
        assert code is not None
        name = _CODE_SIGNALS[int(code[1]["code"])]
    if name == "SIGSEGV" and killed is None and _FATAL.search(ctx.text):
        return None  # faulthandler's / the shell's own words: _fatal_signal
    if name == "SIGKILL" and any(_OOM.search(ln.text) for ln in ctx.lines):
        return None  # the OOM killer's record: oom_killed
    said = killed[1]["pid"] or killed[1]["pid3"] if killed is not None else None
    pid = int(said) if said else None
    loader = killed is not None and killed[1]["pid3"] is not None
    command = killed[1]["cmd"].strip() if killed is not None and killed[1]["cmd"] else None
    exit_code = int(code[1]["code"]) if code is not None else None
    number = getattr(signal, name).value
    meaning, fix = _SIGNAL_HINTS[name]
    who = (
        f"DataLoader worker process {pid}"
        if loader
        else f"process {pid}"
        if pid is not None
        else "the process"
    )
    if command:
        who += f" ({command.split()[0]})"
    status = f", exit code {exit_code} = 128+{number}" if exit_code is not None else ""
    evidence = ([_shown(killed[0], killed[1])] if killed is not None else []) + (
        [_shown(code[0], code[1])] if code is not None else []
    )
    return _diag(
        _SIGNAL_KINDS.get(name, "signal"),
        f"{who[0].upper()}{who[1:]} was killed by {name} (signal {number}{status})"
        + (": " if loader else ", with no Python error: ")
        + meaning,
        (),
        fix.format(pid=pid if pid is not None else "<pid>", whose=_whose(None)),
        evidence[:3],
        {"signal": name, "pid": pid, "exitcode": exit_code, "command": command},
        ctx.failure,
    )


def _negative_exit(ctx: Context) -> Diagnosis | None:
    """A child process a supervisor says ended with exit code -N (:data:`_NEGATIVE_EXIT`):
    killed by signal N."""
    hit = next(((ln, m) for ln in ctx.lines if (m := _NEGATIVE_EXIT.search(ln.text))), None)
    if hit is None:
        return None
    ln, m = hit
    num = m["num"] or m["num2"]
    name = signal_name(-int(num))
    if name is None:
        return None
    meaning, fix = _SIGNAL_HINTS.get(
        name, ("a signal from outside or from native code", "Read the process's own log")
    )
    return _diag(
        _SIGNAL_KINDS.get(name, "signal"),
        f"A child process ended by {name} (exit code -{num}): {meaning}",
        (),
        fix.format(pid="<pid>", whose=_whose(None)),
        [_shown(ln, m)],
        {"signal": name, "exitcode": -int(num)},
        ctx.failure,
    )


# A Kubernetes container's end as the job's controller or kubectl reports it:
# - Kubeflow training-operator (pkg/controller.v1/common/pod.go, events): "Error pod <pod>
#   container <c> exitCode: N terminated message: ..." and "Pod: <ns>.<pod> exited with code N";
# - ``kubectl describe pod`` (ContainerStateTerminated): "State:|Last State: Terminated" then
#   indented "Reason: Error|OOMKilled" and "Exit Code: N" (the container's status; 128+N = killed
#   by signal N, OOMKilled = the cgroup's OOM killer).
# - Docker compose (v1 and v2) when a service's container ends: "<container> exited with code N"
#   on a line of its own.
_K8S_EXIT = re.compile(
    r"\bcontainer (?P<container>\S+) exitCode: (?P<code>\d+)"
    r"|\bPod: (?P<pod>\S+) exited with code (?P<code2>\d+)"
    r"|^\s*Exit Code:\s+(?P<code3>\d+)\s*$"
    r"|^(?P<service>[A-Za-z0-9][\w.-]*) exited with code (?P<code4>\d+)\s*$"
)
_K8S_TERMINATED = re.compile(r"^\s*(?:Last )?State:\s+Terminated\b")
_K8S_REASON = re.compile(r"^\s*Reason:\s+(?P<reason>\w+)")


def _k8s_exit(ctx: Context) -> Diagnosis | None:
    """A container that ended non-zero as Kubernetes or compose reports it (:data:`_K8S_EXIT`),
    when no launcher named a worker: OOMKilled -> oom_killed, 128+N -> the signal's kind, else
    exit_code."""
    if _failed_worker(ctx)[0] is not None:
        return None
    for ln in ctx.lines:
        m = _K8S_EXIT.search(ln.text)
        if m is None:
            continue
        block = ctx.lines[max(0, ln.index - 6) : ln.index + 4]
        if m["code3"] and not any(_K8S_TERMINATED.match(x.text) for x in block):
            continue  # "Exit Code:" outside a terminated container state
        code = int(m["code"] or m["code2"] or m["code3"] or m["code4"])
        if code == 0:
            continue
        reason = next((r["reason"] for x in block if (r := _K8S_REASON.match(x.text))), None)
        who = (
            f"container {m['container'] or m['service']}"
            if m["container"] or m["service"]
            else f"pod {m['pod']}"
            if m["pod"]
            else "the container"
        )
        by = "compose" if m["service"] else "Kubernetes"
        facts: dict[str, FactValue | None] = {
            "exitcode": code,
            "reason": reason,
            "container": m["container"] or m["service"],
            "pod": m["pod"],
        }
        evidence = [
            x.raw for x in block if _K8S_TERMINATED.match(x.text) or _K8S_REASON.match(x.text)
        ][:2] + [_shown(ln, m)]
        # the controller's other report of the same end ("Pod: ... exited with code N")
        evidence += [
            _shown(x, o)
            for x in ctx.lines[ln.index + 1 :]
            if (o := _K8S_EXIT.search(x.text))
            and not o["code3"]
            and int(o["code"] or o["code2"]) == code
        ][:1]
        if reason == "OOMKilled":
            return _diag(
                "oom_killed",
                f"{by}: {who} was OOMKilled (exit code {code}): the container used more "
                "memory than its limit",
                (),
                "Raise the container's memory limit or lower its memory use (fewer "
                "DataLoader workers, smaller batches)",
                evidence,
                {**facts, "scope": "container"},
                ctx.failure,
            )
        name = _CODE_SIGNALS.get(code) or (signal_name(128 - code) if 128 < code < 160 else None)
        if name is not None:
            meaning, fix = _SIGNAL_HINTS.get(
                name, ("a signal from outside or from native code", "Read the pod's own log")
            )
            return _diag(
                _SIGNAL_KINDS.get(name, "signal"),
                f"{by}: {who} was killed by {name} (exit code {code} = 128+"
                f"{code - 128}, reason {reason or 'not given'}): {meaning}",
                (),
                fix.format(pid="<pid>", whose=_whose(None)),
                evidence,
                {**facts, "signal": name},
                ctx.failure,
            )
        return _diag(
            "exit_code",
            f"{by}: {who} exited with code {code}"
            + (f" (reason {reason})" if reason else "")
            + ", no reason in this log: the "
            "training script itself failed",
            (),
            "Read the container's own log for its traceback ("
            + (
                "docker compose logs <service>"
                if m["service"]
                else "kubectl logs <pod> -c <container>, --previous after a restart"
            )
            + ")",
            evidence,
            facts,
            ctx.failure,
        )
    return None


_OOM = re.compile(
    r"(?P<cg>Memory cgroup )?[Oo]ut of memory: Kill(?:ed)? process (?P<pid>\d+) \((?P<comm>[^)]*)\)"
    r"|oom-kill:constraint=(?P<constraint>\w+).*?\bpid=(?P<pid2>\d+)"
    r"|\"?OOMKilled\"?\s*[:=]?\s*true|\bReason:\s+OOMKilled\b"
    r"|oom[-_]kill events?\b|\binvoked oom-killer\b",
    re.I,
)


def _oom_killed(ctx: Context) -> Diagnosis | None:
    """A worker killed by SIGKILL, and the text also holds the OOM killer's own record."""
    root, _ = _failed_worker(ctx)
    if root is None or root.signal != "SIGKILL":
        return None
    hits = [(ln, m) for ln in ctx.lines if (m := _OOM.search(ln.text))]
    if not hits:
        return None
    pids = [int(p) for _, m in hits if (p := m["pid"] or m["pid2"])]
    pid = root.pid if root.pid in pids else pids[0] if pids else root.pid
    first = hits[0][1]
    text = first.group(0)
    if "oom" in text.lower() and "event" in text.lower():
        scope = "slurm"
    elif (
        first["cg"]
        or (first["constraint"] or "").upper() == "CONSTRAINT_MEMCG"
        or "OOMKilled" in text
    ):
        scope = "container"
    else:
        scope = "host"
    limit = {
        "host": "the host's RAM",
        "container": "the container's (cgroup's) memory limit",
        "slurm": "the job's Slurm memory request",
    }[scope]
    who = rank_and_place(root) if root.rank is not None else f"pid {root.pid}"
    return _diag(
        "oom_killed",
        f"{who} was killed by the kernel OOM killer (SIGKILL, pid {pid}): the processes used "
        f"more memory than {limit}",
        (root.rank,) if root.rank is not None else (),
        "Lower host memory use (fewer DataLoader workers or ranks per node, load checkpoints "
        "with low_cpu_mem_usage / mmap) or raise the memory limit",
        [_shown(ln, m) for ln, m in hits[:2]] + [e for e in root.lines if "exitcode" in e][:1],
        {"pid": pid, "scope": scope, "rank": root.rank, "exitcode": root.exitcode},
        ctx.failure,
    )


# --------------------------------------------------------------------------------------------
# A Python exception in a rank.


# torch.multiprocessing.spawn's wrapper (spawn.py ``ProcessContext.join``): the parent raises
# ``Exception(msg)`` (torch < 1.8) or ``ProcessRaisedException(msg)`` whose message starts on
# the next line: "\n\n-- Process N terminated with the following error:\n" + the child's
# traceback. The parent's exception line is never the root: the child's error under it is.
_SPAWN_WRAPPER = re.compile(r"^-- Process \d+ terminated with the following error:")


def _spawn_wrapper(lines: Sequence[Line], ln: Line) -> bool:
    """Whether exception line ``ln`` is mp.spawn's wrapper (:data:`_SPAWN_WRAPPER` follows)."""
    after = [x for x in lines[ln.index + 1 : ln.index + 4] if x.text.strip()]
    return bool(after) and _SPAWN_WRAPPER.match(after[0].text.strip()) is not None


# A traceback frame: ``  File "/path/x.py", line 12, in fn`` (CPython ``traceback``).
_FRAME = re.compile(r'^\s+File "[^"]+", line \d+, in \S')


# IPython's traceback frames (``IPython/core/ultratb.py``): the current line's arrow
# (``---> 35 cluster = ...``, also without its number), ``<ipython-input-1-48e0> in <module>``,
# ``/path/x.py in fn(self, a)``.
_IPYTHON_FRAME = re.compile(r"^\s*-{2,}>\s|^<ipython-input-[\w-]+> in \S|^/\S+\.py in \w+\(")


# rich's traceback (``rich/traceback.py``): the frames in a box closed by "╰───╯", then the
# exception line on its own, ``<type>: <value>`` (any type name, ``Exception`` itself too).
_RICH_BOX_END = re.compile(r"^\s*╰─+╯\s*$")
_RICH_EXCEPTION = re.compile(
    r"^(?:[A-Za-z_]\w*\.)*(?:[A-Z]\w*)?(?:Error|Exception|Interrupt|Exit)(?::\s+\S.*|:?\s*)$"
)


# A final exception line in its strict form, at the start of the line: a dotted name ending in
# Error/Exception (CPython's ``traceback.format_exception_only``: ``<qualname>: <str(exc)>``).
# Used where no ``Traceback`` header vouches for the line (a paste cut mid-stack, interleaved
# ranks), so a log line such as ``ERROR: ...`` or ``Warning: ...`` never passes.
_STRICT_EXCEPTION = re.compile(
    r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)(?::\s+\S.*|:?\s*)$"
)
# How far (lines) a frame may be from a loose exception line that it vouches for.
_NEAR = 4


def _cut(text: str) -> bool:
    """Whether ``text`` is a name cut short rather than an exception line: no message, and its
    last dotted part starts lowercase where a class name would ("torch.distr", "torch": a
    paste that stopped inside ``torch.distributed.elastic...ChildFailedError``)."""
    return ":" not in text and text.rsplit(".", 1)[-1][:1].islower()


def _rank_exceptions(lines: Sequence[Line]) -> list[tuple[int | None, Line]]:
    """Final exception lines of the Python tracebacks printed by ranks.

    A traceback is opened by its ``Traceback (most recent call last):`` header, or, when a paste
    starts mid-stack (header cut off), by its ``File "...", line N, in f`` frames; its exception
    line is the first unindented line after the frames (strict form
    :data:`_STRICT_EXCEPTION` when no header was seen). When ranks' tracebacks are interleaved
    line by line (several processes writing to one stream), a rank's exception line can land
    away from its frames: a line of the strict form counts when a frame is within
    :data:`_NEAR` lines of it, or a rank prefix names who printed it. Used only when no
    traceback parsed in order."""
    found: list[tuple[int | None, Line]] = []
    in_tb: dict[tuple[int | None, int | None], str] = {}
    for ln in lines:
        who = (ln.rank, ln.local_rank)
        if ln.text.startswith(
            ("Traceback (most recent call last)", "Original Traceback (most recent call last)")
        ):
            in_tb[who] = "header"
        elif _FRAME.match(ln.text):
            if not in_tb.get(who):
                in_tb[who] = "frames"
        elif in_tb.get(who) and ln.text and not ln.text[0].isspace():
            form = (
                EXCEPTION_LINE
                if in_tb[who] == "header" or who != (None, None)
                else _STRICT_EXCEPTION
            )
            if form.match(ln.text) and not ln.text.startswith("File ") and not _cut(ln.text):
                found.append((ln.rank, ln))
                in_tb[who] = ""
            elif not ln.text.startswith(("File ", "^", "~")):
                in_tb[who] = ""
    if found:
        return found
    frames = [ln.index for ln in lines if _FRAME.match(ln.text) or _IPYTHON_FRAME.match(ln.text)]
    boxes = {ln.index for ln in lines if _RICH_BOX_END.match(ln.text)}
    for ln in lines:
        after_box = ln.index - 1 in boxes and _RICH_EXCEPTION.match(ln.text) is not None
        if not after_box and (not ln.text[:1].strip() or not _STRICT_EXCEPTION.match(ln.text)):
            continue
        if after_box:
            found.append((ln.rank, ln))
            continue
        if ln.rank is not None or any(abs(i - ln.index) <= _NEAR for i in frames):
            found.append((ln.rank, ln))
    return found


# A worker's final exception line ("RuntimeError: ...") on its own: strict, a dotted name
# ending in Error/Exception and a message or nothing.
# May follow a prefix the normaliser could not tell from text (a pdsh host tag on a two-line
# paste, "Got the error:").
_BARE_EXCEPTION = re.compile(
    r"(?:^|(?<=\s))(?P<exc>(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)(?::\s+\S.*)?)$"
)
# Where the launcher reports the worker's exit.
_EXIT_REPORT = re.compile(
    r"failed \(exitcode: -?\d+\) local_rank:|Child process \d+ \(local_rank \d+\) FAILED"
    r"|^\s*exitcode\s*:\s*-?\d+|ChildFailedError|CalledProcessError|\bFAILED\s*$"
)


def _bare_exception(
    lines: Sequence[Line], failed: ProcessFailure | None
) -> tuple[int | None, Line] | None:
    """A worker's final exception line printed without its ``Traceback`` header above it (a
    paste cut at the top), just before the launcher reports that worker's non-zero exit: the
    exception that explains the exit code. None when no worker exit is reported, the worker
    died of a signal, or the line only wraps another rule's error."""
    if failed is None or failed.exitcode is None or failed.exitcode <= 0:
        return None
    end = next((ln.index for ln in lines if _EXIT_REPORT.search(ln.text)), None)
    if end is None:
        return None
    for ln in reversed(lines[:end]):
        m = _BARE_EXCEPTION.search(ln.text.strip())
        if ln.text[:1].isspace() or m is None:
            continue
        text = m["exc"]
        if _WRAPS.search(text) or not_a_failure(text):
            continue
        return ln.rank, replace(ln, text=text)
    return None


# An exception line quoted on its own (an issue's one-line paste of the error): the class named
# with its module path, as Python prints an exception of a library ("jaxlib.xla_extension.
# XlaRuntimeError: INTERNAL: ..."), at the start of the line, with a message.
_LONE_EXCEPTION = re.compile(r"^(?:[a-z_]\w*\.)+[A-Z]\w*(?:Error|Exception): +\S")


def _lone_exception(lines: Sequence[Line]) -> tuple[int | None, Line] | None:
    """The first fully qualified exception line with a message, when the text has no
    traceback and no launcher report of a worker's exit (:func:`_bare_exception` needs
    one); None when it only wraps another rule's error."""
    for ln in lines:
        if (
            _LONE_EXCEPTION.match(ln.text)
            and not _WRAPS.search(ln.text)
            and not not_a_failure(ln.text)
            and _launcher_report(lines, ln) is None
        ):
            return ln.rank, ln
    return None


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
    entry = next(
        (
            e
            for e in entries
            if e.exception and not _WRAPS.search(e.exception) and not not_a_failure(e.exception)
        ),
        None,
    )
    if entry is not None and entry.exception:
        rank, line, evidence = entry.rank, entry.exception, entry.exception
    elif root is not None and root.signal is not None:
        return None
    else:
        printed = [
            (r, ln)
            for r, ln in _rank_exceptions(ctx.lines)
            if not _WRAPS.search(ln.text)
            and not not_a_failure(ln.text)
            and not _spawn_wrapper(ctx.lines, ln)
        ]
        if root is not None:  # exit code without a traceback: look for that rank's own
            printed = [(r, ln) for r, ln in printed if r in (None, root.rank)]
        printed = [(r, ln) for r, ln in printed if _launcher_report(ctx.lines, ln) is None]
        if not printed:
            failed, _ = _failed_worker(ctx)
            bare = _bare_exception(ctx.lines, failed) or _lone_exception(ctx.lines)
            if bare is None:
                return None
            printed, root = [bare], failed
        rank, found = printed[0]
        entry = root
        rank = root.rank if rank is None and root is not None else rank
        line, evidence = found.text.strip(), found.raw
    m = EXCEPTION_LINE.match(line)
    etype = m["type"] if m else None
    on = f"rank {rank}" if rank is not None else "a rank" if failure else "the process"
    where = f" ({place_of(entry)})" if entry and entry.rank == rank and place_of(entry) else ""
    short = (etype or "").rsplit(".", 1)[-1] or None
    return _diag(
        "exception",
        f"{on}{where} raised {line}",
        (rank,) if rank is not None else (),
        f"Fix the {short or 'error'} in the training script: see {on}'s traceback",
        [evidence],
        {
            "rank": rank,
            "exception": short,
            "exception_type": etype,
            "message": (m["msg"] or "") if m else line,
            "pid": entry.pid if entry else None,
            "exitcode": entry.exitcode if entry else None,
            "host": entry.host if entry else None,
        },
        failure,
    )


Rule = Callable[[Context], "Diagnosis | Iterable[Diagnosis] | None"]

#: The rules of this module (the engine ranks what they find).
RULES: tuple[Rule, ...] = (
    _shm_exhausted,
    _port_in_use,
    _store_unresolved,
    _rendezvous,
    _elastic_store_wait,
    _agent_signal,
    _oom_killed,
    _exception,
    _signal,
    _fatal_signal,
    _shell_signal,
    _k8s_exit,
)

#: What lines each rule reads (the engine's pre-filter; see :class:`Needs`).
#: Its own: the failure words less PyTorch's chatter (``torch``, ``c10d``, ``process``,
#: ``device``, ``warning``: what this module matches holds another: ``error``, ``signal``,
#: ``socket``, ``elastic``, ``file "``...), with the launch command (:data:`_LAUNCH_CMD`); the
#: first line :data:`_TORCH` matches (whether the text is PyTorch's at all). Never NCCL's INFO
#: lines.
NEEDS = {
    rule: Needs(
        own_words(added=("torchrun", "torch.distributed.run", "torch.distributed.launch")),
        alone=True,
        unless=(NCCL_INFO,),
        first=("(?i)" + _TORCH.pattern,),
    )
    for rule in RULES
}
