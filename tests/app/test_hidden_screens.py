"""A screen under the log panes draws nothing until it is shown again.

Textual repaints the whole top screen whenever a screen under it changes (it might show
through): the fleet table, refreshed twice a second from the telemetry, made every frame of
the log panes a full-screen repaint. The fleet, jobs and alerts screens keep what arrives
while another opaque screen is on top (``console.app.lifecycle.seen``) and draw it when
shown. (A host's connection state, on every screen's status line, is drawn at once: it
changes seldom.)
"""

from __future__ import annotations

from pathlib import Path

import pytest
from textual._compositor import Compositor

from tests.app.demo_data import make_app, show_fleet, show_logs
from tests.unit.test_fleet_rows import build_fleet

SIZE = (160, 40)


async def test_fleet_updates_under_the_log_panes_wait_until_the_fleet_is_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = make_app(tmp_path / "state")
    async with app.run_test(size=SIZE) as pilot:
        await show_fleet(app)
        await pilot.pause()
        table = app.fleet_screen.table
        users = table.rows_by_key["gpu:h200-a:0"].users  # type: ignore[union-attr]
        await show_logs(app)
        await pilot.pause()

        full_repaints = 0
        render_full_update = Compositor.render_full_update

        def counted(self: Compositor, *args: object, **kw: object) -> object:
            nonlocal full_repaints
            full_repaints += 1
            return render_full_update(self, *args, **kw)  # type: ignore[arg-type]

        monkeypatch.setattr(Compositor, "render_full_update", counted)
        app.service.fleet = build_fleet(job=False)  # GPU 0 of h200-a: the loader, no job
        for _ in range(3):  # the app's 0.5 s fleet refresh, three times
            app.refresh_fleet_view(force=True)
            await pilot.pause(0.05)
        assert full_repaints == 0
        assert table.rows_by_key["gpu:h200-a:0"].users == users  # type: ignore[union-attr]

        app.pop_screen()
        await pilot.pause()
        now = table.rows_by_key["gpu:h200-a:0"].users  # type: ignore[union-attr]
        assert now != users and "ddp-x-1a2b3c" in str(users) and "ddp-x" not in str(now)


async def test_jobs_view_under_the_log_panes_is_drawn_when_shown(tmp_path: Path) -> None:
    app = make_app(tmp_path / "state")
    async with app.run_test(size=SIZE) as pilot:
        await app.push_screen(app.jobs_screen)
        await pilot.pause()
        shown = app.jobs_screen.jobs.copy()
        rows = app.jobs_screen.query_one("DataTable").row_count  # type: ignore[attr-defined]
        assert rows == len(shown) > 1
        await show_logs(app)
        await pilot.pause()
        keep = next(iter(shown.values()))
        app.jobs_screen.update_jobs([keep])  # one job left, while the panes are on top
        await pilot.pause()
        table = app.jobs_screen.query_one("DataTable")
        assert table.row_count == rows  # type: ignore[attr-defined]
        app.pop_screen()
        await pilot.pause()
        assert table.row_count == 1  # type: ignore[attr-defined]
