"""Typed events the service publishes, and the bus that delivers them to several subscribers.

Every event is a frozen dataclass named for what happened. Faces (the CLI, the Textual app, a
future ``watch``) subscribe to the :class:`EventBus` of a :class:`console.service.Service`; they
never poll the engine themselves.

Delivery rules:

- Subscribers run on the thread of the event loop they subscribed from, in subscription
  order: synchronously from :meth:`EventBus.publish` when it is called on that loop's thread
  (for coalescing subscribers, from one ``call_soon`` after a burst); an event published on
  another thread (the service's log intake runs its own loop) is handed to the subscriber's
  loop with ``call_soon_threadsafe``, in publishing order.
- A subscriber that raises is logged (``gpuconsole.events``) and isolated: the publisher never
  sees the exception, so a broken view can never mark a host down or stop a monitor.
- A subscriber created with ``coalesce=True`` receives, per burst, only the latest event of
  each :attr:`key` (e.g. one :class:`SampleReceived` per host); events without a key (log
  lines) are all delivered, in order.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from console.alerts.model import AlertChanged

if TYPE_CHECKING:  # fields' types only: a command that publishes no such event imports none
    from console.fleet.state import ContainerJob
    from console.jobs.logbuffer import Row
    from console.jobs.logs import JobLogLine
    from console.jobs.store import JobRecord
    from console.throughput import JobProgress
    from remote.telemetry.schema import Sample

log = logging.getLogger("gpuconsole.events")


@dataclass(frozen=True)
class SampleReceived:
    """A host's telemetry sample arrived (schema v1, ``remote/telemetry/schema.py``).

    Attributes:
        host: the host's name in the profile.
        sample: the sample record as the agent or the nvidia-smi fallback produced it.
    """

    host: str
    sample: Sample

    @property
    def key(self) -> Hashable:
        """Coalescing key: the latest sample per host wins."""
        return ("sample", self.host)


@dataclass(frozen=True)
class HostStateChanged:
    """A host's telemetry status changed.

    Attributes:
        host: the host's name.
        status: ``connecting``, ``ok``, ``stale`` (3 intervals without a sample) or ``down``.
        previous: the status before.
        reason: why (the connection error for ``down``), or ``None``.
    """

    host: str
    status: str
    previous: str
    reason: str | None = None

    @property
    def key(self) -> Hashable:
        """Coalescing key: the latest state per host wins."""
        return ("host", self.host)


@dataclass(frozen=True)
class ContainersMapped:
    """The container -> job map was refreshed from the hosts' container labels.

    Attributes:
        containers: container id (64 hex) -> job, node rank.
    """

    containers: Mapping[str, ContainerJob]

    @property
    def key(self) -> Hashable:
        """Coalescing key: only the newest map matters."""
        return ("containers",)


@dataclass(frozen=True)
class JobChanged:
    """A job's record changed: its state, a node's state or exit code, its diagnosis.

    Attributes:
        job: the job as just reconciled (a snapshot: do not mutate).
    """

    job: JobRecord

    @property
    def key(self) -> Hashable:
        """Coalescing key: the latest record per job wins."""
        return ("job", self.job.id)


@dataclass(frozen=True)
class NodeExited:
    """A followed node's log stream ended because its container exited (or vanished).

    Attributes:
        job_id: the job.
        node_rank: the node.
        host: its host.
    """

    job_id: str
    node_rank: int
    host: str

    @property
    def key(self) -> Hashable:
        """Coalescing key: one per node."""
        return ("exit", self.job_id, self.node_rank)


@dataclass(frozen=True)
class LogLinesReceived:
    """New lines of a followed job, in arrival order (a batch, at most a few hundred lines).

    Attributes:
        job_id: the job.
        lines: the lines, each tagged with node rank, torchrun rank and Docker timestamp.
        shown: each line's display rows (:func:`console.jobs.logbuffer.display_lines`),
            when they were made where the lines were read (the intake process); ``None``:
            a receiver that shows lines shapes them itself.
    """

    job_id: str
    lines: Sequence[JobLogLine]
    shown: tuple[tuple[Row, ...], ...] | None = None

    key = None


@dataclass(frozen=True)
class FollowStateChanged:
    """A node's log follow changed state.

    Attributes:
        job_id: the job.
        node_rank: the node.
        state: ``following``, ``reconnecting`` (the host dropped; resuming from the cursor) or
            ``ended``.
        detail: why, for ``reconnecting``.
    """

    job_id: str
    node_rank: int
    state: str
    detail: str | None = None

    @property
    def key(self) -> Hashable:
        """Coalescing key: the latest state per node wins."""
        return ("follow", self.job_id, self.node_rank)


@dataclass(frozen=True)
class ArchiveStateChanged:
    """A node's log archive could not be written during a follow (``error`` set: no space
    left in the state dir...; the follow goes on), or can be written again (``error`` is
    ``None``: what was kept meanwhile is archived).

    Attributes:
        job_id: the job.
        node_rank: the node.
        error: the archive's error (``<file>: <what is wrong>``), or ``None``.
        hint: its fix, or ``None``.
    """

    job_id: str
    node_rank: int
    error: str | None
    hint: str | None = None

    @property
    def key(self) -> Hashable:
        """Coalescing key: the latest state per node's archive wins."""
        return ("archive", self.job_id, self.node_rank)


@dataclass(frozen=True)
class ProgressRead:
    """Running jobs' progress and cost were read from their logs
    (:meth:`console.service.Service.progress`).

    Attributes:
        progress: one per job read (jobs whose log said nothing carry ``throughput`` ``None``).
    """

    progress: tuple[JobProgress, ...]

    key = ("progress",)


Event = (
    AlertChanged
    | SampleReceived
    | HostStateChanged
    | ContainersMapped
    | JobChanged
    | NodeExited
    | LogLinesReceived
    | FollowStateChanged
    | ArchiveStateChanged
    | ProgressRead
)
Handler = Callable[[Event], None]


@dataclass(eq=False)
class Subscription:
    """One subscriber; :meth:`close` unsubscribes.

    Attributes:
        handler: called with each event.
        kinds: event classes it wants (``None``: all).
        coalesce: deliver only the latest event per key per burst.
    """

    bus: EventBus
    handler: Handler
    kinds: tuple[type, ...] | None
    coalesce: bool
    _pending: dict[Hashable, Event] = field(default_factory=dict)
    _unkeyed: list[Event] = field(default_factory=list)
    _scheduled: bool = False
    errors: int = 0
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: int | None = None

    def __post_init__(self) -> None:
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:  # subscribed outside a loop: delivered on the publisher's thread
            return
        self._thread = threading.get_ident()

    def wants(self, event: Event) -> bool:
        """Whether this subscriber takes events of this kind."""
        return self.kinds is None or isinstance(event, self.kinds)

    def close(self) -> None:
        """Stop receiving events."""
        self.bus._remove(self)

    def _call(self, event: Event) -> None:
        try:
            self.handler(event)
        except Exception:
            self.errors += 1
            log.exception(
                "event subscriber %r failed on %s; it stays subscribed",
                self.handler,
                type(event).__name__,
            )

    def _offer(self, event: Event) -> None:
        if self._thread is not None and threading.get_ident() != self._thread:
            loop = self._loop
            assert loop is not None
            try:
                loop.call_soon_threadsafe(self._offer, event)
            except RuntimeError:  # the subscriber's loop is closed: nobody is listening
                pass
            return
        if not self.coalesce:
            self._call(event)
            return
        key = getattr(event, "key", None)
        if key is None:
            self._unkeyed.append(event)
        else:
            self._pending.pop(key, None)  # re-insert: delivery follows the latest arrival
            self._pending[key] = event
        if not self._scheduled:
            self._scheduled = True
            try:
                asyncio.get_running_loop().call_soon(self._flush)
            except RuntimeError:  # no loop (a synchronous caller): deliver now
                self._flush()

    def _flush(self) -> None:
        self._scheduled = False
        unkeyed, self._unkeyed = self._unkeyed, []
        pending, self._pending = self._pending, {}
        for ev in unkeyed:
            self._call(ev)
        for ev in pending.values():
            self._call(ev)


class EventBus:
    """Delivers published events to every subscriber (see the module docstring)."""

    def __init__(self) -> None:
        self._subs: list[Subscription] = []

    def subscribe(
        self, handler: Handler, *, kinds: tuple[type, ...] | None = None, coalesce: bool = False
    ) -> Subscription:
        """Add a subscriber.

        Args:
            handler: called with each event, on the loop's thread; exceptions are logged.
            kinds: only these event classes (default: all).
            coalesce: latest event per key per burst (for slow consumers such as screens).
        """
        sub = Subscription(self, handler, kinds, coalesce)
        self._subs.append(sub)
        return sub

    def _remove(self, sub: Subscription) -> None:
        if sub in self._subs:
            self._subs.remove(sub)

    def publish(self, event: Event) -> None:
        """Deliver ``event`` to every subscriber that wants it; never raises."""
        for sub in list(self._subs):
            if sub.wants(event):
                sub._offer(event)
