"""App-wide keys on fixed data: the command palette, help with binding ids, views."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.app.screens.jobs import JobsScreen
from console.app.screens.modals import HelpScreen
from tests.app.demo_data import make_app, show_logs


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
        assert {
            "jobs.logs",
            "jobs.stop",
            "jobs.describe",
            "jobs.submit",
            "jobs.exec",
            "app.fleet",
            "app.jobs",
            "app.help",
            "app.quit",
        } <= ids
        keys = {bid: k for _, k, _, bid in app.screen.rows}
        assert keys["jobs.logs"] == "⏎,l" and keys["jobs.stop"] == "S"
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, JobsScreen)


def test_every_default_key_is_a_valid_keymap_value() -> None:
    """Each binding's own keys, given back in a keymap, are accepted: names such as `slash`
    and `question_mark` are keys, and the defaults' own shared keys (a modal's `q` closes
    it, not Quit) are not clashes."""
    from console.app.app import _binding_scopes, _bindings, keymap_errors

    keymap = {
        b.id: b.key for scope in _binding_scopes() for cls in scope for b in _bindings(cls) if b.id
    }
    assert {"fleet.filter", "app.quit", "jobs.stop"} <= set(keymap)
    assert keymap_errors(keymap) == []
    assert keymap_errors({"jobs.stop": "q"}) == [
        (
            "jobs.stop",
            "keymap: jobs.stop: 'q' is already the key of app.quit (Quit), which it "
            "would replace; give jobs.stop another key, or move app.quit as well (e.g. app.quit: "
            "ctrl+q)",
        )
    ]
    assert keymap_errors({"jobs.stop": "q", "app.quit": "ctrl+q"}) == []
    assert keymap_errors({"fleet.sort": "2"})[0][1].startswith(
        "keymap: fleet.sort: '2' is already the key of app.jobs"
    )


async def test_a_number_key_from_config_yaml_switches_views(state_dir: Path) -> None:
    """`app.fleet: 1`-style keys YAML reads as numbers work as keys (here the views swapped)."""
    from console.config import load_config

    conf = state_dir.parent / "config.yaml"
    conf.write_text("keymap:\n  app.fleet: 2\n  app.jobs: 1\n")
    config = load_config(conf)
    app = make_app(state_dir)
    app.config = config
    app.set_keymap(config.keymap)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("1")
        await pilot.pause()
        assert isinstance(app.screen, JobsScreen)
        await pilot.press("2")
        await pilot.pause()
        assert not isinstance(app.screen, JobsScreen)


async def test_screenshot_goes_to_a_folder_that_exists_and_says_the_full_path(
    state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No ~/Downloads (a server): the SVG goes to `screenshots/` in the state dir and the
    toast names the file; a folder that cannot be made: the path and the OS's reason."""
    monkeypatch.setenv("XDG_DOWNLOAD_DIR", str(tmp_path / "no-such-downloads"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    app = make_app(state_dir)
    said: list[tuple[str, str]] = []
    async with app.run_test(size=(120, 36)) as pilot:
        monkeypatch.setattr(
            app, "notify", lambda msg, **kw: said.append((msg, kw.get("severity", "")))
        )
        path = app.deliver_screenshot()
        await pilot.pause()
        assert path is not None and Path(path).parent == state_dir / "screenshots"
        assert Path(path).read_text().lstrip().startswith("<svg")
        assert said[-1] == (f"saved {path}", "")
        blocker = tmp_path / "a-file"
        blocker.write_text("")
        assert app.deliver_screenshot("s.svg", path=str(blocker / "sub")) is None
        assert said[-1] == (
            f"screenshot not saved to {blocker / 'sub' / 's.svg'}: Not a directory",
            "error",
        )


def test_every_binding_id_is_in_the_architecture_list() -> None:
    """README sends users to docs/architecture.md ("Bindings carry ids") for every binding
    id a keymap can name: each id of every screen, widget and modal is listed there, and the
    list names no id that no binding has."""
    import re

    from console.app.app import _binding_scopes, _bindings

    ids = {b.id for scope in _binding_scopes() for cls in scope for b in _bindings(cls) if b.id}
    text = (Path(__file__).parents[2] / "docs" / "architecture.md").read_text()
    start = text.index("- Bindings carry ids:")
    listed_text = text[start : text.index("`config.yaml` `keymap:`", start)]
    listed = set(re.findall(r"\b[a-z_]+\.[a-z_]+\b", listed_text))
    assert {"fleet.gpu_panel", "logs.add_job", "alerts.ack"} <= ids
    assert sorted(ids - listed) == []
    assert sorted(listed - ids) == []


async def test_help_does_not_list_a_key_a_priority_binding_takes(state_dir: Path) -> None:
    """ctrl+c quits everywhere (the app's priority binding): help does not also offer it as
    Textual's "Copy selected text", which never runs; super+c still copies."""
    app = make_app(state_dir)
    async with app.run_test(size=(120, 36)) as pilot:
        for view in ("1", "2"):
            await pilot.press(view)
            await pilot.pause()
            await pilot.press("question_mark")
            await pilot.pause()
            assert isinstance(app.screen, HelpScreen)
            by_desc = {desc: keys for _, keys, desc, _ in app.screen.rows}
            ctrl_c = [
                (desc, bid) for _, keys, desc, bid in app.screen.rows if "^c" in keys.split(",")
            ]
            assert ctrl_c == [("Quit", "app.interrupt")]
            assert by_desc.get("Copy selected text") == "super+c"
            await pilot.press("escape")
            await pilot.pause()


async def test_help_lists_each_key_once_for_what_it_does(state_dir: Path) -> None:
    """On every view, `?` lists a key once: enter on the jobs table is the jobs view's Logs
    (the table's own "Select" is how it happens), tab in the log panes is Next pane (not
    Textual's Focus Next). Two of the console's own bindings may share a key when the first
    passes it on (escape clears a pane's search, else goes back): both stay listed."""
    app = make_app(state_dir)
    async with app.run_test(size=(120, 36)) as pilot:
        seen: dict[str, list[tuple[str, str]]] = {}
        for view in ("1", "2", "3", "logs"):
            if view == "logs":
                await pilot.press("2")
                await show_logs(app)
            else:
                await pilot.press(view)
            await pilot.pause()
            await pilot.press("question_mark")
            await pilot.pause()
            assert isinstance(app.screen, HelpScreen)
            by_key: dict[str, list[tuple[str, str]]] = {}
            for _, keys, desc, bid in app.screen.rows:
                for k in keys.split(","):
                    by_key.setdefault(k, []).append((desc, bid))
            twice = {k: v for k, v in by_key.items() if len(v) > 1}
            assert all(bid for v in twice.values() for _, bid in v), (view, twice)
            seen[view] = by_key["⏎"] if "⏎" in by_key else by_key.get("tab", [])
            if view == "logs":
                assert by_key["tab"] == [("Next pane", "logs.pane_next")]
                assert by_key["esc"] == [
                    ("Clear search", "logs.clear_search"),
                    ("Back", "logs.back"),
                ]
            await pilot.press("escape")
            await pilot.pause()
        assert seen["1"] == [("Open job", "fleet.open_job")]
        assert seen["2"] == [("Logs", "jobs.logs")]
        assert seen["3"] == [("Job logs", "alerts.logs")]
