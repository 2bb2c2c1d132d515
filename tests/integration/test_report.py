"""``gpuconsole report`` as a user runs it, over a history recorded from the real H200 traces
(re-stamped to the last two hours), and its ``--html`` page opened in headless Chromium.

The history: job ``llm`` holds GPU 0 for two hours, busy (100 %, the load trace) for the first
and idle (0 %, the idle trace) for the second; job ``eval`` holds GPU 1 for the first hour,
idle. Ten sampled minutes per hour, 25 one-second samples each (the traces' own). Expected,
by hand: llm 20 x 25 s = 500 s held (0.1389 GPU-h), 250 s busy, 250 s idle, mean
utilization 50 %; eval 250 s held, all idle; at $3.50 per GPU-hour llm costs $0.49 and $0.24
of it idle.
"""

from __future__ import annotations

import copy
import csv
import io
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from console.fleet.state import ContainerJob, FleetState
from console.history import HistoryRecorder, HistoryStore, JobInfo
from tests.integration.conftest import CLI, REPO

TRACES = REPO / "tests" / "data" / "traces"
CHROMIUM = Path("/usr/bin/chromium")
CID_A, CID_B = "a" * 64, "b" * 64


def _trace(name: str) -> list[dict[str, Any]]:
    with open(TRACES / name, encoding="utf-8") as f:
        return [json.loads(ln) for ln in f if ln.strip()][:25]


def seed(state_dir: Path) -> float:
    """Record the history; returns the first minute's start (Unix s)."""
    load, idle = _trace("h200-load.jsonl"), _trace("h200-idle.jsonl")  # 25 and 15 lines
    start = (time.time() // 3600 - 2) * 3600  # two whole hours ago
    store = HistoryStore(state_dir)
    rec = HistoryRecorder(store)
    state = FleetState(["h200-a"])
    state.set_containers(
        {CID_A: ContainerJob("llm-1a2b3c", "llm", 0), CID_B: ContainerJob("eval-4d5e6f", "eval", 0)}
    )
    for hour in range(2):
        for k in range(10):
            minute_start = start + hour * 3600 + k * 360
            for i in range(25):
                s = copy.deepcopy(load[i] if hour == 0 else idle[i % len(idle)])
                s["host_time"] = minute_start + i
                pid = {"gpu_uuid": None, "used_mib": 1000, "type": "compute", "command": "python"}
                s["processes"] = [
                    {
                        **pid,
                        "gpu_index": 0,
                        "pid": 10,
                        "user": "alice",
                        "container_id": CID_A,
                        "rank": 0,
                        "local_rank": 0,
                    }
                ]
                if hour == 0:
                    s["gpus"][1]["util_gpu_pct"] = 0
                    s["processes"].append(
                        {
                            **pid,
                            "gpu_index": 1,
                            "pid": 11,
                            "user": "bob",
                            "container_id": CID_B,
                            "rank": 0,
                            "local_rank": 0,
                        }
                    )
                state.on_sample("h200-a", s, rx=0.0)
                rec.on_sample("h200-a", state.hosts["h200-a"].sample, state)  # type: ignore[arg-type]
    rec.note_jobs(
        {
            "llm-1a2b3c": JobInfo("llm-1a2b3c", "llm", "lab"),
            "eval-4d5e6f": JobInfo("eval-4d5e6f", "eval", "lab"),
        }
    )
    rec.flush()
    store.close()
    return start


def priced(cli: CLI) -> Path:
    data = yaml.safe_load(cli.profile.read_text())
    data["price_per_gpu_hour"] = 3.5
    path = cli.tmp / "priced.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_report_json_csv_text_and_bad_input(cli: CLI) -> None:
    seed(cli.state_dir)
    profile = priced(cli)
    res = cli.run("report", "--since", "1d", "--json", profile=profile)
    assert res.returncode == 0, res.stderr
    rep = json.loads(res.stdout)
    assert rep["by"] == "job" and rep["price_per_gpu_hour"] == 3.5
    rows = {r["key"]: r for r in rep["rows"]}
    llm, ev = rows["llm-1a2b3c"], rows["eval-4d5e6f"]
    assert llm["name"] == "llm" and llm["gpus"] == 1
    assert llm["gpu_hours_held"] == pytest.approx(500 / 3600, abs=1e-4)
    assert llm["gpu_hours_busy"] == pytest.approx(250 / 3600, abs=1e-4)
    assert llm["gpu_hours_idle"] == pytest.approx(250 / 3600, abs=1e-4)
    assert llm["util_pct"] == 50.0
    assert llm["usd"] == pytest.approx(0.49, abs=0.005)
    assert llm["idle_usd"] == pytest.approx(0.24, abs=0.005)
    assert ev["gpu_hours_held"] == pytest.approx(250 / 3600, abs=1e-4)
    assert ev["gpu_hours_busy"] == 0 and ev["util_pct"] == 0.0
    # over time: busy buckets first, idle ones after
    series = [v for v in llm["util_over_time"] if v is not None]
    assert series[0] == 100.0 and series[-1] == 0.0
    by_user = json.loads(cli.run("report", "--by", "user", "--json", profile=profile).stdout)
    assert {r["key"]: r["gpu_hours_held"] for r in by_user["rows"]} == {
        "alice": pytest.approx(500 / 3600, abs=1e-4),
        "bob": pytest.approx(250 / 3600, abs=1e-4),
    }
    by_host = cli.run("report", "--by", "host", "--csv", profile=profile)
    assert by_host.returncode == 0, by_host.stderr
    (host, total) = list(csv.DictReader(io.StringIO(by_host.stdout)))
    assert host["key"] == "h200-a" and host["gpus"] == "2"
    assert float(host["gpu_hours_observed"]) == pytest.approx(1000 / 3600, abs=1e-4)
    assert float(host["gpu_hours_free"]) == pytest.approx(250 / 3600, abs=1e-4)
    assert total["key"] == "total"
    text = cli.run("report", profile=profile)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0].startswith("GPU-hours by job, ") and "$3.5/GPU-hour" in lines[0]
    (row,) = [ln for ln in lines if ln.startswith("llm-1a2b3c")]
    assert "50%" in row and "$0.49" in row and "█" in row and "▁" in row
    for bad, word in ((["--since", "soon"], "--since"), (["--json", "--csv"], "--json")):
        res = cli.run("report", *bad, profile=profile)
        assert res.returncode == 2, res
        assert word in res.stderr and "Traceback" not in res.stderr


def test_report_html_opens_in_a_real_browser(cli: CLI) -> None:
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} missing: scripts/lib/ensure-chromium installs it")
    seed(cli.state_dir)
    page = cli.tmp / "report.html"
    res = cli.run("report", "--html", str(page), profile=priced(cli))
    assert res.returncode == 0, res.stderr
    assert f"wrote {page}" in res.stderr
    flags = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1400,600",
    ]
    dom = subprocess.run(
        [*flags, f"--user-data-dir={cli.tmp / 'c1'}", "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert dom.returncode == 0, dom.stderr[-3000:]
    html = dom.stdout
    assert html.count('<tr class="row">') == 2 and '<tr class="total">' in html
    assert "llm-1a2b3c" in html and "eval-4d5e6f" in html and "$0.49" in html
    assert html.count("<svg") == 3 and "<rect" in html
    png = cli.tmp / "report.png"
    shot = subprocess.run(
        [*flags, f"--user-data-dir={cli.tmp / 'c2'}", f"--screenshot={png}", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert shot.returncode == 0, shot.stderr[-3000:]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
