"""Job state: reconcile the store with the containers' labels, gang teardown, first failure.

Node states (shown by ``ps``):

- ``pending``: its launch is in flight (container not created yet, or created and about to
  start), or it was started and has not written its first log line yet (torchrun's start:
  Python and torch imports, the rendezvous; 10-30 s on a busy host);
- ``created``: the container was created but never started and its launch is over (the
  launching process died between create and start: SIGKILL, a closed terminal, a crash);
- ``running``;
- ``succeeded``: exited 0 (a notebook that exits 0 after ``stop``: ``stopped``);
- ``failed``: exited non-zero by itself (``failed(<code>)``);
- ``stopped``: exited after gpuconsole stopped it (``stop``, ``rm --force``, or gang
  teardown: a node its supervisor ended with exit 75 because a peer failed, see
  :mod:`remote.gang`), or a never-started container that ``stop`` removed;
- ``lost``: the container is gone although the job was not removed (or was never created
  by a launch that is over);
- ``unreachable``: its host could not be asked (last known values kept);
- ``unknown``: a Slurm job's node while Slurm reports a state word gpuconsole does not know
  (:data:`console.slurm.state.STATE_MAP`).

(Exactly :data:`console.jobs.states.NodeState`; the job states below are
:data:`~console.jobs.states.JobState`.)

A job is ``failed`` when any node failed or is ``created`` (an interrupted launch: its
failure reason says ``launch interrupted: containers created but never started on ...``),
else ``running``/``pending`` while any node is, else ``stopped``, ``succeeded``, ``lost`` or
``unknown``. Whether a launch is in flight comes from the launcher recorded with the job
(:func:`console.jobs.launch.launch_in_flight`). When one node fails, or a launch left some
nodes never started, while others still run, the others are stopped (gang teardown) and the
first failure is explained once: the node that finished first with a non-zero code, the
torchrun rank from its failure summary or error file, and one reason from
:mod:`console.diagnosis`. A job that the user stopped says so (:func:`job_summary`), never
a reason read from torchrun's SignalException traceback.

``rm`` keeps the job's record with ``removed_at`` set; it then shows as ``removed``
(:func:`shown_state`), its last state kept as ``final_state``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from console.errors import host_reason
from console.jobs.labels import (
    ERROR_FILE,
    HOST_ERROR_FILE,
    K_JOB_ID,
    K_KIND,
    K_NODE_COUNT,
    NodeLabels,
)
from console.jobs.launcher import launch_in_flight
from console.jobs.states import JobState, NodeState, ShownState
from console.jobs.store import FailureRecord, JobRecord, NodeRecord, Store
from remote.docker import parse_rfc3339_ns
from remote.errors import GpuConsoleError
from remote.gang import TEARDOWN_EXIT_CODE
from remote.runtimes import is_docker_id

if TYPE_CHECKING:  # the failure path imports diagnosis and the kernel log (CLI start-up)
    from console.diagnosis import Diagnosis
    from console.session import Session
    from remote.docker import ContainerInfo
    from remote.kernellog import NodeKernelEvents

log = logging.getLogger("gpuconsole.status")

ACTIVE_STATES: tuple[JobState, ...] = ("pending", "running")
FINAL_JOB_STATES: tuple[JobState, ...] = ("succeeded", "failed", "stopped", "lost")
NEVER_STARTED: Final = "created"
"""Node state of a container created but never started, its launch over."""
INTERRUPTED = "launch interrupted"
"""How an interrupted launch's failure reason starts."""


def has_started(n: NodeRecord) -> bool:
    """Whether the node's container (or host process) was started and has not ended:
    ``running``, or ``pending`` before its first log line."""
    return n.state == "running" or (n.state == "pending" and n.started_at is not None)


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


def node_state(info: ContainerInfo, stop_requested: bool, launching: bool = True) -> NodeState:
    """The node state of one container (see the module docstring); ``launching``: its job's
    launch may still be in flight (a ``created`` container is then ``pending``)."""
    if info.status == "created":
        return "pending" if launching else NEVER_STARTED
    if info.status in ("running", "restarting", "paused", "removing"):
        return "running"
    if info.exit_code == 0:
        # JupyterLab exits 0 on SIGTERM: a notebook ended by `stop` was stopped
        notebook = info.labels.get(K_KIND) == "notebook"
        return "stopped" if stop_requested and notebook else "succeeded"
    if stop_requested or _torn_down(info):
        return "stopped"
    return "failed"


def _torn_down(info: ContainerInfo) -> bool:
    """A node of a multi-node job whose gang supervisor ended it because a peer failed
    (exit :data:`remote.gang.TEARDOWN_EXIT_CODE`): a consequence, never the cause."""
    try:
        nodes = int(info.labels.get(K_NODE_COUNT, "1"))
    except ValueError:
        return False
    return nodes > 1 and info.exit_code == TEARDOWN_EXIT_CODE


def job_state(nodes: list[NodeRecord]) -> JobState:
    """Aggregate node states into the job state."""
    states = [n.state for n in nodes]
    if "failed" in states or NEVER_STARTED in states:
        return "failed"
    if "running" in states:
        return "running"
    if "pending" in states:
        return "pending"
    if "unreachable" in states:
        return "unknown"
    if "stopped" in states:
        return "stopped"
    if states and all(s == "succeeded" for s in states):
        return "succeeded"
    if "lost" in states:
        return "lost"
    return "unknown"


def shown_state(job: JobRecord) -> ShownState:
    """The job's state as every face shows it: ``removed`` once ``rm`` removed it, else
    :attr:`JobRecord.state`."""
    return "removed" if job.removed_at is not None else job.state


def job_summary(job: JobRecord) -> str:
    """One line saying why the job ended where it did, or ``""``.

    A failure (or an interrupted launch): ``node 1 rank 3: <reason>``. A job the user stopped
    (``stop``, ``rm --force``): ``stopped by the user (SIGTERM)``, never the SignalException
    traceback torchrun prints when it gets that SIGTERM.
    """
    f = job.failure
    if f:
        rank = f" rank {f['rank']}" if f.get("rank") is not None else ""
        return f"node {f['node']}{rank}: {f['reason']}"
    if job.state == "stopped" and job.stop_requested_at is not None:
        return "stopped by the user (SIGTERM)"
    return ""


def format_node_state(n: NodeRecord) -> str:
    """``failed(1)``, ``running``, ..."""
    if n.state == "failed" and n.exit_code is not None:
        return f"failed({n.exit_code})"
    return n.state


def first_failed(nodes: list[NodeRecord]) -> NodeRecord | None:
    """The failed node that finished first (by Docker's FinishedAt), or ``None``."""
    failed = [n for n in nodes if n.state == "failed"]
    if not failed:
        return None

    def key(n: NodeRecord) -> tuple[int, int]:
        try:
            return (parse_rfc3339_ns(n.finished_at or ""), n.node_rank)
        except ValueError:
            return (1 << 62, n.node_rank)

    return min(failed, key=key)


#: A job the user stopped exits as a shell reports SIGTERM (``submit --follow``, ``ps``,
#: Slurm's ``0:15``), whatever torchrun's own status after it (1: its SignalException, or
#: Docker's 137 when it outlived the grace period and was killed).
STOPPED_EXIT_CODE = 128 + 15


def stopped_exit_code(nodes: list[NodeRecord], by_user: bool = False) -> int | None:
    """The exit code of a stopped job (``ps`` EXIT, ``submit --follow``'s status).

    Stopped by the user (``stop``, ``rm --force``: ``by_user``): 143 (128 + SIGTERM); each
    node keeps the code Docker recorded (a node of a multi-node job: 143, its gang
    supervisor reports the SIGTERM; a one-node job: torchrun's own 1 after its
    SignalException; 137 if it was killed after the grace period). Otherwise (a gang
    that ended itself): the code its nodes recorded (Docker's ``State.ExitCode``; the host
    runtime's ``exit.json``, 128+N for signal N like Docker's), the lowest node rank's
    first, passing over :data:`remote.gang.TEARDOWN_EXIT_CODE` (a node that ended because
    another did) unless no node has another. ``None`` when no node recorded one (never
    started)."""
    codes = [n.exit_code for n in sorted(nodes, key=lambda n: n.node_rank)
             if n.exit_code is not None]
    if by_user and codes:
        return STOPPED_EXIT_CODE
    return next((c for c in codes if c != TEARDOWN_EXIT_CODE), codes[0] if codes else None)


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
            n.finished_at is None or info.exit_code is None or n.state in ACTIVE_STATES)

    return need


async def _containers(session: Session, job: JobRecord,
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
            return await session.engine(host).list({K_JOB_ID: job.id}, detail=need,
                                                   runtime=job.runtime)
        except GpuConsoleError as e:
            log.debug("[%s] cannot list containers of %s: %s", host, job.id, e)
            job.unreachable[host] = e.message
            return None

    rest = [h for h in hosts if h not in known]
    results = await asyncio.gather(*(one(h) for h in rest))
    known.update(zip(rest, results))
    return {h: known[h] for h in hosts}


def _merge_stored(job: JobRecord, stored: JobRecord) -> None:
    """Take another process's intent from the store: its stop flags, stop time, removal,
    launcher state."""
    flags = {n.node_rank: n.stop_requested for n in stored.nodes}
    for n in job.nodes:
        n.stop_requested = n.stop_requested or flags.get(n.node_rank, False)
    job.stop_requested_at = job.stop_requested_at or stored.stop_requested_at
    job.removed_at = stored.removed_at
    job.launcher = stored.launcher


def _interruption(job: JobRecord, never_started: list[NodeRecord]) -> FailureRecord:
    """The failure record of an interrupted launch (``never_started``: its nodes that have
    no started container)."""
    created = [n for n in never_started if n.state == NEVER_STARTED]
    where = ", ".join(f"{n.host} (n{n.node_rank})" for n in (created or never_started))
    first = (created or never_started)[0]
    reason = (f"{INTERRUPTED}: containers created but never started on {where}" if created
              else f"{INTERRUPTED} before the containers were created on {where}")
    return {
        "node": first.node_rank,
        "host": first.host,
        "exit_code": None,
        "rank": None,
        "reason": reason,
        "fix": f"`gpuconsole rm {job.id}` removes what is left; then submit again",
        "interrupted": True,
    }


async def refresh(
    session: Session, store: Store, job: JobRecord, *, teardown: bool = True,
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
        _merge_stored(job, stored)
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
            i.status in ("exited", "dead") and i.exit_code != 0 for i in by_rank.values()):
        # a `stop` flags its nodes before it signals them: read the flags again after the
        # list, so an exit that the stop caused is never taken for a failure
        again = await store.call(store.get, job.id)
        if again is not None:
            _merge_stored(job, again)
    now = time.time()
    never = [i.created_s if i.created_s is not None else job.created_at
             for i in by_rank.values() if i.status == "created"]
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
            n.state = ("stopped" if n.stop_requested and n.started_at is None
                       and n.state in (NEVER_STARTED, "pending", "stopped") else "lost")
        elif not launching:
            n.state = "lost"  # its launch ended before creating its container
    spoke = await asyncio.gather(*(_has_output(session, n) for n in silent))
    for n, has_output in zip(silent, spoke):
        if not has_output:
            n.state = "pending"  # running, not started yet as far as its user can tell
    never_started = [n for n in job.nodes if n.state == NEVER_STARTED
                     or (n.state == "lost" and n.container_id is None)]
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
        job.failure = _interruption(job, never_started)
        fields["failure"] = job.failure
        fields["exit_code"] = failed.exit_code if failed is not None else None
    elif failed is not None and not interrupted:
        fields["exit_code"] = failed.exit_code
        if job.failure is None or job.failure.get("node") != failed.node_rank:
            job.failure = await explain_failure(session, failed, job.nodes)
            fields["failure"] = job.failure
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


async def _node_evidence(session: Session, node: NodeRecord
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
            node.container_id,
            ERROR_FILE if is_docker_id(node.container_id) else HOST_ERROR_FILE)
    except GpuConsoleError as e:
        log.debug("cannot read failure details of node %d: %s", node.node_rank, e)
    return text, oom_killed, raw, info


#: Seconds of the host's kernel log read before a node's container started and after it ended.
KERNEL_MARGIN_S = 60.0


async def _host_kernel(session: Session, node: NodeRecord,
                       info: ContainerInfo | None) -> NodeKernelEvents | None:
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


def exit_reason(code: int | None) -> str:
    """``exited with code 137 (128+9: SIGKILL)``: a container's exit status, with the signal
    a status above 128 stands for (the shell and Docker's convention for a process killed by
    signal N)."""
    if code is None:
        return "exited (exit code unknown)"
    text = f"exited with code {code}"
    if 128 < code < 128 + 65:
        from console.diagnosis import signal_name

        name = signal_name(128 - code)
        if name:
            text += f" (128+{code - 128}: {name})"
    return text


async def explain_failure(session: Session, node: NodeRecord,
                          others: Sequence[NodeRecord] = ()) -> FailureRecord:
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
    message = _error_file_message(raw) if raw else None
    if raw:  # the error file's traceback joins the log: the normaliser opens its JSON
        text += "\n" + raw.decode("utf-8", errors="replace")
    if kernel is not None and kernel.own_lines:  # Xids on this node's GPUs: the engine ranks
        text += "\n" + "\n".join(kernel.own_lines)  # a reset-class one above CUDA errors
    diag = diagnose(text) if text else None
    if oom_killed and (diag is None or diag.kind in _ENDINGS):
        out["kind"] = "oom_killed"
        out["reason"] = ("the container was killed by the kernel's OOM killer (Docker "
                         "State.OOMKilled: host or container memory limit)")
        out["fix"] = ("lower host memory use (DataLoader workers, batch size, pinned memory) "
                      "or raise the container's memory limit")
        if diag is not None:
            out["consequences"] = [diag.summary]
        return out
    own: Diagnosis | None = diag
    for other in [n for n in others if n.node_rank != node.node_rank][:3]:
        other_text, _, other_raw, _ = await _node_evidence(session, other)
        if other_raw:
            other_text += "\n" + other_raw.decode("utf-8", errors="replace")
        found = diagnose(other_text) if other_text else None
        if found is not None and (diag is None or precedence_of(found) < precedence_of(diag)):
            diag = found
            out["node"], out["host"] = other.node_rank, other.host
            out["exit_code"], out["rank"] = other.exit_code, None
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


def failure_lines(f: FailureRecord) -> list[str]:
    """A stored failure as text lines, the same in ``describe``, ``ps`` and the app:
    ``first failure: node N on HOST rank R, exit code C: REASON``, then ``  fix: ...`` and
    ``  then: ...`` per consequence."""
    rank = f" rank {f['rank']}" if f.get("rank") is not None else ""
    code = f", exit code {f['exit_code']}" if f.get("exit_code") is not None else ""
    lines = [f"first failure: node {f.get('node')} on {f.get('host')}{rank}{code}: "
             f"{f.get('reason')}"]
    if f.get("fix"):
        lines.append(f"  fix: {f.get('fix')}")
    lines += [f"  then: {c}" for c in f.get("consequences", [])[:5]]
    return lines


def _error_file_message(raw: bytes) -> str | None:
    """The one-line message of a torchelastic error file (``{"message": {"message": ...}}``)."""
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    msg = data.get("message") if isinstance(data, dict) else None
    if isinstance(msg, dict):
        msg = msg.get("message")
    if not isinstance(msg, str) or not msg.strip():
        return None
    return msg.strip().splitlines()[-1]


@dataclass(frozen=True)
class JobView:
    """One row of ``ps``: the job and each node's state, ready to print or dump as JSON."""

    job: JobRecord

    def as_dict(self) -> dict[str, Any]:
        """The documented ``ps --json`` object: ``state`` is :func:`shown_state` (``removed``
        after ``rm``), ``final_state`` the state the job was in when last seen, ``summary``
        :func:`job_summary`, ``kind`` ``train`` or ``notebook``."""
        j = self.job
        return {
            "id": j.id,
            "name": j.name,
            "kind": j.kind,
            "profile": j.profile,
            "state": shown_state(j),
            "final_state": j.state,
            "exit_code": j.exit_code,
            "created_at": j.created_at,
            "removed_at": j.removed_at,
            "failure": j.failure,
            "summary": job_summary(j),
            "nodes": [
                {
                    "node_rank": n.node_rank,
                    "host": n.host,
                    "container": n.container_name,
                    "container_id": n.container_id,
                    "state": n.state,
                    "exit_code": n.exit_code,
                    "started_at": n.started_at,
                    "finished_at": n.finished_at,
                }
                for n in j.nodes
            ],
        }


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

#: Seconds one reconcile waits for the hosts' listings (:func:`list_fleet`); a host still
#: connecting or listing then is ``pending``: its jobs keep their last known state.
LIST_DEADLINE_S = 30.0

HOST_ANSWERED, HOST_PENDING, HOST_FAILED = "answered", "pending", "failed"


@dataclass
class HostListing:
    """What one host said in a reconcile of the fleet.

    Attributes:
        host: the host's profile name.
        status: ``answered``, ``pending`` (still connecting or listing when the deadline
            passed) or ``failed`` (it could not be asked: ``reason`` says why).
        reason: why it is not ``answered`` (one line naming the host), else ``None``.
        containers: every gpuconsole job node on it (both runtimes) when answered.
        seconds: how long it took to answer or fail, from the start of the reconcile (s,
            monotonic); for a pending host, the deadline.
        phase: where it was: ``queued`` (waiting for a connection slot), ``connecting``,
            ``listing`` or ``done``.
    """

    host: str
    status: str
    reason: str | None = None
    containers: list[ContainerInfo] | None = None
    seconds: float = 0.0
    phase: str = "queued"

    def as_dict(self) -> dict[str, Any]:
        """The ``ps --json --hosts`` object of one host."""
        return {"host": self.host, "status": self.status, "reason": self.reason,
                "seconds": round(self.seconds, 3),
                "containers": None if self.containers is None else len(self.containers)}


def pending_reason(host: str, phase: str, deadline_s: float) -> str:
    """The one line shown for a host that had not answered when the deadline passed."""
    doing = {"queued": "waiting for a connection slot", "connecting": "still connecting",
             "listing": "still listing its containers"}.get(phase, phase)
    return (f"host {host}: no answer within {deadline_s:g} s ({doing}); its jobs show their "
            "last known state")


async def host_runtime_nodes(session: Session, host: str, labels: dict[str, str | None],
                             detail: Callable[[ContainerInfo], bool] | None = None,
                             ) -> list[ContainerInfo]:
    """On a host whose default runtime is Docker: the host runtime's nodes too, when it has
    any (one remote command that stops at once without a jobs folder:
    :meth:`remote.hostengine.HostEngine.list_if_any`; host nodes are always complete, so
    ``detail`` is not needed)."""
    engine = session.engine(host)
    if engine.runtime != "docker":
        return []
    return await engine.hostrt.list_if_any(labels)


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
    session: Session, hosts: Sequence[str], *,
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
    (:func:`host_runtime_nodes`), plus Docker's on the hosts in ``docker_on`` whose default is
    the host runtime (a job there asks for Docker).

    Never raises for a host: one that cannot be asked is ``failed`` with the reason, one still
    connecting or listing ``deadline_s`` seconds after the start is ``pending`` (its task is
    cancelled). Raises the open file limit first (:func:`raise_open_file_limit`). Returns
    host -> :class:`HostListing`, in ``hosts`` order.
    """
    from console.jobs.labels import K_JOB_NAME

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
                        return await host_runtime_nodes(session, h.host, labels, detail)

                if engine.runtime == "docker":
                    # the engine's listing and the host runtime's command, side by side on
                    # the one connection; when one fails the other is cancelled (left
                    # running, it would outlive the session and fail at exit, unretrieved)
                    pair = [asyncio.ensure_future(engine.list(labels, detail=detail)),
                            asyncio.ensure_future(host_nodes())]
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
        done, late = await asyncio.wait(tasks, timeout=max(0.0, deadline_s))
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


def _detail_for(known: set[str], watched: Sequence[JobRecord]
                ) -> Callable[[ContainerInfo], bool]:
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


async def adopt_listed(session: Session, store: Store, listed: dict[str, HostListing],
                       known: set[str]) -> list[str]:
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
            nodes.setdefault(labels.node_rank, NodeRecord(
                job_id, labels.node_rank, labels.host or host, info.name, info.id,
                node_state(info, False, launching), info.exit_code, info.started_at,
                info.finished_at,
            ))
        rec = JobRecord(
            id=job_id, name=lab.job_name, profile=session.profile.name,
            profile_source=session.profile.source,
            spec={"kind": lab.kind} if lab.kind != "train" else {}, spec_hash=lab.spec_hash,
            created_at=lab.created_at or time.time(), node_count=lab.node_count,
            nodes=[nodes[r] for r in sorted(nodes)],
        )
        # another caller (the app's alert rules, a `ps` in another shell) may adopt it first
        if await store.call(store.add_job, rec, if_absent=True):
            adopted.append(job_id)
    return adopted


async def reconcile_fleet(
    session: Session, store: Store, watched: Sequence[JobRecord], *,
    concurrency: int = LIST_CONCURRENCY, deadline_s: float = LIST_DEADLINE_S,
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
    docker_on = sorted({n.host for j in watched if j.runtime == "docker" for n in j.nodes
                        if profile.host_runtime(n.host) != "docker"})
    listed = await list_fleet(session, list(profile.hosts), detail=_detail_for(known, watched),
                              docker_on=docker_on, concurrency=concurrency,
                              deadline_s=deadline_s)
    await adopt_listed(session, store, listed, known)
    return listed


async def adopt_unknown(session: Session, store: Store, hosts: list[str], *,
                        unanswered: list[str] | None = None) -> list[str]:
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
