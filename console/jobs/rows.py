"""Jobs as rows for any face (``ps`` and the app's jobs view use the same words).

Pure: a :class:`~console.jobs.store.JobRecord` plus, optionally, the fleet's per-job GPU usage
(:meth:`console.fleet.state.FleetState.job_usage`) become a :class:`JobRow`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from console.jobs.status import format_node_state, job_summary, shown_state

if TYPE_CHECKING:  # annotations only: `ps` needs neither the fleet state nor the store here
    from console.fleet.state import JobUsage
    from console.jobs.store import JobRecord


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


def job_row(job: JobRecord, now: float, usage: Mapping[str, JobUsage] | None = None) -> JobRow:
    """The row of one job at time ``now`` (Unix s); ``usage`` from the fleet, if watched."""
    u = usage.get(job.id) if usage is not None else None
    running = job.state in ("running", "pending") and not job.removed_at
    asked_none = job.spec.get("gpus_per_node") == 0
    gpus = 0 if asked_none else (len(u.gpus) if u is not None
                                 else (0 if usage is not None and running else None))
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
    )
