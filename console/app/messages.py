"""The app's messages: what happened, posted by the service subscription and by workers.

The app posts each to itself and handles it there; the log panes' messages
(:class:`LogLinesArrived`, :class:`FollowStateUpdated`, :class:`JobUpdated`) are also posted to
every log screen in the stack, whose ``on_*`` handlers take what concerns their jobs. None
bubbles: a message posted to a screen ends there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from textual.message import Message

from console.alerts.model import Alert, AlertChanged
from console.jobs.logbuffer import Row
from console.jobs.logs import JobLogLine
from console.jobs.store import JobRecord

if TYPE_CHECKING:
    from console.notebook.attach import NotebookTunnel
    from console.throughput import JobProgress

__all__ = [
    "AlertsUpdated",
    "FollowStateUpdated",
    "HostStatusUpdated",
    "JobUpdated",
    "JobsListed",
    "LogLinesArrived",
    "NotebookOpened",
    "ProgressUpdated",
]


@dataclass
class JobsListed(Message, bubble=False):
    """The jobs were reconciled with the hosts (newest first)."""

    jobs: list[JobRecord]


@dataclass
class ProgressUpdated(Message, bubble=False):
    """Running jobs' progress and cost were read from their logs (one per job read)."""

    progress: tuple[JobProgress, ...]


@dataclass
class JobUpdated(Message, bubble=False):
    """One job's record changed (state, exit codes, diagnosis)."""

    job: JobRecord


@dataclass
class LogLinesArrived(Message, bubble=False):
    """A batch of a followed job's lines; ``shown``: their display rows when the intake
    process shaped them (one tuple of rows per line), else ``None``."""

    job_id: str
    lines: Sequence[JobLogLine]
    shown: tuple[tuple[Row, ...], ...] | None = None


@dataclass
class FollowStateUpdated(Message, bubble=False):
    """A node's log follow is ``following``, ``reconnecting`` or ``ended``; ``detail``: why,
    for ``reconnecting``."""

    job_id: str
    node_rank: int
    state: str
    detail: str | None


@dataclass
class ArchiveUpdated(Message, bubble=False):
    """A node's log archive in the state dir could not be written during a follow (``error``
    set: no space left...; the follow goes on, its lines kept for the next write), or is
    written again (``error`` is ``None``); ``hint``: the fix for ``error``."""

    job_id: str
    node_rank: int
    error: str | None
    hint: str | None


@dataclass
class AlertsUpdated(Message, bubble=False):
    """An alert fired, resolved, was acknowledged or silenced; ``active`` is every firing
    alert after it (most severe first)."""

    change: AlertChanged
    active: list[Alert]


@dataclass
class NotebookOpened(Message, bubble=False):
    """A notebook's tunnel is open (posted by the attach worker, or by ``o`` on a notebook
    whose tunnel is already open): show its URL."""

    job_id: str
    tunnel: NotebookTunnel


@dataclass
class HostStatusUpdated(Message, bubble=False):
    """A host's telemetry status changed (``connecting``, ``ok``, ``error``...; ``reason``:
    why, when it is not ``ok``)."""

    host: str
    status: str
    reason: str | None
