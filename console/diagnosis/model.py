"""What a diagnosis says: :class:`Diagnosis` (one root cause) and its :class:`Consequence`s.

Shared by every face: ``gpuconsole diagnose``, ``ps``/``describe`` (console/backends/containers.py),
the TUI's jobs view and the job-failed alert.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Final, Literal, TypeAlias

if TYPE_CHECKING:
    from console.diagnosis.elastic import TorchelasticFailure
    from console.diagnosis.lines import Line

__all__ = [
    "CauseKind",
    "Consequence",
    "Context",
    "Diagnosis",
    "FactValue",
    "Needs",
    "make_diagnosis",
]

CauseKind = Literal[
    "xid",
    "gpu_lost",
    "gsp_timeout",
    "driver_unreachable",
    "driver_version_mismatch",
    "nvml_library_not_found",
    "nvml_function_not_found",
    "no_gpus",
    "fabric_manager",
    "nvml_lost_in_container",
    "nvml_error",
    "nvml_blocked_by_host",
    "nvml_permission",
    "gpu_unschedulable",
    "docker_daemon_unreachable",
    "docker_permission",
    "disk_full",
    "docker_no_gpu_driver",
    "docker_unknown_runtime",
    "toolkit_nvml_init",
    "toolkit_library_missing",
    "driver_too_old",
    "toolkit_hook_failed",
    "image_not_found",
    "registry_auth",
    "registry_rate_limited",
    "registry_unreachable",
    "name_conflict",
    "oom_killed",
    "nccl_cuda_oom",
    "cuda_oom",
    "shm_exhausted",
    "cuda_ecc",
    "cuda_no_device",
    "cuda_invalid_device",
    "cuda_unsupported_arch",
    "cuda_illegal_memory_access",
    "cuda_device_assert",
    "cuda_error",
    "jupyter_not_installed",
    "jupyter_root_refused",
    "jupyter_dir_missing",
    "jupyter_permission",
    "jupyter_port_unavailable",
    "slurm_exec_failed",
    "store_address_unresolved",
    "port_in_use",
    "rendezvous_connection",
    "rendezvous_failed",
    "nccl_invalid_usage",
    "nccl_unhandled_cuda",
    "exception",
    "nccl_system_error",
    "nccl_internal_error",
    "sigkill",
    "sigsegv",
    "slurm_time_limit",
    "stuck_rank",
    "collective_mismatch",
    "nccl_timeout",
    "nccl_remote_error",
    "collective_wait",
    "jupyter_kernel_died",
    "sigabrt",
    "signal",
    "exit_code",
    "hangup",
    "stopped",
    "slurm_cancelled",
    "process_stack",
    # not ranked by the engine (after every ranked id)
    "image_platform_mismatch",
    # a Slurm job's end state when its logs name no cause (console/slurm/state.STATE_KINDS):
    # a job's failure, never a rule's finding
    "slurm_timeout",
    "slurm_node_fail",
    "slurm_out_of_memory",
    "slurm_boot_fail",
    "slurm_deadline",
    "slurm_preempted",
]
"""A cause id: what a :class:`Diagnosis` (or a :class:`Consequence`) names, stable across
releases (stored in a job's failure, printed by ``diagnose --json``, matched by alert rules);
each is documented in ``docs/diagnose.md`` and ranked by
:data:`console.diagnosis.engine.PRECEDENCE`."""

FactValue: TypeAlias = str | int | float | tuple[int, ...] | Mapping[int, int] | Mapping[int, str]
"""A value in :attr:`Diagnosis.facts`: numbers are in the units their key names (``_ms``,
``_s``, ``bytes``); tuples hold ranks or pids; a mapping goes from rank to a number or a name
(``op_by_rank``: each rank's collective)."""


@dataclass(frozen=True)
class Consequence:
    """Something else the text shows that follows from the root cause (the SIGTERMs of the
    surviving ranks, an Xid 45 after a reset-class Xid, Slurm cancelling the step...).

    Attributes:
        kind: its cause id, as it would be named on its own (see :class:`Diagnosis`).
        summary: one line.
        evidence: the lines it was read from.
    """

    kind: CauseKind
    summary: str
    evidence: tuple[str, ...]


@dataclass(frozen=True)
class Diagnosis:
    """One reason for a failure, for a person to read.

    ``kind`` is a short stable id (the table in ``tests/data/diagnose/README.md`` and
    ``docs/diagnose.md``); ``summary`` one line saying what happened; ``ranks`` the global
    ranks blamed for it (empty when the text does not say which, or no worker ever started);
    ``fix`` one line saying what to do; ``evidence`` the lines the diagnosis rests on
    (decorations such as timestamps removed, a rank prefix kept). ``facts`` holds the values
    read from the text, keyed by name (units in the key: ``timeout_ms``, ``bytes``...).
    ``failure`` is torchelastic's failure summary when the text had one. ``consequences``
    are the other failures the text shows, each a consequence of this one. ``inputs`` names
    what the text was recognised as (``torchrun log``, ``kernel log``, ``docker output``...).
    """

    kind: CauseKind
    summary: str
    ranks: tuple[int, ...]
    fix: str
    evidence: tuple[str, ...]
    facts: Mapping[str, FactValue] = field(default_factory=lambda: MappingProxyType({}))
    failure: TorchelasticFailure | None = None
    consequences: tuple[Consequence, ...] = ()
    inputs: tuple[str, ...] = ()


def make_diagnosis(
    kind: CauseKind,
    summary: str,
    ranks: Iterable[int],
    fix: str,
    evidence: Iterable[str],
    facts: Mapping[str, FactValue | None],
    failure: TorchelasticFailure | None = None,
) -> Diagnosis:
    """A :class:`Diagnosis` with None facts dropped and evidence stripped and de-duplicated."""
    kept = {k: v for k, v in facts.items() if v is not None}
    return Diagnosis(
        kind=kind,
        summary=summary,
        ranks=tuple(ranks),
        fix=fix,
        evidence=tuple(dict.fromkeys(e.strip() for e in evidence if e.strip())),
        facts=MappingProxyType(kept),
        failure=failure,
    )


MIN_WRAPPED_ROW: Final = 60
"""The shortest row (columns) taken for a terminal's wrap: a log line wrapped at a narrower
window is rare, and a shorter row is as likely a line that just ended."""


@dataclass(frozen=True)
class Context:
    """What every rule reads.

    Attributes:
        text: the input as given (rules that parse a format with its own prefixes, such as
            the kernel log's timestamps, read this).
        lines: the normalised lines (:func:`console.diagnosis.lines.normalize`).
        failure: torchelastic's failure summary (the earliest root cause when several nodes
            printed one), None when the text has none.
    """

    text: str
    lines: list[Line]
    failure: TorchelasticFailure | None

    @functools.cached_property
    def physical(self) -> list[str]:
        """The input's physical lines as :func:`~console.diagnosis.lines.normalize` split
        them (ANSI escapes removed, trailing blanks trimmed): ``Line.source_line`` indexes
        this."""
        from console.diagnosis.lines import strip_escapes

        return [p.rstrip() for p in strip_escapes(self.text).splitlines()]

    @functools.cached_property
    def wrap_width(self) -> int | None:
        """The width a terminal wrapped this text at, when the text shows one: the length
        (:data:`MIN_WRAPPED_ROW` columns or more) that most different physical lines share,
        at most 2 columns short of the longest line (a terminal copy keeps each wrapped row
        at the full width; a paste may add a character or two to one, a Markdown backtick).
        ``None`` when no two lines share such a length."""
        at: dict[int, set[str]] = {}
        for p in self.physical:
            if len(p) >= MIN_WRAPPED_ROW:
                at.setdefault(len(p), set()).add(p)
        if not at:
            return None
        longest = max(at)
        shared = [(len(rows), n) for n, rows in at.items() if len(rows) >= 2 and n >= longest - 2]
        return max(shared)[1] if shared else None


@dataclass(frozen=True)
class Needs:
    """The lines a rule can match, for the engine's pre-filter (:mod:`console.diagnosis.engine`).

    A rule declares the literal words (matched case-insensitively, anywhere in a physical line
    of the input, decorations included) that every line it can match holds, and how many
    physical lines around such a line it reads besides (a traceback's frames, a table under
    its header). The engine runs the rule on those lines only; a rule that declares nothing
    reads every line.

    By default a rule reads every rule's lines (the union of all words); with ``alone`` (on
    every Needs of the rule) it reads the lines of its own words only, and is not run at all
    when none of them is in the input. On a big log that is what keeps one rule's cost off
    the lines only other rules read (an ``NCCL_DEBUG=INFO`` run's communicator lines).

    Attributes:
        words: literal substrings, lower-case (``"traceback"``, ``"nccl warn"``).
        before: physical lines kept before each line holding a word.
        after: physical lines kept after it.
        alone: the rule reads the lines of these words only, not every rule's.
        unless: literal substrings, lower-case: a line holding one is never one the rule
            matches, whatever word it holds (with ``alone``: such a line is kept for the rule
            only as another's context). ``common.NCCL_INFO`` for a rule that never reads NCCL's
            INFO chatter.
        also: (with ``alone``) lines the rule reads besides, once a line of its other Needs is
            in the input: they do not make it run (every line it matches holds another's word).
        first: regular expressions (Python's syntax): the first line of the input each one
            matches is read too, with no context (what a rule takes from the first such line
            only: the world size).
    """

    words: tuple[str, ...]
    before: int = 4
    after: int = 8
    alone: bool = False
    unless: tuple[str, ...] = ()
    also: bool = False
    first: tuple[str, ...] = ()
