"""Tiled log panes of a job: one per node, plus an optional merged "all ranks" pane.

The owner creates one :class:`~console.jobs.logbuffer.LogBuffer` per node (``node=`` filter)
and, if it wants the merged view, one more without a filter (``ordered=True``: in time
order, as ``logs`` prints it); it appends every
:class:`~console.jobs.logs.JobLogLine` to each buffer that :meth:`accepts` it and then calls
:meth:`LogPanes.notify_appended`. A node that reconnects keeps its buffer, hence its pane.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.message import Message
from textual.widget import Widget

from console.app.widgets.logpane import REFRESH_INTERVAL_S, LogPane
from console.jobs.logbuffer import LogBuffer

BUSY_LINES = 500
"""New display lines (all panes) in one tick beyond which the next tick waits twice as long."""

WIDE_COLUMNS = 150
"""From this many terminal columns on, 5 or more panes are tiled in 3 columns (else 2)."""


def grid_shape(count: int, width: int) -> tuple[int, int]:
    """(columns, rows) for ``count`` visible panes in a container ``width`` cells wide.

    1 -> 1x1, 2 -> side by side, 3-4 -> 2x2, 5-8 -> 2 or 3 columns by width, more -> 3 or 4.
    """
    if count <= 1:
        return 1, 1
    if count == 2:
        return 2, 1
    if count <= 4:
        return 2, 2
    if count <= 8:
        cols = 3 if width >= WIDE_COLUMNS else 2
    else:
        cols = 4 if width >= WIDE_COLUMNS else 3
    return cols, math.ceil(count / cols)


class _Tile(Vertical):
    """One grid cell: a pane (its search/filter prompt opens under the whole grid)."""

    DEFAULT_CSS = """
    _Tile { height: 1fr; width: 1fr; }
    """


class LogPanes(Widget):
    """Tiles :class:`LogPane` s; zoom one, cycle focus, switch to the merged pane.

    Args:
        panes: (title, buffer) per node, in order.
        merged: the buffer of the merged "all ranks" view (lines tagged ``[n0 r1]``),
            or ``None`` (``a`` then only rings the bell); :meth:`set_merged` can add it later.
        merged_title: its border title.
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("z", "zoom", "Zoom", id="logs.zoom"),
        Binding("a", "toggle_merged", "All ranks", id="logs.merged"),
        Binding("tab", "focus_pane(1)", "Next pane", id="logs.pane_next"),
        Binding("shift+tab", "focus_pane(-1)", "Prev pane", show=False, id="logs.pane_prev"),
    ]

    DEFAULT_CSS = """
    LogPanes {
        layout: grid;
        grid-size: 1 1;
        grid-columns: 1fr;
        grid-rows: 1fr;
        height: 1fr;
    }
    """

    @dataclass
    class ZoomChanged(Message):
        """``z``: ``pane`` is now zoomed (the others hidden), or ``None`` when unzoomed."""

        panes: LogPanes
        pane: LogPane | None

        @property
        def control(self) -> LogPanes:
            """The container."""
            return self.panes

    @dataclass
    class MergedToggled(Message):
        """``a``: the merged all-ranks pane is now shown (``True``) or the per-node tiles."""

        panes: LogPanes
        shown: bool

        @property
        def control(self) -> LogPanes:
            """The container."""
            return self.panes

    def __init__(
        self,
        panes: Iterable[tuple[str, LogBuffer]] = (),
        *,
        merged: LogBuffer | None = None,
        merged_title: str = "all ranks",
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self._panes = [self._new_pane(buf, title) for title, buf in panes]
        self._merged = (self._new_pane(merged, merged_title, merged=True)
                        if merged is not None else None)
        self._zoomed: LogPane | None = None
        self._merged_shown = False
        self._sync_scheduled = False
        self._interval = REFRESH_INTERVAL_S
        self._synced_total = 0

    def _new_pane(self, buffer: LogBuffer, title: str, *, merged: bool = False) -> LogPane:
        pane = LogPane(buffer, title, merged=merged)
        pane.prompt_anchor = self  # its search/filter prompt spans the grid, under it
        return pane

    def compose(self) -> ComposeResult:
        """One tile per node pane, then the (hidden) merged pane's tile."""
        for pane in self._panes:
            yield _Tile(pane)
        if self._merged is not None:
            yield _Tile(self._merged)

    def on_mount(self) -> None:
        """Lay out the tiles."""
        self._relayout()

    def on_resize(self, event: events.Resize) -> None:
        """The column count depends on the width."""
        self._relayout()

    # -- owner API -----------------------------------------------------------------------------

    @property
    def panes(self) -> list[LogPane]:
        """The per-node panes, in order."""
        return list(self._panes)

    @property
    def merged_pane(self) -> LogPane | None:
        """The all-ranks pane, if a merged buffer was given."""
        return self._merged

    @property
    def zoomed(self) -> LogPane | None:
        """The zoomed pane, or ``None``."""
        return self._zoomed

    @property
    def merged_shown(self) -> bool:
        """Whether the all-ranks pane is shown instead of the per-node tiles."""
        return self._merged_shown

    @property
    def visible_panes(self) -> list[LogPane]:
        """Panes currently displayed, in tile order."""
        if self._zoomed is not None:
            return [self._zoomed]
        if self._merged_shown and self._merged is not None:
            return [self._merged]
        return list(self._panes)

    def pane_for(self, buffer: LogBuffer) -> LogPane | None:
        """The pane (per-node or merged) showing ``buffer``."""
        for pane in self._all():
            if pane.buffer is buffer:
                return pane
        return None

    def add_pane(self, title: str, buffer: LogBuffer) -> LogPane:
        """Add a node's pane (after the existing ones); returns it."""
        pane = self._new_pane(buffer, title)
        self._panes.append(pane)
        if self.is_mounted:
            before = self._merged.parent if self._merged is not None else None
            if isinstance(before, Widget):
                self.mount(_Tile(pane), before=before)
            else:
                self.mount(_Tile(pane))
            self._relayout()
        return pane

    def set_merged(self, buffer: LogBuffer, title: str = "all ranks") -> LogPane:
        """Give (or replace) the merged all-ranks buffer; returns its pane."""
        if self._merged is not None:
            if self._zoomed is self._merged:
                self._zoomed = None
            old_tile = self._merged.parent
            if isinstance(old_tile, Widget):
                old_tile.remove()
        self._merged = self._new_pane(buffer, title, merged=True)
        if self.is_mounted:
            self.mount(_Tile(self._merged))
            self._relayout()
        return self._merged

    def notify_appended(self) -> None:
        """Tell the panes their buffers may have changed. Cheap: every pane syncs at the
        next shared tick (at most one per :data:`~console.app.widgets.logpane.REFRESH_INTERVAL_S`),
        all in the same frame; an unchanged pane costs nothing."""
        if self._sync_scheduled or not self.is_mounted:
            return
        self._sync_scheduled = True
        self.set_timer(self._interval, self._sync_all)

    def _sync_all(self) -> None:
        self._sync_scheduled = False
        total = sum(p.buffer.total for p in self._all())
        # a flood (more than BUSY_LINES new lines since the last tick) repaints half as often:
        # nobody reads 5,000 lines a second, and the keys keep the time the repaints free
        busy = total - self._synced_total > BUSY_LINES
        self._interval = REFRESH_INTERVAL_S * (2 if busy else 1)
        self._synced_total = total
        self.flush()

    def flush(self) -> None:
        """Sync every pane with its buffer now."""
        for pane in self._all():
            if pane.is_mounted:
                pane.flush()

    # -- layout --------------------------------------------------------------------------------

    def _all(self) -> list[LogPane]:
        return self._panes + ([self._merged] if self._merged is not None else [])

    def _relayout(self) -> None:
        visible = self.visible_panes
        for pane in self._all():
            tile = pane.parent
            if isinstance(tile, Widget):
                tile.display = pane in visible
        cols, rows = grid_shape(len(visible), self.size.width or self.app.size.width)
        self.styles.grid_size_columns = cols
        self.styles.grid_size_rows = rows

    def _focused_pane(self) -> LogPane | None:
        node = self.screen.focused
        while node is not None and node is not self:
            if isinstance(node, LogPane):
                return node
            prompt_pane = getattr(node, "pane", None)
            if isinstance(prompt_pane, LogPane):
                return prompt_pane
            node = node.parent if isinstance(node.parent, Widget) else None
        return None

    def action_zoom(self) -> None:
        """``z``: show only the focused pane, or all again."""
        if self._zoomed is not None:
            self._zoomed = None
        else:
            visible = self.visible_panes
            pane = self._focused_pane()
            if pane not in visible:
                pane = visible[0] if visible else None
            if pane is None:
                return
            self._zoomed = pane
        self._relayout()
        (self._zoomed or self._focused_pane() or self.visible_panes[0]).focus()
        self.post_message(self.ZoomChanged(self, self._zoomed))

    def action_toggle_merged(self) -> None:
        """``a``: switch between the per-node tiles and the merged all-ranks pane."""
        if self._merged is None:
            self.app.bell()
            return
        self._zoomed = None
        self._merged_shown = not self._merged_shown
        self._relayout()
        visible = self.visible_panes
        if visible:
            visible[0].focus()
        self.post_message(self.MergedToggled(self, self._merged_shown))

    def action_focus_pane(self, step: int) -> None:
        """``tab``/``shift+tab``: focus the next/previous visible pane (wraps around); while
        zoomed, zoom the next/previous node's pane instead (page through nodes full size)."""
        if self._zoomed is not None and self._zoomed in self._panes and len(self._panes) > 1:
            i = self._panes.index(self._zoomed)
            self._zoomed = self._panes[(i + step) % len(self._panes)]
            self._relayout()
            self._zoomed.focus()
            self.post_message(self.ZoomChanged(self, self._zoomed))
            return
        visible = self.visible_panes
        if not visible:
            return
        current = self._focused_pane()
        i = visible.index(current) if current in visible else -step if step > 0 else 0
        visible[(i + step) % len(visible)].focus()
