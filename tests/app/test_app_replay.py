"""`gpuconsole --replay FILE`: the app's fleet view on a recording of the H200 traces, values
as recorded on the device machine (tests/data/traces/README.md)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from console.app.app import GpuConsoleApp
from console.app.screens.fleet import FleetScreen
from console.app.widgets.fleet import DetailPanel
from console.profiles import HostConfig, Profile
from console.service import Service

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"


@pytest.fixture
def recording(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A `top --record` file: the load trace as host gpu-a, the idle trace as gpu-b."""
    monkeypatch.setenv("GPUCONSOLE_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("GPUCONSOLE_CONFIG_DIR", str(tmp_path / "config"))
    rec = tmp_path / "fleet.jsonl"
    with open(rec, "w", encoding="utf-8") as out:
        for host, name in (("gpu-a", "h200-load.jsonl"), ("gpu-b", "h200-idle.jsonl")):
            for line in (TRACES / name).read_text().splitlines():
                s = json.loads(line)
                out.write(json.dumps({"host": host, "rx": s["host_time"], "sample": s}) + "\n")
    return rec


async def test_replay_shows_the_recorded_gpus(recording: Path) -> None:
    profile = Profile(name="local", hosts={"local": HostConfig(transport="local")})
    app = GpuConsoleApp(Service(profile), replay=recording, replay_speed=0)
    async with app.run_test(size=(160, 40)) as pilot:
        fleet = app.screen
        assert isinstance(fleet, FleetScreen)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(fleet.groups) < 2:
            await asyncio.sleep(0.1)
        await pilot.pause(0.6)  # the last samples reach the view at the next refresh
        groups = {g.host.name: g for g in fleet.groups}
        assert set(groups) == {"gpu-a", "gpu-b"}  # not the profile's host: the recording's
        a0, a1 = groups["gpu-a"].gpus
        assert (a0.mem_used_mib, a0.mem_total_mib, a0.util_pct) == (17612, 143771, 100)
        assert (a0.power_w, a0.power_limit_w) == (691.842, 700.0)
        # SXM: no fan (NVML: Not Supported): not applicable, shown n/a (never 0, and not ?)
        assert a0.fan_pct is None and a0.na("fan_pct")
        assert (a0.sm_clock_mhz, a0.mem_clock_mhz) == (1500, 3201)
        assert fleet.table.move_to_key("gpu:gpu-a:0")
        await pilot.pause()
        detail = " ".join(fleet.query_one("#fleet-detail", DetailPanel).lines())
        assert "| P0 | SM 1500/? MHz | mem 3201/? MHz |" in detail  # no max in the recording
        assert detail.endswith("| fan n/a")
        assert a0.users and a0.users[0].pids == (653,)
        assert (a1.mem_used_mib, a1.util_pct) == (0, 0)
        b0 = groups["gpu-b"].gpus[0]
        assert (b0.mem_used_mib, b0.util_pct, b0.power_w) == (0, 0, 76.331)
        row = {
            c.plain if hasattr(c, "plain") else str(c) for c in fleet.table.get_row("gpu:gpu-a:0")
        }
        assert any("17612/143771 MiB" in c for c in row)
        assert any("692/700 W" in c for c in row)
        assert dict((h, s) for h, s, _ in app.host_status) == {"gpu-a": "ok", "gpu-b": "ok"}
        # the end of the recording is said, with the number of samples fed
        samples = len(recording.read_text().splitlines())
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not app.replay_ended:
            await asyncio.sleep(0.05)
        assert app.replay_ended and app.sub_title == "replay ended"
        assert any(f"replay ended after {samples} samples" in n.message for n in app._notifications)


async def test_a_replay_shows_no_live_job_and_acts_on_nothing(
    recording: Path, tmp_path: Path
) -> None:
    """The local store holds live jobs (one running): a replay shows only what the recording
    holds, so the jobs view lists none of them and says why, nothing reconciles with the
    hosts, and nothing can be submitted, stopped or opened on them (read-only)."""
    from console.app.screens.jobs import JobsScreen
    from console.app.screens.modals import HelpScreen
    from console.jobs.store import Store
    from tests.app.demo_data import jobs

    store = Store(tmp_path / "state")
    for j in jobs():
        store.add_job(j)
    assert any(j.state == "running" for j in store.jobs())
    profile = Profile(name="local", hosts={"local": HostConfig(transport="local")})
    app = GpuConsoleApp(Service(profile, store=store), replay=recording, replay_speed=0)
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.press("2")
        await pilot.pause(0.6)
        screen = app.screen
        assert isinstance(screen, JobsScreen)
        assert screen.jobs == {} and screen.shown == []
        rows = [s.text for s in screen._compositor.render_strips()]
        text = " ".join(r.strip() for r in rows)
        assert (
            f"replay of {recording}: a recording (`top --record`) holds the fleet's "
            "telemetry, not its jobs"
        ) in text
        assert "no jobs yet" not in text
        for action in ("submit", "stop", "exec", "remove", "notebook", "new_notebook", "reconcile"):
            assert app.check_action(action, ()) is False, action
        await pilot.press("n", "R")  # nothing opens, nothing is asked of the hosts
        await pilot.pause(0.3)
        assert app.screen is screen
        assert not [w for w in app.workers if w.group == "jobs-refresh"]
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        described = {desc for _, _, desc, _ in app.screen.rows}
        assert not described & {"Submit", "Stop", "Shell", "Remove", "Refresh"}
        assert app.service.store.get(jobs()[0].id) is not None  # the store is left as it was
