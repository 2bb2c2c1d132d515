"""The jobs view on fixed data (tests/app/demo_data.py): `/` filter, `s`/`r` sort, home/end/g/G,
the cursor kept on its job by id, the detail line that shows a reason whole, a footer that
fits 100 columns, and `D` (rm) with its confirmation and refusals."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from textual.widgets import DataTable

from console.app.app import GpuConsoleApp
from console.app.screens.jobs import JobsScreen
from console.app.screens.modals import ConfirmScreen
from console.jobs.store import JobRecord, NodeRecord
from tests.app.demo_data import NOW, jobs, make_app, show_fleet, show_logs

#: The demo jobs, youngest first (the default sort: age).
BY_AGE = ["ddp-x-1a2b3c", "sweep-2d1e0f", "llama-ft-9f8e7d", "resnet-5c4b3a"]


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUCONSOLE_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("GPUCONSOLE_CONFIG_DIR", str(tmp_path / "config"))
    return tmp_path / "state"


def screen_text(app: GpuConsoleApp) -> list[str]:
    """The terminal's rows as plain text."""
    return [strip.text for strip in app.screen._compositor.render_strips()]


def selected(app: GpuConsoleApp) -> str | None:
    screen = app.get_screen("jobs")
    assert isinstance(screen, JobsScreen)
    job = screen.selected_job()
    return job.id if job else None


def jobs_screen(app: GpuConsoleApp) -> JobsScreen:
    screen = app.get_screen("jobs")
    assert isinstance(screen, JobsScreen)
    return screen


def newer(job_id: str, created_at: float) -> JobRecord:
    """Another user's job, submitted after the demo ones."""
    return JobRecord(
        job_id,
        job_id.rsplit("-", 1)[0],
        "lab",
        None,
        {},
        "9" * 12,
        created_at,
        1,
        "running",
        nodes=[NodeRecord(job_id, 0, "h200-b", f"gpuconsole-{job_id}-n0", "f" * 64, "running")],
    )


async def test_the_cursor_stays_on_its_job_when_newer_jobs_arrive(state_dir: Path) -> None:
    """Jobs inserted above the cursor (a refresh, a submit elsewhere) do not move it to
    another job: `d` then describes the job the user chose."""
    app = make_app(state_dir)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("2", "down", "down")
        await pilot.pause()
        assert selected(app) == "llama-ft-9f8e7d"
        listed = [newer("other-a-aaaaaa", NOW - 10), newer("other-b-bbbbbb", NOW - 5), *jobs()]
        app.on_jobs_listed(type("M", (), {"jobs": listed})())  # type: ignore[arg-type]
        await pilot.pause()
        assert jobs_screen(app).shown[:2] == ["other-b-bbbbbb", "other-a-aaaaaa"]
        assert selected(app) == "llama-ft-9f8e7d"
        jobs_screen(app).update_job(newer("other-c-cccccc", NOW - 1))
        await pilot.pause()
        assert selected(app) == "llama-ft-9f8e7d"
        await pilot.press("down")
        await pilot.pause()
        assert selected(app) == "resnet-5c4b3a"


async def test_home_end_g_and_shift_g_move_the_cursor(state_dir: Path) -> None:
    app = make_app(state_dir)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("2")
        for key, want in (
            ("G", BY_AGE[-1]),
            ("g", BY_AGE[0]),
            ("end", BY_AGE[-1]),
            ("home", BY_AGE[0]),
        ):
            await pilot.press(key)
            await pilot.pause()
            assert selected(app) == want, key


async def test_slash_filters_by_text_and_field_and_escape_clears(state_dir: Path) -> None:
    app = make_app(state_dir)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("2", "slash", *"fail")
        await pilot.pause()
        screen = jobs_screen(app)
        assert screen.shown == ["llama-ft-9f8e7d"]
        assert "filter 'fail': 1 job" in screen_text(app)[0]
        await pilot.press("enter")  # keep it, back to the table
        await pilot.pause()
        assert isinstance(app.focused, DataTable)
        assert selected(app) == "llama-ft-9f8e7d"
        screen.set_filter("host:h200-b !state:running")
        await pilot.pause()
        assert screen.shown == ["sweep-2d1e0f", "llama-ft-9f8e7d"]
        screen.set_filter("kind:notebook")
        await pilot.pause()
        assert screen.shown == [] and selected(app) is None
        await pilot.press("escape")
        await pilot.pause()
        assert screen.shown == BY_AGE and screen.filter_query == ""
        assert isinstance(app.screen, JobsScreen)


async def test_s_cycles_the_sort_column_and_r_reverses_it(state_dir: Path) -> None:
    app = make_app(state_dir)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("2")
        await pilot.pause()
        screen = jobs_screen(app)
        assert screen.shown == BY_AGE
        await pilot.press("down")  # the cursor follows its job through every order
        await pilot.press("s")
        await pilot.pause()
        assert (screen.sort_key, screen.shown) == ("job", sorted(BY_AGE))
        assert selected(app) == "sweep-2d1e0f"
        header = screen_text(app)[1]
        assert "JOB ▲" in header and "AGE " in header
        await pilot.press("r")
        await pilot.pause()
        assert screen.shown == sorted(BY_AGE, reverse=True)
        assert "JOB ▼" in screen_text(app)[1]
        await pilot.press("s")  # state: what needs attention first
        await pilot.pause()
        assert screen.shown == ["llama-ft-9f8e7d", "ddp-x-1a2b3c", "sweep-2d1e0f", "resnet-5c4b3a"]
        await pilot.press("s", "s")  # exit, highest first, no exit code last
        await pilot.pause()
        assert screen.sort_key == "exit"
        assert screen.shown == ["llama-ft-9f8e7d", "resnet-5c4b3a", "ddp-x-1a2b3c", "sweep-2d1e0f"]
        assert selected(app) == "sweep-2d1e0f"


async def test_a_long_reason_is_read_whole_under_the_table_at_100x30(state_dir: Path) -> None:
    """At 100 columns the REASON column is cut; the line under the table shows the selected
    job's diagnosis whole, wrapped, with its fix; the footer fits (help and quit shown)."""
    app = make_app(state_dir)
    async with app.run_test(size=(100, 30)) as pilot:
        await show_fleet(app)
        await pilot.press("2", "down", "down")
        await pilot.pause()
        rows = screen_text(app)
        text = " ".join(r.strip() for r in rows)
        assert (
            "first failure: node 1 on h200-b rank 3, exit code 1: CUDA out of memory on "
            "rank 3 (tried to allocate 2.00 GiB)"
        ) in text
        assert "fix: lower the batch size" in text
        footer = rows[-1]
        for label in (
            "l Logs",
            "S Stop",
            "d Describe",
            "n Submit",
            "x Shell",
            "k Stacks",
            "D Remove",
            "1 Fleet",
            "? Help",
            "q Quit",
            "^p palette",
        ):
            assert label in footer, (label, footer)
        assert "2 Jobs" not in footer  # the view shown
        await pilot.press("up")  # stopped by the user: the reason shows there too
        await pilot.pause()
        jobs_screen(app).update_job(dataclasses.replace(jobs()[3], stop_requested_at=NOW - 5000))
        await pilot.pause()
        assert "stopped by the user (SIGTERM)" in " ".join(screen_text(app)[-6:])


@pytest.mark.parametrize(
    ("size", "missing"),
    [
        ((160, 45), []),
        (
            (100, 30),
            ["r Per rank", "S Stop", "x Shell", "nN Match", "1 Fleet", "2 Jobs", "3 Alerts"],
        ),
    ],
)
async def test_logs_footer_shows_what_matters_whole(
    state_dir: Path, size: tuple[int, int], missing: list[str]
) -> None:
    """The log panes' footer at 160x45 shows every key; at 100x30 the keys that matter most
    (help and quit first, back, follow, search, filter, errors, zoom, all ranks), each whole:
    none is cut at the right edge or under the palette key; `?` lists the rest."""
    from textual.widgets._footer import FooterKey

    from console.app.screens.logs import LogsFooter

    app = make_app(state_dir)
    async with app.run_test(size=size) as pilot:
        await pilot.press("2")
        await show_logs(app)
        await pilot.press("tab")
        await pilot.pause(0.3)
        footer_row = screen_text(app)[-1]
        labels = [
            "? Help",
            "q Quit",
            "esc Back",
            "G Follow",
            "/ Search",
            "& Filter",
            "eE Error",
            "z Zoom",
            "a All ranks",
            "r Per rank",
            "S Stop",
            "x Shell",
            "nN Match",
            "1 Fleet",
            "2 Jobs",
            "3 Alerts",
        ]
        for label in labels:
            assert (label in footer_row) == (label not in missing), (label, footer_row)
        assert footer_row.rstrip().endswith("▏^p palette")
        footer = app.screen.query_one(LogsFooter)
        palette = next(k for k in footer.query(FooterKey) if k.has_class("-command-palette"))
        for key in footer.query(FooterKey):
            if key is not palette:
                assert key.region.right <= palette.region.x, (key.description, key.region)
        # the app's own keys (those the footer left out included) are all in `?`
        await pilot.press("question_mark")
        await pilot.pause()
        described = {desc for _, _, desc, _ in app.screen.rows}  # type: ignore[attr-defined]
        assert {"Per rank", "Stop", "Shell", "Next match", "Fleet", "Jobs"} <= described


async def test_remove_confirms_what_it_removes_and_refuses_a_running_job(state_dir: Path) -> None:
    app = make_app(state_dir)
    said: list[str] = []
    async with app.run_test(size=(120, 36)) as pilot:
        app.notify = lambda msg, **kw: said.append(msg)  # type: ignore[method-assign]
        await pilot.press("2", "D")  # the running job
        await pilot.pause()
        assert isinstance(app.screen, JobsScreen)
        assert said[-1] == "job ddp-x-1a2b3c is running: stop it first (S), then remove it"
        await pilot.press("down", "D")  # stopped: confirm lists each container
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        assert app.screen.title_text == "Remove job sweep-2d1e0f?"
        assert app.screen.detail.splitlines() == [
            "h200-b: docker rm gpuconsole-sweep-2d1e0f-n0",
            "and each host's synced workdir of the job, unless a container uses it",
            "Every log line is archived first: `gpuconsole logs sweep-2d1e0f` still shows them.",
        ]
        removed: list[str] = []
        app._remove = lambda job: removed.append(job.id)  # type: ignore[method-assign]
        await pilot.press("n")  # no: nothing removed
        await pilot.pause()
        assert removed == [] and isinstance(app.screen, JobsScreen)
        await pilot.press("D", "y")
        await pilot.pause()
        assert removed == ["sweep-2d1e0f"]


async def test_readonly_hides_remove(state_dir: Path) -> None:
    app = make_app(state_dir)
    app.readonly = True
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("2", "down", "D")
        await pilot.pause()
        assert isinstance(app.screen, JobsScreen)
        assert "D Remove" not in screen_text(app)[-1]


@pytest.mark.parametrize(
    ("view", "size", "missing"),
    [
        ("1", (160, 45), []),
        ("1", (100, 30), ["3 Alerts"]),
        ("3", (100, 30), []),
    ],
)
async def test_fleet_and_alerts_footers_keep_help_and_quit_whole(
    state_dir: Path, view: str, size: tuple[int, int], missing: list[str]
) -> None:
    """The fleet and alerts views' footers at 160x45 and 100x30: help and quit always shown
    (Textual's footer cut them off at the right edge once the GPU panel's keys were added),
    the view's own keys before the other views'; nothing cut, nothing under the palette key."""
    from textual.widgets._footer import FooterKey

    from console.app.widgets.footer import FittedFooter

    app = make_app(state_dir)
    async with app.run_test(size=size) as pilot:
        await show_fleet(app)
        await pilot.press(view)
        await pilot.pause(0.3)
        footer_row = screen_text(app)[-1]
        labels = {
            "1": [
                "? Help",
                "q Quit",
                "⏎ Open job",
                "/ Filter",
                "s Sort",
                "p GPU panel",
                "S Stop job",
                "r Reverse",
                "2 Jobs",
                "3 Alerts",
            ],
            "3": ["? Help", "q Quit", "a Acknowledge", "s Silence 1h", "1 Fleet", "2 Jobs"],
        }[view]
        for label in labels:
            assert (label in footer_row) == (label not in missing), (label, footer_row)
        assert footer_row.rstrip().endswith("▏^p palette"), footer_row
        footer = app.screen.query_one(FittedFooter)
        palette = next(k for k in footer.query(FooterKey) if k.has_class("-command-palette"))
        for key in footer.query(FooterKey):
            if key is not palette:
                assert key.region.right <= palette.region.x, (key.description, key.region)


async def test_a_straggler_alert_shows_in_the_row_and_the_detail(state_dir: Path) -> None:
    """The straggler alert's sentence in the running job's REASON cell and, whole, under the
    table; gone when the alert resolves."""
    from types import MappingProxyType

    from console.alerts.model import Alert

    sentence = (
        "rank 1 is at least ~16% slower (97% SM activity, the others' median 83% SM activity): "
        "GPU 1 on host h200-b is held at 1410 MHz (the others 1650 MHz) by hw_thermal, 87 C"
    )
    alert = Alert(
        key="straggler/job/ddp-x",
        rule="straggler",
        severity="warning",
        summary=f"job ddp-x (ddp-x-1a2b3c): {sentence}",
        job="ddp-x",
        since=NOW - 200,
        fired_at=NOW - 80,
        details=MappingProxyType({"job_id": "ddp-x-1a2b3c", "rank": 1}),
    )
    app = make_app(state_dir)
    async with app.run_test(size=(200, 40)) as pilot:
        await pilot.press("2")
        await pilot.pause()
        jobs_screen(app).update_alerts([alert])
        await pilot.pause()
        rows = screen_text(app)
        (row,) = [r for r in rows if r.startswith(" ddp-x-1a2b3c") and " train " in r]
        assert "straggler: rank 1 is at least ~16% slower" in row
        text = " ".join(r.strip() for r in rows[-8:])
        assert f"straggler: {sentence}" in text
        jobs_screen(app).update_alerts([dataclasses.replace(alert, resolved_at=NOW)])
        await pilot.pause()
        assert not any("straggler" in r for r in screen_text(app))


async def test_a_job_handed_out_is_a_copy_so_the_table_never_lags_its_record(
    state_dir: Path,
) -> None:
    """The service refreshes the record it is handed in place (a stop marks its nodes
    stopped and sets 143 before its JobChanged arrives). The view hands out a copy, so what
    it holds changes only through the message that also redraws its row: a record that
    reads `stopped` while its row still shows `running` and no EXIT cannot happen."""
    app = make_app(state_dir)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("2")
        await pilot.pause()
        screen = jobs_screen(app)
        handed = screen.selected_job()
        assert handed is not None and handed.id == "ddp-x-1a2b3c"
        before = screen.jobs[handed.id].state
        nodes_before = [n.state for n in screen.jobs[handed.id].nodes]
        assert before == "running" and "running" in nodes_before
        handed.state, handed.exit_code = "stopped", 143
        for n in handed.nodes:
            n.state = "stopped"
        assert screen.jobs[handed.id].state == "running"
        assert screen.jobs[handed.id].exit_code is None
        assert [n.state for n in screen.jobs[handed.id].nodes] == nodes_before
        app.on_job_updated(type("M", (), {"job": handed})())  # type: ignore[arg-type]
        await pilot.pause()
        assert screen.jobs[handed.id].state == "stopped"
        table = screen.query_one("#jobs-table", DataTable)
        assert str(table.get_row(handed.id)[-2]) == "143"
