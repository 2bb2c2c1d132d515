"""Helpers for the row tables of the jobs and alerts views."""

from __future__ import annotations

from typing import Any

from textual.widgets import DataTable
from textual.widgets.data_table import CellDoesNotExist

__all__ = ["cursor_key"]


def cursor_key(table: DataTable[Any]) -> str | None:
    """The key of the row under the cursor, or ``None`` (an empty table, a cursor off the
    rows while the table is rebuilt)."""
    if table.row_count == 0:
        return None
    try:
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key
    except CellDoesNotExist:
        return None
    return None if key.value is None else str(key.value)
