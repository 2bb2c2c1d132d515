"""A running job's progress read from its own log lines, end to end: ``ps``, ``ps --json`` and
``describe`` over real sshd + dockerd + torchrun (scripts/examples/train_ddp.py prints
``step N/M loss L samples/s S`` on every rank)."""

from __future__ import annotations

import json
from typing import Any

from tests.integration.conftest import CLI, wait_for


def _progress(cli: CLI, job_id: str) -> dict[str, Any] | None:
    res = cli.run("ps", "--json")
    assert res.returncode == 0, res.stderr
    job = next(j for j in json.loads(res.stdout) if j["id"] == job_id)
    p = job["progress"]
    if p is None or p["throughput"] is None or (p["throughput"]["step"] or 0) < 6:
        return None
    return dict(p)


def test_ps_and_describe_show_a_running_jobs_steps_rate_and_eta(cli: CLI) -> None:
    # 200 steps of >= 0.5 s each: at most 2 steps/s, and still running while we look
    spec = cli.spec(
        "tput", args=["--steps", "200", "--out", "/out", "--workers", "0", "--step-sleep", "0.5"]
    )
    sub = cli.run("submit", str(spec))
    assert sub.returncode == 0, sub.stderr
    job_id = sub.stdout.strip()
    try:
        p = wait_for(lambda: _progress(cli, job_id), timeout=180, interval=2)
        tp = p["throughput"]
        assert tp["total"] == 200 and 6 <= tp["step"] < 200
        assert tp["rank"] == 0  # the lowest rank speaks for the job
        assert tp["steps_source"] == "measured"
        assert 0.05 < tp["steps_per_s"] <= 2.05, tp
        assert tp["eta_s"] > 0
        assert abs(tp["eta_s"] - (200 - tp["step"]) / tp["steps_per_s"]) < 1e-6
        assert tp["rate_unit"] == "samples/s" and tp["rate"] > 0
        assert isinstance(tp["loss"], float)
        assert p["cost"] is None  # a CPU job: no GPU-hours
        table = cli.run("ps")
        assert table.returncode == 0, table.stderr
        header = table.stdout.splitlines()[0].split()
        assert header[:9] == ["JOB", "KIND", "STATE", "NODES", "AGE", "STEP", "RATE", "ETA", "$/H"]
        row = next(ln for ln in table.stdout.splitlines() if ln.startswith(job_id)).split()
        step, total = row[5].split("/")
        assert int(total) == 200 and int(step) >= tp["step"]
        assert row[7] == "samples/s" and row[9] == "-", row
        desc = cli.run("describe", job_id)
        assert desc.returncode == 0, desc.stderr
        line = next(ln for ln in desc.stdout.splitlines() if ln.startswith("progress: "))
        assert "/200" in line and "steps/s (measured)" in line and "samples/s" in line, line
        assert "ETA " in line
    finally:
        cli.run("stop", job_id)
