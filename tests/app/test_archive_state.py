"""The service's ArchiveStateChanged (a node's log archive in the state dir could not be
written during a follow: a full disk; then written again) reaches the user: a toast that
says which job and node, why and the fix, and the job's log panes say it in their header
until the archive is written again, when a second toast says so."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.app.screens.logs import LogsScreen
from console.app.widgets.oneline import OneLine
from console.events import ArchiveStateChanged
from tests.app.demo_data import jobs, make_app


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUCONSOLE_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("GPUCONSOLE_CONFIG_DIR", str(tmp_path / "config"))
    return tmp_path / "state"


async def test_a_full_archive_is_said_and_its_recovery_too(state_dir: Path) -> None:
    app = make_app(state_dir)
    job = next(j for j in jobs() if j.state == "running")
    error = f"{state_dir}/logs/{job.id}/node1.log: no space left on device"
    async with app.run_test(size=(160, 45), notifications=True) as pilot:
        await pilot.press("2")
        screen = LogsScreen(job, follow=False)
        await app.push_screen(screen)
        await pilot.pause()
        header = screen.query_one("#logs-header", OneLine)
        assert "not archived" not in str(header.render())
        # what the follow publishes on the service's bus (console/jobs/logs.py _Archiver)
        app.service.bus.publish(
            ArchiveStateChanged(job.id, 1, error, "free space in the state dir")
        )
        await pilot.pause(0.3)
        said = [n for n in app._notifications if n.title == "log archive"]
        assert len(said) == 1 and said[0].severity == "error"
        assert said[0].message == (
            f"job {job.id} node 1: its log cannot be archived: {error}\nthe panes go on; its "
            "lines are kept and archived once the state dir can be written\n"
            "fix: free space in the state dir"
        )
        assert f"n1 not archived: {error}" in str(header.render())
        # another job's archive is not this screen's
        app.service.bus.publish(ArchiveStateChanged("other-job-1", 0, "x: full", None))
        await pilot.pause(0.3)
        assert "n0 not archived" not in str(header.render())
        app.service.bus.publish(ArchiveStateChanged(job.id, 1, None, None))
        await pilot.pause(0.3)
        again = [n.message for n in app._notifications if n.title == "log archive"]
        assert again[-1] == f"job {job.id} node 1: its log is archived again"
        assert "not archived" not in str(header.render())
        # the toast shows on any view, not only over the job's panes
        await pilot.press("escape")
        app.service.bus.publish(ArchiveStateChanged(job.id, 0, error, None))
        await pilot.pause(0.3)
        assert [n.message for n in app._notifications if n.title == "log archive"][-1].startswith(
            f"job {job.id} node 0: its log cannot be archived"
        )
