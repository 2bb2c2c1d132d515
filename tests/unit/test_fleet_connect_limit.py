"""FleetMonitor opens at most ``max_connecting`` SSH connections at once (first connects and
reconnects), and every host still gets its stream.

The hosts are fakes (``FakeFleet*``): the test must see how many handshakes are in flight at
each moment, which real sshds do not report. ``tests/integration/test_telemetry.py`` and
``scripts/bench/console_cost.py`` run the real thing.
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
    mon = FleetMonitor(cast(Session, session), state, hosts, interval=0.1, mode="agent",
                       max_connecting=max_connecting)
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
