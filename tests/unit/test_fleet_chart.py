"""The GPU history chart (console/fleet/chart.py) drawn from the recorded H200 load trace."""

from __future__ import annotations

from console.fleet.chart import bar_column, buckets, duration_text, history_chart
from console.fleet.state import GpuPoint
from tests.unit.test_fleet_rows import build_fleet


def _points(*utils: float | None) -> list[GpuPoint]:
    return [GpuPoint(100.0 + i, u, None, None, None) for i, u in enumerate(utils)]


def test_bar_column_in_eighths_unknown_at_the_foot() -> None:
    assert bar_column(50.0, 100.0, 2) == [" ", "█"]
    assert bar_column(75.0, 100.0, 2) == ["▄", "█"]
    assert bar_column(100.0, 100.0, 3) == ["█", "█", "█"]
    assert bar_column(0.0, 100.0, 3) == [" ", " ", "▁"]  # seen idle, not missing
    assert bar_column(None, 100.0, 2) == [" ", "?"]
    assert bar_column(250.0, 100.0, 1) == ["█"]  # clamped to the scale


def test_buckets_cover_every_point_once_and_columns_are_means() -> None:
    pts = _points(*range(25))
    cols = buckets(pts, 10)
    assert [len(c) for c in cols] == [1] + [3] * 8  # the oldest run takes the remainder
    assert [p for c in cols for p in c] == pts
    assert buckets(pts, 40) == [[p] for p in pts]
    rows = history_chart(_points(0.0, 100.0, 50.0, None), width=2, height=1, series=("util",))
    assert rows[0].plot == "▄▄"  # (0 + 100) / 2 and 50 (the unknown point left out)
    assert history_chart(_points(None, None), width=2, height=1, series=("util",))[0].plot == "??"


def test_duration_text() -> None:
    assert [duration_text(s) for s in (0, 24, 60, 125, 900, 3725)] == [
        "0s",
        "24s",
        "1m00s",
        "2m05s",
        "15m00s",
        "1h02m",
    ]


def test_chart_of_the_load_trace_has_scales_units_and_the_time_span() -> None:
    st = build_fleet()
    pts = list(st.hosts["h200-a"].history[0])  # 25 samples, 1 s apart, GPU 0 at 100 %
    rows = history_chart(pts, width=30, mem_total_mib=143771, power_limit_w=700)
    assert [r.gutter + r.plot for r in rows] == [
        "util %     100┤     █████████████████████████",
        "now 100%      │     █████████████████████████",
        "             0┤     █████████████████████████",
        "mem MiB 143771┤                              ",
        "now 17612     │                              ",
        "             0┤     ▃▃▃▃▃▃▃▃▃▃▃▃▃▃▃▃▃▃▃▃▃▃▃▃▃",  # 17612 of 143771 MiB: 3 of 24
        "power W    700┤     █████████████████████████",
        "now 692W      │     █████████████████████████",
        "             0┤     █████████████████████████",
        "              └─────-24s──────────────────now",
    ]
    assert [r.series for r in rows] == ["util"] * 3 + ["mem"] * 3 + ["power"] * 3 + [None]
    wide = history_chart(pts, width=60, height=2, mem_total_mib=143771, power_limit_w=700)
    # the first point's label under it (35 columns not filled yet), the span in the room left
    assert wide[-1].plot == "──────── 24s shown, 1s/col ────────-24s──────────────────now"
    assert wide[0].plot == " " * 35 + "█" * 25
    # 25 points in 10 columns: 3 s per column, the whole recorded span still shown
    narrow = history_chart(pts, width=10, height=1, mem_total_mib=143771, power_limit_w=700)
    assert narrow[-1].plot == "─-24s──now" and len(narrow[0].plot) == 10
    # without the limits the scale is the highest point; no points: said so
    assert history_chart(pts, width=30)[3].gutter.startswith("mem MiB  17612")
    assert history_chart([], width=30)[0].plot.strip() == "no samples recorded yet"
