"""The host kernel log in a failed job's diagnosis, over the real sshd test hosts.

The test hosts have no GPU and no nvidia-smi: the kernel log read finds no NVRM line (or is
refused, depending on the user and the journal), which the console logs; a failed job's
reason stays the script's exception, and explaining it stays fast.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import pytest

from console.backends.containers import explain_failure
from console.jobs.store import FailureRecord, NodeRecord
from console.profiles import load_profile_file
from console.session import Session
from remote.kernellog import (
    KernelLines,
    NodeGpus,
    node_gpus,
    read_gpu_kernel_lines,
    split_by_gpu,
)
from tests.integration.conftest import CLI
from tests.integration.test_jobs import job_named, the_job

#: Seconds a kernel log read or a failure's explanation may take on the loopback hosts.
FAST_S = 10.0


def test_kernel_read_over_ssh_finds_nothing_or_says_why(test_profile: Path) -> None:
    async def read() -> tuple[KernelLines, NodeGpus, float]:
        async with Session(load_profile_file(test_profile)) as session:
            transport = await session.connected("a")
            t0 = time.monotonic()
            now = time.time()
            kernel = await read_gpu_kernel_lines(transport, now - 600, now + 60)
            gpus = await node_gpus(transport, "0")
            return kernel, gpus, time.monotonic() - t0

    kernel, gpus, took = asyncio.run(read())
    assert took < FAST_S
    # read (journalctl or dmesg, no NVRM line: no GPU here) or refused with the reason
    assert (kernel.source is not None) != (kernel.reason is not None), kernel
    if kernel.reason is not None:
        assert kernel.reason.startswith("kernel log unreadable: journalctl: ")
    assert split_by_gpu(kernel, gpus).own_lines == ()
    assert gpus.bus_ids is None and gpus.reason is not None
    assert gpus.reason.startswith("nvidia-smi: ")


def test_failed_job_reason_stays_the_exception_and_explaining_is_fast(
    cli: CLI, test_profile: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spec = cli.spec(
        "kfail",
        args=[
            "--steps",
            "50",
            "--out",
            "/out",
            "--workers",
            "1",
            "--step-sleep",
            "0.1",
            "--fail-rank",
            "1",
            "--fail-step",
            "2",
        ],
    )
    res = cli.run("submit", str(spec), "--follow")
    assert res.returncode == 1, res.stdout + res.stderr
    job = the_job(cli, job_named(cli, "kfail"))
    failure = job["failure"]
    assert "RuntimeError: injected failure on rank 1 at step 2" in failure["reason"]
    assert failure["kind"] == "exception"
    assert not any("host logged Xid" in c for c in failure.get("consequences", []))
    (n,) = job["nodes"]
    node = NodeRecord(
        job_id=job["id"],
        node_rank=0,
        host=n["host"],
        container_name=n["container"],
        container_id=n["container_id"],
        state="failed",
        exit_code=n["exit_code"],
        started_at=n["started_at"],
        finished_at=n["finished_at"],
    )
    assert node.started_at and node.finished_at

    async def explain() -> tuple[FailureRecord, float]:
        async with Session(load_profile_file(test_profile)) as session:
            t0 = time.monotonic()
            got = await explain_failure(session, node)
            return got, time.monotonic() - t0

    with caplog.at_level(logging.INFO, logger="gpuconsole.status"):
        got, took = asyncio.run(explain())
    assert took < FAST_S
    assert got["reason"] == failure["reason"]
    assert got["kind"] == "exception"
    said = [r.getMessage() for r in caplog.records if "host kernel log" in r.getMessage()]
    assert len(said) == 1, caplog.text
    assert ": 0 Xid event(s)" in said[0] or "kernel log unreadable" in said[0]
    assert all(
        r.levelno < logging.WARNING for r in caplog.records if r.name.startswith("gpuconsole")
    )
