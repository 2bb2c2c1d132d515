"""The fleet screen fed from the recorded H200 traces: cells, sort, filter, cursor, job jump.

Hosts (tests/unit/test_fleet_rows.build_fleet): ``h200-a`` = h200-load.jsonl (GPU 0 at
100 %, PID 653), ``h200-b`` = h200-idle.jsonl, ``gpu-c`` down with a reason, ``gpu-d`` whose
sample says ``driver_unreachable``. The screen's clock is frozen at 124.5 (the rx clock of
the built state), so nothing depends on the wall clock.
"""

from __future__ import annotations

import copy
from typing import Any, ClassVar

import pytest
from textual.app import App
from textual.binding import Binding, BindingType
from textual.pilot import Pilot

from console.app.screens.fleet import FleetScreen
from console.app.widgets.fleet import COLUMNS, DetailPanel
from console.fleet.state import FleetState
from tests.unit.test_fleet_rows import DOWN_REASON, build_fleet, trace

COLS = [k for k, _ in COLUMNS]
NOW = 124.5


class FleetApp(App[None]):
    """Hosts the fleet screen; records the messages and keys that reach the app."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "app_escape", "Back")]

    def __init__(self, state: FleetState | None = None) -> None:
        super().__init__()
        self.state = state
        self.jobs: list[tuple[str, str, int]] = []
        self.escapes = 0

    def on_mount(self) -> None:
        screen = FleetScreen(clock=lambda: NOW)
        self.push_screen(screen)
        if self.state is not None:
            screen.update_fleet(self.state)

    def on_fleet_screen_job_selected(self, msg: FleetScreen.JobSelected) -> None:
        self.jobs.append((msg.job_id, msg.host, msg.gpu_index))

    def action_app_escape(self) -> None:
        self.escapes += 1


def fleet(app: FleetApp) -> FleetScreen:
    assert isinstance(app.screen, FleetScreen)
    return app.screen


def cells(app: FleetApp, key: str) -> dict[str, str]:
    """Column key -> the cell's plain text of the row ``key``."""
    row = fleet(app).table.get_row(key)
    return {c: cell.plain for c, cell in zip(COLS, row)}


def keys(app: FleetApp) -> list[str]:
    """Row keys in display order, shortened: ``h200-a``, ``h200-a:0``..."""
    return [k.partition(":")[2] for k in fleet(app).table._order]


async def test_cells_show_the_traces_readings() -> None:
    app = FleetApp(build_fleet())
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.pause()
        assert keys(app) == [
            "h200-a",
            "h200-a:0",
            "h200-a:1",
            "h200-b",
            "h200-b:0",
            "h200-b:1",
            "gpu-c",
            "gpu-d",
        ]
        g0 = cells(app, "gpu:h200-a:0")
        assert g0 == {
            "name": "  0 H200",
            "state": "busy",
            "util": "█████ 100%",
            "mem": "▍   17612/143771 MiB",
            "sm": "96%",
            "temp": "62C",
            "power": "692/700 W",
            "throttle": "pwr-cap",
            "hist": "████████",
            "users": "pid 653 root python3 …/matmul_load.p…",
            "xid": "-",
        }
        g1 = cells(app, "gpu:h200-a:1")
        assert (g1["state"], g1["util"], g1["mem"], g1["power"], g1["users"]) == (
            "free",
            "        0%",
            "    0/143771 MiB",
            "85/700 W",
            "-",
        )
        assert (g1["throttle"], g1["hist"]) == ("-", "▁▁▁▁▁▁▁▁")  # gpu_idle is not shown
        host = cells(app, "host:h200-a")
        assert (host["state"], host["util"], host["mem"], host["users"]) == (
            "up",
            "cpu   3%",
            "1180/257811 MiB",
            "2 GPUs",
        )
        assert cells(app, "gpu:h200-b:0")["power"] == "76/700 W"
        down = cells(app, "host:gpu-c")
        assert (down["state"], down["users"], down["util"]) == ("down", DOWN_REASON, "")
        drv = cells(app, "host:gpu-d")
        assert drv["state"] == "drv down"
        assert drv["users"] == (
            "driver_unreachable: nvidia-smi: Unable to determine the device handle f…"
        )  # all of it in the detail line
        assert drv["mem"] == "2048/515000 MiB"
        summary = str(app.screen.query_one("#fleet-summary").render())
        assert summary.startswith("4 hosts: 2 up, 1 down, 1 driver problem")
        assert "4 GPUs: 1 busy, 3 free" in summary
        # the detail panel: the cursor row uncut; the H200 SXM has no fan (NVML: Not
        # Supported): n/a, not unknown; the recording has no max clocks: unknown
        await pilot.press("down")
        detail = " ".join(app.screen.query_one("#fleet-detail", DetailPanel).lines())
        assert detail == (
            "h200-a GPU 0 NVIDIA H200 | pid 653 root python3 …/matmul_load.py "
            "90 16 (17604 MiB) | P0 | SM 1500/? MHz | mem 3201/? MHz | tensor 93% "
            "dram 17% | fan n/a"
        )
        # the last bench of the GPU (Service.bench_lines), last in its detail
        line = "bench 2026-01-02 03:04 (quick): bf16 612 TFLOP/s: slow: bf16 612 TFLOP/s is 22%"
        fleet(app).set_bench({("h200-a", 0): line})
        await pilot.pause()
        detail = " ".join(app.screen.query_one("#fleet-detail", DetailPanel).lines())
        assert detail.endswith(f"fan n/a | {line}")
        fleet(app).table.move_to_key("host:gpu-c")
        await pilot.pause()
        detail = " ".join(app.screen.query_one("#fleet-detail", DetailPanel).lines())
        assert detail == f"gpu-c: down | {DOWN_REASON}"


async def test_unknown_readings_show_question_marks() -> None:
    st = FleetState(["smi"])
    for i, s in enumerate(trace("h200-smi-fallback.jsonl")):
        st.on_sample("smi", s, rx=NOW - 3 + i)
    s = copy.deepcopy(trace("h200-idle.jsonl")[-1])
    for g in s["gpus"]:
        g.update(
            util_gpu_pct=None,
            mem_used_mib=None,
            power_w=None,
            temp_c=None,
            throttle_reasons=None,
            unsupported=[],  # the fan failed: unknown, not n/a
            errors={"fan_pct": "Unknown Error"},
        )
    s["processes"] = None
    st.on_sample("blind", s, rx=NOW)
    app = FleetApp(st)
    async with app.run_test(size=(160, 30)) as pilot:
        await pilot.pause()
        smi = cells(app, "gpu:smi:0")
        assert (smi["sm"], smi["mem"], smi["users"]) == ("?", "▍   17613/143771 MiB", "pid 570 ? ?")
        assert cells(app, "host:smi")["util"] == "cpu    ?"
        blind = cells(app, "gpu:blind:1")
        assert blind == {
            "name": "  1 H200",
            "state": "?",
            "util": "         ?",
            "mem": "    ?/143771 MiB",
            "sm": "0%",
            "temp": "?",
            "power": "?/700 W",
            "throttle": "?",
            "hist": "       ?",
            "users": "?",  # one sample, unknown
            "xid": "-",
        }
        assert fleet(app).table.move_to_key("gpu:blind:1")
        await pilot.pause()
        detail = " ".join(app.screen.query_one("#fleet-detail", DetailPanel).lines())
        assert detail.endswith("| fan ?")
        # a GPU without GPM (before Hopper: NVML says not supported): n/a, not unknown
        s2 = copy.deepcopy(trace("h200-idle.jsonl")[-1])
        for g in s2["gpus"]:
            g.update(
                gpm=None,
                unsupported=["fan_pct", "gpm"],
                errors={"fan_pct": "Not Supported", "gpm": "GPM not supported"},
            )
        st.on_sample("old", s2, rx=NOW)
        fleet(app).update_fleet(st)
        await pilot.pause()
        assert cells(app, "gpu:old:0")["sm"] == "n/a"
        assert cells(app, "gpu:blind:0")["sm"] == "0%"


async def test_sort_cycles_and_reverses_keeping_the_cursor() -> None:
    app = FleetApp(build_fleet())
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.pause()
        screen = fleet(app)
        assert screen.table.move_to_key("gpu:h200-b:1")
        await pilot.press("s")  # util, highest first
        assert (screen.sort_key, screen.descending) == ("util", True)
        assert keys(app)[:3] == ["h200-a", "h200-a:0", "h200-a:1"]
        await pilot.press("s", "s")  # temp: a 62/44 C, b 38/39 C
        assert screen.sort_key == "temp"
        assert keys(app) == [
            "h200-a",
            "h200-a:0",
            "h200-a:1",
            "h200-b",
            "h200-b:1",
            "h200-b:0",
            "gpu-c",
            "gpu-d",
        ]
        await pilot.press("r")
        assert keys(app) == [
            "h200-b",
            "h200-b:0",
            "h200-b:1",
            "h200-a",
            "h200-a:1",
            "h200-a:0",
            "gpu-c",
            "gpu-d",
        ]
        assert screen.table.cursor_key == "gpu:h200-b:1"
        assert screen.table.cursor_row == 2
        assert "TEMP ▲" in [c.label.plain for c in screen.table.columns.values()]
        await pilot.press("s")  # power, highest first: a 692 W leads
        assert keys(app)[:3] == ["h200-a", "h200-a:0", "h200-a:1"]
        await pilot.press("s")  # back to the host order
        assert (screen.sort_key, screen.descending) == ("host", False)
        assert keys(app)[0] == "h200-a" and screen.table.cursor_key == "gpu:h200-b:1"


async def test_filter_free_host_and_escape() -> None:
    app = FleetApp(build_fleet())
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.pause()
        screen = fleet(app)
        await pilot.press("slash", *"free")
        assert screen.filter_input.has_focus
        assert keys(app) == ["h200-a", "h200-a:1", "h200-b", "h200-b:0", "h200-b:1"]
        await pilot.press("enter")  # keep the filter, back to the table
        assert screen.table.has_focus and screen.filter_query == "free"
        assert "filter 'free': 3 GPUs" in str(screen.query_one("#fleet-summary").render())
        await pilot.press("escape")
        assert screen.filter_query == "" and len(keys(app)) == 8
        assert app.escapes == 0  # escape cleared the filter, it did not leave the screen
        await pilot.press("slash", *"gpu-c")
        assert keys(app) == ["gpu-c"]
        await pilot.press("escape")
        await pilot.press("slash", *"busy")
        assert keys(app) == ["h200-a", "h200-a:0"]
        await pilot.press("escape", "escape")  # the second one goes on to the app
        assert app.escapes == 1 and len(keys(app)) == 8


async def test_updates_keep_the_cursor_and_select_posts_the_job() -> None:
    st = build_fleet(job=True)
    app = FleetApp(st)
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.pause()
        screen = fleet(app)
        assert cells(app, "gpu:h200-a:0")["users"] == "ddp-x-1a2b3c n0 r0,r1"
        assert screen.table.move_to_key("gpu:h200-a:0")
        await pilot.pause()
        detail = " ".join(screen.query_one("#fleet-detail", DetailPanel).lines())
        assert detail.startswith(
            "h200-a GPU 0 NVIDIA H200 | job ddp-x-1a2b3c n0 r0,r1 pids "
            "653,654 (18628 MiB) (enter: open) | P0 | SM 1500/? MHz"
        )
        await pilot.press("enter")
        await pilot.pause()
        assert app.jobs == [("ddp-x-1a2b3c", "h200-a", 0)]
        await pilot.press("down", "enter")  # GPU 1 is free: no job to open
        await pilot.pause()
        assert app.jobs == [("ddp-x-1a2b3c", "h200-a", 0)]
        assert screen.table.cursor_key == "gpu:h200-a:1"
        # a new sample: same rows, changed cells, the cursor stays
        s: dict[str, Any] = copy.deepcopy(trace("h200-load.jsonl")[0])
        s["gpus"][1].update(util_gpu_pct=37, mem_used_mib=2048)
        st.on_sample("h200-a", s, rx=NOW)
        screen.update_fleet(st)
        await pilot.pause()
        assert screen.table.cursor_key == "gpu:h200-a:1"
        g1 = cells(app, "gpu:h200-a:1")
        assert (g1["util"], g1["mem"]) == ("█▉     37%", "    2048/143771 MiB")
        assert g1["hist"] == "▁▁▁▁▁▁▁▄"  # 37 % of 7 steps: level 3
        # the host goes down: its GPU rows leave, the cursor falls back to the host's row
        st.on_down("h200-a", "telemetry stream ended")
        screen.update_fleet(st)
        await pilot.pause()
        assert keys(app)[:2] == ["h200-a", "h200-b"]
        assert screen.table.cursor_key == "host:h200-a"
        assert cells(app, "host:h200-a")["users"] == "telemetry stream ended"


def test_snapshot(snap_compare: Any) -> None:
    async def feed(pilot: Pilot[None]) -> None:
        await pilot.pause()
        await pilot.press("down")

    assert snap_compare(FleetApp(build_fleet(job=True)), terminal_size=(120, 36), run_before=feed)


async def test_host_with_a_missing_gpu_is_flagged() -> None:
    st = FleetState(["h200"])
    samples = trace("h200-load.jsonl")
    st.on_sample("h200", samples[0], rx=NOW - 1)
    fell = copy.deepcopy(samples[1])
    fell["gpus"] = fell["gpus"][:1]
    st.on_sample("h200", fell, rx=NOW)
    app = FleetApp(st)
    async with app.run_test(size=(160, 20)) as pilot:
        await pilot.pause()
        host = cells(app, "host:h200")
        assert (host["state"], host["users"]) == ("gpu lost", "1 GPU(s) missing: 00000000:00:07.0")
        assert keys(app) == ["h200", "h200:0"]


def test_detail_line_names_the_xid_root_and_its_action() -> None:
    from dataclasses import replace

    from console.app.screens.fleet import detail_text
    from console.fleet.rows import GpuRow

    row = GpuRow(
        key="a/1",
        host="a",
        index=1,
        name="NVIDIA H200",
        lost=False,
        util_pct=0.0,
        mem_used_mib=0.0,
        mem_total_mib=143771.0,
        temp_c=40.0,
        fan_pct=None,
        power_w=80.0,
        power_limit_w=700.0,
        sm_activity_pct=None,
        throttle_reasons=(),
        history=(),
        users=(),
        usable=True,
        xid="Xid 79 fallen off the bus: reboot",
        xid_code=79,
        xid_severe=True,
    )
    text = detail_text(row)
    assert "| Xid 79 fallen off the bus: reboot |" in text.plain
    span = next(s for s in text.spans if text.plain[s.start : s.end].strip(" |").startswith("Xid"))
    assert "red" in str(span.style)
    assert "Xid" not in detail_text(replace(row, xid=None)).plain


NO_DRIVER = (
    "no NVIDIA driver: nvidia-smi not found (NVML: pynvml could not be imported: "
    "libnvidia-ml.so.1: cannot open shared object file: No such file or directory)"
)


async def test_long_reasons_are_read_whole_in_the_detail_panel_at_100_columns() -> None:
    from remote.telemetry.schema import empty_sample

    st = build_fleet()
    bare = empty_sample("nvml", 0, 1795974200.0, 1.0)
    bare.update(state="no_driver", state_detail=NO_DRIVER)
    st.on_sample("gpu-e", bare, rx=NOW)
    app = FleetApp(st)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        screen = fleet(app)
        panel = screen.query_one("#fleet-detail", DetailPanel)
        for key, words, rows in (
            ("host:gpu-c", f"gpu-c: down | {DOWN_REASON}", 1),
            ("host:gpu-e", f"gpu-e: up | no_driver: {NO_DRIVER}", 2),
        ):
            assert screen.table.move_to_key(key)
            await pilot.pause()
            shown = panel.lines()
            assert len(shown) == rows and all(len(ln) <= 98 for ln in shown)  # wrapped
            assert " ".join(shown) == words  # every word, none cut
        # the table cell stays short: the reason is cut there, with the mark
        cell = cells(app, "host:gpu-e")["users"]
        assert cell.endswith("…") and len(cell) <= 72


async def test_cursor_moves_lay_out_again_only_when_the_detail_height_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from remote.telemetry.schema import empty_sample

    layouts: list[bool] = []
    refresh = DetailPanel.refresh

    def counting(
        self: DetailPanel,
        *regions: Any,
        repaint: bool = True,
        layout: bool = False,
        recompose: bool = False,
    ) -> Any:
        layouts.append(layout)
        return refresh(self, *regions, repaint=repaint, layout=layout, recompose=recompose)

    monkeypatch.setattr(DetailPanel, "refresh", counting)
    st = build_fleet()
    bare = empty_sample("nvml", 0, 1795974200.0, 1.0)
    bare.update(state="no_driver", state_detail=NO_DRIVER)
    st.on_sample("gpu-e", bare, rx=NOW)
    app = FleetApp(st)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        screen = fleet(app)
        panel = screen.query_one("#fleet-detail", DetailPanel)
        screen.table.move_to_key("gpu:h200-b:1")
        await pilot.pause()
        layouts.clear()
        screen.table.move_to_key("gpu:h200-b:0")  # another text, one row as before
        await pilot.pause()
        assert panel.lines()[0].startswith("h200-b GPU 0 NVIDIA H200 | no processes")
        assert layouts == [False]  # repainted, no layout pass
        screen.table.move_to_key("host:gpu-e")  # the no-driver reason takes 2 rows
        await pilot.pause()
        assert len(panel.lines()) == 2 and layouts[-1] is True
