"""Containers that keep their own drawn rows until they are refreshed.

Textual's compositor, for a screen update, asks every widget whose clip overlaps the updated
region to render its *whole* region, even one fully covered by its children: a log pane's
update (one pane of 8 tiled) rendered the screen (60 rows), the pane grid (57 rows) and all 8
tiles (19 rows each) again, through ``StylesCache`` (cached rows, but each row's line filter,
background and theme looked up again): about 40 % of the update's CPU time.

A container's own rows (its background, a border) change only when Textual refreshes it:
a style change (CSS, pseudo-class, theme) sets its rules, which refreshes it, and so do a
resize and ``refresh()``. :class:`RenderMemo` keeps the rows it rendered for a crop and gives
them back until then; the key also holds the crop, the size and the theme, so a change that
somehow bypassed ``refresh`` still draws anew. Equality with Textual's own render is tested
(``tests/app/test_rendermemo.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget

if TYPE_CHECKING:
    _Base = Widget
else:
    _Base = object


class RenderMemo(_Base):
    """Mixin for a container widget (or screen): :meth:`render_lines` of an unchanged
    container returns the rows it rendered last for the same crop. Put it before the
    Textual class in the bases."""

    _render_memo: tuple[tuple[object, ...], list[Strip]] | None = None

    def render_lines(self, crop: Region) -> list[Strip]:
        """Textual's render of ``crop``, kept until :meth:`refresh` (see the module)."""
        key = (crop, self.region.size, self.app.theme, id(self.app.ansi_theme))
        memo = self._render_memo
        if memo is not None and memo[0] == key:
            return memo[1]
        strips = super().render_lines(crop)
        self._render_memo = (key, strips)
        return strips

    def refresh(self, *regions: Region, **kwargs: Any) -> Any:
        """Textual's ``refresh``; the kept rows are dropped first."""
        self._render_memo = None
        return super().refresh(*regions, **kwargs)
