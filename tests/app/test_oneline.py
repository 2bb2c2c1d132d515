"""OneLine: the header/status widget repaints alone and skips unchanged text."""

from __future__ import annotations

from rich.text import Text
from textual.app import App, ComposeResult
from textual.widget import Widget

from console.app.widgets.oneline import OneLine


class CountingLine(OneLine):
    """OneLine recording each refresh it asks for (``True`` = with a layout pass)."""

    def __init__(self) -> None:
        super().__init__("start", id="line")
        self.refreshes: list[bool] = []

    def refresh(
        self, *regions: object, repaint: bool = True, layout: bool = False, recompose: bool = False
    ) -> Widget:
        self.refreshes.append(layout)
        return super().refresh(repaint=repaint, layout=layout, recompose=recompose)


class LineApp(App[None]):
    def compose(self) -> ComposeResult:
        yield CountingLine()


async def test_show_repaints_without_layout_and_skips_the_same_text() -> None:
    app = LineApp()
    async with app.run_test(size=(40, 5)) as pilot:
        line = app.query_one(CountingLine)
        await pilot.pause()
        line.refreshes.clear()
        line.show(Text("lines 10", style="bold"))
        line.show(Text("lines 10", style="bold"))  # same characters and style: nothing to do
        assert line.refreshes == [False]
        line.show(Text("lines 10", style="red"))  # a style change is a change
        line.show("lines 11")
        assert line.refreshes == [False, False, False]
        await pilot.pause()
        assert line.size.height == 1
        assert app.screen._compositor.render_strips()[0].text.rstrip() == "lines 11"
