"""Plain-text tables of the CLI's listings (``ps``, ``top``/``gpus``, ``alerts``): each column
as wide as its widest cell (or a minimum), cells padded with spaces, no trailing spaces.

Standard library only (``ps`` and ``alerts`` import it at start-up). Widths are ``len()`` of
the cells, i.e. one column per code point: the listings' cells are ASCII but for names a user
chose.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence


def text_table(
    rows: Sequence[Sequence[str]],
    *,
    right: Collection[int] = (),
    min_widths: Sequence[int] = (),
    sep: str | Sequence[str] = "  ",
) -> list[str]:
    """The lines of a table, the header being ``rows[0]`` when there is one.

    Args:
        rows: the cells, row by row; every row has the same number of cells.
        right: indices of the columns aligned right (numbers); the others align left.
        min_widths: the narrowest each column may be, from the first (columns past its
            end: 0). A cell wider than its column's minimum widens the column.
        sep: the text between two columns, or one per gap (``len(rows[0]) - 1`` of them).

    Returns:
        One line per row, without a newline; the last column is not padded and no line
        ends in a space.
    """
    if not rows:
        return []
    n = len(rows[0])
    gaps = [sep] * (n - 1) if isinstance(sep, str) else list(sep)
    if len(gaps) != n - 1:
        raise ValueError(f"text_table: {len(gaps)} separators for {n} columns")
    widths = [
        max([len(r[i]) for r in rows] + [min_widths[i] if i < len(min_widths) else 0])
        for i in range(n)
    ]
    out = []
    for r in rows:
        parts = []
        for i, (cell, w) in enumerate(zip(r, widths)):
            parts.append(cell.rjust(w) if i in right else cell.ljust(w))
            if i < n - 1:
                parts.append(gaps[i])
        out.append("".join(parts).rstrip())
    return out
