"""The fleet table: a host row followed by its GPU rows, cells built from console/fleet/rows.py.

:class:`FleetTable` is a :class:`~textual.widgets.DataTable` (row cursor) whose rows are keyed
``host:<name>`` and ``gpu:<host>:<index>``. :meth:`FleetTable.show` replaces its content with
new host groups and keeps the cursor on the same key; it does no I/O. Unknown readings show
``?``, never 0. The last column, XID, shows each GPU's latest Xid chain decoded with NVIDIA's
action (``console/fleet/rows.py`` ``GpuRow.xid``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rich.text import Text
from textual.binding import Binding, BindingType
from textual.widgets import DataTable, Static
from textual.widgets.data_table import CellKey, ColumnKey, RowKey

from console.fleet.rows import (
    GpuRow,
    HostGroup,
    HostRow,
    host_detail_text,
    mem_text,
    num_text,
    power_text,
    sparkline,
    throttle_severity,
    throttle_text,
    users_text,
    util_text,
)

#: ``(column key, header)`` in display order.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("name", "HOST/GPU"),
    ("state", "STATE"),
    ("util", "UTIL/CPU"),
    ("mem", "MEMORY"),
    ("sm", "SM"),
    ("temp", "TEMP"),
    ("power", "POWER"),
    ("throttle", "THROTTLE"),
    ("hist", "HISTORY"),
    ("users", "USED BY"),
    ("xid", "XID"),
)

#: Columns sized to their content (the others have fixed widths).
AUTO_WIDTH = frozenset({"name", "state", "power", "throttle", "users", "xid"})

#: Sort key (rows.SORT_KEYS) -> the column whose header carries the sort arrow.
SORT_COLUMN = {"host": "name", "util": "util", "mem": "mem", "temp": "temp", "power": "power"}

#: A host's sample state when not ``ok`` -> the short word in its STATE cell.
PROBLEM_WORDS = {
    "no_driver": "no drv",
    "nvml_unavailable": "no nvml",
    "driver_unreachable": "drv down",
    "version_mismatch": "drv ver",
    "no_gpus": "no gpus",
    "gpu_lost": "gpu lost",
    "error": "error",
}

#: Bar widths (cells) in the UTIL and MEMORY columns: the numbers follow the bars.
UTIL_BAR = 5
MEM_BAR = 3

STATUS_STYLE = {"up": "green", "stale": "yellow", "down": "bold red", "connecting": "dim"}
PROBLEM_STYLE = "bold magenta"

RowData = HostRow | GpuRow


def _right(text: str, style: str = "") -> Text:
    return Text(text, style=style, justify="right")


def _level_style(frac: float | None, warn: float, crit: float) -> str:
    """``green`` below ``warn``, ``yellow`` below ``crit``, ``red`` above; dim if unknown."""
    if frac is None:
        return "dim"
    return "red" if frac >= crit else "yellow" if frac >= warn else "green"


#: ``rows.throttle_severity`` -> the THROTTLE cell's style.
THROTTLE_STYLE = {"unknown": "dim", "none": "dim", "limit": "yellow", "slowdown": "bold red"}


def _throttle_style(reasons: Sequence[str] | None) -> str:
    return THROTTLE_STYLE[throttle_severity(reasons)]


def host_cells(h: HostRow, n_gpus: int, info_limit: int = 72) -> list[Text]:
    """The cells of a host row (one per :data:`COLUMNS` entry).

    STATE is the status (up green, stale yellow with its age, down red, connecting dim) or,
    on a streaming host whose driver reports a problem or that lost GPUs, that problem in
    magenta. UTIL/CPU
    holds the host CPU, MEMORY the host memory, USED BY what is wrong (down reason, driver
    problem detail, missing GPUs; cut to ``info_limit`` characters) or the GPU count.
    """
    if h.status == "up" and h.problem is not None:
        state = Text(PROBLEM_WORDS.get(h.problem, h.problem), style=PROBLEM_STYLE)
    elif h.status == "up" and h.missing_gpus:
        state = Text("gpu lost", style=PROBLEM_STYLE)  # fewer GPUs than seen before
    elif h.status == "stale" and h.age_s is not None:
        state = Text(f"stale {h.age_s:.0f}s", style=STATUS_STYLE["stale"])
    else:
        state = Text(h.status, style=STATUS_STYLE[h.status])
    detail = host_detail_text(h)
    if len(detail) > info_limit:
        detail = detail[: info_limit - 1] + "…"  # the whole text is in the detail line
    if detail:
        info = Text(
            detail,
            style="red"
            if h.status == "down"
            else PROBLEM_STYLE
            if h.problem or h.missing_gpus
            else "yellow",
        )
    elif h.gpu_count is not None:
        info = Text(
            f"{h.gpu_count} GPU{'s' if h.gpu_count != 1 else ''}"
            + (f", {n_gpus} shown" if n_gpus != h.gpu_count else ""),
            style="dim",
        )
    else:
        info = Text("")
    has_readings = h.status != "down" and h.status != "connecting"
    cpu = _right(f"cpu {num_text(h.cpu_pct, '%'):>4}", "dim") if has_readings else Text("")
    mem = (
        _right(mem_text(h.mem_used_mib, h.mem_total_mib, width=0).strip(), "dim")
        if has_readings
        else Text("")
    )
    xid = (
        Text(f"{len(h.xid_notes)} GPU(s) off the table with Xids", style=PROBLEM_STYLE)
        if h.xid_notes
        else Text("")
    )
    return [
        Text(h.name, style="bold"),
        state,
        cpu,
        mem,
        Text(""),
        Text(""),
        Text(""),
        Text(""),
        Text(""),
        info,
        xid,
    ]


def gpu_cells(r: GpuRow, *, history_width: int, users_limit: int) -> list[Text]:
    """The cells of a GPU row (one per :data:`COLUMNS` entry): bars with numbers for
    utilization and memory, ``?`` for unknown readings, ``n/a`` for readings the GPU does
    not have (NVML_ERROR_NOT_SUPPORTED). XID is the root of the GPU's Xid
    chain with NVIDIA's action (``Xid 62 micro-controller halt: reset GPU``), red when the GPU
    must leave scheduling (then STATE says ``xid 62`` too)."""
    model = (r.name or "?").removeprefix("NVIDIA ")
    if r.lost:
        state = Text("lost", style="bold red")
    elif r.xid_severe and r.xid_code is not None:
        state = Text(f"xid {r.xid_code}", style="bold red")
    elif r.users is None:
        state = Text("?", style="dim")
    elif r.users:
        state = Text("busy", style="cyan")
    else:
        state = Text("free", style="green" if r.free else "dim")
    util_frac = r.util_pct / 100.0 if r.util_pct is not None else None
    mem_frac = (
        r.mem_used_mib / r.mem_total_mib if r.mem_used_mib is not None and r.mem_total_mib else None
    )
    temp_style = (
        "dim"
        if r.temp_c is None
        else "bold red"
        if r.temp_c >= 85
        else "yellow"
        if r.temp_c >= 75
        else ""
    )
    users = users_text(r.users, command_limit=users_limit)
    return [
        Text(f" {r.index:>2} {model}"),
        state,
        _right(util_text(r.util_pct, UTIL_BAR), "green" if util_frac is not None else "dim"),
        _right(
            mem_text(r.mem_used_mib, r.mem_total_mib, MEM_BAR), _level_style(mem_frac, 0.8, 0.95)
        ),
        _right(
            num_text(r.sm_activity_pct, "%", na=r.na("gpm")),
            "" if r.sm_activity_pct is not None else "dim",
        ),
        _right(num_text(r.temp_c, "C", na=r.na("temp_c")), temp_style),
        _right(power_text(r.power_w, r.power_limit_w, na=r.na("power_w"))),
        Text(throttle_text(r.throttle_reasons), style=_throttle_style(r.throttle_reasons)),
        Text(sparkline(r.history, history_width), style="cyan"),
        Text(users, style="bold" if r.job_ids else "dim" if users in ("-", "?") else ""),
        Text(r.xid, style="bold red" if r.xid_severe else "yellow")
        if r.xid
        else Text("-", style="dim"),
    ]


class FleetTable(DataTable[Text]):
    """The fleet as one table: each host row followed by its GPU rows.

    Args:
        history_width: cells of the utilization sparkline (most recent points).
        users_limit: characters of a foreign process's command in USED BY.
        id: the widget's DOM id.
        classes: CSS classes.

    ``enter`` (binding id ``fleet.open_job``) posts ``DataTable.RowSelected`` for the cursor
    row; the fleet screen turns a GPU row used by a job into ``FleetScreen.JobSelected``.
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "select_cursor", "Open job", id="fleet.open_job"),
    ]

    DEFAULT_CSS = """
    FleetTable { height: 1fr; }
    """

    def __init__(
        self,
        *,
        history_width: int = 8,
        users_limit: int = 24,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, id=id, classes=classes)
        self.history_width = history_width
        self.users_limit = users_limit
        #: row key -> the row it shows, in display order
        self.rows_by_key: dict[str, RowData] = {}
        self._order: list[str] = []
        self._pending: list[HostGroup] | None = None
        self._sort_marker: tuple[str, bool] = ("host", False)

    def on_mount(self) -> None:
        """Add the columns, then show what arrived before mounting."""
        for key, label in COLUMNS:
            width = {
                "util": 5 + UTIL_BAR,
                "mem": 17 + MEM_BAR,
                "sm": 4,
                "temp": 4,
                "hist": self.history_width,
            }.get(key)
            self.add_column(
                Text(
                    label,
                    justify="right" if key in ("util", "mem", "sm", "temp", "power") else "left",
                ),
                key=key,
                width=width,
            )
        self._label_headers()
        if self._pending is not None:
            groups, self._pending = self._pending, None
            self.show(groups)

    def set_sort_marker(self, key: str, descending: bool) -> None:
        """Mark the sorted column's header with ``▲`` (ascending) or ``▼`` (descending)."""
        self._sort_marker = (key, descending)
        if self.columns:
            self._label_headers()

    def _label_headers(self) -> None:
        key, desc = self._sort_marker
        marked = SORT_COLUMN.get(key)
        for col_key, label in COLUMNS:
            column = self.columns.get(ColumnKey(col_key))
            if column is None:
                continue
            text = label + ((" ▼" if desc else " ▲") if col_key == marked else "")
            column.label = Text(text, justify=column.label.justify)
        self._require_update_dimensions = True
        self.refresh()

    @property
    def cursor_key(self) -> str | None:
        """The key of the row under the cursor (``host:NAME`` / ``gpu:HOST:INDEX``)."""
        if not self._order or not 0 <= self.cursor_row < len(self._order):
            return None
        return self._order[self.cursor_row]

    def row_data(self, key: str | None = None) -> RowData | None:
        """The row shown at ``key`` (default: the cursor row), or ``None``."""
        key = self.cursor_key if key is None else key
        return self.rows_by_key.get(key) if key is not None else None

    def move_to_key(self, key: str) -> bool:
        """Put the cursor on the row with ``key``; ``False`` if no such row is shown."""
        try:
            index = self._order.index(key)
        except ValueError:
            return False
        self.move_cursor(row=index)
        return True

    def _cells(self, row: RowData, n_gpus: int) -> list[Text]:
        if isinstance(row, HostRow):
            return host_cells(row, n_gpus)
        return gpu_cells(row, history_width=self.history_width, users_limit=self.users_limit)

    def show(self, groups: Sequence[HostGroup]) -> None:
        """Show these host groups (already sorted and filtered), keeping the cursor on the
        same row key when it is still shown (else on its host's row, else on the same line,
        clamped).

        Only changed cells are rewritten when the rows and their order did not change;
        otherwise the table is rebuilt and the scroll position kept.
        """
        if not self.columns:
            self._pending = list(groups)
            return
        rows: list[tuple[str, RowData, list[Text]]] = []
        for g in groups:
            rows.append((g.host.key, g.host, self._cells(g.host, len(g.gpus))))
            rows.extend((r.key, r, self._cells(r, 0)) for r in g.gpus)
        order = [k for k, _, _ in rows]
        col_keys = [k for k, _ in COLUMNS]
        if order == self._order:
            # Same rows in the same order: write the changed cells, then refresh once.
            # DataTable.update_cell refreshes the widget per cell (a fleet of 64 x 8 GPUs
            # changes thousands of cells per update), so this does what it does in bulk:
            # the data, the cells whose column widths may change, one update count.
            changed = False
            for key, _, cells in rows:
                row_key = RowKey(key)
                data = self._data[row_key]
                for col, new_cell in zip(col_keys, cells):
                    col_key = ColumnKey(col)
                    if data.get(col_key) != new_cell:
                        data[col_key] = new_cell
                        changed = True
                        if col in AUTO_WIDTH:
                            self._updated_cells.add(CellKey(row_key, col_key))
                            self._require_update_dimensions = True
            self.rows_by_key = {k: r for k, r, _ in rows}
            if changed:
                self._update_count += 1
                self.refresh()
            return
        keep_key, keep_line = self.cursor_key, self.cursor_row
        was = self.rows_by_key.get(keep_key) if keep_key is not None else None
        host_key = f"host:{was.host}" if isinstance(was, GpuRow) else None
        scroll_x, scroll_y = self.scroll_x, self.scroll_y
        self.clear()
        for key, _, cells in rows:
            self.add_row(*cells, key=key)
        self._order = order
        self.rows_by_key = {k: r for k, r, _ in rows}
        if not order:
            return
        if keep_key in order:
            target = order.index(keep_key)
        elif host_key in order:  # a GPU row that left: its host's row
            target = order.index(host_key)
        else:
            target = min(keep_line, len(order) - 1)
        self.scroll_to(scroll_x, scroll_y, animate=False, immediate=True)
        self.move_cursor(row=max(target, 0), animate=False)


class DetailPanel(Static):
    """The cursor row's whole story below the table, wrapped to the panel's width (a cell of
    the table is cut to its column; this panel never cuts): its height follows the text,
    up to the screen's ``max-height``.

    :meth:`show` repaints only when the text differs, and lays the screen out again only
    when the wrapped text takes another number of rows (the fleet screen calls it on each
    update and cursor move: a held arrow key must not cost a layout pass per row).
    """

    DEFAULT_CSS = """
    DetailPanel { height: auto; }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__("", id=id, classes=classes)
        self._shown: tuple[str, tuple[object, ...]] = ("", ())
        self._rows = (0, -1)  # (width, wrapped rows) of the text shown; -1: not measured

    def show(self, text: Text) -> None:
        """Show ``text`` (wrapped), if it differs from what is shown."""
        key = (text.plain, tuple(text.spans))
        if key == self._shown:
            return
        self._shown = key
        width = self.content_size.width
        rows = (width, len(text.wrap(self.app.console, width)) if width > 0 else -1)
        self.update(text, layout=rows[1] < 0 or rows != self._rows)  # a resize: measured again
        self._rows = rows

    def lines(self) -> list[str]:
        """The panel's rows as shown (plain text, wrapped, without the padding)."""
        return [self.render_line(y).text.strip() for y in range(self.size.height)]
