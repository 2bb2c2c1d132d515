"""The selected GPU's panel below the fleet table: its history as a chart, its processes.

:class:`HistoryChart` draws utilization, memory and power over the history the fleet state
keeps (``console/fleet/chart.py``: block bars, scales with units, the time span);
:class:`ProcessTable` lists the GPU's processes one per row (PID, job, node and rank,
container, user, GPU memory in MiB, command), as nvitop's process panel does. Neither does
I/O: the fleet screen feeds them on each update and cursor move.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.widget import Widget
from textual.widgets import DataTable

from console.app.widgets.tables import cursor_key
from console.fleet.chart import GUTTER, SeriesKey, history_chart
from console.fleet.rows import ProcessRow, num_text
from console.fleet.state import GpuPoint

#: Series colours (the fleet table's: utilization green, memory as its bar, power plain).
SERIES_STYLE: dict[SeriesKey, str] = {"util": "green", "mem": "cyan", "power": "yellow"}


class HistoryChart(Widget):
    """A GPU's utilization (%), memory (MiB) and power (W) over its recorded history.

    Each series gets a third of the height (the last row is the time axis); the chart
    redraws at its current size. :meth:`show` sets what it draws; ``None`` shows ``hint``.
    """

    DEFAULT_CSS = """
    HistoryChart { height: 1fr; width: 1fr; }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._points: tuple[GpuPoint, ...] | None = None
        self._mem_total: float | None = None
        self._power_limit: float | None = None
        self.hint = "select a GPU row: its history shows here"

    def show(
        self,
        points: Sequence[GpuPoint] | None,
        *,
        mem_total_mib: float | None = None,
        power_limit_w: float | None = None,
    ) -> None:
        """Draw these points (oldest first), or the hint for ``None``; repaints only on a
        change."""
        new = None if points is None else tuple(points)
        if (new, mem_total_mib, power_limit_w) == (
            self._points,
            self._mem_total,
            self._power_limit,
        ):
            return
        self._points, self._mem_total, self._power_limit = new, mem_total_mib, power_limit_w
        self.refresh()

    def render(self) -> Text:
        """The chart at the widget's size (see :func:`console.fleet.chart.history_chart`)."""
        if self._points is None:
            return Text(self.hint, style="dim")
        height = max(self.size.height, 2)
        width = max(self.size.width - GUTTER - 1, 8)
        rows = history_chart(
            self._points,
            width=width,
            height=max((height - 1) // 3, 1),
            mem_total_mib=self._mem_total,
            power_limit_w=self._power_limit,
        )
        text = Text(no_wrap=True, overflow="crop")
        for i, row in enumerate(rows):
            if i:
                text.append("\n")
            text.append(row.gutter, style="dim" if row.series is None else "")
            text.append(row.plot, style=SERIES_STYLE[row.series] if row.series else "dim")
        return text


#: ``(column key, header)`` of the process table, in display order.
PROCESS_COLUMNS: tuple[tuple[str, str], ...] = (
    ("pid", "PID"),
    ("job", "JOB"),
    ("rank", "NODE/RANK"),
    ("container", "CONTAINER"),
    ("user", "USER"),
    ("mem", "GPU MEM"),
    ("command", "COMMAND"),
)


def process_cells(p: ProcessRow) -> list[Text]:
    """One process's cells (one per :data:`PROCESS_COLUMNS` entry); ``?`` unknown, ``-``
    not applicable (a foreign process has no job, rank or node)."""
    node = (f"n{p.node_rank}" if p.node_rank is not None else "") + (
        f" r{p.rank}" if p.rank is not None else ""
    )
    return [
        Text(str(p.pid), justify="right"),
        Text(p.job_id, style="bold") if p.job_id else Text("-", style="dim"),
        Text(node.strip() or ("?" if p.job_id else "-"), style="" if p.job_id else "dim"),
        Text(p.container or "-", style="" if p.container else "dim"),
        Text(p.user or "?", style="" if p.user else "dim"),
        Text(f"{num_text(p.used_mib)} MiB", justify="right"),
        Text(p.command or "?", style="" if p.command else "dim"),
    ]


class ProcessTable(DataTable[Text]):
    """The selected GPU's processes, one row each, keyed ``pid:<pid>``; the cursor stays on
    the same PID across updates. ``enter`` on a job's process opens the job (as enter on the
    GPU row does: DataTable's own enter); the fleet screen's ``S`` stops the job of the
    process under the cursor."""

    DEFAULT_CSS = """
    ProcessTable { height: 1fr; width: 1fr; }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, id=id, classes=classes)
        #: row key -> the process it shows, in display order
        self.processes: dict[str, ProcessRow] = {}
        self._shown: tuple[ProcessRow, ...] | None = None

    def on_mount(self) -> None:
        """Add the columns."""
        for key, label in PROCESS_COLUMNS:
            self.add_column(
                Text(label, justify="right" if key in ("pid", "mem") else "left"), key=key
            )

    def show(self, processes: Sequence[ProcessRow] | None) -> None:
        """Show these processes (``None``: the list is unknown, no rows), keeping the cursor
        on the same PID when it is still listed."""
        new = None if processes is None else tuple(processes)
        if new == self._shown and self.row_count == len(new or ()):
            return
        self._shown = new
        keep = cursor_key(self)
        self.clear()
        self.processes = {p.key: p for p in new or ()}
        for p in new or ():
            self.add_row(*process_cells(p), key=p.key)
        if keep in self.processes:
            self.move_cursor(row=list(self.processes).index(keep), animate=False)

    @property
    def unknown(self) -> bool:
        """Whether the process list shown is unknown (the host could not read it)."""
        return self._shown is None

    def selected(self) -> ProcessRow | None:
        """The process under the cursor, or ``None`` (no rows)."""
        key = cursor_key(self)
        return self.processes.get(key) if key is not None else None
