"""The background log follow (``Service.start_follow``): on this loop, and in the intake child
process the app uses (``where="process"``): every line of a real 2-node job over SSH, events
delivered on the subscriber's loop, the job reconciled at the end, nothing left running after
close."""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
from collections import Counter

import pytest

from console.events import Event, FollowStateChanged, JobChanged, LogLinesReceived
from console.jobs.logbuffer import SEQ_BLOCK, display_lines
from console.jobs.store import Store
from console.profiles import load_profile_file
from console.service import Intake, Service
from tests.integration.conftest import CLI


def _intake_children() -> list[int]:
    """This process's children running ``console.intake``."""
    pids = []
    for tid in os.listdir(f"/proc/{os.getpid()}/task"):
        try:
            kids = open(f"/proc/{os.getpid()}/task/{tid}/children").read().split()
        except OSError:
            continue
        for pid in kids:
            try:
                cmd = open(f"/proc/{pid}/cmdline", "rb").read()
            except OSError:
                continue
            if b"console.intake" in cmd:
                pids.append(int(pid))
    return pids


@pytest.mark.parametrize("where", ["loop", "process"])
async def test_background_follow_of_a_two_node_job(cli: CLI, where: Intake) -> None:
    spec = cli.spec(
        f"intake-{uuid.uuid4().hex[:4]}",
        nodes=["a", "b"],
        args=["--steps", "30", "--step-sleep", "0.05", "--out", "/out", "--workers", "0"],
    )
    res = cli.run("submit", str(spec))
    assert res.returncode == 0, res.stderr
    job_id = res.stdout.strip()

    svc = Service(load_profile_file(cli.profile), store=Store(cli.state_dir))
    main = threading.get_ident()
    seen: list[tuple[Event, int]] = []
    svc.bus.subscribe(lambda ev: seen.append((ev, threading.get_ident())))
    try:
        job = svc.find_job(job_id)
        follow = svc.start_follow(job, where=where)
        final = await asyncio.wait_for(follow.task, 180)
        assert final is not None and final.state == "succeeded"
        assert not _intake_children()  # it ended with the job's streams

        followed = [ln for ev, _ in seen if isinstance(ev, LogLinesReceived) for ln in ev.lines]
        everything = await svc.read_logs(svc.find_job(job_id))
        # every line, once, in each node's order
        for node in (0, 1):
            mine = [ln.text for ln in followed if ln.node_rank == node]
            assert mine == [ln.text for ln in everything if ln.node_rank == node]
            assert Counter(ln.rank for ln in followed if ln.node_rank == node)[None] >= 1
        ranks = {ln.rank for ln in followed if "done steps 30" in ln.text}
        assert ranks == {0, 1, 2, 3}
        if where == "process":  # the child also shaped them, exactly as the app would
            batches = [ev for ev, _ in seen if isinstance(ev, LogLinesReceived)]
            assert all(ev.shown is not None and len(ev.shown) == len(ev.lines) for ev in batches)
            for ev in batches:
                assert ev.shown is not None
                for line, rows in zip(ev.lines, ev.shown):
                    assert [r[1:] for r in rows] == [r[1:] for r in display_lines(line)]
            # numbered from a block of the child's own, above this process's numbers: the
            # console keeps them as they come
            seqs = [r[0] for ev in batches if ev.shown for rows in ev.shown for r in rows]
            assert len(set(seqs)) == len(seqs)
            assert min(seqs) >= SEQ_BLOCK and max(seqs) < min(seqs) + SEQ_BLOCK
            assert all(r[0] < SEQ_BLOCK for r in display_lines(followed[0]))
        # events reached the subscriber on its own loop's thread
        assert {tid for _, tid in seen} == {main}
        ended = {
            ev.node_rank
            for ev, _ in seen
            if isinstance(ev, FollowStateChanged) and ev.state == "ended"
        }
        assert ended == {0, 1}
        assert any(isinstance(ev, JobChanged) and ev.job.state == "succeeded" for ev, _ in seen)
    finally:
        await svc.close()
    assert not _intake_children()  # the intake process ended with the follow


async def test_closing_a_process_follow_ends_the_child(cli: CLI) -> None:
    spec = cli.spec(
        f"intake-close-{uuid.uuid4().hex[:4]}",
        args=["--steps", "2000", "--step-sleep", "0.05", "--out", "/out", "--workers", "0"],
    )
    res = cli.run("submit", str(spec))
    assert res.returncode == 0, res.stderr
    job_id = res.stdout.strip()
    svc = Service(load_profile_file(cli.profile), store=Store(cli.state_dir))
    got: list[LogLinesReceived] = []
    svc.bus.subscribe(lambda ev: got.append(ev) if isinstance(ev, LogLinesReceived) else None)
    try:
        svc.start_follow(svc.find_job(job_id), where="process")
        for _ in range(600):
            if any("step " in ln.text for ev in got for ln in ev.lines):
                break
            await asyncio.sleep(0.1)
        assert len(_intake_children()) == 1
        await svc.stop_follow(job_id)
        assert not _intake_children()  # closing the follow ended the child at once
    finally:
        await svc.close()
        cli.run("stop", job_id, "--grace", "1")
