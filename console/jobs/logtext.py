"""Raw log line -> what a terminal would show: carriage returns, escapes, progress bars.

A container's log line (one ``\\n``-terminated record from Docker) may hold many terminal
redraws: tqdm writes ``\\r<bar>`` for every update and ``\\n`` only when the bar closes, so one
"line" can be thousands of overlaid bars. It may also carry ANSI escapes (SGR colours from
rich/loguru/transformers, erase-line ``ESC[K``, OSC titles), tabs, fixed-width padding, U+FFFD
from invalid UTF-8, and be megabytes long. :func:`shape` turns it into the display lines a
terminal would have left on screen; :func:`progress_key` / :func:`supersedes` let a view
collapse successive updates of one bar printed on separate lines.

Pure functions, no I/O. Escape syntax follows ECMA-48 (CSI ``ESC [ P* I* F``, OSC/DCS/APC/PM/SOS
strings ended by ST ``ESC \\`` or BEL, two-byte ``ESC F`` sequences); the bar grammar follows
tqdm's ``format_meter``: ``{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt}
[{elapsed}<{remaining}, {rate_fmt}{postfix}]`` and, with an unknown total,
``{desc}: {n_fmt}{unit} [{elapsed}, {rate_fmt}{postfix}]``.
"""

from __future__ import annotations

import re

MAX_LINE_CHARS = 10_000
"""A display line longer than this (in visible characters) is cut, with `` …[+N chars]``."""

TAB_WIDTH = 8

# -- escape and control sequences (ECMA-48) ---------------------------------------------------

# CSI: ESC [ parameter bytes 0x30-0x3F, intermediate bytes 0x20-0x2F, final byte 0x40-0x7E.
_CSI = r"\x1b\[[0-?]*[ -/]*[@-~]"
# Control strings (OSC ESC ], DCS ESC P, SOS ESC X, PM ESC ^, APC ESC _), ended by ST or BEL;
# an unterminated one swallows the rest of the line, as a terminal would.
_STRING = r"\x1b[\]PX^_][^\x07\x1b]*(?:\x07|\x1b\\|$)"
# Other escapes: ESC, intermediates 0x20-0x2F, final 0x30-0x7E; or a lone ESC.
_ESC_OTHER = r"\x1b[ -/]*[0-~]?"
_SGR_RE = re.compile(r"\x1b\[[0-9;:]*m")
_ANY_ESC_RE = re.compile(f"{_CSI}|{_STRING}|{_ESC_OTHER}")
# Everything that is not plain printable text: escapes, C0 controls (tab, CR, BS, BEL, ...),
# DEL and C1 controls.
_SPECIAL_RE = re.compile(f"{_CSI}|{_STRING}|{_ESC_OTHER}|[\x00-\x1f\x7f-\x9f]")
_CSI_PARTS_RE = re.compile(r"\x1b\[([0-?]*)[ -/]*([@-~])")
# Anything that moves the cursor left or erases what is written (CR, BS, CSI D/G/`, erase
# to the start or the whole line); erase-to-end (CSI K, CSI 0K) of a forward-only writer
# erases nothing, so it is not a hint.
_OVERLAY_HINT_RE = re.compile(r"[\r\x08]|\x1b\[[0-?]*[ -/]*[DG`]|\x1b\[[12]K")

# -- progress bars (tqdm's format_meter) ------------------------------------------------------

_NUM = r"\d+(?:\.\d+)?[kMGTPEZY]?"
_TIME = r"\d+:\d{2}(?::\d{2})?"
_BRACKET = rf"\[{_TIME}(?:<(?:{_TIME}|\?))?(?:,[^\]\[]*)?\]"
# Known total with a percentage: "42%|###   | 42/100 [00:01<00:02, 3.1it/s]" (the bar itself
# may be empty when the terminal is narrow; the bracket may be missing in custom formats).
_PCT_FORM = rf"(?P<pct>\d{{1,3}})%\|[^|]*\|\s*(?P<n1>{_NUM})/(?P<t1>{_NUM})(?:\s*{_BRACKET})?"
# Known total without the bar: "42/100 [00:01<00:02, 3.1it/s]", or with tqdm's ncols=0
# form "42% 42/100 [...]".
_FRAC_FORM = (
    rf"(?:\d{{1,3}}%\s+)?(?P<n2>{_NUM})/(?P<t2>{_NUM})"
    rf"\s*\[{_TIME}(?:<(?:{_TIME}|\?))?,[^\]\[]*/[^\]\[]*\]"
)
# Unknown total: "42it [00:01, 3.1it/s]", "12.3MB [00:01, 10.2MB/s]".
_OPEN_FORM = rf"(?P<n3>{_NUM})[A-Za-z]*\s*\[{_TIME},[^\]\[]*/[^\]\[]*\]"
_BAR_RE = re.compile(f"{_PCT_FORM}|{_FRAC_FORM}|{_OPEN_FORM}")
# What every bar form but the percentage one holds ("[" and an elapsed time), and every
# bar's end: a cheap test that spares the bar patterns on ordinary lines, which start with
# a "[rank0]:" or "[default0]:" prefix under torchrun.
_TIME_BRACKET_RE = re.compile(r"\[\d+:\d{2}")
# The end of a bar: its closing "[elapsed<remaining, rate]" bracket.
_BAR_END_RE = re.compile(rf"(?:{_NUM}(?:/{_NUM})?[A-Za-z]*\s*){_BRACKET}")

ERROR_RE: re.Pattern[str] = re.compile(
    r"Traceback \(most recent call last\)"
    r"|\b[A-Za-z_.]*(?:Error|Exception)\b(?::|$|\s*\()"
    r"|\b(?:ERROR|FATAL|CRITICAL)\b"
    r"|(?i:^\s*error\b|\bCUDA error\b|\bNCCL WARN\b|\bout of memory\b)"
    r"|\bKilled\b|\bSegmentation fault\b|\bcore dumped\b|\bBus error\b"
    r"|\bexit ?code\b|\bexitcode\b|\bexit status [1-9]"
    r"|\bSIG(?:KILL|ABRT|SEGV|BUS|TERM)\b"
)
"""Error-like lines (for ``e``/``E`` navigation): Python tracebacks and ``XxxError:`` lines,
``ERROR``/``FATAL``/``CRITICAL`` log levels, CUDA errors, NCCL warnings, out of memory, killed
processes, segfaults, non-zero exit codes, fatal signals."""


def strip_ansi(text: str) -> str:
    """``text`` with every escape sequence removed (SGR and any other; ECMA-48 syntax)."""
    if "\x1b" not in text:
        return text
    return _ANY_ESC_RE.sub("", text)


#: Every line :data:`ERROR_RE` can match contains one of these (lower-cased): a cheap test
#: that spares the regex on ordinary lines (most of a training log).
_ERROR_WORDS = (
    "error",
    "exception",
    "traceback",
    "fatal",
    "critical",
    "nccl warn",
    "out of memory",
    "killed",
    "segmentation",
    "core dumped",
    "exit",
    "sig",
)


def is_error_like(plain: str) -> bool:
    """Whether a plain (escape-free) display line looks like an error (:data:`ERROR_RE`)."""
    low = plain.lower()
    if not any(w in low for w in _ERROR_WORDS):
        return False
    return ERROR_RE.search(plain) is not None


def progress_key(plain: str) -> tuple[str, bool] | None:
    """Recognise a progress-bar line.

    Args:
        plain: one display line without escapes.

    Returns:
        ``(description, finished)`` when ``plain`` holds a tqdm-style bar (``DESC: 42%|##  |
        42/100 [00:01<00:02, 3.1it/s]`` and variants: no description, no percentage, ``s/it``,
        an unknown total ``42it [00:01, 3.1it/s]``, text left over after it); the description
        is the text before the bar without its trailing ``:`` and spaces; ``finished`` is
        ``n == total`` or 100%. ``None`` for any other line.
    """
    if "%|" not in plain and _TIME_BRACKET_RE.search(plain) is None:
        return None
    m = _BAR_RE.search(plain)
    if m is None:
        return None
    desc = plain[: m.start()].rstrip().removesuffix(":").strip()
    if m.group("pct") is not None:
        finished = m.group("pct") == "100" or m.group("n1") == m.group("t1")
    elif m.group("n2") is not None:
        finished = _num(m.group("n2")) >= _num(m.group("t2"))
    else:
        finished = False
    return desc, finished


def _num(s: str) -> float:
    mult = {"k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18, "Z": 1e21, "Y": 1e24}
    if s and s[-1] in mult:
        return float(s[:-1]) * mult[s[-1]]
    return float(s)


def supersedes(prev_plain: str, new_plain: str) -> bool:
    """Whether ``new_plain`` redraws ``prev_plain`` in place.

    True when ``prev_plain`` is an unfinished progress bar and ``new_plain`` is a progress bar
    with the same description: a terminal would have redrawn it, so the view replaces it.
    Also when ``prev_plain`` is empty and ``new_plain`` a bar: torchrun's ``--tee`` turns the
    ``\r`` that starts a tqdm bar into a line break, leaving an empty line before it.
    """
    if not prev_plain.strip():
        return progress_key(new_plain) is not None
    prev = progress_key(prev_plain)
    if prev is None or prev[1]:
        return False
    new = progress_key(new_plain)
    return new is not None and new[0] == prev[0]


def shape(text: str) -> list[str]:
    """Turn one raw log line into the display lines a terminal would show.

    - ``\\r``: each carriage-return segment overwrites the line from column 0 (a shorter one
      only its own columns); backspace, cursor left/right/column (CSI D, C, G) and erase in
      line (CSI K) act as on a terminal. When such an overlay happened the result is computed
      on plain text, except that the SGR colours of the last segment are kept when that
      segment alone is what remains visible.
    - progress bars glued together (a tqdm bar's closing ``[..<..]`` directly followed by
      more text, as read from a file whose ``\\r`` were lost): a following bar of the same
      description overwrites the previous one; other following text starts a new line.
    - SGR sequences (``ESC[...m``) are kept; every other escape or control character is
      removed; tabs expand to 8 columns.
    - trailing whitespace (fixed-width padding) is trimmed.
    - each line is capped at :data:`MAX_LINE_CHARS` visible characters plus `` …[+N chars]``.

    Args:
        text: one log line without its ``\\n`` (it may contain ``\\r``), any length.

    Returns:
        At least one display line (``""`` for an empty line); each may contain SGR.
    """
    if (text.isascii() and text.isprintable()) or not _SPECIAL_RE.search(text):
        rendered = text  # printable ASCII (most lines: C-speed test) or nothing special
    elif _OVERLAY_HINT_RE.search(text):
        rendered = _render_overlay(text)
    else:
        rendered = _render_forward(text)
    return [_cap(_rstrip(piece)) for piece in _split_glued_bars(rendered)]


def _render_forward(text: str) -> str:
    """A line written left to right only: keep SGR, drop other escapes, expand tabs."""
    out: list[str] = []
    col = 0
    pos = 0
    for m in _SPECIAL_RE.finditer(text):
        run = text[pos : m.start()]
        out.append(run)
        col += len(run)
        tok = m.group()
        if tok == "\t":
            pad = TAB_WIDTH - col % TAB_WIDTH
            out.append(" " * pad)
            col += pad
        elif _SGR_RE.fullmatch(tok):
            out.append(tok)
        pos = m.end()
    out.append(text[pos:])
    return "".join(out)


def _render_overlay(text: str) -> str:
    """A line with carriage returns / cursor moves: what a terminal leaves on the row."""
    cells: list[str] = []  # one visible character per column
    col = 0
    pos = 0

    def put(run: str) -> None:
        nonlocal col
        if not run:
            return
        end = col + len(run)
        if col > len(cells):
            cells.extend(" " * (col - len(cells)))
        if end > len(cells):
            cells.extend(" " * (end - len(cells)))
        cells[col:end] = run
        col = end

    for m in _SPECIAL_RE.finditer(text):
        put(text[pos : m.start()])
        pos = m.end()
        tok = m.group()
        if tok == "\r":
            col = 0
        elif tok == "\x08":
            col = max(0, col - 1)
        elif tok == "\t":
            col += TAB_WIDTH - col % TAB_WIDTH
            if col > len(cells):
                cells.extend(" " * (col - len(cells)))
        elif tok.startswith("\x1b["):
            csi = _CSI_PARTS_RE.fullmatch(tok)
            if csi is None:
                continue
            params, final = csi.group(1), csi.group(2)
            n = int(params) if params.isdigit() else 0
            if final == "K":
                if n == 0:  # erase to the end of the line
                    del cells[col:]
                elif n == 1:  # erase from the start to the cursor
                    cells[: col + 1] = " " * min(col + 1, len(cells))
                elif n == 2:  # erase the whole line
                    cells.clear()
            elif final == "D":
                col = max(0, col - max(n, 1))
            elif final == "C":
                col += max(n, 1)
            elif final in "G`":
                col = max(n, 1) - 1
    put(text[pos:])
    plain = "".join(cells)
    last = text.rpartition("\r")[2]
    if not _OVERLAY_HINT_RE.search(last):
        coloured = _render_forward(last)
        last_plain = strip_ansi(coloured).rstrip()
        # A progress bar redrawn last is the line's state: whatever a terminal still shows
        # beyond its end is left over from a longer, older redraw (another process's bar, or
        # a narrower redraw tqdm did not pad), so it is dropped.
        if progress_key(last_plain) is not None and plain.startswith(last_plain):
            return coloured
        # The last segment may be all that is visible; then its colours are true.
        if "\x1b[" in last and last_plain == plain.rstrip():
            return coloured
    return plain


def _split_glued_bars(text: str) -> list[str]:
    """Split tqdm bars glued to what follows them; later redraws of one bar win."""
    if _TIME_BRACKET_RE.search(text) is None:  # no bar's end: nothing glued
        return [text]
    pieces: list[str] = []
    pos = 0
    end = _content_end(text)
    for m in _BAR_END_RE.finditer(text, 0, end):
        if m.end() >= end:
            break
        pieces.append(text[pos : m.end()])
        pos = m.end()
    if not pieces:
        return [text]
    pieces.append(text[pos:])
    out: list[str] = []
    for piece in pieces:
        if out:
            bar_candidate = piece.lstrip(" ")
            if _same_bar(out[-1], bar_candidate):
                out[-1] = bar_candidate
                continue
        out.append(piece)
    return out


def _content_end(text: str) -> int:
    """Index just past the last visible character (trailing whitespace and SGR excluded)."""
    end = len(text)
    while end:
        while end and text[end - 1].isspace():
            end -= 1
        if not end or text[end - 1] != "m":
            break
        esc = text.rfind("\x1b[", 0, end)
        if esc < 0 or not _SGR_RE.fullmatch(text, esc, end):
            break
        end = esc
    return end


def _same_bar(prev: str, new: str) -> bool:
    """Whether ``new`` redraws the bar ``prev`` (same description, both bars)."""
    a = progress_key(strip_ansi(prev))
    if a is None:
        return False
    b = progress_key(strip_ansi(new))
    return b is not None and a[0] == b[0]


_TRAILING_WS_RE = re.compile(r"\s+((?:\x1b\[[0-9;:]*m)*)$")


def _rstrip(line: str) -> str:
    """Trim trailing whitespace, also when it sits before closing SGR sequences."""
    if "\x1b" not in line:
        return line.rstrip()
    return _TRAILING_WS_RE.sub(r"\1", line)


def _cap(line: str) -> str:
    """Cut a line to :data:`MAX_LINE_CHARS` visible characters, saying how many were cut."""
    if len(line) <= MAX_LINE_CHARS:
        return line
    if "\x1b" not in line:
        return f"{line[:MAX_LINE_CHARS]} …[+{len(line) - MAX_LINE_CHARS} chars]"
    visible = 0
    pos = 0
    cut_at = None
    for m in _SGR_RE.finditer(line):
        run = m.start() - pos
        if visible + run > MAX_LINE_CHARS:
            cut_at = pos + (MAX_LINE_CHARS - visible)
            break
        visible += run
        pos = m.end()
    if cut_at is None:
        run = len(line) - pos
        if visible + run <= MAX_LINE_CHARS:
            return line
        cut_at = pos + (MAX_LINE_CHARS - visible)
    total_visible = len(strip_ansi(line))
    return f"{line[:cut_at]}\x1b[0m …[+{total_visible - MAX_LINE_CHARS} chars]"
