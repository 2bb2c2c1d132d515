"""The selected GPU's panel below the fleet table: its processes.

:class:`ProcessTable` lists the GPU's processes one per row (PID, job, node and rank,
container, user, GPU memory in MiB, command), as nvitop's process panel does. It does no
I/O: the fleet screen feeds it on each update and cursor move.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.widgets import DataTable

from console.app.widgets.tables import cursor_key
from console.fleet.rows import ProcessRow, num_text

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
        f" r{p.rank}" if p.rank is not None else "")
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
            self.add_column(Text(label, justify="right" if key in ("pid", "mem") else "left"),
                            key=key)

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

    def selected(self) -> ProcessRow | None:
        """The process under the cursor, or ``None`` (no rows)."""
        key = cursor_key(self)
        return self.processes.get(key) if key is not None else None
