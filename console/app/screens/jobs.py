"""The jobs view: the jobs of ``ps`` with state per node, age, GPUs, utilization, diagnosis.

Keys: enter/``l`` logs, ``S`` stop (confirm shows each ``docker stop``), ``d`` describe, ``n``
submit a spec (its dry-run plan is shown before confirming), ``x`` a shell in the job's
container, ``o`` open a notebook job's JupyterLab (a tunnel over SSH, its URL), ``N`` start a
new notebook, ``R`` reconcile now. The KIND column says ``train`` or ``notebook``. The screen
never calls the engine itself: it asks the app, whose workers post typed messages back.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, cast

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from console.app.lifecycle import can_draw
from console.app.widgets.status import StatusLine
from console.app.widgets.tables import cursor_key
from console.fleet.state import JobUsage
from console.jobs.rows import JobRow, job_row
from console.jobs.status import failure_lines
from console.jobs.store import JobRecord

if TYPE_CHECKING:
    from console.app.app import GpuConsoleApp

_STATE_STYLE = {"running": "green", "pending": "cyan", "succeeded": "bold green",
                "stopped": "yellow", "lost": "magenta", "removed": "dim", "unknown": "dim"}
COLUMNS = ("JOB", "KIND", "STATE", "NODES", "AGE", "GPUS", "UTIL", "EXIT", "REASON")


def _cell_state(state: str) -> Text:
    style = "bold red" if state.startswith("failed") else _STATE_STYLE.get(state, "")
    return Text(state, style=style)


def row_cells(r: JobRow) -> tuple[Text | str, ...]:
    """The table cells of one row; unknown values show as ``?``, values that do not apply
    (GPUs of a finished job) as ``-``."""
    return (
        r.job_id,
        Text(r.kind, style="bold cyan") if r.kind == "notebook" else r.kind,
        _cell_state(r.state),
        r.nodes,
        r.age,
        "-" if not r.active else "?" if r.gpus is None else str(r.gpus),
        "-" if not r.active else "?" if r.util_pct is None else f"{r.util_pct:.0f}%",
        "" if r.exit_code is None else str(r.exit_code),
        Text(r.reason, style="red") if r.reason else "",
    )


class JobsScreen(Screen[None]):
    """The jobs table (see the module docstring)."""

    BINDINGS = [
        Binding("enter,l", "logs", "Logs", id="jobs.logs"),
        Binding("S", "stop", "Stop", id="jobs.stop"),
        Binding("d", "describe", "Describe", id="jobs.describe"),
        Binding("n", "submit", "Submit", id="jobs.submit"),
        Binding("x", "exec", "Shell", id="jobs.exec"),
        Binding("o", "notebook", "Open notebook", show=False, id="jobs.notebook"),
        Binding("N", "new_notebook", "New notebook", show=False, id="jobs.new_notebook"),
        Binding("R", "reconcile", "Refresh", id="jobs.refresh"),
    ]
    DEFAULT_CSS = """
    JobsScreen DataTable { height: 1fr; }
    JobsScreen #jobs-empty { height: auto; padding: 1 2; color: $text-muted; }
    JobsScreen #jobs-detail { height: auto; max-height: 4; padding: 0 1; background: $boost; }
    """

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        super().__init__(id="jobs")
        self.clock = clock
        self.jobs: dict[str, JobRecord] = {}
        self.usage: Mapping[str, JobUsage] | None = None
        self._composed = False

    @property
    def gc(self) -> GpuConsoleApp:
        """The app (typed)."""
        return cast("GpuConsoleApp", self.app)

    def compose(self) -> ComposeResult:
        table: DataTable[Text | str] = DataTable(cursor_type="row", zebra_stripes=True,
                                                 id="jobs-table")
        table.add_columns(*COLUMNS)
        yield table
        yield Static("no jobs yet: press n to submit a spec, or run `gpuconsole submit`",
                     id="jobs-empty")
        yield Static(id="jobs-detail")
        yield StatusLine()
        yield Footer()

    def on_mount(self) -> None:
        self._composed = True
        self.query_one(DataTable).focus()
        self._draw()

    def on_screen_resume(self) -> None:
        self._draw()

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show_detail()

    def _show_detail(self) -> None:
        """The selected job in full under the table: nodes, diagnosis and its fix."""
        if not can_draw(self, self._composed):
            return
        job = self.selected_job()
        detail = self.query_one("#jobs-detail", Static)
        if job is None:
            detail.update("")
            return
        text = Text()
        text.append(job.id, style="bold")
        text.append(f"  {job.name}  " + " ".join(
            f"n{n.node_rank}@{n.host}:{n.state}"
            + (f"({n.exit_code})" if n.exit_code is not None else "") for n in job.nodes))
        if (job.kind == "notebook" and job.state in ("running", "pending")
                and not self.gc.readonly):
            # o and N stay out of the footer (it is full at 120 columns): said where they apply
            text.append("  o: open its JupyterLab, x: a shell in it", style="bold cyan")
        f = job.failure
        if f:
            first, *rest = failure_lines(f)
            text.append("\n" + first, style="red")
            for line in rest:
                text.append("\n" + line, style="yellow" if "fix:" in line else "dim")
        detail.update(text)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The app decides: ``--readonly`` hides stop, submit, exec and the notebooks."""
        return self.gc.check_action(action, parameters)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """Enter on a row (the table takes the key first): its logs."""
        event.stop()
        self.action_logs()

    def selected_job(self) -> JobRecord | None:
        """The job under the cursor, or ``None`` (also while the table is not there)."""
        if not can_draw(self, self._composed):
            return None
        key = cursor_key(self.query_one(DataTable))
        return self.jobs.get(key) if key is not None else None

    def update_jobs(self, jobs: list[JobRecord] | None = None,
                    usage: Mapping[str, JobUsage] | None = None) -> None:
        """Show ``jobs`` (newest first; ``None``: the ones shown, re-rendered) with the fleet's
        per-job GPU usage; the cursor stays on the same job. Kept until the table is there
        (shown on mount) and never drawn while the screen is being removed."""
        if jobs is not None:
            self.jobs = {j.id: j for j in jobs}
        if usage is not None:
            self.usage = usage
        self._draw()

    def _draw(self) -> None:
        if not can_draw(self, self._composed):
            return
        table = self.query_one(DataTable)
        current = self.selected_job()
        now = self.clock()
        table.clear()
        for j in sorted(self.jobs.values(), key=lambda j: -j.created_at):
            table.add_row(*row_cells(job_row(j, now, self.usage)), key=j.id)
        self.query_one("#jobs-empty").display = not self.jobs
        if current is not None and current.id in self.jobs:
            table.move_cursor(row=table.get_row_index(current.id))
        self._show_detail()

    def update_job(self, job: JobRecord) -> None:
        """One job changed (or appeared)."""
        self.jobs[job.id] = job
        self.update_jobs()

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
