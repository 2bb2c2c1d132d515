"""The confirmation modal on a small terminal: its buttons stay on screen whatever the detail."""

from __future__ import annotations

from textual.app import App
from textual.widgets import Button

from console.app.screens.modals import ConfirmScreen


async def test_confirm_buttons_visible_at_80x24_with_a_long_detail() -> None:
    detail = "\n".join(
        f"docker stop --time 30 gpuconsole-job-n{i}  (on host-{i})" for i in range(60)
    )
    answers: list[bool | None] = []
    app: App[None] = App()
    async with app.run_test(size=(80, 24)) as pilot:
        app.push_screen(
            ConfirmScreen("Stop job job-1 (60 nodes)?", detail, yes="Stop"), answers.append
        )
        await pilot.pause()
        for button_id in ("yes", "no"):
            region = app.screen.query_one(f"#{button_id}", Button).region
            assert region.height > 0 and region.bottom <= 24, (button_id, region)
        await pilot.click("#no")
        await pilot.pause()
    assert answers == [False]


# -- submit: path completion, overrides, a busy modal, errors keep what was typed ------------

import asyncio  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402
from textual.widgets import Input  # noqa: E402

from console.app.screens.jobs import JobsScreen  # noqa: E402
from console.app.screens.modals import SubmitScreen, complete_path  # noqa: E402
from console.errors import ConfigError  # noqa: E402
from tests.app.demo_data import jobs, make_app  # noqa: E402


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUCONSOLE_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("GPUCONSOLE_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "ddp.yaml").write_text("name: ddp\n")
    (tmp_path / "specs" / "data.csv").write_text("")
    (tmp_path / "specs" / "deep").mkdir()
    return tmp_path / "state"


def test_path_completion_takes_folders_and_yaml_files(state_dir: Path) -> None:
    assert complete_path("sp") == "specs/"
    assert complete_path("specs/d") == "specs/ddp.yaml"  # by name: data.csv is passed over
    assert complete_path("specs/dd") == "specs/ddp.yaml"
    assert complete_path("specs/da") is None  # data.csv is not a spec
    assert complete_path("specs/de") == "specs/deep/"
    assert complete_path("nowhere/x") is None


def footer_text(app: Any) -> str:
    return [s.text for s in app.screen._compositor.render_strips()][-1]


async def test_submit_modal_completes_plans_with_overrides_and_stays_busy(state_dir: Path) -> None:
    app = make_app(state_dir)
    release = asyncio.Event()
    planned: list[tuple[Path, dict[str, Any]]] = []

    async def plan(path: Path, overrides: dict[str, Any] | None = None) -> Any:
        planned.append((path, overrides or {}))
        await release.wait()
        raise ConfigError(
            "unknown field",
            "known fields here: name, image",
            path=str(path),
            line=3,
            field="imagee",
        )

    app.service.plan = plan  # type: ignore[method-assign]
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("2", "n")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, SubmitScreen)
        footer = footer_text(app)
        assert "Cancel" in footer and "S Stop" not in footer  # the modal's keys, not the view's
        await pilot.press(*"specs/dd")
        await pilot.pause(0.3)  # the suggester runs in a thread
        await pilot.press("right")  # takes the completion
        assert screen.query_one("#submit-path", Input).value == "specs/ddp.yaml"
        await pilot.press("tab", "2", "tab", *"--lr 3e-4 'a b'", "enter")
        await pilot.pause()
        assert planned == [(Path("specs/ddp.yaml"), {"nodes": 2, "args": ["--lr", "3e-4", "a b"]})]
        assert screen.phase == "planning"
        await pilot.press("d", "S", "y", "x")  # typed while busy: taken by nothing
        await pilot.pause()
        assert app.screen is screen and screen.phase == "planning"
        assert screen.typed().args == "--lr 3e-4 'a b'"
        release.set()
        await pilot.pause()
        assert app.screen is screen and screen.phase == "editing"
        status = str(screen.query_one("#submit-status").render())
        assert "specs/ddp.yaml:3: imagee: unknown field" in status
        assert "fix: known fields here" in status
        assert screen.typed().path == "specs/ddp.yaml"  # what was typed is kept
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, JobsScreen)
        await pilot.press("n")  # the next submit starts from it
        await pilot.pause()
        assert isinstance(app.screen, SubmitScreen)
        assert (app.screen.typed().path, app.screen.typed().nodes) == ("specs/ddp.yaml", "2")


async def test_submit_confirm_no_returns_to_the_modal_and_yes_launches(state_dir: Path) -> None:
    app = make_app(state_dir)
    launched: list[str] = []
    opened: list[str] = []

    class Planned:
        def plan_text(self) -> str:
            return "job ddp-1: host h200-a: docker run ..."

    async def plan(path: Path, overrides: dict[str, Any] | None = None) -> Any:
        return Planned()

    async def submit(sub: Any) -> Any:
        launched.append(sub.plan_text())
        return jobs()[0]

    app.service.plan = plan  # type: ignore[method-assign]
    app.service.submit = submit  # type: ignore[method-assign]
    app.open_logs = lambda job: opened.append(job.id)  # type: ignore[method-assign]
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("2", "n", *"specs/ddp.yaml", "enter")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")
        await pilot.pause()
        assert isinstance(app.screen, SubmitScreen) and app.screen.phase == "editing"
        assert launched == []
        await pilot.press("enter")
        await pilot.pause()
        await pilot.press("y")
        await pilot.pause()
        await pilot.pause()
        assert launched == ["job ddp-1: host h200-a: docker run ..."]
        assert isinstance(app.screen, JobsScreen) and opened == ["ddp-x-1a2b3c"]


async def test_submit_bad_nodes_and_quotes_are_said_in_the_modal(state_dir: Path) -> None:
    app = make_app(state_dir)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("2", "n", *"specs/ddp.yaml", "tab", *"a,,b", "enter")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, SubmitScreen) and screen.phase == "editing"
        assert "nodes (--nodes): 'a,,b' has an empty host name" in str(
            screen.query_one("#submit-status").render()
        )
        screen.query_one("#submit-nodes", Input).value = ""
        await pilot.press("tab", *"'open", "enter")
        await pilot.pause()
        assert "args (--arg): No closing quotation" in str(
            screen.query_one("#submit-status").render()
        )
