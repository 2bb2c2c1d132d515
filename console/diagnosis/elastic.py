"""torchelastic's failure summary (``ChildFailedError``), parsed.

When a worker of ``torchrun`` fails, torchelastic's ``ChildFailedError`` prints a block with
``<script> FAILED``, ``Failures:``, ``Root Cause (first observed failure):`` and one ``[N]:``
entry per failed process (source: ``torch/distributed/elastic/multiprocessing/errors/
__init__.py``, ``ChildFailedError.format_msg``). Pure functions over text, stdlib only.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Sequence
from dataclasses import dataclass

from console.diagnosis.lines import Line, normalize

__all__ = [
    "ProcessFailure",
    "TorchelasticFailure",
    "parse_torchelastic_failure",
    "parse_torchelastic_failures",
    "signal_name",
]


def signal_name(exitcode: int | None) -> str | None:
    """Name of the signal behind a negative exit code (``-9`` → ``"SIGKILL"``).

    torchelastic reports a worker killed by signal N with exit code ``-N`` (Python's
    ``subprocess`` convention). Returns None for None, a non-negative code or an unknown number.
    """
    if exitcode is None or exitcode >= 0:
        return None
    try:
        return signal.Signals(-exitcode).name
    except ValueError:
        return None


# --------------------------------------------------------------------------------------------
# torchelastic failure summary.


@dataclass(frozen=True)
class ProcessFailure:
    """One ``[N]:`` entry of torchelastic's failure summary (one failed worker process).

    ``time`` is printed by the agent as ``YYYY-MM-DD_HH:MM:SS`` in its host's local time and
    kept as printed. ``exitcode`` is the worker's exit status; negative means it was killed by
    signal ``-exitcode`` (named in ``signal``). ``error_file`` is the JSON error file that
    ``@record`` wrote (None when ``<N/A>``). ``traceback`` is the entry's traceback text with
    the summary's indentation removed: the Python traceback from the error file, or a line
    such as ``Signal 9 (SIGKILL) received by PID 14750``. ``exception`` is the final exception
    line of a Python traceback (``RuntimeError: ...``), when the traceback has one.
    ``lines`` are the entry's lines as printed (stripped).
    """

    index: int
    time: str | None
    host: str | None
    rank: int | None
    local_rank: int | None
    exitcode: int | None
    pid: int | None
    signal: str | None
    error_file: str | None
    traceback: str | None
    exception: str | None
    lines: tuple[str, ...]


@dataclass(frozen=True)
class TorchelasticFailure:
    """A parsed torchelastic ``ChildFailedError`` summary.

    ``script`` is the title's ``<script> FAILED`` entrypoint; ``root_cause`` the entry under
    "Root Cause (first observed failure)" (None if the text was cut before it); ``others`` the
    entries under "Failures:" (empty for ``<NO_OTHER_FAILURES>``).
    """

    script: str | None
    root_cause: ProcessFailure | None
    others: tuple[ProcessFailure, ...]


_BORDER = re.compile(r"^\s*(?:={8,}|-{8,}|\*{8,})\s*$")
_TITLE = re.compile(r"^\s*(?P<script>\S.*?) FAILED\s*$")
_ROOT_HEADER = re.compile(r"^\s*Root Cause\b.*:\s*$")
_OTHERS_HEADER = re.compile(r"^\s*(?:Other )?Failures:\s*$")
_ENTRY = re.compile(r"^\s*\[(?P<idx>\d+)\]:\s*$")
_FIELD = re.compile(
    r"^\s{0,4}(?P<key>time|host|rank|exitcode|error_file|traceback|msg)\s*:\s?(?P<value>.*)$"
)
_RANK_VALUE = re.compile(r"(?P<rank>-?\d+)(?:\s*\(local_rank:\s*(?P<local>-?\d+)\))?")
_EXIT_VALUE = re.compile(r"(?P<code>-?\d+)(?:\s*\(pid:\s*(?P<pid>\d+)\))?")
_NOT_AVAILABLE = {"", "<N/A>", "N/A", "<NONE>"}


def _value(raw: str | None) -> str | None:
    if raw is None:
        return None
    value = raw.strip()
    return None if value in _NOT_AVAILABLE else value


#: The last line of a Python traceback: "module.Type: message" (or a bare "Type").
# The type is a dotted name, C++'s ``c10::Error`` too; a lone colon ends it (``Exception: ``
# with an empty message is type ``Exception``).
EXCEPTION_LINE = re.compile(r"^(?P<type>[A-Za-z_](?:[\w.]|::)*)(?::\s*(?P<msg>.*))?$")


def _exception_line(traceback: str) -> str | None:
    """The final exception line (``Type: message``) of a Python traceback, or None.

    That is the first unindented line after the last ``File "..."`` frame; None when the
    traceback has no frame or was cut before its exception line.
    """
    lines = traceback.splitlines()
    frames = [i for i, line in enumerate(lines) if line.lstrip().startswith('File "')]
    if not frames:
        return None
    for line in lines[frames[-1] + 1 :]:
        if line and not line[0].isspace():
            return line.strip() if EXCEPTION_LINE.match(line) else None
    return None


def _build_entry(index: int, fields: dict[str, list[str]], lines: list[str]) -> ProcessFailure:
    def first(key: str) -> str | None:
        return _value(fields[key][0]) if key in fields else None

    rank = local_rank = exitcode = pid = None
    if (raw_rank := first("rank")) and (m := _RANK_VALUE.match(raw_rank)):
        rank = int(m["rank"])
        local_rank = int(m["local"]) if m["local"] is not None else None
    if (raw_exit := first("exitcode")) and (m := _EXIT_VALUE.match(raw_exit)):
        exitcode = int(m["code"])
        pid = int(m["pid"]) if m["pid"] is not None else None
    tb_lines = fields.get("traceback") or fields.get("msg") or []
    if tb_lines:
        # Continuation lines carry the summary's two-space indent: remove it.
        body = [tb_lines[0].strip()] + [
            ln[2:] if ln.startswith("  ") else ln for ln in tb_lines[1:]
        ]
        traceback: str | None = _value("\n".join(body).rstrip().strip('"'))
    else:
        traceback = None
    return ProcessFailure(
        index=index,
        time=first("time"),
        host=first("host"),
        rank=rank,
        local_rank=local_rank,
        exitcode=exitcode,
        pid=pid,
        signal=signal_name(exitcode),
        error_file=first("error_file"),
        traceback=traceback,
        exception=_exception_line(traceback) if traceback else None,
        lines=tuple(ln.strip() for ln in lines if ln.strip()),
    )


def _parse_summary(lines: Sequence[str], start: int) -> tuple[TorchelasticFailure, int]:
    """Parse one summary whose title line is ``lines[start]``; return it and the next index."""
    title = _TITLE.match(lines[start])
    script = title["script"] if title else None
    root: ProcessFailure | None = None
    others: list[ProcessFailure] = []
    section = "others"
    entry_idx: int | None = None
    fields: dict[str, list[str]] = {}
    entry_lines: list[str] = []
    key: str | None = None

    def close() -> None:
        nonlocal root, entry_idx, fields, entry_lines, key
        if entry_idx is not None:
            entry = _build_entry(entry_idx, fields, entry_lines)
            if section == "root" and root is None:
                root = entry
            else:
                others.append(entry)
        entry_idx, fields, entry_lines, key = None, {}, [], None

    i = start + 1
    while i < len(lines):
        line = lines[i]
        if _BORDER.match(line):
            close()
            following = lines[i + 1] if i + 1 < len(lines) else ""
            heads_section = _ROOT_HEADER.match(following) or _OTHERS_HEADER.match(following)
            # "----" separates sections; a "====" (or old-style "****") not followed by a
            # section header closes the summary (the one after the title opens a section).
            if line.strip()[0] in "=*" and not heads_section and i > start + 1:
                i += 1
                break
        elif _ROOT_HEADER.match(line):
            close()
            section = "root"
        elif _OTHERS_HEADER.match(line):
            close()
            section = "others"
        elif m := _ENTRY.match(line):
            close()
            entry_idx = int(m["idx"])
            entry_lines = [line]
        elif entry_idx is not None and key in ("traceback", "msg"):
            # The traceback is an entry's last field: everything up to the next border,
            # header or entry belongs to it.
            fields[key].append(line)
            entry_lines.append(line)
        elif entry_idx is not None and (m := _FIELD.match(line)):
            key = m["key"]
            fields.setdefault(key, []).append(m["value"])
            entry_lines.append(line)
        i += 1
    close()
    return TorchelasticFailure(script, root, tuple(others)), i


def parse_torchelastic_failures(
    text: str,
    normalized: Sequence[Line] | None = None,
) -> tuple[TorchelasticFailure, ...]:
    """Every torchelastic failure summary in ``text``, in order (one per agent / node); a
    summary cut above its root cause's header (no title) gives that root cause alone.

    See :func:`parse_torchelastic_failure`; a multi-node log holds one summary per node.
    ``normalized`` is ``normalize(text)`` when the caller has it already.
    """
    lines = [ln.text for ln in (normalize(text) if normalized is None else normalized)]
    found: list[TorchelasticFailure] = []
    i = 0
    while i < len(lines):
        near_border = any(_BORDER.match(lines[j]) for j in range(max(0, i - 2), i))
        if _TITLE.match(lines[i]) and near_border:
            summary, i = _parse_summary(lines, i)
            if summary.root_cause is not None or summary.others:
                found.append(summary)
            continue
        i += 1
    if not found:
        # a summary cut at the top (no "<script> FAILED" title, the paste starting inside its
        # "Failures:" list) still holds its root cause: from its own header on
        for i, line in enumerate(lines):
            if _ROOT_HEADER.match(line) and i > 0 and _BORDER.match(lines[i - 1]):
                summary, _ = _parse_summary(["", *lines[i:]], 0)
                if summary.root_cause is not None:
                    found.append(summary)
                break
    return tuple(found)


def parse_torchelastic_failure(
    text: str,
    normalized: Sequence[Line] | None = None,
) -> TorchelasticFailure | None:
    """Parse torchelastic's ``ChildFailedError`` failure summary out of ``text``.

    The root cause is the entry under "Root Cause (first observed failure)" (not the first
    entry printed). A summary cut short (a missing last line or block) still parses: fields
    that were not printed are None. With several summaries (one per node of a multi-node
    job) the one whose root cause happened first is returned (in the same second, one whose
    exception is not a peer's death). None when there is no summary. ``normalized`` is
    ``normalize(text)`` when the caller has it already.
    """
    summaries = parse_torchelastic_failures(text, normalized)
    if not summaries:
        return None
    from console.diagnosis.common import WRAPS  # common imports this module

    def when(s: TorchelasticFailure) -> tuple[str, bool]:
        # the agent prints the time to the second: at a tie, a root cause that only reports
        # a peer's death (gloo's "Connection closed by peer", NCCL's abort) is not first
        root = s.root_cause
        wraps = bool(root and root.exception and WRAPS.search(root.exception))
        return (root.time if root else None) or "~", wraps

    return min(summaries, key=when)


# --------------------------------------------------------------------------------------------
# Diagnosis.
