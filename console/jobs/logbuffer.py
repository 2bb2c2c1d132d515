"""A bounded buffer of display lines for one log pane (pure: no textual, no I/O).

Raw :class:`~console.jobs.logs.JobLogLine` records go in; :func:`console.jobs.logtext.shape`
turns each into display lines (carriage returns resolved, escapes cleaned, glued bars split).
A progress-bar update printed on its own line replaces the previous, unfinished bar of the
same (node, rank) stream in place, as a terminal would have redrawn it; node 0 rank 1's bar
never replaces rank 0's.

Storage is a list with a moving head, so indexing, appending and evicting from the front are
all O(1) (amortised); indices are relative to the oldest line kept.

A raw line is shaped once (:func:`display_lines`) and the same rows go into every buffer
that shows it (a node's pane, its rank's pane, the merged pane); what each display line needs
later (plain text, error-like, progress-bar key) is computed then.

Rows are stored as plain tuples of strings, numbers and ``None`` (:data:`Row`): CPython's
cyclic garbage collector stops tracking such tuples after their first collection, so a
million buffered lines add nothing to its full passes (as dataclass instances they made
each full pass take about 0.4 s: the console froze). Readers get :class:`DisplayLine`
(the same fields, named) from indexing.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Iterable, Sequence
from typing import Final, NamedTuple

from rich.cells import cell_len

from console.jobs.logs import JobLogLine
from console.jobs.logtext import is_error_like, progress_key, shape, strip_ansi

_SEQ = itertools.count(1)


Row = tuple[int, int, int | None, int, str, str, bool, tuple[str, bool] | None, int]
"""A display line as stored: the fields of :class:`DisplayLine`, in order, as a plain tuple."""

_PLAIN: Final = 5
_ERROR: Final = 6
_BAR: Final = 7
_WIDTH: Final = 8


class DisplayLine(NamedTuple):
    """One line as the pane shows it (a :data:`Row` with names).

    Attributes:
        seq: unique, increasing id of this display line (process-wide; a progress bar
            redrawn in place is a new display line with a new one).
        node_rank: the node (container) it came from.
        rank: torchrun's global rank, ``None`` for torchrun's own lines.
        ts_ns: Docker's timestamp, ns since the epoch.
        text: the shaped text; may contain ANSI SGR sequences.
        plain: ``text`` without escapes (what search and filters see).
        error: :func:`~console.jobs.logtext.is_error_like` of ``plain``.
        bar: :func:`~console.jobs.logtext.progress_key` of ``plain`` (``None``: not a bar).
        width: terminal cells of ``plain`` (``rich.cells.cell_len``).
    """

    seq: int
    node_rank: int
    rank: int | None
    ts_ns: int
    text: str
    plain: str
    error: bool = False
    bar: tuple[str, bool] | None = None
    width: int = 0

    def tag(self) -> str:
        """``[0:1]`` (node:rank), or ``[0]`` when the rank is ``None``."""
        if self.rank is None:
            return f"[{self.node_rank}]"
        return f"[{self.node_rank}:{self.rank}]"


def display_lines(line: JobLogLine) -> list[Row]:
    """Shape a raw line (:func:`~console.jobs.logtext.shape`: carriage returns resolved,
    escapes cleaned, glued bars split) into its display lines, classified once."""
    out: list[Row] = []
    for text in shape(line.text):
        plain = strip_ansi(text) if "\x1b" in text else text
        out.append((next(_SEQ), line.node_rank, line.rank, line.ts_ns, text, plain,
                    is_error_like(plain), progress_key(plain), cell_len(plain)))
    return out


def renumbered(rows: Iterable[Row]) -> list[Row]:
    """``rows`` with this process's sequence numbers (rows shaped in another process, e.g.
    the log intake, carry that process's numbers, which may collide with ours)."""
    return [(next(_SEQ), *r[1:]) for r in rows]


def redraws(prev: Row, new: Row) -> bool:
    """:func:`~console.jobs.logtext.supersedes` on classified display lines: ``new`` is a
    progress bar and ``prev`` an unfinished bar of the same description, or an empty line
    (torchrun's ``--tee`` turns the ``\r`` before a bar into a line break)."""
    bar = new[_BAR]
    if bar is None:
        return False
    old = prev[_BAR]
    if old is None:
        return not prev[_PLAIN].strip()
    return not old[1] and old[0] == bar[0]


class LogBuffer:
    """Bounded ring of display lines for one pane. Use from the event loop's thread only.

    Args:
        maxlen: display lines kept; older ones are evicted from the front.
        node: keep only lines of this node rank (``None`` = all nodes).
        rank: keep only lines of this torchrun rank (``None`` = all ranks, including
            torchrun's own unranked lines).

    Attributes:
        version: +1 on every change (line added, replaced or evicted; clear).
        dropped: display lines evicted from the front (beyond ``maxlen``) so far.
        total: display lines ever added (replacements not counted).
    """

    def __init__(self, maxlen: int = 100_000, *, node: int | None = None,
                 rank: int | None = None) -> None:
        if maxlen < 1:
            raise ValueError("maxlen must be at least 1")
        self.maxlen = maxlen
        self.node = node
        self.rank = rank
        self.version = 0
        self.dropped = 0
        self.total = 0
        self._items: list[Row] = []
        self._head = 0  # index in _items of the oldest kept line
        self._base = 0  # absolute position (count of lines added before it) of that line
        self._seq = 0
        # (node_rank, rank) -> absolute position (total count before it) of its last line
        self._last: dict[tuple[int, int | None], int] = {}
        # absolute positions of error-like lines, ascending
        self._errors: list[int] = []

    # -- input --------------------------------------------------------------------------------

    def accepts(self, line: JobLogLine) -> bool:
        """Whether ``line`` passes this buffer's node/rank filter."""
        if self.node is not None and line.node_rank != self.node:
            return False
        return self.rank is None or line.rank == self.rank

    def append(self, line: JobLogLine) -> int:
        """Shape one raw line (:func:`display_lines`) and add its display lines; see
        :meth:`append_display`."""
        if not self.accepts(line):
            return 0  # not shaped at all
        return self.append_display(line, display_lines(line))

    def append_display(self, line: JobLogLine, shown: Sequence[Row]) -> int:
        """Add the display lines of one raw line, made once by :func:`display_lines` (every
        buffer that shows the line gets the same objects); see :meth:`append_rows`."""
        return self.append_rows(line.node_rank, line.rank, shown)

    def append_rows(self, node_rank: int, rank: int | None, shown: Sequence[Row]) -> int:
        """Add the display rows of one raw line of ``(node_rank, rank)``.

        A progress update that :func:`redraws` the last display line of the same
        (node_rank, rank) stream replaces that line in place (same index) while it is still
        in the buffer.

        Returns:
            Display lines added (0 for a pure replacement or a line the filter rejects).
        """
        if self.node is not None and node_rank != self.node:
            return 0
        if self.rank is not None and rank != self.rank:
            return 0
        stream = (node_rank, rank)
        added = 0
        items = self._items
        for dl in shown:
            if dl[_BAR] is not None:
                last_abs = self._last.get(stream)
                if last_abs is not None and last_abs >= self._base:
                    i = self._head + last_abs - self._base
                    if redraws(items[i], dl):
                        items[i] = dl
                        self._set_error(last_abs, dl[_ERROR])
                        self.version += 1
                        continue
            abs_pos = self.total
            items.append(dl)
            self.total += 1
            added += 1
            self._last[stream] = abs_pos
            if dl[_ERROR]:
                self._errors.append(abs_pos)
        if added or shown:
            self.version += 1
        if len(items) - self._head > self.maxlen:
            self._evict()
        return added

    def extend(self, lines: Iterable[JobLogLine]) -> int:
        """:meth:`append` each line; returns the display lines added in all."""
        return sum(self.append(ln) for ln in lines)

    def clear(self) -> None:
        """Drop every line (indices restart at 0; ``total`` and ``dropped`` are kept)."""
        self._items = []
        self._head = 0
        self._base = self.total
        self._last.clear()
        self._errors.clear()
        self.version += 1

    def _evict(self) -> None:
        excess = len(self) - self.maxlen
        if excess <= 0:
            return
        self._head += excess
        self._base += excess
        self.dropped += excess
        cut = bisect.bisect_left(self._errors, self._base)
        if cut:
            del self._errors[:cut]
        if self._head > self.maxlen:  # compact: keep memory at most ~2 x maxlen
            del self._items[: self._head]
            self._head = 0
        self.version += 1

    def _set_error(self, abs_pos: int, is_error: bool) -> None:
        i = bisect.bisect_left(self._errors, abs_pos)
        present = i < len(self._errors) and self._errors[i] == abs_pos
        if is_error and not present:
            self._errors.insert(i, abs_pos)
        elif present and not is_error:
            del self._errors[i]

    # -- reading ------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._items) - self._head

    def __getitem__(self, i: int) -> DisplayLine:
        """The ``i``-th kept line, 0 = oldest (negative indices count from the newest).

        Raises:
            IndexError: out of range.
        """
        return DisplayLine._make(self._row(i))

    def _row(self, i: int) -> Row:
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(i)
        return self._items[self._head + i]

    def slice(self, start: int, stop: int) -> list[DisplayLine]:
        """Lines ``start`` (inclusive) to ``stop`` (exclusive), clamped to the buffer."""
        return [DisplayLine._make(r) for r in self.rows(start, stop)]

    def search(self, pattern: str, *, regex: bool = False, ignore_case: bool = True) -> list[int]:
        """Indices (current) of lines whose plain text contains ``pattern``.

        Args:
            pattern: a substring, or a regular expression when ``regex``; an invalid
                expression is searched for literally (never raises).
            ignore_case: case-insensitive match.
        """
        if not pattern:
            return []
        rx = _compile(pattern, regex=regex, ignore_case=ignore_case)
        items, head = self._items, self._head
        return [i - head for i in range(head, len(items)) if rx.search(items[i][_PLAIN])]

    def matching(self, pattern: str, *, invert: bool = False) -> list[int]:
        """Indices of lines matching ``pattern`` (or not, with ``invert``), for the ``&`` filter.

        ``pattern`` is a case-insensitive regular expression (as ``less``'s ``&``); one that
        does not compile is taken literally. An empty pattern matches every line.
        """
        n = len(self)
        if not pattern:
            return [] if invert else list(range(n))
        rx = _compile(pattern, regex=True, ignore_case=True)
        items, head = self._items, self._head
        return [i - head for i in range(head, len(items))
                if (rx.search(items[i][_PLAIN]) is None) == invert]

    def rows(self, start: int, stop: int) -> list[Row]:
        """The stored rows ``start`` (inclusive) to ``stop`` (exclusive), clamped (fields as
        :class:`DisplayLine`, without building one per row)."""
        n = len(self)
        start = max(0, min(start, n))
        stop = max(start, min(stop, n))
        return self._items[self._head + start : self._head + stop]

    def plain(self, i: int) -> str:
        """The plain text of the ``i``-th kept line (as ``self[i].plain``, without building a
        :class:`DisplayLine`).

        Raises:
            IndexError: out of range.
        """
        return self._row(i)[_PLAIN]

    def errors(self) -> list[int]:
        """Indices (current) of error-like lines (:func:`~console.jobs.logtext.is_error_like`)."""
        return [a - self._base for a in self._errors]


def _compile(pattern: str, *, regex: bool, ignore_case: bool) -> re.Pattern[str]:
    flags = re.IGNORECASE if ignore_case else 0
    if regex:
        try:
            return re.compile(pattern, flags)
        except re.error:
            pass
    return re.compile(re.escape(pattern), flags)
