"""The jobs view: the jobs of ``ps`` with state per node, age, GPUs, utilization, diagnosis.

Keys: enter/``l`` logs, ``S`` stop (confirm shows each ``docker stop``), ``d`` describe, ``n``
submit a spec (its dry-run plan is shown before confirming), ``x`` a shell in the job's
container, ``D`` remove a finished job's containers (the confirmation lists them; a running job:
stop it first), ``o`` open a notebook job's JupyterLab (a tunnel over SSH, its URL), ``N`` start
a new notebook, ``R`` reconcile now, ``/`` filter (:func:`console.jobs.rows.parse_job_query`;
escape clears it), ``s`` next sort column, ``r`` reverse it, home/``g`` and end/``G`` the first
and last row. The KIND column says ``train`` or ``notebook``. The cursor stays on its job (by
id) when jobs arrive or the order changes. The line under the table shows the selected job
whole: its nodes and its reason or diagnosis, wrapped (a narrow terminal cuts the REASON
column). The screen never calls the engine itself: it asks the app, whose workers post typed
messages back.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterable, Mapping

from rich.text import Text
from textual import on
from textual.actions import SkipAction
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Input, Static

from console.alerts.model import Alert
from console.app.host import AppHost, host
from console.app.lifecycle import can_draw, seen
from console.app.widgets.footer import FittedFooter
from console.app.widgets.oneline import OneLine
from console.app.widgets.status import StatusLine
from console.app.widgets.tables import cursor_key
from console.fleet.state import JobUsage
from console.jobs.rows import (
    DEFAULT_DESCENDING,
    SORT_COLUMN,
    SORT_KEYS,
    JobRow,
    JobSortKey,
    job_matches,
    job_row,
    parse_job_query,
    sort_rows,
)
from console.jobs.status import failure_lines, job_summary
from console.jobs.store import JobRecord
from console.throughput import JobProgress, eta_text, rate_text, throughput_lines, usd

_STATE_STYLE = {
    "running": "green",
    "pending": "cyan",
    "succeeded": "bold green",
    "stopped": "yellow",
    "lost": "magenta",
    "removed": "dim",
    "unknown": "dim",
}
COLUMNS = (
    "JOB",
    "KIND",
    "STATE",
    "NODES",
    "AGE",
    "GPUS",
    "UTIL",
    "RATE",
    "ETA",
    "$/H",
    "EXIT",
    "REASON",
)


def _cell_state(state: str) -> Text:
    style = "bold red" if state.startswith("failed") else _STATE_STYLE.get(state, "")
    return Text(state, style=style)


def row_cells(r: JobRow) -> tuple[Text | str, ...]:
    """The table cells of one row; unknown values show as ``?``, values that do not apply
    (GPUs of a finished job, utilization of a job without GPUs) as ``-``."""
    p = r.progress
    if p is None:  # not running, or its log not read yet
        rate = eta = cost = "-" if not r.active or r.kind != "train" else "?"
    else:
        rate, eta = rate_text(p.throughput), eta_text(p.throughput)
        cost = usd(p.cost.usd_per_hour) if p.cost else "-" if r.cpu_only else "?"
    return (
        r.job_id,
        Text(r.kind, style="bold cyan") if r.kind == "notebook" else r.kind,
        _cell_state(r.state),
        r.nodes,
        r.age,
        "-" if not r.active else "?" if r.gpus is None else str(r.gpus),
        "-" if not r.active or r.cpu_only else "?" if r.util_pct is None else f"{r.util_pct:.0f}%",
        rate,
        eta,
        cost,
        "" if r.exit_code is None else str(r.exit_code),
        Text(r.reason, style="red") if r.reason else "",
    )


#: The rules whose alerts are about a running job, shown in the jobs view.
JOB_ALERT_RULES = frozenset({"straggler", "gpus_idle", "job_hung"})


def _about(alert: Alert) -> str:
    """An alert's summary without its ``job NAME (ID): `` opening (the row says which job)."""
    head, sep, rest = alert.summary.partition("): ")
    return rest if sep and head.startswith("job ") else alert.summary


class JobsTable(DataTable[Text | str]):
    """The jobs table: home/``g`` and end/``G`` move the cursor to the first and last row
    (DataTable's own home/end only scroll)."""

    BINDINGS = [
        Binding("home,g", "first", "First row", show=False, id="jobs.first"),
        Binding("end,G", "last", "Last row", show=False, id="jobs.last"),
    ]

    def action_first(self) -> None:
        """The cursor to the first row."""
        if self.row_count:
            self.move_cursor(row=0)

    def action_last(self) -> None:
        """The cursor to the last row."""
        if self.row_count:
            self.move_cursor(row=self.row_count - 1)


#: The jobs view's footer keys, most important first: those left out when the width is short
#: (:class:`~console.app.widgets.footer.FittedFooter`) are in ``?``.
JOBS_FOOTER_KEEP = (
    "help",
    "quit",
    "logs",
    "stop",
    "describe",
    "submit",
    "exec",
    "stacks",
    "remove",
    "show('fleet')",
    "show('alerts')",
    "show('jobs')",
)


class JobsScreen(Screen[None]):
    """The jobs table (see the module docstring)."""

    BINDINGS = [
        Binding("enter,l", "logs", "Logs", id="jobs.logs"),
        Binding("S", "stop", "Stop", id="jobs.stop"),
        Binding("d", "describe", "Describe", id="jobs.describe"),
        Binding("n", "submit", "Submit", id="jobs.submit"),
        Binding("x", "exec", "Shell", id="jobs.exec"),
        Binding("k", "stacks", "Stacks", id="jobs.stacks"),
        Binding("D", "remove", "Remove", id="jobs.remove"),
        # the line above the table names / and s (the footer fits 100 columns without them)
        Binding("slash", "open_filter", "Filter", show=False, id="jobs.filter"),
        Binding("s", "cycle_sort", "Sort", show=False, id="jobs.sort"),
        Binding("r", "reverse_sort", "Reverse sort", show=False, id="jobs.reverse"),
        Binding("escape", "clear_filter", "Clear filter", show=False, id="jobs.clear_filter"),
        Binding("o", "notebook", "Open notebook", show=False, id="jobs.notebook"),
        Binding("N", "new_notebook", "New notebook", show=False, id="jobs.new_notebook"),
        Binding("R", "reconcile", "Refresh", show=False, id="jobs.refresh"),
    ]
    DEFAULT_CSS = """
    JobsScreen #jobs-summary { height: 1; padding: 0 1; }
    JobsScreen #jobs-filter { height: 3; display: none; }
    JobsScreen #jobs-filter.-open { display: block; }
    JobsScreen DataTable { height: 1fr; }
    JobsScreen #jobs-empty { height: auto; padding: 1 2; color: $text-muted; }
    JobsScreen #jobs-detail { height: auto; max-height: 8; padding: 0 1; background: $boost; }
    """

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        super().__init__(id="jobs")
        self.clock = clock
        self.jobs: dict[str, JobRecord] = {}
        self.usage: Mapping[str, JobUsage] | None = None
        self.progress: dict[str, JobProgress] = {}
        #: job id -> its firing job alerts (straggler, gpus_idle, job_hung), most severe first
        self.alerts: dict[str, list[Alert]] = {}
        self._composed = False
        self.sort_key: JobSortKey = "age"
        self.descending = DEFAULT_DESCENDING["age"]
        self.filter_query = ""
        self.shown: list[str] = []
        """The ids of the rows shown, in table order."""
        self._cursor_id: str | None = None
        self.empty_text = "no jobs yet: press n to submit a spec, or run `gpuconsole submit`"
        """What the view says when it has no job (a replay: why it shows none)."""

    @property
    def gc(self) -> AppHost:
        """The app, as a screen may use it (:class:`~console.app.host.AppHost`)."""
        return host(self.app)

    def compose(self) -> ComposeResult:
        yield OneLine(id="jobs-summary")
        yield Input(
            placeholder="filter: state:WORD  host:NAME  kind:notebook  job:ID  !WORD  "
            "or any text  (enter: keep, escape: clear)",
            id="jobs-filter",
        )
        table = JobsTable(cursor_type="row", zebra_stripes=True, id="jobs-table")
        for col in COLUMNS:
            table.add_column(col, key=col)
        yield table
        yield Static(self.empty_text, id="jobs-empty")
        yield Static(id="jobs-detail")
        yield StatusLine()
        yield FittedFooter(keep=JOBS_FOOTER_KEEP)

    def on_mount(self) -> None:
        self._composed = True
        self.query_one(DataTable).focus()
        self._draw()

    def on_screen_resume(self) -> None:
        self._draw()

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        # read the cursor now, not the event's row: a rebuild's highlight of row 0 may be
        # handled after the cursor was put back on its job
        key = cursor_key(self.query_one(DataTable))
        if key is not None:
            self._cursor_id = key
        self._show_detail()

    def _show_detail(self) -> None:
        """The selected job in full under the table: nodes, its reason or diagnosis and the
        fix, wrapped (the REASON column is cut on a narrow terminal)."""
        if not can_draw(self, self._composed):
            return
        job = self._cursor_job()
        detail = self.query_one("#jobs-detail", Static)
        if job is None:
            detail.update("")
            return
        text = Text()
        text.append(job.id, style="bold")
        text.append(
            f"  {job.name}  "
            + " ".join(
                f"n{n.node_rank}@{n.host}:{n.state}"
                + (f"({n.exit_code})" if n.exit_code is not None else "")
                for n in job.nodes
            )
        )
        if job.kind == "notebook" and job.state in ("running", "pending") and not self.gc.readonly:
            # o and N stay out of the footer (it is full at 100 columns): said where they apply
            text.append("  o: open its JupyterLab, x: a shell in it", style="bold cyan")
        f = job.failure
        if f:
            first, *rest = failure_lines(f)
            text.append("\n" + first, style="red")
            for line in rest:
                text.append("\n" + line, style="yellow" if "fix:" in line else "dim")
        elif reason := job_summary(job):
            text.append("\n" + reason, style="yellow")
        for a in self.alerts.get(job.id, []):
            text.append(f"\n{a.rule}: {_about(a)}", style="yellow")
        p = self.progress.get(job.id)
        if p is not None and job.state == "running":
            for line in throughput_lines(p.throughput, p.cost, self.clock()):
                text.append("\n" + line)
        detail.update(text)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The app decides: ``--readonly`` hides stop, submit, exec, remove and the
        notebooks."""
        return self.app.check_action(action, parameters)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """Enter on a row (the table takes the key first): its logs."""
        event.stop()
        self.action_logs()

    def selected_job(self) -> JobRecord | None:
        """A copy of the job under the cursor, or ``None`` (also while the table is not
        there). A copy: the service refreshes the record it is handed in place (a stop
        marks its nodes), and the view's own records change only by the messages that
        redraw it, so the table never lags a record it holds."""
        job = self._cursor_job()
        return copy.deepcopy(job) if job is not None else None

    def _cursor_job(self) -> JobRecord | None:
        if not can_draw(self, self._composed):
            return None
        key = cursor_key(self.query_one(DataTable))
        return self.jobs.get(key) if key is not None else None

    def update_jobs(
        self, jobs: list[JobRecord] | None = None, usage: Mapping[str, JobUsage] | None = None
    ) -> None:
        """Show ``jobs`` (``None``: the ones shown, re-rendered) with the fleet's per-job GPU
        usage, filtered and sorted as set; the cursor stays on the same job (by id) wherever
        it moved, else on the row it was on. Kept until the table is there (shown on mount)
        and never drawn while the screen is being removed."""
        if jobs is not None:
            self.jobs = {j.id: j for j in jobs}
        if usage is not None:
            self.usage = usage
        self._draw()

    def update_alerts(self, active: Iterable[Alert]) -> None:
        """Keep the firing alerts about jobs (shown in the REASON column of a running job and
        in its detail: a straggler's sentence, idle money, a hang)."""
        by_job: dict[str, list[Alert]] = {}
        for a in active:
            job_id = a.details.get("job_id")
            if a.firing and isinstance(job_id, str) and a.rule in JOB_ALERT_RULES:
                by_job.setdefault(job_id, []).append(a)
        if by_job != self.alerts:
            self.alerts = by_job
            self._draw()

    def update_progress(self, progress: Mapping[str, JobProgress]) -> None:
        """Show the running jobs' progress as last read from their logs (jobs not in
        ``progress`` keep theirs until they stop running)."""
        self.progress.update(progress)
        self._draw()

    def _draw(self) -> None:
        if not can_draw(self, self._composed) or not seen(self):
            return  # under another screen: drawn by on_screen_resume when shown again
        table = self.query_one(DataTable)
        now = self.clock()
        terms = parse_job_query(self.filter_query)
        rows = [(j, job_row(j, now, self.usage, self.progress)) for j in self.jobs.values()]
        rows = sort_rows(
            [(j, r) for j, r in rows if job_matches(j, r, terms)], self.sort_key, self.descending
        )
        current, index = self._cursor_id, table.cursor_row
        table.clear()
        for j, r in rows:
            cells = row_cells(r)
            if not r.reason and (alerts := self.alerts.get(j.id)):
                cells = (
                    *cells[:-1],
                    Text(f"{alerts[0].rule}: {_about(alerts[0])}", style="yellow"),
                )
            table.add_row(*cells, key=j.id)
        self.shown = [j.id for j, _ in rows]
        self._mark_sort(table)
        if current in self.shown:
            table.move_cursor(row=self.shown.index(current), animate=False)
        elif self.shown:
            table.move_cursor(row=min(max(index, 0), len(self.shown) - 1), animate=False)
        if self.shown:
            self._cursor_id = self.shown[table.cursor_row]
        self.query_one("#jobs-empty").display = not self.jobs
        self.query_one("#jobs-summary", OneLine).show(self._summary())
        self._show_detail()

    def _mark_sort(self, table: DataTable[Text | str]) -> None:
        marked = SORT_COLUMN[self.sort_key]
        for col in COLUMNS:
            column = table.columns.get(col)  # type: ignore[call-overload]
            if column is not None:
                column.label = Text(
                    col + ((" ▼" if self.descending else " ▲") if col == marked else "")
                )

    def _summary(self) -> Text:
        """The line above the table: jobs by state, sort and filter."""
        counts: dict[str, int] = {}
        for j in self.jobs.values():
            state = "removed" if j.removed_at is not None else j.state
            counts[state] = counts.get(state, 0) + 1
        out = Text(f"{len(self.jobs)} job{'s' if len(self.jobs) != 1 else ''}")
        if counts:
            out.append(": " + ", ".join(f"{n} {st}" for st, n in sorted(counts.items())))
        out.append(f"  │  sort {self.sort_key} {'▼' if self.descending else '▲'} (s, r)")
        if self.filter_query.strip():
            n = len(self.shown)
            out.append(
                f"  │  filter '{self.filter_query.strip()}': {n} job"
                f"{'s' if n != 1 else ''} (escape clears)",
                style="bold yellow",
            )
        else:
            out.append("  │  / filter", style="dim")
        return out

    def set_empty_text(self, text: str) -> None:
        """Say ``text`` when there is no job (kept until the view is there)."""
        self.empty_text = text
        if can_draw(self, self._composed):
            self.query_one("#jobs-empty", Static).update(text)

    def update_job(self, job: JobRecord) -> None:
        """One job changed (or appeared)."""
        self.jobs[job.id] = job
        self.update_jobs()

    def set_sort(self, key: JobSortKey, descending: bool | None = None) -> None:
        """Sort by ``key`` (:data:`console.jobs.rows.SORT_KEYS`); ``descending`` defaults
        to the column's usual direction."""
        self.sort_key = key
        self.descending = DEFAULT_DESCENDING[key] if descending is None else descending
        self._draw()

    def set_filter(self, query: str) -> None:
        """Show only the jobs matching ``query`` (:func:`console.jobs.rows.parse_job_query`);
        ``""`` shows all."""
        self.filter_query = query
        self._draw()

    def action_cycle_sort(self) -> None:
        """Sort by the next column: age, job, state, util, exit."""
        self.set_sort(SORT_KEYS[(SORT_KEYS.index(self.sort_key) + 1) % len(SORT_KEYS)])

    def action_reverse_sort(self) -> None:
        """Reverse the sort direction."""
        self.set_sort(self.sort_key, not self.descending)

    def action_open_filter(self) -> None:
        """Show the filter input and focus it."""
        box = self.query_one("#jobs-filter", Input)
        box.add_class("-open")
        box.focus()

    def action_clear_filter(self) -> None:
        """Clear and close the filter; without one, escape goes on to the app."""
        box = self.query_one("#jobs-filter", Input)
        if not box.has_class("-open") and not self.filter_query:
            raise SkipAction()
        box.value = ""
        box.remove_class("-open")
        self.set_filter("")
        self.query_one(DataTable).focus()

    @on(Input.Changed, "#jobs-filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.set_filter(event.value)

    @on(Input.Submitted, "#jobs-filter")
    def _filter_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        if not event.value.strip():
            self.query_one("#jobs-filter", Input).remove_class("-open")
        self.query_one(DataTable).focus()

    def _need(self) -> JobRecord | None:
        job = self.selected_job()
        if job is None:
            self.notify("no job selected", severity="warning")
        return job

    def action_logs(self) -> None:
        """Open the job's log panes."""
        job = self._need()
        if job is not None:
            self.gc.open_logs(job)

    def action_stop(self) -> None:
        """Confirm, then stop the job."""
        job = self._need()
        if job is not None:
            self.gc.confirm_stop(job)

    def action_describe(self) -> None:
        """Show the job's spec, containers and command lines."""
        job = self._need()
        if job is not None:
            self.gc.describe(job)

    def action_submit(self) -> None:
        """Ask for a spec file, show its plan, confirm, launch."""
        self.gc.ask_submit()

    def action_exec(self) -> None:
        """A shell in the job's container (the app suspends until it exits)."""
        job = self._need()
        if job is not None:
            self.gc.exec_shell(job)

    def action_stacks(self) -> None:
        """Every rank's Python stack of the running job, the odd ones out first."""
        job = self._need()
        if job is not None:
            self.gc.show_stacks(job)

    def action_remove(self) -> None:
        """Confirm (listing what is removed), then remove a finished job's containers; a
        running job is refused: stop it first."""
        job = self._need()
        if job is not None:
            self.gc.confirm_remove(job)

    def action_notebook(self) -> None:
        """Open the notebook job's JupyterLab: a tunnel (kept while the app runs) and its URL;
        on a training job, say what to do instead."""
        job = self._need()
        if job is not None:
            self.gc.open_notebook(job)

    def action_new_notebook(self) -> None:
        """Ask for host, GPUs and workdir, start a notebook and open it."""
        self.gc.ask_new_notebook()

    def action_reconcile(self) -> None:
        """Reconcile the jobs with the hosts now."""
        self.gc.refresh_jobs()
