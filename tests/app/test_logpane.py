"""LogPane / LogPanes: what a person sees on a 120x36 terminal, fed through real LogBuffers."""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
from rich.color import Color
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.app import App, ComposeResult
from textual.containers import Vertical
from textual.geometry import Region
from textual.pilot import Pilot
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Footer, Input

from console.app.widgets.logpane import LogPane, ascii_window
from console.app.widgets.logpanes import LogPanes, grid_shape
from console.jobs.logbuffer import LogBuffer
from console.jobs.logs import JobLogLine
from console.jobs.logtext import progress_key

SIZE = (120, 36)
TS0 = 1_700_000_000_123_456_789  # 2023-11-14 22:13:20.123 UTC
CASES = Path(__file__).resolve().parents[1] / "data" / "cases" / "tail-logs"


# -- helpers ---------------------------------------------------------------------------------


def line(text: str, *, node: int = 0, rank: int | None = 0, i: int = 0) -> JobLogLine:
    return JobLogLine(node, f"host-{node}", rank, TS0 + i * 1_000_000, text)


def fill(buf: LogBuffer, texts: Iterable[str], *, node: int = 0, rank: int | None = 0) -> None:
    for i, text in enumerate(texts):
        buf.append(line(text, node=node, rank=rank, i=i))


def screen(app: App[None]) -> list[str]:
    """The terminal's rows as plain text."""
    return [strip.text for strip in app.screen._compositor.render_strips()]


def pane_rows(app: App[None], pane: LogPane) -> list[str]:
    """The text rows inside the pane's border (scrollbar gutter cut off)."""
    region = pane.scrollable_content_region
    rows = screen(app)[region.y : region.y + region.height]
    return [row[region.x : region.x + region.width].rstrip() for row in rows]


def segments_on_screen(app: App[None]) -> Iterator[tuple[str, Style | None]]:
    for strip in app.screen._compositor.render_strips():
        for seg in strip:
            yield seg.text, seg.style


def focused(app: App[None]) -> object:
    """The focused widget (a function, so type checkers do not narrow it between keys)."""
    return app.focused


async def settle(pilot: Pilot[None], pane: LogPane | LogPanes) -> None:
    """Apply pending buffer changes now (instead of waiting for the coalescing timer)."""
    pane.flush()
    await pilot.pause()


class PaneApp(App[None]):
    """One LogPane, as the console would host it, with a footer."""

    def __init__(self, buffer: LogBuffer, *, merged: bool = False) -> None:
        super().__init__()
        self.buffer = buffer
        self.merged = merged
        self.saved: list[LogPane] = []
        self.follow_events: list[bool] = []

    def compose(self) -> ComposeResult:
        with Vertical():
            yield LogPane(self.buffer, "node 0 · host a", merged=self.merged, id="pane")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(LogPane).focus()

    def on_log_pane_save_requested(self, message: LogPane.SaveRequested) -> None:
        self.saved.append(message.pane)

    def on_log_pane_follow_changed(self, message: LogPane.FollowChanged) -> None:
        self.follow_events.append(message.following)


class PanesApp(App[None]):
    def __init__(self, panes: list[tuple[str, LogBuffer]], merged: LogBuffer | None = None):
        super().__init__()
        self.panes = panes
        self.merged = merged

    def compose(self) -> ComposeResult:
        yield LogPanes(self.panes, merged=self.merged, id="panes")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(LogPanes).panes[0].focus()


def numbered(n: int) -> list[str]:
    return [f"line {i}" for i in range(n)]


# -- LogPane ---------------------------------------------------------------------------------


async def test_renders_only_visible_lines_of_100k() -> None:
    buf = LogBuffer()
    fill(buf, numbered(100_000))
    app = PaneApp(buf)
    async with app.run_test(size=SIZE) as pilot:
        pane = app.query_one(LogPane)
        await pilot.pause()
        height = pane.scrollable_content_region.height
        assert height == 33  # 36 rows - footer - 2 border rows
        assert pane.line_count == 100_000
        # following: the canvas is pinned, one screen tall, showing the last rows (new lines
        # repaint the pane; nothing scrolls, so the screen is not re-arranged)
        assert pane.virtual_size.height == pane.container_size.height
        assert pane.max_scroll_y == pane.scroll_y == 0
        assert "100,000 lines" in screen(app)[0]
        rows = pane_rows(app, pane)
        assert rows[0] == "line 99967"
        assert rows[-1] == "line 99999"
        before = pane.lines_rendered
        pane.refresh()
        await pilot.pause()
        # one repaint asks for exactly the visible rows, not 100,000
        assert pane.lines_rendered - before == height
        await pilot.press("end", "down", "down")  # nothing below the last line
        await pilot.pause()
        assert pane_rows(app, pane)[-1] == "line 99999" and pane.following
        await pilot.press("up")  # paused: the canvas is exactly the lines (the scrollbar shows)
        await pilot.pause()
        assert not pane.following
        assert pane.virtual_size.height == 100_000


async def test_ansi_is_rendered_not_shown() -> None:
    buf = LogBuffer()
    fill(buf, ["plain \x1b[31mred\x1b[0m \x1b[1;32mbold green\x1b[0m end"])
    app = PaneApp(buf)
    async with app.run_test(size=SIZE) as pilot:
        pane = app.query_one(LogPane)
        await pilot.pause()
        assert pane_rows(app, pane)[0] == "plain red bold green end"
        assert not any("[31m" in row or "\x1b" in row for row in screen(app))
        styles = {text: style for text, style in segments_on_screen(app)}
        red, green = styles["red"], styles["bold green"]
        # ANSI red/green come out as the theme's truecolor red/green
        assert red is not None and red.color is not None and red.color.triplet is not None
        assert red.color.triplet.red > 200 and red.color.triplet.green < 50
        assert green is not None and green.bold and green.color is not None
        assert green.color.triplet is not None and green.color.triplet.green > 150
        plain = styles["plain "]
        assert plain is not None and not plain.bold


async def test_megabyte_line_does_not_break_layout_and_scrolls_horizontally() -> None:
    buf = LogBuffer()
    fill(buf, ["before", "0123456789" * 100_000, "after"])  # a 1 MB line
    app = PaneApp(buf)
    async with app.run_test(size=SIZE) as pilot:
        pane = app.query_one(LogPane)
        await pilot.pause()
        assert pane.row_count == 3
        rows = pane_rows(app, pane)
        assert rows[0] == "before"
        assert rows[1] == ("0123456789" * 12)[: pane.scrollable_content_region.width]
        assert rows[2] == "after"
        # every row of the terminal is still exactly 120 cells and the border is intact
        assert all(len(row) == 120 for row in screen(app))
        assert all(row[-1] in "│╮╯" for row in screen(app)[:35])
        await pilot.press("right")
        assert pane.scroll_x == 8
        assert pane_rows(app, pane)[1].startswith("89012345")
        assert pane.virtual_size.width <= 20_000


async def test_canvas_width_grows_in_steps_while_following_and_scroll_stops_at_the_text() -> None:
    buf = LogBuffer()
    fill(buf, [*numbered(40), "0123456789" * 20])  # 200 cells (+4 for the pane's prefix)
    app = PaneApp(buf)
    async with app.run_test(size=SIZE) as pilot:
        pane = app.query_one(LogPane)
        await pilot.pause()
        assert pane.following
        stepped = pane.virtual_size.width
        assert stepped % 64 == 0 and stepped >= 204
        buf.append(line("9" * 205, i=41))  # wider, but inside the step: no new canvas
        await settle(pilot, pane)
        assert pane.virtual_size.width == stepped
        # the scroll stops where the widest line ends, not at the stepped canvas's edge
        pane.scroll_to(x=10_000, animate=False, force=True)
        await pilot.pause()
        width = pane.scrollable_content_region.width
        assert pane.scroll_x == pane.max_scroll_x == 209 - width
        assert pane_rows(app, pane)[-1] == "9" * (width - 4)  # the 4 reserved cells blank
        await pilot.press("up")  # paused: the scrollbars show, the canvas is exact
        await pilot.pause()
        assert not pane.following
        assert pane.virtual_size.width == 209


async def test_follow_on_append_and_coalesced_refresh() -> None:
    buf = LogBuffer()
    fill(buf, numbered(50))
    app = PaneApp(buf)
    async with app.run_test(size=SIZE) as pilot:
        pane = app.query_one(LogPane)
        await pilot.pause()
        assert pane.following
        for i in range(50, 550):
            buf.append(line(f"line {i}", i=i))
            pane.notify_appended()
        assert pane.syncs == 0  # nothing done per line: one coalesced sync comes later
        for _ in range(200):
            if pane.syncs:
                break
            await pilot.pause(0.02)
        await pilot.pause()
        assert pane.syncs == 1
        assert pane.line_count == 550
        assert pane.scroll_y == pane.max_scroll_y
        assert pane_rows(app, pane)[-1] == "line 549"


async def test_scroll_up_pauses_badge_counts_and_G_resumes() -> None:
    buf = LogBuffer()
    fill(buf, numbered(200))
    app = PaneApp(buf)
    async with app.run_test(size=SIZE) as pilot:
        pane = app.query_one(LogPane)
        await pilot.pause()
        await pilot.press("up")
        assert not pane.following
        assert app.follow_events == [False]
        top = pane_rows(app, pane)[0]
        for i in range(200, 207):
            buf.append(line(f"line {i}", i=i))
        pane.notify_appended()
        await settle(pilot, pane)
        assert pane.new_lines == 7
        rows = screen(app)
        assert "paused +7" in rows[0]
        assert "+7 new lines" in rows[34]  # bottom border
        assert pane_rows(app, pane)[0] == top  # the view did not move
        assert "line 206" not in "\n".join(rows)
        await pilot.press("G")
        await pilot.pause()
        assert pane.following
        assert pane_rows(app, pane)[-1] == "line 206"
        rows = screen(app)
        assert "following" in rows[0] and "new lines" not in rows[34]
        # pageup and home pause too; end resumes
        await pilot.press("pageup")
        assert not pane.following
        await pilot.press("end")
        assert pane.following
        await pilot.press("home")
        assert not pane.following and pane_rows(app, pane)[0] == "line 0"
        await pilot.press("G")
        assert pane.following


async def test_scrolling_back_down_to_the_bottom_resumes_follow() -> None:
    buf = LogBuffer()
    fill(buf, numbered(100))
    app = PaneApp(buf)
    async with app.run_test(size=SIZE) as pilot:
        pane = app.query_one(LogPane)
        await pilot.pause()
        await pilot.press("up", "up")
        assert not pane.following
        await pilot.press("down")
        assert not pane.following
        await pilot.press("down")
        assert pane.following
        assert app.follow_events == [False, True]


async def test_progress_bar_redrawn_in_place_while_following() -> None:
    buf = LogBuffer()
    fill(buf, ["epoch 1"])
    app = PaneApp(buf)
    async with app.run_test(size=SIZE) as pilot:
        pane = app.query_one(LogPane)
        await pilot.pause()
        for n in range(1, 11):
            bar = "#" * n + " " * (10 - n)
            buf.append(line(f"train: {n * 10}%|{bar}| {n}/10 [00:{n:02d}<00:00, 1.00it/s]", i=n))
            pane.notify_appended()
        await settle(pilot, pane)
        assert pane.line_count == 2
        assert pane_rows(app, pane)[:3] == [
            "epoch 1",
            "train: 100%|##########| 10/10 [00:10<00:00, 1.00it/s]",
            "",
        ]


async def test_wrap_mode_follows_appends() -> None:
    buf = LogBuffer()
    fill(buf, ["x" * 250] * 20)
    app = PaneApp(buf)
    async with app.run_test(size=SIZE) as pilot:
        pane = app.query_one(LogPane)
        await pilot.pause()
        await pilot.press("w")
        await pilot.pause()
        width = pane.scrollable_content_region.width
        per_line = math.ceil(250 / width)
        assert pane.row_count == 20 * per_line
        assert pane.following
        for i in range(5):
            buf.append(line(f"short {i}", i=100 + i))
        await settle(pilot, pane)
        assert pane.row_count == 20 * per_line + 5
        assert pane.scroll_y == pane.max_scroll_y
        assert pane_rows(app, pane)[-1] == "short 4"


async def test_mouse_wheel_up_pauses_follow() -> None:
    buf = LogBuffer()
    fill(buf, numbered(200))
    app = PaneApp(buf)
    async with app.run_test(size=SIZE) as pilot:
        pane = app.query_one(LogPane)
        await pilot.pause()
        pane.post_message(events.MouseScrollUp(pane, 5, 5, 0, -1, 0, False, False, False))
        await pilot.pause()
        assert not pane.following
        assert pane.scroll_y < pane.max_scroll_y
        buf.append(line("line 200", i=200))
        await settle(pilot, pane)
        assert pane.new_lines == 1


async def test_search_highlights_and_n_N_move_to_matches() -> None:
    buf = LogBuffer()
    texts = numbered(200)
    for i in (5, 50, 150):
        texts[i] = f"line {i} has the NEEDLE in it"
    fill(buf, texts)
    app = PaneApp(buf)
    async with app.run_test(size=SIZE) as pilot:
        pane = app.query_one(LogPane)
        await pilot.pause()
        await pilot.press("slash")
        assert isinstance(focused(app), Input)
        await pilot.press(*"needle", "enter")
        await pilot.pause()
        assert focused(app) is pane
        assert pane.search_term == "needle"
        assert pane.match_count == 3
        assert not pane.following
        # from the bottom of the log the next match wraps around to the first
        assert pane.cursor_line == 5
        assert "line 5 has the NEEDLE in it" in pane_rows(app, pane)
        current_bg = pane.get_component_rich_style("logpane--match-current").bgcolor
        match_bg = pane.get_component_rich_style("logpane--match").bgcolor
        assert current_bg is not None and match_bg is not None and current_bg != match_bg
        highlighted = [
            t for t, s in segments_on_screen(app) if s is not None and s.bgcolor == current_bg
        ]
        assert highlighted == ["NEEDLE"]
        assert "/needle 1/3" in screen(app)[-2]  # the counter in the bottom border
        seen = []
        for key in ["n", "n", "n", "N", "N"]:
            await pilot.press(key)
            seen.append(pane.cursor_line)
            assert f"line {pane.cursor_line} has the NEEDLE in it" in pane_rows(app, pane)
        assert seen == [50, 150, 5, 150, 50]
        assert pane.match_index == 2
        assert "/needle 2/3" in screen(app)[-2]
        await pilot.press("escape")
        assert pane.search_term == ""


async def test_current_match_is_marked_apart_from_the_other_matches() -> None:
    buf = LogBuffer()
    texts = numbered(30)
    for i in (3, 4, 6):
        texts[i] = f"step {i} loss=nan"
    fill(buf, texts)
    app = PaneApp(buf)
    async with app.run_test(size=SIZE) as pilot:
        pane = app.query_one(LogPane)
        await pilot.pause()
        pane.set_search("NaN", jump=False)
        await pilot.pause()
        assert pane.match_count == 3 and pane.match_index is None
        assert "/NaN 3 found" in screen(app)[-2]
        pane.search_next()
        pane.search_next()  # the second match: line 4
        await pilot.pause()
        current = pane.get_component_rich_style("logpane--match-current").bgcolor
        other = pane.get_component_rich_style("logpane--match").bgcolor
        by_bg: dict[object, list[str]] = {}
        rows = pane_rows(app, pane)
        for y, strip in enumerate(app.screen._compositor.render_strips()):
            for seg in strip:
                if seg.style is not None and seg.style.bgcolor in (current, other):
                    by_bg.setdefault(seg.style.bgcolor, []).append(f"{y}:{seg.text}")
        top = pane.scrollable_content_region.y
        row_of = {int(r.split()[1]): top + y for y, r in enumerate(rows) if r.startswith("step")}
        assert by_bg[current] == [f"{row_of[4]}:nan"]
        assert sorted(by_bg[other]) == sorted([f"{row_of[3]}:nan", f"{row_of[6]}:nan"])
        # the current match's line is marked to the pane's edge, the others not
        cursor = pane.get_component_rich_style("logpane--cursor").bgcolor
        strips = app.screen._compositor.render_strips()
        marked = {
            y
            for y, strip in enumerate(strips)
            if any(seg.style is not None and seg.style.bgcolor == cursor for seg in strip)
        }
        assert marked == {row_of[4]}
        region = pane.scrollable_content_region
        assert strips[row_of[4]].crop(region.right - 3, region.right).text.strip() == ""
        assert all(
            seg.style is not None and seg.style.bgcolor == cursor
            for seg in strips[row_of[4]].crop(region.right - 3, region.right)
        )
        pane.set_search("no such text", jump=False)
        await pilot.pause()
        assert "/no such text not found" in screen(app)[-2]


async def test_search_prompt_escape_restores() -> None:
    buf = LogBuffer()
    fill(buf, ["alpha", "beta"])
    app = PaneApp(buf)
    async with app.run_test(size=SIZE) as pilot:
        pane = app.query_one(LogPane)
        await pilot.pause()
        await pilot.press("slash", *"beta")
        assert pane.search_term == "beta"  # live while typing
        await pilot.press("escape")
        await pilot.pause()
        assert pane.search_term == ""
        assert app.focused is pane
        assert not app.query(Input)


async def test_filter_and_inverted_filter() -> None:
    buf = LogBuffer()
    fill(buf, ["alpha 1", "beta 2", "ALPHA 3", "gamma 4"])
    app = PaneApp(buf)
    async with app.run_test(size=SIZE) as pilot:
        pane = app.query_one(LogPane)
        await pilot.pause()
        await pilot.press("ampersand", *"alpha", "enter")
        await pilot.pause()
        assert pane_rows(app, pane)[:3] == ["alpha 1", "ALPHA 3", ""]
        assert "2/4 lines" in screen(app)[0]
        # appended lines are filtered incrementally
        buf.append(line("alpha 5", i=5))
        buf.append(line("delta 6", i=6))
        await settle(pilot, pane)
        assert pane_rows(app, pane)[:4] == ["alpha 1", "ALPHA 3", "alpha 5", ""]
        await pilot.press("ampersand", "ctrl+u", *"!alpha", "enter")
        await pilot.pause()
        assert pane.filter_text == "!alpha"
        assert pane_rows(app, pane)[:4] == ["beta 2", "gamma 4", "delta 6", ""]
        await pilot.press("ampersand", "ctrl+u", "enter")
        await pilot.pause()
        assert pane.filter_text == ""
        assert pane_rows(app, pane)[:7] == [
            "alpha 1",
            "beta 2",
            "ALPHA 3",
            "gamma 4",
            "alpha 5",
            "delta 6",
            "",
        ]


async def test_filter_and_search_match_the_tags_as_shown() -> None:
    buf = LogBuffer(node=0)
    for i in range(40):
        buf.append(line(f"step {i}", rank=i % 4, i=i))
    buf.append(line("torchrun says hello", rank=None, i=40))
    app = PaneApp(buf)
    async with app.run_test(size=SIZE) as pilot:
        pane = app.query_one(LogPane)
        await pilot.pause()
        assert "[n0 r1] step 9" in pane_rows(app, pane)
        for typed, want in [("r0]", 10), ("[n0 r1]", 10), ("!r2]", 31), ("[n0]", 1)]:
            await pilot.press("ampersand", "ctrl+u", *typed, "enter")
            await pilot.pause()
            assert pane.line_count == want, typed
            assert all(
                (typed.lstrip("!") in pane.shown_text(ln)) != typed.startswith("!")
                for ln in pane.visible_lines()
            )
        await pilot.press("ampersand", "ctrl+u", "enter", "slash", *"[n0 r3]", "enter")
        await pilot.pause()
        assert pane.match_count == 10
        assert pane.cursor_line is not None and buf[pane.cursor_line].rank == 3
        # the highlight covers the tag, as the search matched it
        current = pane.get_component_rich_style("logpane--match-current").bgcolor
        assert [
            t for t, st in segments_on_screen(app) if st is not None and st.bgcolor == current
        ] == ["[n0 r3]"]


async def test_filter_matches_the_timestamps_while_they_are_shown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    try:
        buf = LogBuffer()
        buf.append(JobLogLine(0, "h", 0, TS0, "first"))
        buf.append(JobLogLine(0, "h", 0, TS0 + 60 * 10**9, "second"))  # 22:14:20
        app = PaneApp(buf)
        async with app.run_test(size=SIZE) as pilot:
            pane = app.query_one(LogPane)
            await pilot.pause()
            pane.set_filter("22:14")
            await pilot.pause()
            assert pane.line_count == 0
            await pilot.press("t")
            await pilot.pause()
            assert pane.line_count == 1
            assert pane_rows(app, pane)[0].endswith("second")
    finally:
        monkeypatch.undo()
        time.tzset()


async def test_wrap_changes_row_count() -> None:
    buf = LogBuffer()
    long = "".join(chr(ord("a") + i % 26) for i in range(300))
    fill(buf, ["short", long, "tail"])
    app = PaneApp(buf)
    async with app.run_test(size=SIZE) as pilot:
        pane = app.query_one(LogPane)
        await pilot.pause()
        width = pane.scrollable_content_region.width
        assert pane.row_count == 3
        await pilot.press("w")
        await pilot.pause()
        assert pane.wrap
        expected = 2 + math.ceil(300 / width)
        assert pane.row_count == expected
        rows = pane_rows(app, pane)
        assert rows[0] == "short"
        assert "".join(rows[1 : expected - 1]) == long
        assert rows[expected - 1] == "tail"
        await pilot.press("w")
        await pilot.pause()
        assert pane.row_count == 3
        assert pane_rows(app, pane)[1] == long[:width]


async def test_timestamps_toggle(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    try:
        buf = LogBuffer()
        fill(buf, ["first", "second"])
        app = PaneApp(buf)
        async with app.run_test(size=SIZE) as pilot:
            pane = app.query_one(LogPane)
            await pilot.pause()
            assert pane_rows(app, pane)[:2] == ["first", "second"]
            await pilot.press("t")
            await pilot.pause()
            assert pane_rows(app, pane)[:2] == ["22:13:20.123 first", "22:13:20.124 second"]
            await pilot.press("t")
            await pilot.pause()
            assert pane_rows(app, pane)[:2] == ["first", "second"]
    finally:
        monkeypatch.undo()  # the original TZ (or none), then make the C library see it
        time.tzset()


async def test_e_E_land_on_error_lines() -> None:
    buf = LogBuffer()
    texts = numbered(150)
    texts[10] = "Traceback (most recent call last):"
    texts[11] = "RuntimeError: CUDA error: out of memory"
    texts[100] = "host:1:2 [3] NCCL WARN Connection closed by remote peer"
    fill(buf, texts)
    app = PaneApp(buf)
    async with app.run_test(size=SIZE) as pilot:
        pane = app.query_one(LogPane)
        await pilot.pause()
        seen = []
        for key in ["e", "e", "e", "e", "E", "E"]:
            await pilot.press(key)
            seen.append(pane.cursor_line)
            assert pane.cursor_line is not None
            assert texts[pane.cursor_line] in pane_rows(app, pane)
        assert seen == [10, 11, 100, 10, 100, 11]
        assert not pane.following
        # the lines e/E stop at are the lines shown in the error colour, and no other
        assert pane.error_lines == [10, 11, 100]
        error = pane.get_component_rich_style("logpane--error").color
        assert error is not None and error != pane.rich_style.color
        coloured = {t for t, st in segments_on_screen(app) if st is not None and st.color == error}
        on_screen = {r for r in pane_rows(app, pane) if r}
        assert coloured == {texts[i] for i in (10, 11, 100)} & on_screen
        assert coloured  # the cursor's screen shows at least one of them


async def test_save_exit_code_and_footer() -> None:
    buf = LogBuffer()
    fill(buf, ["done"])
    app = PaneApp(buf)
    async with app.run_test(size=SIZE) as pilot:
        pane = app.query_one(LogPane)
        await pilot.pause()
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert app.saved == [pane]
        assert screen(app)[0].startswith("╭─ node 0 · host a · following · 1 lines ─")
        pane.set_exit_code(1)  # the node ended: nothing more is followed
        await pilot.pause()
        assert screen(app)[0].startswith("╭─ node 0 · host a · 1 lines · exited 1 ")
        pane.set_exit_code(None)  # ended, code unknown (e.g. a removed job's archive)
        await pilot.pause()
        assert screen(app)[0].startswith("╭─ node 0 · host a · 1 lines · ended ")
        footer = screen(app)[35]
        for label in ["G Follow", "/ Search", "nN Match", "& Filter", "eE Error"]:
            assert label in footer
        for label in ["w Wrap", "t Time", "^s Save"]:  # in `?`: the footer fits 160 columns
            assert label not in footer


def test_binding_ids_allow_a_keymap() -> None:
    ids = {b.id for b in LogPane.BINDINGS if not isinstance(b, tuple)}
    assert {
        "logs.follow",
        "logs.search",
        "logs.search_next",
        "logs.search_prev",
        "logs.filter",
        "logs.wrap",
        "logs.timestamps",
        "logs.error_next",
        "logs.error_prev",
        "logs.save",
    } <= ids
    ids = {b.id for b in LogPanes.BINDINGS if not isinstance(b, tuple)}
    assert ids == {"logs.zoom", "logs.merged", "logs.pane_next", "logs.pane_prev"}


async def test_keymap_remaps_search() -> None:
    buf = LogBuffer()
    fill(buf, ["x"])
    app = PaneApp(buf)
    async with app.run_test(size=SIZE) as pilot:
        app.set_keymap({"logs.search": "f"})
        await pilot.pause()
        await pilot.press("f")
        assert isinstance(app.focused, Input)


async def test_eviction_keeps_paused_view_on_the_same_lines() -> None:
    buf = LogBuffer(maxlen=100)
    fill(buf, numbered(100))
    app = PaneApp(buf)
    async with app.run_test(size=SIZE) as pilot:
        pane = app.query_one(LogPane)
        await pilot.pause()
        await pilot.press("home", "down", "down", "down", "down", "down")
        assert pane_rows(app, pane)[0] == "line 5"
        for i in range(100, 103):
            buf.append(line(f"line {i}", i=i))
        await settle(pilot, pane)
        assert len(buf) == 100 and buf[0].plain == "line 3"
        assert pane_rows(app, pane)[0] == "line 5"
        assert pane.new_lines == 3


# -- tail-logs cases -------------------------------------------------------------------------


def case_lines(name: str) -> list[str]:
    path = CASES / name
    if not path.exists():
        path = Path("/work/shared/cases/tail-logs") / name
    return path.read_text(encoding="utf-8").splitlines()


async def test_tail_01_finished_bar_and_two_eval_lines() -> None:
    buf = LogBuffer()
    fill(buf, case_lines("tail-01.txt"), rank=None)
    app = PaneApp(buf)
    async with app.run_test(size=SIZE) as pilot:
        pane = app.query_one(LogPane)
        await pilot.pause()
        width = pane.scrollable_content_region.width
        rows = pane_rows(app, pane)
        assert rows[0] == "100%|██████████| 850/850 [1:41:01<00:00,  4.69s/it]"
        assert rows[1].startswith("{'eval_loss': 0.6620487570762634, 'eval_mse'")
        assert rows[2].startswith("{'eval_loss': 0.6605485081672668, 'eval_mse'")
        assert len(rows[1]) == len(rows[2]) == width  # cut at the edge, not wrapped
        assert rows[3] == ""
        await pilot.press("w")
        await pilot.pause()
        joined = "\n".join(pane_rows(app, pane))
        assert "'epoch': 49.41}" in joined and "'epoch': 50.0}" in joined
        await pilot.press("slash", *"eval_loss", "enter")
        await pilot.pause()
        assert pane.match_count == 2
        seen = {pane.cursor_line}
        await pilot.press("n")
        seen.add(pane.cursor_line)
        assert seen == {1, 2}


async def test_tail_03_two_finished_bars() -> None:
    buf = LogBuffer()
    fill(buf, case_lines("tail-03.txt"), rank=None)
    app = PaneApp(buf)
    async with app.run_test(size=SIZE) as pilot:
        pane = app.query_one(LogPane)
        await pilot.pause()
        assert pane.row_count == 2
        shown = [ln.plain for ln in pane.visible_lines()]
        assert [progress_key(p) for p in shown] == [("Loading pt checkpoint shards", True)] * 2
        assert [p.split("| ")[-1] for p in shown] == [
            "1/1 [00:00<00:00,  6.22it/s]",
            "1/1 [00:00<00:00,  5.96it/s]",
        ]
        rows = pane_rows(app, pane)
        assert rows[0].startswith("Loading pt checkpoint shards: 100%|███")
        assert rows[1] == (
            "Loading pt checkpoint shards: 100%|██████████| 1/1 [00:00<00:00,  5.96it/s]"
        )
        assert rows[2] == ""
        assert all(len(row) == 120 for row in screen(app))
        await pilot.press("w")
        await pilot.pause()
        joined = "".join(pane_rows(app, pane))
        assert joined.count("1/1 [00:00<00:00,") == 2
        assert "6.22it/s]" in joined and "5.96it/s]" in joined
        assert "0/1" not in joined


# -- LogPanes --------------------------------------------------------------------------------


def node_buffers(n: int, lines: int = 5) -> list[tuple[str, LogBuffer]]:
    out = []
    for node in range(n):
        buf = LogBuffer(node=node)
        fill(buf, [f"n{node} line {i}" for i in range(lines)], node=node)
        out.append((f"node {node} · host-{node}", buf))
    return out


def test_grid_shape() -> None:
    assert [grid_shape(n, 120) for n in range(1, 9)] == [
        (1, 1),
        (2, 1),
        (2, 2),
        (2, 2),
        (2, 3),
        (2, 3),
        (2, 4),
        (2, 4),
    ]
    assert [grid_shape(n, 200) for n in range(5, 9)] == [(3, 2), (3, 2), (3, 3), (3, 3)]


async def test_two_panes_side_by_side_zoom_and_tab() -> None:
    app = PanesApp(node_buffers(2))
    async with app.run_test(size=SIZE) as pilot:
        panes = app.query_one(LogPanes)
        await pilot.pause()
        p0, p1 = panes.panes
        assert (p0.region.x, p0.region.width) == (0, 60)
        assert (p1.region.x, p1.region.width) == (60, 60)
        assert p0.region.y == p1.region.y == 0
        assert pane_rows(app, p0)[:2] == ["[n0 r0] n0 line 0", "[n0 r0] n0 line 1"]
        assert pane_rows(app, p1)[:2] == ["[n1 r0] n1 line 0", "[n1 r0] n1 line 1"]
        assert app.focused is p0
        await pilot.press("tab")
        assert app.focused is p1
        await pilot.press("tab")
        assert app.focused is p0
        await pilot.press("shift+tab")
        assert app.focused is p1
        await pilot.press("z")
        await pilot.pause()
        assert panes.zoomed is p1
        assert not p0.display or not p0.parent.display  # type: ignore[union-attr]
        assert (p1.region.x, p1.region.width) == (0, 120)
        assert "n0 line" not in "\n".join(screen(app))
        await pilot.press("tab")  # zoomed: tab pages to the next node, still zoomed
        await pilot.pause()
        assert panes.zoomed is p0 and app.focused is p0
        assert (p0.region.x, p0.region.width) == (0, 120)
        assert "n1 line" not in "\n".join(screen(app))
        await pilot.press("shift+tab")
        await pilot.pause()
        assert panes.zoomed is p1
        await pilot.press("z")
        await pilot.pause()
        assert panes.zoomed is None
        assert (p0.region.width, p1.region.width) == (60, 60)


async def test_search_prompt_spans_the_panes_and_names_its_pane() -> None:
    nodes = []
    for node in range(2):
        buf = LogBuffer(node=node)
        fill(buf, [f"n{node} line {i}" for i in range(20)], node=node)
        nodes.append((f"node {node} · host-{node}", buf))
    app = PanesApp(nodes)
    async with app.run_test(size=SIZE) as pilot:
        panes = app.query_one(LogPanes)
        right = panes.panes[1]
        await pilot.press("tab")
        await pilot.pause()
        assert app.focused is right
        await pilot.press("slash")
        await pilot.pause()
        prompt = app.query_one(Input)
        assert app.focused is prompt
        assert prompt.region.x == panes.region.x and prompt.region.width == panes.region.width
        assert prompt.region.y == panes.region.bottom  # right under the grid
        assert "node 1 · host-1" in str(prompt.placeholder)
        await pilot.press(*"line 7", "enter")
        await pilot.pause()
        assert app.focused is right and right.search_term == "line 7"
        assert right.match_index == 1 and panes.panes[0].search_term == ""


async def test_four_and_eight_panes_tile() -> None:
    app = PanesApp(node_buffers(3))
    async with app.run_test(size=SIZE) as pilot:
        panes = app.query_one(LogPanes)
        await pilot.pause()
        p = panes.panes
        assert [(q.region.x, q.region.y) for q in p] == [(0, 0), (60, 0), (0, 17)]
        buf = LogBuffer(node=3)
        fill(buf, ["n3 line 0"], node=3)
        added = panes.add_pane("node 3 · host-3", buf)
        await pilot.pause()
        assert (added.region.x, added.region.y) == (60, 17)
        assert pane_rows(app, added)[0] == "[n3 r0] n3 line 0"
        # a reconnecting node keeps its pane: more lines into the same buffer
        fill(buf, ["n3 line 0", "n3 line 1"], node=3)
        panes.notify_appended()
        await settle(pilot, panes)
        assert pane_rows(app, added)[:3] == [
            "[n3 r0] n3 line 0",
            "[n3 r0] n3 line 0",
            "[n3 r0] n3 line 1",
        ]
    app = PanesApp(node_buffers(8))
    async with app.run_test(size=SIZE) as pilot:
        panes = app.query_one(LogPanes)
        await pilot.pause()
        xs = sorted({q.region.x for q in panes.panes})
        ys = sorted({q.region.y for q in panes.panes})
        assert (len(xs), len(ys)) == (2, 4)


async def test_prompt_keys_are_text_not_pane_commands() -> None:
    app = PanesApp(node_buffers(2), LogBuffer())
    async with app.run_test(size=SIZE) as pilot:
        panes = app.query_one(LogPanes)
        await pilot.pause()
        p0 = panes.panes[0]
        await pilot.press("ampersand", *"zane wGet", "enter")
        await pilot.pause()
        assert p0.filter_text == "zane wGet"
        assert panes.zoomed is None and not panes.merged_shown
        assert not p0.wrap and p0.following
        assert pane_rows(app, p0)[0] == ""  # no line contains it


async def test_merged_pane_shows_tags() -> None:
    nodes = node_buffers(2, lines=0)
    merged = LogBuffer()
    incoming = [
        line("hello from rank 0", node=0, rank=0, i=0),
        line("hello from rank 3", node=1, rank=3, i=1),
        line("torchrun itself", node=1, rank=None, i=2),
    ]
    for ln in incoming:
        for _, buf in nodes:
            if buf.accepts(ln):
                buf.append(ln)
        merged.append(ln)
    app = PanesApp(nodes, merged)
    async with app.run_test(size=SIZE) as pilot:
        panes = app.query_one(LogPanes)
        await pilot.pause()
        assert panes.merged_pane is not None
        assert not panes.merged_pane.parent.display  # type: ignore[union-attr]
        # a node pane tags each line as `logs` does ([n1] for torchrun's own lines)
        assert pane_rows(app, panes.panes[1])[:2] == [
            "[n1 r3] hello from rank 3",
            "[n1] torchrun itself",
        ]
        await pilot.press("a")
        await pilot.pause()
        mp = panes.merged_pane
        assert panes.merged_shown and app.focused is mp
        assert mp.region.width == 120
        assert pane_rows(app, mp)[:3] == [
            "[n0 r0] hello from rank 0",
            "[n1 r3] hello from rank 3",
            "[n1] torchrun itself",
        ]
        tag_color = mp.get_component_rich_style("logpane--tag").color
        tag_styles = [s for t, s in segments_on_screen(app) if t.startswith("[n1 r3]")]
        assert tag_styles and all(s is not None and s.color == tag_color for s in tag_styles)
        await pilot.press("a")
        await pilot.pause()
        assert not panes.merged_shown
        assert app.focused is panes.panes[0]


# -- snapshot --------------------------------------------------------------------------------


def test_two_panes_snapshot(snap_compare: object) -> None:
    nodes = []
    for node in range(2):
        buf = LogBuffer(node=node)
        fill(
            buf,
            [f"[rank{node}] step {i} loss {1.0 / (i + 1):.4f}" for i in range(12)]
            + ["\x1b[33mwarning:\x1b[0m slow step", "RuntimeError: boom" if node else "ok"],
            node=node,
        )
        nodes.append((f"node {node} · host-{node}", buf))
    app = PanesApp(nodes)

    async def before(pilot: Pilot[None]) -> None:
        panes = app.query_one(LogPanes)
        panes.panes[1].set_exit_code(1)
        panes.panes[0].set_exit_code(0)
        await pilot.pause()

    assert snap_compare(app, terminal_size=SIZE, run_before=before)  # type: ignore[operator]


@pytest.mark.parametrize("merged", [False, True])
async def test_plain_line_fast_path_renders_as_the_rich_path(merged: bool) -> None:
    buf = LogBuffer()
    fill(
        buf,
        [
            "step 12 loss 2.5 lr 3e-4",
            "世界 wide cells ok",
            "needle in here",
            "x" * 300,
            # coloured (SGR only, as shaped lines are): the same styles without Rich's decoder
            "\x1b[32mINFO\x1b[0m step 3 \x1b[1;31mloss\x1b[0m 2.5 \x1b[1m",
            "\x1b[38;5;200mpink\x1b[39m default \x1b[48;2;10;20;30mrgb bg\x1b[49m \x1b[4;2mud",
            "RuntimeError: \x1b[33mboom\x1b[m after a reset",
            "\x1b[31m世界\x1b[0m coloured wide cells",
        ],
    )
    app = PaneApp(buf, merged=merged)
    async with app.run_test(size=SIZE) as pilot:
        pane = app.query_one(LogPane)
        await settle(pilot, pane)
        base = pane.rich_style
        checked = 0
        for timestamps in (False, True):
            pane._timestamps = timestamps
            pane.set_search("needle", jump=False)
            for i in range(len(buf)):
                dl = buf[i]
                fast = pane._plain_segments(dl)
                text = pane._line_text(dl, False)
                slow = Strip(text.render(app.console), text.cell_len)
                if "needle" in dl.plain or not dl.plain.isascii():
                    assert fast is None  # matches and wide cells take the rich path
                    continue
                assert fast is not None
                assert [(s.text, s.style) for s in Strip(fast).simplify()] == [
                    (s.text, s.style) for s in slow.simplify()
                ]
                # every window the pane asks for: scrolled, cut, past the end, wrapped rows
                for start, span, width in [
                    (0, 100, 100),
                    (7, 100, 100),
                    (0, 10, 100),
                    (295, 50, 50),
                    (400, 30, 30),
                    (100, 100, 80),
                ]:
                    window = ascii_window(fast, start, span, width, base)
                    want = slow.crop_extend(start, start + span, base).adjust_cell_length(
                        width, base
                    )
                    assert window.cell_length == width
                    assert [(s.text, s.style) for s in window.simplify()] == [
                        (s.text, s.style) for s in want.simplify()
                    ], (dl.plain, start)
                    checked += 1
        assert checked == 2 * 5 * 6


@pytest.mark.parametrize("theme", ["textual-dark", "textual-light"])
async def test_framed_rows_render_as_textuals_styles_cache(theme: str) -> None:
    """LogPane._framed_lines (border rows from Textual, content rows framed once per
    strip) gives exactly what Textual's StylesCache draws, in every state a pane has."""
    bufs = [LogBuffer(), LogBuffer()]
    for n, buf in enumerate(bufs):
        fill(
            buf,
            [f"step {i} loss 2.5 \x1b[32mok\x1b[0m needle {i % 7}" for i in range(300)]
            + ["RuntimeError: boom", "世界 wide", "x" * 400],
            node=n,
        )
    app = PanesApp([("node 0 · host a", bufs[0]), ("node 1 · host b", bufs[1])])
    app.theme = theme
    async with app.run_test(size=SIZE) as pilot:
        panes = app.query_one(LogPanes)
        await settle(pilot, panes)
        checked = 0

        def same(pane: LogPane, what: str) -> None:
            nonlocal checked
            height = pane.region.height
            for crop in (pane.region.reset_offset, Region(3, 0, 20, height)):
                pane._styles_cache.clear()  # Textual's render, not its cached rows
                framed = pane._framed_lines(crop)
                assert framed is not None, what
                pane._row_ctx = (
                    pane.scroll_offset.x,
                    pane._top_row(),
                    pane.scrollable_content_region.width,
                )
                textual = Widget.render_lines(pane, crop)
                pane._row_ctx = None
                assert len(framed) == len(textual) == crop.height
                for y, (a, b) in enumerate(zip(framed, textual)):
                    assert [(s.text, s.style) for s in a.simplify()] == [
                        (s.text, s.style) for s in b.simplify()
                    ], (what, y)
                checked += 1

        first, second = panes.panes
        same(first, "focused, following")
        same(second, "unfocused, following")
        await pilot.press("up", "up", "up")  # paused: scrollbars show
        await settle(pilot, panes)
        same(first, "paused, cursor")
        await pilot.press("slash", *"needle", "enter")
        await settle(pilot, panes)
        same(first, "search matches")
        await pilot.press("w", "t")
        await settle(pilot, panes)
        same(first, "wrapped, timestamps")
        await pilot.press("tab")
        await settle(pilot, panes)
        same(first, "after focus moved away")
        same(second, "after focus moved here")
        await pilot.press("shift+tab")  # back: border rows drawn before, kept by the pane
        await settle(pilot, panes)
        same(first, "focus back")
        same(second, "focus gone again")
        assert checked == 2 * 9


def contrast(fg: Color, bg: Color) -> float:
    """WCAG 2.x contrast ratio of two colours (1 to 21)."""

    def luminance(c: Color) -> float:
        def channel(v: int) -> float:
            s = v / 255
            return s / 12.92 if s <= 0.04045 else ((s + 0.055) / 1.055) ** 2.4

        t = c.get_truecolor()
        return 0.2126 * channel(t.red) + 0.7152 * channel(t.green) + 0.0722 * channel(t.blue)

    hi, lo = sorted((luminance(fg), luminance(bg)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def title_segments(app: App[None], pane: LogPane) -> list[Segment]:
    """The segments of the pane's top border row that carry title text."""
    region = pane.region
    strip = app.screen._compositor.render_strips()[region.y]
    out, x = [], 0
    for seg in strip:
        if region.x <= x < region.right and any(ch.isalnum() for ch in seg.text):
            out.append(seg)
        x += seg.cell_length
    return out


@pytest.mark.parametrize(
    "theme", ["textual-dark", "textual-light", "nord", "gruvbox", "tokyo-night", "monokai"]
)
async def test_unfocused_titles_are_readable_and_the_focused_pane_stands_out(theme: str) -> None:
    nodes = []
    for node in range(3):
        buf = LogBuffer(node=node)
        fill(buf, numbered(12), node=node)
        nodes.append((f"node {node} · host-{node}", buf))
    app = PanesApp(nodes)
    async with app.run_test(size=SIZE) as pilot:
        app.theme = theme
        panes = app.query_one(LogPanes)
        panes.panes[2].set_exit_code(1)
        await pilot.pause()
        focused_pane, others = panes.panes[0], panes.panes[1:]
        assert app.focused is focused_pane
        for pane in others:
            segs = title_segments(app, pane)
            text = "".join(s.text for s in segs)
            assert f"{pane.title} · " in text and "12 lines" in text
            for seg in segs:
                assert seg.style is not None and seg.style.color and seg.style.bgcolor
                ratio = contrast(seg.style.color, seg.style.bgcolor)
                assert ratio >= 4.5, (pane.title, seg.text, ratio)
        assert "exited 1" in "".join(s.text for s in title_segments(app, others[1]))
        mine = title_segments(app, focused_pane)
        assert all(
            s.style is not None
            and s.style.color
            and s.style.bgcolor
            and contrast(s.style.color, s.style.bgcolor) >= 4.5
            for s in mine
        )
        # the focused pane differs: a bold title and its own border colour
        assert all(s.style is not None and s.style.bold for s in mine)
        assert not any(
            s.style is not None and s.style.bold for p in others for s in title_segments(app, p)
        )
        assert border_colour(app, focused_pane) != border_colour(app, others[0])


def border_colour(app: App[None], pane: LogPane) -> Color | None:
    """The colour of the pane's left border (the row under its title)."""
    strip = app.screen._compositor.render_strips()[pane.region.y + 1]
    x = 0
    for seg in strip:
        if x == pane.region.x:
            return seg.style.color if seg.style is not None else None
        x += seg.cell_length
    return None
