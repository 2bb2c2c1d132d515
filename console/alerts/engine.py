"""The alert engine: a pure evaluation core and a thin live adapter.

:class:`AlertEngine` is the core. ``evaluate(inputs, now)`` runs every rule
(:mod:`console.alerts.rules`) over :class:`~console.alerts.rules.Inputs` at an explicit time
and returns the transitions (:class:`~console.alerts.model.AlertChanged`); it sleeps, reads
clocks and touches files never, so tests drive it with recorded telemetry and chosen times.
Per alert key it keeps:

- *pending*: the condition holds since ``t`` (the rule's ``since`` when the input knows it,
  else the first evaluation that saw it hold; a rule's ``not_before`` moves it later). It
  fires once it held ``for_s``; it is forgotten when an evaluation says it does not hold, or
  says nothing of the subject (the count starts again after a gap in what is known).
- *firing*: fired and not resolved. An evaluation that says the condition no longer holds
  (or no longer for ``for_s``) resolves it; one that says nothing (host down, reading
  unknown) leaves it firing.
- acks and silences (:class:`~console.alerts.store.Ack`, :class:`~console.alerts.store.Silence`):
  an ack marks one firing (``acked_at``), a silence sets ``silenced_until`` on every firing
  alert it matches while it lasts. The alert keeps firing either way; ``watch`` does not
  notify acked or silenced alerts.

:class:`AlertWatcher` is the live adapter: it subscribes to a :class:`console.service.Service`'s
event bus (samples, host states, container maps, job changes, log lines), reconciles the
jobs now and then, re-evaluates on a timer that is re-armed after each round finished,
persists transitions in :class:`~console.alerts.store.AlertStore` and publishes them on the
bus. It judges its service's profile only: that profile's hosts (the fleet) and jobs (those
submitted or adopted with it), and that profile's alerts in the store, so the watch of one
profile never shows, keeps firing or resolves another's.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import TYPE_CHECKING

from console.alerts.config import AlertsConfig
from console.alerts.model import Alert, AlertChange, AlertChanged, DetailValue, Severity
from console.alerts.rules import (
    HostInput,
    Inputs,
    JobGpu,
    JobInput,
    Observation,
    RuleContext,
    SeenXid,
    job_gpus,
    node_started_at,
    observe,
)
from console.alerts.store import Ack, AlertStore, Silence, controlled
from console.events import (
    ContainersMapped,
    Event,
    HostStateChanged,
    JobChanged,
    LogLinesReceived,
    SampleReceived,
    Subscription,
)
from console.fleet.straggler import WINDOW_S, RankLoad, rank_loads
from console.jobs.status import has_started
from console.jobs.store import JobRecord
from console.throughput import RankRates
from remote.errors import GpuConsoleError

if TYPE_CHECKING:
    from console.fleet.state import FleetState
    from console.service import Service

__all__ = ["AlertEngine", "AlertWatcher", "build_inputs"]

log = logging.getLogger("gpuconsole.alerts")

_RANK: dict[Severity, int] = {"critical": 0, "warning": 1, "info": 2}


class AlertEngine:
    """The pure evaluation core (see the module docstring).

    Args:
        config: the profile's ``alerts:`` section.
        firing: alerts that fired before (from the store): they are not fired again while
            their condition holds.
        acks, silences: stored acknowledgements and silences.
    """

    def __init__(
        self,
        config: AlertsConfig,
        *,
        firing: Iterable[Alert] = (),
        acks: Iterable[Ack] = (),
        silences: Iterable[Silence] = (),
    ) -> None:
        self.config = config
        self._firing: dict[str, Alert] = {a.key: a for a in firing if a.firing}
        self._pending: dict[str, float] = {k: a.since for k, a in self._firing.items()}
        self._acks: dict[str, Ack] = {}
        self._silences: list[Silence] = []
        self.set_controls(acks, silences)

    # -- reading -----------------------------------------------------------------------------

    def active(self) -> list[Alert]:
        """Every firing alert, most severe first, then oldest first."""
        return sorted(self._firing.values(), key=lambda a: (_RANK[a.severity], a.fired_at))

    def get(self, key: str) -> Alert | None:
        """The firing alert with this key, or ``None``."""
        return self._firing.get(key)

    def silences(self) -> list[Silence]:
        """The silences the engine applies (as last set)."""
        return list(self._silences)

    def annotate(self, key: str, **details: DetailValue) -> Alert | None:
        """Add ``details`` to a firing alert (kept while it fires); the alert after it, or
        ``None`` when no alert of that key fires."""
        alert = self._firing.get(key)
        if alert is None:
            return None
        alert = replace(alert, details=MappingProxyType({**alert.details, **details}))
        self._firing[key] = alert
        return alert

    # -- evaluation --------------------------------------------------------------------------

    def evaluate(self, inputs: Inputs, now: float) -> list[AlertChanged]:
        """Run every rule over ``inputs`` at ``now`` (Unix s); the transitions, in order:
        ``fired`` / ``resolved`` per rule in :data:`~console.alerts.rules.RULES` order, then
        ``acknowledged`` / ``silenced`` / ``unsilenced`` of alerts that were firing before."""
        changes: list[AlertChanged] = []
        fresh: set[str] = set()
        seen: set[str] = set()
        ctx = RuleContext(now, dict(self._firing), dict(self._pending))
        for rule_id, observations in observe(inputs, self.config, ctx):
            if observations is None:  # disabled: its alerts are over
                for key, a in list(self._firing.items()):
                    if a.rule == rule_id:
                        changes.append(self._resolve(key, now))
                continue
            for obs in observations:
                seen.add(obs.key)
                self._take(obs, now, changes, fresh)
        for key in [k for k in self._pending if k not in seen]:
            if key not in self._firing:
                del self._pending[key]
        changes.extend(self._apply_controls(now, fresh))
        # a fresh alert is published with its controls applied (a silence already covering it)
        return [
            AlertChanged(self._firing.get(c.alert.key, c.alert), "fired", c.at)
            if c.change == "fired"
            else c
            for c in changes
        ]

    def _take(
        self, obs: Observation, now: float, changes: list[AlertChanged], fresh: set[str]
    ) -> None:
        key = obs.key
        firing = self._firing.get(key)
        if not obs.holds:
            self._pending.pop(key, None)
            if firing is not None:
                changes.append(self._resolve(key, now))
            return
        if obs.since is not None:
            start = obs.since if firing is None else min(obs.since, firing.since)
        else:
            start = self._pending.get(key, now)
        self._pending[key] = start
        effective = start if obs.not_before is None else max(start, obs.not_before)
        met = now - effective >= obs.for_s
        if not met:
            if firing is not None:  # no longer for long enough (a log line came)
                changes.append(self._resolve(key, now))
                self._pending[key] = start  # still holding: the count goes on
            return
        if firing is None:
            alert = Alert(
                key=key,
                rule=obs.rule,
                severity=obs.severity,
                summary=obs.summary,
                host=obs.host,
                gpu=obs.gpu,
                job=obs.job,
                since=effective,
                fired_at=now,
                details=obs.details,
            )
            self._firing[key] = alert
            fresh.add(key)
            changes.append(AlertChanged(alert, "fired", now))
        else:  # still firing: fresh numbers, same alert (no event)
            self._firing[key] = replace(
                firing, severity=obs.severity, summary=obs.summary, details=obs.details
            )

    def _resolve(self, key: str, now: float) -> AlertChanged:
        alert = replace(self._firing.pop(key), resolved_at=now)
        self._pending.pop(key, None)
        self._acks.pop(key, None)
        return AlertChanged(alert, "resolved", now)

    # -- acks and silences -------------------------------------------------------------------

    def set_controls(self, acks: Iterable[Ack], silences: Iterable[Silence]) -> None:
        """Replace the acks and silences (the store's, re-read each round); they apply at the
        next :meth:`evaluate` or :meth:`apply_controls`."""
        self._acks = {a.key: a for a in acks}
        self._silences = list(silences)

    def apply_controls(self, now: float) -> list[AlertChanged]:
        """Apply the current acks and silences to the firing alerts now; the transitions."""
        return self._apply_controls(now, set())

    def acknowledge(self, ack: Ack, now: float) -> list[AlertChanged]:
        """Take one acknowledgement (already stored); the ``acknowledged`` transition.

        Raises:
            KeyError: no alert with that key fires (or it is a later firing than the ack's).
        """
        alert = self._firing.get(ack.key)
        if alert is None or alert.fired_at != ack.fired_at:
            raise KeyError(ack.key)
        self._acks[ack.key] = ack
        return self._apply_controls(now, set())

    def add_silence(self, silence: Silence, now: float) -> list[AlertChanged]:
        """Take one silence (already stored); the ``silenced`` transitions it causes."""
        self._silences = [s for s in self._silences if s.id != silence.id] + [silence]
        return self._apply_controls(now, set())

    def remove_silence(self, silence_id: int, now: float) -> list[AlertChanged]:
        """Drop a silence; the ``unsilenced`` transitions it causes."""
        self._silences = [s for s in self._silences if s.id != silence_id]
        return self._apply_controls(now, set())

    def _apply_controls(self, now: float, fresh: set[str]) -> list[AlertChanged]:
        out: list[AlertChanged] = []
        for key, a in list(self._firing.items()):
            b = controlled(a, self._acks.get(key), self._silences, now)
            if b is a:
                continue
            acked, until = b.acked_at, b.silenced_until
            self._firing[key] = b
            if key in fresh:
                continue  # published as fired, with these
            change: AlertChange | None = None
            if acked != a.acked_at:
                out.append(AlertChanged(b, "acknowledged", now))
            if until != a.silenced_until:
                change = "unsilenced" if until is None else "silenced"
                out.append(AlertChanged(b, change, now))
        return out


# -- inputs from the live fleet ----------------------------------------------------------------


def build_inputs(
    fleet: FleetState | None,
    jobs: Iterable[JobRecord],
    *,
    last_log: Mapping[str, float] | None = None,
    xids: Iterable[SeenXid] = (),
    status_since: Mapping[str, float] | None = None,
    known_gpus: Mapping[str, Mapping[str, int | None]] | None = None,
    jobs_complete: bool = True,
    price_per_gpu_hour: float | None = None,
    straggler_window_s: float = WINDOW_S,
    rank_rates: Mapping[str, RankRates] | None = None,
) -> Inputs:
    """:class:`Inputs` from a fleet state (hosts, samples, container -> job map) and job
    records.

    Args:
        fleet: the fleet (``None``: no telemetry; host and GPU rules see nothing).
        jobs: job records (the store's, as reconciled).
        last_log: job id -> Unix s of its newest log line.
        xids: Xid events seen.
        status_since: host -> when its status last changed (Unix s).
        known_gpus: host -> PCI bus id -> index of every GPU it reported (default: the
            fleet's ``known_gpus``, indices unknown).
        jobs_complete: ``jobs`` lists every job not removed.
        price_per_gpu_hour: USD.
        straggler_window_s: seconds each rank's load is averaged over.
        rank_rates: job id -> its ranks' own logged rates (``Service.progress``).
    """
    hosts: dict[str, HostInput] = {}
    gpus_of: dict[str, tuple[JobGpu, ...]] = {}
    if fleet is not None:
        for v in fleet.hosts.values():
            known = (known_gpus or {}).get(v.name)
            if known is None:
                known = {bus: None for bus in v.known_gpus}
            hosts[v.name] = HostInput(
                v.name, v.status, v.error, (status_since or {}).get(v.name), v.sample, dict(known)
            )
        gpus_of = dict(job_gpus(fleet))
    jobs = list(jobs)
    loads: dict[str, list[RankLoad]] = {}
    if fleet is not None:
        running = [j for j in jobs if j.state in ("running", "pending") and j.removed_at is None]
        loads = rank_loads(fleet, running, window_s=straggler_window_s)
    job_inputs = {
        j.id: JobInput(
            j,
            gpus_of.get(j.id, ()),
            (last_log or {}).get(j.id),
            tuple(loads.get(j.id, ())),
            (rank_rates or {}).get(j.id),
        )
        for j in jobs
    }
    return Inputs(hosts, job_inputs, tuple(xids), jobs_complete, price_per_gpu_hour)


# -- the live adapter --------------------------------------------------------------------------


#: seconds a fired ``job_hung`` waits for the job's stacks before it is published without them
STACKS_TIMEOUT_S = 60.0


class AlertWatcher:
    """The engine over a live :class:`~console.service.Service` (see the module docstring).

    Start the fleet first (``service.start_fleet()``), then ``await watcher.start()``;
    :meth:`stop` (or ``service.close()`` after it) ends it. Transitions are published on
    ``service.bus`` as :class:`~console.alerts.model.AlertChanged` and stored as the
    service's profile's alerts; jobs of other profiles are not judged.

    Args:
        service: the service (its profile gives ``alerts:`` and ``price_per_gpu_hour``).
        config: instead of the profile's ``alerts:``.
        store: the alert store (default: ``alerts.sqlite3`` in the job store's state dir,
            opened for the service's profile).
        clock: Unix time (tests may pass their own).
    """

    def __init__(
        self,
        service: Service,
        *,
        config: AlertsConfig | None = None,
        store: AlertStore | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.service = service
        self.config = config or service.profile.alert_rules
        self.price = service.profile.price_per_gpu_hour
        self.profile = service.profile.name
        self._store = store
        self.clock = clock
        self.engine = AlertEngine(self.config)
        self._jobs: dict[str, JobRecord] = {}
        self._jobs_complete = False
        self._last_log: dict[str, float] = {}
        self._rank_rates: dict[str, RankRates] = {}
        self._xids: deque[SeenXid] = deque(maxlen=10_000)
        self._status_since: dict[str, float] = {}
        self._known_gpus: dict[str, dict[str, int | None]] = {}
        self._sub: Subscription | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._lock = asyncio.Lock()
        self.rounds = 0

    @property
    def store(self) -> AlertStore:
        """The alert store of the service's profile (opened on first use)."""
        if self._store is None:
            self._store = AlertStore(self.service.store.root, profile=self.profile)
        return self._store

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Load the stored state, subscribe to the bus, start the evaluation and job loops.

        Raises:
            GpuConsoleError: the alert store cannot be opened.
        """
        await self.load()
        self.subscribe()
        self._tasks = [
            asyncio.create_task(self._evaluate_loop(), name="alerts-evaluate"),
            asyncio.create_task(self._jobs_loop(), name="alerts-jobs"),
        ]

    async def load(self) -> None:
        """Read the profile's stored alerts, acks and silences (first adopting the alerts of
        no profile that are its own, :meth:`AlertStore.adopt`) and its jobs from the job store
        (what :meth:`start` does first; rounds may then be run by hand with
        :meth:`evaluate_now`).

        Raises:
            GpuConsoleError: the alert store cannot be opened.
        """
        store = await asyncio.to_thread(lambda: self.store)
        now = self.clock()
        jobs = [
            j
            for j in await self.service.store.call(self.service.store.jobs, include_removed=True)
            if self._mine(j)
        ]
        await asyncio.to_thread(
            store.adopt, list(self.service.profile.hosts), {j.name for j in jobs}
        )
        firing = await asyncio.to_thread(store.firing)
        acks, silences = await asyncio.to_thread(store.controls, now)
        self.engine = AlertEngine(self.config, firing=firing, acks=acks, silences=silences)
        self._jobs = {j.id: j for j in jobs if j.removed_at is None}
        self._jobs_complete = True

    def _mine(self, job: JobRecord) -> bool:
        """Whether ``job`` is the profile's (submitted or adopted with it)."""
        return job.profile == self.profile

    def subscribe(self) -> None:
        """Take the service's events (:meth:`start` does it)."""
        if self._sub is None:
            self._sub = self.service.bus.subscribe(
                self._on_event,
                kinds=(
                    SampleReceived,
                    HostStateChanged,
                    ContainersMapped,
                    JobChanged,
                    LogLinesReceived,
                ),
            )

    async def stop(self) -> None:
        """End the loops and the subscription (the store stays open until :meth:`close`)."""
        if self._sub is not None:
            self._sub.close()
            self._sub = None
        tasks, self._tasks = self._tasks, []
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def close(self) -> None:
        """:meth:`stop`, then close the store."""
        await self.stop()
        if self._store is not None:
            self._store.close()
            self._store = None

    async def _evaluate_loop(self) -> None:
        while True:
            try:
                await self.evaluate_now()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("alert evaluation failed; next round in %g s", self.config.interval_s)
            await asyncio.sleep(self.config.interval_s)  # armed after the round finished

    async def _jobs_loop(self) -> None:
        while True:
            try:
                await self.refresh_jobs()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("alert job refresh failed")
            await asyncio.sleep(self.config.jobs_refresh_s)

    # -- events ------------------------------------------------------------------------------

    def _on_event(self, ev: Event) -> None:
        now = self.clock()
        if isinstance(ev, SampleReceived):
            known = self._known_gpus.setdefault(ev.host, {})
            for g in ev.sample["gpus"]:
                bus = g["pci_bus_id"]
                if bus:
                    known[bus] = g["index"] if g["index"] is not None else known.get(bus)
            for x in ev.sample["xid_events"]:
                self._xids.append(SeenXid(ev.host, x, x["time"] or now))
        elif isinstance(ev, HostStateChanged):
            if ev.status != ev.previous:
                self._status_since[ev.host] = now
        elif isinstance(ev, JobChanged):
            if self._mine(ev.job):
                self._jobs[ev.job.id] = ev.job
        elif isinstance(ev, LogLinesReceived):
            if ev.lines:
                ts = max(ev.lines[0].ts_ns, ev.lines[-1].ts_ns) / 1e9
                self._last_log[ev.job_id] = max(self._last_log.get(ev.job_id, 0.0), ts)
        # ContainersMapped: the fleet state holds the map; the next round reads it

    # -- rounds ------------------------------------------------------------------------------

    def inputs(self, now: float) -> Inputs:
        """What the rules see now (Xids older than the ``xid`` rule's ``hold_s`` dropped)."""
        horizon = now - self.config.xid.hold_s
        while self._xids and self._xids[0].at < horizon:
            self._xids.popleft()
        return build_inputs(
            self.service.fleet,
            self._jobs.values(),
            last_log=self._last_log,
            xids=[x for x in self._xids if x.at >= horizon],
            status_since=self._status_since,
            known_gpus=self._known_gpus,
            jobs_complete=self._jobs_complete,
            price_per_gpu_hour=self.price,
            straggler_window_s=self.config.straggler.window_s,
            rank_rates=self._rank_rates,
        )

    async def evaluate_now(self) -> list[AlertChanged]:
        """One round: re-read acks and silences, evaluate, store and publish the
        transitions (also returned). A ``job_hung`` that fires carries the job's stacks
        summary (:meth:`_with_stacks`: taken once, as it fires)."""
        async with self._lock:
            now = self.clock()
            acks, silences = await asyncio.to_thread(self.store.controls, now)
            self.engine.set_controls(acks, silences)
            changes = self.engine.evaluate(self.inputs(now), now)
            changes = [await self._with_stacks(c) for c in changes]
            await self._commit(changes)
            self.rounds += 1
            return changes

    async def _with_stacks(self, change: AlertChanged) -> AlertChanged:
        """A fired ``job_hung`` with ``stacks`` in its details: the grouped summary of every
        rank's stack (:meth:`console.service.Service.stacks`, at most
        :data:`STACKS_TIMEOUT_S`), or why they could not be taken; other changes as they are."""
        a = change.alert
        job_id = a.details.get("job_id")
        if change.change != "fired" or a.rule != "job_hung" or not isinstance(job_id, str):
            return change
        job = self._jobs.get(job_id)
        if job is None:
            return change
        try:
            _, analysis = await asyncio.wait_for(self.service.stacks(job), STACKS_TIMEOUT_S)
            summary = analysis.summary()
            odd = ", ".join(str(r) for g in analysis.odd for r in g.ranks) or None
        except (GpuConsoleError, asyncio.TimeoutError) as e:
            why = (
                e.message
                if isinstance(e, GpuConsoleError)
                else f"no answer in {STACKS_TIMEOUT_S:g} s"
            )
            summary, odd = f"not taken: {why}", None
        except Exception as e:  # a bug must not lose the alert: it fires without the stacks
            log.warning("stacks of %s for its job_hung alert failed", job_id, exc_info=True)
            summary, odd = f"not taken: {type(e).__name__}: {e}", None
        annotated = self.engine.annotate(a.key, stacks=summary, odd_ranks=odd)
        return replace(change, alert=annotated or a)

    async def _commit(self, changes: list[AlertChanged]) -> None:
        if changes:
            await asyncio.to_thread(self.store.record, changes)
        for c in changes:
            log.info("alert %s %s: %s", c.change, c.alert.key, c.alert.summary)
            self.service.bus.publish(c)

    async def refresh_jobs(self) -> None:
        """Reconcile every job with the hosts (``Service.list_jobs``: publishes
        :class:`~console.events.JobChanged`), keep the profile's, read its running training
        jobs' progress (``Service.progress``: publishes :class:`~console.events.ProgressRead`,
        and gives each one's newest line), then ask each other job whose newest known log line
        is older than ``jobs_refresh_s`` for its last line."""
        try:
            # reuse a reconcile someone else (the app's jobs view) just did
            jobs = await self.service.list_jobs(max_age_s=self.config.jobs_refresh_s / 2)
        except GpuConsoleError as e:
            log.warning("alerts: cannot list jobs: %s", e.message)
            return
        jobs = [j for j in jobs if self._mine(j)]
        self._jobs = {j.id: j for j in jobs}
        self._jobs_complete = True
        now = self.clock()
        # running jobs' progress (and newest line) from one read of each one's log tail
        progress = await self.service.progress(jobs)
        self._rank_rates = {
            job_id: p.rank_rates for job_id, p in progress.items() if p.rank_rates is not None
        }
        for j in jobs:
            if not any(has_started(n) for n in j.nodes) or j.removed_at is not None:
                self._last_log.pop(j.id, None)
                continue
            last = self._last_log.get(j.id)
            read = progress.get(j.id)
            if read is not None and read.error is None:
                seen = read.last_line_at or node_started_at(j) or j.created_at
                self._last_log[j.id] = max(last or 0.0, seen)
                continue
            if last is not None and now - last < self.config.jobs_refresh_s:
                continue  # a follow keeps it fresh
            try:
                lines = await self.service.read_logs(j, tail=1)
            except GpuConsoleError as e:
                log.debug("alerts: last log line of %s: %s", j.id, e.message)
                continue
            if lines:
                seen = lines[-1].ts_ns / 1e9
            else:
                seen = node_started_at(j) or j.created_at
            self._last_log[j.id] = max(last or 0.0, seen)

    # -- acks and silences -------------------------------------------------------------------

    def active(self) -> list[Alert]:
        """Every firing alert, most severe first."""
        return self.engine.active()

    async def acknowledge(self, key: str, by: str | None = None) -> Alert:
        """Acknowledge a firing alert (stored; published as ``acknowledged``).

        Raises:
            KeyError: no alert with that key fires.
        """
        async with self._lock:
            now = self.clock()
            ack = await asyncio.to_thread(self.store.acknowledge, key, now, by)
            await self._commit(self.engine.acknowledge(ack, now))
            alert = self.engine.get(key)
            assert alert is not None
            return alert

    async def silence(
        self,
        *,
        duration_s: float,
        key: str | None = None,
        rule: str | None = None,
        host: str | None = None,
        job: str | None = None,
        by: str | None = None,
        comment: str | None = None,
    ) -> Silence:
        """Silence matching alerts (globs; see :class:`~console.alerts.store.Silence`) for
        ``duration_s`` seconds; stored, applied at once (``silenced`` transitions).

        Raises:
            ValueError: no pattern, or a duration that is not positive.
        """
        async with self._lock:
            now = self.clock()
            silence = await asyncio.to_thread(
                self.store.add_silence,
                Silence(
                    0,
                    now + duration_s,
                    now,
                    key=key,
                    rule=rule,
                    host=host,
                    job=job,
                    by=by,
                    comment=comment,
                ),
            )
            await self._commit(self.engine.add_silence(silence, now))
            return silence

    async def unsilence(self, silence_id: int) -> bool:
        """Remove a silence (``unsilenced`` transitions); ``False`` if it did not exist."""
        async with self._lock:
            now = self.clock()
            gone = await asyncio.to_thread(self.store.remove_silence, silence_id)
            await self._commit(self.engine.remove_silence(silence_id, now))
            return gone
