"""Log follows over SSH through the engine relay (``remote/agent/relay.py``, started by
:meth:`remote.ssh.SSHTransport.open_engine_stream`): real sshd test hosts, the real dockerd.

Each test's profile names the Docker socket by a path of its own (a symlink to the real
socket in a fresh folder), which is the relay's last argument: the relays of this test are
found on the host (this machine) by that path, apart from those of other tests and
benchmarks sharing the hosts.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
import yaml

from console.profiles import load_profile_file
from console.session import Session
from remote.dockerlogs import ByteReader, ByteWriter, read_log_batches
from remote.errors import DockerError
from remote.ssh import RELAY_SESSIONS
from tests.integration.conftest import CLI, IMAGE

#: The real engine socket the test hosts' dockerd listens on.
DOCKER_SOCK = "/var/run/docker.sock"
#: Lines the talkative container prints, one write each, about 1 ms apart.
N_LINES = 1000


def relay_pids(sock: str) -> list[int]:
    """Pids of the engine relays running on the host (this machine) for the socket path
    ``sock`` (``pgrep -f`` on ``python -I -S .../relay.py SOCK``; the ``sh`` that starts
    one does not match)."""
    pattern = r" -I -S [^ ]+/gpuconsole/relay/[^ ]+/relay\.py " + re.escape(sock) + "$"
    res = subprocess.run(["pgrep", "-f", "--", pattern], capture_output=True, text=True, timeout=30)
    return [int(p) for p in res.stdout.split()]


def profile_with(
    cli: CLI, name: str, sock: str, relay_python: str | None = None, host: str = "a"
) -> Path:
    """The test profile with host ``host``'s ``docker_socket`` (and ``relay_python``) set."""
    data = yaml.safe_load(cli.profile.read_text())
    data["hosts"][host]["docker_socket"] = sock
    if relay_python is not None:
        data["hosts"][host]["relay_python"] = relay_python
    path = cli.tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture
def own_sock() -> Iterator[str]:
    """A path of this test's own to the real Docker socket (a symlink, short enough for a
    unix socket path)."""
    d = tempfile.mkdtemp(prefix="gc-relay-", dir="/tmp")
    path = os.path.join(d, "docker.sock")
    os.symlink(DOCKER_SOCK, path)
    yield path
    shutil.rmtree(d, ignore_errors=True)


def expected_lines() -> list[str]:
    """What the talkative container prints (tabs, non-ASCII, ANSI colour, varying lengths)."""
    return [
        f"{i:05d} \u00e9\u4e2d\t\x1b[31mloss\x1b[0m={i / 7:.6f} " + "y" * (i % 50)
        for i in range(N_LINES)
    ]


@pytest.fixture
def talkative(engine: docker.DockerClient) -> Iterator[str]:
    """A container that waits 2 s (the follow starts meanwhile), prints :func:`expected_lines`
    one flushed write each, about 1 ms apart, then exits."""
    code = (
        "import sys, time\n"
        "time.sleep(2)\n"
        f"for i in range({N_LINES}):\n"
        "    sys.stdout.write('%05d \\u00e9\\u4e2d\\t\\x1b[31mloss\\x1b[0m=%.6f %s\\n'"
        " % (i, i / 7, 'y' * (i % 50)))\n"
        "    sys.stdout.flush()\n"
        "    time.sleep(0.001)\n"
    )
    c = engine.containers.run(
        IMAGE,
        ["python3", "-c", code],
        detach=True,
        name=f"gc-relay-{uuid.uuid4().hex[:6]}",
        environment={"PYTHONIOENCODING": "utf-8"},
    )
    yield c.id
    c.remove(force=True)


class CountingReader:
    """A real engine stream's reader, counting the reads that returned data (each is one
    wake-up of the follow with what the SSH channel had received)."""

    def __init__(self, reader: ByteReader) -> None:
        self.reader = reader
        self.reads = 0

    async def read(self, n: int) -> bytes:
        data = await self.reader.read(n)
        self.reads += bool(data)
        return data

    async def readuntil(self, separator: bytes) -> bytes:
        data = await self.reader.readuntil(separator)
        self.reads += 1
        return data


async def follow_all(
    opened: tuple[ByteReader, ByteWriter], cid: str, sock: str
) -> tuple[list[str], int, list[int]]:
    """Follow ``cid`` to its end through ``opened``; returns (the lines' texts, the reads
    that returned data, the relay pids seen while the first lines came)."""
    reader, writer = opened
    counted = CountingReader(reader)
    texts: list[str] = []
    during: list[int] = []
    async for batch in read_log_batches((counted, writer), cid, follow=True):
        if not during:
            during = relay_pids(sock)
        texts.extend(line.text for line in batch)
    return texts, counted.reads, during


async def test_a_relayed_follow_gets_every_line_in_few_reads(
    cli: CLI, own_sock: str, talkative: str
) -> None:
    session = Session(load_profile_file(profile_with(cli, "relayed", own_sock)))
    try:
        transport = session.engine("a").transport
        opened = await transport.open_engine_stream()
        texts, reads, during = await follow_all(opened, talkative, own_sock)
    finally:
        await session.close()
    assert texts == expected_lines()  # all, in order, byte-exact
    assert len(during) == 1  # one relay served it...
    # ...in writes of up to 50 ms: the lines came over about 1.2 s, so some 25 reads, not
    # one per line (a direct channel: one SSH packet per line)
    assert reads <= N_LINES // 10, reads
    deadline = time.monotonic() + 10
    while relay_pids(own_sock) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert relay_pids(own_sock) == []  # it exited with the stream


async def test_without_a_usable_python_a_follow_reads_the_socket_directly(
    cli: CLI, own_sock: str, talkative: str, caplog: pytest.LogCaptureFixture
) -> None:
    """``relay_python`` names no python: the follow still gets every line, over a
    ``direct-streamlocal`` channel; the fallback is said once per connection, not per
    follow."""
    caplog.set_level(logging.INFO, logger="gpuconsole.remote.ssh")
    profile = profile_with(cli, "nopython", own_sock, relay_python="/nonexistent/python3")
    session = Session(load_profile_file(profile))
    try:
        transport = session.engine("a").transport
        texts, _, during = await follow_all(
            await transport.open_engine_stream(), talkative, own_sock
        )
        # a second stream on the same connection does not try the relay again
        again, _, _ = await follow_all(await transport.open_engine_stream(), talkative, own_sock)
    finally:
        await session.close()
    assert texts == expected_lines()
    assert again == expected_lines()  # the container's whole log, read once more
    assert during == []  # no relay: sshd's channel to the socket
    said = [r.getMessage() for r in caplog.records if "engine relay cannot run" in r.getMessage()]
    assert len(said) == 1, said
    assert said[0].startswith("[a] the engine relay cannot run with /nonexistent/python3 (")
    assert "log follows read the Docker socket directly on this connection" in said[0]


async def test_a_socket_nobody_listens_on_is_a_docker_error_naming_it(
    cli: CLI, own_sock: str
) -> None:
    missing = os.path.join(os.path.dirname(own_sock), "nothing.sock")
    session = Session(load_profile_file(profile_with(cli, "nosock", missing)))
    try:
        with pytest.raises(DockerError) as e:
            await session.engine("a").transport.open_engine_stream()
    finally:
        await session.close()
    assert e.value.message == (
        f"host a: cannot connect to the Docker socket {missing}: No such file or directory"
    )
    assert e.value.hint is not None and "docker runs" in e.value.hint
    assert relay_pids(missing) == []


async def test_at_most_relay_sessions_relays_per_connection(
    cli: CLI, own_sock: str, quiet_container: str
) -> None:
    """8 follows opened at once on one connection: 6 through relays (sshd's MaxSessions,
    default 10, also counts the agent, commands and SFTP), 2 through direct channels; every
    one is served, and closing them leaves no relay."""
    session = Session(load_profile_file(profile_with(cli, "sessions", own_sock)))
    try:
        transport = session.engine("a").transport
        streams = await asyncio.gather(*(transport.open_engine_stream() for _ in range(8)))
        assert len(relay_pids(own_sock)) == RELAY_SESSIONS == 6

        async def first_line(opened: tuple[ByteReader, ByteWriter]) -> list[str]:
            gen = read_log_batches(opened, quiet_container, follow=True)
            try:
                return [line.text for line in await anext(gen)]
            finally:
                await gen.aclose()

        firsts = await asyncio.wait_for(asyncio.gather(*map(first_line, streams)), 60)
        assert firsts == [["ready"]] * 8
        deadline = time.monotonic() + 10
        while relay_pids(own_sock) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert relay_pids(own_sock) == []
    finally:
        await session.close()
