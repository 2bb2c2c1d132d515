"""Jobs as rows for any face (``ps`` and the app's jobs view use the same words).

Pure: a :class:`~console.jobs.store.JobRecord` plus, optionally, the fleet's per-job GPU usage
(:meth:`console.fleet.state.FleetState.job_usage`) become a :class:`JobRow`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from console.jobs.status import format_node_state, job_summary, shown_state

if TYPE_CHECKING:  # annotations only: `ps` needs neither the fleet state nor the store here
    from console.fleet.state import JobUsage
    from console.jobs.store import JobRecord
    from console.throughput import JobProgress


def age(seconds: float) -> str:
    """A duration as ``42s``, ``5m``, ``3h``, ``2d`` (the largest whole unit)."""
    s = max(0, int(seconds))
    for unit, n in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= n:
            return f"{s // n}{unit}"
    return f"{s}s"


def state_label(job: JobRecord) -> str:
    """``removed``, ``failed(1)`` or the job state, as ``ps`` prints it."""
    state = shown_state(job)
    if state == "failed" and job.exit_code is not None:
        return f"failed({job.exit_code})"
    return state


def reason(job: JobRecord) -> str:
    """Why the job ended where it did, in one line (:func:`console.jobs.status.job_summary`):
    ``node 1 rank 3: <reason>``, ``stopped by the user (SIGTERM)``, or ``""``."""
    return job_summary(job)


@dataclass(frozen=True)
class JobRow:
    """One job, ready to show.

    Attributes:
        job_id / name: the job.
        state: :func:`state_label`.
        nodes: ``n0@a:running n1@b:failed(1)``; beyond :data:`LIST_NODES` nodes, counts
            per state and the nodes that differ from the most common one
            (:func:`nodes_text`).
        age: since submit (:func:`age`).
        gpus: GPUs its processes hold now (from telemetry), or ``None`` when unknown.
        util_pct: their mean utilization (%) while running, or ``None``.
        exit_code: the job's exit code once finished, else ``None``.
        reason: :func:`reason`.
        active: pending or running (GPUs and utilization apply).
        kind: ``train`` or ``notebook``.
        cpu_only: the job asked for no GPU (``gpus_per_node: 0``), or telemetry shows it
            holds none: utilization does not apply (``-``), it is not unknown (``?``).
        progress: its progress and cost read from its log while running
            (:meth:`console.service.Service.progress`), else ``None``.
    """

    job_id: str
    name: str
    state: str
    nodes: str
    age: str
    gpus: int | None
    util_pct: float | None
    exit_code: int | None
    reason: str
    active: bool = False
    kind: str = "train"
    cpu_only: bool = False
    progress: JobProgress | None = None


LIST_NODES = 4
"""Jobs with up to this many nodes list every node in their row."""


def nodes_text(job: JobRecord, *, listed: int = 3) -> str:
    """Each node's state, compact for many nodes.

    Up to :data:`LIST_NODES` nodes: ``n0@a:running n1@b:failed(1)``. More:
    ``16 nodes: 15 running, 1 failed(1): n3@h3:failed(1)`` (counts per state, most common
    first, then up to ``listed`` nodes whose state is not the most common one, ``…`` if more).
    """
    states = [(n, format_node_state(n)) for n in job.nodes]
    if len(states) <= LIST_NODES:
        return " ".join(f"n{n.node_rank}@{n.host}:{st}" for n, st in states)
    counts = Counter(st for _, st in states)
    common = counts.most_common(1)[0][0]
    text = f"{len(states)} nodes: " + ", ".join(f"{c} {st}" for st, c in counts.most_common())
    odd = [f"n{n.node_rank}@{n.host}:{st}" for n, st in states if st != common]
    if odd:
        text += ": " + " ".join(odd[:listed]) + (" …" if len(odd) > listed else "")
    return text


def job_row(
    job: JobRecord,
    now: float,
    usage: Mapping[str, JobUsage] | None = None,
    progress: Mapping[str, JobProgress] | None = None,
) -> JobRow:
    """The row of one job at time ``now`` (Unix s); ``usage`` from the fleet, if watched;
    ``progress`` as last read from the running jobs' logs."""
    u = usage.get(job.id) if usage is not None else None
    running = job.state in ("running", "pending") and not job.removed_at
    asked_none = job.spec.get("gpus_per_node") == 0
    gpus = (
        0
        if asked_none
        else (len(u.gpus) if u is not None else (0 if usage is not None and running else None))
    )
    return JobRow(
        job_id=job.id,
        name=job.name,
        state=state_label(job),
        nodes=nodes_text(job),
        age=age(now - job.created_at),
        gpus=gpus,
        util_pct=u.mean_util_pct if u is not None and running else None,
        exit_code=job.exit_code if not running else None,
        reason=reason(job),
        active=running,
        kind=job.kind,
        cpu_only=gpus == 0,
        progress=progress.get(job.id) if progress is not None and running else None,
    )


# -- filter and sort (the jobs view's `/` and `s`; the fleet view's query words) -------------

JobSortKey = Literal["age", "job", "state", "util", "exit"]
SORT_KEYS: tuple[JobSortKey, ...] = ("age", "job", "state", "util", "exit")
"""The columns the jobs view sorts by, in the order ``s`` cycles them."""
SORT_COLUMN: Mapping[JobSortKey, str] = {
    "age": "AGE",
    "job": "JOB",
    "state": "STATE",
    "util": "UTIL",
    "exit": "EXIT",
}
"""The column header each sort key marks."""
DEFAULT_DESCENDING: Mapping[JobSortKey, bool] = {
    "age": False,
    "job": False,
    "state": False,
    "util": True,
    "exit": True,
}
"""The direction a sort starts in: youngest first, names A-Z, busiest and non-zero first."""

#: Sort order of job states: what needs attention first.
_STATE_ORDER = (
    "failed",
    "running",
    "pending",
    "unknown",
    "stopped",
    "lost",
    "succeeded",
    "removed",
)

JobQueryField = Literal["state", "host", "kind", "job", "text"]


@dataclass(frozen=True)
class JobQueryTerm:
    """One word of a jobs filter: ``field`` (see :func:`parse_job_query`), ``value``
    (lower case), ``negate``: the word started with ``!``."""

    field: JobQueryField
    value: str
    negate: bool = False


def parse_job_query(query: str) -> list[JobQueryTerm]:
    """Split a jobs filter into terms (whitespace-separated, case-insensitive, all must hold),
    the words of the fleet's filter: ``state:WORD`` (``state:fail`` matches ``failed(1)``),
    ``host:NAME``, ``kind:notebook``, ``job:ID`` (an id or name) match that field (a
    substring); any other word matches what the row shows (id, name, kind, state, nodes,
    reason), so ``running`` alone finds the running jobs. ``!`` before a word inverts
    it (``!succeeded``). An empty qualifier (``host:``) matches everything."""
    terms: list[JobQueryTerm] = []
    for word in query.lower().split():
        negate = word.startswith("!") and len(word) > 1
        word = word[1:] if negate else word
        field, sep, value = word.partition(":")
        if sep and field in ("state", "host", "kind", "job"):
            terms.append(JobQueryTerm(field, value, negate))  # type: ignore[arg-type]
        else:
            terms.append(JobQueryTerm("text", word, negate))
    return terms


def job_matches(job: JobRecord, row: JobRow, terms: list[JobQueryTerm]) -> bool:
    """Whether a job (and its row as shown) matches every term (:func:`parse_job_query`)."""
    for t in terms:
        if t.field == "state":
            ok = t.value in row.state.lower()
        elif t.field == "host":
            ok = any(t.value in n.host.lower() for n in job.nodes)
        elif t.field == "kind":
            ok = t.value in row.kind.lower()
        elif t.field == "job":
            ok = t.value in job.id.lower() or t.value in job.name.lower()
        else:
            shown = (row.job_id, row.name, row.kind, row.state, row.nodes, row.reason)
            ok = any(t.value in s.lower() for s in shown)
        if ok == t.negate:
            return False
    return True


def sort_rows(
    rows: list[tuple[JobRecord, JobRow]], key: JobSortKey, descending: bool
) -> list[tuple[JobRecord, JobRow]]:
    """Rows sorted by ``key`` (see :data:`SORT_KEYS`); unknown values (no utilization, no
    exit code yet) last either way; ties keep the youngest first."""

    def value(item: tuple[JobRecord, JobRow]) -> float | str | None:
        job, row = item
        if key == "age":
            return -job.created_at
        if key == "job":
            return row.job_id
        if key == "state":
            base = row.state.split("(")[0]
            return float(_STATE_ORDER.index(base) if base in _STATE_ORDER else len(_STATE_ORDER))
        if key == "util":
            return row.util_pct
        return None if row.exit_code is None else float(row.exit_code)

    by_age = sorted(rows, key=lambda item: -item[0].created_at)
    known = [item for item in by_age if value(item) is not None]
    unknown = [item for item in by_age if value(item) is None]
    known.sort(key=lambda item: value(item), reverse=descending)  # type: ignore[arg-type,return-value]
    return known + unknown
