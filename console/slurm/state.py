"""Slurm's answers read as gpuconsole states (pure: no I/O).

Inputs are the texts Slurm 22.05 prints (recorded ones in ``tests/data/slurm/recorded``):
``scontrol show job -o`` (one line of ``Key=Value`` fields), ``sacct -P -n -o
JobID,State,ExitCode,NodeList`` (``|``-separated; ``sacct -c`` reads the job completion file
where no accounting daemon runs), and the batch output's srun lines (``srun: error: node2:
task 1: Exited with exit code 3``), which say how each node's task ended.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from console.diagnosis.model import CauseKind
    from console.jobs.states import JobState, NodeState

#: Slurm job states (``man squeue``, JOB STATE CODES) -> gpuconsole job states.
STATE_MAP: dict[str, JobState] = {
    "PENDING": "pending",
    "CONFIGURING": "pending",
    "REQUEUED": "pending",
    "REQUEUE_FED": "pending",
    "REQUEUE_HOLD": "pending",
    "RESV_DEL_HOLD": "pending",
    "SUSPENDED": "running",
    "STOPPED": "running",
    "RUNNING": "running",
    "COMPLETING": "running",
    "SIGNALING": "running",
    "STAGE_OUT": "running",
    "RESIZING": "running",
    "COMPLETED": "succeeded",
    "FAILED": "failed",
    "TIMEOUT": "failed",
    "NODE_FAIL": "failed",
    "OUT_OF_MEMORY": "failed",
    "BOOT_FAIL": "failed",
    "DEADLINE": "failed",
    "CANCELLED": "stopped",
    "PREEMPTED": "stopped",
    "REVOKED": "stopped",
    "SPECIAL_EXIT": "failed",
}

#: Why Slurm ended a job, for the states that say it themselves.
STATE_REASONS = {
    "TIMEOUT": (
        "Slurm ended the job at its time limit (--time)",
        "raise `time_limit` in the spec (or the profile's slurm.time_limit), or "
        "checkpoint and resume",
    ),
    "NODE_FAIL": (
        "a node of the job failed (Slurm NODE_FAIL)",
        "resubmit; ask the cluster's admins about the node (sinfo -R)",
    ),
    "OUT_OF_MEMORY": (
        "a task ran out of memory (Slurm OUT_OF_MEMORY: the job's cgroup OOM killer)",
        "ask for more memory (sbatch_args: [--mem=...]) or "
        "lower host memory use (DataLoader workers, batch size)",
    ),
    "BOOT_FAIL": ("a node of the job failed to boot (Slurm BOOT_FAIL)", "resubmit"),
    "DEADLINE": ("Slurm ended the job at its deadline (--deadline)", "move the deadline"),
    "PREEMPTED": (
        "Slurm preempted the job for another",
        "resubmit, or use a partition or QOS without preemption",
    ),
}

STATE_KINDS: dict[str, CauseKind] = {
    "TIMEOUT": "slurm_timeout",
    "NODE_FAIL": "slurm_node_fail",
    "OUT_OF_MEMORY": "slurm_out_of_memory",
    "BOOT_FAIL": "slurm_boot_fail",
    "DEADLINE": "slurm_deadline",
    "PREEMPTED": "slurm_preempted",
}
"""The cause id of a job failure that :data:`STATE_REASONS` explains (same keys)."""

_FIELD = re.compile(r"(\w[\w/:]*)=(\S*)")
_SRUN_TASK = re.compile(
    r"srun: error: (?P<node>\S+): tasks? (?P<tasks>[\d,\- ]+): (?P<how>Exited with exit "
    r"code (?P<code>\d+)|Killed|Terminated|Out Of Memory|Segmentation fault|Aborted"
    r"|Bus error)"
)
_TERMINATING = re.compile(
    r"srun: (?:launch/slurm: _step_signal: Terminating|Job step "
    r"aborted|forcing job termination)"
)


def parse_scontrol(line: str) -> dict[str, str]:
    """``scontrol show job -o`` of one job as ``{key: value}`` (values without spaces;
    ``Reason=None`` kept as the text ``None``)."""
    return dict(_FIELD.findall(line))


def expand_nodelist(nodelist: str) -> list[str]:
    """Slurm's compressed host list (``node[1-2,5]``, ``gpu[01-03],login``) as names, in
    order, zero padding kept; ``(null)``, ``None`` and ``""`` give ``[]``."""
    if nodelist in ("", "(null)", "None"):
        return []
    parts: list[str] = []
    depth, cur = 0, ""
    for c in nodelist:
        if c == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += (c == "[") - (c == "]")
        cur += c
    parts.append(cur)
    names: list[str] = []
    for p in parts:
        m = re.fullmatch(r"([^\[]*)\[([^\]]*)\](.*)", p)
        if m is None:
            names.append(p)
            continue
        head, ranges, tail = m.groups()
        for r in ranges.split(","):
            a, _, b = r.partition("-")
            if b and a.isdigit() and b.isdigit():
                names += [f"{head}{i:0{len(a)}d}{tail}" for i in range(int(a), int(b) + 1)]
            else:
                names.append(f"{head}{a}{tail}")
    return names


def exit_status(value: str) -> tuple[int | None, int | None]:
    """Slurm's ``ExitCode=code:signal`` as ``(code, signal)`` (``None`` for a bad field)."""
    code, _, sig = value.partition(":")
    return (int(code) if code.isdigit() else None, int(sig) if sig.isdigit() else None)


@dataclass(frozen=True)
class SlurmJob:
    """A Slurm job as gpuconsole sees it.

    Attributes:
        slurm_id: Slurm's job id.
        slurm_state: Slurm's state word (``RUNNING``, ``TIMEOUT``...).
        state: the gpuconsole job state (:data:`STATE_MAP`; ``unknown`` for a new word).
        exit_code: the batch script's exit code (srun's: the highest task exit code), or
            ``None`` until it ended.
        signal: the signal that ended it (``scontrol``'s ``0:15``), or ``None``.
        nodes: the allocated node names in node-id order (empty while pending).
        reason: Slurm's reason (``Resources``, ``TimeLimit``...), or ``None``.
    """

    slurm_id: str
    slurm_state: str
    state: JobState
    exit_code: int | None
    signal: int | None
    nodes: tuple[str, ...]
    reason: str | None = None

    @property
    def shown_code(self) -> int | None:
        """The exit code as a shell reports it: ``128 + signal`` for a job Slurm ended by a
        signal (scancel, time limit: ``ExitCode=0:15`` -> 143), else :attr:`exit_code`."""
        if self.signal and not self.exit_code:
            return 128 + self.signal
        return self.exit_code


def job_from_scontrol(fields: dict[str, str]) -> SlurmJob:
    """A :class:`SlurmJob` from :func:`parse_scontrol`'s fields."""
    word = fields.get("JobState", "")
    final = STATE_MAP.get(word) not in (None, "pending", "running")
    code, sig = exit_status(fields.get("ExitCode", "")) if final else (None, None)
    reason = fields.get("Reason")
    return SlurmJob(
        fields.get("JobId", ""),
        word,
        STATE_MAP.get(word, "unknown"),
        code,
        sig or None,
        tuple(expand_nodelist(fields.get("NodeList", ""))),
        None if reason in (None, "None") else reason,
    )


def job_from_sacct(text: str, slurm_id: str) -> SlurmJob | None:
    """The job's row of ``sacct -P -n -o JobID,State,ExitCode,NodeList`` (the last one: a
    requeued job has several), or ``None``. ``State`` may read ``CANCELLED by 0``."""
    rows = [r.split("|") for r in text.splitlines()]
    rows = [r for r in rows if len(r) >= 4 and r[0] == slurm_id]
    if not rows:
        return None
    r = rows[-1]
    word = r[1].split()[0] if r[1].split() else ""
    final = STATE_MAP.get(word) not in (None, "pending", "running")
    code, sig = exit_status(r[2]) if final else (None, None)
    return SlurmJob(
        slurm_id,
        word,
        STATE_MAP.get(word, "unknown"),
        code,
        sig or None,
        tuple(expand_nodelist(r[3])),
    )


@dataclass(frozen=True)
class TaskEnd:
    """How srun said one task (= node, one task per node) ended.

    Attributes:
        task: the task id (the node id).
        node: the node name srun gave.
        how: ``exit``, ``Killed``, ``Terminated``, ``Out Of Memory``...
        code: the exit code for ``exit``, else ``None``.
        after_terminate: srun had begun ending the step (``--kill-on-bad-exit``, scancel,
            time limit) when this task ended: a consequence, not a cause.
        order: position among srun's task lines.
    """

    task: int
    node: str
    how: str
    code: int | None
    after_terminate: bool
    order: int


def task_ends(batch_out: str) -> dict[int, TaskEnd]:
    """srun's lines in the batch output, per task (the first line about a task wins)."""
    out: dict[int, TaskEnd] = {}
    terminating = False
    for line in batch_out.splitlines():
        if _TERMINATING.search(line) or "CANCELLED AT" in line:
            terminating = True
        m = _SRUN_TASK.search(line)
        if m is None:
            continue
        how = "exit" if m.group("code") is not None else m.group("how")
        code = int(m.group("code")) if m.group("code") is not None else None
        for t in _tasks(m.group("tasks")):
            if t not in out:
                out[t] = TaskEnd(t, m.group("node"), how, code, terminating, len(out))
    return out


def _tasks(spec: str) -> list[int]:
    out: list[int] = []
    for part in spec.replace(" ", "").split(","):
        a, _, b = part.partition("-")
        if b and a.isdigit() and b.isdigit() and int(b) - int(a) < 100_000:
            out += range(int(a), int(b) + 1)
        elif a.isdigit():
            out.append(int(a))
    return out


def node_states(
    job: SlurmJob, count: int, ends: dict[int, TaskEnd], *, stop_requested: bool
) -> list[tuple[NodeState, int | None]]:
    """Each node's ``(state, exit code)`` from the job's state and srun's task lines.

    While the job is pending or running every node has its state. Once it ended: a task srun
    reported with a non-zero exit before it began ending the step failed; a task ended after
    that (SIGTERM from ``--kill-on-bad-exit``, scancel, the time limit) was ``stopped``;
    a task srun said nothing about exited 0 unless the whole job failed without task lines
    (time limit, node failure: every node then takes the job's state). A job gpuconsole
    stopped (``stop_requested``) has every non-succeeded node ``stopped``.
    """
    if job.state in ("pending", "running", "unknown"):
        return [(job.state, None)] * count
    out: list[tuple[NodeState, int | None]] = []
    for t in range(count):
        end = ends.get(t)
        if end is None:
            if job.state == "succeeded" or (job.state == "failed" and ends):
                out.append(("succeeded", 0))
            else:
                out.append((job.state, job.shown_code))
            continue
        if end.how == "exit" and end.code == 0:
            out.append(("succeeded", 0))
        elif stop_requested or job.state == "stopped" or end.after_terminate:
            out.append(("stopped", end.code))
        else:
            out.append(("failed", end.code))
    if stop_requested:
        out = [(s if s == "succeeded" else "stopped", c) for s, c in out]
    elif job.state == "failed" and not any(s == "failed" for s, _ in out):
        # the job failed but srun blamed no task by itself (time limit, node failure, an
        # error in the script before srun): every node that did not succeed failed with it
        out = [(s if s == "succeeded" else "failed", c) for s, c in out]
    return out
