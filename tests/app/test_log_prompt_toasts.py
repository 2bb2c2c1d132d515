"""Toasts and the log panes' `/` and `&` prompt: while the prompt is open, every toast (one
shown before it opened, one that comes while it is open) sits above it, so its hint and what
is typed stay readable; once it closes, toasts go back above the status line."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets._toast import Toast, ToastRack

from console.app.widgets.logpane import LogPrompt
from tests.app.demo_data import make_app, show_logs


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUCONSOLE_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("GPUCONSOLE_CONFIG_DIR", str(tmp_path / "config"))
    return tmp_path / "state"


@pytest.mark.parametrize("size", [(100, 30), (160, 45)])
@pytest.mark.parametrize("key", ["ampersand", "slash"])
async def test_toasts_never_cover_the_prompt(
    state_dir: Path, size: tuple[int, int], key: str
) -> None:
    app = make_app(state_dir)
    async with app.run_test(size=size, notifications=True) as pilot:
        await pilot.press("2")
        await show_logs(app)
        app.notify("shown before the prompt opened " * 4, title="before", timeout=60)
        await pilot.pause()
        await pilot.press(key)
        await pilot.pause(0.2)
        app.notify(
            "came while the prompt is open " * 4, title="during", severity="error", timeout=60
        )
        await pilot.pause(0.5)
        prompt = app.screen.query_one(LogPrompt)
        await pilot.press(*"r0]")
        await pilot.pause(0.2)
        toasts = list(app.screen.query(Toast))
        assert len(toasts) == 2
        for t in toasts:
            assert t.region.bottom <= prompt.region.y, (t.region, prompt.region)
        row = app.screen._compositor.render_strips()[prompt.region.y].text
        assert row.strip() == "r0]"  # what is typed, nothing over it
        await pilot.press("escape")  # the prompt closes: toasts back above the status line
        await pilot.pause(0.3)
        assert not app.screen.query(LogPrompt)
        rack = app.screen.query_one(ToastRack)
        assert rack.styles.margin.bottom == 1  # Textual's own: just above the footer
        await pilot.press(key)
        await pilot.pause(0.3)
        prompt = app.screen.query_one(LogPrompt)
        row = app.screen._compositor.render_strips()[prompt.region.y].text
        hint = str(prompt.placeholder)
        assert hint in row and row.strip() == hint  # the whole hint, at 100 columns too
