"""Tiled log panes of a job: one per node, plus an optional merged "all ranks" pane.

The owner creates one :class:`~console.jobs.logbuffer.LogBuffer` per node (``node=`` filter)
and, if it wants the merged view, one more without a filter (``ordered=True``: in time
order, as ``logs`` prints it); it appends every
:class:`~console.jobs.logs.JobLogLine` to each buffer that :meth:`accepts` it and then calls
:meth:`LogPanes.notify_appended`. A node that reconnects keeps its buffer, hence its pane.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.message import Message
from textual.timer import Timer
from textual.widget import Widget

from console.app.widgets.frameclock import FrameClock
from console.app.widgets.logpane import LogPane
from console.app.widgets.rendermemo import RenderMemo
from console.jobs.logbuffer import LogBuffer

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


class _Tile(RenderMemo, Vertical):
    """One grid cell: a pane (its search/filter prompt opens under the whole grid)."""

    DEFAULT_CSS = """
    _Tile { height: 1fr; width: 1fr; }
    """


class LogPanes(RenderMemo, Widget):
    """Tiles :class:`LogPane` s; zoom one, cycle focus, switch to the merged pane or to one
    pane per rank.

    Layout keys (``z``, ``a``, ``tab``/``shift+tab``, :meth:`set_split`) only change what is
    to be shown; the grid is laid out and focus moved once, after the messages waiting have
    been handled and the screen refreshed (:meth:`_apply_layout`), so a burst of keys costs
    one layout, one focus change and one footer update, and no pane is ever recomposed: the
    per-rank panes are mounted (hidden) next to the per-node ones. Any other key first
    applies a pending layout, so it reaches the pane the layout keys before it focused.

    Args:
        panes: (title, buffer) per node, in order.
        merged: the buffer of the merged "all ranks" view (lines tagged ``[n0 r1]``),
            or ``None`` (``a`` then only rings the bell); :meth:`set_merged` can add it later.
        merged_title: its border title.
        rank_panes: (title, buffer) per rank, shown instead of the node panes after
            ``set_split(True)``; :meth:`add_pane` with ``rank=True`` adds more.
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("z", "zoom", "Zoom", id="logs.zoom"),
        Binding("a", "toggle_merged", "All ranks", id="logs.merged"),
        Binding("tab", "focus_pane(1)", "Next pane", show=False, id="logs.pane_next"),
        Binding("shift+tab", "focus_pane(-1)", "Prev pane", show=False, id="logs.pane_prev"),
    ]

    LAYOUT_BINDING_IDS: ClassVar[frozenset[str]] = frozenset(
        {"logs.zoom", "logs.merged", "logs.pane_next", "logs.pane_prev", "logs.split_ranks"}
    )
    """Bindings (here and the logs screen's ``r``) that only queue a layout change; any
    other key applies the pending one first."""

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
        rank_panes: Iterable[tuple[str, LogBuffer]] = (),
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self._panes = [self._new_pane(buf, title) for title, buf in panes]
        self._rank_panes = [self._new_pane(buf, title) for title, buf in rank_panes]
        self._merged = (
            self._new_pane(merged, merged_title, merged=True) if merged is not None else None
        )
        self._tiles: dict[LogPane, _Tile] = {}
        # what the keys asked for; _apply_layout() makes it so
        self._zoomed: LogPane | None = None
        self._merged_shown = False
        self._split = False
        self._focus_to: LogPane | None = None
        self._layout_due = False
        # as last applied
        self._shown: list[LogPane] = []
        self._shown_zoom: LogPane | None = None
        self._shown_merged = False
        self.layouts = 0
        """Layouts applied so far (one per burst of layout keys)."""
        self.clock = FrameClock()
        """When the shown panes repaint next (see :mod:`~console.app.widgets.frameclock`)."""
        self._frame_timer: Timer | None = None
        self._wanted_since: float | None = None  # when the first unshown change came
        self._frame_left: list[LogPane] | None = None  # panes the running frame has left
        self._frame_cost = 0.0  # UI thread CPU s the running frame's panes took so far
        self._step_cpu: float | None = None  # UI thread CPU time at the last pane's sync

    def _tile(self, pane: LogPane, shown: bool) -> _Tile:
        tile = self._tiles[pane] = _Tile(pane)
        tile.display = shown
        return tile

    def _new_pane(self, buffer: LogBuffer, title: str, *, merged: bool = False) -> LogPane:
        pane = LogPane(buffer, title, merged=merged)
        pane.prompt_anchor = self  # its search/filter prompt spans the grid, under it
        return pane

    def compose(self) -> ComposeResult:
        """One tile per node pane, per rank pane, then the merged pane's tile (all but the
        node panes' hidden until the layout shows them)."""
        visible = self.visible_panes
        for pane in self._all():
            yield self._tile(pane, pane in visible)

    def on_mount(self) -> None:
        """Lay out the tiles."""
        self._apply_layout()

    def on_resize(self, event: events.Resize) -> None:
        """The column count depends on the width."""
        self._apply_layout()

    def on_key(self, event: events.Key) -> None:
        """A key other than a layout key reaches the pane the pending layout focuses (the
        key's binding is looked up after this, from the focused widget)."""
        if self._layout_due and event.key not in self._layout_keys():
            self._apply_layout()

    def _layout_keys(self) -> set[str]:
        keymap = self.app._keymap  # binding id -> keys, from the user's config
        keys: set[str] = set()
        for node in (self, self.screen):
            for key, bindings in node._bindings.key_to_bindings.items():
                for b in bindings:
                    if b.id not in self.LAYOUT_BINDING_IDS:
                        continue
                    if b.id in keymap:
                        keys.update(k.strip() for k in keymap[b.id].split(","))
                    else:
                        keys.add(key)
        return keys

    # -- owner API -----------------------------------------------------------------------------

    @property
    def panes(self) -> list[LogPane]:
        """The per-node panes, in order."""
        return list(self._panes)

    @property
    def rank_panes(self) -> list[LogPane]:
        """The per-rank panes, in order."""
        return list(self._rank_panes)

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
    def split(self) -> bool:
        """Whether the per-rank panes are tiled instead of the per-node ones."""
        return self._split

    @property
    def layout_pending(self) -> bool:
        """Whether layout keys changed what is to be shown since the last layout."""
        return self._layout_due

    @property
    def visible_panes(self) -> list[LogPane]:
        """Panes to display, in tile order (once the pending layout, if any, is applied)."""
        if self._zoomed is not None:
            return [self._zoomed]
        if self._merged_shown and self._merged is not None:
            return [self._merged]
        return list(self._group())

    @property
    def shown_panes(self) -> list[LogPane]:
        """Panes displayed now (as of the last layout applied)."""
        return list(self._shown)

    def pane_for(self, buffer: LogBuffer) -> LogPane | None:
        """The pane (per-node, per-rank or merged) showing ``buffer``."""
        for pane in self._all():
            if pane.buffer is buffer:
                return pane
        return None

    def add_pane(
        self, title: str, buffer: LogBuffer, *, rank: bool = False, index: int | None = None
    ) -> LogPane:
        """Add a node's pane (or with ``rank``, a rank's) at ``index`` of its group (``None``:
        after the existing ones); returns it."""
        pane = self._new_pane(buffer, title)
        group = self._rank_panes if rank else self._panes
        at = len(group) if index is None else max(0, min(index, len(group)))
        group.insert(at, pane)
        if self.is_mounted:
            # tiles in the order of _all(): node panes, rank panes, merged
            later = (
                group[at + 1 :]
                + (self._rank_panes if not rank else [])
                + ([self._merged] if self._merged is not None else [])
            )
            before = next((self._tiles[p] for p in later if p in self._tiles), None)
            tile = self._tile(pane, False)
            if before is not None:
                self.mount(tile, before=before)
            else:
                self.mount(tile)
            self._apply_layout(focus=False)
        return pane

    def set_merged(self, buffer: LogBuffer, title: str = "all ranks") -> LogPane:
        """Give (or replace) the merged all-ranks buffer; returns its pane."""
        if self._merged is not None:
            if self._zoomed is self._merged:
                self._zoomed = None
            old_tile = self._tiles.pop(self._merged, None)
            if old_tile is not None:
                old_tile.remove()
            if self._merged in self._shown:
                self._shown.remove(self._merged)
        self._merged = self._new_pane(buffer, title, merged=True)
        if self.is_mounted:
            self.mount(self._tile(self._merged, False))
            self._apply_layout(focus=False)
        return self._merged

    def set_split(self, split: bool) -> None:
        """Tile one pane per rank (``True``) or one per node; unzooms, leaves the merged
        pane, focuses the first pane of the group."""
        self._split = split
        self._zoomed = None
        self._merged_shown = False
        group = self._group()
        self._request_layout(group[0] if group else None)

    def notify_appended(self) -> None:
        """Tell the panes their buffers may have changed. Cheap: the shown panes sync and
        repaint together at the next frame (:class:`~console.app.widgets.frameclock
        .FrameClock`: 10 a second at most, fewer while a flood would make the frames cost
        more than their budget, none just after a key); an unchanged pane costs nothing, a
        hidden one syncs when it is shown."""
        if not self.is_mounted:
            return
        now = time.monotonic()
        if self._wanted_since is None:
            self._wanted_since = now
        if self._frame_timer is None and self._frame_left is None:
            self._arm_frame(now, self._wanted_since)

    def input_arrived(self) -> None:
        """A key came: the next frame waits a moment, so the key's repaint goes alone."""
        self.clock.key(time.monotonic())

    def _arm_frame(self, now: float, wanted_since: float) -> None:
        # Textual's timers take no zero delay: a millisecond is "now"
        delay = max(0.001, self.clock.delay(now, wanted_since))
        self._frame_timer = self.set_timer(delay, self._frame, name="log frame")

    def _frame(self) -> None:
        """Start a frame: the shown panes sync and repaint one after another, each in a
        screen update of its own (see :meth:`_step`)."""
        self._frame_timer = None
        now = time.monotonic()
        if self._wanted_since is None or self._frame_left is not None:
            return
        if self.clock.delay(now, self._wanted_since) > 0:  # a key came since it was set
            self._arm_frame(now, self._wanted_since)
            return
        self._wanted_since = None
        self.clock.started(now)
        self._frame_cost = 0.0
        self._step_cpu = None
        self._frame_left = list(self._shown)
        self._step()

    def _step(self) -> None:
        """Sync the frame's next pane that changed and let the screen draw it before the
        next: a key waits behind one pane's repaint at most, never behind all of them; after
        a key the frame waits (:meth:`FrameClock.hold`)."""
        left = self._frame_left
        if left is None:
            return
        if self._step_cpu is not None:  # the last pane's sync and screen update
            self._frame_cost += time.thread_time() - self._step_cpu
            self._step_cpu = None
        hold = self.clock.hold(time.monotonic())
        if hold > 0:
            self.set_timer(hold, self._step, name="log frame step")
            return
        while left:
            pane = left.pop(0)
            cpu = time.thread_time()
            if pane.is_mounted and pane.flush():
                self._step_cpu = cpu
                self.call_after_refresh(self._step)
                return
        self._frame_left = None
        self.clock.painted(self._frame_cost)
        if self._wanted_since is not None:  # lines came during the frame
            self._arm_frame(time.monotonic(), self._wanted_since)

    def flush(self) -> None:
        """Sync every pane (shown or not) with its buffer now."""
        for pane in self._all():
            if pane.is_mounted:
                pane.flush()

    # -- layout --------------------------------------------------------------------------------

    def _all(self) -> list[LogPane]:
        return self._panes + self._rank_panes + ([self._merged] if self._merged is not None else [])

    def _group(self) -> list[LogPane]:
        """The panes tiled when nothing is zoomed or merged: per rank or per node."""
        return self._rank_panes if self._split and self._rank_panes else self._panes

    def _request_layout(self, focus: LogPane | None = None) -> None:
        """Queue :meth:`_apply_layout` (once, however many keys ask before it runs)."""
        if focus is not None:
            self._focus_to = focus
        if not self._layout_due:
            self._layout_due = True
            self.call_after_refresh(self._apply_layout)

    def _apply_layout(self, *, focus: bool = True) -> None:
        """Show the tiles the state asks for, size the grid, move focus (unless ``focus``
        is false: a pane added, no key pressed); sync the panes that were hidden (they do
        not sync while hidden)."""
        if not self.is_attached:
            return
        if focus:
            self._layout_due = False
        self.layouts += 1
        visible = self.visible_panes
        was = set(self._shown)
        for pane in self._all():
            tile = self._tiles.get(pane)
            if tile is not None and tile.display != (pane in visible):
                tile.display = pane in visible
        for pane in visible:
            if pane not in was and pane.is_mounted:
                pane.flush()
        self._shown = visible
        cols, rows = grid_shape(len(visible), self.size.width or self.app.size.width)
        if (self.styles.grid_size_columns, self.styles.grid_size_rows) != (cols, rows):
            self.styles.grid_size_columns = cols
            self.styles.grid_size_rows = rows
        if not focus:
            return
        target, self._focus_to = self._focus_to, None
        current = self._focused_pane()
        if target not in visible:
            target = current if current in visible else None
        if target is None and visible and current is not None:
            target = visible[0]  # focus was on a pane now hidden
        focused = self.screen.focused
        if (
            target is not None
            and focused is not target
            and target.is_mounted
            and not (focused is not None and getattr(focused, "pane", None) is target)
        ):
            self.screen.set_focus(target, scroll_visible=False)
        if self._shown_zoom is not self._zoomed:
            self._shown_zoom = self._zoomed
            self.post_message(self.ZoomChanged(self, self._zoomed))
        if self._shown_merged != self._merged_shown:
            self._shown_merged = self._merged_shown
            self.post_message(self.MergedToggled(self, self._merged_shown))

    def _focused_pane(self) -> LogPane | None:
        """The pane focused now (or whose prompt is), if it is one of these panes."""
        node = self.screen.focused
        if node is None:
            return None
        prompt_pane = getattr(node, "pane", None)
        if isinstance(prompt_pane, LogPane) and prompt_pane in self._all():
            return prompt_pane
        while node is not None and node is not self:
            if isinstance(node, LogPane):
                return node
            node = node.parent if isinstance(node.parent, Widget) else None
        return None

    def _current(self) -> LogPane | None:
        """The pane the keys so far focus: the pending layout's, else the focused one."""
        if self._layout_due and self._focus_to is not None:
            return self._focus_to
        return self._focused_pane()

    def action_zoom(self) -> None:
        """``z``: show only the focused pane, or all again."""
        if self._zoomed is not None:
            focus = self._zoomed
            self._zoomed = None
        else:
            visible = self.visible_panes
            pane = self._current()
            if pane not in visible:
                pane = visible[0] if visible else None
            if pane is None:
                return
            self._zoomed = focus = pane
        self._request_layout(focus)

    def action_toggle_merged(self) -> None:
        """``a``: switch between the per-node tiles and the merged all-ranks pane."""
        if self._merged is None:
            self.app.bell()
            return
        self._zoomed = None
        self._merged_shown = not self._merged_shown
        visible = self.visible_panes
        self._request_layout(visible[0] if visible else None)

    def action_focus_pane(self, step: int) -> None:
        """``tab``/``shift+tab``: focus the next/previous visible pane (wraps around); while
        zoomed, zoom the next/previous pane of the tiles instead (page through the nodes, or
        the ranks, full size)."""
        group = self._group()
        if self._zoomed is not None and self._zoomed in group and len(group) > 1:
            i = group.index(self._zoomed)
            self._zoomed = group[(i + step) % len(group)]
            self._request_layout(self._zoomed)
            return
        visible = self.visible_panes
        if not visible:
            return
        current = self._current()
        i = visible.index(current) if current in visible else -step if step > 0 else 0
        self._request_layout(visible[(i + step) % len(visible)])
