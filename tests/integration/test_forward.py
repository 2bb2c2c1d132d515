"""``Transport.forward_local`` over real SSH to test host ``a`` (the tunnel under issue 9's
``gpuconsole notebook``).

Host ``a`` is an sshd listening on 127.0.0.11 of *this* machine (``scripts/testhosts/up``:
no network namespace), so its ``127.0.0.1`` is this machine's loopback too and a direct
connection to the HTTP server would also work. The tests therefore check that the bytes go
through the SSH channel: the local port differs from the server's, connections to it are
counted on a spy wrapped around the asyncssh connection's ``create_connection`` (what its
``forward_local_port`` opens each ``direct-tcpip`` channel with), and the listener is bound to
127.0.0.1 only (another loopback address, 127.0.0.11, is refused).
"""

from __future__ import annotations

import asyncio
import errno
import re
import secrets
import socket
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from console.profiles import load_profile_file
from remote.errors import TransportError
from remote.ssh import SSHTransport
from remote.transport import RemoteProcess


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=20) as r:
        return bytes(r.read())


def _listening(host: str, port: int) -> bool:
    """Whether a TCP connect to ``host:port`` here is accepted."""
    with socket.socket() as s:
        s.settimeout(5)
        return s.connect_ex((host, port)) == 0


def _bindable(port: int) -> bool:
    """Whether ``127.0.0.1:port`` can be bound and listened on (no listener holds it)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            s.listen()
        except OSError as e:
            assert e.errno == errno.EADDRINUSE, e
            return False
    return True


@pytest.fixture
async def host_a(test_profile: Path) -> AsyncIterator[SSHTransport]:
    t = load_profile_file(test_profile).transport("a")
    assert isinstance(t, SSHTransport)
    await t.connect()
    try:
        yield t
    finally:
        await t.close()


class _ChannelSpy:
    """Counts the ``direct-tcpip`` channels an asyncssh connection opens (wraps, then calls
    through to, its real ``create_connection``)."""

    def __init__(self, conn: Any) -> None:
        self.destinations: list[tuple[str, int]] = []
        real = conn.create_connection

        async def spy(factory: Any, host: str, port: int, *a: Any, **kw: Any) -> Any:
            self.destinations.append((host, port))
            return await real(factory, host, port, *a, **kw)

        conn.create_connection = spy


async def _http_server(t: SSHTransport, root: str, port: int) -> RemoteProcess:
    """``python3 -m http.server`` on the host, bound to its 127.0.0.1, serving ``root``."""
    proc = await t.open_process(
        [
            "python3",
            "-u",
            "-m",
            "http.server",
            "--bind",
            "127.0.0.1",
            "--directory",
            root,
            str(port),
        ]
    )
    line = await asyncio.wait_for(proc.readline(), 20)
    assert line is not None and "Serving HTTP" in line, line
    return proc


async def test_fetch_through_forward_then_close_frees_port(host_a: SSHTransport) -> None:
    payload = secrets.token_bytes(300_000)
    root = (await host_a.check(["mktemp", "-d", "/tmp/gpuconsole-fwd-XXXXXX"])).strip()
    server: RemoteProcess | None = None
    try:
        await host_a.run(["sh", "-c", 'cat > "$1"/blob.bin', "sh", root], input=payload)
        remote_port = _free_port()
        server = await _http_server(host_a, root, remote_port)
        assert host_a._conn is not None
        spy = _ChannelSpy(host_a._conn)

        fwd = await host_a.forward_local(remote_port)
        assert fwd.local_host == "127.0.0.1"
        assert fwd.local_port not in (0, remote_port)
        await fwd.check()  # the server answers through the tunnel
        got = await asyncio.to_thread(_fetch, f"http://127.0.0.1:{fwd.local_port}/blob.bin")
        assert got == payload
        # the probe channel of check(), the probe of the first connection, the connection
        assert spy.destinations.count(("127.0.0.1", remote_port)) == 3
        assert fwd.error is None
        # after a first success connections are passed through without a probe
        again = await asyncio.to_thread(_fetch, f"http://127.0.0.1:{fwd.local_port}/blob.bin")
        assert again == payload
        assert spy.destinations.count(("127.0.0.1", remote_port)) == 4
        # bound to 127.0.0.1 only: another loopback address of this machine is refused
        assert _listening("127.0.0.1", fwd.local_port)
        assert not _listening("127.0.0.11", fwd.local_port)

        port = fwd.local_port
        await fwd.close()
        await fwd.close()  # closing twice is fine
        assert fwd.closed
        assert not _listening("127.0.0.1", port)
        assert _bindable(port)
        with pytest.raises(TransportError, match="closed"):
            await fwd.check()
    finally:
        if server is not None:
            await server.close()
        await host_a.run(["rm", "-rf", "--", root])


async def test_port_with_no_listener_is_a_transport_error(host_a: SSHTransport) -> None:
    dead = _free_port()
    async with await host_a.forward_local(dead) as fwd:
        with pytest.raises(OSError):  # the local connection is closed unanswered
            await asyncio.to_thread(_fetch, f"http://127.0.0.1:{fwd.local_port}/")
        err = fwd.error
        assert isinstance(err, TransportError)
        assert err.host == "a"
        assert f"127.0.0.1:{dead}" in str(err)
        assert "refused" in str(err).lower()
        with pytest.raises(TransportError, match=rf"host a: .*127\.0\.0\.1:{dead}"):
            await fwd.check()
        assert not fwd.closed  # a failed connection leaves the forward listening
        assert _listening("127.0.0.1", fwd.local_port)
    assert fwd.closed


async def test_forward_ends_with_the_connection(host_a: SSHTransport) -> None:
    fwd = await host_a.forward_local(_free_port())
    port = fwd.local_port
    assert _listening("127.0.0.1", port)
    await host_a.close()
    assert fwd.closed
    assert _bindable(port)
    await fwd.close()  # after the connection went, closing is still fine


async def test_busy_local_port_is_a_transport_error(host_a: SSHTransport) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = int(taken.getsockname()[1])
        said = re.escape(f"host a: cannot listen on 127.0.0.1:{busy}")
        with pytest.raises(TransportError, match=said):
            await host_a.forward_local(_free_port(), local_port=busy)


async def test_run_with_empty_input_ends_the_input(host_a: SSHTransport) -> None:
    """Empty ``input`` is an empty standard input, ended: a command reading it finishes (a
    file written from it is empty) rather than waiting for input that never comes."""
    path = f"/tmp/gpuconsole-empty-input-{secrets.token_hex(4)}"
    try:
        res = await asyncio.wait_for(
            host_a.run(["sh", "-c", 'cat > "$1"; wc -c < "$1"', "sh", path], input=b""), 30
        )
        assert (res.returncode, res.stdout.strip()) == (0, "0")
        res = await host_a.run(["cat"], input=b"a\x00b\n")
        assert res.stdout == "a\x00b\n"
    finally:
        await host_a.run(["rm", "-f", "--", path])
