"""The confirmation modal on a small terminal: its buttons stay on screen whatever the detail."""

from __future__ import annotations

from textual.app import App
from textual.widgets import Button

from console.app.screens.modals import ConfirmScreen


async def test_confirm_buttons_visible_at_80x24_with_a_long_detail() -> None:
    detail = "\n".join(f"docker stop --time 30 gpuconsole-job-n{i}  (on host-{i})"
                       for i in range(60))
    answers: list[bool | None] = []
    app: App[None] = App()
    async with app.run_test(size=(80, 24)) as pilot:
        app.push_screen(ConfirmScreen("Stop job job-1 (60 nodes)?", detail, yes="Stop"),
                        answers.append)
        await pilot.pause()
        for button_id in ("yes", "no"):
            region = app.screen.query_one(f"#{button_id}", Button).region
            assert region.height > 0 and region.bottom <= 24, (button_id, region)
        await pilot.click("#no")
        await pilot.pause()
    assert answers == [False]
