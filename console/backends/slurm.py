"""A Slurm cluster: ``sbatch`` on the profile's login host, one gpuconsole job per Slurm
job, its nodes Slurm's (:mod:`console.slurm`; the I/O itself is
:mod:`console.slurm.backend`, imported by each method: it pulls in the launch path and the
diagnosis, which ``ps`` must not import).

Slurm is the truth for the state; the output files on the shared filesystem are the logs;
nothing runs in a container, so ``exec``, ``cp``, notebooks and dev containers are refused
with the way to do it on the cluster.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, Literal

from console.backends.base import (
    Action,
    Capabilities,
    FollowHooks,
    StopOutcome,
    Submission,
    mark_removed,
    profile_stop_grace,
    raise_if_unreachable,
    stacks_of_nodes,
)
from console.errors import JobError, PlanError, UsageError
from console.jobs.status import ACTIVE_STATES
from console.slurm.fields import PENDING_HOST
from remote.errors import GpuConsoleError

if TYPE_CHECKING:
    from console.jobs.copy import CopyRequest, CopyResult
    from console.jobs.logs import JobLogLine
    from console.jobs.spec import LoadedSpec
    from console.jobs.status import HostListing
    from console.jobs.store import JobRecord, NodeRecord, Store
    from console.session import Session
    from console.stacks.model import NodeCapture


class SlurmBackend:
    """Jobs submitted to a Slurm cluster (see the module docstring)."""

    name = "slurm"
    capabilities = Capabilities(exec=False, cp=False, notebook=False, shell=False, stacks=True)

    def __init__(self, session: Session, store: Store) -> None:
        self.session = session
        self.store = store

    def _login_host(self) -> str:
        cfg = self.session.profile.slurm
        return cfg.login_host if cfg else "?"

    def places(self) -> str:
        """The cluster's login host (its job folders)."""
        return "its login host"

    def refusal(
        self,
        action: Action,
        job: JobRecord | None = None,
        node: NodeRecord | None = None,
        host: str | None = None,
    ) -> GpuConsoleError:
        """Each refusal says what to run on the login host instead."""
        prof = self.session.profile
        if action == "shell":
            return UsageError(
                f"profile {prof.name} is a Slurm cluster: dev containers need a Docker host",
                "on the cluster: `srun --pty bash` from the "
                "login host; or use a profile of SSH hosts",
            )
        if action == "notebook":
            return PlanError(
                f"profile {prof.name} is a Slurm cluster; notebooks run on SSH profiles",
                "pass `--profile` with a profile of SSH hosts",
            )
        job_id = job.id if job is not None else "?"
        if action == "cp":
            return JobError(
                f"job {job_id} runs under Slurm: its files are on the cluster's shared filesystem",
                "copy them from the login host with `scp`",
            )
        # a Slurm job's node record keeps the Slurm job id where a container id would be
        sid = (node.container_id if node is not None else None) or "<slurm id>"
        on = (
            f" -w {node.host}"
            if node is not None and node.host and node.host != PENDING_HOST
            else ""
        )
        if action == "exec":
            return JobError(
                f"job {job_id} runs under Slurm, not in a container",
                f"on the login host: `srun --overlap --jobid {sid}{on} --pty bash`",
            )
        return JobError(
            f"{action} is not offered for Slurm jobs yet",
            f"on the login host: `srun --overlap --jobid {sid}{on} ...`",
        )

    # -- plan and submit ----------------------------------------------------------------

    async def plan(
        self, loaded: LoadedSpec, *, dry_run: bool, force: bool, exclude_slow: bool | None = None
    ) -> Submission:
        """Render and validate the sbatch script (:func:`console.slurm.backend.plan_slurm`);
        ``force`` and ``exclude_slow`` have no meaning here (Slurm allocates the GPUs)."""
        from console.slurm.backend import plan_slurm

        splan = await plan_slurm(self.session, loaded, dry_run=dry_run)
        return Submission(loaded, None, dry_run, slurm=splan, backend=self)

    def plan_text(self, submission: Submission) -> str:
        """The sbatch script (it holds no environment value)."""
        assert submission.slurm is not None
        return submission.slurm.script.rstrip("\n")

    def submitted_line(self, submission: Submission, job: JobRecord) -> str:
        """``submitted ID: Slurm job SID on LOGIN, N node(s) x P process(es), runtime R``."""
        assert submission.slurm is not None
        sh = submission.slurm.shape
        return (
            f"submitted {job.id}: Slurm job {job.nodes[0].container_id} on "
            f"{submission.slurm.login_host}, {sh.nodes} node(s) x {sh.nproc_per_node} "
            f"process(es), runtime {sh.runtime}"
        )

    async def submit(
        self, submission: Submission, on_started: Callable[[str], None] | None = None
    ) -> JobRecord:
        """``sbatch`` it (:func:`console.slurm.backend.submit_slurm`)."""
        from console.slurm.backend import submit_slurm

        assert submission.slurm is not None
        job = await submit_slurm(self.session, self.store, submission.loaded, submission.slurm)
        if on_started is not None:  # no await since it returned: the job stays queued now
            on_started(job.id)
        return job

    # -- state --------------------------------------------------------------------------

    async def refresh(
        self, job: JobRecord, *, teardown: bool = True, listed: dict[str, HostListing] | None = None
    ) -> JobRecord:
        """Ask Slurm (:func:`console.slurm.backend.refresh_slurm`); Slurm tears the job
        down itself, and no host listing applies."""
        from console.slurm.backend import refresh_slurm

        return await refresh_slurm(self.session, self.store, job)

    async def reconcile(
        self, watched: Sequence[JobRecord], *, deadline_s: float, warn: Callable[[str], None] | None
    ) -> dict[str, HostListing]:
        """Adopt the jobs whose folders are on the login host; a login host that cannot be
        asked is said through ``warn``. No host listing: the jobs are each asked of Slurm."""
        from console.slurm.backend import adopt_slurm

        try:
            await adopt_slurm(self.session, self.store)
        except GpuConsoleError as e:
            if warn:
                warn(e.message)
        return {}

    async def adopt(self, *, unanswered: list[str] | None = None) -> list[str]:
        """Adopt the jobs whose folders are on the login host (a login host that cannot be
        asked raises: the one host there is)."""
        from console.slurm.backend import adopt_slurm

        return await adopt_slurm(self.session, self.store)

    def hosts_gone(self, job: JobRecord) -> list[str]:
        """None: a Slurm job's nodes are Slurm's, not the profile's."""
        return []

    # -- stop and remove ----------------------------------------------------------------

    def stop_preview(self, job: JobRecord, grace: str) -> list[str]:
        """``login: scancel --signal=TERM SID; scancel SID after G s``."""
        if not job.nodes:
            return []
        sid = job.nodes[0].container_id
        return [f"{self._login_host()}: scancel --signal=TERM {sid}; scancel {sid} after {grace} s"]

    async def stop(self, job: JobRecord, grace: float) -> StopOutcome:
        """``scancel --signal=TERM``, ``scancel`` after ``grace``
        (:func:`console.slurm.backend.stop_slurm`)."""
        from console.slurm.backend import stop_slurm

        acted = await stop_slurm(self.session, self.store, job, grace)
        job = await self.refresh(job)
        return StopOutcome(job, tuple(n.node_rank for n in job.nodes) if acted else ())

    def remove_preview(self, job: JobRecord) -> list[str]:
        """The job's folder on the login host."""
        return [f"{self._login_host()}: the job's folder (its output is archived first)"]

    async def remove(self, job: JobRecord, *, force: bool) -> JobRecord:
        """``scancel`` it (``force``), archive its output and remove its folder on the login
        host (:func:`console.slurm.backend.remove_slurm`)."""
        from console.slurm.backend import remove_slurm

        if job.removed_at is None:
            job = await self.refresh(job)
            raise_if_unreachable(job)
            if job.state in ACTIVE_STATES:
                if not force:
                    raise JobError(
                        f"job {job.id} is {job.state}", f"stop it first, or `rm --force {job.id}`"
                    )
                job = (await self.stop(job, profile_stop_grace(self.session.profile))).job
            await remove_slurm(self.session, self.store, job)
        return await mark_removed(self.store, job)

    # -- logs ---------------------------------------------------------------------------

    async def read_logs(
        self, job: JobRecord, *, node: int | None, since_ns: int | None, tail: int | None
    ) -> list[JobLogLine]:
        """The output files' news archived, then the archive
        (:func:`console.slurm.backend.read_slurm_logs`)."""
        from console.slurm.backend import read_slurm_logs

        return await read_slurm_logs(
            self.session, self.store, job, node=node, since_ns=since_ns, tail=tail
        )

    async def follow(
        self,
        job: JobRecord,
        hooks: FollowHooks,
        *,
        node: int | None,
        since_ns: int | None,
        tail: int | None,
    ) -> AsyncGenerator[list[JobLogLine], None]:
        """The output files polled until Slurm says the job ended
        (:func:`console.slurm.backend.follow_slurm`, reconciling through
        ``hooks.reconcile``); then every followed node is reported ended."""
        from console.slurm.backend import follow_slurm

        batches = follow_slurm(
            self.session,
            self.store,
            job,
            node=node,
            since_ns=since_ns,
            tail=tail,
            refresh=hooks.reconcile,
        )
        async for batch in batches:
            yield batch
        for n in job.nodes:
            if node is None or n.node_rank == node:
                hooks.on_ended(n)

    # -- into a node ----------------------------------------------------------------------

    async def describe_node(
        self, job: JobRecord, node: NodeRecord, secret: set[str]
    ) -> tuple[str | None, str | None]:
        """None: no container to read back (the script is in the job's folder)."""
        return None, None

    def exec_target(self, job: JobRecord, node: NodeRecord) -> NodeRecord:
        """Refused (the ``srun --overlap`` line to use instead).

        Raises:
            JobError: always.
        """
        raise self.refusal("exec", job, node)

    async def attach_exec(
        self, job: JobRecord, node: NodeRecord, command: list[str], *, tty: bool
    ) -> Callable[[], Coroutine[Any, Any, int]]:
        """Refused, as :meth:`exec_target`."""
        raise self.refusal("exec", job, node)

    async def copy(self, job: JobRecord, node: int | None, request: CopyRequest) -> CopyResult:
        """Refused: the files are on the cluster's shared filesystem."""
        raise self.refusal("cp", job)

    async def take_stacks(
        self, job: JobRecord, nodes: Sequence[NodeRecord], *, native: bool
    ) -> list[NodeCapture]:
        """Each node read inside the job's allocation: ``srun --overlap --jobid N -w NODE``
        from the login host (:func:`remote.stacks.in_allocation`; the bundle in the login
        host's home, which the compute nodes share)."""
        from console.slurm.script import slurm_config
        from console.stacks.model import parse_node
        from remote.stacks import in_allocation

        login = slurm_config(self.session.profile).login_host
        t = await self.session.connected(login)

        async def read(node: NodeRecord) -> NodeCapture:
            assert node.container_id is not None
            doc = await in_allocation(
                t, node.container_id, node.host, native=native, mask=sorted(job.secret_env)
            )
            return parse_node(node.node_rank, node.host, doc)

        return await stacks_of_nodes(job, nodes, read)

    async def read_dumps(self, job: JobRecord) -> dict[int, dict[int, bytes]]:
        """None: PyTorch's analyser runs inside the job's allocation, which has ended (the
        dumps stay in the job's folder)."""
        return {}

    async def run_fr_trace(
        self,
        job: JobRecord,
        node: NodeRecord,
        python: str,
        files: dict[str, bytes],
        args: list[str],
    ) -> tuple[int, str, str]:
        """With the job's Python on one of its nodes, inside its allocation
        (:func:`remote.stacks.fr_trace_in_allocation`)."""
        from console.slurm.script import slurm_config
        from remote.stacks import fr_trace_in_allocation

        assert node.container_id is not None
        login = slurm_config(self.session.profile).login_host
        t = await self.session.connected(login)
        status, out = await fr_trace_in_allocation(
            t, node.container_id, node.host, python, files, args
        )
        return status, out, f"on {node.host} (Slurm job {node.container_id}), with {python}"

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
        """Refused: a dev container needs Docker (what to run instead)."""
        raise self.refusal("shell", host=host)
