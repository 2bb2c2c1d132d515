"""Fixed data for the app's snapshot tests and README screenshots (scripts/screenshots.py).

The fleet comes from the H200 traces recorded on the device machine (tests/data/traces); jobs
and log lines are built here with fixed times, so nothing depends on the wall clock.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from console.app.app import GpuConsoleApp
from console.app.screens.logs import LogsScreen
from console.app.widgets.logpanes import LogPanes
from console.fleet.state import FleetState
from console.jobs.logs import JobLogLine
from console.jobs.store import JobRecord, NodeRecord, Store
from console.profiles import HostConfig, Profile
from console.service import Service
from tests.unit.test_fleet_rows import build_fleet

#: The frozen wall clock of the jobs view (Unix s): 2026-11-30 12:00:00 UTC.
NOW = 1_796_040_000.0
#: The frozen monotonic clock of the fleet view (the built state's receive clock).
MONO = 124.5
T0_NS = int((NOW - 300) * 1e9)


def _node(job_id: str, rank: int, host: str, state: str, code: int | None) -> NodeRecord:
    return NodeRecord(
        job_id,
        rank,
        host,
        f"gpuconsole-{job_id}-n{rank}",
        f"{rank:064x}",
        state,
        code,
        "2026-11-30T11:55:00Z",
        None if state == "running" else "2026-11-30T11:58:00Z",
    )


def jobs() -> list[JobRecord]:
    """Four jobs: running on 2 nodes, failed with its diagnosis, succeeded, stopped."""
    running = JobRecord(
        "ddp-x-1a2b3c",
        "ddp-x",
        "lab",
        None,
        {"image": "nvcr.io/pt"},
        "0" * 12,
        NOW - 300,
        2,
        "running",
        nodes=[
            _node("ddp-x-1a2b3c", 0, "h200-a", "running", None),
            _node("ddp-x-1a2b3c", 1, "h200-b", "running", None),
        ],
    )
    failed = JobRecord(
        "llama-ft-9f8e7d",
        "llama-ft",
        "lab",
        None,
        {},
        "1" * 12,
        NOW - 7200,
        2,
        "failed",
        exit_code=1,
        failure={
            "node": 1,
            "host": "h200-b",
            "exit_code": 1,
            "rank": 3,
            "reason": "CUDA out of memory on rank 3 (tried to allocate 2.00 GiB)",
            "fix": "lower the batch size",
        },
        nodes=[
            _node("llama-ft-9f8e7d", 0, "h200-a", "stopped", 143),
            _node("llama-ft-9f8e7d", 1, "h200-b", "failed", 1),
        ],
    )
    done = JobRecord(
        "resnet-5c4b3a",
        "resnet",
        "lab",
        None,
        {},
        "2" * 12,
        NOW - 86400 * 2,
        1,
        "succeeded",
        exit_code=0,
        nodes=[_node("resnet-5c4b3a", 0, "h200-a", "succeeded", 0)],
    )
    stopped = JobRecord(
        "sweep-2d1e0f",
        "sweep",
        "lab",
        None,
        {},
        "3" * 12,
        NOW - 5400,
        1,
        "stopped",
        nodes=[_node("sweep-2d1e0f", 0, "h200-b", "stopped", 143)],
    )
    return [running, failed, done, stopped]


def log_lines(job: JobRecord) -> list[JobLogLine]:
    """Training output of a 2-node x 2-rank job: torchrun's lines, steps, a tqdm bar written
    with carriage returns, an ANSI-coloured warning, an error line."""
    out: list[JobLogLine] = []
    t = T0_NS

    def add(node: int, rank: int | None, text: str) -> None:
        nonlocal t
        t += 7_000_000
        out.append(JobLogLine(node, job.nodes[node].host, rank, t, text))

    for node in (0, 1):
        add(node, None, "INFO:torch.distributed.run:rendezvous: c10d, world size 4")
    for node, ranks in ((0, (0, 1)), (1, (2, 3))):
        for r in ranks:
            add(
                node,
                r,
                f"rank {r}/4 local_rank {r % 2} node_rank {node} backend nccl device cuda:{r % 2}",
            )
    add(0, 0, "\x1b[33mWARNING\x1b[0m gradient checkpointing is on: expect ~30% slower steps")
    bar = "".join(
        f"\rloading shards: {p:3d}%|{'█' * (p // 10):<10}| {p // 25}/4 "
        f"[00:0{p // 25}<00:0{4 - p // 25}, 1.02it/s]"
        for p in (0, 25, 50, 75, 100)
    )
    add(0, 0, bar)
    for step in range(1, 31):
        for node, ranks in ((0, (0, 1)), (1, (2, 3))):
            for r in ranks:
                loss = 2.0 / (1 + step * 0.1) + r * 0.001
                add(
                    node,
                    r,
                    f"step {step}/500 loss {loss:.4f} lr 3.0e-04 "
                    f"samples/s {1480 + r * 3 + step % 7}",
                )
    add(1, 3, "\x1b[31mERROR\x1b[0m NCCL WARN: slow collective on rank 3 (1840 ms)")
    return out


def make_app(state_dir: Path, *, fleet: FleetState | None = None) -> GpuConsoleApp:
    """The app over a store with :func:`jobs`, frozen clocks, no hosts polled."""
    store = Store(state_dir)
    for j in jobs():
        if store.get(j.id) is None:
            store.add_job(j)
            store.update_job(j.id, exit_code=j.exit_code, failure=j.failure)
    profile = Profile(
        name="lab",
        hosts={
            "h200-a": HostConfig(hostname="127.0.0.1"),
            "h200-b": HostConfig(hostname="127.0.0.1"),
        },
    )
    service = Service(profile, store=store)
    service.fleet = fleet if fleet is not None else build_fleet(job=True)
    return GpuConsoleApp(service, clock=lambda: NOW, monotonic=lambda: MONO, live=False)


async def show_fleet(app: GpuConsoleApp) -> None:
    """Render the injected fleet state now."""
    app.refresh_fleet_view(force=True)


def show_progress(app: GpuConsoleApp) -> None:
    """The running job's progress as the service reads it from :func:`log_lines` (its GPUs
    in the fleet at $3.50/h, 300 s since its nodes started)."""
    from console.throughput import JobProgress, job_cost, throughput_of

    job = next(j for j in jobs() if j.state == "running")
    tp = throughput_of(log_lines(job), world_size=4)
    assert app.service.fleet is not None
    gpus = len(app.service.fleet.job_usage()[job.id].gpus)
    app.jobs_screen.update_progress(
        {job.id: JobProgress(job.id, tp, job_cost(gpus, 3.5, 300, tp), NOW)}
    )


async def show_logs(app: GpuConsoleApp) -> LogsScreen:
    """Push the running job's panes and feed them :func:`log_lines`."""
    job = next(j for j in jobs() if j.state == "running")
    screen = LogsScreen(job, follow=False)
    await app.push_screen(screen)
    screen.take_lines(tuple(log_lines(job)))
    while screen.backlog:  # intake is drained on the loop in short stretches
        await asyncio.sleep(0.01)
    screen.query_one(LogPanes).flush()
    return screen
