"""Training-progress parsing (:func:`console.progress.parse_progress`) against ``grep -E`` of
the same words, on a real-shaped log.

The log: ``--mb`` MiB of lines drawn from the real lines of tests/data/progress/cases.yaml
(progress of every family, and lines that are not progress) mixed with the lines a training
log is mostly made of (NCCL INFO, Python warnings and logging, torchrun's rank prefixes), one
progress line in ten, written once to a temporary file.

- gpuconsole: one Python process reads the file line by line and parses each line (what a
  log follow would do per line), lines/s;
- baseline: ``grep -E -c`` of the words the parser keys on (``step|iter|it/s|s/it|loss|
  samples/s|tok|tps|tflops|mfu|epoch``), lines/s: what finding the candidate lines costs
  without reading them.

The target: parsing is never the slowest stage of a log follow (docs/benchmarks.md, "Log
panes under load": a follow delivers 8 x 2,000 lines/s). Measured under load too: ``--load N``
keeps N busy-looping processes running. Run::

    .venv/bin/python scripts/bench/progress_parse.py [--mb 1024] [--runs 3] [--load 1]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from console.progress import parse_progress  # noqa: E402

NOISE = [
    "[rank0]:node1:1234:1290 [0] NCCL INFO Channel 02/32 :    0   1   2   3   4   5   6   7",
    "[rank3]:/opt/venv/lib/python3.11/site-packages/torch/utils/checkpoint.py:91: UserWarning: "
    "None of the inputs have requires_grad=True. Gradients will be None",
    "[rank1]:2026-12-06 05:01:02,123 - INFO - saving checkpoint to /ckpt/step_1000",
    "[rank2]:[W1206 05:01:02.3456 ProcessGroupNCCL.cpp:4561] Warning: TORCH_NCCL_AVOID_RECORD_"
    "STREAMS=1 has no effect for point-to-point collectives.",
    '[default0]:  File "/workspace/train.py", line 88, in <module>',
    "[rank0]:wandb: Syncing run fancy-sky-12",
]
GREP = r"step|iter|it/s|s/it|loss|samples/s|tok|tps|tflops|mfu|epoch"


def _spin() -> None:
    while True:
        pass


def make_log(path: Path, mb: int) -> int:
    cases = yaml.safe_load((ROOT / "tests" / "data" / "progress" / "cases.yaml").read_text())
    progress = [c["line"] for c in cases]
    rng = random.Random(7)
    target, written, lines = mb << 20, 0, 0
    with path.open("w") as f:
        chunk = []
        while written < target:
            for _ in range(10_000):
                line = rng.choice(progress) if rng.random() < 0.1 else rng.choice(NOISE)
                chunk.append(line)
                written += len(line.encode()) + 1
            f.write("\n".join(chunk) + "\n")
            lines += len(chunk)
            chunk = []
    return lines


def parse_all(path: Path) -> tuple[float, int]:
    t0 = time.perf_counter()
    found = 0
    with path.open(encoding="utf-8", errors="replace") as f:
        for line in f:
            if parse_progress(line) is not None:
                found += 1
    return time.perf_counter() - t0, found


def grep_all(path: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run(["grep", "-E", "-c", GREP, str(path)], check=False, capture_output=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=1024)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--load", type=int, default=0)
    a = ap.parse_args()
    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(a.load)]
    for s in spinners:
        s.start()
    try:
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "train.log"
            lines = make_log(path, a.mb)
            size = path.stat().st_size
            ours, base, found = [], [], 0
            for _ in range(a.runs):
                t, found = parse_all(path)
                ours.append(lines / t)
                base.append(lines / grep_all(path))
    finally:
        for s in spinners:
            s.terminate()
    mo, mb_ = statistics.median(ours), statistics.median(base)
    print(
        f"{size / 2**20:.0f} MiB, {lines:,} lines ({found:,} progress), {a.runs} runs, "
        f"load {a.load}, {os.cpu_count()} CPUs"
    )
    print()
    print("| side | lines/s (median) | min-max |")
    print("|---|---|---|")
    print(f"| gpuconsole parse_progress | {mo:,.0f} | {min(ours):,.0f}-{max(ours):,.0f} |")
    print(f"| grep -E -c (baseline) | {mb_:,.0f} | {min(base):,.0f}-{max(base):,.0f} |")
    print(f"| ratio gpuconsole / grep | {mo / mb_:.3f} | |")
    print(f"| vs a follow's 8 x 2,000 lines/s | {mo / 16_000:.0f}x | |")


if __name__ == "__main__":
    main()
