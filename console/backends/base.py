"""The seam between the service and a runtime: the :class:`JobBackend` protocol.

One implementation per runtime, each in its own module: :mod:`console.backends.docker`
(Docker containers on SSH hosts), :mod:`console.backends.host` (``runtime: host``: torchrun
in the hosts' own Python, no container), :mod:`console.backends.slurm` (sbatch on a Slurm
cluster's login host). :func:`console.backends.backend_for` picks one per job from its
profile (``scheduler``) and spec (``runtime``); above the backends, that is the only place
where the runtime is looked at. :class:`console.service.Service` calls the backend and
publishes the events; a backend does the runtime's I/O and never publishes.

What a runtime cannot do is said by its :class:`Capabilities` and the reason of
:meth:`JobBackend.refusal`, which the CLI and the app show instead of acting.

A backend is bound to one session (the SSH connections of one profile) and the store; it
is cheap to build (no I/O until a method runs). Its modules import their heavy parts (the
launch path, the diagnosis, the Docker SDK) inside the methods that need them: ``ps`` builds
a backend and must stay light (tests/unit/test_startup_imports.py).
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from console.errors import ConfigError, JobError
from remote.errors import GpuConsoleError

if TYPE_CHECKING:  # the plans import the launch path (CLI start-up: `ps` needs none)
    from console.errors import StateError
    from console.jobs.copy import CopyRequest, CopyResult
    from console.jobs.launch import Prepared
    from console.jobs.logs import JobLogLine
    from console.jobs.spec import LoadedSpec
    from console.jobs.status import HostListing
    from console.jobs.store import JobRecord, NodeRecord, Store
    from console.profiles import Profile
    from console.session import Session
    from console.slurm.backend import SlurmPlan
    from console.stacks.model import NodeCapture

Action = Literal["exec", "cp", "notebook", "shell", "stacks"]
"""An action on a job (or a host) that not every runtime offers (:class:`Capabilities`)."""


@dataclass(frozen=True)
class Capabilities:
    """What a runtime offers beyond the lifecycle every backend has (plan, submit, refresh,
    stop, remove, logs).

    Attributes:
        exec: ``exec``/``shell JOB``: a command in a node's container.
        cp: ``cp``: files between this machine and a node's container.
        notebook: ``notebook``: a JupyterLab job and its tunnel.
        shell: ``shell --host``: a dev container on a host.
        stacks: per-rank Python stacks of a running job (``stacks``; py-spy on each node).
        intake_process: its log streams can be read in the intake child process
            (:mod:`console.intake`); otherwise a follow reads them on the service's loop.
    """

    exec: bool
    cp: bool
    notebook: bool
    shell: bool
    stacks: bool = False
    intake_process: bool = False

    def offers(self, action: Action) -> bool:
        """Whether the runtime offers ``action``."""
        return bool(getattr(self, action))


@dataclass(frozen=True)
class StopOutcome:
    """What ``stop`` did.

    Attributes:
        job: the job after the stop.
        stopped: nodes that were running and got SIGTERM (empty: nothing was running).
    """

    job: JobRecord
    stopped: tuple[int, ...]


@dataclass(frozen=True)
class Submission:
    """A planned submit: the validated spec and the preflighted plan, not launched yet.

    Attributes:
        loaded: the spec as loaded (overrides applied, ``${VAR}`` resolved).
        docker: the plan and its hosts (SSH profiles); the workdir is synced unless it was a
            dry run.
        dry_run: planned without any effect on the hosts.
        slurm: the sbatch plan (Slurm profiles, :mod:`console.slurm`) instead of ``docker``.
        backend: the backend that planned it and launches it.
    """

    loaded: LoadedSpec
    docker: Prepared | None
    dry_run: bool
    slurm: SlurmPlan | None = None
    backend: JobBackend | None = None

    @property
    def prepared(self) -> Prepared:
        """The Docker plan.

        Raises:
            JobError: a Slurm submission (it has :attr:`slurm` instead).
        """
        if self.docker is None:
            raise JobError("a Slurm submission has no Docker plan", "use its `slurm` plan")
        return self.docker

    def _backend(self) -> JobBackend:
        if self.backend is None:
            raise JobError(
                "this submission was not planned by a backend", "plan it with `Service.plan`"
            )
        return self.backend

    def plan_text(self) -> str:
        """The plan as ``submit --dry-run`` prints it (``docker run`` lines, secrets masked;
        for a Slurm profile the sbatch script, which holds no environment value)."""
        return self._backend().plan_text(self)

    def submitted_line(self, job: JobRecord) -> str:
        """What ``submit`` says once the job is submitted."""
        return self._backend().submitted_line(self, job)


@dataclass(frozen=True)
class FollowHooks:
    """What a backend's follow reports while it reads (the service turns each into events).

    Attributes:
        on_exit: a followed node's stream ended because its process exited (the service
            publishes it and reconciles the job: gang teardown).
        on_ended: a followed node's stream ended at the end of a follow that reconciles by
            itself (published only).
        on_state: a node's stream changed state (``reconnecting``, ``streaming``...) with a
            detail line.
        on_archive: archiving a node's lines failed (the error) or works again (``None``).
        reconcile: reconcile the job now (on the service's own loop) and return it.
    """

    on_exit: Callable[[NodeRecord], None]
    on_ended: Callable[[NodeRecord], None]
    on_state: Callable[[NodeRecord, str, str | None], None]
    on_archive: Callable[[NodeRecord, StateError | None], None]
    reconcile: Callable[[JobRecord], Awaitable[JobRecord]]


#: The shell ``exec`` starts when no command is given: bash when the image has it.
DEFAULT_SHELL = ("sh", "-c", "command -v bash >/dev/null 2>&1 && exec bash || exec sh")


def not_running_hint(job: JobRecord) -> str:
    """What to do instead of a shell in a job that no longer runs: its output and files."""
    if job.removed_at is not None:
        return f"its containers were removed: `gpuconsole logs {job.id}` reads its archived output"
    return (
        f"a shell needs a running container: `gpuconsole logs {job.id}` shows its output, "
        f"`gpuconsole cp {job.id}:PATH .` copies files out of its exited container"
    )


def profile_stop_grace(profile: Profile) -> float:
    """The profile's ``defaults.stop_grace`` (s).

    Raises:
        ConfigError: it is negative, infinite or NaN (naming the profile file and field).
    """
    import math

    value = profile.defaults.stop_grace
    if not math.isfinite(value) or value < 0:
        raise ConfigError(
            f"must be a finite number of seconds >= 0, not {value:g}",
            "set `stop_grace: 30` under `defaults:` (or pass `--grace SECONDS`)",
            path=profile.source or profile.name,
            field="defaults.stop_grace",
        )
    return value


async def stacks_of_nodes(
    job: JobRecord,
    nodes: Sequence[NodeRecord],
    read: Callable[[NodeRecord], Awaitable[NodeCapture]],
) -> list[NodeCapture]:
    """Every node's stacks at once (``read`` one node); a node that is not running, whose
    host could not be reached, or whose read failed, is a
    :class:`~console.stacks.model.NodeCapture` with its reason (the error's message and fix),
    never an exception: the other nodes are still shown."""
    import asyncio

    from console.stacks.model import NodeCapture

    async def one(node: NodeRecord) -> NodeCapture:
        if node.host in job.unreachable:
            why = f"host {node.host} could not be reached: {job.unreachable[node.host]}"
            return NodeCapture(node.node_rank, node.host, error=why)
        if node.state != "running" or not node.container_id:
            return NodeCapture(node.node_rank, node.host, error=f"not running ({node.state})")
        try:
            return await read(node)
        except GpuConsoleError as e:
            why = f"{e.message} (fix: {e.hint})" if e.hint else e.message
            return NodeCapture(node.node_rank, node.host, error=why)

    return list(await asyncio.gather(*(one(n) for n in nodes)))


async def read_node_dumps(
    session: Session, job: JobRecord, runtime: Literal["docker", "host"]
) -> dict[int, dict[int, bytes]]:
    """The Flight Recorder dumps on a job's nodes, node rank -> global rank -> the dump: for
    each node, the files
    ``$TORCH_FR_DUMP_TEMP_FILE<rank>`` of its ranks (node rank x ``nproc_per_node`` + local
    rank), the spec's own value of the variable else gpuconsole's (``/tmp/`` in a container,
    the node's folder on a host: :mod:`console.jobs.flightrec`), read through the node's
    engine (a container's files also once it exited). A node whose host cannot be reached, or
    that has no such file, adds nothing."""
    import asyncio

    from console.jobs.flightrec import DUMP_PREFIX
    from console.stacks.frtrace import DUMP_MAX

    env = job.spec.get("env")
    ours = f"/tmp/{DUMP_PREFIX}" if runtime == "docker" else DUMP_PREFIX
    prefix = str((env if isinstance(env, dict) else {}).get("TORCH_FR_DUMP_TEMP_FILE") or ours)
    nproc = job.spec.get("nproc_per_node")
    per_node = nproc if isinstance(nproc, int) and nproc > 0 else 8

    async def one(node: NodeRecord) -> dict[int, bytes]:
        if not node.container_id or node.host in job.unreachable:
            return {}
        engine = session.engine(node.host)
        out: dict[int, bytes] = {}
        for local in range(per_node):
            rank = node.node_rank * per_node + local
            try:
                data = await engine.read_file(node.container_id, f"{prefix}{rank}", DUMP_MAX)
            except GpuConsoleError:
                return out
            if data:
                out[rank] = data
        return out

    parts = await asyncio.gather(*(one(n) for n in job.nodes))
    return {n.node_rank: part for n, part in zip(job.nodes, parts, strict=True) if part}


def raise_if_unreachable(job: JobRecord) -> None:
    """Raise :class:`JobError` naming the first host of the job that could not be asked in
    its last refresh."""
    if job.unreachable:
        down = job.unreachable
        raise JobError(
            f"job {job.id}: cannot reach {', '.join(sorted(down))}: {next(iter(down.values()))}",
            "the job may still be running there; retry when the host is reachable",
        )


async def mark_removed(store: Store, job: JobRecord) -> JobRecord:
    """Record that the job was removed now (its archived lines stay readable)."""
    removed_at = time.time()
    await store.call(store.update_job, job.id, removed_at=removed_at)
    job.removed_at = removed_at
    return job


class JobBackend(Protocol):
    """One runtime's jobs: every effect the service has on them (see the module docstring).

    Attributes:
        name: ``docker``, ``host`` or ``slurm``.
        capabilities: what it offers beyond the lifecycle.
        session: the connections of the job's profile.
        store: the job store.
    """

    name: str
    capabilities: Capabilities
    session: Session
    store: Store

    def refusal(
        self,
        action: Action,
        job: JobRecord | None = None,
        node: NodeRecord | None = None,
        host: str | None = None,
    ) -> GpuConsoleError:
        """Why ``action`` is not offered (for a job's node, or a host), with what to do
        instead: the error the CLI and the app show (its class sets the exit code); only
        for an action :attr:`capabilities` does not offer."""
        ...

    def places(self) -> str:
        """Where the runtime's jobs are asked for, as a sentence names them: ``its hosts
        (a, b)``, ``its login host``."""
        ...

    # -- plan and submit ----------------------------------------------------------------

    async def plan(
        self, loaded: LoadedSpec, *, dry_run: bool, force: bool, exclude_slow: bool | None = None
    ) -> Submission:
        """Preflight a loaded spec on the runtime (no job is created). ``exclude_slow``: leave
        out the GPUs the last bench flagged (``None``: the profile's
        ``defaults.exclude_slow``); the plan names those it uses.

        Raises:
            ConfigError, PlanError, JobNameInUse, TransportError: the spec cannot run there.
        """
        ...

    def plan_text(self, submission: Submission) -> str:
        """The plan as ``submit --dry-run`` prints it (no secret value)."""
        ...

    def submitted_line(self, submission: Submission, job: JobRecord) -> str:
        """What ``submit`` says once the job is submitted."""
        ...

    async def submit(
        self, submission: Submission, on_started: Callable[[str], None] | None = None
    ) -> JobRecord:
        """Launch a planned submission, all nodes or none; the job is in the store.
        ``on_started(job_id)`` is called the moment the launch is complete: an interrupt
        before it undoes the launch, one after it leaves the job running.

        Raises:
            GpuConsoleError: the launch failed (everything was rolled back).
        """
        ...

    # -- state --------------------------------------------------------------------------

    async def refresh(
        self, job: JobRecord, *, teardown: bool = True, listed: dict[str, HostListing] | None = None
    ) -> JobRecord:
        """Reconcile a job with the runtime (the record is written to the store): gang
        teardown of a half-failed job unless ``teardown=False``; ``listed``: a listing of the
        profile's hosts (:meth:`reconcile`) to read the job from instead of asking again."""
        ...

    async def reconcile(
        self, watched: Sequence[JobRecord], *, deadline_s: float, warn: Callable[[str], None] | None
    ) -> dict[str, HostListing]:
        """Ask the runtime for the profile's jobs once and adopt those the store does not
        know; returns what each host said (empty where the runtime has no hosts of its own),
        for :meth:`refresh` of ``watched``."""
        ...

    async def adopt(self, *, unanswered: list[str] | None = None) -> list[str]:
        """Adopt the profile's jobs the store does not know; returns their ids. Where a
        host could not be asked, one line naming it and why goes to ``unanswered``."""
        ...

    def hosts_gone(self, job: JobRecord) -> list[str]:
        """The hosts of a job's nodes that its profile no longer names (nothing there can be
        asked or stopped)."""
        ...

    # -- stop and remove ----------------------------------------------------------------

    def stop_preview(self, job: JobRecord, grace: str) -> list[str]:
        """What :meth:`stop` will run, one line per node (``grace``: seconds, as shown)."""
        ...

    async def stop(self, job: JobRecord, grace: float) -> StopOutcome:
        """SIGTERM every running node, SIGKILL after ``grace`` s; returns the job refreshed.

        Raises:
            JobError: a host of the job could not be reached (after the others were
                stopped).
        """
        ...

    def remove_preview(self, job: JobRecord) -> list[str]:
        """What :meth:`remove` removes on the runtime, one line per place."""
        ...

    async def remove(self, job: JobRecord, *, force: bool) -> JobRecord:
        """Archive every line, then remove what the job left on the runtime (stopping it
        first with ``force``) and mark the job removed in the store.

        Raises:
            JobError: it runs and ``force`` is not set, or a host is unreachable.
        """
        ...

    # -- logs ---------------------------------------------------------------------------

    async def read_logs(
        self, job: JobRecord, *, node: int | None, since_ns: int | None, tail: int | None
    ) -> list[JobLogLine]:
        """A job's lines so far, merged in time order, archived as they are read."""
        ...

    def follow(
        self,
        job: JobRecord,
        hooks: FollowHooks,
        *,
        node: int | None,
        since_ns: int | None,
        tail: int | None,
    ) -> AsyncGenerator[list[JobLogLine], None]:
        """A job's lines in batches (one node each, never empty) until every followed node
        ended; each is archived."""
        ...

    # -- into a node ----------------------------------------------------------------------

    async def describe_node(
        self, job: JobRecord, node: NodeRecord, secret: set[str]
    ) -> tuple[str | None, str | None]:
        """The node's equivalent ``docker run`` line (values of ``secret`` keys masked) and
        its command, read back from the runtime; ``None`` where there is none."""
        ...

    def exec_target(self, job: JobRecord, node: NodeRecord) -> NodeRecord:
        """``node``, checked that a command can run in it now.

        Raises:
            JobError: it is not running, or the runtime has no container to run it in.
        """
        ...

    async def attach_exec(
        self, job: JobRecord, node: NodeRecord, command: list[str], *, tty: bool
    ) -> Callable[[], Coroutine[Any, Any, int]]:
        """Connect to the node's host; returns the call that runs ``command`` attached to
        this terminal and returns its exit code.

        Raises:
            TransportError: the host cannot be reached.
        """
        ...

    async def copy(self, job: JobRecord, node: int | None, request: CopyRequest) -> CopyResult:
        """``cp`` between this machine and one node (see :mod:`console.jobs.copy`)."""
        ...

    async def take_stacks(
        self, job: JobRecord, nodes: Sequence[NodeRecord], *, native: bool
    ) -> list[NodeCapture]:
        """The Python stacks of every process of ``nodes`` (py-spy, see
        :mod:`remote.stacks`), all nodes at once; a node that could not be read carries its
        reason instead (:func:`stacks_of_nodes`)."""
        ...

    async def read_dumps(self, job: JobRecord) -> dict[int, dict[int, bytes]]:
        """The Flight Recorder dumps the ranks of a job that no longer runs left on its nodes
        (written by the NCCL watchdog when a collective timed out, or by the job), node rank
        -> global rank -> dump; ``{}`` when none is there or the runtime cannot read them any
        more."""
        ...

    async def run_fr_trace(
        self,
        job: JobRecord,
        node: NodeRecord,
        python: str,
        files: dict[str, bytes],
        args: list[str],
    ) -> tuple[int, str, str]:
        """Run PyTorch's Flight Recorder analyser where the job's PyTorch is, on ``node``:
        ``python`` (a rank's own interpreter) with ``args`` (``{dir}``: the folder that holds
        ``files``, the ranks' dumps, uploaded for the run and removed after it).

        Returns:
            Its exit status, its output (stdout then stderr) and where it ran, in words.

        Raises:
            GpuConsoleError: it could not be run there.
        """
        ...

    # -- a host -------------------------------------------------------------------------

    async def dev_shell(
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
        """``shell --host``: ``command`` (default: a shell) in a fresh dev container on
        ``host``, attached to this terminal, removed afterwards; returns its exit code
        (``warn``: told when the container could not be removed).

        Raises:
            GpuConsoleError: the runtime has no dev containers (:meth:`refusal`), or it
                could not be made (see :meth:`console.service.Service.shell_on_host`).
        """
        ...
