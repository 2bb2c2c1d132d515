"""Rules for Slurm: the scheduler's time limit, cancellations, the job cgroup's OOM killer,
and srun's per-task exit lines as consequences of a real error above them.

Primary sources (SchedMD/slurm):

- ``src/slurmd/slurmstepd/req.c`` (``_handle_signal_container``): ``error("*** %s ON %s
  CANCELLED AT %s DUE TO TIME LIMIT ***")``, ``... DUE TO PREEMPTION ***``, ``... DUE TO NODE
  FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***``, ``... DUE TO JOB REQUEUE ***`` (preemption
  with PreemptMode=REQUEUE, ``scontrol requeue``) and, for scancel, ``*** %s ON %s CANCELLED AT
  %s ***``, where ``%s`` is ``JOB <id>`` or ``STEP <id>.<step>`` (Slurm before 15.08 wrote
  ``*** JOB %u CANCELLED AT %s DUE TO TIME LIMIT on %s ***``, the node last).
- ``src/plugins/task/cgroup/task_cgroup_memory.c`` and ``src/plugins/cgroup/v1|v2``:
  ``Detected %u oom-kill event(s) in %ps cgroup. Some of your processes may have been killed
  by the cgroup out-of-memory handler.`` (newer: ``Detected %u oom_kill event%s in %ps. Some
  of the step tasks have been OOM Killed.``).
- ``src/srun/srun_job.c`` / ``launch``: ``srun: error: %s: task%s %s: Exited with exit code
  %d``, ``...: Killed``, ``...: Out Of Memory``, ``srun: Job step aborted: Waiting up to %d
  seconds for job step to finish.``, ``srun: forcing job termination``.
- ``src/slurmd/slurmstepd/task.c`` (``_exec_task``): ``error("execve(): %s: %m",
  task->argv[0])`` then ``_exit(errno)``: the batch script (slurmd's spool copy,
  ``<SlurmdSpoolDir>/job<id>/slurm_script``) or a task's program could not be executed, so srun
  reports the errno as the task's exit code (2 ENOENT, 13 EACCES, 8 ENOEXEC).
- bash's job-control report of a killed child (``script: line N:  PID Killed  command``).

A Slurm cancellation or srun's exit lines never hide the error above them: a Python
exception a task printed before srun reported its exit is the root cause (the exit lines and
the step's cancellation are its consequences). What follows a cancellation (the tasks' exit
codes and signals, peers' NCCL errors) is its consequence: the engine orders that by position
(``engine.SCHEDULER_ENDS``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from console.diagnosis.common import NCCL_INFO, WRAPS, own_words
from console.diagnosis.elastic import EXCEPTION_LINE
from console.diagnosis.lines import Line
from console.diagnosis.model import Consequence, Context, Diagnosis, FactValue, Needs
from console.diagnosis.model import make_diagnosis as _diag

__all__ = ["RULES", "parse_tasks"]


_CANCELLED = re.compile(
    r"\*\*\*\s*(?P<what>JOB|STEP)\s+(?P<id>[\w.+]+)\s+(?:ON\s+(?P<node>\S+)\s+)?"
    r"CANCELLED AT\s+(?P<at>\S+)(?:\s+DUE TO\s+(?P<why>[^*]+?))?"
    r"(?:\s+on\s+(?P<node_old>\S+))?\s*\*\*\*"
)
_STEPD_KILLED = re.compile(
    r"\*\*\*\s*(?P<what>JOB|STEP)\s+(?P<id>[\w.+]+)\s+STEPD TERMINATED ON\s+(?P<node>\S+)"
    r"\s+AT\s+(?P<at>\S+)\s+DUE TO\s+(?P<why>[^*]+?)\s*\*\*\*"
)
_OOM_EVENT = re.compile(
    r"Detected (?P<n>\d+) oom[-_]kill events?(?:\(s\))? in (?P<step>.+?)(?: cgroup)?\."
    r"|(?P<n2>\d+) oom[-_]kill events?(?:\(s\))? in (?P<step2>\S+)",
    re.I,
)
_SRUN_TASK = re.compile(
    r"srun: error: (?P<node>\S+): tasks? (?P<tasks>[\d,\-\[\] ]+): (?P<how>Exited with exit "
    r"code (?P<code>\d+)|Killed|Terminated|Out Of Memory|Segmentation fault|Aborted"
    r"|Bus error)"
)
#: srun ending a step itself (``src/plugins/launch/slurm/launch_slurm.c`` ``_step_signal``:
#: ``info("Terminating %ps", ...)``), e.g. under ``--kill-on-bad-exit`` once a task failed;
#: slurmstepd's ``*** STEP ... CANCELLED ***`` line may or may not follow it.
_SRUN_TERMINATING = re.compile(r"_step_signal: Terminating StepId=(?P<id>\d+\.\w+)")
_BASH_KILLED = re.compile(r"line \d+:\s+(?P<pid>\d+) Killed\s+(?P<cmd>\S.*)")
_TERM = re.compile(
    r"Received SIGTERM|got signal: 15|SIGTERM received|signal 15\b|Job step aborted"
    r"|forcing job termination|Force Terminated",
    re.I,
)


def parse_tasks(spec: str) -> tuple[int, ...]:
    """srun's task list (``2-7``, ``8-13,15``) as task ids."""
    out: list[int] = []
    for part in spec.replace("[", "").replace("]", "").replace(" ", "").split(","):
        if "-" in part:
            a, _, b = part.partition("-")
            if a.isdigit() and b.isdigit() and int(b) - int(a) < 100_000:
                out += range(int(a), int(b) + 1)
        elif part.isdigit():
            out.append(int(part))
    return tuple(out)


def _stopped_consequences(lines: Sequence[Line], after: int) -> tuple[Consequence, ...]:
    """The SIGTERMs Slurm sent the tasks once it cancelled the step (a consequence)."""
    hits = [ln.raw for ln in lines if ln.index > after and _TERM.search(ln.text)]
    if not hits:
        return ()
    return (
        Consequence(
            "stopped",
            "Slurm sent the tasks SIGTERM (then SIGKILL after the "
            "grace period) when it ended the step",
            tuple(hits[:4]),
        ),
    )


def _killed_consequences(lines: Sequence[Line]) -> tuple[Consequence, ...]:
    killed = [ln.raw for ln in lines if (m := _SRUN_TASK.search(ln.text)) and m["how"] == "Killed"]
    if not killed:
        return ()
    return (
        Consequence(
            "sigkill",
            "srun reports tasks Killed (SIGKILL after the step was cancelled)",
            tuple(killed),
        ),
    )


_TRACEBACK = re.compile(r"^Traceback \(most recent call last\)")


def _traceback_after(lines: Sequence[Line], after: int) -> tuple[Consequence, ...]:
    """A Python traceback the job printed after Slurm ended it (a requeued or signalled
    process failing on the way out, often cut before its exception line): a consequence."""
    at = next((ln.index for ln in lines if ln.index > after and _TRACEBACK.match(ln.text)), None)
    if at is None:
        return ()
    tail = lines[at + 1 :]
    last = next(
        (
            ln
            for ln in tail
            if ln.text[:1].strip()
            and not ln.text.startswith(
                ("File ", "Traceback", "During handling", "The above exception")
            )
        ),
        None,
    )
    shown = [lines[at].raw] + ([last.raw] if last is not None else [])
    return (
        Consequence(
            "exception",
            "a Python traceback printed after Slurm ended the job "
            "(the processes failing while being stopped or requeued)",
            tuple(shown),
        ),
    )


def _cancelled(ctx: Context) -> Diagnosis | None:
    """``*** JOB/STEP ... CANCELLED AT ... [DUE TO ...] ***``: the time limit, a preemption,
    a node failure, or scancel."""
    hits = [(ln, m) for ln in ctx.lines if (m := _CANCELLED.search(ln.text))]
    stepd = [(ln, m) for ln in ctx.lines if (m := _STEPD_KILLED.search(ln.text))]
    if not hits and not stepd:
        return _srun_terminated(ctx)
    # The line that says why: the time limit first, then a line with a reason (slurmstepd
    # prints the STEP's bare cancel line first and the JOB's line with DUE TO <reason> after
    # it when the whole job is preempted / requeued / loses a node), the JOB's before a STEP's.
    pick = min(
        hits or stepd,
        key=lambda h: (
            "TIME LIMIT" not in (h[1]["why"] or "").upper(),
            not h[1]["why"],
            h[1]["what"] != "JOB",
            h[0].index,
        ),
    )
    ln, m = pick
    why = (m["why"] or "").strip().rstrip(",")
    node = m["node"] if m["node"] not in (None, "...") else m.groupdict().get("node_old")
    entity = f"{m['what'].lower()} {m['id']}"
    on = f" on {node}" if node else ""
    evidence = [ln.raw] + [
        x.raw
        for x, y in hits
        if x is not ln and ((y["why"] or "") == (m["why"] or "") or not y["why"])
    ]
    step = next((y["id"] for _, y in hits if "." in y["id"]), None)
    facts: dict[str, FactValue | None] = {
        "job": m["id"].split(".")[0],
        "step": m["id"] if "." in m["id"] else step,
        "node": node,
        "time": m["at"],
        "reason": why or None,
    }
    first = min(x.index for x, _ in hits or stepd)
    consequences = (
        _stopped_consequences(ctx.lines, first)
        + _killed_consequences(ctx.lines)
        + _traceback_after(ctx.lines, first)
    )
    if "TIME LIMIT" in why.upper():
        d = _diag(
            "slurm_time_limit",
            f"Slurm cancelled {entity}{on} at {m['at']}: it reached its time limit (--time)"
            + (
                "; the task ends after it (SIGTERM, then SIGKILL) are consequences"
                if consequences
                else "; Slurm then sends the tasks SIGTERM, and SIGKILL after KillWait"
            ),
            (),
            "request more time (`--time`), or checkpoint and requeue before the limit "
            "(`--signal=USR1@120` with a handler that saves, `--requeue`)",
            evidence[:2],
            facts,
        )
    else:
        if "REQUEUE" in why.upper():
            what = "requeued (preempted, or `scontrol requeue`) to run again later"
            fix = (
                "nothing failed: make the job save a checkpoint on the warning signal "
                "(`--signal=USR1@120`) and resume when it restarts; or use a partition/QOS "
                "that is not preemptible"
            )
        elif "PREEMPT" in why.upper():
            what = "preempted: a higher-priority job took its resources"
            fix = (
                "resubmit or let the workflow retry; use `--requeue` with checkpointing, or a "
                "partition/QOS that is not preemptible"
            )
        elif "NODE FAIL" in why.upper():
            what = "ended because its node failed (see slurmctld's log for the node)"
            fix = (
                "resubmit (excluding the node: `--exclude`) and ask the admins about the "
                "node; checkpoint so a restart resumes"
            )
        elif why:
            what = f"ended by Slurm ({why.lower()})"
            fix = "see `sacct -j <job> -o JobID,State,ExitCode,Reason` and resubmit"
        else:
            what = (
                "cancelled from outside (scancel by a user or an admin, or srun ending the "
                "step after another task failed)"
            )
            fix = (
                "find who cancelled it (`sacct -j <job> -o JobID,State,ExitCode` and the "
                "job's log before this line); resubmit if it was not on purpose"
            )
        d = _diag(
            "slurm_cancelled",
            f"Slurm {entity}{on} was {what} at {m['at']}",
            (),
            fix,
            evidence[:2],
            facts,
        )
    return replace(d, consequences=consequences)


def _srun_terminated(ctx: Context) -> Diagnosis | None:
    """srun's ``_step_signal: Terminating StepId=J.S`` without slurmstepd's cancel line:
    srun itself ended the step (``--kill-on-bad-exit`` after a task failed, or a signal)."""
    hit = next(((ln, m) for ln in ctx.lines if (m := _SRUN_TERMINATING.search(ln.text))), None)
    if hit is None:
        return None
    ln, m = hit
    d = _diag(
        "slurm_cancelled",
        f"Slurm step {m['id']} was cancelled by srun (--kill-on-bad-exit after a task "
        "failed, or a signal to srun)",
        (),
        "read the failing task's output above for the error that ended it",
        [ln.raw],
        {"job": m["id"].split(".")[0], "step": m["id"], "launcher": "srun"},
    )
    return replace(
        d, consequences=_stopped_consequences(ctx.lines, ln.index) + _killed_consequences(ctx.lines)
    )


def _oom(ctx: Context) -> Diagnosis | None:
    """The job cgroup's OOM killer (slurmstepd's ``oom-kill event``, srun's ``Out Of Memory``)."""
    event = next(((ln, m) for ln in ctx.lines if (m := _OOM_EVENT.search(ln.text))), None)
    task = next(
        (
            (ln, m)
            for ln in ctx.lines
            if (m := _SRUN_TASK.search(ln.text)) and m["how"] == "Out Of Memory"
        ),
        None,
    )
    if event is None and task is None:
        return None
    killed = next(((ln, m) for ln in ctx.lines if (m := _BASH_KILLED.search(ln.text))), None)
    pid = int(killed[1]["pid"]) if killed else None
    evidence: list[str] = []
    step = None
    if event is not None:
        ln, m = event
        evidence.append(ln.raw)
        step = (m["step"] or m["step2"] or "").strip()
        step = step.removeprefix("StepId=").removeprefix("step ").strip() or None
    if task is not None:
        evidence.append(task[0].raw)
    if killed is not None:
        evidence.append(killed[0].raw)
    tasks = parse_tasks(task[1]["tasks"]) if task else ()
    who = (
        f"process {pid} ({killed[1]['cmd'].split()[0]})"
        if killed
        else (f"task {', '.join(map(str, tasks))}" if tasks else "a process")
    )
    where = f" of step {step}" if step else ""
    return _diag(
        "oom_killed",
        f"the cgroup OOM killer killed {who}{where}: the job used more host RAM than it "
        "requested from Slurm (not GPU memory)",
        (),
        "request more memory (`--mem`, `--mem-per-cpu`, or `--exclusive` for the whole node), "
        "fewer tasks per node, or lower host memory use (DataLoader workers, data in RAM)",
        evidence,
        {"scope": "slurm", "pid": pid, "step": step, "tasks": tasks or None},
    )


def _task_exits(ctx: Context) -> list[Diagnosis]:
    """srun's per-task exit lines: how tasks ended (a consequence when anything explains it),
    and a Python exception printed above the first of them, the real error."""
    exits = [
        (ln, m)
        for ln in ctx.lines
        if (m := _SRUN_TASK.search(ln.text)) and m["how"] != "Out Of Memory"
    ]
    if not exits:
        return []
    out: list[Diagnosis] = []
    coded = [(ln, m) for ln, m in exits if m["code"] and m["code"] != "0"]
    killed = [(ln, m) for ln, m in exits if m["how"] == "Killed"]
    cancelled = any(_CANCELLED.search(ln.text) for ln in ctx.lines)
    if coded:
        tasks = tuple(t for _ln, m in coded for t in parse_tasks(m["tasks"]))
        codes = sorted({int(m["code"]) for _ln, m in coded})
        nodes = sorted({m["node"] for _ln, m in coded})
        out.append(
            _diag(
                "exit_code",
                f"srun: tasks {_span(tasks)} on {', '.join(nodes)} exited with code "
                f"{', '.join(map(str, codes))}",
                tasks,
                "read the tasks' own output above srun's lines for the error that made them exit",
                [ln.raw for ln, _m in coded][:4],
                {"exitcode": codes[0], "tasks": tasks, "launcher": "srun"},
                ctx.failure,
            )
        )
    if killed and not cancelled:
        tasks = tuple(t for _ln, m in killed for t in parse_tasks(m["tasks"]))
        out.append(
            _diag(
                "sigkill",
                f"srun: tasks {_span(tasks)} were killed (SIGKILL) with no cancellation or OOM "
                "line in the text: most likely the kernel OOM killer or an admin",
                tasks,
                "check `sacct -j <job> -o JobID,State,ExitCode,MaxRSS,ReqMem` and the node's "
                "kernel log (dmesg | grep -i oom)",
                [ln.raw for ln, _m in killed][:4],
                {"tasks": tasks, "launcher": "srun"},
                ctx.failure,
            )
        )
    if ctx.failure is None and coded:
        first = min(ln.index for ln, _m in coded)
        raised = _exception_above(ctx.lines, first)
        if raised is not None:
            m2 = EXCEPTION_LINE.match(raised.text.strip())
            etype = m2["type"] if m2 else None
            out.append(
                _diag(
                    "exception",
                    f"the tasks raised {raised.text.strip()}; srun then reported them exiting",
                    (),
                    f"fix the {etype or 'error'} in the training script (its traceback is in the "
                    "tasks' output)",
                    [raised.raw],
                    {
                        "exception": etype,
                        "exception_type": etype,
                        "message": (m2["msg"] or "") if m2 else None,
                    },
                )
            )
    return out


_PY_ERROR = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception)(?::|$)")


def _exception_above(lines: Sequence[Line], before: int) -> Line | None:
    """The last Python exception line (``RuntimeError: ...``) a task printed before srun's
    first exit line, or None; also None when that exception only carries an error another
    rule names (:data:`~console.diagnosis.common.WRAPS`: CUDA, NCCL, the store...)."""
    for ln in reversed(lines[:before]):
        if _PY_ERROR.match(ln.text.strip()):
            return None if WRAPS.search(ln.text) else ln
    return None


def _span(tasks: Sequence[int]) -> str:
    """``2-15`` for a contiguous run of task ids, else the list."""
    s = sorted(set(tasks))
    if len(s) > 2 and s == list(range(s[0], s[-1] + 1)):
        return f"{s[0]}-{s[-1]}"
    return ", ".join(map(str, s))


#: The rules of this module (the engine ranks what they find).
#: kube-scheduler's FailedScheduling message when no node has the GPUs a pod asks for
#: (pkg/scheduler/framework/plugins/noderesources/fit.go: "Insufficient <resource>", summed
#: up as "0/N nodes are available: M Insufficient nvidia.com/gpu").
_UNSCHEDULABLE = re.compile(
    r"(?P<free>\d+)/(?P<nodes>\d+) nodes are available:.{0,200}?"
    r"(?P<short>\d+) Insufficient (?P<res>nvidia\.com/(?:gpu\w*(?:[.-][a-z][\w-]*)*"
    r"|mig-[\w.-]*\w)|amd\.com/gpu)"
)
#: A device plugin's share of a GPU rather than whole GPUs (HAMi's nvidia.com/gpumem,
#: nvidia.com/gpu.memory, nvidia.com/gpucores; time-slicing's nvidia.com/gpu.shared).
_SHARED_RESOURCE = re.compile(r"nvidia\.com/gpu(?:\w+|[.-]\w+)")


#: slurmstepd's execve failure (task.c ``_exec_task``), also quoted in prose or inline code.
_EXECVE = re.compile(
    r"slurmstepd(?:-\S+)?:\s+error:\s+execve\(\):\s+(?P<path>\S(?:.*?\S)?):\s+"
    r"(?P<reason>[A-Z][A-Za-z ]*[a-z])"
)
#: What each strerror means for a batch script or a task's program, and its fix.
_EXEC_WHY: dict[str, tuple[str, str]] = {
    "No such file or directory": (
        "it does not exist on the node (or its #! interpreter does not)",
        "use a path that exists on the compute node (a shared filesystem, not the login "
        "node's local disk) and check the script's #! line there",
    ),
    "Permission denied": (
        "it is not executable (or lies on a noexec filesystem)",
        "`chmod +x` it, or run it through its interpreter (`srun bash script.sh`)",
    ),
    "Exec format error": (
        "it is not a program the node can run (a script without a #! line, or a binary for "
        "another CPU architecture)",
        "add a #! line to the script (or run it through its interpreter), or build the "
        "program for the node's architecture",
    ),
}


def _exec_failed(ctx: Context) -> Diagnosis | None:
    """``slurmstepd: error: execve(): <path>: <strerror>``: the batch script or a task's
    program never started; srun's exit code for the task is the errno."""
    hit = next(((ln, m) for ln in ctx.lines if (m := _EXECVE.search(ln.text))), None)
    if hit is None:
        return None
    ln, m = hit
    path, reason = m["path"].strip("`'\""), m["reason"]
    spool = path.endswith("/slurm_script")
    what, fix = _EXEC_WHY.get(
        reason,
        ("the node refused to run it", "check the path and its permissions on the compute node"),
    )
    if spool and reason == "No such file or directory":
        what = (
            "slurmd's spool copy of the batch script is gone on that node (its "
            "SlurmdSpoolDir was cleaned or unmounted, e.g. a /tmp purged under slurmd), or "
            "the script's #! interpreter does not exist there"
        )
        fix = (
            "check SlurmdSpoolDir on the node (`scontrol show config | grep SlurmdSpoolDir`) "
            "and the script's #! line; drain the node if its spool is broken and resubmit"
        )
    return _diag(
        "slurm_exec_failed",
        f"slurmstepd could not start {'the batch script' if spool else path} "
        f"({path}: {reason}): {what}; the job's program never ran",
        (),
        fix[0].upper() + fix[1:],
        [ln.raw],
        {"path": path, "reason": reason},
    )


#: The cluster autoscaler's event on GKE and other clouds ("PodUnschedulable Cannot schedule
#: pods: Insufficient nvidia.com/gpu."); a console that lists events may split the resource at
#: its dot over two entries ("... Insufficient nvidia " then "... Cannot schedule pods:
#: com/gpu.").
_CANNOT_SCHEDULE = re.compile(
    r"Cannot schedule pods: Insufficient (?P<res>nvidia(?:\.com/[\w.-]*\w)?|amd\.com/gpu)"
)
_CANNOT_SCHEDULE_REST = re.compile(r"Cannot schedule pods: (?P<rest>com/[\w.-]*\w)")


def _gpu_unschedulable(ctx: Context) -> Diagnosis | None:
    """Kubernetes left a GPU pod Pending: no node offers the GPUs it requests."""
    hit = next((ln for ln in ctx.lines if _UNSCHEDULABLE.search(ln.text)), None)
    if hit is None:
        return _cannot_schedule(ctx)
    m = _UNSCHEDULABLE.search(hit.text)
    assert m is not None
    res, nodes, short = m["res"], int(m["nodes"]), int(m["short"])
    what = (
        f"Either the GPUs' {res} is already given to other pods, or the GPU-sharing device "
        "plugin that advertises it is not running or not registered on those nodes"
        if _SHARED_RESOURCE.fullmatch(res)
        else "Either every GPU is already allocated, or the GPU nodes advertise none (the "
        "NVIDIA device plugin is not running or not registered there)"
    )
    return _diag(
        "gpu_unschedulable",
        f"Kubernetes cannot schedule the pod: {short} of {nodes} node(s) lack the requested "
        f"{res} (FailedScheduling; the pod stays Pending). {what}",
        (),
        f"`kubectl describe node <gpu node>`: if Allocatable shows no {res}, fix the NVIDIA "
        "device plugin / GPU operator on that node (its pod's log says why); if they are all "
        "allocated, wait or lower the request",
        [hit.raw],
        {"resource": res, "nodes": nodes, "nodes_short": short},
    )


def _cannot_schedule(ctx: Context) -> Diagnosis | None:
    """The autoscaler's ``Cannot schedule pods: Insufficient <resource>`` (see
    :data:`_CANNOT_SCHEDULE`), the resource joined again where the event list split it."""
    hit = next(((ln, m) for ln in ctx.lines if (m := _CANNOT_SCHEDULE.search(ln.text))), None)
    if hit is None:
        return None
    ln, m = hit
    res = m["res"]
    evidence = [ln.raw]
    if res == "nvidia":
        rest = next(
            (
                (x, r)
                for x in ctx.lines[ln.index + 1 :]
                if (r := _CANNOT_SCHEDULE_REST.search(x.text))
            ),
            None,
        )
        if rest is None:
            return None
        res = f"nvidia.{rest[1]['rest']}"
        evidence.append(rest[0].raw)
    return _diag(
        "gpu_unschedulable",
        f"Kubernetes cannot schedule the pod: no node has the requested {res} free (the "
        "cluster autoscaler's PodUnschedulable; the pod stays Pending). Either every GPU is "
        "already allocated, or the GPU nodes advertise none (the NVIDIA device plugin is not "
        "running there, or the node pool has no GPUs / no GPU driver installed)",
        (),
        f"`kubectl describe node <gpu node>`: if Allocatable shows no {res}, install the GPU "
        "driver and the NVIDIA device plugin on that node pool (on GKE: the driver installer "
        "DaemonSet); if the GPUs are all allocated, wait, add GPU nodes or lower the request",
        evidence,
        {"resource": res},
    )


RULES = (_cancelled, _oom, _task_exits, _exec_failed, _gpu_unschedulable)

#: What lines each rule reads (the engine's pre-filter; see :class:`Needs`).
#: Its own: Slurm's messages hold ``slurm``/``srun``/``task``/``error``/``kill``..., never
#: only PyTorch's chatter words (``device``, ``process``, ``warning``), nor NCCL's INFO lines.
NEEDS = {rule: Needs(own_words(), alone=True, unless=(NCCL_INFO,)) for rule in RULES}
NEEDS[_exec_failed] = Needs(own_words(added=("execve(",)), alone=True, unless=(NCCL_INFO,))
