"""Data pushed into every screen at every step of its life, as the app's events, timers and
workers may push it: while a screen is installed but not composed, during its compose and
mount, and while Textual removes it (its children gone, its own ``Unmount`` not yet done;
``is_mounted`` is still true then). The app's own push paths run from Textual's message hook
at each ``Compose``, ``Mount`` and ``Unmount`` of every node, so each ordering happens in every
run: the race of issue 20 (``NoMatches: No nodes match 'DataTable' on JobsScreen`` from
``refresh_fleet_view`` while the jobs screen was being removed) is the jobs screen's own
``Unmount`` at shutdown, reached each time."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual import events
from textual.message import Message
from textual.widgets import DataTable

from console.alerts.model import Alert, AlertChanged
from console.app.app import GpuConsoleApp
from console.app.messages import (
    AlertsUpdated,
    FollowStateUpdated,
    JobsListed,
    JobUpdated,
    LogLinesArrived,
)
from console.app.screens.logs import LogsScreen
from console.app.widgets.logpanes import LogPanes
from console.jobs.logs import JobLogLine
from tests.app.demo_data import NOW, jobs, log_lines, make_app

ALERT = Alert(
    key="job_failed/job/llama-ft",
    rule="job_failed",
    severity="critical",
    summary="job llama-ft failed",
    job="llama-ft",
    since=NOW - 30,
    fired_at=NOW - 30,
)
LIFECYCLE = (events.Compose, events.Mount, events.Unmount)


class Pusher:
    """Pushes jobs, fleet, alerts and log lines through the app's own paths."""

    def __init__(self, app: GpuConsoleApp) -> None:
        self.app = app
        self.logs: LogsScreen | None = None
        self.lines: list[JobLogLine] = []
        self.pushed_lines = 0
        self.steps: set[tuple[str, str]] = set()
        self.running = next(j for j in jobs() if j.state == "running")
        self.lines = log_lines(self.running)

    def hook(self, message: Message) -> None:
        if isinstance(message, LIFECYCLE):
            # the node whose step it is (Textual's sender: the pump the event was made on)
            node = type(message._sender).__name__
            self.steps.add((type(message).__name__, node))
            self.push()

    def push(self) -> None:
        app = self.app
        app.on_jobs_listed(JobsListed(jobs()))  # the jobs worker's result
        app.on_job_updated(JobUpdated(self.running))  # a job's event: jobs view and panes
        app.refresh_fleet_view(force=True)  # the 2 Hz timer: fleet view and jobs' usage
        # a resolved alert pops no toast; the alerts view still gets the active list
        app.on_alerts_updated(AlertsUpdated(AlertChanged(ALERT, "resolved", NOW), [ALERT]))
        logs = self.logs
        if logs is None:
            return
        batch = self.lines[self.pushed_lines % len(self.lines) :][:3]
        self.pushed_lines += len(batch)
        app.on_log_lines_arrived(LogLinesArrived(logs.job.id, batch))
        app.on_follow_state_updated(FollowStateUpdated(logs.job.id, 0, "reconnecting", None))
        # what the app forwarded before the screen left the stack, and its drain timer
        logs.on_follow_state_updated(FollowStateUpdated(logs.job.id, 1, "following", None))
        logs._drain()


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUCONSOLE_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("GPUCONSOLE_CONFIG_DIR", str(tmp_path / "config"))
    return tmp_path / "state"


async def test_every_screen_takes_data_at_every_step_of_its_life(state_dir: Path) -> None:
    app = make_app(state_dir)
    pusher = Pusher(app)
    async with app.run_test(size=(160, 45), message_hook=pusher.hook) as pilot:
        # pushed while the jobs and alerts screens were installed but not composed: kept,
        # and shown when they are
        assert not app.jobs_screen.is_mounted and len(app.jobs_screen.jobs) == 4
        await pilot.press("2")
        await pilot.pause()
        table = app.jobs_screen.query_one(DataTable)
        assert table.row_count == 4
        assert app.jobs_screen.selected_job() is not None
        await pilot.press("3")
        await pilot.pause()
        assert app.alerts_screen.query_one(DataTable).row_count == 1
        await pilot.press("1")
        await pilot.pause()
        assert app.fleet_screen.query_one("#fleet-table", DataTable).row_count > 0

        # the log panes: lines pushed during their compose and mount, during the swap of the
        # panes (split ranks) and while they are removed
        logs = LogsScreen(pusher.running, follow=False)
        pusher.logs = logs
        app.call_later(app.push_screen, logs)  # from the app's task, as open_logs is called
        await pilot.pause()
        assert app.screen is logs
        await pilot.press("r")  # one pane per rank: the node panes are removed, new ones mounted
        await pilot.pause()
        assert logs.split_ranks
        while logs.backlog:
            await pilot.pause(0.01)
        # every line pushed while the screen was there reached the panes' buffers
        assert logs.lines_taken == pusher.pushed_lines > 0
        await pilot.press("r")
        await pilot.pause()
        assert not logs.split_ranks
        assert logs.follow_state == {0: "reconnecting", 1: "following"}
        pane = logs.query_one(LogPanes).pane_for(logs.by_node[0])
        assert pane is not None and "reconnecting" in pane.title
        await pilot.press("escape")  # removed: pushes keep coming through its Unmount
        await pilot.pause()
        assert app.screen is app.fleet_screen
        await pilot.press("2")
        await pilot.pause()
    # the shutdown pruned every screen with pushes at each Unmount: no exception was raised
    # (run_test re-raises one), and every kind of step was reached
    for screen in ("FleetScreen", "JobsScreen", "AlertsScreen", "LogsScreen"):
        assert {(step, screen) for step in ("Compose", "Mount", "Unmount")} <= pusher.steps
    assert ("Unmount", "LogPanes") in pusher.steps  # the swap of the panes
