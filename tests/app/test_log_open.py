"""Opening the panes of a finished job: the archive shows first (never ``0 lines`` while
loading), what the containers add follows without a repeat, and an empty pane says why."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from console.app.screens.logs import LogsScreen, _newer
from console.app.widgets.logpanes import LogPanes
from console.jobs.logs import JobLogLine, no_lines_reason
from console.jobs.store import JobRecord
from tests.app.demo_data import T0_NS, jobs, make_app

SIZE = (160, 45)


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUCONSOLE_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("GPUCONSOLE_CONFIG_DIR", str(tmp_path / "config"))
    return tmp_path / "state"


def failed_job() -> JobRecord:
    return next(j for j in jobs() if j.state == "failed")  # 2 nodes, both exited


def lines(job: JobRecord, node: int, start: int, stop: int) -> list[JobLogLine]:
    host = job.nodes[node].host
    return [
        JobLogLine(node, host, node, T0_NS + i * 1000 + node, f"step {i} of node {node}")
        for i in range(start, stop)
    ]


def merged(*parts: list[JobLogLine]) -> list[JobLogLine]:
    return sorted((ln for p in parts for ln in p), key=lambda ln: (ln.ts_ns, ln.node_rank))


class FakeLogs:
    """``Service.read_logs``: the archive at once, the containers once ``release`` is set."""

    def __init__(self, archived: list[JobLogLine], full: list[JobLogLine]) -> None:
        self.archived, self.full = archived, full
        self.release = asyncio.Event()
        self.calls: list[bool] = []

    async def __call__(
        self, job: JobRecord, *, archive_only: bool = False, **_: Any
    ) -> list[JobLogLine]:
        self.calls.append(archive_only)
        if archive_only:
            return list(self.archived)
        await self.release.wait()
        return list(self.full)


def titles(screen: LogsScreen) -> list[str]:
    return [str(p.border_title) for p in screen.query_one(LogPanes).panes]


async def until(
    pilot: Pilot[None], ok: Any, what: str, seen: list[list[str]], screen: LogsScreen
) -> None:
    for _ in range(500):
        seen.append(titles(screen))
        if ok():
            return
        await pilot.pause(0.01)
    raise AssertionError(f"never: {what}; titles {seen[-1]}")


async def test_archive_shows_first_then_the_containers_news_without_a_repeat(
    state_dir: Path,
) -> None:
    job = failed_job()
    old = merged(lines(job, 0, 0, 3000), lines(job, 1, 0, 2500))
    new = merged(lines(job, 0, 0, 3200), lines(job, 1, 0, 2500))
    app = make_app(state_dir)
    fake = FakeLogs(old, new)
    app.service.read_logs = fake  # type: ignore[method-assign]
    async with app.run_test(size=SIZE) as pilot:
        screen = LogsScreen(job)
        await app.push_screen(screen)
        seen: list[list[str]] = []
        node0, node1 = screen.by_node[0], screen.by_node[1]
        await until(
            pilot,
            lambda: len(node0) == 3000 and len(node1) == 2500,
            "the archive in the panes",
            seen,
            screen,
        )
        panes = screen.query_one(LogPanes)
        panes.flush()
        await pilot.pause()
        assert all("loading…" in t for t in titles(screen))  # the containers are not read yet
        assert panes.panes[0].line_count == 3000
        fake.release.set()
        await until(
            pilot,
            lambda: len(node0) == 3200 and not any("loading" in t for t in titles(screen)),
            "the containers' news",
            seen,
            screen,
        )
        assert fake.calls == [True, False]
        assert [b.plain for b in node0.slice(0, len(node0))] == [
            f"step {i} of node 0" for i in range(3200)
        ]
        assert len(node1) == 2500 and len(screen.merged) == 5700
        panes.flush()
        await pilot.pause()
        assert titles(screen) == [
            "node 0 · h200-a · 3,200 lines · exited 143",
            "node 1 · h200-b · 2,500 lines · exited 1",
        ]
        assert panes.merged_pane is not None
        assert str(panes.merged_pane.border_title) == "all ranks · 5,700 lines · exited 1"
        assert not any(" 0 lines" in t for ts in seen for t in ts)
        assert screen.skipped == 0


async def test_a_node_whose_container_is_gone_with_nothing_archived_says_so(
    state_dir: Path,
) -> None:
    job = failed_job()
    app = make_app(state_dir)
    some = lines(job, 0, 0, 10)

    async def read_logs(j: JobRecord, *, archive_only: bool = False, **_: Any) -> list[JobLogLine]:
        if not archive_only:
            j.gone.add(1)  # what read_job_logs records when docker has no such container
            return some
        return []

    app.service.read_logs = read_logs  # type: ignore[method-assign]
    async with app.run_test(size=SIZE) as pilot:
        screen = LogsScreen(job)
        await app.push_screen(screen)
        seen: list[list[str]] = []
        panes = screen.query_one(LogPanes)
        await until(
            pilot,
            lambda: panes.panes[1].empty_text is not None,
            "a word in the empty pane",
            seen,
            screen,
        )
        panes.flush()
        await pilot.pause()
        gone = panes.panes[1]
        assert gone.empty_text == (
            "node 1 (h200-b): its container is gone (removed outside "
            "gpuconsole) and nothing was archived from it"
        )
        region = gone.scrollable_content_region
        strips = app.screen._compositor.render_strips()
        shown = " ".join(
            strips[y].text[region.x : region.right].strip() for y in range(region.y, region.bottom)
        ).strip()
        assert shown == gone.empty_text  # wrapped in the pane, whole
        assert panes.panes[0].empty_text is None and panes.panes[0].line_count == 10
        assert titles(screen)[1] == "node 1 · h200-b · 0 lines · exited 1"
        assert not any("loading" in t for t in titles(screen))


def test_newer_takes_what_follows_each_nodes_last_line() -> None:
    job = failed_job()
    a0, a1 = lines(job, 0, 0, 5), lines(job, 1, 0, 5)
    got = _newer(merged(a0, a1), merged(lines(job, 0, 2, 8), a1[1:], lines(job, 1, 5, 6)))
    assert got == merged(lines(job, 0, 5, 8), lines(job, 1, 5, 6))
    assert _newer([], a0) == a0
    assert _newer(a0, lines(job, 0, 6, 9)) is None  # the old end is no longer in the tail


def test_no_lines_reason_names_what_is_known() -> None:
    job = failed_job()
    n0, n1 = job.nodes
    assert no_lines_reason(job, n0) == ("silent", "node 0 (h200-a): its container wrote nothing")
    job.gone.add(1)
    assert no_lines_reason(job, n1) is not None and no_lines_reason(job, n1)[0] == "gone"  # type: ignore[index]
    job.unreachable["h200-a"] = "host h200-a: connection refused"
    assert no_lines_reason(job, n0) == (
        "unreachable",
        "node 0 (h200-a): host h200-a: connection refused; nothing was archived from it",
    )
    job.removed_at = 1.0
    assert no_lines_reason(job, n0)[0] == "removed"  # type: ignore[index]
    running = next(j for j in jobs() if j.state == "running")
    assert no_lines_reason(running, running.nodes[0]) is None


async def test_another_jobs_panes_side_by_side_tagged_with_its_name(state_dir: Path) -> None:
    from console.app.messages import JobUpdated, LogLinesArrived
    from console.app.screens.modals import AskScreen
    from tests.app.demo_data import show_logs

    app = make_app(state_dir)
    async with app.run_test(size=SIZE) as pilot:
        screen = await show_logs(app)
        other = failed_job()
        await pilot.press("plus")
        await pilot.pause()
        assert isinstance(app.screen, AskScreen)
        await pilot.press(*other.name, "enter")
        await pilot.pause()
        assert app.screen is screen and other.id in screen.others
        panes = screen.query_one(LogPanes)
        assert [p.title for p in panes.panes] == [
            "node 0 · h200-a",
            "node 1 · h200-b",
            "llama-ft · node 0 · h200-a",
            "llama-ft · node 1 · h200-b",
        ]
        screen.post_message(LogLinesArrived(other.id, lines(other, 1, 0, 5)))
        screen.post_message(LogLinesArrived("some-other-job", lines(other, 0, 0, 7)))  # not shown
        await pilot.pause()
        panes.flush()
        await pilot.pause()
        mine = panes.panes[:2]
        assert [p.line_count for p in panes.panes[2:]] == [0, 5]
        assert all(p.line_count > 5 for p in mine)  # this job's lines stay in its panes
        assert all(p.region.width > 0 for p in panes.panes)  # 2x2, all on screen
        assert "exited 1" in str(panes.panes[3].border_title)
        screen.post_message(JobUpdated(other))
        await pilot.press("plus")
        await pilot.pause()
        await pilot.press(*other.id, "enter")  # the same job again: said, not added twice
        await pilot.pause()
        assert len(panes.panes) == 4
