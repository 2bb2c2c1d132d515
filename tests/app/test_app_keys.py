"""App-wide keys on fixed data: the command palette, help with binding ids, views."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.app.screens.jobs import JobsScreen
from console.app.screens.modals import HelpScreen
from tests.app.demo_data import make_app


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUCONSOLE_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("GPUCONSOLE_CONFIG_DIR", str(tmp_path / "config"))
    return tmp_path / "state"


async def test_command_palette_opens_the_jobs_view(state_dir: Path) -> None:
    app = make_app(state_dir)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"Jobs")
        await pilot.pause(0.5)
        await pilot.press("enter")
        await pilot.pause(0.3)
        assert isinstance(app.screen, JobsScreen)


async def test_help_lists_every_binding_with_its_id(state_dir: Path) -> None:
    app = make_app(state_dir)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("2")
        await pilot.pause()
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        ids = {bid for _, _, _, bid in app.screen.rows}
        assert {"jobs.logs", "jobs.stop", "jobs.describe", "jobs.submit", "jobs.exec",
                "app.fleet", "app.jobs", "app.help", "app.quit"} <= ids
        keys = {bid: k for _, k, _, bid in app.screen.rows}
        assert keys["jobs.logs"] == "⏎,l" and keys["jobs.stop"] == "S"
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, JobsScreen)
