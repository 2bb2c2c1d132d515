"""The fleet view, the console's default screen: every host and its GPUs in one table.

The app feeds it with :meth:`FleetScreen.update_fleet` (coalesced, about 2 Hz); the screen does
no I/O. Keys (binding ids in brackets): ``s`` next sort column [fleet.sort], ``r`` reverse
the sort [fleet.reverse], ``/`` filter [fleet.filter] (``free``, ``busy``, ``host:NAME``,
``job:ID``, ``model:TEXT`` or any text; escape clears it [fleet.clear_filter]), enter on a GPU
used by a gpuconsole job posts :class:`FleetScreen.JobSelected` [fleet.open_job].

Below the table: the cursor row's whole story (:func:`detail_text`, wrapped), then the
selected GPU's panel (``p`` shows or hides it [fleet.gpu_panel]): its history as a chart
(utilization, memory, power over the recorded history) and its processes, one per row
(``tab`` moves into that table; enter on a job's process opens the job). ``S`` [fleet.stop]
stops the job of the process under that table's cursor, with the jobs view's confirmation
(:class:`FleetScreen.StopJob`, the app asks); a process no gpuconsole job started is refused
with the reason (gpuconsole does not kill processes it did not start); ``--readonly`` hides it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import ClassVar

from rich.text import Text
from textual import on
from textual.actions import SkipAction
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.events import Resize
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Input

from console.app.lifecycle import can_draw, seen
from console.app.widgets.fleet import DetailPanel, FleetTable
from console.app.widgets.footer import FittedFooter
from console.app.widgets.gpupanel import HistoryChart, ProcessTable
from console.app.widgets.oneline import OneLine
from console.app.widgets.status import StatusLine
from console.fleet.rows import (
    SORT_KEYS,
    GpuRow,
    HostGroup,
    HostRow,
    ProcessRow,
    clock_text,
    filter_groups,
    fleet_rows,
    gpu_processes,
    host_detail_text,
    num_text,
    sort_groups,
    user_text,
    users_text,
)
from console.fleet.state import FleetState

#: Direction a sort column starts in: the host order ascending, readings highest first.
DEFAULT_DESCENDING = {"host": False, "util": True, "mem": True, "temp": True, "power": True}


def summary_text(
    groups: list[HostGroup], shown: list[HostGroup], sort_key: str, descending: bool, query: str
) -> Text:
    """The line above the table: hosts by status, GPUs busy/free, sort and filter."""
    hosts = [g.host for g in groups]
    gpus = [r for g in groups for r in g.gpus]
    out = Text()
    out.append(f"{len(hosts)} host{'s' if len(hosts) != 1 else ''}: ", style="bold")
    parts: list[tuple[str, str]] = []
    for status, style in (
        ("up", "green"),
        ("stale", "yellow"),
        ("down", "red"),
        ("connecting", "dim"),
    ):
        n = sum(1 for h in hosts if h.status == status and not (status == "up" and h.problem))
        if n:
            parts.append((f"{n} {status}", style))
    problems = sum(1 for h in hosts if h.status == "up" and h.problem)
    if problems:
        parts.append((f"{problems} driver problem{'s' if problems != 1 else ''}", "magenta"))
    for i, (word, style) in enumerate(parts):
        out.append(("" if i == 0 else ", ") + word, style=style)
    out.append("  │  ")
    out.append(f"{len(gpus)} GPU{'s' if len(gpus) != 1 else ''}: ", style="bold")
    out.append(f"{sum(1 for r in gpus if r.busy)} busy", style="cyan")
    out.append(", ")
    out.append(f"{sum(1 for r in gpus if r.free)} free", style="green")
    out.append(f"  │  sort {sort_key} {'▼' if descending else '▲'}")
    if query.strip():
        n = sum(len(g.gpus) for g in shown)
        out.append(
            f"  │  filter '{query.strip()}': {n} GPU{'s' if n != 1 else ''}", style="bold yellow"
        )
    return out


def detail_text(row: HostRow | GpuRow | None, bench: str | None = None) -> Text:
    """The panel below the table: the cursor row's whole story, wrapped to the panel's
    width, never cut to a column (the down or driver reason, every process with its full
    command, the Xid chain's root and its action, clocks, GPM, fan, ECC; ``bench``: the last
    bench's line, last)."""
    if row is None:
        return Text("")
    if isinstance(row, HostRow):
        detail = host_detail_text(row)
        text = Text(f"{row.name}: ", style="bold")
        text.append(row.status)
        if row.gpu_count is not None:
            text.append(f", {row.gpu_count} GPU(s)")
        if row.source is not None:
            text.append(f", via {row.source}", style="dim")
        if detail:
            text.append(f" | {detail}", style="red" if row.status == "down" else "magenta")
        return text
    text = Text(f"{row.host} GPU {row.index} ", style="bold")
    text.append(row.name or "?")
    if row.users is None:
        text.append(" | processes unknown", style="dim")
    elif not row.users:
        text.append(" | no processes", style="dim")
    for u in row.users or ():
        used = f" ({num_text(u.used_mib)} MiB)" if u.used_mib is not None else ""
        if u.job_id is not None:
            text.append(f" | job {user_text(u)}", style="bold")
            text.append(f" pids {','.join(str(p) for p in u.pids)}{used} (enter: open)")
        else:
            text.append(" | " + users_text((u,), command_limit=200) + used)
    if row.xid:  # the root of this GPU's Xid chain this boot, with NVIDIA's action
        text.append(f" | {row.xid}", style="bold red" if row.xid_severe else "yellow")
    if row.ecc_uncorrected:  # uncorrected ECC errors since the driver loaded
        text.append(f" | ECC {row.ecc_uncorrected:.0f} uncorrected", style="bold red")
    gpm = row.na("gpm")
    sm = clock_text(row.sm_clock_mhz, row.sm_clock_max_mhz, na=row.na("sm_clock_mhz"))
    mem = clock_text(row.mem_clock_mhz, row.mem_clock_max_mhz, na=row.na("mem_clock_mhz"))
    text.append(
        f" | {row.pstate or '?'} | SM {sm} | mem {mem}"
        f" | tensor {num_text(row.tensor_activity_pct, '%', na=gpm)}"
        f" dram {num_text(row.dram_bw_util_pct, '%', na=gpm)}"
        f" | fan {num_text(row.fan_pct, '%', na=row.na('fan_pct'))}",
        style="dim",
    )
    if bench:
        text.append(f" | {bench}", style="bold red" if ": slow: " in bench else "green")
    return text


#: The fleet view's footer keys, most important first: those left out when the width is short
#: (:class:`~console.app.widgets.footer.FittedFooter`) are in ``?``.
FLEET_FOOTER_KEEP = (
    "help",
    "quit",
    "select_cursor",
    "open_filter",
    "cycle_sort",
    "toggle_gpu_panel",
    "stop",
    "reverse_sort",
    "show('jobs')",
    "show('alerts')",
    "show('fleet')",
)


class FleetScreen(Screen[None]):
    """Hosts and GPUs in one table (see the module docstring).

    Args:
        clock: the clock of the state's receive times (``time.monotonic`` for a live
            monitor), for a stale host's age; tests inject a fixed one.
        history_points: utilization points kept per GPU row (default: ``history_width``,
            what the sparkline shows).
        history_width: sparkline width in cells.
        name, id, classes: as for any screen (``id`` defaults to ``fleet``).

    Attributes:
        sort_key: one of :data:`console.fleet.rows.SORT_KEYS`.
        descending: the sort direction.
        filter_query: the filter query (``""``: no filter).
        groups: the last update's rows, unsorted and unfiltered.
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("s", "cycle_sort", "Sort", id="fleet.sort"),
        Binding("r", "reverse_sort", "Reverse", id="fleet.reverse"),
        Binding("slash", "open_filter", "Filter", id="fleet.filter"),
        Binding("escape", "clear_filter", "Clear filter", id="fleet.clear_filter", show=False),
        Binding("p", "toggle_gpu_panel", "GPU panel", id="fleet.gpu_panel"),
        Binding("S", "stop", "Stop job", id="fleet.stop"),
    ]

    DEFAULT_CSS = """
    FleetScreen #fleet-summary { height: 1; padding: 0 1; }
    FleetScreen #fleet-filter { height: 3; display: none; }
    FleetScreen #fleet-filter.-open { display: block; }
    FleetScreen #fleet-detail { height: auto; max-height: 8; padding: 0 1;
                                background: $boost; }
    FleetScreen #fleet-gpu { height: 12; }
    FleetScreen #fleet-gpu.-hidden { display: none; }
    FleetScreen #fleet-chart { border: round $panel-lighten-2; padding: 0 1 0 0; width: 2fr; }
    FleetScreen #fleet-procs { border: round $panel-lighten-2; width: 3fr; }
    FleetScreen #fleet-procs:focus { border: round $accent; }
    """

    #: Height (rows, borders included) of the GPU panel: at least 40 terminal rows, else
    #: the smaller one (2 chart rows per series instead of 3).
    GPU_PANEL_ROWS = (12, 9)

    class StopJob(Message):
        """Stop this gpuconsole job (``S`` on one of its processes): the app confirms first,
        showing each ``docker stop``, as the jobs view's ``S`` does.

        Attributes:
            job_id: the job.
            pid: the process the stop was asked on (host PID).
        """

        def __init__(self, job_id: str, pid: int) -> None:
            super().__init__()
            self.job_id = job_id
            self.pid = pid

    class JobSelected(Message):
        """A GPU row used by a gpuconsole job was selected (enter): open that job.

        Attributes:
            job_id: the job (its first one when several share the GPU).
            host: the GPU's host.
            gpu_index: the GPU's index.
        """

        def __init__(self, job_id: str, host: str, gpu_index: int) -> None:
            super().__init__()
            self.job_id = job_id
            self.host = host
            self.gpu_index = gpu_index

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        history_points: int | None = None,
        history_width: int = 8,
        name: str | None = None,
        id: str | None = "fleet",
        classes: str | None = None,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.clock = clock
        self.history_points = history_width if history_points is None else history_points
        self.history_width = history_width
        self.sort_key = "host"
        self.descending = False
        self.filter_query = ""
        self.groups: list[HostGroup] = []
        self.shown: list[HostGroup] = []
        self.state: FleetState | None = None
        #: (host, GPU index) -> the last bench's line (``gpuconsole bench``), shown in the
        #: cursor GPU's detail
        self.bench: dict[tuple[str, int], str] = {}
        self._ready = False
        self._stale = False  # a state arrived while another screen was shown

    def compose(self) -> ComposeResult:
        yield OneLine(id="fleet-summary")
        yield Input(
            placeholder="filter: free  busy  host:NAME  job:ID  model:TEXT  or any text"
            "  (enter: keep, escape: clear)",
            id="fleet-filter",
        )
        yield FleetTable(history_width=self.history_width, id="fleet-table")
        yield DetailPanel(id="fleet-detail")
        with Horizontal(id="fleet-gpu"):
            yield HistoryChart(id="fleet-chart")
            yield ProcessTable(id="fleet-procs")
        yield StatusLine()
        yield FittedFooter(keep=FLEET_FOOTER_KEEP)

    def on_mount(self) -> None:
        self._ready = True  # is_mounted turns true only after this handler
        self.table.focus()
        self._render_rows()

    @property
    def table(self) -> FleetTable:
        """The fleet table widget."""
        return self.query_one(FleetTable)

    @property
    def processes(self) -> ProcessTable:
        """The selected GPU's process table."""
        return self.query_one(ProcessTable)

    @property
    def chart(self) -> HistoryChart:
        """The selected GPU's history chart."""
        return self.query_one(HistoryChart)

    @property
    def filter_input(self) -> Input:
        """The filter input (hidden unless open or a filter is set)."""
        return self.query_one("#fleet-filter", Input)

    # -- data ------------------------------------------------------------------------------

    def update_fleet(self, state: FleetState) -> None:
        """Show the fleet's current state (sorted and filtered as set); no I/O.

        The cursor stays on the same host/GPU row when it is still shown.
        """
        self.state = state
        if self._ready and not seen(self):
            # under another screen: drawn when it is shown again (a hidden screen's repaint
            # would make Textual repaint the whole screen on top of it)
            self._stale = True
            return
        self.groups = fleet_rows(state, now=self.clock(), history_points=self.history_points)
        self._render_rows()

    def set_bench(self, lines: dict[tuple[str, int], str]) -> None:
        """Keep the last bench's line of each GPU (:meth:`console.service.Service.bench_lines`)
        for the detail panel."""
        self.bench = dict(lines)
        self._show_detail()

    def on_screen_resume(self) -> None:
        if self._stale and self.state is not None:
            self._stale = False
            self.update_fleet(self.state)

    def _render_rows(self) -> None:
        if not can_draw(self, self._ready):  # kept in self.groups, drawn on mount
            return
        self.shown = sort_groups(
            filter_groups(self.groups, self.filter_query), self.sort_key, self.descending
        )
        table = self.table
        table.set_sort_marker(self.sort_key, self.descending)
        table.show(self.shown)
        self.query_one("#fleet-summary", OneLine).show(
            summary_text(self.groups, self.shown, self.sort_key, self.descending, self.filter_query)
        )
        self._show_detail()

    def _show_detail(self) -> None:
        if not can_draw(self, self._ready):
            return
        row = self.table.row_data()
        bench = self.bench.get((row.host, row.index)) if isinstance(row, GpuRow) else None
        self.query_one("#fleet-detail", DetailPanel).show(detail_text(row, bench))
        self._show_gpu_panel(row if isinstance(row, GpuRow) else None)

    def _show_gpu_panel(self, row: GpuRow | None) -> None:
        """The chart and process table of the cursor's GPU (a hint on a host row)."""
        chart, procs = self.chart, self.processes
        view = self.state.hosts.get(row.host) if row is not None and self.state else None
        if row is None or view is None or self.state is None:
            chart.show(None)
            procs.show(())
            chart.border_title = "history"
            procs.border_title = "processes"
            return
        points = view.history.get(row.index)
        chart.show(
            list(points or ()), mem_total_mib=row.mem_total_mib, power_limit_w=row.power_limit_w
        )
        chart.border_title = f"{row.host} GPU {row.index} history"
        listed = gpu_processes(self.state, row.host, row.index)
        procs.show(listed)
        if listed is None:
            procs.border_title = "processes unknown"
        else:
            known = [p.used_mib for p in listed if p.used_mib is not None]
            mem = f", {num_text(sum(known))} MiB" if known else ""
            procs.border_title = f"{len(listed)} process{'es' if len(listed) != 1 else ''}{mem}"

    def on_resize(self, event: Resize) -> None:
        """The GPU panel's height for the terminal's: smaller below 40 rows."""
        big, small = self.GPU_PANEL_ROWS
        self.query_one("#fleet-gpu").styles.height = big if event.size.height >= 40 else small

    def set_sort(self, key: str, descending: bool | None = None) -> None:
        """Sort by ``key`` (see :data:`SORT_KEYS`); ``descending`` defaults to the column's
        usual direction (readings highest first).

        Raises:
            ValueError: an unknown key.
        """
        if key not in SORT_KEYS:
            raise ValueError(f"unknown sort key {key!r}; one of {', '.join(SORT_KEYS)}")
        self.sort_key = key
        self.descending = DEFAULT_DESCENDING[key] if descending is None else descending
        self._render_rows()

    def set_filter(self, query: str) -> None:
        """Filter the rows (see :func:`console.fleet.rows.parse_query`); ``""`` clears."""
        self.filter_query = query
        self._render_rows()

    # -- actions ---------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The app decides: ``--readonly`` hides the stop."""
        return self.app.check_action(action, parameters)

    def action_toggle_gpu_panel(self) -> None:
        """Show or hide the selected GPU's chart and process table."""
        panel = self.query_one("#fleet-gpu")
        panel.toggle_class("-hidden")
        if panel.has_class("-hidden") and self.processes.has_focus:
            self.table.focus()

    def stop_target(self) -> tuple[GpuRow, ProcessRow] | str:
        """The process ``S`` acts on (the process table's cursor row), or why there is none."""
        row = self.table.row_data()
        if not isinstance(row, GpuRow):
            return "select a GPU row: S stops the job of one of its processes"
        proc = self.processes.selected()
        if proc is None and self.processes.unknown:
            return f"the processes of {row.host} are unknown (its process list is unreadable)"
        if proc is None:
            return f"no process on {row.host} GPU {row.index}"
        return row, proc

    def action_stop(self) -> None:
        """Stop the job of the process under the process table's cursor (the app confirms);
        refuse a process that no gpuconsole job started, with the reason."""
        target = self.stop_target()
        if isinstance(target, str):
            self.notify(target, severity="warning")
            return
        row, proc = target
        if proc.job_id is None:
            who = ": ".join(x for x in (proc.user, proc.command) if x)
            self.notify(
                f"pid {proc.pid}{f' ({who[:80]})' if who else ''} on {row.host} GPU "
                f"{row.index} is not a process of a gpuconsole job: gpuconsole does "
                "not kill processes it did not start (stop it on the host, as its "
                "owner)",
                title="not stopped",
                severity="warning",
                timeout=10,
            )
            return
        self.post_message(self.StopJob(proc.job_id, proc.pid))

    def action_cycle_sort(self) -> None:
        """Sort by the next column: host, util, mem, temp, power."""
        self.set_sort(SORT_KEYS[(SORT_KEYS.index(self.sort_key) + 1) % len(SORT_KEYS)])

    def action_reverse_sort(self) -> None:
        """Reverse the sort direction."""
        self.set_sort(self.sort_key, not self.descending)

    def action_open_filter(self) -> None:
        """Show the filter input and focus it."""
        box = self.filter_input
        box.add_class("-open")
        box.focus()

    def action_clear_filter(self) -> None:
        """Clear and close the filter; without one, escape goes on to the app."""
        box = self.filter_input
        if not box.has_class("-open") and not self.filter_query:
            raise SkipAction()
        box.value = ""
        box.remove_class("-open")
        self.set_filter("")
        self.table.focus()

    @on(Input.Changed, "#fleet-filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.set_filter(event.value)

    @on(Input.Submitted, "#fleet-filter")
    def _filter_submitted(self, event: Input.Submitted) -> None:
        # keep the filter (and the input showing it) while it is set; back to the table
        if not event.value.strip():
            self.filter_input.remove_class("-open")
        self.table.focus()

    @on(DataTable.RowHighlighted, "#fleet-table")
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show_detail()

    @on(DataTable.RowSelected, "#fleet-procs")
    def _process_selected(self, event: DataTable.RowSelected) -> None:
        row = self.table.row_data()
        proc = self.processes.processes.get(str(event.row_key.value))
        if isinstance(row, GpuRow) and proc is not None and proc.job_id is not None:
            self.post_message(self.JobSelected(proc.job_id, row.host, row.index))
        elif proc is not None:
            self.notify(
                f"pid {proc.pid} is not a process of a gpuconsole job", severity="information"
            )

    @on(DataTable.RowSelected, "#fleet-table")
    def _selected(self, event: DataTable.RowSelected) -> None:
        row = self.table.row_data(str(event.row_key.value))
        if isinstance(row, GpuRow) and row.job_ids:
            self.post_message(self.JobSelected(row.job_ids[0], row.host, row.index))
        elif isinstance(row, GpuRow):
            self.notify("no gpuconsole job uses this GPU", severity="information")
