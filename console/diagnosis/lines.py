"""Normalise saved failure text into the lines the processes printed.

Failure text reaches a person through collectors that decorate every line: a log viewer's line
numbers, ISO or syslog timestamps, Kubernetes' CRI log format (``<RFC3339> stderr F ``), Docker
compose (``trainer-1  | ``), ``kubectl logs --prefix`` (``[pod/name/container] ``), Slurm's
``srun --label`` (``3: ``), ``pdsh``/``clush`` (``gpu-node-01: ``), Open MPI's ``--tag-output``
(``[1,3]<stderr>:``) and horovodrun's (``[1]<stderr>:``), a relay's constant word prefix on
most lines (``stderr: ``, ``out: ``, ``worker | ``, ``[worker-0] ``), gpuconsole's own ``logs``
tags (``[n0 r1] ``, ``[n1] ``), Markdown quoting in an issue (``> ``) and emphasis around a
whole line (``**...**``, ``*...*``, ``__...__``, backticks), Ray's worker prefix (``(pid=N) ``,
``(RayWorker pid=N, ip=...) ``), ANSI colours, JSON records (Docker's json-file ``{"log":
"...\\n"}``, torchelastic's error file ``{"message": {"message": ..., "extraInfo":
{"py_callstack": ...}}}``), and, when several ranks write to one stream, ranks' output glued
mid-line (``...step 3[rank1]: Traceback``).

:func:`normalize` removes all of that and returns one :class:`Line` per line the process
printed, with the rank it came from when a prefix said so (``[rankN]:`` is PyTorch's
``--local-ranks-filter`` / ``TORCH_..._LOG_PREFIX`` global rank, ``[<role>N]:`` is torchrun
``--tee``'s role and local rank, ``[J,N]<stream>:`` Open MPI's job and rank).

Pure functions over text, stdlib only.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass

__all__ = ["Line", "normalize"]


@dataclass(frozen=True)
class Line:
    """One line as the process printed it.

    Attributes:
        index: position in the normalised list (0-based; evidence order).
        source_line: the 0-based physical line of the input it came from (several lines can
            come from one physical line: a JSON record, ranks glued mid-line).
        raw: the line with the collectors' decoration removed but the process's own rank
            prefix kept (``[rank3]: RuntimeError: ...``): what evidence shows.
        text: ``raw`` without the rank prefix: what rules match.
        rank: global rank from ``[rankN]:`` or Open MPI's ``[J,N]``; None when not said.
        local_rank: local rank from torchrun ``--tee``'s ``[<role>N]:``; None when not said.
        task: Slurm ``srun --label`` task id, or a pdsh/compose/kubectl source name; None.
    """

    index: int
    source_line: int
    raw: str
    text: str
    rank: int | None = None
    local_rank: int | None = None
    task: str | None = None


_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")

# Decorations at the start of a line, tried repeatedly (a CRI line inside a quoted issue...).
_ISO_TS = r"\[?\d{4}-\d\d-\d\d[T _]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d| ?UTC)?\]?"
_PREFIXES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("quote", re.compile(r"^\s{0,3}>(?:\s?>)*\s?(?!>)")),
    # Kubernetes CRI: "2024-01-02T03:04:05.123456789Z stderr F "
    ("cri", re.compile(r"^" + _ISO_TS + r" (?:stdout|stderr) [FP] ")),
    # one separator only: the indentation after it belongs to the process's line
    ("iso", re.compile(r"^" + _ISO_TS + r"(?: [|-] | ?[|,:] ?| |$)")),
    # syslog / journalctl: "Mar 21 02:07:08 gpu-node-01 kernel: " (the host and tag dropped)
    (
        "syslog",
        re.compile(
            r"^[A-Z][a-z]{2} [ \d]?\d \d\d:\d\d:\d\d(?:\.\d+)? (?P<src>[\w.-]+) "
            r"[\w./@-]+(?:\[\d+\])?: "
        ),
    ),
    # dmesg: "[ 1843.308145] " and "dmesg -T": "[Mon Jan 27 23:04:35 2021] "
    ("dmesg", re.compile(r"^\[\s*\d+\.\d+\] ")),
    ("dmesg_t", re.compile(r"^\[[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]?\d \d\d:\d\d:\d\d \d{4}\] ")),
    # a log viewer's line number: "[12345] " (Loki/Grafana, the handed trun-06) or "123 | "
    ("lineno", re.compile(r"^\[\d+\] |^\s*\d+\s+\|\s")),
    # docker compose: "trainer-1  | ", "svc_1 | "
    ("compose", re.compile(r"^(?P<src>[A-Za-z0-9][\w.-]*?(?:[-_]\d+)?)\s+\| ")),
    # kubectl logs --prefix: "[pod/trainer-0/pytorch] "
    ("kubectl", re.compile(r"^\[(?P<src>pod/[^\]\s]+)\] ")),
    # Ray's worker log relay (python/ray/_private/log_monitor.py / worker.py print_logs):
    # "(pid=909608) ", "(RayWorker pid=123) ", "(RayTrainWorker pid=123, ip=10.0.0.1) ",
    # "(raylet) ", "(raylet, ip=10.0.0.1) "; what follows keeps its own indent (a traceback's
    # "(Actor pid=1)   File ...")
    (
        "ray",
        re.compile(
            r"^\((?P<src>(?:[A-Za-z_][\w.:-]* )?pid=\d+(?:, ip=[\w.:-]+)?"
            r"|raylet(?:, ip=[\w.:-]+)?)\) ?"
        ),
    ),
    # gpuconsole's own `logs`: "[n0 r1] " (node 0, global rank 1) or "[n1] " (node 1's
    # torchrun agent or gang watcher; console/jobs/logs.py JobLogLine.tag)
    ("gpuconsole", re.compile(r"^\[n(?P<src>\d+)(?: r(?P<rank>\d+))?\] ")),
    # srun --label: "3: " (task id)
    ("srun", re.compile(r"^(?P<src>\d{1,5}): ")),
    # Open MPI --tag-output: "[1,3]<stderr>:"; horovodrun's own (gloo) launcher:
    # "[1]<stderr>:" (horovod/runner/common/util/safe_shell_exec.py, the rank's index)
    ("mpi", re.compile(r"^\[(?:\d+,)?(?P<rank>\d+)\]<(?:stdout|stderr|stddiag)>:\s?")),
)

# torchrun/PyTorch's own rank prefixes: "[rank3]:", "[default0]:" (role + local rank)
_RANK_PREFIX = re.compile(r"^\[(?P<role>[A-Za-z_][A-Za-z_-]*?)(?P<num>\d+)\]: ?")
# the same glued mid-line: "...done[rank1]: Traceback"
_GLUED_RANK = re.compile(r"(?<=.)(?=\[(?:rank\d+|default\d+)\]:)")
# "gpu-node-01: " from pdsh / clush / `parallel --tag`: only stripped when it repeats
_HOST_TAG = re.compile(r"^(?P<src>[A-Za-z0-9][\w.@-]*[\d.-][\w.@-]*): ")
_PY_NAME = re.compile(r"^[A-Z]\w*(?:Error|Exception|Warning|Interrupt|Exit)$")
# A relay's constant prefix on the lines it passes on (a CI step, ``accelerate test``'s
# ``stderr: ``, a supervisor's ``out: ``, ``worker | ``, ``[worker-0] ``): a word and ``: `` or
# `` | ``, or a bracketed tag and a space. Only stripped when it starts most lines
# (:func:`_repeated_word_tags`) and is not a word that begins a process's own message.
_WORD_TAG = re.compile(r"^(?:\[(?P<btag>[\w.@:/-]+)\] |(?P<wtag>[A-Za-z][\w.@-]*)(?:: | \| |:$))")
# Words that begin the message itself, not a relay's tag: log levels, the kernel's and the
# tools' own prefixes (``NVRM: Xid``, ``srun: error:``, ``nvidia-container-cli: ...``), notes.
_OWN_WORDS = frozenset(
    w.lower()
    for w in (
        "INFO",
        "WARNING",
        "WARN",
        "ERROR",
        "DEBUG",
        "CRITICAL",
        "FATAL",
        "NOTICE",
        "TRACE",
        "E",
        "W",
        "I",
        "F",
        "Note",
        "Hint",
        "Error",
        "Warning",
        "Caused",
        "Reason",
        "Message",
        "Details",
        "NVRM",
        "kernel",
        "srun",
        "slurmstepd",
        "sbatch",
        "salloc",
        "scontrol",
        "nvidia-smi",
        "nvidia-container-cli",
        "nvidia-container-toolkit",
        "docker",
        "dockerd",
        "containerd",
        "kubelet",
        "torchrun",
        "python",
        "python3",
        "pip",
        "NCCL",
        "panic",
        "Traceback",
        "File",
    )
)

_JSON_TEXT_KEYS = ("log", "message", "msg", "MESSAGE", "py_callstack", "error", "stack")
_ESCAPED_NL = re.compile(r"\\n")


def _json_texts(value: object) -> list[str]:
    """Text fields of a JSON record, depth first (``message.extraInfo.py_callstack`` too)."""
    out: list[str] = []
    if isinstance(value, dict):
        for key in _JSON_TEXT_KEYS:
            inner = value.get(key)
            if isinstance(inner, str):
                out.append(inner)
            elif isinstance(inner, dict):
                out.extend(_json_texts(inner))
        extra = value.get("extraInfo")
        if isinstance(extra, dict) and "py_callstack" not in value:
            out.extend(_json_texts(extra))
    return out


# bash's ``set -x`` trace of an assignment (PS4 "+ ", one "+" per level of nesting): the
# value is often a command's captured output, e.g. "+ VERSION='No devices were found'"
_XTRACE_SET = re.compile(
    r"^\s*\++ (?:(?:export|local|readonly|declare(?: -\w+)?) )?[A-Za-z_]\w*="
    r"(?:'(?P<quoted>.*?)'?|(?P<bare>\S+))\s*$"
)


def _untrace(line: str) -> str:
    """The value of a shell trace's assignment (:data:`_XTRACE_SET`) out of its quotes; any
    other line as it is."""
    if (m := _XTRACE_SET.match(line)) is not None:
        value = m["bare"] if m["quoted"] is None else m["quoted"].replace("'\\''", "'")
        if value:
            return value
    return line


def _expand(line: str) -> list[str]:
    """One physical line as the lines it stands for: JSON records and escaped newlines opened."""
    body = line.strip()
    if body.startswith("{") and body.endswith("}"):
        try:
            record = json.loads(body)
        except ValueError:
            record = None
        texts = _json_texts(record)
        if texts:
            return [part for t in texts for part in t.splitlines()]
    # A JSON string pasted without its record ("...Traceback (most recent call last):\n  File")
    if line.count("\\n") >= 2 and ("Traceback" in line or "Error" in line):
        return [part.replace('\\"', '"') for part in _ESCAPED_NL.split(line)]
    return [line]


def _strip_decorations(line: str) -> tuple[str, str | None, int | None]:
    """The line without collector prefixes; the source tag (srun task, compose service...) and
    an Open MPI rank, when a prefix named them."""
    src: str | None = None
    rank: int | None = None
    for _ in range(8):
        for name, pattern in _PREFIXES:
            m = pattern.match(line)
            if m is None or m.end() == 0:
                continue
            groups = m.groupdict()
            if groups.get("src") and name != "syslog":
                src = groups["src"]
            if groups.get("rank"):
                rank = int(groups["rank"])
            line = line[m.end() :]
            break
        else:
            break
    return line, src, rank


#: A Python exception named with its module (``torch.distributed.DistNetworkError:``): after a
#: ``host: `` tag it shows the tag is a source's, also on a line of its own.
_DOTTED_EXCEPTION = re.compile(r"(?:[A-Za-z_]\w*\.)+[A-Za-z_]\w*(?:Error|Exception)\b:")


def _repeated_host_tags(lines: list[str]) -> set[str]:
    """pdsh-style ``host: `` tags that start at least 3 lines and a third of non-empty lines,
    or a line whose rest is a module-qualified Python exception (:data:`_DOTTED_EXCEPTION`)."""
    tags: Counter[str] = Counter()
    named: set[str] = set()
    for ln in lines:
        if (m := _HOST_TAG.match(ln)) is not None:
            tags[m["src"]] += 1
            if _DOTTED_EXCEPTION.match(ln, m.end()):
                named.add(m["src"])
    filled = sum(1 for ln in lines if ln.strip())
    return {
        t
        for t, n in tags.items()
        if (t in named or (n >= 3 and n * 3 >= filled)) and not _PY_NAME.match(t)
    }


def _repeated_word_tags(lines: list[str]) -> set[str]:
    """A relay's tags (:data:`_WORD_TAG`) that start at least 3 lines and more than half of the
    non-empty lines: the same word every time, never an exception name (``RuntimeError: ``
    repeated by a crash loop is content) nor one of :data:`_OWN_WORDS`."""
    tags = Counter(m.group(0).rstrip() for ln in lines if (m := _WORD_TAG.match(ln)))
    filled = sum(1 for ln in lines if ln.strip())
    out: set[str] = set()
    for tag, n in tags.items():
        word = tag.strip("[]").rstrip(":|").strip()
        if (
            n >= 3
            and n * 2 > filled
            and not _PY_NAME.match(word)
            and word.lower() not in _OWN_WORDS
        ):
            out.add(tag)
    return out


# Markdown emphasis or code around a whole pasted line: "**pynvml.NVMLError_...: Driver Not
# Loaded**", "*...*", "__...__", "_..._", "`...`" (CommonMark's emphasis and code spans). Only
# a pair that wraps the line (after any indentation), and only text with a blank or a colon
# inside, so a lone identifier ("__main__") or a bullet ("* item") stays as it is.
_EMPHASIS = re.compile(
    r"^(?P<ind>\s*)(?P<mark>\*\*\*|\*\*|\*|___|__|_|```|`)(?P<body>[^\s*_`].*?[^\s*_`]|[^\s*_`])"
    r"(?P=mark)$"
)


def _unemphasize(line: str) -> str:
    """``line`` without Markdown emphasis / code markers wrapping all of it (:data:`_EMPHASIS`)."""
    m = _EMPHASIS.match(line)
    if m is None or not (" " in m["body"] or ":" in m["body"]):
        return line
    return m["ind"] + m["body"]


_Staged = tuple[int, str, "str | None", "int | None"]


def _untag(entry: _Staged, pattern: re.Pattern[str], tags: set[str], group: str) -> _Staged:
    """``entry`` without its repeated tag (a pdsh host, a relay's word; see
    :func:`_repeated_host_tags` / :func:`_repeated_word_tags`), and the decorations under it."""
    number, body, _src, mpi_rank = entry
    m = pattern.match(body)
    if m is None:
        return entry
    tag = m[group] if group else m.group(0).rstrip()
    if tag not in tags:
        return entry
    name = m[group] if group else (m["btag"] or m["wtag"])
    body, more_src, more_rank = _strip_decorations(body[m.end() :])
    return (number, body, more_src or name, mpi_rank if more_rank is None else more_rank)


def strip_escapes(text: str) -> str:
    """``text`` without ANSI escape sequences (colours, cursor moves)."""
    return _ANSI.sub("", text)


def normalize(text: str) -> list[Line]:
    """The lines of ``text`` as the processes printed them (see the module docstring).

    ``\\r`` counts as a line break (progress bars), ANSI escapes are removed, trailing blanks
    trimmed. Never raises.
    """
    physical = strip_escapes(text).splitlines()
    staged: list[tuple[int, str, str | None, int | None]] = []
    for number, original in enumerate(physical):
        for part in _expand(original):
            body, src, mpi_rank = _strip_decorations(part)
            staged.append((number, body, src, mpi_rank))
    hosts = _repeated_host_tags([s[1] for s in staged])
    if hosts:
        staged = [_untag(entry, _HOST_TAG, hosts, "src") for entry in staged]
    words = _repeated_word_tags([s[1] for s in staged])
    if words:
        staged = [_untag(entry, _WORD_TAG, words, "") for entry in staged]
    out: list[Line] = []
    pieces = [
        (number, piece, src, mpi_rank)
        for number, body, src, mpi_rank in staged
        for piece in _GLUED_RANK.split(_untrace(body))
    ]
    for number, body, src, mpi_rank in pieces:
        raw = _unemphasize(body.rstrip())
        rest, rank, local_rank = raw, mpi_rank, None
        while (m := _RANK_PREFIX.match(rest)) is not None:
            if m["role"] == "rank":
                rank = int(m["num"])
            else:
                local_rank = int(m["num"])
            rest = rest[m.end() :]
        out.append(Line(len(out), number, raw, rest, rank, local_rank, src))
    return out
