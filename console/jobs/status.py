"""Job and node states: the pure state machine (no I/O). Reconciling the store with what
the hosts say, gang teardown and the failure's explanation are the backends' I/O
(:mod:`console.backends.containers` for SSH hosts, :mod:`console.slurm.backend` for Slurm);
they call these functions to name a state.

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
  :mod:`remote.gang`), or a never-started container that ``stop`` removed; also a job this
  store has no stop of whose first failure reads as torchrun's agent stopped by SIGTERM /
  SIGINT from outside (another console's ``stop``, this one's before it lost its state,
  ``docker stop``: :mod:`console.backends.containers` then records the stop);
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

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from console.jobs.labels import K_KIND, K_NODE_COUNT
from console.jobs.states import JobState, NodeState, ShownState
from console.jobs.store import FailureRecord, JobRecord, NodeRecord
from remote.docker import parse_rfc3339_ns
from remote.gang import TEARDOWN_EXIT_CODE

if TYPE_CHECKING:
    from remote.docker import ContainerInfo

ACTIVE_STATES: tuple[JobState, ...] = ("pending", "running")
FINAL_JOB_STATES: tuple[JobState, ...] = ("succeeded", "failed", "stopped", "lost")
NEVER_STARTED: Final = "created"
"""Node state of a container created but never started, its launch over."""
STOPPABLE = (*ACTIVE_STATES, NEVER_STARTED)
"""Node states that ``stop`` acts on: running, starting, or created and never started."""
INTERRUPTED = "launch interrupted"
"""How an interrupted launch's failure reason starts."""


def has_started(n: NodeRecord) -> bool:
    """Whether the node's container (or host process) was started and has not ended:
    ``running``, or ``pending`` before its first log line."""
    return n.state == "running" or (n.state == "pending" and n.started_at is not None)


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
    traceback torchrun prints when it gets that SIGTERM. A lost job: its first lost node, gone
    from its host while its host answers (its container removed, or a Slurm job its scheduler
    no longer knows), or never started (its launch ended first).
    """
    f = job.failure
    if f:
        rank = f" rank {f['rank']}" if f.get("rank") is not None else ""
        return f"node {f['node']}{rank}: {f['reason']}"
    if job.state == "stopped" and job.stop_requested_at is not None:
        return "stopped by the user (SIGTERM)"
    if job.state == "lost":
        lost = next((n for n in job.nodes if n.state == "lost"), None)
        if lost is not None:
            if lost.container_id is None:
                return f"node {lost.node_rank}: its launch ended before it started on {lost.host}"
            return f"node {lost.node_rank}: no longer on {lost.host} (removed outside gpuconsole?)"
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
    codes = [
        n.exit_code for n in sorted(nodes, key=lambda n: n.node_rank) if n.exit_code is not None
    ]
    if by_user and codes:
        return STOPPED_EXIT_CODE
    return next((c for c in codes if c != TEARDOWN_EXIT_CODE), codes[0] if codes else None)


def merge_stored(job: JobRecord, stored: JobRecord) -> None:
    """Take another process's intent from the store: its stop flags, stop time, removal,
    launcher state."""
    flags = {n.node_rank: n.stop_requested for n in stored.nodes}
    for n in job.nodes:
        n.stop_requested = n.stop_requested or flags.get(n.node_rank, False)
    job.stop_requested_at = job.stop_requested_at or stored.stop_requested_at
    job.removed_at = stored.removed_at
    job.launcher = stored.launcher


def interruption(job: JobRecord, never_started: list[NodeRecord]) -> FailureRecord:
    """The failure record of an interrupted launch (``never_started``: its nodes that have
    no started container)."""
    created = [n for n in never_started if n.state == NEVER_STARTED]
    where = ", ".join(f"{n.host} (n{n.node_rank})" for n in (created or never_started))
    first = (created or never_started)[0]
    reason = (
        f"{INTERRUPTED}: containers created but never started on {where}"
        if created
        else f"{INTERRUPTED} before the containers were created on {where}"
    )
    return {
        "node": first.node_rank,
        "host": first.host,
        "exit_code": None,
        "rank": None,
        "reason": reason,
        "fix": f"`gpuconsole rm {job.id}` removes what is left; then submit again",
        "interrupted": True,
    }


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


def failure_lines(f: FailureRecord) -> list[str]:
    """A stored failure as text lines, the same in ``describe``, ``ps`` and the app:
    ``first failure: node N on HOST rank R, exit code C: REASON``, then ``  fix: ...`` and
    ``  then: ...`` per consequence."""
    rank = f" rank {f['rank']}" if f.get("rank") is not None else ""
    code = f", exit code {f['exit_code']}" if f.get("exit_code") is not None else ""
    lines = [
        f"first failure: node {f.get('node')} on {f.get('host')}{rank}{code}: {f.get('reason')}"
    ]
    if f.get("fix"):
        lines.append(f"  fix: {f.get('fix')}")
    lines += [f"  then: {c}" for c in f.get("consequences", [])[:5]]
    return lines


def error_file_message(raw: bytes) -> str | None:
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
        return {
            "host": self.host,
            "status": self.status,
            "reason": self.reason,
            "seconds": round(self.seconds, 3),
            "containers": None if self.containers is None else len(self.containers),
        }


def pending_reason(host: str, phase: str, deadline_s: float) -> str:
    """The one line shown for a host that had not answered when the deadline passed."""
    doing = {
        "queued": "waiting for a connection slot",
        "connecting": "still connecting",
        "listing": "still listing its containers",
    }.get(phase, phase)
    return (
        f"host {host}: no answer within {deadline_s:g} s ({doing}); its jobs show their "
        "last known state"
    )
