"""A GPU's recorded history as a block chart: utilization, memory and power over time.

Pure (no textual, no I/O): :func:`history_chart` turns the points the fleet state keeps per
GPU (``console/fleet/state.py``, :class:`~console.fleet.state.GpuPoint`, up to 15 minutes at
the sampling interval) into text rows; the TUI's GPU panel colours them. Each series is a
band of bar columns drawn in eighth blocks (``▁▂▃▄▅▆▇█``, so a band of 3 rows has 24
levels), with its unit, its scale (0 .. the top: 100 %, the GPU's memory total in MiB, its
enforced power limit in W) and its latest value in the gutter; the last row is the time axis
(how long ago the first column is, the span each column covers, ``now``). When the history is
wider than the chart, each column is the mean of the points it covers (unknown points left
out; a column of only unknown points shows ``?`` at its foot). Time comes from the samples'
``t`` (the host's clock), so the span is the recorded one, not the console's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from console.fleet.state import GpuPoint

#: Eighth blocks from the bottom: index n fills n/8 of a cell.
LOWER_EIGHTHS = " ▁▂▃▄▅▆▇█"

#: Which reading a series plots.
SeriesKey = Literal["util", "mem", "power"]

#: Gutter width (characters) left of the plot: the series' name, unit, scale and value.
GUTTER = 14


@dataclass(frozen=True, slots=True)
class ChartRow:
    """One text row of a chart.

    Attributes:
        series: the series the row belongs to, or ``None`` for the time axis.
        gutter: the left part (:data:`GUTTER` characters plus the axis character).
        plot: the plot columns (``width`` characters; the axis row's labels).
    """

    series: SeriesKey | None
    gutter: str
    plot: str


def _value(key: SeriesKey) -> Callable[[GpuPoint], float | None]:
    if key == "util":
        return lambda p: p.util_pct
    if key == "mem":
        return lambda p: p.mem_used_mib
    return lambda p: p.power_w


def buckets(points: Sequence[GpuPoint], width: int) -> list[list[GpuPoint]]:
    """Split the points, oldest first, into at most ``width`` consecutive runs of equal
    length (the oldest run may be shorter), one per chart column, right-aligned: fewer
    points than columns give one point per column."""
    if width <= 0 or not points:
        return []
    per = max(1, math.ceil(len(points) / width))
    first = len(points) % per or per  # the oldest run takes the remainder
    out = [list(points[:first])]
    out.extend(list(points[i : i + per]) for i in range(first, len(points), per))
    return out


def bar_column(value: float | None, top: float, height: int) -> list[str]:
    """One column of ``height`` cells, top row first: a bar of ``value`` / ``top`` in
    eighth blocks; a known value above 0 shows at least one eighth, 0 shows ``▁`` (seen,
    idle); unknown is ``?`` at the foot."""
    if value is None:
        return [" "] * (height - 1) + ["?"]
    frac = min(max(value / top, 0.0), 1.0) if top > 0 else 0.0
    eighths = max(1, round(frac * height * 8))
    cells = []
    for row in range(height - 1, -1, -1):  # top row first
        fill = min(max(eighths - row * 8, 0), 8)
        cells.append(LOWER_EIGHTHS[fill])
    return cells


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def duration_text(seconds: float) -> str:
    """``45s``, ``2m05s``, ``1h02m``: a span for an axis label."""
    s = max(round(seconds), 0)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def _fmt(v: float | None, unit: str) -> str:
    if v is None:
        return "?"
    return f"{v:.0f}{unit}"


def history_chart(
    points: Sequence[GpuPoint],
    *,
    width: int,
    height: int = 3,
    mem_total_mib: float | None = None,
    power_limit_w: float | None = None,
    series: Sequence[SeriesKey] = ("util", "mem", "power"),
) -> list[ChartRow]:
    """A GPU's history as chart rows: ``height`` rows per series, then the time axis.

    Args:
        points: the GPU's points, oldest first (``HostView.history[index]``).
        width: plot columns (the rows are :data:`GUTTER` + 1 + ``width`` characters).
        height: rows per series (at least 1).
        mem_total_mib: the memory series' top (MiB); unknown: the highest point.
        power_limit_w: the power series' top (W); unknown: the highest point.
        series: which series, top to bottom.

    Returns:
        The rows; with no points, one axis row that says so.
    """
    width = max(width, 1)
    height = max(height, 1)
    if not points:
        return [ChartRow(None, " " * GUTTER + " ", "no samples recorded yet".ljust(width))]
    cols = buckets(points, width)
    pad = width - len(cols)
    rows: list[ChartRow] = []
    for key in series:
        value = _value(key)
        means = [_mean([value(p) for p in c]) for c in cols]
        seen = [v for v in means if v is not None]
        if key == "util":
            top, name, unit = 100.0, "util %", "%"
        elif key == "mem":
            top = mem_total_mib or (max(seen) if seen else 1.0)
            name, unit = "mem MiB", ""
        else:
            top = power_limit_w or (max(seen) if seen else 1.0)
            name, unit = "power W", "W"
        grid = [bar_column(v, top, height) for v in means]
        last = value(points[-1])
        labels = [""] * height
        labels[0] = f"{name:<8}{_fmt(top, ''):>6}"  # the scale's top
        now = f"now {_fmt(last, unit)}"  # the latest point
        if height >= 3:
            labels[1] = now
        if height >= 2:  # the scale's foot
            labels[-1] = f"{now if height == 2 else '':<{GUTTER - 1}}0"
        for r in range(height):
            tick = "┤" if r in (0, height - 1) else "│"
            gutter = f"{labels[r]:<{GUTTER}}"[:GUTTER] + tick
            plot = " " * pad + "".join(col[r] for col in grid)
            rows.append(ChartRow(key, gutter, plot))
    span = points[-1].t - points[0].t
    per = span / max(len(points) - 1, 1) * math.ceil(len(points) / width)
    left = f"-{duration_text(span)}"
    mid = f" {duration_text(span)} shown, {duration_text(per)}/col "
    right = "now"
    axis = ["─"] * width
    start = max(0, min(pad, width - len(left) - len(right) - 1))  # under the first point
    for i, ch in enumerate(left):
        if start + i < width - len(right):
            axis[start + i] = ch
    for i, ch in enumerate(right):
        axis[width - len(right) + i] = ch
    # the span and the time per column, centred in the wider free stretch (before the first
    # point's label when the history does not fill the chart yet, else after it)
    lo, hi = max(((0, start), (start + len(left), width - len(right))), key=lambda r: r[1] - r[0])
    if hi - lo >= len(mid) + 2:
        at = lo + (hi - lo - len(mid)) // 2
        axis[at : at + len(mid)] = mid
    rows.append(ChartRow(None, " " * GUTTER + "└", "".join(axis[:width])))
    return rows
