"""The GPU-hours history (console/history.py): bytes on disk per GPU per day, and CPU per sample
at 512 hosts x 8 GPUs, beside what the console already spends on the same samples.

- **disk**: one day (1,440 minutes) of rows for ``--gpus`` GPUs written through
  :class:`HistoryStore` (8 GPUs a host, 4 jobs and 4 users per host, utilization, memory and
  power varying), then the file's size (``page_count - freelist_count`` pages): bytes per GPU
  per day as minute rows, and again once rolled up into hour rows (what rows older than
  ``MINUTE_DAYS`` become); what 512 x 8 GPUs write a day, and how many days the default size
  bound holds;
- **CPU**: ``--rounds`` rounds (one a second, as the fleet samples) of 512 hosts' samples, each
  8 GPUs with a process on each (a real H200 record as the template, processes in containers
  mapped to jobs), through ``HistoryRecorder.on_sample`` (what each sample now costs more),
  against ``FleetState.on_sample`` (what the console already does per sample): us per host
  sample, and % of one core at one round a second. The writer thread's time is included (its
  inserts run in the same process; CPU time is the process's).

``--load N`` keeps N busy-looping processes running while it measures (a busy machine, as
users' machines are). Run::

    .venv/bin/python scripts/bench/history_cost.py [--gpus 512] [--rounds 120] [--load 1]
"""

from __future__ import annotations

import argparse
import copy
import json
import multiprocessing
import os
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from console.fleet.state import ContainerJob, FleetState  # noqa: E402
from console.history import (  # noqa: E402
    MAX_BYTES,
    MINUTE_DAYS,
    GpuMinute,
    HistoryRecorder,
    HistoryStore,
)
from remote.telemetry.schema import read_sample  # noqa: E402

TRACE = ROOT / "tests" / "data" / "traces" / "h200-load.jsonl"


def _spin() -> None:
    while True:
        pass


def _used(path: Path) -> tuple[int, int, int]:
    """(bytes in use, minute rows, hour rows)."""
    import sqlite3

    db = sqlite3.connect(path)
    pages, free, size = (
        db.execute(f"PRAGMA {p}").fetchone()[0]
        for p in ("page_count", "freelist_count", "page_size")
    )
    mins = db.execute("SELECT COUNT(*) FROM gpu_minute").fetchone()[0]
    hours = db.execute("SELECT COUNT(*) FROM gpu_hour").fetchone()[0]
    db.close()
    return (pages - free) * size, mins, hours


def disk(gpus: int) -> dict[str, float]:
    """A day of minute rows, its bytes; then the same day rolled up into hour rows."""
    rng = random.Random(1)
    with tempfile.TemporaryDirectory() as d:
        store = HistoryStore(Path(d))
        store._last_prune = time.monotonic()  # no roll-up while the day is written
        start = int(time.time() // 86400 - 10) * 1440  # a whole day, ten days ago
        for hour in range(24):
            rows = []
            for minute in range(start + hour * 60, start + hour * 60 + 60):
                for i in range(gpus):
                    host, gpu = f"gpu-node-{i // 8:03d}", i % 8
                    job = f"job-{i // 8:03d}-{gpu // 2}" if rng.random() < 0.9 else None
                    util = rng.choice([0.0, 35.5, 87.25, 99.0, 100.0])
                    rows.append(
                        GpuMinute(
                            minute,
                            host,
                            gpu,
                            job,
                            f"user{gpu % 4}" if job else None,
                            60,
                            60 if job else 0,
                            60 if util >= 5 else 0,
                            util,
                            rng.randrange(0, 143_000) if job else 0,
                            round(rng.uniform(75, 700), 1),
                        )
                    )
            store.write(gpus=rows)
            while store._queue.qsize() > 4:  # the bench writes a day at once; a console a minute
                time.sleep(0.01)
        store.close(timeout=600)
        minute_bytes, mins, _ = _used(store.path)
        store.retention_days = 3650
        store.prune(now=(start + 1440) * 60 + MINUTE_DAYS * 86400 + 3600)
        hour_bytes, _, hours = _used(store.path)
    per_min_day = minute_bytes / gpus
    per_hour_day = hour_bytes / gpus
    fleet = 4096
    held_days = MINUTE_DAYS + (MAX_BYTES - per_min_day * fleet * MINUTE_DAYS) / (
        per_hour_day * fleet
    )
    return {
        "gpus": gpus,
        "minute_rows": mins,
        "bytes_per_minute_row": minute_bytes / mins,
        "minute_bytes_per_gpu_day": per_min_day,
        "hour_rows": hours,
        "hour_bytes_per_gpu_day": per_hour_day,
        "mib_per_day_512x8_minutes": per_min_day * fleet / 2**20,
        "mib_per_day_512x8_hours": per_hour_day * fleet / 2**20,
        "days_in_bound_512x8": held_days,
    }


def fleet_samples(hosts: int) -> list[dict[str, object]]:
    base = json.loads(TRACE.read_text().splitlines()[0])
    g0 = base["gpus"][0]
    out = []
    for h in range(hosts):
        s = copy.deepcopy(base)
        s["gpus"] = []
        s["processes"] = []
        for i in range(8):
            g = copy.deepcopy(g0)
            g["index"], g["pci_bus_id"] = i, f"00000000:{0x18 + i:02X}:00.0"
            s["gpus"].append(g)
            s["processes"].append(
                {
                    "gpu_index": i,
                    "gpu_uuid": None,
                    "pid": 1000 + i,
                    "used_mib": 17000,
                    "type": "compute",
                    "user": "root",
                    "command": "python train.py",
                    "container_id": f"{h:032x}{i // 2:032x}",
                    "rank": i,
                    "local_rank": i,
                }
            )
        out.append(read_sample(s))  # normalised once, as the stream does
    return out


def cpu(hosts: int, rounds: int) -> dict[str, float]:
    samples = fleet_samples(hosts)
    names = [f"gpu-node-{h:03d}" for h in range(hosts)]
    containers = {
        f"{h:032x}{j:032x}": ContainerJob(f"job-{h}-{j}", "job", 0)
        for h in range(hosts)
        for j in range(4)
    }
    t0 = float(samples[0]["host_time"])  # type: ignore[arg-type]

    def run(with_history: bool) -> float:
        state = FleetState(names)
        state.set_containers(containers)
        with tempfile.TemporaryDirectory() as d:
            store = HistoryStore(Path(d))
            rec = HistoryRecorder(store)
            c0 = time.process_time()
            for r in range(rounds):
                for name, s in zip(names, samples):
                    s["host_time"] = t0 + r
                    if with_history:
                        rec.on_sample(name, s, state)  # type: ignore[arg-type]
                    else:
                        state.on_sample(name, s, rx=0.0)  # type: ignore[arg-type]
            rec.flush()
            store.close(timeout=600)
            return time.process_time() - c0

    fleet_s = run(False)
    hist_s = run(True)
    n = hosts * rounds
    return {
        "hosts": hosts,
        "rounds": rounds,
        "fleet_us_per_sample": fleet_s / n * 1e6,
        "history_us_per_sample": hist_s / n * 1e6,
        "ratio": hist_s / fleet_s,
        "history_core_pct_at_1hz": hist_s / rounds * 100,
        "fleet_core_pct_at_1hz": fleet_s / rounds * 100,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", type=int, default=512, help="GPUs for the disk day")
    ap.add_argument("--hosts", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=120)
    ap.add_argument("--load", type=int, default=0, help="busy-looping processes meanwhile")
    args = ap.parse_args()
    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(args.load)]
    for p in spinners:
        p.start()
    try:
        print(f"load: {args.load} busy loop(s); loadavg {os.getloadavg()[0]:.2f}")
        d = disk(args.gpus)
        print(json.dumps(d, indent=2))
        c = cpu(args.hosts, args.rounds)
        print(json.dumps(c, indent=2))
    finally:
        for p in spinners:
            p.terminate()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
