"""Docker containers on the SSH hosts of a profile: one container per node, labelled
(:mod:`console.jobs.labels`), launched all or nothing (:mod:`console.jobs.launch`),
reconciled from one listing of the profile's hosts (:mod:`console.backends.containers`).

The host runtime (:mod:`console.backends.host`) shares all of this: its nodes are listed,
stopped and removed through the same engine interface (:class:`remote.runtimes.RuntimeEngine`),
so it only says what it cannot do.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import shlex
import time
from collections.abc import AsyncGenerator, Callable, Coroutine, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from console.backends.base import (
    DEFAULT_SHELL,
    Action,
    Capabilities,
    FollowHooks,
    StopOutcome,
    Submission,
    mark_removed,
    not_running_hint,
    profile_stop_grace,
    raise_if_unreachable,
    read_node_dumps,
    stacks_of_nodes,
)
from console.backends.containers import (
    ACTIVE_STATES,
    NEVER_STARTED,
    STOPPABLE,
    adopt_unknown,
    has_started,
    reconcile_fleet,
    refresh,
    stop_nodes,
)
from console.errors import JobError
from console.jobs.labels import K_KIND
from console.jobs.logs import JobLogLine, follow_job_log_batches, read_job_logs
from remote.errors import GpuConsoleError

if TYPE_CHECKING:
    from console.jobs.copy import CopyRequest, CopyResult
    from console.jobs.spec import LoadedSpec
    from console.jobs.status import HostListing
    from console.jobs.store import JobRecord, NodeRecord, Store
    from console.session import Session
    from console.stacks.model import NodeCapture

log = logging.getLogger("gpuconsole.backends.docker")

#: The label that tells a dev container of ``shell --host`` (value ``shell``) from a job's
#: (it has no job labels, so ``ps``, adoption and the fleet's job mapping never take it for
#: a job).
SHELL_KIND_LABEL = K_KIND


class DockerBackend:
    """Jobs in Docker containers on the profile's SSH hosts (see the module docstring)."""

    name = "docker"
    capabilities = Capabilities(
        exec=True, cp=True, notebook=True, shell=True, stacks=True, intake_process=True
    )

    def __init__(self, session: Session, store: Store) -> None:
        self.session = session
        self.store = store

    def places(self) -> str:
        """The profile's hosts."""
        return "its hosts (" + ", ".join(self.session.profile.hosts) + ")"

    def refusal(
        self,
        action: Action,
        job: JobRecord | None = None,
        node: NodeRecord | None = None,
        host: str | None = None,
    ) -> GpuConsoleError:
        """Why ``action`` is not offered (Docker offers every action)."""
        return JobError(
            f"{action} is not offered for Docker jobs yet",
            "`gpuconsole logs` shows what the job printed",
        )

    # -- plan and submit ----------------------------------------------------------------

    async def plan(
        self, loaded: LoadedSpec, *, dry_run: bool, force: bool, exclude_slow: bool | None = None
    ) -> Submission:
        """Preflight every host (:func:`console.jobs.launch.prepare`); without ``dry_run``
        the workdir is synced to them (content-addressed, so a plan that is not launched
        leaves only a reusable copy). The GPUs the last bench flagged
        (:meth:`console.bench.store.BenchStore.flagged`) are named in the plan, and left out
        with ``exclude_slow`` (``None``: the profile's ``defaults.exclude_slow``).

        Raises:
            ConfigError: the spec sets ``time_limit`` (Slurm's).
            PlanError, JobNameInUse, TransportError, ImageNotFound: see
                :func:`console.jobs.launch.prepare`.
        """
        from console.errors import ConfigError
        from console.jobs.launch import prepare

        if loaded.spec.time_limit is not None:
            raise ConfigError(
                "time_limit applies to Slurm profiles (`scheduler: slurm`)",
                "remove it, or submit with a Slurm profile",
                **loaded.blame("time_limit"),
            )
        from console.bench.store import BenchStore
        from console.errors import StateError

        profile = self.session.profile
        exclude = profile.defaults.exclude_slow if exclude_slow is None else exclude_slow
        try:
            slow = await asyncio.to_thread(BenchStore(self.store.root).slow, profile.name)
        except StateError as e:
            if exclude:  # asked to leave slow GPUs out, and which they are cannot be read
                raise
            log.warning("the last bench's results are not read: %s", e)
            slow = {}
        prepared = await prepare(
            self.session, loaded, dry_run=dry_run, force=force, slow=slow, exclude_slow=exclude
        )
        return Submission(loaded, prepared, dry_run, backend=self)

    def plan_text(self, submission: Submission) -> str:
        """The ``docker run`` lines, secret values masked."""
        from console.jobs.plan import render_plan

        return render_plan(submission.prepared.plan)

    def submitted_line(self, submission: Submission, job: JobRecord) -> str:
        """``submitted ID: N node(s) x P process(es), world size W, on HOSTS``."""
        plan = submission.prepared.plan
        return (
            f"submitted {job.id}: {len(plan.nodes)} node(s) x {plan.nproc_per_node} "
            f"process(es), world size {plan.world_size}, on "
            f"{', '.join(n.host for n in plan.nodes)}"
        )

    async def submit(
        self, submission: Submission, on_started: Callable[[str], None] | None = None
    ) -> JobRecord:
        """Create and start every node's container (:func:`console.jobs.launch.launch`)."""
        from console.jobs.launch import launch

        job_id = await launch(
            self.session, self.store, submission.loaded, submission.prepared, on_started
        )
        job = await self.store.call(self.store.get, job_id)
        assert job is not None
        return job

    # -- state --------------------------------------------------------------------------

    async def refresh(
        self, job: JobRecord, *, teardown: bool = True, listed: dict[str, HostListing] | None = None
    ) -> JobRecord:
        """Reconcile the job with its containers (:func:`console.backends.containers.refresh`)."""
        return await refresh(self.session, self.store, job, teardown=teardown, listed=listed)

    async def reconcile(
        self, watched: Sequence[JobRecord], *, deadline_s: float, warn: Callable[[str], None] | None
    ) -> dict[str, HostListing]:
        """One listing of every host of the profile (both runtimes), adopting unknown jobs
        (:func:`console.backends.containers.reconcile_fleet`); a host that cannot be asked
        says why in its :class:`HostListing`."""
        return await reconcile_fleet(self.session, self.store, watched, deadline_s=deadline_s)

    async def adopt(self, *, unanswered: list[str] | None = None) -> list[str]:
        """Adopt the jobs found by label on the profile's hosts."""
        return await adopt_unknown(
            self.session, self.store, list(self.session.profile.hosts), unanswered=unanswered
        )

    def hosts_gone(self, job: JobRecord) -> list[str]:
        """The job's hosts that its profile no longer names."""
        return sorted({n.host for n in job.nodes} - set(self.session.profile.hosts))

    # -- stop and remove ----------------------------------------------------------------

    def stop_preview(self, job: JobRecord, grace: str) -> list[str]:
        """``host: docker stop --time G NAME`` per node (``docker rm`` for a container that
        never started)."""
        return [
            f"{n.host}: docker rm {n.container_name}  (never started)"
            if n.state == NEVER_STARTED
            else f"{n.host}: docker stop --time {grace} {n.container_name}"
            for n in job.nodes
            if n.state in STOPPABLE
        ]

    async def stop(self, job: JobRecord, grace: float) -> StopOutcome:
        """Stop every running node on the hosts that answer, then raise for the others.

        Raises:
            JobError: a host of the job could not be reached (its nodes' state is unknown,
                they may still run), naming the nodes that were stopped.
        """
        job = await self.refresh(job, teardown=False)
        down = dict(job.unreachable)
        running = [n for n in job.nodes if n.state in STOPPABLE and n.host not in down]
        if running:
            now = time.time()
            await self.store.call(self.store.update_job, job.id, stop_requested_at=now)
            job.stop_requested_at = now
            await stop_nodes(self.session, self.store, job, running, grace=grace)
            job = await self.refresh(job, teardown=False)
        if down:
            done = (
                f"stopped node{'s' if len(running) > 1 else ''} "
                f"{', '.join(str(n.node_rank) for n in running)}; "
                if running
                else ""
            )
            raise JobError(
                f"job {job.id}: {done}cannot reach {', '.join(sorted(down))}: "
                f"{next(iter(down.values()))}",
                f"its nodes there may still be running; run `gpuconsole stop {job.id}` again "
                "when the host answers",
            )
        return StopOutcome(job, tuple(n.node_rank for n in running))

    def remove_line(self, job: JobRecord, node: NodeRecord) -> str:
        """What :meth:`remove` removes of one node."""
        return f"{node.host}: docker rm {node.container_name}"

    def remove_preview(self, job: JobRecord) -> list[str]:
        """``host: docker rm NAME`` per node (a host runtime node: its folder), then the
        synced workdirs."""
        lines = [self.remove_line(job, n) for n in job.nodes if n.container_id]
        lines.append("and each host's synced workdir of the job, unless a container uses it")
        return lines

    async def remove(self, job: JobRecord, *, force: bool) -> JobRecord:
        """Stop it (``force``), archive every line, remove the containers and the synced
        workdirs no container uses (:mod:`console.jobs.leftovers`).

        A job whose profile no longer names some of its hosts: nothing there can be stopped
        or removed. With ``force`` and none of its hosts left in the profile, the job is
        marked removed here (its archived lines stay readable); with a host still in the
        profile it is refused, since ``ps`` would adopt the job again from the containers
        there.

        Raises:
            JobError: it runs and ``force`` is not set, a host is unreachable, or a host
                left the profile (see above).
        """
        if job.removed_at is None and (gone := self.hosts_gone(job)):
            return await self._forget(job, gone, force=force)
        if job.removed_at is None:
            job = await self.refresh(job)
            raise_if_unreachable(job)
        running = [n for n in job.nodes if n.state in ACTIVE_STATES]
        if running and not force:
            what = "running" if any(n.state == "running" for n in running) else "starting"
            raise JobError(f"job {job.id} is {what}", f"stop it first, or `rm --force {job.id}`")
        if running:
            grace = profile_stop_grace(self.session.profile)
            now = time.time()
            await self.store.call(self.store.update_job, job.id, stop_requested_at=now)
            job.stop_requested_at = now
            await stop_nodes(self.session, self.store, job, running, grace=grace)
            # record how it ended (stopped) before the record is marked removed
            job = await self.refresh(job, teardown=False)
        await read_job_logs(self.session, self.store, job)  # archive every line first
        from console.jobs import leftovers

        await leftovers.remove_containers(self.session, job)
        return await mark_removed(self.store, job)

    async def _forget(self, job: JobRecord, gone: list[str], *, force: bool) -> JobRecord:
        prof = self.session.profile
        hosts = ", ".join(repr(h) for h in gone)
        kept = sorted({n.host for n in job.nodes} - set(gone))
        if not force or kept:
            raise JobError(
                f"job {job.id} ran on host {hosts}, which is no longer in profile "
                f"{prof.name!r}: its containers there cannot be stopped or removed",
                f"add the host back to the profile and rm again, or `rm --force {job.id}` "
                "to forget the job (its containers on that host are left as they are)"
                if not kept
                else "add the host back to the profile and rm again (the job also has nodes on "
                f"{', '.join(kept)})",
            )
        return await mark_removed(self.store, job)

    # -- logs ---------------------------------------------------------------------------

    async def read_logs(
        self, job: JobRecord, *, node: int | None, since_ns: int | None, tail: int | None
    ) -> list[JobLogLine]:
        """The containers' lines (else the archive's), merged in time order."""
        return await read_job_logs(
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
        """The containers' log streams (:func:`console.jobs.logs.follow_job_log_batches`);
        each node's exit is reported through ``hooks.on_exit``."""
        batches = follow_job_log_batches(
            self.session,
            self.store,
            job,
            node=node,
            since_ns=since_ns,
            tail=tail,
            on_node_exit=hooks.on_exit,
            on_state=hooks.on_state,
            on_archive=hooks.on_archive,
        )
        async for batch in batches:
            yield batch

    # -- into a node ----------------------------------------------------------------------

    async def describe_node(
        self, job: JobRecord, node: NodeRecord, secret: set[str]
    ) -> tuple[str | None, str | None]:
        """The container's ``docker run`` line and torchrun command, read back from it."""
        if not node.container_id or job.removed_at is not None:
            return None, None
        try:
            spec = await self.session.engine(node.host).container_spec(node.container_id, secret)
        except GpuConsoleError as e:
            log.debug("describe %s n%d: %s", job.id, node.node_rank, e)
            return None, None
        if spec is None:
            return None, None
        from console.jobs.labels import secret_env_of
        from console.jobs.plan import run_line
        from remote import gang

        # what the host says is secret, whatever its source (the spec, the profile's
        # defaults.env), also when this state dir has no record of it
        spec = dataclasses.replace(
            spec, secret_env=spec.secret_env | secret_env_of(spec.labels, spec.env)
        )
        return run_line(spec), shlex.join(gang.unwrap(spec.command))

    def exec_target(self, job: JobRecord, node: NodeRecord) -> NodeRecord:
        """``node`` when its container runs.

        Raises:
            JobError: it does not run (what to do instead: its logs, its files).
        """
        if not node.container_id or not has_started(node) or job.removed_at is not None:
            raise JobError(
                f"job {job.id}: node {node.node_rank} is not running ({node.state})",
                not_running_hint(job),
            )
        return node

    def exec_argv(self, node: NodeRecord, command: list[str], *, tty: bool) -> list[str]:
        """The ``docker exec`` argv run on the node's host (no shell string is built from
        ``command``: the transport quotes each word)."""
        t = self.session.transport(node.host)
        assert node.container_id is not None
        return [
            "docker",
            "-H",
            f"unix://{t.engine_socket_path()}",
            "exec",
            "-i",
            *(["-t"] if tty else []),
            node.container_id,
            *(command or DEFAULT_SHELL),
        ]

    async def attach_exec(
        self, job: JobRecord, node: NodeRecord, command: list[str], *, tty: bool
    ) -> Callable[[], Coroutine[Any, Any, int]]:
        """``docker exec`` on the node's host, through an SSH PTY when ``tty``."""
        t = await self.session.connected(node.host)
        argv = self.exec_argv(node, command, tty=tty)

        async def attach() -> int:
            return await t.interactive(argv, tty=tty)

        return attach

    async def copy(self, job: JobRecord, node: int | None, request: CopyRequest) -> CopyResult:
        """Through the engine's archive API (:func:`console.jobs.copy.copy_job_files`)."""
        from console.jobs.copy import copy_job_files

        return await copy_job_files(self.session, job, node, request)

    # -- stacks ---------------------------------------------------------------------------

    async def take_stacks(
        self, job: JobRecord, nodes: Sequence[NodeRecord], *, native: bool
    ) -> list[NodeCapture]:
        """Each node read by a sidecar in its container's PID namespace
        (:func:`remote.stacks.in_sidecar`); its GPUs from the container's labels."""
        mask = job.secret_env
        return await stacks_of_nodes(job, nodes, lambda n: self._node_stacks(n, native, mask))

    async def _node_stacks(
        self, node: NodeRecord, native: bool, mask: frozenset[str] = frozenset()
    ) -> NodeCapture:
        from console.jobs.labels import gpu_indices
        from console.stacks.model import parse_node
        from remote.stacks import in_sidecar

        assert node.container_id is not None
        t = await self.session.connected(node.host)
        engine = self.session.engine(node.host)
        info = await engine.inspect(node.container_id)
        gpus = gpu_indices(info.labels) if info is not None else ()
        doc = await in_sidecar(t, engine, node.container_id, native=native, mask=sorted(mask))
        return parse_node(node.node_rank, node.host, doc, gpus)

    async def read_dumps(self, job: JobRecord) -> dict[int, dict[int, bytes]]:
        """From each node's container, running or exited (``docker cp``): the files the
        Flight Recorder variables name (:func:`~console.backends.base.read_node_dumps`)."""
        return await read_node_dumps(self.session, job, "docker")

    async def run_fr_trace(
        self,
        job: JobRecord,
        node: NodeRecord,
        python: str,
        files: dict[str, bytes],
        args: list[str],
    ) -> tuple[int, str, str]:
        """In a container of the node's image, without capabilities or network
        (:func:`remote.stacks.fr_trace_in_container`)."""
        from remote.stacks import fr_trace_in_container

        assert node.container_id is not None
        t = await self.session.connected(node.host)
        engine = self.session.engine(node.host)
        status, out = await fr_trace_in_container(t, engine, node.container_id, python, files, args)
        return status, out, f"on {node.host}, in the job's image"

    # -- dev containers -------------------------------------------------------------------

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
        """``shell --host`` (:meth:`console.service.Service.shell_on_host`): a fresh dev
        container on ``host``, removed after ``command`` ends.

        Raises:
            ConfigError: the profile's ``defaults.env`` references an unset variable.
            PlanError: no image, or the GPUs do not fit / are busy.
            TransportError, ImageNotFound: the host or image cannot be reached.
        """
        from console.errors import PlanError
        from console.fields import parse_mount
        from console.jobs import leftovers
        from console.jobs.labels import FORMAT, K_CREATED, K_FORMAT, K_HOST
        from console.jobs.launch import gpu_facts
        from console.jobs.plan import HostFacts, pick_gpus
        from console.jobs.spec import JobSpec, LoadedSpec, resolve_env
        from remote.docker import Bind, ContainerSpec

        prof = self.session.profile
        d = prof.defaults
        image = image or d.image
        if not image:
            raise PlanError("no image: the profile has no `defaults.image`", "pass `--image IMAGE`")
        env, secret = resolve_env(d.env, prof.source, prof.lines, ("defaults", "env"))
        session = self.session
        t = await session.connected(host)
        engine = session.engine(host)
        try:  # dev containers whose shell ended without removing them
            await leftovers.sweep_dev_containers(session, host)
        except GpuConsoleError as e:
            log.warning("host %s: dev containers not swept: %s", host, e.message)
        await engine.ensure_image(image, d.pull)
        home = await t.home()
        gpu_ids: tuple[int, ...] = ()
        if gpus != 0:
            g = await gpu_facts(session, host)
            facts = HostFacts(host, t.address(), g.count, home, holders=g.holders, lost=g.lost)
            loaded = LoadedSpec(
                JobSpec(name="shell", script="-", gpus_per_node=gpus),
                source="",
                base_dir=Path("."),
                flags=frozenset({"gpus_per_node"}),
                flag_names={"gpus_per_node": "--gpus"},
            )
            try:
                gpu_ids = pick_gpus(loaded, facts)
            except PlanError as e:
                hint = e.hint
                if not g.count:
                    hint = "leave out --gpus (a dev container without GPUs), or use a GPU host"
                raise PlanError(e.message.replace("the job asks", "--gpus asks"), hint) from e
        binds = []
        for m in d.mounts:
            src, dst, ro = parse_mount(m)
            if src == "~" or src.startswith("~/"):
                src = home.rstrip("/") + src[1:]
            binds.append(Bind(src, dst, ro))
        created = time.time()
        spec = ContainerSpec(
            name=f"gpuconsole-shell-{host}-{os.urandom(3).hex()}",
            image=image,
            command=["sleep", "infinity"],
            env=env,
            secret_env=secret,
            labels={
                K_FORMAT: FORMAT,
                SHELL_KIND_LABEL: "shell",
                K_HOST: host,
                K_CREATED: f"{created:.3f}",
            },
            gpu_device_ids=tuple(map(str, gpu_ids)),
            shm_size=None if d.ipc else d.shm_size,
            ipc_mode=d.ipc,
            binds=tuple(binds),
            cap_add=tuple(d.cap_add),
            privileged=d.privileged,
            working_dir=workdir,
            user=d.user,
            init=True,
        )
        cid: str | None = None
        try:
            cid = await engine.create(spec)
            await engine.start(cid)
            argv = [
                "docker",
                "-H",
                f"unix://{t.engine_socket_path()}",
                "exec",
                "-i",
                *(["-t"] if tty else []),
                cid,
                *(command or DEFAULT_SHELL),
            ]
            return await t.interactive(argv, tty=tty)
        finally:
            if cid is not None:
                await asyncio.shield(self._remove_dev_container(host, cid, spec.name, warn))

    async def _remove_dev_container(
        self, host: str, cid: str, name: str, warn: Callable[[str], None] | None
    ) -> None:
        """Remove a dev container; once more on a fresh connection if the first try fails."""
        for attempt in range(2):
            try:
                session = self.session
                if attempt:
                    await session.connected(host)
                await session.engine(host).remove(cid)
                return
            except (GpuConsoleError, OSError) as e:
                why = getattr(e, "message", None) or str(e)
        if warn:
            warn(
                f"could not remove dev container {name} on {host}: {why}; "
                f"remove it with `docker rm -f {name}` there"
            )
