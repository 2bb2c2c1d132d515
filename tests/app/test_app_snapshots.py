"""Snapshots of the app's three views at 120x36 with frozen clocks and replayed data (the
H200 traces, fixed jobs and log lines: tests/app/demo_data.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from tests.app.demo_data import make_app, show_fleet, show_logs, show_progress

SIZE = (120, 36)


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUCONSOLE_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("GPUCONSOLE_CONFIG_DIR", str(tmp_path / "config"))
    return tmp_path / "state"


def test_fleet_view(snap_compare: Any, state_dir: Path) -> None:
    async def before(pilot: Pilot[Any]) -> None:
        await pilot.pause()
        await show_fleet(pilot.app)  # type: ignore[arg-type]
        await pilot.pause()

    assert snap_compare(make_app(state_dir), terminal_size=SIZE, run_before=before)


def test_jobs_view(snap_compare: Any, state_dir: Path) -> None:
    async def before(pilot: Pilot[Any]) -> None:
        await show_fleet(pilot.app)  # type: ignore[arg-type]  # GPUs and utilization
        show_progress(pilot.app)  # type: ignore[arg-type]  # rate and $/h of the running job
        await pilot.press("2")
        await pilot.pause()
        await pilot.press("down", "down")  # the failed job, with its diagnosis
        await pilot.pause()

    assert snap_compare(make_app(state_dir), terminal_size=SIZE, run_before=before)


def test_logs_view(snap_compare: Any, state_dir: Path) -> None:
    async def before(pilot: Pilot[Any]) -> None:
        await pilot.press("2")
        await show_logs(pilot.app)  # type: ignore[arg-type]
        await pilot.pause(0.6)  # the header's counts repaint at most every 0.5 s

    assert snap_compare(make_app(state_dir), terminal_size=SIZE, run_before=before)
