"""A one-row text widget for headers and status lines that change often."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static


class OneLine(Static):
    """A :class:`~textual.widgets.Static` one row high whose updates repaint it alone.

    ``Static.update`` lays out the whole screen by default (the new text might change the
    widget's height); this widget's height is fixed at one row, so :meth:`show` only repaints
    it, and not at all when the text is unchanged. The log screen's header changes several
    times a second under a busy stream, and every layout pass costs every pane a repaint.
    """

    DEFAULT_CSS = """
    OneLine { height: 1; }
    """

    def __init__(
        self, text: Text | str = "", *, id: str | None = None, classes: str | None = None
    ) -> None:
        super().__init__(text, id=id, classes=classes)
        self._shown = _key(text)

    def show(self, text: Text | str) -> None:
        """Show ``text`` (one row; the rest is cut by the widget's width), repainting only
        when it differs from what is shown (characters, base style or styled spans)."""
        key = _key(text)
        if key == self._shown:
            return
        self._shown = key
        self.update(text, layout=False)


def _key(text: Text | str) -> object:
    """What makes two texts look the same (``Text.__eq__`` ignores the base style)."""
    if isinstance(text, str):
        return text
    return (text.plain, str(text.style), tuple(text.spans))
