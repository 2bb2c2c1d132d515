"""The log screen's merged "all ranks" view is in time order, and every pane tags lines as
the CLI does.

The lines are a real two-node job (tests/data/diagnose/corpus/recorded/rec-004.txt: the CLI's
``logs -t`` of a job whose node 1 failed first and took node 0 down by gang teardown), fed to
:class:`~console.app.screens.logs.LogsScreen` as the follow delivers them: in per-node
batches, node 1's arriving after node 0's later lines.
"""

from __future__ import annotations

import asyncio
import random
import re
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from console.app.app import GpuConsoleApp
from console.app.screens.logs import LogsScreen
from console.app.widgets import logpane
from console.app.widgets.logpane import LogPane
from console.app.widgets.logpanes import LogPanes
from console.jobs.logbuffer import LogBuffer, display_lines
from console.jobs.logs import JobLogLine
from console.jobs.store import JobRecord
from remote.docker import parse_rfc3339_ns
from tests.app.demo_data import jobs, make_app

SIZE = (120, 36)
RECORDED = (
    Path(__file__).resolve().parents[1]
    / "data"
    / "diagnose"
    / "corpus"
    / "recorded"
    / "rec-004.txt"
)
TAIL_LOGS = Path(__file__).resolve().parents[1] / "data" / "cases" / "tail-logs"
CAP = 185
_LINE = re.compile(r"^(\S+) \[n(\d+)(?: r(\d+))?\] ?(.*)$")


def two_node_job() -> JobRecord:
    """A running job of two nodes (the demo's; the recorded job's hosts were test hosts)."""
    return next(j for j in jobs() if j.state == "running" and len(j.nodes) == 2)


def recorded_lines(job: JobRecord) -> list[JobLogLine]:
    """rec-004 as the JobLogLines the CLI printed (timestamp, node, rank, text), file order."""
    out = []
    for raw in RECORDED.read_text(encoding="utf-8").splitlines():
        m = _LINE.match(raw)
        assert m, raw
        node = int(m.group(2))
        rank = int(m.group(3)) if m.group(3) is not None else None
        out.append(
            JobLogLine(node, job.nodes[node].host, rank, parse_rfc3339_ns(m.group(1)), m.group(4))
        )
    return out


def by_time(lines: list[JobLogLine]) -> list[JobLogLine]:
    """The CLI's merge order (``read_job_logs``: Docker timestamp, then node)."""
    return sorted(lines, key=lambda ln: (ln.ts_ns, ln.node_rank))


def pane_rows(app: GpuConsoleApp, pane: LogPane) -> list[str]:
    """The text rows inside the pane's border."""
    region = pane.scrollable_content_region
    rows = [strip.text for strip in app.screen._compositor.render_strips()]
    return [
        r[region.x : region.x + region.width].rstrip()
        for r in rows[region.y : region.y + region.height]
    ]


def plain(line: JobLogLine) -> str:
    """The line's text as the panes keep it (shaped once: trailing padding trimmed)."""
    rows = display_lines(line)
    assert len(rows) == 1, line
    return rows[0][5]


def shown(line: JobLogLine, width: int) -> str:
    """How a tagged pane shows ``line`` in ``width`` cells (its CLI tag, then the text)."""
    return f"{line.tag()} {plain(line)}"[:width].rstrip()


async def feed(pilot: Pilot[Any], screen: LogsScreen, batch: list[JobLogLine]) -> None:
    """One follow batch through the screen's intake, drained and synced to the panes."""
    screen.take_lines(batch)
    while screen.backlog:
        await asyncio.sleep(0.01)
    screen.query_one(LogPanes).flush()
    await pilot.pause()


def test_recording_is_in_the_cli_order() -> None:
    lines = recorded_lines(two_node_job())
    assert len(lines) == 197 and {ln.node_rank for ln in lines} == {0, 1}
    assert lines == by_time(lines)  # what `logs -t` printed is the merge order


async def test_merged_view_and_its_filter_are_in_time_order_when_a_node_is_late(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the pane re-checks its last RESCAN_TAIL lines at every sync anyway: make that fewer
    # than node 0's lines after node 1's first, so only re-reading what moved can pass
    monkeypatch.setattr(logpane, "RESCAN_TAIL", 8)
    job = two_node_job()
    lines = recorded_lines(job)
    app = make_app(tmp_path / "state")
    async with app.run_test(size=SIZE) as pilot:
        screen = LogsScreen(job, follow=False)
        await app.push_screen(screen)
        await feed(pilot, screen, [ln for ln in lines if ln.node_rank == 0])
        await pilot.press("a")  # the all-ranks view, filtered before node 1's lines come
        await pilot.press("ampersand", *"FAILED", "enter")
        await pilot.pause()
        await feed(pilot, screen, [ln for ln in lines if ln.node_rank == 1])  # late node
        panes = screen.query_one(LogPanes)
        merged = panes.merged_pane
        assert merged is not None and panes.merged_shown
        buf = screen.merged
        got = [(d.ts_ns, d.node_rank, d.rank, d.plain) for d in buf.slice(0, len(buf))]
        assert got == [(ln.ts_ns, ln.node_rank, ln.rank, plain(ln)) for ln in by_time(lines)]
        failed = [ln for ln in by_time(lines) if "failed" in ln.text.lower()]
        assert [ln.text[:5] for ln in failed[:1]] == ["E1201"] and failed[0].node_rank == 1
        width = merged.scrollable_content_region.width
        rows = pane_rows(app, merged)
        assert rows[: len(failed)] == [shown(ln, width) for ln in failed]
        assert rows[len(failed) :] == [""] * (len(rows) - len(failed))
        # node 1's torchrun error (20:38:04.233) before node 0's (20:38:05.041), and the
        # gang lines in the order they were written
        errors = [r for r in rows if "E1201" in r]
        assert [r[:17] for r in errors] == ["[n1] E1201 20:38:", "[n0] E1201 20:38:"]
        gang = [r for r in rows if "[gpuconsole-gang]" in r]
        assert [r[:4] for r in gang] == ["[n1]", "[n0]"]
        # clearing the filter: every line, still in time order
        await pilot.press("ampersand", *["backspace"] * 6, "enter")
        await pilot.pause()
        merged.action_scroll_home()  # `home`: the first line (pauses follow)
        await pilot.pause()
        assert pane_rows(app, merged)[:5] == [shown(ln, width) for ln in by_time(lines)[:5]]


async def test_late_batches_keep_time_order_within_the_cap(tmp_path: Path) -> None:
    """Node 1's batches arrive one batch behind node 0's (a slower stream); the merged
    buffer keeps only its newest ``buffer_lines`` lines (``CAP``), in time order."""
    job = two_node_job()
    lines = recorded_lines(job)
    # the newest CAP lines by time hold both nodes' interleaved steps and tracebacks
    assert {ln.node_rank for ln in by_time(lines)[-CAP:][:20]} == {0, 1}
    per_node = {n: [ln for ln in lines if ln.node_rank == n] for n in (0, 1)}
    batches: list[list[JobLogLine]] = []
    step = 20
    for i in range(0, max(len(v) for v in per_node.values()) + step, step):
        batches.append(per_node[0][i : i + step])
        if i >= step:
            batches.append(per_node[1][i - step : i])
    assert sum(len(b) for b in batches) == len(lines)
    app = make_app(tmp_path / "state")
    async with app.run_test(size=SIZE) as pilot:
        screen = LogsScreen(job, follow=False, buffer_lines=CAP)
        await app.push_screen(screen)
        for batch in batches:
            if batch:
                await feed(pilot, screen, batch)
        buf = screen.merged
        assert len(buf) == CAP
        got = [(d.ts_ns, d.node_rank, d.plain) for d in buf.slice(0, len(buf))]
        assert got == [(ln.ts_ns, ln.node_rank, plain(ln)) for ln in by_time(lines)[-CAP:]]
        await pilot.press("a")
        await pilot.pause()
        merged = screen.query_one(LogPanes).merged_pane
        assert merged is not None
        width = merged.scrollable_content_region.width
        rows = pane_rows(app, merged)
        assert rows == [shown(ln, width) for ln in by_time(lines)[-len(rows) :]]


async def test_panes_tag_lines_as_the_cli_does(tmp_path: Path) -> None:
    job = two_node_job()
    lines = recorded_lines(job)
    app = make_app(tmp_path / "state")
    async with app.run_test(size=SIZE) as pilot:
        screen = LogsScreen(job, follow=False)
        await app.push_screen(screen)
        first, gang = by_time(lines)[:2], [ln for ln in lines if "[gpuconsole-gang]" in ln.text]
        assert [(ln.node_rank, ln.rank) for ln in first + gang] == [
            (0, 0),
            (1, 1),
            (1, None),
            (0, None),
        ]
        await feed(pilot, screen, first)  # rank 0's and rank 1's first lines
        await feed(pilot, screen, gang)  # the gang watcher's line on each node
        panes = screen.query_one(LogPanes)
        p0, p1 = panes.panes
        w0 = p0.scrollable_content_region.width
        w1 = p1.scrollable_content_region.width
        rows0, rows1 = pane_rows(app, p0)[:2], pane_rows(app, p1)[:2]
        # a rank's line: [n<node> r<rank>]; the agent's and the gang's: [n<node>] (no r-)
        assert [r[:8] for r in rows0] == ["[n0 r0] ", "[n0] [gp"]
        assert [r[:8] for r in rows1] == ["[n1 r1] ", "[n1] [gp"]
        assert not any(r.startswith("r") for r in rows0 + rows1)
        cli = {n: [ln for ln in first + gang if ln.node_rank == n] for n in (0, 1)}
        assert rows0 == [shown(ln, w0) for ln in cli[0]]
        assert rows1 == [shown(ln, w1) for ln in cli[1]]
        await pilot.press("a")
        await pilot.pause()
        merged = panes.merged_pane
        assert merged is not None
        wm = merged.scrollable_content_region.width
        assert pane_rows(app, merged)[:4] == [shown(ln, wm) for ln in by_time(first + gang)]


# -- the ordered buffer on its own -----------------------------------------------------------


def arrivals(lines: list[JobLogLine], seed: int) -> list[list[JobLogLine]]:
    """Each node's lines in its own order, cut into batches of random sizes (1 to 40), the
    nodes' batches interleaved at random: an order the follow can deliver them in."""
    rng = random.Random(seed)
    queues = {n: [ln for ln in lines if ln.node_rank == n] for n in (0, 1)}
    out = []
    while any(queues.values()):
        n = rng.choice([k for k, q in queues.items() if q])
        size = rng.randint(1, 40)
        out.append(queues[n][:size])
        del queues[n][:size]
    return out


@pytest.mark.parametrize("cap", [100_000, 50])
def test_ordered_buffer_equals_the_cli_order_whatever_the_arrival(cap: int) -> None:
    lines = recorded_lines(two_node_job())
    want = LogBuffer(cap)  # arrival order = the CLI's merge order
    want.extend(by_time(lines))
    orders = [
        [[ln for ln in lines if ln.node_rank == n] for n in (0, 1)],
        [[ln for ln in lines if ln.node_rank == n] for n in (1, 0)],
        *(arrivals(lines, seed) for seed in range(8)),
    ]
    for batches in orders:
        buf = LogBuffer(cap, ordered=True)
        for batch in batches:
            buf.extend(batch)
        buf.settle()  # (reads settle first too; len() counts lines still waiting)
        assert len(buf) == len(want) and buf.total == len(lines)
        assert [r[1:] for r in buf.rows(0, len(buf))] == [r[1:] for r in want.rows(0, len(want))]
        assert buf.errors() == want.errors()
        assert buf.matching("failed") == want.matching("failed")


def test_settle_reports_where_lines_moved_and_peek_waits_for_it() -> None:
    lines = recorded_lines(two_node_job())
    n0 = [ln for ln in lines if ln.node_rank == 0]
    n1 = [ln for ln in lines if ln.node_rank == 1]
    buf = LogBuffer(ordered=True)
    buf.extend(n0)
    version = buf.version
    assert buf.rewritten_since(version) is None
    buf.extend(n1)  # all older than node 0's newest line: they wait
    assert len(buf) == len(lines)
    assert [buf.peek(i).plain for i in range(len(n0))] == [plain(ln) for ln in n0]  # type: ignore[union-attr]
    assert buf.peek(len(n0)) is None
    buf.settle()
    # node 1's first line is the second by time: everything from position 1 moved
    assert by_time(lines)[1] is n1[0]
    assert buf.rewritten_since(version) == 1
    assert buf.rewritten_since(buf.version) is None
    assert buf.peek(1).plain == plain(n1[0])  # type: ignore[union-attr]


def test_a_late_nodes_progress_bar_is_redrawn_in_place() -> None:
    """A late node's tqdm bar (tail-04: one update per line) redraws itself before and after
    its lines are merged, and lands before the other node's newer lines."""
    bar_lines = (TAIL_LOGS / "tail-04.txt").read_text(encoding="utf-8").splitlines()
    want_bar = [
        "Training:   0%|          | 0/18 [00:00<?, ?it/s]",
        "Epoch 0:  28%|\u2588\u2588\u258a       | 5/18 [00:20<00:53,  4.14s/it, "
        "loss=9.847, v_num=193315]",
    ]
    lines = recorded_lines(two_node_job())
    first, later = lines[0], lines[11]  # node 0's first two lines (03.535 s after it)
    assert (first.node_rank, later.node_rank) == (0, 0)
    t0 = first.ts_ns
    bars = [JobLogLine(1, "h200-b", 1, t0 + 1000 + i, text) for i, text in enumerate(bar_lines)]
    buf = LogBuffer(ordered=True)
    buf.append(later)
    buf.extend(bars[:6])  # late: redrawn among themselves while waiting
    buf.append(first)  # late too
    buf.settle()
    buf.extend(bars[6:])  # still older than node 0's newest: late again, redraws the merged bar
    assert [d.plain for d in buf.slice(0, len(buf))] == [plain(first), *want_bar, plain(later)]


async def test_a_paused_view_keeps_its_top_line_when_late_lines_land_above(tmp_path: Path) -> None:
    job = two_node_job()
    lines = recorded_lines(job)
    app = make_app(tmp_path / "state")
    async with app.run_test(size=SIZE) as pilot:
        screen = LogsScreen(job, follow=False)
        await app.push_screen(screen)
        await feed(pilot, screen, [ln for ln in lines if ln.node_rank == 0])
        await pilot.press("a")
        await pilot.pause()
        merged = screen.query_one(LogPanes).merged_pane
        assert merged is not None
        await pilot.press(*["up"] * 40)  # paused, reading node 0's teardown
        await pilot.pause()
        assert not merged.following
        top = merged.visible_lines()[0]
        await feed(pilot, screen, [ln for ln in lines if ln.node_rank == 1])
        assert merged.line_count == len(lines)
        assert merged.visible_lines()[0] == top
