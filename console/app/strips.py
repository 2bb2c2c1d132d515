"""Textual's ``Strip`` without its seven caches made up front, and without cycles.

Every ``Strip`` (one row of a widget's render; the compositor makes several per row it
draws) creates seven ``FIFOCache`` objects in ``__init__``, each with a dict, most never
used: a crop, a style or a filter of that strip is asked for at most once or twice before
the strip is dropped. Repainting 8 log panes while a job floods them makes some 600 strips a
frame; the caches were a fifth of the frame's time and most of the objects the cyclic GC
walks (51,000 ``FIFOCache`` among 151,000 tracked objects after a 250 lines/s run).

:func:`install` gives ``Strip`` an ``__init__`` that sets only the plain fields and a
``__getattr__`` that makes a cache the first time one is read (an unset slot raises
``AttributeError``, which is what calls ``__getattr__``): the same caches, of the same sizes,
made on first use. It checks the slots it expects against the installed Textual (pinned
exactly in pyproject.toml) and leaves ``Strip`` alone if they differ.

Two of ``Strip``'s methods put the strip itself into its own cache when the answer is the
strip unchanged: ``divide`` at the strip's own length caches ``[self]``, and ``crop_extend``
over the whole strip caches ``self``. The compositor asks both for nearly every row it
draws, so each such strip became a reference cycle (strip, cache, dict, list) that only the
cyclic GC frees: 25,000-30,000 objects freed by every generation-1 pass during a 8 x 250
lines/s stream, 25-135 ms of the event loop each (docs/benchmarks.md). :func:`install` wraps
the two so that the unchanged case returns the strip without caching it (nothing to compute:
the same test the method makes first), and the strip is freed by its reference count.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final

from rich.segment import Segment
from rich.style import Style
from textual.cache import FIFOCache
from textual.strip import Strip

CACHE_SIZES: Final[dict[str, int]] = {
    "_divide_cache": 4,
    "_crop_cache": 16,
    "_style_cache": 16,
    "_filter_cache": 4,
    "_line_length_cache": 4,
    "_crop_extend_cache": 4,
    "_offsets_cache": 4,
}
"""Strip's caches and their sizes, as ``Strip.__init__`` of Textual 8.2.8 makes them."""

PLAIN_SLOTS: Final = ("_segments", "_cell_length", "_render_cache", "_link_ids", "_cell_count")
"""Strip's other slots, set in ``__init__`` as before."""

_original_init = Strip.__init__
_original_divide = Strip.divide
_original_crop_extend = Strip.crop_extend


def _init(self: Strip, segments: Iterable[Segment], cell_length: int | None = None) -> None:
    self._segments = list(segments)
    self._cell_length = cell_length
    self._render_cache = None
    self._link_ids = None
    self._cell_count = None


def _getattr(self: Strip, name: str) -> Any:
    size = CACHE_SIZES.get(name)
    if size is None:
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
    cache: FIFOCache[Any, Any] = FIFOCache(size)
    setattr(self, name, cache)
    return cache


def _divide(self: Strip, cuts: Iterable[int]) -> Sequence[Strip]:
    cell_length = self.cell_length
    kept = [cut for cut in cuts if cut <= cell_length]
    if kept == [cell_length]:  # the whole strip: Textual caches [self] here, a cycle
        return [self]
    return _original_divide(self, kept)


def _crop_extend(self: Strip, start: int, end: int, style: Style | None) -> Strip:
    if start <= 0 and end == self.cell_length:  # the whole strip: Textual caches self here
        return self
    return _original_crop_extend(self, start, end, style)


def matches_textual() -> bool:
    """Whether the installed Textual's ``Strip`` has exactly the slots this module knows."""
    return set(Strip.__slots__) == set(CACHE_SIZES) | set(PLAIN_SLOTS) and not hasattr(
        _original_init, "__wrapped__"
    )


def install() -> bool:
    """Make ``Strip``'s caches on first use and keep a strip out of its own caches
    (idempotent); ``False`` (nothing changed) when
    the installed Textual's ``Strip`` is not the one this module was written for."""
    if Strip.__init__ is _init:
        return True
    if not matches_textual():
        return False
    Strip.__init__ = _init  # type: ignore[method-assign]
    Strip.__getattr__ = _getattr  # type: ignore[attr-defined]
    Strip.divide = _divide  # type: ignore[method-assign]
    Strip.crop_extend = _crop_extend  # type: ignore[method-assign]
    return True


def uninstall() -> None:
    """Put ``Strip``'s own ``__init__`` back (tests)."""
    if Strip.__init__ is _init:
        Strip.__init__ = _original_init  # type: ignore[method-assign]
        del Strip.__getattr__  # type: ignore[attr-defined]
        Strip.divide = _original_divide  # type: ignore[method-assign]
        Strip.crop_extend = _original_crop_extend  # type: ignore[method-assign]
