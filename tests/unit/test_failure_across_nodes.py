"""A failed job's root cause is looked for on every node
(console/backends/containers.explain_failure).

The logs are real reports from the corpus (tests/data/diagnose/corpus/); the engine is a
fake (``FakeEngineServingLogs``) that serves them, because no container exists here.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from console.backends.containers import explain_failure
from console.jobs.status import failure_lines
from console.jobs.store import NodeRecord

DATA = Path(__file__).resolve().parents[1] / "data"


@dataclass
class _Line:
    text: str


@dataclass
class _Info:
    oom_killed: bool = False


class FakeEngineServingLogs:
    """Serves a fixed log per container id; no error file."""

    def __init__(self, logs: dict[str, str], oom: bool = False) -> None:
        self._logs, self._oom = logs, oom

    async def inspect(self, container_id: str) -> _Info:
        return _Info(self._oom)

    async def logs(self, container_id: str, *, tail: int | None = None) -> AsyncIterator[_Line]:
        for line in self._logs[container_id].splitlines()[-(tail or 10**9) :]:
            yield _Line(line)

    async def read_file(self, container_id: str, path: str) -> bytes | None:
        return None


class FakeSessionOfOneEngine:
    def __init__(self, engine: FakeEngineServingLogs) -> None:
        self._engine = engine

    def engine(self, host: str) -> FakeEngineServingLogs:
        return self._engine


def _node(rank: int, host: str, code: int) -> NodeRecord:
    return NodeRecord(
        job_id="j1",
        node_rank=rank,
        host=host,
        container_name=f"j1-n{rank}",
        container_id=f"c{rank}",
        state="failed",
        exit_code=code,
    )


def test_root_cause_on_another_node_wins() -> None:
    # node 1 ended first, killed by SIGABRT in its summary; node 0's log holds the CUDA
    # illegal memory access that explains it (handed case trun-12).
    cuda = (DATA / "cases" / "torchrun" / "trun-12.txt").read_text()
    abort = (DATA / "cases" / "torchrun" / "trun-02.txt").read_text()
    session = FakeSessionOfOneEngine(FakeEngineServingLogs({"c0": cuda, "c1": abort}))
    first, other = _node(1, "b", 1), _node(0, "a", 1)
    got = asyncio.run(explain_failure(session, first, [other, first]))  # type: ignore[arg-type]
    assert got["kind"] == "cuda_illegal_memory_access"
    assert (got["node"], got["host"], got["rank"]) == (0, "a", 2)
    # the node whose exit was explained: a reconcile that finds node 1 first failed again
    # does not explain it again (it did so on every refresh while "node" was compared)
    assert got["failed_node"] == 1
    assert got["consequences"][0].startswith("node 1: sigabrt: ")
    text = "\n".join(failure_lines(got))
    assert text.startswith(
        "first failure: node 0 on a rank 2, exit code 1: Rank 2 (process "
        "group 0, default_pg) hit a CUDA illegal memory access"
    )
    assert "  then: node 1: sigabrt" in text


def test_own_node_kept_when_others_say_less() -> None:
    cuda = (DATA / "cases" / "torchrun" / "trun-12.txt").read_text()
    session = FakeSessionOfOneEngine(FakeEngineServingLogs({"c0": "all fine\n", "c1": cuda}))
    first = _node(1, "b", 1)
    got = asyncio.run(explain_failure(session, first, [_node(0, "a", 143)]))  # type: ignore[arg-type]
    assert (got["kind"], got["node"], got["rank"]) == ("cuda_illegal_memory_access", 1, 2)
    assert "consequences" not in got


def test_oom_killed_container_beats_a_bare_sigkill() -> None:
    sigkill = (DATA / "cases" / "torchrun" / "trun-01.txt").read_text()
    session = FakeSessionOfOneEngine(FakeEngineServingLogs({"c0": sigkill}, oom=True))
    got = asyncio.run(explain_failure(session, _node(0, "a", 137)))  # type: ignore[arg-type]
    assert got["kind"] == "oom_killed"
    assert "OOM killer" in got["reason"]
    assert got["consequences"] and "SIGKILL" in got["consequences"][0]


def test_root_cause_on_a_torn_down_node_keeps_the_failed_nodes_code() -> None:
    # node 0 exited 1 first (its ranks lost their peer); node 1, whose log holds the root
    # cause, was torn down by the gang (exit 75, remote.gang.TEARDOWN_EXIT_CODE): the job's
    # exit code is node 0's 1, not the teardown's 75
    from remote.gang import TEARDOWN_EXIT_CODE

    cuda = (DATA / "cases" / "torchrun" / "trun-12.txt").read_text()
    session = FakeSessionOfOneEngine(FakeEngineServingLogs({"c0": "peer gone\n", "c1": cuda}))
    first, torn = _node(0, "a", 1), _node(1, "b", TEARDOWN_EXIT_CODE)
    got = asyncio.run(explain_failure(session, first, [first, torn]))  # type: ignore[arg-type]
    assert (got["kind"], got["node"], got["failed_node"]) == ("cuda_illegal_memory_access", 1, 0)
    assert got["exit_code"] == 1
    # a cause node with a real code of its own gives it
    torn.exit_code = 134
    got = asyncio.run(explain_failure(session, first, [first, torn]))  # type: ignore[arg-type]
    assert got["exit_code"] == 134


def test_a_killed_node_is_not_explained_by_the_teardown_of_another() -> None:
    # node 1 was killed (docker kill -s KILL, the OOM killer): its log ends with training
    # lines; node 0, stopped by the console's teardown, logged its agent's SIGTERM. That
    # SIGTERM is how node 0 ended, never the cause: the failure stays node 1's exit 137
    steps = "".join(f"[rank2]: step {i}/500 loss 0.5\n" for i in range(20))
    stopped = (
        "[2026-12-07 00:10:00,000] torch.distributed.elastic.agent.server.api: [WARNING] "
        "Received Signals.SIGTERM death signal, shutting down workers\n"
        "torch.distributed.elastic.multiprocessing.api.SignalException: Process 10 got "
        "signal: 15\n"
    )
    session = FakeSessionOfOneEngine(FakeEngineServingLogs({"c0": stopped, "c1": steps}))
    torn, killed = _node(0, "a", 143), _node(1, "b", 137)
    got = asyncio.run(explain_failure(session, killed, [torn, killed]))  # type: ignore[arg-type]
    assert (got["node"], got["failed_node"], got["exit_code"]) == (1, 1, 137), got
    assert got["reason"] == "exited with code 137 (128+9: SIGKILL)", got
    assert got.get("kind") != "stopped"
