"""What taking stacks costs a running job: its training throughput with and without
``gpuconsole stacks`` taken again and again.

A real job on the test hosts (``scripts/testhosts/up``): scripts/examples/train_ddp.py under
torchrun, 2 nodes x 2 ranks (gloo on CPU), in Docker containers. Its ranks print
``samples/s`` every step (each rank's own samples over its step's wall time). The script
reads the job's log through ``gpuconsole logs`` and compares the median samples/s of the
steps taken while nothing else ran (``--seconds`` s) with those taken while ``gpuconsole
stacks`` ran back to back (each run: SSH, a sidecar per node, py-spy pausing every process
for its read), then again without, to see the job come back::

    .venv/bin/python scripts/bench/stacks_cost.py [--seconds 40] [--every 10]

Prints a markdown table: the phases, their step count and median samples/s per rank, the
ratio to the first quiet phase, and how long one ``stacks`` took.
"""

from __future__ import annotations

import argparse
import calendar
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
PROFILE = Path(
    os.environ.get("GPUCONSOLE_TEST_PROFILE", "/var/tmp/gpuconsole-testhosts/profile.yaml")
)
STEP = re.compile(r"^\[n\d r\d\] step (\d+)/\d+ loss \S+ samples/s ([0-9.]+)")


def gc(state: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPUCONSOLE_STATE_DIR": str(state)}
    res = subprocess.run(
        [sys.executable, "-m", "console", "-p", str(PROFILE), *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    if check and res.returncode not in (0, 3):
        raise SystemExit(f"gpuconsole {' '.join(args)} failed ({res.returncode}): {res.stderr}")
    return res


def samples(state: Path, job: str, t0: float, t1: float) -> list[float]:
    """samples/s of the steps logged between t0 and t1 (wall clock, from `logs -t`)."""
    out = gc(state, "logs", "-t", job).stdout
    got = []
    for line in out.splitlines():
        stamp, _, text = line.partition(" ")
        try:
            ts = calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S"))
        except ValueError:
            continue
        m = STEP.match(text)
        if m and t0 <= ts < t1:
            got.append(float(m.group(2)))
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=40.0, help="length of each phase")
    ap.add_argument(
        "--every",
        type=float,
        default=0.0,
        help="seconds from one stacks to the next (0: back to back)",
    )
    a = ap.parse_args()
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"stacks-cost-{os.getpid()}"
    state = tmp / "state"
    tmp.mkdir(parents=True)
    spec = tmp / "job.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "name": "stacks-cost",
                "image": "gpuconsole/torch:2.13.0-cpu",
                "nodes": ["a", "b"],
                "gpus_per_node": 0,
                "nproc_per_node": 2,
                "workdir": str(ROOT / "scripts" / "examples"),
                "script": "train_ddp.py",
                "args": ["--steps", "100000", "--out", "/tmp/out", "--workers", "0"],
                "shm_size": "256m",
            }
        )
    )
    job = gc(state, "submit", str(spec)).stdout.strip()
    try:
        while not any(
            STEP.match(ln.partition(" ")[2])
            for ln in gc(state, "logs", "-t", job).stdout.splitlines()
        ):
            time.sleep(1)
        time.sleep(5)  # past the first steps
        phases: list[tuple[str, float, float, list[float]]] = []
        t0 = time.time()
        time.sleep(a.seconds)
        phases.append(("quiet", t0, time.time(), []))
        t0 = time.time()
        took: list[float] = []
        while time.time() - t0 < a.seconds:
            s = time.monotonic()
            gc(state, "stacks", job)
            took.append(time.monotonic() - s)
            time.sleep(max(0.0, a.every - (time.monotonic() - s)))
        how = f"every {a.every:g} s" if a.every else "back to back"
        phases.append((f"`stacks` {how} ({len(took)} runs)", t0, time.time(), took))
        t0 = time.time()
        time.sleep(a.seconds)
        phases.append(("quiet again", t0, time.time(), []))
        time.sleep(3)  # the last lines reach the log
        base = statistics.median(samples(state, job, phases[0][1], phases[0][2]))
        print(f"2 nodes x 2 ranks, gloo on CPU, {os.cpu_count()} cores, phases of {a.seconds:g} s")
        print()
        print("| phase | steps | samples/s per rank (median) | ratio | one `stacks` (median s) |")
        print("|---|---|---|---|---|")
        for name, p0, p1, runs in phases:
            got = samples(state, job, p0, p1)
            med = statistics.median(got) if got else float("nan")
            one = f"{statistics.median(runs):.2f}" if runs else ""
            print(f"| {name} | {len(got)} | {med:.1f} | {med / base:.3f} | {one} |")
    finally:
        gc(state, "stop", job, "--grace", "1", check=False)
        gc(state, "rm", job, check=False)


if __name__ == "__main__":
    main()
