"""The selected GPU's panel in the fleet view: its history chart and its process table, and
``S`` on a process (the job's stop with the jobs view's confirmation; a foreign process
refused; hidden by --readonly). Fleet: the recorded H200 traces (tests/unit/test_fleet_rows
.build_fleet)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from console.app.screens.fleet import FleetScreen
from console.app.screens.modals import ConfirmScreen
from console.app.widgets.gpupanel import PROCESS_COLUMNS
from tests.app.demo_data import make_app, show_fleet
from tests.app.test_fleet_view import FleetApp, fleet
from tests.unit.test_fleet_rows import CID, build_fleet

PCOLS = [k for k, _ in PROCESS_COLUMNS]


class StopRecorder(FleetApp):
    """The fleet screen alone; records the stops it asks the app for."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.stops: list[tuple[str, int]] = []

    def on_fleet_screen_stop_job(self, msg: FleetScreen.StopJob) -> None:
        self.stops.append((msg.job_id, msg.pid))


def proc_rows(screen: FleetScreen) -> list[dict[str, str]]:
    table = screen.processes
    return [{c: cell.plain for c, cell in zip(PCOLS, table.get_row(k))} for k in table.processes]


def chart_lines(screen: FleetScreen) -> list[str]:
    chart = screen.chart
    return [chart.render_line(y).text.rstrip() for y in range(chart.size.height)]


async def test_process_table_lists_each_process_of_the_selected_gpu() -> None:
    app = StopRecorder(build_fleet(job=True))
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.pause()
        screen = fleet(app)
        assert screen.table.move_to_key("gpu:h200-a:0")
        await pilot.pause()
        assert proc_rows(screen) == [
            {
                "pid": "653",
                "job": "ddp-x-1a2b3c",
                "rank": "n0 r0",
                "container": CID[:12],
                "user": "root",
                "mem": "17604 MiB",
                "command": "/usr/bin/python3 -u train.py --epochs 3",
            },
            {
                "pid": "654",
                "job": "ddp-x-1a2b3c",
                "rank": "n0 r1",
                "container": CID[:12],
                "user": "root",
                "mem": "1024 MiB",
                "command": "/usr/bin/python3 -u train.py --epochs 3",
            },
        ]
        assert screen.processes.border_title == "2 processes, 18628 MiB"
        # the chart: the recorded 25 s of GPU 0 at 100 %, with scales, units and the span
        lines = chart_lines(screen)
        assert lines[0].startswith("util %     100┤") and lines[0].endswith("█" * 25)
        assert lines[3].startswith("mem MiB 143771┤")
        assert lines[6].startswith("power W    700┤")
        assert "-24s" in lines[9] and lines[9].endswith("now")
        assert screen.chart.border_title == "h200-a GPU 0 history"
        # the free GPU: no process; a host row: the hint
        await pilot.press("down")
        assert proc_rows(screen) == [] and screen.processes.border_title == "0 processes"
        await pilot.press("up", "up")
        assert screen.table.cursor_key == "host:h200-a"
        assert chart_lines(screen)[0].startswith("select a GPU row")
        # tab into the process table: the cursor stays on its PID across updates
        assert screen.table.move_to_key("gpu:h200-a:0")
        await pilot.press("tab", "down")
        assert screen.processes.has_focus and screen.processes.selected().pid == 654
        screen.update_fleet(app.state)  # type: ignore[arg-type]
        await pilot.pause()
        assert screen.processes.selected().pid == 654  # type: ignore[union-attr]
        await pilot.press("S")
        assert app.stops == [("ddp-x-1a2b3c", 654)]
        # enter on a job's process opens the job
        await pilot.press("enter")
        await pilot.pause()
        assert app.jobs == [("ddp-x-1a2b3c", "h200-a", 0)]
        # p hides the panel, and gives the focus back to the fleet table
        await pilot.press("p")
        assert not screen.query_one("#fleet-gpu").display and screen.table.has_focus


async def test_a_foreign_process_is_refused_with_the_reason() -> None:
    app = StopRecorder(build_fleet())  # PID 653: the loader, started by hand, not a job
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        screen = fleet(app)
        assert screen.table.move_to_key("gpu:h200-a:0")
        await pilot.pause()
        assert proc_rows(screen)[0] | {"command": ""} == {
            "pid": "653",
            "job": "-",
            "rank": "-",
            "container": "-",
            "user": "root",
            "mem": "17604 MiB",
            "command": "",
        }
        await pilot.press("S")
        await pilot.pause()
        assert app.stops == []
        (note,) = [n for n in app._notifications if n.title == "not stopped"]
        assert note.message.startswith(
            "pid 653 (root: python3 /work/main/scripts/device/"
            "matmul_load.py 90 16) on h200-a GPU 0 is not a "
            "process of a gpuconsole job: gpuconsole does not kill "
            "processes it did not start"
        )
        # on a host row, or a GPU without processes: said, nothing asked
        await pilot.press("down")
        await pilot.press("S")
        await pilot.pause()
        assert app.stops == []
        assert any(n.message == "no process on h200-a GPU 1" for n in app._notifications)
        # a host whose process list is unknown: said so, not "no process"
        s = app.state.hosts["h200-a"].sample  # type: ignore[union-attr]
        assert s is not None
        s["processes"] = None
        screen.update_fleet(app.state)  # type: ignore[arg-type]
        await pilot.pause()
        assert screen.processes.border_title == "processes unknown"
        await pilot.press("S")
        await pilot.pause()
        assert list(app._notifications)[-1].message == (
            "the processes of h200-a are unknown (its process list is unreadable)"
        )


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUCONSOLE_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("GPUCONSOLE_CONFIG_DIR", str(tmp_path / "config"))
    return tmp_path / "state"


async def test_stop_from_a_process_asks_as_the_jobs_view_and_readonly_hides_it(
    state_dir: Path,
) -> None:
    app = make_app(state_dir)
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.pause()
        await show_fleet(app)
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, FleetScreen)
        assert screen.table.move_to_key("gpu:h200-a:0")
        await pilot.pause()
        await pilot.press("S")
        await pilot.pause()
        confirm = app.screen
        assert isinstance(confirm, ConfirmScreen)
        assert confirm.title_text == "Stop job ddp-x-1a2b3c?"  # the jobs view's `S` question
        assert confirm.detail == (
            "h200-a: docker stop --time 30 gpuconsole-ddp-x-1a2b3c-n0\n"
            "h200-b: docker stop --time 30 gpuconsole-ddp-x-1a2b3c-n1"
        )
        await pilot.press("escape")  # no: nothing stopped
        await pilot.pause()
        assert app.screen is screen
        assert app.service.store.get("ddp-x-1a2b3c").state == "running"  # type: ignore[union-attr]
    ro = make_app(state_dir)
    ro.readonly = True
    async with ro.run_test(size=(160, 45)) as pilot:
        await pilot.pause()
        await show_fleet(ro)
        await pilot.pause()
        screen = ro.screen
        assert isinstance(screen, FleetScreen)
        assert screen.table.move_to_key("gpu:h200-a:0")
        await pilot.pause()
        assert screen.check_action("stop", ()) is False
        assert "fleet.stop" not in {
            b.binding.id for b in screen.active_bindings.values() if b.enabled
        }
        await pilot.press("S")
        await pilot.pause()
        assert ro.screen is screen
