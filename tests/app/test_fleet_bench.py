"""The fleet view shows a bench that ended while the app runs (``gpuconsole bench`` in another
terminal): the results file is re-read when it changed."""

from __future__ import annotations

from pathlib import Path

import pytest

import console.app.app as app_mod
from console.bench import analysis
from console.bench.store import BenchStore
from tests.app.demo_data import make_app
from tests.unit.test_bench import gpu_doc, run_of

SIZE = (160, 48)


async def test_a_bench_saved_while_the_app_runs_reaches_the_fleet_view(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(app_mod, "BENCH_POLL_S", 0.05)
    app = make_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.2)
        assert app.fleet_screen.bench == {}  # no results yet
        run = run_of([gpu_doc(local=0), gpu_doc(local=1, bf16=500.0)], host="h200-a")
        BenchStore(tmp_path).save("lab", list(zip(run, analysis.judge(run, run))), [])
        for _ in range(40):
            await pilot.pause(0.05)
            if app.fleet_screen.bench:
                break
        bench = app.fleet_screen.bench
        assert sorted(bench) == [("h200-a", 0), ("h200-a", 1)]
        assert "bf16 760 TFLOP/s" in bench[("h200-a", 0)]
        assert "slow: bf16 500 TFLOP/s" in bench[("h200-a", 1)]
