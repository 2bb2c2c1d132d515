"""The jobs view's ``k``: the selected job's stacks in a scrollable view (taken when it opens,
``r`` again, ``c`` copies, ``s`` saves). The service's ``stacks`` is replaced by one that
returns the real recorded capture (tests/data/stacks: a 2x2 gloo job whose rank 1 is stuck),
as no job runs here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from textual.widgets import DataTable, Static

from console.app.screens.stacks import StacksScreen
from console.jobs.store import JobRecord
from console.stacks.analysis import Analysis, analyse
from console.stacks.model import Capture, capture_from_json
from tests.app.demo_data import make_app

DATA = Path(__file__).resolve().parents[1] / "data" / "stacks"


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUCONSOLE_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("GPUCONSOLE_CONFIG_DIR", str(tmp_path / "config"))
    return tmp_path / "state"


async def test_k_opens_the_stacks_of_the_selected_job_and_takes_them_again(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = make_app(state_dir)
    taken: list[str] = []
    recorded = json.loads((DATA / "docker-gloo-2x2-rank1-stuck.capture.json").read_text())

    async def stacks(job: JobRecord, **_: object) -> tuple[Capture, Analysis]:
        taken.append(job.id)
        capture = capture_from_json({**recorded, "job_id": job.id})
        return capture, analyse(capture)

    monkeypatch.setattr(app.service, "stacks", stacks)
    copied: list[str] = []
    monkeypatch.setattr(app, "copy_to_clipboard", copied.append)
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.press("2")
        await pilot.pause()
        table = app.jobs_screen.query_one(DataTable)
        table.move_cursor(row=table.get_row_index("ddp-x-1a2b3c"))
        await pilot.press("k")
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, StacksScreen) and taken == ["ddp-x-1a2b3c"]
        shown = str(screen.query_one("#stacks", Static).content)
        assert shown.splitlines()[2].startswith(
            "likely cause: rank 1 is not in the collective (all_reduce) that ranks 0, 2-3"
        )
        assert str(screen.query_one("VerticalScroll").border_subtitle).startswith("taken ")
        await pilot.press("r")
        await pilot.pause()
        await app.workers.wait_for_complete()
        assert taken == ["ddp-x-1a2b3c", "ddp-x-1a2b3c"]
        await pilot.press("c")
        assert copied == [screen.text]
        await pilot.press("s")
        await pilot.pause()
        (saved,) = (state_dir / "stacks").glob("ddp-x-1a2b3c-*.txt")
        assert saved.read_text() == screen.text + "\n"
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is app.jobs_screen


async def test_k_on_a_finished_job_says_so_without_taking(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = make_app(state_dir)

    async def stacks(job: JobRecord, **_: object) -> tuple[Capture, Analysis]:
        raise AssertionError("no stacks of a finished job")

    monkeypatch.setattr(app.service, "stacks", stacks)
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.press("2")
        await pilot.pause()
        table = app.jobs_screen.query_one(DataTable)
        table.move_cursor(row=table.get_row_index("resnet-5c4b3a"))
        await pilot.press("k")
        await pilot.pause()
        assert app.screen is app.jobs_screen
        (note,) = [n.message for n in app._notifications if "resnet-5c4b3a" in n.message]
        assert note.startswith("job resnet-5c4b3a is not running (succeeded): ")
