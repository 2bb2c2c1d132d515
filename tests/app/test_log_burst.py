"""A key is handled, and what it does is on screen, while the log panes take a burst.

The real app and log screen (demo data): two nodes' panes take 10,000 lines a second each
through the screen's own intake (``take_lines``), as a crash loop or ``NCCL_DEBUG=INFO``
would send them; ``t`` (timestamps in the focused pane) must show while the burst goes on,
and the lines must keep coming after it.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from console.app.screens.logs import LogsScreen
from console.app.widgets.logpanes import LogPanes
from console.jobs.logs import JobLogLine
from tests.app.demo_data import make_app
from tests.app.test_log_order import pane_rows, two_node_job

SIZE = (160, 40)
TS = re.compile(r"^\d\d:\d\d:\d\d\.\d{3} ")


async def test_a_key_is_drawn_while_the_panes_take_a_burst(tmp_path: Path) -> None:
    job = two_node_job()
    app = make_app(tmp_path / "state")
    async with app.run_test(size=SIZE) as pilot:
        screen = LogsScreen(job, follow=False)
        await app.push_screen(screen)
        await pilot.pause()
        stop = asyncio.Event()
        sent = 0

        async def burst() -> None:
            nonlocal sent
            t0 = 1_700_000_000_000_000_000
            while not stop.is_set():
                batch = [
                    JobLogLine(
                        n.node_rank,
                        n.host,
                        r,
                        t0 + sent + i,
                        f"[NCCL INFO] step {sent + i} rank {r} ring 0 : 1 -> 2 via P2P/IPC",
                    )
                    for n in job.nodes
                    for r in (0, 1)
                    for i in range(0, 100)
                ]
                sent += 100
                screen.take_lines(batch)
                await asyncio.sleep(0.02)

        task = asyncio.create_task(burst())
        try:
            panes = screen.query_one(LogPanes)
            pane = panes.panes[0]
            while pane.line_count < 2_000:  # the burst is on screen
                await pilot.pause(0.05)
            assert not pane.timestamps
            await pilot.press("t")
            for _ in range(200):
                rows = [r for r in pane_rows(app, pane) if r]
                if rows and all(TS.match(r) for r in rows):
                    break
                await pilot.pause(0.02)
            else:
                raise AssertionError(f"no timestamps on screen: {pane_rows(app, pane)}")
            assert pane.timestamps and not task.done()  # drawn while the burst went on
            seen = pane.buffer.total
            while pane.buffer.total < seen + 2_000:  # and the lines kept coming after it
                await pilot.pause(0.05)
            assert panes.clock.frames > 1
        finally:
            stop.set()
            await task
