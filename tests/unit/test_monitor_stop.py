"""FleetMonitor.stop ends every task the monitor started, whatever phase a host is in
(connecting, agent starting, streaming, nvidia-smi fallback, fault wait, backoff, a refresh of
the container map in flight), even when a cancellation is lost; a failing on_sample hook is
never taken for a host failure.

The hosts here are fakes (``FakeHost*``): the phases must be held still at a chosen point
(a connect that never completes, an upload that hangs), which real hosts cannot be made to do
on demand. ``tests/integration/test_streams.py`` runs the real thing.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest

from console.fleet.monitor import (
    PHASE_BACKOFF,
    PHASE_CONNECTING,
    PHASE_FAULT_WAIT,
    PHASE_STOPPED,
    PHASE_STREAMING,
    FleetMonitor,
)
from console.fleet.state import FleetState
from console.session import Session
from remote.errors import HostUnreachable, TransportError
from remote.telemetry.stream import (
    AGENT_EXIT_NO_NVML,
    LAUNCH_MISSING,
    PHASE_AGENT_STARTING,
    PHASE_SMI_FALLBACK,
)
from remote.transport import CommandResult

TRACE = Path(__file__).resolve().parents[1] / "data" / "traces" / "h200-load.jsonl"
#: a hang guard, far above what a stop takes (a lost cancellation costs stop_grace_s = 0.3)
BOUND_S = 10.0


def trace_line(seq: int) -> str:
    s = json.loads(TRACE.read_text().splitlines()[0])
    s["seq"] = seq
    return json.dumps(s)


async def forever() -> None:
    await asyncio.Event().wait()


class FakeHostProcess:
    """A remote process of a fake host: ``lines`` then EOF (``eof=True``) or a stdout that
    never ends; ``close`` can hang and can swallow the first cancellation (as Python 3.11's
    ``asyncio.wait_for`` does when its inner await completes in the same loop turn)."""

    def __init__(
        self,
        lines: list[str],
        *,
        eof: bool = False,
        rc: int = 0,
        hang_close: bool = False,
        lose_cancel: bool = False,
    ) -> None:
        self.lines = list(lines)
        self.eof = eof
        self.rc = rc
        self.hang_close = hang_close
        self.lose_cancel = lose_cancel
        self.closed = False

    async def readline(self) -> str | None:
        if self.lines:
            return self.lines.pop(0)
        if self.eof:
            return None
        await forever()
        return None

    async def wait(self) -> int:
        return self.rc

    async def stderr(self) -> str:
        return ""

    async def close(self) -> None:
        self.closed = True
        if self.lose_cancel:
            self.lose_cancel = False
            try:
                await forever()
            except asyncio.CancelledError:
                pass  # lost: the caller goes on as if nothing had happened
        if self.hang_close:
            await forever()


class FakeHostTransport:
    """A fake host's transport: ``procs`` are handed out in order by ``open_process``;
    ``upload`` runs as the agent upload; ``run`` (the fallback's process poll) never ends."""

    name = "h"

    def __init__(
        self, procs: list[FakeHostProcess], upload: Callable[[], Any] | None = None
    ) -> None:
        self.procs = list(procs)
        self.opened: list[FakeHostProcess] = []
        self.upload = upload

    async def put_bundle(self, files: dict[str, bytes], base: str) -> str:
        if self.upload is not None:
            await self.upload()
        return f"{base}/0123"

    async def open_process(self, argv: list[str]) -> FakeHostProcess:
        if not self.procs:
            raise TransportError(self.name, f"`{argv[0]}`: command not found")
        p = self.procs.pop(0)
        self.opened.append(p)
        return p

    async def run(self, argv: list[str], *, timeout: float | None = 60.0) -> CommandResult:
        await forever()
        raise AssertionError("unreachable")


class FakeHostEngine:
    """The container list of a fake host; ``hang`` keeps the refresh in flight."""

    def __init__(self, hang: bool) -> None:
        self.hang = hang
        self.asked = 0

    async def list(self, labels: dict[str, str | None]) -> list[Any]:
        self.asked += 1
        if self.hang:
            await forever()
        return []


class FakeHostSession:
    """The session of one fake host ``h``: ``connect`` is what ``connected`` awaits."""

    def __init__(
        self,
        transport: FakeHostTransport,
        connect: Callable[[], Any] | None = None,
        *,
        hang_engine: bool = False,
    ) -> None:
        self.transport = transport
        self.connect = connect
        self.engine_ = FakeHostEngine(hang_engine)

    async def connected(self, host: str) -> FakeHostTransport:
        if self.connect is not None:
            await self.connect()
        return self.transport

    def engine(self, host: str) -> FakeHostEngine:
        return self.engine_


async def run_until_phase(
    session: FakeHostSession,
    phase: str,
    *,
    mode: str = "auto",
    on_sample: Callable[[str, dict[str, Any]], None] | None = None,
) -> tuple[FleetMonitor, FleetState, set[asyncio.Task[Any]]]:
    before = asyncio.all_tasks()
    state = FleetState(["h"], 0.1)
    mon = FleetMonitor(
        cast(Session, session), state, ["h"], interval=0.1, mode=mode, on_sample=on_sample
    )
    mon.stop_grace_s = 0.3
    mon.start()

    async def reached() -> None:
        while mon.phase.get("h") != phase:
            await asyncio.sleep(0.005)

    await asyncio.wait_for(reached(), BOUND_S)
    return mon, state, before


async def stop_and_check(mon: FleetMonitor, before: set[asyncio.Task[Any]]) -> None:
    await asyncio.wait_for(mon.stop(), BOUND_S)
    assert asyncio.all_tasks() - before == set()
    assert mon.phase["h"] == PHASE_STOPPED


async def test_stop_while_connecting() -> None:
    session = FakeHostSession(FakeHostTransport([]), connect=forever)
    mon, state, before = await run_until_phase(session, PHASE_CONNECTING)
    await stop_and_check(mon, before)
    assert state.hosts["h"].status == "connecting"


async def test_stop_while_the_agent_starts() -> None:
    # the host lacks the bundle: the launch exits LAUNCH_MISSING, then the upload hangs
    missing = FakeHostProcess([], eof=True, rc=LAUNCH_MISSING)
    agent = FakeHostProcess([])
    session = FakeHostSession(FakeHostTransport([missing, agent], upload=forever))
    mon, _state, before = await run_until_phase(session, PHASE_AGENT_STARTING)

    async def uploading() -> None:
        while not missing.closed:
            await asyncio.sleep(0.005)

    await asyncio.wait_for(uploading(), BOUND_S)
    await stop_and_check(mon, before)
    # stopped in the upload: the agent itself was never started
    assert session.transport.opened == [missing]


async def test_stop_while_streaming_closes_the_agent() -> None:
    agent = FakeHostProcess([trace_line(1)])
    session = FakeHostSession(FakeHostTransport([agent]))
    mon, state, before = await run_until_phase(session, PHASE_STREAMING)
    await stop_and_check(mon, before)
    assert agent.closed  # its stdin closed: the agent exits
    assert state.hosts["h"].samples == 1


async def test_stop_in_the_nvidia_smi_fallback_ends_the_process_poller() -> None:
    agent = FakeHostProcess([], eof=True, rc=AGENT_EXIT_NO_NVML)
    smi = FakeHostProcess([])  # streams nothing yet; its process poll hangs in run()
    session = FakeHostSession(FakeHostTransport([agent, smi]))
    mon, _state, before = await run_until_phase(session, PHASE_SMI_FALLBACK)
    await asyncio.sleep(0.05)  # the poller task is running now
    names = {t.get_name() for t in asyncio.all_tasks() - before}
    assert "smi-processes-h" in names
    await stop_and_check(mon, before)
    assert agent.closed and smi.closed


async def test_stop_during_the_wait_after_a_host_fault() -> None:
    # no python3 (the agent exits 127), no nvidia-smi: one no_driver sample, then a 10 s wait
    # before asking again
    session = FakeHostSession(FakeHostTransport([FakeHostProcess([], eof=True, rc=127)]))
    mon, state, before = await run_until_phase(session, PHASE_FAULT_WAIT)
    sample = state.hosts["h"].sample
    assert sample is not None and sample["state"] == "no_driver"
    await stop_and_check(mon, before)


async def test_stop_while_backing_off() -> None:
    async def refuse() -> None:
        raise HostUnreachable("h", "cannot connect to 127.0.0.99:22: connection refused")

    session = FakeHostSession(FakeHostTransport([]), connect=refuse)
    mon, state, before = await run_until_phase(session, PHASE_BACKOFF)
    assert state.hosts["h"].status == "down"
    assert state.hosts["h"].error == ("cannot connect to 127.0.0.99:22: connection refused")
    await stop_and_check(mon, before)


async def test_stop_with_a_container_refresh_in_flight() -> None:
    # a GPU process in a container: the host's first sample starts its container listing
    s = json.loads(trace_line(1))
    s["processes"][0]["container_id"] = "c0" * 32
    agent = FakeHostProcess([json.dumps(s)])
    session = FakeHostSession(FakeHostTransport([agent]), hang_engine=True)
    mon, _state, before = await run_until_phase(session, PHASE_STREAMING)
    await asyncio.sleep(0.25)
    assert session.engine_.asked == 1  # the (hanging) engine was asked, once
    await stop_and_check(mon, before)


async def test_a_host_without_container_processes_is_not_listed() -> None:
    # no GPU process in a container: nothing to match, the host is not asked
    agent = FakeHostProcess([trace_line(1)])
    session = FakeHostSession(FakeHostTransport([agent]))
    mon, _state, before = await run_until_phase(session, PHASE_STREAMING)
    await mon.refresh_containers()
    assert session.engine_.asked == 0
    await stop_and_check(mon, before)


@pytest.mark.parametrize("hang_close", [False, True])
async def test_stop_when_a_cancellation_is_lost(hang_close: bool) -> None:
    # the agent's close swallows stop's cancellation (and then may hang): stop cancels again
    agent = FakeHostProcess([trace_line(1)], lose_cancel=True, hang_close=hang_close)
    session = FakeHostSession(FakeHostTransport([agent]))
    mon, _state, before = await run_until_phase(session, PHASE_STREAMING)
    await stop_and_check(mon, before)
    assert agent.closed and not agent.lose_cancel  # the cancellation was lost once


async def test_a_failing_hook_is_not_a_host_failure() -> None:
    seen: list[int] = []

    def hook(host: str, sample: dict[str, Any]) -> None:
        seen.append(sample["seq"])
        raise BrokenPipeError(32, "Broken pipe")  # e.g. printing to a closed pipe

    agent = FakeHostProcess([trace_line(1), trace_line(2), trace_line(3)])
    session = FakeHostSession(FakeHostTransport([agent]))
    mon, state, before = await run_until_phase(session, PHASE_STREAMING, on_sample=hook)

    async def three() -> None:
        while len(seen) < 3:
            await asyncio.sleep(0.005)

    await asyncio.wait_for(three(), BOUND_S)
    assert seen == [1, 2, 3]
    assert mon.hook_errors == 3
    assert state.hosts["h"].status == "ok" and state.hosts["h"].samples == 3
    assert session.transport.opened == [agent]  # one agent: never restarted
    await stop_and_check(mon, before)
