"""Opening a finished job's log: the app's log panes against ``gpuconsole logs`` printing it.

A finished 2-node job whose containers were removed (so neither side asks a host: both read
the local archive, ``<state dir>/logs/<job id>/node<R>.log``) with ``--lines`` archived lines
(half per node; training-like lines with rank prefixes, every 10th coloured, every 50th a tqdm
bar redrawn with ``\\r``).

- gpuconsole app: the real :class:`GpuConsoleApp` under Textual's headless driver
  (``run_test``, 160x45), ``open_logs(job)`` timed until every pane holds all of its node's
  lines and the view was drawn; also the time until the first pane shows its first line.
- baseline: ``gpuconsole logs JOB > /dev/null`` (a fresh process: interpreter start, imports,
  the archive read and merged, every line printed), which a user would otherwise page through.

Measured under load too: ``--load N`` keeps N busy-looping processes running during every
run (users' machines are busy). Run::

    .venv/bin/python scripts/bench/log_open.py [--lines 10000] [--runs 5] [--load 1]

Prints a markdown table: median (min-max) seconds per side and the ratio app / baseline.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from console.jobs.store import Store  # noqa: E402
from remote.docker import LogLine  # noqa: E402
from tests.app.demo_data import NOW, T0_NS, jobs, make_app  # noqa: E402

JOB_ID = "llama-ft-9f8e7d"  # demo data's failed 2-node job


def _line(i: int, node: int) -> str:
    rank = node * 2 + i % 2
    if i % 50 == 0:
        return "".join(f"\rloading: {p:3d}%|{'#' * (p // 10):<10}|" for p in (0, 50, 100))
    text = f"[rank{rank}]: step {i} loss {2.0 / (1 + i * 0.01):.4f} lr 3.0e-04 samples/s 1480"
    return f"\x1b[33m{text}\x1b[0m" if i % 10 == 0 else text


def make_state(root: Path, total: int) -> None:
    """The demo store with the failed job marked removed and ``total`` lines archived."""
    store = Store(root)
    for j in jobs():
        if store.get(j.id) is None:
            store.add_job(j)
            store.update_job(j.id, exit_code=j.exit_code, failure=j.failure)
    store.update_job(JOB_ID, removed_at=NOW - 60)
    per = total // 2
    for node in (0, 1):
        store.archive(
            JOB_ID, node, [LogLine(T0_NS + i * 1000 + node, _line(i, node)) for i in range(per)]
        )
    store.close()


async def open_in_app(state: Path, total: int) -> tuple[float, float]:
    """(seconds to the first line on screen, seconds until every line is in its pane)."""
    from console.app.widgets.logpanes import LogPanes

    app = make_app(state)
    job = app.service.store.get(JOB_ID)
    assert job is not None
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.pause()
        t0 = time.perf_counter()
        app.open_logs(job)
        first = None
        while True:
            await asyncio.sleep(0.005)
            panes = app.screen.query(LogPanes)
            if not panes:
                continue
            counts = [p.line_count for p in panes.first().panes]
            if first is None and any(counts):
                first = time.perf_counter() - t0
            if sum(counts) >= total:
                await pilot.pause()  # drawn
                done = time.perf_counter() - t0
                return first or done, done


def cli_logs(state: Path, profile: Path) -> float:
    env = {**os.environ, "GPUCONSOLE_STATE_DIR": str(state)}
    t0 = time.perf_counter()
    res = subprocess.run(
        [sys.executable, "-m", "console", "-p", str(profile), "logs", JOB_ID],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    took = time.perf_counter() - t0
    if res.returncode != 0:
        raise SystemExit(f"gpuconsole logs failed ({res.returncode}): {res.stderr}")
    return took


def _spin() -> None:
    while True:
        pass


def fmt(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--load", type=int, default=0, help="busy-looping processes meanwhile")
    a = ap.parse_args()
    loaders = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(a.load)]
    for p in loaders:
        p.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            state, profile = Path(tmp) / "state", Path(tmp) / "lab.yaml"
            os.environ["GPUCONSOLE_STATE_DIR"] = str(state)
            os.environ["GPUCONSOLE_CONFIG_DIR"] = str(Path(tmp) / "config")
            profile.write_text(
                "name: lab\nhosts:\n  h200-a: {hostname: 127.0.0.1}\n"
                "  h200-b: {hostname: 127.0.0.1}\n"
            )
            make_state(state, a.lines)
            firsts, alls, clis = [], [], []
            for _ in range(a.runs):
                first, done = asyncio.run(open_in_app(state, a.lines))
                firsts.append(first)
                alls.append(done)
                clis.append(cli_logs(state, profile))
    finally:
        for p in loaders:
            p.kill()
    ratio = statistics.median(alls) / statistics.median(clis)
    print(f"{a.lines} lines, {a.runs} runs, {a.load} busy process(es), {os.cpu_count()} cores")
    print()
    print("| measure | gpuconsole app | `gpuconsole logs` (baseline) | ratio |")
    print("|---|---|---|---|")
    print(f"| first line on screen, s | {fmt(firsts)} | | |")
    print(f"| every line in its pane, s | {fmt(alls)} | {fmt(clis)} | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
