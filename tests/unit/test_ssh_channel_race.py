"""A connection that closes as a command's session is opened is a lost connection, not a
traceback: asyncssh raises ``ChannelOpenError("SSH connection closed")`` from the channel
open (seen in `watch` when a host's sshd stopped while a job of it was being reconciled).

The race cannot be timed against a real sshd, so a stand-in connection (named fake) raises
what asyncssh raised there; everything else is the real SSHTransport."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncssh
import pytest

from remote import ssh
from remote.errors import ConnectionLost


class FakeClosingConnection:
    """Answers every channel open as asyncssh does once the connection has closed."""

    async def run(self, *_: Any, **__: Any) -> None:
        raise asyncssh.ChannelOpenError(asyncssh.OPEN_CONNECT_FAILED, "SSH connection closed")

    async def start_sftp_client(self) -> None:
        raise asyncssh.ChannelOpenError(asyncssh.OPEN_CONNECT_FAILED, "SSH connection closed")


@pytest.fixture
def transport(monkeypatch: pytest.MonkeyPatch) -> ssh.SSHTransport:
    t = ssh.SSHTransport("b", ssh.SSHTarget("127.0.0.1", port=9, connect_timeout=2))

    async def connection() -> Any:
        return FakeClosingConnection()

    monkeypatch.setattr(t, "_connection", connection)
    return t


def test_a_command_on_a_closing_connection_is_a_lost_connection(
    transport: ssh.SSHTransport,
) -> None:
    with pytest.raises(ConnectionLost) as e:
        asyncio.run(transport.run(["true"]))
    assert e.value.message == "host b: connection lost while running `true`"


def test_sftp_on_a_closing_connection_is_a_lost_connection(transport: ssh.SSHTransport) -> None:
    with pytest.raises(ConnectionLost) as e:
        asyncio.run(transport.home())
    assert "cannot start SFTP: SSH connection closed" in e.value.message
