"""A launch is all or none up to the moment it is complete: Ctrl-C while the store records the
started containers (the last step of a launch) undoes it, and ``on_started`` is called only
once nothing can undo it any more. The engine and the store are fakes (FakeEngine, FakeStore:
no Docker or SQLite needed to hold the task at that exact await; the real path over SSH and
Docker is tests/integration/test_submit_interrupt.py)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from console.jobs.launch import _create_and_start


class FakeEngine:
    """Records what a launch asks of one host's Docker engine."""

    def __init__(self) -> None:
        self.created: list[str] = []
        self.started: list[str] = []
        self.removed: list[str] = []

    async def create(self, container: Any) -> str:
        self.created.append(container.name)
        return f"id-{container.name}"

    async def start(self, cid: str) -> None:
        self.started.append(cid)

    async def remove(self, cid: str) -> None:
        self.removed.append(cid)


class FakeStore:
    """A store whose ``update_nodes`` waits for :attr:`gate`: the task is held right there."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.reached = asyncio.Event()
        self.jobs: list[str] = []
        self.deleted: list[str] = []
        self.updated: list[dict[str, Any]] = []

    async def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        out = fn(*args, **kwargs)
        return await out if asyncio.iscoroutine(out) else out

    def add_job(self, record: Any) -> bool:
        self.jobs.append(record.id)
        return True

    async def update_nodes(self, nodes: Any) -> None:
        self.reached.set()
        await self.gate.wait()

    def update_job(self, job_id: str, **fields: Any) -> None:
        self.updated.append({"id": job_id, **fields})

    def delete_job(self, job_id: str) -> None:
        self.deleted.append(job_id)


def _plan() -> Any:
    nodes = tuple(
        SimpleNamespace(
            node_rank=r, host=h, container=SimpleNamespace(name=f"gpuconsole-j-abc123-n{r}")
        )
        for r, h in ((0, "a"), (1, "b"))
    )
    return SimpleNamespace(
        job_id="j-abc123",
        name="j",
        runtime="docker",
        spec_hash="0" * 12,
        created_at=1.0,
        nodes=nodes,
    )


def _loaded() -> Any:
    spec = SimpleNamespace(model_dump=lambda mode: {"name": "j"})
    return SimpleNamespace(spec=spec, env={"A": "1"}, secret_env=set())


async def test_ctrl_c_while_the_started_launch_is_recorded_undoes_it() -> None:
    engines = {"a": FakeEngine(), "b": FakeEngine()}
    session = SimpleNamespace(
        profile=SimpleNamespace(name="p", source="p.yaml"), engine=lambda host: engines[host]
    )
    store = FakeStore()
    said: list[str] = []
    task = asyncio.create_task(
        _create_and_start(session, store, _loaded(), _plan(), said.append)  # type: ignore[arg-type]
    )
    await asyncio.wait_for(store.reached.wait(), 5)  # both containers started, being recorded
    assert [e.started for e in engines.values()] == [
        ["id-gpuconsole-j-abc123-n0"],
        ["id-gpuconsole-j-abc123-n1"],
    ]
    task.cancel()  # Ctrl-C there
    await asyncio.sleep(0)
    store.gate.set()  # the record in flight finishes, then the launch is undone
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [e.removed for e in engines.values()] == [e_.started for e_ in engines.values()]
    assert store.deleted == ["j-abc123"] and said == []


async def test_a_complete_launch_says_so_before_it_returns() -> None:
    engines = {"a": FakeEngine(), "b": FakeEngine()}
    session = SimpleNamespace(
        profile=SimpleNamespace(name="p", source="p.yaml"), engine=lambda host: engines[host]
    )
    store = FakeStore()
    store.gate.set()
    said: list[str] = []
    got = await _create_and_start(session, store, _loaded(), _plan(), said.append)  # type: ignore[arg-type]
    assert got == "j-abc123" and said == ["j-abc123"]
    assert store.updated == [{"id": "j-abc123", "state": "pending", "launcher": None}]
    assert all(e.removed == [] for e in engines.values())
