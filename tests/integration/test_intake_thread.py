"""The log intake on its own thread (``Service.start_follow(thread=True)``, what the app uses):
every line of a real 2-node job over SSH, events delivered on the subscriber's loop, the
job reconciled at the end, nothing left running after close. Plus :class:`LoopThread` itself."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections import Counter

import pytest

from console.events import Event, FollowStateChanged, JobChanged, LogLinesReceived
from console.jobs.store import Store
from console.loopthread import LoopThread
from console.profiles import load_profile_file
from console.service import Service
from tests.integration.conftest import CLI


async def test_loop_thread_runs_cancels_and_stops() -> None:
    lt = LoopThread("test-loop")
    main = threading.get_ident()

    async def where() -> int:
        await asyncio.sleep(0)
        return threading.get_ident()

    assert await lt.run(where()) not in (main, None)

    async def boom() -> None:
        raise ValueError("x")

    with pytest.raises(ValueError, match="x"):
        await lt.run(boom())

    cleaned: list[str] = []

    async def slow() -> None:
        try:
            await asyncio.sleep(60)
        finally:
            await asyncio.sleep(0.05)  # its finally still runs to the end
            cleaned.append("done")

    task = asyncio.create_task(lt.run(slow()))
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cleaned == ["done"]  # cancelling the caller waited for the coroutine to end
    assert lt.running
    await asyncio.to_thread(lt.stop)
    assert not lt.running
    assert not [t for t in threading.enumerate() if t.name == "test-loop"]


async def test_threaded_follow_of_a_two_node_job(cli: CLI) -> None:
    spec = cli.spec(f"intake-{uuid.uuid4().hex[:4]}", nodes=["a", "b"],
                    args=["--steps", "30", "--step-sleep", "0.05", "--out", "/out",
                          "--workers", "0"])
    res = cli.run("submit", str(spec))
    assert res.returncode == 0, res.stderr
    job_id = res.stdout.strip()

    svc = Service(load_profile_file(cli.profile), store=Store(cli.state_dir))
    main = threading.get_ident()
    seen: list[tuple[Event, int]] = []
    svc.bus.subscribe(lambda ev: seen.append((ev, threading.get_ident())))
    try:
        job = svc.find_job(job_id)
        follow = svc.start_follow(job, thread=True)
        final = await asyncio.wait_for(follow.task, 180)
        assert final is not None and final.state == "succeeded"
        assert any(t.name == "gpuconsole-intake" for t in threading.enumerate())

        followed = [ln for ev, _ in seen if isinstance(ev, LogLinesReceived)
                    for ln in ev.lines]
        everything = await svc.read_logs(svc.find_job(job_id))
        # every line, once, in each node's order
        for node in (0, 1):
            mine = [ln.text for ln in followed if ln.node_rank == node]
            assert mine == [ln.text for ln in everything if ln.node_rank == node]
            assert Counter(ln.rank for ln in followed if ln.node_rank == node)[None] >= 1
        ranks = {ln.rank for ln in followed if "done steps 30" in ln.text}
        assert ranks == {0, 1, 2, 3}
        # events reached the subscriber on its own loop's thread
        assert {tid for _, tid in seen} == {main}
        ended = {ev.node_rank for ev, _ in seen
                 if isinstance(ev, FollowStateChanged) and ev.state == "ended"}
        assert ended == {0, 1}
        assert any(isinstance(ev, JobChanged) and ev.job.state == "succeeded"
                   for ev, _ in seen)
    finally:
        await svc.close()
    assert not [t for t in threading.enumerate() if t.name == "gpuconsole-intake"]
