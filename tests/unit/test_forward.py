"""``LocalTransport.forward_local`` (no tunnel: the port itself) and the ``Forward`` handle.

The SSH side is tested against the real test hosts in tests/integration/test_forward.py.
"""

from __future__ import annotations

import asyncio
import re
import socket

import pytest

from remote.errors import TransportError
from remote.transport import Forward, LocalTransport


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_local_forward_is_the_port_itself_and_reaches_a_listener() -> None:
    accepted: list[bool] = []

    def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(True)
        writer.close()

    server = await asyncio.start_server(on_client, "127.0.0.1", 0)
    port = int(server.sockets[0].getsockname()[1])
    try:
        async with await LocalTransport().forward_local(port, local_port=12345) as fwd:
            assert (fwd.local_host, fwd.local_port) == ("127.0.0.1", port)
            await fwd.check()
            for _ in range(50):
                if accepted:
                    break
                await asyncio.sleep(0.02)
            assert accepted == [True]
            assert fwd.error is None
        assert fwd.closed
        await fwd.close()  # twice is fine
    finally:
        server.close()
        await server.wait_closed()


async def test_local_forward_to_a_port_nobody_listens_on() -> None:
    dead = _free_port()
    fwd = await LocalTransport("here").forward_local(dead)
    with pytest.raises(TransportError) as ei:
        await fwd.check()
    assert ei.value.host == "here"
    assert f"127.0.0.1:{dead}" in str(ei.value)
    assert ei.value.hint is not None and f"127.0.0.1:{dead}" in ei.value.hint
    assert fwd.error is ei.value


async def test_check_after_close_says_closed_without_connecting() -> None:
    calls: list[str] = []

    async def fake_connector() -> None:
        calls.append("connect")

    async def fake_closer() -> None:
        calls.append("close")

    fwd = Forward(
        "h", "127.0.0.1", 4000, "127.0.0.1", 8888, closer=fake_closer, connector=fake_connector
    )
    await fwd.check()
    await fwd.close()
    await fwd.close()
    closed = re.escape("host h: the forward to 127.0.0.1:8888 is closed")
    with pytest.raises(TransportError, match=closed):
        await fwd.check()
    assert calls == ["connect", "close"]


def test_forward_reads_closed_when_its_connection_ends() -> None:
    alive = [True]
    fwd = Forward("h", "127.0.0.1", 4000, "127.0.0.1", 8888, alive=lambda: alive[0])
    assert not fwd.closed
    alive[0] = False
    assert fwd.closed
    assert "closed" in repr(fwd)
