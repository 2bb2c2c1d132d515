"""console.app.strips: Textual's Strip with its caches made on first use."""

from __future__ import annotations

import gc
from collections.abc import Sequence

import pytest
from rich.segment import Segment
from rich.style import Style
from textual.cache import FIFOCache
from textual.strip import Strip

import console.app  # noqa: F401  # installs the lazy caches, as the app does
from console.app import strips


def test_the_pinned_textual_has_the_slots_the_patch_knows() -> None:
    assert strips.matches_textual()
    assert Strip.__init__ is strips._init  # installed by importing console.app


def test_a_new_strip_makes_no_cache_until_one_is_used() -> None:
    s = Strip([Segment("hello "), Segment("world", Style(bold=True))], 11)
    assert not hasattr(s, "__dict__")  # still slots only
    assert [n for n in strips.CACHE_SIZES if _slot_set(s, n)] == []
    assert s.crop(0, 5).text == "hello"
    assert _slot_set(s, "_crop_cache")
    assert isinstance(s._crop_cache, FIFOCache)
    assert s._crop_cache._maxsize == 16  # the size Textual gives it
    assert s.crop(0, 5) is s.crop(0, 5)  # the cache is used, as Textual's own is
    assert not _slot_set(s, "_style_cache")


def _slot_set(obj: object, name: str) -> bool:
    try:
        object.__getattribute__(obj, name)
    except AttributeError:
        return False
    return True


BLUE = Style(bgcolor="blue")


def test_strips_behave_as_textuals_own() -> None:
    segs = [Segment("ab"), Segment("cdef", Style(color="red")), Segment("gh")]
    lazy = Strip(segs, 8)
    strips.uninstall()
    try:
        plain = Strip(segs, 8)
        assert _slot_set(plain, "_offsets_cache")  # Textual's own makes them all up front
    finally:
        assert strips.install()
    pairs: list[tuple[Strip | Sequence[Strip], Strip | Sequence[Strip]]] = [
        (lazy.crop(1, 6), plain.crop(1, 6)),
        (lazy.divide([8]), plain.divide([8])),
        (lazy.divide([8, 9]), plain.divide([8, 9])),
        (lazy.crop_extend(0, 8, BLUE), plain.crop_extend(0, 8, BLUE)),
        (lazy.divide([3, 5]), plain.divide([3, 5])),
        (lazy.crop_extend(2, 12, BLUE), plain.crop_extend(2, 12, BLUE)),
        (lazy.adjust_cell_length(12), plain.adjust_cell_length(12)),
        (lazy.apply_style(Style(bold=True)), plain.apply_style(Style(bold=True))),
        (lazy.extend_cell_length(10), plain.extend_cell_length(10)),
    ]
    for a, b in pairs:
        assert list(a if isinstance(a, Strip) else [x for s in a for x in s]) == list(
            b if isinstance(b, Strip) else [x for s in b for x in s]
        )
    assert lazy.cell_length == plain.cell_length == 8
    assert lazy.text == plain.text


def test_an_unknown_attribute_still_raises() -> None:
    s = Strip([Segment("x")], 1)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        s.nope  # type: ignore[attr-defined]  # noqa: B018


def test_lazy_strips_leave_fewer_objects_for_the_gc() -> None:
    gc.collect()
    before = len(gc.get_objects())
    kept = [Strip([Segment(f"row {i}")], 8) for i in range(1000)]
    lazy = len(gc.get_objects()) - before
    strips.uninstall()
    try:
        gc.collect()
        before = len(gc.get_objects())
        kept2 = [Strip([Segment(f"row {i}")], 8) for i in range(1000)]
        eager = len(gc.get_objects()) - before
    finally:
        strips.install()
    assert len(kept) == len(kept2) == 1000
    # tracked a row: the strip, its segment list and the segment; Textual's own adds 7 caches
    assert lazy <= 1000 * 3 + 10
    assert eager >= lazy + 1000 * 7


def _alive_with(text: str) -> int:
    """Strips tracked by the GC whose text is ``text``."""
    return sum(1 for o in gc.get_objects() if isinstance(o, Strip) and o.text == text)


@pytest.mark.parametrize(
    ("ask", "whole"),
    [
        (lambda s: s.divide([s.cell_length]), True),
        (lambda s: s.divide([s.cell_length, s.cell_length + 4]), True),  # cuts past the end
        (lambda s: s.crop_extend(0, s.cell_length, None), True),
        (lambda s: s.crop_extend(-2, s.cell_length, BLUE), True),
        (lambda s: s.divide([2, s.cell_length]), False),
        (lambda s: s.crop_extend(1, s.cell_length, None), False),
    ],
)
def test_a_strip_asked_for_itself_is_freed_without_the_gc(ask: object, whole: bool) -> None:
    """Textual's ``divide``/``crop_extend`` cached the strip in its own cache (a reference
    cycle only the cyclic GC frees); now the strip goes with its last reference."""
    text = "a row nobody else has 7c1f"
    gc.collect()
    gc.disable()
    try:
        s = Strip([Segment(text[:6]), Segment(text[6:], BLUE)])
        out = ask(s)  # type: ignore[operator]
        if whole:
            assert (out is s) if isinstance(out, Strip) else (list(out) == [s])
        else:
            assert out is not s and s not in list(out if not isinstance(out, Strip) else [out])
        del s, out
        assert _alive_with(text) == 0
    finally:
        gc.enable()


def test_textuals_own_divide_made_the_cycle() -> None:
    """What the wrap prevents, shown on Textual's own methods (if this fails, Textual no
    longer caches the strip in itself and the wrap in ``strips`` can go)."""
    text = "another row only here 41d2"
    gc.collect()
    gc.disable()
    try:
        s = Strip([Segment(text)])
        strips._original_divide(s, [s.cell_length])
        del s
        assert _alive_with(text) == 1  # kept alive by its own cache until a GC pass
        gc.collect()
        assert _alive_with(text) == 0
    finally:
        gc.enable()
