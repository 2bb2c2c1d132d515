"""The service: one object under both faces (the headless CLI and the Textual app).

It owns the job store, the hosts' sessions (one per profile a job was submitted with), the
fleet monitor and the log follows, and publishes what happens as typed events
(:mod:`console.events`). The faces parse input, call a method here and show the result or the
events; the domain logic (job lookup, submit, the stop and rm sequences, gang teardown, log
archiving) lives here and in ``console/jobs`` and ``console/fleet``, never in a face.

Threading: every method runs on the caller's event loop; blocking work (the Docker SDK, workdir
hashing and copies, archive reads of whole files) goes to threads below this layer.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import os
import re
import shutil
import sys
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

from console.backends import backend_for
from console.backends.base import (
    DEFAULT_SHELL,
    Action,
    Capabilities,
    FollowHooks,
    JobBackend,
    StopOutcome,
    Submission,
    not_running_hint,
    profile_stop_grace,
    raise_if_unreachable,
)
from console.errors import (
    ConfigError,
    JobError,
    JobNotFound,
    StateError,
    UsageError,
    host_reason,
)
from console.events import (
    ArchiveStateChanged,
    EventBus,
    FollowStateChanged,
    JobChanged,
    LogLinesReceived,
    NodeExited,
    ProgressRead,
)
from console.jobs.logs import JobLogLine, read_job_logs
from console.jobs.states import NodeState
from console.jobs.status import (
    ACTIVE_STATES,
    LIST_DEADLINE_S,
    STOPPABLE,
    HostListing,
    failure_lines,
    job_summary,
    shown_state,
)
from console.jobs.store import JobRecord, NodeRecord, Store
from console.profiles import Profile, load_profile_file, resolve_profile
from console.session import Session
from remote.errors import GpuConsoleError

if TYPE_CHECKING:  # imported by the methods that use them (CLI start-up: `ps` needs none)
    from console.bench.model import BenchMode, BenchReport, DcgmVerdict, GpuBench, HostBench
    from console.bench.store import StoredGpu
    from console.fleet.monitor import FleetMonitor
    from console.fleet.state import FleetState
    from console.history import HistoryRecorder
    from console.jobs.copy import CopyRequest, CopyResult
    from console.notebook.attach import NotebookTunnel
    from console.report import By, Report
    from console.stacks.analysis import Analysis
    from console.stacks.frtrace import FrTrace
    from console.stacks.model import Capture, NodeCapture
    from console.throughput import JobProgress
    from remote.telemetry.schema import Sample

log = logging.getLogger("gpuconsole.service")

#: How long a bench job may run before it is stopped (s), by mode: the image's start and
#: torch's import, CUDA and NCCL start-up on every GPU, then the measurements (the sustained
#: load: 6 s quick, 60 s full; a host's GPUs take turns on PCIe).
BENCH_TIMEOUT_S = {"quick": 300.0, "full": 1200.0}

__all__ = [
    "DEFAULT_SHELL",
    "STOPPABLE",
    "Capabilities",
    "Follow",
    "JobDescription",
    "NodeDescription",
    "Service",
    "StopOutcome",
    "Submission",
    "not_running_hint",
    "profile_of",
]

Intake = Literal["loop", "process"]
"""Where :meth:`Service.start_follow` reads a job's log streams."""


def profile_of(job: JobRecord, fallback: Profile) -> Profile:
    """The profile a job was submitted with (its file, else by name), else ``fallback``."""
    if job.profile_source and Path(job.profile_source).is_file():
        try:
            return load_profile_file(Path(job.profile_source))
        except ConfigError:
            pass
    if job.profile == fallback.name:
        return fallback
    try:
        return resolve_profile(job.profile)
    except ConfigError:
        return fallback


@dataclass(frozen=True)
class NodeDescription:
    """One node of a job for ``describe``: where it runs and the exact commands.

    Attributes:
        node_rank: the node.
        host: its host.
        container_name: ``gpuconsole-<job id>-n<rank>``.
        container_id: the container, once created.
        state: node state (see :mod:`console.jobs.status`).
        exit_code: once exited.
        docker_run: the equivalent ``docker run`` line (secret values as ``***``), or ``None``
            when the container is gone.
        torchrun: the command run in the container (torchrun; JupyterLab for a notebook,
            rendered as ``command:``), or ``None``.
    """

    node_rank: int
    host: str
    container_name: str
    container_id: str | None
    state: NodeState
    exit_code: int | None
    docker_run: str | None
    torchrun: str | None


@dataclass(frozen=True)
class JobDescription:
    """A job for ``describe``: its record, its spec as YAML, each node's commands and the
    job's last stacks (``stacks``: when they were taken and what they said, one line)."""

    job: JobRecord
    spec_yaml: str
    nodes: tuple[NodeDescription, ...]
    last_stacks: tuple[float, str] | None = None
    progress: tuple[str, ...] = ()

    def render(self) -> str:
        """Plain text, the same in the CLI and the app."""
        j = self.job
        state = shown_state(j)
        out = [
            f"job {j.id}  ({j.name})",
            f"state: {state}"
            + (f" (was {j.state})" if state != j.state else "")
            + (f", exit code {j.exit_code}" if j.exit_code is not None else ""),
            f"profile: {j.profile}",
            f"created: {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(j.created_at))}",
        ]
        if j.failure:
            out += failure_lines(j.failure)
        elif job_summary(j):
            out.append(job_summary(j))
        out += self.progress
        for n in self.nodes:
            code = f" exit {n.exit_code}" if n.exit_code is not None else ""
            out.append("")
            out.append(
                f"node {n.node_rank} on {n.host}: {n.state}{code}  container "
                f"{n.container_name} {(n.container_id or '-')[:12]}"
            )
            if n.docker_run:
                out.append(f"  {n.docker_run}")
            if n.torchrun:
                label = "torchrun" if j.kind == "train" else "command"
                out.append(f"  {label}: {n.torchrun}")
        if self.last_stacks is not None:
            taken, summary = self.last_stacks
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(taken))
            out += ["", f"last stacks ({when}; `gpuconsole stacks {j.id}` takes new ones):"]
            out.append(f"  {summary}")
        if self.spec_yaml.strip():
            out += ["", "spec:", *("  " + ln for ln in self.spec_yaml.rstrip().splitlines())]
        return "\n".join(out)


@dataclass
class Follow:
    """A running log follow of one job (see :meth:`Service.start_follow`).

    Attributes:
        job_id: the job.
        task: the task pumping lines; cancel it (or call :meth:`close`) to stop following.
    """

    job_id: str
    task: asyncio.Task[JobRecord | None]
    nodes_done: set[int] = field(default_factory=set)

    async def close(self) -> None:
        """Stop following; ends every reader of this follow."""
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


class Service:
    """The engine under both faces (see the module docstring).

    Args:
        profile: the profile of the command (its hosts are the fleet; new jobs run there).
        store: the job store (default: the one in the state dir).

    Use as ``async with Service(profile) as svc:``; :meth:`close` ends follows, the fleet
    monitor and every connection.
    """

    def __init__(self, profile: Profile, *, store: Store | None = None) -> None:
        self.profile = profile
        self.bus = EventBus()
        self._store = store
        self._sessions: dict[str, Session] = {}
        self.fleet: FleetState | None = None
        self._monitor: FleetMonitor | None = None
        self._replay: asyncio.Task[int] | None = None
        self._follows: dict[str, Follow] = {}
        self._reconcile = asyncio.Lock()
        self._listed: tuple[float, list[JobRecord]] | None = None  # (monotonic s, jobs)
        #: what each host of the profile said in the last :meth:`list_jobs` (empty: none
        #: yet, or a Slurm profile)
        self.host_status: dict[str, HostListing] = {}
        self._deadline_s = LIST_DEADLINE_S  # of the list_jobs in progress
        #: job id -> its latest :meth:`progress`
        self.last_progress: dict[str, JobProgress] = {}
        self._history: HistoryRecorder | None = None
        self._history_off = False

    async def __aenter__(self) -> Service:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- store and sessions -----------------------------------------------------------------

    @property
    def store(self) -> Store:
        """The job store, opened on first use.

        Raises:
            GpuConsoleError: the state dir cannot be created.
        """
        if self._store is None:
            self._store = Store()
        return self._store

    def session(self, profile: Profile | None = None) -> Session:
        """The session of a profile (default: the service's)."""
        prof = profile or self.profile
        key = prof.source or prof.name
        s = self._sessions.get(key)
        if s is None:
            s = self._sessions[key] = Session(prof)
        return s

    def session_for(self, job: JobRecord) -> Session:
        """The session of the profile the job was submitted with."""
        return self.session(profile_of(job, self.profile))

    async def close(self) -> None:
        """End every follow, the fleet monitor and every connection; write the history's
        minutes in progress; close the store."""
        for f in list(self._follows.values()):
            await f.close()
        self._follows.clear()
        await self.stop_fleet()
        if self._history is not None:
            rec, self._history = self._history, None
            rec.flush()
            await asyncio.to_thread(rec.store.close)
        for s in self._sessions.values():
            await s.close()
        self._sessions.clear()
        if self._store is not None:
            self._store.close()
            self._store = None

    # -- history ----------------------------------------------------------------------------

    @property
    def history(self) -> HistoryRecorder | None:
        """The recorder of the GPU-hours history (:mod:`console.history`), opened on first
        use; ``None`` when its file cannot be opened (said once in the log: nothing else
        stops for it)."""
        if self._history is None and not self._history_off:
            from console.history import HistoryRecorder, HistoryStore

            try:
                store = HistoryStore(self.store.root)
            except GpuConsoleError as e:
                self._history_off = True
                log.warning("history not recorded: %s", e.message)
                return None
            idle = self.profile.alert_rules.gpus_idle.idle_pct
            self._history = HistoryRecorder(store, idle_pct=idle)
        return self._history

    async def report(self, since: float, *, by: By = "job", until: float | None = None) -> Report:
        """The GPU-hours report (:mod:`console.report`) from ``since`` (Unix s) to ``until``
        (default now), at the profile's ``price_per_gpu_hour``.

        Raises:
            StateError: the history cannot be read.
        """
        from console.history import HistoryStore
        from console.report import build_report

        store = HistoryStore(self.store.root)
        gpus, jobs, info = await asyncio.to_thread(store.read, since)
        return build_report(
            gpus,
            jobs,
            info,
            since=since,
            until=time.time() if until is None else until,
            by=by,
            price_per_gpu_hour=self.profile.price_per_gpu_hour,
            idle_pct=self.profile.alert_rules.gpus_idle.idle_pct,
        )

    # -- jobs -------------------------------------------------------------------------------

    def find_job(self, ref: str) -> JobRecord:
        """The one job matching an id, id prefix or name (the newest of that name).

        Raises:
            JobNotFound: none, or an ambiguous id prefix.
        """
        found = self.store.find(ref)
        if not found:
            raise JobNotFound(f"no job {ref!r}", "list jobs with `gpuconsole ps --all`")
        by_name = [j for j in found if j.name == ref]
        if by_name:
            return by_name[0]
        if len(found) > 1:
            ids = ", ".join(j.id for j in found[:5])
            raise JobNotFound(f"{ref!r} matches several jobs: {ids}", "give more of the job id")
        return found[0]

    async def locate_job(self, ref: str) -> JobRecord:
        """:meth:`find_job`, on the hosts too: when no job of the store matches ``ref`` (it
        was submitted from another console or state dir, or the store was replaced), the
        jobs on the profile's hosts (a Slurm profile: its job folders) that the store does
        not know are adopted first, by their labels as ``ps`` does, and ``ref`` is looked up
        again. What every command that takes a JOB uses.

        Raises:
            JobNotFound: no such job there either (the hosts that could not be asked are
                named), or an ambiguous id prefix.
        """
        if self.store.find(ref):
            return self.find_job(ref)
        unanswered: list[str] = []
        backend = self.profile_backend()
        try:
            await backend.adopt(unanswered=unanswered)
        except GpuConsoleError as e:
            unanswered.append(e.message)
        if self.store.find(ref):
            return self.find_job(ref)
        raise JobNotFound(
            f"no job {ref!r} in {self.store.root} nor on {backend.places()} of profile "
            f"{self.profile.name!r}"
            + (f"; not asked: {'; '.join(unanswered)}" if unanswered else ""),
            "list jobs with `gpuconsole ps --all`; a job of another profile: "
            "`gpuconsole -p PROFILE ...`",
        )

    def backend_for(self, job: JobRecord, session: Session | None = None) -> JobBackend:
        """The backend of a job (:func:`console.backends.backend_for`: its profile's
        scheduler, its runtime), over ``session`` (default: its profile's)."""
        return backend_for(session or self.session_for(job), self.store, job.runtime)

    def profile_backend(self, host: str | None = None) -> JobBackend:
        """The backend that plans new jobs on the service's profile (of ``host``'s runtime
        when given)."""
        runtime = self.profile.host_runtime(host) if host is not None else "docker"
        return backend_for(self.session(), self.store, runtime)

    def capabilities(self, job: JobRecord) -> Capabilities:
        """What the job's runtime offers beyond the lifecycle (``exec``, ``cp``, ...); the
        faces hide or refuse an action it does not offer, with
        ``backend_for(job).refusal(action, job)`` as the reason."""
        return self.backend_for(job).capabilities

    def refusal(self, job: JobRecord, action: Action) -> GpuConsoleError | None:
        """Why the job's runtime does not offer ``action`` (the backend's error, with what
        to do instead, for the job's first node), or ``None`` when it does (or the job has
        no node to name): the faces read it before they offer the action, so a refusal is
        said before any prompt or host is asked."""
        backend = self.backend_for(job)
        if backend.capabilities.offers(action) or not job.nodes:
            return None  # a job without nodes is refused by the action itself
        node = min(job.nodes, key=lambda n: n.node_rank)
        return backend.refusal(action, job, node)

    async def refresh_job(self, job: JobRecord, *, teardown: bool = True) -> JobRecord:
        """Reconcile a job with its runtime (gang teardown on a failure unless
        ``teardown=False``) and publish :class:`JobChanged`."""
        job = await self.backend_for(job).refresh(job, teardown=teardown)
        self.bus.publish(JobChanged(job))
        return job

    async def list_jobs(
        self,
        *,
        include_removed: bool = False,
        warn: Callable[[str], None] | None = None,
        max_age_s: float = 0.0,
        deadline_s: float = LIST_DEADLINE_S,
    ) -> list[JobRecord]:
        """Every job (newest first), reconciled with the hosts: jobs found by label on the
        profile's hosts are adopted, unfinished ones refreshed.

        Each host of the profile is listed once, concurrently (at most
        :data:`~console.backends.containers.LIST_CONCURRENCY` at once), and that one listing
        serves both the adoption and every job with nodes there (the profile's backend's
        ``reconcile``: :func:`console.backends.containers.reconcile_fleet`; a Slurm profile
        adopts from its login host and asks Slurm per job). What each host said is kept in
        :attr:`host_status`.

        Args:
            include_removed: also jobs whose containers were removed.
            warn: called with one line per host that could not be asked or had not answered
                within ``deadline_s`` (its jobs keep their last known state), or job that
                could not be refreshed.
            max_age_s: a reconcile that finished at most this long ago (s, monotonic) is
                reused instead of asking the hosts again (the app's alert rules reuse the
                jobs view's); 0 always asks.
            deadline_s: seconds to wait for the hosts' listings; a host still connecting or
                listing then is ``pending``.
        """
        async with self._reconcile:  # one reconcile at a time (the app's and its alerts')
            last = self._listed
            if (
                max_age_s > 0
                and not include_removed
                and last is not None
                and time.monotonic() - last[0] <= max_age_s
            ):
                return list(last[1])
            self._deadline_s = deadline_s
            jobs = await self._list_jobs(include_removed, warn)
            if not include_removed:
                self._listed = (time.monotonic(), jobs)
            return jobs

    async def _list_jobs(
        self, include_removed: bool, warn: Callable[[str], None] | None
    ) -> list[JobRecord]:
        store = self.store
        deadline_s = self._deadline_s

        def unfinished(jobs: list[JobRecord]) -> list[JobRecord]:
            return [
                j
                for j in jobs
                if j.removed_at is None
                and (
                    j.state in (*ACTIVE_STATES, "unknown")
                    or any(n.state in (*STOPPABLE, "unreachable") for n in j.nodes)
                )
            ]

        todo = unfinished(await store.call(store.jobs, include_removed=include_removed))
        session = self.session()
        # the jobs of this profile are refreshed from the one listing of its hosts
        watched = [j for j in todo if self.session_for(j) is session]
        listed = await self.profile_backend().reconcile(watched, deadline_s=deadline_s, warn=warn)
        if listed:  # the jobs just adopted (that listing inspected their nodes) too
            todo = unfinished(await store.call(store.jobs, include_removed=include_removed))
        self.host_status = listed
        orphans: set[str] = set()
        backends: dict[str, JobBackend] = {}
        for j in todo:
            # reads the job's profile: once per job here
            backend = backends[j.id] = self.backend_for(j)
            if not (gone := backend.hosts_gone(j)):
                continue
            orphans.add(j.id)
            prof = backend.session.profile
            if warn:
                hosts = ", ".join(repr(h) for h in gone)
                warn(
                    f"job {j.id}: host {hosts} is no longer in profile {prof.name!r}, so its "
                    f"state there is unknown; add the host back, or `gpuconsole rm --force "
                    f"{j.id}` to forget the job"
                )
        todo = [j for j in todo if j.id not in orphans]
        results = await asyncio.gather(
            *(
                self._refresh_listed(
                    backends[j.id], j, listed if backends[j.id].session is session else None
                )
                for j in todo
            ),
            return_exceptions=True,
        )
        seen: set[str] = set()
        for h in listed.values():
            if h.reason is not None and warn:
                seen.add(h.host)
                warn(h.reason)
        for j, r in zip(todo, results):
            if isinstance(r, GpuConsoleError):
                if warn:
                    warn(f"job {j.id}: {r.message}")
            elif isinstance(r, BaseException):
                raise r
            for host, why in j.unreachable.items():
                if host not in seen and warn:
                    seen.add(host)
                    warn(why)
        return await store.call(store.jobs, include_removed=include_removed)

    async def _refresh_listed(
        self, backend: JobBackend, job: JobRecord, listed: dict[str, HostListing] | None
    ) -> JobRecord:
        """:meth:`refresh_job` reading the job's nodes from a listing of the profile's hosts
        (none: its profile is another, asked as :meth:`refresh_job` does)."""
        job = await backend.refresh(job, listed=listed)
        self.bus.publish(JobChanged(job))
        return job

    async def plan(
        self,
        spec_path: Path,
        overrides: dict[str, Any] | None = None,
        *,
        dry_run: bool = False,
        force: bool = False,
        exclude_slow: bool | None = None,
    ) -> Submission:
        """Validate a spec and preflight every host (no container is created). ``exclude_slow``
        leaves out the GPUs the last bench flagged (``None``: the profile's
        ``defaults.exclude_slow``); the plan names those it uses.

        Without ``dry_run`` the workdir is synced to the hosts (content-addressed, so a
        submission that is not launched leaves only a reusable copy).

        Raises:
            ConfigError: the spec file is missing or invalid (file, line, field).
            PlanError, JobNameInUse, TransportError, ImageNotFound: see
                :func:`console.jobs.launch.prepare` (Slurm:
                :func:`console.slurm.backend.plan_slurm`).
        """
        from console.jobs.spec import load_spec
        from console.yamlsrc import source_problem

        problem = source_problem(spec_path, "job spec")
        if problem is not None:
            raise problem
        loaded = await asyncio.to_thread(load_spec, spec_path, overrides)
        return await self.profile_backend().plan(
            loaded, dry_run=dry_run, force=force, exclude_slow=exclude_slow
        )

    async def submit(
        self, submission: Submission, on_started: Callable[[str], None] | None = None
    ) -> JobRecord:
        """Launch a planned submission (all nodes or none) and publish :class:`JobChanged`.
        ``on_started(job_id)``: called the moment the launch is complete (see
        :meth:`console.backends.base.JobBackend.submit`).

        Raises:
            JobError: the submission was a dry run.
            GpuConsoleError: a create/start failure, after everything was rolled back.
        """
        if submission.dry_run:
            raise JobError("a dry-run plan cannot be launched", "plan it again without dry_run")
        if submission.backend is None:
            raise JobError(
                "this submission was not planned by a backend", "plan it with `Service.plan`"
            )
        job = await submission.backend.submit(submission, on_started)
        self.bus.publish(JobChanged(job))
        return job

    def stop_preview(self, job: JobRecord, grace: float | None = None) -> list[str]:
        """What :meth:`stop` will run, one line per node: ``host: docker stop -t G NAME``
        (``docker rm`` for a container that never started). An invalid grace period shows
        as ``?`` here; :meth:`stop` then refuses it with the error.
        """
        try:
            g = str(math.ceil(self.stop_grace(job, grace)))
        except (UsageError, ConfigError):
            g = "?"
        return self.backend_for(job).stop_preview(job, g)

    def remove_preview(self, job: JobRecord) -> list[str]:
        """What :meth:`remove` removes, one line per node (``host: docker rm NAME``, a host
        runtime node's folder, a Slurm job's folder), then what it keeps: the archived log
        lines. Nothing is asked of the hosts."""
        lines = self.backend_for(job).remove_preview(job)
        lines.append(
            f"Every log line is archived first: `gpuconsole logs {job.id}` still shows them."
        )
        return lines

    def stop_grace(self, job: JobRecord, grace: float | None) -> float:
        """The grace period of a stop (s): ``grace`` (the ``--grace`` flag), else the job's
        profile's ``defaults.stop_grace``.

        Raises:
            UsageError: ``grace`` is negative, infinite or NaN.
            ConfigError: the profile's ``stop_grace`` is (naming the profile file and field).
        """
        if grace is not None:
            if not math.isfinite(grace) or grace < 0:
                raise UsageError(
                    f"--grace {grace:g}: must be a finite number of seconds >= 0",
                    "give the seconds between SIGTERM and SIGKILL, e.g. `--grace 30`",
                )
            return grace
        return profile_stop_grace(self.session_for(job).profile)

    async def stop(self, job: JobRecord, grace: float | None = None) -> StopOutcome:
        """SIGTERM every running node's container, SIGKILL after ``grace`` s (default: the
        profile's ``stop_grace``); remove the containers of an interrupted launch (created,
        never started: nothing runs in them, and Docker cannot stop them).

        Nodes on the hosts that answer are stopped even when another host of the job cannot
        be reached (a stop is what an operator does when something is wrong).

        Raises:
            UsageError, ConfigError: a grace period that is negative, infinite or NaN (see
                :meth:`stop_grace`), before anything is done.
            JobError: a host of the job could not be reached (its nodes' state is unknown,
                they may still run): raised after the reachable nodes were stopped, naming
                them.
        """
        seconds = self.stop_grace(job, grace)
        try:
            out = await self.backend_for(job).stop(job, seconds)
        except JobError:
            self.bus.publish(JobChanged(job))  # the nodes it could stop (refreshed in place)
            raise
        self.bus.publish(JobChanged(out.job))
        return out

    async def remove(self, job: JobRecord, *, force: bool = False) -> JobRecord:
        """Remove what a job left on its runtime (containers, folders) after archiving every
        line (``logs`` still works), stopping it first with ``force``; a job whose profile no
        no longer names its hosts is only forgotten (see
        :meth:`console.backends.docker.DockerBackend.remove`).

        Raises:
            JobError: the job is running and ``force`` is not set, or a host is unreachable.
        """
        job = await self.backend_for(job).remove(job, force=force)
        self.bus.publish(JobChanged(job))
        return job

    async def describe(self, job: JobRecord) -> JobDescription:
        """The job's spec, hosts, containers and each node's ``docker run`` and torchrun
        lines (read back from the containers; secret values masked)."""
        from console.jobs.plan import TOKEN_ENV

        backend = self.backend_for(job)
        # a notebook's token is as secret as the spec's ${VAR} values
        secret = set(job.secret_env) | {TOKEN_ENV}
        nodes = []
        for n in job.nodes:
            docker_run, torchrun = await backend.describe_node(job, n, secret)
            nodes.append(
                NodeDescription(
                    n.node_rank,
                    n.host,
                    n.container_name,
                    n.container_id,
                    n.state,
                    n.exit_code,
                    docker_run,
                    torchrun,
                )
            )
        import yaml  # PyYAML: only `describe` writes YAML

        spec_yaml = yaml.safe_dump(job.spec, sort_keys=False) if job.spec else ""
        last = None
        if (capture := await asyncio.to_thread(self.last_stacks, job)) is not None:
            from console.stacks.analysis import analyse

            last = (capture.taken_at, analyse(capture).summary())
        progress: tuple[str, ...] = ()
        if job.state == "running" and job.kind == "train":
            from console.throughput import throughput_lines

            p = (await self.progress([job])).get(job.id)
            if p is not None:
                progress = tuple(throughput_lines(p.throughput, p.cost, time.time()))
        return JobDescription(job, spec_yaml, tuple(nodes), last, progress)

    async def progress(
        self, jobs: list[JobRecord], *, deadline_s: float = 10.0
    ) -> dict[str, JobProgress]:
        """Each running training job's progress and cost, from the last
        :data:`~console.throughput.TAIL_LINES` lines of its log (all jobs read concurrently;
        a job whose log is not read within ``deadline_s`` is left out) and its profile's
        ``price_per_gpu_hour``. Jobs not running, and notebooks, are left out. The result is
        also kept in :attr:`last_progress` and published as :class:`ProgressRead`.

        The GPUs a job holds are the fleet's telemetry's when the fleet monitor runs, else
        the spec's count (``gpus_per_node: all`` is then unknown: no cost).
        """
        from console.throughput import (
            TAIL_LINES,
            JobProgress,
            job_cost,
            progress_points,
            ran_seconds,
            rank_rates,
            spec_gpus,
            throughput_from,
            world_size,
        )

        usage = self.fleet.job_usage() if self.fleet is not None else {}

        async def one(job: JobRecord) -> JobProgress:
            now = time.time()
            try:
                lines = await self.backend_for(job).read_logs(
                    job, node=None, since_ns=None, tail=TAIL_LINES
                )
            except GpuConsoleError as e:
                return JobProgress(job.id, None, None, now, error=e.message)
            held = usage.get(job.id)
            gpus = len(held.gpus) if held is not None and held.gpus else spec_gpus(job)
            # parsing a tail of many nodes costs tens of ms: not on the event loop (the app's
            # keys and frames share it)
            points = await asyncio.to_thread(progress_points, lines)
            tp = throughput_from(points, world_size=world_size(job, gpus), now=now)
            price = profile_of(job, self.profile).price_per_gpu_hour
            cost = job_cost(gpus, price, ran_seconds(job, now), tp)
            last = max((ln.ts_ns for ln in lines), default=None)
            return JobProgress(
                job.id,
                tp,
                cost,
                now,
                last / 1e9 if last is not None else None,
                rank_rates=rank_rates(points),
            )

        todo = [
            j for j in jobs if j.state == "running" and j.kind == "train" and j.removed_at is None
        ]
        tasks = [asyncio.create_task(one(j)) for j in todo]
        out: dict[str, JobProgress] = {}
        if tasks:
            done, pending = await asyncio.wait(tasks, timeout=deadline_s)
            for t in pending:
                t.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            for t in done:
                if (exc := t.exception()) is None:
                    p = t.result()
                    out[p.job_id] = p
                elif not isinstance(exc, GpuConsoleError):
                    raise exc
        self.last_progress.update(out)
        asked = {j.id for j in todo}
        for j in jobs:  # a job no longer running has no progress
            if j.id not in asked:
                self.last_progress.pop(j.id, None)
        self.bus.publish(ProgressRead(tuple(out.values())))
        if out and (rec := self.history) is not None:
            from console.history import JobInfo

            names = {j.id: JobInfo(j.id, j.name, j.profile) for j in todo if j.id in out}
            rec.on_progress(out.values(), names)
        return out

    # -- exec -------------------------------------------------------------------------------

    #: The shell ``exec`` starts when no command is given: bash when the image has it.
    DEFAULT_SHELL = DEFAULT_SHELL

    def exec_target(self, job: JobRecord, node: int | None) -> NodeRecord:
        """The node ``exec`` runs in: ``node``, else node 0.

        Raises:
            UsageError: no such node.
            JobError: it is not running, or its runtime has no container to run a command in
                (the way to get a shell there instead).
        """
        self.check_node(job, node)
        n = next(n for n in job.nodes if n.node_rank == (node or 0))
        return self.backend_for(job).exec_target(job, n)

    async def exec(self, job: JobRecord, node: int | None, command: list[str], *, tty: bool) -> int:
        """Run ``command`` (default: a shell) in a node's container, attached to this
        terminal (``docker exec`` on the host, through an SSH PTY when ``tty``); returns its
        exit code.

        Raises:
            JobError: the node is not running.
            TransportError: the host cannot be reached.
        """
        attach = await self.prepare_exec(job, node, command, tty=tty)
        return await attach()

    async def prepare_exec(
        self, job: JobRecord, node: int | None, command: list[str], *, tty: bool
    ) -> Callable[[], Coroutine[Any, Any, int]]:
        """What :meth:`exec` does before it takes the terminal: refresh the job from its
        host, check that the node runs, connect. Returns the call that attaches the terminal
        and returns the command's exit code (the app hands the terminal over only for it, so
        a refusal is said on the app's screen).

        Raises:
            JobError: the node is not running.
            TransportError: the host cannot be reached.
        """
        backend = self.backend_for(job)
        if not backend.capabilities.exec:  # refused without asking the runtime
            self.exec_target(job, node)
        job = await backend.refresh(job, teardown=False)
        raise_if_unreachable(job)
        n = self.exec_target(job, node)
        return await backend.attach_exec(job, n, command, tty=tty)

    # -- stacks -----------------------------------------------------------------------------

    async def stacks(
        self,
        job: JobRecord,
        *,
        node: int | None = None,
        rank: int | None = None,
        native: bool = False,
        save: bool = True,
    ) -> tuple[Capture, Analysis]:
        """Every rank's Python stack, all nodes at once (the job's backend takes them, see
        :meth:`JobBackend.take_stacks`), grouped and read (:func:`console.stacks.analysis.
        analyse`); saved as the job's last capture (:meth:`last_stacks`) unless ``save`` is
        off. A node that could not be read is in the result with its reason.

        Args:
            node: only this node's processes.
            rank: only this rank (and its children).
            native: native frames too (py-spy ``--native``).

        Raises:
            UsageError: ``node`` is not a node of the job.
            JobError: the job runs on no node (what to read instead), or its runtime cannot.
        """
        from console.stacks.analysis import analyse
        from console.stacks.model import Capture, NodeCapture

        backend = self.backend_for(job)
        if not backend.capabilities.stacks:
            raise backend.refusal("stacks", job, job.nodes[0] if job.nodes else None)
        if node is not None and node not in {n.node_rank for n in job.nodes}:
            raise UsageError(
                f"--node {node}: job {job.id} has nodes "
                + ", ".join(str(n.node_rank) for n in job.nodes),
                "pass one of them, or leave --node out for every node",
            )
        nproc = job.spec.get("nproc_per_node")
        world = job.node_count * nproc if isinstance(nproc, int) and nproc > 0 else None
        if rank is not None and (rank < 0 or (world is not None and rank >= world)):
            has = f"job {job.id} has ranks 0-{world - 1}" if world else "a rank is 0 or more"
            raise UsageError(
                f"--rank {rank}: {has}", "pass one of them, or leave --rank out for every rank"
            )
        nodes = [n for n in job.nodes if node is None or n.node_rank == node]
        down = {n.host: job.unreachable[n.host] for n in nodes if n.host in job.unreachable}
        if down and len(down) == len({n.host for n in nodes}):
            why = next(iter(down.values()))
            raise JobError(
                f"job {job.id}: cannot reach {', '.join(sorted(down))}: {why}",
                "the job may still be running there; retry when the host is reachable",
            )
        if not any(n.state == "running" for n in nodes):
            if node is None and rank is None:
                ended = await self._dumps_of_ended(backend, job)
                if ended is not None:
                    return ended
            where = f"node {node} of job {job.id}" if node is not None else f"job {job.id}"
            raise JobError(
                f"{where} is not running ({job.state}): a process that ended has no stack",
                f"`gpuconsole logs {job.id}` shows how it ended"
                + (
                    "; `gpuconsole describe` shows its last stacks" if self.last_stacks(job) else ""
                ),
            )
        taken = await backend.take_stacks(job, nodes, native=native)
        if rank is not None:
            taken = [
                dataclasses.replace(
                    n,
                    processes=tuple(
                        p for p in n.processes if p.role in ("rank", "child") and p.rank == rank
                    ),
                )
                for n in taken
            ]
        capture = Capture(
            job.id, time.time(), list(taken), native=native, whole=node is None and rank is None
        )
        if rank is not None and not capture.processes("rank") and not any(n.error for n in taken):
            capture.nodes.append(NodeCapture(-1, "-", error=f"rank {rank} was on no node read"))
        if capture.whole and capture.dumps():
            capture.fr_trace = await self._fr_trace(backend, job, capture)
        analysis = analyse(capture)
        if save and node is None and rank is None:
            await asyncio.to_thread(self._save_stacks, capture)
        return capture, analysis

    async def _dumps_of_ended(
        self, backend: JobBackend, job: JobRecord
    ) -> tuple[Capture, Analysis] | None:
        """A job that no longer runs has no stacks, but the Flight Recorder dumps its ranks
        left (the NCCL watchdog writes them when a collective times out) still say which rank
        the others waited for: PyTorch's analyser over them, each node marked not running.
        ``None`` when no node holds a dump."""
        from console.stacks.analysis import analyse
        from console.stacks.model import Capture

        found = await backend.read_dumps(job)
        if not found:
            return None
        nproc = job.spec.get("nproc_per_node")
        world = job.node_count * nproc if isinstance(nproc, int) else None
        capture = Capture(
            job.id,
            time.time(),
            [
                dataclasses.replace(
                    _ended_ranks(n.node_rank, n.host, found.get(n.node_rank, {}), world),
                    error=f"not running ({n.state})",
                )
                for n in job.nodes
            ],
        )
        capture.fr_trace = await self._fr_trace(backend, job, capture)
        return capture, analyse(capture)

    async def _fr_trace(self, backend: JobBackend, job: JobRecord, capture: Capture) -> FrTrace:
        """PyTorch's Flight Recorder analyser over every rank's dump of ``capture``, run on
        the node of the lowest rank that gave one, with that rank's own Python (where the
        job's PyTorch is; the spec's ``python``, else ``python3``, for a job that ended); one
        line instead when it could not run."""
        from console.stacks.frtrace import (
            FrTrace,
            analyser_args,
            dump_files,
            from_output,
            pending_of,
        )

        dumps = capture.dumps()
        ranks = tuple(sorted(dumps))
        records = {n.node_rank: n for n in job.nodes if n.container_id}
        holders = sorted((min(n.dumps), n.node_rank) for n in capture.nodes if n.dumps)
        lowest, node_rank = next(((r, nr) for r, nr in holders if nr in records), (None, None))
        if lowest is None or node_rank is None:
            return FrTrace(ranks, error="not run: no node of the job is known")
        rank = next((p for p in capture.processes("rank") if p.rank == lowest), None)
        spec_python = job.spec.get("python")
        python = (rank.exe if rank else None) or (
            spec_python if isinstance(spec_python, str) else "python3"
        )
        world = max((p.world_size or 0 for p in capture.processes("rank")), default=0)
        nproc = job.spec.get("nproc_per_node")
        if not world and isinstance(nproc, int):  # a job that ended: its spec says
            world = job.node_count * nproc
        args = analyser_args("{dir}")
        if len(ranks) < world:  # it refuses otherwise; what it cannot decide, it says
            args.append("--allow-incomplete-ranks")
        try:
            status, out, where = await backend.run_fr_trace(
                job, records[node_rank], python, dump_files(dumps), args
            )
        except GpuConsoleError as e:
            return FrTrace(ranks, error=f"not run: {e.message}")
        return from_output(ranks, status, out, where, pending_of(dumps))

    def _stacks_path(self, job: JobRecord) -> Path:
        return self.store.root / "stacks" / f"{job.id}.json"

    def _save_stacks(self, capture: Capture) -> None:
        import json
        import tempfile

        path = self.store.root / "stacks" / f"{capture.job_id}.json"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{capture.job_id}.")
            with os.fdopen(fd, "w") as f:
                f.write(json.dumps(capture.to_json()))
            os.replace(tmp, path)
        except OSError as e:  # the capture is still shown; only describe's copy is lost
            log.warning("stacks of %s not saved to %s: %s", capture.job_id, path, e)

    def last_stacks(self, job: JobRecord) -> Capture | None:
        """The job's last full capture (:meth:`stacks`), ``None`` if none was taken or it
        cannot be read."""
        import json

        from console.stacks.model import capture_from_json

        try:
            data = json.loads(self._stacks_path(job).read_text())
            return capture_from_json(data)
        except (OSError, ValueError, KeyError, TypeError):
            return None

    # -- shell (dev container) ----------------------------------------------------------------

    async def shell_on_host(
        self,
        host: str,
        command: list[str],
        *,
        tty: bool,
        image: str | None = None,
        gpus: Literal["all"] | int | list[int] = 0,
        workdir: str | None = None,
        warn: Callable[[str], None] | None = None,
    ) -> int:
        """``shell --host``: run ``command`` (default: a shell) in a fresh dev container on
        ``host`` and remove the container afterwards; returns the command's exit code.

        The container takes the profile's image (or ``image``), environment
        (``defaults.env``, ``${VAR}`` from yours, as jobs get it), mounts, shm/ipc, user,
        capabilities and security options (``--cap-drop ALL``, ``no-new-privileges``, as job
        containers), GPUs picked like a submit's (busy ones refused), and runs
        ``sleep infinity`` under ``--init`` with the labels ``io.gpuconsole.kind=shell`` and
        ``io.gpuconsole.host``. It is removed when the command ends, also on cancellation or
        a lost connection (best effort: ``warn`` is called naming it when it cannot be).

        Args:
            gpus: ``"all"``, a count (0: none) or GPU indices (nvidia-smi order).
            workdir: working directory in the container (default: the image's).

        Raises:
            UsageError: ``host`` is not in the profile, or runs jobs without Docker.
            ConfigError: the profile's ``defaults.env`` references an unset variable.
            PlanError: no image, or the GPUs do not fit / are busy.
            TransportError, ImageNotFound: the host or image cannot be reached.
        """
        prof = self.profile
        if not (backend := self.profile_backend()).capabilities.shell:
            raise backend.refusal("shell")
        if host not in prof.hosts:
            raise UsageError(
                f"unknown host {host!r}", f"hosts of profile {prof.name}: {', '.join(prof.hosts)}"
            )
        if not (backend := self.profile_backend(host)).capabilities.shell:
            raise backend.refusal("shell", host=host)
        return await backend.dev_shell(
            host, command, tty=tty, image=image, gpus=gpus, workdir=workdir, warn=warn
        )

    # -- bench --------------------------------------------------------------------------------

    async def bench(
        self,
        hosts: list[str] | None = None,
        *,
        mode: BenchMode = "quick",
        cross: bool = False,
        dcgm: bool = False,
        force: bool = False,
        sustain_s: float | None = None,
        say: Callable[[str], None] | None = None,
    ) -> BenchReport:
        """``gpuconsole bench``: bench every GPU of ``hosts`` (default: the profile's) and
        judge each against its model's fleet median and datasheet (:mod:`console.bench`).

        Each host with GPUs runs ``remote/bench/gpubench.py`` as a job (name ``gpubench``,
        one node, every GPU, one process per GPU) through its backend, exactly as ``submit``
        launches one: the profile's image and runtime, the busy-GPU refusal (``force`` to
        bench GPUs others hold), labels, claims; the job is followed to its end, its
        documents read from its log and the job removed. Hosts run at once. A host without
        an NVIDIA driver or GPU has nothing to bench. ``cross``: then one job over every host
        that was benched, the NCCL all-reduce across them. ``dcgm``: then ``dcgmi diag -r 1``
        (``-r 2`` for ``full``) on each benched host where DCGM is installed. The results
        and verdicts are kept in the state dir (:class:`console.bench.store.BenchStore`).

        Args:
            mode: ``quick`` (under 30 s a host once the image is there) or ``full``.
            sustain_s: the sustained load's seconds (default: the mode's, 6 or 60).
            say: called with a line of progress (a host started, ended).

        Raises:
            UsageError: a host that is not in the profile, or a Slurm profile.
            StateError: the results cannot be stored.
        """
        from console.bench import analysis
        from console.bench.model import BenchReport, HostBench
        from console.bench.store import BenchStore
        from console.jobs.launch import gpu_facts

        prof = self.profile
        if prof.scheduler == "slurm":
            raise UsageError(
                f"profile {prof.name} is a Slurm cluster: bench runs on a profile's SSH hosts",
                "bench the nodes with a profile that lists them as hosts",
            )
        names = list(hosts) if hosts else list(prof.hosts)
        unknown = [h for h in names if h not in prof.hosts]
        if unknown:
            raise UsageError(
                f"--host {unknown[0]!r}: not a host of profile {prof.name}",
                f"hosts: {', '.join(prof.hosts)}",
            )
        tell = say or (lambda _line: None)
        started = time.time()
        session = self.session()
        args = ["--mode", mode] + (["--sustain-s", f"{sustain_s:g}"] if sustain_s else [])

        async def one(host: str) -> tuple[list[GpuBench], HostBench]:
            try:
                facts = await gpu_facts(session, host)
            except GpuConsoleError as e:
                why = host_reason(e, named=False)  # the lines name the host already
                tell(f"{host}: not benched: {why}")
                return [], HostBench(host, mode, time.time(), "failed", False, why)
            if not facts.count:
                why = "no NVIDIA driver" if facts.count is None else "no GPU"
                return [], HostBench(host, mode, time.time(), "no_gpu", False, why)
            tell(f"{host}: benching {facts.count} GPU(s) ({mode})")
            gpus, host_docs = await self._bench_job(
                [host], "all", args, mode, force, sustain_s or 0.0
            )
            h = host_docs[0] if host_docs else None
            if h is None or h.state != "benched":
                tell(f"{host}: {h.reason if h else 'no result'}")
            else:
                tell(f"{host}: done in {h.elapsed_s or 0:.0f} s")
            return gpus, h or HostBench(host, mode, time.time(), "failed", False, "no result")

        done = await asyncio.gather(*(one(h) for h in names))
        run = [g for gs, _h in done for g in gs]
        host_results = [h for _gs, h in done]
        cross_result = None
        if cross:
            ok = [h for h in host_results if h.state == "benched" and h.gpus]
            if len(ok) < 2:
                cross_result = HostBench(
                    ",".join(h.host for h in ok) or "-",
                    mode,
                    time.time(),
                    "no_gpu",
                    False,
                    "--cross needs 2 or more hosts benched with GPUs",
                )
            else:
                per_node = min(h.gpus or 0 for h in ok)
                tell(f"across {', '.join(h.host for h in ok)}: all-reduce, {per_node} GPU(s) each")
                _g, cross_docs = await self._bench_job(
                    [h.host for h in ok], per_node, [*args, "--allreduce-only"], mode, force
                )
                with_ar = [d for d in cross_docs if d.allreduce]
                cross_result = dataclasses.replace(
                    with_ar[0] if with_ar else cross_docs[0],
                    host=",".join(h.host for h in ok),
                )
        dcgm_results = []
        if dcgm:
            level = 2 if mode == "full" else 1
            dcgm_results = list(
                await asyncio.gather(
                    *(
                        self._dcgm(h.host, level)
                        for h in host_results
                        if h.state == "benched" and h.gpus
                    )
                )
            )
        bstore = BenchStore(self.store.root)
        try:
            stored = await asyncio.to_thread(bstore.last_gpus, prof.name)
        except StateError as e:  # judged against this run alone; saving says it again
            log.warning("past bench results not read: %s", e)
            stored = []
        mine = {(g.host, g.index) for g in run}
        fleet = [s.result for s in stored if (s.result.host, s.result.index) not in mine] + run
        verdicts = analysis.judge(run, fleet)
        pairs = sorted(
            zip(run, verdicts),
            key=lambda p: (p[0].host, p[0].index if p[0].index is not None else -1),
        )
        await asyncio.to_thread(
            bstore.save,
            prof.name,
            pairs,
            [h for h in host_results if h.state == "benched"],
            cross_result if cross_result and cross_result.state == "benched" else None,
        )
        return BenchReport(
            prof.name,
            mode,
            started,
            time.time(),
            tuple(pairs),
            tuple(host_results),
            cross_result,
            tuple(dcgm_results),
        )

    async def _bench_job(
        self,
        hosts: list[str],
        gpus: Literal["all"] | int,
        args: list[str],
        mode: BenchMode,
        force: bool,
        extra_s: float = 0.0,
    ) -> tuple[list[GpuBench], list[HostBench]]:
        """Run the bench script as a job on ``hosts`` (see :meth:`bench`) and read its
        documents: the GPUs' results and one :class:`HostBench` per host (``failed`` with
        the reason when it could not run or did not end)."""
        from console.bench.model import HostBench, documents, gpu_result, host_result
        from console.jobs.spec import validate_spec
        from remote.bench import SCRIPT, stage
        from remote.transport import local_temp_dir

        def failed(why: str) -> tuple[list[GpuBench], list[HostBench]]:
            return [], [HostBench(h, mode, time.time(), "failed", False, why) for h in hosts]

        folder = Path(await asyncio.to_thread(local_temp_dir, "bench"))
        try:
            await asyncio.to_thread(stage, folder)
            data: dict[str, Any] = {
                "name": "gpubench",
                "nodes": hosts,
                "gpus_per_node": gpus,
                "workdir": str(folder),
                "script": SCRIPT,
                "args": args,
                # CUDA numbers the GPUs as nvidia-smi does (PCI order), so local rank i is
                # the i-th GPU given to the node
                "env": {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "PYTHONDONTWRITEBYTECODE": "1"},
                "flight_recorder": False,
            }
            loaded = validate_spec(data, "(bench)", folder)
            try:
                sub = await self.profile_backend(hosts[0]).plan(
                    loaded, dry_run=False, force=force, exclude_slow=False
                )
            except GpuConsoleError as e:
                return failed(e.message + (f" ({e.hint})" if e.hint else ""))
        finally:
            await asyncio.to_thread(shutil.rmtree, folder, True)
        plan = sub.prepared.plan
        try:
            job = await self.submit(sub)
        except GpuConsoleError as e:
            return failed(e.message)
        timeout = BENCH_TIMEOUT_S[mode] + extra_s + 2 * max(0, len(hosts) - 1)
        lines: list[str] = []

        async def collect() -> None:
            async for batch in self.follow_batches(job):
                lines.extend(x.text for x in batch)

        timed_out = False
        try:
            try:
                await asyncio.wait_for(collect(), timeout)
            except asyncio.TimeoutError:
                timed_out = True
                await self.stop(job, grace=5)
            job = await self.refresh_job(job)
        finally:
            try:
                await asyncio.shield(self.remove(job, force=True))
            except GpuConsoleError as e:
                log.warning("bench job %s not removed: %s", job.id, e)
        at = time.time()
        gpu_out: list[GpuBench] = []
        host_out: dict[str, HostBench] = {}
        for doc in documents(lines):
            raw = doc.get("node")
            node = raw if isinstance(raw, int) else 0
            if not 0 <= node < len(plan.nodes):
                continue
            n = plan.nodes[node]
            if doc["kind"] == "host":
                host_out.setdefault(n.host, host_result(doc, n.host, at, plan.runtime))
                if doc.get("allreduce"):
                    host_out[n.host] = host_result(doc, n.host, at, plan.runtime)
                continue
            local = doc.get("local_rank")
            index = (
                n.gpu_ids[local] if isinstance(local, int) and 0 <= local < len(n.gpu_ids) else None
            )
            gpu_out.append(gpu_result(doc, n.host, index, at))
        if timed_out or job.state != "succeeded":
            why = (
                f"the bench did not end within {timeout:.0f} s (job {job.id} stopped)"
                if timed_out
                else f"the bench job {job.id} {job.state}"
                + (f": {job.failure.get('reason')}" if job.failure else "")
            )
            for h in hosts:
                had = host_out.get(h)
                host_out[h] = HostBench(
                    h,
                    mode,
                    at,
                    "failed",
                    False,
                    why,
                    had.gpus if had else None,
                    runtime=plan.runtime,
                )
        out = [
            host_out.get(h) or HostBench(h, mode, at, "failed", False, "no result in its log")
            for h in hosts
        ]
        return gpu_out, out

    async def _dcgm(self, host: str, level: int) -> DcgmVerdict:
        """``dcgmi diag -r LEVEL`` on ``host`` when DCGM is installed there, read by
        :func:`console.bench.dcgm.parse_diag`; ``absent`` when it is not."""
        from console.bench.dcgm import parse_diag
        from console.bench.model import DcgmVerdict

        try:
            t = await self.session().connected(host)
            found = await t.run(["sh", "-c", "command -v dcgmi"], timeout=30)
            if found.returncode != 0:
                return DcgmVerdict(host, level, "absent", (), "dcgmi is not on the host's PATH")
            res = await t.run(["dcgmi", "diag", "-r", str(level)], timeout=900)
        except GpuConsoleError as e:
            return DcgmVerdict(host, level, "error", (), e.message)
        return parse_diag(host, level, res.stdout, res.stderr, res.returncode)

    def bench_lines(self) -> dict[tuple[str, int], str]:
        """(host, GPU index) -> the last bench's line for the fleet view (date, figures,
        verdict: :func:`console.bench.render.detail`)."""
        from console.bench.render import detail

        return {
            (s.result.host, s.result.index): detail(s)
            for s in self.bench_results()
            if s.result.index is not None
        }

    def bench_stamp(self) -> int | None:
        """When the bench results last changed (the results file's mtime, ns), ``None``
        when there are none: cheap, for a view that re-reads :meth:`bench_lines` on change."""
        from console.bench.store import BenchStore

        try:
            return BenchStore(self.store.root).path.stat().st_mtime_ns
        except OSError:
            return None

    def bench_results(self) -> list[StoredGpu]:
        """The last bench of every GPU of the profile, with its verdict (``[]`` when none, or
        the results cannot be read: logged)."""
        from console.bench.store import BenchStore

        try:
            return BenchStore(self.store.root).last_gpus(self.profile.name)
        except StateError as e:
            log.warning("bench results not read: %s", e)
            return []

    # -- notebooks ----------------------------------------------------------------------------

    async def plan_notebook(
        self,
        spec_path: Path | None = None,
        *,
        host: str | None = None,
        gpus: Literal["all"] | int | list[int] | None = None,
        image: str | None = None,
        workdir: str | None = None,
        name: str | None = None,
        dry_run: bool = False,
        force: bool = False,
    ) -> Submission:
        """Plan a notebook (``kind: notebook``, see :mod:`console.jobs.spec`): from a spec
        file (a file without ``kind`` is taken as a notebook), or from the flags alone.
        Launch it with :meth:`submit` (the same path as every job: labels, busy-GPU
        refusal, all or nothing), then reach it with :meth:`attach_notebook`.

        Args:
            host: the host (default: the spec's, else the profile's first).
            gpus: ``"all"``, a count or GPU indices; default: the spec's, else one GPU on a
                host that has GPUs and none on a host without.
            workdir: the notebook's folder on the host (absolute or ``~/``), mounted
                read-write at ``/workspace``; default :data:`console.jobs.spec.NOTEBOOK_WORKDIR`.
            name: the job name (default: the spec's, else ``notebook``).

        Raises:
            ConfigError: the spec is invalid or a training job (file, line, field), or a flag
                is (naming the flag).
            UsageError: ``host`` is not in the profile.
            PlanError, JobNameInUse, TransportError, ImageNotFound: see :meth:`plan`.
        """
        from console.jobs.launch import gpu_facts
        from console.jobs.spec import NOTEBOOK_FLAGS, validate_spec
        from console.yamlsrc import load_yaml

        if not (backend := self.profile_backend()).capabilities.notebook:
            raise backend.refusal("notebook")
        if host is not None and host not in self.profile.hosts:
            raise UsageError(
                f"--host {host!r}: not a host of profile {self.profile.name}",
                f"hosts: {', '.join(self.profile.hosts)}",
            )
        overrides: dict[str, Any] = {
            "nodes": [host] if host else None,
            "image": image,
            "gpus_per_node": gpus,
            "workdir": workdir,
            "name": name,
        }
        given = {k: v for k, v in overrides.items() if v is not None}
        if spec_path is not None:
            from console.yamlsrc import source_problem

            problem = source_problem(spec_path, "notebook spec")
            if problem is not None:
                raise problem
            data, lines = await asyncio.to_thread(load_yaml, spec_path, "notebook spec")
            if "kind" not in data and "script" in data:
                raise ConfigError(
                    "a training job spec (it has `script`), not a notebook",
                    f"`gpuconsole submit {spec_path}` runs it; a notebook spec "
                    "says `kind: notebook`",
                    path=str(spec_path),
                    field="script",
                    line=lines.get(("script",)),
                )
            if data.get("kind", "notebook") != "notebook":
                raise ConfigError(
                    f"a {data.get('kind')!r} spec, not a notebook",
                    f"`gpuconsole submit {spec_path}` runs it; `kind: notebook` makes a notebook",
                    path=str(spec_path),
                    field="kind",
                    line=lines.get(("kind",)),
                )
            data = {"kind": "notebook", **data, **given}
            source, base, flags = str(spec_path), spec_path.parent.resolve(), frozenset(given)
        else:
            data = {"kind": "notebook", "nodes": [next(iter(self.profile.hosts))], **given}
            if "name" not in data:
                # one notebook per host by default (a job's name runs once): notebook-<host>
                nodes = data["nodes"]
                host = nodes[0] if isinstance(nodes, list) and nodes else ""
                data["name"] = notebook_name(str(host))
            source, base, lines, flags = "(flags)", Path.cwd(), {}, frozenset(given)
        if "gpus_per_node" not in data:
            nodes = data.get("nodes")
            target = (
                nodes[0] if isinstance(nodes, list) and nodes else next(iter(self.profile.hosts))
            )
            count = (
                (await gpu_facts(self.session(), target)).count
                if target in self.profile.hosts
                else None
            )
            data["gpus_per_node"] = 1 if count else 0
        loaded = validate_spec(data, source, base, lines, flags, NOTEBOOK_FLAGS)
        return await backend.plan(loaded, dry_run=dry_run, force=force)

    async def find_notebook(self, ref: str) -> JobRecord:
        """The notebook job ``ref`` names (id, id prefix or name), reconciled with its host;
        jobs on the hosts that this store does not know yet are adopted first.

        Raises:
            JobNotFound: no such job.
            JobError: it is not a notebook.
        """
        job = await self.locate_job(ref)
        if job.kind != "notebook":
            raise JobError(
                f"{job.id} is a {job.kind} job, not a notebook",
                f"`gpuconsole shell {job.id}` enters its container",
            )
        return await self.refresh_job(job, teardown=False)

    async def attach_notebook(
        self, job: JobRecord, *, local_port: int | None = None, timeout: float | None = None
    ) -> NotebookTunnel:
        """Open a tunnel to a running notebook and wait until JupyterLab answers (see
        :func:`console.notebook.attach.open_notebook`); the caller closes the tunnel.

        Raises:
            JobError: not a running notebook, it ended while starting (with the reason
                :func:`console.jobs.status.job_summary` gives), or it did not answer in time.
            TransportError: the host cannot be reached, or ``local_port`` is taken.
        """
        from console.notebook.attach import READY_TIMEOUT_S, find_server, open_notebook

        backend = self.backend_for(job)
        if not backend.capabilities.notebook:
            raise backend.refusal("notebook", job, job.nodes[0] if job.nodes else None)
        session = backend.session
        server = await find_server(session, job)

        async def alive() -> str | None:
            fresh = await backend.refresh(job, teardown=False)
            if fresh.state in ("running", "pending"):
                return None
            self.bus.publish(JobChanged(fresh))
            return job_summary(fresh) or fresh.state

        return await open_notebook(
            session,
            server,
            local_port=local_port,
            timeout=READY_TIMEOUT_S if timeout is None else timeout,
            alive=alive,
        )

    # -- logs -------------------------------------------------------------------------------

    async def copy(self, job: JobRecord, node: int | None, request: CopyRequest) -> CopyResult:
        """``cp``: copy between this machine and one node's container of ``job`` over the
        job's SSH connection (see :func:`console.jobs.copy.copy_job_files` for the rules and
        the errors raised)."""
        return await self.backend_for(job).copy(job, node, request)

    async def read_logs(
        self,
        job: JobRecord,
        *,
        node: int | None = None,
        since_ns: int | None = None,
        tail: int | None = None,
        archive_only: bool = False,
    ) -> list[JobLogLine]:
        """A job's lines so far, merged in time order (containers first, else the archive;
        with ``archive_only`` the local archive alone, no host asked).

        Raises:
            UsageError: ``node`` is not a node of the job.
        """
        self.check_node(job, node)
        if archive_only:
            return await read_job_logs(
                self.session_for(job),
                self.store,
                job,
                node=node,
                since_ns=since_ns,
                tail=tail,
                archive_only=True,
            )
        return await self.backend_for(job).read_logs(job, node=node, since_ns=since_ns, tail=tail)

    @staticmethod
    def check_node(job: JobRecord, node: int | None) -> None:
        """Raise :class:`UsageError` unless ``node`` is ``None`` or a node rank of the job."""
        if node is not None and node not in {n.node_rank for n in job.nodes}:
            raise UsageError(
                f"--node {node}: job {job.id} has no node {node}", f"nodes: 0..{len(job.nodes) - 1}"
            )

    async def follow(
        self,
        job: JobRecord,
        *,
        node: int | None = None,
        since_ns: int | None = None,
        tail: int | None = None,
    ) -> AsyncIterator[JobLogLine]:
        """Follow a job's lines until every followed node's container exited; one line at a
        time over :meth:`follow_batches` (same arguments, same events), except ``tail`` of a
        job of several nodes with no ``node``: the last ``tail`` lines of the merged log, in
        time order (``docker logs --tail`` of each node would give ``tail`` per node), then
        every node from just after the last of them."""
        if tail is not None and node is None and len(job.nodes) > 1:
            backlog = await self.read_logs(job, since_ns=since_ns, tail=tail)
            for line in backlog:
                yield line
            if backlog:
                since_ns, tail = backlog[-1].ts_ns + 1, None
        async for batch in self.follow_batches(job, node=node, since_ns=since_ns, tail=tail):
            for line in batch:
                yield line

    async def follow_batches(
        self,
        job: JobRecord,
        *,
        node: int | None = None,
        since_ns: int | None = None,
        tail: int | None = None,
    ) -> AsyncIterator[list[JobLogLine]]:
        """Follow a job's lines, in batches as they arrive (one node per batch, never
        empty), until every followed node's container exited.

        Each line is archived. When a node's stream ends the job is reconciled, so a node that
        failed takes the others down (gang teardown) and :class:`JobChanged` and
        :class:`NodeExited` are published. Reconnects publish :class:`FollowStateChanged`.

        Raises:
            UsageError: ``node`` is not a node of the job.
        """
        self.check_node(job, node)
        async for batch in self._follow_batches(
            job, self.session_for(job), node=node, since_ns=since_ns, tail=tail
        ):
            yield batch

    async def _follow_batches(
        self,
        job: JobRecord,
        session: Session,
        *,
        node: int | None,
        since_ns: int | None,
        tail: int | None,
    ) -> AsyncIterator[list[JobLogLine]]:
        """:meth:`follow_batches` over ``session``."""
        refreshing: set[asyncio.Task[JobRecord]] = set()

        def on_ended(n: NodeRecord) -> None:
            self.bus.publish(NodeExited(job.id, n.node_rank, n.host))
            self.bus.publish(FollowStateChanged(job.id, n.node_rank, "ended"))

        def on_exit(n: NodeRecord) -> None:
            on_ended(n)
            t = asyncio.create_task(self.refresh_job(job))
            refreshing.add(t)
            t.add_done_callback(refreshing.discard)

        def on_state(n: NodeRecord, state: str, detail: str | None) -> None:
            self.bus.publish(FollowStateChanged(job.id, n.node_rank, state, detail))

        def on_archive(n: NodeRecord, error: StateError | None) -> None:
            self.bus.publish(
                ArchiveStateChanged(
                    job.id,
                    n.node_rank,
                    error.message if error else None,
                    error.hint if error else None,
                )
            )

        async def reconcile(j: JobRecord) -> JobRecord:
            return await self.refresh_job(j)

        hooks = FollowHooks(
            on_exit=on_exit,
            on_ended=on_ended,
            on_state=on_state,
            on_archive=on_archive,
            reconcile=reconcile,
        )
        batches = self.backend_for(job, session).follow(
            job, hooks, node=node, since_ns=since_ns, tail=tail
        )
        try:
            async with contextlib.aclosing(batches):  # the backend's reads end with this
                async for batch in batches:
                    yield batch
        finally:
            if refreshing:
                await asyncio.gather(*refreshing, return_exceptions=True)

    def start_follow(
        self,
        job: JobRecord,
        *,
        tail: int | None = None,
        batch_s: float = 0.05,
        where: Intake = "loop",
    ) -> Follow:
        """Follow a job in the background, publishing :class:`LogLinesReceived` batches
        (at most one per ``batch_s`` s while lines keep coming, the first at once) until
        every node exited; the task's result is the job reconciled at the end. One follow per
        job: a second call returns the running one.

        Args:
            where: where the streams are read: ``loop`` (this loop) or ``process`` (a child
                process, :mod:`console.intake`: its own interpreter, so the intake holds no
                GIL against this loop; what the Textual app uses). Events reach each
                subscriber on its own loop in both cases.
        """
        running = self._follows.get(job.id)
        if running is not None and not running.task.done():
            return running

        async def pump() -> JobRecord | None:
            loop = asyncio.get_running_loop()
            session = self.session_for(job)
            batch: list[JobLogLine] = []
            last = 0.0
            timer: asyncio.TimerHandle | None = None

            def publish() -> None:
                nonlocal batch, last, timer
                if timer is not None:
                    timer.cancel()
                    timer = None
                if batch:
                    self.bus.publish(LogLinesReceived(job.id, tuple(batch)))
                    batch = []
                last = time.monotonic()

            try:
                async for lines in self._follow_batches(
                    job, session, node=None, since_ns=None, tail=tail
                ):
                    batch.extend(lines)
                    wait = last + batch_s - time.monotonic()
                    if wait <= 0:
                        publish()
                    elif timer is None:  # lines that come alone are not held back
                        timer = loop.call_later(wait, publish)
                publish()
                return await self.refresh_job(job)
            finally:
                publish()

        coro: Coroutine[Any, Any, JobRecord | None]
        if where == "process" and not self.capabilities(job).intake_process:
            where = "loop"  # e.g. a Slurm job's follow polls files over SSH
        if where == "process":
            coro = self._follow_in_process(job, tail=tail, batch_s=batch_s)
        else:
            coro = pump()
        f = Follow(job.id, asyncio.create_task(coro, name=f"follow-{job.id}"))
        self._follows[job.id] = f
        return f

    async def _follow_in_process(
        self, job: JobRecord, *, tail: int | None, batch_s: float
    ) -> JobRecord | None:
        """:meth:`start_follow` with ``where="process"`` (protocol: :mod:`console.intake`).

        Raises:
            JobError: the intake process could not be started.
        """
        import pickle

        from console.intake import HEADER, IntakeRequest, PackedLines
        from console.jobs.logbuffer import reserve_seq_block

        log_file = next(
            (
                Path(h.baseFilename)
                for h in logging.getLogger().handlers
                if isinstance(h, logging.FileHandler)
            ),
            None,
        )
        request = IntakeRequest(
            profile_of(job, self.profile),
            self.store.root,
            job,
            tail,
            batch_s,
            log_file,
            reserve_seq_block(),
        )
        # the child imports this same console package, wherever it was imported from
        here = str(Path(__file__).resolve().parents[1])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
        try:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "console.intake",
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,
                env=env,
                limit=1 << 26,
            )
        except OSError as e:
            raise JobError(f"cannot start the log intake process: {e}") from e
        assert proc.stdin is not None and proc.stdout is not None
        refreshing: set[asyncio.Task[JobRecord]] = set()
        error: str | None = "the log intake process ended unexpectedly"
        try:
            proc.stdin.write(pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL))
            await proc.stdin.drain()
            while True:
                try:
                    head = await proc.stdout.readexactly(HEADER.size)
                    msg = pickle.loads(await proc.stdout.readexactly(HEADER.unpack(head)[0]))
                except asyncio.IncompleteReadError:
                    break
                kind = msg[0]
                if kind == "lines":
                    self.bus.publish(LogLinesReceived(job.id, PackedLines(msg[1]), tuple(msg[2])))
                elif kind == "state":
                    self.bus.publish(FollowStateChanged(job.id, msg[1], msg[2], msg[3]))
                elif kind == "archive":
                    self.bus.publish(ArchiveStateChanged(job.id, msg[1], msg[2], msg[3]))
                elif kind == "exit":
                    self.bus.publish(NodeExited(job.id, msg[1], msg[2]))
                    self.bus.publish(FollowStateChanged(job.id, msg[1], "ended"))
                    t = asyncio.create_task(self.refresh_job(job))
                    refreshing.add(t)
                    t.add_done_callback(refreshing.discard)
                elif kind == "done":
                    error = msg[1]
                    break
            if error:
                log.warning("log intake of %s: %s", job.id, error)
            if refreshing:
                await asyncio.gather(*refreshing, return_exceptions=True)
            return await self.refresh_job(job)
        finally:
            if proc.stdin is not None:
                proc.stdin.close()  # its EOF: the child stops
            try:
                await asyncio.wait_for(asyncio.shield(proc.wait()), 5)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()

    async def stop_follow(self, job_id: str) -> None:
        """End the background follow of a job, if any (its readers end with it)."""
        f = self._follows.pop(job_id, None)
        if f is not None:
            await f.close()

    # -- fleet ------------------------------------------------------------------------------

    def start_fleet(
        self,
        hosts: list[str] | None = None,
        *,
        interval: float = 1.0,
        mode: str = "auto",
        on_sample: Callable[[str, Sample], None] | None = None,
        replay_path: str | None = None,
    ) -> FleetState:
        """Start streaming telemetry from the hosts into :attr:`fleet` (publishing
        :class:`SampleReceived`, :class:`HostStateChanged`, :class:`ContainersMapped`).

        Args:
            hosts: default: all of the profile's.
            interval: sampling interval on the hosts (s).
            mode: ``auto``, ``agent`` or ``smi``.
            on_sample: also called with every ``(host, sample)`` (recording). Every sample
                also goes to the GPU-hours history (:attr:`history`).
            replay_path: a trace on the hosts for their agents to replay instead of NVML
                (benchmarks: ``top --agent-replay``).
        """
        from console.fleet.monitor import FleetMonitor

        names = hosts or list(self.profile.hosts)
        from console.fleet.observed import ObservedFleetState

        state = ObservedFleetState(self.bus, names, interval)
        self.fleet = state
        recorder = self.history

        def sampled(host: str, sample: Sample) -> None:
            if recorder is not None:
                recorder.on_sample(host, sample, state)
            if on_sample is not None:
                on_sample(host, sample)

        self._monitor = FleetMonitor(
            self.session(),
            state,
            names,
            interval=interval,
            on_sample=sampled,
            mode=mode,
            replay_path=replay_path,
        )
        self._monitor.start()
        return state

    def start_replay(self, path: Path, *, speed: float = 1.0) -> FleetState:
        """Feed a recording (``top --record``) into :attr:`fleet` instead of live hosts.

        Raises (from the task, logged): ValueError for a line that is not a recording line.
        """
        from console.fleet.monitor import read_recording
        from console.fleet.observed import ObservedFleetState

        state = ObservedFleetState(self.bus, [], 1.0)
        self.fleet = state

        async def run() -> int:
            n = 0
            async for host, sample in read_recording(path, speed=speed):
                state.on_sample(host, sample, rx=time.monotonic())
                n += 1
            return n

        self._replay = asyncio.create_task(run(), name="fleet-replay")
        return state

    async def replay_finished(self) -> int:
        """Wait until the replay started by :meth:`start_replay` has fed its last sample;
        returns how many samples it fed (0 without a replay).

        Raises:
            ValueError: the recording has a line that is not a recording line.
        """
        if self._replay is None:
            return 0
        return await asyncio.shield(self._replay)

    async def wait_fleet(self, timeout: float) -> bool:
        """Wait until every host has a sample or is down (``False`` on timeout)."""
        if self._monitor is None:
            return True
        return await self._monitor.wait_complete(timeout)

    def fleet_phases(self) -> dict[str, str]:
        """Host -> what its telemetry task is doing now (``connecting``, ``agent starting``,
        ``nvidia-smi fallback``, ``streaming``, ``fault wait``, ``backoff``; see
        :attr:`console.fleet.monitor.FleetMonitor.phase`); empty without a running fleet."""
        return dict(self._monitor.phase) if self._monitor is not None else {}

    async def refresh_containers(self) -> None:
        """Map containers to jobs now (the monitor does it every 10 s by itself)."""
        if self._monitor is not None:
            await self._monitor.refresh_containers()

    async def stop_fleet(self) -> None:
        """Stop the monitor or replay (the hosts' agents exit with their stdin)."""
        if self._monitor is not None:
            await self._monitor.stop()
            self._monitor = None
        if self._replay is not None:
            self._replay.cancel()
            await asyncio.gather(self._replay, return_exceptions=True)
            self._replay = None


def _ended_ranks(
    node_rank: int, host: str, dumps: dict[int, bytes], world: int | None
) -> NodeCapture:
    """A node of a job that ended, as its ranks' dumps describe it: one rank each (no pid,
    no stack) with the summary of its Flight Recorder buffer, read as a running rank's is
    (:func:`console.stacks.analysis.flight_recorder`)."""
    from console.stacks.model import parse_node
    from remote.agent.stacks import fr_summary

    processes: list[dict[str, object]] = []
    for rank, data in sorted(dumps.items()):
        try:
            flight: dict[str, object] = {"summary": fr_summary(data)}
        except Exception as e:  # a damaged dump: said for its rank
            flight = {"error": f"the dump could not be read: {e}"}
        processes.append(
            {
                "pid": -1,
                "role": "rank",
                "rank": rank,
                "world_size": world,
                "flight_recorder": flight,
            }
        )
    node = parse_node(node_rank, host, {"processes": processes})
    return dataclasses.replace(node, dumps=dumps)


def notebook_name(host: str) -> str:
    """The default name of a notebook on ``host``: ``notebook-<host>`` in a job name's
    alphabet (lowercase letters, digits, ``.``, ``_``, ``-``; at most 48 characters)."""
    safe = re.sub(r"[^a-z0-9._-]+", "-", host.lower()).strip("-._")
    return f"notebook-{safe}"[:48].rstrip("-._") if safe else "notebook"
