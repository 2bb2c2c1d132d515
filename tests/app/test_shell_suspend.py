"""``x`` hands the terminal to a shell and takes it back (issue 20: the console hung for good).

Textual's ``App.suspend`` stops the driver's writer thread: a write while suspended queues for
a thread that is gone, and after 30 of them the loop blocks (and the shell's own I/O, which
runs on that loop, with it). And it resumes only when its body ends normally. The fake
``suspend`` here behaves the same way (a flag set on entry, cleared only on a normal exit);
every draw that would reach the driver while it is set is recorded."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
import webbrowser
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import RenderableType
from textual.screen import Screen
from textual.widgets import DataTable

import console.app.app as app_module
from console.app.app import GpuConsoleApp
from console.app.messages import LogLinesArrived
from console.app.screens.modals import AskScreen
from console.jobs.store import JobRecord
from remote.errors import TransportError
from tests.app.demo_data import jobs, log_lines, make_app, show_logs


class Terminal:
    """A stand-in for Textual's suspend, and what reached the driver while suspended."""

    def __init__(self, app: GpuConsoleApp) -> None:
        self.app = app
        self.suspended = False
        self.suspends = 0
        self.drawn_while_suspended: list[RenderableType] = []
        self.bells_while_suspended = 0
        display = app._display

        def recording_display(screen: Screen[Any], renderable: RenderableType | None) -> None:
            # Textual writes a renderable unless a batch update holds it back
            if self.suspended and renderable is not None and not app._batch_count:
                self.drawn_while_suspended.append(renderable)
            display(screen, renderable)

        app._display = recording_display  # type: ignore[method-assign]

    @contextlib.contextmanager
    def suspend(self) -> Iterator[None]:
        self.suspends += 1
        self.suspended = True
        yield
        self.suspended = False  # as Textual: not reached when the body raises


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUCONSOLE_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("GPUCONSOLE_CONFIG_DIR", str(tmp_path / "config"))
    return tmp_path / "state"


def setup(
    app: GpuConsoleApp,
    monkeypatch: pytest.MonkeyPatch,
    shell: Callable[[JobRecord], Coroutine[Any, Any, int]],
) -> tuple[Terminal, list[str]]:
    term = Terminal(app)
    monkeypatch.setattr(app, "suspend", term.suspend)
    prepared: list[str] = []

    async def prepare_exec(
        job: JobRecord, node: int | None, command: list[str], *, tty: bool
    ) -> Callable[[], Coroutine[Any, Any, int]]:
        prepared.append(job.id)
        return lambda: shell(job)

    monkeypatch.setattr(app.service, "prepare_exec", prepare_exec)
    return term, prepared


def notes(app: GpuConsoleApp) -> list[str]:
    return [n.message for n in app._notifications]


async def select(app: GpuConsoleApp, job_id: str) -> None:
    table = app.jobs_screen.query_one(DataTable)
    table.move_cursor(row=table.get_row_index(job_id))


async def test_a_running_shell_sees_nothing_drawn_and_the_app_comes_back(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = make_app(state_dir)
    running = next(j for j in jobs() if j.state == "running")
    lines = log_lines(running)
    seen: dict[str, object] = {}

    async def shell(job: JobRecord) -> int:
        # what arrives while the shell runs: log lines to the open panes, the fleet's
        # 2 Hz refresh, a toast, a bell; the loop keeps running all along
        for i in range(40):
            app.post_message(LogLinesArrived(job.id, lines[i * 3 : i * 3 + 3]))
            app.refresh_fleet_view(force=True)
            app.refresh(layout=True)
            if i == 10:
                app.notify("a toast while the shell runs")
                app.bell()
            await asyncio.sleep(0.01)
        seen["fleet_timer_active"] = app._fleet_timer._active.is_set()
        return 0

    term, prepared = setup(app, monkeypatch, shell)
    async with app.run_test(size=(160, 45)) as pilot:
        logs = await show_logs(app)
        taken = logs.lines_taken
        await pilot.press("x")  # two running nodes: which one
        await pilot.pause()
        assert isinstance(app.screen, AskScreen)
        await pilot.press("enter")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert prepared == [running.id] and term.suspends == 1
        assert term.drawn_while_suspended == []
        assert seen["fleet_timer_active"] is False  # paused while the shell had the terminal
        assert not term.suspended and not app.handed_over
        assert app._fleet_timer._active.is_set()
        # the lines that came meanwhile are in the panes, the toasts are shown now
        assert logs.lines_taken == taken + 120
        assert f"shell in {running.id} exited 0" in notes(app)
        assert "a toast while the shell runs" in notes(app)
        await pilot.press("escape")  # and it answers keys
        await pilot.pause()
        assert app.screen is app.fleet_screen


async def test_a_shell_that_fails_still_gives_the_terminal_back(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = make_app(state_dir)

    async def shell(job: JobRecord) -> int:
        await asyncio.sleep(0.05)
        raise TransportError("h200-a", "connection lost")

    term, prepared = setup(app, monkeypatch, shell)
    running = next(j for j in jobs() if j.state == "running")
    async with app.run_test(size=(160, 45)) as pilot:
        app.exec_shell(running, 1)  # node 1 asked for: no question
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert prepared == [running.id]
        assert term.suspends == 1 and not term.suspended  # resumed although it raised
        assert any("connection lost" in m for m in notes(app)), notes(app)
        await pilot.press("2")
        await pilot.pause()
        assert app.screen is app.jobs_screen


async def test_x_on_a_finished_job_says_what_to_do_without_suspending(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = make_app(state_dir)

    async def shell(job: JobRecord) -> int:
        raise AssertionError("no shell for a finished job")

    term, prepared = setup(app, monkeypatch, shell)
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.press("2")
        await pilot.pause()
        await select(app, "resnet-5c4b3a")
        await pilot.press("x")
        await pilot.pause()
        assert term.suspends == 0 and prepared == []
        (note,) = [m for m in notes(app) if "resnet-5c4b3a" in m]
        assert note.startswith("job resnet-5c4b3a is not running (succeeded): ")
        assert "`gpuconsole logs resnet-5c4b3a`" in note
        assert "`gpuconsole cp resnet-5c4b3a:PATH .`" in note
        await pilot.press("1")
        await pilot.pause()
        assert app.screen is app.fleet_screen


async def test_a_console_browser_gets_the_terminal_the_same_way(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = make_app(state_dir)
    term = Terminal(app)
    monkeypatch.setattr(app, "suspend", term.suspend)
    monkeypatch.setattr(app_module, "_console_browser", lambda: True)
    opened: list[str] = []

    def lynx(url: str, *args: Any, **kwargs: Any) -> bool:
        if "fail" in url:
            raise OSError("lynx: cannot open the terminal")
        time.sleep(0.3)  # the browser runs in a thread; the app's loop goes on meanwhile
        opened.append(url)
        return True

    monkeypatch.setattr(webbrowser, "open", lynx)
    async with app.run_test(size=(160, 45)) as pilot:
        app.notify("drawn later")
        app.open_browser("http://127.0.0.1:8888/lab")
        await app.workers.wait_for_complete()
        app.open_browser("http://127.0.0.1:8888/fail")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert opened == ["http://127.0.0.1:8888/lab"]
        assert term.suspends == 2 and not term.suspended
        assert term.drawn_while_suspended == []
        assert any("cannot open the terminal" in m for m in notes(app)), notes(app)
        await pilot.press("2")
        await pilot.pause()
        assert app.screen is app.jobs_screen


async def test_x_on_a_host_runtime_job_is_refused_at_once_with_the_login_to_use(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``runtime: host`` job has no container: its backend's refusal (the ssh login) is
    said before the node prompt of a 2-node job and without suspending."""
    app = make_app(state_dir)
    running = next(j for j in jobs() if j.state == "running")
    host_job = JobRecord(
        "hostddp-4d5e6f",
        "hostddp",
        "lab",
        None,
        {"runtime": "host"},
        "4" * 12,
        running.created_at,
        2,
        "running",
        nodes=[
            dataclasses.replace(n, job_id="hostddp-4d5e6f", container_id=f"hostjob-{n.node_rank}")
            for n in running.nodes
        ],
    )
    app.service.store.add_job(host_job)

    async def shell(job: JobRecord) -> int:
        raise AssertionError("no shell in a job without a container")

    term, prepared = setup(app, monkeypatch, shell)
    assert app.service.refusal(running, "exec") is None  # Docker offers exec
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.press("2")
        await pilot.pause()
        await select(app, "hostddp-4d5e6f")
        await pilot.press("x")
        await pilot.pause()
        assert term.suspends == 0 and prepared == []
        assert not isinstance(app.screen, AskScreen)  # no node prompt first
        (note,) = [m for m in notes(app) if "runtime: host" in m]
        assert "h200-a's own Python" in note and "`ssh " in note
