"""``gpuconsole report``: GPU-hours held, busy and idle, utilization, money and throughput per
job, host or user, from the history (:mod:`console.history`); pure, and rendered as a terminal
table with a utilization sparkline per row, JSON, CSV, or one self-contained HTML page (the
same table, and a utilization chart per row as inline SVG: no script, no network).

Definitions (per row, over the report's window):

- **GPU-hours held**: seconds a GPU had a process on it (for a job: its processes) / 3600;
  by host, also the GPU-hours observed (telemetry received) and free (observed, not held);
- **busy** / **idle**: of the held GPU-hours, those at or above / under the idle threshold
  of utilization.gpu (the ``gpus_idle`` rule's ``idle_pct``, 5 % by default);
- **util**: mean utilization.gpu over the held seconds (by host: over all observed seconds);
- **$** and **idle $**: held and idle GPU-hours x the profile's ``price_per_gpu_hour``;
- **throughput** (jobs): the mean of the steps/s and rate read from the job's log in the
  minutes it was known (``report`` shows what the job itself reported, nothing derived); a
  job whose progress was read but that held no GPU (a CPU job) has a row with 0 GPU-hours.
"""

from __future__ import annotations

import csv
import html
import io
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal

from console.history import GpuMinute, JobInfo, JobMinute

By = Literal["job", "host", "user"]
"""What a report's rows are."""

SPARK = " ▁▂▃▄▅▆▇█"
#: Buckets of a row's utilization over time (the sparkline's characters, the chart's bars).
BUCKETS = 48


@dataclass
class ReportRow:
    """One job, host or user over the window (see the module docstring for each figure).

    Attributes:
        key: the job id, host or user (``-``: GPUs nobody held, by user).
        name: the job's name (jobs only), else ``None``.
        observed_h / held_h / busy_h / idle_h / free_h: GPU-hours.
        util_pct: mean utilization (%), ``None`` when unknown.
        usd / idle_usd: at the price, ``None`` without one.
        steps_per_s / rate / rate_unit / tflops / mfu_pct: the job's mean reported
            throughput, ``None`` when never known.
        first / last: the first and last minute seen (Unix s).
        spark: mean utilization per bucket of the window (``None``: no data).
        gpus: distinct GPUs seen (``host:index``).
    """

    key: str
    name: str | None = None
    observed_h: float = 0.0
    held_h: float = 0.0
    busy_h: float = 0.0
    idle_h: float = 0.0
    free_h: float = 0.0
    util_pct: float | None = None
    usd: float | None = None
    idle_usd: float | None = None
    steps_per_s: float | None = None
    rate: float | None = None
    rate_unit: str | None = None
    tflops: float | None = None
    mfu_pct: float | None = None
    first: float | None = None
    last: float | None = None
    spark: list[float | None] = field(default_factory=list)
    gpus: int = 0

    def as_dict(self) -> dict[str, Any]:
        """The row as ``report --json`` writes it (hours and money rounded)."""

        def r(v: float | None, nd: int = 4) -> float | None:
            return None if v is None else round(v, nd)

        return {
            "key": self.key,
            "name": self.name,
            "gpus": self.gpus,
            "gpu_hours_observed": r(self.observed_h),
            "gpu_hours_held": r(self.held_h),
            "gpu_hours_busy": r(self.busy_h),
            "gpu_hours_idle": r(self.idle_h),
            "gpu_hours_free": r(self.free_h),
            "util_pct": r(self.util_pct, 1),
            "usd": r(self.usd, 2),
            "idle_usd": r(self.idle_usd, 2),
            "steps_per_s": r(self.steps_per_s),
            "rate": r(self.rate, 2),
            "rate_unit": self.rate_unit,
            "tflops": r(self.tflops, 2),
            "mfu_pct": r(self.mfu_pct, 2),
            "first": self.first,
            "last": self.last,
            "util_over_time": [r(v, 1) for v in self.spark],
        }


@dataclass
class Report:
    """A report: its window, grouping, price, rows (most GPU-hours first) and total;
    ``chart_since``: where the rows' utilization over time begins (the first recorded minute
    in the window)."""

    since: float
    until: float
    by: By
    price_per_gpu_hour: float | None
    idle_pct: float
    rows: list[ReportRow]
    total: ReportRow
    chart_since: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """``report --json``."""
        return {
            "since": self.since,
            "until": self.until,
            "by": self.by,
            "price_per_gpu_hour": self.price_per_gpu_hour,
            "idle_pct": self.idle_pct,
            "rows": [r.as_dict() for r in self.rows],
            "total": self.total.as_dict(),
        }


class _Sums:
    def __init__(self, buckets: int) -> None:
        self.observed = self.held = self.busy = self.idle = 0.0
        self.util_sum = self.util_s = 0.0
        self.first: int | None = None
        self.last: int | None = None
        self.spark_sum = [0.0] * buckets
        self.spark_s = [0.0] * buckets
        self.gpus: set[tuple[str, int]] = set()


def build_report(
    gpus: Iterable[GpuMinute],
    jobs: Iterable[JobMinute],
    info: Mapping[str, JobInfo],
    *,
    since: float,
    until: float,
    by: By = "job",
    price_per_gpu_hour: float | None = None,
    idle_pct: float = 5.0,
    buckets: int = BUCKETS,
) -> Report:
    """The report over ``[since, until)`` (Unix s) from the history's rows; the sparklines
    span from the first minute recorded in the window (not an empty week) to ``until``."""
    rows_in = [m for m in gpus if since - 60 <= m.minute * 60 < until]
    start = max(since, min((m.minute * 60 for m in rows_in), default=since))
    span = max(until - start, 60.0)
    buckets = max(1, min(buckets, int(span // 60)))  # a bucket holds a minute at least
    sums: dict[str, _Sums] = {}
    total = _Sums(buckets)
    for m in rows_in:
        t = m.minute * 60
        held_only = by in ("job", "user")
        if by == "job":
            if m.job is None:
                continue
            key = m.job
        elif by == "user":
            if not m.held_s:
                continue
            key = m.user or "?"
        else:
            key = m.host
        for s in (sums.setdefault(key, _Sums(buckets)), total):
            s.gpus.add((m.host, m.gpu))
            s.observed += m.seconds
            s.held += m.held_s
            busy_held = min(m.busy_s, m.held_s) if held_only or m.held_s else 0
            s.busy += busy_held
            s.idle += m.held_s - busy_held
            weight = m.held_s if held_only else m.seconds
            if m.util_pct is not None and weight:
                s.util_sum += m.util_pct * weight
                s.util_s += weight
                b = min(buckets - 1, max(0, int((t - start) / span * buckets)))
                s.spark_sum[b] += m.util_pct * weight
                s.spark_s[b] += weight
            s.first = t if s.first is None else min(s.first, t)
            s.last = t if s.last is None else max(s.last, t)
    tput: dict[str, list[JobMinute]] = {}
    for j in jobs:
        if since - 60 <= j.minute * 60 < until:
            tput.setdefault(j.job, []).append(j)

    def row(key: str, s: _Sums) -> ReportRow:
        r = ReportRow(key)
        r.observed_h, r.held_h = s.observed / 3600, s.held / 3600
        r.busy_h, r.idle_h = s.busy / 3600, s.idle / 3600
        r.free_h = max(0.0, r.observed_h - r.held_h)
        r.util_pct = s.util_sum / s.util_s if s.util_s else None
        if price_per_gpu_hour is not None:
            r.usd, r.idle_usd = r.held_h * price_per_gpu_hour, r.idle_h * price_per_gpu_hour
        r.first = None if s.first is None else float(s.first)
        r.last = None if s.last is None else float(s.last + 60)
        if key in tput and by == "job":
            seen = [j.minute * 60 for j in tput[key]]
            r.first = min([*seen, *([r.first] if r.first is not None else [])])
            r.last = max([*(t + 60 for t in seen), *([r.last] if r.last is not None else [])])
        r.spark = [a / w if w else None for a, w in zip(s.spark_sum, s.spark_s)]
        r.gpus = len(s.gpus)
        return r

    if by == "job":  # jobs whose progress was read but that held no GPU (CPU jobs)
        for key in tput:
            sums.setdefault(key, _Sums(buckets))
    rows = []
    for key, s in sums.items():
        r = row(key, s)
        if by == "job":
            ji = info.get(key)
            r.name = ji.name if ji is not None else None
            minutes = tput.get(key, [])
            r.steps_per_s = _mean(j.steps_per_s for j in minutes)
            units = [j.rate_unit for j in minutes if j.rate is not None and j.rate_unit]
            if units:
                unit = max(set(units), key=units.count)
                r.rate_unit = unit
                r.rate = _mean(j.rate for j in minutes if j.rate_unit == unit)
            r.tflops = _mean(j.tflops for j in minutes)
            r.mfu_pct = _mean(j.mfu_pct for j in minutes)
        rows.append(r)
    rows.sort(key=lambda r: (-r.held_h if by != "host" else -r.observed_h, r.key))
    return Report(
        since, until, by, price_per_gpu_hour, idle_pct, rows, row("total", total), chart_since=start
    )


def _mean(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None and not math.isnan(v)]
    return sum(vals) / len(vals) if vals else None


# -- text ------------------------------------------------------------------------------------


def sparkline(values: Iterable[float | None]) -> str:
    """Utilization (0-100 %) as block characters, one per value; a space where unknown."""
    out = []
    for v in values:
        if v is None:
            out.append(" ")
        else:
            out.append(SPARK[1 + min(7, max(0, int(v / 100 * 8)))] if v > 0 else SPARK[1])
    return "".join(out)


def _h(v: float) -> str:
    return f"{v:.2f}" if v < 100 else f"{v:,.0f}"


def _usd(v: float | None) -> str:
    if v is None:
        return "-"
    return f"${v:,.2f}" if v < 10_000 else f"${v:,.0f}"


def _rate(r: ReportRow) -> str:
    from console.throughput import si

    if r.rate is not None and r.rate_unit:
        return f"{si(r.rate)} {r.rate_unit}"
    if r.steps_per_s is not None:
        return f"{si(r.steps_per_s)} steps/s"
    return "-"


def _columns(rep: Report) -> list[str]:
    head = {"job": ["JOB", "NAME"], "host": ["HOST"], "user": ["USER"]}[rep.by]
    extra = ["OBSERVED-H", "FREE-H"] if rep.by == "host" else []
    rate = ["RATE", "MFU"] if rep.by == "job" else []
    return [*head, "GPUS", *extra, "GPU-H", "BUSY-H", "IDLE-H", "UTIL", "$", "IDLE-$", *rate]


def _cells(rep: Report, r: ReportRow, total: bool = False) -> list[str]:
    head = {"job": [r.key, r.name or "-"], "host": [r.key], "user": [r.key]}[rep.by]
    if total:
        head = ["total"] + [""] * (len(head) - 1)
    extra = [_h(r.observed_h), _h(r.free_h)] if rep.by == "host" else []
    util = "?" if r.util_pct is None else f"{r.util_pct:.0f}%"
    rate = []
    if rep.by == "job":
        rate = [_rate(r), "-" if r.mfu_pct is None else f"{r.mfu_pct:.1f}%"]
    return [
        *head,
        str(r.gpus),
        *extra,
        _h(r.held_h),
        _h(r.busy_h),
        _h(r.idle_h),
        util,
        _usd(r.usd),
        _usd(r.idle_usd),
        *rate,
    ]


def _when(t: float) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).astimezone().strftime("%Y-%m-%d %H:%M")


def render_text(rep: Report, *, spark: bool = True) -> list[str]:
    """The terminal table: one row per job/host/user, a total, and each row's utilization
    over the window as a sparkline (``UTIL OVER TIME``)."""
    from console.texttable import text_table

    cols = _columns(rep)
    rows = [tuple(cols + (["UTIL OVER TIME"] if spark else []))]
    for r in rep.rows:
        rows.append(tuple(_cells(rep, r) + ([f"|{sparkline(r.spark)}|"] if spark else [])))
    rows.append(
        tuple(_cells(rep, rep.total, True) + ([f"|{sparkline(rep.total.spark)}|"] if spark else []))
    )
    price = (
        f"at ${rep.price_per_gpu_hour:g}/GPU-hour"
        if rep.price_per_gpu_hour is not None
        else "no price_per_gpu_hour in the profile: no money"
    )
    head = (
        f"GPU-hours by {rep.by}, {_when(rep.since)} to {_when(rep.until)} ({price}; idle: "
        f"held under {rep.idle_pct:g}% utilization; utilization over time from "
        f"{_when(max(rep.since, rep.chart_since))}, {_bucket_text(rep)} per character)"
    )
    return [head, *text_table(rows)]


def render_csv(rep: Report) -> str:
    """``report --csv``: a header and one line per row, then the total (numbers unrounded
    but for money, in the units of :meth:`ReportRow.as_dict`)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    keys = [k for k in ReportRow("x").as_dict() if k != "util_over_time"]
    w.writerow(keys)
    for r in [*rep.rows, rep.total]:
        d = r.as_dict()
        w.writerow(["" if d[k] is None else d[k] for k in keys])
    return buf.getvalue()


def _svg_chart(values: list[float | None], width: int = 480, height: int = 60) -> str:
    """Utilization (0-100 %) over time as inline SVG bars (a gap where unknown)."""
    n = max(1, len(values))
    bw = width / n
    bars = []
    for i, v in enumerate(values):
        if v is None:
            continue
        h = max(1.0, v / 100 * (height - 2))
        color = "#2e7d32" if v >= 50 else "#f9a825" if v >= 5 else "#c62828"
        bars.append(
            f'<rect x="{i * bw:.1f}" y="{height - h:.1f}" width="{max(bw - 1, 1):.1f}" '
            f'height="{h:.1f}" fill="{color}"><title>{v:.0f}%</title></rect>'
        )
    return (
        f'<svg class="util" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="utilization over time">'
        f'<rect width="{width}" height="{height}" fill="#f4f4f4"/>' + "".join(bars) + "</svg>"
    )


def render_html(rep: Report) -> str:
    """One self-contained page: the table and, per row, its utilization over the window as an
    SVG bar chart (no script, no external resource)."""
    cols = _columns(rep)
    esc = html.escape
    head = "".join(f"<th>{esc(c)}</th>" for c in [*cols, "utilization over time"])
    body = []
    for r in rep.rows:
        cells = "".join(f"<td>{esc(c)}</td>" for c in _cells(rep, r))
        body.append(f'<tr class="row">{cells}<td>{_svg_chart(r.spark)}</td></tr>')
    total = "".join(f"<td>{esc(c)}</td>" for c in _cells(rep, rep.total, True))
    body.append(f'<tr class="total">{total}<td>{_svg_chart(rep.total.spark)}</td></tr>')
    price = (
        f"${rep.price_per_gpu_hour:g} per GPU-hour"
        if rep.price_per_gpu_hour is not None
        else "no price_per_gpu_hour in the profile"
    )
    title = f"gpuconsole report: GPU-hours by {rep.by}"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; }}
th, td {{ padding: 4px 10px; border-bottom: 1px solid #ddd; text-align: right; }}
th:first-child, td:first-child {{ text-align: left; }}
tr.total td {{ font-weight: bold; border-top: 2px solid #444; }}
.note {{ color: #666; }}
</style></head><body>
<h1>{esc(title)}</h1>
<p class="note">{esc(_when(rep.since))} to {esc(_when(rep.until))}; {esc(price)}; idle: held
under {rep.idle_pct:g}% utilization; bars: mean utilization per {esc(_bucket_text(rep))}
(green &ge; 50%, amber &ge; 5%, red under 5%).</p>
<table id="report"><thead><tr>{head}</tr></thead><tbody>
{"".join(body)}
</tbody></table></body></html>
"""


def _bucket_text(rep: Report) -> str:
    from console.throughput import duration_text

    n = len(rep.total.spark) or BUCKETS
    each = max(rep.until - max(rep.since, rep.chart_since), 60) / n
    return duration_text(each) if each >= 3600 or each % 60 < 1 else f"{each:.0f}s"
