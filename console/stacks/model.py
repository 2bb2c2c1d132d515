"""A job's Python stacks as typed records, read once from what each node's script printed.

The node document comes from ``remote/agent/stacks.py`` (format 1, see its docstring); each
process's ``threads`` is py-spy's ``dump --json`` output (py-spy 0.4: a list of threads, each
``{thread_name, os_thread_id, active, owns_gil, frames: [{name, filename, short_filename,
module, line, ...}]}``, innermost frame first).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from console.stacks.frtrace import FrTrace

Role = Literal["rank", "agent", "child", "other"]
"""What a process is to torchrun: a rank (a training process), torchrun's elastic agent, a
rank's child (a DataLoader worker), anything else (a shell, the gang supervisor)."""

_ROLES: tuple[Role, ...] = ("rank", "agent", "child", "other")


@dataclass(frozen=True)
class Frame:
    """One Python frame (py-spy's ``frames[i]``).

    Attributes:
        name: the function (``Class.method`` from Python 3.11 on).
        filename: the file as the process sees it.
        short: py-spy's ``short_filename`` (the path under its package root).
        line: the line being run, ``None`` if py-spy could not tell.
    """

    name: str
    filename: str
    short: str
    line: int | None

    def where(self) -> str:
        """``name (short:line)``, as py-spy prints a frame."""
        at = f"{self.short}:{self.line}" if self.line is not None else self.short
        return f"{self.name} ({at})"


@dataclass(frozen=True)
class ThreadStack:
    """One thread of a process.

    Attributes:
        name: its Python name (``MainThread``), ``None`` when py-spy could not read it.
        os_id: the OS thread id.
        active: py-spy saw it running (not idle in a wait).
        frames: innermost first.
    """

    name: str | None
    os_id: int | None
    active: bool
    frames: tuple[Frame, ...]


@dataclass(frozen=True)
class FrEntry:
    """One collective of a rank's Flight Recorder buffer (PyTorch's dump entry).

    Attributes:
        seq: ``collective_seq_id`` in its process group (``p2p_seq_id`` for send/recv).
        op: ``profiling_name`` (``nccl:all_reduce``).
        state: ``scheduled``, ``started`` or ``completed``.
        pg: the process group's id (``"0"``: the default group).
        p2p: a send/recv (numbered apart from the collectives).
        where: the innermost frame outside torch.distributed that called it.
    """

    seq: int | None
    op: str
    state: str
    pg: str
    p2p: bool
    where: str | None


@dataclass(frozen=True)
class FlightRecord:
    """What a rank's Flight Recorder gave (``remote/agent/stacks.py --flight-recorder``).

    Attributes:
        error: why there is no dump (no dump pipe: not an NCCL process group...).
        status: process group -> (last enqueued, last started, last completed) collective.
        entries: the newest collectives, oldest first.
        source: ``pipe`` (asked for now through the rank's dump pipe) or ``file`` (written
            before: by the NCCL watchdog when a collective timed out, or by the job).
        age_s: how old the dump was when read, in seconds.
    """

    error: str | None = None
    status: tuple[tuple[str, int, int, int], ...] = ()
    entries: tuple[FrEntry, ...] = ()
    source: str | None = None
    age_s: float | None = None


@dataclass(frozen=True)
class ProcessStack:
    """One process of a node, with its stacks (or why there are none).

    Attributes:
        node_rank, host: the job's node it runs on.
        pid, ppid: in the PID namespace it was read in (the container's for Docker jobs).
        role: see :data:`Role`.
        rank: the global rank (``RANK``) of a rank; for a child, its rank's.
        local_rank: ``LOCAL_RANK`` of a rank.
        world_size: ``WORLD_SIZE`` of a rank.
        gpu: the host GPU index of a rank (the node's GPUs by local rank), when known.
        cmdline: its argv.
        age_s: seconds since it started.
        threads: its threads (main first), ``None`` when not read (``error`` says why; an
            ``other`` process is never read).
        error: why py-spy could not read it.
        flight: its Flight Recorder (ranks, when asked), ``None`` when not asked.
        exe: a rank's Python, as a path in its own file system (its absolute argv[0], else
            ``/proc/PID/exe``).
    """

    node_rank: int
    host: str
    pid: int
    ppid: int
    role: Role
    rank: int | None
    local_rank: int | None
    world_size: int | None
    gpu: int | None
    cmdline: tuple[str, ...]
    age_s: float | None
    threads: tuple[ThreadStack, ...] | None
    error: str | None
    flight: FlightRecord | None = None
    exe: str | None = None

    @property
    def tag(self) -> str:
        """``[nN rR]`` as the log panes tag a rank's lines (``[nN]`` without a rank)."""
        return (
            f"[n{self.node_rank} r{self.rank}]" if self.rank is not None else f"[n{self.node_rank}]"
        )

    @property
    def main(self) -> ThreadStack | None:
        """The main thread (``MainThread``, else the thread whose id is the pid, else the
        first)."""
        if not self.threads:
            return None
        for t in self.threads:
            if t.name == "MainThread":
                return t
        return next((t for t in self.threads if t.os_id == self.pid), self.threads[0])


@dataclass(frozen=True)
class NodeCapture:
    """What one node gave: its processes, or why nothing could be read there.

    Attributes:
        node_rank, host: the node.
        processes: every process seen (ranks, agents, children, others).
        error: the node could not be read at all (host down, not running, no py-spy).
        py_spy: py-spy's version as it printed it.
        ptrace_scope: the host's ``kernel.yama.ptrace_scope`` (``None``: no Yama).
        uid: the user the script ran as.
        dumps: each rank's whole Flight Recorder dump (PyTorch's pickle), for PyTorch's
            analyser; not saved with the capture.
    """

    node_rank: int
    host: str
    processes: tuple[ProcessStack, ...] = ()
    error: str | None = None
    py_spy: str | None = None
    ptrace_scope: int | None = None
    uid: int | None = None
    dumps: Mapping[int, bytes] = field(default_factory=dict, repr=False, compare=False)

    @property
    def ranks(self) -> tuple[ProcessStack, ...]:
        """The node's ranks, by rank."""
        return tuple(
            sorted((p for p in self.processes if p.role == "rank"), key=lambda p: p.rank or 0)
        )


@dataclass
class Capture:
    """One ``stacks`` of a job: every node asked at once.

    Attributes:
        job_id: the job.
        taken_at: when (Unix s, this machine's clock).
        nodes: one per node asked, by node rank.
        native: native frames were asked for (py-spy ``--native``).
        whole: every node and rank of the job was asked for (not ``--node``/``--rank``): only
            then are ranks that no node showed missing.
        fr_trace: what PyTorch's Flight Recorder analyser said about the ranks' dumps, or why
            it did not run; ``None`` when no rank gave a dump.
    """

    job_id: str
    taken_at: float
    nodes: list[NodeCapture] = field(default_factory=list)
    native: bool = False
    whole: bool = True
    fr_trace: FrTrace | None = None

    def processes(self, role: Role | None = None) -> list[ProcessStack]:
        """Every process of every node (of ``role`` when given), ranks by rank."""
        ps = [p for n in self.nodes for p in n.processes if role is None or p.role == role]
        return sorted(
            ps, key=lambda p: (p.rank if p.rank is not None else 1 << 30, p.node_rank, p.pid)
        )

    def to_json(self) -> dict[str, Any]:
        """The capture as JSON data (``stacks --json``, the saved last capture)."""
        from dataclasses import asdict

        data = {"format": 1, **asdict(self)}
        for n in data["nodes"]:
            n.pop("dumps", None)  # bytes: for the analyser only
        return data

    def dumps(self) -> dict[int, bytes]:
        """Every rank's whole Flight Recorder dump, by global rank."""
        return {r: d for n in self.nodes for r, d in n.dumps.items()}


def _int(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _frames(raw: object) -> tuple[Frame, ...]:
    out = []
    for f in raw if isinstance(raw, list) else []:
        if not isinstance(f, Mapping):
            continue
        filename = str(f.get("filename") or "?")
        out.append(
            Frame(
                name=str(f.get("name") or "?"),
                filename=filename,
                short=str(f.get("short_filename") or filename.rsplit("/", 1)[-1]),
                line=_int(f.get("line")),
            )
        )
    return tuple(out)


def _threads(raw: object) -> tuple[ThreadStack, ...] | None:
    if not isinstance(raw, list):
        return None
    threads = [
        ThreadStack(
            name=str(t["thread_name"]) if t.get("thread_name") is not None else None,
            os_id=_int(t.get("os_thread_id")),
            active=bool(t.get("active")),
            frames=_frames(t.get("frames")),
        )
        for t in raw
        if isinstance(t, Mapping)
    ]
    return tuple(threads)


def _flight(raw: object) -> FlightRecord | None:
    """A rank's ``flight_recorder`` of the node document."""
    if not isinstance(raw, Mapping):
        return None
    if raw.get("error"):
        return FlightRecord(error=str(raw["error"]))
    summary = raw.get("summary")
    if not isinstance(summary, Mapping):
        return FlightRecord(error="no Flight Recorder summary")
    status = []
    for pg, st in (summary.get("pg_status") or {}).items():
        if isinstance(st, Mapping):
            status.append(
                (
                    str(pg),
                    _int(st.get("last_enqueued_collective")) or 0,
                    _int(st.get("last_started_collective")) or 0,
                    _int(st.get("last_completed_collective")) or 0,
                )
            )
    entries = tuple(
        FrEntry(
            seq=_int(e.get("p2p_seq") if e.get("p2p") else e.get("seq")),
            op=str(e.get("op") or "?"),
            state=str(e.get("state") or "?"),
            pg=str(e.get("pg") or ""),
            p2p=bool(e.get("p2p")),
            where=str(e["where"]) if e.get("where") else None,
        )
        for e in summary.get("entries") or []
        if isinstance(e, Mapping)
    )
    age = raw.get("age_s")
    return FlightRecord(
        status=tuple(status),
        entries=entries,
        source=str(raw["source"]) if raw.get("source") else None,
        age_s=float(age) if isinstance(age, int | float) else None,
    )


def _dump_bytes(raw: object) -> bytes | None:
    """The whole dump a rank's ``flight_recorder`` carries (zlib, base64), ``None`` if none
    or damaged."""
    import base64
    import binascii
    import zlib

    if not isinstance(raw, Mapping) or not isinstance(raw.get("dump_zlib_b64"), str):
        return None
    try:
        return zlib.decompress(base64.b64decode(raw["dump_zlib_b64"], validate=True))
    except (binascii.Error, ValueError, zlib.error):
        return None


def parse_node(
    node_rank: int, host: str, doc: Mapping[str, Any], gpus: Sequence[int] = ()
) -> NodeCapture:
    """A node's document (``remote/agent/stacks.py``, format 1) as a :class:`NodeCapture`;
    ``gpus``: the node's GPU indices, by local rank (its ``io.gpuconsole.gpus`` label)."""
    procs = []
    dumps: dict[int, bytes] = {}
    for p in doc.get("processes") or []:
        if not isinstance(p, Mapping) or _int(p.get("pid")) is None:
            continue
        role: Role = p["role"] if p.get("role") in _ROLES else "other"
        local = _int(p.get("local_rank"))
        rank = _int(p.get("rank")) if role == "rank" else _int(p.get("parent_rank"))
        procs.append(
            ProcessStack(
                node_rank=node_rank,
                host=host,
                pid=int(p["pid"]),
                ppid=_int(p.get("ppid")) or 0,
                role=role,
                rank=rank if role in ("rank", "child") else None,
                local_rank=local,
                world_size=_int(p.get("world_size")),
                gpu=gpus[local]
                if role == "rank" and local is not None and local < len(gpus)
                else None,
                cmdline=tuple(str(a) for a in p.get("cmdline") or ()),
                age_s=float(p["age_s"]) if isinstance(p.get("age_s"), int | float) else None,
                threads=_threads(p.get("threads")),
                error=str(p["error"]) if p.get("error") else None,
                flight=_flight(p.get("flight_recorder")) if role == "rank" else None,
                exe=str(p["exe"]) if role == "rank" and p.get("exe") else None,
            )
        )
        data = _dump_bytes(p.get("flight_recorder")) if role == "rank" else None
        if data is not None and rank is not None:
            dumps[rank] = data
    return NodeCapture(
        node_rank=node_rank,
        host=host,
        processes=tuple(procs),
        error=str(doc["error"]) if doc.get("error") else None,
        py_spy=str(doc["py_spy"]) if doc.get("py_spy") else None,
        ptrace_scope=_int(doc.get("ptrace_scope")),
        uid=_int(doc.get("uid")),
        dumps=dumps,
    )


def capture_from_json(data: Mapping[str, Any]) -> Capture:
    """A capture saved by :meth:`Capture.to_json`."""
    from console.stacks.frtrace import from_json as fr_from_json

    nodes = []
    for n in data.get("nodes") or []:
        procs = []
        for p in n.get("processes") or []:
            threads = None
            if p.get("threads") is not None:
                threads = tuple(
                    ThreadStack(
                        t.get("name"),
                        t.get("os_id"),
                        bool(t.get("active")),
                        tuple(Frame(**f) for f in t.get("frames") or ()),
                    )
                    for t in p["threads"]
                )
            flight = p.get("flight")
            if isinstance(flight, Mapping):
                flight = FlightRecord(
                    error=flight.get("error"),
                    status=tuple(tuple(s) for s in flight.get("status") or ()),
                    entries=tuple(FrEntry(**e) for e in flight.get("entries") or ()),
                    source=flight.get("source"),
                    age_s=flight.get("age_s"),
                )
            procs.append(
                ProcessStack(
                    **{
                        **p,
                        "cmdline": tuple(p.get("cmdline") or ()),
                        "threads": threads,
                        "flight": flight,
                    }
                )
            )
        nodes.append(NodeCapture(**{**n, "processes": tuple(procs)}))
    return Capture(
        job_id=str(data["job_id"]),
        taken_at=float(data["taken_at"]),
        nodes=nodes,
        native=bool(data.get("native")),
        whole=bool(data.get("whole", True)),
        fr_trace=fr_from_json(data.get("fr_trace")),
    )
