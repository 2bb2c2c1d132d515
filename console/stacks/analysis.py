"""A capture read as a person would: ranks with the same stack folded into one group, the odd
ones out first and named as the likely cause, torchrun's agents and the ranks' children apart.

The collectives are ``torch.distributed``'s (``torch/distributed/distributed_c10d.py``: the
functions a rank calls and then waits in until every rank of the group has called it too);
a rank that is not in the collective the others wait in holds them all.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from console.stacks.model import Capture, Frame, FrEntry, ProcessStack

#: torch.distributed's collectives and point-to-point calls (distributed_c10d.py's public
#: functions) and the waits on their work objects
COLLECTIVES = frozenset(
    {
        "all_reduce",
        "all_reduce_coalesced",
        "all_gather",
        "all_gather_into_tensor",
        "all_gather_object",
        "all_gather_coalesced",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "all_to_all",
        "all_to_all_single",
        "broadcast",
        "broadcast_object_list",
        "reduce",
        "gather",
        "gather_object",
        "scatter",
        "scatter_object_list",
        "barrier",
        "monitored_barrier",
        "send",
        "recv",
        "isend",
        "irecv",
        "batch_isend_irecv",
        "send_object_list",
        "recv_object_list",
    }
)
#: at most this many odd groups are named (the largest of them; the rest are still listed)
MAX_FINDINGS = 20
_LIBRARY_MARKS = ("/site-packages/", "/dist-packages/", "/lib/python3", "<frozen ")
_WRAPPERS = frozenset({"wrapper", "_fn", "inner", "decorate_context", "wrapped_fn", "log_wrapper"})
#: packages a pasted dump names by their short path (``torch/...``): not the job's own code
_PACKAGES = frozenset(
    {
        "torch",
        "deepspeed",
        "transformers",
        "accelerate",
        "apex",
        "lightning",
        "pytorch_lightning",
        "triton",
        "numpy",
        "datasets",
        "vllm",
        "peft",
        "trl",
        "fairscale",
        "torchtitan",
    }
)


def _root(frame: Frame) -> str:
    """The top-level module a frame's file belongs to, from a short path (``torch/x.py``,
    ``threading.py``); "" for a full path."""
    if frame.filename.startswith("/"):
        return ""
    head = frame.filename.split("/", 1)[0]
    return head[:-3] if head.endswith(".py") else head


def is_stdlib(frame: Frame) -> bool:
    """Whether a frame is in Python's standard library (a wait in ``threading``,
    ``queue``, ``selectors``...)."""
    if frame.filename.startswith("/"):
        return "/lib/python3" in frame.filename and "-packages/" not in frame.filename
    return _root(frame) in sys.stdlib_module_names or frame.filename.startswith("<frozen ")


def is_library(frame: Frame) -> bool:
    """Whether a frame is in an installed package or the standard library (not the job's
    own code): by its full path, or a pasted dump's short path (:data:`_PACKAGES`)."""
    if any(m in frame.filename for m in _LIBRARY_MARKS):
        return True
    return is_stdlib(frame) or _root(frame) in _PACKAGES


def collective_of(frames: Sequence[Frame]) -> Frame | None:
    """The innermost frame that is one of torch.distributed's collectives, if any."""
    for f in frames:
        base = f.name.rsplit(".", 1)[-1]
        if base in COLLECTIVES and "torch/distributed/" in f.filename:
            return f
    return None


def ranks_text(ranks: Iterable[int]) -> str:
    """``0, 2-7``: sorted, runs folded."""
    rs = sorted(set(ranks))
    parts: list[str] = []
    i = 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        parts.append(str(rs[i]) if i == j else f"{rs[i]}-{rs[j]}")
        i = j + 1
    return ", ".join(parts)


def who(ranks: Sequence[int]) -> str:
    """``rank 1`` / ``ranks 0, 2-7`` / ``no rank`` (the verb's number follows: see
    :func:`_is`)."""
    if not ranks:
        return "no rank"
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {ranks_text(ranks)}"


def _is(ranks: Sequence[object]) -> str:
    return "is" if len(ranks) == 1 else "are"


def members(processes: Sequence[ProcessStack]) -> str:
    """Who a group is: its ranks when every member's is known (``ranks 0, 2-3``), else its
    processes by pid (``3 processes (pids 33550, 33551, 33552)``, ``process 688514``)."""
    ranks = [p.rank for p in processes]
    if ranks and all(r is not None for r in ranks):
        return who(sorted({r for r in ranks if r is not None}))
    pids = [str(p.pid) for p in processes if p.pid >= 0]
    if len(processes) == 1:
        return f"process {pids[0]}" if pids else "one process"
    whole = len(pids) == len(processes)  # a paste that folded N processes names one pid
    shown = f" (pids {', '.join(pids[:4])}{', ...' if len(pids) > 4 else ''})" if whole else ""
    return f"{len(processes)} processes{shown}"


def describe_frames(frames: Sequence[Frame], *, own_code: bool = True) -> str:
    """Where a stack is, in one line: the collective it waits in (else its innermost frame
    outside the standard library's waits, else its innermost frame), then up to two callers
    of the job's own code: ``in all_reduce <- train (hang.py:38) <- hang.py:50``.
    ``own_code=False`` (torchrun's agent, whose own code is a library's): the innermost frame
    and no callers."""
    if not frames:
        return "no Python frame"
    if not own_code:
        return f"in {frames[0].where()}"
    coll = collective_of(frames)
    user = [i for i, f in enumerate(frames) if not is_library(f)]
    beyond_stdlib = [i for i, f in enumerate(frames) if not is_stdlib(f)]
    if coll is not None:
        key = frames.index(coll)
        head = f"in {coll.name.rsplit('.', 1)[-1]}"
    elif beyond_stdlib:
        key = beyond_stdlib[0]
        head = f"in {frames[key].where()}"
    else:
        key = 0
        head = f"in {frames[0].where()}"
    callers = [
        frames[i] for i in user if i > key and frames[i].name.rsplit(".", 1)[-1] not in _WRAPPERS
    ]
    if not callers and coll is not None:
        callers = [f for f in frames[key + 1 :] if f.name not in _WRAPPERS][:1]
    parts = [head]
    if callers:
        parts.append(_caller(callers[0]))
        if len(callers) > 1:
            parts.append(_caller(callers[-1]))
    return " <- ".join(parts)


def _caller(f: Frame) -> str:
    """A caller as a stack line names it; a module's top level by its file and line."""
    if f.name == "<module>":
        return f"{f.short}:{f.line}" if f.line is not None else f.short
    return f.where()


@dataclass(frozen=True)
class StackGroup:
    """Processes whose main threads stand at the same frames.

    Attributes:
        processes: the members (ranks by rank).
        frames: the shared main-thread stack, innermost first.
        collective: the collective they wait in, if any.
        where: :func:`describe_frames` of the stack.
        idle: no member's main thread was running when read.
    """

    processes: tuple[ProcessStack, ...]
    frames: tuple[Frame, ...]
    collective: str | None
    where: str
    idle: bool

    @property
    def ranks(self) -> tuple[int, ...]:
        """The members' ranks."""
        return tuple(sorted({p.rank for p in self.processes if p.rank is not None}))

    def who(self) -> str:
        """Its members (:func:`members`)."""
        return members(self.processes)

    def title(self) -> str:
        """``ranks 0, 2-7 (7): in all_reduce <- ...``."""
        n = len(self.processes)
        named = self.who()
        counted = n > 1 and not named.startswith(f"{n} processes")
        return f"{named} ({n}): {self.where}" if counted else f"{named}: {self.where}"


FindingKind = Literal["outside_collective", "mismatch", "all_in_collective", "missing", "elsewhere"]
"""What a finding says: ranks not in the collective the others wait in; ranks in different
collectives; every rank in one collective at one place; ranks no node showed; ranks elsewhere
than a majority that waits in no collective."""


@dataclass(frozen=True)
class Finding:
    """A likely cause, one sentence.

    Attributes:
        kind: see :data:`FindingKind`.
        text: the sentence.
        processes: the processes it blames (none for ``missing``).
    """

    kind: FindingKind
    text: str
    processes: tuple[ProcessStack, ...] = ()

    def __str__(self) -> str:
        return self.text


@dataclass
class Analysis:
    """What a capture says (see the module docstring).

    Attributes:
        groups: the ranks' groups, the odd ones out first, the largest last.
        odd: the groups that differ from the largest one (when there are several).
        findings: the likely causes, most likely first, one sentence each.
        agents: torchrun's agents, grouped.
        children: the ranks' children (DataLoader workers), grouped.
        missing: ranks of the world size that no node showed.
        problems: one line per node or process that could not be read, naming it and why.
        world_size: from the ranks' ``WORLD_SIZE``, when they say it.
        flight: what the ranks' Flight Recorders say together (:func:`flight_recorder`).
        fr_failed: PyTorch's analyser was to run over the ranks' dumps and could not.
    """

    groups: list[StackGroup] = field(default_factory=list)
    odd: list[StackGroup] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    agents: list[StackGroup] = field(default_factory=list)
    children: list[StackGroup] = field(default_factory=list)
    missing: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    world_size: int | None = None
    flight: list[str] = field(default_factory=list)
    fr_failed: bool = False

    def summary(self) -> str:
        """One line: the first finding, else where the ranks are (an alert's detail)."""
        if self.findings:
            return self.findings[0].text
        if self.groups:
            return "; ".join(g.title() for g in self.groups[:2])
        return self.problems[0] if self.problems else "no rank was found"

    @property
    def partial(self) -> bool:
        """Some node, rank or process could not be read, or PyTorch's analyser could not run
        over the dumps that were (``stacks`` exits 3)."""
        return bool(self.problems or self.missing or self.fr_failed)


def python_frames(frames: Sequence[Frame]) -> tuple[Frame, ...]:
    """The Python frames of a stack (a ``.py`` file, or ``<frozen ...>``/``<string>``); all
    of them when it has none. With ``--native`` py-spy interleaves native frames, whose
    addresses differ from process to process (ASLR): ranks are grouped and described by
    their Python frames."""
    py = tuple(f for f in frames if f.filename.endswith(".py") or f.filename.startswith("<"))
    return py or tuple(frames)


def group(processes: Iterable[ProcessStack], *, own_code: bool = True) -> list[StackGroup]:
    """Processes folded by their main thread's Python frames (function, file, line:
    :func:`python_frames`), largest group last; processes without a stack are left out
    (``own_code``: see :func:`describe_frames`)."""
    buckets: dict[tuple[tuple[str, str, int | None], ...], list[ProcessStack]] = {}
    for p in processes:
        main = p.main
        if main is None:
            continue
        key = tuple((f.filename, f.name, f.line) for f in python_frames(main.frames))
        buckets.setdefault(key, []).append(p)
    out = []
    for members in buckets.values():
        main = members[0].main
        assert main is not None
        py = python_frames(main.frames)
        coll = collective_of(py)
        out.append(
            StackGroup(
                processes=tuple(members),
                frames=main.frames,
                collective=coll.name.rsplit(".", 1)[-1] if coll is not None else None,
                where=describe_frames(py, own_code=own_code),
                idle=not any(m.main is not None and m.main.active for m in members),
            )
        )
    out.sort(key=lambda g: (len(g.processes), g.collective is not None, -min(g.ranks or (0,))))
    return out


def _problem(p: ProcessStack) -> str:
    what = p.tag if p.role in ("rank", "child") else f"[n{p.node_rank}] {p.role}"
    return f"{what} {p.host} pid {p.pid}: {p.error}"


def analyse(capture: Capture) -> Analysis:
    """Group a capture and name its likely causes (see :class:`Analysis`)."""
    a = Analysis()
    for n in capture.nodes:
        if n.error is not None:
            a.problems.append(f"node {n.node_rank} ({n.host}): {n.error}")
    ranks = capture.processes("rank")
    for p in capture.processes():
        if p.role != "other" and p.threads is None and p.error:
            a.problems.append(_problem(p))
    sizes = {p.world_size for p in ranks if p.world_size}
    a.world_size = max(sizes) if sizes else None
    if a.world_size is not None and capture.whole:
        seen = {p.rank for p in ranks}
        a.missing = [r for r in range(a.world_size) if r not in seen]
    a.groups = group(ranks)
    a.agents = group(capture.processes("agent"), own_code=False)
    a.flight = flight_recorder(capture)
    if capture.fr_trace is not None:
        a.flight += capture.fr_trace.lines()
        a.fr_failed = capture.fr_trace.error is not None
    a.children = group(capture.processes("child"))
    if len(a.groups) > 1:
        main = a.groups[-1]
        a.odd = a.groups[:-1]
        # an odd one out is named only against a majority, or against ranks that wait in a
        # collective (two ranks in two places, neither waiting, blame neither)
        main_who = main.who()
        a.findings = [
            _finding(g, main, main_who)
            for g in a.odd[-MAX_FINDINGS:]
            if len(g.processes) < len(main.processes) or main.collective is not None
        ]
    elif len(a.groups) == 1 and a.groups[0].collective is not None and len(ranks) > 1:
        g = a.groups[0]
        everyone = (
            f"every rank read ({ranks_text(g.ranks)})"
            if len(g.ranks) == len(g.processes)
            else f"every process read ({len(g.processes)})"
        )
        a.findings.append(
            Finding(
                "all_in_collective",
                f"{everyone} is in {g.collective} at the same place: if they stay there, the "
                "collective itself is stuck (the network, NCCL, or a rank not read)",
                g.processes,
            )
        )
    if a.missing:
        a.findings.append(
            Finding(
                "missing",
                f"{who(a.missing)} of {a.world_size} {_is(a.missing)} on no node that was read "
                "(exited, or on a node that could not be read)",
            )
        )
    return a


def _finding(odd: StackGroup, main: StackGroup, main_who: str) -> Finding:
    rs, them = odd.processes, main.processes
    if main.collective is not None and odd.collective is None:
        return Finding(
            "outside_collective",
            f"{odd.who()} {_is(rs)} not in the collective ({main.collective}) that "
            f"{main_who} wait{'s' if len(them) == 1 else ''} in: {odd.where}",
            rs,
        )
    if main.collective is not None and odd.collective not in (None, main.collective):
        return Finding(
            "mismatch",
            f"mismatched collectives: {odd.who()} {_is(rs)} in {odd.collective} while "
            f"{main_who} {_is(them)} in {main.collective} ({odd.where})",
            rs,
        )
    if main.collective is None and odd.collective is not None:
        return Finding(
            "outside_collective",
            f"{main_who} {_is(them)} not in the collective ({odd.collective}) that "
            f"{odd.who()} wait{'s' if len(rs) == 1 else ''} in: {main.where}",
            them,
        )
    return Finding("elsewhere", f"{odd.who()} {_is(rs)} elsewhere than {main_who}: {odd.where}", rs)


def flight_recorder(capture: Capture) -> list[str]:
    """What the ranks' Flight Recorders say together, one line each (PyTorch's ring buffer of
    each rank's collectives: ``FrEntry``): for each process group, the collective some ranks
    entered and others never did (the ranks behind are the ones the others wait for), ranks
    that called different collectives at one sequence number (a mismatch), a collective every
    rank entered that is not completed; or that they agree; or, when no rank's buffer could be
    read, why (one line)."""
    ranks = [p for p in capture.processes("rank") if p.flight is not None]
    if not ranks:
        return []
    read = [p for p in ranks if p.flight is not None and p.flight.error is None]
    if not read:
        first = ranks[0].flight
        assert first is not None
        return [f"not read: {first.error}"]
    out: list[str] = []
    groups = sorted(_pgs(read))
    for pg in groups:
        status = {p.rank: s for p in read if p.flight for s in p.flight.status if s[0] == pg}
        if not status:
            continue
        top = max(s[1] for s in status.values())
        behind = sorted(r for r, s in status.items() if r is not None and s[1] < top)
        ahead = sorted(r for r, s in status.items() if r is not None and s[1] == top)
        entry = _entry(read, pg, top)
        op = f" ({entry.op}{', ' + entry.where if entry.where else ''})" if entry else ""
        if behind:
            last = {status[r][1] for r in behind}
            out.append(
                f"process group {pg}: {who(ahead)} entered collective {top}{op} that "
                f"{who(behind)} never did (last entered: {', '.join(map(str, sorted(last)))})"
            )
        out += _mismatches(read, pg)
        if not behind:
            # not completed by its group's status and by its entry's state (pg_status lags
            # the NCCL watchdog's polling; gloo leaves every entry "scheduled")
            waiting = sorted(
                r
                for r, s in status.items()
                if r is not None
                and s[3] < top
                and (e := _entry([p for p in read if p.rank == r], pg, top)) is not None
                and e.state != "completed"
            )
            if waiting:
                out.append(
                    f"process group {pg}: every rank read entered collective {top}{op}; "
                    f"{who(waiting)} {_is(waiting)} still in it: "
                    "if it stays so, the collective itself waits (the network, NCCL, a rank "
                    "not read)"
                )
    if not out:
        out.append(
            f"the {len(read)} rank(s) read entered and completed the same collectives: no "
            "divergence in their buffers"
        )
    earlier = sorted(
        (p for p in read if p.flight is not None and p.flight.source == "file"),
        key=lambda p: p.rank or 0,
    )
    if earlier:
        ages = [p.flight.age_s for p in earlier if p.flight and p.flight.age_s is not None]
        age = f", {_age(max(ages))} old" if ages else ""
        out.append(
            f"{who([p.rank for p in earlier if p.rank is not None])}: no dump pipe, so the dump "
            f"read is one written before{age} (by the NCCL watchdog on a timeout, or the job)"
        )
    errors = [(p, p.flight.error) for p in ranks if p.flight is not None and p.flight.error]
    if errors:
        named = who(sorted(p.rank for p, _ in errors if p.rank is not None))
        out.append(f"not read on {named}: {errors[0][1]}")
    return out


def _age(seconds: float) -> str:
    """``42 s``, ``17 min``, ``3 h``."""
    s = max(0, int(seconds))
    return f"{s} s" if s < 120 else f"{s // 60} min" if s < 7200 else f"{s // 3600} h"


def _pgs(read: Sequence[ProcessStack]) -> set[str]:
    return {s[0] for p in read if p.flight is not None for s in p.flight.status}


def _entry(read: Sequence[ProcessStack], pg: str, seq: int) -> FrEntry | None:
    for p in read:
        assert p.flight is not None
        for e in p.flight.entries:
            if e.pg == pg and not e.p2p and e.seq == seq:
                return e
    return None


def _mismatches(read: Sequence[ProcessStack], pg: str) -> list[str]:
    """Sequence numbers of ``pg`` at which ranks' entries name different collectives."""
    ops: dict[int, dict[str, list[int]]] = {}
    for p in read:
        assert p.flight is not None
        for e in p.flight.entries:
            if e.pg == pg and not e.p2p and e.seq is not None and p.rank is not None:
                ops.setdefault(e.seq, {}).setdefault(e.op, []).append(p.rank)
    out = []
    for seq in sorted(ops):
        if len(ops[seq]) > 1:
            named = "; ".join(f"{who(sorted(rs))} {op}" for op, rs in sorted(ops[seq].items()))
            out.append(f"process group {pg}: mismatched collectives at {seq}: {named}")
            break  # the first is where they diverge
    return out
