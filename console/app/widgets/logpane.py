"""One log pane: a Line API view of a :class:`~console.jobs.logbuffer.LogBuffer`.

The pane never holds a copy of the log. It keeps a *view*: the absolute positions of the
buffer's lines it shows (all of them, or those passing the ``&`` filter), and in wrap mode
the first screen row of each. ``render_line`` is called by Textual for the visible rows only
and formats just those lines (ANSI SGR through ``rich.text.Text.from_ansi``), so a pane over
100,000 lines costs what its height costs.

Absolute position of buffer line ``i`` = ``buffer.total - len(buffer) + i``: it never changes
while the line is kept (eviction and ``clear`` only move the front), so the view survives
appends, evictions and in-place progress-bar replacements with incremental updates. In an
ordered buffer (the merged pane's) a late line merged into place moves the lines after it:
the pane settles the buffer when it syncs and re-reads the view from the lowest position
that moved (:meth:`~console.jobs.logbuffer.LogBuffer.rewritten_since`); between syncs it
reads the buffer as it stood then (``peek``), so no repaint sees lines move under the view.

Updates are coalesced: the owner calls :meth:`LogPane.notify_appended` after appending (as
often as it likes); the pane syncs with the buffer at most every :data:`REFRESH_INTERVAL_S`.

While following, the pane does not scroll: its canvas is one screen tall and it draws the
view's last rows (:meth:`LogPane._top_row`), so new lines cost a repaint of the pane alone
(a scroll makes Textual re-arrange the whole screen). Leaving the bottom (a key, the wheel, a
search jump) pauses follow and turns the canvas into the whole view, scrolled to the rows that
were shown; reaching the bottom again pins it back.
"""

from __future__ import annotations

import bisect
import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import ClassVar, Literal

from rich.ansi import AnsiDecoder
from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual._border import get_box
from textual.actions import SkipAction
from textual.binding import Binding, BindingType
from textual.cache import LRUCache
from textual.color import Color
from textual.content import Content
from textual.filter import LineFilter
from textual.geometry import Region, Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.scrollbar import ScrollDown, ScrollTo, ScrollUp
from textual.strip import Strip
from textual.style import Style as TextualStyle
from textual.widget import Widget
from textual.widgets import Input

from console.jobs.logbuffer import DisplayLine, LogBuffer

REFRESH_INTERVAL_S = 0.1
"""Minimum seconds between two syncs with the buffer (at most 10 repaints per second of a
pane whose lines keep coming; keys repaint at once)."""

MAX_RENDER_CHARS = 20_000
"""Characters of one line the pane formats at most (the buffer already caps lines at 10,000;
this guards the layout against a buffer that does not)."""

GROW_COLUMNS = 64
"""While following, the canvas's width grows in steps of this many cells."""

STRIP_CACHE = 96
#: Framed rows kept per pane (:meth:`LogPane._framed_lines`): a screen of rows and then some;
#: each strip carries seven GC-tracked caches, so more would cost the cyclic GC.
BORDER_ROWS = 8
"""Border rows a pane keeps drawn (top and bottom, with the last few titles)."""

FRAMED_CACHE = 64
"""Rendered lines a pane keeps (a screenful or two, for scrolling): each strip holds
Textual's caches of its crops and styles, objects the cyclic GC walks at every pass, so a
flood of new lines should not leave hundreds of them alive."""

RESCAN_TAIL = 256
"""Lines before the previous end re-checked on every sync: a progress bar replaced in place
may change whether it passes the filter, or its wrapped height."""

_TS_WIDTH = len("HH:MM:SS.mmm ")
_TAG_WIDTH = len("[n000 r0000] ")  # room the canvas leaves for a line's tag
_CONTROL = str.maketrans({c: "\ufffd" for c in [*range(0, 9), *range(11, 27), *range(28, 32), 127]})

PromptKind = Literal["search", "filter"]
_MATCH = Binding.Group("Match", compact=True)
_ERROR = Binding.Group("Error", compact=True)


def format_ts(ts_ns: int) -> str:
    """Docker timestamp (ns since the epoch) as local ``HH:MM:SS.mmm``."""
    seconds, ns = divmod(ts_ns, 1_000_000_000)
    return datetime.fromtimestamp(seconds).strftime("%H:%M:%S.") + f"{ns // 1_000_000:03d}"


def parse_filter(text: str) -> tuple[str, bool]:
    """``&`` filter text -> (lower-case needle, inverted). A leading ``!`` inverts; an empty
    needle (``""`` or ``"!"``) means no filter."""
    if text.startswith("!"):
        return text[1:].lower(), True
    return text.lower(), False


_SGR_SPLIT_RE = re.compile(r"\x1b\[([0-9;:]*)m")
_SGR_STYLES: dict[tuple[Style, str], Style] = {}
_SGR_STYLES_MAX = 4096


def sgr_style(current: Style, params: str) -> Style:
    """The style after the SGR sequence ``ESC[<params>m`` on top of ``current``, as Rich's
    :class:`~rich.ansi.AnsiDecoder` (what ``Text.from_ansi`` uses) computes it; cached (a
    log uses a handful of sequences over and over)."""
    key = (current, params)
    style = _SGR_STYLES.get(key)
    if style is None:
        if len(_SGR_STYLES) >= _SGR_STYLES_MAX:
            _SGR_STYLES.clear()
        decoder = AnsiDecoder()
        decoder.style = current
        decoder.decode_line(f"\x1b[{params}m")
        style = _SGR_STYLES[key] = decoder.style
    return style


def sgr_segments(text: str, base: Style) -> list[Segment]:
    """The segments of a shaped line whose only escapes are SGR sequences, each run of text
    in ``base`` plus its SGR colours: the same styles as ``Text.from_ansi(text)`` rendered
    over ``base``, without Rich's per-character decoding."""
    parts = _SGR_SPLIT_RE.split(text)
    out: list[Segment] = []
    sgr = Style.null()
    for i, part in enumerate(parts):
        if i % 2:
            sgr = sgr_style(sgr, part)
        elif part:
            out.append(Segment(part, base + sgr if sgr else base))
    return out


def ascii_window(segments: list[Segment], start: int, span: int, width: int, pad: Style) -> Strip:
    """Cells ``[start, start + span)`` of a line whose segments hold one cell per character
    (printable ASCII), padded with ``pad`` (or cut) to ``width`` cells.

    The same cells and styles as ``Strip(segments).crop_extend(start, start + span, pad)
    .adjust_cell_length(width, pad)``, without the intermediate strips (each strip carries
    Textual's caches of its crops, objects the cyclic GC would walk).
    """
    end = start + min(span, width)
    out: list[Segment] = []
    pos = 0
    for seg in segments:
        n = len(seg.text)
        if pos + n > start:
            out.append(Segment(seg.text[max(0, start - pos) : end - pos], seg.style))
        pos += n
        if pos >= end:
            break
    used = max(0, min(pos, end) - start)
    if used < width:
        out.append(Segment(" " * (width - used), pad))
    return Strip(out, width)


class LogPrompt(Input):
    """The one-line input for a pane's ``/`` (search) and ``&`` (filter): under the pane's
    :attr:`LogPane.prompt_anchor` (the whole tiled area in the logs screen, so it spans the
    screen), naming the pane it searches.

    Typing applies live; enter keeps the value, escape restores the value the prompt opened
    with. Either way the prompt is removed and focus goes back to the pane.

    While it is open the screen's toasts (Textual's notifications, at the bottom right) are
    shown above it, never over its hint or what is typed (:meth:`_lift_toasts`).
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel", show=False, id="logs.prompt_cancel"),
    ]
    DEFAULT_CSS = """
    LogPrompt, LogPrompt:focus { height: 1; width: 1fr; border: none; padding: 0 1; }
    """

    def __init__(self, pane: LogPane, kind: PromptKind, value: str) -> None:
        super().__init__(
            value=value,
            placeholder=f"search {pane.title}: the line as shown, tags included"
            if kind == "search"
            else f"filter {pane.title}: the line as shown, tags included; !text: lines "
            "without it; empty: all",
        )
        self.pane = pane
        self.kind: PromptKind = kind
        self.original = value

    def on_mount(self) -> None:
        self.call_after_refresh(self._lift_toasts)

    def on_resize(self, _event: events.Resize) -> None:
        self.call_after_refresh(self._lift_toasts)

    def on_unmount(self) -> None:
        rack = self._toast_rack()
        if rack is not None:
            rack.styles.clear_rule("margin")  # back to Textual's own: above the footer

    def _toast_rack(self) -> Widget | None:
        from textual.widgets._toast import ToastRack

        try:
            return self.screen.query_one(ToastRack)
        except Exception:  # no screen any more, or no rack (a screen without toasts)
            return None

    def _lift_toasts(self) -> None:
        """Dock the screen's toasts just above this prompt (their rack's bottom margin: the
        rows from the prompt's top to the screen's bottom)."""
        rack = self._toast_rack()
        if rack is None or not self.is_mounted:
            return
        rows = self.screen.size.height - self.region.y
        if rows > 0:
            rack.styles.margin = (0, 0, rows, 0)

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        self.pane._prompt_changed(self.kind, event.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.pane._prompt_closed(self, self.kind, event.value, accepted=True)

    def action_cancel(self) -> None:
        self.pane._prompt_closed(self, self.kind, self.original, accepted=False)


class LogPane(ScrollView, can_focus=True):
    """A scrolling, following view of one :class:`LogBuffer`.

    Args:
        buffer: the lines to show; the owner appends to it and then calls
            :meth:`notify_appended`. It may keep doing so across reconnects.
        title: shown in the border, e.g. ``"node 0 · host-a"``.
        merged: prefix every line with its dimmed ``[n0 r1]`` tag (the all-ranks pane).

    Public state (read-only): :attr:`following`, :attr:`new_lines`, :attr:`line_count`,
    :attr:`row_count`, :attr:`wrap`, :attr:`timestamps`, :attr:`search_term`,
    :attr:`filter_text`, :attr:`cursor_line`, :attr:`exit_code`, :attr:`lines_rendered`.
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("G,end", "follow", "Follow", key_display="G", id="logs.follow"),
        Binding("slash", "search", "Search", key_display="/", id="logs.search"),
        Binding("n", "search_next", "Next match", id="logs.search_next", group=_MATCH),
        Binding("N", "search_prev", "Previous match", id="logs.search_prev", group=_MATCH),
        Binding("ampersand", "filter", "Filter", key_display="&", id="logs.filter"),
        Binding("w", "toggle_wrap", "Wrap", show=False, id="logs.wrap"),
        Binding("t", "toggle_timestamps", "Timestamps", show=False, id="logs.timestamps"),
        Binding("e", "error_next", "Next error", id="logs.error_next", group=_ERROR),
        Binding("E", "error_prev", "Previous error", id="logs.error_prev", group=_ERROR),
        Binding("ctrl+s", "save", "Save", show=False, id="logs.save"),
        Binding("escape", "clear_search", "Clear search", show=False, id="logs.clear_search"),
    ]

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "logpane--match",
        "logpane--match-current",
        "logpane--cursor",
        "logpane--error",
        "logpane--tag",
        "logpane--timestamp",
    }

    DEFAULT_CSS = """
    LogPane {
        height: 1fr;
        width: 1fr;
        /* unfocused: a quiet border, but its title (another node's follow state, line
           count, exit code) in readable text; focused: the theme's border colour and a
           bold title */
        border: round $foreground 25%;
        border-title-align: left;
        border-title-color: $foreground 80%;
        border-subtitle-align: right;
        border-subtitle-color: $text-warning;
        scrollbar-gutter: stable;
        overflow-x: auto;
        overflow-y: scroll;
        &:focus {
            border: round $border;
            border-title-color: $foreground;
            border-title-style: bold;
        }
        &.-wrap { overflow-x: hidden; }
        /* following: the scrollbars would only say "at the bottom" and cost a repaint per
           tick; they show once the view leaves the bottom */
        &.-following { scrollbar-visibility: hidden; }
        & > .logpane--match { background: $warning 70%; color: $background; }
        & > .logpane--match-current { background: $foreground; color: $background;
                                      text-style: bold; }
        & > .logpane--cursor { background: $accent 30%; }
        & > .logpane--error { color: $text-error; }
        & > .logpane--tag { color: $text-muted; }
        & > .logpane--timestamp { color: $text-muted; }
    }
    """

    @dataclass
    class SaveRequested(Message):
        """ctrl+s: the user asked to save this pane's whole log (the owner does the I/O)."""

        pane: LogPane

        @property
        def control(self) -> LogPane:
            """The pane (for ``@on(LogPane.SaveRequested, "#id")``)."""
            return self.pane

    @dataclass
    class FollowChanged(Message):
        """Follow mode was paused (the user scrolled up, jumped to a match) or resumed."""

        pane: LogPane
        following: bool

        @property
        def control(self) -> LogPane:
            """The pane."""
            return self.pane

    def __init__(
        self,
        buffer: LogBuffer,
        title: str,
        *,
        merged: bool = False,
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.buffer = buffer
        self.title = title
        self.merged = merged
        self._following = True
        self._paused_end: int | None = None  # view end (absolute) when follow was paused
        self._exit_code: int | None = None
        self._ended = False
        self._loading = False
        self._empty_text: str | None = None
        self._wrap = False
        self._timestamps = False
        self._search = ""
        self._filter = ""
        self._cursor: int | None = None  # absolute position of the current match / error
        # view, synced with the buffer by _sync()
        self._view: list[int] = []  # absolute positions shown, ascending
        self._matches: list[int] = []  # positions of view lines the search finds, ascending
        self._rows: list[int] | None = None  # wrap mode: first row of each view line, + end
        self._rows_width = 0
        self._synced_version = -1
        self._synced_base = 0
        self._synced_end = 0
        self._max_width = 0  # widest line body in cells (no prefix)
        self._sync_scheduled = False
        self._strips: LRUCache[tuple[object, ...], Strip] = LRUCache(STRIP_CACHE)
        self._row_ctx: tuple[int, int, int] | None = None  # (x, top row, width) while rendering
        # framed rows (see _framed_lines): id(content strip) -> (that strip, the line filters
        # applied, framed strip), valid for the border segments in _frame_ends
        self._framed: LRUCache[int, tuple[Strip, tuple[LineFilter, ...], Strip]] = LRUCache(
            FRAMED_CACHE
        )
        self._frame_ends: tuple[Segment, Segment] | None = None
        # border rows (see _border_row): everything Textual draws them from -> the row
        self._border_rows: dict[tuple[object, ...], Strip] = {}
        self._segment_styles: dict[str, Style] = {}  # see _styles(); until styles change
        self.add_class("-following")
        self._prompt: LogPrompt | None = None
        self.prompt_anchor: Widget | None = None
        """The widget the search/filter prompt opens under (``None``: the pane itself); the
        tiled panes set themselves, so the prompt spans all of them."""
        self.lines_rendered = 0
        """render_line calls so far (each renders one visible row)."""
        self.syncs = 0
        """Times the pane caught up with a changed buffer (coalesced refreshes)."""

    # -- owner API -----------------------------------------------------------------------------

    def notify_appended(self) -> None:
        """Tell the pane its buffer changed. Cheap; call after every append or batch, from
        the app's thread (the buffer is not thread-safe either).

        The pane syncs with the buffer at most once per :data:`REFRESH_INTERVAL_S` (a timer),
        so a burst of 10,000 lines costs one repaint.
        """
        if self._sync_scheduled or not self.is_mounted:
            return
        self._sync_scheduled = True
        self.set_timer(REFRESH_INTERVAL_S, self._scheduled_sync)

    def flush(self) -> bool:
        """Sync with the buffer now (instead of at the next coalesced refresh); whether the
        buffer had changed (the pane repaints)."""
        return self._sync()

    def set_exit_code(self, code: int | None) -> None:
        """The stream ended: the border says ``exited <code>`` (``ended`` when the code is
        unknown) instead of ``following``."""
        self._exit_code = code
        self._ended = True
        self._update_title()

    def set_loading(self, loading: bool) -> None:
        """While loading the border says ``loading…`` (never ``0 lines`` before the first
        line came)."""
        if loading != self._loading:
            self._loading = loading
            self._update_title()

    def set_empty_text(self, text: str | None) -> None:
        """What the pane says in its body while it has no line (e.g. why: the container is
        gone and nothing was archived); ``None``: nothing."""
        if text != self._empty_text:
            self._empty_text = text
            self._strips.clear()
            self.refresh()

    @property
    def empty_text(self) -> str | None:
        """See :meth:`set_empty_text`."""
        return self._empty_text

    def set_title(self, title: str) -> None:
        """Change the title part of the border (e.g. the host after a reconnect)."""
        self.title = title
        self._update_title()

    # -- public state --------------------------------------------------------------------------

    @property
    def following(self) -> bool:
        """Whether new lines scroll the view to the bottom."""
        return self._following

    @property
    def new_lines(self) -> int:
        """Lines shown since follow was paused (the ``+N`` badge); 0 while following."""
        if self._following or self._paused_end is None:
            return 0
        return len(self._view) - bisect.bisect_left(self._view, self._paused_end)

    @property
    def line_count(self) -> int:
        """Lines in the view (after the filter)."""
        return len(self._view)

    @property
    def max_scroll_y(self) -> int:
        """The last row's scroll offset; 0 while following (the canvas is pinned: one screen
        tall, showing the view's last rows)."""
        if self._following:
            return 0
        return max(0, self.row_count - self._page_rows())

    def _page_rows(self) -> int:
        """Rows of the view the pane shows at once."""
        return self.container_size.height - self.scrollbar_size_horizontal

    def _top_row(self) -> int:
        """The view's row at the top of the pane: while following, the first of the last
        screenful; else the scroll offset."""
        if self._following:
            return max(0, self.row_count - self._page_rows())
        return round(self.scroll_y)

    @property
    def max_scroll_x(self) -> int:
        """The widest line's scroll offset (the canvas may be wider while following)."""
        return max(
            0, self._content_width() - self.container_size.width + self.scrollbar_size_vertical
        )

    def _content_width(self) -> int:
        """Cells of the widest line with its prefix (0 when wrapping: nothing scrolls
        sideways)."""
        if self._wrap:
            return 0
        prefix = (_TS_WIDTH if self._timestamps else 0) + (_TAG_WIDTH if self._tagged() else 4)
        return min(self._max_width, MAX_RENDER_CHARS) + prefix

    @property
    def row_count(self) -> int:
        """Screen rows of the whole view (= :attr:`line_count` unless wrapping)."""
        rows = self._rows
        return rows[-1] - rows[0] if rows is not None else len(self._view)

    @property
    def wrap(self) -> bool:
        """Long lines wrap (else they scroll horizontally)."""
        return self._wrap

    @property
    def timestamps(self) -> bool:
        """Lines start with their Docker timestamp as local ``HH:MM:SS.mmm``."""
        return self._timestamps

    @property
    def search_term(self) -> str:
        """The ``/`` search text ("" = none)."""
        return self._search

    @property
    def filter_text(self) -> str:
        """The ``&`` filter text as typed ("" = none, leading ``!`` = inverted)."""
        return self._filter

    @property
    def exit_code(self) -> int | None:
        """The node's exit code, once :meth:`set_exit_code` was called."""
        return self._exit_code

    @property
    def cursor_line(self) -> int | None:
        """Buffer index (current, 0 = oldest kept) of the line ``n``/``N``/``e``/``E`` went to,
        or ``None``."""
        if self._cursor is None:
            return None
        i = self._cursor - self._base()
        return i if 0 <= i < len(self.buffer) else None

    @property
    def match_count(self) -> int:
        """Lines in the view whose text as shown (:meth:`shown_text`) contains
        :attr:`search_term` (case-insensitive)."""
        return len(self._matches)

    @property
    def match_index(self) -> int | None:
        """1-based number of the current match (the line ``n``/``N`` went to) among
        :attr:`match_count`; ``None`` when the cursor is on no match."""
        c = self._cursor
        if c is None:
            return None
        i = bisect.bisect_left(self._matches, c)
        return i + 1 if i < len(self._matches) and self._matches[i] == c else None

    @property
    def error_lines(self) -> list[int]:
        """Buffer indices (current) of the error-like lines ``e``/``E`` jump between and the
        pane colours (:func:`~console.jobs.logtext.is_error_like`)."""
        return self.buffer.errors()

    def visible_lines(self) -> list[DisplayLine]:
        """The buffer lines currently on screen, top to bottom (each once, even if wrapped)."""
        height = self.scrollable_content_region.height
        top = self._top_row()
        out: list[DisplayLine] = []
        seen: set[int] = set()
        for row in range(top, top + height):
            found = self._locate(row)
            if found is None:
                break
            a = self._view[found[0]]
            if a not in seen and (line := self._line(a)) is not None:
                seen.add(a)
                out.append(line)
        return out

    # -- syncing with the buffer ---------------------------------------------------------------

    def _base(self) -> int:
        """Absolute position of buffer index 0."""
        return self.buffer.total - len(self.buffer)

    def _line(self, a: int) -> DisplayLine | None:
        """Line at absolute position ``a`` as of the last sync (see the module docstring)."""
        return self.buffer.peek(a - self._base())

    def shown_text(self, line: DisplayLine) -> str:
        """The line as the pane shows it, without styles: timestamp (when shown), tag (in a
        node's or the merged pane) and text. What ``/`` search and the ``&`` filter match,
        so ``r0]`` or ``[n0 r0]`` find what the tags on screen say."""
        return self._shown_row(line.ts_ns, line.node_rank, line.rank, line.plain)

    def _shown_row(self, ts_ns: int, node_rank: int, rank: int | None, plain: str) -> str:
        prefix = f"{format_ts(ts_ns)} " if self._timestamps else ""
        if self._tagged():
            prefix += f"[n{node_rank}] " if rank is None else f"[n{node_rank} r{rank}] "
        return prefix + plain if prefix else plain

    def _found(self, line: DisplayLine | None) -> bool:
        """Whether the search term is in the line as shown."""
        needle = self._search.lower()
        return bool(needle) and line is not None and needle in self.shown_text(line).lower()

    def _tagged(self) -> bool:
        """Lines carry their tag: in the merged pane and in a node's pane, not in a rank's."""
        return self.merged or (self.buffer.node is not None and self.buffer.rank is None)

    def _tag(self, line: DisplayLine) -> str:
        """The dimmed prefix: the line's tag as ``logs`` prints it (``[n0 r1]``, ``[n0]`` for
        the node's own lines: torchrun's, the gang watcher's; :func:`~console.jobs.logs
        .line_tag`) in the merged and node panes; nothing in a rank pane."""
        return line.tag() if self._tagged() else ""

    def _prefix_width(self, line: DisplayLine) -> int:
        width = _TS_WIDTH if self._timestamps else 0
        tag = self._tag(line)
        if tag:
            width += len(tag) + 1
        return width

    def _height(self, line: DisplayLine, width: int) -> int:
        cells = self._prefix_width(line) + cell_len(line.plain[:MAX_RENDER_CHARS])
        return max(1, -(-cells // max(1, width)))

    def _scheduled_sync(self) -> None:
        self._sync_scheduled = False
        self._sync()

    def _sync(self) -> bool:
        """Bring the view up to date with the buffer (incrementally) and repaint; whether
        it had changed."""
        buf = self.buffer
        top_before = self._top_line()
        # lines a merge of late lines may move: find them again by their seq afterwards
        marks = {
            a: line.seq
            for a in (top_before, self._cursor)
            if a is not None and (line := self._line(a)) is not None
        }
        buf.settle()
        if buf.version == self._synced_version:
            return False
        self.syncs += 1
        base, end = self._base(), buf.total
        moved = buf.rewritten_since(self._synced_version)
        view = self._view
        # evicted (or cleared) lines leave the front of the view
        gone = bisect.bisect_left(view, base)
        removed_rows = gone
        if gone:
            if self._rows is not None:
                removed_rows = self._rows[gone] - self._rows[0]
                del self._rows[:gone]
            del view[:gone]
        # re-check the tail (in-place replacements), then add the new lines
        start = max(base, self._synced_end - RESCAN_TAIL)
        if moved is not None:
            start = max(base, min(start, moved))
        cut = bisect.bisect_left(view, start)
        del view[cut:]
        if self._rows is not None:
            del self._rows[cut + 1 :]
        matches = self._matches
        del matches[: bisect.bisect_left(matches, base)]
        del matches[bisect.bisect_left(matches, start) :]
        width = self._rows_width
        needle, invert = parse_filter(self._filter)
        search = self._search.lower()
        shown = self._shown_row
        widest = self._max_width
        wrapped = self._rows
        a = start
        # raw rows (fields as DisplayLine: 1 node, 2 rank, 3 ts, 5 plain, 8 cells): thousands
        # a second pass here; the text as shown is built only while a filter or search is on
        for row in buf.rows(start - base, end - base):
            if row[8] > widest:
                widest = min(row[8], MAX_RENDER_CHARS)
            text = shown(row[3], row[1], row[2], row[5]).lower() if needle or search else ""
            if not needle or (needle in text) != invert:
                view.append(a)
                if search and search in text:
                    matches.append(a)
                if wrapped is not None:
                    wrapped.append(wrapped[-1] + self._height(DisplayLine._make(row), width))
            a += 1
        self._max_width = widest
        self._synced_version, self._synced_base, self._synced_end = buf.version, base, end
        if moved is not None and any(a >= moved for a in marks):
            # late lines landed before the top line or the cursor: keep them on the same line
            found = self._find_seqs(set(marks.values()), moved)
            new = {a: found.get(seq) for a, seq in marks.items()}
            if self._cursor is not None and self._cursor >= moved:
                self._cursor = new.get(self._cursor)
            if top_before is not None and top_before >= moved and new.get(top_before) is not None:
                self._after_view_change(new[top_before], None)
                return True
        self._after_view_change(top_before, removed_rows)
        return True

    def _find_seqs(self, seqs: set[int], start: int) -> dict[int, int]:
        """Absolute positions (at or after ``start``) of the lines with these ``seq`` s."""
        base = self._base()
        found: dict[int, int] = {}
        for a, row in enumerate(self.buffer.rows(start - base, len(self.buffer)), start):
            if row[0] in seqs:
                found[row[0]] = a
        return found

    def _rebuild(self, *, measure: bool = False) -> None:
        """Recompute the view from scratch (first sync, or the filter changed); ``measure``
        also recomputes the widest line (O(lines), about 0.2 s for 100,000)."""
        top_before = self._top_line()
        buf = self.buffer
        buf.settle()
        base = self._base()
        rows = buf.rows(0, len(buf))
        needle, invert = parse_filter(self._filter)
        if needle:
            shown = self._shown_row
            self._view = [
                base + i
                for i, r in enumerate(rows)
                if (needle in shown(r[3], r[1], r[2], r[5]).lower()) != invert
            ]
        else:
            self._view = list(range(base, base + len(rows)))
        self._find_matches()
        if measure:  # rows carry their width in cells (field 8)
            self._max_width = min(max((r[8] for r in rows), default=0), MAX_RENDER_CHARS)
        self._rebuild_rows()
        self._synced_version, self._synced_base, self._synced_end = buf.version, base, buf.total
        self._after_view_change(top_before, None)

    def _find_matches(self) -> None:
        """Recompute :attr:`_matches` over the whole view (the search term changed)."""
        search = self._search.lower()
        if not search:
            self._matches = []
            return
        base = self._base()
        rows = self.buffer.rows(0, len(self.buffer))
        shown = self._shown_row
        self._matches = [
            a
            for a in self._view
            if search in shown((r := rows[a - base])[3], r[1], r[2], r[5]).lower()
        ]

    def _rebuild_rows(self) -> None:
        if not self._wrap:
            self._rows = None
            return
        width = max(1, self.scrollable_content_region.width)
        self._rows_width = width
        rows = [0]
        for a in self._view:
            line = self._line(a)
            rows.append(rows[-1] + (self._height(line, width) if line is not None else 1))
        self._rows = rows

    def _after_view_change(self, top_before: int | None, removed_rows: int | None) -> None:
        """Resize the virtual canvas, then (paused) keep the same top line; following, the
        canvas stays one screen tall and the pane only repaints (see the module docstring)."""
        width = self._content_width()
        if self._following:
            # the canvas widens in steps (a layout pass per step, not per repaint); nothing
            # scrolls vertically
            size = Size(-(-width // GROW_COLUMNS) * GROW_COLUMNS, self.container_size.height)
            if size != self.virtual_size:
                self.virtual_size = size
        else:
            size = Size(width, self.row_count)
            if size != self.virtual_size:
                self.virtual_size = size
            if removed_rows is not None:
                self.scroll_to(y=max(0, self.scroll_y - removed_rows), animate=False, force=True)
            elif top_before is not None:
                self.scroll_to(
                    y=self._row_of(self._index_at_or_after(top_before)), animate=False, force=True
                )
        self._update_title()
        self.refresh()

    # -- rows <-> lines ------------------------------------------------------------------------

    def _locate(self, row: int) -> tuple[int, int] | None:
        """Screen row of the virtual canvas -> (view index, row within the wrapped line)."""
        if row < 0:
            return None
        rows = self._rows
        if rows is None:
            return (row, 0) if row < len(self._view) else None
        target = rows[0] + row
        if target >= rows[-1]:
            return None
        vi = bisect.bisect_right(rows, target) - 1
        return vi, target - rows[vi]

    def _row_of(self, vi: int) -> int:
        rows = self._rows
        if rows is None:
            return vi
        vi = max(0, min(vi, len(rows) - 1))
        return rows[vi] - rows[0]

    def _index_at_or_after(self, a: int) -> int:
        return bisect.bisect_left(self._view, a)

    def _top_line(self) -> int | None:
        found = self._locate(self._top_row())
        return self._view[found[0]] if found is not None else None

    # -- rendering -----------------------------------------------------------------------------

    def notify_style_update(self) -> None:
        """Styles changed: cached strips carry old colours."""
        super().notify_style_update()
        self._strips.clear()
        self._framed.clear()
        self._segment_styles.clear()

    def on_resize(self, event: events.Resize) -> None:
        """Wrap mode: row heights depend on the width. Following: stay at the bottom (also
        when a hidden pane is shown again)."""
        if self._wrap and self.scrollable_content_region.width != self._rows_width:
            top = self._top_line()
            self._rebuild_rows()
            self._after_view_change(top, None)
        elif self._following:
            self._after_view_change(None, None)  # the pinned canvas is one screen tall

    def _line_text(self, line: DisplayLine, is_cursor: bool) -> Text:
        raw = line.text if len(line.text) <= MAX_RENDER_CHARS else line.text[:MAX_RENDER_CHARS]
        body = Text.from_ansi(raw.translate(_CONTROL), no_wrap=True, end="")
        if line.error:  # under the line's own colours
            body.stylize_before(self._styles()["logpane--error"])
        parts: list[Text] = []
        if self._timestamps:
            parts.append(
                Text(
                    format_ts(line.ts_ns) + " ", self.get_component_rich_style("logpane--timestamp")
                )
            )
        tag = self._tag(line)
        if tag:
            parts.append(Text(tag + " ", self.get_component_rich_style("logpane--tag")))
        text = Text.assemble(*parts, body, no_wrap=True, end="") if parts else body
        text.stylize_before(self._styles()["base"])
        if is_cursor:  # the line's background, over its own colours' (not its colours)
            text.stylize(self._styles()["cursor"])
        if self._search:  # in the text as shown, prefix included (what the search matched)
            match = "logpane--match-current" if is_cursor else "logpane--match"
            text.highlight_words(
                [self._search], self.get_component_rich_style(match), case_sensitive=False
            )
        return text

    def _styles(self) -> dict[str, Style]:
        """The pane's own style (``"base"``: computed from its ancestors, too slow to ask
        per row) and the prefixes' styles on it, until the styles change."""
        styles = self._segment_styles
        if not styles:
            base = self.rich_style
            styles["base"] = base
            for name in ("logpane--timestamp", "logpane--tag", "logpane--error"):
                styles[name] = base + self.get_component_rich_style(name)
            styles["cursor"] = Style(
                bgcolor=self.get_component_rich_style("logpane--cursor").bgcolor
            )
        return styles

    def _plain_segments(self, line: DisplayLine) -> list[Segment] | None:
        """The segments of a line of printable ASCII, coloured or not, with no search match
        (one cell per character, so a window of it is a string slice): most lines of a busy
        log, built without Rich's markup and per-character ANSI decoding; ``None`` for any
        other line (it takes :meth:`_line_text`, which gives the same result for these)."""
        raw = line.text
        if len(raw) > MAX_RENDER_CHARS:
            return None
        coloured = not (raw.isascii() and raw.isprintable())
        if coloured and not (
            "\x1b" in raw and line.plain.isascii() and line.plain.isprintable()
        ):  # shaped lines keep no escape but SGR: without them, printable ASCII
            return None
        if self._found(line):
            return None
        styles = self._styles()
        segments: list[Segment] = []
        if self._timestamps:
            segments.append(Segment(format_ts(line.ts_ns) + " ", styles["logpane--timestamp"]))
        tag = self._tag(line)
        if tag:
            segments.append(Segment(tag + " ", styles["logpane--tag"]))
        body = styles["logpane--error" if line.error else "base"]
        if coloured:
            segments += sgr_segments(raw, body)
        else:
            segments.append(Segment(raw, body))
        return segments

    def _render_row(
        self, line: DisplayLine, is_cursor: bool, start: int, span: int, width: int, style: Style
    ) -> Strip:
        """Cells ``[start, start + span)`` of the line as shown (prefix included), padded or
        cut to ``width`` cells."""
        segments = None if is_cursor else self._plain_segments(line)
        if segments is not None:
            return ascii_window(segments, start, span, width, style)
        text = self._line_text(line, is_cursor)
        if is_cursor:
            style = style + self._styles()["cursor"]  # the whole row, to the pane's edge
        full = Strip(text.render(self.app.console), text.cell_len)
        return full.crop_extend(start, start + span, style).adjust_cell_length(width, style)

    def render_lines(self, crop: Region) -> list[Strip]:
        """Textual's render of the rows in ``crop``: the scroll offset, the top row and the
        width are read once for all of them (each read walks Textual's reactives and
        regions)."""
        self._row_ctx = (
            self.scroll_offset.x,
            self._top_row(),
            self.scrollable_content_region.width,
        )
        try:
            framed = self._framed_lines(crop)
            return framed if framed is not None else super().render_lines(crop)
        finally:
            self._row_ctx = None

    def _framed_lines(self, crop: Region) -> list[Strip] | None:
        """The rows in ``crop`` as Textual's ``StylesCache.render_line`` draws a widget with a
        border and nothing else (no padding, outline, tint, hatch or opacity), with the
        border rows from Textual itself and each content row framed once per content strip:
        a following pane's rows move up a row at every frame, so Textual's per-row cache
        (by ``y``) misses on every row while these hit. ``None`` when the pane's styles use
        anything else (Textual renders it then). Equality with Textual's render is tested
        (tests/app/test_logpane.py)."""
        styles = self.styles
        (top, _), (right, right_color), (bottom, _), (left, left_color) = styles.border
        outline = styles.outline
        if (
            self.BLANK
            or not (top and right and bottom and left)
            or any(edge for edge, _ in outline)
            or styles.padding != (0, 0, 0, 0)
            or styles.text_opacity != 1.0
            or self.opacity != 1.0
            or styles.tint.a
            or (styles.has_rule("hatch") and styles.hatch != "none")
        ):
            return None
        width, height = self.region.size
        content_width, content_height = self.content_region.size
        base_background, background = self.background_colors
        inner = TextualStyle(background=base_background + background)
        outer = TextualStyle(background=base_background)
        ends = (
            get_box(left, inner, outer, TextualStyle(foreground=base_background + left_color))[1][
                0
            ],
            get_box(right, inner, outer, TextualStyle(foreground=base_background + right_color))[1][
                2
            ],
        )
        if ends != self._frame_ends:
            self._framed.clear()
            self._frame_ends = ends
        pad = inner.rich_style
        filters = tuple(self.get_line_filters())
        framed_cache = self._framed
        if framed_cache.maxsize < 2 * height:  # a zoomed pane on a tall terminal
            framed_cache.grow(2 * height)
        x1, x2 = crop.column_span
        whole = (x1, x2) == (0, width)
        out: list[Strip] = []
        for y in crop.line_range:
            if y == 0 or y == height - 1:  # the border rows, titles included: Textual's own
                strip = self._border_row(y, y == 0, width, base_background, background, filters)
            else:
                if y - 1 < content_height:
                    content = self.render_line(y - 1)
                else:
                    content = Strip.blank(content_width, pad)
                hit = framed_cache.get(id(content))
                if hit is not None and hit[0] is content and hit[1] == filters:
                    strip = hit[2]
                else:  # framed and filtered at once: only the result is kept
                    body = content.adjust_cell_length(content_width, pad)
                    strip = Strip([ends[0], *body, ends[1]], width)
                    for line_filter in filters:
                        strip = strip.apply_filter(line_filter, background)
                    framed_cache[id(content)] = (content, filters, strip)
            out.append(strip if whole else strip.crop(x1, x2))
        return out

    def _border_row(
        self,
        y: int,
        top: bool,
        width: int,
        base_background: Color,
        background: Color,
        filters: tuple[LineFilter, ...],
    ) -> Strip:
        """Border row ``y`` (the top or the bottom one) as Textual draws it, kept while
        everything it is drawn from is unchanged: the edge, the title or subtitle (text and
        spans) with their colours and alignment, the backgrounds, the width, the line
        filters and the ANSI theme. Textual's own render of one such row costs about as
        much as drawing ten content rows, and a frame drew 16 of them again (the pane
        repaints whole while it follows)."""
        styles = self.styles
        if top:
            label = self._border_title
            label_style = self._get_title_style_information(base_background)
            edge, align = styles.border_top, styles.border_title_align
        else:
            label = self._border_subtitle
            label_style = self._get_subtitle_style_information(base_background)
            edge, align = styles.border_bottom, styles.border_subtitle_align
        key = (
            top,
            width,
            edge,
            align,
            None if label is None else (label.plain, tuple(label.spans)),
            label_style,
            base_background,
            background,
            filters,
            id(self.app.ansi_theme),
        )
        rows = self._border_rows
        strip = rows.get(key)
        if strip is None:
            strip = super().render_lines(Region(0, y, width, 1))[0]
            if len(rows) >= BORDER_ROWS:
                rows.clear()
            rows[key] = strip
        return strip

    def render_line(self, y: int) -> Strip:
        """Textual's Line API: row ``y`` of the visible region (only visible rows are asked).

        Rows are cached as shown (window and width in the key), not as whole lines: a
        whole line's strip would keep Textual's caches of its crops alive with it."""
        self.lines_rendered += 1
        ctx = self._row_ctx
        if ctx is None:
            ctx = (self.scroll_offset.x, self._top_row(), self.scrollable_content_region.width)
        scroll_x, scroll_y, width = ctx
        style = self._styles()["base"]
        found = self._locate(scroll_y + y)
        if found is None:
            said = self._empty_text or ("loading…" if self._loading else None)
            if not self._view and said:  # wrapped at the pane's width
                rows = textwrap.wrap(said, max(8, width)) or [""]
                if scroll_y + y < len(rows):
                    text = Text(rows[scroll_y + y], style=self._styles()["logpane--tag"])
                    return Strip(text.render(self.app.console)).adjust_cell_length(width, style)
            return Strip.blank(width, style)
        vi, sub = found
        a = self._view[vi]
        line = self._line(a)
        if line is None:  # evicted since the last sync
            return Strip.blank(width, style)
        if self._wrap:
            span = max(1, self._rows_width)
            start = sub * span
        else:
            span, start = width, scroll_x
        is_cursor = a == self._cursor
        key = (line.seq, self._timestamps, self.merged, self._search, is_cursor, start, span, width)
        strip = self._strips.get(key)
        if strip is None:
            strip = self._render_row(line, is_cursor, start, span, width, style)
            self._strips[key] = strip
        return strip

    def _update_title(self) -> None:
        parts = [self.title]
        n = self.new_lines
        if not self._ended:
            parts.append("following" if self._following else f"paused +{n}")
        elif not self._following:
            parts.append("paused")
        total = len(self.buffer)
        if self._loading and not total:
            parts.append("loading…")
        elif self._filter and parse_filter(self._filter)[0]:
            parts.append(f"{len(self._view):,}/{total:,} lines")
        else:
            parts.append(f"{total:,} lines" + (" · loading…" if self._loading else ""))
        if self._exit_code is not None:
            parts.append(f"exited {self._exit_code}")
        elif self._ended:
            parts.append("ended")
        self.border_title = Content(" · ".join(parts))
        badges = []
        if not self._following and n:
            badges.append(f"+{n} new lines")
        if self._search:
            found, i = len(self._matches), self.match_index
            badges.append(
                f"/{self._search} "
                + (
                    f"{i}/{found:,}"
                    if i is not None
                    else f"{found:,} found"
                    if found
                    else "not found"
                )
            )
        if self._filter:
            badges.append(f"&{self._filter}")
        self.border_subtitle = Content(" ".join(badges)) if badges else None

    # -- follow --------------------------------------------------------------------------------

    def _set_following(self, following: bool) -> None:
        if following == self._following:
            return
        top = self._top_row()  # the rows shown, kept when the canvas changes
        self._following = following
        self.set_class(following, "-following")
        self._paused_end = None if following else self._synced_end
        if following:
            self._cursor = None
            self._strips.clear()
        else:
            # paused: the canvas becomes the whole view, scrolled to what was shown
            exact = Size(self._content_width(), self.row_count)
            if self.virtual_size != exact:
                self.virtual_size = exact
            self.scroll_to(y=top, animate=False, force=True)
        self._after_view_change(None, None)
        self.post_message(self.FollowChanged(self, following))

    def _follow_from_position(self) -> None:
        """After a user scroll: following exactly when the view is at the bottom."""
        if not self._following:
            self._set_following(self.scroll_y >= self.max_scroll_y)

    def _scroll_rows_to(self, y: float) -> None:
        """Show the view from row ``y`` (clamped): above the bottom pauses follow, at the
        bottom resumes it."""
        if self._following:
            if y >= self._top_row():
                return  # at the bottom already
            self._set_following(False)
        self.scroll_to(y=max(0.0, min(y, self.max_scroll_y)), animate=False, force=True)
        self._follow_from_position()

    def on_mount(self) -> None:
        """First sync (the buffer may already hold lines)."""
        self._rebuild(measure=True)

    def action_follow(self) -> None:
        """``G``/``end``: jump to the last line and resume follow."""
        self._sync()
        self._set_following(True)

    def action_scroll_up(self) -> None:
        """``up``: one row up (pauses follow)."""
        self._scroll_rows_to(self._top_row() - 1)

    def action_scroll_down(self) -> None:
        """``down``: one row down (reaching the bottom resumes follow)."""
        self._scroll_rows_to(self._top_row() + 1)

    def action_page_up(self) -> None:
        """``pageup``: one page up (pauses follow)."""
        self._scroll_rows_to(self._top_row() - max(1, self.scrollable_content_region.height))

    def action_page_down(self) -> None:
        """``pagedown``: one page down."""
        self._scroll_rows_to(self._top_row() + max(1, self.scrollable_content_region.height))

    def action_scroll_home(self) -> None:
        """``home``: first line (pauses follow)."""
        self._scroll_rows_to(0)

    def action_scroll_left(self) -> None:
        """``left``: 8 columns left (long lines, no wrap)."""
        self.scroll_to(x=max(0.0, self.scroll_x - 8), animate=False, force=True)

    def action_scroll_right(self) -> None:
        """``right``: 8 columns right."""
        self.scroll_to(x=min(self.scroll_x + 8, self.max_scroll_x), animate=False, force=True)

    def action_scroll_end(self) -> None:
        """Same as ``G``."""
        self.action_follow()

    # Textual calls the handler of every class in the MRO, this one's first: each prevents the
    # base's (Widget's, which animates) and scrolls itself without animation, so the position
    # is final when follow is decided.

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        """The wheel up: pauses follow."""
        event.prevent_default()
        self._wheel(event, -1)

    def on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        """The wheel down: reaching the bottom resumes follow."""
        event.prevent_default()
        self._wheel(event, 1)

    def _wheel(self, event: events.MouseScrollUp | events.MouseScrollDown, step: int) -> None:
        """One wheel step as Textual's widgets take it (the app's scroll sensitivity in rows,
        in columns with ctrl or shift); the event goes no further when the pane moved."""
        before = (self.scroll_offset, self._top_row())
        if event.ctrl or event.shift:
            if self.allow_horizontal_scroll:
                self.scroll_to(
                    x=self.scroll_target_x + step * self.app.scroll_sensitivity_x, animate=False
                )
        elif self._following or self.allow_vertical_scroll:
            self._scroll_rows_to(self._top_row() + step * self.app.scroll_sensitivity_y)
        if (self.scroll_offset, self._top_row()) != before:
            event.stop()

    def on_scroll_to(self, message: ScrollTo) -> None:
        # the scrollbar was dragged
        if message.y is not None:
            message.stop()
            message.prevent_default()
            if message.x is not None:
                self.scroll_to(x=message.x, animate=False, force=True)
            self._scroll_rows_to(message.y)

    def on_scroll_up(self, event: ScrollUp) -> None:
        # a click on the vertical scrollbar's track above the thumb
        event.stop()
        event.prevent_default()
        self.action_page_up()

    def on_scroll_down(self, event: ScrollDown) -> None:
        event.stop()
        event.prevent_default()
        self.action_page_down()

    # -- search, filter, errors ----------------------------------------------------------------

    def action_search(self) -> None:
        """``/``: open the search prompt."""
        self._open_prompt("search", self._search)

    def action_filter(self) -> None:
        """``&``: open the filter prompt."""
        self._open_prompt("filter", self._filter)

    def _open_prompt(self, kind: PromptKind, value: str) -> None:
        if self._prompt is not None:
            self._prompt.remove()
        anchor = self.prompt_anchor
        if anchor is None or not anchor.is_mounted:
            anchor = self
        parent = anchor.parent
        if not isinstance(parent, Widget):
            parent = self.screen
        self._prompt = LogPrompt(self, kind, value)
        parent.mount(self._prompt, after=anchor)
        self._prompt.focus()

    def _prompt_changed(self, kind: PromptKind, value: str) -> None:
        if kind == "search":
            self.set_search(value, jump=False)
        else:
            self.set_filter(value)

    def _prompt_closed(
        self, prompt: LogPrompt, kind: PromptKind, value: str, *, accepted: bool
    ) -> None:
        self._prompt_changed(kind, value)
        if prompt is self._prompt:
            self._prompt = None
        prompt.remove()
        self.focus()
        if accepted and kind == "search" and value:
            self.search_next()

    def set_search(self, term: str, *, jump: bool = True) -> None:
        """Highlight ``term`` (case-insensitive substring of the line as shown,
        :meth:`shown_text`; "" clears) and, with ``jump``, go to the next match."""
        if term != self._search:
            self._sync()
            self._search = term
            self._find_matches()
            self._strips.clear()
            self._update_title()
            self.refresh()
        if jump and term:
            self.search_next()

    def set_filter(self, text: str) -> None:
        """Show only lines whose text as shown (:meth:`shown_text`: tag and timestamp
        included) contains ``text`` (case-insensitive); a leading ``!`` inverts; "" (or "!")
        shows every line."""
        if text == self._filter:
            return
        self._filter = text
        self._rebuild()

    def set_wrap(self, wrap: bool) -> None:
        """Wrap long lines at the pane's width (else scroll horizontally)."""
        if wrap == self._wrap:
            return
        self._wrap = wrap
        self.set_class(wrap, "-wrap")
        if wrap:
            self.scroll_to(x=0, animate=False, force=True)
        top = self._top_line()
        self._rebuild_rows()
        self._after_view_change(top, None)

    def set_timestamps(self, show: bool) -> None:
        """Prefix lines with their local ``HH:MM:SS.mmm`` timestamp."""
        if show == self._timestamps:
            return
        self._sync()
        self._timestamps = show
        if parse_filter(self._filter)[0]:
            self._rebuild()  # the filter matches the text as shown, timestamps included
            return
        self._find_matches()
        top = self._top_line()
        self._rebuild_rows()
        self._after_view_change(top, None)

    def action_toggle_wrap(self) -> None:
        """``w``."""
        self.set_wrap(not self._wrap)

    def action_toggle_timestamps(self) -> None:
        """``t``."""
        self.set_timestamps(not self._timestamps)

    def action_clear_search(self) -> None:
        """``escape``: clear the search highlight (else let escape through)."""
        if not self._search:
            raise SkipAction()
        self.set_search("")

    def search_next(self) -> bool:
        """Go to the next line containing the search term (wraps around). False if none."""
        self._sync()
        found = set(self._matches)
        return bool(found) and self._step(+1, found.__contains__)

    def search_prev(self) -> bool:
        """Go to the previous line containing the search term (wraps around)."""
        self._sync()
        found = set(self._matches)
        return bool(found) and self._step(-1, found.__contains__)

    def error_next(self) -> bool:
        """Go to the next error-like line (``logtext.is_error_like``), wrapping around."""
        self._sync()
        base = self._base()
        errors = {base + i for i in self.buffer.errors()}
        return self._step(+1, errors.__contains__)

    def error_prev(self) -> bool:
        """Go to the previous error-like line, wrapping around."""
        self._sync()
        base = self._base()
        errors = {base + i for i in self.buffer.errors()}
        return self._step(-1, errors.__contains__)

    def action_search_next(self) -> None:
        """``n``."""
        if not self.search_next():
            self.app.bell()

    def action_search_prev(self) -> None:
        """``N``."""
        if not self.search_prev():
            self.app.bell()

    def action_error_next(self) -> None:
        """``e``."""
        if not self.error_next():
            self.app.bell()

    def action_error_prev(self) -> None:
        """``E``."""
        if not self.error_prev():
            self.app.bell()

    def _step(self, direction: int, hit: Callable[[int], bool]) -> bool:
        """Move the cursor to the next view line (in ``direction``) for which ``hit`` holds.

        Starts after the cursor, or, without one, from the top (forward) / bottom (backward)
        visible line inclusive. Wraps around once. Pauses follow.
        """
        self._sync()
        view = self._view
        n = len(view)
        if not n:
            return False
        if (
            self._cursor is not None
            and (ci := bisect.bisect_left(view, self._cursor)) < n
            and view[ci] == self._cursor
        ):
            anchor = ci
        else:
            top = self._locate(self._top_row())
            top_vi = top[0] if top is not None else n - 1
            if direction > 0:
                anchor = top_vi - 1
            else:
                bottom = self._locate(self._top_row() + self.scrollable_content_region.height - 1)
                anchor = (bottom[0] if bottom is not None else n - 1) + 1
        for k in range(1, n + 1):
            vi = (anchor + direction * k) % n
            if hit(view[vi]):
                self._goto(vi)
                return True
        return False

    def _goto(self, vi: int) -> None:
        self._cursor = self._view[vi]
        self._set_following(False)
        self._strips.clear()
        height = max(1, self.scrollable_content_region.height)
        row = self._row_of(vi)
        self.scroll_to(
            y=max(0, min(row - height // 3, self.max_scroll_y)), animate=False, force=True
        )
        self._update_title()
        self.refresh()

    def action_save(self) -> None:
        """``ctrl+s``: ask the owner to save the whole log."""
        self.post_message(self.SaveRequested(self))
