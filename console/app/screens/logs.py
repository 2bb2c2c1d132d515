"""The log panes of one job: one pane per node (or per rank), tiled, tmux-like.

Lines come from the service's follow of the job (:meth:`console.service.Service.start_follow`)
as :class:`console.app.messages.LogLinesArrived` batches, posted here by the app. Each line goes
to its node's buffer, its rank's buffer and the merged buffer (all bounded; the merged one
keeps time order, as ``logs`` does); the panes render only their visible rows. A node that
reconnects continues in the same pane: the service's follow resumes from its cursor, so
nothing is lost or repeated. A removed job is read from the local archive.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual import events, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen

from console.app.failures import reported
from console.app.host import AppHost, host
from console.app.lifecycle import can_draw
from console.app.messages import (
    ArchiveUpdated,
    FollowStateUpdated,
    JobUpdated,
    LogLinesArrived,
)
from console.app.screens.modals import AskScreen
from console.app.widgets.footer import FittedFooter
from console.app.widgets.logpane import LogPane
from console.app.widgets.logpanes import LogPanes
from console.app.widgets.oneline import OneLine
from console.app.widgets.rendermemo import RenderMemo
from console.app.widgets.status import StatusLine
from console.jobs.logbuffer import LogBuffer, Row, display_lines
from console.jobs.logs import JobLogLine
from console.jobs.rows import state_label
from console.jobs.store import JobRecord
from console.service import Intake
from remote.docker import format_ns
from remote.errors import GpuConsoleError

#: Longest stretch of line intake before the loop gets keys and repaints again (s).
DRAIN_BUDGET_S = 0.010
#: Pause between intake stretches while a backlog remains (s).
DRAIN_PAUSE_S = 0.005
#: The header's line counts repaint at most this often while lines arrive (s).
HEADER_EVERY_S = 0.5
#: Lines of a finished log shaped per worker-thread call (the first chunk shows at once).
SHAPE_CHUNK = 2048
#: A followed node's pane says ``loading…`` until its first line, a change of its stream's
#: state or the end of the follow, at most this long (s); then ``0 lines``.
LOADING_S = 5.0


class LogsFooter(FittedFooter):
    """The log panes' footer: compact, and when not every key fits, the ones that matter
    most (:class:`~console.app.widgets.footer.FittedFooter`): help and quit, back, follow,
    search and filter, errors, the layout keys, stop and shell; then the match keys (once
    there is a search) and the views' keys, which ``?`` lists with the rest."""

    KEEP = (
        "help",
        "quit",
        "back",
        "follow",
        "search",
        "filter",
        "error_next",
        "zoom",
        "toggle_merged",
        "split_ranks",
        "stop",
        "exec",
        "search_next",
        "show('fleet')",
        "show('jobs')",
        "show('alerts')",
    )

    def __init__(self) -> None:
        # a pane's escape clears its search, else goes back (shown as Back)
        super().__init__(keep=self.KEEP, pass_on=("clear_search",))


def _origin(item: JobLogLine | tuple[Row, ...]) -> tuple[int, int | None, int]:
    """(node rank, rank, Docker timestamp in ns) of a queued line or of its display rows."""
    if isinstance(item, JobLogLine):
        return item.node_rank, item.rank, item.ts_ns
    first = item[0]
    return first[1], first[2], first[3]


def _shape(lines: list[JobLogLine]) -> list[list[Row]]:
    """The display rows of each line (:func:`~console.jobs.logbuffer.display_lines`)."""
    return [display_lines(ln) for ln in lines]


def _newer(old: list[JobLogLine], new: list[JobLogLine]) -> list[JobLogLine] | None:
    """The lines of ``new`` after those of ``old``, node by node (both are archive tails of
    the same job, ``new`` read later: an archive only grows at its end); ``None`` when a
    node's last old line is no longer in ``new`` (more new lines than the tail holds)."""
    last: dict[int, JobLogLine] = {}
    for ln in old:
        last[ln.node_rank] = ln
    by_node: dict[int, list[JobLogLine]] = {}
    for ln in new:
        by_node.setdefault(ln.node_rank, []).append(ln)
    out: list[JobLogLine] = []
    for node, lines in by_node.items():
        end = last.get(node)
        if end is None:
            out.extend(lines)
            continue
        at = next((i for i in range(len(lines) - 1, -1, -1) if lines[i] == end), None)
        if at is None:
            return None
        out.extend(lines[at + 1 :])
    out.sort(key=lambda ln: (ln.ts_ns, ln.node_rank))  # stable: each node keeps its order
    return out


class LogsScreen(RenderMemo, Screen[None]):
    """Log panes of ``job`` (see the module docstring).

    Args:
        job: the job.
        buffer_lines: lines each pane keeps (the archive keeps every line).
        follow: follow live (``False``: tests that feed lines themselves).
        max_backlog: lines waiting to be shown beyond which the oldest are skipped on screen.
    """

    BINDINGS = [
        Binding("escape", "back", "Back", id="logs.back"),
        Binding("r", "split_ranks", "Per rank", id="logs.split_ranks"),
        Binding("S", "stop", "Stop", id="logs.stop_job"),
        Binding("x", "exec", "Shell", id="logs.exec"),
        Binding("plus", "add_job", "Add job", key_display="+", show=False, id="logs.add_job"),
    ]
    intake: ClassVar[Intake] = "process"
    """Where the job's streams are read (:meth:`console.service.Service.start_follow`): in a
    child process, so the intake never holds the GIL against keys and repaints (the
    benchmark compares the three choices)."""

    DEFAULT_CSS = """
    LogsScreen #logs-header { height: 1; background: $boost; padding: 0 1; }
    LogsScreen LogPanes { height: 1fr; }
    """

    def __init__(
        self,
        job: JobRecord,
        *,
        buffer_lines: int = 100_000,
        follow: bool = True,
        max_backlog: int = 50_000,
    ) -> None:
        super().__init__()
        self.job = job
        self.buffer_lines = buffer_lines
        self.live = follow
        self.by_node: dict[int, LogBuffer] = {
            n.node_rank: LogBuffer(buffer_lines, node=n.node_rank) for n in job.nodes
        }
        self.by_rank: dict[tuple[int, int], LogBuffer] = {}
        # the "all ranks" view: in time order as `logs` prints it, whichever node's batch
        # comes first (a node's whole tail, a slower node's lines, arrive after the others')
        self.merged = LogBuffer(buffer_lines, ordered=True)
        self.split_ranks = False
        self.follow_state: dict[int, str] = {}
        self.archive_errors: dict[int, str] = {}
        """Node rank -> why its log archive cannot be written now (shown in the header)."""
        self.lines_taken = 0
        self.skipped = 0
        self.max_backlog = max_backlog
        # raw lines to shape, or the display rows of one line shaped by the intake process
        # (plain tuples: a backlog of them costs the cyclic GC nothing)
        self._pending: deque[JobLogLine | tuple[Row, ...]] = deque()
        self._skipped_by_node: dict[int, int] = {}
        self._drain_scheduled = False
        self._key_waiting = False
        self._header_at = 0.0
        self._header_due = False
        # node ranks whose panes still say "loading…" (follow: until a first line), and
        # whether all there is to load was queued (then, once drained, say why a pane is
        # empty)
        self._loading: set[int] = set()
        self._loaded = False
        self._following_tail = False
        # other jobs shown side by side (``+``): their records and one buffer per node
        self.others: dict[str, JobRecord] = {}
        self.other_by_node: dict[tuple[str, int], LogBuffer] = {}
        # set first thing on mount; lines and states
        # that arrive before are kept and drawn then
        self._composed = False

    @property
    def gc(self) -> AppHost:
        """The app, as a screen may use it (:class:`~console.app.host.AppHost`)."""
        return host(self.app)

    # -- layout -----------------------------------------------------------------------------

    def _node_title(self, node_rank: int) -> str:
        n = next((n for n in self.job.nodes if n.node_rank == node_rank), None)
        title = f"node {node_rank}" + (f" · {n.host}" if n else "")
        state = self.follow_state.get(node_rank)
        if state == "reconnecting":
            title += " · reconnecting…"
        return title

    def compose(self) -> ComposeResult:
        yield OneLine(self._header(), id="logs-header")
        panes = LogPanes(
            [(self._node_title(n), buf) for n, buf in sorted(self.by_node.items())],
            merged=self.merged,
            id="panes",
            rank_panes=[
                (f"node {n} rank {r}", buf) for (n, r), buf in sorted(self.by_rank.items())
            ],
        )
        if self.live:  # from the first frame on: "loading…", never "0 lines"
            self._loading = set(self.by_node)
            for pane in panes.panes + [p for p in [panes.merged_pane] if p is not None]:
                pane.set_loading(True)
        yield panes
        yield StatusLine()
        yield LogsFooter()

    def _header(self) -> Text:
        j = self.job
        text = Text()
        text.append(f" {j.id} ", style="bold reverse")
        text.append(f"  {state_label(j)}", style="bold")
        text.append(f"  {len(j.nodes)} node(s)  lines {self.lines_taken}")
        if self._pending:
            text.append(f"  catching up: {len(self._pending)} queued", style="yellow")
        if self.skipped:
            text.append(f"  {self.skipped} not shown (archived)", style="yellow")
        for node, error in sorted(self.archive_errors.items()):
            text.append(f"  n{node} not archived: {error}", style="bold red")
        if j.failure:
            f = j.failure
            rank = f" rank {f['rank']}" if f.get("rank") is not None else ""
            text.append(f"  first failure: node {f['node']}{rank}: {f['reason']}", style="red")
        return text

    def on_mount(self) -> None:
        self._composed = True
        self._show_exit_codes()
        if self._pending:  # lines given before the panes were there
            self._schedule_drain()
        panes = self.query_one(LogPanes)
        if panes.panes:
            panes.panes[0].focus()
        if not self.live:
            return
        if self.job.removed_at is not None or self._finished():
            self._load_finished()
        else:
            follow = self.gc.service.start_follow(
                self.job, tail=self.buffer_lines, where=self.intake
            )
            self._following_tail = True
            self._await_follow(follow.task)
            self.set_timer(LOADING_S, lambda: self._stop_loading(set(self._loading)))

    def _finished(self) -> bool:
        """No node may write any more: its lines are all in its container or the archive."""
        return self.job.state not in ("pending", "running") and all(
            n.state not in ("pending", "running") for n in self.job.nodes
        )

    async def on_unmount(self) -> None:
        if self.live:
            await self.gc.service.stop_follow(self.job.id)
            for job_id in self.others:
                await self.gc.service.stop_follow(job_id)
        # the panes' buffers and strips just became garbage: once the next screen is drawn,
        # a natural pause to collect the cycles the GC policy left frozen while lines streamed
        self.app.call_after_refresh(self.gc.gc_policy.sweep)

    @work(group="logs-archive", exit_on_error=False)
    @reported("logs")
    async def _load_finished(self) -> None:
        """A finished (or removed) job: the local archive first (read and shaped in worker
        threads, shown as soon as it is there), then whatever the containers hold that the
        archive does not yet (they are read and archived, as ``logs`` does)."""
        svc, tail = self.gc.service, self.buffer_lines
        try:
            archived = await svc.read_logs(self.job, tail=tail, archive_only=True)
        except GpuConsoleError as e:
            self.notify(e.message, title="logs", severity="error")
            archived = []
        await self._take_shaped(archived)
        if self.job.removed_at is None:
            try:
                full = await svc.read_logs(self.job, tail=tail)
            except GpuConsoleError as e:
                self.notify(e.message, title="logs", severity="error")
                full = archived
            new = _newer(archived, full)
            if new is None:  # more new lines than a pane keeps: show the newest only
                self._pending.clear()
                for buf in [*self.by_node.values(), *self.by_rank.values(), self.merged]:
                    buf.clear()
                new = full
            await self._take_shaped(new)
        self._loaded = True
        self._schedule_drain()

    async def _take_shaped(self, lines: list[JobLogLine]) -> None:
        """Queue lines shaped in a worker thread, :data:`SHAPE_CHUNK` at a time (the first
        show while the rest are shaped; the loop only files their rows)."""
        for start in range(0, len(lines), SHAPE_CHUNK):
            chunk = lines[start : start + SHAPE_CHUNK]
            rows = await asyncio.to_thread(_shape, chunk)
            self.take_lines(chunk, rows, keep_all=True)

    @work(group="logs-follow", exit_on_error=False)
    @reported("logs")
    async def _await_follow(self, task: asyncio.Task[object]) -> None:
        """Once the follow ended (every node exited), say why an empty pane is empty."""
        await asyncio.wait({task})
        self._loaded = True
        self._schedule_drain()

    def _stop_loading(self, nodes: set[int]) -> None:
        """These nodes' panes no longer say ``loading…``."""
        if not nodes or not can_draw(self, self._composed):
            return
        self._loading -= nodes
        panes = self.query_one(LogPanes)
        for node in nodes:
            buf = self.by_node.get(node)
            pane = panes.pane_for(buf) if buf is not None else None
            if pane is not None:
                pane.set_loading(False)

    def _finish_loading(self) -> None:
        """Everything was loaded and shown: no pane says ``loading…``; an empty node pane
        says why it is empty (its container is gone and nothing was archived...)."""
        from console.jobs.logs import no_lines_reason

        self._loaded = False
        self._stop_loading(set(self.by_node))
        panes = self.query_one(LogPanes)
        if panes.merged_pane is not None:
            panes.merged_pane.set_loading(False)
        for n in self.job.nodes:
            buf = self.by_node.get(n.node_rank)
            pane = panes.pane_for(buf) if buf is not None else None
            if pane is not None and buf is not None and not len(buf):
                why = no_lines_reason(self.job, n)
                pane.set_empty_text(why[1] if why is not None else None)

    # -- data -------------------------------------------------------------------------------

    def on_archive_updated(self, m: ArchiveUpdated) -> None:
        """A node of this screen's job cannot archive its log, or can again: its header
        says so meanwhile."""
        if m.job_id != self.job.id:
            return
        if m.error is None:
            self.archive_errors.pop(m.node_rank, None)
        else:
            self.archive_errors[m.node_rank] = m.error
        if can_draw(self, self._composed):
            self.query_one("#logs-header", OneLine).show(self._header())

    def on_key(self, _event: events.Key) -> None:
        """Any key on this screen (a pane's, its prompt's): the panes' next log frame waits
        a moment, so what the key does is drawn first, alone."""
        if can_draw(self, self._composed):
            self.query_one(LogPanes).input_arrived()
            self._key_waiting = True  # the next intake stretch waits for the key's repaint

    def on_log_lines_arrived(self, m: LogLinesArrived) -> None:
        """Lines of this screen's job, or of a job shown beside it (``+``)."""
        if m.job_id in self.others:
            self._take_other(m.job_id, m.lines, m.shown)
        elif m.job_id == self.job.id:
            self.take_lines(m.lines, m.shown)

    def on_job_updated(self, m: JobUpdated) -> None:
        """A new record of this screen's job (its header, exit codes) or of one beside it."""
        if m.job.id in self.others:
            self.others[m.job.id] = m.job
            self._show_other_exit_codes(m.job)
        elif m.job.id == self.job.id:
            self.job = m.job
            if can_draw(self, self._composed):
                self._show_exit_codes()
                self.query_one("#logs-header", OneLine).show(self._header())

    def on_follow_state_updated(self, m: FollowStateUpdated) -> None:
        """A node of this screen's job is following, reconnecting or ended (its title)."""
        if m.job_id == self.job.id:
            self.follow_state[m.node_rank] = m.state
            self._stop_loading({m.node_rank} & self._loading)
            self._show_titles()

    def _show_titles(self) -> None:
        """Each node pane's title with its follow state."""
        if not can_draw(self, self._composed):
            return
        panes = self.query_one(LogPanes)
        for node_rank, buf in self.by_node.items():
            pane = panes.pane_for(buf)
            if pane is not None:
                pane.set_title(self._node_title(node_rank))

    def take_lines(
        self,
        lines: Sequence[JobLogLine],
        shown: Sequence[Sequence[Row]] | None = None,
        *,
        keep_all: bool = False,
    ) -> None:
        """Queue lines for the panes. They are shaped (unless ``shown`` has their display
        rows, made by the intake process or a worker thread) and shown by :meth:`_drain`, a
        few milliseconds of work at a time, so keys are never stuck behind a burst of lines;
        a live backlog beyond :attr:`max_backlog` lines is skipped on screen (counted in the
        header, every line stays in the archive: ``ctrl+s``); ``keep_all`` (a finished log
        read at once) skips nothing."""
        if shown is None:
            self._pending.extend(lines)
        else:
            self._pending.extend(tuple(rows) for rows in shown if rows)
        excess = 0 if keep_all else len(self._pending) - self.max_backlog
        if excess > 0:
            for _ in range(excess):
                node = _origin(self._pending.popleft())[0]
                self._skipped_by_node[node] = self._skipped_by_node.get(node, 0) + 1
            self.skipped += excess
        self._schedule_drain()

    def _schedule_drain(self) -> None:
        if not self._drain_scheduled and can_draw(self, self._composed):
            self._drain_scheduled = True
            self.call_later(self._drain)

    @property
    def backlog(self) -> int:
        """Lines received but not yet in the panes' buffers."""
        return len(self._pending)

    def _count_in_header(self) -> None:
        """Show the header's line counts at most every :data:`HEADER_EVERY_S` (a flood
        drains in many small steps), the last counts always: a later update is scheduled
        when one is skipped."""
        if self._header_due:
            return
        wait = self._header_at + HEADER_EVERY_S - time.monotonic()
        if wait > 0:
            self._header_due = True
            self.set_timer(wait, self._header_timer)
            return
        self._header_at = time.monotonic()
        self.query_one("#logs-header", OneLine).show(self._header())

    def _header_timer(self) -> None:
        self._header_due = False
        if can_draw(self, self._composed):
            self._count_in_header()

    def _drain(self) -> None:
        """Move queued lines into the buffers for at most :data:`DRAIN_BUDGET_S`, then yield
        to the event loop (keys, repaint) and continue on a timer."""
        self._drain_scheduled = False
        if not can_draw(self, self._composed):
            return  # kept in self._pending: on mount, or once the panes are swapped
        if self._key_waiting:  # a key came: its repaint goes first, then the intake
            self._key_waiting = False
            self._drain_scheduled = True
            self.call_after_refresh(self._drain)
            return
        panes = self.query_one(LogPanes)
        deadline = time.perf_counter() + DRAIN_BUDGET_S
        taken = 0
        pending = self._pending
        if self._skipped_by_node:
            self._mark_skipped(panes)
        while pending:
            self._append(panes, pending.popleft())
            taken += 1
            if taken % 64 == 0 and time.perf_counter() > deadline:
                break
        self.lines_taken += taken
        if taken:
            panes.notify_appended()
            if self._loading and self._following_tail:  # following: a first line ends it
                self._stop_loading({n for n in self._loading if len(self.by_node[n])})
        if not pending and self._loaded:
            self._finish_loading()
        self._count_in_header()
        if pending:
            self._drain_scheduled = True
            self.set_timer(DRAIN_PAUSE_S, self._drain)

    def _mark_skipped(self, panes: LogPanes) -> None:
        """One line in each node's pane saying how many of its lines were not shown."""
        skipped, self._skipped_by_node = self._skipped_by_node, {}
        for node, count in sorted(skipped.items()):
            ts = _origin(self._pending[0])[2] if self._pending else 0
            n = next((x for x in self.job.nodes if x.node_rank == node), None)
            self._append(
                panes,
                JobLogLine(
                    node,
                    n.host if n else "?",
                    None,
                    ts,
                    f"\x1b[2m… {count} lines not shown (the console fell behind); "
                    f"all are archived: ctrl+s saves them\x1b[0m",
                ),
            )

    def _append(self, panes: LogPanes, item: JobLogLine | tuple[Row, ...]) -> None:
        # rows shaped by the intake process come numbered from a block of their own
        shown = display_lines(item) if isinstance(item, JobLogLine) else item
        node_rank, rank, _ts = _origin(item)
        buf = self.by_node.get(node_rank)
        if buf is None:  # a node the record did not list (adopted job): give it a pane
            buf = self.by_node[node_rank] = LogBuffer(self.buffer_lines, node=node_rank)
            panes.add_pane(self._node_title(node_rank), buf)
        buf.append_rows(node_rank, rank, shown)
        if rank is not None:
            key = (node_rank, rank)
            rbuf = self.by_rank.get(key)
            if rbuf is None:
                rbuf = self.by_rank[key] = LogBuffer(self.buffer_lines, node=node_rank, rank=rank)
                pane = panes.add_pane(
                    f"node {key[0]} rank {key[1]}",
                    rbuf,
                    rank=True,
                    index=sorted(self.by_rank).index(key),
                )
                n = next((x for x in self.job.nodes if x.node_rank == node_rank), None)
                if n is not None and n.state not in ("pending", "running"):
                    pane.set_exit_code(n.exit_code)
            rbuf.append_rows(node_rank, rank, shown)
        self.merged.append_rows(node_rank, rank, shown)

    def _show_exit_codes(self) -> None:
        if not can_draw(self, self._composed):
            return
        panes = self.query_one(LogPanes)
        for n in self.job.nodes:
            if n.state in ("pending", "running"):
                continue
            bufs = [
                self.by_node.get(n.node_rank),
                *(b for (node, _), b in self.by_rank.items() if node == n.node_rank),
            ]
            for buf in bufs:
                pane = panes.pane_for(buf) if buf is not None else None
                if pane is not None:
                    pane.set_exit_code(n.exit_code)
        if (
            panes.merged_pane is not None
            and self.job.nodes
            and all(n.state not in ("pending", "running") for n in self.job.nodes)
        ):
            panes.merged_pane.set_exit_code(self.job.exit_code)

    # -- actions ----------------------------------------------------------------------------

    def action_back(self) -> None:
        """Back to the previous screen (the follow ends with this screen)."""
        self.app.pop_screen()

    def action_split_ranks(self) -> None:
        """Toggle one pane per node / one pane per rank (the panes stay mounted: this only
        changes which are tiled, at the next layout)."""
        if not self.by_rank and not self.split_ranks:
            self.notify("no rank has written a line yet")
            return
        self.split_ranks = not self.split_ranks
        self.query_one(LogPanes).set_split(self.split_ranks)

    def action_add_job(self) -> None:
        """``+``: show another job's node panes next to these (asks for its id or name)."""

        def chosen(value: str | None) -> None:
            if value:
                self._locate_and_add(value)

        self.app.push_screen(
            AskScreen("Show the panes of another job next to these (id or name):"), chosen
        )

    @work(group="logs-add", exit_on_error=False)
    @reported("add job")
    async def _locate_and_add(self, ref: str) -> None:
        """Find the job ``ref`` names (adopted from the hosts when this store does not know
        it, as the CLI does) and add its panes."""
        try:
            job = await self.gc.service.locate_job(ref)
        except GpuConsoleError as e:
            self.notify(e.message, title="add job", severity="error")
            return
        if can_draw(self, self._composed):
            self.add_job(job)

    def add_job(self, job: JobRecord) -> None:
        """Tile ``job``'s node panes after this job's, titled with its name, and follow it
        (or read its log, if finished) while this screen is open."""
        if job.id == self.job.id or job.id in self.others:
            self.notify(f"{job.id} is already shown", title="add job")
            return
        self.others[job.id] = job
        panes = self.query_one(LogPanes)
        for n in job.nodes:
            buf = self.other_by_node[(job.id, n.node_rank)] = LogBuffer(
                self.buffer_lines, node=n.node_rank
            )
            panes.add_pane(f"{job.name} · node {n.node_rank} · {n.host}", buf)
        self._show_other_exit_codes(job)
        if not self.live:
            return
        if job.state in ("pending", "running"):
            self.gc.service.start_follow(job, tail=self.buffer_lines, where=self.intake)
        else:
            self._read_other(job)

    @work(group="logs-other", exit_on_error=False)
    @reported("logs")
    async def _read_other(self, job: JobRecord) -> None:
        lines = await self.gc.service.read_logs(job, tail=self.buffer_lines)
        rows = await asyncio.to_thread(_shape, lines)
        self._take_other(job.id, lines, rows)
        from console.jobs.logs import no_lines_reason

        panes = self.query_one(LogPanes)
        for n in job.nodes:  # an empty pane says why
            buf = self.other_by_node.get((job.id, n.node_rank))
            pane = panes.pane_for(buf) if buf is not None else None
            if pane is not None and buf is not None and not len(buf):
                why = no_lines_reason(job, n)
                pane.set_empty_text(why[1] if why is not None else None)

    def _take_other(
        self, job_id: str, lines: Sequence[JobLogLine], shown: Sequence[Sequence[Row]] | None
    ) -> None:
        """File another job's lines into its node panes' buffers."""
        for i, ln in enumerate(lines):
            buf = self.other_by_node.get((job_id, ln.node_rank))
            if buf is not None:
                rows = shown[i] if shown is not None else display_lines(ln)
                buf.append_rows(ln.node_rank, ln.rank, rows)
        self.query_one(LogPanes).notify_appended()

    def _show_other_exit_codes(self, job: JobRecord) -> None:
        panes = self.query_one(LogPanes)
        for n in job.nodes:
            buf = self.other_by_node.get((job.id, n.node_rank))
            pane = panes.pane_for(buf) if buf is not None else None
            if pane is not None and n.state not in ("pending", "running"):
                pane.set_exit_code(n.exit_code)

    def action_stop(self) -> None:
        """Stop the job (with the confirmation showing what runs where)."""
        self.gc.confirm_stop(self.job)

    def action_exec(self) -> None:
        """A shell in the job's container."""
        self.gc.exec_shell(self.job)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The app decides: ``--readonly`` hides stop and exec."""
        return self.app.check_action(action, parameters)

    def on_log_pane_save_requested(self, m: LogPane.SaveRequested) -> None:
        buf = m.pane.buffer
        node = next((n for n, b in self.by_node.items() if b is buf), None)
        if node is None:
            node = next((k[0] for k, b in self.by_rank.items() if b is buf), None)
        name = f"{self.job.id}" + (f"-node{node}" if node is not None else "") + ".log"
        what = f"node {node}" if node is not None else "all nodes"

        def chosen(value: str | None) -> None:
            if not value:
                return
            path = Path(value).expanduser()
            if not path.is_absolute():
                path = Path.cwd() / path
            if path.exists():
                self.notify(f"{path} exists: give another name", title="save", severity="warning")
                return
            self._save(node, path)

        self.app.push_screen(
            AskScreen(f"Save the whole log of {self.job.id} ({what}) to:", str(Path.cwd() / name)),
            chosen,
        )

    @work(group="logs-save", exit_on_error=False)
    @reported("save")
    async def _save(self, node: int | None, path: Path) -> None:
        """Write the whole log (every archived line, not just the pane's buffer) to ``path``
        (``<RFC 3339 time> [n<node> r<rank>] text`` per line)."""
        lines = await self.gc.service.read_logs(self.job, node=node)

        def write() -> None:
            with open(path, "x", encoding="utf-8", errors="replace") as f:
                for ln in lines:
                    f.write(f"{format_ns(ln.ts_ns)} {ln.tag()} {ln.text}\n")

        try:
            await asyncio.to_thread(write)
        except OSError as e:
            self.notify(f"cannot write {path}: {e.strerror}", title="save", severity="error")
            return
        self.notify(f"saved {len(lines)} lines to {path}", title="save")
