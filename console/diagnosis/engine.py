"""Run every rule over a text and name one root cause, the rest as its consequences.

Rules live in one module per area (:mod:`console.diagnosis.torchrun`, and the modules listed
in :data:`RULE_MODULES`); each returns what it found without caring about the others. The
engine ranks the findings by :data:`PRECEDENCE`, the causal order of the cause ids (a GPU that
fell off the bus explains the CUDA errors, which explain the NCCL errors, which explain the
watchdog timeouts, which explain the SIGTERMs...), and, within one id, by where the evidence
first appears. The first is the root cause; every other finding of another id becomes a
:class:`~console.diagnosis.model.Consequence`, except a rank's exit status that merely restates
the root cause of the same rank.
"""

from __future__ import annotations

import importlib
import logging
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace

from console.diagnosis.elastic import parse_torchelastic_failure
from console.diagnosis.lines import Line, normalize
from console.diagnosis.model import Consequence, Context, Diagnosis

__all__ = [
    "PRECEDENCE", "RULE_MODULES", "SCHEDULER_ENDS", "detect_inputs", "diagnose", "findings",
    "precedence_of",
]

log = logging.getLogger("gpuconsole.diagnosis")

Rule = Callable[[Context], "Diagnosis | Iterable[Diagnosis] | None"]

#: Modules whose ``RULES`` tuple the engine runs (a module not there yet is skipped).
RULE_MODULES: tuple[str, ...] = (
    "console.diagnosis.gpu",
    "console.diagnosis.docker",
    "console.diagnosis.cuda",
    "console.diagnosis.nccl",
    "console.diagnosis.torchrun",
    "console.diagnosis.slurm",
    "console.diagnosis.jupyter",
)

#: Cause ids from root to consequence. An id missing here ranks after all listed ones.
PRECEDENCE: tuple[str, ...] = (
    # the host and its GPUs
    "xid", "gpu_lost", "gsp_timeout", "driver_unreachable", "driver_version_mismatch",
    "nvml_library_not_found", "nvml_function_not_found", "no_gpus", "fabric_manager",
    "nvml_lost_in_container",
    "nvml_error", "nvml_blocked_by_host", "nvml_permission",
    # the container engine, the registry, the toolkit
    "gpu_unschedulable", "docker_daemon_unreachable", "docker_permission", "disk_full",
    "docker_no_gpu_driver",
    "docker_unknown_runtime", "toolkit_nvml_init", "toolkit_library_missing", "driver_too_old",
    "toolkit_hook_failed", "image_not_found", "registry_auth", "registry_rate_limited",
    "registry_unreachable", "name_conflict",
    # resources
    "oom_killed", "nccl_cuda_oom", "cuda_oom", "shm_exhausted", "cuda_ecc",
    # CUDA in the process
    "cuda_no_device", "cuda_invalid_device", "cuda_unsupported_arch",
    "cuda_illegal_memory_access", "cuda_device_assert", "cuda_error",
    # the notebook server in its container (before the exception its traceback shows)
    "jupyter_not_installed", "jupyter_root_refused", "jupyter_dir_missing",
    "jupyter_permission", "jupyter_port_unavailable",
    # the program never started (slurmstepd's execve)
    "slurm_exec_failed",
    # distributed set-up
    "store_address_unresolved", "port_in_use", "rendezvous_connection", "rendezvous_failed",
    "nccl_invalid_usage", "nccl_unhandled_cuda",
    # the application
    "exception",
    "nccl_system_error", "nccl_internal_error",
    # a rank killed from outside (the OOM killer) or crashed: its peers' timeouts and
    # closed connections follow from it
    "sigkill", "sigsegv",
    # the scheduler's clock, then what peers see when one rank is gone
    "slurm_time_limit", "nccl_timeout", "nccl_remote_error",
    # a notebook's kernel that died (an OOM kill or a signal above explains it)
    "jupyter_kernel_died",
    # how the other processes ended
    "sigabrt", "signal", "exit_code", "hangup", "stopped",
    "slurm_cancelled",
    # an Xid the application caused (13, 31, 43...) ranks below the application's own error
    "xid_app",
)
_RANK = {kind: i for i, kind in enumerate(PRECEDENCE)}

#: Ids that only say how a rank ended: dropped as consequences of a root cause on that rank.
_EXIT_KINDS = frozenset({"sigkill", "sigsegv", "sigabrt", "signal", "exit_code"})


#: Ids of the scheduler ending the job from outside (its clock, a preemption or requeue, a
#: cancellation). What the tasks print AFTER such a line (their exit codes, the signals they got,
#: the NCCL errors of peers that lost a stopped rank) follows from it, whatever PRECEDENCE says;
#: a failure printed above it (the exception that made srun cancel the step) stays the root.
SCHEDULER_ENDS = frozenset({"slurm_time_limit", "slurm_cancelled"})
_AFTER_A_STOP = _EXIT_KINDS | {
    "stopped", "hangup", "nccl_system_error", "nccl_internal_error", "nccl_remote_error",
    "nccl_timeout",
}


def precedence_of(d: Diagnosis) -> int:
    """Where ``d``'s cause id stands in :data:`PRECEDENCE` (lower = nearer the root); ids not
    listed rank after every listed one. Compares diagnoses of different texts (the nodes of
    one job)."""
    kind = "xid_app" if d.kind == "xid" and d.facts.get("xid_class") == "app" else d.kind
    return _RANK.get(kind, len(_RANK))


def _rules() -> list[Rule]:
    rules: list[Rule] = []
    for name in RULE_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name:
                raise
            continue
        rules.extend(getattr(module, "RULES", ()))
    return rules


def _position(d: Diagnosis, lines: Sequence[Line]) -> int:
    """Index of the first line holding one of ``d``'s evidence lines (len(lines) if none)."""
    wanted = set(d.evidence)
    for ln in lines:
        if ln.raw.strip() in wanted or ln.text.strip() in wanted:
            return ln.index
    for ln in lines:  # evidence built from several lines or reworded: a looser match
        if any(e and (e in ln.raw or (ln.text.strip() and ln.text.strip() in e))
               for e in d.evidence):
            return ln.index
    return len(lines)


def _order(d: Diagnosis, lines: Sequence[Line]) -> tuple[int, int]:
    return (precedence_of(d), _position(d, lines))


def findings(ctx: Context) -> list[Diagnosis]:
    """Everything every rule found in ``ctx``, root cause first (see the module docstring).

    A rule that raises is logged and skipped: one broken rule never hides the others.
    """
    found: list[Diagnosis] = []
    for rule in _rules():
        try:
            got = rule(ctx)
        except Exception:
            log.exception("diagnosis rule %s failed; skipped",
                          getattr(rule, "__qualname__", rule))
            continue
        if got is None:
            continue
        found.extend([got] if isinstance(got, Diagnosis) else got)
    ordered = sorted(found, key=lambda d: _order(d, ctx.lines))
    return _after_scheduler_end(ordered, ctx.lines)


def _after_scheduler_end(found: list[Diagnosis], lines: Sequence[Line]) -> list[Diagnosis]:
    """``found`` with the findings that follow a scheduler's end of the job (see
    :data:`SCHEDULER_ENDS`) moved after it."""
    end = next((d for d in found if d.kind in SCHEDULER_ENDS), None)
    if end is None:
        return found
    at, rank = _position(end, lines), precedence_of(end)
    # with a reason (DUE TO TIME LIMIT / PREEMPTION / NODE FAILURE...) the end came from outside
    # the job: a Python exception printed after it is the processes failing on the way out
    from_outside = bool(end.facts.get("reason")) or end.kind == "slurm_time_limit"
    later = [d for d in found
             if (d.kind in _AFTER_A_STOP or (from_outside and d.kind == "exception"))
             and precedence_of(d) < rank and _position(d, lines) > at]
    if not later:
        return found
    rest = [d for d in found if d not in later]
    i = rest.index(end) + 1
    return rest[:i] + later + rest[i:]


_INPUTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("torchrun log", re.compile(
        r"torch\.distributed|torchrun|ChildFailedError|\[rank\d+\]:|\[default\d+\]:"
        r"|ProcessGroupNCCL|elastic", re.I)),
    ("NCCL debug output", re.compile(r"\bNCCL (?:WARN|INFO|ERROR)\b")),
    ("Python traceback", re.compile(r"^Traceback \(most recent call last\)", re.M)),
    ("kernel log", re.compile(r"NVRM:|\bkernel: |Out of memory: Kill")),
    ("nvidia-smi output", re.compile(r"NVIDIA-SMI|nvidia-smi|No devices were found")),
    ("NVML error", re.compile(r"NVML|pynvml|nvml\.")),
    ("docker output", re.compile(
        r"Error response from daemon|docker(?:d|\s+(?:run|pull|compose|exec|info))"
        r"|OCI runtime|nvidia-container-cli|Cannot connect to the Docker daemon", re.I)),
    ("Slurm output", re.compile(r"slurmstepd|srun: |SLURM_|sbatch")),
)


def detect_inputs(text: str) -> tuple[str, ...]:
    """What ``text`` looks like (``torchrun log``, ``kernel log``, ``docker output``...), in
    a fixed order; empty when nothing familiar is in it."""
    return tuple(name for name, pattern in _INPUTS if pattern.search(text))


def _restates(d: Diagnosis, root: Diagnosis) -> bool:
    """``d`` only says how the root cause's rank ended. A launcher's report (srun's
    ``task N: Exited``, whose task ids are not ranks under torchrun) is never one."""
    if "launcher" in d.facts:
        return False
    return d.kind in _EXIT_KINDS and bool(d.ranks) and set(d.ranks) <= set(root.ranks)


def diagnose(text: str) -> Diagnosis | None:
    """The one root cause of the failure ``text`` shows, or None when it shows none.

    ``text`` is any saved output (a job's log, a console paste with timestamps or Markdown
    quoting, a kernel log, docker's or nvidia-smi's errors), also several concatenated. The
    result names its consequences and what the input was recognised as.
    """
    lines = normalize(text)
    ctx = Context(text, lines, parse_torchelastic_failure(text))
    found = findings(ctx)
    if not found:
        return None
    root = found[0]
    seen = {root.kind} | {c.kind for c in root.consequences}
    consequences: list[Consequence] = []
    for d in found[1:]:
        if d.kind in seen or _restates(d, root):
            continue
        seen.add(d.kind)
        consequences.append(Consequence(d.kind, d.summary, d.evidence))
    return replace(root, consequences=root.consequences + tuple(consequences),
                   inputs=detect_inputs(text))
