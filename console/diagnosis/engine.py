"""Run every rule over a text and name one root cause, the rest as its consequences.

Rules live in one module per area (:mod:`console.diagnosis.torchrun`, and the modules listed
in :data:`RULE_MODULES`); each returns what it found without caring about the others. The
engine ranks the findings by :data:`PRECEDENCE`, the causal order of the cause ids (a GPU that
fell off the bus explains the CUDA errors, which explain the NCCL errors, which explain the
watchdog timeouts, which explain the SIGTERMs...), and, within one id, by where the evidence
first appears. The first is the root cause; every other finding of another id becomes a
:class:`~console.diagnosis.model.Consequence`, except a rank's exit status that merely restates
the root cause of the same rank.

Before the rules, a pre-filter (:func:`kept_text`) drops the lines no rule can match: each rule
declares, in its module's ``NEEDS``, the literal words a line it matches holds and the lines
around it that it reads (:class:`~console.diagnosis.model.Needs`). One scan of the lower-cased
input for all the words (one alternation compiled by RE2, a DFA) finds the physical lines to
keep; the lines between are dropped except a few that keep what was apart apart. A rule that
declares nothing makes the engine read every line for it. Every rule reads the lines of all
the words, except one whose Needs say ``alone``: it reads the lines of its own words (the same
cut: context, head, tail, the start of each dropped stretch), normalised on their own, and is
not run when none of them is in the input. The findings are ordered on every rule's lines.
"""

from __future__ import annotations

import bisect
import functools
import importlib
import logging
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType, ModuleType
from typing import Any, Literal, Protocol

from console.diagnosis.elastic import TorchelasticFailure, parse_torchelastic_failure
from console.diagnosis.lines import _ANSI, Line, normalize
from console.diagnosis.model import CauseKind, Consequence, Context, Diagnosis, Needs

__all__ = [
    "PRECEDENCE",
    "RULE_MODULES",
    "SCHEDULER_ENDS",
    "detect_inputs",
    "diagnose",
    "findings",
    "kept_text",
    "keywords",
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
    "console.diagnosis.stacks",
)

#: Cause ids from root to consequence (``xid_app``: an ``xid`` the application caused). An id
#: missing here ranks after all listed ones.
PRECEDENCE: tuple[CauseKind | Literal["xid_app"], ...] = (
    # the host and its GPUs
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
    # the container engine, the registry, the toolkit
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
    # resources
    "oom_killed",
    "nccl_cuda_oom",
    "cuda_oom",
    "shm_exhausted",
    "cuda_ecc",
    # CUDA in the process
    "cuda_no_device",
    "cuda_invalid_device",
    "cuda_unsupported_arch",
    "cuda_illegal_memory_access",
    "cuda_device_assert",
    "cuda_error",
    # the notebook server in its container (before the exception its traceback shows)
    "jupyter_not_installed",
    "jupyter_root_refused",
    "jupyter_dir_missing",
    "jupyter_permission",
    "jupyter_port_unavailable",
    # the program never started (slurmstepd's execve)
    "slurm_exec_failed",
    # distributed set-up
    "store_address_unresolved",
    "port_in_use",
    "rendezvous_connection",
    "rendezvous_failed",
    "nccl_invalid_usage",
    "nccl_unhandled_cuda",
    # the application
    "exception",
    "nccl_system_error",
    "nccl_internal_error",
    # a rank killed from outside (the OOM killer) or crashed: its peers' timeouts and
    # closed connections follow from it
    "sigkill",
    "sigsegv",
    # the scheduler's clock, then what peers see when one rank is gone
    "slurm_time_limit",
    # a hang's stacks (py-spy): the rank not in the collective, or collectives out of order,
    # is what the others' timeouts wait for; every rank in one collective points past them
    "stuck_rank",
    "collective_mismatch",
    "nccl_timeout",
    "nccl_remote_error",
    "collective_wait",
    # a notebook's kernel that died (an OOM kill or a signal above explains it)
    "jupyter_kernel_died",
    # how the other processes ended
    "sigabrt",
    "signal",
    "exit_code",
    "hangup",
    "stopped",
    "slurm_cancelled",
    # where one process was, with nothing to compare it with
    "process_stack",
    # an Xid the application caused (13, 31, 43...) ranks below the application's own error
    "xid_app",
)
_RANK = {kind: i for i, kind in enumerate(PRECEDENCE)}

#: Ids that only say how a rank ended: dropped as consequences of a root cause on that rank.
_EXIT_KINDS: frozenset[CauseKind] = frozenset(
    {"sigkill", "sigsegv", "sigabrt", "signal", "exit_code"}
)


#: Ids of the scheduler ending the job from outside (its clock, a preemption or requeue, a
#: cancellation). What the tasks print AFTER such a line (their exit codes, the signals they got,
#: the NCCL errors of peers that lost a stopped rank) follows from it, whatever PRECEDENCE says;
#: a failure printed above it (the exception that made srun cancel the step) stays the root.
SCHEDULER_ENDS: frozenset[CauseKind] = frozenset({"slurm_time_limit", "slurm_cancelled"})
_AFTER_A_STOP: frozenset[CauseKind] = _EXIT_KINDS | {
    "stopped",
    "hangup",
    "nccl_system_error",
    "nccl_internal_error",
    "nccl_remote_error",
    "nccl_timeout",
}


def precedence_of(d: Diagnosis) -> int:
    """Where ``d``'s cause id stands in :data:`PRECEDENCE` (lower = nearer the root); ids not
    listed rank after every listed one. Compares diagnoses of different texts (the nodes of
    one job)."""
    kind = "xid_app" if d.kind == "xid" and d.facts.get("xid_class") == "app" else d.kind
    return _RANK.get(kind, len(_RANK))


def _modules() -> list[ModuleType]:
    modules: list[ModuleType] = []
    for name in RULE_MODULES:
        try:
            modules.append(importlib.import_module(name))
        except ModuleNotFoundError as e:
            if e.name != name:
                raise
    return modules


def _declared() -> list[tuple[Rule, tuple[Needs, ...] | None]]:
    """Every rule with what it declared in its module's ``NEEDS`` (None: reads every line)."""
    out: list[tuple[Rule, tuple[Needs, ...] | None]] = []
    for module in _modules():
        needs: Mapping[Rule, Needs | tuple[Needs, ...]] = getattr(module, "NEEDS", {})
        for rule in getattr(module, "RULES", ()):
            got = needs.get(rule)
            out.append((rule, (got,) if isinstance(got, Needs) else got))
    return out


#: torchelastic's failure summary (:func:`~console.diagnosis.elastic.parse_torchelastic_failure`:
#: its borders, title, headers and fields), read from these lines alone.
SUMMARY_NEEDS = Needs(
    (
        "root cause",
        "failures:",
        " failed",
        "exitcode",
        "error_file",
        "traceback :",
        "local_rank:",
        "<no_other_failures>",
        "========",
        "--------",
        "********",
    ),
    before=4,
    after=12,
    alone=True,
)

#: What the engine itself reads besides the rules: torchelastic's failure summary
#: (:data:`SUMMARY_NEEDS`) and :func:`detect_inputs`' words (``NCCL INFO`` is looked for in the
#: whole input instead: :func:`_inputs`).
ENGINE_NEEDS: tuple[Needs, ...] = (
    SUMMARY_NEEDS,
    Needs(
        (
            "torch.distributed",
            "torchrun",
            "childfailederror",
            "processgroupnccl",
            "elastic",
            "nccl warn",
            "nccl error",
            "traceback (most recent call last)",
            "nvrm:",
            "kernel: ",
            "out of memory: kill",
            "nvidia-smi",
            "no devices were found",
            "nvml",
            "error response from daemon",
            "docker",
            "oci runtime",
            "nvidia-container-cli",
            "slurmstepd",
            "srun: ",
            "slurm_",
            "sbatch",
        )
    ),
)

#: Physical lines always kept at the start (the command, the world size, the set-up) and at
#: the end (where the job stopped) of an input.
HEAD_LINES = 100
TAIL_LINES = 200
#: Lines kept of each dropped stretch, so that lines far apart in the input stay as far apart
#: for the rules that look some lines away: at least the widest such window (NCCL's return
#: trace within 40 lines of its WARN; a frame within 4 lines of an exception line...).
GAP_LINES = 40
#: Inputs up to this many characters are read whole.
SMALL_TEXT = 16 * 1024


def _compile(pattern: bytes) -> _Searcher | None:
    """``pattern`` compiled by RE2 (google-re2's ``re2``: a DFA, one pass over the input
    whatever the number of words); None when it is not installed. Python's ``re`` is no
    substitute: it tries every word at every position (7 MiB/s on the benchmark's log, slower
    than the rules reading every line: docs/benchmarks.md)."""
    try:
        re2: Any = importlib.import_module("re2")
        options = re2.Options()  # another package's ``re2`` has none: not google-re2
    except (ImportError, AttributeError):
        return None
    options.max_mem = 64 << 20
    searcher: _Searcher = re2.compile(pattern, options)
    return searcher


class _Searcher(Protocol):
    def finditer(self, string: bytes) -> Iterator[re.Match[bytes]]: ...

    def search(self, string: bytes, pos: int, endpos: int) -> re.Match[bytes] | None: ...


@functools.cache
def _matcher() -> tuple[_Searcher, Mapping[bytes, tuple[int, int]]] | None:
    """The pre-filter's one pattern over the lower-cased input and each word's (before, after)
    context; None when no rule declared anything or RE2 is missing (every line is read). A
    rule that declared nothing is run on the whole input (:func:`findings`), so its lines need
    no word here."""
    context: dict[bytes, tuple[int, int]] = {}
    declared = [needs for _rule, needs in _declared()]
    if all(needs is None for needs in declared):
        return None
    for group in [*ENGINE_NEEDS, *(n for needs in declared if needs for n in needs)]:
        for word in group.words:
            key = word.lower().encode()
            before, after = context.get(key, (0, 0))
            context[key] = (max(before, group.before), max(after, group.after))
    searcher = _compile(b"|".join(re.escape(w) for w in sorted(context)))
    return None if searcher is None else (searcher, context)


def keywords() -> tuple[str, ...]:
    """Every word the pre-filter looks for (lower-case, sorted); empty when no rule declared
    any, so that every line is read."""
    m = _matcher()
    return tuple(sorted(w.decode() for w in m[1])) if m else ()


def _line_start(data: bytes, pos: int, back: int) -> int:
    """Offset of the start of the physical line ``back`` lines above the one holding ``pos``."""
    start = data.rfind(b"\n", 0, pos) + 1
    while back > 0 and start > 0:
        start = data.rfind(b"\n", 0, start - 1) + 1
        back -= 1
    return start


def _line_end(data: bytes, pos: int, forward: int) -> int:
    """Offset just past the newline ending the physical line ``forward`` lines below the one
    holding ``pos`` (len(data) at the end)."""
    end = pos
    for _ in range(forward + 1):
        nl = data.find(b"\n", end)
        if nl < 0:
            return len(data)
        end = nl + 1
    return end


class _Filter:
    """One input read for the pre-filter: its UTF-8 bytes, lower-cased, and every match of the
    words (one RE2 pass), from which :meth:`kept` cuts the text a set of rules reads."""

    def __init__(self, text: str, searcher: _Searcher) -> None:
        self.data = text.encode("utf-8", "surrogatepass")
        self.low = self.data.lower()
        self.matches = [(m.start(), m.group()) for m in searcher.finditer(self.low)]

    def _word_spans(self, context: Mapping[bytes, tuple[int, int]]) -> list[tuple[int, int]]:
        """Every match's line with its word's context (the union of every rule's lines)."""
        data = self.data
        return [
            (_line_start(data, pos, context[word][0]), _line_end(data, pos, context[word][1]))
            for pos, word in self.matches
        ]

    @functools.cached_property
    def _held(self) -> list[tuple[int, int, frozenset[int]]]:
        """Each line holding a word: its start, its end, and which word lists of
        :func:`_word_lists` it holds (one RE2 set match a line: a word of another rule matched
        first by the scan may hide one of them in the same line)."""
        lists = _word_lists()
        low = self.low
        out: list[tuple[int, int, frozenset[int]]] = []
        line_end = -1
        for pos, _word in self.matches:
            if pos < line_end:
                continue  # the same line
            start = low.rfind(b"\n", 0, pos) + 1
            end = low.find(b"\n", pos)
            line_end = len(low) if end < 0 else end
            held = frozenset((lists[0].Match(low[start:line_end]) or ()) if lists else ())
            out.append((start, line_end, held))
        return out

    def first_line(self, pattern: str) -> tuple[int, int] | None:
        """The first line of the input ``pattern`` (Python's syntax) matches, as a span; None
        when it matches none. RE2 (:func:`_wider`: matching wherever Python's ``re`` does)
        finds the candidates, Python's ``re`` confirms each."""
        found = _first_searcher(pattern)
        if found is None:
            return None
        fast, exact = found
        data, at = self.data, 0
        while (m := fast.search(data, at, len(data))) is not None:
            start = data.rfind(b"\n", 0, m.start()) + 1
            end = data.find(b"\n", m.start())
            end = len(data) if end < 0 else end + 1
            if exact.search(data[start:end].decode("utf-8", "surrogatepass")):
                return (start, end)
            at = end
        return None

    def _needs_spans(self, only: Sequence[Needs]) -> list[tuple[int, int]]:
        """The lines holding one of ``only``'s words and none of its ``unless``, each with its
        own context."""
        lists = _word_lists()
        index = lists[1] if lists else {}
        wanted = [
            (index.get(n.words), index.get(n.unless) if n.unless else None, n.before, n.after)
            for n in only
        ]
        if any(w is None or (n.unless and u is None) for (w, u, _b, _a), n in zip(wanted, only)):
            raise ValueError("Needs of no declared rule: not in the engine's word lists")
        data = self.data
        return [
            (_line_start(data, start, before), _line_end(data, start, after))
            for start, _end, held in self._held
            for words, unless, before, after in wanted
            if words in held and (unless is None or unless not in held)
        ]

    def kept(
        self,
        context: Mapping[bytes, tuple[int, int]],
        only: Sequence[Needs] | None,
        head: int,
        tail: int,
        gap: int,
    ) -> _Cut:
        """The text holding the lines of every word (``only`` None) or of ``only``'s words,
        with the first ``head`` and last ``tail`` lines and the first ``gap`` of each dropped
        stretch (see :func:`kept_text`)."""
        spans = self._word_spans(context) if only is None else self._needs_spans(only)
        return self.cut(spans, head, tail, gap)

    def cut(self, spans: list[tuple[int, int]], head: int, tail: int, gap: int) -> _Cut:
        """The text of ``spans`` (byte offsets, whole lines), the first ``head`` and last
        ``tail`` lines, and the first ``gap`` lines of each stretch between."""
        data = self.data
        spans = list(spans)
        if head:
            spans.append((0, _line_end(data, 0, head - 1)))
        if tail:
            last = len(data) - 1 if data.endswith(b"\n") else len(data)
            spans.append((_line_start(data, last, tail - 1), len(data)))
        spans.sort()
        parts: list[bytes] = []
        starts: list[int] = []
        origins: list[int] = []
        kept_lines = origin = origin_at = 0

        def take(start: int, end: int) -> None:
            nonlocal kept_lines, origin, origin_at
            if end <= start:
                return
            origin += data.count(b"\n", origin_at, start)
            origin_at = start
            starts.append(kept_lines)
            origins.append(origin)
            parts.append(data[start:end])
            kept_lines += data.count(b"\n", start, end)

        at = 0
        for start, end in [*spans, (len(data), len(data))]:
            if end <= at and start < len(data):
                continue
            if start > at:
                take(at, min(start, _line_end(data, at, gap - 1) if gap else at))
                at = start
            take(at, end)
            at = max(at, end)
        text = b"".join(parts).decode("utf-8", "surrogatepass")
        return _Cut(text, tuple(starts), tuple(origins))


@dataclass(frozen=True)
class _Cut:
    """A pre-filtered input and where its lines were in the input.

    Attributes:
        text: the lines kept.
        starts: the line of ``text`` (0-based, lines split at ``\\n``) where each run of
            consecutive input lines begins.
        origins: the input's line where that run begins.
    """

    text: str
    starts: tuple[int, ...] = (0,)
    origins: tuple[int, ...] = (0,)

    def origin(self, line: int) -> int:
        """The input's line (split at ``\\n``) that ``text``'s line ``line`` is."""
        i = bisect.bisect_right(self.starts, line) - 1
        return line if i < 0 else self.origins[i] + line - self.starts[i]


#: Python's ``\\d`` and ``\\s`` match Unicode digits and blanks; RE2's ASCII only. Widened
#: for RE2 to every non-ASCII character, its answer is then a superset of Python's.
_WIDER = ((r"\d", r"[0-9\x{80}-\x{10FFFF}]"), (r"\s", r"[\t-\r \x{1c}-\x{1f}\x{80}-\x{10FFFF}]"))


def _wider(source: str) -> str:
    """``source`` (a Python pattern) for RE2 over UTF-8 bytes, matching wherever Python's does
    and maybe more: Python's ``\\d`` and ``\\s`` match Unicode digits and blanks, RE2's ASCII
    ones only, so both are widened to every non-ASCII character."""
    for python, wider in _WIDER:
        source = source.replace(python, wider)
    return source


@functools.cache
def _first_searcher(pattern: str) -> tuple[_Searcher, re.Pattern[str]] | None:
    """RE2 for :func:`_wider` ``pattern`` and Python's own; None without google-re2."""
    fast = _compile(_wider(pattern).encode())
    return None if fast is None else (fast, re.compile(pattern))


@functools.cache
def _word_lists() -> tuple[Any, Mapping[tuple[str, ...], int]] | None:
    """The word lists of the rules that read their own lines (``Needs.alone``: their words and
    their ``unless``) as one RE2 set (which of them a line holds, in one match), and each list's
    index in it; None without google-re2 or without such a rule."""
    declared = [n for _rule, needs in _declared() for n in needs or ()]
    lists = sorted(
        {
            words
            for n in (SUMMARY_NEEDS, *declared)
            if n.alone
            for words in (n.words, n.unless)
            if words
        }
    )
    try:
        re2: Any = importlib.import_module("re2")
        options = re2.Options()
    except (ImportError, AttributeError):
        return None
    if not lists:
        return None
    options.max_mem = 64 << 20
    found = re2.Set.SearchSet(options)
    for words in lists:
        found.Add(b"|".join(re.escape(w.lower().encode()) for w in sorted(words)))
    found.Compile()
    return found, {words: i for i, words in enumerate(lists)}


def _filter(text: str) -> _Filter | None:
    """``text`` read for the pre-filter; None when every line is read instead (a text of at
    most :data:`SMALL_TEXT` characters, no rule declared words, google-re2 missing)."""
    matcher = _matcher()
    if matcher is None or len(text) <= SMALL_TEXT:
        return None
    return _Filter(text, matcher[0])


def kept_text(
    text: str,
    *,
    only: Sequence[Needs] | None = None,
    head: int | None = None,
    tail: int | None = None,
    gap: int | None = None,
    small: int | None = None,
) -> str:
    """``text`` with the physical lines that no rule can read dropped (see the module
    docstring): the lines holding a declared word and their context (with ``only``, a
    declared rule's :class:`~console.diagnosis.model.Needs`, the lines of their words alone:
    what that rule reads), the first ``head`` and last ``tail`` lines, and the first ``gap``
    lines of each dropped stretch (by default :data:`HEAD_LINES`, :data:`TAIL_LINES`,
    :data:`GAP_LINES`, :data:`SMALL_TEXT`). ``text`` itself when it is at most ``small``
    characters, when no rule declared anything, or without google-re2. The rules that declared
    nothing still read the whole ``text`` (:func:`diagnose`). Words are matched on the UTF-8
    bytes, ASCII case folded."""
    small = SMALL_TEXT if small is None else small
    matcher = _matcher()
    if matcher is None or len(text) <= small:
        return text
    return (
        _Filter(text, matcher[0])
        .kept(
            matcher[1],
            only,
            HEAD_LINES if head is None else head,
            TAIL_LINES if tail is None else tail,
            GAP_LINES if gap is None else gap,
        )
        .text
    )


def _position(d: Diagnosis, lines: Sequence[Line]) -> int:
    """Index of the first line holding one of ``d``'s evidence lines (len(lines) if none)."""
    wanted = set(d.evidence)
    for ln in lines:
        if ln.raw.strip() in wanted or ln.text.strip() in wanted:
            return ln.index
    for ln in lines:  # evidence built from several lines or reworded: a looser match
        if any(
            e and (e in ln.raw or (ln.text.strip() and ln.text.strip() in e)) for e in d.evidence
        ):
            return ln.index
    return len(lines)


class _Read:
    """A context a rule reads, and where its lines were in the input (to order the findings
    of rules that read different lines of it)."""

    def __init__(self, ctx: Context, cut: _Cut) -> None:
        self.ctx = ctx
        self.cut = cut

    @functools.cached_property
    def _split_line(self) -> list[int]:
        """For each physical line of the context (as :func:`normalize` splits: ``\\r``
        too), its line split at ``\\n`` only."""
        pieces = self.ctx.text.split("\n")
        if pieces and not pieces[-1]:
            pieces.pop()
        out: list[int] = []
        for i, piece in enumerate(pieces):
            out += [i] * (len(_ANSI.sub("", piece).splitlines()) or 1)
        return out

    def where(self, d: Diagnosis) -> tuple[int, int]:
        """Where ``d``'s evidence first appears in the input: its line (split at ``\\n``)
        and the place among the lines normalised out of that one; after every line when the
        evidence is in none."""
        lines = self.ctx.lines
        i = _position(d, lines)
        if i >= len(lines):
            return (sys.maxsize, 0)
        first = i
        while first > 0 and lines[first - 1].source_line == lines[i].source_line:
            first -= 1
        return (self.cut.origin(self._split_line[lines[i].source_line]), i - first)


class _Reading:
    """The contexts of one input the rules read: every rule's lines (the pre-filtered input),
    the lines of a rule's own words (:class:`Needs` with ``alone``; one context for each
    different cut), the whole input."""

    def __init__(self, text: str, filtered: _Filter | None, whole: Context | None = None) -> None:
        self.text = text
        self.filtered = filtered
        self._whole = whole
        self._own: dict[tuple[Needs, ...], _Read | None] = {}
        self._cuts: dict[_Cut, _Read] = {}

    @functools.cached_property
    def union_cut(self) -> _Cut:
        """Every rule's lines (the whole input when there is no pre-filter)."""
        matcher = _matcher()
        if self.filtered is None or matcher is None:
            return _Cut(self.text)
        return self.filtered.kept(matcher[1], None, HEAD_LINES, TAIL_LINES, GAP_LINES)

    @functools.cached_property
    def union(self) -> _Read:
        """The context of every rule's lines."""
        if self.filtered is None:
            return self.whole
        text = self.union_cut.text
        return _Read(Context(text, normalize(text), self.failure), self.union_cut)

    @functools.cached_property
    def whole(self) -> _Read:
        """The context of the whole input."""
        return _Read(self._whole or _context(self.text), _Cut(self.text))

    @functools.cached_property
    def failure(self) -> TorchelasticFailure | None:
        """torchelastic's failure summary, read from the lines of its words
        (:data:`SUMMARY_NEEDS`)."""
        if self.filtered is None:
            return self.whole.ctx.failure
        spans = self.filtered._needs_spans((SUMMARY_NEEDS,))
        if not spans:
            return None
        text = self.filtered.cut(spans, HEAD_LINES, TAIL_LINES, GAP_LINES).text
        return parse_torchelastic_failure(text, normalize(text))

    def own(self, needs: tuple[Needs, ...]) -> _Read | None:
        """The lines of ``needs``' words alone; None when none of the words of those not
        ``also`` is in the input."""
        if self.filtered is None:
            return self.whole
        if needs not in self._own:
            spans = self.filtered._needs_spans([n for n in needs if not n.also])
            if not spans:
                self._own[needs] = None
            else:
                spans += self.filtered._needs_spans([n for n in needs if n.also])
                spans += [
                    span
                    for n in needs
                    for pattern in n.first
                    if (span := self.filtered.first_line(pattern)) is not None
                ]
                cut = self.filtered.cut(spans, HEAD_LINES, TAIL_LINES, GAP_LINES)
                if cut not in self._cuts:
                    ctx = Context(cut.text, normalize(cut.text), self.failure)
                    self._cuts[cut] = _Read(ctx, cut)
                self._own[needs] = self._cuts[cut]
        return self._own[needs]


def findings(ctx: Context) -> list[Diagnosis]:
    """Everything every rule found in ``ctx`` (every line of it), root cause first (see the
    module docstring)."""
    return [d for d, _key in _findings(_Reading(ctx.text, None, ctx))]


def _findings(reading: _Reading) -> list[tuple[Diagnosis, tuple[int, int, int]]]:
    """Every rule's findings, each on the lines it reads (see :class:`_Reading`), root cause
    first, with its order key (precedence, where its evidence is). A rule that raises is
    logged and skipped: one broken rule never hides the others."""
    found: list[tuple[Diagnosis, tuple[int, int, int]]] = []
    for rule, needs in _declared():
        if needs is None:
            on: _Read | None = reading.whole
        elif all(n.alone for n in needs):
            on = reading.own(needs)
        else:
            on = reading.union
        if on is None:
            continue  # none of its words is in the input: it can match no line
        try:
            got = rule(on.ctx)
        except Exception:
            log.exception("diagnosis rule %s failed; skipped", getattr(rule, "__qualname__", rule))
            continue
        if got is None:
            continue
        for d in [got] if isinstance(got, Diagnosis) else got:
            found.append((d, (precedence_of(d), *on.where(d))))
    found.sort(key=lambda f: f[1])
    return _after_network_failure(_after_scheduler_end(found))


#: Ids of a CUDA call's failure, as NCCL reports it too ("NCCL WARN Cuda failure '...'").
_CUDA_FAILURES: frozenset[CauseKind] = frozenset(
    {"cuda_illegal_memory_access", "cuda_error", "nccl_unhandled_cuda"}
)


def _after_network_failure(
    found: list[tuple[Diagnosis, tuple[int, int, int]]],
) -> list[tuple[Diagnosis, tuple[int, int, int]]]:
    """``found`` with a CUDA failure that only NCCL reported, printed after NCCL's network
    transport failed (``nccl_system_error``: an IB work completion with an error, a socket
    closed), moved after that failure. When a proxy's transfers fail, NCCL tears the
    communicator down while its kernels may still run, and the CUDA calls of that teardown
    (``init.cc``: "Cuda failure 'an illegal memory access was encountered'") fail in turn
    (NVIDIA/nccl#629, NVIDIA/nccl-tests#24). A CUDA error of the application itself (PyTorch's
    ``CUDA error: ...``) or one printed first keeps its precedence."""
    net = next((f for f in found if f[0].kind == "nccl_system_error"), None)
    if net is None:
        return found
    later = [
        f
        for f in found
        if f[0].kind in _CUDA_FAILURES
        and f[1][0] < net[1][0]
        and f[1][1:] > net[1][1:]
        and f[0].evidence
        and all(_NCCL_LINE.search(e) for e in f[0].evidence)
    ]
    if not later:
        return found
    rest = [f for f in found if f not in later]
    i = rest.index(net) + 1
    return rest[:i] + later + rest[i:]


#: A line NCCL printed (its debug output: "host:pid:tid [dev] file:line NCCL WARN ..."), or
#: nccl-tests' report of what an NCCL call returned ("Test NCCL failure common.cu:343 ...").
_NCCL_LINE = re.compile(r"\bNCCL (?:WARN|INFO)\b|\bTest NCCL failure\b")


def _after_scheduler_end(
    found: list[tuple[Diagnosis, tuple[int, int, int]]],
) -> list[tuple[Diagnosis, tuple[int, int, int]]]:
    """``found`` with the findings that follow a scheduler's end of the job (see
    :data:`SCHEDULER_ENDS`) moved after it."""
    end = next((f for f in found if f[0].kind in SCHEDULER_ENDS), None)
    if end is None:
        return found
    at, rank = end[1][1:], end[1][0]
    # with a reason (DUE TO TIME LIMIT / PREEMPTION / NODE FAILURE...) the end came from outside
    # the job: a Python exception printed after it is the processes failing on the way out
    from_outside = bool(end[0].facts.get("reason")) or end[0].kind == "slurm_time_limit"
    later = [
        f
        for f in found
        if (f[0].kind in _AFTER_A_STOP or (from_outside and f[0].kind == "exception"))
        and f[1][0] < rank
        and f[1][1:] > at
    ]
    if not later:
        return found
    rest = [f for f in found if f not in later]
    i = rest.index(end) + 1
    return rest[:i] + later + rest[i:]


_INPUTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "torchrun log",
        re.compile(
            r"torch\.distributed|torchrun|ChildFailedError|\[rank\d+\]:|\[default\d+\]:"
            r"|ProcessGroupNCCL|elastic",
            re.I,
        ),
    ),
    ("NCCL debug output", re.compile(r"\bNCCL (?:WARN|INFO|ERROR)\b")),
    ("Python traceback", re.compile(r"^Traceback \(most recent call last\)", re.M)),
    ("kernel log", re.compile(r"NVRM:|\bkernel: |Out of memory: Kill")),
    ("nvidia-smi output", re.compile(r"NVIDIA-SMI|nvidia-smi|No devices were found")),
    ("NVML error", re.compile(r"NVML|pynvml|nvml\.")),
    (
        "docker output",
        re.compile(
            r"Error response from daemon|docker(?:d|\s+(?:run|pull|compose|exec|info))"
            r"|OCI runtime|nvidia-container-cli|Cannot connect to the Docker daemon",
            re.I,
        ),
    ),
    ("Slurm output", re.compile(r"slurmstepd|srun: |SLURM_|sbatch")),
)


@functools.cache
def _inputs_set() -> Any | None:
    """:data:`_INPUTS` as one RE2 set over the UTF-8 bytes, each pattern matching wherever
    Python's does (and maybe more): which of them can match, in one pass (``Match``: their
    indices, None for none). None without google-re2."""
    try:
        re2: Any = importlib.import_module("re2")
        options = re2.Options()
    except (ImportError, AttributeError):
        return None
    found = re2.Set.SearchSet(options)
    for _name, pattern in _INPUTS:
        source = _wider(pattern.pattern)
        flags = ("i" if pattern.flags & re.I else "") + ("m" if pattern.flags & re.M else "")
        found.Add((f"(?{flags})" if flags else "") + source)
    found.Compile()
    return found


def detect_inputs(text: str) -> tuple[str, ...]:
    """What ``text`` looks like (``torchrun log``, ``kernel log``, ``docker output``...), in
    a fixed order; empty when nothing familiar is in it. (RE2 first says which patterns can
    match, in one pass; Python's ``re`` confirms those.)"""
    found = _inputs_set()
    maybe = (
        range(len(_INPUTS))
        if found is None
        else frozenset(found.Match(text.encode("utf-8", "surrogatepass")) or ())
    )
    return tuple(
        name for i, (name, pattern) in enumerate(_INPUTS) if i in maybe and pattern.search(text)
    )


def _restates(d: Diagnosis, root: Diagnosis) -> bool:
    """``d`` only says how the root cause's rank ended. A launcher's report (srun's
    ``task N: Exited``, whose task ids are not ranks under torchrun) is never one."""
    if "launcher" in d.facts:
        return False
    return d.kind in _EXIT_KINDS and bool(d.ranks) and set(d.ranks) <= set(root.ranks)


_NCCL_DEBUG = next(p for name, p in _INPUTS if name == "NCCL debug output")


def _inputs(text: str, kept: str) -> tuple[str, ...]:
    """:func:`detect_inputs` of ``text`` read from ``kept`` (the pre-filtered ``text``), and
    NCCL's debug output from ``text`` itself: its ``NCCL INFO`` chatter holds no rule's word."""
    found = detect_inputs(kept)
    if kept is text or "NCCL debug output" in found:
        return found
    at = text.find("NCCL ")
    if at < 0 or _NCCL_DEBUG.search(text, max(0, at - 1)) is None:
        return found
    # what detect_inputs(kept + "\nNCCL INFO") says: that line matches no other pattern
    names = {*found, "NCCL debug output"}
    return tuple(name for name, _pattern in _INPUTS if name in names)


def _context(text: str) -> Context:
    lines = normalize(text)
    return Context(text, lines, parse_torchelastic_failure(text, lines))


def diagnose(text: str, *, prefilter: bool = True) -> Diagnosis | None:
    """The one root cause of the failure ``text`` shows, or None when it shows none.

    ``text`` is any saved output (a job's log, a console paste with timestamps or Markdown
    quoting, a kernel log, docker's or nvidia-smi's errors), also several concatenated. The
    result names its consequences and what the input was recognised as.

    ``prefilter=False`` runs every rule on every line (the reference the pre-filter is tested
    against; same answer, slower on a big input).
    """
    reading = _Reading(text, _filter(text) if prefilter else None)
    found = [d for d, _key in _findings(reading)]
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
    facts = root.facts
    if root.kind in _DRIVER_KINDS and "driver_version" not in facts:
        if (v := _driver_version(text)) is not None:
            facts = MappingProxyType({**facts, "driver_version": v})
    return replace(
        root,
        facts=facts,
        consequences=root.consequences + tuple(consequences),
        inputs=_inputs(text, reading.union_cut.text),
    )


#: nvidia-smi's header (``Driver Version: 565.57.01``) or ``nvidia-smi -q``'s line
#: (``Driver Version                            : 451.67``): the host's driver.
_DRIVER_VERSION = re.compile(r"Driver Version\s*:\s*(?P<v>\d+\.\d+(?:\.\d+)?)\b")


def _driver_version(text: str) -> str | None:
    """The first :data:`_DRIVER_VERSION` of ``text``, the words found by ``str.find`` (a
    regex scan of a 30 MiB log costs 0.8 s; ``find`` 13 ms)."""
    at = text.find("Driver Version")
    while at >= 0:
        if (m := _DRIVER_VERSION.match(text, at)) is not None:
            return m["v"]
        at = text.find("Driver Version", at + 1)
    return None


#: Cause ids about the host's driver, its GPUs, the container engine and the NVIDIA toolkit:
#: the driver's version, when the text shows it, is one of their facts.
_DRIVER_KINDS: frozenset[str] = frozenset(PRECEDENCE[: PRECEDENCE.index("oom_killed")]) | {
    "cuda_no_device",
    "cuda_invalid_device",
    "cuda_unsupported_arch",
}
