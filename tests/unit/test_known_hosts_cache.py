""":func:`remote.ssh.known_hosts_of`: a known_hosts file is parsed once per change, not once
per connection of a fleet listing."""

from __future__ import annotations

import os
from pathlib import Path

import asyncssh
import pytest

from remote import ssh


def key_line(host: str) -> str:
    key = asyncssh.generate_private_key("ssh-ed25519")
    return f"{host} {key.export_public_key().decode().strip()}\n"


def test_parsed_once_until_the_file_changes(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    kh = tmp_path / "known_hosts"
    kh.write_text(key_line("gpu1.example.org") + key_line("[10.0.0.12]:2222"))
    parsed: list[str] = []
    real = asyncssh.read_known_hosts

    def counting(path: str) -> asyncssh.SSHKnownHosts:
        parsed.append(path)
        return real(path)

    monkeypatch.setattr(asyncssh, "read_known_hosts", counting)
    first = ssh.known_hosts_of(str(kh))
    assert isinstance(first, asyncssh.SSHKnownHosts)
    for _ in range(100):
        assert ssh.known_hosts_of(str(kh)) is first
    assert parsed == [str(kh)]
    assert any(first.match("10.0.0.12", "", 2222)) and not any(first.match("gpu2", "", 22))
    # a key appended (accept_new_host_keys, or by hand) is seen by the next connection
    with kh.open("a") as f:
        f.write(key_line("gpu2"))
    again = ssh.known_hosts_of(str(kh))
    assert again is not first and len(parsed) == 2 and any(again.match("gpu2", "", 22))


def test_missing_file_trusts_nothing_and_bad_file_raises(tmp_path: Path) -> None:
    absent = ssh.known_hosts_of(str(tmp_path / "absent"))
    # a list that trusts nothing, not asyncssh's "not given" (which reads ~/.ssh/known_hosts)
    assert isinstance(absent, asyncssh.SSHKnownHosts)
    assert not any(absent.match("gpu1.example.org", "10.0.0.1", 22))
    bad = tmp_path / "bad"
    bad.write_bytes(b"\x00\x01binary\n")  # one field: not an entry
    with pytest.raises(ValueError):
        ssh.known_hosts_of(str(bad))
    os.chmod(bad, 0o000)
    if os.geteuid() != 0:  # root reads it anyway
        with pytest.raises(OSError):
            ssh.known_hosts_of(str(bad))


async def test_default_known_hosts_unusable_names_the_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The default ``~/.ssh/known_hosts`` is not checked at profile load (a profile's own
    ``known_hosts:`` is); when it cannot be used, the connect error names it, before any
    packet is sent (nothing listens on the port below)."""
    from remote.errors import TransportError

    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".ssh").mkdir()
    kh = tmp_path / ".ssh" / "known_hosts"
    kh.mkdir()  # unreadable as a file even for root: EISDIR
    host = ssh.SSHTransport("gpu1", ssh.SSHTarget("127.0.0.1", port=9, connect_timeout=2))
    with pytest.raises(TransportError) as raised:
        await host.connect()
    assert str(raised.value.detail) == f"cannot read the known_hosts file {kh}: Is a directory"
    assert "known_hosts" in (raised.value.hint or "")
    kh.rmdir()
    kh.write_bytes(b"\x00\x01binary\n")
    with pytest.raises(TransportError) as raised:
        await host.connect()
    assert raised.value.detail.startswith(f"{kh} is not a known_hosts file: ")
