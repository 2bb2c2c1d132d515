"""The fleet listing behind ``ps`` (console.backends.containers.list_fleet and its use by refresh):
bounded concurrency, a deadline that makes late hosts pending, failures with their reason,
which containers get inspected, and a job's nodes read from the listing."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import Any

from console.backends.containers import _containers, _detail_for, list_fleet
from console.jobs.status import HOST_ANSWERED, HOST_FAILED, HOST_PENDING, HostListing
from console.jobs.store import JobRecord, NodeRecord
from remote.docker import ContainerInfo
from remote.errors import HostUnreachable

JOB_ID = "io.gpuconsole.job-id"


def labelled(cid: str, job_id: str, rank: int, status: str = "running") -> ContainerInfo:
    labels = {
        "io.gpuconsole.format": "1",
        JOB_ID: job_id,
        "io.gpuconsole.job-name": job_id.rsplit("-", 1)[0],
        "io.gpuconsole.node-rank": str(rank),
        "io.gpuconsole.node-count": "2",
        "io.gpuconsole.nproc-per-node": "1",
        "io.gpuconsole.host": "h0",
        "io.gpuconsole.spec-hash": "0" * 12,
        "io.gpuconsole.created-at": "1.000",
    }
    return ContainerInfo(cid, f"{job_id}-n{rank}", labels, status, None, None, None, detailed=False)


class FakeEngine:
    """A host's engine: ``list`` answers after ``delay`` s (never: ``None``)."""

    runtime = "host"  # no host-runtime probe (that needs a real transport)

    def __init__(self, session: FakeSession, host: str) -> None:
        self.session, self.host = session, host

    async def list(
        self,
        labels: Mapping[str, str | None],
        *,
        detail: Callable[[ContainerInfo], bool] | None = None,
        runtime: str | None = None,
    ) -> list[ContainerInfo]:
        s = self.session
        s.in_flight += 1
        s.peak = max(s.peak, s.in_flight)
        try:
            delay = s.list_delay.get(self.host, 0.01)
            await asyncio.sleep(3600 if delay is None else delay)
            return list(s.containers.get(self.host, []))
        finally:
            s.in_flight -= 1


class FakeSession:
    """Hosts that connect at once, hang in connect (``hang``) or refuse (``refuse``)."""

    def __init__(
        self,
        hosts: list[str],
        *,
        hang: set[str] = frozenset(),  # type: ignore[assignment]
        refuse: set[str] = frozenset(),  # type: ignore[assignment]
        list_delay: dict[str, float | None] | None = None,
        containers: dict[str, list[ContainerInfo]] | None = None,
    ) -> None:
        self.hosts, self.hang, self.refuse = hosts, hang, refuse
        self.list_delay = list_delay or {}
        self.containers = containers or {}
        self.in_flight = self.peak = 0

    async def connected(self, host: str) -> None:
        if host in self.refuse:
            raise HostUnreachable(host, "cannot connect to 127.0.0.1:22: connection refused")
        if host in self.hang:
            await asyncio.sleep(3600)

    def engine(self, host: str) -> FakeEngine:
        return FakeEngine(self, host)


def run_fleet(session: FakeSession, **kw: Any) -> dict[str, HostListing]:
    return asyncio.run(list_fleet(session, session.hosts, **kw))  # type: ignore[arg-type]


def test_every_host_listed_once_with_bounded_concurrency() -> None:
    hosts = [f"h{i}" for i in range(40)]
    c = labelled("c1", "a-000001", 0)
    session = FakeSession(hosts, containers={"h3": [c]})
    out = run_fleet(session, concurrency=8, deadline_s=10)
    assert list(out) == hosts
    assert {h.status for h in out.values()} == {HOST_ANSWERED}
    assert out["h3"].containers == [c] and out["h4"].containers == []
    assert session.peak == 8  # never more than the bound, and it was used


def test_late_hosts_are_pending_and_failed_ones_say_why() -> None:
    hosts = ["ok", "slow", "hang", "refuse"]
    session = FakeSession(hosts, hang={"hang"}, refuse={"refuse"}, list_delay={"slow": None})
    loop_t0 = asyncio.new_event_loop()
    try:
        t0 = loop_t0.time()
        out = loop_t0.run_until_complete(list_fleet(session, hosts, deadline_s=0.3))  # type: ignore[arg-type]
        took = loop_t0.time() - t0
    finally:
        loop_t0.close()
    assert took < 2.0  # the deadline, not the hung hosts, ends it
    assert out["ok"].status == HOST_ANSWERED and out["ok"].reason is None
    assert out["slow"].status == HOST_PENDING and out["slow"].containers is None
    assert out["slow"].reason == (
        "host slow: no answer within 0.3 s (still listing its "
        "containers); its jobs show their last known state"
    )
    assert out["hang"].status == HOST_PENDING
    assert "(still connecting)" in (out["hang"].reason or "")
    assert out["refuse"].status == HOST_FAILED
    assert out["refuse"].reason == "host refuse: cannot connect to 127.0.0.1:22: connection refused"
    assert out["refuse"].as_dict()["status"] == "failed"


def test_queued_hosts_past_the_deadline_say_they_waited_for_a_slot() -> None:
    hosts = ["a", "b"]
    session = FakeSession(hosts, hang={"a"})
    out = run_fleet(session, concurrency=1, deadline_s=0.2)
    assert out["a"].reason is not None and "(still connecting)" in out["a"].reason
    assert out["b"].reason is not None and "(waiting for a connection slot)" in out["b"].reason


def test_only_unknown_started_or_changed_watched_containers_are_inspected() -> None:
    watched = JobRecord(
        "w-000001",
        "w",
        "p",
        None,
        {},
        "",
        0.0,
        2,
        state="running",
        nodes=[
            NodeRecord("w-000001", 0, "h0", "n0", "c0", "running", started_at="t"),
            NodeRecord("w-000001", 1, "h0", "n1", "c1", "running", started_at="t"),
        ],
    )
    need = _detail_for({"w-000001", "idle-000002"}, [watched])
    assert need(labelled("x", "new-000003", 0))  # unknown, started: adopted with its times
    assert not need(labelled("x", "new-000003", 0, status="created"))
    assert not need(labelled("c0", "w-000001", 0))  # nothing changed
    assert need(labelled("c1", "w-000001", 1, status="exited"))  # just exited: its times
    assert need(labelled("c9", "w-000001", 1))  # another container for that node
    assert not need(labelled("z", "idle-000002", 0, status="exited"))  # known, not watched


def test_a_jobs_nodes_come_from_the_listing_and_a_pending_host_keeps_them_unknown() -> None:
    job = JobRecord(
        "j-000001",
        "j",
        "p",
        None,
        {},
        "",
        0.0,
        2,
        state="running",
        nodes=[
            NodeRecord("j-000001", 0, "h0", "n0", "c0", "running"),
            NodeRecord("j-000001", 1, "h1", "n1", "c1", "running"),
        ],
    )
    mine, other = labelled("c0", "j-000001", 0), labelled("o", "k-000002", 0)
    listed = {
        "h0": HostListing("h0", HOST_ANSWERED, containers=[mine, other]),
        "h1": HostListing("h1", HOST_PENDING, reason="host h1: no answer"),
    }

    class NoListing:
        """A session that must not be asked: every host is in the listing."""

        def engine(self, host: str) -> None:
            raise AssertionError(f"listed {host} again")

    got = asyncio.run(_containers(NoListing(), job, listed))  # type: ignore[arg-type]
    assert got == {"h0": [mine], "h1": None}
    assert job.unreachable == {"h1": "host h1: no answer"}


def test_open_file_limit_raised_for_the_fleet_not_above_hard() -> None:
    import subprocess
    import sys

    code = (
        "import resource\n"
        "from console.backends.containers import raise_open_file_limit\n"
        "hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))\n"
        "print(raise_open_file_limit(512)[0], resource.getrlimit(resource.RLIMIT_NOFILE)[0],"
        " hard)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    got, now, hard = (int(x) for x in out)
    want = 4 * 512 + 256 if hard < 0 else min(4 * 512 + 256, hard)
    assert got == now == want


def test_a_failed_engine_listing_cancels_the_host_runtime_command_beside_it() -> None:
    """On a Docker host both listings run side by side; when the engine's fails, the host
    runtime's is cancelled before ``list_fleet`` returns (left running, it outlived the CLI's
    session: ``ps`` printed "unhandled exception during asyncio.run() shutdown" and a
    traceback of ``HostJobError('host b: list: no output')``)."""
    from remote.errors import DockerError

    seen: dict[str, str] = {}

    class SlowHostRuntime:
        async def list_if_any(self, labels: Mapping[str, str | None]) -> list[ContainerInfo]:
            seen["hostrt"] = "started"
            try:
                await asyncio.sleep(5)
            except asyncio.CancelledError:
                seen["hostrt"] = "cancelled"
                raise
            seen["hostrt"] = "finished"
            return []

    class BrokenDockerEngine:
        """An engine whose socket answers nothing (the fake of a wrong ``docker_socket``)."""

        runtime = "docker"
        hostrt = SlowHostRuntime()

        async def list(
            self,
            labels: Mapping[str, str | None],
            *,
            detail: Callable[[ContainerInfo], bool] | None = None,
        ) -> list[ContainerInfo]:
            await asyncio.sleep(0.01)
            raise DockerError("b", "the Docker engine does not answer")

    class OneHost(FakeSession):
        def engine(self, host: str) -> BrokenDockerEngine:  # type: ignore[override]
            return BrokenDockerEngine()

    async def main() -> tuple[dict[str, HostListing], str]:
        out = await list_fleet(OneHost(["b"]), ["b"], deadline_s=10)  # type: ignore[arg-type]
        return out, seen.get("hostrt", "never")

    t0 = time.monotonic()
    out, hostrt_then = asyncio.run(main())
    assert time.monotonic() - t0 < 2  # the failure ends it, not the slow command
    assert hostrt_then == "cancelled"
    assert out["b"].status == HOST_FAILED
    assert out["b"].reason == "host b: the Docker engine does not answer"
