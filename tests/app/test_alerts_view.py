"""The alerts view and toasts: the real rule engine over the demo store's failed job; a new
alert pops a toast, ``3`` lists it, ``a`` acknowledges it (stored), ``s`` silences it."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.alerts.config import AlertsConfig
from console.alerts.engine import AlertWatcher
from console.alerts.store import AlertStore
from console.app.screens.alerts import AlertsScreen
from tests.app.demo_data import NOW, make_app


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUCONSOLE_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("GPUCONSOLE_CONFIG_DIR", str(tmp_path / "config"))
    return tmp_path / "state"


async def test_failed_job_alert_toast_list_ack_and_silence(state_dir: Path) -> None:
    app = make_app(state_dir)
    config = AlertsConfig.model_validate({"job_failed": {"max_age_s": 604800}})
    async with app.run_test(size=(120, 36)) as pilot:
        watcher = AlertWatcher(app.service, config=config, clock=lambda: NOW)
        await watcher.load()
        watcher.subscribe()
        app.alerts = watcher
        changes = await watcher.evaluate_now()
        await pilot.pause(0.2)
        fired = [c.alert for c in changes if c.change == "fired" and c.alert.rule == "job_failed"]
        assert len(fired) == 1
        alert = fired[0]
        toasts = [n for n in app._notifications if "job_failed" in (n.title or "")]
        assert len(toasts) == 1 and alert.summary in toasts[0].message
        await pilot.press("3")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, AlertsScreen)
        assert [a.key for a in screen.alerts] == [alert.key]
        assert screen.selected() is not None and screen.selected().key == alert.key  # type: ignore[union-attr]
        await pilot.press("a")
        await app.workers.wait_for_complete()
        await pilot.pause(0.2)
        assert screen.alerts[0].acked_at is not None
        stored = AlertStore(app.service.store.root).firing()
        assert [a.acked_at is not None for a in stored if a.key == alert.key] == [True]
        await pilot.press("s")
        await app.workers.wait_for_complete()
        await pilot.pause(0.2)
        assert any(s.key == alert.key for s in watcher.engine.silences())
        assert screen.alerts[0].silenced(NOW)
        await watcher.close()


def test_detail_text_is_ordered_and_says_each_thing_once() -> None:
    from console.alerts.model import Alert
    from console.app.screens.alerts import detail_text

    alert = Alert(
        key="job_failed/job/train",
        rule="job_failed",
        severity="critical",
        summary="job train failed",
        job="train",
        since=NOW - 30,
        fired_at=NOW - 30,
        details={
            "fix": "lower the batch size",
            "exit_code": 1,
            "cause": "cuda_oom",
            "diagnosis": "rank 3 ran out of GPU memory",
            "for_s": 0.0,
        },
    )
    lines = detail_text(alert, NOW).plain.splitlines()
    assert lines[0].startswith("job_failed/job/train  firing, since ")
    assert lines[1:] == [
        "rank 3 ran out of GPU memory",
        "fix: lower the batch size",
        "exit_code 1  for_s 0",
    ]
