"""Closing a log follow closes its connection to the engine at once (not at the container's
next line), over the local engine and over SSH (through the engine relay, and through a
direct channel where the host has no usable python); no thread is involved, and no relay
process is left on the host."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable

from console.profiles import load_profile_file
from console.session import Session
from remote.docker import Engine
from remote.transport import LocalTransport
from tests.integration.conftest import CLI
from tests.integration.test_engine_relay import own_sock as own_sock  # a fixture
from tests.integration.test_engine_relay import profile_with, relay_pids


def _sockets() -> int:
    """Open socket descriptors of this process."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except OSError:
            pass
    return n


def _engine_unix_sockets(sock: str) -> int:
    """Unix sockets the test hosts' sshd sessions hold (a direct channel to the Docker socket
    is one of theirs, as may be the pipes of a session) and those the engine relays on the
    socket path ``sock`` hold (a relayed follow's connection to the engine is the relay's).
    A follow over SSH opens nothing here."""
    relays = {str(pid) for pid in relay_pids(sock)}
    with open("/proc/net/unix") as f:
        unix = {line.split()[6] for line in f.readlines()[1:] if len(line.split()) > 6}
    n = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if not (f.read().startswith(b"sshd: ") or pid in relays):
                    continue
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            n += link.startswith("socket:[") and link[8:-1] in unix
    return n


async def _follow_then_close(
    engine: Engine, cid: str, count: Callable[[], int] = _sockets
) -> tuple[int, float]:
    """Follow until the first line, close; returns (sockets still open beyond those before
    the follow, as ``count`` counts them, and the seconds the close took)."""
    got: list[str] = []
    threads = threading.active_count()
    before = count()

    async def consume() -> None:
        async for line in engine.logs(cid, follow=True):
            got.append(line.text)

    task = asyncio.create_task(consume())
    deadline = time.monotonic() + 30
    while not got and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert got == ["ready"]
    assert count() > before  # the follow's connection (over SSH: its channel's, at sshd)
    assert threading.active_count() == threads  # read on the loop, no reader thread
    t0 = time.monotonic()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    while count() > before and time.monotonic() - t0 < 10:
        await asyncio.sleep(0.02)
    return count() - before, time.monotonic() - t0


async def test_closing_a_follow_ends_its_reader_local(quiet_container: str) -> None:
    engine = Engine(LocalTransport())
    try:
        left, took = await _follow_then_close(engine, quiet_container)
    finally:
        await engine.close()
    assert left == 0
    assert took < 5  # it ended on close, not at the container's next line (120 s away)


async def test_closing_a_follow_ends_its_reader_over_ssh(
    quiet_container: str, cli: CLI, own_sock: str
) -> None:
    session = Session(load_profile_file(profile_with(cli, "follow-close", own_sock)))
    try:
        await session.connected("a")
        local = _sockets()
        relays: list[int] = []

        def count() -> int:
            relays.extend(p for p in relay_pids(own_sock) if p not in relays)
            return _engine_unix_sockets(own_sock)

        left, took = await _follow_then_close(session.engine("a"), quiet_container, count)
        assert _sockets() == local  # read from the SSH channel: no local socket for it
    finally:
        await session.close()
    assert left == 0
    assert took < 5
    assert len(relays) == 1  # the follow went through one relay...
    assert relay_pids(own_sock) == []  # ...which exited when the follow was cancelled


async def test_closing_a_direct_follow_ends_its_channel_over_ssh(
    quiet_container: str, cli: CLI, own_sock: str
) -> None:
    """A host without a usable python: the follow reads a direct-streamlocal channel, whose
    socket sshd holds; closing the follow closes it."""
    profile = profile_with(cli, "follow-close-direct", own_sock, "/nonexistent/python3")
    session = Session(load_profile_file(profile))
    try:
        await session.connected("a")
        local = _sockets()
        relays: list[int] = []

        def count() -> int:
            relays.extend(relay_pids(own_sock))
            return _engine_unix_sockets(own_sock)

        left, took = await _follow_then_close(session.engine("a"), quiet_container, count)
        assert _sockets() == local
    finally:
        await session.close()
    assert left == 0
    assert took < 5
    assert relays == []
