"""FleetMonitor at fleet scale: it opens at most ``max_connecting`` SSH connections at once
(first connects and reconnects) and every host still gets its stream; its map round lists a
host again only when the host shows a container its last listing did not cover, or the
listing is old.

The hosts are fakes (``FakeFleet*``): the tests must see how many handshakes are in flight at
each moment and how many listings were asked, which real sshds and dockerds do not report.
``tests/integration/test_telemetry.py`` and ``scripts/bench/console_cost.py`` run the real
thing.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import cast

from console.fleet.monitor import FleetMonitor
from console.fleet.state import FleetState
from console.session import Session

TRACE = Path(__file__).resolve().parents[1] / "data" / "traces" / "h200-load.jsonl"
BOUND_S = 10.0


async def forever() -> None:
    await asyncio.Event().wait()


class FakeFleetProcess:
    """An agent that writes one sample, then nothing more (stdout stays open)."""

    def __init__(self) -> None:
        s = json.loads(TRACE.read_text().splitlines()[0])
        s["seq"] = 1
        self.lines = [json.dumps(s)]

    async def readline(self) -> str | None:
        if self.lines:
            return self.lines.pop(0)
        await forever()
        return None

    async def wait(self) -> int:
        return 0

    async def stderr(self) -> str:
        return ""

    async def close(self) -> None:
        pass


class FakeFleetTransport:
    name = "fake"

    async def open_process(self, argv: list[str]) -> FakeFleetProcess:
        return FakeFleetProcess()


class FakeFleetSession:
    """Hosts whose handshake takes ``connect_s``; counts the handshakes in flight."""

    def __init__(self, connect_s: float) -> None:
        self.connect_s = connect_s
        self.in_flight = 0
        self.peak = 0

    async def connected(self, host: str) -> FakeFleetTransport:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await asyncio.sleep(self.connect_s)
        finally:
            self.in_flight -= 1
        return FakeFleetTransport()


async def watch(n_hosts: int, max_connecting: int) -> FakeFleetSession:
    hosts = [f"h{i:02d}" for i in range(n_hosts)]
    session = FakeFleetSession(connect_s=0.02)
    state = FleetState(hosts, 0.1)
    mon = FleetMonitor(
        cast(Session, session),
        state,
        hosts,
        interval=0.1,
        mode="agent",
        max_connecting=max_connecting,
    )
    mon.stop_grace_s = 0.3
    mon.start()
    try:
        assert await mon.wait_complete(BOUND_S)
        assert all(v.sample is not None for v in state.hosts.values())
    finally:
        await asyncio.wait_for(mon.stop(), BOUND_S)
    return session


async def test_handshakes_in_flight_are_bounded() -> None:
    session = await watch(20, max_connecting=3)
    assert session.peak == 3


async def test_a_bound_above_the_fleet_connects_all_at_once() -> None:
    session = await watch(20, max_connecting=100)
    assert session.peak == 20


class FakeFleetEngine:
    """A host's Docker engine: no job containers; counts the listings."""

    def __init__(self) -> None:
        self.asked = 0

    async def list(self, labels: dict[str, str | None]) -> list[object]:
        self.asked += 1
        return []


class FakeFleetEngineSession(FakeFleetSession):
    """One fake host whose engine counts listings and whose runtime is not ``docker`` (so
    the host runtime is not asked)."""

    def __init__(self) -> None:
        super().__init__(connect_s=0.0)
        self.engine_ = FakeFleetEngine()
        self.engine_.runtime = "host"  # type: ignore[attr-defined]

    def engine(self, host: str) -> FakeFleetEngine:
        return self.engine_


def in_container(cid: str, seq: int) -> dict[str, object]:
    s: dict[str, object] = json.loads(TRACE.read_text().splitlines()[0])
    s["seq"] = seq
    procs = s["processes"]
    assert isinstance(procs, list) and procs
    procs[0]["container_id"] = cid
    return s


async def test_the_map_round_lists_a_host_again_only_for_a_new_container() -> None:
    session = FakeFleetEngineSession()
    state = FleetState(["h"], 0.1)
    mon = FleetMonitor(cast(Session, session), state, ["h"], interval=0.1, mode="agent")
    mon.stop_grace_s = 0.3
    state.on_sample("h", in_container("a" * 64, 1))  # type: ignore[arg-type]
    state.hosts["h"].status = "ok"
    try:
        await mon.refresh_containers(max_age_s=300.0, only_new=True)
        assert session.engine_.asked == 1  # never listed: listed
        await mon.refresh_containers(max_age_s=300.0, only_new=True)
        assert session.engine_.asked == 1  # the same container: not listed again
        state.on_sample("h", in_container("b" * 64, 2))  # type: ignore[arg-type]
        await mon.refresh_containers(max_age_s=300.0, only_new=True)
        assert session.engine_.asked == 2  # a new container: listed
        await mon.refresh_containers(max_age_s=0.0, only_new=True)
        assert session.engine_.asked == 3  # past the age: listed whatever the containers
        await mon.refresh_containers(max_age_s=300.0)
        assert session.engine_.asked == 3  # young enough, new containers not asked for
    finally:
        await asyncio.wait_for(mon.stop(), BOUND_S)
