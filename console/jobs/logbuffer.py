"""A bounded buffer of display lines for one log pane (pure: no textual, no I/O).

Raw :class:`~console.jobs.logs.JobLogLine` records go in; :func:`console.jobs.logtext.shape`
turns each into display lines (carriage returns resolved, escapes cleaned, glued bars split).
A progress-bar update printed on its own line replaces the previous, unfinished bar of the
same (node, rank) stream in place, as a terminal would have redrawn it; node 0 rank 1's bar
never replaces rank 0's.

Storage is a list with a moving head, so indexing, appending and evicting from the front are
all O(1) (amortised); indices are relative to the oldest line kept.

A buffer of several nodes' lines (the merged "all ranks" pane) is ``ordered``: it keeps its
lines in the order of ``logs`` (:func:`~console.jobs.logs.read_job_logs`: Docker's timestamp,
then the node), whatever order the nodes' batches arrive in. A line older than the newest one
kept (a slower node's, or a node's whole tail arriving after another's) waits in a side list;
:meth:`LogBuffer.settle` merges those into place in one pass (O(lines after the oldest of
them)); the pane settles when it syncs, and every read but ``peek`` settles first. The cap
then drops the oldest lines by time.

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
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Final, NamedTuple

from rich.cells import cell_len

from console.jobs.logs import JobLogLine, line_tag
from console.jobs.logtext import is_error_like, progress_key, shape, strip_ansi

SEQ_BLOCK = 1 << 40
"""Sequence numbers of display lines shaped in this process are below this; a child process
that shapes lines for it (the log intake) numbers its own from a block of its own
(:func:`reserve_seq_block`, :func:`number_from`), so rows from any process stay unique (the
panes key their cached rows by it) without being copied to be renumbered."""

_SEQ = itertools.count(1)
_BLOCKS = itertools.count(1)


Row = tuple[int, int, int | None, int, str, str, bool, tuple[str, bool] | None, int]
"""A display line as stored: the fields of :class:`DisplayLine`, in order, as a plain tuple."""

_NODE: Final = 1
_RANK: Final = 2
_TS: Final = 3
_PLAIN: Final = 5
_ERROR: Final = 6
_BAR: Final = 7
_WIDTH: Final = 8

_NODE_SPAN: Final = 1 << 20
"""An ordered buffer's sort key of a line is ``ts_ns * _NODE_SPAN + node_rank`` (one int:
timestamp, then node, as ``logs`` merges)."""

_REWRITES: Final = 64
"""Merges of late lines an ordered buffer remembers for :meth:`LogBuffer.rewritten_since`."""


def _first(pair: tuple[int, Row]) -> int:
    return pair[0]


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
        """The line's tag as ``logs`` prints it (:func:`~console.jobs.logs.line_tag`):
        ``[n0 r1]``, or ``[n0]`` when the rank is ``None``."""
        return line_tag(self.node_rank, self.rank)


def display_lines(line: JobLogLine) -> list[Row]:
    """Shape a raw line (:func:`~console.jobs.logtext.shape`: carriage returns resolved,
    escapes cleaned, glued bars split) into its display lines, classified once."""
    out: list[Row] = []
    for text in shape(line.text):
        plain = strip_ansi(text) if "\x1b" in text else text
        out.append(
            (
                next(_SEQ),
                line.node_rank,
                line.rank,
                line.ts_ns,
                text,
                plain,
                is_error_like(plain),
                progress_key(plain),
                len(plain) if plain.isascii() else cell_len(plain),  # shaped: no controls
            )
        )
    return out


def reserve_seq_block() -> int:
    """The first of :data:`SEQ_BLOCK` sequence numbers no other process started by this one
    uses: hand it to a child that shapes lines for this process (:func:`number_from`)."""
    return next(_BLOCKS) * SEQ_BLOCK


def number_from(first: int) -> None:
    """Number the display lines this process shapes from ``first`` on (a block its parent
    reserved with :func:`reserve_seq_block`)."""
    global _SEQ
    _SEQ = itertools.count(first)


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
        ordered: keep the lines in time order (Docker's timestamp, then node: the order of
            ``logs``) rather than in arrival order; for a buffer of several nodes (see the
            module docstring). A line is placed by the timestamp it arrived with, also when
            a progress bar redraws it in place later.

    Attributes:
        version: +1 on every change (line added, replaced or evicted; clear).
        dropped: display lines evicted from the front (beyond ``maxlen``) so far.
        total: display lines ever added (replacements not counted).
    """

    def __init__(
        self,
        maxlen: int = 100_000,
        *,
        node: int | None = None,
        rank: int | None = None,
        ordered: bool = False,
    ) -> None:
        if maxlen < 1:
            raise ValueError("maxlen must be at least 1")
        self.maxlen = maxlen
        self.node = node
        self.rank = rank
        self.ordered = ordered
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
        # ordered: the sort key of each row of _items (same indices); lines older than the
        # newest kept one, (key, row) in arrival order, until settle(); the index in _late of
        # a stream's last line while it is there
        self._keys: list[int] = []
        self._late: list[tuple[int, Row]] = []
        self._late_last: dict[tuple[int, int | None], int] = {}
        # (version, lowest absolute position rewritten) of the last merges of late lines
        self._rewrites: deque[tuple[int, int]] = deque(maxlen=_REWRITES)
        self._rewrites_lost = -1  # version of the newest merge no longer in _rewrites

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
        if self.ordered:
            return self._append_ordered(stream, shown)
        added = 0
        items = self._items
        for dl in shown:
            if dl[_BAR] is not None and self._redraw(stream, dl):
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

    def _redraw(self, stream: tuple[int, int | None], dl: Row) -> bool:
        """Replace the last line of ``stream`` with the progress update ``dl`` if it
        :func:`redraws` it (in place, keeping its position and, ordered, its sort key)."""
        j = self._late_last.get(stream)
        if j is not None:  # ordered: the stream's last line is still waiting in _late
            key, prev = self._late[j]
            if not redraws(prev, dl):
                return False
            self._late[j] = (key, dl)
            self.version += 1
            return True
        last_abs = self._last.get(stream)
        if last_abs is None or last_abs < self._base:
            return False
        i = self._head + last_abs - self._base
        if not redraws(self._items[i], dl):
            return False
        self._items[i] = dl
        self._set_error(last_abs, dl[_ERROR])
        self.version += 1
        return True

    def _append_ordered(self, stream: tuple[int, int | None], shown: Sequence[Row]) -> int:
        """:meth:`append_rows` of an ordered buffer: a line not older than the newest kept is
        appended; an older one waits in ``_late`` for :meth:`settle`."""
        items, keys, late = self._items, self._keys, self._late
        added = 0
        for dl in shown:
            if dl[_BAR] is not None and self._redraw(stream, dl):
                continue
            key = dl[_TS] * _NODE_SPAN + dl[_NODE]
            if len(keys) > self._head and key < keys[-1]:
                self._late_last[stream] = len(late)
                late.append((key, dl))
            else:
                abs_pos = self._base + len(items) - self._head
                items.append(dl)
                keys.append(key)
                self._last[stream] = abs_pos
                if late:
                    self._late_last.pop(stream, None)
                if dl[_ERROR]:
                    self._errors.append(abs_pos)
            self.total += 1
            added += 1
        if shown:
            self.version += 1
        if len(late) > self.maxlen:  # nobody reads: merge before the side list grows further
            self.settle()
        elif not late and len(items) - self._head > self.maxlen:
            self._evict()
        return added

    def settle(self) -> None:
        """Ordered buffer: merge the lines that arrived out of order into place (the lines
        after the oldest of them move), then evict beyond ``maxlen``. Every read does this
        first; :meth:`peek` does not."""
        late = self._late
        if not late:
            return
        late.sort(key=_first)  # stable: a node's lines of the same key keep their order
        items, keys, head = self._items, self._keys, self._head
        pos = bisect.bisect_right(keys, late[0][0], lo=head)
        tail = list(zip(keys[pos:], items[pos:], strict=True))
        tail.extend(late)
        tail.sort(key=_first)  # two sorted runs: one merge pass; kept lines first on ties
        keys[pos:] = [k for k, _ in tail]
        items[pos:] = [r for _, r in tail]
        late.clear()
        self._late_last.clear()
        first = self._base + pos - head
        del self._errors[bisect.bisect_left(self._errors, first) :]
        last = self._last
        for a, (_, row) in enumerate(tail, first):
            if row[_ERROR]:
                self._errors.append(a)
            last[(row[_NODE], row[_RANK])] = a
        self.version += 1
        if len(self._rewrites) == self._rewrites.maxlen:
            self._rewrites_lost = self._rewrites[0][0]
        self._rewrites.append((self.version, first))
        if len(items) - self._head > self.maxlen:
            self._evict()

    def rewritten_since(self, version: int) -> int | None:
        """The lowest absolute position (``total - len(self)`` + index) whose line changed
        when :meth:`settle` merged late lines in after ``version`` was reached (``None``: no
        merge since). Lines before it kept their positions; a view of the buffer re-reads
        from there. Call after :meth:`settle`."""
        if self._rewrites_lost > version:
            return self._base  # too long ago to tell: everything kept
        low: int | None = None
        for v, a in reversed(self._rewrites):
            if v <= version:
                break
            low = a if low is None else min(low, a)
        return low

    def extend(self, lines: Iterable[JobLogLine]) -> int:
        """:meth:`append` each line; returns the display lines added in all."""
        return sum(self.append(ln) for ln in lines)

    def clear(self) -> None:
        """Drop every line (indices restart at 0; ``total`` and ``dropped`` are kept)."""
        self._items = []
        self._keys = []
        self._late.clear()
        self._late_last.clear()
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
            if self.ordered:
                del self._keys[: self._head]
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
        """Lines kept, with those an ordered buffer has yet to :meth:`settle` into place
        (until then the cap waits: the oldest by time may be among them)."""
        return len(self._items) - self._head + len(self._late)

    def __getitem__(self, i: int) -> DisplayLine:
        """The ``i``-th kept line, 0 = oldest (negative indices count from the newest).

        Raises:
            IndexError: out of range.
        """
        return DisplayLine._make(self._row(i))

    def peek(self, i: int) -> DisplayLine | None:
        """The ``i``-th kept line as the buffer stood at its last :meth:`settle` (lines
        appended since in order included), without settling; ``None`` out of range. For a
        view that keeps positions of its own and re-reads them only when it syncs (so no
        repaint between two syncs sees lines move)."""
        j = self._head + i
        if i < 0 or j >= len(self._items):
            return None
        return DisplayLine._make(self._items[j])

    def _row(self, i: int) -> Row:
        if self._late:
            self.settle()
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
        self.settle()
        rx = _compile(pattern, regex=regex, ignore_case=ignore_case)
        items, head = self._items, self._head
        return [i - head for i in range(head, len(items)) if rx.search(items[i][_PLAIN])]

    def matching(self, pattern: str, *, invert: bool = False) -> list[int]:
        """Indices of lines matching ``pattern`` (or not, with ``invert``), for the ``&`` filter.

        ``pattern`` is a case-insensitive regular expression (as ``less``'s ``&``); one that
        does not compile is taken literally. An empty pattern matches every line.
        """
        self.settle()
        n = len(self)
        if not pattern:
            return [] if invert else list(range(n))
        rx = _compile(pattern, regex=True, ignore_case=True)
        items, head = self._items, self._head
        return [
            i - head
            for i in range(head, len(items))
            if (rx.search(items[i][_PLAIN]) is None) == invert
        ]

    def rows(self, start: int, stop: int) -> list[Row]:
        """The stored rows ``start`` (inclusive) to ``stop`` (exclusive), clamped (fields as
        :class:`DisplayLine`, without building one per row)."""
        self.settle()
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
        self.settle()
        return [a - self._base for a in self._errors]


def _compile(pattern: str, *, regex: bool, ignore_case: bool) -> re.Pattern[str]:
    flags = re.IGNORECASE if ignore_case else 0
    if regex:
        try:
            return re.compile(pattern, flags)
        except re.error:
            pass
    return re.compile(re.escape(pattern), flags)
