"""The GPU-hours history (console/history.py) and the report over it (console/report.py), fed
with the recorded H200 traces (tests/data/traces: 25 one-second samples of 2 GPUs, GPU 0 at
100 % under a real matmul loader, GPU 1 idle at 0 %).

Expected values, worked out by hand from the trace before the code: one job holding GPU 0 for
25 s at 100 % is 25/3600 = 0.006944 GPU-hours held, all busy; a second job holding the idle
GPU 1 for the same 25 s is 0.006944 GPU-hours held, all idle; at $3.50/GPU-hour each is
$0.0243. By host: 50 GPU-seconds observed, 50 held, mean utilization 50 %.
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import Any

import pytest

from console.fleet.state import ContainerJob, FleetState
from console.history import GpuMinute, HistoryRecorder, HistoryStore, JobInfo
from console.jobs.logs import JobLogLine
from console.report import build_report, render_csv, render_html, render_text, sparkline
from console.throughput import JobProgress, throughput_of

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"
CID_A, CID_B = "a" * 64, "b" * 64


def load_trace() -> list[dict[str, Any]]:
    """The load trace, its host times moved to 30 minutes ago (same seconds within the minute:
    the writer keeps minutes of the last 3 days as they are and the last 90 days at all)."""
    with open(TRACES / "h200-load.jsonl", encoding="utf-8") as f:
        samples = [json.loads(ln) for ln in f if ln.strip()]
    t0 = samples[0]["host_time"]
    shift = ((time.time() // 60 - 30) - t0 // 60) * 60
    for s in samples:
        s["host_time"] += shift
    return samples


def two_jobs(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The trace with its real process (GPU 0) in job A's container and a second process of
    job B on the idle GPU 1."""
    out = []
    for s in samples:
        s = copy.deepcopy(s)
        p0 = s["processes"][0]
        p0["container_id"] = CID_A
        s["processes"].append(
            {**p0, "gpu_index": 1, "pid": 700, "container_id": CID_B, "user": "bob"}
        )
        out.append(s)
    return out


def record(tmp_path: Path, samples: list[dict[str, Any]]) -> HistoryStore:
    store = HistoryStore(tmp_path)
    rec = HistoryRecorder(store)
    state = FleetState(["vm"])
    state.set_containers(
        {CID_A: ContainerJob("llm-a1", "llm", 0), CID_B: ContainerJob("idle-b2", "idle", 0)}
    )
    for s in samples:
        state.on_sample("vm", s, rx=0.0)
        rec.on_sample("vm", state.hosts["vm"].sample, state)  # type: ignore[arg-type]
    rec.note_jobs(
        {
            "llm-a1": JobInfo("llm-a1", "llm", "lab"),
            "idle-b2": JobInfo("idle-b2", "idle", "lab"),
        }
    )
    rec.flush()
    store.close()
    return store


def test_the_trace_is_what_the_expectations_say() -> None:
    samples = load_trace()
    assert len(samples) == 25
    assert {s["gpus"][0]["util_gpu_pct"] for s in samples} == {100}
    assert {s["gpus"][1]["util_gpu_pct"] for s in samples} == {0}
    assert {int(s["host_time"] // 60) for s in samples} == {int(samples[0]["host_time"] // 60)}
    assert {s["interval_s"] for s in samples} == {1.0}


def test_one_row_per_gpu_minute_with_job_user_and_readings(tmp_path: Path) -> None:
    samples = two_jobs(load_trace())
    store = record(tmp_path, samples)
    gpus, jobs, info = store.read(0)
    assert jobs == []
    assert [(g.host, g.gpu, g.job, g.user, g.seconds, g.held_s, g.busy_s) for g in gpus] == [
        ("vm", 0, "llm-a1", "root", 25, 25, 25),
        ("vm", 1, "idle-b2", "bob", 25, 25, 0),
    ]
    g0, g1 = gpus
    assert g0.util_pct == 100.0 and g1.util_pct == 0.0
    assert g0.mem_mib == max(s["gpus"][0]["mem_used_mib"] for s in samples)
    power = [s["gpus"][0]["power_w"] for s in samples]
    assert g0.power_w == pytest.approx(sum(power) / len(power), abs=0.05)
    assert info["llm-a1"] == JobInfo("llm-a1", "llm", "lab")


def test_report_by_job_host_and_user(tmp_path: Path) -> None:
    samples = two_jobs(load_trace())
    store = record(tmp_path, samples)
    t0 = samples[0]["host_time"]
    gpus, jobs, info = store.read(t0 - 3600)
    by_job = build_report(
        gpus, jobs, info, since=t0 - 3600, until=t0 + 60, by="job", price_per_gpu_hour=3.5
    )
    rows = {r.key: r for r in by_job.rows}
    a, b = rows["llm-a1"], rows["idle-b2"]
    assert (a.name, b.name) == ("llm", "idle")
    assert a.held_h == pytest.approx(25 / 3600) and a.busy_h == pytest.approx(25 / 3600)
    assert a.idle_h == 0 and a.util_pct == 100.0
    assert a.usd == pytest.approx(25 / 3600 * 3.5) and a.idle_usd == 0
    assert b.held_h == pytest.approx(25 / 3600) and b.busy_h == 0
    assert b.idle_h == pytest.approx(25 / 3600) and b.idle_usd == pytest.approx(25 / 3600 * 3.5)
    assert b.util_pct == 0.0
    assert by_job.total.held_h == pytest.approx(50 / 3600)
    assert by_job.total.idle_usd == pytest.approx(25 / 3600 * 3.5)
    by_host = build_report(gpus, jobs, info, since=t0 - 3600, until=t0 + 60, by="host")
    (vm,) = by_host.rows
    assert vm.observed_h == pytest.approx(50 / 3600) and vm.held_h == pytest.approx(50 / 3600)
    assert vm.util_pct == 50.0 and vm.free_h == 0 and vm.usd is None  # no price
    by_user = build_report(gpus, jobs, info, since=t0 - 3600, until=t0 + 60, by="user")
    assert {r.key: round(r.held_h * 3600) for r in by_user.rows} == {"root": 25, "bob": 25}


def test_throughput_per_job_from_the_minutes_it_was_read(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path)
    rec = HistoryRecorder(store)
    titan = "step: {s}  loss: 7.6  tps: 10,050  tflops: 314.71  mfu: 13.99%"
    t0 = (time.time() // 60 - 10) * 60
    for minute in range(3):  # three reads, a minute apart; steps 20 s apart: 0.5 steps/s
        base = t0 + 60 * minute
        lines = [
            JobLogLine(
                0, "vm", 0, int((base + 20 * i) * 1e9), titan.format(s=10 * (3 * minute + i))
            )
            for i in range(3)
        ]
        tp = throughput_of(lines, world_size=8)
        rec.on_progress([JobProgress("llm-a1", tp, None, base + 45)], {})
    store.close()
    _, jobs, info = store.read(t0 - 60)
    assert [(j.job, j.steps_per_s, j.rate, j.rate_unit, j.mfu_pct) for j in jobs] == [
        ("llm-a1", pytest.approx(0.5), 80400.0, "tokens/s", 13.99)
    ] * 3
    row = GpuMinute(int(t0 // 60), "vm", 0, "llm-a1", "root", 60, 60, 60, 97.0, 1000, 690.0)
    rep = build_report([row], jobs, info, since=t0 - 60, until=t0 + 180, by="job")
    (r,) = rep.rows
    assert (r.steps_per_s, r.rate, r.rate_unit, r.tflops, r.mfu_pct) == (
        pytest.approx(0.5),
        80400.0,
        "tokens/s",
        314.71,
        13.99,
    )
    text = "\n".join(render_text(rep))
    assert "80.4k tokens/s" in text and "14.0%" in text


def test_two_recorders_keep_the_row_covering_more_seconds(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path)
    m = int(time.time() // 60) - 5  # recent: the writer's first prune keeps it
    short = GpuMinute(m, "vm", 0, None, None, 20, 0, 0, 3.0, 100, 80.0)
    full = GpuMinute(m, "vm", 0, "j-1", "root", 60, 60, 60, 99.0, 9000, 690.0)
    store.write(gpus=[full])
    store.write(gpus=[short])  # another console's partial minute, written later
    store.close()
    (got,), _, _ = store.read(0)
    assert got == full


def test_old_rows_go_after_the_retention_and_the_oldest_over_the_size(tmp_path: Path) -> None:
    now = time.time()
    store = HistoryStore(tmp_path, retention_days=1)
    old = [
        GpuMinute(int((now - 2 * 86400) // 60) + i, "vm", 0, None, None, 60, 0, 0, 0.0, 0, 75.0)
        for i in range(5)
    ]
    new = [
        GpuMinute(int(now // 60) - i, "vm", 0, None, None, 60, 0, 0, 0.0, 0, 75.0) for i in range(5)
    ]
    store.write(gpus=old + new)
    store.close()
    store.prune(now=now)
    gpus, _, _ = store.read(0)
    assert sorted(g.minute for g in gpus) == sorted(g.minute for g in new)
    # over the size bound: the oldest minutes go first
    small = HistoryStore(tmp_path, retention_days=3650, max_bytes=1)
    small.prune(now=now)
    gpus, _, _ = small.read(0)
    assert len(gpus) < len(new) and max(g.minute for g in gpus) == max(g.minute for g in new)


def test_a_writer_that_is_behind_drops_rather_than_blocks(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path)
    store._queue.maxsize = 1  # type: ignore[misc]
    row = GpuMinute(1, "vm", 0, None, None, 60, 0, 0, 0.0, 0, 75.0)
    blocked = __import__("threading").Event()
    store._thread = __import__("threading").Thread(target=blocked.wait)  # a writer that waits
    t = time.perf_counter()
    for _ in range(100):
        store.write(gpus=[row])
    assert time.perf_counter() - t < 1.0  # never waited for the disk
    assert store.dropped == 99


def test_sparkline_and_renderings(tmp_path: Path) -> None:
    assert sparkline([None, 0.0, 12.5, 50.0, 100.0]) == " ▁▂▅█"
    samples = two_jobs(load_trace())
    store = record(tmp_path, samples)
    t0 = samples[0]["host_time"]
    gpus, jobs, info = store.read(t0 - 3600)
    rep = build_report(
        gpus, jobs, info, since=t0 - 3600, until=t0 + 60, by="job", price_per_gpu_hour=3.5
    )
    lines = render_text(rep)
    assert lines[0].startswith("GPU-hours by job, ") and "at $3.5/GPU-hour" in lines[0]
    assert lines[1].split()[:4] == ["JOB", "NAME", "GPUS", "GPU-H"]
    (a,) = [ln for ln in lines if ln.startswith("llm-a1")]
    assert a.split()[1:9] == ["llm", "1", "0.01", "0.01", "0.00", "100%", "$0.02", "$0.00"]
    assert a.split("|")[1].startswith("█")  # the first recorded minute: 100 %
    csv_text = render_csv(rep).splitlines()
    assert csv_text[0].startswith("key,name,gpus,gpu_hours_observed,gpu_hours_held")
    # held, busy, idle GPU-hours; then free, util, $, idle $
    assert any(
        ln.startswith("llm-a1,llm,1,0.0069,0.0069,0.0069,0.0,0.0,100.0,0.02,0.0,")
        for ln in csv_text
    )
    assert csv_text[-1].startswith("total,,2,0.0139,0.0139,0.0069,0.0069,0.0,50.0,0.05,0.02,")
    page = render_html(rep)
    assert (
        page.startswith("<!DOCTYPE html>")
        and "<script" not in page
        and "http" not in page.split("xmlns=")[0]
    )
    assert page.count('<tr class="row">') == 2 and page.count("<svg") == 3
    assert {r["key"] for r in json.loads(json.dumps(rep.as_dict()))["rows"]} == {
        "llm-a1",
        "idle-b2",
    }


def test_minutes_older_than_three_days_become_hour_rows(tmp_path: Path) -> None:
    now = time.time()
    hour = int((now - 4 * 86400) // 3600)  # an hour four days ago
    m0 = hour * 60
    rows = [
        GpuMinute(m0, "vm", 0, "llm-a1", "root", 60, 60, 60, 100.0, 17000, 690.0),
        GpuMinute(m0 + 1, "vm", 0, "llm-a1", "root", 60, 60, 0, 0.0, 18000, 80.0),
        GpuMinute(m0 + 2, "vm", 0, None, None, 30, 0, 0, 0.0, 0, 75.0),
        GpuMinute(int(now // 60) - 1, "vm", 0, "llm-a1", "root", 60, 60, 60, 99.0, 1, 600.0),
    ]
    store = HistoryStore(tmp_path)
    store.write(gpus=rows)
    store.close()
    store.prune(now=now)
    gpus, _, _ = store.read(now - 5 * 86400)
    assert [
        (g.minute, g.job, g.seconds, g.held_s, g.busy_s, g.util_pct, g.mem_mib, g.power_w)
        for g in gpus
    ] == [
        (m0, None, 30, 0, 0, 0.0, 0, 75.0),  # the free half minute, its own hour row
        (m0, "llm-a1", 120, 120, 60, 50.0, 18000, 385.0),  # two minutes: sums, means, max
        (rows[3].minute, "llm-a1", 60, 60, 60, 99.0, 1, 600.0),  # recent: still a minute row
    ]
    rep = build_report(gpus, [], {}, since=now - 5 * 86400, until=now, by="job")
    (r,) = rep.rows
    assert r.held_h == pytest.approx(180 / 3600) and r.busy_h == pytest.approx(120 / 3600)


def test_a_cpu_job_with_progress_has_a_row_and_buckets_hold_a_minute() -> None:
    from console.history import JobMinute

    now = time.time() // 60 * 60
    jobs = [
        JobMinute(int(now // 60) - k, "cpu-x", 2.0, 900.0, "samples/s", None, None)
        for k in range(3)
    ]
    gpu = [
        GpuMinute(int(now // 60) - k, "vm", 0, "gpu-y", "root", 60, 60, 60, 90.0, 1, 1.0)
        for k in range(1, 31)
    ]
    rep = build_report(gpu, jobs, {}, since=now - 3600, until=now, by="job")
    rows = {r.key: r for r in rep.rows}
    cpu = rows["cpu-x"]
    assert (cpu.gpus, cpu.held_h, cpu.rate, cpu.rate_unit, cpu.steps_per_s) == (
        0,
        0.0,
        900.0,
        "samples/s",
        2.0,
    )
    assert cpu.usd is None and cpu.first == now - 120 and cpu.last == now  # until is open
    # 30 minutes of data: 30 buckets of a minute, none empty between the rows
    assert len(rows["gpu-y"].spark) == 30 and None not in rows["gpu-y"].spark
    assert "1m per character" in render_text(rep)[0]
