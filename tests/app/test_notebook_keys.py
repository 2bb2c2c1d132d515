"""Notebooks from the jobs view: ``o`` opens a notebook's tunnel and shows its URL, ``N`` starts
one, ``x`` enters it; ``--readonly`` hides both; tunnels are closed at exit.

The store holds demo_data's jobs plus one running notebook; :class:`FakeNotebookService`
stands in for the SSH host only (plan/submit/attach/exec record their arguments and answer
what a host would); everything else is the real app over a real store.
"""

from __future__ import annotations

import asyncio
import contextlib
import webbrowser
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
from textual.pilot import Pilot
from textual.widgets import DataTable, Input, Select, Static

import console.app.app as app_module
from console.app.app import GpuConsoleApp
from console.app.messages import JobUpdated
from console.app.screens.jobs import JobsScreen
from console.app.screens.modals import HelpScreen, NewNotebookScreen, NotebookScreen
from console.errors import JobError
from console.events import JobChanged
from console.jobs.store import JobRecord, NodeRecord, Store
from console.notebook.attach import NotebookServer, NotebookTunnel
from console.profiles import HostConfig, Profile
from console.service import Service, Submission
from remote.transport import Forward
from tests.app.demo_data import MONO, NOW, jobs
from tests.unit.test_fleet_rows import build_fleet

SIZE = (120, 36)
NB_ID = "notebook-a1b2c3"
TOKEN = "0123456789abcdef0123456789abcdef0123456789abcdef"


def notebook_job(
    job_id: str = NB_ID, host: str = "h200-a", state: str = "running", created_at: float = NOW - 60
) -> JobRecord:
    """A one-node notebook job as ``gpuconsole notebook`` records it."""
    node = NodeRecord(
        job_id,
        0,
        host,
        f"gpuconsole-{job_id}-n0",
        "f" * 64,
        state,
        None if state == "running" else 143,
        "2026-11-30T11:59:00Z",
        None if state == "running" else "2026-11-30T11:59:30Z",
    )
    return JobRecord(
        job_id,
        "notebook",
        "lab",
        None,
        {"kind": "notebook", "image": "img"},
        "4" * 12,
        created_at,
        1,
        state,
        nodes=[node],
    )


class FakeNotebookService(Service):
    """The real service with the host's side faked: planning, launching, attaching and exec
    record their arguments; attach returns a tunnel whose forward records its closing."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.attached: list[str] = []
        self.planned: list[dict[str, Any]] = []
        self.executed: list[tuple[str, int | None]] = []
        self.closed: list[int] = []
        self.attach_error: JobError | None = None
        self._next_port = 8888

    async def attach_notebook(
        self, job: JobRecord, *, local_port: int | None = None, timeout: float | None = None
    ) -> NotebookTunnel:
        self.attached.append(job.id)
        await asyncio.sleep(0)
        if self.attach_error is not None:
            raise self.attach_error
        port = self._next_port
        self._next_port += 1

        async def closer() -> None:
            self.closed.append(port)

        fwd = Forward(job.nodes[0].host, "127.0.0.1", port, "127.0.0.1", 8888, closer=closer)
        server = NotebookServer(job.id, job.nodes[0].host, "f" * 64, 8888, TOKEN)
        return NotebookTunnel(
            server, fwd, f"http://127.0.0.1:{port}/lab?token={TOKEN}", version="2.14.2"
        )

    async def plan_notebook(
        self,
        spec_path: Path | None = None,
        *,
        host: str | None = None,
        gpus: Literal["all"] | int | list[int] | None = None,
        image: str | None = None,
        workdir: str | None = None,
        name: str | None = None,
        dry_run: bool = False,
        force: bool = False,
    ) -> Submission:
        self.planned.append({"host": host, "gpus": gpus, "workdir": workdir})
        return Submission(loaded=None, docker=None, dry_run=False)  # type: ignore[arg-type]

    async def submit(self, submission: Submission) -> JobRecord:
        host = self.planned[-1]["host"]
        job = notebook_job("notebook-d4e5f6", host=host, created_at=NOW - 1)
        self.store.add_job(job)
        self.bus.publish(JobChanged(job))
        return job

    async def prepare_exec(
        self, job: JobRecord, node: int | None, command: list[str], *, tty: bool
    ) -> Callable[[], Coroutine[Any, Any, int]]:
        async def attach() -> int:
            self.executed.append((job.id, node))
            return 0

        return attach


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUCONSOLE_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("GPUCONSOLE_CONFIG_DIR", str(tmp_path / "config"))
    return tmp_path / "state"


def make_app(state_dir: Path, *, readonly: bool = False) -> GpuConsoleApp:
    """demo_data's app (frozen clocks, no hosts polled) over :class:`FakeNotebookService`,
    with the notebook job in its store."""
    store = Store(state_dir)
    for j in [*jobs(), notebook_job()]:
        if store.get(j.id) is None:
            store.add_job(j)
    profile = Profile(
        name="lab",
        hosts={
            "h200-a": HostConfig(hostname="127.0.0.1"),
            "h200-b": HostConfig(hostname="127.0.0.1"),
        },
    )
    service = FakeNotebookService(profile, store=store)
    service.fleet = build_fleet(job=True)
    return GpuConsoleApp(
        service, clock=lambda: NOW, monotonic=lambda: MONO, live=False, readonly=readonly
    )


def fake(app: GpuConsoleApp) -> FakeNotebookService:
    assert isinstance(app.service, FakeNotebookService)
    return app.service


async def select_job(pilot: Pilot[Any], job_id: str) -> JobsScreen:
    await pilot.press("2")
    await pilot.pause()
    screen = pilot.app.screen
    assert isinstance(screen, JobsScreen)
    table = screen.query_one(DataTable)
    table.move_cursor(row=table.get_row_index(job_id))
    await pilot.pause()
    job = screen.selected_job()
    assert job is not None and job.id == job_id
    return screen


async def wait_for(pilot: Pilot[Any], cond: Any, what: str) -> None:
    for _ in range(100):
        if cond():
            return
        await pilot.pause(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def notes(app: GpuConsoleApp) -> list[str]:
    return [n.message for n in app._notifications]


async def test_o_on_a_notebook_attaches_once_and_shows_the_url(state_dir: Path) -> None:
    app = make_app(state_dir)
    async with app.run_test(size=SIZE) as pilot:
        await select_job(pilot, NB_ID)
        await pilot.press("o")
        await wait_for(pilot, lambda: isinstance(app.screen, NotebookScreen), "the URL modal")
        url = f"http://127.0.0.1:8888/lab?token={TOKEN}"
        assert isinstance(app.screen, NotebookScreen) and app.screen.url == url
        assert url in str(app.screen.query_one("#url", Static).render())
        assert fake(app).attached == [NB_ID]
        await pilot.press("c")
        await pilot.pause()
        assert app.clipboard == url
        assert any("copied" in m for m in notes(app))
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, JobsScreen)
        await pilot.press("o")  # the same tunnel: no second attach
        await wait_for(pilot, lambda: isinstance(app.screen, NotebookScreen), "the modal again")
        assert fake(app).attached == [NB_ID] and list(app.tunnels) == [NB_ID]
        assert isinstance(app.screen, NotebookScreen) and app.screen.url == url


async def test_the_browser_opens_only_when_asked(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[str] = []

    def fake_open(url: str, *args: Any, **kwargs: Any) -> bool:
        opened.append(url)
        return True

    monkeypatch.setattr(webbrowser, "open", fake_open)
    monkeypatch.setattr(app_module, "_console_browser", lambda: False)
    app = make_app(state_dir)
    async with app.run_test(size=SIZE) as pilot:
        await select_job(pilot, NB_ID)
        await pilot.press("o")
        await wait_for(pilot, lambda: isinstance(app.screen, NotebookScreen), "the URL modal")
        await pilot.pause(0.1)
        assert opened == []
        await pilot.press("o")
        await wait_for(pilot, lambda: bool(opened), "the browser")
        assert opened == [f"http://127.0.0.1:8888/lab?token={TOKEN}"]


async def test_o_on_a_training_job_says_what_to_do(state_dir: Path) -> None:
    app = make_app(state_dir)
    async with app.run_test(size=SIZE) as pilot:
        await select_job(pilot, "ddp-x-1a2b3c")
        await pilot.press("o")
        await pilot.pause(0.1)
        assert fake(app).attached == []
        assert isinstance(app.screen, JobsScreen)
        assert any(
            "ddp-x-1a2b3c is a train job, not a notebook" in m and "x opens a shell" in m
            for m in notes(app)
        )


async def test_an_attach_error_is_a_notification(state_dir: Path) -> None:
    app = make_app(state_dir)
    fake(app).attach_error = JobError(
        f"notebook {NB_ID} is not running (stopped)",
        "start a new one with `gpuconsole notebook --host HOST`",
    )
    async with app.run_test(size=SIZE) as pilot:
        await select_job(pilot, NB_ID)
        await pilot.press("o")
        await wait_for(pilot, lambda: any("is not running" in m for m in notes(app)), "the error")
        assert isinstance(app.screen, JobsScreen) and app.tunnels == {}
        assert any("fix: start a new one" in m for m in notes(app))


async def test_new_notebook_modal_submits_host_gpus_workdir(state_dir: Path) -> None:
    app = make_app(state_dir)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")
        await pilot.pause()
        await pilot.press("N")
        await pilot.pause()
        modal = app.screen
        assert isinstance(modal, NewNotebookScreen)
        modal.query_one(Select).value = "h200-b"
        modal.query_one("#nb-workdir", Input).value = "~/nb"
        await pilot.press(*"0,x")  # the GPUs input has the focus
        await pilot.press("enter")
        await pilot.pause()
        assert app.screen is modal and fake(app).planned == []  # refused, said in the modal
        assert "--gpus '0,x'" in str(modal.query_one("#nb-error", Static).render())
        await pilot.press("backspace", "1", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, NotebookScreen), "the URL modal")
        assert fake(app).planned == [{"host": "h200-b", "gpus": [0, 1], "workdir": "~/nb"}]
        assert fake(app).attached == ["notebook-d4e5f6"]
        jobs_screen = app.get_screen("jobs")
        assert isinstance(jobs_screen, JobsScreen) and "notebook-d4e5f6" in jobs_screen.jobs
        assert jobs_screen.query_one(DataTable).get_row("notebook-d4e5f6")[1].plain == "notebook"


async def test_new_notebook_defaults_are_left_to_the_service(state_dir: Path) -> None:
    app = make_app(state_dir)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")
        await pilot.pause()
        await pilot.press("N")
        await pilot.pause()
        await pilot.press("enter")
        await wait_for(pilot, lambda: bool(fake(app).planned), "the plan")
        assert fake(app).planned == [{"host": "h200-a", "gpus": None, "workdir": None}]


async def test_readonly_hides_open_and_new_notebook(state_dir: Path) -> None:
    app = make_app(state_dir, readonly=True)
    async with app.run_test(size=SIZE) as pilot:
        await select_job(pilot, NB_ID)
        await pilot.press("o")
        await pilot.pause(0.1)
        await pilot.press("N")
        await pilot.pause(0.1)
        assert isinstance(app.screen, JobsScreen)
        assert fake(app).attached == [] and app.tunnels == {}
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        ids = {bid for _, _, _, bid in app.screen.rows}
        assert "jobs.logs" in ids
        assert not ids & {"jobs.notebook", "jobs.new_notebook", "jobs.exec"}


async def test_help_lists_the_notebook_keys(state_dir: Path) -> None:
    app = make_app(state_dir)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")
        await pilot.pause()
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        keys = {bid: k for _, k, _, bid in app.screen.rows}
        assert keys["jobs.notebook"] == "o" and keys["jobs.new_notebook"] == "N"


async def test_tunnels_close_when_the_notebook_ends_and_at_exit(state_dir: Path) -> None:
    store = Store(state_dir)
    store.add_job(notebook_job("notebook-0b0b0b", created_at=NOW - 30))
    store.close()
    app = make_app(state_dir)
    async with app.run_test(size=SIZE) as pilot:
        for job_id in (NB_ID, "notebook-0b0b0b"):
            await select_job(pilot, job_id)
            await pilot.press("o")
            await wait_for(pilot, lambda: isinstance(app.screen, NotebookScreen), "the modal")
            await pilot.press("escape")
            await pilot.pause()
        assert sorted(app.tunnels) == sorted([NB_ID, "notebook-0b0b0b"])
        ended = notebook_job(state="stopped")
        app.post_message(JobUpdated(ended))
        await wait_for(pilot, lambda: fake(app).closed == [8888], "the ended one's close")
        assert list(app.tunnels) == ["notebook-0b0b0b"]
        assert any(f"notebook {NB_ID} is stopped: its tunnel is closed" in m for m in notes(app))
    assert sorted(fake(app).closed) == [8888, 8889] and app.tunnels == {}


async def test_x_on_a_notebook_enters_its_container(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = make_app(state_dir)

    @contextlib.contextmanager
    def no_suspend() -> Iterator[None]:  # run_test has no terminal to hand over
        yield

    monkeypatch.setattr(app, "suspend", no_suspend)
    async with app.run_test(size=SIZE) as pilot:
        await select_job(pilot, NB_ID)
        await pilot.press("x")
        await wait_for(pilot, lambda: bool(fake(app).executed), "the exec")
        assert fake(app).executed == [(NB_ID, None)]
