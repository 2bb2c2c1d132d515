"""RenderMemo: a container's own rows kept until it is refreshed, equal to Textual's render."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.containers import Vertical
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Static

from console.app.widgets.rendermemo import RenderMemo


class Box(RenderMemo, Vertical):
    DEFAULT_CSS = """
    Box { border: round $primary; background: $surface; height: 1fr; }
    Box.hot { background: $error; border: heavy $warning; }
    """


class MemoApp(App[None]):
    def compose(self) -> ComposeResult:
        with Box(id="box"):
            yield Static("inside", id="inner")


def textual_render(w: Widget, crop: Region) -> list[Strip]:
    """What Textual draws for ``w`` without the memo (its StylesCache from scratch)."""
    w._styles_cache.clear()
    return Widget.render_lines(w, crop)


def as_cells(strips: list[Strip]) -> list[list[tuple[str, object]]]:
    return [[(s.text, s.style) for s in strip.simplify()] for strip in strips]


async def test_rows_are_kept_until_refresh_and_equal_textuals() -> None:
    app = MemoApp()
    async with app.run_test(size=(40, 12)) as pilot:
        box = app.query_one(Box)
        crop = box.region.reset_offset
        first = box.render_lines(crop)
        assert box.render_lines(crop) is first  # kept: no StylesCache pass
        assert as_cells(first) == as_cells(textual_render(box, crop))
        checked = 0
        for change in ("class", "theme", "resize", "refresh"):
            if change == "class":
                box.add_class("hot")
            elif change == "theme":
                app.theme = "textual-light"
            elif change == "resize":
                await pilot.resize_terminal(30, 8)
            else:
                box.refresh()
            await pilot.pause()
            crop = box.region.reset_offset
            rows = box.render_lines(crop)
            assert rows is not first, change
            assert as_cells(rows) == as_cells(textual_render(box, crop)), change
            first = box.render_lines(crop)
            checked += 1
        assert checked == 4
        # a part of the box (the compositor asks for clipped crops too)
        part = Region(2, 1, 10, 3)
        assert as_cells(box.render_lines(part)) == as_cells(textual_render(box, part))
