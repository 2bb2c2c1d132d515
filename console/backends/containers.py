"""Jobs on SSH hosts, as the hosts see them: reconcile the store with the nodes' labels,
gang teardown, the first failure explained, one listing of a profile's hosts.

The I/O of the Docker and host-runtime backends (:mod:`console.backends.docker`,
:mod:`console.backends.host`): both runtimes' nodes are reached through one engine per host
(:class:`remote.runtimes.RuntimeEngine`), so one listing of a host serves both. The states
themselves, and how a container's status maps to them, are the pure state machine of
:mod:`console.jobs.status`.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from console.errors import host_reason
from console.jobs.labels import ERROR_FILE, HOST_ERROR_FILE, K_JOB_ID, K_JOB_NAME, NodeLabels
from console.jobs.launcher import launch_in_flight
from console.jobs.status import (
    ACTIVE_STATES,
    HOST_ANSWERED,
    HOST_FAILED,
    HOST_PENDING,
    LIST_DEADLINE_S,
    NEVER_STARTED,
    STOPPABLE,
    HostListing,
    error_file_message,
    exit_reason,
    first_failed,
    has_started,
    interruption,
    job_state,
    merge_stored,
    node_state,
    pending_reason,
    stopped_exit_code,
)
from console.jobs.store import FailureRecord, JobRecord, NodeRecord, Store
from remote.docker import parse_rfc3339_ns
from remote.errors import GpuConsoleError
from remote.gang import TEARDOWN_EXIT_CODE
from remote.runtimes import host_runtime_nodes, is_docker_id

if TYPE_CHECKING:  # the failure path imports diagnosis and the kernel log (CLI start-up)
    from console.diagnosis import Diagnosis
    from console.session import Session
    from remote.docker import ContainerInfo
    from remote.kernellog import NodeKernelEvents

log = logging.getLogger("gpuconsole.status")

__all__ = [
    "ACTIVE_STATES",
    "NEVER_STARTED",
    "STOPPABLE",
    "adopt_listed",
    "adopt_unknown",
    "explain_failure",
    "has_started",
    "list_fleet",
    "raise_open_file_limit",
    "reconcile_fleet",
    "refresh",
    "stop_nodes",
]


async def _has_output(session: Session, n: NodeRecord) -> bool:
    """Whether a started node wrote any log line (its engine's last line); a host that
    cannot say counts as yes (the node is then shown ``running``, as the engine says)."""
    if n.container_id is None:
        return True
    try:
        await session.connected(n.host)
        async for _line in session.engine(n.host).logs(n.container_id, tail=1):
            return True
    except GpuConsoleError as e:
        log.debug("[%s] node %d: first line not read: %s", n.host, n.node_rank, e)
        return True
    return False


def _needs_inspect(n: NodeRecord | None) -> Callable[[ContainerInfo], bool]:
    """Which listed containers of a node to inspect: only where the list's data is not
    enough, i.e. a start or finish time not recorded yet (a container first seen running or
    exited, or a new container)."""

    def need(info: ContainerInfo) -> bool:
        if info.status == "created":
            return False
        if n is None or n.container_id != info.id or n.started_at is None:
            return True
        return info.status in ("exited", "dead") and (
            n.finished_at is None or info.exit_code is None or n.state in ACTIVE_STATES
        )

    return need


async def _containers(
    session: Session,
    job: JobRecord,
    listed: Mapping[str, HostListing] | None = None,
) -> dict[str, list[ContainerInfo] | None]:
    """The job's nodes per host (``None``: the host could not be asked, why in
    ``job.unreachable``): from ``listed`` (a fleet listing, :func:`list_fleet`) where it
    names the host, else one listing of the job's containers on it."""
    hosts = list(dict.fromkeys(n.host for n in job.nodes))
    job.unreachable = {}
    known: dict[str, list[ContainerInfo] | None] = {}
    for host in hosts:
        got = listed.get(host) if listed is not None else None
        if got is None:
            continue
        if got.containers is None:
            job.unreachable[host] = got.reason or f"host {host}: {got.status}"
            known[host] = None
        else:
            known[host] = [i for i in got.containers if i.labels.get(K_JOB_ID) == job.id]
    by_rank = {n.node_rank: n for n in job.nodes}

    def need(info: ContainerInfo) -> bool:
        try:
            rank = NodeLabels.parse(info.labels).node_rank
        except ValueError:
            return False
        return _needs_inspect(by_rank.get(rank))(info)

    async def one(host: str) -> list[ContainerInfo] | None:
        try:
            await session.connected(host)
            return await session.engine(host).list(
                {K_JOB_ID: job.id}, detail=need, runtime=job.runtime
            )
        except GpuConsoleError as e:
            log.debug("[%s] cannot list containers of %s: %s", host, job.id, e)
            job.unreachable[host] = e.message
            return None

    rest = [h for h in hosts if h not in known]
    results = await asyncio.gather(*(one(h) for h in rest))
    known.update(zip(rest, results))
    return {h: known[h] for h in hosts}


async def refresh(
    session: Session,
    store: Store,
    job: JobRecord,
    *,
    teardown: bool = True,
    listed: Mapping[str, HostListing] | None = None,
) -> JobRecord:
    """Reconcile one job with its containers, tear down a half-failed (or half-launched)
    gang, explain a failure.

    ``listed``: a fleet listing (:func:`reconcile_fleet`) to read the job's containers from
    instead of listing them on each host (a host it does not name is listed); a host it
    marks pending or failed leaves the job's nodes there at their last known values
    (``unreachable`` for an active one).

    Returns the updated record (also written to the store).
    """
    if job.removed_at is not None:
        return job
    stored = await store.call(store.get, job.id)
    if stored is not None:  # `stop` in another terminal: its intent wins over ours
        merge_stored(job, stored)
        if job.removed_at is not None:
            return job
    per_host = await _containers(session, job, listed)
    by_rank: dict[int, ContainerInfo] = {}
    for infos in per_host.values():
        for info in infos or []:
            try:
                rank = NodeLabels.parse(info.labels).node_rank
            except ValueError:
                continue
            by_rank.setdefault(rank, info)
    if stored is not None and any(
        i.status in ("exited", "dead") and i.exit_code != 0 for i in by_rank.values()
    ):
        # a `stop` flags its nodes before it signals them: read the flags again after the
        # list, so an exit that the stop caused is never taken for a failure
        again = await store.call(store.get, job.id)
        if again is not None:
            merge_stored(job, again)
    now = time.time()
    never = [
        i.created_s if i.created_s is not None else job.created_at
        for i in by_rank.values()
        if i.status == "created"
    ]
    launching = launch_in_flight(job.launcher, min(never, default=job.created_at), now)
    silent: list[NodeRecord] = []  # started, no first line seen yet
    for n in job.nodes:
        found = by_rank.get(n.node_rank)
        if found is not None:
            before = n.state
            n.container_id = found.id
            n.state = node_state(found, n.stop_requested, launching)
            n.exit_code = found.exit_code
            if found.detailed or found.status == "created":
                n.started_at = found.started_at
                n.finished_at = found.finished_at
            if n.state == "running" and before == "pending":
                silent.append(n)
        elif per_host.get(n.host) is None:
            if n.state in ACTIVE_STATES:
                n.state = "unreachable"
        elif n.container_id is not None:
            # a never-started container that `stop` removed stays stopped
            n.state = (
                "stopped"
                if n.stop_requested
                and n.started_at is None
                and n.state in (NEVER_STARTED, "pending", "stopped")
                else "lost"
            )
        elif not launching:
            n.state = "lost"  # its launch ended before creating its container
    spoke = await asyncio.gather(*(_has_output(session, n) for n in silent))
    for n, has_output in zip(silent, spoke):
        if not has_output:
            n.state = "pending"  # running, not started yet as far as its user can tell
    never_started = [
        n
        for n in job.nodes
        if n.state == NEVER_STARTED or (n.state == "lost" and n.container_id is None)
    ]
    failed = first_failed(job.nodes)
    if teardown and (failed is not None or never_started):
        running = [n for n in job.nodes if n.state in ACTIVE_STATES]
        if running:
            grace = session.profile.defaults.stop_grace
            grace = min(grace, 10.0) if math.isfinite(grace) and grace >= 0 else 10.0
            await stop_nodes(session, store, job, running, grace=grace)
            return await refresh(session, store, job, teardown=False)
    await store.call(store.update_nodes, job.nodes)
    state = job_state(job.nodes)
    fields: dict[str, Any] = {"state": state}
    interrupted = bool(job.failure and job.failure.get("interrupted"))
    if never_started and (not interrupted or failed is None):
        job.failure = interruption(job, never_started)
        fields["failure"] = job.failure
        fields["exit_code"] = failed.exit_code if failed is not None else None
    elif failed is not None and not interrupted:
        fields["exit_code"] = failed.exit_code
        # explained once per first failed node (the root cause may be another node's)
        if job.failure is None or failed.node_rank != job.failure.get(
            "failed_node", job.failure.get("node")
        ):
            job.failure = await explain_failure(session, failed, job.nodes)
            fields["failure"] = job.failure
        if job.failure.get("kind") == "stopped" and job.stop_requested_at is None:
            # a stop this store has no record of (another console's, or this one's before it
            # lost its state; `docker stop`): torchrun's agent got SIGTERM/SIGINT from
            # outside. The flags are kept as if this console had stopped it.
            await _stopped_from_outside(store, job, failed)
            state = job.state
            fields = {"state": state, "failure": None, "exit_code": job.exit_code}
    elif state == "succeeded":
        fields["exit_code"] = 0
    elif state == "stopped":
        fields["exit_code"] = stopped_exit_code(job.nodes, job.stop_requested_at is not None)
        if job.failure is not None and not interrupted:
            # a failure recorded by a process that looked before this stop's flags were
            # written
            job.failure = None
            fields["failure"] = None
    await store.call(store.update_job, job.id, **fields)
    job.state = state
    job.exit_code = fields.get("exit_code", job.exit_code)
    return job


async def _stopped_from_outside(store: Store, job: JobRecord, failed: NodeRecord) -> None:
    """Record ``job`` as stopped when its first failed node was stopped from outside: every
    node that ended non-zero is ``stopped`` (with its stop flag), the job's stop time its
    first node's end; the failure goes (``ps`` says "stopped by the user (SIGTERM)" and 143,
    as for a stop of this console)."""
    for n in job.nodes:
        if n.state == "failed":
            n.state = "stopped"
            n.stop_requested = True
    await store.call(store.update_nodes, job.nodes)
    try:
        at = parse_rfc3339_ns(failed.finished_at or "") / 1e9
    except ValueError:
        at = time.time()
    job.stop_requested_at = at
    job.failure = None
    job.state = job_state(job.nodes)
    job.exit_code = stopped_exit_code(job.nodes, by_user=True)
    await store.call(store.update_job, job.id, stop_requested_at=at)


async def stop_nodes(
    session: Session, store: Store, job: JobRecord, nodes: list[NodeRecord], grace: float
) -> None:
    """Stop the nodes, all at once: ``docker stop`` (SIGTERM, then SIGKILL after ``grace``
    s) a started container; remove one that never started (``created``: it has no process
    to signal and no log, and Docker cannot stop it)."""
    for n in nodes:
        n.stop_requested = True
    await store.call(store.update_nodes, job.nodes)

    async def one(n: NodeRecord) -> None:
        if not n.container_id:
            return
        engine = session.engine(n.host)
        if n.state in (NEVER_STARTED, "pending") and n.started_at is None:
            await engine.remove(n.container_id)
        else:
            await engine.stop(n.container_id, grace=grace)

    results = await asyncio.gather(*(one(n) for n in nodes), return_exceptions=True)
    for n, r in zip(nodes, results):
        if isinstance(r, BaseException):
            log.warning("could not stop node %d on %s: %s", n.node_rank, n.host, r)


#: How much of a failed node's log the diagnosis reads (lines from the end): the root cause
#: is often far above the teardown noise of a large job.
DIAGNOSIS_TAIL = 3000


#: Diagnosis ids that only say how a process ended: a container the kernel OOM-killed says more.
_ENDINGS = frozenset({"sigkill", "exit_code", "signal", "stopped"})


async def _node_evidence(
    session: Session, node: NodeRecord
) -> tuple[str, bool, bytes | None, ContainerInfo | None]:
    """A node's log tail, Docker's ``State.OOMKilled``, torchrun's error file and the
    container as inspected; empty when the host cannot be read (logged)."""
    if node.container_id is None:
        return "", False, None, None
    text, oom_killed, raw, info = "", False, None, None
    try:
        engine = session.engine(node.host)
        info = await engine.inspect(node.container_id)
        oom_killed = bool(info is not None and info.oom_killed)
        lines = [ln.text async for ln in engine.logs(node.container_id, tail=DIAGNOSIS_TAIL)]
        text = "\n".join(lines)
        raw = await engine.read_file(
            node.container_id, ERROR_FILE if is_docker_id(node.container_id) else HOST_ERROR_FILE
        )
    except GpuConsoleError as e:
        log.debug("cannot read failure details of node %d: %s", node.node_rank, e)
    return text, oom_killed, raw, info


#: Seconds of the host's kernel log read before a node's container started and after it ended.
KERNEL_MARGIN_S = 60.0


async def _host_kernel(
    session: Session, node: NodeRecord, info: ContainerInfo | None
) -> NodeKernelEvents | None:
    """The host's NVIDIA kernel events over the node's container lifetime (+-
    :data:`KERNEL_MARGIN_S`), split by the container's GPUs (:mod:`remote.kernellog`);
    ``None`` when the container's start is unknown or the host cannot be reached. What was
    found, or why the log could not be read, is logged (info), never raised."""
    try:
        since = parse_rfc3339_ns(node.started_at or "") / 1e9 - KERNEL_MARGIN_S
    except ValueError:
        return None
    try:
        until = parse_rfc3339_ns(node.finished_at or "") / 1e9 + KERNEL_MARGIN_S
    except ValueError:
        until = time.time()
    try:
        transport = await session.connected(node.host)
    except GpuConsoleError as e:
        log.info("[%s] host kernel log not read: %s", node.host, e.message)
        return None
    from remote.kernellog import describe as describe_kernel
    from remote.kernellog import node_kernel_events

    devices = info.gpu_devices if info is not None else None
    found = await node_kernel_events(transport, devices, since, until)
    log.info("[%s] node %d: %s", node.host, node.node_rank, describe_kernel(found, since, until))
    return found


async def explain_failure(
    session: Session, node: NodeRecord, others: Sequence[NodeRecord] = ()
) -> FailureRecord:
    """The first failure, explained: node, host, exit code, rank, reason, fix, cause id,
    evidence and consequences.

    Reads the failed node's log (the last :data:`DIAGNOSIS_TAIL` lines), torchrun's error
    file (``TORCHELASTIC_ERROR_FILE``, written when the failing worker's entry point is wrapped
    by ``@record``) and Docker's ``State.OOMKilled``, and names one root cause with
    :func:`console.diagnosis.diagnose`. The logs of ``others`` (the job's other nodes, at most
    3 read) are diagnosed too: when one of them shows a cause nearer the root (a CUDA error
    on node 0 behind node 1's NCCL remote error), that is the job's root cause and the failed
    node's own reading becomes a consequence. The failed node's host kernel log over its
    container's lifetime (+- :data:`KERNEL_MARGIN_S`) joins its log, only the Xid events on
    the GPUs that container used (:mod:`remote.kernellog`): a GPU that fell off the bus or a
    GSP timeout is then the root cause and the CUDA/NCCL errors its consequences; events on
    other GPUs, or on GPUs whose owner is unknown, are a context line among the consequences
    at most; an unreadable kernel log is logged and changes nothing. A host that cannot be
    read leaves the exit code as the reason.
    """
    from console.diagnosis import diagnose, parse_torchelastic_failure, signal_name
    from console.diagnosis.engine import precedence_of

    out: FailureRecord = {
        "node": node.node_rank,
        "failed_node": node.node_rank,
        "host": node.host,
        "exit_code": node.exit_code,
        "rank": None,
        "reason": exit_reason(node.exit_code),
        "fix": None,
    }
    text, oom_killed, raw, info = await _node_evidence(session, node)
    kernel = await _host_kernel(session, node, info)
    if not text and raw is None and not (kernel and (kernel.own_lines or kernel.context)):
        return out
    failure = parse_torchelastic_failure(text) if text else None
    if failure is not None and failure.root_cause is not None:
        rc = failure.root_cause
        out["rank"] = rc.rank
        sig = signal_name(rc.exitcode)
        code = f"exit code {rc.exitcode}" + (f" ({sig})" if sig else "")
        out["reason"] = f"rank {rc.rank} failed with {code}"
        if rc.exception:
            out["reason"] += f": {rc.exception}"
    message = error_file_message(raw) if raw else None
    if raw:  # the error file's traceback joins the log: the normaliser opens its JSON
        text += "\n" + raw.decode("utf-8", errors="replace")
    if kernel is not None and kernel.own_lines:  # Xids on this node's GPUs: the engine ranks
        text += "\n" + "\n".join(kernel.own_lines)  # a reset-class one above CUDA errors
    # the diagnosis is CPU work over up to DIAGNOSIS_TAIL lines: off the event loop, so a
    # reconcile that explains failed jobs does not hold up the app's keys and redraws
    diag = await asyncio.to_thread(diagnose, text) if text else None
    if oom_killed and (diag is None or diag.kind in _ENDINGS):
        out["kind"] = "oom_killed"
        out["reason"] = (
            "the container was killed by the kernel's OOM killer (Docker "
            "State.OOMKilled: host or container memory limit)"
        )
        out["fix"] = (
            "lower host memory use (DataLoader workers, batch size, pinned memory) "
            "or raise the container's memory limit"
        )
        if diag is not None:
            out["consequences"] = [diag.summary]
        return out
    own: Diagnosis | None = diag
    for other in [n for n in others if n.node_rank != node.node_rank][:3]:
        other_text, _, other_raw, _ = await _node_evidence(session, other)
        if other_raw:
            other_text += "\n" + other_raw.decode("utf-8", errors="replace")
        found = await asyncio.to_thread(diagnose, other_text) if other_text else None
        if found is not None and found.kind in _ENDINGS:
            # how another node ended (the SIGTERM of the gang's teardown, its own kill) is
            # never the cause of this node's failure, even when this one's log says nothing
            found = None
        if found is not None and (diag is None or precedence_of(found) < precedence_of(diag)):
            diag = found
            out["node"], out["host"] = other.node_rank, other.host
            out["rank"] = None
            # a node the gang tore down (it may have lost the race to exit first) carries
            # no cause in its code: the job keeps the failed node's own
            if other.exit_code is not None and other.exit_code != TEARDOWN_EXIT_CODE:
                out["exit_code"] = other.exit_code
            message = None
    context = list(kernel.context) if kernel is not None else []
    if diag is None:
        if message:
            out["reason"] = message
        if context:
            out["consequences"] = context
        return out
    out["kind"] = diag.kind
    out["reason"] = message if diag.kind == "exception" and message else diag.summary
    out["fix"] = diag.fix
    out["evidence"] = list(diag.evidence[:8])
    consequences = [f"{c.kind}: {c.summary}" for c in diag.consequences]
    if own is not None and own is not diag:
        consequences.insert(0, f"node {node.node_rank}: {own.kind}: {own.summary}")
    consequences += context
    if consequences:
        out["consequences"] = consequences
    if out["rank"] is None and diag.ranks:
        out["rank"] = diag.ranks[0]
    return out


#: SSH connections (each followed by its container listing) in flight at once in one
#: reconcile of the fleet (:func:`list_fleet`). Every fleet host is its own sshd, so this
#: bounds this process's file descriptors (:data:`FDS_PER_HOST` per host) and the CPU spent
#: in key exchanges at once, not any one sshd's load; hosts behind one jump host share its
#: sshd, and their handshakes through it are capped below its ``MaxStartups`` by
#: :data:`remote.ssh.JUMP_HANDSHAKES`. On a real fleet a listing waits on round trips (about
#: 8 per host: TCP, key exchange, auth, channels), so the hosts above this number wait for a
#: second wave: at 64, 512 hosts took 8 waves.
LIST_CONCURRENCY = 256


#: Commands run on the hosts at once in one fleet listing (the host runtime's listing, a
#: shell that stops at once where there is no jobs folder, else ``hostjob.py list``): each
#: costs the host sshd's session and a shell, and a python where jobs exist; where many
#: profile hosts are one machine (aliases, containers on one box) 64 pythons at once
#: through a pyenv shim overran the 30 s command timeout on a 2-core test machine; on a real
#: fleet each runs on its own host, and a lower cap costs round trips (512 hosts through 8
#: slots: 64 round trips in a row).
EXEC_CONCURRENCY = 32


#: Open files per host a fleet listing may hold at once: the SSH socket, the local socket
#: forwarding its Docker engine, the Docker client's connection to it, and slack.
FDS_PER_HOST = 4


def raise_open_file_limit(hosts: int) -> tuple[int, int]:
    """Raise this process's soft open-file limit (``ulimit -n``) towards what ``hosts``
    connections need (:data:`FDS_PER_HOST` each, plus 256), never above the hard limit; a
    soft limit of 1024 (a common default) is too low for 512 hosts. Returns the (soft, hard)
    limits after."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = FDS_PER_HOST * hosts + 256
    if soft != resource.RLIM_INFINITY and soft < want:
        new = want if hard == resource.RLIM_INFINITY else min(want, hard)
        if new > soft:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
                soft = new
            except (ValueError, OSError) as e:
                log.debug("cannot raise the open file limit to %d: %s", new, e)
    return soft, hard


async def list_fleet(
    session: Session,
    hosts: Sequence[str],
    *,
    detail: Callable[[ContainerInfo], bool] | None = None,
    docker_on: Sequence[str] = (),
    concurrency: int = LIST_CONCURRENCY,
    deadline_s: float = LIST_DEADLINE_S,
) -> dict[str, HostListing]:
    """Every host's gpuconsole job nodes (label ``io.gpuconsole.job-name`` present), one
    listing per host, at most ``concurrency`` hosts connecting or listing at once.

    Per host: its default runtime's listing (Docker: one list request, the containers
    ``detail`` selects inspected; see :meth:`remote.docker.Engine.list`), plus the host
    runtime's nodes where the default is Docker and the host has a jobs folder
    (:func:`remote.runtimes.host_runtime_nodes`), plus Docker's on the hosts in ``docker_on``
    whose default is the host runtime (a job there asks for Docker).

    Never raises for a host: one that cannot be asked is ``failed`` with the reason, one still
    connecting or listing ``deadline_s`` seconds after the start is ``pending`` (its task is
    cancelled). Raises the open file limit first (:func:`raise_open_file_limit`). Returns
    host -> :class:`HostListing`, in ``hosts`` order.
    """

    labels: dict[str, str | None] = {K_JOB_NAME: None}
    out = {h: HostListing(h, HOST_PENDING) for h in dict.fromkeys(hosts)}
    soft, _ = raise_open_file_limit(len(out))
    if soft < FDS_PER_HOST * len(out):
        log.warning("open file limit %d is low for %d hosts (ulimit -n)", soft, len(out))
    slots = asyncio.Semaphore(max(1, concurrency))
    execs = asyncio.Semaphore(EXEC_CONCURRENCY)
    t0 = time.monotonic()
    extra_docker = set(docker_on)

    async def one(h: HostListing) -> None:
        async with slots:
            h.phase = "connecting"
            try:
                await session.connected(h.host)
                h.phase = "listing"
                engine = session.engine(h.host)

                async def host_nodes() -> list[ContainerInfo]:
                    async with execs:
                        return await host_runtime_nodes(engine, labels)

                if engine.runtime == "docker":
                    # the engine's listing and the host runtime's command, side by side on
                    # the one connection; when one fails the other is cancelled (left
                    # running, it would outlive the session and fail at exit, unretrieved)
                    pair = [
                        asyncio.ensure_future(engine.list(labels, detail=detail)),
                        asyncio.ensure_future(host_nodes()),
                    ]
                    try:
                        ours, theirs = await asyncio.gather(*pair)
                    finally:
                        for task in pair:
                            task.cancel()
                        await asyncio.wait(pair)
                    infos = ours + theirs
                else:
                    infos = await engine.list(labels, detail=detail)
                if engine.runtime != "docker" and h.host in extra_docker:
                    infos += await engine.list(labels, detail=detail, runtime="docker")
            except GpuConsoleError as e:
                log.debug("[%s] cannot list containers: %s", h.host, e)
                h.status, h.reason = HOST_FAILED, host_reason(e)
            else:
                h.status, h.containers = HOST_ANSWERED, infos
            h.phase = "done"
            h.seconds = time.monotonic() - t0

    tasks = [asyncio.ensure_future(one(h)) for h in out.values()]
    if tasks:
        try:
            done, late = await asyncio.wait(tasks, timeout=max(0.0, deadline_s))
        except asyncio.CancelledError:
            # Ctrl-C: asyncio.wait leaves its tasks running; a host still connecting would
            # hold the session's close until its connect timeout
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        for task in late:
            task.cancel()
        if late:
            await asyncio.gather(*late, return_exceptions=True)
        for task in done:
            if (exc := task.exception()) is not None:
                raise exc
    for h in out.values():
        if h.status == HOST_PENDING:
            h.reason = pending_reason(h.host, h.phase, deadline_s)
            h.seconds = deadline_s
    return out


def _detail_for(known: set[str], watched: Sequence[JobRecord]) -> Callable[[ContainerInfo], bool]:
    """Which listed containers a fleet listing inspects: a started one of a job the store
    does not know (to adopt it with its times), and, of the ``watched`` jobs (refreshed from
    this listing), those :func:`_needs_inspect` selects; none of any other job."""
    ranks = {j.id: {n.node_rank: n for n in j.nodes} for j in watched}

    def need(info: ContainerInfo) -> bool:
        job_id = info.labels.get(K_JOB_ID)
        if job_id not in known:
            return info.status != "created"
        nodes = ranks.get(job_id)
        if nodes is None:
            return False
        try:
            rank = NodeLabels.parse(info.labels).node_rank
        except ValueError:
            return False
        return _needs_inspect(nodes.get(rank))(info)

    return need


async def adopt_listed(
    session: Session, store: Store, listed: dict[str, HostListing], known: set[str]
) -> list[str]:
    """Record the jobs found by label in ``listed`` but not in ``known`` (ids in the store,
    removed ones included); returns their ids.

    A container labelled for a host this profile does not name belongs to another profile
    (or another console's name for this machine): it is left alone.
    """
    found: dict[str, list[tuple[str, ContainerInfo, NodeLabels]]] = {}
    for host, listing in listed.items():
        for info in listing.containers or []:
            try:
                labels = NodeLabels.parse(info.labels)
            except ValueError:
                continue
            if labels.host not in session.profile.hosts:
                continue
            if labels.job_id not in known:
                found.setdefault(labels.job_id, []).append((host, info, labels))
    adopted = []
    now = time.time()
    for job_id, items in found.items():
        lab = items[0][2]
        nodes: dict[int, NodeRecord] = {}
        for host, info, labels in items:
            launching = launch_in_flight(None, info.created_s, now)
            nodes.setdefault(
                labels.node_rank,
                NodeRecord(
                    job_id,
                    labels.node_rank,
                    labels.host or host,
                    info.name,
                    info.id,
                    node_state(info, False, launching),
                    info.exit_code,
                    info.started_at,
                    info.finished_at,
                ),
            )
        rec = JobRecord(
            id=job_id,
            name=lab.job_name,
            profile=session.profile.name,
            profile_source=session.profile.source,
            spec={"kind": lab.kind} if lab.kind != "train" else {},
            spec_hash=lab.spec_hash,
            created_at=lab.created_at or time.time(),
            node_count=lab.node_count,
            nodes=[nodes[r] for r in sorted(nodes)],
        )
        # another caller (the app's alert rules, a `ps` in another shell) may adopt it first
        if await store.call(store.add_job, rec, if_absent=True):
            adopted.append(job_id)
    return adopted


async def reconcile_fleet(
    session: Session,
    store: Store,
    watched: Sequence[JobRecord],
    *,
    concurrency: int = LIST_CONCURRENCY,
    deadline_s: float = LIST_DEADLINE_S,
) -> dict[str, HostListing]:
    """List every host of the session's profile once (:func:`list_fleet`) and adopt the jobs
    found there that the store does not know (:func:`adopt_listed`).

    ``watched``: the jobs that will be refreshed from this listing (``refresh(...,
    listed=...)``); their changed containers are inspected in the same pass, and hosts of
    the profile whose default runtime is the host runtime are also asked for Docker's
    containers when one of them runs a Docker node there.
    """
    known = {j.id for j in await store.call(store.jobs, include_removed=True)}
    profile = session.profile
    docker_on = sorted(
        {
            n.host
            for j in watched
            if j.runtime == "docker"
            for n in j.nodes
            if profile.host_runtime(n.host) != "docker"
        }
    )
    listed = await list_fleet(
        session,
        list(profile.hosts),
        detail=_detail_for(known, watched),
        docker_on=docker_on,
        concurrency=concurrency,
        deadline_s=deadline_s,
    )
    await adopt_listed(session, store, listed, known)
    return listed


async def adopt_unknown(
    session: Session, store: Store, hosts: list[str], *, unanswered: list[str] | None = None
) -> list[str]:
    """Record jobs found by label on the hosts but missing from the store; returns their ids.

    A console restarted on another machine, or with its state dir lost, recovers every job
    this way. The hosts are listed concurrently (:func:`list_fleet`); one that cannot be
    asked is skipped, its reason (one line naming the host) added to ``unanswered``.
    """
    known = {j.id for j in await store.call(store.jobs, include_removed=True)}
    listed = await list_fleet(session, hosts, detail=_detail_for(known, ()))
    if unanswered is not None:
        unanswered.extend(h.reason for h in listed.values() if h.reason)
    return await adopt_listed(session, store, listed, known)
